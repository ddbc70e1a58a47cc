"""gRPC tunnel (openconfig grpctunnel), in-process: the agent's tunnel exporter against swtel's own
tunnel server, with pygnmi reaching the agent's gNMI service through the server's listener.

Wire format of the messages (field numbers, the target type as a string), config rules, plaintext
and mTLS, a refused registration retried, the server restarted (re-registration within the retry
interval), sessions and status. The tests with a real agent process, veth traffic and the Go
reference implementation are in test_tunnel_e2e.py and test_tunnel_interop.py.
"""

from __future__ import annotations

import time

import grpc
import pytest
from pygnmi.client import gNMIclient

from agent import config
from agent.config import ClientTls, ConfigError, Duration
from agent.exporters.tunnel import TunnelConfig, TunnelExporter
from agent.gnmi import tunnel_pb as pb
from agent.store import Store
from agent.tls import server_credentials
from agent.tools.tunnel_server import TunnelServer
from tests.gnmi_helpers import free_port, make_pki
from tests.helpers import record_retries
from tests.unit.test_server import Feed

TARGET = "leaf01"
IN_OCTETS = "/interfaces/interface[name=v0]/state/counters/in-octets"

# pygnmi's subscriber thread re-raises CANCELLED when its channel closes under a live STREAM.
pytestmark = pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")


