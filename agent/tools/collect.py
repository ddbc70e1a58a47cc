"""``swtel collect``: a gNMI dial-out collector for development, demos and tests.

Serves both Publish wire paths (bidirectional streams of raw bytes, no stubs):

- ``/Nokia.SROS.DialoutTelemetry/Publish``: replies an empty PublishResponse
  (zero bytes) per received message, as gnmic does;
- ``/gnmi.sonic.gNMIDialOut/Publish``: replies nothing until the stream ends.

Every update becomes one JSON line ``{"target", "path", "value", "ts", "sync"}``
(``path`` absolute, ``origin:`` in front unless OpenConfig; ``sync`` false while the
stream's initial snapshot is still arriving), deletes ``{"delete": true, ...}``,
a sync_response ``{"target", "sync": true}``. The latest value per path is kept
and optionally served to Prometheus. ``--incidents`` prints on stderr the incidents the
agents' events form by the LLDP neighbours they send (agent/control/incidents.py).
"""

from __future__ import annotations

import base64
import errno
import json
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable
from concurrent import futures
from dataclasses import dataclass, field
from typing import IO, Any

import grpc
from pygnmi.spec.v080 import gnmi_pb2

from agent import config, logs, tls
from agent.control.incidents import IncidentPrinter, StreamView
from agent.gnmi import paths
from agent.gnmi.encode import python_value
from agent.signals import StopSignals
from agent.tools.prometheus import MetricsServer

NOKIA_METHOD = "/Nokia.SROS.DialoutTelemetry/Publish"
SONIC_METHOD = "/gnmi.sonic.gNMIDialOut/Publish"

log = logs.get("collect")


class UsageError(ValueError):
    """A command-line value is wrong: the message names the option."""


def parse_address(option: str, value: str, allow_any_port: bool = True) -> tuple[str, int]:
    """``host:port`` by the config's rule (config.HostPort); port 0 (a free port) too when
    ``allow_any_port``. Raise :class:`UsageError` naming ``option`` otherwise."""
    text = value or ""
    if allow_any_port and text.endswith(":0"):
        text = text[:-2] + ":1"  # validate the host; the port 0 is fine
    try:
        hp = config.HostPort.parse(text)
    except ValueError as exc:
        raise UsageError(f"{option}: {exc}") from None
    return hp.host, 0 if text is not value else hp.port


def check_bindable(option: str, host: str, port: int) -> None:
    """Bind a TCP socket to host:port and let it go, to tell "address in use" and "not a
    local address" apart (gRPC 1.51 only says it could not bind)."""
    if port == 0:
        return
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as exc:
        raise UsageError(f"{option}: cannot resolve {host!r}: {exc.strerror}") from None
    family, _, _, _, addr = infos[0]
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as gRPC does
        try:
            probe.bind(addr)
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                raise UsageError(f"{option}: address in use: {host}:{port}") from None
            raise UsageError(f"{option}: cannot listen on {host}:{port}: {exc.strerror}") from None



def absolute(prefix: gnmi_pb2.Path, path: gnmi_pb2.Path) -> str:
    """Prefix + update path as one string, ``origin:`` in front unless OpenConfig or empty."""
    text = paths.join(prefix, path)
    origin = path.origin or prefix.origin
    return text if origin in ("", "openconfig") else f"{origin}:{text}"


def _json_default(value: Any) -> Any:
    if isinstance(value, bytes):
        return base64.b64encode(value).decode()
    return str(value)


@dataclass
class Stream:
    """One Publish stream as the collector saw it."""

    method: str
    metadata: dict[str, str]
    peer: str
    synced: bool = False
    messages: int = 0
    #: decoded SubscribeResponses in arrival order (only with keep_messages)
    responses: list[gnmi_pb2.SubscribeResponse] = field(default_factory=list)
    opened_ns: int = field(default_factory=time.time_ns)


