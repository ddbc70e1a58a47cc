"""gRPC tunnel dial-out (``exporters.tunnel[]``): the openconfig grpctunnel protocol, switch side.

This is how Cumulus NVUE dials out (``nv set system grpc-tunnel server ...``):
the switch is a tunnel *client*. It connects to a tunnel server, registers its
target (type ``GNMI_GNOI``) on a ``Register`` stream, and the server asks for a
session whenever a collector wants to reach the target. Each session is one
``Tunnel`` stream on the same connection, carrying the bytes of one TCP-like
connection to the agent's gNMI service: the collector's gRPC/HTTP2 runs end to
end through it, so Capabilities, Get and Subscribe behave exactly as on the
dial-in server (``exporters.server``), which need not be configured.

That service is the dial-in server's own servicer, served in-process on a UNIX
socket in a private (0700) temporary directory: each tunnel session is copied
to and from one connection to it. Inside the tunnel the gNMI service is
plaintext without authentication; the tunnel's TLS (CA, mTLS, server name)
protects the connection to the tunnel server, which decides who reaches the
target.

One :class:`TunnelExporter` per configured server, each with its own thread:
connect, register, serve sessions; on any failure (server gone, registration
refused) retry with backoff from 0.5 s doubling up to ``retry_interval``.
The exchange follows the Go reference implementation (tunnel/tunnel.go):

* ``RegisterOp{target{op: ADD, target, target_type}}``; the reply
  ``target{accept: true}`` registers, ``target{error}`` refuses (retried);
* ``session{tag > 0, accept: true}`` from the server asks for a session: open a
  ``Tunnel`` stream whose first frame is ``Data{tag}``, then ``Data{data}`` both
  ways, ``Data{close: true}`` (or the end of the stream) ends it; a session that
  cannot be served is refused with ``session{tag, error}`` on Register.
"""

from __future__ import annotations

import os
import socket
import threading
import time
from collections.abc import Iterator
from concurrent import futures
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from agent import logs, tls
from agent.config import ClientTls, Duration, HostPort, setting
from agent.exporters import server as gnmi_server
from agent.exporters.base import Exporter, check_plaintext, check_tls, lazy_imports, register
from agent.exporters.sender import BoundedQueue, ReconnectingSender, grpc_channel, rpc_error

if TYPE_CHECKING:
    from agent.counters import Batch, Container, StateUpdate

log = logs.get("tunnel")

# gRPC, the tunnel's messages and its socket directory's tools (shutil brings bz2 and lzma):
# imported when a tunnel is built (base.lazy_imports)
grpc: Any = None
pb: Any = None
shutil: Any = None
tempfile: Any = None
_load = lazy_imports(globals(), grpc="grpc", pb="agent.gnmi.tunnel_pb", shutil="shutil", tempfile="tempfile")

BACKOFF_MIN_S = 0.5
CHUNK = 32 * 1024  # bytes per Data frame, as the Go implementation reads
MAX_SESSIONS = 32  # concurrent tunnel sessions per server (each is one gNMI client connection)
MAX_OUTBOX = 100_000
REGISTER_TIMEOUT_S = 15.0  # a server that neither accepts nor refuses the target by then is dropped


