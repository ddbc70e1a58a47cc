"""Encoder: C bytes and the gnmi_pb2 fallback decode to the same messages, which equal an
independent reference built from the CounterSpecs; plus the gNMI rules (prefix target and
origin, relative unique paths, ns timestamps, typed values, deletes, sync)."""

from __future__ import annotations

import random
from array import array

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pygnmi.spec.v080 import gnmi_pb2

from agent import _fallback, _swtel
from agent.counters import GAUGE, SWTEL_ORIGIN, Container, CounterSpec, CounterTable, StateUpdate
from agent.gnmi import encode, paths
from tests.gnmi_helpers import make_batch, make_table

U64 = 2**64 - 1
BACKENDS = {"C": _swtel, "python": _fallback}

# ---------------------------------------------------------------- strategies

_name = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789-_", min_size=1, max_size=12)
_keyval = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789-_./: ", min_size=0, max_size=10)


@st.composite
def _elem(draw) -> str:
    keys = draw(st.dictionaries(_name, _keyval, max_size=2))
    return draw(_name) + "".join(f"[{k}={v}]" for k, v in sorted(keys.items()))


_path = st.lists(_elem(), min_size=1, max_size=4).map(lambda es: "/" + "/".join(es))
_leaf = st.lists(_elem(), min_size=1, max_size=2).map("/".join)
_container = st.builds(Container, st.sampled_from(["openconfig", SWTEL_ORIGIN, "", "x-vendor"]), _path)


@st.composite
def tables(draw):
    containers = draw(st.lists(_container, min_size=1, max_size=6, unique=True))
    n = draw(st.integers(1, 40))
    specs = []
    seen = set()
    for _ in range(n):
        c = draw(st.sampled_from(containers))
        leaf = draw(_leaf)
        if (c, leaf) in seen:  # a table never holds the same path twice
            continue
        seen.add((c, leaf))
        specs.append(CounterSpec(c, leaf, kind=draw(st.sampled_from([0, GAUGE]))))
    table = CounterTable("t", specs)
    values = draw(st.lists(st.one_of(st.integers(0, U64), st.sampled_from([0, 1, 127, 128, U64])),
                           min_size=len(specs), max_size=len(specs)))
    indices = draw(st.lists(st.integers(0, len(specs) - 1), unique=True, max_size=len(specs)))
    ts = draw(st.one_of(st.integers(0, 2**63 - 1), st.just(1_700_000_000_123_456_789)))
    target = draw(st.sampled_from(["leaf01", "", "spine-7.example"]))
    max_updates = draw(st.integers(1, 50))
    return table, values, indices, ts, target, max_updates


def reference(table, values, indices, ts, target, max_updates) -> list[gnmi_pb2.SubscribeResponse]:
    """Built from the specs' strings with gnmi_pb2 only: no cached bytes involved."""
    order: dict[Container, list[int]] = {}
    for i in indices:
        order.setdefault(table.specs[i].container, []).append(i)
    out = []
    for c, members in order.items():
        for s in range(0, len(members), max_updates):
            n = gnmi_pb2.Notification(timestamp=ts, prefix=paths.to_proto(c.path, c.origin, target))
            for i in members[s : s + max_updates]:
                n.update.add(path=paths.to_proto(table.specs[i].leaf),
                             val=gnmi_pb2.TypedValue(uint_val=values[i]))
            out.append(gnmi_pb2.SubscribeResponse(update=n))
    return out


def _decode(blobs: list[bytes]) -> list[gnmi_pb2.SubscribeResponse]:
    return [gnmi_pb2.SubscribeResponse.FromString(b) for b in blobs]


@settings(max_examples=300, deadline=None)
@given(tables())
def test_c_and_python_decode_to_the_reference(case):
    table, values, indices, ts, target, max_updates = case
    codec = encode.codec(table, target)
    want = reference(*case)
    for name, backend in BACKENDS.items():
        got = backend.encode_updates(ts, indices, array("Q", values), codec.containers,
                                     codec.prefixes, codec.paths, max_updates)
        assert _decode(got) == want, name


