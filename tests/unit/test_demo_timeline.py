"""``swtel demo``'s timeline, without agents (agent/tools/demo.py): every event that reaches
the collector, one time base, a table that fits 80 columns, and how long each scenario's
story takes. tests/unit/test_fabric.py runs the demo itself."""

from __future__ import annotations

import math

import pytest

from agent.tools import demo
from agent.tools.fabric import PRESETS

pytestmark = pytest.mark.once  # pure Python: neither the backend nor a library version decides it

NS = 1_000_000_000
ORIGIN = 1_796_554_600 * NS  # 2026-12-06T10:56:40Z
EVENT = "swtel:/insights/events/event[id={id}]/state/{leaf}"


def _lines(target: str, event_id: int, **leaves) -> list[dict]:
    return [{"target": target, "path": EVENT.format(id=event_id, leaf=leaf.replace("_", "-")), "value": value,
             "ts": ORIGIN, "sync": True} for leaf, value in leaves.items()]


def test_an_event_raised_and_cleared_between_two_refreshes_gets_both_lines():
    """The agent raises, clears and then deletes an event before the demo looks again: the
    feed kept every leaf as it arrived, so the live lines show it raised and cleared."""
    feed, timeline = demo.EventFeed(), demo.Timeline(ORIGIN)
    assert timeline.update(feed.events()) == []
    feed.on_lines(_lines("spine-1", 7, type="pfc-storm", severity="critical", status="open", interfaces="swp1",
                         start_ns=ORIGIN + 3 * NS, message="swp1: PFC storm"), 0)
    feed.on_lines(_lines("spine-1", 7, status="cleared", end_ns=ORIGIN + 4 * NS), 0)
    feed.on_lines([{"target": "spine-1", "path": "swtel:/insights/events/event[id=7]", "delete": True}], 0)
    lines = timeline.update(feed.events())
    assert lines == ["   +3.0s  spine-1  RAISED  critical pfc-storm: swp1: PFC storm",
                     "   +4.0s  spine-1  cleared pfc-storm on swp1"], lines
    assert timeline.update(feed.events()) == []  # each line once


def test_wall_clock_times_in_messages_become_seconds_from_the_start():
    timeline = demo.Timeline(ORIGIN)
    text = "swp1 queue 3: congested, peak 15 MiB at 10:56:47.302Z (high 4 MiB)"
    assert timeline.rebase(text) == "swp1 queue 3: congested, peak 15 MiB at +7.3s (high 4 MiB)"
    # a run that crosses midnight UTC: the nearest day
    late = demo.Timeline((ORIGIN // (86400 * NS) + 1) * 86400 * NS - 2 * NS)  # 23:59:58
    assert late.rebase("at 00:00:01.000Z") == "at +3.0s"
    assert timeline.rebase("no time here, 10:56 either") == "no time here, 10:56 either"


@pytest.mark.parametrize("unit", ["retransmissions/10s", "share-of-level-lost", "paused-share", "transitions/10s",
                                  "errors/10s", "drops/10s", "packets/s", "frames/s", "max/mean", "bytes", "ber",
                                  "flr"])
def test_the_timeline_fits_80_columns_with_its_peak_and_unit_whole(unit):
    """Every detector's unit (agent/insights ctx.hit) beside the widest peak, on a row with
    every other column full: the row fits 78 columns, the peak's number whole, the unit in
    its short form whole."""
    timeline = demo.Timeline(ORIGIN)
    timeline.rows[("spine-1", 1)] = {"type": "link-degrading", "severity": "critical", "status": "cleared",
                                     "interfaces": "swp11s1,swp12", "start-ns": ORIGIN + 1234 * NS,
                                     "end-ns": ORIGIN + 2345 * NS, "peak": -1.23456e-10, "peak-unit": unit}
    row = timeline.table_lines()[2]
    assert len(row) <= 78, row
    assert row.endswith(f"-1.23e-10 {demo.short_unit(unit)}"), row


def test_every_preset_s_story_is_known_and_fec_degrade_s_is_its_first_uncorrectable_codeword():
    stories = {spec: demo.story_s(spec) for scenarios in PRESETS.values() for specs in scenarios.values()
               for spec in specs}
    assert all(s > 0 for s in stories.values()), stories
    assert stories["fec-degrade@1s-25s:swp13"] == pytest.approx(22.6 + demo.WINDOW_MARGIN_S)
    assert stories["pfc-storm@3s-10s:swp1/3"] == 10 + demo.WINDOW_MARGIN_S
    assert stories["imbalance@9s:swp62"] == 9 + demo.MOMENT_MARGIN_S
    assert stories["incast@3s:swp1/3"] == 3 + demo.INCAST_STORY_S
    # the default run tells every preset's story
    assert max(stories.values()) <= demo.DEFAULT_DURATION_S
    assert demo.run_at_least(24.6) == f"run at least {math.ceil(24.6)} s (--duration 25s)"
