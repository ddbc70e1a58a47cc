"""Per-tick packing (issue 35): a pass's counters and states, whatever produced them, in one
Notification per origin, and the snapshot packed the same way; a collector receives exactly
the paths and values the old shape (a message per batch, per container of states) gave.

The run compared is recorded from the real engine on the simulated spine (68 ports, every
detector on): the listener calls of each pass, replayed through both encoders (C and the
fallback each)."""

from __future__ import annotations

import random
import threading
from array import array
from typing import Any

import pytest
from pygnmi.spec.v080 import gnmi_pb2

import agent.plugins  # noqa: F401 - the config sections
from agent import _backend, _fallback, _swtel, config
from agent.config import HostPort
from agent.counters import (
    OPENCONFIG,
    SWTEL_ORIGIN,
    Container,
    CounterSpec,
    CounterTable,
    StateUpdate,
)
from agent.engine import Engine
from agent.exporters.dialout import DialoutConfig, DialoutExporter
from agent.gnmi import encode, paths
from agent.insights import InsightsPipeline
from agent.listener import Listener
from agent.store import Store
from agent.tools.collect import Collector
from tests.gnmi_helpers import free_port, make_batch
from tests.helpers import sim_table, wait_until

TARGET = "spine01"
BACKENDS = {"C": _swtel, "python": _fallback}
SPINE = ("role=spine seed=3 scenario=fec-degrade@0s-60s:swp11s1,symbol-errors@1s-60s:swp11s2,"
         "link-flap@2s-60s:swp7")


@pytest.fixture(params=sorted(BACKENDS))
def backend(request, monkeypatch):
    """Both encoders, whichever backend the process loaded."""
    monkeypatch.setattr(_backend, "encoder", BACKENDS[request.param])
    return request.param


# ---------------------------------------------------------------- decoding


def _apply(msgs: list[bytes], latest: dict[str, Any], seen: set[tuple[str, Any]]) -> None:
    """What a collector joining prefix and path makes of ``msgs``: the latest value of every
    absolute path (a delete removes the path and everything below), and every (path, value)."""
    for blob in msgs:
        n = gnmi_pb2.SubscribeResponse.FromString(blob).update
        origin = n.prefix.origin
        assert n.prefix.target == TARGET
        for d in n.delete:
            gone = f"{origin}:{paths.join(n.prefix, d)}"
            for p in [p for p in latest if p == gone or p.startswith(gone + "/") or p.startswith(gone + "[")]:
                del latest[p]
        for u in n.update:
            p = f"{origin}:{paths.join(n.prefix, u.path)}"
            v = encode.python_value(u.val)
            latest[p] = v
            seen.add((p, v))


def _old(calls: list[tuple]) -> tuple[list[list[bytes]], int]:
    """The shape before packing: a message (per origin) per batch, per (time, container) of
    states, per origin of deletes. Returns each pass's messages."""
    passes, msgs = [], []
    for call in calls:
        if call[0] == "batch":
            msgs += encode.encode_batch(call[1], TARGET, per_tick=True)
        elif call[0] == "state":
            msgs += encode.encode_states(call[1], TARGET)
        elif call[0] == "delete":
            msgs += encode.encode_deletes(call[1], call[2], TARGET)
        elif call[0] == "close":
            passes.append(msgs)
            msgs = []
    return passes, sum(len(p) for p in passes)


def _new(calls: list[tuple]) -> list[list[bytes]]:
    """The packed shape, as the dial-out exporter builds it: a Packer per pass, flushed
    before a delete."""
    passes, msgs = [], []
    packer = encode.Packer(TARGET)
    for call in calls:
        if call[0] == "batch":
            packer.add_batch(call[1])
        elif call[0] == "state":
            packer.add_states(call[1])
        elif call[0] == "delete":
            msgs += packer.messages()
            msgs += encode.encode_deletes(call[1], call[2], TARGET)
        elif call[0] == "close":
            msgs += packer.messages()
            passes.append(msgs)
            msgs = []
    return passes


# ---------------------------------------------------------------- a recorded spine run