def test_leaf_with_several_elements_and_keys():
    c = Container(SWTEL_ORIGIN, "/interfaces/interface[name=swp1]/pfc")
    table = CounterTable("t", [CounterSpec(c, "priority[id=3]/in-pause-pkts")])
    batch = make_batch(table, [U64], ts_ns=2**62)
    (msg,) = _decode(encode.encode_batch(batch, "leaf01"))
    n = msg.update
    assert n.prefix.origin == SWTEL_ORIGIN and n.prefix.target == "leaf01"
    assert paths.from_proto(n.prefix) == "/interfaces/interface[name=swp1]/pfc"
    (u,) = n.update
    assert [e.name for e in u.path.elem] == ["priority", "in-pause-pkts"]
    assert dict(u.path.elem[0].key) == {"id": "3"}
    assert u.val.uint_val == U64 and n.timestamp == 2**62


def test_batch_rules_one_notification_per_container():
    table = make_table([f"swp{i}" for i in range(1, 5)])
    values = list(range(100, 100 + len(table)))
    # changed counters interleave containers: swp1, swp3, swp1 again, swp4
    indices = [0, 12, 3, 17, 19]
    batch = make_batch(table, values, ts_ns=1_700_000_000_000_000_001, indices=indices)
    msgs = _decode(encode.encode_batch(batch, "leaf01"))
    assert [paths.from_proto(m.update.prefix).split("[")[1][:9] for m in msgs] == [
        "name=swp1", "name=swp3", "name=swp4"]
    for m in msgs:
        n = m.update
        assert n.timestamp == 1_700_000_000_000_000_001
        assert (n.prefix.origin, n.prefix.target) == ("openconfig", "leaf01")
        leaves = [paths.from_proto(u.path) for u in n.update]
        assert len(leaves) == len(set(leaves))
        for u in n.update:
            assert u.path.target == "" and u.path.origin == ""
            absolute = paths.join(n.prefix, u.path)
            i = table.paths.index(absolute)
            assert u.val.uint_val == values[i]


def test_codec_cached_per_table_and_target():
    table = make_table(["swp1"])
    c1 = encode.codec(table, "a")
    assert encode.codec(table, "a") is c1
    assert encode.codec(table, "b") is not c1
    assert encode.codec(make_table(["swp1"]), "a") is not c1  # a rebuilt table starts fresh


def test_large_container_is_split_not_merged():
    table = make_table(["swp1"], leaves=tuple(f"c{i}" for i in range(25)))
    msgs = _decode(encode.encode_batch(make_batch(table, list(range(25)), 5), "t", max_updates=10))
    assert [len(m.update.update) for m in msgs] == [10, 10, 5]
    assert len({m.update.prefix.SerializeToString() for m in msgs}) == 1


@pytest.mark.parametrize("backend", list(BACKENDS))
def test_indices_as_the_engines_array_encode_as_a_list_does(backend):
    """The engine hands a batch's indices over as array('I'): C reads them in place; the bytes
    are those of the same indices as a list (and of any other sequence of ints)."""
    b = BACKENDS[backend]
    rng = random.Random(3)
    n = 40
    values = array("Q", (rng.randrange(1 << 64) for _ in range(n)))
    containers = array("I", (i % 3 for i in range(n)))
    prefixes = [gnmi_pb2.Path(elem=[gnmi_pb2.PathElem(name=f"c{i}")]).SerializeToString() for i in range(3)]
    paths = [gnmi_pb2.Path(elem=[gnmi_pb2.PathElem(name=f"leaf{i}")]).SerializeToString() for i in range(n)]
    idx = sorted(rng.sample(range(n), 25))
    want = b.encode_updates(7, idx, values, containers, prefixes, paths, 4)
    assert b.encode_updates(7, array("I", idx), values, containers, prefixes, paths, 4) == want
    assert b.encode_updates(7, tuple(idx), values, containers, prefixes, paths, 4) == want
    assert b.encode_updates(7, array("H", idx), values, containers, prefixes, paths, 4) == want  # (read as items)
    with pytest.raises(IndexError):
        b.encode_updates(7, array("I", [n]), values, containers, prefixes, paths, 4)


