"""`swtel tunnel-server` is bounded (issue 24, item 13): targets per Register stream and in
total, sessions at once, and what a target may be called and what type it may claim.

Each registered target costs the server a listening socket and a thread; 3,000 targets on one
stream used to open 3,013 fds and 3,013 threads, and empty, 100,000-character and made-up
names and types were accepted.
"""

from __future__ import annotations

import os
import queue
import socket
import threading
import time

import grpc
import pytest

from agent.gnmi import tunnel_pb as pb
from agent.tools import tunnel_server as ts
from agent.tools.tunnel_server import TunnelServer

pytestmark = pytest.mark.libs  # no backend code in its path: not in the pure-Python pass


class Peer:
    """One Register stream to the server, driven by hand: ``send`` ops, ``recv`` the answers."""

    def __init__(self, port: int):
        # a connection of its own (channels to one address share one otherwise): one peer each
        self.channel = grpc.insecure_channel(f"127.0.0.1:{port}", options=[("grpc.use_local_subchannel_pool", 1)])
        self.outbox: queue.Queue = queue.Queue()
        self.inbox: queue.Queue = queue.Queue()
        call = self.channel.stream_stream(pb.REGISTER, request_serializer=pb.serialize,
                                          response_deserializer=pb.parse_register)(self._requests())
        self.call = call
        threading.Thread(target=self._read, daemon=True).start()

    def _requests(self):
        while (item := self.outbox.get()) is not None:
            yield item

    def _read(self):
        try:
            for op in self.call:
                self.inbox.put(op)
        except grpc.RpcError:
            pass

    def send(self, **registration):
        self.outbox.put(pb.RegisterOp(**registration))

    def add(self, name: str, typ: str = "GNMI_GNOI"):
        self.send(target=pb.Target(op=pb.TARGET_ADD, target=name, target_type=typ))

    def recv(self, n: int = 1, timeout: float = 30.0) -> list:
        return [self.inbox.get(timeout=timeout) for _ in range(n)]

    def close(self):
        self.outbox.put(None)
        self.call.cancel()
        self.channel.close()


@pytest.fixture
def make():
    servers, peers = [], []

    def start(**kw):
        events: list[dict] = []
        srv = TunnelServer("127.0.0.1:0", on_event=events.append, **kw).start()
        srv.events = events
        servers.append(srv)
        return srv

    def peer(srv):
        p = Peer(srv.port)
        peers.append(p)
        return p

    yield start, peer
    for p in peers:
        p.close()
    for srv in servers:
        srv.stop(0.2)


def _fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def test_3000_targets_on_one_stream_are_capped(make):
    start, peer = make
    srv = start()
    p = peer(srv)
    p.add("warm-up")
    assert p.recv()[0].target.accept
    fds0, threads0 = _fds(), threading.active_count()
    for i in range(3000):
        p.add(f"t{i}")
    answers = p.recv(3000)
    accepted = [a for a in answers if a.target.accept]
    refused = [a for a in answers if a.target.error]
    assert len(accepted) == ts.MAX_TARGETS_PER_STREAM - 1 and len(refused) == 3000 - len(accepted)
    assert {a.target.error for a in refused} == {
        f"too many targets on this stream (limit {ts.MAX_TARGETS_PER_STREAM})"}
    assert len(srv.targets()) == ts.MAX_TARGETS_PER_STREAM
    # one listener and one accept thread per accepted target, nothing for the refused ones
    assert _fds() - fds0 <= ts.MAX_TARGETS_PER_STREAM + 8, (fds0, _fds())
    assert threading.active_count() - threads0 <= ts.MAX_TARGETS_PER_STREAM + 8
    # a target removed frees its place on the stream
    p.send(target=pb.Target(op=pb.TARGET_REMOVE, target="t0", target_type="GNMI_GNOI"))
    assert p.recv()[0].target.accept
    p.add("late")
    assert p.recv()[0].target.accept
    p.close()
    deadline = time.monotonic() + 10
    while srv.targets() and time.monotonic() < deadline:  # the stream's targets go with it
        time.sleep(0.05)
    assert srv.targets() == {}


