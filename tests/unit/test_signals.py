"""agent/signals.py: signal handlers that take no lock, and the waits they wake."""

from __future__ import annotations

import os
import signal
import sys
import threading
from pathlib import Path

import pytest

from agent.signals import StopSignals, Wakeup

SIGNALS_PY = str(Path(__file__).resolve().parents[2] / "agent" / "signals.py")


@pytest.fixture
def restore_sigusr1():
    old = signal.getsignal(signal.SIGUSR1)
    yield
    signal.signal(signal.SIGUSR1, old)


def _handler_at_every_line(wait, handler) -> tuple[threading.Thread, list[bool]]:
    """Run ``wait()`` in a thread that calls ``handler()`` at every line of agent/signals.py it
    runs, the way a signal handler may run between any two bytecodes of the main thread. With
    ``threading.Event`` (a handler calling ``set()``) this thread hangs for good at the first
    line inside ``Event.wait``'s lock: the CI hang this module mends."""
    results: list[bool] = []

    def trace(frame, event, _arg):
        if frame.f_code.co_filename != SIGNALS_PY:
            return None
        if event == "line":
            handler()
        return trace

    def run() -> None:
        sys.settrace(trace)
        try:
            results.append(wait())
        finally:
            sys.settrace(None)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, results


def test_a_handler_that_runs_anywhere_inside_the_wait_never_blocks_it(restore_sigusr1):
    stop = StopSignals(signal.SIGUSR1)
    calls = []

    def handler() -> None:
        calls.append(1)
        stop._on_signal(signal.SIGUSR1, None)

    thread, results = _handler_at_every_line(lambda: stop.wait(None), handler)
    thread.join(60)  # a bound on a hang, not a timing: the wait ends at its first line
    assert not thread.is_alive(), "the wait hung under its own signal handler"
    assert results == [True] and calls and stop.got(signal.SIGUSR1)


def test_a_wake_from_inside_the_wakeups_own_wait_never_blocks_it():
    wakeup = Wakeup()
    try:
        thread, results = _handler_at_every_line(lambda: wakeup.wait(None), wakeup.wake)
        thread.join(60)
        assert not thread.is_alive(), "Wakeup.wait hung under wake()"
        assert results == [True]
    finally:
        wakeup.close()


def test_a_real_signal_wakes_the_main_threads_wait(restore_sigusr1):
    stop = StopSignals(signal.SIGUSR1)
    assert not stop.is_set() and stop.wait(0) is False
    threading.Thread(target=os.kill, args=(os.getpid(), signal.SIGUSR1)).start()
    assert stop.wait(600) is True  # returns as the signal comes (600: only a bound on a failure)
    assert stop.got(signal.SIGUSR1) and not stop.got(signal.SIGHUP)
    assert stop.received == [signal.SIGUSR1]


def test_wakes_before_the_wait_are_kept_and_several_are_one():
    wakeup = Wakeup()
    try:
        assert wakeup.wait(0) is False
        for _ in range(3):
            wakeup.wake()
        assert wakeup.wait(0) is True
        assert wakeup.wait(0) is False  # the three were used up by one wait
    finally:
        wakeup.close()


def test_a_full_pipe_or_a_closed_wakeup_costs_nothing():
    wakeup = Wakeup()
    for _ in range(200_000):  # far past a pipe's 64 KiB: the writes that find it full are dropped
        wakeup.wake()
    assert wakeup.wait(0) is True and wakeup.wait(0) is False
    wakeup.close()
    wakeup.wake()  # a signal after the agent's shutdown: nowhere to go, no error
    wakeup.close()
    assert wakeup.wait(0) is False
