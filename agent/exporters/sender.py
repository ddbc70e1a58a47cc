"""What every networked exporter shares: the reconnecting sender.

Dial-out, the tunnel client and OTLP each keep one destination reachable from a thread of
their own. :class:`ReconnectingSender` holds what they share: the health fields that
``swtel status`` and the health check read (``state``, ``last_error``, ``previous_error``,
``down_since_ns``, the count of proven connections), exponential backoff with jitter (:class:`Backoff`), and the
outage's log lines, rate-limited per key and forgotten once a connection is proven, so that
the next failure is news again. Dial-out and the tunnel hold a connection open and take its
loop too (:meth:`ReconnectingSender._run`: attempt, then back off and retry); OTLP and remote
write export every interval as unary requests (:class:`PeriodicSender`'s loop). :class:`BoundedQueue` is the queue of
dial-out and OTLP: the oldest item goes on overflow, counted.
"""

from __future__ import annotations

import random
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from agent import logs, tls

if TYPE_CHECKING:
    import grpc

    from agent.config import ClientTls

MACHINERY = True  # shared by the exporters, not a plugin (agent/registry.py load_plugins)

#: every delay is multiplied by a random factor in this range, so that agents that lost the
#: same collector do not all retry in step
JITTER = (0.8, 1.2)
#: identical outage lines: one per period (``log.rate_limit``'s default; the runner sets it)
LOG_RATE_LIMIT_S = 10.0
#: outage log keys remembered to forget on the next connection; past this they just stay limited
MAX_LOG_KEYS = 256
#: at stop, once everything is sent, how long the peer may take to close the stream: a collector
#: that has read it all closes at once; one that never closes is cut off after this
CLOSE_GRACE_S = 0.5

T = TypeVar("T")


class Backoff:
    """Retry delays: ``min_s`` doubling up to ``max_s``, each with jitter. With ``cap`` no
    delay exceeds ``max_s``, jitter included; without, one may reach ``max_s`` × 1.2."""

    def __init__(self, min_s: float, max_s: float, cap: bool = False) -> None:
        self.min_s = min_s
        self.max_s = max_s
        self.cap = cap
        self.base_s = min_s  # the next delay, before jitter

    def next(self) -> float:
        """The delay before the next attempt; the one after doubles."""
        delay = self.base_s * random.uniform(*JITTER)
        if self.cap:
            delay = min(delay, self.max_s)
        self.base_s = min(self.base_s * 2, self.max_s)
        return delay

    def reset(self) -> None:
        """The destination proved it works: the next outage starts with short retries."""
        self.base_s = self.min_s


