"""What other threads ask of the tick thread's live state, built on the tick thread.

The tick thread owns its structures (the event book's deque, the port tables, the sources'
own state) and mutates them without locks: a reader on another thread that iterates them
fails (``deque mutated during iteration``) exactly when they churn. So a reader never
iterates them: it hands a build function to :meth:`Handoff.ask`, the tick thread runs it
between two passes (:meth:`Handoff.serve`, woken through :attr:`Handoff.wake`) and hands the
result back through a :class:`threading.Event`.

Lazy on purpose: a snapshot published every pass would cost the tick a full copy (events,
per-source state) at 1,024 ports for nobody; this costs nothing until someone asks.
The wait is bounded: a tick thread stuck in a poll gets the caller the last result built
for the same key, with its age (:class:`Answer`), or :class:`TickBusy` when there is none.
Before the loop starts and once it has ended (stopped, or dead of an error) nothing mutates
its structures, and the build runs in the caller (one at a time).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

T = TypeVar("T")
#: how long a caller waits for the tick thread before it falls back to the last result
WAIT_S = 2.0
#: ... and, when there is none yet (a first pass that sets up every port on a busy machine),
#: before it gives up: within the 5 s a client waits for its reply
FIRST_WAIT_S = 4.0


class TickBusy(RuntimeError):
    """The tick thread did not build the answer in time, and none was built before."""


@dataclass(frozen=True)
class Answer(Generic[T]):
    """A result built for the caller: ``stale_s`` is None when fresh, else how old the
    previous result (given instead, the tick thread being busy) is, in seconds."""

    value: T
    stale_s: float | None = None


class _Ask:
    __slots__ = ("build", "done", "result", "error")

    def __init__(self, build: Callable[[], Any]) -> None:
        self.build = build
        self.done = threading.Event()
        self.result: Any = None
        self.error: BaseException | None = None


class Handoff:
    def __init__(self, wait_s: float = WAIT_S, first_wait_s: float = FIRST_WAIT_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.wait_s = wait_s
        self.first_wait_s = max(first_wait_s, wait_s)
        self._clock = clock
        #: set by :meth:`ask` (and by the engine's stop): the idle tick thread wakes at once
        self.wake = threading.Event()
        self._lock = threading.Lock()
        self._pending: list[_Ask] = []
        self._closed = True  # no tick loop yet (:meth:`reopen` when one starts): builds run in place
        self._direct = threading.Lock()  # builds in callers after the loop ended: one at a time
        self._last: dict[str, tuple[float, Any]] = {}  # key -> (when built, result)
        self.served = 0  # builds run on the tick thread (tests and status read it)

    # ------------------------------------------------------------ any thread but the tick's
    def ask(self, key: str, build: Callable[[], T]) -> Answer[T]:
        """``build()``'s result, run on the tick thread; its exception is raised here.
        Waits up to :attr:`wait_s`, then gives the last result of ``key`` marked stale; with
        none, waits on up to :attr:`first_wait_s` in all, then raises :class:`TickBusy`."""
        ask = _Ask(build)
        with self._lock:
            closed = self._closed
            if not closed:
                self._pending.append(ask)
        if closed:
            with self._direct:
                value = build()
                self._last[key] = (self._clock(), value)
            return Answer(value)
        self.wake.set()
        if not ask.done.wait(self.wait_s):
            with self._lock:
                last = self._last.get(key)
            if last is None:
                ask.done.wait(self.first_wait_s - self.wait_s)
            with self._lock:
                taken = ask not in self._pending
                if not taken:
                    self._pending.remove(ask)
            if not taken:
                if last is None:
                    raise TickBusy(f"the tick loop has not answered for {self.first_wait_s:g} s "
                                   "(a poll blocking it?) and no earlier answer exists")
                return Answer(last[1], round(max(0.0, self._clock() - last[0]), 3))
            if not ask.done.wait(self.wait_s):  # the tick thread is building it now
                raise TickBusy("the tick loop did not finish building the answer in time")
        if ask.error is not None:
            raise ask.error
        with self._lock:
            self._last[key] = (self._clock(), ask.result)
        return Answer(ask.result)

    # ------------------------------------------------------------ the tick thread
    def serve(self) -> None:
        """Build every pending answer (the tick thread, between passes). A build that raises
        hands its exception to its caller: never to the tick loop."""
        if not self._pending:  # the common case costs one truthiness check
            return
        with self._lock:
            asks, self._pending = self._pending, []
        for ask in asks:
            try:
                ask.result = ask.build()
            except Exception as exc:  # noqa: BLE001 - the caller's error, reported to the caller
                ask.error = exc
            self.served += 1
            ask.done.set()

    def close(self) -> None:
        """The tick loop has ended: answer what waits, and build later asks in their callers."""
        with self._lock:
            self._closed = True
        self.serve()

    def reopen(self) -> None:
        """A tick loop (again) owns the structures: asks go to it."""
        with self._lock:
            self._closed = False


class TickPasses:
    """Whether a tick pass is running, for other threads' long Python work to step aside.

    A gNMI snapshot (a Get of a spine's whole tree) is seconds of Python on the interpreter
    lock the tick thread needs; under the lock's round robin a few of them starve the tick
    loop (missed ticks: bench/bench_server_load.py). So such work calls :meth:`step_aside`
    every few hundred values: while a pass runs it waits for the pass to end, lock released,
    and the tick thread runs alone. A pass that outlasts ``most_s`` (a source stuck in a
    poll) is waited for once per thread, not at every call."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._running = 0  # engines in a pass (tests run more than one per process)
        self._number = 0  # passes begun: a thread that waited one out does not wait again
        self._tick_threads: set[int] = set()  # threads in a pass: they never wait for themselves
        self._quiet = threading.Event()
        self._quiet.set()
        self._local = threading.local()

    def begin(self) -> None:
        with self._lock:
            self._running += 1
            self._number += 1
            self._tick_threads.add(threading.get_ident())
            self._quiet.clear()

    def end(self) -> None:
        with self._lock:
            self._running = max(0, self._running - 1)
            self._tick_threads.discard(threading.get_ident())
            if not self._running:
                self._quiet.set()

    def step_aside(self, most_s: float = 0.25) -> None:
        if self._quiet.is_set() or threading.get_ident() in self._tick_threads:
            return  # (the tick thread itself, matching a table in its pass, goes on)
        number = self._number
        if getattr(self._local, "waited", -1) == number:
            return
        if not self._quiet.wait(most_s):
            self._local.waited = number


#: the agent's tick passes (agent/engine.py begins and ends them)
TICK_PASSES = TickPasses()