class Collector:
    """In-process collector: ``start()``, then read ``latest``/``messages``/``streams``; ``stop()``."""

    def __init__(
        self,
        listen: str,
        *,
        insecure: bool = False,
        tls_cert: str | None = None,
        tls_key: str | None = None,
        tls_client_ca: str | None = None,
        output: IO[str] | None = None,
        prometheus: str | None = None,
        prometheus_names: str = "cumulus",
        keep_messages: bool = True,
        on_lines: Callable[[list[dict[str, Any]], int], None] | None = None,
        server_options: list[tuple[str, Any]] | None = None,
    ):
        self.listen = listen
        self.output = output
        self.keep_messages = keep_messages
        #: called with each message's JSON-line dicts and its receipt time (ns), e.g. to time it
        self.on_lines = on_lines
        #: (target, path) -> {"value", "ts"}
        self.latest: dict[tuple[str, str], dict[str, Any]] = {}
        self.messages: list[dict[str, Any]] = []
        self.streams: list[Stream] = []
        self.received = 0
        self._cond = threading.Condition()
        # Without so_reuseport 0 a second collector could silently share the port (gRPC sets it).
        self._server = grpc.server(futures.ThreadPoolExecutor(max_workers=32, thread_name_prefix="collect"),
                                   options=[("grpc.so_reuseport", 0), *(server_options or [])])
        self._server.add_generic_rpc_handlers([self._handler()])
        creds = None if insecure else tls.server_credentials(tls_cert, tls_key, tls_client_ca)
        try:
            port = self._server.add_insecure_port(listen) if creds is None else \
                self._server.add_secure_port(listen, creds)
        except RuntimeError:  # newer grpcio raises; 1.51 returns 0
            port = 0
        if not port:  # grpc 1.51 returns 0 instead of raising
            raise OSError(f"cannot listen on {listen}")
        self.port = port
        self.insecure = insecure
        self._metrics: MetricsServer | None = None
        if prometheus:
            host, _, mport = prometheus.rpartition(":")
            self._metrics = MetricsServer(host.strip("[]") or "0.0.0.0", int(mport), self.latest_triples,
                                          prometheus_names)

    # -- lifecycle
    def start(self) -> Collector:
        self._server.start()
        if self._metrics:
            self._metrics.start()
        log.info("collector listening", address=f"{self.listen.rpartition(':')[0]}:{self.port}",
                 tls=not self.insecure, prometheus=self._metrics.port if self._metrics else None)
        return self

    def stop(self, grace: float | None = None) -> None:
        """Stop serving; open streams are cancelled (the agent sees the collector go away)."""
        self._server.stop(grace).wait()
        if self._metrics:
            self._metrics.stop()

    @property
    def metrics_port(self) -> int | None:
        return self._metrics.port if self._metrics else None

    # -- views
    @property
    def metadata(self) -> list[dict[str, str]]:
        """Invocation metadata of every stream so far."""
        with self._cond:
            return [s.metadata for s in self.streams]

    def values(self, target: str | None = None) -> dict[str, Any]:
        """path -> latest value (of one target, or of all)."""
        with self._cond:
            return {p: e["value"] for (t, p), e in self.latest.items() if target in (None, t)}

    def keys(self) -> set[tuple[str, str]]:
        """(target, path) of every latest value: a copy taken under the lock, safe to iterate."""
        with self._cond:
            return set(self.latest)

    def latest_triples(self) -> list[tuple[str, str, Any]]:
        with self._cond:
            return [(t, p, e["value"]) for (t, p), e in self.latest.items()]

    def wait_for(self, predicate, timeout: float, every: float = 0.05) -> bool:
        """Wait until ``predicate(self)`` holds or ``timeout`` passes. The predicate runs under
        the lock every ``every`` seconds, not on each message: one that scans ``latest`` (a
        64-port switch's 16,000 values), re-run per message, kept the streams it waited on
        from being read (they need the lock) and timed out with the value long sent."""
        deadline = time.monotonic() + timeout
        while True:
            with self._cond:
                if predicate(self):
                    return True
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            time.sleep(min(left, every))

    # -- gRPC
    def _handler(self) -> grpc.GenericRpcHandler:
        collector = self

        class Handler(grpc.GenericRpcHandler):
            def service(self, details):
                if details.method == NOKIA_METHOD:
                    return grpc.stream_stream_rpc_method_handler(
                        lambda it, ctx: collector._publish(it, ctx, NOKIA_METHOD, reply=True))
                if details.method == SONIC_METHOD:
                    return grpc.stream_stream_rpc_method_handler(
                        lambda it, ctx: collector._publish(it, ctx, SONIC_METHOD, reply=False))
                return None

        return Handler()

    def _publish(self, requests, context, method: str, reply: bool):
        stream = Stream(method, {k: v for k, v in context.invocation_metadata() if isinstance(v, str)},
                        context.peer())
        with self._cond:
            self.streams.append(stream)
            self._cond.notify_all()
        log.info("stream opened", method=method, peer=stream.peer,
                 system_name=stream.metadata.get("system-name"),
                 subscription=stream.metadata.get("subscription-name"))
        try:
            for raw in requests:
                self._receive(stream, raw)
                if reply:
                    yield b""  # an empty PublishResponse
        except grpc.RpcError:
            pass
        log.info("stream closed", method=method, peer=stream.peer, messages=stream.messages)

    def _receive(self, stream: Stream, raw: bytes) -> None:
        rx_ns = time.time_ns()
        msg = gnmi_pb2.SubscribeResponse.FromString(raw)
        lines: list[dict[str, Any]] = []
        with self._cond:
            stream.messages += 1
            self.received += 1
            if self.keep_messages:
                stream.responses.append(msg)
            if msg.HasField("update"):
                n = msg.update
                target = n.prefix.target or stream.metadata.get("system-name", "")
                for d in n.delete:
                    path = absolute(n.prefix, d)
                    lines.append({"target": target, "path": path, "delete": True,
                                  "ts": n.timestamp, "sync": stream.synced})
                    self._forget(target, path)
                for u in n.update:
                    path = absolute(n.prefix, u.path)
                    value = python_value(u.val)
                    lines.append({"target": target, "path": path, "value": value,
                                  "ts": n.timestamp, "sync": stream.synced})
                    self.latest[(target, path)] = {"value": value, "ts": n.timestamp}
            elif msg.sync_response:
                stream.synced = True
                lines.append({"target": stream.metadata.get("system-name", ""), "sync": True})
            if self.keep_messages:
                self.messages.extend(lines)
            self._cond.notify_all()
        if self.on_lines is not None and lines:
            self.on_lines(lines, rx_ns)
        if self.output is not None and lines:
            self.output.write("".join(json.dumps(line, default=_json_default) + "\n" for line in lines))
            self.output.flush()

    def _forget(self, target: str, path: str) -> None:
        below = path.rstrip("/") + "/"
        for key in [k for k in self.latest if k[0] == target and (k[1] == path or k[1].startswith(below))]:
            del self.latest[key]