class ReconnectingSender:
    """The health, backoff and outage logging of one destination, and the loop that keeps a
    connection to it.

    ``state`` is ``connecting`` while an attempt is under way, :attr:`up_state` once the
    destination proved that it accepts what is sent (:meth:`_connected`), ``down`` while
    waiting to retry (an exporter may add its own, as OTLP's ``rejecting``). A connection
    counts only once proven: until then ``down_since_ns`` keeps the time of the first failure
    and the backoff keeps growing, so a peer that accepts TCP and refuses the rest is retried
    ever more slowly and makes the agent unhealthy.
    """

    up_state = "connected"

    def __init__(self, log: Any, backoff_min_s: float, backoff_max_s: float, *, cap_backoff: bool = False,
                 state: str = "down") -> None:
        self._log = log
        self.backoff = Backoff(backoff_min_s, backoff_max_s, cap_backoff)
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        # status
        self.state = state
        self.connects = 0  # proven connections
        self.last_error: str | None = None
        #: the last error of the outage that the latest proven connection ended: kept to explain
        #: a reconnect, never shown as the current error beside ``connected``
        self.previous_error: str | None = None
        self.down_since_ns: int | None = time.time_ns()  # down until proven up
        self.log_limiter = logs.RateLimiter(LOG_RATE_LIMIT_S)  # the runner sets period_s
        self._log_keys: set[Any] = set()  # outage keys logged since the last connection
        #: the clock of the stop's deadlines (tests give their own)
        self._clock: Callable[[], float] = time.monotonic
        #: what the last stop found and did (:meth:`_stop_plan`, :meth:`_stop_done`)
        self.stop_report: dict[str, Any] | None = None

    @property
    def reconnects(self) -> int:
        return max(self.connects - 1, 0)

    # ------------------------------------------------------------ health
    def _connected(self) -> float:
        """The destination proved it accepts what is sent: the outage is over, its log lines
        are forgotten (the next failure is news), its last error becomes ``previous_error``.
        Returns how long it was down, in seconds."""
        self.connects += 1
        if self.last_error is not None:
            self.previous_error, self.last_error = self.last_error, None
        down_for = (time.time_ns() - self.down_since_ns) / 1e9 if self.down_since_ns else 0.0
        self.state = self.up_state
        self.down_since_ns = None
        self._forget_logs()
        return down_for

    def _down(self, error: str, state: str = "down") -> bool:
        """A failure, ``error`` saying why. True if it ends a proven connection: then an
        outage starts now; otherwise the running one goes on."""
        new = self.down_since_ns is None
        if new:
            self.down_since_ns = time.time_ns()
        self.state = state
        self.last_error = error
        return new

    def _log_outage(self, level: str, key: Any, event: str, **fields: Any) -> None:
        """Log a failure once per ``key`` per rate-limit period, until the next connection."""
        if len(self._log_keys) < MAX_LOG_KEYS:
            self._log_keys.add(key)
        self.log_limiter.log(self._log, level, key, event, **fields)

    def _forget_logs(self) -> None:
        for key in self._log_keys:
            self.log_limiter.forget(key)
        self._log_keys.clear()

    # ------------------------------------------------------------ stop: wait only for work
    def _stop_plan(self, queued: int, reachable: bool, timeout: float, why_nothing: str = "nothing queued",
                   unreachable: str = "") -> float:
        """How long a stop may wait to send what is queued: ``timeout`` when ``queued`` items
        can go to a ``reachable`` destination, else 0 (nothing to send, or nowhere to send it:
        waiting would only delay the exit). Logged with the reason and kept in
        :attr:`stop_report`, so that an operator (and a test) sees why a stop took its time."""
        if not queued:
            wait, reason = 0.0, f"flushed: {why_nothing}"
        elif reachable and timeout > 0:
            wait, reason = timeout, f"waiting for {queued} queued"
        elif reachable:  # a send in flight at the stop used up its time
            wait, reason = 0.0, f"not waiting: {queued} queued, the stop's time is up"
        else:
            wait, reason = 0.0, f"not waiting: {queued} queued, {unreachable or 'destination ' + self.state}"
        self.stop_report = {"queued": queued, "waits": wait > 0, "wait_s": wait, "reason": reason,
                            "started": self._clock()}
        self._log.info("exporter stopping", exporter=getattr(self, "name", ""), queued=queued,
                       waits=wait > 0, reason=reason)
        return wait

    def _stop_done(self, left: int, cut_off: bool = False, failed: bool = False) -> None:
        """Log how the stop ended: ``left`` items never sent (the deadline passed, a send
        ``failed``, or they had nowhere to go); ``cut_off``: the peer did not close within
        :data:`CLOSE_GRACE_S` and the stream was cancelled. Call after :meth:`_stop_plan`."""
        report = self.stop_report
        assert report is not None, "_stop_plan first"
        if not report["queued"]:
            outcome = "nothing to send"
        elif not report["waits"]:
            outcome = "dropped"
        elif not left:
            outcome = "flushed"
        else:
            outcome = "send failed" if failed else "deadline"
        took = self._clock() - report["started"]
        report.update(left=left, cut_off=cut_off, outcome=outcome, took_s=round(took, 3))
        self._log.info("exporter stopped", exporter=getattr(self, "name", ""), outcome=outcome, left=left,
                       cut_off=cut_off, took_s=round(took, 3))

    # ------------------------------------------------------------ the connection loop
    def _start_thread(self, name: str) -> None:
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def _attempt(self) -> str:
        """One connection, held until it fails or the sender stops; returns why it ended. It
        calls :meth:`_connected` once the destination proves it accepts what is sent."""
        raise NotImplementedError

    def _went_down(self, error: str, delay: float, unexpected: Exception | None) -> None:
        """An attempt failed (``unexpected``: a bug raised) and the next starts in ``delay``
        seconds: log it, with :meth:`_log_outage`."""
        raise NotImplementedError

    def _run(self) -> None:
        """The sender's thread: attempt; after an attempt fails, back off and try again."""
        while not self._stopping.is_set():
            self.state = "connecting"
            unexpected = None
            try:
                error = self._attempt()
            except Exception as exc:  # a bug must not end the thread: retry
                unexpected, error = exc, f"{type(exc).__name__}: {exc}"
            if self._stopping.is_set():
                break
            if self._down(error):
                self.backoff.reset()  # a proven connection was lost: retry fast again
            delay = self.backoff.next()
            self._went_down(error, delay, unexpected)
            self._stopping.wait(delay)
        self.state = "down"