class _Recorder(Listener):
    """Every listener call of the engine, in order (the batches' value arrays are the
    listeners' own copies: safe to keep)."""

    name = "recorder"

    def __init__(self) -> None:
        self.calls: list[tuple] = []
        self.passes = 0
        self.lock = threading.Lock()

    def start(self, store) -> None:
        pass

    def open_pass(self) -> None:
        self.calls.append(("open",))

    def close_pass(self) -> None:
        self.calls.append(("close",))
        with self.lock:
            self.passes += 1

    def on_batch(self, batch) -> None:
        self.calls.append(("batch", batch))

    def on_state(self, updates) -> None:
        self.calls.append(("state", list(updates)))

    def on_delete(self, ts_ns, containers) -> None:
        self.calls.append(("delete", ts_ns, list(containers)))

    def stop(self, timeout) -> None:
        pass

    def status(self) -> dict:
        return {}

    def gauges(self) -> int:
        return sum(1 for c in list(self.calls) if c[0] == "state"
                   for u in c[1] if u.leaf in ("predicted-flr", "max-bin"))


@pytest.fixture(scope="module")
def spine_run() -> tuple[list[tuple], Store]:
    """The simulated spine, every detector on, at 100 ms: the engine's listener calls until
    link_degrading published its gauges a few times and 40 passes went by."""
    cfg = config.parse(f"""
target: {TARGET}
interval: 100ms
sources:
  netdev: {{enabled: false}}
  ethtool: {{enabled: false}}
  system: {{interval: 1s}}
  asic: {{enabled: true, plugin: sim, config: '{SPINE}'}}
insights: {{link_degrading: {{window: 2s}}}}
""")
    rec = _Recorder()
    engine = Engine(cfg, [InsightsPipeline(cfg.insights), rec])
    engine.start()
    try:
        wait_until(lambda: rec.passes >= 40 and rec.gauges() >= 100, timeout=60,
                   what="40 passes and link_degrading's gauges")
    finally:
        engine.stop()
    calls = list(rec.calls)
    # whole passes only (the engine may stop within one)
    last = max(i for i, c in enumerate(calls) if c[0] == "close")
    return calls[: last + 1], engine.store


def test_a_recorded_spine_run_reaches_a_collector_with_the_same_paths_and_values(spine_run, backend):
    calls, _store = spine_run
    old_passes, old_count = _old(calls)
    new_passes = _new(calls)
    old_latest: dict[str, Any] = {}
    new_latest: dict[str, Any] = {}
    old_seen: set = set()
    new_seen: set = set()
    for msgs in old_passes:
        _apply(msgs, old_latest, old_seen)
    for msgs in new_passes:
        _apply(msgs, new_latest, new_seen)
    states = sum(len(c[1]) for c in calls if c[0] == "state")
    assert states > 200 and len(old_latest) > 10_000  # the run is the spine's, with states
    assert new_latest == old_latest
    assert new_seen == old_seen
    # and pass by pass: what a collector holds after each pass is the same
    old_latest, new_latest = {}, {}
    for old, new in zip(old_passes, new_passes, strict=True):
        _apply(old, old_latest, set())
        _apply(new, new_latest, set())
        assert new_latest == old_latest
    new_count = sum(len(p) for p in new_passes)
    assert new_count < old_count


def test_a_spine_pass_with_states_is_at_most_one_message_per_origin(spine_run, backend):
    """Each pass: one message per origin it touches (no split below the size limit at the
    spine's churn), at most 4 in all; the passes that carry link_degrading's gauges too."""
    calls, _store = spine_run
    new_passes = _new(calls)
    # the passes' contents: origins touched, and whether a detector's gauge was among them
    touched: list[set[str]] = []
    gauges: list[bool] = []
    origins: set[str] = set()
    has_gauge = False
    for call in calls:
        if call[0] == "batch":
            origins |= {s.container.origin for s in (call[1].table.specs[i] for i in call[1].indices)}
        elif call[0] == "state":
            origins |= {u.container.origin for u in call[1]}
            has_gauge = has_gauge or any(u.leaf == "predicted-flr" for u in call[1])
        elif call[0] == "delete":
            origins.add("delete")
        elif call[0] == "close":
            touched.append(origins)
            gauges.append(has_gauge)
            origins, has_gauge = set(), False
    assert any(gauges)
    sizes = [sum(len(m) for m in msgs) for msgs in new_passes]
    print("messages a pass:", [len(m) for m in new_passes], "bytes:", sizes)
    for msgs, origins, size in zip(new_passes, touched, sizes, strict=True):
        assert len(msgs) <= 4
        if "delete" not in origins and size < encode.MAX_MESSAGE_BYTES * 3 // 4:
            assert len(msgs) == len(origins)
        for m in msgs:
            assert len(m) <= encode.MAX_MESSAGE_BYTES + 64


