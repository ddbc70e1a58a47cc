"""agent/handoff.py: what other threads ask of the tick thread's state is built on the tick
thread, between passes; a busy tick thread gets the caller the last answer, marked stale."""

from __future__ import annotations

import threading

import pytest

from agent import config
from agent.engine import Engine
from agent.handoff import Handoff, TickBusy

pytestmark = pytest.mark.nolibs  # no versioned library decides its outcome


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def serving(handoff: Handoff, stop: threading.Event, gate: threading.Event | None = None) -> threading.Thread:
    """A stand-in tick thread: serves asks as they come (while ``gate`` is set)."""

    def loop() -> None:
        while not stop.is_set():
            handoff.wake.wait(0.5)
            handoff.wake.clear()
            if gate is None or gate.is_set():
                handoff.serve()

    t = threading.Thread(target=loop, daemon=True)
    t.start()
    return t


def test_builds_run_on_the_serving_thread_and_errors_reach_the_caller():
    handoff = Handoff()
    handoff.reopen()
    stop = threading.Event()
    tick = serving(handoff, stop)
    try:
        answer = handoff.ask("status", lambda: threading.current_thread())
        assert answer.value is tick and answer.stale_s is None

        def bad() -> None:
            raise KeyError("a bug in a build")

        with pytest.raises(KeyError, match="a bug in a build"):
            handoff.ask("status", bad)
        assert tick.is_alive()  # the build's error went to the caller, not to the tick thread
        assert handoff.ask("status", lambda: 7).value == 7
    finally:
        stop.set()
        handoff.wake.set()
        tick.join(5)


def test_a_busy_tick_gives_the_last_answer_marked_stale_else_tick_busy():
    clock = Clock()
    handoff = Handoff(wait_s=0.05, first_wait_s=0.1, clock=clock)
    handoff.reopen()
    with pytest.raises(TickBusy, match="has not answered"):
        handoff.ask("status", lambda: 1)  # nobody serves, nothing answered before
    gate, stop = threading.Event(), threading.Event()
    gate.set()
    tick = serving(handoff, stop, gate)
    try:
        assert handoff.ask("status", lambda: {"n": 1}).value == {"n": 1}
        gate.clear()  # the tick thread is stuck in a poll
        clock.now += 7.5
        answer = handoff.ask("status", lambda: {"n": 2})
        assert answer.value == {"n": 1} and answer.stale_s == 7.5
        with pytest.raises(TickBusy):
            handoff.ask("ports", lambda: 3)  # another key: no earlier answer
        gate.set()
        handoff.wake.set()
        assert handoff.ask("status", lambda: {"n": 3}).value == {"n": 3}
    finally:
        stop.set()
        handoff.wake.set()
        tick.join(5)


def test_without_a_tick_loop_builds_run_in_the_caller():
    """Before the loop starts and after it ended nothing mutates its state: no waiting."""
    handoff = Handoff(wait_s=30.0)
    assert handoff.ask("status", threading.current_thread).value is threading.current_thread()
    handoff.reopen()
    done = threading.Event()
    got: list = []
    waiter = threading.Thread(target=lambda: (got.append(handoff.ask("s", threading.current_thread)),
                                              done.set()))
    waiter.start()
    while not handoff._pending:  # the ask is queued for the loop
        handoff.wake.wait(1)
    handoff.close()  # the loop ends: what waits is answered, here
    assert done.wait(5) and got[0].value is threading.current_thread()
    assert handoff.ask("status", threading.current_thread).value is threading.current_thread()
    waiter.join(5)


def test_the_engine_serves_between_passes_and_after_its_loop_died():
    engine = Engine(config.parse("{sources: {netdev: {enabled: false}, ethtool: {enabled: false}}}"), [])
    engine.start()
    try:
        answer = engine.handoff.ask("status", lambda: (threading.current_thread().name, engine.status()))
        assert answer.value[0] == "swtel-tick" and answer.stale_s is None
        assert "system" in answer.value[1]["sources"]
        served = engine.handoff.served

        def die() -> None:
            raise SystemExit("the loop's bug")

        engine.tick_hooks.append(die)  # the loop dies at its next pass
        engine._thread.join(10)
        assert engine.dead() and engine.loop_error
        answer = engine.handoff.ask("status", lambda: threading.current_thread().name)
        assert answer.value == threading.current_thread().name and engine.handoff.served == served
    finally:
        engine.stop()


def test_the_agent_s_status_when_its_tick_loop_is_stuck():
    """A tick thread that does not answer: status gives its last one, with its age, and the
    health says so; a command never answered before fails (an agent's error, exit 4)."""
    from agent import runner
    from agent.control import client

    cfg = config.parse("{sources: {netdev: {enabled: false}, ethtool: {enabled: false}}, "
                       "control: {enabled: false}}")
    agent = runner.Agent(cfg)
    clock = Clock()
    agent.engine.handoff = Handoff(wait_s=0.01, first_wait_s=0.02, clock=clock)
    fresh = agent.status()  # no tick loop yet: built in place, and remembered
    assert fresh["tick"]["stale_s"] is None and "tick loop busy" not in " ".join(client.health_problems(fresh))
    agent.engine.handoff.reopen()  # a tick loop now owns the state, and never gets to answer
    clock.now += 3.0
    stale = agent.status()
    assert stale["tick"]["stale_s"] == 3.0 and stale["events"] == fresh["events"]
    assert any(p.startswith("tick loop busy") for p in client.health_problems(stale))
    with pytest.raises(TickBusy, match="no earlier answer"):
        agent.ports()


def _returns_soon(fn) -> bool:
    """fn() in a thread returned within a bound far below the 60 s it would wait if it waited."""
    t = threading.Thread(target=fn, daemon=True)
    t.start()
    t.join(20)
    return not t.is_alive()


def test_work_steps_aside_while_a_tick_pass_runs():
    """TickPasses.step_aside: returns at once between passes; in a pass, waits for its end;
    a pass that outlasts the bound is waited for once per thread, not at every call."""
    from agent.handoff import TickPasses

    passes = TickPasses()
    assert _returns_soon(lambda: passes.step_aside(most_s=60))  # no pass
    passes.begin()
    stepped = threading.Event()
    worker = threading.Thread(target=lambda: (passes.step_aside(most_s=60), stepped.set()), daemon=True)
    worker.start()
    worker.join(0.2)
    assert worker.is_alive() and not stepped.is_set()  # waiting for the pass
    passes.end()
    assert stepped.wait(30)

    def own_pass() -> None:  # the tick thread itself, matching a table in its pass
        passes.begin()
        passes.step_aside(most_s=60)
        passes.end()

    assert _returns_soon(own_pass)
    begun = threading.Event()
    threading.Thread(target=lambda: (passes.begin(), begun.set()), daemon=True).start()
    assert begun.wait(30)  # a pass that never ends (a source stuck in a poll)

    def twice() -> None:
        passes.step_aside(most_s=0.01)  # waited out once ...
        passes.step_aside(most_s=60)  # ... then not again in this pass

    assert _returns_soon(twice)
