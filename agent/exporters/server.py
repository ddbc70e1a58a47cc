"""gNMI dial-in server (``exporters.server``): Capabilities, Get and Subscribe for pygnmi, gnmic, Telegraf.

It is an exporter like the others: the engine calls ``on_batch``/``on_state``/
``on_delete`` on its tick thread and the server only hands the changes to the
subscribers whose paths match (see agent/gnmi/subscribe.py); gRPC threads do
the rendering and sending. Get and snapshots read the engine's Store.

Read-only: Set is UNIMPLEMENTED. TLS by default (mTLS when a client CA is
configured); plaintext only with ``insecure: true``. Every RPC passes one guard (_guard)
before its method runs: it names the caller (agent/gnmi/auth.py: the client certificate
and/or a password checked against the salted-hash credentials file) or refuses it
UNAUTHENTICATED, then checks it against the authorization policy and path rules
(agent/gnmi/authz.py: PERMISSION_DENIED), and accounts for it once it ends (one log line,
rate-limited; a count per result code in status and at swtel:/agent/server/...).
Never on port 9339 (Cumulus' own gNMI server).
"""

from __future__ import annotations

import dataclasses
import heapq
import itertools
import os
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from concurrent import futures
from dataclasses import dataclass, field
from typing import Any

from agent import __version__, credentials, logs, tls
from agent.config import (
    FORBIDDEN_PORT,
    Duration,
    HostPort,
    ServerTls,
    check_files,
    check_listen,
    setting,
)
from agent.counters import SWTEL_ORIGIN, Batch, Container, StateUpdate
from agent.exporters.base import (
    Exporter,
    check_auth,
    check_plaintext,
    is_loopback,
    lazy_imports,
    register,
)
from agent.gnmi.auth import Authenticator, AuthFailure, PamUsers, Principal, peer_host
from agent.gnmi.authz import PathRules, Policy, PolicyError

log = logs.get("server")

GNMI_VERSION = "0.8.0"
_SPARE_WORKERS = 4  # threads kept for unary calls when every subscriber slot is taken
# gRPC's own cap sits above ours, so that a client past ours gets our message; RPCs between
# the two wait briefly for a worker (the guard runs on one) and are refused there.
_GRPC_CAP_MARGIN = 16
MAX_SUBSCRIBERS = 1024

# gRPC, the gNMI messages and the Get/Subscribe machinery: imported when a server is built
# (base.lazy_imports, then _capabilities)
grpc: Any = None
gnmi_pb2: Any = None
get: Any = None
Counters: Any = None
RequestError: Any = None
Subscriber: Any = None
CAPABILITIES: Any = None
gnmi_paths: Any = None


def _capabilities() -> dict[str, Any]:
    return {"CAPABILITIES": gnmi_pb2.CapabilityResponse(
        supported_models=[
            gnmi_pb2.ModelData(name="openconfig-interfaces", organization="OpenConfig working group"),
            gnmi_pb2.ModelData(name="openconfig-if-ethernet", organization="OpenConfig working group"),
            gnmi_pb2.ModelData(name="openconfig-qos", organization="OpenConfig working group"),
            gnmi_pb2.ModelData(name="swtel", organization="swtel", version=__version__),
        ],
        supported_encodings=list(get.SUPPORTED_ENCODINGS),
        gNMI_version=GNMI_VERSION,
    )}


_load = lazy_imports(
    globals(), _capabilities, grpc="grpc", gnmi_pb2="pygnmi.spec.v080.gnmi_pb2",
    get="agent.gnmi.get", gnmi_paths="agent.gnmi.paths", Counters="agent.gnmi.get:Counters",
    RequestError="agent.gnmi.get:RequestError", Subscriber="agent.gnmi.subscribe:Subscriber")


def _passthrough(message: Any) -> bytes:
    """Subscribe responses are pre-serialized (the C encoder's bytes); other replies are messages."""
    return message if isinstance(message, bytes) else message.SerializeToString()


