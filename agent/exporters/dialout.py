"""gNMI dial-out: stream ``gnmi.SubscribeResponse`` bytes to one collector's Publish RPC.

One :class:`DialoutExporter` per ``exporters.dialout[]`` destination, each with its own
thread, bounded queue and reconnect backoff (0.5 s doubling to 30 s, with jitter).

A session counts as connected only once the collector has shown it accepts the
RPC: its first reply (nokia collectors answer every message) or
``HEALTHY_AFTER_S`` of streaming without an error (sonic collectors never
reply). Until then the state is "connecting", ``down_since_ns`` keeps the time
of the first failure and the backoff keeps growing, so a collector that accepts
TCP but rejects the RPC (UNIMPLEMENTED, UNAUTHENTICATED) is retried slowly and
eventually makes the agent unhealthy instead of looping every 0.5 s.

Per connection: a full snapshot of the store, ``sync_response``, then changes; a
full snapshot again every ``heartbeat``. Queued counter changes older than a
snapshot are superseded by it and discarded when it is taken, so a collector
never sees a counter go back. On queue overflow the oldest messages are dropped
(counted); a dropped counter or state message schedules a snapshot, so the newest
value of every counter and every current state (events among them) still arrives.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple

from agent import logs, tls
from agent.config import ClientTls, Duration, HostPort, setting
from agent.counters import Container
from agent.exporters.base import (
    Exporter,
    SecretError,
    check_auth,
    check_plaintext,
    check_tls,
    lazy_imports,
    read_text_secret,
    register,
)
from agent.exporters.sender import (
    CLOSE_GRACE_S,
    BoundedQueue,
    ReconnectingSender,
    grpc_channel,
    rpc_error,
)

if TYPE_CHECKING:
    from agent.counters import Batch, StateUpdate
    from agent.store import Store

# The gNMI encoder, and grpcio when it is the transport: imported when a destination is built
# (base.lazy_imports; grpcio's Python stack is about 15 MiB of RSS)
grpc: Any = None
encode: Any = None
_load = lazy_imports(globals(), encode="agent.gnmi.encode")
_load_grpcio = lazy_imports(globals(), grpc="grpc")
#: a status code's name by its number (grpc's status.h: the same in every gRPC)
STATUS_NAMES = ("OK", "CANCELLED", "UNKNOWN", "INVALID_ARGUMENT", "DEADLINE_EXCEEDED", "NOT_FOUND",
                "ALREADY_EXISTS", "PERMISSION_DENIED", "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION", "ABORTED",
                "OUT_OF_RANGE", "UNIMPLEMENTED", "INTERNAL", "UNAVAILABLE", "DATA_LOSS", "UNAUTHENTICATED")
#: messages handed to the C core's stream ahead of the wire (the rest wait in the queue, where
#: overflow is counted and a snapshot supersedes them)
CORE_AHEAD = 2


def core_transport() -> Any | None:
    """agent._grpcstream (dial-out on grpc's C core: no Python runs per message), or None: not
    built (no libgrpc-dev at build time) or the pure-Python backend asked for."""
    from agent import _backend

    if _backend.NAME != "C":
        return None
    try:
        from agent import _grpcstream
    except ImportError:
        return None
    return _grpcstream


METHODS = {
    "nokia": "/Nokia.SROS.DialoutTelemetry/Publish",
    "sonic": "/gnmi.sonic.gNMIDialOut/Publish",
}
BACKOFF_MIN_S = 0.5
BACKOFF_MAX_S = 30.0
# A stream up this long without an error proves the collector serves the RPC.
HEALTHY_AFTER_S = 5.0
# Queue item kinds: counter changes (superseded by a snapshot), states, deletes, and a pass
# packed per tick (its counters superseded by a snapshot, its states kept: extra holds them).
_COUNTERS, _EVENTS, _DELETES, _PASS = 0, 1, 2, 3


class _PassExtra(NamedTuple):
    """A queued pass's states (kept when a snapshot supersedes its counters) and the store's
    generation once its counters were in the store: a snapshot that read the store at or
    after it holds them (a pass still being packed when the snapshot read the store is queued
    after the snapshot took the queue, and would otherwise repeat its values after sync)."""

    states: list
    generation: int

log = logs.get("dialout")


def _identity(b: bytes) -> bytes:
    return b


class CredentialsError(ValueError):
    """The password file cannot be read or cannot be sent as gRPC metadata."""


def read_password(path: str) -> str:
    """The password in ``path``, by the one secret reader (exporters/base.py)."""
    try:
        return read_text_secret(path, "password_file")
    except SecretError as exc:
        raise CredentialsError(str(exc)) from None


class _Session:
    """One connection attempt's progress, shared by the session, drain and request threads."""

    def __init__(self) -> None:
        self.ready = threading.Event()  # channel READY: the snapshot may be taken
        self.proven = threading.Event()  # the collector accepted the RPC
        self.failed = threading.Event()
        self.wake = threading.Event()  # the session loop looks again: the stream ended, or a stop
        self.ready_at = 0.0
        self.error = "stream ended"
        self.cut_off = False  # stopping, the collector did not close within the grace: cancelled


class _SharedEncoding:
    """Encode a batch once for every destination of the same target (all run on the tick thread)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._key: tuple[Any, str, bool] | None = None
        self._msgs: list[bytes] = []

    def batch(self, batch: Batch, target: str, per_tick: bool) -> list[bytes]:
        with self._lock:
            # keeping a reference to the batch keeps its id from being reused
            if self._key is None or self._key[0] is not batch or self._key[1:] != (target, per_tick):
                self._msgs = encode.encode_batch(batch, target, per_tick=per_tick)
                self._key = (batch, target, per_tick)
            return self._msgs

    def runs(self, batch: Batch, target: str) -> list[Any]:
        """The batch as per-tick runs of update fields (encode.Packer), once for every destination."""
        with self._lock:
            if self._key is None or self._key[0] is not batch or self._key[1:] != (target, "runs"):
                self._msgs = encode.counter_runs(batch.ts_ns, batch.table, batch.indices, batch.values, target)
                self._key = (batch, target, "runs")
            return self._msgs


_shared = _SharedEncoding()
MAX_QUEUE = 1_000_000  # queue: at most this many messages


@dataclass
class DialoutConfig:
    """One ``exporters.dialout[]`` destination."""

    name: str = setting("", type="string", shown="`dialout<N>`", doc="unique name, shown in status and logs")
    address: HostPort = setting(HostPort("127.0.0.1:57400"), doc="the collector")
    protocol: str = setting("nokia", type="`nokia` or `sonic`", choices=("nokia", "sonic"), doc=(
        "wire path: `/Nokia.SROS.DialoutTelemetry/Publish` (gnmic, Telegraf) or "
        "`/gnmi.sonic.gNMIDialOut/Publish`"))
    insecure: bool = setting(False, doc="plaintext gRPC; TLS unless this is `true`")
    insecure_remote: bool = setting(False, doc=(
        "plaintext (`insecure: true`) to a host other than loopback (127.0.0.0/8, `::1`, `localhost`) is "
        "refused unless this is `true`; credentials are never sent in plaintext beyond loopback"))
    tls: ClientTls = setting(factory=ClientTls, sub={
        "ca": {"doc": "CA that signed the collector's certificate"},
        "server_name": {"doc": "name to verify in the collector's certificate"}})
    heartbeat: Duration = setting(Duration(60.0), type="duration, 1s–24h", doc=(
        "full snapshot + sync_response this often (and on every reconnect)"))
    queue: int = setting(10000, type="integer, 1–1000000", doc=(
        "messages queued while the collector is slow or down; overflow is counted as dropped"))
    subscription_name: str = setting("swtel", type="string", doc="`subscription-name` metadata")
    username: str | None = setting(None, type="string or null", doc="`username` metadata")
    password_file: str | None = setting(None, type="path or null", doc=(
        "file holding the password (needs `username`); refused when other users can read it"))
    # per-tick (default): one Notification per origin per tick, absolute update paths: far
    # fewer gRPC messages, the only mode within the latency budget at full churn;
    # per-container: one Notification per container per tick (OpenConfig-style prefixes).
    notifications: str = setting(
        "per-tick", type="`per-tick` \\| `per-container`", choices=("per-container", "per-tick"), doc=(
            "`per-tick`: one Notification per origin per tick (split every 1000 updates), prefix "
            "holding only origin and target, update paths absolute: about 1/ports as many gRPC "
            "messages, the mode that stays within the latency budget (interval + 10 ms at p99) when "
            "every port changes, at a tenth of the CPU. `per-container`: one Notification per container "
            "(e.g. `/interfaces/interface[name=swp1]/state/counters`) per tick, update paths relative "
            "to it, for collectors that name series after the notification prefix; it falls behind at "
            "full churn (see docs/gnmi.md)"))
    transport: str = setting("auto", type="`auto` or `grpcio`", choices=("auto", "grpcio"), doc=(
        "`auto`: grpc's C core (libgrpc) when the agent was built with it and runs its C backend: no "
        "Python runs per message (a third of grpcio's CPU and memory, docs/PERFORMANCE.md); else "
        "grpcio. `grpcio`: always grpcio's Python client"))


@register
class DialoutExporter(ReconnectingSender, Exporter):
    """The Listener for one dial-out destination."""

    config_name = "dialout"
    config_class = DialoutConfig
    many = True
    doc, doc_type, doc_default = ("gNMI dial-out destinations, each with its own queue and reconnect "
                                  "backoff"), "list", "`[]`"

    @classmethod
    def check(cls, section: list[DialoutConfig], where: str, problems: list[str], cfg) -> None:
        names: set[str] = set()
        for i, d in enumerate(section):
            item = f"{where}[{i}]"
            if not d.name:
                d.name = f"dialout{i}"
            if d.name in names:
                problems.append(f"{item}.name: duplicate destination name {d.name!r}")
            names.add(d.name)
            if d.queue < 1:
                problems.append(f"{item}.queue: must be at least 1, got {d.queue}")
            elif d.queue > MAX_QUEUE:
                problems.append(f"{item}.queue: must be at most {MAX_QUEUE}, got {d.queue}")
            if d.heartbeat < 1:
                problems.append(f"{item}.heartbeat: must be at least 1s, got {d.heartbeat}")
            check_tls(problems, item, d.insecure, d.tls)
            check_auth(problems, item, d.username, d.password_file)
            check_plaintext(problems, f"{item}.address", what="gNMI dial-out (insecure: true)",
                            host=d.address.host, plaintext=d.insecure, opt_in=d.insecure_remote,
                            credentials=("username", "password_file") if d.username or d.password_file else ())

    def __init__(self, cfg: DialoutConfig, target: str) -> None:
        _load()
        self._core = core_transport() if cfg.transport == "auto" else None
        if self._core is None:
            _load_grpcio()
        super().__init__(log, BACKOFF_MIN_S, BACKOFF_MAX_S)
        self.cfg = cfg
        self.target = target
        self.per_tick = cfg.notifications == "per-tick"
        self.name = cfg.name or str(cfg.address)
        self.method = METHODS[cfg.protocol]
        # (kind, message, deleted containers with their timestamp, for _DELETES)
        self._queue: BoundedQueue[tuple[int, bytes, Any]] = BoundedQueue(cfg.queue)
        self._need_snapshot = False
        self._store: Store | None = None
        self._flush_deadline = 0.0
        #: messages of a snapshot not yet handed to gRPC (1 while it is built: it holds what
        #: was queued); a stop counts them as queued
        self._snapshot_left = 0
        #: per-tick: the engine's open pass, packed at its close (open_pass .. close_pass)
        self._pass: encode.Packer | None = None
        self._pass_generation = 0  # the store's generation after the pass's newest counters
        self._snapshot_generation = -1  # the store's generation the last snapshot read at (or after)
        self._current = _Session()  # the latest attempt's: how far it got, for the hint
        # status (the rest: ReconnectingSender)
        self.sent = 0
        self.superseded = 0
        self.snapshots = 0
        self.responses = 0
        self.healthy_after_s = HEALTHY_AFTER_S
        self._prove_lock = threading.Lock()

    # ------------------------------------------------------------ Listener
    def start(self, store: Store) -> None:
        self._store = store
        if self.cfg.insecure:
            log.warning("plaintext dial-out (insecure: true): telemetry and credentials unencrypted",
                        destination=self.name, address=str(self.cfg.address))
        self._start_thread(f"dialout-{self.name}")

    def open_pass(self) -> None:
        """The engine starts a pass: per tick, what it hands on is packed until close_pass."""
        if self.per_tick:
            self._pass = encode.Packer(self.target)
            self._pass_generation = 0

    def close_pass(self) -> None:
        """The pass is over: its counters and states go out as one Notification per origin."""
        packer, self._pass = self._pass, None
        if packer:
            self._enqueue_packed(packer)

    def on_batch(self, batch: Batch) -> None:
        # (the engine stores a batch's values before it hands them on: a snapshot that has read
        # the store since then holds them, which is how a queued pass knows it is superseded)
        generation = self._store.generation if self._store is not None else 0
        if self._pass is not None:
            self._pass.add_runs(_shared.runs(batch, self.target))
            self._pass_generation = generation
        else:  # per-container, or a call outside an engine pass: sent on its own
            self._enqueue(_COUNTERS, _shared.batch(batch, self.target, self.per_tick), generation)

    def on_state(self, updates: list[StateUpdate]) -> None:
        if self._pass is not None:
            self._pass.add_states(updates)
        elif self.per_tick:
            packer = encode.Packer(self.target)
            packer.add_states(updates)
            self._enqueue_packed(packer)
        else:
            self._enqueue(_EVENTS, encode.encode_states(updates, self.target))

    def on_delete(self, ts_ns: int, containers: list[Container]) -> None:
        if self._pass:  # what the pass handed on before the delete goes out before it
            self.close_pass()
            self.open_pass()
        by_origin: dict[str, list[Container]] = {}
        for c in containers:
            by_origin.setdefault(c.origin, []).append(c)
        for group in by_origin.values():  # one message per origin, each knowing its containers
            self._enqueue(_DELETES, encode.encode_deletes(ts_ns, group, self.target), (ts_ns, tuple(group)))

    def stop(self, timeout: float) -> None:
        """Send what is queued, if the collector is connected, for up to ``timeout`` seconds;
        close the stream (the collector gets CLOSE_GRACE_S to end it), end the thread. With
        nothing queued, or no connection to send it on, nothing is waited for."""
        if self._thread is None:  # never started
            return
        session = self._current
        reachable = session.ready.is_set() and not session.failed.is_set()
        wait = self._stop_plan(self._pending(), reachable, timeout, unreachable=(
            "no stream to the collector" if not session.ready.is_set() else "the stream to the collector ended"))
        self._flush_deadline = self._clock() + wait
        self._stopping.set()
        self._queue.wake()
        self._current.wake.set()  # the session loop sees the stop now, not at its next poll
        self._thread.join(wait + CLOSE_GRACE_S + 1.0)
        self._stop_done(self._pending(), cut_off=self._current.cut_off)

    def _pending(self) -> int:
        """Messages still to send: the queue and the rest of a snapshot being sent."""
        return len(self._queue) + self._snapshot_left

    def status(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "kind": "dialout",
            "state": self.state,
            "address": str(self.cfg.address),
            "protocol": self.cfg.protocol,
            "transport": "grpc-core" if self._core is not None else "grpcio",
            "tls": not self.cfg.insecure,
            "queue": len(self._queue),
            "queue_max": self.cfg.queue,
            "sent": self.sent,
            "dropped": self._queue.dropped,
            "superseded": self.superseded,
            "snapshots": self.snapshots,
            "reconnects": self.reconnects,
            "last_error": self.last_error,
            "previous_error": self.previous_error,  # the outage before the current connection
            "down_since_ns": self.down_since_ns,
        }

    # ------------------------------------------------------------ queue
    def _enqueue(self, kind: int, msgs: list[bytes], extra: Any = None) -> None:
        if msgs:
            self._queue.put(((kind, m, extra) for m in msgs), self._on_drop)

    def _enqueue_packed(self, packer: encode.Packer) -> None:
        packed = packer.take()
        if packed:
            self._queue.put(((_PASS, p.message, _PassExtra(p.states, self._pass_generation)) if p.counters
                             else (_EVENTS, p.message, p.states) for p in packed), self._on_drop)

    def _on_drop(self, item: tuple[int, bytes, Any]) -> None:
        if item[0] in (_COUNTERS, _EVENTS, _PASS):
            # the store still holds the newest values and every state (an event raised once
            # and then unchanged would otherwise never arrive): a snapshot sends them again
            self._need_snapshot = True

    def _snapshot(self, sync: bool) -> list[bytes]:
        """Every current value (superseding queued counter changes), then sync_response if asked.

        Queued states and deletes stay queued, to follow the snapshot in order, except a
        delete of a container that exists again in the snapshot (a port removed and re-added).
        """
        with self._queue.cond:  # with the flag: a counter dropped after this asks again
            queued = self._queue.take_all()
            self._need_snapshot = False
        store = self._store
        msgs: list[bytes] = []
        live: set[Container] = set()
        if store is not None:
            self._snapshot_generation = store.generation  # read before the values: they are as new
            packer = encode.Packer(self.target) if self.per_tick else None
            for batch in store.snapshot_batches():
                if packer is not None:  # per tick: the whole snapshot packed as one pass
                    packer.add_batch(batch)
                else:
                    msgs.extend(encode.encode_batch(batch, self.target))
                live.update(batch.table.containers)
            states = store.states()
            live.update(u.container for u in states)
            if packer is not None:
                packer.add_states(states)
                msgs.extend(packer.messages())
            else:
                msgs.extend(encode.encode_states(states, self.target))
        kept: list[tuple[int, bytes, Any]] = []
        for kind, m, extra in queued:
            if kind == _COUNTERS:
                self.superseded += 1
            elif kind == _PASS:  # its counters superseded, its states kept in their turn
                kept.extend(self._states_of(extra))
            elif kind == _DELETES and any(c in live for c in extra[1]):
                ts_ns, gone = extra[0], [c for c in extra[1] if c not in live]
                kept.extend((kind, m2, (ts_ns, tuple(gone)))
                            for m2 in encode.encode_deletes(ts_ns, gone, self.target))
            else:
                kept.append((kind, m, extra))
        self._queue.push_front(kept)  # ahead of whatever the tick thread queued meanwhile
        if sync:
            msgs.append(encode.encode_sync())
        self.snapshots += 1
        return msgs

    # ------------------------------------------------------------ connection
    def _channel(self) -> grpc.Channel:
        address = str(self.cfg.address)
        options: list[tuple[str, Any]] = [
            ("grpc.max_send_message_length", 16 * 1024 * 1024),
            # idle keepalive no more often than gRPC servers' default policy allows (5 min)
            ("grpc.keepalive_time_ms", 310_000),
            ("grpc.keepalive_timeout_ms", 20_000),
            # our own backoff decides when to retry
            ("grpc.initial_reconnect_backoff_ms", 500),
            ("grpc.max_reconnect_backoff_ms", 30_000),
        ]
        return grpc_channel(address, self.cfg.insecure, self.cfg.tls, options)

    def _metadata(self) -> list[tuple[str, str]]:
        md = [("subscription-name", self.cfg.subscription_name), ("system-name", self.target)]
        if self.cfg.username:
            md.append(("username", self.cfg.username))
            if self.cfg.password_file:  # read per session: a fixed file is picked up on the next try
                md.append(("password", read_password(self.cfg.password_file)))
        return md

    def _attempt(self) -> str:
        """One session (ReconnectingSender runs them, backs off and retries); why it ended."""
        session = self._current = _Session()
        try:
            self._session(session)
        except tls.TlsError as exc:
            return f"TLS setup: {exc}"
        except CredentialsError as exc:
            return str(exc)
        except OSError as exc:
            return f"{type(exc).__name__}: {exc}"
        return session.error

    def _went_down(self, error: str, delay: float, unexpected: Exception | None) -> None:
        self._log_down(error, self._current.ready.is_set(), delay, unexpected)

    def _log_down(self, error: str, reached: bool, delay: float, unexpected: Exception | None) -> None:
        """One warning per kind of error per rate-limit period (the next after a connection).

        Keyed by the error's kind (its status code or exception type, :func:`logs.kind`), not
        its text: a peer whose every failure is worded differently still logs once a period."""
        self._log_outage(
            "error" if unexpected else "warning", logs.kind(error), "destination down",
            destination=self.name, address=str(self.cfg.address), error=error,
            hint=self._hint(error, reached), retry_in_s=round(delay, 2),
            **({"exc_info": unexpected} if unexpected else {}))

    def _hint(self, error: str, reached: bool) -> str | None:
        text = error.lower()
        if "certificate" in text or "handshake" in text or "ssl" in text:
            mtls = ("" if self.cfg.tls.cert else
                    "; or the collector wants a client certificate (mTLS): set tls.cert and tls.key")
            return (f"TLS handshake failed: the collector's certificate is not trusted by "
                    f"tls.ca={self.cfg.tls.ca!r} or does not match "
                    f"server_name={self.cfg.tls.server_name or self.cfg.address.host!r}{mtls}")
        if "unimplemented" in text:
            return f"the collector does not serve {self.method}; check protocol (nokia|sonic)"
        if "unauthenticated" in text or "permission_denied" in text:
            return "the collector refused the credentials; check username and password_file"
        if not reached and not self.cfg.insecure and "connect" in text:
            return ("connection or TLS handshake failed (check address, tls.ca, tls.server_name"
                    + (")" if self.cfg.tls.cert else "; tls.cert and tls.key if the collector wants mTLS)"))
        return None

    def _session(self, s: _Session) -> None:
        """One connection: stream until it fails or we stop; ``s`` records how far it got."""
        if self._core is not None:
            return self._session_core(s)
        metadata = self._metadata()
        channel = self._channel()

        def on_state(state: grpc.ChannelConnectivity) -> None:
            if state == grpc.ChannelConnectivity.READY and not s.ready.is_set():
                s.ready_at = time.monotonic()
                s.ready.set()
                s.wake.set()

        channel.subscribe(on_state, try_to_connect=True)
        subscribed = True
        try:
            call = channel.stream_stream(
                self.method, request_serializer=_identity, response_deserializer=_identity
            )(self._requests(s), metadata=metadata)
            drain = threading.Thread(target=self._drain, args=(call, s),
                                     name=f"dialout-{self.name}-rx", daemon=True)
            drain.start()

            def once_ready() -> None:
                # READY is all on_state waits for: unsubscribed now, grpc's poller thread
                # is gone long before the session ends, and closing needs no wait for it
                nonlocal subscribed
                if subscribed:
                    channel.unsubscribe(on_state)
                    subscribed = False

            self._supervise(s, call.cancel, once_ready)
            drain.join(2.0)
        finally:
            if subscribed:
                channel.unsubscribe(on_state)
            _wait_connectivity_poller(channel)
            channel.close()

    def _supervise(self, s: _Session, cancel: Callable[[], Any], once_ready: Callable[[], None]) -> None:
        """The session's own thread until the stream fails: a stop's close and grace, the proving
        clock. ``cancel`` ends the call; ``once_ready`` runs when the connection is up."""
        while not s.failed.is_set():
            if self._stopping.is_set():
                # Everything queued is sent (or the flush's time is up) and the stream
                # half-closed: a collector that has read it all ends the call at once. One
                # that does not is cut off CLOSE_GRACE_S later.
                left = self._flush_deadline + CLOSE_GRACE_S - self._clock()
                if left <= 0 or not s.ready.is_set():  # not connected: nothing to close
                    s.cut_off = s.ready.is_set()
                    cancel()
                    break
                s.wake.wait(left)
                s.wake.clear()
                continue
            if s.ready.is_set():
                once_ready()
            if (s.ready.is_set() and not s.proven.is_set()
                    and time.monotonic() - s.ready_at >= self.healthy_after_s):
                self._prove(s, f"{self.healthy_after_s:g}s without error")
            s.wake.wait(0.2)  # the proving clock's pace; a stop or the stream's end wakes it
            s.wake.clear()

    # ------------------------------------------------------------ the C core's transport
    def _session_core(self, s: _Session) -> None:
        """One connection on grpc's C core: a feeder thread hands each message of
        :meth:`_requests` to the stream (at most CORE_AHEAD ahead of the wire), a watcher thread
        follows the stream's phase and replies; this thread supervises as grpcio's session does."""
        stream = self._open_stream(self._metadata())
        watcher = threading.Thread(target=self._watch_core, args=(stream, s),
                                   name=f"dialout-{self.name}-rx", daemon=True)
        feeder = threading.Thread(target=self._feed_core, args=(stream, s),
                                  name=f"dialout-{self.name}-tx", daemon=True)
        watcher.start()
        feeder.start()
        try:
            self._supervise(s, stream.cancel, lambda: None)
        finally:
            if not s.failed.is_set():
                stream.cancel()
            watcher.join(2.0)
            feeder.join(2.0)

    def _open_stream(self, metadata: list[tuple[str, str]]) -> Any:
        """The call on the C core (connecting from now): plaintext, or TLS as grpcio's channel."""
        address = str(self.cfg.address)
        if self.cfg.insecure:
            stream = self._core.Stream(address, self.method, metadata)
        else:
            t = self.cfg.tls
            pems = tls.client_pems(t.ca, t.cert, t.key)
            if t.crl:  # as grpcio's path: the C core takes no CRL either
                tls.check_server_crl(address, t.ca, t.crl, t.server_name)
            root, cert, key = (pem.decode("ascii", "replace") if pem is not None else None for pem in pems)
            stream = self._core.Stream(address, self.method, metadata, True, root, cert, key, t.server_name)
        return stream

    def _feed_core(self, stream: Any, s: _Session) -> None:
        try:
            for message in self._requests(s):
                if stream.send([message]) < 0:
                    return  # the call ended: the watcher says why
                while stream.wait_room(CORE_AHEAD, 0.2)[3] >= CORE_AHEAD and not s.failed.is_set():
                    pass
        except Exception as exc:  # noqa: BLE001 - whatever it is ends this session, not the thread
            s.error = f"{type(exc).__name__}: {exc}"
            stream.cancel()
            return
        stream.finish()  # half-close once the last has gone: a stop's flush is over

    def _watch_core(self, stream: Any, s: _Session) -> None:
        seen = 0
        try:
            while True:
                phase, _sent, replies, _waiting, code, details, connected = stream.wait(0.2)
                if connected and not s.ready.is_set():
                    s.ready_at = time.monotonic()
                    s.ready.set()
                    s.wake.set()
                if replies > seen:  # the collector answers (gnmic: every message): the first proves it
                    self.responses += replies - seen
                    seen = replies
                    if not s.proven.is_set():
                        self._prove(s, "reply")
                if phase == self._core.ENDED:
                    if not self._stopping.is_set():
                        name = STATUS_NAMES[code] if 0 <= code < len(STATUS_NAMES) else f"STATUS_{code}"
                        s.error = ("collector closed the stream" if code == 0
                                   else logs.remote_text(f"{name}: {details}"))
                    return
        finally:
            s.failed.set()
            s.wake.set()

    def _prove(self, s: _Session, by: str) -> None:
        """The collector accepted the stream: connected (once per session)."""
        with self._prove_lock:
            if s.proven.is_set() or s.failed.is_set() or self._stopping.is_set():
                return
            s.proven.set()
        down_for = self._connected()  # the next failure is news again
        log.info("destination connected", destination=self.name, address=str(self.cfg.address),
                 method=self.method, tls=not self.cfg.insecure,
                 transport="grpc-core" if self._core is not None else "grpcio", reconnects=self.reconnects,
                 down_for_s=round(down_for, 3), confirmed_by=by)

    def _drain(self, call: Any, s: _Session) -> None:
        """Read the collector's replies (gnmic answers every message): the first proves the
        stream; their content is ignored."""
        try:
            for _ in call:
                self.responses += 1
                if not s.proven.is_set():
                    self._prove(s, "reply")
            if not self._stopping.is_set():
                s.error = "collector closed the stream"
        except grpc.RpcError as exc:
            if not self._stopping.is_set():
                s.error = rpc_error(exc)
        except Exception as exc:  # whatever it is ends this session, not the thread
            s.error = f"{type(exc).__name__}: {exc}"
        finally:
            s.failed.set()
            s.wake.set()

    def _send_snapshot(self, sync: bool, over: Callable[[], bool]) -> Iterator[bytes]:
        """A snapshot's messages, counted in :attr:`_snapshot_left` until each is handed on;
        ends early when ``over()``."""
        self._snapshot_left = 1
        try:
            msgs = self._snapshot(sync=sync)
            for k, m in enumerate(msgs):
                self._snapshot_left = len(msgs) - k
                if over():
                    return
                self.sent += 1
                yield m
        finally:
            self._snapshot_left = 0

    def _requests(self, s: _Session) -> Iterator[bytes]:
        """What grpc sends on the stream: snapshot, sync, then queued changes and heartbeats."""
        heartbeat = float(self.cfg.heartbeat)
        failed = s.failed

        def over() -> bool:  # the stream failed, or a stop's flush time is up
            return failed.is_set() or (self._stopping.is_set() and self._clock() >= self._flush_deadline)

        # Take the snapshot only once the connection is up: fresher, and "sent" stays honest.
        while not s.ready.wait(0.1):
            if failed.is_set() or self._stopping.is_set():
                return
        # sync_response promises the full state: not before every source's first read is in.
        if self._store is not None and not self._store.wait_primed(
                lambda: failed.is_set() or self._stopping.is_set()):
            return
        yield from self._send_snapshot(True, over)
        next_heartbeat = time.monotonic() + heartbeat
        while not failed.is_set():
            if self._stopping.is_set():
                if self._clock() >= self._flush_deadline:
                    return
                item = self._queue.take(0)
                if item is None:
                    return  # flushed: half-close the stream
            else:
                now = time.monotonic()
                if self._need_snapshot or now >= next_heartbeat:
                    yield from self._send_snapshot(False, over)
                    if over():
                        return
                    next_heartbeat = now + heartbeat
                    continue
                item = self._queue.take(min(0.2, max(next_heartbeat - now, 0.0)))
                if item is None:
                    continue
            for message in self._unless_in_snapshot(item):
                self.sent += 1
                yield message

    def _states_of(self, extra: _PassExtra) -> list[tuple[int, bytes, Any]]:
        """A pass whose counters a snapshot superseded: its states as queue items (none: it is
        counted superseded)."""
        if not extra.states:
            self.superseded += 1
            return []
        again = encode.Packer(self.target)  # (one origin's, within the size of the original)
        again.add_states(extra.states)
        return [(_EVENTS, p.message, p.states) for p in again.take()]

    def _unless_in_snapshot(self, item: tuple[int, bytes, Any]) -> list[bytes]:
        """What a dequeued item sends: all of it, or, when its counters were in the store by the
        time the last snapshot read it (a pass queued after the snapshot took the queue), only
        its states."""
        kind, message, extra = item
        if kind == _PASS and extra.generation <= self._snapshot_generation:
            return [m for _k, m, _s in self._states_of(extra)]
        if kind == _COUNTERS and extra is not None and extra <= self._snapshot_generation:
            self.superseded += 1
            return []
        return [message]


def _wait_connectivity_poller(channel: grpc.Channel, limit_s: float = 0.5) -> None:
    """grpc's connectivity poller thread notices an unsubscribe only at its next 0.2 s
    wake-up; closing the channel before that makes it raise "Cannot monitor channel
    state: Channel closed!" in its thread. Wait for it (private attribute, so
    best-effort: without it we just close)."""
    state = getattr(channel, "_connectivity_state", None)
    deadline = time.monotonic() + limit_s
    while getattr(state, "polling", False) and time.monotonic() < deadline:
        time.sleep(0.01)