def test_targets_in_total_are_capped(make):
    start, peer = make
    srv = start(max_targets=5, max_targets_per_stream=3)
    answers = []
    for k in range(3):
        p = peer(srv)
        for i in range(3):
            p.add(f"s{k}-{i}")
        answers += p.recv(3)
    assert sum(a.target.accept for a in answers) == 5
    errors = [a.target.error for a in answers if a.target.error]
    assert errors == ["too many targets registered on this server (limit 5)"] * 4
    assert sum(e["event"] == "target-refused" for e in srv.events) == 4


@pytest.mark.parametrize("name,typ,fragment", [
    ("", "GNMI_GNOI", "empty target name"),
    ("x" * 100_000, "GNMI_GNOI", "target name of 100000 characters (limit 255)"),
    ("x" * 256, "GNMI_GNOI", "(limit 255)"),
    ("leaf\x1b[2J", "GNMI_GNOI", "has control characters"),
    ("leaf\n1", "GNMI_GNOI", "has control characters"),
    ("leaf\x85", "GNMI_GNOI", "has control characters"),
    ("leaf1", "MADE_UP", "unknown target type 'MADE_UP'"),
    ("leaf1", "", "unknown target type ''"),
    ("leaf1", "UNKNOWN", "unknown target type 'UNKNOWN'"),
    ("leaf1", "Y" * 100_000, "unknown target type 'YYYY"),
])
def test_bad_names_and_types_are_refused(make, name, typ, fragment):
    start, peer = make
    srv = start()
    p = peer(srv)
    p.add(name, typ)
    (answer,) = p.recv()
    assert not answer.target.accept and fragment in answer.target.error, answer.target.error
    assert len(answer.target.error) < 400, "the peer's text is echoed bounded"
    assert len(answer.target.target) <= ts.MAX_NAME and len(answer.target.target_type) <= ts.MAX_NAME
    assert srv.targets() == {}
    (event,) = [e for e in srv.events if e["event"] == "target-refused"]
    assert len(event["target"]) < 100 and event["target"].isprintable()


@pytest.mark.parametrize("typ", sorted(ts.TARGET_TYPES))
def test_every_known_type_and_a_255_character_name_are_accepted(make, typ):
    start, peer = make
    srv = start(target_host=None)
    p = peer(srv)
    p.add("n" * 255, typ)
    p.add("leaf-1.example/é", typ)
    assert all(a.target.accept for a in p.recv(2))
    assert len(srv.targets()) == 2


def test_subscriptions_name_a_known_type_or_all(make):
    start, peer = make
    srv = start()
    p = peer(srv)
    p.send(subscription=pb.Subscription(op=pb.SUBSCRIBE, target_type="BOGUS\x1b"))
    (bad,) = p.recv()
    assert not bad.subscription.accept and "unknown target type 'BOGUS\\x1b'" in bad.subscription.error
    p.send(subscription=pb.Subscription(op=pb.SUBSCRIBE, target_type=""))
    (ok,) = p.recv()
    assert ok.subscription.accept


def test_sessions_at_once_are_capped(make):
    """A target that never opens the Tunnel streams it is asked for: local connections beyond
    the session limit are closed at once (no thread each), the others wait their timeout."""
    start, peer = make
    srv = start(max_sessions=2)
    p = peer(srv)
    p.add("leaf1")
    assert p.recv()[0].target.accept
    host, port = srv.targets()["leaf1"]["listen"].rsplit(":", 1)
    threads0 = threading.active_count()
    conns = [socket.create_connection((host, int(port)), timeout=5) for _ in range(6)]
    try:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            failed = [e for e in srv.events if e["event"] == "session-failed"]
            if len(failed) >= 4:
                break
            time.sleep(0.05)
        assert len(failed) == 4 and all("too many sessions (limit 2)" in e["error"] for e in failed)
        assert threading.active_count() - threads0 <= 2 + 2
        asked = p.recv(2)  # the two admitted connections became session requests to the target
        assert all(a.session.accept and a.session.tag > 0 for a in asked)
    finally:
        for c in conns:
            c.close()
