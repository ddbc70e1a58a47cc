"""Tick engine: polls each source at its own interval, diffs in the change kernel,
and hands what changed to the listeners (the exporters and the insights pipeline, through
one contract: agent/listener.py).

Scheduling uses the monotonic clock; a tick that overruns is counted and the
missed ticks are skipped, never queued, so the agent never bursts to catch up.
Timestamps are realtime nanoseconds taken when the sample is collected.
"""

from __future__ import annotations

import threading
import time
import traceback
from array import array
from collections import deque
from typing import TYPE_CHECKING, Any

from agent import _backend, logs
from agent.counters import (
    F_JUMP,
    F_NEW,
    SWTEL_ORIGIN,
    UNENCODABLE,
    Batch,
    Container,
    CounterTable,
    StateUpdate,
    escape_key,
)
from agent.handoff import TICK_PASSES, Handoff
from agent.links import Link, LinkTracker
from agent.ports import Moves, PortLedger, deletes, elect, ports_of, relabel
from agent.sources import REGISTRY, Source
from agent.sources.base import NO_DATA
from agent.store import Store

if TYPE_CHECKING:
    from collections.abc import Callable

    from agent.config import Config
    from agent.listener import Listener

log = logs.get("engine")

# sources due within this of a pass are polled in it (at most 5 % of their interval)
_COALESCE_S = 0.002
# flags -> 1 where F_NEW (or F_JUMP) is set: counted with bytes.translate at C speed, not a
# Python loop over every change (102,400 a tick at full churn on 1,024 ports)
_IS_NEW = bytes(1 if f & F_NEW else 0 for f in range(256))
_IS_JUMP = bytes(1 if f & F_JUMP else 0 for f in range(256))
HEALTH_PERIOD_S = 5.0  # how often per-source health is re-published (on change only)
# a counter may move at most 2 x its port's speed x max(time since its last read, this)
JUMP_WINDOW_MIN_S = 10.0
# a source's own sample time further than this from the agent's clock is refused
MAX_CLOCK_SKEW_NS = 5_000_000_000
# a source whose call raised is polled again after its interval doubled per failure, at most this
FAULT_BACKOFF_MAX_S = 30.0


def _containers(table: CounterTable) -> frozenset[Container]:
    """Every container of ``table`` (its hidden counters' too). Made when asked, not kept:
    only a table's change or a source's retirement asks, and the set of a spine's ~10,000
    containers would hold 0.5 MiB for the table's life."""
    return frozenset(table.containers)


def _rank(source: Source) -> int:
    """The source's rank on a path two sources give (``sources.<name>.rank``; 0: none)."""
    return int(getattr(source.section, "rank", 0) or 0)