def test_a_snapshot_of_the_spine_is_a_handful_of_messages(spine_run, backend):
    _calls, store = spine_run
    packer = encode.Packer(TARGET)
    old: list[bytes] = []
    values = 0
    for batch in store.snapshot_batches():
        packer.add_batch(batch)
        old += encode.encode_batch(batch, TARGET, per_tick=True)
        values += len(batch.indices)
    states = store.states()
    packer.add_states(states)
    old += encode.encode_states(states, TARGET)
    new = packer.messages()
    assert values + len(states) > 10_000
    assert len(new) <= 20
    a: dict[str, Any] = {}
    b: dict[str, Any] = {}
    _apply(old, a, set())
    _apply(new, b, set())
    assert a == b


# ---------------------------------------------------------------- the packer's rules


def _table(ports: int, leaves: int) -> CounterTable:
    specs = []
    for p in range(ports):
        for leaf in range(leaves):
            origin = OPENCONFIG if leaf % 3 else SWTEL_ORIGIN
            specs.append(CounterSpec(Container(origin, f"/interfaces/interface[name=swp{p}]/state/counters"),
                                     f"c{leaf}"))
    return CounterTable("asic", specs)


@pytest.mark.parametrize("n_thousand", [12, 40])
def test_a_snapshot_of_thousands_of_values_is_at_most_20_messages(backend, n_thousand):
    """12,000 values (the spine's) and 40,000, with states: split at the size limit only."""
    table = _table(n_thousand * 10, 100)
    rng = random.Random(n_thousand)
    values = [rng.randrange(2**40) for _ in table.specs]
    batch = make_batch(table, values, 1_700_000_000_000_000_000)
    states = [StateUpdate(1_700_000_000_000_000_000 + k, Container(SWTEL_ORIGIN, f"/x/port[name=swp{k}]/state"),
                          "predicted-flr", rng.random()) for k in range(500)]
    packer = encode.Packer(TARGET)
    packer.add_batch(batch)
    packer.add_states(states)
    msgs = packer.messages()
    assert len(msgs) <= 20
    assert all(len(m) <= encode.MAX_MESSAGE_BYTES + 64 for m in msgs)
    latest: dict[str, Any] = {}
    _apply(msgs, latest, set())
    assert len(latest) == len(table.specs) + len(states)
    old: dict[str, Any] = {}
    _apply(encode.encode_batch(batch, TARGET) + encode.encode_states(states, TARGET), old, set())
    assert latest == old


def test_split_messages_stay_under_the_limit_and_keep_every_value(backend):
    table = _table(50, 40)
    values = list(range(len(table.specs)))
    batch = make_batch(table, values, 5)
    packer = encode.Packer(TARGET, max_bytes=4096)
    packer.add_batch(batch)
    msgs = packer.messages()
    assert len(msgs) > 10
    for m in msgs:
        assert len(m) <= 4096 + 64
    latest: dict[str, Any] = {}
    _apply(msgs, latest, set())
    assert len(latest) == len(values)


def test_a_notification_has_its_newest_timestamp_and_a_state_set_twice_goes_once(backend):
    table = _table(2, 3)
    c = Container(SWTEL_ORIGIN, "/interfaces/interface[name=swp1]/phy/fec/prediction/state")
    packer = encode.Packer(TARGET)
    packer.add_batch(make_batch(table, list(range(6)), 100))
    packer.add_states([StateUpdate(300, c, "fit-r2", 0.5)])
    packer.add_batch(make_batch(CounterTable("b", [CounterSpec(Container(OPENCONFIG, "/b"), "x")]), [9], 200))
    packer.add_states([StateUpdate(250, c, "fit-r2", 0.75), StateUpdate(250, c, "gone", None)])
    notifs = [gnmi_pb2.SubscribeResponse.FromString(m).update for m in packer.messages()]
    # origins in order of first appearance (the first counter, c0, is swtel's)
    assert [(n.prefix.origin, n.prefix.target, list(n.prefix.elem)) for n in notifs] == [
        (SWTEL_ORIGIN, TARGET, []), (OPENCONFIG, TARGET, [])]
    assert notifs[0].timestamp == 250 and notifs[1].timestamp == 200  # (the state at 300 was superseded)
    fit = [encode.python_value(u.val) for u in notifs[0].update if u.path.elem[-1].name == "fit-r2"]
    assert fit == [0.75]
    assert [paths.from_proto(d) for d in notifs[0].delete] == [f"{c.path}/gone"]
    assert not packer  # taken


