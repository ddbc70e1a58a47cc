"""The link-degrading detector (agent/insights/link_degrading.py) on the simulated switch's
fec-degrade scenario (tests/sim_model.py, through the asic source's real mapping and the
change kernel, at synthetic sample times), its FLR and fit against a reference written here
from the formulas (SONiC's FEC FLR design), and its config rules."""

from __future__ import annotations

import math
import statistics

import pytest

from agent import config
from agent.config import Insights
from agent.counters import COUNTER, OPENCONFIG, Container, CounterSpec
from agent.insights import classify
from agent.insights.link_degrading import fit
from agent.pathgrammar import interface_path
from tests import sim_model
from tests.test_insights_fabric import NS, events, run

DEGRADE = "role=spine seed=1 scenario=fec-degrade@10s-70s:swp11s1"
FEC0 = sim_model.IDX["phy_rs_fec_histogram"]
UNC = sim_model.IDX["phy_effective_errors"]


def port_of(config: str, name: str) -> sim_model.Port:
    model = sim_model.Model(f"start=0 {config}")
    return next(p for p in model.ports_at(0) if p.name == name)


def first_uncorrectable(config: str, name: str) -> float:
    """Seconds from start of the port's first uncorrectable codeword (10 ms resolution)."""
    port = port_of(config, name)
    t = 0
    while port.values(t)[UNC] == 0:
        t += sim_model.SLOT
    return t / NS


def window_deltas(port: sim_model.Port, t0_ns: int, t1_ns: int) -> tuple[list[int], int]:
    a, b = port.values(t0_ns), port.values(t1_ns)
    return [b[FEC0 + i] - a[FEC0 + i] for i in range(16)], b[UNC] - a[UNC]


def reference(bins: list[int], unc: int, interleave: int = 1) -> tuple[float, float, int]:
    """(predicted FLR, R², maxT) straight from the formulas: CER over every codeword of the
    window, a least-squares line through log10(S_i / total) of the bins 1..15 with counts,
    bins 16..20 extrapolated, FLR = CER x (1 + X x MFC) / MFC with MFC = 8."""
    total = unc + bins[0] + sum(bins[1:])
    xs = [i for i in range(1, 16) if bins[i]]
    ys = [math.log10(bins[i] / total) for i in xs]
    slope, intercept = statistics.linear_regression(xs, ys)
    r2 = statistics.correlation(xs, ys) ** 2
    cer = sum(10 ** (intercept + slope * i) for i in range(16, 21))
    return cer * (1 + interleave * 8) / 8, r2, max(i for i in range(16) if bins[i])


@pytest.fixture(scope="module")
def degrade():
    runner, raised = run(DEGRADE, 75)
    return runner, raised, first_uncorrectable(DEGRADE, "swp11s1")


def test_raised_well_before_the_first_uncorrectable_codeword_on_the_right_port(degrade):
    runner, raised, fail_s = degrade
    assert 64.0 < fail_s <= 64.1  # END - (END - START) / 10, within its first 100 ms cell
    assert {tuple(e["interfaces"]) for _, e in raised} == {("swp11s1",)}  # no other port
    first = {}
    for t, e in raised:
        first.setdefault(e["type"], t)
    assert [e["type"] for e in events(runner)].count("link-degrading") == 1
    lead = fail_s - first["link-degrading"]
    print(f"link-degrading raised at {first['link-degrading']:.1f}s, first uncorrectable codeword at "
          f"{fail_s:.2f}s: lead {lead:.1f}s; symbol-ber at {first['symbol-ber']:.1f}s, "
          f"pre-fec-ber at {first['pre-fec-ber']:.1f}s")
    assert lead >= 10
    assert first["link-degrading"] < min(first["symbol-ber"], first["pre-fec-ber"])
    ev = next(e for e in events(runner) if e["type"] == "link-degrading")
    assert ev["unit"] == "flr" and ev["severity"] == "critical"  # uncorrectable codewords came
    assert "clean or reseat the optic or cable on swp11s1" in ev["message"]