class PolledSource:
    """A source as the engine polls it: its schedule (interval, next due, backoff), its
    change-kernel state and its statistics."""

    def __init__(self, source: Source, interval_s: float) -> None:
        self.source = source
        self.interval_s = interval_s
        self.next_due = 0.0
        self.link_gen = -1
        self.link_gen_valid = False  # False until the source's setup() has run
        self.table: CounterTable | None = None  # the source's own: the change kernel's state follows it
        #: what the store and the listeners get: ``table`` with the paths elected across the
        #: sources (agent/ports.py elect; ``table`` itself when no counter of it moved)
        self.published: CounterTable | None = None
        self.moves: Moves = {}
        self.published_of: CounterTable | None = None  # the own table ``published`` was made from
        #: the paths published before an election changed them, until the counters moved
        #: have been announced under their new paths
        self.announce_from: set[tuple[Container, str]] | None = None
        #: a source that opens late (an ASIC plugin) keeps the standard leaves it may give from
        #: the lower-ranked sources until its first table, or until its open ends without one
        #: (agent/ports.py elect ``holds``); once over, never again (no flapping on retries)
        self.holds = source.opens_late
        self.prev = array("Q")
        self.acc = array("Q")
        self.known = bytearray()
        self.out_idx = array("I")
        self.out_delta = array("q")
        self.out_flags = bytearray()
        #: per counter, the most it can count per second (its port's speed in bits/s; 0:
        #: unknown): with the time since the last read, the change kernel's jump limit
        self.rates = array("Q")
        self.last_read_mono: float | None = None
        self.jumps = 0  # moves larger than the limit: flagged, not credited
        # statistics for status
        self.reads = 0
        self.attempts = 0  # polls tried, with data or not (first one done: the store is primed)
        self.republish = False  # a new table awaits its first good read to reach the store
        self.overruns = 0
        self.longest_stall = 0  # the most polls missed at once: one blocked call shows here
        self.last_ok_ns = 0
        self.last_duration_us = 0.0
        self.changes = 0
        self._change_times: deque[float] = deque(maxlen=32)
        #: what the last unexpected exception of a call into the source was (None: its last
        #: poll went well); a fault of the source like its own ``fault``, for health
        self.fault: str | None = None
        self.failures = 0  # consecutive polls that raised: the back-off's exponent

    @property
    def name(self) -> str:
        return self.source.name

    def backoff_s(self) -> float:
        """How long a faulted source waits before its next poll: its interval doubled per
        consecutive failure, bounded (a bug on every call must not cost a tick each)."""
        if not self.failures:
            return 0.0
        return min(FAULT_BACKOFF_MAX_S, max(self.interval_s, self.interval_s * 2.0 ** min(self.failures, 32)))

    def adopt_table(self) -> tuple[list[Container], set[str]]:
        """The source rebuilt its table: carry each surviving counter's state over by
        path (so a port add/remove causes no spurious resets); return the containers and
        the ports that are no longer in it."""
        new = self.source.table
        old = self.table
        n = len(new)
        prev, acc, known = array("Q", bytes(8 * n)), array("Q", bytes(8 * n)), bytearray(n)
        gone: list[Container] = []
        ports: set[str] = set()
        if old is not None and len(old):
            where = {old.path_at(j): j for j in range(len(old))}
            for i in range(n):
                j = where.get(new.path_at(i))
                if j is not None:
                    prev[i], acc[i], known[i] = self.prev[j], self.acc[j], self.known[j]
            gone = _containers(old) - _containers(new)
            gone = sorted(gone, key=lambda c: (c.origin, c.path))
            ports = ports_of(old) - ports_of(new)
        self.table, self.prev, self.acc, self.known = new, prev, acc, known
        speeds = self.source.port_speeds
        self.rates = array("Q", [speeds.get(port, 0) if port else 0 for port in map(new.port_at, range(n))])
        self.out_idx = array("I", bytes(4 * n))
        self.out_delta = array("q", bytes(8 * n))
        self.out_flags = bytearray(n)
        return gone, ports

    def inherit(self, old: PolledSource) -> None:
        """Take over a replaced one's counter state (config reload): adopt_table then
        maps it onto the new table by path, so reloading causes no resets."""
        self.table, self.prev, self.acc, self.known = old.table, old.prev, old.acc, old.known
        self.published, self.moves, self.announce_from = old.published, old.moves, old.announce_from
        self.published_of = old.published_of
        self.holds = self.holds and old.holds
        self.source.inherit(old.source)
        self.reads, self.changes, self._change_times = old.reads, old.changes, old._change_times
        self.attempts, self.republish = old.attempts, old.republish
        self.last_read_mono, self.jumps = old.last_read_mono, old.jumps
        self.next_due = old.next_due

    def diff(self, mono: float | None = None) -> int:
        mono = time.monotonic() if mono is None else mono
        # Counters refreshed in bursts (switchd every 2 s, mlxsw's 1 s cache) can show seconds
        # of traffic between two close reads: the limit never assumes less than this window.
        since = 0.0 if self.last_read_mono is None else mono - self.last_read_mono
        elapsed = max(since, JUMP_WINDOW_MIN_S)
        self.last_read_mono = mono
        return _backend.reader.diff(
            self.source.values, self.prev, self.acc, self.known, self.table.widths,
            self.table.kinds, self.out_idx, self.out_delta, self.out_flags, self.rates, elapsed,
        )

    def note_changes(self, n: int, mono: float) -> None:
        if n:
            self.changes += n
            self._change_times.append(mono)

    @property
    def refresh_cadence_s(self) -> float | None:
        """How often this source's values actually change (mean gap between reads with a change)."""
        t = self._change_times
        if len(t) < 2:
            return None
        return (t[-1] - t[0]) / (len(t) - 1)

    def status(self) -> dict[str, Any]:
        cadence = self.refresh_cadence_s
        return {
            "interval_s": self.interval_s,
            "last_ok_ns": self.last_ok_ns or None,  # None: no successful poll yet
            "last_duration_us": round(self.last_duration_us, 1),
            "counters": len(self.table.visible) if self.table else 0,
            "refresh_cadence_s": round(cadence, 4) if cadence is not None else None,
            "reads": self.reads,
            "changes": self.changes,
            "errors": self.source.errors,
            "last_error": self.source.last_error,
            "fault": self.source.fault or self.fault,
            "failures": self.failures,
            "clock_refused": self.source.clock_refused,
            "overruns": self.overruns,
            "longest_stall": self.longest_stall,
            "jumps": self.jumps,
            "ports": len(self.source.ports),
            "selects_ports": self.source.selects_ports,
            **self._info(),
        }

    def _info(self) -> dict[str, Any]:
        try:
            return self.source.info()
        except Exception as exc:  # noqa: BLE001 - status answers whatever a source's info() does
            return {"info_error": repr(exc)[:300]}


