"""Bounds on what clients of the gNMI dial-in server can hold (issue 33, item 4): a Subscribe
must send its first request within ``first_request_timeout``; RPCs per client address and
Subscribe streams in total are capped from the stream's start, each refusal a
RESOURCE_EXHAUSTED naming its limit. Synchronisation is by events and conditions, never
by sleeping."""

from __future__ import annotations

import threading

import grpc
import pytest
from pygnmi.spec.v080 import gnmi_pb2, gnmi_pb2_grpc

from agent import config
from agent.config import ConfigError, Duration, HostPort
from agent.exporters.server import GnmiServer, ServerConfig, _Slots
from agent.store import Store
from tests.helpers import wait_until

pytestmark = pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")
EXHAUSTED = grpc.StatusCode.RESOURCE_EXHAUSTED


def _server(**kw) -> GnmiServer:
    srv = GnmiServer(ServerConfig(listen=HostPort("127.0.0.1:0"), insecure=True, **kw), "leaf01")
    srv.start(Store())
    return srv


class Idle:
    """A Subscribe stream that sends nothing until told to (or ever)."""

    def __init__(self, srv: GnmiServer, first: gnmi_pb2.SubscribeRequest | None = None):
        self.go = threading.Event()
        self.closed = threading.Event()
        self.more: list[gnmi_pb2.SubscribeRequest] = []
        self.first = first
        self.channel = grpc.insecure_channel(f"127.0.0.1:{srv.port}")
        self.call = gnmi_pb2_grpc.gNMIStub(self.channel).Subscribe(self._requests(), timeout=30)

    def _requests(self):
        if self.first is not None:
            yield self.first
        while not self.go.wait(30):
            pass
        yield from self.more
        # then keep the stream open (no half-close) until close(): a client that has sent its
        # requests is still subscribed, as a collector is
        self.closed.wait(30)

    def outcome(self) -> tuple[grpc.StatusCode, str]:
        try:
            for _ in self.call:
                pass
        except grpc.RpcError as exc:
            return exc.code(), exc.details()
        return grpc.StatusCode.OK, ""

    def close(self) -> None:
        self.call.cancel()
        self.go.set()
        self.closed.set()
        self.channel.close()


def _capabilities(srv: GnmiServer) -> tuple[grpc.StatusCode, str]:
    with grpc.insecure_channel(f"127.0.0.1:{srv.port}") as ch:
        try:
            gnmi_pb2_grpc.gNMIStub(ch).Capabilities(gnmi_pb2.CapabilityRequest(), timeout=10)
        except grpc.RpcError as exc:
            return exc.code(), exc.details()
    return grpc.StatusCode.OK, ""


def _taken(srv: GnmiServer) -> int:
    return srv.slots._total


def _poll_list() -> gnmi_pb2.SubscribeRequest:
    return gnmi_pb2.SubscribeRequest(subscribe=gnmi_pb2.SubscriptionList(
        mode=gnmi_pb2.SubscriptionList.POLL, encoding=gnmi_pb2.PROTO,
        subscription=[gnmi_pb2.Subscription(path=gnmi_pb2.Path(elem=[gnmi_pb2.PathElem(name="interfaces")]))]))


def test_a_subscribe_without_its_first_request_is_ended_and_its_slot_freed():
    srv = _server(first_request_timeout=Duration(0.2), max_subscribers=1)
    idle = Idle(srv)
    try:
        assert idle.outcome() == (grpc.StatusCode.DEADLINE_EXCEEDED,
                                  "no SubscribeRequest within 200ms of the stream's start (first_request_timeout)")
        wait_until(lambda: _taken(srv) == 0, what="the slot given back")
        # the only subscriber slot is free again: a stream that sends its list is served
        ok = Idle(srv, _poll_list())
        try:
            wait_until(lambda: srv.status()["subscribers"] == 1, what="the subscription")
        finally:
            ok.close()
    finally:
        idle.close()
        srv.stop(1)


def test_a_subscribe_that_sent_its_list_outlives_the_first_request_deadline():
    # long enough for a loaded machine's client to send its list after opening the stream
    srv = _server(first_request_timeout=Duration(3.0))
    stream = Idle(srv, _poll_list())
    try:
        wait_until(lambda: srv.status()["subscribers"] == 1, what="the subscription")
        # a later deadline on the same watchdog: when it fires, the stream's own (earlier) one has
        # come due and been disarmed, or this stream would be gone
        passed = threading.Event()
        srv.deadlines.arm(3.5, passed.set)
        assert passed.wait(30)
        stream.more = [gnmi_pb2.SubscribeRequest(poll=gnmi_pb2.Poll())]
        stream.go.set()
        replies = [next(stream.call) for _ in range(1)]
        assert replies[-1].sync_response  # an empty store: the Poll's answer is the sync alone
        assert srv.status()["subscribers"] == 1
    finally:
        stream.close()
        srv.stop(1)


