"""pfc_sent (agent/insights/pfc_sent.py): pause frames this switch sends, on synthetic streams
with the sources' real path shapes and on the simulated switch's incast, whose model says how
many pause frames each read carries."""

from __future__ import annotations

import dataclasses

import pytest

from agent.config import Insights
from agent.counters import OPENCONFIG, SWTEL_ORIGIN, CounterSpec
from agent.insights import InsightsPipeline
from agent.insights.classify import classify
from agent.sources.drivers import map_name, table_for
from tests import sim_model
from tests.insights_stream import NS, STEP_NS, T0, Stream, port_table
from tests.unit.test_insights_fabric import T0 as SIM_T0
from tests.unit.test_insights_fabric import events, run

pytestmark = pytest.mark.nolibs  # the detector on batches: no versioned library decides it

NAMES = {
    "rx": (OPENCONFIG, "state/counters", "in-octets"),
    **{f"sent{n}": (SWTEL_ORIGIN, f"pfc/priority[id={n}]/state", "out-pause-pkts") for n in range(8)},
    "link": (OPENCONFIG, "ethernet/state/counters", "out-mac-pause-frames"),
    "received3": (SWTEL_ORIGIN, "pfc/priority[id=3]/state", "in-pause-pkts"),
}


class Log:
    def warning(self, *a, **k):
        pass

    info = warning


class Switch:
    """One port's counters read by an asic-like source into one pipeline, a read per call."""

    def __init__(self, **pfc_sent) -> None:
        ins = Insights()
        ins.pfc_sent = dataclasses.replace(ins.pfc_sent, **pfc_sent)
        self.pipeline = InsightsPipeline(ins, log=Log())
        self.stream = Stream(*port_table("asic", ["swp1"], NAMES))
        self.ts = T0

    def feed(self, deltas: list[dict], step_ns: int = STEP_NS) -> None:
        for d in deltas:
            self.ts += step_ns
            batch = self.stream.batch(self.ts, {("swp1", "rx"): 1e6, **d})
            if batch is not None:
                self.pipeline.on_batch(batch)
            self.pipeline.end_pass(self.ts)

    def open(self) -> list[dict]:
        return [e for e in self.pipeline.status()["open"] if e["type"] == "pfc-sent"]


def test_the_sources_pause_counters_are_what_it_reads():
    """The drivers' names (ethtool's mlxsw and mlx5, switchd's and the ASIC plugin's HwIf*) map
    to the paths it declares; received pause stays pfc_storm's."""
    def read_as(driver: str, name: str) -> tuple[str, str, str] | None:
        container, leaf, _kind = map_name(table_for(driver, [name, "HwIfInOctets"]), "swp1", name)
        return classify(CounterSpec(container, leaf, port="swp1"))

    for driver, name in (("mlxsw_spectrum", "tx_pause_prio_3"), ("mlx5_core", "tx_prio3_pause"),
                         ("switchd", "HwIfOutPfc3Pkt")):
        assert read_as(driver, name) == ("swp1", "pause-sent", "3"), (driver, name)
    assert read_as("switchd", "HwIfOutPausePkt") == ("swp1", "pause-sent", "link")
    assert read_as("switchd", "HwIfInPfc3Pkt") == ("swp1", "pfc-frames", "3")


def test_at_the_threshold_within_the_window_one_event_naming_the_priorities():
    calm = [{}] * 10
    burst = [{("swp1", "sent3"): 55}] * 9  # 495 within nine reads
    below = Switch()  # 500 within 1 s (ten reads)
    below.feed(calm + burst + [{("swp1", "sent4"): 2, ("swp1", "link"): 2}])
    assert below.open() == []  # 499
    switch = Switch()
    switch.feed(calm + burst + [{("swp1", "sent4"): 3, ("swp1", "link"): 2}])
    (ev,) = switch.open()
    assert ev["interfaces"] == ["swp1"] and ev["severity"] == "warning" and ev["unit"] == "frames/1s"
    assert ev["peak"] == 500
    assert "sent 500 pause frames within 1s (threshold 500; priority 3 495, priority 4 3, link-level pause 2)" \
        in ev["message"], ev["message"]


def test_pause_received_is_not_pause_sent():
    switch = Switch(threshold=10)
    switch.feed([{("swp1", "received3"): 1000}] * 20)
    assert switch.open() == []


def test_a_sample_longer_than_the_window_counts_pro_rata():
    """Polled every 10 s, 4,000 frames sent are 400 in any second: under the threshold, since a
    10 s sample cannot show they came within one."""
    switch = Switch()
    switch.feed([{}, {("swp1", "sent3"): 4000}], step_ns=10 * NS)
    assert switch.open() == []
    switch.feed([{("swp1", "sent3"): 6000}], step_ns=10 * NS)
    assert [e["peak"] for e in switch.open()] == [600]


def test_the_simulated_incast_pauses_from_its_port_only_as_its_model_says():
    """Incast on swp2's TC 3 (bursts every ~2 s): the switch sends pause on priority 3 while the
    PG is above XOFF. One event on swp2, raised at the first read whose window (the last ten
    reads) holds 500 frames, its peak the largest such window: both from the model's counts."""
    config = "ports=8 seed=1 scenario=incast@5s-65s:swp2/3"
    seconds = 20
    model = sim_model.Model(f"start=0 {config}")
    swp2 = next(p for p in model.ports_at(0) if p.name == "swp2")
    idx = sim_model.IDX["HwIfOutPfc3Pkt"]
    reads = [swp2.values(round(k * 0.1 * NS))[idx] for k in range(seconds * 10 + 1)]
    deltas = [0] + [b - a for a, b in zip(reads, reads[1:], strict=False)]
    windows = [sum(deltas[max(0, k - 9):k + 1]) for k in range(len(deltas))]
    judged = [k for k in range(len(deltas)) if deltas[k] and windows[k] >= 500]
    assert len(judged) >= 3  # the scenario does what this test is about

    runner, raised = run(config, seconds)
    evs = [e for e in events(runner) if e["type"] == "pfc-sent"]
    assert [(e["interfaces"], e["state"]) for e in evs] == [(["swp2"], "open")]
    (ev,) = evs
    assert ev["start_ns"] == SIM_T0 + judged[0] * STEP_NS
    assert ev["peak"] == max(windows[k] for k in judged)
    assert "priority 3" in ev["message"]
    assert sum(e["type"] == "pfc-sent" for _t, e in raised) == 1
