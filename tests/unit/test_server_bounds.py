"""A Subscribe (and a Get) is bounded (issue 24, item 6): a cap on paths per request, matching
that costs per path element rather than per pattern and stays off the tick thread, clear
status codes for malformed deprecated paths, bounded echoes of request text, and one
SubscriptionList per stream. Real gRPC (raw stubs and pygnmi) against the dial-in server.
"""

from __future__ import annotations

import random
import threading
import time
from array import array

import grpc
import pytest
from pygnmi.spec.v080 import gnmi_pb2, gnmi_pb2_grpc

from agent.config import HostPort
from agent.counters import (
    HIDDEN,
    OPENCONFIG,
    SWTEL_ORIGIN,
    Container,
    CounterSpec,
    CounterTable,
    StateUpdate,
)
from agent.exporters.server import GnmiServer, ServerConfig
from agent.gnmi import get as get_module
from agent.gnmi import paths
from agent.gnmi.get import MAX_PATHS, PathSet
from agent.store import Store
from tests.gnmi_helpers import make_batch, make_table

TARGET = "leaf01"
PORTS = [f"swp{i}" for i in range(256)]
LEAVES = tuple(f"leaf-{j}" for j in range(60))

pytestmark = pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")


def elem_path(port: str, leaf: str) -> gnmi_pb2.Path:
    return gnmi_pb2.Path(elem=[
        gnmi_pb2.PathElem(name="interfaces"), gnmi_pb2.PathElem(name="interface", key={"name": port}),
        gnmi_pb2.PathElem(name="state"), gnmi_pb2.PathElem(name="counters"), gnmi_pb2.PathElem(name=leaf)])


class Big:
    """256 ports x 60 counters (15,360) and an oper-status per port, in a Store, with a server."""

    def __init__(self):
        self.store = Store()
        self.table = make_table(PORTS, LEAVES)
        self.ts = time.time_ns()
        self.store.set_source("netdev", self.table, array("Q", range(len(self.table))), self.ts)
        self.states = [StateUpdate(self.ts, Container(OPENCONFIG, f"/interfaces/interface[name={p}]/state"),
                                   "oper-status", "UP", "netdev") for p in PORTS]
        self.store.set_states(self.states)
        # (per container: the test reads the port off each Notification's prefix)
        self.server = GnmiServer(ServerConfig(listen=HostPort("127.0.0.1:0"), insecure=True,
                                              notifications="per-container"), TARGET,
                                 min_interval_s=0.05)
        self.server.start(self.store)
        self.channel = grpc.insecure_channel(f"127.0.0.1:{self.server.port}")
        self.stub = gnmi_pb2_grpc.gNMIStub(self.channel)

    def rebuild(self) -> CounterTable:
        """Ports changed: a new table object, published like a tick (every 7th counter changed)."""
        self.table = make_table(PORTS, LEAVES)
        self.ts = time.time_ns()
        values = list(range(len(self.table)))
        self.store.set_source("netdev", self.table, array("Q", values), self.ts)
        return make_batch(self.table, values, self.ts, list(range(0, len(self.table), 7)))

    def close(self):
        self.channel.close()
        self.server.stop(1)


@pytest.fixture
def big():
    b = Big()
    yield b
    b.close()


def stream_request(paths_: list[gnmi_pb2.Path], mode=gnmi_pb2.SubscriptionList.STREAM, **kw):
    return gnmi_pb2.SubscribeRequest(subscribe=gnmi_pb2.SubscriptionList(
        mode=mode, encoding=gnmi_pb2.PROTO,
        subscription=[gnmi_pb2.Subscription(path=p, mode=gnmi_pb2.ON_CHANGE, **kw) for p in paths_]))


class Stream:
    """A Subscribe call whose requests the test sends one by one."""

    def __init__(self, stub, first, timeout: float = 30.0):
        self.requests: list = [first]
        self.more = threading.Event()
        self.done = threading.Event()
        self.call = stub.Subscribe(self._gen(), timeout=timeout)

    def _gen(self):
        sent = 0
        while not self.done.is_set():
            while sent < len(self.requests):
                yield self.requests[sent]
                sent += 1
            self.more.wait(0.1)
            self.more.clear()

    def send(self, request):
        self.requests.append(request)
        self.more.set()

    def until_sync(self) -> list:
        out = []
        for resp in self.call:
            out.append(resp)
            if resp.sync_response:
                return out
        raise AssertionError("no sync_response")

    def close(self):
        self.done.set()
        self.call.cancel()