@pytest.mark.parametrize("backend", list(BACKENDS))
def test_bad_inputs_raise(backend):
    b = BACKENDS[backend]
    with pytest.raises(IndexError):
        b.encode_updates(1, [3], array("Q", [1]), array("I", [0]), [b""], [b""], 10)
    with pytest.raises(IndexError):
        b.encode_updates(1, [0], array("Q", [1]), array("I", [1]), [b""], [b""], 10)
    with pytest.raises(ValueError):
        b.encode_updates(1, [0], array("Q", [1]), array("I", [0]), [b""], [b""], 0)
    assert b.encode_updates(1, [], array("Q", [1]), array("I", [0]), [b""], [b""], 10) == []


def test_states_are_typed():
    c = Container(SWTEL_ORIGIN, "/interfaces/interface[name=swp1]/state")
    ups = [
        StateUpdate(7, c, "oper-status", "DOWN"),
        StateUpdate(7, c, "speed", 100_000),
        StateUpdate(7, c, "offset", -3),
        StateUpdate(7, c, "util", 0.25),
        StateUpdate(7, c, "enabled", True),
        StateUpdate(7, c, "event", {"kind": "flap", "count": 2}),
        StateUpdate(7, c, "gone", None),
        StateUpdate(8, c, "oper-status", "UP"),
    ]
    msgs = _decode(encode.encode_states(ups, "leaf01"))
    assert len(msgs) == 2
    n = msgs[0].update
    assert n.prefix.target == "leaf01" and n.timestamp == 7
    got = {paths.from_proto(u.path): u.val for u in n.update}
    assert got["/oper-status"].string_val == "DOWN"
    assert got["/speed"].uint_val == 100_000
    assert got["/offset"].int_val == -3
    assert got["/util"].double_val == 0.25
    assert got["/enabled"].bool_val is True
    assert encode.python_value(got["/event"]) == {"kind": "flap", "count": 2}
    assert [paths.from_proto(d) for d in n.delete] == ["/gone"]
    assert msgs[1].update.update[0].val.string_val == "UP"


def test_deletes_and_sync():
    gone = [Container("openconfig", "/interfaces/interface[name=swp9]/state/counters"),
            Container(SWTEL_ORIGIN, "/interfaces/interface[name=swp9]/pfc"),
            Container("openconfig", "/interfaces/interface[name=swp9]/ethernet/state/counters")]
    msgs = _decode(encode.encode_deletes(99, gone, "leaf01"))
    assert len(msgs) == 2
    oc = msgs[0].update
    assert (oc.prefix.origin, oc.prefix.target, len(oc.prefix.elem)) == ("openconfig", "leaf01", 0)
    assert [paths.from_proto(d) for d in oc.delete] == [gone[0].path, gone[2].path]
    assert msgs[1].update.prefix.origin == SWTEL_ORIGIN
    assert gnmi_pb2.SubscribeResponse.FromString(encode.encode_sync()).sync_response is True


def test_per_tick_mode_carries_the_same_values_in_one_notification_per_origin():
    table = make_table([f"swp{i}" for i in range(1, 5)])
    ext = Container(SWTEL_ORIGIN, "/interfaces/interface[name=swp1]/pfc")
    table = CounterTable("t", table.specs + [CounterSpec(ext, "priority[id=3]/in-pause-pkts")])
    values = list(range(500, 500 + len(table)))
    indices = [0, 12, 3, 17, len(table) - 1]
    batch = make_batch(table, values, ts_ns=7, indices=indices)

    def absolute(blobs):
        out = {}
        for m in _decode(blobs):
            n = m.update
            assert n.timestamp == 7 and n.prefix.target == "leaf01"
            for u in n.update:
                out[(n.prefix.origin, paths.join(n.prefix, u.path))] = u.val.uint_val
        return out

    per_container = encode.encode_batch(batch, "leaf01")
    per_tick = encode.encode_batch(batch, "leaf01", per_tick=True)
    assert absolute(per_tick) == absolute(per_container)
    assert len(per_container) == 4 and len(per_tick) == 2  # openconfig + swtel
    msgs = _decode(per_tick)
    assert [m.update.prefix.origin for m in msgs] == ["openconfig", SWTEL_ORIGIN]
    assert all(paths.from_proto(m.update.prefix) == "/" for m in msgs)
    assert encode.codec(table, "leaf01", per_tick=True) is not encode.codec(table, "leaf01")