@pytest.mark.parametrize("name", sorted(BACKENDS))
def test_encode_fields_runs_are_equal_in_both_backends(name):
    table = _table(30, 20)
    codec = encode.codec(table, TARGET, per_tick=True)
    rng = random.Random(7)
    values = array("Q", [rng.choice([0, 1, 127, 128, 2**64 - 1, rng.randrange(2**64)]) for _ in table.specs])
    indices = array("I", sorted(rng.sample(range(len(table.specs)), 400)))
    got = BACKENDS[name].encode_fields(indices, values, codec.containers, codec.paths, len(codec.origins), 700)
    ref = _fallback.encode_fields(list(indices), values, codec.containers, codec.paths, len(codec.origins), 700)
    assert got == ref
    assert all(len(b) <= 700 for _g, _n, b in got)
    assert sum(n for _g, n, _b in got) == 400
    with pytest.raises(IndexError):
        BACKENDS[name].encode_fields([len(table.specs)], values, codec.containers, codec.paths, 2, 700)
    with pytest.raises(ValueError):
        BACKENDS[name].encode_fields([0], values, codec.containers, codec.paths, 2, 0)


# ---------------------------------------------------------------- dial-out end to end


def test_dialout_per_tick_sends_a_pass_and_its_snapshot_packed(backend):
    """The exporter between open_pass and close_pass: one message per origin for a pass of
    counters and states from several calls; a 12,000-value snapshot in a handful."""
    port = free_port()
    col = Collector(f"127.0.0.1:{port}", insecure=True).start()
    store = Store()
    table = _table(120, 100)
    values = array("Q", range(len(table.specs)))
    store.set_source("asic", table, values, 10)
    c = Container(SWTEL_ORIGIN, "/interfaces/interface[name=swp1]/phy/fec/prediction/state")
    store.set_states([StateUpdate(11, c, "predicted-flr", 1e-9)])
    store.primed.set()
    exp = DialoutExporter(DialoutConfig(name="t", address=HostPort(f"127.0.0.1:{port}"), insecure=True), TARGET)
    try:
        exp.start(store)
        assert wait_until(lambda: any(s.synced for s in col.streams), timeout=15, what="sync")
        snapshot = len(col.streams[0].responses) - 1  # the sync_response aside
        assert snapshot <= 20
        exp.open_pass()  # as the engine: each source's values stored, then handed on
        newer = array("Q", [v + 1 for v in values])
        store.set_source("asic", table, newer, 20)
        exp.on_batch(make_batch(table, list(newer), 20, [0, 1, 2, 3, 4, 5]))
        exp.on_state([StateUpdate(21, c, "predicted-flr", 2e-9)])
        sys_table = CounterTable("sys", [CounterSpec(Container(OPENCONFIG, "/system/state"), "up")])
        store.set_source("sys", sys_table, array("Q", [7]), 22)
        exp.on_batch(make_batch(sys_table, [7], 22))
        exp.on_state([StateUpdate(23, c, "fit-r2", 0.9)])
        exp.close_pass()
        wait_until(lambda: col.values(TARGET).get(c.full("fit-r2")) == 0.9 and
                   col.values(TARGET).get("/system/state/up") == 7, timeout=15, what="the pass")
        after = col.streams[0].responses[snapshot + 1:]
        assert len(after) == 2  # openconfig and swtel: one Notification each
        got = col.values(TARGET)
        assert got["/system/state/up"] == 7 and got[c.full("predicted-flr")] == 2e-9
    finally:
        exp.stop(1.0)
        col.stop()


# ---------------------------------------------------------------- the dial-in server's STREAM


def _subscribe(port: int, encoding: int):
    import grpc
    from pygnmi.spec.v080 import gnmi_pb2_grpc

    channel = grpc.insecure_channel(f"127.0.0.1:{port}")
    req = gnmi_pb2.SubscribeRequest(subscribe=gnmi_pb2.SubscriptionList(
        mode=gnmi_pb2.SubscriptionList.STREAM, encoding=encoding,
        subscription=[gnmi_pb2.Subscription(path=gnmi_pb2.Path(origin=origin), mode=gnmi_pb2.ON_CHANGE)
                      for origin in ("", SWTEL_ORIGIN)]))
    return channel, gnmi_pb2_grpc.gNMIStub(channel).Subscribe(iter([req]), timeout=30)