class LocalGnmi:
    """The agent's gNMI service (the dial-in server's servicer) on a private UNIX socket.

    It is a Listener like :class:`~agent.exporters.server.GnmiServer`: the engine's
    changes reach its subscribers through ``on_batch``/``on_state``/``on_delete``.
    """

    def __init__(self, target: str, min_interval_s: float, max_subscribers: int = 32,
                 notifications: str = "per-tick"):
        # The dial-in server's object holds the subscribers, the Store and the target;
        # only its gRPC listener is replaced by the UNIX socket below.
        self.gnmi = gnmi_server.GnmiServer(
            gnmi_server.ServerConfig(listen=HostPort("127.0.0.1:50051"), insecure=True,
                                     notifications=notifications), target,
            min_interval_s=min_interval_s, max_subscribers=max_subscribers)
        # every RPC comes from one peer here, the tunnel server (its sessions are capped there)
        self.gnmi.slots.per_peer = self.gnmi.slots.total
        self.path = ""
        self._dir = ""
        self._grpc: grpc.Server | None = None

    def start(self, store: Any) -> None:
        self.gnmi.store = store
        self._dir = tempfile.mkdtemp(prefix="swtel-tunnel-")  # 0700: only the agent's user
        self.path = os.path.join(self._dir, "gnmi.sock")
        workers = self.gnmi.max_subscribers + gnmi_server._SPARE_WORKERS
        server = grpc.server(
            futures.ThreadPoolExecutor(max_workers=workers, thread_name_prefix="tunnel-gnmi"),
            handlers=[gnmi_server._handlers(gnmi_server._Servicer(self.gnmi), self.gnmi)],
            maximum_concurrent_rpcs=workers,
        )
        try:
            port = server.add_insecure_port(f"unix:{self.path}")
        except RuntimeError:  # newer grpcio raises; 1.51 returns 0
            port = 0
        if not port:
            shutil.rmtree(self._dir, ignore_errors=True)
            raise RuntimeError(f"tunnel: cannot serve gNMI on {self.path}")
        server.start()
        self._grpc = server
        self.gnmi._state = "listening"

    def connect(self) -> socket.socket:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.connect(self.path)
        except OSError:
            sock.close()
            raise
        return sock

    def stop(self, timeout: float) -> None:
        self.gnmi.stop(0)  # closes the subscribers
        if self._grpc is not None:
            self._grpc.stop(grace=timeout).wait(timeout)
            self._grpc = None
        if self._dir:
            shutil.rmtree(self._dir, ignore_errors=True)


_END = object()  # the Register stream's outbox: the connection is over


class _Refused(Exception):
    """The tunnel server refused the target's registration, or did not answer it."""


class _Pipe:
    """One tunnel session: a Tunnel stream copied to and from one UNIX socket connection."""

    def __init__(self, sock: socket.socket, tag: int):
        self.sock = sock
        self.tag = tag
        self.lock = threading.Condition()
        self.closed = False  # the socket is being shut down: no more reads
        self.in_recv = False
        self.remote_closed = False  # the far end sent close: do not send ours

    def uplink(self) -> Iterator[Any]:
        """What the agent sends: the tag, then what the gNMI service writes, then close."""
        yield pb.Data(tag=self.tag)
        while True:
            with self.lock:
                if self.closed:
                    return
                self.in_recv = True
            try:
                data = self.sock.recv(CHUNK)
            except OSError:
                data = b""
            finally:
                with self.lock:
                    self.in_recv = False
                    self.lock.notify_all()
            if not data:
                if not self.remote_closed:
                    yield pb.Data(close=True)
                return
            yield pb.Data(data=data)

    def close(self) -> None:
        """Stop both directions, then close the socket once no thread reads it."""
        with self.lock:
            if self.closed:
                return
            self.closed = True
            try:
                self.sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            deadline = time.monotonic() + 2.0
            while self.in_recv and time.monotonic() < deadline:
                self.lock.wait(0.1)
        self.sock.close()


MAX_TUNNELS = 10  # as NVUE's grpc-tunnel