def wait(predicate, timeout: float = 10.0, what: str = "condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        result = predicate()
        if result:
            return result
        time.sleep(0.02)
    raise AssertionError(f"timed out waiting for {what}")


# ---------------------------------------------------------------- messages


def test_wire_format_field_numbers_and_target_type_string():
    reg = pb.RegisterOp(target=pb.Target(op=pb.TARGET_ADD, target="leaf1", target_type=pb.GNMI_GNOI))
    # RegisterOp.target = 1 (message), Target.op = 1 (ADD = 1), .target = 3, .target_type = 4
    assert reg.SerializeToString() == bytes.fromhex("0a14" "0801" "1a056c65616631" "2209") + b"GNMI_GNOI"
    sess = pb.RegisterOp(session=pb.Session(tag=7, accept=True, target="x", target_type="SSH", error="e"))
    # RegisterOp.session = 2; Session.tag = 1, accept = 2, target = 3, target_type = 4, error = 5
    assert sess.SerializeToString() == bytes.fromhex("120f" "0807" "1001" "1a0178" "2203535348" "2a0165")
    sub = pb.RegisterOp(subscription=pb.Subscription(op=pb.SUBSCRIBE, accept=True, target_type="", error="e"))
    # RegisterOp.subscription = 3; Subscription.op = 1 (SUBCRIBE = 1), accept = 2, error = 4
    assert sub.SerializeToString() == bytes.fromhex("1a07" "0801" "1001" "2201" "65")
    # Data: tag = 1 (int32: negative tags are ten bytes), data = 2, close = 3
    assert pb.Data(tag=-1).SerializeToString() == bytes.fromhex("08ffffffffffffffffff01")
    assert pb.Data(data=b"ab", close=True).SerializeToString() == bytes.fromhex("12026162" "1801")
    back = pb.parse_register(sess.SerializeToString())
    assert back.WhichOneof("registration") == "session" and back.session.tag == 7
    assert pb.TARGET_TYPES["GNMI_GNOI"] == 9339 and pb.REGISTER == "/grpctunnel.Tunnel/Register"
    assert pb.TUNNEL == "/grpctunnel.Tunnel/Tunnel"


# ---------------------------------------------------------------- config


def tunnel_yaml(body: str) -> str:
    return "exporters:\n  tunnel:\n" + body


def test_config_defaults_and_nvue_keys():
    cfg = config.parse("target: leaf9\n" + tunnel_yaml(
        "    - {address: tunnel.example, port: 57401, insecure: true, insecure_remote: true}\n"
        "    - {name: dc2, address: '2001:db8::1', port: 443, target: sw9, retry-interval: 5s,\n"
        "       tls: {ca: null, server_name: tunnel.dc2}}\n"))
    first, second = cfg.exporters.tunnel
    assert (first.name, first.target, first.retry_interval, first.insecure) == ("tunnel0", None, 30.0, True)
    assert (second.name, second.target, second.retry_interval, second.tls.server_name) == (
        "dc2", "sw9", 5.0, "tunnel.dc2")
    assert TunnelExporter(first, cfg.target).target_name == "leaf9"  # default: the agent's target
    assert TunnelExporter(second, cfg.target).address == "[2001:db8::1]:443"


@pytest.mark.parametrize("body, fragment", [
    ("    - {address: a.example}\n", "exporters.tunnel[0].port: required"),
    ("    - {address: 'a.example:57401', port: 1}\n", "exporters.tunnel[0].address: the port goes in"),
    ("    - {port: 57401}\n", "exporters.tunnel[0].address: expected a host name"),
    ("    - {address: a, port: 1, retry_interval: 100ms}\n", "retry_interval: must be at least 1s"),
    ("    - {address: a, port: 1, target: ' '}\n", "exporters.tunnel[0].target: must not be empty"),
    ("    - {address: a, port: 1, tls: {ca: /nonexistent/ca.pem}}\n", "tls.ca: no such file"),
    ("    - {address: a, port: 1, name: x}\n    - {address: b, port: 1, name: x}\n", "duplicate tunnel"),
    ("    - {address: a, port: 1}\n    - {address: a, port: 1}\n", "registers the same target"),
    ("    - {address: a, port: 1, protocol: nokia}\n", "exporters.tunnel[0].protocol: unknown key"),
    ("    - {address: a, port: 1, outbox: 0}\n", "exporters.tunnel[0].outbox: must be at least 1 and at most 100000"),
])
def test_config_errors_name_their_path(body, fragment):
    with pytest.raises(ConfigError) as info:
        config.parse(tunnel_yaml(body))
    assert any(fragment in p for p in info.value.problems), info.value.problems


def test_config_at_most_ten_servers():
    ten = "".join(f"    - {{address: h{i}, port: 1, insecure: true, insecure_remote: true}}\n" for i in range(10))
    assert len(config.parse(tunnel_yaml(ten)).exporters.tunnel) == 10
    with pytest.raises(ConfigError) as info:
        config.parse(tunnel_yaml(ten + "    - {address: h10, port: 1, insecure: true, insecure_remote: true}\n"))
    assert "exporters.tunnel: at most 10 servers, got 11" in info.value.problems


def test_runner_builds_one_exporter_per_server_and_keeps_unchanged_ones():
    from agent import runner

    old = config.parse(tunnel_yaml("    - {name: a, address: h, port: 1, insecure: true, insecure_remote: true}\n"
                                   "    - {name: b, address: h, port: 2, insecure: true, insecure_remote: true}\n"))
    built = runner.build_exporters(old)
    assert {k: type(v).__name__ for k, v in built.items()} == {
        "tunnel:a": "TunnelExporter", "tunnel:b": "TunnelExporter"}
    new = config.parse(tunnel_yaml("    - {name: a, address: h, port: 1, insecure: true, insecure_remote: true}\n"
                                   "    - {name: b, address: h, port: 3, insecure: true, insecure_remote: true}\n"))
    assert runner._exporter_config(old, "tunnel:a") == runner._exporter_config(new, "tunnel:a")
    assert runner._exporter_config(old, "tunnel:b") != runner._exporter_config(new, "tunnel:b")


# ---------------------------------------------------------------- through swtel's own tunnel server


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    return make_pki(tmp_path_factory.mktemp("pki"))


class Setup:
    """A tunnel server, the agent's tunnel exporter registered with it, the Feed playing the engine."""

    def __init__(self, server_kw: dict | None = None, tunnel_kw: dict | None = None, port: int = 0):
        self.events: list[dict] = []
        self.server_kw = dict(server_kw or {})
        self.port = port or free_port()
        self.server = self.start_server()
        self.feed = Feed(Store())
        kw = {"name": "t1", "address": "127.0.0.1", "port": self.port, "insecure": True,
              "retry_interval": Duration(1.0), **(tunnel_kw or {})}
        self.exporter = TunnelExporter(TunnelConfig(**kw), TARGET, min_interval_s=0.05)
        self.exporter.start(self.feed.store)
        self.feed.server = self.exporter.local.gnmi  # the Feed hands changes to the tunnel's gNMI service

    def start_server(self) -> TunnelServer:
        return TunnelServer(f"127.0.0.1:{self.port}", on_event=self.events.append, **self.server_kw).start()

    def listener(self, target: str = TARGET) -> tuple[str, int]:
        listen = wait(lambda: self.server.targets().get(target, {}).get("listen"), what="registration")
        host, port = listen.rsplit(":", 1)
        return host, int(port)

    def client(self, **kw) -> gNMIclient:
        kw.setdefault("insecure", True)
        kw.setdefault("gnmi_timeout", 5)
        return gNMIclient(target=self.listener(), **kw)

    def close(self) -> None:
        self.exporter.stop(1.0)
        self.server.stop(0.2)


@pytest.fixture
def setup():
    s = Setup()
    yield s
    s.close()


def _leaves(notification: dict) -> list[tuple[str, object]]:
    """(leaf, value) of a pygnmi notification's updates, whether paths are relative or absolute."""
    return [(u["path"].rsplit("/", 1)[-1], u["val"]) for u in notification["update"]]


def check_gnmi(s: Setup) -> None:
    """Capabilities, Get of a counter and a STREAM subscription's snapshot and change, through the tunnel."""
    with s.client() as gc:
        caps = gc.capabilities()
        assert caps["gnmi_version"] == "0.8.0" and sorted(caps["supported_encodings"]) == ["json", "json_ietf", "proto"]
        got = gc.get(path=[IN_OCTETS], encoding="proto")
        (n,) = got["notification"]
        assert n["update"] == [{"path": "in-octets", "val": s.feed.value("v0", "in-octets")}]
        sub = gc.subscribe2(subscribe={"mode": "stream", "encoding": "proto", "subscription": [
            {"path": IN_OCTETS, "mode": "on_change"}]})
        first = sub.get_update(timeout=5)
        assert first["sync_response"] is True
        # per tick (the default) the update paths are absolute, the prefix origin and target only
        assert _leaves(first["update"]) == [("in-octets", s.feed.value("v0", "in-octets"))]
        status = s.exporter.status()
        assert (status["state"], status["sessions"], status["subscribers"]) == ("registered", 1, 1)
        ts = s.feed.bump({("v0", "in-octets"): 17, ("v1", "in-octets"): 3})
        change = sub.get_update(timeout=5)["update"]
        assert _leaves(change) == [("in-octets", s.feed.value("v0", "in-octets"))]
        assert change["timestamp"] == ts
        sub.close()


def test_plaintext_capabilities_get_subscribe_and_status(setup):
    check_gnmi(setup)
    status = setup.exporter.status()
    assert status["kind"] == "tunnel" and status["target"] == TARGET and status["target_type"] == "GNMI_GNOI"
    assert status["tls"] is False and status["sessions_total"] == 1 and status["last_error"] is None
    assert status["registered_since_ns"] and status["down_since_ns"] is None
    wait(lambda: setup.exporter.status()["sessions"] == 0, what="the session to end")
    added = [e for e in setup.events if e["event"] == "target-added"]
    assert [(e["target"], e["type"]) for e in added] == [(TARGET, "GNMI_GNOI")]


def test_mtls_with_a_test_ca(pki):
    creds = server_credentials(str(pki.server_cert), str(pki.server_key), str(pki.ca))
    s = Setup({"credentials": creds}, {"insecure": False, "tls": ClientTls(
        ca=str(pki.ca), cert=str(pki.client_cert), key=str(pki.client_key), server_name="collector.test")})
    try:
        check_gnmi(s)
        assert s.exporter.status()["tls"] is True
    finally:
        s.close()


def test_wrong_ca_is_refused_and_reported(pki):
    creds = server_credentials(str(pki.server_cert), str(pki.server_key))
    s = Setup({"credentials": creds}, {"insecure": False, "tls": ClientTls(ca=str(pki.wrong_ca))})
    try:
        status = wait(lambda: (st := s.exporter.status())["last_error"] and st, what="a TLS error")
        assert status["state"] in ("down", "connecting") and status["registered_since_ns"] is None
        assert "UNAVAILABLE" in status["last_error"]
        assert s.server.targets() == {}
    finally:
        s.close()


def test_server_restart_reregisters_within_retry_interval_and_gnmi_works_again():
    s = Setup(server_kw={"target_ports": {TARGET: free_port()}})
    try:
        check_gnmi(s)
        delays = record_retries(s.exporter)
        s.server.stop(0.2)
        wait(lambda: s.exporter.status()["state"] != "registered", what="the agent to notice")
        # down for three retries: the backoff (0.5 s, then doubling) has reached its 1 s cap
        wait(lambda: len(delays) >= 3, timeout=30, what="three retries")
        assert s.exporter.status()["last_error"]
        s.server = s.start_server()
        wait(lambda: s.exporter.status()["state"] == "registered", timeout=30, what="re-registration")
        # no wait between two tries exceeded the retry interval, jitter included: a restarted
        # server is found within retry_interval (the chosen delays, not the machine's speed)
        assert max(delays) <= 1.0, delays
        assert s.exporter.status()["reconnects"] == 1
        check_gnmi(s)  # same pinned listener port: the collector's config does not change
    finally:
        s.close()


def test_duplicate_target_is_refused_then_registers_when_the_first_goes():
    s = Setup()
    try:
        s.listener()
        twin = TunnelExporter(TunnelConfig(name="twin", address="127.0.0.1", port=s.port, insecure=True,
                                           retry_interval=Duration(1.0)), TARGET, min_interval_s=0.05)
        twin.start(s.feed.store)
        try:
            status = wait(lambda: (st := twin.status())["last_error"] and st, what="a refusal")
            assert "refused target 'leaf01'" in status["last_error"] and "already registered" in status["last_error"]
            assert status["state"] != "registered"
            first_owner = s.server.targets()[TARGET]["owner"]
            s.exporter.stop(1.0)
            wait(lambda: twin.status()["state"] == "registered", timeout=5, what="the twin to register")
            assert s.server.targets()[TARGET]["owner"] != first_owner
        finally:
            twin.stop(1.0)
    finally:
        s.close()


def test_a_server_that_never_answers_the_registration_is_dropped_and_retried(monkeypatch):
    from concurrent import futures

    from agent.exporters import tunnel

    monkeypatch.setattr(tunnel, "REGISTER_TIMEOUT_S", 0.5)
    calls = []

    def silent(requests, context):
        calls.append(next(requests))
        while context.is_active():
            time.sleep(0.05)
        return iter(())

    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4), handlers=[
        grpc.method_handlers_generic_handler("grpctunnel.Tunnel", {
            "Register": grpc.stream_stream_rpc_method_handler(silent, pb.parse_register, pb.serialize)})])
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    exporter = TunnelExporter(TunnelConfig(name="t", address="127.0.0.1", port=port, insecure=True,
                                           retry_interval=Duration(1.0)), TARGET)
    exporter.start(Store())
    try:
        status = wait(lambda: (st := exporter.status())["last_error"] and st, what="the timeout")
        assert status["last_error"] == "no answer to the registration of 'leaf01' in 0.5s"
        # a tunnel down longer than the grace makes the agent unhealthy (it used to be skipped)
        from agent.control.client import health_problems
        later = {"now_ns": status["down_since_ns"] + 8_000_000_000, "uptime_s": 20,
                 "exporters": {"tunnel:t": status}}
        assert any(p.startswith("exporter tunnel:t failing for 8s") for p in health_problems(later, 2.0))
        wait(lambda: len(calls) >= 2, what="a retry")
        assert calls[0].target.target == TARGET and calls[0].target.op == pb.TARGET_ADD
    finally:
        exporter.stop(1.0)
        server.stop(0)