class _Servicer:
    """The gNMI service (pygnmi's messages; _handlers binds the methods, Set refused)."""

    def __init__(self, owner: GnmiServer):
        self._owner = owner

    def Capabilities(self, request, context, call):  # noqa: N802 - gRPC method name
        return CAPABILITIES

    def Get(self, request, context, call):  # noqa: N802
        call.note_paths(request.prefix, request.path)
        self._owner.rate_check(context)
        try:
            return get.get_bytes(self._owner.store, request, self._owner.target, call.access)
        except RequestError as exc:
            context.abort(exc.code, exc.message)

    def Set(self, request, context, call):  # noqa: N802
        context.abort(grpc.StatusCode.UNIMPLEMENTED, "swtel is read-only: Set is not supported")

    def Subscribe(self, request_iterator, context, call):  # noqa: N802
        owner = self._owner
        after_s = float(owner.cfg.first_request_timeout)

        def expire() -> None:
            call.result = "DEADLINE_EXCEEDED"
            _expire_first(context, after_s)
        # A client that opens a stream and never sends its SubscriptionList would hold a worker
        # for good: the watchdog ends such a stream (DEADLINE_EXCEEDED) after first_request_timeout.
        token = owner.deadlines.arm(after_s, expire)
        try:
            first = next(request_iterator, None)
        except grpc.RpcError:  # cancelled: by the client, or the watchdog (its status is sent)
            call.result = call.result or "CANCELLED"
            return
        finally:
            owner.deadlines.disarm(token)
        if first is None or not first.HasField("subscribe"):
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, "the first request must be a SubscriptionList")
        call.note_paths(first.subscribe.prefix, [s.path for s in first.subscribe.subscription])
        try:
            sub = Subscriber(first.subscribe, owner.target, owner.min_interval_s, owner.queue_len,
                             peer=context.peer(), per_tick=owner.per_tick, access=call.access)
        except RequestError as exc:
            context.abort(exc.code, exc.message)
        sub.warm(owner.store)
        if not owner.register(sub, call.principal):
            context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED,
                          f"too many subscriptions (limit {owner.max_subscribers})")
        context.add_callback(sub.close)
        try:
            yield from sub.responses(owner.store, owner.rated_polls(context, request_iterator))
        except RequestError as exc:
            context.abort(exc.code, exc.message)
        finally:
            owner.unregister(sub)


def _expire_first(context: Any, after_s: float) -> None:
    """End a Subscribe whose first request has not come: DEADLINE_EXCEEDED with a message
    (grpcio's call object can cancel with a status; the public ``cancel`` says only CANCELLED)."""
    message = f"no SubscribeRequest within {Duration(after_s)} of the stream's start (first_request_timeout)"
    call = getattr(getattr(context, "_rpc_event", None), "call", None)
    try:
        from grpc._cython import cygrpc

        call.cancel(cygrpc.StatusCode.deadline_exceeded, message)
    except Exception:  # noqa: BLE001 - another grpcio's internals: the public way, CANCELLED
        context.cancel()


