"""gNMI dial-out: stream ``gnmi.SubscribeResponse`` bytes to one collector's Publish RPC.

One :class:`DialoutExporter` per ``exporters.dialout[]`` destination, each with its own
thread, bounded queue and reconnect backoff (0.5 s doubling to 30 s, with jitter).

Per connection: a full snapshot of the store, ``sync_response``, then changes; a
full snapshot again every ``heartbeat``. Queued counter changes older than a
snapshot are superseded by it and discarded when it is taken, so a collector
never sees a counter go back. On queue overflow the oldest messages are dropped
(counted); a dropped counter message schedules a snapshot, so the newest value
of every counter still arrives.
"""

from __future__ import annotations

import random
import threading
import time
from collections import deque
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import grpc
import structlog

from agent.counters import Container
from agent.gnmi import encode, tls

if TYPE_CHECKING:
    from agent.config import DialoutExporter as DialoutConfig
    from agent.counters import Batch, StateUpdate
    from agent.store import Store

METHODS = {
    "nokia": "/Nokia.SROS.DialoutTelemetry/Publish",
    "sonic": "/gnmi.sonic.gNMIDialOut/Publish",
}
BACKOFF_MIN_S = 0.5
BACKOFF_MAX_S = 30.0
# Queue item kinds: counter changes (superseded by a snapshot), states, deletes.
_COUNTERS, _EVENTS, _DELETES = 0, 1, 2

log = structlog.get_logger("swtel.dialout")


def _identity(b: bytes) -> bytes:
    return b


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


_shared = _SharedEncoding()