def test_flr_fit_and_maxt_match_the_reference(degrade):
    """The event's first FLR (its peak when raised) and its words against the reference over
    the window the detector held: its 1 s buckets, the nine before the current one."""
    _runner, raised, _ = degrade
    t_raise, ev = next((t, e) for t, e in raised if e["type"] == "link-degrading")
    port = port_of(DEGRADE, "swp11s1")
    t1 = round(t_raise * 10) * NS // 10
    bins, unc = window_deltas(port, ((t1 - 1) // NS - 9) * NS, t1)
    flr, r2, max_t = reference(bins, unc)
    assert ev["peak"] == pytest.approx(flr, rel=0.01)
    assert f"fit R² {r2:.2f}" in ev["message"] and f"highest FEC bin S{max_t} " in ev["message"]


def test_fit_matches_the_reference_through_the_scenario():
    for config_, name in ((DEGRADE, "swp11s1"), ("ports=4 scenario=fec-degrade@5s-95s:swp2", "swp2")):
        port = port_of(config_, name)
        for t in range(12, 76, 4):
            bins, unc = window_deltas(port, (t - 10) * NS, t * NS)
            got = fit(bins, unc + sum(bins))
            flr, r2, _ = reference(bins, unc)
            assert got is not None
            assert got[0] * 9 / 8 == pytest.approx(flr, rel=0.01)
            assert got[1] == pytest.approx(r2, rel=0.01)
            assert got[1] > 0.9  # log-linear: the model's tail is (2x a bin)


@pytest.mark.parametrize(("flr", "max_bin", "why"), [
    (0.5, 9, "maxT alone"),  # no FLR reaches 0.5
    (1e-9, 15, "the FLR alone"),  # S15 comes only once failing: past the lead
])
def test_each_rule_alone_raises_it_before_the_first_uncorrectable(flr, max_bin, why):
    cfg = "ports=4 seed=1 scenario=fec-degrade@5s-65s:swp2"
    ins = Insights()
    ins.link_degrading.flr, ins.link_degrading.max_bin = flr, max_bin
    _runner, raised = run(cfg, 60, ins=ins)
    got = [(t, e["interfaces"]) for t, e in raised if e["type"] == "link-degrading"]
    assert len(got) == 1 and got[0][1] == ["swp2"], why
    assert got[0][0] <= first_uncorrectable(cfg, "swp2") - 10, why


def test_a_clean_ten_minutes_raises_nothing():
    """Every port of the spine, healthy: low-bin noise only (the tail falls 8x a bin)."""
    _runner, raised = run("role=spine seed=1", 600, step=0.5)
    assert raised == []


def test_the_histogram_bins_classify_by_index():
    fec = Container(OPENCONFIG, interface_path("swp1") + "/phy/fec/state/rs-fec-histogram/bin[index=3][lower=3][upper=3]")
    assert classify.classify(CounterSpec(fec, "count", 64, COUNTER, "swp1")) == ("swp1", classify.FEC_BIN, "3")
    top = Container(OPENCONFIG, interface_path("swp1") + "/phy/fec/state/rs-fec-histogram/bin[index=15][lower=15][upper=inf]")
    assert classify.classify(CounterSpec(top, "count", 64, COUNTER, "swp1")) == ("swp1", classify.FEC_BIN, "15")
    assert classify.classify(CounterSpec(fec, "other", 64, COUNTER, "swp1")) is None


@pytest.mark.parametrize(("yaml", "message"), [
    ("insights: {link_degrading: {flr: 0}}", "insights.link_degrading.flr: expected a ratio 0 < x < 1"),
    ("insights: {link_degrading: {flr: 1.5}}", "insights.link_degrading.flr: expected a ratio 0 < x < 1"),
    ("insights: {link_degrading: {min_r2: 0}}", "insights.link_degrading.min_r2: expected 0 < x <= 1"),
    ("insights: {link_degrading: {max_bin: 16}}",
     "insights.link_degrading.max_bin: must be at least 1 and at most 15, got 16"),
    ("insights: {link_degrading: {max_bin_count: 0}}",
     "insights.link_degrading.max_bin_count: must be at least 1"),
    ("insights: {link_degrading: {interleave: 3}}", "insights.link_degrading.interleave: expected 1, 2 or 4, got 3"),
    ("insights: {link_degrading: {window: 1m, clear_after: 30s}}",
     "insights.link_degrading.clear_after: must be at least the window"),
    ("sources: {asic: {enabled: true, plugin: sim, interval: 1s}}\ninsights: {link_degrading: {window: 500ms}}",
     "insights.link_degrading.window: must be at least the poll interval"),
])
def test_config_refuses_settings_that_cannot_work(yaml, message):
    with pytest.raises(config.ConfigError) as err:
        config.parse(yaml)
    assert message in str(err.value)
