"""The link-degrading detector (agent/insights/link_degrading.py) on the simulated switch's
fec-degrade scenario (tests/sim_model.py, through the asic source's real mapping and the
change kernel, at synthetic sample times), its FLR and fit against a reference written here
from the formulas (SONiC's FEC FLR design), and its config rules."""

from __future__ import annotations

import math
import statistics
from array import array

import pytest

from agent import _backend, config
from agent.config import Duration, HostPort, Insights
from agent.counters import COUNTER, GAUGE, OPENCONFIG, Container, CounterSpec
from agent.exporters import otlp_names
from agent.insights import InsightsPipeline, classify
from agent.insights.link_degrading import GAUGES, phase_of, prediction_container
from agent.pathgrammar import interface_path
from agent.sources.asic import FEC_HISTOGRAM, histogram_bin
from agent.sources.events import EVENT_INFO
from agent.store import Store
from tests import sim_model
from tests.unit.test_insights_fabric import NS, T0, events, run

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


def held_from(port: str, t1: int, step: int = NS // 10) -> int:
    """Where the window the detector held at t1 (from start) starts: its 1 s buckets, the nine
    before the current one, each ending at the port's phase, each holding the samples (every
    ``step`` from T0) whose end falls in it, so from the start of the first of those."""
    ph = phase_of(port, NS)
    first_bucket = ((T0 + t1 - 1 + ph) // NS - 9) * NS - ph  # absolute: the phase is of the clock
    first_end = -(-(first_bucket + 1 - T0) // step) * step  # the first sample ending in it
    return first_end - step


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


def recorded_run(config: str, seconds: float, ins: Insights | None = None):
    """``run`` with every state update the runner's passes returned: (runner, raised, passes)."""
    passes: list[tuple[int, list]] = []
    end_pass = InsightsPipeline.end_pass

    def spy(self, ts):
        out = end_pass(self, ts)
        passes.append((ts, out))
        return out

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(InsightsPipeline, "end_pass", spy)
        runner, raised = run(config, seconds, ins=ins)
    return runner, raised, passes


@pytest.fixture(scope="module")
def recorded():
    """The degrade run, with every state update the runner's passes returned: (runner,
    raised, first uncorrectable s, [(pass ts, updates)])."""
    runner, raised, passes = recorded_run(DEGRADE, 75)
    return runner, raised, first_uncorrectable(DEGRADE, "swp11s1"), passes


@pytest.fixture(scope="module")
def degrade(recorded):
    return recorded[:3]


def gauge_series(passes) -> dict[tuple[str, str], list[tuple[int, float]]]:
    """(port, leaf) -> [(ts, value)] of the prediction gauges, as published."""
    out: dict[tuple[str, str], list[tuple[int, float]]] = {}
    for _ts, ups in passes:
        for u in ups:
            if u.container.path.endswith("/phy/fec/prediction/state"):
                port = u.container.path.split("[name=")[1].split("]")[0]
                assert u.container == prediction_container(port) and u.source == "insights"
                out.setdefault((port, u.leaf), []).append((u.ts_ns, u.value))
    return out


@pytest.mark.nolibs  # the detector on batches: no versioned library decides it
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


@pytest.mark.nolibs  # the detector on batches: no versioned library decides it
def test_flr_fit_and_maxt_match_the_reference(degrade):
    """The event's first FLR (its peak when raised) and its words against the reference over
    the window the detector held: its 1 s buckets, the nine before the current one."""
    _runner, raised, _ = degrade
    t_raise, ev = next((t, e) for t, e in raised if e["type"] == "link-degrading")
    port = port_of(DEGRADE, "swp11s1")
    t1 = round(t_raise * 10) * NS // 10
    bins, unc = window_deltas(port, held_from("swp11s1", t1), t1)
    flr, r2, max_t = reference(bins, unc)
    assert ev["peak"] == pytest.approx(flr, rel=0.01)
    assert f"fit R² {r2:.2f}" in ev["message"] and f"highest FEC bin S{max_t} " in ev["message"]


@pytest.mark.nolibs  # the detector on batches: no versioned library decides it
def test_fit_matches_the_reference_through_the_scenario():
    for config_, name in ((DEGRADE, "swp11s1"), ("ports=4 scenario=fec-degrade@5s-95s:swp2", "swp2")):
        port = port_of(config_, name)
        for t in range(12, 76, 4):
            bins, unc = window_deltas(port, (t - 10) * NS, t * NS)
            got = _backend.reader.fec_fits(bins, 1, False, unc + sum(bins))[0][1]  # the port's own histogram
            flr, r2, _ = reference(bins, unc)
            assert got is not None
            assert got[0] * 9 / 8 == pytest.approx(flr, rel=0.01)
            assert got[1] == pytest.approx(r2, rel=0.01)
            assert got[1] > 0.9  # log-linear: the model's tail is (2x a bin)


@pytest.mark.nolibs  # the detector on batches: no versioned library decides it
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


@pytest.mark.nolibs  # the detector on batches: no versioned library decides it
def test_a_clean_ten_minutes_raises_nothing():
    """Every port of the spine, healthy: low-bin noise only (the tail falls 8x a bin)."""
    _runner, raised = run("role=spine seed=1", 600, step=0.5)
    assert raised == []


def test_the_histogram_bins_classify_by_upper_boundary():
    """The port's bins on Cumulus' layout, as the asic source builds them: sub = the bin's upper
    boundary, Spectrum's bin index (the open last bin: 15); a lane's: ``lane/upper boundary``."""
    phy = Container(OPENCONFIG, interface_path("swp1") + "/phy/fec/state")
    fec, count = histogram_bin(phy, FEC_HISTOGRAM, 3, 3, 3)
    assert (fec.path, count) == (interface_path("swp1") + "/phy/histograms/state",
                                 "rs-num-corr-err[upper-boundary=3]/count")
    assert classify.classify(CounterSpec(fec, count, 64, COUNTER, "swp1")) == ("swp1", classify.FEC_BIN, "3")
    # the same bin with a container of its own, leaf count: the same
    alone = Container(OPENCONFIG, f"{fec.path}/rs-num-corr-err[upper-boundary=3]")
    assert classify.classify(CounterSpec(alone, "count", 64, COUNTER, "swp1")) == ("swp1", classify.FEC_BIN, "3")
    assert classify.classify(CounterSpec(*histogram_bin(phy, FEC_HISTOGRAM, 15, 15, 2**64 - 1), 64, COUNTER,
                                         "swp1")) == ("swp1", classify.FEC_BIN, "15")
    assert classify.classify(CounterSpec(fec, "rs-num-corr-err[upper-boundary=3]/other", 64, COUNTER, "swp1")) is None
    assert classify.classify(CounterSpec(alone, "other", 64, COUNTER, "swp1")) is None
    assert classify.classify(CounterSpec(fec, "rs-num-corr-err[upper-boundary=3]/upper-boundary", 64, GAUGE,
                                         "swp1")) is None
    lane = Container(OPENCONFIG, interface_path("swp1") + "/phy/channels/channel[id=2]/fec/state")
    assert classify.classify(CounterSpec(*histogram_bin(lane, FEC_HISTOGRAM, 3, 3, 3), 64,
                                         COUNTER, "swp1")) == ("swp1", classify.FEC_BIN, "2/3")
    assert classify.classify(CounterSpec(*histogram_bin(lane, FEC_HISTOGRAM, 15, 15, 2**64 - 1),
                                         64, COUNTER, "swp1")) == ("swp1", classify.FEC_BIN, "2/15")
    other = Container(OPENCONFIG, interface_path("swp10") + "/phy/channels/channel[id=2]/fec/state")
    assert classify.classify(CounterSpec(*histogram_bin(other, FEC_HISTOGRAM, 3, 3, 3), 64,
                                         COUNTER, "swp1")) is None  # another port's
    old = Container(OPENCONFIG,
                    interface_path("swp1") + "/phy/fec/state/rs-fec-histogram/bin[index=3][lower=3][upper=3]")
    assert classify.classify(CounterSpec(old, "count", 64, COUNTER, "swp1")) is None  # no longer streamed


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


# ---------------------------------------------------------------- the gauges (issue 22 item 3)


@pytest.mark.nolibs  # the detector on batches: no versioned library decides it
def test_flr_gauge_rises_before_the_first_uncorrectable_codeword(recorded):
    """The degrading port's predicted FLR crosses the threshold with a good fit at least 10 s
    before its first uncorrectable codeword, rising by orders of magnitude from its floor; the
    observed CER is 0 until that codeword and maxT climbs bin by bin; every other port stays
    at the floor of its low-bin noise, six orders below the threshold."""
    _runner, _raised, fail_s, passes = recorded
    series = gauge_series(passes)
    ports = {p for p, _leaf in series}
    assert len(ports) > 10 and all((p, leaf) in series for p in ports for leaf in GAUGES)
    flr = series[("swp11s1", "predicted-flr")]
    r2 = dict(series[("swp11s1", "fit-r2")])

    def r2_at(ts: int) -> float:
        return next(v for t, v in sorted(r2.items(), reverse=True) if t <= ts)

    threshold = Insights().link_degrading.flr
    crossed = next((ts - T0) / NS for ts, v in flr if v >= threshold and r2_at(ts) >= 0.9)
    print(f"predicted FLR gauge over {threshold:g} at {crossed:.1f}s, first uncorrectable codeword at "
          f"{fail_s:.2f}s")
    assert crossed <= fail_s - 10
    early = max(v for ts, v in flr if ts - T0 <= 15 * NS)
    assert early < threshold * 1e-6 and max(v for _ts, v in flr) > early * 1e6
    cer = series[("swp11s1", "observed-cer")]
    assert all(v == 0 for ts, v in cer if (ts - T0) / NS < fail_s) and cer[-1][1] > 0
    max_bin = [v for _ts, v in series[("swp11s1", "max-bin")]]
    assert max_bin[0] <= 3 and max_bin[-1] == 15 and max_bin == sorted(max_bin)
    floor = max(v for (p, leaf), vals in series.items() if p != "swp11s1" and leaf == "predicted-flr"
                for _ts, v in vals)
    assert floor < threshold * 1e-6
    assert all(v == 0 for (p, leaf), vals in series.items() if p != "swp11s1" and leaf == "observed-cer"
               for _ts, v in vals)


@pytest.mark.nolibs  # the detector on batches: no versioned library decides it
def test_gauges_are_published_once_a_bucket_at_most_once_a_second_on_change(recorded):
    _runner, _raised, _fail_s, passes = recorded
    times: dict[str, set[int]] = {}
    for (port, _leaf), vals in gauge_series(passes).items():
        assert all(a[1] != b[1] for a, b in zip(vals, vals[1:], strict=False))  # only changes
        times.setdefault(port, set()).update(ts for ts, _v in vals)
    for port, ts in times.items():
        ts_sorted = sorted(ts)
        assert all(b - a >= NS for a, b in zip(ts_sorted, ts_sorted[1:], strict=False)), port


@pytest.mark.nolibs  # the detector on batches: no versioned library decides it
def test_flr_gauge_matches_the_reference(recorded):
    """Each published FLR, R² and maxT of the degrading port against the reference over the
    window the detector held when it published (its buckets: the nine before the current
    one, and the current one's first sample), within 1 % (the gauge keeps 4 digits)."""
    _runner, _raised, _fail_s, passes = recorded
    series = gauge_series(passes)
    port = port_of(DEGRADE, "swp11s1")
    checked = 0
    for ts, value in series[("swp11s1", "predicted-flr")]:
        t1 = ts - T0
        if t1 < 12 * NS:  # a full window
            continue
        bins, unc = window_deltas(port, held_from("swp11s1", t1), t1)
        flr, r2, max_t = reference(bins, unc)
        assert value == pytest.approx(flr, rel=0.01), t1 / NS
        assert dict(series[("swp11s1", "fit-r2")]).get(ts, None) in (None, pytest.approx(r2, rel=0.01))
        checked += 1
    assert checked > 50


@pytest.mark.nolibs  # the detector on batches: no versioned library decides it
def test_a_clean_run_publishes_floor_gauges_and_no_cer():
    passes: list[tuple[int, list]] = []
    end_pass = InsightsPipeline.end_pass

    def spy(self, ts):
        out = end_pass(self, ts)
        passes.append((ts, out))
        return out

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(InsightsPipeline, "end_pass", spy)
        _runner, raised = run("ports=4 seed=3", 30, step=0.5)
    series = gauge_series(passes)
    assert raised == [] and {p for p, _ in series} == {"swp1", "swp2", "swp3", "swp4"}
    assert max(v for (_p, leaf), vals in series.items() if leaf == "predicted-flr" for _t, v in vals) < 1e-15
    assert {v for (_p, leaf), vals in series.items() if leaf == "observed-cer" for _t, v in vals} == {0.0}
    assert max(v for (_p, leaf), vals in series.items() if leaf == "max-bin" for _t, v in vals) < 9


def test_gauges_through_the_store_by_gnmi_get(recorded):
    """The store fed the runner's updates as the engine feeds it; pygnmi's Get of the gauges
    answers the last published value of each, exactly, for one port and for every port."""
    from pygnmi.client import gNMIclient

    from agent.exporters.server import GnmiServer, ServerConfig

    _runner, _raised, _fail_s, passes = recorded
    store = Store()
    for _ts, ups in passes:
        if ups:
            store.set_states(ups)
    last = {key: vals[-1][1] for key, vals in gauge_series(passes).items()}
    server = GnmiServer(ServerConfig(listen=HostPort("127.0.0.1:0"), insecure=True), "sim")
    server.start(store)
    try:
        with gNMIclient(target=("127.0.0.1", server.port), insecure=True, gnmi_timeout=5) as gc:
            # JSON: pygnmi's Get decodes no double_val from proto
            one = gc.get(path=["swtel:/interfaces/interface[name=swp11s1]/phy/fec/prediction/state"],
                         encoding="json")
            every = gc.get(path=["swtel:/interfaces/interface[name=*]/phy/fec/prediction/state/predicted-flr"],
                           encoding="json")
    finally:
        server.stop(1)
    # one notification per timestamp (each leaf keeps the time it was last published)
    assert {n["prefix"] for n in one["notification"]} == {"interfaces/interface[name=swp11s1]/phy/fec/prediction/state"}
    got = {u["path"]: u["val"] for n in one["notification"] for u in n["update"]}
    assert got == {leaf: last[("swp11s1", leaf)] for leaf in GAUGES}
    assert got["predicted-flr"] > 1e-9 and got["max-bin"] == 15 and isinstance(got["max-bin"], int)
    flrs = {n["prefix"].split("[name=")[1].split("]")[0]: n["update"][0]["val"] for n in every["notification"]}
    assert flrs == {p: v for (p, leaf), v in last.items() if leaf == "predicted-flr"}


def test_gauge_names_for_otlp_and_prometheus():
    """Cumulus has no prediction: swtel's names in its PHY style, each saying why."""
    for leaf, name in (("predicted-flr", "nvswitch_interface_phy_stats_predicted_flr"),
                       ("observed-cer", "nvswitch_interface_phy_stats_observed_cer"),
                       ("fit-r2", "nvswitch_interface_phy_stats_fec_fit_r2"),
                       ("max-bin", "nvswitch_interface_phy_stats_fec_max_bin")):
        path = prediction_container("swp1]x").full(leaf)  # escaped by the path grammar
        assert otlp_names.for_path(path) == (name, (("interface", "swp1]x"),), 1)
        assert name in otlp_names.SWTEL_OWN and name not in otlp_names.CUMULUS_519


def _gauge_states(ts_ns: int, flr: float, max_bin: int) -> list:
    from agent.counters import StateUpdate

    box = prediction_container("swp1")
    return [StateUpdate(ts_ns, box, "predicted-flr", flr, "insights"),
            StateUpdate(ts_ns, box, "max-bin", max_bin, "insights"),
            # an event's numeric leaf has no named shape: not a gauge (the event is an info series,
            # sources.events' swtel_insights_event_info: tests/unit/test_far_ends.py)
            StateUpdate(ts_ns, Container("swtel", "/insights/events/event[id=1]/state"), "peak", 2.5, "insights")]


@pytest.mark.parametrize("profile", ["cumulus", "otel"])
def test_otlp_carries_the_gauges_in_both_profiles(profile):
    """The store's gauge states become OTel gauges under their names, in a request after the
    tables', at the time they were published or the newest read's, whichever is later (a state
    holds until it changes); events stay out."""
    from tests.gnmi_helpers import make_table
    from tests.unit.test_otlp import _exporter

    store = Store()
    store.set_source("netdev", make_table(["swp1"]), array("Q", [1, 2, 3, 4, 5]), 5 * NS)
    store.set_states(_gauge_states(7 * NS, 2.5e-9, 12))
    store.set_states(_gauge_states(4 * NS, 1e-20, 3)[1:2])  # max-bin published before the read
    exp = _exporter(None, profile)
    exp._store = store
    requests = exp.build()
    points = {}
    for r in requests:
        for m in r.resource_metrics[0].scope_metrics[0].metrics:
            for dp in (m.gauge.data_points if m.HasField("gauge") else ()):
                points[(m.name, tuple((a.key, a.value.string_value) for a in dp.attributes))] = dp
    flr = points[("nvswitch_interface_phy_stats_predicted_flr", (("interface", "swp1"),))]
    assert (flr.as_double, flr.time_unix_nano) == (2.5e-9, 7 * NS)
    max_bin = points[("nvswitch_interface_phy_stats_fec_max_bin", (("interface", "swp1"),))]
    assert (max_bin.as_double, max_bin.time_unix_nano) == (3.0, 5 * NS)
    assert not any("peak" in name for name, _a in points)
    assert [name for name, _a in points if "event" in name] == [EVENT_INFO]  # the event's info series, value 1
    assert points[(EVENT_INFO, (("id", "1"), *((k, "") for k in ("type", "severity", "interface", "neighbor",
                                                                  "status"))))].as_double == 1.0
    assert exp.points == 5 + 3 and len(exp.request_points) == len(requests) and exp.request_points[-1] == 3
    assert requests[-1].resource_metrics[0].resource == requests[0].resource_metrics[0].resource


def test_remote_write_carries_the_gauges_on_change_and_each_resend():
    from tests.interop.test_remote_write import _exporter, _parse, _series

    exp = _exporter("http://127.0.0.1:9/w", resend=Duration(0.5), labels={"site": "ams1"})  # 5 exports
    store = Store()
    exp._store = store
    flr = _series("nvswitch_interface_phy_stats_predicted_flr", site="ams1")
    max_bin = _series("nvswitch_interface_phy_stats_fec_max_bin", site="ams1")

    infos: list[dict] = []

    def export() -> dict:
        """The gauges of one export (the event's info series, value 1, kept apart in ``infos``)."""
        built = exp.build()
        exp.exports += 1
        parsed = _parse(b"".join(b for b, _n in built))
        infos.append({k: v for k, v in parsed.items() if dict(k)["__name__"] == EVENT_INFO})
        return {k: v for k, v in parsed.items() if dict(k)["__name__"] != EVENT_INFO}

    store.set_states(_gauge_states(7 * NS, 2.5e-9, 12))
    assert export() == {flr: [(2.5e-9, 7000)], max_bin: [(12.0, 7000)]}  # no event's peak
    assert [v for (v,) in (list(i.values()) for i in infos)] == [[(1.0, 7000)]]
    assert export() == {}  # unchanged, not due
    store.set_states(_gauge_states(8 * NS, 3e-9, 12)[:1])
    assert export() == {flr: [(3e-9, 8000)]}
    assert export() == {} and export() == {}
    due = export()  # export 5: max-bin, last sent by export 0, again at the export's time
    assert set(due) == {max_bin} and due[max_bin][0][0] == 12.0 and due[max_bin][0][1] > 8000
    exp._on_drop((b"", 0))
    assert set(export()) == {flr, max_bin}  # a dropped request: every gauge again


@pytest.mark.slow
def test_an_agent_sends_the_same_gauges_by_otlp_and_gnmi(tmp_path):
    """A real agent on the simulated switch (swp2 degrading since before it started): OTLP
    (profile cumulus) receives the gauges, swp2's FLR orders above the healthy ports' floor, and
    the first OTLP points of each gauge at or after the time gNMI Get answers for it carry the
    value Get answers (exports every 200 ms, a gauge changes at most once a second)."""
    import time

    from pygnmi.client import gNMIclient

    from tests.gnmi_helpers import free_port
    from tests.namespaces import AgentProcess
    from tests.otlp_receiver import Receiver
    from tests.unit.test_otlp import _sim_config

    start = time.time_ns() - 40 * NS  # the degrade is past its first half: a tail to fit
    sim = f"ports=4 seed=1 start={start} scenario=fec-degrade@1s-70s:swp2"
    rx = Receiver(names={*otlp_names.PHY_PREDICTION.values(), *otlp_names.PHY_LANE_PREDICTION.values()}).start()
    port = free_port()
    server = f"\n  server: {{listen: '127.0.0.1:{port}', insecure: true}}\ncontrol:"  # beside otlp
    agent = AgentProcess(None, _sim_config(tmp_path, sim, rx.port, "cumulus").replace("\ncontrol:", server, 1),
                         tmp_path)
    flr_name = otlp_names.PHY_PREDICTION["predicted-flr"]
    try:
        agent.wait_ready()
        assert rx.wait_for(lambda r: all(r.latest(flr_name, interface=f"swp{i}") for i in range(1, 5))
                           and len(r.series(flr_name, interface="swp2")) >= 3, 60)
        with gNMIclient(target=("127.0.0.1", port), insecure=True, gnmi_timeout=5) as gc:
            got = gc.get(path=["swtel:/interfaces/interface[name=swp2]/phy/fec/prediction/state"], encoding="json")
        leaves = {u["path"]: (n["timestamp"], u["val"]) for n in got["notification"] for u in n["update"]}
        # the exports after the Get: two points of each leaf stamped at or after its read
        assert rx.wait_for(lambda r: all(
            sum(p.time_ns >= ts for p in r.series(otlp_names.PHY_PREDICTION[leaf], interface="swp2")) >= 2
            for leaf, (ts, _v) in leaves.items() if leaf in otlp_names.PHY_PREDICTION), 60)
    finally:
        assert agent.stop() == 0
        rx.stop()
    assert set(leaves) == set(GAUGES)
    for leaf, (ts, value) in leaves.items():
        points = [(p.time_ns, p.value) for p in rx.series(otlp_names.PHY_PREDICTION[leaf], interface="swp2")]
        after = [v for t, v in points if t >= ts]
        # (an export between the read and its pass's end stamps the old value with that read)
        assert float(value) in after[:2], (leaf, ts, value, points)
    # swp2's FLR above the healthy ports' by an order of magnitude at least, among the fits the
    # detector trusts (R² >= min_r2: the event's rule): a healthy port's few codewords in its top
    # bins (0 or 1 a window) can fit a flat tail at 1e-9-1e-8 with R² ~0.5 when load moves where
    # its buckets close (seen in pure-Python runs beside two busy loops: 1.5e-8 at R² 0.48), a
    # prediction the detector does not act on; the highest bin with codewords orders them always
    min_r2 = Insights().link_degrading.min_r2
    _assert_degrading_above_healthy(rx, otlp_names.PHY_PREDICTION, min_r2, "swp2",
                                    [{"interface": f"swp{i}"} for i in (1, 3, 4)])
    # each lane's under the _lane names (the sim's 400G ports: 4 lanes; the degrade is on lane 0)
    lane_flr = otlp_names.PHY_LANE_PREDICTION["predicted-flr"]
    lanes = {p.attr["lane"] for p in rx.series(lane_flr, interface="swp2")}
    assert lanes == {"0", "1", "2", "3"}
    _assert_degrading_above_healthy(rx, otlp_names.PHY_LANE_PREDICTION, min_r2,
                                    {"interface": "swp2", "lane": "0"},
                                    [{"interface": "swp2", "lane": lane} for lane in ("1", "2", "3")])


def _assert_degrading_above_healthy(rx, names: dict, min_r2: float, degrading, healthy: list[dict]) -> None:
    """The degrading unit's latest gauges against the healthy ones': its fit trusted and its FLR
    10x above every trusted healthy fit, its highest bin above theirs."""
    def latest(attrs: dict) -> dict:
        return {leaf: rx.latest(name, **attrs).value for leaf, name in names.items() if leaf != "observed-cer"}

    sick = latest(degrading if isinstance(degrading, dict) else {"interface": degrading})
    others = [latest(attrs) for attrs in healthy]
    assert sick["fit-r2"] >= min_r2, (sick, others)
    trusted = [g["predicted-flr"] for g in others if g["fit-r2"] >= min_r2]
    assert sick["predicted-flr"] > max(trusted, default=0.0) * 1e1 and sick["predicted-flr"] > 0, (sick, others)
    assert sick["max-bin"] > max(g["max-bin"] for g in others), (sick, others)


@pytest.mark.nolibs  # the detector on batches: no versioned library decides it
def test_a_port_whose_bins_stop_reads_an_empty_window_then_starts_afresh():
    """A link gone down sends no samples: once its window (10 s) holds none, its gauges read 0
    instead of its last prediction; when its bins move again they are published anew."""
    from agent.insights.link_degrading import LinkDegrading

    class Ctx:
        def hit(self, *a):
            pass

    det = LinkDegrading(Insights().link_degrading, Ctx())
    owned = frozenset({classify.FEC_BIN, classify.UNCORRECTABLE})
    acc = {(classify.FEC_BIN, str(i)): 10 ** (9 - i // 2) for i in range(12)}  # a tail to fit
    t = T0
    for _ in range(30):  # 3 s at 100 ms
        t += NS // 10
        det.sample("swp1", t, NS // 10, acc, owned)
        det.end_pass(t)
    live = {u.leaf: u.value for u in det.states()}
    assert live["predicted-flr"] > 0 and live["max-bin"] == 11
    for _ in range(110):  # 11 s without a sample
        t += NS // 10
        det.end_pass(t)
    # (observed-cer was 0 already: only changes are sent)
    assert {u.leaf: u.value for u in det.states()} == {"predicted-flr": 0.0, "fit-r2": 0.0, "max-bin": 0}
    assert "swp1" not in det.ports
    for _ in range(11):
        t += NS // 10
        det.sample("swp1", t, NS // 10, acc, owned)
        det.end_pass(t)
    assert {u.leaf for u in det.states()} == set(GAUGES)


@pytest.mark.parametrize("backend", ["backend", "fallback"])
def test_the_kernel_makes_state_updates_by_calling_the_class(backend, monkeypatch):
    """Every gauge update the kernel publishes is made by calling the class it is given (C makes
    no object without its constructor): a StateUpdate subclass that notes each __init__ sees every
    update of a run whose samples the kernel took."""
    from agent import _backend, _fallback
    from agent.counters import StateUpdate
    from agent.insights import link_degrading
    from agent.insights.link_degrading import LinkDegrading

    made: set[int] = set()

    class Noted(StateUpdate):
        __slots__ = ()

        def __init__(self, *args) -> None:
            super().__init__(*args)
            made.add(id(self))

    monkeypatch.setattr(link_degrading, "StateUpdate", Noted)

    class Ctx:
        def hit(self, *a):
            pass

    det = LinkDegrading(Insights().link_degrading, Ctx())
    det.kernel = (_backend.reader if backend == "backend" else _fallback).fec_run
    owned = frozenset({classify.FEC_BIN, classify.UNCORRECTABLE})
    t, ups, by_kernel = T0, [], []
    for n in range(60):  # 6 s at 100 ms, the bins (below max_bin) moving
        acc = {(classify.FEC_BIN, str(i)): 10 ** (9 - i) + n * n * (8 - i) for i in range(8)}
        t += NS // 10
        taken = "swp1" in det.fast  # (the kernel takes this sample)
        det.sample("swp1", t, NS // 10, acc, owned)
        det.end_pass(t)
        new = det.states()
        ups += new
        by_kernel += new if taken else []
    assert len(by_kernel) >= 8 and {u.leaf for u in by_kernel} >= {"predicted-flr", "fit-r2"}
    assert all(type(u) is Noted and id(u) in made for u in ups)
