"""gNMI dial-in server (``exporters.server``): Capabilities, Get and Subscribe for pygnmi, gnmic, Telegraf.

It is an exporter like the others: the engine calls ``on_batch``/``on_state``/
``on_delete`` on its tick thread and the server only hands the changes to the
subscribers whose paths match (see agent/gnmi/subscribe.py); gRPC threads do
the rendering and sending. Get and snapshots read the engine's Store.

Read-only: Set is UNIMPLEMENTED. TLS by default (mTLS when a client CA is
configured); plaintext only with ``insecure: true``. Every RPC passes one guard (_guard)
before its method runs: it names the caller (agent/gnmi/auth.py: the client certificate
and/or a password checked against the salted-hash credentials file) or refuses it
UNAUTHENTICATED. Never on port 9339 (Cumulus' own gNMI server).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent import futures
from dataclasses import dataclass
from typing import Any

from agent import __version__, credentials, logs, tls
from agent.config import (
    FORBIDDEN_PORT,
    HostPort,
    ServerTls,
    check_files,
    check_listen,
    setting,
)
from agent.counters import Batch, Container, StateUpdate
from agent.exporters.base import Exporter, check_auth, check_plaintext, is_loopback, register
from agent.gnmi.auth import Authenticator, AuthFailure, Principal

log = logs.get("server")

GNMI_VERSION = "0.8.0"
_SPARE_WORKERS = 4  # threads kept for unary calls when every subscriber slot is taken

# gRPC, the gNMI messages and the Get/Subscribe machinery are imported when a server is
# built (_load), not when a config is parsed (it imports every exporter's file): an agent
# without the server stays light.
grpc: Any = None
gnmi_pb2: Any = None
get: Any = None
Counters: Any = None
RequestError: Any = None
Subscriber: Any = None
CAPABILITIES: Any = None


def _load() -> None:
    global grpc, gnmi_pb2, get, Counters, RequestError, Subscriber, CAPABILITIES
    if CAPABILITIES is not None:
        return
    import grpc
    from pygnmi.spec.v080 import gnmi_pb2

    from agent.gnmi import get
    from agent.gnmi.get import Counters, RequestError
    from agent.gnmi.subscribe import Subscriber

    CAPABILITIES = gnmi_pb2.CapabilityResponse(
        supported_models=[
            gnmi_pb2.ModelData(name="openconfig-interfaces", organization="OpenConfig working group"),
            gnmi_pb2.ModelData(name="openconfig-if-ethernet", organization="OpenConfig working group"),
            gnmi_pb2.ModelData(name="openconfig-qos", organization="OpenConfig working group"),
            gnmi_pb2.ModelData(name="swtel", organization="swtel", version=__version__),
        ],
        supported_encodings=list(get.SUPPORTED_ENCODINGS),
        gNMI_version=GNMI_VERSION,
    )


def _passthrough(message: Any) -> bytes:
    """Subscribe responses are pre-serialized (the C encoder's bytes); other replies are messages."""
    return message if isinstance(message, bytes) else message.SerializeToString()


class _Servicer:
    """The gNMI service (pygnmi's messages; _handlers binds the methods, Set refused)."""

    def __init__(self, owner: GnmiServer):
        self._owner = owner

    def Capabilities(self, request, context, principal):  # noqa: N802 - gRPC method name
        return CAPABILITIES

    def Get(self, request, context, principal):  # noqa: N802
        try:
            return get.get(self._owner.store, request, self._owner.target)
        except RequestError as exc:
            context.abort(exc.code, exc.message)

    def Set(self, request, context, principal):  # noqa: N802
        context.abort(grpc.StatusCode.UNIMPLEMENTED, "swtel is read-only: Set is not supported")

    def Subscribe(self, request_iterator, context, principal):  # noqa: N802
        first = next(request_iterator, None)
        if first is None or not first.HasField("subscribe"):
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, "the first request must be a SubscriptionList")
        owner = self._owner
        try:
            sub = Subscriber(first.subscribe, owner.target, owner.min_interval_s, owner.queue_len,
                             peer=context.peer())
        except RequestError as exc:
            context.abort(exc.code, exc.message)
        sub.warm(owner.store)
        if not owner.register(sub):
            context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED,
                          f"too many subscriptions (limit {owner.max_subscribers})")
        context.add_callback(sub.close)
        try:
            yield from sub.responses(owner.store, request_iterator)
        except RequestError as exc:
            context.abort(exc.code, exc.message)
        finally:
            owner.unregister(sub)