def _read_snapshot(call, latest: dict[str, Any]) -> int:
    """Messages up to sync_response, applied to ``latest``; how many there were."""
    n = 0
    for resp in call:
        if resp.sync_response:
            return n
        n += 1
        _apply_response(resp, latest)
    raise AssertionError("no sync_response")


def _apply_response(resp, latest: dict[str, Any]) -> None:
    n = resp.update
    for u in n.update:
        latest[f"{n.prefix.origin}:{paths.join(n.prefix, u.path)}"] = encode.python_value(u.val)


@pytest.mark.parametrize("encoding", [gnmi_pb2.PROTO, gnmi_pb2.JSON_IETF])
def test_server_stream_per_tick_packs_snapshot_and_pass_with_the_same_values(backend, encoding):
    from agent.exporters.server import GnmiServer, ServerConfig

    store = Store()
    table = _table(120, 100)  # 12,000 values
    values = array("Q", range(len(table.specs)))
    store.set_source("asic", table, values, 10)
    c = Container(SWTEL_ORIGIN, "/interfaces/interface[name=swp1]/phy/fec/prediction/state")
    store.set_states([StateUpdate(11, c, "predicted-flr", 1e-9)])
    store.primed.set()
    servers = {mode: GnmiServer(ServerConfig(listen=HostPort("127.0.0.1:0"), insecure=True, notifications=mode),
                                TARGET, min_interval_s=0.05) for mode in ("per-tick", "per-container")}
    calls = []
    try:
        for srv in servers.values():
            srv.start(store)
        got: dict[str, dict[str, Any]] = {}
        counts: dict[str, int] = {}
        for mode, srv in servers.items():
            channel, call = _subscribe(srv.port, encoding)
            calls.append((channel, call))
            got[mode] = {}
            counts[mode] = _read_snapshot(call, got[mode])
            assert wait_until(lambda s=srv: s.status()["subscribers"] == 1, timeout=10, what="subscribed")
        assert counts["per-tick"] <= 20 < counts["per-container"]
        assert got["per-tick"] == got["per-container"] and len(got["per-tick"]) == 12_001
        # one pass: two batches and states, from three calls
        new = array("Q", [v + 5 for v in values])
        sys_table = CounterTable("sys", [CounterSpec(Container(OPENCONFIG, "/system/state"), "up")])
        for srv in servers.values():
            srv.open_pass()
            srv.on_batch(make_batch(table, list(new), 20, list(range(0, 12_000, 3))))
            srv.on_state([StateUpdate(21, c, "predicted-flr", 2e-9), StateUpdate(21, c, "fit-r2", 0.5)])
            srv.on_batch(make_batch(sys_table, [7], 22))
            srv.close_pass()
        tick_call = calls[0][1]
        for _ in range(2):  # openconfig and swtel: one message each
            _apply_response(next(tick_call), got["per-tick"])
        for resp in calls[1][1]:
            _apply_response(resp, got["per-container"])
            if got["per-container"] == got["per-tick"]:
                break
        assert got["per-tick"] == got["per-container"]
        up = 7 if encoding == gnmi_pb2.PROTO else "7"  # RFC 7951: a uint64 is a JSON string
        assert got["per-tick"][c.full("fit-r2")] == 0.5 and got["per-tick"]["openconfig:/system/state/up"] == up
    finally:
        for channel, call in calls:
            call.cancel()
            channel.close()
        for srv in servers.values():
            srv.stop(0.5)


def _queued_exporter() -> tuple[Store, CounterTable, array, DialoutExporter, StateUpdate]:
    """A per-tick exporter never started (its queue read by the test) on a store holding a
    4-port table's values at t=10, and an event to send."""
    store = Store()
    table = _table(4, 6)
    values = array("Q", range(len(table.specs)))
    store.set_source("asic", table, values, 10)
    store.primed.set()
    exp = DialoutExporter(DialoutConfig(name="t", address=HostPort(f"127.0.0.1:{free_port()}"), insecure=True),
                          TARGET)
    exp._store = store
    event = StateUpdate(30, Container(SWTEL_ORIGIN, "/agent/events/event[id=1]/state"), "severity", "critical")
    return store, table, values, exp, event


