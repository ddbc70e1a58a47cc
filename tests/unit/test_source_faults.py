"""A source that raises from setup, read or states (an injected fault in a fake source,
registered for the test only): the agent keeps polling the others, and the fault shows in
status, in health and on the source's gNMI health leaves until a good poll clears it."""

from __future__ import annotations

import threading
import time
from array import array
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from agent import config, registry
from agent import engine as engine_mod
from agent.control.client import health_problems
from agent.counters import COUNTER, SWTEL_ORIGIN, Container, CounterSpec, CounterTable, StateUpdate
from agent.engine import FAULT_BACKOFF_MAX_S, Engine, PolledSource
from agent.sources import REGISTRY
from agent.sources.base import Source, SourceConfig, register

pytestmark = pytest.mark.nolibs  # no versioned library decides its outcome

WAIT_S = 30.0  # generous: the machine may be busy; every wait ends as soon as its condition holds


class Boom(Exception):
    """What the fake source raises: not an OSError, as a bug's exception would not be."""


@dataclass
class FakeConfig(SourceConfig):
    pass


class Faults:
    """Which of the fake source's calls raise now, switched by the test from its thread."""

    def __init__(self) -> None:
        self.raising: set[str] = set()
        self.calls: dict[str, int] = {"setup": 0, "read": 0, "states": 0, "values": 0}
        self.lock = threading.Lock()

    def hit(self, call: str) -> None:
        with self.lock:
            self.calls[call] += 1
            if call in self.raising:
                raise Boom(f"injected fault in {call}")


FAULTS = Faults()


class FakeSource(Source):
    name = "zz_fake"
    config_class = FakeConfig
    uses_links = False

    def setup(self, links: dict) -> None:
        FAULTS.hit("setup")
        self.table = CounterTable(self.name, [CounterSpec(Container(SWTEL_ORIGIN, "/fake/state"), "n", 64, COUNTER)])
        self.values = array("Q", [0])

    def read(self) -> int:
        FAULTS.hit("read")
        if "values" in FAULTS.raising:  # a buffer that does not fit the table: the diff refuses it
            self.values = array("Q", [1, 2, 3])  # three values for one counter
            return 1
        self.values = array("Q", [self.values[0] + 1])
        return 1

    def states(self, ts_ns: int) -> list[StateUpdate]:
        FAULTS.hit("states")
        return []


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> Iterator[Faults]:
    """The fake source in the registries for this test only."""
    monkeypatch.setattr(registry.SOURCES, "_sections", dict(registry.SOURCES._sections))
    monkeypatch.setitem(REGISTRY, FakeSource.name, FakeSource)
    register(FakeSource)
    monkeypatch.setattr(engine_mod, "HEALTH_PERIOD_S", 0.02)  # health leaves at every pass, not every 5 s
    FAULTS.raising.clear()
    FAULTS.calls.update({k: 0 for k in FAULTS.calls})
    yield FAULTS
    FAULTS.raising.clear()


def _engine(tmp_path) -> Engine:
    cfg = config.parse(
        "interval: 20ms\n"
        "sources: {netdev: {interfaces: [lo], exclude: []}, ethtool: {enabled: false}, system: {enabled: false}}\n"
        f"control: {{socket: {tmp_path}/swtel.sock, group: null}}\n"
    )
    return Engine(cfg)


def _runner(engine: Engine, name: str) -> PolledSource:
    return next(r for r in engine._polled if r.name == name)


def _wait(cond: Callable[[], Any], what: str) -> Any:
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        got = cond()
        if got:
            return got
        time.sleep(0.01)
    raise AssertionError(f"timed out waiting for {what}")


def _health_leaf(engine: Engine, leaf: str) -> Any:
    path = f"/agent/sources/source[name={FakeSource.name}]/state"
    for u in engine.store.states():
        if u.container.path == path and u.leaf == leaf:
            return u.value
    return None


def _problems(engine: Engine) -> list[str]:
    return health_problems({"sources": engine.status()["sources"], "now_ns": time.time_ns(), "uptime_s": 0})