def _guard(owner: GnmiServer, method: Callable, streaming: bool) -> Callable:
    """``method`` behind the server's guard (GnmiServer.admit): every RPC is named or refused
    before any of its work. A wrapped method rather than a grpc.ServerInterceptor: an
    interceptor sees only the method name and metadata, not the peer or the certificate."""
    if streaming:
        def stream(request_iterator, context):
            principal = owner.admit(context)
            yield from method(request_iterator, context, principal)
        return stream

    def unary(request, context):
        return method(request, context, owner.admit(context))
    return unary


def _handlers(servicer: _Servicer, owner: GnmiServer) -> grpc.GenericRpcHandler:
    """pygnmi's service definition, with a pass-through serializer for Subscribe responses."""
    g = gnmi_pb2
    return grpc.method_handlers_generic_handler("gnmi.gNMI", {
        "Capabilities": grpc.unary_unary_rpc_method_handler(
            _guard(owner, servicer.Capabilities, False), g.CapabilityRequest.FromString, _passthrough),
        "Get": grpc.unary_unary_rpc_method_handler(
            _guard(owner, servicer.Get, False), g.GetRequest.FromString, _passthrough),
        "Set": grpc.unary_unary_rpc_method_handler(
            _guard(owner, servicer.Set, False), g.SetRequest.FromString, _passthrough),
        "Subscribe": grpc.stream_stream_rpc_method_handler(
            _guard(owner, servicer.Subscribe, True), g.SubscribeRequest.FromString, _passthrough),
    })


@dataclass
class ServerConfig:
    """``exporters.server``: the gNMI dial-in server."""

    enabled: bool = setting(True, doc="lets a present section be switched off")  # its presence turns it on
    listen: HostPort = setting(HostPort("127.0.0.1:50051"), doc=(
        "never port 9339 (Cumulus' own gNMI server and NetQ use it)"))
    insecure: bool = setting(False, doc="plaintext; otherwise `tls.cert` and `tls.key` are required")
    insecure_remote: bool = setting(False, doc=(
        "plaintext on an address other hosts can reach (not 127.0.0.0/8, `::1`, `localhost`) is refused "
        "unless this is `true`"))
    tls: ServerTls = setting(factory=ServerTls)
    users_file: str | None = setting(None, type="path or null", doc=(
        "credentials file of salted hashes (`name:$scrypt$...` lines, written by `swtel passwd FILE NAME`): "
        "every RPC must carry the name and password of one of its users (`username`/`password` metadata or "
        "an `authorization: Basic` header); re-read when it changes; refused when other users can read it"))
    username: str | None = setting(None, type="string or null", doc=(
        "one user alone (with `password_file`); `users_file` is the general form"))
    password_file: str | None = setting(None, type="path or null", doc=(
        "`username`'s salted hash, as `swtel passwd FILE NAME` writes it (a plaintext password is refused); "
        "refused when other users can read it (mode `0640` or `0600`)"))
    allow_anonymous: bool = setting(False, doc=(
        "serve clients that are neither users nor mTLS-authenticated on an address other hosts can reach "
        "(without it, such a server is refused); status then shows `anonymous: true`"))
    cert_identity: str = setting("cn", type="`cn` or `san`", choices=("cn", "san"), doc=(
        "under mTLS (`tls.ca`), what names the caller: the client certificate's subject CN or its first "
        "subject alternative name"))