def code_of(fn):
    try:
        fn()
    except grpc.RpcError as exc:
        return exc.code(), exc.details()
    return grpc.StatusCode.OK, ""


# ---------------------------------------------------------------- the cap


def test_paths_per_subscription_list_are_capped(big):
    many = [elem_path(PORTS[i % 256], LEAVES[i % 60]) for i in range(MAX_PATHS + 1)]
    once = gnmi_pb2.SubscriptionList.ONCE
    code, details = code_of(lambda: list(big.stub.Subscribe(iter([stream_request(many, once)]), timeout=10)))
    assert code == grpc.StatusCode.RESOURCE_EXHAUSTED, (code, details)
    assert details == f"{MAX_PATHS + 1} subscriptions in one SubscriptionList (limit {MAX_PATHS})"
    replies = list(big.stub.Subscribe(iter([stream_request(many[:MAX_PATHS], once)]), timeout=20))
    assert replies[-1].sync_response
    assert sum(len(r.update.update) for r in replies) == MAX_PATHS  # 1000 distinct counters
    code, details = code_of(lambda: big.stub.Get(gnmi_pb2.GetRequest(path=many, encoding=gnmi_pb2.PROTO), timeout=10))
    assert code == grpc.StatusCode.RESOURCE_EXHAUSTED and f"(limit {MAX_PATHS})" in details


def test_a_full_subscription_costs_the_tick_thread_per_change(big, monkeypatch):
    """A STREAM of 1,000 distinct paths: the tick thread (on_batch for a rebuilt table, on_state,
    on_delete) never matches a table against the patterns; the matching runs on the RPC thread,
    and the changes still arrive. Checked by where the matcher runs, not by timing it."""
    matched_on: list[int] = []
    match_table = PathSet._match_table

    def recording_match_table(self, table):
        matched_on.append(threading.get_ident())
        return match_table(self, table)

    monkeypatch.setattr(PathSet, "_match_table", recording_match_table)
    many = [elem_path(PORTS[i % 256], LEAVES[(i * 7) % 60]) for i in range(MAX_PATHS)]
    s = Stream(big.stub, stream_request(many))
    try:
        snapshot = s.until_sync()
        assert sum(len(r.update.update) for r in snapshot) == MAX_PATHS
        (sub,) = big.server._subs
        tick_thread = threading.get_ident()
        before = len(matched_on)
        for _ in range(3):
            batch = big.rebuild()
            big.server.on_batch(batch)
            big.server.on_state(big.states)
            big.server.on_delete(big.ts, [Container(OPENCONFIG, "/interfaces/interface[name=swp999]")])
        assert tick_thread not in matched_on
        # what the tick thread handed on unmatched arrives filtered: only subscribed counters
        wanted = {(PORTS[i % 256], LEAVES[(i * 7) % 60]) for i in range(MAX_PATHS)}
        changed = {(spec.port, spec.leaf) for i, spec in enumerate(big.table.specs) if i % 7 == 0}
        expected = wanted & changed
        got: set = set()
        deadline = time.monotonic() + 10
        for resp in s.call:
            port = resp.update.prefix.elem[1].key["name"]
            got |= {(port, u.path.elem[0].name) for u in resp.update.update}
            if got >= expected or time.monotonic() > deadline:
                break
        assert got >= expected and got <= wanted
        assert sub.dropped == 0
        assert len(matched_on) > before  # the rebuilt tables were matched, on the RPC thread
        assert tick_thread not in matched_on
    finally:
        s.close()


def test_matching_cost_does_not_grow_with_the_number_of_paths(monkeypatch):
    """Matching 1,000 patterns against 15,360 counters costs per path element, not per pattern.

    Counted, not timed (these machines are noisy): the trie states stepped through. A matcher
    that tried every pattern on every counter would step 1,000 x 15,360 times; the trie stays
    within twice the table, and 100 times the patterns cost well under 20 times the steps."""
    table = make_table(PORTS, LEAVES)
    steps = 0
    step = get_module._step

    def counting_step(states, name, keys):
        nonlocal steps
        steps += len(states)
        return step(states, name, keys)

    monkeypatch.setattr(get_module, "_step", counting_step)

    def cost(n):
        nonlocal steps
        steps = 0
        patterns = [(OPENCONFIG, tuple(paths.split(f"/interfaces/interface[name={PORTS[i % 256]}]/state/counters/"
                                                   f"{LEAVES[(i * 7) % 60]}"))) for i in range(n)]
        m = PathSet(patterns).table(table)
        return steps, len(m.indices)

    small, n_small = cost(10)
    large, n_large = cost(MAX_PATHS)
    assert (n_small, n_large) == (10, MAX_PATHS)
    assert small > 0
    assert large <= 2 * len(table.specs) and large < 20 * small, (small, large)