class PeriodicSender(ReconnectingSender):
    """A sender whose work is one export every ``interval``, sent as unary requests from a
    bounded queue (OTLP, remote write). :meth:`_run` exports on time (never in a burst to catch
    up), sends the queue oldest first, retries a failed request with the backoff, and on stop
    makes one last export and sends what is queued, but only while the receiver is reached and
    before ``_flush_deadline`` (:meth:`ReconnectingSender._stop_plan`: nothing queued or
    nobody to send it to, no wait).

    A subclass sets ``cfg`` (with ``timeout``), ``interval``, ``_queue``, ``_wake`` (an Event
    that cuts a wait short), ``_flush_deadline`` and ``retries``, and gives :meth:`_export`,
    :meth:`_send_one` and :meth:`_close`; its ``stop(timeout)`` calls :meth:`_stop_thread`."""

    cfg: Any
    interval: float
    _queue: BoundedQueue[Any]
    _wake: threading.Event
    _flush_deadline: float
    retries: int
    #: set by :meth:`_send_one` when the receiver said when to retry (HTTP Retry-After): the
    #: next retry waits that long instead of the backoff's delay, once
    retry_after_s: float | None = None
    last_retry_after_s: float | None = None  # the last one honoured, for status

    def _export(self) -> None:
        """Build this interval's request(s) and queue them."""
        raise NotImplementedError

    def _send_one(self, timeout: float) -> bool:
        """Send the oldest queued request; False: it failed and stays queued (retry later)."""
        raise NotImplementedError

    def _close(self) -> None:
        """Release the connection (the thread is ending)."""

    def _stop_thread(self, timeout: float) -> None:
        """From the main thread: ask the loop to make its last export and flush, for up to
        ``timeout`` seconds (only if there is something to send: :meth:`_flush`)."""
        self._flush_deadline = self._clock() + max(timeout, 0.0)
        self._stopping.set()
        self._wake.set()
        if self._thread is not None:  # never started: nothing to flush
            self._thread.join(timeout + 1.0)
        self.state = "stopped"

    def _flush(self) -> None:
        """The stop, on the loop's thread: the newest values, then what is queued, while the
        receiver takes it and the deadline allows; with nothing queued, or a receiver not
        reached, no request is tried."""
        self._export()
        wait = self._stop_plan(len(self._queue), self.state == self.up_state,
                               self._flush_deadline - self._clock())
        deadline = self._flush_deadline if wait else 0.0
        failed = False
        while self._queue and self._clock() < deadline:
            if not self._send_one(max(0.1, deadline - self._clock())):
                failed = True
                break
        self._stop_done(len(self._queue), failed=failed)

    def _run(self) -> None:
        retry_at = 0.0
        next_export = time.monotonic()
        timeout = float(self.cfg.timeout)
        while not self._stopping.is_set():
            now = time.monotonic()
            if now >= next_export:
                self._export()
                next_export += self.interval
                if next_export <= now:  # fell behind (a slow receiver): no burst to catch up
                    next_export = now + self.interval
            if self._queue and now >= retry_at:
                if self._send_one(timeout):
                    self.backoff.reset()
                    retry_at = 0.0
                else:
                    self.retries += 1
                    delay = self.backoff.next()
                    if self.retry_after_s is not None:
                        delay, self.last_retry_after_s = self.retry_after_s, self.retry_after_s
                        self.retry_after_s = None
                    retry_at = time.monotonic() + delay
                continue
            wait = next_export - now
            if self._queue:
                wait = min(wait, retry_at - now)
            self._wake.wait(max(wait, 0.0))
            self._wake.clear()
        try:
            self._flush()
        finally:
            self._close()


