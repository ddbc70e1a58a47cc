"""The reconnecting sender that dial-out, the tunnel client and OTLP share
(agent/exporters/sender.py): backoff with jitter, the state machine and its counters, the
outage's log lines, the bounded queue. Driven synchronously: no network, no sleeps."""

from __future__ import annotations

import threading
from collections.abc import Callable

import pytest
import structlog

from agent import logs
from agent.exporters import sender
from agent.exporters.sender import JITTER, MAX_LOG_KEYS, Backoff, BoundedQueue, ReconnectingSender

# pure Python, whichever backend or library versions run it
pytestmark = pytest.mark.once

log = logs.get("test-sender")


@pytest.fixture
def no_jitter(monkeypatch):
    """Every jitter factor 1.0, so that delays are exact."""
    monkeypatch.setattr(sender.random, "uniform", lambda a, b: 1.0)


# ---------------------------------------------------------------- backoff


def test_backoff_doubles_to_its_maximum_and_resets(no_jitter):
    b = Backoff(0.5, 5.0)
    assert [b.next() for _ in range(6)] == [0.5, 1.0, 2.0, 4.0, 5.0, 5.0]
    b.reset()
    assert [b.next() for _ in range(2)] == [0.5, 1.0]


@pytest.mark.parametrize("factor", JITTER)
def test_jitter_at_its_bounds(monkeypatch, factor):
    """Uncapped (dial-out, OTLP), the jitter may go past the maximum; capped (the tunnel's
    retry_interval, NVUE's longest wait), never."""
    monkeypatch.setattr(sender.random, "uniform", lambda a, b: factor)
    free, capped = Backoff(0.5, 2.0), Backoff(0.5, 2.0, cap=True)
    assert [free.next() for _ in range(4)] == pytest.approx([0.5 * factor, factor, 2 * factor, 2 * factor])
    assert [capped.next() for _ in range(4)] == pytest.approx(
        [0.5 * factor, factor, min(2 * factor, 2.0), min(2 * factor, 2.0)])


def test_jittered_delays_stay_within_bounds_and_vary():
    bases = [0.5, 1.0, 2.0, 4.0, 8.0, 8.0, 8.0, 8.0]
    free_delays, capped_delays = [], []
    for _ in range(200):
        free, capped = Backoff(0.5, 8.0), Backoff(0.5, 8.0, cap=True)
        free_delays.append([free.next() for _ in bases])
        capped_delays.append([capped.next() for _ in bases])
    for run in free_delays:
        for base, delay in zip(bases, run, strict=True):
            assert JITTER[0] * base <= delay <= JITTER[1] * base
    for run in capped_delays:
        for base, delay in zip(bases, run, strict=True):
            assert JITTER[0] * base <= delay <= min(JITTER[1] * base, 8.0)
    assert len({run[0] for run in free_delays}) > 100  # jittered: agents do not retry in step


# ---------------------------------------------------------------- the connection loop


class _NoWait(threading.Event):
    """The stop event, its waits recorded instead of slept."""

    def __init__(self) -> None:
        super().__init__()
        self.waits: list[float] = []

    def wait(self, timeout: float | None = None) -> bool:
        self.waits.append(timeout)
        return self.is_set()


class Scripted(ReconnectingSender):
    """A sender whose attempts follow a script; it stops when the script is done."""

    def __init__(self, script: list[Callable[[Scripted], str]], **kw) -> None:
        super().__init__(log, 0.5, 4.0, **kw)
        self._stopping = _NoWait()
        self.script = list(script)
        self.downs: list[tuple[str, float, Exception | None, str, int | None]] = []
        self.seen: list[tuple[str, int | None]] = []  # (state, down_since_ns) as each attempt starts

    def _attempt(self) -> str:
        self.seen.append((self.state, self.down_since_ns))
        if not self.script:
            self._stopping.set()
            return "stopped"
        return self.script.pop(0)(self)

    def _went_down(self, error: str, delay: float, unexpected: Exception | None) -> None:
        self.downs.append((error, delay, unexpected, self.state, self.down_since_ns))
        self._log_outage("warning", logs.kind(error), "scripted down", error=error)


def fail(error: str = "UNAVAILABLE: refused") -> Callable[[Scripted], str]:
    return lambda s: error


def prove_then_fail(error: str = "UNAVAILABLE: lost") -> Callable[[Scripted], str]:
    def attempt(s: Scripted) -> str:
        s._connected()
        assert s.state == "connected" and s.down_since_ns is None
        return error
    return attempt


