"""The congestion detector (agent/insights/congestion.py): queue peaks into LANZ-style
records, on the simulated switch's model (through the asic source's real mapping and the
change kernel, at synthetic sample times) and on synthetic levels."""

from __future__ import annotations

import pytest

from agent import config
from agent.config import Insights
from agent.counters import GAUGE, SWTEL_ORIGIN, Container, CounterSpec
from agent.insights import classify
from agent.pathgrammar import qos_interface_path
from tests import sim_model
from tests.unit.test_insights_fabric import NS, events, run

pytestmark = pytest.mark.nolibs  # no versioned library decides its outcome: not in the Debian pass

MICROBURST = "ports=8 seed=1 scenario=microburst@5s-65s:swp2"


def _bursts(config: str, port: str, t1_s: float) -> list[tuple[int, int, int]]:
    """(start ns, end ns, level) of every microburst the model puts on ``port`` before t1."""
    model = sim_model.Model(f"start=0 {config}")
    p = next(x for x in model.ports_at(0) if x.name == port)
    sc = next(w for w in p.wins if w.name == "microburst")
    out = []
    i = 0
    while True:
        a = p.mb_start(sc, i) * sim_model.SLOT
        if a >= min(t1_s * NS, sc.b * sim_model.SLOT):
            return out
        b = a + p.mb_len(i) * sim_model.SLOT
        out.append((a, b, (16 << 20) - p.h(sim_model.K_MB_OCC, i) % (1 << 20)))
        i += 1


def _congestion(runner) -> list[dict]:
    return sorted((e for e in events(runner) if e["type"] == "congestion"), key=lambda e: e["start_ns"])


def test_every_burst_is_one_event_with_its_maximum_within_one_poll():
    runner, _ = run(MICROBURST, 70)
    evs = _congestion(runner)
    bursts = _bursts(MICROBURST, "swp2", 69.5)
    assert len(bursts) >= 20
    assert len(evs) == len(bursts), ([e["start_ns"] for e in evs], bursts)
    t0 = evs[0]["start_ns"] - evs[0]["start_ns"] % NS - 5 * NS  # T0 of the run
    for ev, (a, b, level) in zip(evs, bursts, strict=True):
        assert ev["interfaces"] == ["swp2"] and "queue 3" in ev["message"]
        assert ev["peak"] == level  # the burst's own level: the peak never misses it
        start = ev["start_ns"] - t0
        # raised within one poll of the burst (the model's level holds for a whole 100 ms cell)
        assert a - sim_model.CELL <= start <= b + sim_model.CELL
        # the time of the maximum: within one poll of the burst
        assert a - sim_model.CELL <= ev["peak_ns"] - t0 <= b + sim_model.CELL
        assert ev["state"] == "cleared" or b > 68 * NS


def test_a_one_second_instantaneous_poller_misses_most_bursts():
    """The same run sampled at 1 s by the instantaneous level, as a 1 s poller sees it."""
    bursts = _bursts(MICROBURST, "swp2", 65)
    model = sim_model.Model(f"start=0 {MICROBURST}")
    port = next(x for x in model.ports_at(0) if x.name == "swp2")
    occ = sim_model.IDX["tc_curr_occupancy_3"]
    seen_1s = sum(port.values(k * NS)[occ] >= Insights().congestion.high for k in range(5, 66))
    runner, _ = run(MICROBURST, 66)
    seen_peak = len(_congestion(runner))
    print(f"bursts {len(bursts)}: congestion events at 100 ms from peaks {seen_peak}, "
          f"1 s samples of the instantaneous level above high {seen_1s}")
    assert seen_peak == len(bursts)
    assert seen_1s <= len(bursts) // 2


def test_the_peak_sees_bursts_a_slow_poll_would_miss():
    runner, _ = run(MICROBURST, 70, step=10)  # a read every 10 s: the peak still holds each burst
    evs = _congestion(runner)
    assert evs and all(e["interfaces"] == ["swp2"] for e in evs)
    assert max(e["peak"] for e in evs) >= 15 << 20


