"""The engine's one contract with what it feeds (agent/exporters/base.py Listener): the
exporters and the insights pipeline are called the same way; the hooks a listener does not
take are the base class's no-ops; one listener's failure is counted and never stops the others."""

from __future__ import annotations

from types import SimpleNamespace

import agent.plugins  # noqa: F401 - the config sections
from agent import config
from agent.counters import SWTEL_ORIGIN, Container, StateUpdate
from agent.engine import Engine
from agent.insights import InsightsPipeline
from agent.listener import Listener


class Recorder(Listener):
    name = "recorder"

    def __init__(self) -> None:
        self.calls: list[tuple] = []

    def start(self, store) -> None:
        self.calls.append(("start",))

    def on_batch(self, batch) -> None:
        self.calls.append(("on_batch", batch))

    def on_state(self, updates) -> None:
        self.calls.append(("on_state", list(updates)))

    def on_delete(self, ts_ns, containers) -> None:
        self.calls.append(("on_delete", ts_ns, list(containers)))

    def stop(self, timeout) -> None:
        pass

    def status(self) -> dict:
        return {}


class Deriving(Recorder):
    """A listener that derives state from each pass (as the detectors do)."""

    name = "deriving"

    def end_pass(self, ts_ns: int) -> list[StateUpdate]:
        return [StateUpdate(ts_ns, Container(SWTEL_ORIGIN, "/test"), "seen", 1, "deriving")]

    def on_port_speeds(self, speeds) -> None:
        self.calls.append(("speeds", dict(speeds)))

    def on_config(self, cfg) -> None:
        self.calls.append(("config", cfg.target))


class Broken(Recorder):
    name = "broken"

    def on_state(self, updates) -> None:
        raise RuntimeError("bug")


def test_end_pass_updates_reach_the_store_and_every_listener():
    derive, plain, broken = Deriving(), Recorder(), Broken()
    engine = Engine(config.parse(""), [broken, derive, plain])
    engine._end_pass()
    states = engine.store.states()
    assert [(u.path, u.value) for u in states] == [("swtel:/test/seen", 1)]
    assert [c[0] for c in plain.calls] == ["on_state"] and [c[0] for c in derive.calls] == ["on_state"]
    assert engine.listener_errors == 1  # the broken one, counted; the others still told


def test_port_speeds_and_reloads_reach_the_listeners_that_take_them():
    derive, plain = Deriving(), Recorder()
    engine = Engine(config.parse(""), [derive, plain])
    engine._note_speeds(SimpleNamespace(name="asic", port_speeds={"swp1": 400_000_000_000}))
    engine._note_speeds(SimpleNamespace(name="asic", port_speeds={"swp1": 400_000_000_000}))  # unchanged
    assert derive.calls == [("speeds", {"swp1": 400_000_000_000})] and plain.calls == []
    engine.reload(config.parse("target: leaf9"))
    engine._apply_pending_config()
    assert derive.calls[-1] == ("config", "leaf9")


def test_the_insights_runner_is_a_listener():
    cfg = config.parse("insights: {history: 5}")
    runner = InsightsPipeline(cfg.insights)
    for hook in ("start", "on_batch", "on_state", "on_delete", "stop", "status", "end_pass",
                 "on_port_speeds", "on_config"):
        assert callable(getattr(runner, hook)), hook
    runner.on_config(config.parse("insights: {history: 7}"))
    assert runner.cfg.history == 7


class Paced(Recorder):
    """A listener with the per-pass hooks (as dial-out per tick packs a pass)."""

    name = "paced"

    def open_pass(self) -> None:
        self.calls.append(("open",))

    def close_pass(self) -> None:
        self.calls.append(("close",))


def test_every_call_of_a_pass_comes_between_open_pass_and_close_pass():
    """The engine's loop brackets each pass, the derived states (end_pass) and health inside,
    so a listener may send a pass's output together; listeners without the hooks are called
    as before."""
    from tests.helpers import wait_until

    derive, paced, plain = Deriving(), Paced(), Recorder()
    cfg = config.parse("interval: 50ms\nsources: {netdev: {enabled: false}, ethtool: {enabled: false}, "
                       "system: {interval: 50ms}}")
    engine = Engine(cfg, [derive, paced, plain])
    engine.start()
    try:
        wait_until(lambda: sum(c[0] == "close" for c in list(paced.calls)) >= 3, timeout=20, what="3 passes")
    finally:
        engine.stop()
    calls = [c[0] for c in paced.calls if c[0] != "start"]
    open_ = False
    for kind in calls:
        if kind == "open":
            assert not open_
            open_ = True
        elif kind == "close":
            assert open_
            open_ = False
        else:
            assert open_, f"{kind} outside a pass"
    assert "on_state" in calls and "on_batch" in calls  # the derived state and the system source's counters
    assert not any(c[0] in ("open", "close") for c in plain.calls)
