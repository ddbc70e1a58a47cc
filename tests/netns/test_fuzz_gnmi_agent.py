"""Hostile gNMI requests against a running agent reading veth ports: clear status codes for
random, huge and many requests (needs root)."""

from __future__ import annotations

import threading
import time

import grpc
import psutil
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pygnmi.spec.v080 import gnmi_pb2, gnmi_pb2_grpc

from tests.gnmi_helpers import free_port
from tests.namespaces import AgentProcess
from tests.unit.test_fuzz import BAD_CODES, encodings, modes, paths


@pytest.fixture(scope="module")
def gnmi_agent(tmp_path_factory):
    """A real agent (loopback counters only) with its gNMI server on 127.0.0.1.

    It runs in this namespace, reading only ``lo``: a gRPC client channel connects from
    grpc's own threads, which stay in the namespace grpc was first used in, so a server
    inside another namespace is not reliably reachable from a test process."""
    tmp = tmp_path_factory.mktemp("gnmi-fuzz")
    port = free_port()
    cfg = (
        "target: fuzz\ninterval: 100ms\n"
        "sources:\n  netdev: {interfaces: [lo], exclude: []}\n  ethtool: {enabled: false}\n"
        "  system: {enabled: false}\n"
        f"exporters:\n  server: {{listen: '127.0.0.1:{port}', insecure: true, max_rpcs_per_peer: 64}}\n"
        f"control: {{socket: {tmp / 'swtel.sock'}, group: null}}\n"
    )
    agent = AgentProcess(None, cfg, tmp)
    try:
        agent.wait_ready()
        channel = _connected_channel(port)
        yield agent, channel
        channel.close()
    finally:
        code = agent.stop()
        assert code == 0, agent.log.read_text()[-3000:]


def _connected_channel(port: int) -> grpc.Channel:
    ch = grpc.insecure_channel(f"127.0.0.1:{port}", options=[("grpc.max_send_message_length", 64 << 20),
                                                             ("grpc.max_receive_message_length", 64 << 20)])
    grpc.channel_ready_future(ch).result(timeout=15)
    return ch


def _code(fn):
    try:
        fn()
        return grpc.StatusCode.OK
    except grpc.RpcError as exc:
        return exc.code()


@pytest.mark.root
@pytest.mark.slow
@settings(max_examples=120, deadline=None, suppress_health_check=list(HealthCheck), database=None)
@given(kind=st.sampled_from(["cap", "get", "sub"]), prefix=st.none() | paths, path_list=st.lists(paths, max_size=4),
       encoding=encodings, gtype=st.sampled_from([0, 1, 2, 3, 9]), mode=modes, sub_mode=modes,
       interval=st.sampled_from([0, 1, 10**6, 10**8, 10**9, 2**63 - 1]), updates_only=st.booleans())
def test_gnmi_random_requests_get_clear_status(gnmi_agent, kind, prefix, path_list, encoding, gtype, mode,
                                               sub_mode, interval, updates_only):
    agent, channel = gnmi_agent
    stub = gnmi_pb2_grpc.gNMIStub(channel)
    if kind == "cap":
        code = _code(lambda: stub.Capabilities(gnmi_pb2.CapabilityRequest(), timeout=5))
    elif kind == "get":
        req = gnmi_pb2.GetRequest(path=path_list, type=gtype, encoding=encoding)
        if prefix is not None:
            req.prefix.CopyFrom(prefix)
        code = _code(lambda: stub.Get(req, timeout=5))
    else:
        sl = gnmi_pb2.SubscriptionList(mode=mode, encoding=encoding, updates_only=updates_only, subscription=[
            gnmi_pb2.Subscription(path=p, mode=sub_mode, sample_interval=interval) for p in path_list])
        if prefix is not None:
            sl.prefix.CopyFrom(prefix)
        code = _subscribe(stub, [gnmi_pb2.SubscribeRequest(subscribe=sl)])
    assert code not in BAD_CODES, code
    assert agent.proc.poll() is None


