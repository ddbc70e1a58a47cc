"""Logs stay within their rate limit and never carry raw control characters (issue 24, items 9, 10).

Rate limiters are keyed by the kind of event, never by text a peer controls: a tunnel server
asking for 500 sessions, or a peer answering every connection with different random bytes,
gives one log line per period, not one per tag or per wording. Values a peer or a port name
supplies are escaped in both log formats.
"""

from __future__ import annotations

import io
import json
import os
import queue
import socket
import threading
import time
from concurrent import futures

import grpc
import pytest
import structlog

from agent import logs
from agent.config import Duration, HostPort
from agent.exporters.dialout import DialoutConfig, DialoutExporter
from agent.exporters.tunnel import TunnelConfig, TunnelExporter
from agent.gnmi import tunnel_pb as pb
from agent.store import Store
from tests.helpers import wait_until

TARGET = "leaf01"
HOSTILE = "swp1\x1b]0;owned\x07\x1b[2J\x1b[H\r\nlevel=error event=forged\x9b31m\x85\x7f\x00\u2028"


def _raw_controls(text: str) -> list[str]:
    return [c for c in text if ord(c) < 0x20 or 0x7F <= ord(c) <= 0x9F or c in "\u2028\u2029"]


# ---------------------------------------------------------------- escaping


@pytest.mark.parametrize("fmt", ["kv", "json"])
def test_control_characters_in_values_are_escaped(fmt):
    """A port name with escape sequences (set the window title, clear the screen, a forged
    second line, C1 CSI, NEL, DEL, NUL, LINE SEPARATOR) reaches the log line escaped."""
    out = io.StringIO()
    logs.configure("info", fmt, stream=out)
    try:
        logs.get("engine").warning("port \x1b[31mseen", interface=HOSTILE, names=[HOSTILE, "swp2"],
                                   error=ValueError(HOSTILE))
    finally:
        logs.configure("info", "kv")
    text = out.getvalue()
    assert text.endswith("\n") and text.count("\n") == 1, "one event, one line"
    line = text[:-1]
    assert not _raw_controls(line), [hex(ord(c)) for c in _raw_controls(line)]
    if fmt == "json":
        assert json.loads(line)["interface"] == HOSTILE  # escaped, not lost
    else:
        assert "\\x1b]0;owned\\x07\\x1b[2J" in line and "\\x9b31m\\x85\\x7f\\x00\\u2028" in line
        assert "\\r\\nlevel=error event=forged" in line


def test_kv_plain_values_stay_unquoted():
    assert logs._kv_value("swp1") == "swp1" and logs._kv_value("é") == "é"
    assert logs._kv_value('a "b"\\') == '"a \\"b\\"\\\\"'
    assert logs._kv_value("\x1b") == '"\\x1b"'


def test_kind_ignores_the_details():
    a = "UNAVAILABLE: failed to connect; last error: got frame type 22"
    b = "UNAVAILABLE: failed to connect; last error: got frame type 226"
    assert logs.kind(a) == logs.kind(b) == "UNAVAILABLE"
    assert logs.kind("ConnectionRefusedError: [Errno 111] refused") == "ConnectionRefusedError"
    assert logs.kind("too many sessions (limit 32)") == logs.kind("too many sessions (limit 64)")
    assert len(logs.kind("x" * 100_000)) == 160
    # several words before the colon: up to the second one, so different problems stay apart
    utf8, ascii_ = "password_file /etc/pw: not valid UTF-8 (byte 0)", "password_file /etc/pw: printable ASCII only"
    assert logs.kind(utf8) != logs.kind(ascii_)
    assert logs.kind(utf8) == logs.kind("password_file /etc/pw: not valid UTF-8 (byte 7)")
    assert logs.kind("TLS setup: no such file: /x") == "TLS setup: no such file"


# ---------------------------------------------------------------- a tunnel server asking for 500 sessions