class BoundedQueue(Generic[T]):
    """A FIFO of at most ``limit`` items between a producer (the tick thread) and a sender:
    on overflow the oldest item is dropped and counted in ``dropped``."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.dropped = 0
        # reentrant (a Condition's default lock): a caller may hold it around several calls
        self.cond = threading.Condition()
        self._items: deque[T] = deque()

    def __len__(self) -> int:
        with self.cond:
            return len(self._items)

    def __iter__(self) -> Iterator[T]:
        with self.cond:
            return iter(list(self._items))

    def put(self, items: Iterable[T], on_drop: Callable[[T], None] | None = None) -> None:
        """Append ``items``, the oldest dropped past the limit (``on_drop`` hears of each,
        under the lock); wakes a :meth:`take`."""
        with self.cond:
            for item in items:
                if len(self._items) >= self.limit:
                    old = self._items.popleft()
                    self.dropped += 1
                    if on_drop is not None:
                        on_drop(old)
                self._items.append(item)
            self.cond.notify()

    def take(self, timeout: float) -> T | None:
        """Remove and return the oldest item, waiting up to ``timeout`` s for one (None: none)."""
        with self.cond:
            if not self._items:
                self.cond.wait(timeout)
            return self._items.popleft() if self._items else None

    def peek(self) -> T | None:
        """The oldest item, left queued (None: none)."""
        with self.cond:
            return self._items[0] if self._items else None

    def discard(self, item: T) -> None:
        """Remove ``item`` if it is still the oldest (overflow may have dropped it meanwhile)."""
        with self.cond:
            if self._items and self._items[0] is item:
                self._items.popleft()

    def take_all(self) -> list[T]:
        with self.cond:
            items = list(self._items)
            self._items.clear()
            return items

    def push_front(self, items: list[T]) -> None:
        """Queue ``items`` again, in their order, ahead of whatever was queued since (the limit
        is not applied: they were queued before)."""
        with self.cond:
            self._items.extendleft(reversed(items))

    def wake(self) -> None:
        """Wake a :meth:`take` waiting (the sender is stopping)."""
        with self.cond:
            self.cond.notify_all()


# ---------------------------------------------------------------- gRPC, shared by the three


def rpc_error(exc: Exception) -> str:
    """A gRPC error as ``last_error`` shows it: ``UNAVAILABLE: details`` (``ERROR: ...``
    when it carries no status code), at most :data:`logs.REMOTE_TEXT_MAX` characters."""
    code = exc.code() if hasattr(exc, "code") else None
    details = exc.details() if hasattr(exc, "details") else exc
    # the peer's details cut, the code kept in front (a log's kind and the health read it)
    return logs.remote_text(f"{code.name if code is not None else 'ERROR'}: {details}")


def grpc_channel(address: str, insecure: bool, tls_cfg: ClientTls,
                 options: list[tuple[str, Any]]) -> grpc.Channel:
    """A channel to ``address``: plaintext if ``insecure``, else TLS (CA, mTLS, server name)."""
    import grpc  # the exporters load gRPC when built, never when a config is parsed

    if insecure:
        return grpc.insecure_channel(address, options=options)
    if tls_cfg.crl:  # gRPC's channels take no CRL: checked by a handshake of our own first
        tls.check_server_crl(address, tls_cfg.ca, tls_cfg.crl, tls_cfg.server_name)
    creds = tls.channel_credentials(tls_cfg.ca, tls_cfg.cert, tls_cfg.key)
    return grpc.secure_channel(address, creds, options=options + tls.channel_options(tls_cfg.server_name))
