"""``swtel tunnel-server``: an openconfig grpctunnel server for tests and development.

Switches (swtel's ``exporters.tunnel[]``, Cumulus NVUE's grpc-tunnel, the Go
``tunnel-target``) dial in and register their targets on ``Register``; for each
registered target this server opens a local TCP listener (``--target-host``,
a free port or the one ``--target-port NAME=PORT`` pins), and every connection
to it becomes one tunnel session to the target: a gNMI client such as pygnmi
or gnmic just dials that port. Tunnel clients (the Go ``tunnel-client``) may
also subscribe to targets and ask for sessions on ``Register``; the server then
bridges their ``Tunnel`` stream to one opened by the target, as the Go
reference server does.

What happens is printed as JSON lines on stdout (``listening``,
``target-added`` with the target's local ``listen`` address, ``target-removed``,
``target-refused``, ``session-opened``, ``session-failed``, ``session-closed``), so
scripts and tests can follow it.

It is bounded (docs/tunnel.md): targets per Register stream and in total, sessions at
once, target names (1 to 255 printable characters) and types (grpctunnel's known ones);
what is refused gets a clear error on the stream.
"""

from __future__ import annotations

import itertools
import json
import queue
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterator
from concurrent import futures
from dataclasses import dataclass, field
from typing import Any

import grpc

from agent import tls
from agent.config import HostPort
from agent.gnmi import tunnel_pb as pb
from agent.signals import StopSignals

CHUNK = 32 * 1024
SESSION_TIMEOUT_S = 10.0  # how long a target may take to open the Tunnel stream it was asked for

# Bounds (docs/tunnel.md): each registered target costs a listening socket and a thread, each
# session a thread or two, so a peer cannot make the server open thousands of either.
MAX_TARGETS_PER_STREAM = 64  # targets one Register stream may hold registered
MAX_TARGETS = 256  # targets registered in total, over every stream
MAX_SESSIONS = 128  # sessions being set up or running at once (local connections and client bridges)
MAX_NAME = 255  # characters in a target name
REMEMBERED_PORTS = 4096  # targets whose port is kept for when they come back
#: What a target or subscription may name as its type: openconfig grpctunnel's TargetType values
#: (the Go reference sends their names), except UNKNOWN. A subscription may also name "" (all).
TARGET_TYPES = frozenset(t for t in pb.TARGET_TYPES if t != "UNKNOWN")
ECHO_MAX = 64  # characters of a peer's name or type echoed in an error or an event


def _shown(text: str) -> str:
    """A peer's name or type as echoed in errors and events: bounded, never raw controls."""
    text = text if len(text) <= ECHO_MAX else f"{text[:ECHO_MAX]}... ({len(text)} characters)"
    return text.encode("unicode_escape").decode("ascii") if not text.isprintable() else text


def check_name(name: str) -> str | None:
    """Why ``name`` cannot be a target name (None: it can): non-empty, at most MAX_NAME
    characters, printable (no control characters)."""
    if not name:
        return "empty target name"
    if len(name) > MAX_NAME:
        return f"target name of {len(name)} characters (limit {MAX_NAME})"
    if not name.isprintable():
        return f"target name '{_shown(name)}' has control characters"
    return None


def check_type(typ: str, *, subscription: bool = False) -> str | None:
    """Why ``typ`` cannot be a target type (None: it can)."""
    if typ in TARGET_TYPES or (subscription and typ == ""):
        return None
    return f"unknown target type '{_shown(typ)}' (known: {', '.join(sorted(TARGET_TYPES))})"
_CLOSE = object()  # the other end closed: send close, end the call
_END = object()  # this end closed: end the call


class _Endpoint:
    """One Tunnel stream, server side: frames to send queue up in ``out``; what arrives goes to ``sink``."""

    def __init__(self, peer: str, tag: int) -> None:
        self.peer, self.tag = peer, tag
        self.out: queue.Queue[Any] = queue.Queue(maxsize=64)  # bounded: back-pressure
        self.sink: Any = None
        self.linked = threading.Event()
        self.done = threading.Event()
        self.closed_here = False  # this end sent close (or went away): never send it ours

    def put(self, item: Any) -> bool:
        while not self.done.is_set():
            try:
                self.out.put(item, timeout=0.5)
                return True
            except queue.Full:
                continue
        return False

    # as a sink of its partner
    def write(self, data: bytes) -> None:
        self.put(data)

    def close(self) -> None:
        if not self.closed_here:
            self.put(_CLOSE)


class _SocketSink:
    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock

    def write(self, data: bytes) -> None:
        try:
            self.sock.sendall(data)
        except OSError:
            pass

    def close(self) -> None:
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass


@dataclass
class _Pending:
    """A session the server expects a Tunnel stream for (peer and tag)."""

    attached: threading.Event = field(default_factory=threading.Event)
    endpoint: _Endpoint | None = None
    error: str | None = None


@dataclass
class _Client:
    peer: str
    out: queue.Queue = field(default_factory=queue.Queue)
    targets: set[tuple[str, str]] = field(default_factory=set)
    subscriptions: set[str] = field(default_factory=set)

    def send(self, **registration: Any) -> None:
        self.out.put(pb.RegisterOp(**registration))


@dataclass
class _Target:
    owner: _Client
    listener: socket.socket | None = None
    listen: str = ""


class TunnelServer:
    """The server; ``start()`` then ``port`` tells where it listens; ``stop()`` ends everything."""

    def __init__(
        self,
        listen: str = "127.0.0.1:0",
        credentials: grpc.ServerCredentials | None = None,
        target_host: str | None = "127.0.0.1",
        target_ports: dict[str, int] | None = None,
        on_event: Callable[[dict[str, Any]], None] | None = None,
        max_workers: int = 128,
        max_targets: int = MAX_TARGETS,
        max_targets_per_stream: int = MAX_TARGETS_PER_STREAM,
        max_sessions: int = MAX_SESSIONS,
    ) -> None:
        self.listen = listen
        self.credentials = credentials
        self.target_host = target_host  # None: no local listener per target
        self.target_ports = dict(target_ports or {})
        self.on_event = on_event or (lambda event: None)
        self.max_workers = max_workers
        self.max_targets = max_targets
        self.max_targets_per_stream = max_targets_per_stream
        self._session_slots = threading.BoundedSemaphore(max_sessions)
        self.max_sessions = max_sessions
        self.port = 0
        self._grpc: grpc.Server | None = None
        self._lock = threading.Lock()
        self._clients: dict[str, _Client] = {}
        self._targets: dict[tuple[str, str], _Target] = {}
        self._pending: dict[tuple[str, int], _Pending] = {}
        self._tags = itertools.count(1)
        self._stopping = threading.Event()
        # a target that comes back gets its port back (bounded: oldest forgotten first)
        self._remembered_ports: dict[str, int] = {}

    # ------------------------------------------------------------ lifecycle
    def start(self) -> TunnelServer:
        server = grpc.server(
            futures.ThreadPoolExecutor(max_workers=self.max_workers, thread_name_prefix="tunnel-server"),
            handlers=[grpc.method_handlers_generic_handler(f"{pb.PACKAGE}.Tunnel", {
                "Register": grpc.stream_stream_rpc_method_handler(
                    self._register, pb.parse_register, pb.serialize),
                "Tunnel": grpc.stream_stream_rpc_method_handler(self._tunnel, pb.parse_data, pb.serialize),
            })],
            options=[("grpc.so_reuseport", 0)],
            maximum_concurrent_rpcs=self.max_workers,
        )
        try:
            port = (server.add_secure_port(self.listen, self.credentials) if self.credentials
                    else server.add_insecure_port(self.listen))
        except RuntimeError:
            port = 0
        if not port:
            raise RuntimeError(f"tunnel server: cannot listen on {self.listen}")
        server.start()
        self._grpc, self.port = server, port
        self._event("listening", address=f"{self.listen.rpartition(':')[0]}:{port}",
                    tls=self.credentials is not None)
        return self

    def stop(self, grace: float = 0.5) -> None:
        self._stopping.set()
        with self._lock:
            targets = list(self._targets.values())
            self._targets.clear()
        for t in targets:
            if t.listener is not None:
                _close_listener(t.listener)
        if self._grpc is not None:
            self._grpc.stop(grace).wait(grace + 1.0)
            self._grpc = None

    def targets(self) -> dict[str, dict[str, Any]]:
        with self._lock:
            return {name: {"type": typ, "owner": t.owner.peer, "listen": t.listen}
                    for (name, typ), t in self._targets.items()}

    def _event(self, event: str, **fields: Any) -> None:
        try:
            self.on_event({"ts": round(time.time(), 3), "event": event, **fields})
        except Exception:  # noqa: S110 - a broken printer must not break the server
            pass

    # ------------------------------------------------------------ Register
    def _register(self, requests: Iterator[Any], context: grpc.ServicerContext) -> Iterator[Any]:
        peer = context.peer()
        client = _Client(peer)
        with self._lock:
            if peer in self._clients:
                context.abort(grpc.StatusCode.ALREADY_EXISTS, f"client exists for {peer!r}")
            self._clients[peer] = client

        def read() -> None:
            try:
                for op in requests:
                    self._handle(client, op)
            except grpc.RpcError:
                pass
            except Exception as exc:  # a bad message ends this client, not the server
                self._event("error", peer=peer, error=f"{type(exc).__name__}: {exc}")
            finally:
                client.out.put(None)

        threading.Thread(target=read, name="tunnel-register-rx", daemon=True).start()
        try:
            while not self._stopping.is_set():
                try:
                    item = client.out.get(timeout=0.5)
                except queue.Empty:
                    if not context.is_active():
                        break
                    continue
                if item is None:
                    break
                yield item
        finally:
            self._drop_client(client)

    def _handle(self, client: _Client, op: Any) -> None:
        kind = op.WhichOneof("registration")
        if kind == "target":
            t = op.target
            why = check_name(t.target) or check_type(t.target_type)
            if why is not None:
                client.send(target=pb.Target(op=t.op, target=t.target[:MAX_NAME],
                                             target_type=t.target_type[:MAX_NAME], error=why))
                self._event("target-refused", target=_shown(t.target), type=_shown(t.target_type),
                            peer=client.peer, error=why)
                return
            if t.op == pb.TARGET_ADD:
                self._add_target(client, t.target, t.target_type)
            elif t.op == pb.TARGET_REMOVE:
                self._remove_target(client, t.target, t.target_type)
            else:
                client.send(target=pb.Target(target=t.target, target_type=t.target_type,
                                             error=f"invalid target op {t.op}"))
        elif kind == "subscription":
            self._subscription(client, op.subscription)
        elif kind == "session":
            self._client_session(client, op.session)

    def _add_target(self, client: _Client, name: str, typ: str) -> None:
        key = (name, typ)
        why = None
        with self._lock:
            other = self._targets.get(key)
            if other is not None:
                why = f"target {name!r} already registered for client {other.owner.peer!r}"
            elif len(client.targets) >= self.max_targets_per_stream:
                why = f"too many targets on this stream (limit {self.max_targets_per_stream})"
            elif len(self._targets) >= self.max_targets:
                why = f"too many targets registered on this server (limit {self.max_targets})"
            else:
                entry = _Target(client)
                self._targets[key] = entry
                client.targets.add(key)
        if why is not None:
            client.send(target=pb.Target(target=name, target_type=typ, error=why))
            if other is None:
                self._event("target-refused", target=name, type=typ, peer=client.peer, error=why)
            return
        if self.target_host is not None:
            self._open_listener(key, entry)
        client.send(target=pb.Target(accept=True, target=name, target_type=typ))
        self._event("target-added", target=name, type=typ, peer=client.peer, listen=entry.listen or None)
        self._announce(name, typ, pb.TARGET_ADD)

    def _remove_target(self, client: _Client, name: str, typ: str) -> None:
        key = (name, typ)
        with self._lock:
            entry = self._targets.get(key)
            ours = entry is not None and entry.owner is client
            if ours:
                del self._targets[key]
                client.targets.discard(key)
        if not ours:
            client.send(target=pb.Target(target=name, target_type=typ,
                                         error=f"target {name!r} is not registered by this client"))
            return
        self._forget_target(key, entry)
        client.send(target=pb.Target(op=pb.TARGET_REMOVE, accept=True, target=name, target_type=typ))

    def _forget_target(self, key: tuple[str, str], entry: _Target) -> None:
        if entry.listener is not None:
            _close_listener(entry.listener)
        self._event("target-removed", target=key[0], type=key[1], peer=entry.owner.peer)
        self._announce(key[0], key[1], pb.TARGET_REMOVE)

    def _announce(self, name: str, typ: str, op: int) -> None:
        with self._lock:
            subscribers = [c for c in self._clients.values() if typ in c.subscriptions or "" in c.subscriptions]
        for c in subscribers:
            c.send(target=pb.Target(op=op, target=name, target_type=typ))

    def _subscription(self, client: _Client, sub: Any) -> None:
        typ = sub.target_type
        why = check_type(typ, subscription=True)
        if why is not None:
            client.send(subscription=pb.Subscription(op=sub.op, target_type=typ[:MAX_NAME], error=why))
            return
        if sub.op == pb.SUBSCRIBE:
            with self._lock:
                client.subscriptions.add(typ)
                existing = [k for k in self._targets if typ in ("", k[1])]
            for name, t in existing:
                client.send(target=pb.Target(op=pb.TARGET_ADD, target=name, target_type=t))
        elif sub.op == pb.UNSUBSCRIBE:
            with self._lock:
                client.subscriptions.discard(typ)
        else:
            client.send(subscription=pb.Subscription(op=sub.op, target_type=typ,
                                                     error=f"invalid subscription op {sub.op}"))
            return
        client.send(subscription=pb.Subscription(op=sub.op, target_type=typ, accept=True))

    def _drop_client(self, client: _Client) -> None:
        with self._lock:
            self._clients.pop(client.peer, None)
            gone = [(k, self._targets.pop(k)) for k in list(client.targets) if k in self._targets]
            client.targets.clear()
            pending = [(k, p) for k, p in self._pending.items() if k[0] == client.peer]
            for k, _ in pending:
                del self._pending[k]
        for key, entry in gone:
            self._forget_target(key, entry)
        for _, p in pending:
            p.error = "the client went away"
            p.attached.set()

    # ------------------------------------------------------------ sessions
    def _expect(self, peer: str, tag: int) -> _Pending:
        p = _Pending()
        with self._lock:
            self._pending[(peer, tag)] = p
        return p

    def _session_to(self, key: tuple[str, str], timeout: float = SESSION_TIMEOUT_S) -> _Endpoint:
        """Ask the target's owner for a session; its Tunnel stream's endpoint once it opened it."""
        with self._lock:
            entry = self._targets.get(key)
        if entry is None:
            raise LookupError(f"no target {key[0]!r} of type {key[1]!r} registered")
        tag = next(self._tags)
        p = self._expect(entry.owner.peer, tag)
        entry.owner.send(session=pb.Session(tag=tag, accept=True, target=key[0], target_type=key[1]))
        if not p.attached.wait(timeout) or p.endpoint is None:
            with self._lock:
                self._pending.pop((entry.owner.peer, tag), None)
            raise LookupError(p.error or f"target {key[0]!r} opened no Tunnel stream in {timeout:g}s")
        return p.endpoint

    def _client_session(self, client: _Client, s: Any) -> None:
        """A tunnel client asks for a session (tag < 0), or a target refuses one we asked for."""
        if s.error:
            with self._lock:
                p = self._pending.pop((client.peer, s.tag), None)
            if p is not None:
                p.error = s.error
                p.attached.set()
            return
        key = (s.target, s.target_type)
        with self._lock:
            entry = self._targets.get(key)
        if entry is None or entry.owner is client:
            why = (f"no target '{_shown(s.target)}' of type '{_shown(s.target_type)}' registered"
                   if entry is None else "the target is the client's own")
            client.send(session=pb.Session(tag=s.tag, error=why))
            return
        if not self._session_slots.acquire(blocking=False):
            client.send(session=pb.Session(tag=s.tag, error=f"too many sessions (limit {self.max_sessions})"))
            return
        p = self._expect(client.peer, s.tag)
        client.send(session=pb.Session(tag=s.tag, accept=True, target=s.target, target_type=s.target_type))

        def bridge() -> None:
            try:
                bridge_once()
            finally:
                self._session_slots.release()

        def bridge_once() -> None:
            if not p.attached.wait(SESSION_TIMEOUT_S) or p.endpoint is None:
                with self._lock:
                    self._pending.pop((client.peer, s.tag), None)
                return
            near = p.endpoint
            try:
                far = self._session_to(key)
            except LookupError as exc:
                self._event("session-failed", target=s.target, peer=client.peer, error=str(exc))
                near.sink = _Discard()
                near.linked.set()
                near.close()
                return
            near.sink, far.sink = far, near
            near.linked.set()
            far.linked.set()
            self._event("session-opened", target=s.target, type=s.target_type, via=client.peer)

        threading.Thread(target=bridge, name="tunnel-bridge", daemon=True).start()

    def _tunnel(self, requests: Iterator[Any], context: grpc.ServicerContext) -> Iterator[Any]:
        first = next(requests, None)
        if first is None:
            return
        if first.data:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, "received data but only wanted tag")
        peer = context.peer()
        with self._lock:
            p = self._pending.pop((peer, first.tag), None)
        if p is None:
            context.abort(grpc.StatusCode.NOT_FOUND, f"no session with tag {first.tag} for {peer}")
        ep = _Endpoint(peer, first.tag)
        p.endpoint = ep
        p.attached.set()
        if not ep.linked.wait(SESSION_TIMEOUT_S):
            ep.done.set()
            return

        def read() -> None:
            try:
                for frame in requests:
                    if frame.close:
                        break
                    if frame.data:
                        ep.sink.write(frame.data)
            except grpc.RpcError:
                pass
            finally:
                ep.closed_here = True
                ep.sink.close()
                ep.put(_END)

        threading.Thread(target=read, name="tunnel-rx", daemon=True).start()
        try:
            while True:
                try:
                    item = ep.out.get(timeout=0.5)
                except queue.Empty:
                    if not context.is_active() or self._stopping.is_set():
                        return
                    continue
                if item is _END:
                    return
                if item is _CLOSE:
                    yield pb.Data(close=True)
                    return
                yield pb.Data(data=item)
        finally:
            ep.done.set()

    # ------------------------------------------------------------ a local listener per target
    def _open_listener(self, key: tuple[str, str], entry: _Target) -> None:
        name = key[0]
        port = self.target_ports.get(name, self._remembered_ports.get(name, 0))
        sock = socket.socket(socket.AF_INET6 if ":" in (self.target_host or "") else socket.AF_INET)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((self.target_host, port))
        except OSError as exc:
            if port and name not in self.target_ports:
                sock.bind((self.target_host, 0))  # the remembered port is taken: any
            else:
                sock.close()
                self._event("error", target=name, error=f"cannot listen on {self.target_host}:{port}: {exc}")
                return
        sock.listen(16)
        bound = sock.getsockname()[1]
        self._remembered_ports.pop(name, None)
        self._remembered_ports[name] = bound  # newest last
        while len(self._remembered_ports) > REMEMBERED_PORTS:
            del self._remembered_ports[next(iter(self._remembered_ports))]
        entry.listener = sock
        host = f"[{self.target_host}]" if ":" in (self.target_host or "") else self.target_host
        entry.listen = f"{host}:{bound}"
        threading.Thread(target=self._accept, args=(sock, key), name=f"tunnel-listen-{name}",
                         daemon=True).start()

    def _accept(self, listener: socket.socket, key: tuple[str, str]) -> None:
        while not self._stopping.is_set():
            try:
                conn, addr = listener.accept()
            except OSError:
                return  # closed: the target went away
            if not self._session_slots.acquire(blocking=False):
                self._event("session-failed", target=key[0], client=str(addr[0]),
                            error=f"too many sessions (limit {self.max_sessions})")
                conn.close()
                continue
            threading.Thread(target=self._serve_slot, args=(conn, addr, key), daemon=True,
                             name="tunnel-conn").start()

    def _serve_slot(self, conn: socket.socket, addr: Any, key: tuple[str, str]) -> None:
        try:
            self._serve_connection(conn, addr, key)
        finally:
            self._session_slots.release()

    def _serve_connection(self, conn: socket.socket, addr: Any, key: tuple[str, str]) -> None:
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        try:
            ep = self._session_to(key)
        except LookupError as exc:
            self._event("session-failed", target=key[0], client=str(addr[0]), error=str(exc))
            conn.close()
            return
        ep.sink = _SocketSink(conn)
        ep.linked.set()
        self._event("session-opened", target=key[0], type=key[1], client=f"{addr[0]}:{addr[1]}")
        try:
            while True:
                try:
                    data = conn.recv(CHUNK)
                except OSError:
                    data = b""
                if not data:
                    ep.close()
                    break
                if not ep.put(data):
                    break
        finally:
            ep.done.wait(5.0)
            conn.close()
            self._event("session-closed", target=key[0], client=f"{addr[0]}:{addr[1]}")