class Engine:
    def __init__(self, cfg: Config, listeners: list[Listener] | None = None, store: Store | None = None,
                 clock: Callable[[], float] = time.monotonic):
        self.cfg = cfg
        #: the schedule's clock (monotonic seconds): a test drives the schedule with its own
        self.clock = clock
        #: everything that takes the engine's output, through one contract (agent/
        #: listener.py): the exporters, and the insights pipeline, whose end_pass returns
        #: the events it raised or cleared (states, handed on like any other)
        self.listeners: list[Listener] = list(listeners or [])
        #: the insights pipeline (also among the listeners), or None: handed to the sources that
        #: read it (Source.bind_insights; the events source counts its open events)
        self.insights: Any = None
        self._speeds: dict[str, dict[str, int]] = {}  # source -> port -> link speed (bits/s)
        self.store = store or Store()
        self.store.primed.clear()  # until every source has tried its first read
        self.links = LinkTracker()
        self.ready = threading.Event()  # set after the first successful poll
        self.tick_hooks: list[Callable[[], None]] = []  # run once per loop pass (watchdog)
        self.ticks = 0
        self.overruns = 0
        self._polled: list[PolledSource] = []
        self._rate = logs.RateLimiter(float(cfg.log.rate_limit))
        self.listener_errors = 0
        self._next_health = 0.0
        self._health_sent: dict[tuple[Container, str], Any] = {}
        self._portless: set[str] = set()  # sources logged as selecting no port
        self._ledger = PortLedger()  # which sources hold which interface (agent/ports.py)
        self._drops: list[tuple[str, int, set[Container], set[str]]] = []  # flushed after each pass
        self._seen_gen = -1
        self._links: dict[int, Link] = {}  # this pass's view of the links (LinkTracker.snapshot)
        self._stop = threading.Event()
        self._pending_cfg: Config | None = None
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self.loop_error: str | None = None
        #: other threads' requests for copies of the live state (status): built here between
        #: passes, so no other thread iterates what this one mutates (agent/handoff.py)
        self.handoff = Handoff()

    # ------------------------------------------------------------ lifecycle
    def start(self) -> None:
        self.links.start()
        self._polled = self._make_polled(self.cfg)
        for listener in self.listeners:
            listener.start(self.store)
        self.handoff.reopen()
        self._thread = threading.Thread(target=self._loop, name="swtel-tick", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> bool:
        """End the tick loop: its pass in progress finishes (a plugin call in flight is cut
        short; what the pass produced is work for the exporters), waited for up to
        ``timeout`` s; then the sources close. False when the pass was still running at the
        bound: the sources are then left open to the process's exit rather than closed under
        the thread still reading them."""
        self._stop.set()
        self.handoff.wake.set()  # the idle loop waits on it
        for r in list(self._polled):
            # a plugin call in flight returns now, not at its timeout
            self._guard(r, "interrupt", r.source.interrupt)
        if self._thread is not None:
            self._thread.join(timeout=timeout)
            if self._thread.is_alive():
                log.warning("tick loop still in a pass at stop; not waiting for it", waited_s=timeout)
                return False
        self.links.stop()
        for r in self._polled:
            self._guard(r, "close", r.source.close)
        return True

    def reload(self, cfg: Config) -> None:
        """Apply a new config on the tick thread at its next pass."""
        with self._lock:
            self._pending_cfg = cfg

    def _make_polled(self, cfg: Config, keep: dict[str, PolledSource] | None = None) -> list[PolledSource]:
        made = []
        for name, cls in REGISTRY.items():
            section = getattr(cfg.sources, name, None)
            if section is None or not section.enabled:
                continue
            kept = (keep or {}).get(name)
            if kept is not None and section == kept.source.section and not isinstance(kept.source, _Failed):
                kept.interval_s = cfg.interval_of(name)
                kept.source.cfg = cfg
                made.append(kept)
                continue
            try:
                source = cls(cfg)
            except OSError as exc:
                log.error("source unavailable", source=name, error=str(exc))
                continue
            except Exception as exc:  # noqa: BLE001 - one source's bug must not stop the agent
                where = _where(exc)
                log.error("source failed to start", source=name, error=repr(exc), where=where)
                source = _Failed(cfg, name, f"start: {exc!r} at {where}")
            source.bind_insights(lambda: self.insights)  # a no-op but for a source that reads it
            fresh = PolledSource(source, cfg.interval_of(name))
            if kept is not None:
                try:
                    fresh.inherit(kept)
                except Exception as exc:  # noqa: BLE001 - the reloaded source starts afresh instead
                    log.error("source could not take over its state on reload", source=name, error=repr(exc),
                              where=_where(exc))
                    fresh = PolledSource(source, cfg.interval_of(name))
            made.append(fresh)
        return made

    # ------------------------------------------------------------ the loop
    def _loop(self) -> None:
        try:
            while not self._stop.is_set():
                # other threads' snapshot rendering steps aside while a pass runs (handoff.py)
                TICK_PASSES.begin()
                try:
                    self._hook("open_pass")  # a listener may pack the pass's output as one (dial-out per tick)
                    self._apply_pending_config()
                    now = self.clock()
                    if self.links.generation != self._seen_gen:
                        # One view of the links per pass: every source sets up from the same one.
                        gen, self._links = self.links.snapshot()
                        # Links changed: every link-based source looks now, in this pass, so a
                        # removed port leaves all their tables together and gets one delete.
                        self._seen_gen = gen
                        for polled in self._polled:
                            if polled.source.uses_links and not polled.failures:  # a faulted one waits
                                polled.next_due = min(polled.next_due, now)
                    for polled in self._polled:
                        # A source due a hair after this pass is polled in it: two sources whose
                        # phases differ by microseconds would otherwise take two wake-ups (and
                        # two insight passes) per interval. Each keeps its own schedule.
                        if polled.next_due <= now + min(_COALESCE_S, polled.interval_s * 0.05):
                            self._poll(polled, now)
                            self._schedule(polled, now)
                            if polled.failures:  # backed off: the others keep their schedules
                                polled.next_due = max(polled.next_due, now + polled.backoff_s())
                    self._end_holds()
                    self._flush_drops()
                    self._first_attempt_done()
                    self._end_pass()
                    self.ticks += 1
                    if now >= self._next_health:
                        self._publish_health(now)
                    self._hook("close_pass")  # every on_* of this pass has been called
                    for hook in self.tick_hooks:
                        hook()
                finally:
                    TICK_PASSES.end()
                due = min((r.next_due for r in self._polled), default=self.clock() + 1.0)
                self._idle_until(due)
        except BaseException as exc:  # never die silently: logged once, status and run() see it
            self.loop_error = f"{type(exc).__name__}: {exc}"[:500]
            log.error("tick loop failed; the agent stops polling", error=self.loop_error, exc_info=True)
        finally:
            self.handoff.close()  # nothing mutates the live state now: status builds it in place

    def _idle_until(self, due: float) -> None:
        """Wait for the next due source (or a stop); meanwhile build what other threads asked
        for (status, ports), at once, between passes."""
        handoff = self.handoff
        while not self._stop.is_set():
            handoff.wake.clear()  # cleared before serving: an ask after this wakes the wait below
            handoff.serve()
            remaining = due - self.clock()
            if remaining <= 0:
                return
            handoff.wake.wait(remaining)

    def dead(self) -> bool:
        """The tick loop ended without being asked to (an uncaught error): nothing is polled."""
        t = self._thread
        return t is not None and not t.is_alive() and not self._stop.is_set()

    def _schedule(self, polled: PolledSource, pass_start: float) -> None:
        now = self.clock()
        if polled.next_due == 0.0:
            # Anchor on the pass, not on this source's end: sources polled in one pass stay
            # in phase, so the loop wakes once per interval rather than once per source.
            polled.next_due = pass_start
        polled.next_due += polled.interval_s
        if polled.next_due <= now:
            missed = int((now - polled.next_due) // polled.interval_s) + 1
            polled.overruns += missed
            polled.longest_stall = max(polled.longest_stall, missed)
            self.overruns += missed
            polled.next_due += missed * polled.interval_s

    def _apply_pending_config(self) -> None:
        with self._lock:
            cfg, self._pending_cfg = self._pending_cfg, None
        if cfg is None:
            return
        old = {r.name: r for r in self._polled}
        self._polled = self._make_polled(cfg, keep=old)
        still = {r.name for r in self._polled}
        ts_ns = time.time_ns()
        retired = []
        for name, polled in old.items():
            if not any(r is polled for r in self._polled):
                self._guard(polled, "close", polled.source.close)
            if name not in still:
                self._retire(polled, ts_ns)
                retired.append(polled)
        gone = self._elect(ts_ns, retired)  # ranks may have changed, a source may be gone
        if gone:
            self._drops.append(("", ts_ns, gone, set()))
        for listener in self.listeners:  # on the tick thread, between two passes
            self._call(listener, "on_config", cfg)
        self.cfg = cfg
        self._rate = logs.RateLimiter(float(cfg.log.rate_limit))

    def _retire(self, polled: PolledSource, ts_ns: int) -> None:
        """A source was turned off: its data is gone, so collectors get deletes."""
        self.store.drop_source(polled.name)
        if polled.table is not None:
            # containers another source also publishes stay (their counters go on)
            others = set()
            for r in self._polled:
                if r is not polled and r.published is not None:
                    others |= _containers(r.published)
            mine = _containers(polled.published or polled.table) - others
            self._drops.append((polled.name, ts_ns, mine, ports_of(polled.table)))
        health = Container(SWTEL_ORIGIN, f"/agent/sources/source[name={escape_key(polled.name)}]")
        self._health_sent = {k: v for k, v in self._health_sent.items() if not k[0].path.startswith(health.path)}
        self._drops.append((polled.name, ts_ns, {health}, set()))

    def _poll(self, polled: PolledSource, mono: float) -> None:
        source = polled.source
        t0 = time.perf_counter()
        ts_ns = time.time_ns()
        gen = self._seen_gen
        try:
            wants_setup = not polled.link_gen_valid or source.needs_setup or (
                source.uses_links and gen != polled.link_gen)
        except Exception as exc:  # noqa: BLE001 - needs_setup is the source's code too
            self._source_failed(polled, "setup", exc, self._links_context(source))
            return
        if wants_setup:
            try:
                source.setup(self._links)
            except Exception as exc:  # noqa: BLE001 - isolate the source: the others keep polling
                polled.attempts += 1  # a reported failure: the first snapshot does not wait on it
                self._source_failed(polled, "setup", exc, self._links_context(source))
                return
            polled.link_gen = gen
            polled.link_gen_valid = True
            if source.uses_links and not source.ports and self._rate.allow(("no-ports", source.name)):
                log.warning("source selects no interface", source=source.name,
                            interfaces=list(getattr(source.section, "interfaces", [])))
        if source.table is not polled.table:
            _own_gone, gone_ports = polled.adopt_table()
            polled.republish = True  # the store gets the new table with the next good read
            self._ledger.hold(source.name, polled.table)
            self._note_speeds(source)
            gone = self._elect(ts_ns)  # what each path carries, across the sources' new tables
            if gone or gone_ports:
                # The layout lost them whatever this read brings: their deletes go out now.
                self._drops.append((source.name, ts_ns, set(gone), gone_ports))
        polled.attempts += 1
        try:
            got = source.read()
        except OSError as exc:
            source.note_error(str(exc))
            self._rate.log(log, "warning", ("read", source.name), "read failed", source=source.name, error=str(exc))
            return
        except Exception as exc:  # noqa: BLE001 - isolate the source: the others keep polling
            self._source_failed(polled, "read", exc, {"ports": _few(source.ports)})
            return
        if got == NO_DATA:
            # Nothing was read (a plugin whose layout changed again): the buffer may be freshly
            # zeroed, so diffing it would credit resets and fake values. Skip this sample.
            return
        ts_ns = self._sample_time(source, ts_ns)
        try:
            n = polled.diff(time.monotonic())
        except (ValueError, TypeError, OverflowError) as exc:  # values that do not fit the source's table
            self._source_failed(polled, "read", exc, {"ports": _few(source.ports), "values": len(source.values),
                                                      "counters": len(polled.table or ())})
            return
        polled.reads += 1
        polled.last_ok_ns = ts_ns
        rebuilt, polled.republish = polled.republish, False
        if n or rebuilt:
            # Listeners may hold the batch past this tick: give them a copy.
            values = array("Q", polled.acc)
            self.store.set_source(source.name, polled.published, values, ts_ns)
            if rebuilt and polled.announce_from is not None:
                self._announce(polled, values, ts_ns, set(polled.out_idx[:n].tolist()))
        else:
            self.store.touch_source(source.name, ts_ns)
        try:
            states = source.states(ts_ns)
        except Exception as exc:  # noqa: BLE001 - the read's values still go out, below
            states = None
            self._source_failed(polled, "states", exc, {"ports": _few(source.ports)})
        else:
            if polled.failures:  # a whole good poll: the fault is over, the schedule is its own again
                self._source_recovered(polled)
        if states:
            self.store.set_states(states)
            self._tell("on_state", states)
        if n:
            idx = polled.out_idx[:n]  # (copies: these arrays are reused by the next read)
            flags = bytes(polled.out_flags[:n])
            batch = Batch(source.name, ts_ns, polled.published, idx, values, polled.out_delta[:n], flags)
            # The first read of a counter is its baseline, not a change seen on the wire.
            fresh = flags.translate(_IS_NEW).count(1)
            jumps = flags.translate(_IS_JUMP).count(1)
            polled.note_changes(n - fresh, mono)
            if jumps:
                self._note_jumps(polled, batch, jumps)
            self._tell("on_batch", batch)
        polled.last_duration_us = (time.perf_counter() - t0) * 1e6
        if not self.ready.is_set():
            self.ready.set()

    def _source_failed(self, polled: PolledSource, what: str, exc: Exception, context: dict[str, Any]) -> None:
        """An unexpected exception from a call into a source (a bug, or input it did not
        expect): counted, logged with what it was given, the source faulted and backed off."""
        where = _where(exc)
        message = f"{what}: {exc!r} at {where}"[:500]
        polled.source.note_error(message)
        polled.fault = message
        polled.failures += 1
        self._rate.log(log, "error", ("fault", polled.name, what), "source failed", source=polled.name,
                       call=what, error=repr(exc)[:300], where=where, retry_in_s=round(polled.backoff_s(), 3),
                       **context)

    def _source_recovered(self, polled: PolledSource) -> None:
        log.info("source recovered", source=polled.name, after_failures=polled.failures)
        polled.fault, polled.failures = None, 0
        for what in ("setup", "read", "states"):
            self._rate.forget(("fault", polled.name, what))

    def _guard(self, polled: PolledSource, what: str, call: Callable[[], Any]) -> None:
        """``close`` or ``interrupt``: a source's exception there is its fault, not the agent's."""
        try:
            call()
        except Exception as exc:  # noqa: BLE001 - the other sources still close
            self._source_failed(polled, what, exc, {})

    def _links_context(self, source: Source) -> dict[str, Any]:
        """What a link-based source's setup was given: the links' names (printable: escaped)."""
        if not source.uses_links:
            return {}
        return {"links": _few(sorted(link.name for link in self._links.values()))}

    def _elect(self, ts_ns: int, retired: list[PolledSource] | None = None) -> set[Container]:
        """Elect again what each path carries (agent/ports.py elect) after a source's table or
        the config changed; a source whose published table changes has it stored and its
        moved counters announced under their new paths (their value, delta 0, flagged new),
        now or with its next good read. Returns the containers no source publishes any more;
        leaves that left a container that stays are deleted one by one (in ``_drops``).
        ``retired``: sources a reload turned off (a path of theirs another takes changes source)."""
        tabled = [r for r in self._polled if r.table is not None]
        holds = [(_rank(r.source), r.source.serves) for r in self._polled
                 if r.holds and not (r.table is not None and len(r.table))]
        all_moves = elect([(r.name, r.table, _rank(r.source)) for r in tabled], holds)
        changed: list[tuple[PolledSource, CounterTable | None, Moves]] = []
        for r, moves in zip(tabled, all_moves, strict=True):
            if r.published is not None and r.published_of is r.table and moves == r.moves:
                continue
            old, old_moves = r.published, r.moves
            r.published, r.moves, r.published_of = relabel(r.table, moves), moves, r.table
            changed.append((r, old, old_moves))
        if not changed:
            return set()
        self._resourced(changed, ts_ns, retired or [])
        now: set[Container] = set()
        for r in tabled:
            now |= _containers(r.published)
        gone: set[Container] = set()
        # leaves no longer there in a container that stays: one an election had moved, or one
        # in a container only another source still publishes (sources never share one else)
        stale: set[tuple[Container, str]] = set()
        for r, old, old_moves in changed:
            if old is None:
                continue
            gone |= _containers(old) - now
            mine = _containers(r.published)
            for i in old.visible:
                container, leaf = old.path_at(i)
                if container in now and (i in old_moves or container not in mine):
                    stale.add((container, leaf))
            if r.announce_from is None and (old_moves or r.moves):  # paths an election moved
                r.announce_from = {old.path_at(i) for i in old.visible}
            if r.announce_from is not None and not r.republish and r.reads:  # stored: announce now
                values = array("Q", r.acc)
                self.store.set_source(r.name, r.published, values, r.last_ok_ns)
                self._announce(r, values, r.last_ok_ns, set())
        if stale:
            for r in tabled:
                path_at = r.published.path_at
                for i in r.published.visible:
                    stale.discard(path_at(i))
            leaves = [Container(c.origin, f"{c.path}/{leaf}") for c, leaf in sorted(
                stale, key=lambda x: (x[0].origin, x[0].path, x[1]))]
            if leaves:
                self._drops.append(("", ts_ns, set(leaves), set()))
        return gone

    def _resourced(self, changed: list[tuple[PolledSource, CounterTable | None, Moves]], ts_ns: int,
                   retired: list[PolledSource]) -> None:
        """A path whose counter comes from another source from now on is deleted at once,
        before the new source's first value on it (announced after this, or with its next
        read): a collector never sees one path's counter jump from one source's total to
        another's (docs/paths.md, "One counter, one path")."""
        before: dict[tuple[Container, str], str] = {}
        for r, old, _old_moves in [*((r, r.published, {}) for r in retired), *changed]:
            if old is not None:
                for i in old.visible:
                    before[old.path_at(i)] = r.name
        if not before:
            return
        moved: set[tuple[Container, str]] = set()
        for r, _old, _old_moves in changed:  # a path newly taken is taken by a changed table
            path_at = r.published.path_at
            for i in r.published.visible:
                path = path_at(i)
                was = before.get(path)
                if was is not None and was != r.name:
                    moved.add(path)
        if moved:
            leaves = [Container(c.origin, f"{c.path}/{leaf}") for c, leaf in sorted(
                moved, key=lambda x: (x[0].origin, x[0].path, x[1]))]
            self.store.drop_containers(leaves)
            self._tell("on_delete", ts_ns, leaves)

    def _end_holds(self) -> None:
        """A source that opens late stops keeping the standard leaves from the lower-ranked
        sources once it has a table (the election then goes by what it gives), or when its open
        ended without one (a failed open, its helper's open deadline): the lower-ranked
        counters then take those leaves, and the log says so."""
        ended = []
        for r in self._polled:
            if not r.holds:
                continue
            if r.table is not None and len(r.table):
                r.holds = False  # (elected with its table when it came)
            elif r.attempts and not r.source.starting:
                r.holds = False
                ended.append(r)
        if not ended:
            return
        for r in ended:
            log.warning("source did not open: lower-ranked sources now give the standard leaves it "
                        "may give", source=r.name, fault=r.source.fault, rank=_rank(r.source))
        ts_ns = time.time_ns()
        gone = self._elect(ts_ns)
        if gone:
            self._drops.append(("", ts_ns, gone, set()))

    def _announce(self, polled: PolledSource, values: array, ts_ns: int, sent: set[int]) -> None:
        """The counters an election moved, under their new paths: their current value, delta
        0, flagged new (a collector holds the path from now on). ``sent``: already in this
        read's batch."""
        before, polled.announce_from = polled.announce_from or set(), None
        table = polled.published
        idx = [i for i in table.visible if polled.known[i] and i not in sent
               and table.path_at(i) not in before]
        if idx:
            n = len(idx)
            self._tell("on_batch", Batch(polled.name, ts_ns, table, idx, values, [0] * n, bytes([F_NEW]) * n))

    def _note_jumps(self, polled: PolledSource, batch: Batch, jumps: int) -> None:
        """Moves larger than a counter can make (port speed x time since the last read): not
        credited (the change kernel flags them RESET and JUMP); counted and logged."""
        polled.jumps += jumps
        example = next(path for (_s, path, _v, _d, f) in batch.items() if f & F_JUMP)
        self._rate.log(log, "warning", ("jump", polled.name), "counter moved more than its limit",
                       source=polled.name, counters=jumps, example=example,
                       hint="not credited; the counter's total restarts from its new value")

    def _first_attempt_done(self) -> None:
        """Once every source has tried its first read (with data or a reported failure), the
        store holds the initial state: snapshots and ``sync_response`` may go out."""
        if not self.store.primed.is_set() and all(r.attempts and not r.source.starting for r in self._polled):
            self.store.primed.set()

    def _sample_time(self, source: Source, agent_ns: int) -> int:
        """The source's own collection time when it has one and it is plausible; otherwise the
        agent's. A plugin stamping another clock (CLOCK_MONOTONIC, a wrong unit) would stream
        1970 or the far future, so such a stamp is refused, counted and logged."""
        ts = source.sample_ts_ns
        if not ts:
            return agent_ns
        if abs(ts - agent_ns) <= MAX_CLOCK_SKEW_NS:
            return ts
        source.clock_refused += 1
        message = (f"timestamp {ts} is {(ts - agent_ns) / 1e9:+.3g} s from the agent's clock "
                   f"(limit {MAX_CLOCK_SKEW_NS / 1e9:g} s): not CLOCK_REALTIME nanoseconds? "
                   "the agent's own time is used")
        source.note_error(message)
        self._rate.log(log, "error", ("clock", source.name), "sample timestamp refused",
                       source=source.name, error=message)
        return agent_ns

    def _note_speeds(self, source: Source) -> None:
        speeds = dict(source.port_speeds)
        if self._speeds.get(source.name, {}) == speeds:
            return
        self._speeds[source.name] = speeds
        merged = self.port_speeds()
        for listener in self.listeners:
            self._call(listener, "on_port_speeds", merged)

    def source_names(self) -> list[str]:
        """The sources polled (a copy: safe from any thread)."""
        return [r.name for r in list(self._polled)]

    def port_speeds(self) -> dict[str, int]:
        """Link speed (bits/s) of every port a source knows it for (the ASIC plugin's)."""
        merged: dict[str, int] = {}
        for per_source in list(self._speeds.values()):
            merged.update(per_source)
        return merged

    def _end_pass(self) -> None:
        """The pass is over: a listener that derives state from it (the detectors) returns
        its updates, which go to the store and every listener like any other state."""
        for listener in self.listeners:
            updates = self._call(listener, "end_pass", time.time_ns())
            if updates:
                self.store.set_states(updates)
                self._tell("on_state", updates)

    def _hook(self, method: str) -> None:
        """A per-pass hook (``open_pass``, ``close_pass``: no-ops but where a listener takes them)."""
        for listener in self.listeners:
            self._call(listener, method)

    def _tell(self, method: str, *args: Any) -> None:
        """Hand data to every listener; one listener's bug must not stop polling or the others."""
        for listener in self.listeners:
            self._call(listener, method, *args)

    def _call(self, listener: Listener, method: str, *args: Any) -> Any:
        try:
            return getattr(listener, method)(*args)
        except Exception as exc:  # noqa: BLE001 - isolate listeners from the tick loop
            self.listener_errors += 1
            self._rate.log(log, "error", ("listener", getattr(listener, "name", "?"), method),
                           "listener failed", listener=getattr(listener, "name", "?"),
                           method=method, error=repr(exc))
            return None

    def _flush_drops(self) -> None:
        """Turn this pass's dropped containers and ports into deletes. A port's whole
        subtree (both origins) is deleted once its last source dropped it; containers of a
        port that stays (another source still reads it) are deleted one by one."""
        if not self._drops:
            return
        drops, self._drops = self._drops, []
        ts_ns = max(d[1] for d in drops)
        vanished: set[str] = set()
        gone: set[Container] = set()
        for source, _ts, containers, ports in drops:
            gone |= containers
            vanished |= self._ledger.release(source, ports)
        out = deletes(vanished, gone)
        if out:
            self.store.drop_containers(out)
            self._tell("on_delete", ts_ns, out)

    def _publish_health(self, now: float) -> None:
        """Every HEALTH_PERIOD_S, each source's interval, measured refresh cadence, read
        cost and overruns go out as on-change values under swtel:/agent/sources/..."""
        self._next_health = now + HEALTH_PERIOD_S
        self._note_portless()
        ts_ns = time.time_ns()
        updates = []
        for r in self._polled:
            c = Container(SWTEL_ORIGIN, f"/agent/sources/source[name={escape_key(r.name)}]/state")
            cadence = r.refresh_cadence_s
            for leaf, value in (
                ("interval-ms", round(r.interval_s * 1000)),
                ("refresh-cadence-ms", None if cadence is None else round(cadence * 1000)),
                ("last-read-us", round(r.last_duration_us)),
                ("overruns", r.overruns),
                ("errors", r.source.errors),
                ("last-error", r.source.last_error or ""),
                ("fault", r.source.fault or r.fault or ""),
            ):
                if value is not None and self._health_sent.get((c, leaf)) != value:
                    self._health_sent[(c, leaf)] = value
                    updates.append(StateUpdate(ts_ns, c, leaf, value, "agent"))
        for listener in self.listeners:  # a listener's own health (the gNMI server's RPC counts)
            for c, leaf, value in self._call(listener, "health_values") or ():
                if self._health_sent.get((c, leaf)) != value:
                    self._health_sent[(c, leaf)] = value
                    updates.append(StateUpdate(ts_ns, c, leaf, value, "agent"))
        if updates:
            self.store.set_states(updates)
            self._tell("on_state", updates)

    def _note_portless(self) -> None:
        """One log line for every source that has read but selects no port (an interface
        glob matching nothing, a plugin with no port), and one when it has ports again;
        ``swtel status`` turns it red after the health grace (agent/control/client.py)."""
        for r in self._polled:
            source = r.source
            if not source.selects_ports or not r.attempts or source.starting:
                continue
            if not source.ports and r.name not in self._portless:
                self._portless.add(r.name)
                log.warning("source selects no port", source=r.name,
                            interfaces=list(getattr(source.section, "interfaces", []) or []),
                            hint="check the source's interfaces globs (Cumulus names ports swpN) "
                                 "or the plugin's ports; health turns red after control.health_grace")
            elif source.ports and r.name in self._portless:
                self._portless.discard(r.name)
                log.info("source selects ports again", source=r.name, ports=len(source.ports))

    # ------------------------------------------------------------ status
    def status(self) -> dict[str, Any]:
        return {
            "ticks": self.ticks,
            "overruns": self.overruns,
            "listener_errors": self.listener_errors,
            "loop_error": self.loop_error,
            "sources": {r.name: r.status() for r in self._polled},
            "escaped_names": self.escaped_names(),
            "unencodable": UNENCODABLE.count,
        }

    def escaped_names(self) -> list[dict[str, Any]]:
        """The links whose kernel names are not text, with the escaped name their paths use."""
        links = self._links  # replaced whole by the tick thread, never changed in place
        return [{"ifindex": link.ifindex, "name": link.name, "kernel_name": repr(link.raw)}
                for link in sorted(links.values(), key=lambda x: x.ifindex) if link.escaped]


def _few(names: list[str], most: int = 20) -> list[str]:
    """The first ``most`` names of a list for a log line (and how many more)."""
    return names if len(names) <= most else [*names[:most], f"... {len(names) - most} more"]


def _where(exc: BaseException) -> str:
    """Where an exception was raised: the innermost frame's file, line and function."""
    frames = traceback.extract_tb(exc.__traceback__)
    if not frames:
        return "?"
    f = frames[-1]
    return f"{f.filename.rsplit('/', 1)[-1]}:{f.lineno} in {f.name}"


class _Failed(Source):
    """Stands in for a source whose construction raised: no counters, its fault in status and
    health until a reload builds it again."""

    uses_links = False

    def __init__(self, cfg: Config, name: str, fault: str) -> None:
        self.name = name  # type: ignore[misc] - the failed source's own name
        super().__init__(cfg)
        self.fault = fault
        self.note_error(fault)

    def setup(self, links: dict[int, Link]) -> None:
        pass

    def read(self) -> int:
        return NO_DATA