# ---------------------------------------------------------------- matching is what it was


def _brute(patterns, table):
    """paths.matches, pattern by pattern: the reference the compiled matcher must agree with."""
    out = {k: [] for k in range(len(patterns))}
    for i, spec in enumerate(table.specs):
        if table.kinds[i] == HIDDEN:
            continue
        concrete = list(paths.split(spec.container.path)) + list(paths.split(spec.leaf))
        for k, (origin, elems) in enumerate(patterns):
            if origin == spec.container.origin and paths.matches(list(elems), concrete):
                out[k].append(i)
    return out


def test_compiled_matching_agrees_with_paths_matches():
    rng = random.Random(24)
    ports = ["swp1", "swp2", "swp10", "eth0"]
    specs = [CounterSpec(Container(OPENCONFIG, f"/interfaces/interface[name={p}]/state/counters"), leaf)
             for p in ports for leaf in ("in-octets", "out-octets", "in-errors")]
    specs += [CounterSpec(Container(OPENCONFIG, f"/qos/interfaces/interface[interface-id={p}]/output/queues/"
                                                f"queue[name={q}]/state"), leaf)
              for p in ports[:2] for q in ("0", "3") for leaf in ("transmit-pkts", "dropped-pkts")]
    specs += [CounterSpec(Container(SWTEL_ORIGIN, f"/interfaces/interface[name={p}]/pfc/priority[id={i}]/state"),
                          leaf, kind=HIDDEN if leaf == "hidden" else 0)
              for p in ports[:2] for i in ("3", "4") for leaf in ("rx-pause", "tx-pause", "hidden")]
    table = CounterTable("t", specs)
    names = ["interfaces", "interface", "state", "counters", "qos", "output", "queues", "queue", "pfc",
             "priority", "in-octets", "in-errors", "rx-pause", "*", "...", "nope"]
    keys = [{}, {"name": "swp1"}, {"name": "*"}, {"name": "eth0"}, {"id": "3"}, {"interface-id": "swp2"},
            {"name": "3"}, {"other": "x"}, {"other": "*"}, {"name": "swp1", "other": "*"}]
    for _ in range(300):
        patterns = []
        for _ in range(rng.randint(1, 6)):
            elems = tuple((rng.choice(names), dict(rng.choice(keys))) for _ in range(rng.randint(0, 7)))
            patterns.append((rng.choice([OPENCONFIG, OPENCONFIG, SWTEL_ORIGIN]), elems))
        if rng.random() < 0.3:  # realistic ones too
            patterns.append((OPENCONFIG, tuple(paths.split(rng.choice([
                "/interfaces/interface[name=swp1]/state/counters/in-octets", "/interfaces/.../in-errors",
                "/interfaces/interface/state", "/qos/.../queue[name=3]", "/...", "/"])))))
        expected = _brute(patterns, table)
        ps = PathSet(patterns)
        union = sorted({i for v in expected.values() for i in v})
        assert ps.table(table).indices == union, patterns
        for k in range(len(patterns)):
            assert ps.member(k).table(table).indices == expected[k], (patterns, k)
            for i, spec in enumerate(specs):
                if table.kinds[i] != HIDDEN:
                    assert ps.member(k).matches_leaf(spec.container, spec.leaf) == (i in expected[k])
        for i, spec in enumerate(specs):
            if table.kinds[i] != HIDDEN:
                assert ps.matches_leaf(spec.container, spec.leaf) == (i in union)
                # a deleted container at or below a pattern concerns the set
                concrete = list(paths.split(spec.container.path))
                if any(o == spec.container.origin and paths.matches(list(e), concrete) for o, e in patterns):
                    assert ps.touches(spec.container)


# ---------------------------------------------------------------- status codes and echoes


@pytest.mark.parametrize("element", [["interfaces", "interface[name=swp1"], ["interfaces]"], ["a[=b]"],
                                     ["a[k=v]x"], ["[k=v]"]])
def test_malformed_element_path_is_invalid_argument(big, element):
    path = gnmi_pb2.Path(element=element)
    code, details = code_of(lambda: big.stub.Get(gnmi_pb2.GetRequest(path=[path]), timeout=5))
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "malformed path element" in details, (code, details)
    once = gnmi_pb2.SubscriptionList.ONCE
    code, details = code_of(lambda: list(big.stub.Subscribe(iter([stream_request([path], once)]), timeout=5)))
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "malformed path element" in details, (code, details)