def _subscribe(stub, requests, read: int = 50, timeout: float = 3.0):
    """Send ``requests`` (then keep the stream open), read until sync or ``read`` responses."""
    done = threading.Event()

    def gen():
        yield from requests
        done.wait(timeout)

    call = stub.Subscribe(gen(), timeout=timeout)
    try:
        for n, resp in enumerate(call):
            if resp.sync_response or n >= read:
                break
        call.cancel()
        return grpc.StatusCode.OK
    except grpc.RpcError as exc:
        return exc.code()
    finally:
        done.set()


@pytest.mark.root
def test_gnmi_limits_huge_and_many(gnmi_agent):
    """Thousands of subscriptions in one request, a request past the message size limit,
    a Poll before a subscription, more streams than the server takes: clear codes, the
    agent up, its RSS back near where it was."""
    agent, channel = gnmi_agent
    stub = gnmi_pb2_grpc.gNMIStub(channel)
    proc = psutil.Process(agent.proc.pid)
    rss0 = proc.memory_info().rss
    any_path = gnmi_pb2.Path(elem=[gnmi_pb2.PathElem(name="interfaces"),
                                   gnmi_pb2.PathElem(name="interface", key={"name": "*"})])
    many = gnmi_pb2.SubscriptionList(mode=gnmi_pb2.SubscriptionList.ONCE, subscription=[
        gnmi_pb2.Subscription(path=any_path) for _ in range(5000)])
    assert _subscribe(stub, [gnmi_pb2.SubscribeRequest(subscribe=many)], timeout=20) not in BAD_CODES
    huge = gnmi_pb2.GetRequest(path=[gnmi_pb2.Path(elem=[gnmi_pb2.PathElem(name="x" * (8 << 20))])])
    assert _code(lambda: stub.Get(huge, timeout=10)) == grpc.StatusCode.RESOURCE_EXHAUSTED  # > 4 MiB
    poll_first = gnmi_pb2.SubscribeRequest(poll=gnmi_pb2.Poll())
    assert _subscribe(stub, [poll_first]) == grpc.StatusCode.INVALID_ARGUMENT
    assert _subscribe(stub, []) in (grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.DEADLINE_EXCEEDED)

    # more open STREAM subscriptions than the server's limit (32): the rest are refused
    stream = gnmi_pb2.SubscribeRequest(subscribe=gnmi_pb2.SubscriptionList(
        mode=gnmi_pb2.SubscriptionList.STREAM, subscription=[gnmi_pb2.Subscription(path=any_path)]))
    release = threading.Event()
    calls, codes = [], []

    def hold():
        yield stream
        release.wait(30)

    for _ in range(40):
        calls.append(stub.Subscribe(hold(), timeout=30))
    readers = []

    def first(call):
        try:
            next(iter(call))
            codes.append(grpc.StatusCode.OK)
        except grpc.RpcError as exc:
            codes.append(exc.code())

    for call in calls:
        t = threading.Thread(target=first, args=(call,))
        t.start()
        readers.append(t)
    for t in readers:
        t.join(20)
    release.set()
    for call in calls:
        call.cancel()
    assert codes.count(grpc.StatusCode.OK) <= 32 and grpc.StatusCode.RESOURCE_EXHAUSTED in codes, codes
    assert not set(codes) & BAD_CODES
    # all released: the server takes a new subscription and answers Capabilities
    deadline = time.monotonic() + 10
    while _subscribe(stub, [stream]) != grpc.StatusCode.OK and time.monotonic() < deadline:
        time.sleep(0.2)
    assert _code(lambda: stub.Capabilities(gnmi_pb2.CapabilityRequest(), timeout=5)) == grpc.StatusCode.OK
    assert agent.proc.poll() is None
    rss = proc.memory_info().rss
    assert rss < rss0 + 64 * 2**20, f"RSS {rss0 >> 20} -> {rss >> 20} MiB"
