"""link-degrading per lane (issue 22, per lane): the simulated switch's lanes' histograms
through the asic source's real mapping and the change kernel (tests/unit/test_insights_fabric.py
``run``), ethnl's lane bins classified alike, one event per (port, lane) naming its lane, the
lanes' gauges and the port's as its worst lane's, the fits spread over the second, and the
gauges deleted when a reload disables the detector."""

from __future__ import annotations

import pytest

from agent import _backend
from agent.config import Insights
from agent.counters import SWTEL_ORIGIN
from agent.insights import InsightsPipeline, classify
from agent.insights import link_degrading as ld
from agent.insights.link_degrading import GAUGES, LinkDegrading, prediction_container
from agent.sources import ethnl
from agent.store import Store
from tests.unit.test_insights_fabric import NS, T0, events, run
from tests.unit.test_link_degrading import first_uncorrectable, recorded_run

pytestmark = pytest.mark.nolibs  # detectors on batches: no versioned library decides it

LANE_DEGRADE = "ports=6 seed=1 scenario=fec-degrade@10s-70s:swp3:2"


def gauges(passes) -> dict[tuple[str, int | None, str], list[tuple[int, float]]]:
    """(port, lane or None for the port's, leaf) -> [(ts, value)] of the prediction gauges."""
    out: dict[tuple[str, int | None, str], list[tuple[int, float]]] = {}
    for _ts, ups in passes:
        for u in ups:
            path = u.container.path
            if u.container.origin != SWTEL_ORIGIN or not path.endswith("/fec/prediction/state"):
                continue
            port = path.split("[name=")[1].split("]")[0]
            lane = int(path.split("channel[id=")[1].split("]")[0]) if "/channel[id=" in path else None
            assert u.container == prediction_container(port, lane)
            out.setdefault((port, lane, u.leaf), []).append((u.ts_ns, u.value))
    return out


@pytest.fixture(scope="module")
def lane_run():
    runner, raised, passes = recorded_run(LANE_DEGRADE, 75)
    return runner, raised, passes, first_uncorrectable(LANE_DEGRADE, "swp3")


def test_raised_on_the_right_port_and_lane_well_before_the_first_uncorrectable(lane_run):
    runner, raised, passes, fail_s = lane_run
    assert 64.0 < fail_s <= 64.1
    mine = [(t, e) for t, e in raised if e["type"] == "link-degrading"]
    assert [e["interfaces"] for _t, e in mine] == [["swp3"]]  # one event: 0 on every other port and lane
    assert len([e for e in events(runner) if e["type"] == "link-degrading"]) == 1
    t_raise, ev = mine[0]
    print(f"link-degrading on swp3 lane 2 at {t_raise:.1f}s, first uncorrectable codeword at {fail_s:.2f}s: "
          f"lead {fail_s - t_raise:.1f}s")
    assert fail_s - t_raise >= 10
    assert ev["message"].startswith("swp3 lane 2: link degrading")
    assert "clean or reseat the optic or cable on swp3 (lane 2)" in ev["message"]
    # the event's state carries the lane as a leaf of its own
    lanes = [u.value for _ts, ups in passes for u in ups
             if u.container.path == f"/insights/events/event[id={ev['id']}]/state" and u.leaf == "lane"]
    assert lanes == [2]
    assert {tuple(e["interfaces"]) for _t, e in raised} == {("swp3",)}  # no other port's event of any type


def test_lane_gauges_and_the_port_as_its_worst_lane(lane_run):
    """Every lane of every port has its gauges; lane 2 of swp3 crosses the FLR threshold 10 s
    before the first uncorrectable codeword, every other lane stays at its floor; the port's
    gauges are its worst lane's, so swp3's follow lane 2's."""
    _runner, _raised, passes, fail_s = lane_run
    series = gauges(passes)
    assert {(p, lane) for p, lane, _leaf in series} == {(f"swp{i}", lane) for i in range(1, 7)
                                                       for lane in (None, 0, 1, 2, 3)}
    assert all((p, lane, leaf) in series for p, lane, _ in series for leaf in GAUGES)
    threshold = Insights().link_degrading.flr
    lane2 = series[("swp3", 2, "predicted-flr")]
    crossed = next((ts - T0) / NS for ts, v in lane2 if v >= threshold)
    assert crossed <= fail_s - 10
    floor = max(v for (p, lane, leaf), vals in series.items()
                if leaf == "predicted-flr" and (p, lane) not in (("swp3", 2), ("swp3", None)) for _ts, v in vals)
    assert floor < threshold * 1e-6
    for leaf in ("predicted-flr", "max-bin", "fit-r2"):  # once the tail leads: lane 2's, published with it

        def late(vals):
            return [(ts, v) for ts, v in vals if ts - T0 >= 20 * NS]

        assert late(series[("swp3", None, leaf)]) == late(series[("swp3", 2, leaf)]), leaf
    # the observed CER is the port's, on each lane: 0 until the first uncorrectable codeword
    for lane in (None, 0, 1, 2, 3):
        cer = series[("swp3", lane, "observed-cer")]
        assert all(v == 0 for ts, v in cer if (ts - T0) / NS < fail_s) and cer[-1][1] > 0