@pytest.mark.parametrize("field,expected", [
    ("origin", grpc.StatusCode.INVALID_ARGUMENT),
    ("target", grpc.StatusCode.NOT_FOUND),
    ("element", grpc.StatusCode.INVALID_ARGUMENT),
    ("key", grpc.StatusCode.NOT_FOUND),
])
def test_echoed_request_text_is_bounded(big, field, expected):
    """10 KB of origin, target, malformed element or key: the status names it, cut to 200
    characters, so the reply stays small (an echo of it all used to turn it into RESOURCE_EXHAUSTED)."""
    huge = "\x1b" + "o" * 10_000
    path = {"origin": gnmi_pb2.Path(origin=huge),
            "target": gnmi_pb2.Path(target=huge),
            "element": gnmi_pb2.Path(element=["a[" + huge]),
            "key": gnmi_pb2.Path(elem=[gnmi_pb2.PathElem(name="interfaces"),
                                       gnmi_pb2.PathElem(name="interface", key={"name": huge})])}[field]
    for call in (lambda: big.stub.Get(gnmi_pb2.GetRequest(path=[path], encoding=gnmi_pb2.PROTO), timeout=5),
                 lambda: list(big.stub.Subscribe(iter([stream_request([path], gnmi_pb2.SubscriptionList.ONCE)]),
                                                 timeout=5))):
        code, details = code_of(call)
        if field == "key" and code == grpc.StatusCode.OK:
            continue  # a Subscribe to a path with no data is not an error
        assert code == expected, (code, details[:300])
        assert len(details) < 400 and "characters)" in details, details[:500]
        assert "\x1b" not in details


def test_a_second_subscription_list_on_one_stream_is_refused(big):
    s = Stream(big.stub, stream_request([elem_path("swp1", "leaf-1")]))
    try:
        assert s.until_sync()
        s.send(stream_request([elem_path("swp2", "leaf-2")]))
        with pytest.raises(grpc.RpcError) as exc:
            for _ in s.call:
                pass
        assert exc.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "second SubscriptionList" in exc.value.details()
    finally:
        s.close()
    deadline = time.monotonic() + 5
    while big.server._subs and time.monotonic() < deadline:
        time.sleep(0.02)
    assert big.server.status()["subscribers"] == 0


def test_a_poll_on_a_stream_subscription_is_refused(big):
    s = Stream(big.stub, stream_request([elem_path("swp1", "leaf-1")]))
    try:
        assert s.until_sync()
        s.send(gnmi_pb2.SubscribeRequest(poll=gnmi_pb2.Poll()))
        with pytest.raises(grpc.RpcError) as exc:
            for _ in s.call:
                pass
        assert exc.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "only POLL" in exc.value.details()
    finally:
        s.close()


def test_poll_subscriptions_still_take_polls_and_refuse_a_second_list(big):
    poll = gnmi_pb2.SubscriptionList.POLL
    s = Stream(big.stub, stream_request([elem_path("swp1", "leaf-1")], poll))
    try:
        s.send(gnmi_pb2.SubscribeRequest(poll=gnmi_pb2.Poll()))
        first = s.until_sync()
        assert first[0].update.update[0].val.uint_val == big.table.specs.index(
            next(sp for sp in big.table.specs if sp.port == "swp1" and sp.leaf == "leaf-1"))
        s.send(stream_request([elem_path("swp2", "leaf-2")], poll))
        with pytest.raises(grpc.RpcError) as exc:
            for _ in s.call:
                pass
        assert exc.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    finally:
        s.close()


def test_pygnmi_stream_unaffected(big):
    """pygnmi's STREAM sends one SubscribeRequest and keeps its side open: served as before."""
    from pygnmi.client import gNMIclient

    with gNMIclient(target=("127.0.0.1", big.server.port), insecure=True, gnmi_timeout=5) as gc:
        sub = gc.subscribe2(subscribe={"mode": "stream", "encoding": "proto", "subscription": [
            {"path": "/interfaces/interface[name=swp3]/state/counters/leaf-3", "mode": "on_change"}]})
        first = sub.get_update(timeout=5)
        assert first["sync_response"] is True
        time.sleep(0.5)  # wallclock: time for a refusal to come; none must
        assert big.server.status()["subscribers"] == 1  # not refused meanwhile
        sub.close()