def test_rpcs_per_client_address_are_capped_and_released():
    srv = _server(max_rpcs_per_peer=2, first_request_timeout=Duration(60.0))
    idles = [Idle(srv), Idle(srv)]
    try:
        wait_until(lambda: _taken(srv) == 2, what="two streams holding their slots")
        assert _capabilities(srv) == (EXHAUSTED, "too many concurrent RPCs from 127.0.0.1 (limit 2 per client "
                                                 "address, max_rpcs_per_peer)")
        third = Idle(srv)
        assert third.outcome() == (EXHAUSTED, "too many concurrent RPCs from 127.0.0.1 (limit 2 per client "
                                              "address, max_rpcs_per_peer)")
        assert srv.status()["refused_limits"] == 2
        assert "max_rpcs_per_peer" in srv.status()["last_error"]
        idles.pop().close()  # a client going away frees its slot at once
        wait_until(lambda: _taken(srv) == 1, what="the slot given back")
        assert _capabilities(srv) == (grpc.StatusCode.OK, "")
    finally:
        for idle in idles:
            idle.close()
        srv.stop(1)


def test_subscribe_streams_are_capped_from_their_start_and_unary_calls_still_served():
    """Streams that never send their list count against max_subscribers (status shows them
    as not yet subscribed), and the spare workers still answer Capabilities and Get."""
    srv = _server(max_subscribers=2, max_rpcs_per_peer=100, first_request_timeout=Duration(60.0))
    idles = [Idle(srv), Idle(srv)]
    try:
        wait_until(lambda: _taken(srv) == 2, what="two streams holding their slots")
        extra = Idle(srv)
        assert extra.outcome() == (EXHAUSTED, "too many subscriptions (limit 2, max_subscribers)")
        assert _capabilities(srv) == (grpc.StatusCode.OK, "")
    finally:
        for idle in idles:
            idle.close()
        srv.stop(1)


def test_slots_total_cap():
    slots = _Slots(per_peer=10, streams=1, total=2)
    assert slots.take("a", stream=True) is None
    assert slots.take("b", stream=True) == "too many subscriptions (limit 1, max_subscribers)"
    assert slots.take("b", stream=False) is None
    assert slots.take("c", stream=False) == "too many concurrent RPCs (limit 2)"
    slots.give("a", stream=True)
    assert slots.take("c", stream=True) is None and slots.refused == 2


@pytest.mark.parametrize("key,value,message", [
    ("max_subscribers", 0, "must be 1 to 1024, got 0"),
    ("max_subscribers", 5000, "must be 1 to 1024, got 5000"),
    ("max_rpcs_per_peer", 0, "must be 1 to 10000, got 0"),
    ("first_request_timeout", "10ms", "must be 100ms to 5m, got 10ms"),
    ("max_requests_per_second", 0, "must be 0.1 to 10000, got 0"),
    ("first_request_timeout", "6m", "must be 100ms to 5m, got 360s"),
])
def test_limits_are_validated(key, value, message):
    with pytest.raises(ConfigError) as info:
        config.parse(f"exporters:\n  server: {{listen: '127.0.0.1:50051', insecure: true, {key}: {value}}}\n")
    assert info.value.problems == [f"exporters.server.{key}: {message}"]


class Clock:
    def __init__(self) -> None:
        self.now = 50.0

    def __call__(self) -> float:
        return self.now