def test_unproven_attempts_back_off_and_keep_the_outage(no_jitter):
    """A peer that accepts TCP and refuses the rest: retries ever slower, down_since_ns kept."""
    s = Scripted([fail()] * 5)
    started = s.down_since_ns
    s._run()
    assert [d[1] for d in s.downs] == [0.5, 1.0, 2.0, 4.0, 4.0]
    assert s._stopping.waits == [0.5, 1.0, 2.0, 4.0, 4.0]
    assert all(state == "connecting" for state, _ in s.seen)  # every attempt starts connecting
    assert {d[3] for d in s.downs} == {"down"} and {d[4] for d in s.downs} == {started}
    assert s.connects == 0 and s.reconnects == 0 and s.state == "down"
    assert s.last_error == "UNAVAILABLE: refused"


def test_a_proven_connection_resets_the_backoff_and_starts_a_new_outage(no_jitter):
    s = Scripted([fail(), fail(), prove_then_fail(), fail(), prove_then_fail(), prove_then_fail()])
    first = s.down_since_ns
    s._run()
    assert [d[1] for d in s.downs] == [0.5, 1.0, 0.5, 1.0, 0.5, 0.5]
    outages = [d[4] for d in s.downs]
    assert outages[0] == outages[1] == first
    assert outages[2] != first and outages[2] == outages[3]  # a new outage, kept while unproven
    assert len(set(outages)) == 4  # each lost connection starts one
    assert s.connects == 3 and s.reconnects == 2
    assert [d[0] for d in s.downs][2] == "UNAVAILABLE: lost" and s.last_error == "UNAVAILABLE: lost"


def test_a_bug_in_an_attempt_is_retried_not_fatal(no_jitter):
    def bug(s: Scripted) -> str:
        raise KeyError("injected")

    s = Scripted([bug, fail()])
    s._run()
    error, delay, unexpected, _state, _since = s.downs[0]
    assert error == "KeyError: 'injected'" and isinstance(unexpected, KeyError) and delay == 0.5
    assert s.downs[1][2] is None and len(s.downs) == 2


def test_stopping_during_an_attempt_ends_the_loop_without_an_outage():
    def stopped(s: Scripted) -> str:
        s._stopping.set()
        return "CANCELLED: stopping"

    s = Scripted([stopped])
    s._run()
    assert s.downs == [] and s._stopping.waits == [] and s.state == "down"
    assert s.last_error is None  # the stop was not a failure


def test_up_state_and_initial_state_are_the_exporters():
    class Registering(ReconnectingSender):
        up_state = "registered"

    r = Registering(log, 0.5, 1.0, state="connecting")
    assert r.state == "connecting" and r.down_since_ns is not None
    assert r._connected() >= 0.0 and r.state == "registered" and r.down_since_ns is None


def test_down_starts_an_outage_only_after_a_proven_connection():
    s = ReconnectingSender(log, 0.5, 1.0, state="connecting")
    started = s.down_since_ns
    assert s._down("UNAVAILABLE: x", "connecting") is False
    assert (s.state, s.down_since_ns, s.last_error) == ("connecting", started, "UNAVAILABLE: x")
    s._connected()
    assert s._down("receiver rejected 2 of 2 points", "rejecting") is True
    assert s.state == "rejecting" and s.down_since_ns is not None and s.down_since_ns >= started
    assert s._down("UNAVAILABLE: y") is False and s.state == "down"


# ---------------------------------------------------------------- outage logging


def test_outage_lines_once_per_key_then_news_again_after_a_connection():
    s = ReconnectingSender(log, 0.5, 1.0)
    with structlog.testing.capture_logs() as captured:
        for i in range(20):  # worded differently, one kind: one line
            s._log_outage("warning", logs.kind(f"UNAVAILABLE: frame type {i}"), "down", n=i)
        s._log_outage("error", "TLS setup: no such file", "down", n=99)
        s.log_limiter.log(log, "warning", "rejecting", "rejects")  # not an outage line
        assert [(e["n"], e["log_level"]) for e in captured if e["event"] == "down"] == [(0, "warning"), (99, "error")]
        assert len(s._log_keys) == 2
        s._connected()
        assert s._log_keys == set()
        s._log_outage("warning", logs.kind("UNAVAILABLE: again"), "down", n=100)
        s.log_limiter.log(log, "warning", "rejecting", "rejects")  # still limited: not forgotten
    assert [e["n"] for e in captured if e["event"] == "down"] == [0, 99, 100]
    assert [e["event"] for e in captured].count("rejects") == 1


