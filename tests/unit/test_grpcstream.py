"""agent._grpcstream: dial-out's transport on grpc's C core (built when libgrpc-dev is there),
against a grpcio server in this process: plaintext, mutual TLS, the server ending the call,
a cancel, bad input."""

from __future__ import annotations

import threading
from concurrent import futures

import grpc
import pytest

from tests.gnmi_helpers import make_pki

grpcstream = pytest.importorskip("agent._grpcstream")
METHOD = "/Nokia.SROS.DialoutTelemetry/Publish"


class Receiver:
    """Publish: an empty reply to each message; ``end_after`` messages, then ends the call
    with ``RESOURCE_EXHAUSTED`` (a collector refusing more)."""

    def __init__(self, tls=None, end_after: int | None = None) -> None:
        self.got: list[bytes] = []
        self.metadata: list[tuple[str, str]] = []
        self.changed = threading.Condition()

        def publish(requests, context):
            self.metadata = list(context.invocation_metadata())
            for raw in requests:
                with self.changed:
                    self.got.append(raw)
                    self.changed.notify_all()
                yield b""
                if end_after is not None and len(self.got) >= end_after:
                    context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, "enough")

        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
        self.server.add_generic_rpc_handlers([grpc.method_handlers_generic_handler(
            "Nokia.SROS.DialoutTelemetry", {"Publish": grpc.stream_stream_rpc_method_handler(publish)})])
        self.port = (self.server.add_secure_port("127.0.0.1:0", tls) if tls
                     else self.server.add_insecure_port("127.0.0.1:0"))
        self.server.start()

    def wait_for(self, n: int) -> list[bytes]:
        with self.changed:
            assert self.changed.wait_for(lambda: len(self.got) >= n, timeout=30)
            return list(self.got)


def until(stream, done, limit: int = 300):
    """stream.wait() until ``done(state)``: each wait returns at the stream's next change."""
    for _ in range(limit):
        state = stream.wait(0.1)
        if done(state):
            return state
    raise AssertionError(f"not reached: {stream.state()}")


def test_messages_arrive_in_order_with_the_metadata_and_replies_are_counted():
    rx = Receiver()
    try:
        s = grpcstream.Stream(f"127.0.0.1:{rx.port}", METHOD, [("username", "ops"), ("x-swtel", "1")])
        messages = [bytes([i]) * (1000 + i) for i in range(20)] + [b"\xff" * 300_000]
        s.send(messages[:5])
        s.send(messages[5:])
        assert rx.wait_for(len(messages)) == messages
        phase, sent, replies, waiting, code, details, connected = until(s, lambda st: st[2] == len(messages))
        assert (phase, sent, waiting, connected) == (grpcstream.READY, len(messages), 0, True)
        assert ("username", "ops") in rx.metadata and ("x-swtel", "1") in rx.metadata
        s.finish()  # half-close: the server's loop ends, the call ends OK
        phase, *_rest, code, details, connected = until(s, lambda st: st[0] == grpcstream.ENDED)
        assert code == grpc.StatusCode.OK.value[0] and connected
        assert s.send([b"late"]) == -1  # ended: nowhere to go
    finally:
        rx.server.stop(0)


def test_mutual_tls_with_a_server_name(tmp_path):
    pki = make_pki(tmp_path)
    creds = grpc.ssl_server_credentials([(pki.server_key.read_bytes(), pki.server_cert.read_bytes())],
                                        root_certificates=pki.ca.read_bytes(), require_client_auth=True)
    rx = Receiver(tls=creds)
    try:
        s = grpcstream.Stream(f"127.0.0.1:{rx.port}", METHOD, (), True, pki.ca.read_text(), pki.client_cert.read_text(),
                              pki.client_key.read_text(), "collector.test")
        s.send([b"over tls"])
        assert rx.wait_for(1) == [b"over tls"]
        assert until(s, lambda st: st[2] == 1)[0] == grpcstream.READY
        s.cancel()
        assert until(s, lambda st: st[0] == grpcstream.ENDED)[4] == grpc.StatusCode.CANCELLED.value[0]
        # a CA that did not sign the server's certificate: the call ends, nothing arrives
        bad = grpcstream.Stream(f"127.0.0.1:{rx.port}", METHOD, (), True, pki.wrong_ca.read_text(),
                                pki.client_cert.read_text(), pki.client_key.read_text(), "collector.test")
        bad.send([b"never"])
        phase, sent, _r, _w, code, details, connected = until(bad, lambda st: st[0] == grpcstream.ENDED)
        assert sent == 0 and code == grpc.StatusCode.UNAVAILABLE.value[0] and details and not connected
        assert rx.got == [b"over tls"]
    finally:
        rx.server.stop(0)


def test_the_collector_ending_the_call_is_seen_with_its_status():
    rx = Receiver(end_after=3)
    try:
        s = grpcstream.Stream(f"127.0.0.1:{rx.port}", METHOD)
        s.send([b"a", b"b", b"c"])
        phase, _sent, _r, waiting, code, details, _connected = until(s, lambda st: st[0] == grpcstream.ENDED)
        assert code == grpc.StatusCode.RESOURCE_EXHAUSTED.value[0] and details == "enough" and waiting == 0
        assert rx.wait_for(3) == [b"a", b"b", b"c"]
    finally:
        rx.server.stop(0)


def test_nobody_listening_ends_unavailable_and_bad_input_is_refused():
    with pytest.raises(ValueError, match="go together"):
        grpcstream.Stream("127.0.0.1:1", METHOD, (), True, "ca", "cert")
    with pytest.raises(ValueError, match="need tls=True"):
        grpcstream.Stream("127.0.0.1:1", METHOD, (), False, "ca")
    with pytest.raises(TypeError):
        grpcstream.Stream("127.0.0.1:1", METHOD, [("only-a-key",)])
    s = grpcstream.Stream("127.0.0.1:1", METHOD)  # port 1: refused
    with pytest.raises(TypeError):
        s.send(["text, not bytes"])
    s.send([b"x"])
    phase, sent, *_rest, code, details, connected = until(s, lambda st: st[0] == grpcstream.ENDED)
    assert sent == 0 and code == grpc.StatusCode.UNAVAILABLE.value[0] and not connected