def test_a_server_that_never_reads_finds_the_outbox_bounded_and_drops_counted():
    """A tunnel server that asks for sessions (for a target the agent does not have) and never
    reads the Register stream: gRPC sends nothing more once flow control stops it, and the
    refusals wait in the outbox, at most ``outbox`` of them; the oldest are dropped, counted
    in status, and the agent stays registered."""
    import threading
    from concurrent import futures

    done = threading.Event()

    def greedy(requests, context):
        next(requests)  # the target's registration: read, accepted, then nothing more is read
        yield pb.RegisterOp(target=pb.Target(op=pb.TARGET_UNKNOWN, accept=True, target=TARGET,
                                             target_type=pb.GNMI_GNOI))
        tag = 0
        while not done.is_set() and context.is_active():
            tag += 1
            yield pb.RegisterOp(session=pb.Session(tag=tag, accept=True, target="n" * 400 + str(tag),
                                                   target_type=pb.GNMI_GNOI))

    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4), handlers=[
        grpc.method_handlers_generic_handler("grpctunnel.Tunnel", {
            "Register": grpc.stream_stream_rpc_method_handler(greedy, pb.parse_register, pb.serialize)})])
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    exporter = TunnelExporter(TunnelConfig(name="t", address="127.0.0.1", port=port, insecure=True, outbox=50),
                              TARGET)
    exporter.start(Store())
    try:
        status = wait(lambda: (st := exporter.status())["outbox_dropped"] > 0 and st, 120, "the outbox to overflow")
        done.set()
        assert status["outbox"] <= status["outbox_max"] == 50, status
        assert status["sessions_refused"] > 50 and status["state"] == "registered", status
        assert len(exporter._outbox) <= 50
    finally:
        done.set()
        exporter.stop(1.0)
        server.stop(0)