class DialoutExporter:
    """The Listener for one dial-out destination."""

    def __init__(self, cfg: DialoutConfig, target: str) -> None:
        self.cfg = cfg
        self.target = target
        self.per_tick = cfg.notifications == "per-tick"
        self.name = cfg.name or str(cfg.address)
        self.method = METHODS[cfg.protocol]
        self._cond = threading.Condition()
        # (kind, message, deleted containers with their timestamp, for _DELETES)
        self._queue: deque[tuple[int, bytes, Any]] = deque()
        self._need_snapshot = False
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self._store: Store | None = None
        self._flush_deadline = 0.0
        # status
        self.state = "down"
        self.sent = 0
        self.dropped = 0
        self.superseded = 0
        self.snapshots = 0
        self.connects = 0
        self.last_error: str | None = None
        self.down_since_ns: int | None = time.time_ns()
        self.responses = 0
        self._session_error = ""

    # ------------------------------------------------------------ Listener
    def start(self, store: Store) -> None:
        self._store = store
        if self.cfg.insecure:
            log.warning("plaintext dial-out (insecure: true): telemetry and credentials unencrypted",
                        destination=self.name, address=str(self.cfg.address))
        self._thread = threading.Thread(target=self._run, name=f"dialout-{self.name}", daemon=True)
        self._thread.start()

    def on_batch(self, batch: Batch) -> None:
        self._enqueue(_COUNTERS, _shared.batch(batch, self.target, self.per_tick))

    def on_state(self, updates: list[StateUpdate]) -> None:
        self._enqueue(_EVENTS, encode.encode_states(updates, self.target))

    def on_delete(self, ts_ns: int, containers: list[Container]) -> None:
        by_origin: dict[str, list[Container]] = {}
        for c in containers:
            by_origin.setdefault(c.origin, []).append(c)
        for group in by_origin.values():  # one message per origin, each knowing its containers
            self._enqueue(_DELETES, encode.encode_deletes(ts_ns, group, self.target), (ts_ns, tuple(group)))

    def stop(self, timeout: float) -> None:
        """Send what is queued for up to ``timeout`` seconds, close the stream, end the thread."""
        self._flush_deadline = time.monotonic() + max(timeout, 0.0)
        self._stopping.set()
        with self._cond:
            self._cond.notify_all()
        if self._thread is not None:
            self._thread.join(timeout + 1.0)

    def status(self) -> dict[str, Any]:
        with self._cond:
            depth = len(self._queue)
        return {
            "name": self.name,
            "kind": "dialout",
            "state": self.state,
            "address": str(self.cfg.address),
            "protocol": self.cfg.protocol,
            "tls": not self.cfg.insecure,
            "queue": depth,
            "queue_max": self.cfg.queue,
            "sent": self.sent,
            "dropped": self.dropped,
            "superseded": self.superseded,
            "snapshots": self.snapshots,
            "reconnects": max(self.connects - 1, 0),
            "last_error": self.last_error,
            "down_since_ns": self.down_since_ns,
        }

    # ------------------------------------------------------------ queue
    def _enqueue(self, kind: int, msgs: list[bytes], extra: Any = None) -> None:
        if not msgs:
            return
        limit = self.cfg.queue
        with self._cond:
            for m in msgs:
                if len(self._queue) >= limit:
                    old_kind = self._queue.popleft()[0]
                    self.dropped += 1
                    if old_kind == _COUNTERS:
                        self._need_snapshot = True  # the store still holds the newest values
                self._queue.append((kind, m, extra))
            self._cond.notify()

    def _take(self, timeout: float) -> tuple[int, bytes, Any] | None:
        with self._cond:
            if not self._queue:
                self._cond.wait(timeout)
            return self._queue.popleft() if self._queue else None

    def _snapshot(self, sync: bool) -> list[bytes]:
        """Every current value (superseding queued counter changes), then sync_response if asked.

        Queued states and deletes stay queued, to follow the snapshot in order, except a
        delete of a container that exists again in the snapshot (a port removed and re-added).
        """
        with self._cond:
            queued = list(self._queue)
            self._queue.clear()
            self._need_snapshot = False
        store = self._store
        msgs: list[bytes] = []
        live: set[Container] = set()
        if store is not None:
            for batch in store.snapshot_batches():
                msgs.extend(encode.encode_batch(batch, self.target, per_tick=self.per_tick))
                live.update(spec.container for spec in batch.table.specs)
            states = store.states()
            live.update(u.container for u in states)
            msgs.extend(encode.encode_states(states, self.target))
        kept: list[tuple[int, bytes, Any]] = []
        for kind, m, extra in queued:
            if kind == _COUNTERS:
                self.superseded += 1
            elif kind == _DELETES and any(c in live for c in extra[1]):
                ts_ns, gone = extra[0], [c for c in extra[1] if c not in live]
                kept.extend((kind, m2, (ts_ns, tuple(gone)))
                            for m2 in encode.encode_deletes(ts_ns, gone, self.target))
            else:
                kept.append((kind, m, extra))
        with self._cond:  # ahead of whatever the tick thread queued meanwhile
            self._queue.extendleft(reversed(kept))
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
        if self.cfg.insecure:
            return grpc.insecure_channel(address, options=options)
        t = self.cfg.tls
        creds = tls.channel_credentials(t.ca, t.cert, t.key)
        return grpc.secure_channel(address, creds, options=options + tls.channel_options(t.server_name))

    def _metadata(self) -> list[tuple[str, str]]:
        md = [("subscription-name", self.cfg.subscription_name), ("system-name", self.target)]
        if self.cfg.username:
            md.append(("username", self.cfg.username))
            if self.cfg.password_file:
                with open(self.cfg.password_file, encoding="utf-8") as fh:
                    md.append(("password", fh.read().strip()))
        return md

    def _run(self) -> None:
        backoff = BACKOFF_MIN_S
        while not self._stopping.is_set():
            self.state = "connecting"
            try:
                was_connected, error = self._session()
            except tls.TlsError as exc:
                was_connected, error = False, f"TLS setup: {exc}"
            except OSError as exc:  # e.g. the password file
                was_connected, error = False, f"{type(exc).__name__}: {exc}"
            if self._stopping.is_set():
                break
            if was_connected:
                backoff = BACKOFF_MIN_S
                self.down_since_ns = time.time_ns()
            self.state = "down"
            self.last_error = error
            delay = backoff * random.uniform(0.8, 1.2)
            log.warning("destination down", destination=self.name, address=str(self.cfg.address),
                        error=error, hint=self._hint(error, was_connected), retry_in_s=round(delay, 2))
            self._stopping.wait(delay)
            backoff = min(backoff * 2, BACKOFF_MAX_S)
        self.state = "down"

    def _hint(self, error: str, was_connected: bool) -> str | None:
        text = error.lower()
        if "certificate" in text or "handshake" in text or "ssl" in text:
            return (f"TLS handshake failed: the collector's certificate is not trusted by "
                    f"tls.ca={self.cfg.tls.ca!r} or does not match "
                    f"server_name={self.cfg.tls.server_name or self.cfg.address.host!r}")
        if "unimplemented" in text:
            return f"the collector does not serve {self.method}; check protocol (nokia|sonic)"
        if not was_connected and not self.cfg.insecure and "connect" in text:
            return "connection or TLS handshake failed (check address, tls.ca, tls.server_name)"
        return None

    def _session(self) -> tuple[bool, str]:
        """One connection: stream until it fails or we stop. Returns (got connected, why it ended)."""
        channel = self._channel()
        failed = threading.Event()
        connected = threading.Event()
        self._session_error = "stream ended"

        def on_state(state: grpc.ChannelConnectivity) -> None:
            if state == grpc.ChannelConnectivity.READY and not connected.is_set() and not failed.is_set():
                connected.set()
                self._on_connected()

        channel.subscribe(on_state, try_to_connect=True)
        try:
            call = channel.stream_stream(
                self.method, request_serializer=_identity, response_deserializer=_identity
            )(self._requests(failed, connected), metadata=self._metadata())
            drain = threading.Thread(target=self._drain, args=(call, failed),
                                     name=f"dialout-{self.name}-rx", daemon=True)
            drain.start()
            while not failed.wait(0.2):
                if self._stopping.is_set() and time.monotonic() > self._flush_deadline + 0.5:
                    call.cancel()
                    break
            drain.join(2.0)
        finally:
            channel.unsubscribe(on_state)
            _wait_connectivity_poller(channel)
            channel.close()
        return connected.is_set(), self._session_error

    def _on_connected(self) -> None:
        self.connects += 1
        down_for = (time.time_ns() - self.down_since_ns) / 1e9 if self.down_since_ns else 0.0
        self.state = "connected"
        self.down_since_ns = None
        log.info("destination connected", destination=self.name, address=str(self.cfg.address),
                 method=self.method, tls=not self.cfg.insecure, reconnects=max(self.connects - 1, 0),
                 down_for_s=round(down_for, 3))

    def _drain(self, call: Any, failed: threading.Event) -> None:
        """Read (and ignore) the collector's replies: gnmic answers every message."""
        try:
            for _ in call:
                self.responses += 1
            if not self._stopping.is_set():
                self._session_error = "collector closed the stream"
        except grpc.RpcError as exc:
            if not self._stopping.is_set():
                code = exc.code() if hasattr(exc, "code") else None
                name = code.name if code is not None else "ERROR"
                self._session_error = f"{name}: {exc.details() if hasattr(exc, 'details') else exc}"
        finally:
            failed.set()

    def _requests(self, failed: threading.Event, connected: threading.Event) -> Iterator[bytes]:
        """What grpc sends on the stream: snapshot, sync, then queued changes and heartbeats."""
        heartbeat = float(self.cfg.heartbeat)
        # Take the snapshot only once the connection is up: fresher, and "sent" stays honest.
        while not connected.wait(0.1):
            if failed.is_set() or self._stopping.is_set():
                return
        for m in self._snapshot(sync=True):
            if failed.is_set():
                return
            self.sent += 1
            yield m
        next_heartbeat = time.monotonic() + heartbeat
        while not failed.is_set():
            if self._stopping.is_set():
                if time.monotonic() > self._flush_deadline:
                    return
                item = self._take(0)
                if item is None:
                    return  # flushed: half-close the stream
            else:
                now = time.monotonic()
                if self._need_snapshot or now >= next_heartbeat:
                    for m in self._snapshot(sync=False):
                        if failed.is_set():
                            return
                        self.sent += 1
                        yield m
                    next_heartbeat = now + heartbeat
                    continue
                item = self._take(min(0.2, max(next_heartbeat - now, 0.0)))
                if item is None:
                    continue
            self.sent += 1
            yield item[1]


def _wait_connectivity_poller(channel: grpc.Channel, limit_s: float = 0.5) -> None:
    """grpc's connectivity poller thread notices an unsubscribe only at its next 0.2 s
    wake-up; closing the channel before that makes it raise "Cannot monitor channel
    state: Channel closed!" in its thread. Wait for it (private attribute, so
    best-effort: without it we just close)."""
    state = getattr(channel, "_connectivity_state", None)
    deadline = time.monotonic() + limit_s
    while getattr(state, "polling", False) and time.monotonic() < deadline:
        time.sleep(0.01)
