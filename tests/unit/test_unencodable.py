"""One value that cannot be encoded (a path holding a surrogate-escaped name: bytes that are not
UTF-8) is dropped and counted by every encoder; the message, the reply and the stream carry the
others. Names from the kernel are escaped before they reach a path (docs/paths.md), so this is
the guard behind that guard."""

from __future__ import annotations

from array import array

import pytest
from pygnmi.spec.v080 import gnmi_pb2

from agent.control.protocol import pack, unpack_body
from agent.counters import (
    OPENCONFIG,
    UNENCODABLE,
    Batch,
    CounterSpec,
    CounterTable,
    StateUpdate,
    encodable_indices,
)
from agent.gnmi import encode
from agent.gnmi.get import Counters, Renderer
from agent.sources.base import interface

BAD, GOOD = "swp\udcff", "swp1"


def _table() -> CounterTable:
    return CounterTable("netdev", [CounterSpec(interface(p, OPENCONFIG, "state/counters"), leaf, port=p)
                                   for p in (GOOD, BAD) for leaf in ("in-octets", "in-pkts")])


def _names(msgs: list[bytes]) -> list[tuple[str, str]]:
    """(interface name, leaf) of every update and delete in serialized SubscribeResponses."""
    out = []
    for m in msgs:
        n = gnmi_pb2.SubscribeResponse.FromString(m).update
        for paths in ([u.path for u in n.update], list(n.delete)):
            for p in paths:
                elems = list(n.prefix.elem) + list(p.elem)
                name = next((e.key["name"] for e in elems if e.name == "interface"), "")
                out.append((name, elems[-1].name))
    return out


def _dropped(before: int) -> int:
    return UNENCODABLE.count - before


@pytest.mark.parametrize("per_tick", [False, True])
def test_a_batch_keeps_its_encodable_values(per_tick):
    table = _table()
    batch = Batch("netdev", 1, table, array("I", [0, 1, 2, 3]), array("Q", [1, 2, 3, 4]),
                  array("q", [1, 1, 1, 1]), bytes(4))
    before = UNENCODABLE.count
    msgs = encode.encode_batch(batch, "t", per_tick=per_tick)
    assert sorted(_names(msgs)) == [(GOOD, "in-octets"), (GOOD, "in-pkts")]
    assert _dropped(before) == 2
    # a batch of the bad port alone is no message at all, not an error
    only_bad = Batch("netdev", 1, table, array("I", [2]), array("Q", [1, 2, 3, 4]), array("q", [1]), bytes(1))
    assert encode.encode_batch(only_bad, "t", per_tick=per_tick) == []


def test_states_and_deletes_keep_their_encodable_values():
    ups = [StateUpdate(1, interface(p, OPENCONFIG, "state"), "oper-status", "UP", "netdev") for p in (BAD, GOOD)]
    ups.append(StateUpdate(1, interface(GOOD, OPENCONFIG, "state"), "description", "x\udcfe", "netdev"))
    before = UNENCODABLE.count
    assert _names(encode.encode_states(ups, "t")) == [(GOOD, "oper-status")]
    assert _dropped(before) == 2
    gone = [interface(p, OPENCONFIG, "state") for p in (BAD, GOOD)]
    msgs = encode.encode_deletes(1, gone, "t")
    assert len(msgs) == 1
    (delete,) = gnmi_pb2.SubscribeResponse.FromString(msgs[0]).update.delete
    assert delete.elem[1].key["name"] == GOOD
    assert _dropped(before) == 3


@pytest.mark.parametrize("encoding", [gnmi_pb2.PROTO, gnmi_pb2.JSON_IETF, gnmi_pb2.JSON])
def test_a_get_reply_keeps_its_encodable_values(encoding):
    table = _table()
    renderer = Renderer("t", encoding)
    msgs = renderer.snapshot([Counters(1, table, [0, 1, 2, 3], array("Q", [1, 2, 3, 4]))],
                             [StateUpdate(1, interface(BAD, OPENCONFIG, "state"), "oper-status", "UP")])
    assert sorted(_names(msgs)) == [(GOOD, "in-octets"), (GOOD, "in-pkts")]


def test_otlp_and_remote_write_layouts_leave_the_value_out():
    from agent.exporters import otlp, remote_write

    otlp._load()
    remote_write._load()
    table = _table()
    before = UNENCODABLE.count
    layout = otlp._Layout([table], "cumulus", otlp.resource_pb2.Resource())
    for request in layout.requests:
        request.SerializeToString()  # the whole request encodes
    assert layout.count == 2 and sorted(i for i, *_ in layout.points[0]) == [0, 1]
    rw = remote_write._Layout([table], "t", {})
    assert len(rw.heads) == 2 and sorted(i for i, _j in rw.slots[0]) == [0, 1]
    assert _dropped(before) == 4
    assert encodable_indices(table, table.visible) == [0, 1]


def test_a_control_reply_with_a_name_that_is_not_text_is_sent_escaped():
    reply = {"ok": True, "result": {"ports": {BAD: {"rx_octets": 1}, GOOD: {"rx_octets": 2}}, "n": [BAD]}}
    got = unpack_body(pack(reply)[4:])
    assert got == {"ok": True, "result": {"ports": {"swp%FF": {"rx_octets": 1}, GOOD: {"rx_octets": 2}},
                                          "n": ["swp%FF"]}}


def test_the_per_tick_packer_keeps_a_pass_around_a_value_it_cannot_encode():
    """One state or counter that is not text costs that value, never the destination's pass."""
    table = _table()
    packer = encode.Packer("t")
    before = UNENCODABLE.count
    packer.add_batch(Batch("netdev", 1, table, array("I", [0, 1, 2, 3]), array("Q", [1, 2, 3, 4]),
                           array("q", [1, 1, 1, 1]), bytes(4)))
    packer.add_states([StateUpdate(1, interface(p, OPENCONFIG, "state"), "oper-status", "UP", "netdev")
                       for p in (BAD, GOOD)])
    msgs = [p.message for p in packer.take()]
    assert sorted(_names(msgs)) == [(GOOD, "in-octets"), (GOOD, "in-pkts"), (GOOD, "oper-status")]
    assert _dropped(before) == 3