def test_suppressed_lines_are_counted_on_the_next_one_let_through():
    s = ReconnectingSender(log, 0.5, 1.0)
    s.log_limiter.period_s = 0  # every line through, the count of none suppressed
    with structlog.testing.capture_logs() as captured:
        s._log_outage("warning", "k", "down")
        s.log_limiter.period_s = 3600
        s._log_outage("warning", "k", "down")
        s._log_outage("warning", "k", "down")
        s.log_limiter.period_s = 0
        s._log_outage("warning", "k", "down")
    assert [e.get("suppressed") for e in captured] == [None, 2]


def test_outage_keys_remembered_are_bounded():
    s = ReconnectingSender(log, 0.5, 1.0)
    for i in range(MAX_LOG_KEYS + 50):
        s._log_outage("debug", ("kind", i), "down")
    assert len(s._log_keys) == MAX_LOG_KEYS


# ---------------------------------------------------------------- the bounded queue


def test_queue_overflow_drops_the_oldest_and_counts():
    q: BoundedQueue[int] = BoundedQueue(3)
    gone: list[int] = []
    q.put(range(5), gone.append)
    assert list(q) == [2, 3, 4] and len(q) == 3 and q.dropped == 2 and gone == [0, 1]
    q.put([5])
    assert list(q) == [3, 4, 5] and q.dropped == 3 and gone == [0, 1]  # on_drop per call
    assert [q.take(0), q.take(0)] == [3, 4] and len(q) == 1


def test_queue_take_peek_discard_push_front():
    q: BoundedQueue[tuple[bytes, int]] = BoundedQueue(2)
    assert q.take(0) is None and q.peek() is None and not q
    a, b, c = (b"a", 1), (b"b", 2), (b"c", 3)
    q.put([a, b])
    head = q.peek()
    assert head is a and len(q) == 2  # left queued
    q.put([c])  # overflow drops the head while it is being sent
    q.discard(head)
    assert list(q) == [b, c]  # the sent request was gone already: nothing else removed
    q.discard(q.peek())
    assert list(q) == [c] and q.dropped == 1
    q.push_front([a, b])  # back ahead of what came since, the limit not applied
    assert list(q) == [a, b, c]
    assert q.take_all() == [a, b, c] and len(q) == 0


def test_queue_take_waits_for_a_put_and_wake_ends_the_wait():
    q: BoundedQueue[str] = BoundedQueue(10)
    got: list[str | None] = []
    waiter = threading.Thread(target=lambda: got.append(q.take(60)))
    waiter.start()
    q.put(["x"])
    waiter.join(10)
    assert not waiter.is_alive() and got == ["x"]
    waiter = threading.Thread(target=lambda: got.append(q.take(60)))
    waiter.start()
    # wake until the waiter is gone: one call may come before it waits
    for _ in range(1000):
        q.wake()
        waiter.join(0.01)
        if not waiter.is_alive():
            break
    assert not waiter.is_alive() and got == ["x", None]


def test_iterating_the_queue_sees_a_copy():
    q: BoundedQueue[int] = BoundedQueue(5)
    q.put([1, 2])
    for item in q:
        q.put([item + 10])  # would raise on a live deque
    assert list(q) == [1, 2, 11, 12]


# ---------------------------------------------------------------- gRPC errors


def test_rpc_error_text():
    class Code:
        name = "UNAVAILABLE"

    class WithCode(Exception):
        def code(self):
            return Code()

        def details(self):
            return "connection refused"

    assert sender.rpc_error(WithCode()) == "UNAVAILABLE: connection refused"
    assert sender.rpc_error(RuntimeError("odd")) == "ERROR: odd"


def test_a_reconnect_moves_the_outage_error_to_previous_error(no_jitter):
    """``last_error`` beside ``connected`` read as a current problem: a proven connection makes
    it ``previous_error`` (why it reconnected), and the next failure is the last error again."""
    seen: list[tuple[str, str | None, str | None]] = []

    def prove_and_look(s: Scripted) -> str:
        s._connected()
        seen.append((s.state, s.last_error, s.previous_error))
        return "UNAVAILABLE: lost"

    s = Scripted([fail("UNAVAILABLE: refused"), prove_and_look, fail("UNAVAILABLE: again"), prove_and_look])
    assert s.previous_error is None
    s._run()
    assert seen == [("connected", None, "UNAVAILABLE: refused"), ("connected", None, "UNAVAILABLE: again")]
    assert (s.last_error, s.previous_error) == ("UNAVAILABLE: lost", "UNAVAILABLE: again")


def test_a_first_connection_without_an_error_has_no_previous_error():
    s = ReconnectingSender(log, 0.5, 1.0, state="connecting")
    s._connected()
    assert (s.last_error, s.previous_error) == (None, None)