class _Deadlines:
    """One watchdog thread per server: calls ``fn`` once ``after_s`` has passed unless disarmed
    first. Armed per Subscribe until its first request, so a heap, not a thread per stream."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._cond = threading.Condition()
        self._heap: list[tuple[float, int]] = []
        self._due: dict[int, Callable[[], None]] = {}
        self._ids = itertools.count()
        self._thread: threading.Thread | None = None
        self._stopped = False

    def arm(self, after_s: float, fn: Callable[[], None]) -> int:
        token = next(self._ids)
        with self._cond:
            self._due[token] = fn
            heapq.heappush(self._heap, (self._clock() + after_s, token))
            if self._thread is None and not self._stopped:
                self._thread = threading.Thread(target=self._run, name="gnmi-deadlines", daemon=True)
                self._thread.start()
            self._cond.notify()
        return token

    def disarm(self, token: int) -> None:
        with self._cond:
            self._due.pop(token, None)  # its heap entry is skipped when it comes due

    def stop(self) -> None:
        with self._cond:
            self._stopped = True
            self._due.clear()
            self._cond.notify()

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._stopped and (not self._heap or self._heap[0][0] > self._clock()):
                    self._cond.wait(self._heap[0][0] - self._clock() if self._heap else None)
                if self._stopped:
                    self._thread = None
                    return
                _, token = heapq.heappop(self._heap)
                fn = self._due.pop(token, None)
            if fn is not None:
                try:
                    fn()
                except Exception as exc:  # noqa: BLE001 - the watchdog outlives one bad call
                    log.warning("gNMI deadline callback failed", error=str(exc))


class _Rates:
    """Get and Poll requests per client address: a token bucket of ``rate`` a second holding at
    most ``rate`` (at least 1): a client may ask in bursts, not faster on average. Bounded:
    the least recently seen addresses are forgotten first (a forgotten one starts full)."""

    def __init__(self, rate: float, clock: Callable[[], float], max_peers: int = 4096) -> None:
        self.rate = rate
        self.burst = max(1.0, rate)
        self._clock = clock
        self._max = max_peers
        self._lock = threading.Lock()
        self._buckets: OrderedDict[str, tuple[float, float]] = OrderedDict()  # tokens, when

    def take(self, host: str) -> bool:
        now = self._clock()
        with self._lock:
            tokens, last = self._buckets.pop(host, (self.burst, now))
            tokens = min(self.burst, tokens + (now - last) * self.rate)
            ok = tokens >= 1.0
            self._buckets[host] = (tokens - 1.0 if ok else tokens, now)
            while len(self._buckets) > self._max:
                self._buckets.popitem(last=False)
            return ok


class _Slots:
    """Concurrent RPCs, per peer address and in total, and Subscribe streams from their start
    (not from their first request): what a client holds is counted before it costs anything."""

    def __init__(self, per_peer: int, streams: int, total: int) -> None:
        self.per_peer, self.streams, self.total = per_peer, streams, total
        self._lock = threading.Lock()
        self._by_peer: dict[str, int] = {}
        self._streams = 0
        self._total = 0
        self.refused = 0

    def take(self, host: str, stream: bool) -> str | None:
        """None when taken, else why not (the RESOURCE_EXHAUSTED message)."""
        with self._lock:
            why = None
            if self._by_peer.get(host, 0) >= self.per_peer:
                why = (f"too many concurrent RPCs from {host} (limit {self.per_peer} per client address, "
                       "max_rpcs_per_peer)")
            elif stream and self._streams >= self.streams:
                why = f"too many subscriptions (limit {self.streams}, max_subscribers)"
            elif self._total >= self.total:
                why = f"too many concurrent RPCs (limit {self.total})"
            if why:
                self.refused += 1
                return why
            self._by_peer[host] = self._by_peer.get(host, 0) + 1
            self._streams += stream
            self._total += 1
            return None

    def give(self, host: str, stream: bool) -> None:
        with self._lock:
            n = self._by_peer.get(host, 0) - 1
            if n > 0:
                self._by_peer[host] = n
            else:
                self._by_peer.pop(host, None)
            self._streams -= stream
            self._total -= 1


_PATHS_LOGGED = 8  # request paths named in an RPC's log line; the rest are counted


@dataclass
class _Call:
    """One RPC as the guard and the accounting see it."""

    rpc: str  # the gNMI method: Get, Subscribe...
    peer: str
    principal: Principal | None = None
    access: Any = None  # agent/gnmi/authz.py Access: what it may read (None: everything)
    paths: list[str] = field(default_factory=list)
    result: str | None = None  # set where the status code is known without the context
    _done: threading.Lock = field(default_factory=threading.Lock)

    def note_paths(self, prefix: Any, paths: Any) -> None:
        """The request's paths as text, for the log line (never fails the RPC)."""
        try:
            base = gnmi_paths.join(None, prefix) if prefix is not None and prefix.ByteSize() else ""
            origin = prefix.origin if prefix is not None else ""
            shown = []
            for p in list(paths)[:_PATHS_LOGGED]:
                text = base.rstrip("/") + gnmi_paths.from_proto(p) if base else gnmi_paths.from_proto(p)
                o = p.origin or origin
                shown.append(get.shown(f"{o}:{text}" if o else text)[1:-1])
            if len(paths) > _PATHS_LOGGED:
                shown.append(f"... {len(paths) - _PATHS_LOGGED} more")
            self.paths = shown or ["/"]
        except Exception:  # noqa: BLE001 - a path the request machinery refuses says why itself
            self.paths = ["(unreadable)"]


def _result(context: Any, failed: bool) -> str:
    """The RPC's status code name, as set by abort (``code()`` from grpcio 1.38; the state field
    before): OK when none was set and nothing raised, UNKNOWN when a bug raised."""
    try:
        code = context.code()
    except Exception:  # noqa: BLE001 - an older grpcio: its state, as 1.51 keeps it
        code = getattr(getattr(context, "_state", None), "code", None)
    if code is None:
        return "UNKNOWN" if failed else "OK"
    return code.name


