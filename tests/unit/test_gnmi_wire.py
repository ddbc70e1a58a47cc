"""agent.gnmi.wire writes what gnmi_pb2 would: each function's bytes decoded by gnmi_pb2 equal
the message built with gnmi_pb2 (decoded, not byte for byte: protobuf may order a map's entries
and leaves a zero timestamp out)."""

from __future__ import annotations

import math
import subprocess
import sys

import pytest
from pygnmi.spec.v080 import gnmi_pb2

from agent.gnmi import paths, wire
from agent.pathgrammar import split

pytestmark = pytest.mark.libs  # against the protobuf installed (Debian's 3.21 in its pass), not the backend

PATHS = ["/", "/interfaces/interface[name=swp1]/state/counters/in-octets",
         "/qos/interfaces/interface[name=swp2]/pool[index=0][type=ingress]/max-level",
         "/a/b[k=with \\] and / inside]/c", "/système/état[nom=ünï]", "/x[k=]"]


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("origin,target", [("", ""), ("openconfig", ""), ("swtel", "leaf-1"), ("", "t")])
def test_a_path_decodes_to_the_message_gnmi_pb2_builds(path, origin, target):
    want = gnmi_pb2.Path(origin=origin, target=target,
                         elem=[gnmi_pb2.PathElem(name=n, key=k) for n, k in split(path)])
    got = gnmi_pb2.Path.FromString(wire.path(split(path), origin, target))
    assert got == want
    assert paths.encoded(path, origin, target) == wire.path(split(path), origin, target)


def test_elem_only_paths_joined_are_one_path():
    head, tail = split("/interfaces/interface[name=swp1]/phy"), split("/state/counters[a=b]")
    assert gnmi_pb2.Path.FromString(wire.path(head) + wire.path(tail)) == gnmi_pb2.Path(
        elem=[gnmi_pb2.PathElem(name=n, key=k) for n, k in head + tail])


VALUES = [0, 1, 127, 128, 2**32, 2**63, 2**64 - 1, -1, -(2**63), True, False, 0.0, -2.5, 1e-300, math.inf,
          "", "up", "ünïcode", b"", b"\x00\xff", {"b": 1, "a": [1, 2]}, [3, "x"], None]


@pytest.mark.parametrize("value", VALUES, ids=repr)
def test_a_typed_value_decodes_to_the_message_gnmi_pb2_builds(value):
    if isinstance(value, bool):
        want = gnmi_pb2.TypedValue(bool_val=value)
    elif isinstance(value, int):
        want = gnmi_pb2.TypedValue(uint_val=value) if value >= 0 else gnmi_pb2.TypedValue(int_val=value)
    elif isinstance(value, float):
        want = gnmi_pb2.TypedValue(double_val=value)
    elif isinstance(value, str):
        want = gnmi_pb2.TypedValue(string_val=value)
    elif isinstance(value, bytes):
        want = gnmi_pb2.TypedValue(bytes_val=value)
    else:
        import json

        want = gnmi_pb2.TypedValue(json_ietf_val=json.dumps(value, sort_keys=True).encode())
    got = gnmi_pb2.TypedValue.FromString(wire.typed_value(value))
    assert got == want and got.WhichOneof("value") == want.WhichOneof("value")


@pytest.mark.parametrize("value", [2**64, -(2**63) - 1])
def test_an_integer_outside_int64_and_uint64_is_refused_as_gnmi_pb2_refuses_it(value):
    with pytest.raises(ValueError):
        wire.typed_value(value)
    with pytest.raises(ValueError):
        gnmi_pb2.TypedValue(int_val=value)


@pytest.mark.parametrize("ts", [0, 1, 1_796_635_238_840_042_233, -5])
def test_a_response_with_updates_and_deletes_decodes_as_built_with_gnmi_pb2(ts):
    prefix = wire.path(split("/interfaces/interface[name=swp1]"), "openconfig", "leaf-1")
    raw = wire.response(wire.notification_head(ts, prefix)
                        + wire.update(wire.path(split("/state/oper-status")), wire.typed_value("UP"))
                        + wire.update(wire.path(split("/state/counters/in-octets")), wire.typed_value(7))
                        + wire.delete(wire.path(split("/state/gone"))))
    notif = gnmi_pb2.Notification(timestamp=ts, prefix=paths.to_proto("/interfaces/interface[name=swp1]",
                                                                        "openconfig", "leaf-1"))
    notif.update.add(path=paths.to_proto("/state/oper-status"), val=gnmi_pb2.TypedValue(string_val="UP"))
    notif.update.add(path=paths.to_proto("/state/counters/in-octets"), val=gnmi_pb2.TypedValue(uint_val=7))
    notif.delete.append(paths.to_proto("/state/gone"))
    assert gnmi_pb2.SubscribeResponse.FromString(raw) == gnmi_pb2.SubscribeResponse(update=notif)
    assert gnmi_pb2.SubscribeResponse.FromString(wire.SYNC) == gnmi_pb2.SubscribeResponse(sync_response=True)


def test_a_response_of_pieces_is_the_response_of_them_joined():
    """Packer writes a message from its pieces (head, counter runs, a buffer of states);
    the length prefix is the pieces' total, a varint of two bytes or more past 127."""
    head = wire.notification_head(9, wire.path((), "openconfig", "t"))
    big = wire.update(wire.path(split("/a/b")), wire.typed_value(1)) * 20
    for parts in ([head], [head, big], [head, big, bytearray(big)], [head, b"", bytearray()]):
        joined = b"".join(parts)
        assert wire.response_of(parts, len(joined)) == wire.response(joined)


def test_encoding_what_an_agent_sends_never_imports_protobuf():
    """The point of the module (issue 35): a per-tick pass, a per-container state message, a
    delete and a sync are written without loading protobuf (~2.5 MiB a dial-out agent keeps)."""
    code = """
import sys
from agent.counters import Container, StateUpdate
from agent.gnmi import encode
c = Container("openconfig", "/interfaces/interface[name=swp1]/state")
packer = encode.Packer("t")
packer.add_states([StateUpdate(5, c, "oper-status", "UP", "x"), StateUpdate(5, c, "mtu", 9216, "x")])
assert packer.messages()
assert encode.encode_states([StateUpdate(5, c, "gone", None, "x")], "t")
assert encode.encode_deletes(5, [c], "t") and encode.encode_sync()
print(sorted(m for m in sys.modules if m.startswith(("google", "pygnmi"))))
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]", out