@dataclass
class TunnelConfig:
    """One ``exporters.tunnel[]``: a gRPC tunnel server (openconfig grpctunnel) to register
    with, as NVUE's ``system grpc-tunnel server <name>``; carries the agent's gNMI service."""

    name: str = setting("", type="string", shown="`tunnel<N>`", doc="unique name, shown in status and logs")
    address: str = setting("", type="host name or IP", shown="required", doc=(
        "the tunnel server (NVUE `address`); the port goes in `port`"))  # host name or IP address
    port: int = setting(0, type="integer 1–65535", shown="required", doc="the tunnel server's port (NVUE `port`)")
    target: str | None = setting(None, type="string or null", shown="`null` (the agent's `target`)",
                                 doc="target name to register (NVUE `target-name`)")  # None: the agent's
    retry_interval: Duration = setting(Duration(30.0), type="duration, 1s–24h", doc=(
        "longest wait between connection attempts (NVUE `retry-interval`); retries start at 0.5 s and "
        "double up to it"))
    insecure: bool = setting(False, doc="plaintext gRPC to the tunnel server; TLS unless this is `true`")
    insecure_remote: bool = setting(False, doc=(
        "plaintext (`insecure: true`) to a host other than loopback (127.0.0.0/8, `::1`, `localhost`) is "
        "refused unless this is `true`; the tunnel carries the agent's gNMI service"))
    tls: ClientTls = setting(factory=ClientTls, sub={
        "ca": {"doc": "CA that signed the tunnel server's certificate (NVUE `ca-certificate`)"},
        "server_name": {"shown": "`null` (the address)",
                        "doc": "name to verify in the tunnel server's certificate"}})
    outbox: int = setting(1000, type=f"integer, 1–{MAX_OUTBOX}", doc=(
        "messages (session refusals) waiting to go to the tunnel server on the Register stream; a "
        "server that stops reading while it asks for sessions finds the oldest dropped and counted "
        "(`outbox_dropped` in status), the agent's memory bounded (each message at most ~0.5 KB)"))
    notifications: str = setting(
        "per-tick", type="`per-tick` \\| `per-container`", choices=("per-container", "per-tick"), doc=(
            "STREAM subscriptions through the tunnel, as `exporters.server.notifications`: each tick's "
            "changes in one Notification per origin, or one per container"))