def test_a_pfc_storm_is_one_event_for_its_whole_length():
    runner, raised = run("ports=8 seed=1 scenario=pfc-storm@5s-20s:swp3/3", 30)
    evs = _congestion(runner)
    assert [(e["interfaces"], e["state"]) for e in evs] == [(["swp3"], "cleared")]
    # one event for the storm's 15 s (its queue never drains below `low` meanwhile)
    assert abs(evs[0]["end_ns"] - evs[0]["start_ns"] - 15 * NS) <= 2 * sim_model.CELL


@pytest.mark.parametrize("cfg", ["role=spine seed=1", "role=leaf seed=2"])
def test_a_clean_minute_has_no_congestion(cfg):
    runner, _ = run(cfg, 60)
    assert _congestion(runner) == []


def test_hysteresis_and_end_on_synthetic_levels():
    from agent.insights.congestion import Congestion

    hits: list[tuple[int, float]] = []

    class Ctx:
        log = None
        speeds: dict = {}

        def hit(self, det, etype, key, ts, severity, peak, unit, message, interfaces):
            hits.append((ts, peak))

    ins = Insights()
    det = Congestion(ins.congestion, Ctx())
    high, low = ins.congestion.high, ins.congestion.low
    owned = frozenset({classify.QUEUE_PEAK})
    levels = [0, high - 1, high, high * 2, low, low - 1, high - 1, high]
    for k, level in enumerate(levels):
        det.sample("swp1", k, 1, {(classify.QUEUE_PEAK, "3"): level}, owned)
    # raised at high, held down to low (inclusive), ended below low, not raised again below high
    assert [ts for ts, _ in hits] == [2, 3, 4, 7]
    assert [peak for _, peak in hits] == [high, 2 * high, 2 * high, high]


def test_gauges_classify_as_levels_and_counters_never_do():
    q = Container(SWTEL_ORIGIN, qos_interface_path("swp1") + "/output/queues/queue[name=3]/state")
    assert classify.classify(CounterSpec(q, "peak-occupancy", 64, GAUGE, "swp1")) == (
        "swp1", classify.QUEUE_PEAK, "3")
    assert classify.classify(CounterSpec(q, "current-occupancy", 64, GAUGE, "swp1")) == (
        "swp1", classify.QUEUE_LEVEL, "3")
    assert classify.classify(CounterSpec(q, "peak-occupancy", 64, 0, "swp1")) is None  # not a counter
    assert classify.classify(CounterSpec(q, "watermark", 64, GAUGE, "swp1")) is None
    assert classify.classify(CounterSpec(q, "ecn-marked-pkts", 64, 0, "swp1")) == ("swp1", classify.ECN, "3")


@pytest.mark.parametrize(("yaml", "message"), [
    ("insights: {congestion: {high: 100, low: 100}}", "insights.congestion.low: must be below"),
    ("insights: {congestion: {high: 0}}", "insights.congestion.high: must be at least 1"),
    ("insights: {congestion: {low: 2000000000000}}", "insights.congestion.low: must be at least 1 and at most"),
])
def test_config_refuses_thresholds_that_cannot_work(yaml, message):
    with pytest.raises(config.ConfigError) as err:
        config.parse(yaml)
    assert message in str(err.value)


def test_a_burst_between_two_polls_keeps_its_drops_and_marks():
    """The peak puts a whole burst into the sample that raises the record: its drops and
    ECN marks count, and the record is critical."""
    from agent.insights.congestion import Congestion

    hits: list[tuple[str, str]] = []

    class Ctx:
        log = None
        speeds: dict = {}

        def hit(self, det, etype, key, ts, severity, peak, unit, message, interfaces):
            hits.append((severity, message))

    ins = Insights()
    det = Congestion(ins.congestion, Ctx())
    owned = frozenset({classify.QUEUE_PEAK, classify.DROP_OUT, classify.ECN})
    det.sample("swp1", 1, 1, {(classify.QUEUE_PEAK, "3"): 100}, owned)
    det.sample("swp1", 2, 1, {(classify.QUEUE_PEAK, "3"): 8 << 20, (classify.DROP_OUT, "out-q-drops"): 70,
                              (classify.ECN, "3"): 900}, owned)
    det.sample("swp1", 3, 1, {(classify.QUEUE_PEAK, "3"): 100}, owned)
    assert len(hits) == 1
    severity, message = hits[0]
    assert severity == "critical" and "70 egress drops and 900 ECN marks" in message