def test_session_for_another_target_is_refused_on_register():
    """A session request naming a target the agent did not register is answered with an error."""
    s = Setup()
    try:
        s.listener()
        s.server._targets[("other", "GNMI_GNOI")] = s.server._targets[(TARGET, "GNMI_GNOI")]
        with pytest.raises(LookupError, match="no target 'other'"):
            s.server._session_to(("other", "GNMI_GNOI"), timeout=5)
        assert s.exporter.status()["sessions_refused"] == 1
        assert s.exporter.status()["state"] == "registered"
    finally:
        s.close()


def test_go_style_client_session_bridged_to_the_target(setup):
    """A tunnel client (as the Go tunnel-client does it) subscribes, asks for a session with a
    negative tag and gets the agent's gNMI service bridged to its own Tunnel stream."""
    import queue
    import socket
    import threading

    setup.listener()
    channel = grpc.insecure_channel(f"127.0.0.1:{setup.port}", options=[("grpc.use_local_subchannel_pool", 1)])
    outbox: queue.Queue = queue.Queue()

    def requests():
        yield pb.RegisterOp(subscription=pb.Subscription(op=pb.SUBSCRIBE, target_type="GNMI_GNOI"))
        while (item := outbox.get()) is not None:
            yield item

    reg = channel.stream_stream(pb.REGISTER, pb.serialize, pb.parse_register)(requests())
    try:
        seen = [next(reg), next(reg)]
        assert seen[0].target.op == pb.TARGET_ADD and seen[0].target.target == TARGET
        assert seen[1].subscription.accept and seen[1].subscription.target_type == "GNMI_GNOI"
        outbox.put(pb.RegisterOp(session=pb.Session(tag=-1, target=TARGET, target_type="GNMI_GNOI")))
        ack = next(reg).session
        assert (ack.tag, ack.accept) == (-1, True)
        # Serve pygnmi on a local socket and copy it into the client's Tunnel stream.
        lsock = socket.create_server(("127.0.0.1", 0))
        port = lsock.getsockname()[1]
        conn_box: list[socket.socket] = []

        def uplink():
            yield pb.Data(tag=-1)
            conn, _ = lsock.accept()
            conn_box.append(conn)
            while data := conn.recv(32768):
                yield pb.Data(data=data)
            yield pb.Data(close=True)

        tun = channel.stream_stream(pb.TUNNEL, pb.serialize, pb.parse_data)(uplink())

        def downlink():
            for frame in tun:
                if frame.close:
                    break
                wait(lambda: conn_box, what="pygnmi's connection")
                conn_box[0].sendall(frame.data)

        threading.Thread(target=downlink, daemon=True).start()
        with gNMIclient(target=("127.0.0.1", port), insecure=True, gnmi_timeout=5) as gc:
            got = gc.get(path=[IN_OCTETS], encoding="proto")
        assert got["notification"][0]["update"] == [{"path": "in-octets", "val": setup.feed.value("v0", "in-octets")}]
        tun.cancel()
        lsock.close()
    finally:
        outbox.put(None)
        reg.cancel()
        channel.close()


