"""Dial-out Publish client against the real collector over real gRPC: TLS with a CA the test
generates and plaintext, both wire paths, metadata, snapshot -> sync -> changes, heartbeat,
wrong CA refused and retried, collector killed and restarted, queue overflow counted, a collector
that rejects the RPC backed off and reported down, a bad password file retried until fixed."""

from __future__ import annotations

import socket
import threading
import time
from array import array
from concurrent import futures

import grpc
import pytest
import structlog
from pygnmi.spec.v080 import gnmi_pb2

from agent.config import ClientTls, Duration, HostPort
from agent.control.client import health_problems
from agent.exporters.dialout import DialoutConfig, DialoutExporter
from agent.gnmi import paths
from agent.store import Store
from agent.tools.collect import NOKIA_METHOD, SONIC_METHOD, Collector
from tests.gnmi_helpers import free_port, make_batch, make_pki, make_table
from tests.helpers import record_retries, wait_until

TARGET = "leaf01"


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    return make_pki(tmp_path_factory.mktemp("pki"))


class Feed:
    """A synthetic source: a table, its values in a Store, and change Batches for the exporter."""

    def __init__(self, ports: int = 4, leaves: int = 0):
        names = [f"swp{i}" for i in range(1, ports + 1)]
        if leaves:
            self.table = make_table(names, tuple(f"counter-{i}" for i in range(leaves)))
        else:
            self.table = make_table(names)
        self.values = [1000 + i for i in range(len(self.table))]
        self.store = Store()
        self._publish(list(range(len(self.table))), snapshot=True)

    def _publish(self, indices, snapshot=False):
        ts = time.time_ns()
        self.store.set_source("netdev", self.table, array("Q", self.values), ts)
        return make_batch(self.table, self.values, ts, None if snapshot else indices)

    def change(self, indices, by: int = 1):
        for i in indices:
            self.values[i] += by
        return self._publish(indices)

    def expected(self) -> dict[str, int]:
        return dict(zip(self.table.paths, self.values, strict=True))


def _cfg(port: int, pki=None, *, protocol="nokia", insecure=False, ca=None, **kw) -> DialoutConfig:
    # These unit tests count per-container messages; the e2e tests cover both modes.
    kw.setdefault("notifications", "per-container")
    tls = ClientTls(ca=str(ca or pki.ca), server_name="collector.test") if pki else ClientTls()
    return DialoutConfig(name=f"c{port}", address=HostPort(f"127.0.0.1:{port}"), protocol=protocol,
                         insecure=insecure, tls=tls, **kw)


def _collector(port, pki=None, **kw) -> Collector:
    if pki is None:
        return Collector(f"127.0.0.1:{port}", insecure=True, **kw).start()
    return Collector(f"127.0.0.1:{port}", tls_cert=str(pki.server_cert), tls_key=str(pki.server_key),
                     **kw).start()


def _synced_streams(col: Collector) -> int:
    return sum(1 for s in col.streams if s.synced)