def test_500_refused_sessions_log_one_warning():
    """A tunnel server that asks for 500 sessions, each with its own tag and made-up target:
    every one is refused on the stream (counted), and the log gets one warning, not 500."""
    sent: queue.Queue = queue.Queue()
    answers: list = []

    def drain(requests):
        try:
            answers.extend(requests)
        except grpc.RpcError:
            pass  # the stream ends with the test

    def register(requests, context):
        first = next(requests)
        threading.Thread(target=drain, args=(requests,), daemon=True).start()
        yield pb.RegisterOp(target=pb.Target(accept=True, target=first.target.target,
                                             target_type=first.target.target_type))
        for tag in range(1, 501):
            yield pb.RegisterOp(session=pb.Session(tag=tag, accept=True, target=f"ghost-{tag}",
                                                   target_type="GNMI_GNOI"))
        sent.put(True)
        while context.is_active():
            time.sleep(0.05)

    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4), handlers=[
        grpc.method_handlers_generic_handler("grpctunnel.Tunnel", {
            "Register": grpc.stream_stream_rpc_method_handler(register, pb.parse_register, pb.serialize)})])
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    exporter = TunnelExporter(TunnelConfig(name="t", address="127.0.0.1", port=port, insecure=True,
                                           retry_interval=Duration(1.0)), TARGET)
    with structlog.testing.capture_logs() as captured:
        exporter.start(Store())
        try:
            sent.get(timeout=15)
            wait_until(lambda: exporter.status()["sessions_refused"] == 500, 15, "500 refusals")
            wait_until(lambda: sum(1 for a in answers if a.session.error) == 500, 15, "500 errors on the stream")
        finally:
            exporter.stop(1.0)
            server.stop(0)
    refused = [e for e in captured if e["event"] == "tunnel session refused"]
    assert len(refused) == 1, [e.get("tag") for e in refused]
    assert "ghost-" in refused[0]["reason"]


# ---------------------------------------------------------------- a peer answering with random bytes


@pytest.fixture
def random_peer():
    """A TCP peer that answers every connection with different random bytes."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(16)
    connections = []

    def serve():
        while True:
            try:
                conn, _ = srv.accept()
            except OSError:
                return
            connections.append(1)
            try:
                conn.sendall(os.urandom(4096))
                time.sleep(0.05)
            except OSError:
                pass
            conn.close()

    threading.Thread(target=serve, daemon=True).start()
    yield srv.getsockname()[1], connections
    srv.close()


def test_random_bytes_peer_logs_once_per_period(random_peer):
    """Tunnel and dial-out retrying against a peer whose every answer fails differently
    ("... got frame type 22", "... 226", ...): one warning each per rate-limit period, while
    their last_error keeps the newest wording."""
    port, connections = random_peer
    tunnel = TunnelExporter(TunnelConfig(name="t", address="127.0.0.1", port=port, insecure=True,
                                         retry_interval=Duration(1.0)), TARGET)
    dialout = DialoutExporter(DialoutConfig(name="d", address=HostPort(f"127.0.0.1:{port}"),
                                            insecure=True), TARGET)
    errors: set[str] = set()
    with structlog.testing.capture_logs() as captured:
        tunnel.start(Store())
        dialout.start(Store())
        try:
            deadline = time.monotonic() + 6
            while time.monotonic() < deadline:
                errors.update(str(x.status()["last_error"]) for x in (tunnel, dialout))
                time.sleep(0.05)
        finally:
            tunnel.stop(1.0)
            dialout.stop(1.0)
    # (current grpcio words each failure differently, "got frame type N"; Debian's 1.51 says
    # "Failed parsing HTTP/2" every time: either way one line per kind, as below)
    assert len(connections) >= 5 and errors - {"None"}, (connections, errors)
    down = [e for e in captured if e["event"] in ("tunnel server down", "destination down")]
    assert sorted(e["event"] for e in down) == ["destination down", "tunnel server down"], down


def test_dialout_log_keys_are_kinds():
    """Fifty differently-worded failures of one kind: one line; another kind: its own line."""
    exp = DialoutExporter(DialoutConfig(name="d", address=HostPort("127.0.0.1:9"), insecure=True), TARGET)
    with structlog.testing.capture_logs() as captured:
        for i in range(50):
            exp._log_down(f"UNAVAILABLE: Failed parsing HTTP/2 (got frame type {i})", True, 1.0, None)
        exp._log_down("TLS setup: no such file", False, 1.0, None)
    assert [e["event"] for e in captured] == ["destination down", "destination down"]
    assert len(exp._log_keys) == 2