def test_get_and_poll_share_a_rate_per_client_address():
    """A token bucket per address on the server's (here the test's) clock: two at once, then one
    per half second; Poll draws on the same bucket, and past it the POLL stream ends."""
    clock = Clock()
    srv = GnmiServer(ServerConfig(listen=HostPort("127.0.0.1:0"), insecure=True, max_requests_per_second=2.0),
                     "leaf01", clock=clock)
    srv.start(Store())
    limit = "too many Get and Poll requests from 127.0.0.1 (limit 2 per second, max_requests_per_second)"
    channel = grpc.insecure_channel(f"127.0.0.1:{srv.port}")
    stub = gnmi_pb2_grpc.gNMIStub(channel)

    def get() -> grpc.StatusCode:
        try:
            stub.Get(gnmi_pb2.GetRequest(path=[gnmi_pb2.Path(elem=[gnmi_pb2.PathElem(name="interfaces")])]),
                     timeout=10)
        except grpc.RpcError as exc:
            return exc.code() if exc.code() != EXHAUSTED else exc.details()
        return grpc.StatusCode.OK

    try:
        # an empty store answers NOT_FOUND: past the rate check, which is what is asked here
        assert [get(), get(), get()] == [grpc.StatusCode.NOT_FOUND, grpc.StatusCode.NOT_FOUND, limit]
        clock.now += 0.5
        assert [get(), get()] == [grpc.StatusCode.NOT_FOUND, limit]
        assert _capabilities(srv) == (grpc.StatusCode.OK, "")  # Capabilities is not rated
        clock.now += 1.0  # two tokens again
        stream = Idle(srv, _poll_list())
        try:
            wait_until(lambda: srv.status()["subscribers"] == 1, what="the subscription")
            stream.more = [gnmi_pb2.SubscribeRequest(poll=gnmi_pb2.Poll())] * 3
            stream.go.set()
            assert next(stream.call).sync_response and next(stream.call).sync_response
            assert stream.outcome() == (EXHAUSTED, limit)
        finally:
            stream.close()
        assert srv.status()["refused_limits"] == 3
    finally:
        channel.close()
        srv.stop(1)


def test_a_get_and_a_poll_wait_their_turn_to_read_then_are_refused(monkeypatch):
    """Whole-tree reads are rendered one at a time (get.RENDERS_AT_ONCE): a Get or a Poll that
    does not get its turn within TURN_WAIT_S is RESOURCE_EXHAUSTED, a clear 'server busy'."""
    from agent.gnmi import get as gnmi_get

    monkeypatch.setattr(gnmi_get, "TURN_WAIT_S", 0.05)
    monkeypatch.setattr("agent.gnmi.subscribe.TURN_WAIT_S", 0.05)
    srv = _server()
    channel = grpc.insecure_channel(f"127.0.0.1:{srv.port}")
    stub = gnmi_pb2_grpc.gNMIStub(channel)
    request = gnmi_pb2.GetRequest(path=[gnmi_pb2.Path(elem=[gnmi_pb2.PathElem(name="interfaces")])])
    try:
        with gnmi_get.render_turn(10):  # another client's read, in progress
            with pytest.raises(grpc.RpcError) as refused:
                stub.Get(request, timeout=10)
            assert refused.value.code() == EXHAUSTED and "server busy" in refused.value.details()
            stream = Idle(srv, _poll_list())
            try:
                stream.more = [gnmi_pb2.SubscribeRequest(poll=gnmi_pb2.Poll())]
                stream.go.set()
                code, details = stream.outcome()
                assert code == EXHAUSTED and "server busy" in details
            finally:
                stream.close()
        # the turn is free again: the Get is read (an empty store: NOT_FOUND, past the turn)
        with pytest.raises(grpc.RpcError) as answered:
            stub.Get(request, timeout=10)
        assert answered.value.code() == grpc.StatusCode.NOT_FOUND
    finally:
        channel.close()
        srv.stop(1)


def test_turns_to_read_go_in_the_order_asked():
    """A freed turn goes straight to the longest waiter: a client asking again at once (a Get
    loop) never takes it first, so Polls and streams waiting are served in their turn."""
    from agent.gnmi.get import _Turns

    turns = _Turns(1)
    assert turns.take(1)
    order: list[str] = []
    release = threading.Event()

    def client(name: str) -> None:
        if turns.take(30):
            order.append(name)
            release.wait(30)
            turns.give()

    first = threading.Thread(target=client, args=("first",), daemon=True)
    first.start()
    wait_until(lambda: len(turns._waiting) == 1, what="the first waiter")
    second = threading.Thread(target=client, args=("second",), daemon=True)
    second.start()
    wait_until(lambda: len(turns._waiting) == 2, what="the second waiter")
    turns.give()
    assert not turns.take(0.05)  # handed over: asking again at once does not take it
    assert len(turns._waiting) == 1  # the one that gave up left the queue
    release.set()
    first.join(30)
    second.join(30)
    assert order == ["first", "second"]
    assert turns.take(1)  # free again