def test_ethnl_lane_bins_classify_per_lane():
    """ethnl's per-lane bins (the kernel's BIN_VAL_PER_LANE) sit below the lane's channel, as
    the asic source's: the port's feed carries them as ``lane/upper``, the port's as ``upper``."""
    shape = ((5, 5, 5), tuple((i, i if i < 15 else 2**64 - 1, 4) for i in range(16)))
    subs = {}
    for spec in ethnl.fec_specs("eth0", shape):
        hit = classify.classify(spec)
        if hit is not None and hit[1] == classify.FEC_BIN:
            subs[hit[2]] = spec.container.full(spec.leaf)
    assert set(subs) == {str(i) for i in range(16)} | {f"{lane}/{i}" for lane in range(4) for i in range(16)}
    assert subs["3/15"].endswith("/phy/channels/channel[id=3]/histograms/state/"
                                 "rs-num-corr-err[upper-boundary=15]/count")
    assert subs["15"].endswith("/phy/histograms/state/rs-num-corr-err[upper-boundary=15]/count")


def test_ethnl_style_lanes_raise_on_their_lane():
    """Samples as ethnl's feed carries them (the port's bins and its lanes'): the lane with the
    tail raises its own event, keyed (port, lane); the port's own bins are not judged again."""
    hits = []

    class Ctx:
        def hit(self, det, etype, key, ts, severity, peak, unit, message, interfaces):
            hits.append((key, message.split(":")[0], interfaces))

    det = LinkDegrading(Insights().link_degrading, Ctx())
    owned = frozenset({classify.FEC_BIN, classify.UNCORRECTABLE})
    healthy = [10 ** 8, 10 ** 5, 10 ** 2] + [0] * 13
    sick = [10 ** 8] + [10 ** (8 - i // 2) // 4 for i in range(1, 12)] + [0] * 4  # a tail to bin 11
    acc = {(classify.FEC_BIN, str(i)): healthy[i] * 3 + sick[i] for i in range(16)}
    for lane, bins in ((0, healthy), (1, sick), (2, healthy), (3, healthy)):
        acc.update({(classify.FEC_BIN, f"{lane}/{i}"): n for i, n in enumerate(bins) if n})
    t = T0
    for _ in range(30):
        t += NS // 10
        det.sample("eth0", t, NS // 10, acc, owned)
        det.end_pass(t)
    assert hits and {h[0] for h in hits} == {("eth0", 1)}
    assert {h[1] for h in hits} == {"eth0 lane 1"} and hits[0][2] == ["eth0"]
    boxes = {u.container for u in det.states()}
    assert boxes == {prediction_container("eth0", lane) for lane in (None, 0, 1, 2, 3)}


def _fits_per_pass(config: str, seconds: float, spread: bool):
    """(fits in each pass, link-degrading events as (interfaces, message head, raised s))."""
    counts: list[int] = []
    calls = [0]
    real_end = InsightsPipeline.end_pass
    real_fits = _backend.reader.fec_fits

    def counting_fits(*a):  # the kernel's: one fit per unit with codewords
        found = real_fits(*a)
        calls[0] += sum(u is not None for u in found or ())
        return found

    real_run = _backend.reader.fec_run

    def counting_run(entries, fast, *rest):  # the kernel's closes: one fit per unit with codewords
        idx = {port: f[0][ld.IDX] for port, f in fast.items()}
        out = real_run(entries, fast, *rest)
        for port, was in idx.items():
            w, keys = fast[port][0], fast[port][1]
            if w[ld.IDX] != was:
                n = len(keys)
                d = [a + b for a, b in zip(w[ld.HEAD:ld.HEAD + n], w[ld.HEAD + n:ld.HEAD + 2 * n], strict=True)]
                calls[0] += sum(sum(d[at:at + ld.BINS]) > 0 for at in range(0, n, ld.BINS))
        return out

    def end_pass(self, ts):
        out = real_end(self, ts)
        counts.append(calls[0])
        calls[0] = 0
        return out

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(_backend.reader, "fec_fits", counting_fits)
        mp.setattr(_backend.reader, "fec_run", counting_run)
        mp.setattr(InsightsPipeline, "end_pass", end_pass)
        if not spread:
            mp.setattr(LinkDegrading, "phase", lambda self, port: 0)
        _runner, raised = run(config, seconds)
    evs = [(tuple(e["interfaces"]), e["message"].split(":")[0], t) for t, e in raised if e["type"] == "link-degrading"]
    return counts, evs


def test_fits_spread_over_the_second_with_the_same_events():
    """Each port's buckets end at its own phase: no pass fits every port and lane at once (as
    every pass on a whole second did), the fits per second are the same, and so are the events
    (the same port and lane, raised within one bucket of each other)."""
    config = "ports=40 seed=2 scenario=fec-degrade@4s-34s:swp7:3"
    flat, flat_events = _fits_per_pass(config, 34, spread=False)
    spread, spread_events = _fits_per_pass(config, 34, spread=True)
    steady_flat, steady_spread = flat[50:300], spread[50:300]  # 5..30 s: before the failing tenth
    assert max(steady_flat) >= 40 * 4  # every port's every lane on one pass
    assert max(steady_spread) <= max(steady_flat) // 3
    assert abs(sum(steady_flat) - sum(steady_spread)) <= 40 * 4 * 2  # the same fits, spread
    assert [e[:2] for e in flat_events] == [e[:2] for e in spread_events] == [(("swp7",), "swp7 lane 3")]
    assert abs(flat_events[0][2] - spread_events[0][2]) <= 1.1


def test_disabled_by_a_reload_its_gauges_leave_the_store():
    """A reload that disables link_degrading deletes every gauge it published (ports and lanes,
    and the zeros of a port whose window emptied), through the store as the engine feeds it;
    the other detectors' states stay."""
    runner, _raised, passes = recorded_run("ports=3 seed=1 scenario=fec-degrade@1s-12s:swp2:1", 8)
    store = Store()
    for _ts, ups in passes:
        store.set_states(ups)
    held = {(s.container, s.leaf) for s in store.states() if s.container.path.endswith("/fec/prediction/state")}
    assert len(held) == 3 * 5 * len(GAUGES)  # 3 ports, each with its own and 4 lanes' gauges
    others = {(s.container, s.leaf) for s in store.states()} - held
    off = Insights()
    off.link_degrading.enabled = False
    runner.reconfigure(off)
    deletes = runner.end_pass(T0 + 9 * NS)
    assert {(u.container, u.leaf) for u in deletes if u.value is None} >= held
    store.set_states(deletes)
    left = {(s.container, s.leaf) for s in store.states()}
    assert not any(c.path.endswith("/fec/prediction/state") for c, _leaf in left)
    assert others <= left
    assert not any(u.container.path.endswith("/fec/prediction/state") for u in runner.end_pass(T0 + 10 * NS))


def test_retire_deletes_the_zeros_of_an_emptied_window_too():
    class Ctx:
        def hit(self, *a):
            return None

    det = LinkDegrading(Insights().link_degrading, Ctx())
    owned = frozenset({classify.FEC_BIN})
    acc = {(classify.FEC_BIN, f"0/{i}"): 10 ** (9 - i // 2) for i in range(12)}
    t = T0
    for _ in range(30):
        t += NS // 10
        det.sample("swp1", t, NS // 10, acc, owned)
        det.end_pass(t)
    for _ in range(120):  # the window empties: its gauges read 0
        t += NS // 10
        det.end_pass(t)
    assert "swp1" not in det.ports and det.states()
    gone = det.retire(t)
    assert {(u.container, u.leaf) for u in gone if u.value is None} == \
        {(prediction_container("swp1", lane), leaf) for lane in (None, 0) for leaf in GAUGES}