def _guard(owner: GnmiServer, name: str, method: Callable, streaming: bool) -> Callable:
    """``method`` behind the server's guard: a slot (GnmiServer.enter: per-peer and total caps,
    RESOURCE_EXHAUSTED), a principal (GnmiServer.admit: UNAUTHENTICATED) and the authorization
    policy (GnmiServer.authorize: PERMISSION_DENIED) before any of its work; accounted once it
    ends (GnmiServer.account). A wrapped method rather than a grpc.ServerInterceptor: an
    interceptor sees only the method name and metadata, not the peer or the certificate."""
    if streaming:
        def stream(request_iterator, context):
            call = _Call(name, context.peer())
            owner.watch(context, call)
            failed = True
            try:
                release = owner.enter(context, stream=True)
                try:
                    owner.authorize(context, call)
                    yield from method(request_iterator, context, call)
                    failed = False
                finally:
                    release()
            finally:
                owner.account(call, call.result or _result(context, failed))
        return stream

    def unary(request, context):
        call = _Call(name, context.peer())
        failed = True
        try:
            release = owner.enter(context, stream=False)
            try:
                owner.authorize(context, call)
                reply = method(request, context, call)
                failed = False
                return reply
            finally:
                release()
        finally:
            owner.account(call, call.result or _result(context, failed))
    return unary


def _handlers(servicer: _Servicer, owner: GnmiServer) -> grpc.GenericRpcHandler:
    """pygnmi's service definition, with a pass-through serializer for Subscribe responses."""
    g = gnmi_pb2
    return grpc.method_handlers_generic_handler("gnmi.gNMI", {
        "Capabilities": grpc.unary_unary_rpc_method_handler(
            _guard(owner, "Capabilities", servicer.Capabilities, False), g.CapabilityRequest.FromString, _passthrough),
        "Get": grpc.unary_unary_rpc_method_handler(
            _guard(owner, "Get", servicer.Get, False), g.GetRequest.FromString, _passthrough),
        "Set": grpc.unary_unary_rpc_method_handler(
            _guard(owner, "Set", servicer.Set, False), g.SetRequest.FromString, _passthrough),
        "Subscribe": grpc.stream_stream_rpc_method_handler(
            _guard(owner, "Subscribe", servicer.Subscribe, True), g.SubscribeRequest.FromString, _passthrough),
    })


PAM_DIRS = ("/etc/pam.d", "/usr/lib/pam.d")


def _check_authz(problems: list[str], where: str, section: ServerAuthz) -> None:
    """The policy file parses (its problem named: field and file), every path rule names a
    principal and parses."""
    if section.policy_file:
        try:
            Policy.load(section.policy_file)
        except PolicyError as exc:
            problems.append(f"{where}.policy_file: {exc}")
    for i, rule in enumerate(section.paths):
        if not rule.principals:
            problems.append(f"{where}.paths[{i}].principals: name at least one principal (`*`: every caller)")
    try:
        PathRules.from_config(section.paths)
    except ValueError as exc:
        problems.append(f"{where}.paths{exc}")


def _check_pam(problems: list[str], where: str, service: str) -> None:
    import importlib.util
    import os
    import re

    if not re.fullmatch(r"[A-Za-z0-9_.-]{1,64}", service) or service in (".", ".."):
        problems.append(f"{where}: expected a PAM service name (a file of /etc/pam.d), got {service[:60]!r}")
        return
    if not any(os.path.isfile(os.path.join(d, service)) for d in PAM_DIRS):
        # PAM would fall back to the "other" service: say so rather than guess what it allows
        problems.append(f"{where}: no PAM service file /etc/pam.d/{service}")
    if importlib.util.find_spec("pam") is None:
        problems.append(f"{where}: needs the Python module pam (Debian: python3-pampy; PyPI: python-pam)")


@dataclass
class PathRuleConfig:
    """One entry of ``exporters.server.authz.paths``."""

    principals: list[str] = setting(factory=list, type="list of principals", doc=(
        "whom the rule is for: user names or certificate identities, matched as in the policy "
        "(`*` any named caller, `abc*` a prefix, `*abc` a suffix, `\"\"` an anonymous caller); the "
        "first rule that names the caller applies"))
    allow: list[str] = setting(factory=lambda: ["/", "swtel:/"], type="list of paths",
                               shown="`[\"/\", \"swtel:/\"]` (all)", doc=(
        "subtrees the caller may read (`/interfaces`, `swtel:/interfaces/interface[name=swp1]`)"))
    deny: list[str] = setting(factory=list, type="list of paths", shown="`[]`", doc=(
        "subtrees the caller may not read: the longest matching path decides, deny wins a tie"))