def _configure_logging() -> None:
    # stdout carries the JSON lines; logs go to stderr, in the agent's format.
    logs.configure("info", "kv", stream=sys.stderr)


def _usage(message: str) -> int:
    print(f"swtel collect: {message}", file=sys.stderr)
    return 2


def collect_main(args) -> int:
    _configure_logging()
    if not args.insecure and not (args.tls_cert and args.tls_key):
        return _usage("--tls-cert and --tls-key are required unless --insecure")
    try:
        host, port = parse_address("--listen", args.listen)
        check_bindable("--listen", host, port)
        if args.prometheus:
            mhost, mport = parse_address("--prometheus", args.prometheus)
            check_bindable("--prometheus", mhost, mport)
    except UsageError as exc:
        return _usage(str(exc))
    try:
        out: IO[str] = sys.stdout if args.output in (None, "-") else open(args.output, "a", encoding="utf-8")  # noqa: SIM115
    except OSError as exc:
        return _usage(f"--output: cannot open {args.output!r}: {exc.strerror}")
    stop = StopSignals(signal.SIGTERM, signal.SIGINT)  # handlers that take no lock (agent/signals.py)
    # --incidents: the agents' events grouped by their LLDP neighbours, on stderr (stdout may hold the lines)
    printer = IncidentPrinter(StreamView()) if getattr(args, "incidents", False) else None
    try:
        collector = Collector(
            args.listen, insecure=args.insecure, tls_cert=args.tls_cert, tls_key=args.tls_key,
            tls_client_ca=args.tls_client_ca, output=out, prometheus=args.prometheus,
            prometheus_names=args.prometheus_names,
            keep_messages=False, on_lines=printer.view.on_lines if printer is not None else None,
        ).start()
    except (OSError, tls.TlsError, RuntimeError, ValueError) as exc:
        print(f"swtel collect: {exc}", file=sys.stderr)
        if out is not sys.stdout:
            out.close()
        return 2
    deadline = None if args.duration is None else time.monotonic() + args.duration
    while not stop.is_set() and (deadline is None or time.monotonic() < deadline):
        stop.wait(0.2 if deadline is None else max(0.0, min(0.2, deadline - time.monotonic())))
        for line in printer.update() if printer is not None else ():
            print(line, file=sys.stderr, flush=True)
    collector.stop(grace=1.0)
    for line in printer.update() if printer is not None else ():  # what came as the streams ended
        print(line, file=sys.stderr, flush=True)
    log.info("collector stopped", messages=collector.received, streams=len(collector.streams))
    if out is not sys.stdout:
        out.close()
    return 0