def test_a_snapshot_supersedes_a_queued_pass_s_counters_and_keeps_its_states(backend):
    """Queued while down, per tick: a pass of counters alone (superseded: counted) and a pass
    of counters and an event (its event kept, as a message of its own, after the snapshot;
    not counted as superseded: every queued message is sent, superseded or still queued)."""
    store, table, values, exp, event = _queued_exporter()
    exp.open_pass()
    exp.on_batch(make_batch(table, list(values), 20, [0, 1]))  # both origins
    exp.close_pass()
    exp.open_pass()
    exp.on_batch(make_batch(table, list(values), 30, [0, 4]))  # swtel (c0) and openconfig (c4)
    exp.on_state([event])
    exp.close_pass()
    assert len(exp._queue) == 4
    msgs = exp._snapshot(sync=True)
    assert len(msgs) == 3  # two origins and sync_response
    assert exp.superseded == 3  # the first pass's two messages, the second's openconfig one
    (kept,) = [gnmi_pb2.SubscribeResponse.FromString(item[1]).update for item in exp._queue]
    latest: dict[str, Any] = {}
    _apply([gnmi_pb2.SubscribeResponse(update=kept).SerializeToString()], latest, set())
    assert latest == {event.container.full(event.leaf): "critical"}


def test_a_pass_still_being_packed_when_a_snapshot_reads_the_store_sends_only_its_states(backend):
    """The race CI found (tests/netns/test_dialout_veth.py, a value repeated after sync): the
    engine stores a pass's values, then hands them on; a snapshot that reads the store in
    between holds them, and the pass, queued after the snapshot took the queue, must not send
    them again; its states still go. A pass stored after the snapshot's read goes whole."""
    store, table, old, exp, event = _queued_exporter()
    new = array("Q", [v + 100 for v in old])
    for states in ([], [event]):
        exp.open_pass()
        store.set_source("asic", table, new, 20)  # as the engine: stored, then handed on
        exp.on_batch(make_batch(table, list(new), 20, [0, 4]))
        exp.on_state(states)
        assert exp._snapshot(sync=True)  # the dial-out thread, between the two: holds the new values
        exp.close_pass()
        got = [m for item in list(exp._queue.take_all()) for m in exp._unless_in_snapshot(item)]
        latest: dict[str, Any] = {}
        _apply(got, latest, set())
        assert latest == ({event.container.full(event.leaf): "critical"} if states else {}), latest
    superseded = exp.superseded
    # stored after the snapshot's read: a change it does not hold, sent whole
    exp.open_pass()
    newer = array("Q", [v + 1 for v in new])
    store.set_source("asic", table, newer, 30)
    exp.on_batch(make_batch(table, list(newer), 30, [0]))
    exp.close_pass()
    (item,) = exp._queue.take_all()
    assert exp._unless_in_snapshot(item) == [item[1]] and exp.superseded == superseded