def test_stop_ends_sessions_and_removes_the_private_socket(setup):
    import os

    path = setup.exporter.local.path
    assert os.path.exists(path) and oct(os.stat(os.path.dirname(path)).st_mode & 0o777) == "0o700"
    with setup.client() as gc:
        gc.capabilities()
        assert setup.exporter.status()["sessions"] == 1
        setup.exporter.stop(1.0)
        assert setup.exporter.status()["sessions"] == 0 and setup.exporter.status()["state"] == "down"
    assert not os.path.exists(os.path.dirname(path))
    wait(lambda: TARGET not in setup.server.targets(), what="the target to go")



def test_a_pass_through_the_tunnel_is_one_notification_per_origin(setup):
    """The exporter hands the engine's pass hooks to its gNMI service: a pass of two batches
    and a state reaches a STREAM subscriber through the tunnel as one Notification (all of it
    OpenConfig's here), update paths absolute."""
    s = setup
    with s.client() as gc:
        sub = gc.subscribe2(subscribe={"mode": "stream", "encoding": "proto", "subscription": [
            {"path": "/interfaces/interface[name=v0]/state", "mode": "on_change"}]})
        assert sub.get_update(timeout=5)["sync_response"] is True
        s.exporter.open_pass()
        s.feed.bump({("v0", "in-octets"): 17})
        s.feed.bump({("v0", "out-octets"): 4})
        s.feed.set_oper("v0", "DOWN")
        s.exporter.close_pass()
        change = sub.get_update(timeout=5)["update"]
        got = {u["path"]: u["val"] for u in change["update"]}
        base = "interfaces/interface[name=v0]/state"
        assert got == {f"{base}/counters/in-octets": s.feed.value("v0", "in-octets"),
                       f"{base}/counters/out-octets": s.feed.value("v0", "out-octets"),
                       f"{base}/oper-status": "DOWN"}
        sub.close()