def _wait_state(exp: DialoutExporter, state: str, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while exp.status()["state"] != state:
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


@pytest.mark.parametrize("protocol,secure", [("nokia", True), ("sonic", True), ("nokia", False), ("sonic", False)])
def test_snapshot_sync_then_changes(pki, tmp_path, protocol, secure):
    port = free_port()
    col = _collector(port, pki if secure else None)
    pw = tmp_path / "pw"
    pw.write_text("s3cret\n")
    pw.chmod(0o600)
    cfg = _cfg(port, pki if secure else None, protocol=protocol, insecure=not secure,
               username="telemetry", password_file=str(pw), subscription_name="fabric")
    feed = Feed()
    exp = DialoutExporter(cfg, TARGET)
    exp.start(feed.store)
    try:
        assert col.wait_for(lambda c: _synced_streams(c) == 1, 15), exp.status()
        assert col.values(TARGET) == feed.expected()
        before = time.time_ns()
        exp.on_batch(feed.change([0, 7, 12], by=5))
        assert col.wait_for(lambda c: c.values(TARGET) == feed.expected(), 10)

        (stream,) = col.streams
        assert stream.method == {"nokia": NOKIA_METHOD, "sonic": SONIC_METHOD}[protocol]
        md = stream.metadata
        assert (md["subscription-name"], md["system-name"]) == ("fabric", TARGET)
        assert (md["username"], md["password"]) == ("telemetry", "s3cret")
        kinds = ["sync" if r.sync_response else "update" for r in stream.responses]
        first_sync = kinds.index("sync")
        assert first_sync > 0 and kinds.count("sync") == 1
        snap = [r.update for r in stream.responses[:first_sync]]
        assert sum(len(n.update) for n in snap) == len(feed.table)
        for n in (r.update for r in stream.responses if not r.sync_response):
            assert n.prefix.target == TARGET and n.prefix.origin == "openconfig"
            rel = [paths.from_proto(u.path) for u in n.update]
            assert len(rel) == len(set(rel))  # unique within a notification
            assert all(not u.path.target for u in n.update)
            assert 1.6e18 < n.timestamp < 4e18  # ns since the epoch
        changes = [ln for ln in col.messages if ln.get("sync") and "path" in ln]
        assert {ln["path"] for ln in changes} == {feed.table.paths[i] for i in (0, 7, 12)}
        assert all(ln["ts"] >= before for ln in changes)
        # nokia's first reply proves the stream; sonic never replies: only time without an error does
        assert _wait_state(exp, "connected", 1 if protocol == "nokia" else 10), exp.status()
        st = exp.status()
        assert st["reconnects"] == 0 and st["dropped"] == 0 and st["down_since_ns"] is None
        assert st["sent"] == len(stream.responses) and st["tls"] is secure
    finally:
        exp.stop(2)
        col.stop(0)
    assert exp.status()["state"] == "down"


def test_heartbeat_resnapshots_without_sync():
    port = free_port()
    col = _collector(port)
    feed = Feed(ports=2)
    exp = DialoutExporter(_cfg(port, insecure=True, heartbeat=Duration(1.0)), TARGET)
    exp.start(feed.store)
    try:
        n = len(feed.table) // 5  # notifications per snapshot: one per port container
        assert col.wait_for(lambda c: c.streams and len(c.streams[0].responses) >= 3 * n + 1, 10)
        kinds = [r.sync_response for r in col.streams[0].responses]
        assert kinds.count(True) == 1 and kinds[n] is True
        assert exp.status()["snapshots"] >= 3
    finally:
        exp.stop(1)
        col.stop(0)


def test_wrong_ca_refused_logged_and_retried(pki):
    port = free_port()
    col = _collector(port, pki)
    feed = Feed(ports=1)
    exp = DialoutExporter(_cfg(port, pki, ca=pki.wrong_ca), TARGET)
    exp.log_limiter.period_s = 0  # log every attempt, to see the backoff
    with structlog.testing.capture_logs() as logs:
        exp.start(feed.store)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and sum(e["event"] == "destination down" for e in logs) < 3:
            time.sleep(0.1)
        exp.stop(0)
    col.stop(0)
    downs = [e for e in logs if e["event"] == "destination down"]
    assert len(downs) >= 3, logs  # refused, and retried with backoff
    assert all(e["log_level"] == "warning" for e in downs)
    assert "TLS handshake failed" in (downs[0]["hint"] or ""), downs[0]
    assert str(pki.wrong_ca) in downs[0]["hint"]
    delays = [e["retry_in_s"] for e in downs[:3]]
    assert delays[0] < delays[2]  # exponential backoff
    st = exp.status()
    assert not col.streams and st["reconnects"] == 0 and st["sent"] == 0
    assert "CERTIFICATE_VERIFY_FAILED" in st["last_error"] or "handshake" in st["last_error"].lower()


def test_wrong_ca_then_right_certificate_connects(pki, tmp_path):
    """The agent keeps retrying; when the collector presents a certificate the agent's CA
    signed, it connects by itself."""
    from tests.gnmi_helpers import CA

    port = free_port()
    other = CA.create(tmp_path, "other-ca")
    bad_cert, bad_key = other.issue(tmp_path, "collector.test", dns=("collector.test",))
    col = Collector(f"127.0.0.1:{port}", tls_cert=str(bad_cert), tls_key=str(bad_key)).start()
    feed = Feed(ports=1)
    exp = DialoutExporter(_cfg(port, pki), TARGET)
    exp.start(feed.store)
    try:
        # the handshake fails (an unknown CA): wait for the agent to have tried, and tried again
        retries = record_retries(exp)
        assert wait_until(lambda: len(retries) >= 2, 30, "two refused handshakes")
        assert exp.status()["state"] != "connected" and not col.streams
        col.stop(0)
        col = _collector(port, pki)
        assert col.wait_for(lambda c: _synced_streams(c) == 1, 40), exp.status()
        assert col.values(TARGET) == feed.expected()
    finally:
        exp.stop(1)
        col.stop(0)


def _kill_restart(pki, down_s: float, queue: int):
    port = free_port()
    col = _collector(port, pki)
    feed = Feed(ports=8)
    exp = DialoutExporter(_cfg(port, pki, queue=queue), TARGET)
    exp.start(feed.store)
    try:
        assert col.wait_for(lambda c: _synced_streams(c) == 1, 15)
        col.stop(0)  # killed: open streams are cancelled
        killed = time.monotonic()
        # polling goes on while the collector is away: 10 ticks/s of changes
        tick = 0
        while time.monotonic() - killed < down_s:
            exp.on_batch(feed.change(range(tick % 5, len(feed.table), 5)))
            tick += 1
            time.sleep(0.1)
        st = exp.status()
        assert st["state"] in ("down", "connecting") and st["down_since_ns"]
        assert st["queue"] <= queue
        col = _collector(port, pki)  # restarted on the same port
        assert col.wait_for(lambda c: _synced_streams(c) == 1, 40), exp.status()
        assert col.wait_for(lambda c: c.values(TARGET) == feed.expected(), 10)
        # the changes that follow still flow
        exp.on_batch(feed.change([3]))
        assert col.wait_for(lambda c: c.values(TARGET) == feed.expected(), 10)
        # "connected" is confirmed by the collector's first reply (or healthy_after_s without
        # error), which can trail the data it received on a loaded machine: wait for it
        assert _wait_state(exp, "connected", 10), exp.status()
        st = exp.status()
        assert st["reconnects"] == 1 and st["down_since_ns"] is None
        assert st["dropped"] > 0  # the small queue overflowed while down
        # connected again: the outage's error is history, not beside "connected"
        assert st["last_error"] is None, st
        assert "UNAVAILABLE" in st["previous_error"] or "CANCELLED" in st["previous_error"]
        return st
    finally:
        exp.stop(1)
        col.stop(0)


def test_collector_killed_2s_and_restarted(pki):
    _kill_restart(pki, 2.0, queue=20)


@pytest.mark.slow
def test_collector_killed_5s_and_restarted(pki):
    _kill_restart(pki, 5.0, queue=50)


def test_overflow_while_connected_resnapshots(pki):
    """A queue of 2 cannot hold one tick of 8 containers: drops are counted and the newest
    values still reach the collector through a snapshot."""
    port = free_port()
    col = _collector(port)
    feed = Feed(ports=8)
    exp = DialoutExporter(_cfg(port, insecure=True, queue=2), TARGET)
    exp.start(feed.store)
    try:
        assert col.wait_for(lambda c: _synced_streams(c) == 1, 15)
        for _ in range(20):
            exp.on_batch(feed.change(range(len(feed.table))))
        assert col.wait_for(lambda c: c.values(TARGET) == feed.expected(), 10)
        st = exp.status()
        assert st["dropped"] > 0 and st["snapshots"] >= 2 and st["reconnects"] == 0
    finally:
        exp.stop(1)
        col.stop(0)


def test_a_state_dropped_on_overflow_arrives_through_a_snapshot(pki):
    """An event's state is sent once and never changes: dropped on overflow, it must still
    reach the collector, from the store, by the snapshot the drop schedules."""
    from agent.counters import Container, StateUpdate

    port = free_port()
    col = _collector(port)
    feed = Feed(ports=8)
    exp = DialoutExporter(_cfg(port, insecure=True, queue=2), TARGET)
    exp.start(feed.store)
    event = StateUpdate(time.time_ns(), Container("swtel", "/insights/events/event[id=7]"), "type",
                        "symbol-ber", "insights")
    try:
        assert col.wait_for(lambda c: _synced_streams(c) == 1, 15)
        others = [StateUpdate(time.time_ns(), Container("swtel", f"/agent/test/item[id={i}]"), "v", i, "t")
                  for i in range(3)]
        with exp._queue.cond:  # the sender cannot take the state before the others push it out
            feed.store.set_states([event, *others])
            exp.on_state([event])
            for other in others:  # states only: no counter drop to schedule a snapshot by chance
                exp.on_state([other])
        assert exp.status()["dropped"] > 0
        want = "swtel:/insights/events/event[id=7]/type"
        assert col.wait_for(lambda c: c.values(TARGET).get(want) == "symbol-ber", 10), \
            sorted(p for p in col.values(TARGET) if "insights" in p)
    finally:
        exp.stop(1)
        col.stop(0)


def test_stop_flushes_queue_and_half_closes():
    port = free_port()
    col = _collector(port)
    feed = Feed(ports=2)
    exp = DialoutExporter(_cfg(port, insecure=True, protocol="sonic"), TARGET)
    exp.start(feed.store)
    assert col.wait_for(lambda c: _synced_streams(c) == 1, 15)
    exp.on_batch(feed.change([1, 2, 3]))
    exp.stop(3)
    assert col.values(TARGET) == feed.expected()
    st = exp.status()
    assert st["queue"] == 0 and st["state"] == "down"
    col.stop(0)


@pytest.mark.parametrize("peer", ["refused", "black-hole"])
def test_unreachable_destination_counts_and_never_blocks(peer):
    # refused: nobody listens. black-hole: a socket that listens but never accepts, so a
    # connection attempt hangs; on_* calls that waited on it would never all return.
    hole = socket.create_server(("127.0.0.1", 0), backlog=1) if peer == "black-hole" else None
    port = hole.getsockname()[1] if hole is not None else free_port()
    feed = Feed(ports=4)
    exp = DialoutExporter(_cfg(port, insecure=True, queue=10), TARGET)
    exp.start(feed.store)
    try:
        batches = [feed.change(range(len(feed.table))) for _ in range(50)]
        calls = threading.Thread(target=lambda: [exp.on_batch(b) for b in batches], daemon=True)
        calls.start()
        calls.join(30)  # a failure bound: on_* only enqueue, they never wait for the peer
        assert not calls.is_alive(), "on_batch blocked on an unreachable destination"
        st = exp.status()
        assert st["queue"] == 10 and st["dropped"] == 50 * 4 - 10
        assert st["state"] in ("down", "connecting") and st["reconnects"] == 0
    finally:
        exp.stop(0)


def test_decoded_snapshot_messages_are_valid():
    # sanity of what the exporter sends before any connection: snapshot then sync
    feed = Feed(ports=2)
    exp = DialoutExporter(_cfg(free_port(), insecure=True), TARGET)
    exp._store = feed.store
    msgs = [gnmi_pb2.SubscribeResponse.FromString(m) for m in exp._snapshot(sync=True)]
    assert msgs[-1].sync_response and all(m.HasField("update") for m in msgs[:-1])


# ---------------------------------------------------------------- end to end, real kernel


def test_snapshot_supersedes_counters_keeps_events_and_real_deletes():
    """Queued while down: counter changes (superseded by the snapshot), a state and deletes.
    A delete of a port that is back in the snapshot must not wipe it at the collector."""
    from agent.counters import SWTEL_ORIGIN, Container, StateUpdate
    from tests.gnmi_helpers import port_container

    feed = Feed(ports=2)  # swp1 and swp2 exist again in the store
    exp = DialoutExporter(_cfg(free_port(), insecure=True), TARGET)
    exp._store = feed.store
    exp.on_batch(feed.change([0, 1]))
    gone = Container(SWTEL_ORIGIN, "/interfaces/interface[name=swp9]/pfc")
    exp.on_delete(5, [port_container("swp1"), gone])  # swp1 was removed, then re-added
    exp.on_state([StateUpdate(6, Container(SWTEL_ORIGIN, "/interfaces/interface[name=swp2]"), "oper-status", "UP")])
    msgs = [gnmi_pb2.SubscribeResponse.FromString(m) for m in exp._snapshot(sync=True)]
    assert msgs[-1].sync_response
    assert sum(len(m.update.update) for m in msgs[:-1]) == len(feed.table)
    queued = [gnmi_pb2.SubscribeResponse.FromString(item[1]).update for item in exp._queue]
    assert exp.superseded == 1  # the counter message (one container changed)
    assert [paths.from_proto(d) for d in queued[0].delete] == [gone.path]  # swp1's delete removed
    assert queued[0].prefix.origin == SWTEL_ORIGIN
    assert queued[1].update[0].val.string_val == "UP"
    assert len(queued) == 2


def test_destinations_are_independent():
    """One destination down does not hold back the other; each counts its own drops."""
    port = free_port()
    col = _collector(port)
    feed = Feed(ports=4)
    live = DialoutExporter(_cfg(port, insecure=True, queue=100), TARGET)
    dead = DialoutExporter(_cfg(free_port(), insecure=True, queue=5), TARGET)
    for exp in (live, dead):
        exp.start(feed.store)
    try:
        assert col.wait_for(lambda c: _synced_streams(c) == 1, 15)
        for _ in range(10):
            batch = feed.change(range(len(feed.table)))
            live.on_batch(batch)
            dead.on_batch(batch)
            time.sleep(0.02)
        assert col.wait_for(lambda c: c.values(TARGET) == feed.expected(), 10)
        a, b = live.status(), dead.status()
        assert a["state"] == "connected" and a["dropped"] == 0
        assert b["state"] != "connected" and b["dropped"] == 10 * 4 - 5 and b["queue"] == 5
    finally:
        live.stop(1)
        dead.stop(0)
        col.stop(0)


class SlowCollector(Collector):
    """Takes 20 ms per message: the stream backs up into the agent's queue."""

    def _receive(self, stream, raw):
        time.sleep(0.02)
        super()._receive(stream, raw)


def test_slow_collector_overflow_heals_to_newest_values():
    port = free_port()
    # no BDP probing: the HTTP/2 window stays 64 KB, so backpressure reaches the agent soon
    col = SlowCollector(f"127.0.0.1:{port}", insecure=True, server_options=[("grpc.http2.bdp_probe", 0)]).start()
    feed = Feed(ports=8, leaves=100)  # ~2.5 KB per message, 8 per tick
    exp = DialoutExporter(_cfg(port, insecure=True, queue=8), TARGET)
    exp.start(feed.store)
    try:
        assert col.wait_for(lambda c: _synced_streams(c) == 1, 15)
        for _ in range(30):  # 160 messages/s offered, 50/s taken
            exp.on_batch(feed.change(range(len(feed.table))))
            time.sleep(0.05)  # wallclock: paces the offered load (160/s against 50/s taken)
        assert col.wait_for(lambda c: c.values(TARGET) == feed.expected(), 30), exp.status()
        st = exp.status()
        assert st["dropped"] > 0 and st["state"] == "connected" and st["reconnects"] == 0
        # values at the collector never went backwards
        for path in feed.table.paths:
            seen = [ln["value"] for ln in col.messages if ln.get("path") == path]
            assert seen == sorted(seen), path
    finally:
        exp.stop(1)
        col.stop(0)


class RejectingServer:
    """Accepts TCP (and HTTP/2) but rejects every RPC, counting the attempts: either it does not
    serve the method at all (UNIMPLEMENTED) or its handler refuses the credentials."""

    def __init__(self, port: int, reject: str):
        self.calls = 0
        self._lock = threading.Lock()
        server = self

        def refuse(_requests, context):
            context.abort(grpc.StatusCode.UNAUTHENTICATED, "bad username or password")

        class Handler(grpc.GenericRpcHandler):
            def service(self, details):
                with server._lock:
                    server.calls += 1
                if reject == "unimplemented":
                    return None
                return grpc.stream_stream_rpc_method_handler(refuse)

        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        self.server.add_generic_rpc_handlers((Handler(),))
        self.server.add_insecure_port(f"127.0.0.1:{port}")
        self.server.start()

    def stop(self) -> None:
        self.server.stop(0)


@pytest.mark.parametrize("reject,code", [("unimplemented", "UNIMPLEMENTED"),
                                         ("unauthenticated", "UNAUTHENTICATED")])
def test_collector_rejecting_rpc_backs_off_and_stays_down(reject, code):
    """Channel READY is not success: a collector that refuses the RPC must not reset the backoff
    or down_since_ns, so retries slow down and the health check turns unhealthy."""
    port = free_port()
    srv = RejectingServer(port, reject)
    feed = Feed(ports=1)
    exp = DialoutExporter(_cfg(port, insecure=True, username="u", password_file=None), TARGET)
    exp.log_limiter.period_s = 3600.0  # one rate-limit period, however long a loaded machine takes
    delays = record_retries(exp)
    down_since = exp.status()["down_since_ns"]
    states = set()
    with structlog.testing.capture_logs() as logs:
        exp.start(feed.store)
        deadline = time.monotonic() + 60
        while len(delays) < 5:  # five refused sessions: at least 6 s of backoff, past the grace
            st = exp.status()
            states.add(st["state"])
            assert st["down_since_ns"] == down_since, st  # never reset by a rejected session
            assert time.monotonic() < deadline, delays
            time.sleep(0.05)
        st = exp.status()
        problems = health_problems({"now_ns": time.time_ns(), "exporters": {"dialout:x": st}}, grace_s=3.0)
        exp.stop(0)
    srv.stop()
    # backoff 0.5, 1, 2, 4 s (+-20%), never reset by a refused session (a reset starts again
    # at 0.5 s): each wait longer than the one before, as chosen (not as timed)
    assert all(b > a for a, b in zip(delays, delays[1:], strict=False)), delays
    assert srv.calls >= 5, srv.calls
    assert states <= {"down", "connecting"}, states
    assert st["reconnects"] == 0 and st["state"] in ("down", "connecting")
    assert code in st["last_error"], st
    assert problems and "every dial-out destination has been down" in problems[0]
    assert not [e for e in logs if e["event"] == "destination connected"], logs
    downs = [e for e in logs if e["event"] == "destination down"]
    assert len(downs) == 1, downs  # identical failures: one warning per rate-limit period
    assert code in downs[0]["error"]
    assert ("protocol" if reject == "unimplemented" else "password_file") in downs[0]["hint"]


def test_bad_password_file_reported_retried_then_connects(tmp_path):
    """A password file that is not UTF-8 used to end the destination's thread silently."""
    port = free_port()
    col = _collector(port)
    pw = tmp_path / "pw"
    pw.write_bytes(b"\xff\xfes3cret\n")
    pw.chmod(0o600)  # the one secret reader refuses a file other users can read
    feed = Feed(ports=1)
    exp = DialoutExporter(_cfg(port, insecure=True, username="telemetry", password_file=str(pw)), TARGET)
    retries = record_retries(exp)
    try:
        with structlog.testing.capture_logs() as logs:
            exp.start(feed.store)
            wait_until(lambda: exp.status()["last_error"], 30, "the first attempt to fail")
            st = exp.status()
            assert st["last_error"] == f"password_file {pw}: not valid UTF-8 (byte 0)", st
            assert st["state"] in ("down", "connecting") and not col.streams
            tried = len(retries)
            wait_until(lambda: len(retries) > tried, 30, "the next attempt")  # it fails the same way
            assert exp.status()["last_error"] == st["last_error"]
            assert exp._thread.is_alive() and exp.status()["state"] != "connected"

            pw.write_text("s3cret\n")  # fixed: picked up by the next attempt
            assert col.wait_for(lambda c: _synced_streams(c) == 1, 15), exp.status()
            assert col.streams[0].metadata["password"] == "s3cret"
            assert _wait_state(exp, "connected", 5)

            # broken again and the stream ends: the same error is news again after a connection
            pw.write_bytes("pässword".encode())
            col.stop(0)
            deadline = time.monotonic() + 10
            while "printable ASCII" not in (exp.status()["last_error"] or "") and time.monotonic() < deadline:
                time.sleep(0.05)
            assert exp.status()["last_error"] == (f"password_file {pw}: printable ASCII only (gRPC metadata and "
                                                  "HTTP headers carry nothing else)")
            pw.write_bytes(b"\xff\xfes3cret\n")
            deadline = time.monotonic() + 10
            while "UTF-8" not in (exp.status()["last_error"] or "") and time.monotonic() < deadline:
                time.sleep(0.05)
            assert "not valid UTF-8" in exp.status()["last_error"]
            assert exp._thread.is_alive()
    finally:
        exp.stop(0)
        col.stop(0)
    utf8 = [e for e in logs if e["event"] == "destination down" and "UTF-8" in e["error"]]
    assert len(utf8) == 2, utf8  # within 10 s, but a connection in between lifts the rate limit
    assert all(str(pw) in e["error"] for e in utf8)


def test_unexpected_error_logged_and_retried():
    """Whatever a session raises, the destination's thread logs it, backs off and retries."""
    port = free_port()
    col = _collector(port)
    feed = Feed(ports=1)
    exp = DialoutExporter(_cfg(port, insecure=True), TARGET)
    opens = "_open_stream" if exp.status()["transport"] == "grpc-core" else "_channel"  # either transport's
    real_open = getattr(exp, opens)
    failures = [RuntimeError("injected fault"), KeyError("also injected")]

    def flaky_open(*args):
        if failures:
            raise failures.pop(0)
        return real_open(*args)

    setattr(exp, opens, flaky_open)
    try:
        with structlog.testing.capture_logs() as logs:
            exp.start(feed.store)
            assert col.wait_for(lambda c: _synced_streams(c) == 1, 15), exp.status()
            assert _wait_state(exp, "connected", 5)
    finally:
        exp.stop(0)
        col.stop(0)
    downs = [e for e in logs if e["event"] == "destination down"]
    assert [e["error"] for e in downs] == ["RuntimeError: injected fault", "KeyError: 'also injected'"]
    assert all(e["log_level"] == "error" and e["exc_info"] for e in downs)
    assert (exp.status()["last_error"], exp.status()["previous_error"]) == (None, "KeyError: 'also injected'")
