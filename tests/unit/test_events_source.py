"""sources.events (agent/sources/events.py): the insights pipeline's open events by severity
as gauges, from the runner the engine feeds; nothing without one."""

from __future__ import annotations

from collections import deque

import pytest

from agent import config
from agent.config import Insights
from agent.engine import Engine
from agent.exporters import otlp_names
from agent.insights import InsightsPipeline
from agent.sources.base import NO_DATA
from agent.sources.events import SEVERITIES, EventsSource
from tests.unit.test_insights import Log


class _Detector:
    """What the event book needs of a detector: its name."""

    name = "symbol_errors"
    per_port = True


def _source(runner: InsightsPipeline | None) -> EventsSource:
    src = EventsSource(config.parse("{}"))
    src.bind_insights(lambda: runner)
    src.setup({})
    return src


def test_counts_by_severity_follow_the_event_book():
    runner = InsightsPipeline(Insights(), log=Log())
    src = _source(runner)  # handed the runner, as the engine does
    assert SEVERITIES == ["warning", "critical"]
    assert src.read() == 1 and list(src.values) == [0, 0]  # every severity, 0 included
    det = _Detector()
    runner.hit(det, "symbol-ber", "swp1", 1, "warning", 1.0, "", "m", ["swp1"])
    runner.hit(det, "symbol-ber", "swp2", 1, "critical", 1.0, "", "m", ["swp2"])
    runner.hit(det, "fcs", "swp2", 1, "critical", 1.0, "", "m", ["swp2"])
    runner.hit(det, "fcs", "swp2", 2, "critical", 2.0, "", "m", ["swp2"])  # the same event again
    assert src.read() == 1 and list(src.values) == [1, 2]
    assert runner.open_event_counts() == {"warning": 1, "critical": 2} == {
        s: sum(1 for e in runner.status()["open"] if e["severity"] == s) for s in SEVERITIES}
    runner._events.clear(runner._events.open[("fcs", "swp2")], 3, "quiet")
    assert src.read() == 1 and list(src.values) == [1, 1]


def test_no_runner_no_count():
    """insights off: nothing read (no count is not a count of 0)."""
    assert _source(None).read() == NO_DATA


def test_the_engine_binds_its_current_insights_runner():
    """A reload may swap the insights pipeline: the source asks the engine for it at each read."""
    engine = Engine(config.parse("{}"), [])
    runner = next(r for r in engine._make_polled(engine.cfg) if r.source.name == "events")
    runner.source.setup({})
    assert runner.source.read() == NO_DATA
    engine.insights = InsightsPipeline(Insights(), log=Log())
    assert runner.source.read() == 1


def test_the_gauges_names():
    src = _source([])
    names = {otlp_names.metric_name(s.container.path, s.leaf) for s in src.table.specs}
    assert names == {("swtel_insights_open_events", (("severity", s),), 1) for s in SEVERITIES}


@pytest.mark.parametrize("profile", ["cumulus", "otel"])
def test_otlp_carries_the_open_events_swtel_status_lists(tmp_path, profile):
    """A simulated spine with symbol errors exporting OTLP: swtel_insights_open_events, a gauge
    in both profiles, equals by severity the open events of `swtel status`."""
    import time

    from tests.helpers import status_doc
    from tests.namespaces import AgentProcess
    from tests.otlp_receiver import Receiver

    # only the gauge compared is kept: a receiver keeping the spine's ~17,000 points an export
    # answered later and later, and the export trailed status by tens of seconds
    rx = Receiver(names={otlp_names.OPEN_EVENTS}).start()
    start = time.time_ns() + 1_000_000_000
    sim = f"role=spine seed=1 start={start} scenario=symbol-errors@1s:swp11s1 scenario=symbol-errors@1s:swp2"
    agent = AgentProcess(None, (
        "target: sim-1\ninterval: 100ms\nsources:\n"
        "  netdev: {enabled: false}\n  ethtool: {enabled: false}\n  system: {enabled: false}\n"
        "  events: {interval: 100ms}\n"
        f"  asic: {{enabled: true, plugin: sim, config: '{sim}'}}\n"
        # the symbol errors' events stay open while the faults go on; throughput dips open and
        # clear every second or two, and a loaded pure-Python agent's export then trailed its
        # status by more than five answers for 60 s (the two-CPU-hog CI run): not what this
        # test is about
        "insights: {throughput_dip: {enabled: false}}\n"
        f"exporters:\n  otlp: {{endpoint: '127.0.0.1:{rx.port}', insecure: true, interval: 200ms, "
        f"profile: {profile}}}\n"
        f"control: {{socket: {tmp_path / 'swtel.sock'}, group: null}}\n"), tmp_path)

    def by_severity() -> dict[str, float]:
        out = dict.fromkeys(SEVERITIES, 0.0)
        for ev in status_doc(tmp_path)["events"]["open"]:
            out[ev["severity"]] += 1
        return out

    def exported() -> dict[str, float]:
        points = {s: rx.latest(otlp_names.OPEN_EVENTS, severity=s) for s in SEVERITIES}
        assert all(p is None or p.kind == "gauge" for p in points.values())
        return {s: float(p.value) for s, p in points.items() if p is not None}

    try:
        agent.wait_ready()
        agent.wait_for(lambda: sum(by_severity().values()) >= 2, 60, "two open events")
        # events open and clear as the faults go on: the export equals what status listed at a
        # moment of the last 40 answers (polled every 50 ms or slower: a few seconds)
        recent: deque[dict[str, float]] = deque(maxlen=40)

        def caught_up() -> bool:
            recent.append(by_severity())
            return exported() in recent

        try:
            agent.wait_for(caught_up, 60, "OTLP to show the open events")
        except AssertionError as exc:
            raise AssertionError(f"exported {exported()} and status' last answers {list(recent)[-3:]}, all "
                                 f"points {rx.series(otlp_names.OPEN_EVENTS)[-6:]}") from exc
    finally:
        assert agent.stop() == 0
        rx.stop()
