"""Local peers for every networked exporter at once: a dial-out collector (agent/tools/collect.py),
a tunnel server (agent/tools/tunnel_server.py), an OTLP receiver (tests/otlp_receiver.py) and a
remote-write endpoint (a small HTTP server answering 204), all on loopback. What an agent needs
to reach them is :meth:`Peers.exporters_yaml`; tests/unit/test_stop.py and bench/bench_stop.py
start agents against them.
"""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from agent.tools.collect import Collector
from agent.tools.tunnel_server import TunnelServer
from tests.otlp_receiver import Receiver as OtlpReceiver

#: the kinds of exporter an agent started against Peers has, as its status names them
KINDS = ("dialout", "tunnel", "otlp", "remote_write")


class RemoteWriteReceiver:
    """Accepts every remote-write POST (204) and counts them; the body is not parsed."""

    def __init__(self) -> None:
        self.requests = 0
        owner = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:  # noqa: N802 - http.server's naming
                self.rfile.read(int(self.headers.get("Content-Length", 0)))
                owner.requests += 1
                self.send_response(204)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True, name="rw-receiver")
        self._thread.start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


class Peers:
    """The four peers, started; :meth:`stop` ends them all."""

    def __init__(self) -> None:
        self.collector = Collector("127.0.0.1:0", insecure=True, keep_messages=False).start()
        self.tunnel = TunnelServer("127.0.0.1:0", target_host=None).start()
        self.otlp = OtlpReceiver("127.0.0.1:0", names=()).start()  # counts requests, keeps no point
        self.remote_write = RemoteWriteReceiver()

    def exporters_yaml(self, indent: str = "  ") -> str:
        """The lines of an ``exporters:`` section (without its header) that reach every peer,
        each exporting every 100 ms so that it is proven connected soon."""
        lines = [
            f"dialout: [{{name: col, address: '127.0.0.1:{self.collector.port}', insecure: true}}]",
            f"tunnel: [{{name: tun, address: 127.0.0.1, port: {self.tunnel.port}, insecure: true, "
            "retry_interval: 1s}]",
            f"otlp: {{endpoint: '127.0.0.1:{self.otlp.port}', insecure: true, interval: 100ms}}",
            f"remote_write: [{{name: rw, url: 'http://127.0.0.1:{self.remote_write.port}/api/v1/write', "
            "interval: 100ms}]",
        ]
        return "".join(f"{indent}{line}\n" for line in lines)

    def stop(self) -> None:
        self.collector.stop(0)
        self.tunnel.stop(0)
        self.otlp.stop()
        self.remote_write.stop()


def all_connected(status: dict) -> bool:
    """Every exporter of the four kinds in ``status`` (``swtel status --json``) is up, and
    dial-out's collector has proven it accepts the stream."""
    up = {"dialout": "connected", "tunnel": "registered", "otlp": "connected", "remote_write": "connected"}
    exporters = status.get("exporters", {}).values()
    kinds = {e.get("kind"): e.get("state") for e in exporters}
    return all(kinds.get(k) == up[k] for k in KINDS)