@register
class TunnelExporter(ReconnectingSender, Exporter):
    """The Listener for one ``exporters.tunnel[]`` server."""

    kind = "tunnel"
    up_state = "registered"  # proven up: the server accepted the target
    config_name = "tunnel"
    config_class = TunnelConfig
    many = True
    doc_type, doc_default = f"list (at most {MAX_TUNNELS})", "`[]`"
    doc = ("gRPC tunnel servers (openconfig grpctunnel, as NVUE's `system grpc-tunnel server`): the agent "
           "registers a `GNMI_GNOI` target with each and serves its gNMI service (Capabilities, Get, "
           "Subscribe) through the tunnel, with or without `exporters.server`; see [tunnel.md](tunnel.md)")

    @classmethod
    def check(cls, section: list[TunnelConfig], where: str, problems: list[str], cfg) -> None:
        if len(section) > MAX_TUNNELS:
            problems.append(f"{where}: at most {MAX_TUNNELS} servers, got {len(section)}")
        names: set[str] = set()
        seen: set[tuple[str, int, str | None]] = set()
        for i, t in enumerate(section):
            item = f"{where}[{i}]"
            if not t.name:
                t.name = f"tunnel{i}"
            if t.name in names:
                problems.append(f"{item}.name: duplicate tunnel server name {t.name!r}")
            names.add(t.name)
            host = t.address.strip()
            if not host or any(c.isspace() for c in host) or "/" in host:
                problems.append(f"{item}.address: expected a host name or IP address, got {t.address!r}")
            elif host.startswith("[") or (host.count(":") == 1 and host.rpartition(":")[2].isdigit()):
                problems.append(f"{item}.address: the port goes in {item}.port, got {t.address!r}")
            if not 0 < t.port < 65536:
                problems.append(f"{item}.port: required, 1-65535, got {t.port}")
            if t.target is not None and not t.target.strip():
                problems.append(f"{item}.target: must not be empty (null: the agent's target)")
            if t.retry_interval < 1:
                problems.append(f"{item}.retry_interval: must be at least 1s, got {t.retry_interval}")
            key = (host, t.port, t.target)
            if key in seen:
                problems.append(f"{item}: registers the same target with {host}:{t.port} twice")
            seen.add(key)
            if not 1 <= t.outbox <= MAX_OUTBOX:
                problems.append(f"{item}.outbox: must be at least 1 and at most {MAX_OUTBOX}, got {t.outbox}")
            check_tls(problems, item, t.insecure, t.tls)
            check_plaintext(problems, f"{item}.address",
                            what="tunnel (insecure: true), which carries the gNMI service,",
                            host=host, plaintext=t.insecure, opt_in=t.insecure_remote)

    @classmethod
    def for_destination(cls, dest: TunnelConfig, cfg) -> TunnelExporter:
        tunnel = cls(dest, cfg.target, min_interval_s=cfg.min_interval())  # the sample check's bound
        tunnel.log_limiter.period_s = float(cfg.log.rate_limit)
        return tunnel

    @classmethod
    def built_from(cls, key: str, cfg) -> object:
        return (*super().built_from(key, cfg), cfg.min_interval())

    @classmethod
    def shares_resources(cls, key: str, old, new) -> bool:
        """A tunnel of the same name holds its session with the server."""
        return True

    def __init__(self, cfg: TunnelConfig, target: str, min_interval_s: float = 0.1) -> None:
        _load()
        # retry_interval is NVUE's longest wait: jitter included
        super().__init__(log, BACKOFF_MIN_S, float(cfg.retry_interval), cap_backoff=True)
        self.cfg = cfg
        self.name = cfg.name
        self.target_name = cfg.target or target
        self.address = f"[{cfg.address}]:{cfg.port}" if ":" in cfg.address else f"{cfg.address}:{cfg.port}"
        self.retry_interval = float(cfg.retry_interval)
        self.local = LocalGnmi(target, min_interval_s, notifications=cfg.notifications)
        self._lock = threading.Lock()
        self._channel: grpc.Channel | None = None
        self._register_call: Any = None
        self._pipes: set[_Pipe] = set()
        # status (the rest: ReconnectingSender; its connects are registrations)
        self.sessions_total = 0
        self.sessions_refused = 0
        self.registered_since_ns: int | None = None
        self._outbox: BoundedQueue[Any] | None = None  # the current connection's
        self.outbox_dropped = 0  # of every connection

    # ------------------------------------------------------------ Listener
    def start(self, store: Any) -> None:
        if self.cfg.insecure:
            log.warning("plaintext gRPC tunnel (insecure: true): gNMI reachable unencrypted",
                        tunnel=self.name, address=self.address)
        try:
            self.local.start(store)
        except RuntimeError as exc:
            self.state, self.last_error = "failed", str(exc)
            raise
        self._start_thread(f"tunnel-{self.name}")

    def open_pass(self) -> None:
        self.local.gnmi.open_pass()

    def close_pass(self) -> None:
        self.local.gnmi.close_pass()

    def on_batch(self, batch: Batch) -> None:
        self.local.gnmi.on_batch(batch)

    def on_state(self, updates: list[StateUpdate]) -> None:
        self.local.gnmi.on_state(updates)

    def on_delete(self, ts_ns: int, containers: list[Container]) -> None:
        self.local.gnmi.on_delete(ts_ns, containers)

    def stop(self, timeout: float) -> None:
        """Hang up the registration and every session, then stop the local gNMI service. A
        tunnel queues nothing of its own: its subscribers are dial-in clients, closed here, and
        each gets a fresh snapshot when it reconnects, so nothing is waited for."""
        started = self._thread is not None
        if started:
            self._stop_plan(0, True, timeout, why_nothing="nothing queued (dial-in sessions are closed)")
        self._stopping.set()
        self._hang_up()
        if self._thread is not None:
            self._thread.join(max(timeout, 0.1) + 1.0)
        # the service's RPCs end with their sessions: its grace passes only while one finishes
        self.local.stop(min(timeout, 1.0))
        self.state = "down"
        if started:
            self._stop_done(0)

    def status(self) -> dict[str, Any]:
        gnmi = self.local.gnmi.status()
        with self._lock:
            active = len(self._pipes)
        return {
            "name": self.name,
            "kind": "tunnel",
            "state": self.state,
            "address": self.address,
            "target": self.target_name,
            "target_type": pb.GNMI_GNOI,
            "tls": not self.cfg.insecure,
            "sessions": active,
            "sessions_total": self.sessions_total,
            "sessions_refused": self.sessions_refused,
            "outbox": len(outbox) if (outbox := self._outbox) is not None else 0,
            "outbox_max": self.cfg.outbox,
            "outbox_dropped": self.outbox_dropped,
            "subscribers": gnmi["subscribers"],
            "sent": gnmi["sent"],
            "dropped": gnmi["dropped"],
            "reconnects": self.reconnects,
            "retry_interval_s": self.retry_interval,
            "registered_since_ns": self.registered_since_ns,
            "down_since_ns": self.down_since_ns,
            "last_error": self.last_error,
            "previous_error": self.previous_error,  # the outage before the current connection
        }

    # ------------------------------------------------------------ connection loop
    def _channel_for(self) -> grpc.Channel:
        options: list[tuple[str, Any]] = [
            # Its own connection: the server keys a client by its peer address, and the
            # Tunnel streams must arrive on the connection that registered.
            ("grpc.use_local_subchannel_pool", 1),
            ("grpc.keepalive_time_ms", 310_000),  # no more often than Go servers allow
            ("grpc.keepalive_timeout_ms", 20_000),
            ("grpc.initial_reconnect_backoff_ms", 500),
            ("grpc.max_reconnect_backoff_ms", int(self.retry_interval * 1000)),
        ]
        return grpc_channel(self.address, self.cfg.insecure, self.cfg.tls, options)

    def _attempt(self) -> str:
        """Connect, register, serve sessions (ReconnectingSender retries); why it ended."""
        try:
            self._connection()
            return "tunnel server closed the Register stream"
        except _Refused as exc:
            return str(exc)
        except tls.TlsError as exc:
            return f"TLS setup: {exc}"
        except grpc.RpcError as exc:
            return rpc_error(exc)
        except Exception as exc:  # a bug: logged with its traceback here, then retried
            self.log_limiter.log(log, "error", ("bug", type(exc).__name__), "tunnel session failed",
                                 tunnel=self.name, exc_info=exc)
            return f"{type(exc).__name__}: {exc}"
        finally:
            self._hang_up()

    def _went_down(self, error: str, delay: float, unexpected: Exception | None) -> None:
        self.registered_since_ns = None
        self._log_outage("warning", ("down", logs.kind(error)), "tunnel server down",
                         tunnel=self.name, address=self.address, error=error, retry_in_s=round(delay, 2))

    def _forget_logs(self) -> None:
        # Unlike the base, every limit goes, the sessions' too (refused, failed): whatever
        # follows a new registration is news.
        self.log_limiter = logs.RateLimiter(self.log_limiter.period_s)
        self._log_keys.clear()

    def _hang_up(self) -> None:
        """End the Register stream, every session and the connection."""
        with self._lock:
            call, channel, pipes = self._register_call, self._channel, list(self._pipes)
            self._register_call = self._channel = None
        if call is not None:
            call.cancel()
        for pipe in pipes:
            pipe.close()
        if channel is not None:
            channel.close()

    def _connection(self) -> None:
        """Connect, register, serve sessions until the Register stream ends."""
        channel = self._channel_for()
        # Bounded: gRPC takes the next message only once the last is sent, so a server that
        # stops reading (flow control) while it asks for sessions would grow this for ever.
        outbox: BoundedQueue[Any] = BoundedQueue(self.cfg.outbox)
        self._outbox = outbox

        def requests() -> Iterator[Any]:
            yield pb.RegisterOp(target=pb.Target(op=pb.TARGET_ADD, target=self.target_name,
                                                 target_type=pb.GNMI_GNOI))
            while True:
                item = outbox.take(60.0)
                if item is _END:
                    return
                if item is not None:
                    yield item

        call = channel.stream_stream(pb.REGISTER, request_serializer=pb.serialize,
                                     response_deserializer=pb.parse_register)(requests())
        with self._lock:
            if self._stopping.is_set():
                call.cancel()
                channel.close()
                return
            self._channel, self._register_call = channel, call
        registered = False
        unanswered = threading.Timer(REGISTER_TIMEOUT_S, self._unanswered, args=(call,))
        unanswered.daemon = True
        unanswered.start()
        try:
            for op in call:
                kind = op.WhichOneof("registration")
                if kind == "target":
                    t = op.target
                    if t.target != self.target_name or t.op != pb.TARGET_UNKNOWN:
                        continue  # an announcement about another target (we subscribe to none)
                    if t.error:
                        raise _Refused(logs.remote_text(
                            f"tunnel server refused target {self.target_name!r}: {t.error}"))
                    if t.accept and not registered:
                        registered = True
                        unanswered.cancel()
                        self._registered()
                elif kind == "session":
                    self._session_request(op.session, channel, outbox)
        except grpc.RpcError as exc:
            if not registered and exc.code() == grpc.StatusCode.CANCELLED and not self._stopping.is_set():
                raise _Refused(f"no answer to the registration of {self.target_name!r} "
                               f"in {REGISTER_TIMEOUT_S:g}s") from None
            raise
        finally:
            unanswered.cancel()
            outbox.put([_END])  # past the limit too: the oldest message goes, the end never

    def _outbox_drop(self, _item: Any) -> None:
        self.outbox_dropped += 1
        self.log_limiter.log(log, "warning", "outbox-full", "tunnel server not reading; oldest message dropped",
                             tunnel=self.name, outbox_max=self.cfg.outbox, dropped=self.outbox_dropped)

    def _unanswered(self, call: Any) -> None:
        call.cancel()

    def _registered(self) -> None:
        down_for = self._connected()  # the next failure is news
        self.registered_since_ns = time.time_ns()
        log.info("tunnel target registered", tunnel=self.name, address=self.address,
                 target=self.target_name, target_type=pb.GNMI_GNOI, tls=not self.cfg.insecure,
                 reconnects=self.reconnects, down_for_s=round(down_for, 3))

    # ------------------------------------------------------------ sessions
    def _session_request(self, s: Any, channel: grpc.Channel, outbox: BoundedQueue[Any]) -> None:
        if s.error:  # the server gave up on a session: its Tunnel stream ends by itself
            self.log_limiter.log(log, "info", "session-error", "tunnel session error from server",
                                 tunnel=self.name, tag=s.tag, error=logs.remote_text(s.error))
            return
        if not s.accept or s.tag <= 0:
            return  # we never ask for sessions, so nothing else is meant for us
        reason = None
        if s.target != self.target_name or s.target_type != pb.GNMI_GNOI:
            # the server's own names, cut: this goes back to it and into a log line
            reason = logs.remote_text(f"no target {s.target!r} of type {s.target_type!r} here")
        else:
            with self._lock:
                if len(self._pipes) >= MAX_SESSIONS:
                    reason = f"too many sessions (limit {MAX_SESSIONS})"
        sock = None
        if reason is None:
            try:
                sock = self.local.connect()
            except OSError as exc:
                reason = f"gNMI service unavailable: {exc.strerror or exc}"
        if sock is None:
            self.sessions_refused += 1
            # the server's target name echoed cut: each queued message stays small
            outbox.put([pb.RegisterOp(session=pb.Session(tag=s.tag, target=logs.remote_text(s.target, 256),
                                                          target_type=s.target_type, error=reason))],
                       self._outbox_drop)
            # keyed by kind, never by tag or the server's target name: a server asking for
            # hundreds of sessions gets one warning per period, with the count suppressed
            kind = "unknown-target" if reason.startswith("no target") else logs.kind(reason)
            self.log_limiter.log(log, "warning", ("session-refused", kind), "tunnel session refused",
                                 tunnel=self.name, tag=s.tag, reason=reason)
            return
        pipe = _Pipe(sock, s.tag)
        with self._lock:
            self._pipes.add(pipe)
        self.sessions_total += 1
        threading.Thread(target=self._serve, args=(pipe, channel), daemon=True,
                         name=f"tunnel-{self.name}-{s.tag}").start()

    def _serve(self, pipe: _Pipe, channel: grpc.Channel) -> None:
        """Copy the server's Data frames to the socket; the uplink runs in gRPC's request thread."""
        started = time.monotonic()
        error = None
        try:
            call = channel.stream_stream(pb.TUNNEL, request_serializer=pb.serialize,
                                         response_deserializer=pb.parse_data)(pipe.uplink())
            for frame in call:
                if frame.close:
                    pipe.remote_closed = True
                    break
                if frame.data:
                    pipe.sock.sendall(frame.data)
            call.cancel()
        except grpc.RpcError as exc:
            if not self._stopping.is_set() and exc.code() != grpc.StatusCode.CANCELLED:
                error = rpc_error(exc)
        except (OSError, ValueError) as exc:  # the gNMI service closed the connection
            error = str(exc)
        finally:
            pipe.remote_closed = True
            pipe.close()
            with self._lock:
                self._pipes.discard(pipe)
        log.debug("tunnel session ended", tunnel=self.name, tag=pipe.tag,
                  duration_s=round(time.monotonic() - started, 3), error=error)