def test_the_per_tick_codec_shares_path_pieces_and_writes_the_same_bytes():
    """Memory a value (issue 35): the per-tick codec keeps each counter's absolute path as two
    u32 indices into shared pieces (head, tail), not a whole path or a tuple per value; head +
    tail is the path's serialization, and both encoders write the same fields from the pieces
    as from whole paths, as from (head, tail) pairs."""
    table = sim_table()
    codec = encode.codec(table, TARGET, per_tick=True)
    pieces, heads, tails = codec.paths
    assert heads.typecode == tails.typecode == "I" and len(heads) == len(tails) == len(table.specs)
    whole = [paths.to_proto(f"{s.container.path}/{s.leaf}").SerializeToString() for s in table.specs]
    # decoded, keys sorted: a PathElem's key map may serialize in either order (Debian's C++
    # protobuf wrote the spine's pool[index=0][type=ingress] one way whole, the other in pieces)
    pairs = [(pieces[h], pieces[t]) for h, t in zip(heads, tails, strict=True)]
    assert [_path_elems(head + tail) for head, tail in pairs] == [_path_elems(w) for w in whole]
    # 16,812 values: ~3,800 heads (a port, lane, queue or priority group each) and 59 tails
    assert len(pieces) < len(table.specs) // 4
    rng = random.Random(3)
    values = array("Q", [rng.randrange(2**64) for _ in table.specs])
    indices = array("I", sorted(rng.sample(range(len(table.specs)), 3000)))
    want = _decoded_runs(_fallback.encode_fields(list(indices), values, codec.containers, whole,
                                                 len(codec.origins), 4096))
    assert sum(len(updates) for _g, updates in want) == 3000
    prefixes = [b""] * len(codec.origins)
    want_updates = _decoded_responses(_fallback.encode_updates(5, list(indices), values, codec.containers,
                                                               prefixes, whole, 100))
    for name in sorted(BACKENDS):
        for form in (codec.paths, pairs):
            got = BACKENDS[name].encode_fields(indices, values, codec.containers, form, len(codec.origins), 4096)
            assert _decoded_runs(got) == want
            got = BACKENDS[name].encode_updates(5, indices, values, codec.containers, prefixes, form, 100)
            assert _decoded_responses(got) == want_updates
        with pytest.raises(TypeError, match=r"\(bytes, bytes\) pairs"):
            BACKENDS[name].encode_fields([0], values, codec.containers, [(b"a", "b")], 2, 700)
        with pytest.raises(TypeError, match=r"list or a \(pieces, heads, tails\) triple"):
            BACKENDS[name].encode_fields([0], values, codec.containers, (b"a", heads, tails), 2, 700)
        with pytest.raises(IndexError, match="path piece 99999 out of range"):
            BACKENDS[name].encode_fields([0], values, codec.containers, (pieces, array("I", [99999]), tails), 2, 700)
        with pytest.raises(IndexError, match="counter index 1 out of range"):  # heads shorter than the table
            BACKENDS[name].encode_updates(5, [1], values, codec.containers, prefixes, (pieces, heads[:1], tails), 9)
        with pytest.raises(TypeError, match="pieces must be bytes"):
            BACKENDS[name].encode_fields([0], values, codec.containers, (["x"] * len(pieces), heads, tails), 2, 700)


def test_a_state_s_path_is_its_container_s_elems_then_its_leaf_s_each_cached_once():
    """Memory (issue 35): a state's path is two cached pieces, its container's elems and its
    leaf's, joined; the same Path as the whole string serialized, for keyed containers and
    leaves, the root container and no leaf; the container cache is bounded."""
    from agent.counters import Container

    cases = [(Container("openconfig", "/interfaces/interface[name=swp1]/phy/histograms/state"
                                      "/rs-num-corr-err[upper-boundary=3]"), "upper-boundary"),
             (Container("swtel", "/qos/interfaces/interface[name=swp2]/pool[index=0][type=ingress]"), "max-level"),
             (Container("swtel", "/"), "insights/state/open"),
             (Container("swtel", "/system/state"), ""),
             (Container("swtel", "/a"), "b[k=v]/c")]
    for container, leaf in cases:
        whole = f"{container.path}/{leaf}" if leaf else container.path
        assert _path_elems(encode.absolute_path(container, leaf)) == _elems(paths.to_proto(whole)), (container, leaf)
    # ten thousand containers sent once (the spine's FEC bins' upper boundaries) keep at most
    # the cache's bound, not one path each
    for i in range(10_000):
        encode.absolute_path(Container("openconfig", f"/interfaces/interface[name=swp{i}]/phy/state"), "x")
    assert encode._container_elems.cache_info().currsize <= 1024


def _elems(path: gnmi_pb2.Path) -> tuple:
    return tuple((e.name, tuple(sorted(e.key.items()))) for e in path.elem)


def _path_elems(raw: bytes) -> tuple:
    return _elems(gnmi_pb2.Path.FromString(raw))


def _updates(notif: gnmi_pb2.Notification) -> list[tuple[tuple, int]]:
    # keys sorted: protobuf may serialize a PathElem's key map (the spine's
    # ``pool[index=0][type=ingress]``) in another order than it was written, so the bytes of
    # a re-serializing encoder (the fallback) and a copying one (C) may differ; the paths not
    return [(_elems(u.path), u.val.uint_val) for u in notif.update]


def _decoded_runs(runs: list[tuple[int, int, bytes]]) -> list[tuple[int, list]]:
    return [(group, _updates(gnmi_pb2.Notification.FromString(fields))) for group, _n, fields in runs]


def _decoded_responses(messages: list[bytes]) -> list[tuple[int, list]]:
    out = []
    for raw in messages:
        notif = gnmi_pb2.SubscribeResponse.FromString(raw).update
        out.append((notif.timestamp, _updates(notif)))
    return out