@pytest.mark.parametrize("call", ["setup", "read", "states", "values"])
def test_a_source_raising_is_faulted_backed_off_and_the_others_keep_polling(tmp_path, fake, call):
    fake.raising.add(call)
    # "values": the read returns a buffer that does not fit its table, which the diff refuses
    start, text = ("read:", "Error(") if call == "values" else (f"{call}:", f"injected fault in {call}")
    engine = _engine(tmp_path)
    engine.start()
    try:
        fake_runner, netdev = _runner(engine, FakeSource.name), _runner(engine, "netdev")
        # faulted: counted, in status and health, on its gNMI leaves
        _wait(lambda: fake_runner.failures >= 2, "two failed polls")
        status = engine.status()["sources"][FakeSource.name]
        assert status["errors"] >= 2 and status["failures"] >= 2
        assert text in status["fault"]
        assert status["fault"].startswith(start) and status["last_error"] == status["fault"]
        assert any(p.startswith(f"source {FakeSource.name}:") and text in p for p in _problems(engine))
        _wait(lambda: text in str(_health_leaf(engine, "fault")), "the fault leaf")
        assert text in str(_health_leaf(engine, "last-error"))
        assert int(_health_leaf(engine, "errors") or 0) >= 1
        # the others keep polling meanwhile, at their own interval
        before = netdev.reads
        _wait(lambda: netdev.reads >= before + 5, "netdev to keep polling")
        assert netdev.fault is None and netdev.source.fault is None
        assert engine.loop_error is None and not engine.dead()
        # backed off: the faulted source waits longer than its interval, doubling, bounded
        assert fake_runner.backoff_s() > fake_runner.interval_s
        assert fake_runner.backoff_s() <= FAULT_BACKOFF_MAX_S
        # the fault clears with the next good poll
        fake.raising.clear()
        _wait(lambda: fake_runner.failures == 0, "a good poll")
        status = engine.status()["sources"][FakeSource.name]
        assert status["fault"] is None and not _problems(engine)
        _wait(lambda: _health_leaf(engine, "fault") == "", "the fault leaf cleared")
        assert text in str(_health_leaf(engine, "last-error"))  # what it was stays readable
    finally:
        engine.stop()


def test_backoff_doubles_from_the_interval_and_is_bounded(tmp_path, fake):
    engine = _engine(tmp_path)
    runner = PolledSource(FakeSource(engine.cfg), 0.5)
    assert runner.backoff_s() == 0.0
    waits = []
    for failures in range(1, 12):
        runner.failures = failures
        waits.append(runner.backoff_s())
    assert waits[:3] == [1.0, 2.0, 4.0]
    assert waits[-1] == FAULT_BACKOFF_MAX_S and max(waits) == FAULT_BACKOFF_MAX_S
    assert waits == sorted(waits)


class Unbuildable(FakeSource):
    name = "zz_fake"

    def __init__(self, cfg: Any) -> None:
        raise Boom("injected fault in __init__")


def test_a_source_raising_at_construction_is_faulted_and_the_others_run(tmp_path, fake, monkeypatch):
    monkeypatch.setitem(REGISTRY, FakeSource.name, Unbuildable)
    engine = _engine(tmp_path)
    engine.start()
    try:
        netdev = _runner(engine, "netdev")
        _wait(lambda: netdev.reads >= 3, "netdev to poll")
        status = engine.status()["sources"][FakeSource.name]
        assert "injected fault in __init__" in status["fault"] and status["fault"].startswith("start:")
        assert any("injected fault in __init__" in p for p in _problems(engine))
        _wait(lambda: engine.store.primed.is_set(), "the first snapshot")
    finally:
        engine.stop()


def test_close_and_interrupt_raising_do_not_stop_the_others_closing(tmp_path, fake, monkeypatch):
    closed: list[str] = []

    def boom() -> None:
        raise Boom("injected fault in close")

    engine = _engine(tmp_path)
    engine.start()
    try:
        _wait(lambda: _runner(engine, "netdev").reads >= 1, "netdev to poll")
    finally:
        # the raising source closes first: the one after it must still be closed
        engine._polled.sort(key=lambda r: r.name != FakeSource.name)
        fake_runner = _runner(engine, FakeSource.name)
        monkeypatch.setattr(fake_runner.source, "close", boom)
        monkeypatch.setattr(fake_runner.source, "interrupt", boom)
        netdev = _runner(engine, "netdev")
        real_close = netdev.source.close
        monkeypatch.setattr(netdev.source, "close", lambda: (closed.append("netdev"), real_close()))
        engine.stop()
    assert closed == ["netdev"]
    assert "injected fault in close" in str(fake_runner.fault)


def test_status_answers_when_a_source_info_raises(tmp_path, fake, monkeypatch):
    engine = _engine(tmp_path)
    engine._polled = engine._make_polled(engine.cfg)  # built, not started: status alone
    fake_runner = _runner(engine, FakeSource.name)

    def boom() -> dict:
        raise Boom("injected fault in info")

    monkeypatch.setattr(fake_runner.source, "info", boom)
    sources = engine.status()["sources"]
    assert "injected fault in info" in sources[FakeSource.name]["info_error"]
    assert "info_error" not in sources["netdev"]