@dataclass
class ServerAuthz:
    """``exporters.server.authz``: who may call which RPC, and read which paths."""

    policy_file: str | None = setting(None, type="path or null", doc=(
        "gRPC authorization policy (JSON, the format gNSI authz carries: `deny_rules`, then `allow_rules`, "
        "default deny; see server.md); re-read on SIGHUP; an RPC it denies gets `PERMISSION_DENIED`"))
    paths: list[PathRuleConfig] = setting(factory=list, type="list of mappings", shown="`[]` (every path)", doc=(
        "path rules (gNSI pathz's spirit): once any is set, a caller reads only what its rule allows; "
        "a caller no rule names reads nothing"))


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
    pam_service: str | None = setting(None, type="string or null", doc=(
        "check passwords against the switch's own accounts through this PAM service (e.g. `swtel`, "
        "/etc/pam.d/swtel; needs python3-pampy, and read access to /etc/shadow for local accounts: "
        "see server.md); instead of `users_file`"))
    username: str | None = setting(None, type="string or null", doc=(
        "one user alone (with `password_file`); `users_file` is the general form"))
    password_file: str | None = setting(None, type="path or null", doc=(
        "`username`'s salted hash, as `swtel passwd FILE NAME` writes it (a plaintext password is refused); "
        "refused when other users can read it (mode `0640` or `0600`)"))
    allow_anonymous: bool = setting(False, doc=(
        "serve clients that are neither users nor mTLS-authenticated on an address other hosts can reach "
        "(without it, such a server is refused); status then shows `anonymous: true`"))
    max_subscribers: int = setting(32, type=f"integer, 1–{MAX_SUBSCRIBERS}", doc=(
        "Subscribe streams at once, counted from the stream's start; beyond, `RESOURCE_EXHAUSTED`. The server "
        "runs this many + 4 worker threads, and at most that many RPCs at once"))
    max_rpcs_per_peer: int = setting(16, type="integer, 1–10000", doc=(
        "RPCs (streams and unary calls) at once from one client address; beyond, `RESOURCE_EXHAUSTED`"))
    max_requests_per_second: float = setting(20.0, type="number, 0.1–10000", doc=(
        "Get requests and Polls per second from one client address, on average (bursts up to as many "
        "at once); beyond, `RESOURCE_EXHAUSTED`"))
    first_request_timeout: Duration = setting(Duration(10.0), type="duration, 100ms–5m", doc=(
        "a Subscribe stream whose first request has not come by then is ended with `DEADLINE_EXCEEDED`"))
    authz: ServerAuthz = setting(factory=ServerAuthz)
    cert_identity: str = setting("cn", type="`cn` or `san`", choices=("cn", "san"), doc=(
        "under mTLS (`tls.ca`), what names the caller: the client certificate's subject CN or its first "
        "subject alternative name"))
    notifications: str = setting(
        "per-tick", type="`per-tick` \\| `per-container`", choices=("per-container", "per-tick"), doc=(
            "STREAM subscriptions: `per-tick` sends each tick's changes (and each snapshot) as one "
            "Notification per origin (prefix: origin and target, update paths absolute; split at 1 MiB), "
            "`per-container` one Notification per container; ONCE, POLL and Get answer per container "
            "(see docs/gnmi.md)"))


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
        if not 1 <= section.max_subscribers <= MAX_SUBSCRIBERS:
            problems.append(f"{where}.max_subscribers: must be 1 to {MAX_SUBSCRIBERS}, got {section.max_subscribers}")
        if not 1 <= section.max_rpcs_per_peer <= 10_000:
            problems.append(f"{where}.max_rpcs_per_peer: must be 1 to 10000, got {section.max_rpcs_per_peer}")
        if not 0.1 <= section.max_requests_per_second <= 10_000:
            problems.append(f"{where}.max_requests_per_second: must be 0.1 to 10000, got "
                            f"{section.max_requests_per_second:g}")
        if not 0.1 <= section.first_request_timeout <= 300:
            problems.append(f"{where}.first_request_timeout: must be 100ms to 5m, got {section.first_request_timeout}")
        users = section.users_file or section.username or section.pam_service
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
            check_files(problems, f"{where}.tls", section.tls.ca, section.tls.cert, section.tls.key, section.tls.crl)
            if section.tls.crl and not section.tls.ca:
                problems.append(f"{where}.tls.crl: needs tls.ca (the CA whose CRL it is)")
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
        if sum(bool(x) for x in (section.users_file, section.username, section.pam_service)) > 1:
            problems.append(f"{where}: one user source: users_file, username/password_file or pam_service")
        if section.pam_service is not None:
            _check_pam(problems, f"{where}.pam_service", section.pam_service)
        _check_authz(problems, f"{where}.authz", section.authz)

    @classmethod
    def listeners_for(cls, section: ServerConfig | None, cfg) -> dict:
        if section is None or not section.enabled:
            return {}
        return {"server": cls(section, cfg.target, min_interval_s=cfg.min_interval())}

    @classmethod
    def built_from(cls, key: str, cfg) -> object:
        # The smallest source interval bounds the server's sample_interval check. authz is
        # left out: a running server takes a new policy and path rules in on_config, without a
        # restart that would end every stream.
        server = cfg.exporters.server
        if server is not None:
            server = dataclasses.replace(server, authz=ServerAuthz())
        return (server, cfg.target, cfg.min_interval())

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
        max_subscribers: int | None = None,
        queue_len: int = 1000,
        clock: Callable[[], float] = time.monotonic,
    ):
        _load()
        if cfg.listen.port == FORBIDDEN_PORT:
            raise ValueError("gNMI server: port 9339 belongs to Cumulus' own gNMI server")
        self.cfg = cfg
        self.target = target
        self.min_interval_s = min_interval_s
        self.max_subscribers = cfg.max_subscribers if max_subscribers is None else max_subscribers
        workers = self.max_subscribers + _SPARE_WORKERS
        self.slots = _Slots(cfg.max_rpcs_per_peer, self.max_subscribers, workers)
        self.deadlines = _Deadlines()
        self.rates = _Rates(float(cfg.max_requests_per_second), clock)
        self.queue_len = queue_len
        self.per_tick = cfg.notifications == "per-tick"
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
        self._tls: tls.ServerMaterial | None = None
        self._state = "stopped"
        self._last_error: str | None = None
        self._sent_closed = 0
        self._dropped_closed = 0
        self._auth_log = logs.RateLimiter(60.0)  # a client retrying a bad password logs once a minute
        self._limit_log = logs.RateLimiter(60.0)
        # one line per RPC, at most one a minute per (client address, principal, RPC, result)
        self._rpc_log = logs.RateLimiter(60.0)
        self._results: dict[str, int] = {}
        # (policy, path rules, the policy file's identity when read, the section): swapped whole
        self._authz: tuple[Policy | None, PathRules | None, tuple | None, ServerAuthz | None] = (
            None, None, None, None)
        self._authz_error: str | None = None

    # ------------------------------------------------------------ lifecycle

    def start(self, store: Any) -> None:
        self.store = store
        cfg = self.cfg
        users = None
        try:
            if cfg.users_file:
                users = credentials.Users(cfg.users_file)
            elif cfg.pam_service:
                users = PamUsers(cfg.pam_service)
            elif cfg.username:  # validate refuses a username without password_file: never open
                users = credentials.Users(cfg.password_file or "", cfg.username)
        except (OSError, credentials.SecretError, ImportError) as exc:
            self._state, self._last_error = "failed", str(exc)
            raise RuntimeError(f"gNMI server: {exc}") from None
        mtls = bool(cfg.tls.ca) and not cfg.insecure
        if users is None and not mtls and not is_loopback(cfg.listen.host):
            log.warning("gNMI server admits anonymous clients on an address other hosts can reach "
                        "(allow_anonymous: true)", listen=str(cfg.listen))
        self._auth = Authenticator(users, mtls=mtls, cert_identity=cfg.cert_identity,
                                   throttle=credentials.LoginThrottle(clock=self._clock))
        try:
            self._apply_authz(cfg.authz)
        except (PolicyError, ValueError) as exc:
            self._state, self._last_error = "failed", str(exc)
            raise RuntimeError(f"gNMI server: {exc}") from None
        if cfg.insecure:
            creds = None
            log.warning("gNMI server is plaintext (insecure: true)", listen=str(cfg.listen))
        else:
            try:
                # read again on SIGHUP when changed (reload_tls): new connections get the new files
                self._tls = tls.ServerMaterial(cfg.tls.cert or "", cfg.tls.key or "", cfg.tls.ca, cfg.tls.crl)
                creds = self._tls.credentials()
            except tls.TlsError as exc:
                self._state, self._last_error = "failed", str(exc)
                raise RuntimeError(f"gNMI server: {exc}") from None
        workers = self.max_subscribers + _SPARE_WORKERS
        server = grpc.server(
            futures.ThreadPoolExecutor(max_workers=workers, thread_name_prefix="gnmi-server"),
            handlers=[_handlers(_Servicer(self), self)],
            # Without this a second server could silently share the port (gRPC sets SO_REUSEPORT).
            options=[("grpc.so_reuseport", 0)],
            maximum_concurrent_rpcs=workers + _GRPC_CAP_MARGIN,
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
        self.deadlines.stop()
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

    def open_pass(self) -> None:
        for sub in self._subs:
            sub.open_pass()

    def close_pass(self) -> None:
        """The pass is over: each STREAM subscriber gets its share of it as one queue item."""
        for sub in self._subs:
            sub.close_pass()

    def on_batch(self, batch: Batch) -> None:
        subs = self._subs
        if not subs or not batch.indices:
            return
        # The engine hands listeners a value array of their own (never written again): keep it.
        # Per subscriber this costs per change: a table it has not matched yet (ports changed)
        # is handed on unfiltered and matched on the subscriber's own RPC thread.
        built: list[bytearray] = []

        def changed_mask() -> bytearray:
            """The batch's changes by index, built once for whichever subscribers want it."""
            if not built:
                mask = bytearray(len(batch.table.specs))
                for i in batch.indices:
                    mask[i] = 1
                built.append(mask)
            return built[0]

        for sub in subs:
            indices = sub.changed_indices(batch.table, batch.indices, changed_mask)
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

    def enter(self, context: grpc.ServicerContext, stream: bool) -> Callable[[], None]:
        """Take a slot for an RPC (refused RESOURCE_EXHAUSTED past a cap); returns its release,
        which runs once, at the method's end or the RPC's termination, whichever is first."""
        host = peer_host(context.peer())
        why = self.slots.take(host, stream)
        if why:
            self._last_error = why
            self._limit_log.log(log, "warning", "limit", "gNMI RPC refused: limit", peer=context.peer(), reason=why)
            context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, why)
        done = threading.Lock()

        def release() -> None:
            if done.acquire(blocking=False):
                self.slots.give(host, stream)
        context.add_callback(release)
        return release

    def _rate_refusal(self, context: grpc.ServicerContext) -> str | None:
        host = peer_host(context.peer())
        if self.rates.take(host):
            return None
        why = (f"too many Get and Poll requests from {host} (limit {self.rates.rate:g} per second, "
               "max_requests_per_second)")
        with self.slots._lock:
            self.slots.refused += 1
        self._last_error = why
        self._limit_log.log(log, "warning", "rate", "gNMI RPC refused: limit", peer=context.peer(), reason=why)
        return why

    def rate_check(self, context: grpc.ServicerContext) -> None:
        """A Get within its client address's rate, or RESOURCE_EXHAUSTED."""
        why = self._rate_refusal(context)
        if why:
            context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, why)

    def rated_polls(self, context: grpc.ServicerContext, requests: Any) -> Any:
        """``requests`` with every Poll taken from the same per-address rate as Get: past it the
        stream ends RESOURCE_EXHAUSTED (raised where the subscription reads its next request)."""
        for req in requests:
            if req.HasField("poll"):
                why = self._rate_refusal(context)
                if why:
                    raise RequestError(grpc.StatusCode.RESOURCE_EXHAUSTED, why)
            yield req

    def reload_tls(self) -> bool:
        """SIGHUP: take the TLS files again if they changed (the next connection uses them);
        True if they did. TlsError when the new ones cannot serve: the running ones stay."""
        return self._tls.reload() if self._tls is not None else False

    def admit(self, context: grpc.ServicerContext) -> Principal:
        """Name the caller of an RPC or refuse it (UNAUTHENTICATED), before any of its work."""
        peer = context.peer()
        try:
            # a certificate the CRL revokes: refused right after the handshake, at its first RPC
            revoked = self._tls.revoked(context.auth_context()) if self._tls is not None else None
            if revoked:
                raise AuthFailure(revoked, login=False)
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

    # ------------------------------------------------------------ authorization and accounting

    def _apply_authz(self, section: ServerAuthz) -> bool:
        """Read the policy file and path rules; raise (PolicyError, ValueError) when invalid.
        The file is read again only when it changed (inode, size, mtime) or the section did: a
        reload that touched neither costs one stat. True when something new is in force."""
        ident = None
        if section.policy_file:
            try:
                st = os.stat(section.policy_file)
                ident = (st.st_ino, st.st_size, st.st_mtime_ns)
            except OSError as exc:
                raise PolicyError(f"policy file {section.policy_file}: {exc.strerror or exc}") from None
        _, _, old_ident, old_section = self._authz
        if section == old_section and ident == old_ident:
            return False
        policy = Policy.load(section.policy_file) if section.policy_file else None
        rules = PathRules.from_config(section.paths) if section.paths else None
        self._authz = (policy, rules, ident, section)
        self._authz_error = None
        return True

    def on_config(self, cfg: Any) -> None:
        """A reload (on the tick thread): a changed policy file or path rules take effect for
        the RPCs that start from now on; a broken one (validate passed it, then it changed)
        keeps the last good one in force, logged and in status."""
        section = cfg.exporters.server
        if section is None or self._grpc is None:
            return
        try:
            if self._apply_authz(section.authz):
                policy = self._authz[0]
                log.info("gNMI authorization reloaded", policy=policy.name if policy else None,
                         path_rules=len(section.authz.paths))
        except (PolicyError, ValueError) as exc:
            self._authz_error = self._last_error = f"authorization not reloaded: {exc}"
            log.error("gNMI authorization not reloaded; the last good one stays in force", error=str(exc))

    def watch(self, context: grpc.ServicerContext, call: _Call) -> None:
        """A stream the client cancels may never resume its generator: account for it when
        gRPC says it ended (CANCELLED), unless its guard already did."""
        context.add_callback(lambda: self.account(call, call.result or "CANCELLED"))

    def authorize(self, context: grpc.ServicerContext, call: _Call) -> None:
        """Name the caller (admit), then apply the policy: PERMISSION_DENIED for an RPC it
        denies; the path rules' view of the caller goes on ``call.access``."""
        principal = call.principal = self.admit(context)
        names = list(dict.fromkeys(n for n in (principal.name, principal.certificate) if n)) or [""]
        policy, rules, _, _ = self._authz
        if policy is not None:
            method = f"/gnmi.gNMI/{call.rpc}"
            decision = policy.decide(names, method, context.invocation_metadata())
            if not decision.allowed:
                why = (f"denied by rule {decision.rule!r}" if decision.rule else "no allow rule matches")
                message = f"{names[0] or 'an anonymous caller'} may not call {method}: {why} " \
                          f"(authorization policy {policy.name!r})"
                self._last_error = f"{context.peer()}: {message}"
                context.abort(grpc.StatusCode.PERMISSION_DENIED, message)
        call.access = rules.access_for(names) if rules is not None else None

    def account(self, call: _Call, result: str) -> None:
        """Once per RPC: its count by result, and its log line (rate-limited)."""
        if not call._done.acquire(blocking=False):
            return
        with self._lock:
            self._results[result] = self._results.get(result, 0) + 1
        principal = call.principal
        self._rpc_log.log(
            log, "info" if result in ("OK", "CANCELLED") else "warning",
            (peer_host(call.peer), principal.name if principal else None, call.rpc, result),
            "gNMI RPC", peer=call.peer, principal=principal.name if principal else None,
            auth=principal.how if principal else None, rpc=call.rpc, paths=call.paths, result=result)

    def health_values(self) -> list[tuple[Container, str, Any]]:
        """What the engine publishes under swtel:/agent/server/ every 5 s, on change (docs/paths.md)."""
        if self._grpc is None:
            return []
        state = Container(SWTEL_ORIGIN, "/agent/server/state")
        out: list[tuple[Container, str, Any]] = [
            (state, "subscribers", len(self._subs)),
            (state, "auth-failures", self._auth_failures),
            (state, "refused-limits", self.slots.refused),
        ]
        with self._lock:
            results = sorted(self._results.items())
        for code, n in results:
            out.append((Container(SWTEL_ORIGIN, f"/agent/server/results/result[code={code}]/state"), "count", n))
        return out

    def register(self, sub: Subscriber, principal: Principal | None = None) -> bool:
        with self._lock:  # the stream's slot was taken at its start (enter): this only lists it
            self._subs = (*self._subs, sub)
        log.info("gNMI subscription", peer=sub.peer, mode=gnmi_pb2.SubscriptionList.Mode.Name(sub.mode),
                 principal=principal.name if principal else None, auth=principal.how if principal else None)
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
            "refused_limits": self.slots.refused,
            "results": dict(sorted(self._results.items())),
            "authz": self._authz_status(),
            "last_error": self._last_error,
        }

    def _authz_status(self) -> dict[str, Any]:
        policy, rules, _, _ = self._authz
        return {"policy": policy.name if policy else None,
                "path_rules": len(rules.rules) if rules else 0,
                "error": self._authz_error}