class _Discard:
    def write(self, data: bytes) -> None:
        pass

    def close(self) -> None:
        pass


def _close_listener(sock: socket.socket) -> None:
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    sock.close()


# ---------------------------------------------------------------- command line


def _parse_ports(items: list[str]) -> dict[str, int]:
    out = {}
    for item in items:
        name, sep, port = item.rpartition("=")
        if not sep or not name or not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError(f"--target-port: expected NAME=PORT, got {item!r}")
        out[name] = int(port)
    return out


def tunnel_server_main(args: Any) -> int:
    try:
        HostPort.parse(args.listen)
        ports = _parse_ports(args.target_port)
        creds = None
        if not args.insecure:
            creds = tls.server_credentials(args.tls_cert, args.tls_key, args.tls_client_ca)
    except (ValueError, tls.TlsError) as exc:
        print(f"swtel tunnel-server: {exc}", file=sys.stderr)
        return 2

    def say(event: dict[str, Any]) -> None:
        print(json.dumps(event), flush=True)

    server = TunnelServer(args.listen, creds, target_host=args.target_host, target_ports=ports, on_event=say)
    try:
        server.start()
    except RuntimeError as exc:
        print(f"swtel {exc}", file=sys.stderr)
        return 1
    done = StopSignals(signal.SIGTERM, signal.SIGINT)  # handlers that take no lock (agent/signals.py)
    done.wait(args.duration)
    server.stop()
    return 0