@register
class GnmiServer(Exporter):
    """The Listener for ``exporters.server``.

    ``min_interval_s`` is the agent's smallest source interval: a SAMPLE
    subscription may not ask for less. ``listen`` with port 0 picks a free port
    (tests); :attr:`port` tells which.
    """

    name = "server"
    config_name = "server"
    config_class = ServerConfig
    optional = True
    doc, doc_type, doc_default = ("gNMI dial-in server: Capabilities, Get, Subscribe", "mapping or absent",
                                  "absent (off)")

    @classmethod
    def check(cls, section: ServerConfig | None, where: str, problems: list[str], cfg) -> None:
        if section is None or not section.enabled:
            return
        check_listen(problems, f"{where}.listen", section.listen)
        users = section.users_file or section.username
        check_plaintext(problems, f"{where}.listen", what="gNMI (insecure: true)", host=section.listen.host,
                        plaintext=section.insecure, opt_in=section.insecure_remote, listen=True,
                        credentials=("users' passwords",) if users else ())
        mtls = bool(section.tls.ca) and not section.insecure
        if not (users or mtls or section.allow_anonymous or is_loopback(section.listen.host)):
            problems.append(
                f"{where}: listens on {section.listen.host or '*'}, which other hosts can reach, without "
                "client authentication (anyone there could read every counter): set users_file, tls.ca "
                "(mTLS), or allow_anonymous: true")
        if not section.insecure:
            if not (section.tls.cert and section.tls.key):
                problems.append(f"{where}.tls: cert and key are required unless insecure: true")
            check_files(problems, f"{where}.tls", section.tls.ca, section.tls.cert, section.tls.key)
        check_auth(problems, where, section.username, section.password_file)
        if section.username and not section.password_file:
            problems.append(f"{where}.username: needs password_file (or use users_file); "
                            "a username without a password source would let anyone in")
        for key, path, only in (("users_file", section.users_file, None),
                                ("password_file", section.password_file if section.username else None,
                                 section.username)):
            if path and not any(p.startswith(f"{where}.{key}:") for p in problems):
                try:
                    credentials.Users(path, only)
                except (OSError, credentials.SecretError) as exc:
                    problems.append(f"{where}.{key}: {exc}")
        if section.users_file and section.username:
            problems.append(f"{where}: users_file or username/password_file, not both")

    @classmethod
    def listeners_for(cls, section: ServerConfig | None, cfg) -> dict:
        if section is None or not section.enabled:
            return {}
        return {"server": cls(section, cfg.target, min_interval_s=cfg.min_interval())}

    @classmethod
    def built_from(cls, key: str, cfg) -> object:
        # The smallest source interval bounds the server's sample_interval check.
        return (cfg.exporters.server, cfg.target, cfg.min_interval())

    @classmethod
    def shares_resources(cls, key: str, old, new) -> bool:
        """The server on the same port."""
        return old.exporters.server is not None and new.exporters.server is not None and \
            old.exporters.server.listen.port == new.exporters.server.listen.port

    def __init__(
        self,
        cfg: ServerConfig,
        target: str,
        min_interval_s: float = 0.1,
        *,
        max_subscribers: int = 32,
        queue_len: int = 1000,
        clock: Callable[[], float] = time.monotonic,
    ):
        _load()
        if cfg.listen.port == FORBIDDEN_PORT:
            raise ValueError("gNMI server: port 9339 belongs to Cumulus' own gNMI server")
        self.cfg = cfg
        self.target = target
        self.min_interval_s = min_interval_s
        self.max_subscribers = max_subscribers
        self.queue_len = queue_len
        self.store: Any = None
        self.port = 0
        self._grpc: grpc.Server | None = None
        self._lock = threading.Lock()
        self._subs: tuple[Subscriber, ...] = ()  # copy-on-write: the tick thread iterates lock-free
        self._clock = clock  # the failed-login slow-down's (tests step it)
        # anonymous until start() reads the config's user source (the tunnel's private socket
        # never calls start: whoever the tunnel server lets in)
        self._auth = Authenticator(None, mtls=False)
        self._auth_failures = 0
        self._state = "stopped"
        self._last_error: str | None = None
        self._sent_closed = 0
        self._dropped_closed = 0
        self._auth_log = logs.RateLimiter(60.0)  # a client retrying a bad password logs once a minute

    # ------------------------------------------------------------ lifecycle

    def start(self, store: Any) -> None:
        self.store = store
        cfg = self.cfg
        users = None
        try:
            if cfg.users_file:
                users = credentials.Users(cfg.users_file)
            elif cfg.username:  # validate refuses a username without password_file: never open
                users = credentials.Users(cfg.password_file or "", cfg.username)
        except (OSError, credentials.SecretError) as exc:
            self._state, self._last_error = "failed", str(exc)
            raise RuntimeError(f"gNMI server: {exc}") from None
        mtls = bool(cfg.tls.ca) and not cfg.insecure
        if users is None and not mtls and not is_loopback(cfg.listen.host):
            log.warning("gNMI server admits anonymous clients on an address other hosts can reach "
                        "(allow_anonymous: true)", listen=str(cfg.listen))
        self._auth = Authenticator(users, mtls=mtls, cert_identity=cfg.cert_identity,
                                   throttle=credentials.LoginThrottle(clock=self._clock))
        if cfg.insecure:
            creds = None
            log.warning("gNMI server is plaintext (insecure: true)", listen=str(cfg.listen))
        else:
            try:
                creds = tls.server_credentials(cfg.tls.cert, cfg.tls.key, cfg.tls.ca)
            except tls.TlsError as exc:
                self._state, self._last_error = "failed", str(exc)
                raise RuntimeError(f"gNMI server: {exc}") from None
        workers = self.max_subscribers + _SPARE_WORKERS
        server = grpc.server(
            futures.ThreadPoolExecutor(max_workers=workers, thread_name_prefix="gnmi-server"),
            handlers=[_handlers(_Servicer(self), self)],
            # Without this a second server could silently share the port (gRPC sets SO_REUSEPORT).
            options=[("grpc.so_reuseport", 0)],
            maximum_concurrent_rpcs=workers,
        )
        address = str(cfg.listen)
        try:
            port = server.add_secure_port(address, creds) if creds else server.add_insecure_port(address)
        except RuntimeError:  # newer grpcio raises; 1.51 returns 0
            port = 0
        if not port:
            self._state, self._last_error = "failed", f"cannot listen on {address}"
            raise RuntimeError(f"gNMI server: cannot listen on {address} (in use or not a local address)")
        server.start()
        self._grpc, self.port = server, port
        self._state = "listening"
        log.info("gNMI server listening", listen=self.listen, tls=creds is not None,
                 mtls=mtls, users=bool(users))

    def stop(self, timeout: float) -> None:
        for sub in self._subs:
            sub.close()
        if self._grpc is not None:
            self._grpc.stop(grace=timeout).wait(timeout)
            self._grpc = None
        self._state = "stopped"

    @property
    def listen(self) -> str:
        host = self.cfg.listen.rpartition(":")[0]
        return f"{host}:{self.port or self.cfg.listen.port}"

    # ------------------------------------------------------------ engine (tick thread): enqueue only

    def on_batch(self, batch: Batch) -> None:
        subs = self._subs
        if not subs or not batch.indices:
            return
        # The engine hands listeners a value array of their own (never written again): keep it.
        # Per subscriber this costs per change: a table it has not matched yet (ports changed)
        # is handed on unfiltered and matched on the subscriber's own RPC thread.
        for sub in subs:
            indices = sub.changed_indices(batch.table, batch.indices)
            if indices is None:
                sub.offer_unmatched(Counters(batch.ts_ns, batch.table, batch.indices, batch.values))
            elif indices:
                sub.offer_counters(Counters(batch.ts_ns, batch.table, indices, batch.values))

    def on_state(self, updates: list[StateUpdate]) -> None:
        for sub in self._subs:
            sub.offer_states(updates)

    def on_delete(self, ts_ns: int, containers: list[Container]) -> None:
        for sub in self._subs:
            sub.offer_delete(ts_ns, containers)

    # ------------------------------------------------------------ RPC side

    def admit(self, context: grpc.ServicerContext) -> Principal:
        """Name the caller of an RPC or refuse it (UNAUTHENTICATED), before any of its work."""
        peer = context.peer()
        try:
            return self._auth.authenticate(peer, context.invocation_metadata(), context.auth_context())
        except AuthFailure as exc:
            with self._lock:
                self._auth_failures += 1
            self._last_error = f"authentication failed for {peer}: {exc.message}"
            # keyed by kind: a client retrying (or a scan of peers) logs once a minute
            self._auth_log.log(log, "warning", "auth", "gNMI authentication failed", peer=peer,
                               reason=exc.message)
            context.abort(grpc.StatusCode.UNAUTHENTICATED, exc.message)
            raise  # abort raises; never reached

    def register(self, sub: Subscriber) -> bool:
        with self._lock:
            if len(self._subs) >= self.max_subscribers:
                return False
            self._subs = (*self._subs, sub)
        log.info("gNMI subscription", peer=sub.peer, mode=gnmi_pb2.SubscriptionList.Mode.Name(sub.mode))
        return True

    def unregister(self, sub: Subscriber) -> None:
        sub.close()
        with self._lock:
            if sub in self._subs:
                self._subs = tuple(s for s in self._subs if s is not sub)
                self._sent_closed += sub.sent
                self._dropped_closed += sub.dropped

    def status(self) -> dict[str, Any]:
        subs = self._subs
        return {
            "state": self._state,
            "listen": self.listen,
            "subscribers": len(subs),
            "sent": self._sent_closed + sum(s.sent for s in subs),
            "dropped": self._dropped_closed + sum(s.dropped for s in subs),
            "anonymous": self._auth.anonymous,
            "auth_failures": self._auth_failures,
            "last_error": self._last_error,
        }
