"""The simulated switch's per-lane RS-FEC histograms (issue 22, per lane): one 16-bin histogram
per lane after the port's, the port's equal to the sum of its lanes' bin by bin, and
``fec-degrade@START-END:PORT:LANE`` putting its whole tail into that lane, with the plugin
equal to the oracle (tests/sim_model.py) bit for bit."""

from __future__ import annotations

import pytest
from sim_model import FEC_BINS, IDX, LANE_FEC0, Model  # noqa: E402
from test_sim_plugin import load_ops, opened  # noqa: E402

from tests import sim_model  # noqa: E402

pytestmark = pytest.mark.nolibs  # no versioned library decides its outcome: not in the Debian pass

S = 1_000_000_000
FEC0 = IDX["phy_rs_fec_histogram"]


def lane_bins(v: list[int], lane: int) -> list[int]:
    at = LANE_FEC0 + lane * FEC_BINS
    return v[at:at + FEC_BINS]


def port_of(model: Model, name: str, t: int = 0) -> sim_model.Port:
    return next(p for p in model.ports_at(t) if p.name == name)


SUM_CONFIG = ("role=spine seed=9 scenario=fec-degrade@1s-21s:swp2:2,fec-degrade@3s-13s:swp12s1:1,"
              "symbol-errors@2s-9s:swp11s1,link-flap@0s:swp3,counter-clear@6s:swp2,breakout@4s:swp7")


def test_port_histogram_is_the_sum_of_its_lanes_exactly():
    model = Model(SUM_CONFIG)
    seen_lanes = set()
    for t in range(0, 24 * S, 613_000_000):  # reads anywhere in slots and cells
        _, ports, counters = model.layout(t)
        values = model.values(t)
        for (name, _parent, speed, _flags), cs, at in zip(ports, counters, sim_model.offsets(counters),
                                                          strict=True):
            v = values[at:at + sim_model.slots(cs)]
            lanes = speed // 100_000
            seen_lanes.add(lanes)
            assert [c[0] for c in cs[-lanes:]] == [f"phy_rs_fec_histogram_lane{i}" for i in range(lanes)]
            sums = [sum(lane_bins(v, i)[k] for i in range(lanes)) & sim_model.MASK64 for k in range(FEC_BINS)]
            assert v[FEC0:FEC0 + FEC_BINS] == sums, (t, name)
            if not port_of(model, name, t).clears:  # every codeword received is in one lane's bin
                assert sum(v[FEC0:FEC0 + FEC_BINS]) == v[IDX["phy_received_bits"]] // sim_model.CW_BITS
    assert seen_lanes == {1, 2, 4}


def test_plugin_lanes_equal_the_model():
    ops = load_ops()
    model = Model(SUM_CONFIG)
    for at in (0.5, 5.1, 12.3):
        sim, start = opened(ops, SUM_CONFIG, at)
        try:
            for _ in range(2):
                ts, values = sim.read()
                assert (sim.gen, sim.ports, sim.counters) == model.layout(ts - start)
                assert values == model.values(ts - start, sim.since(start))
        finally:
            sim.close()


@pytest.mark.parametrize("lane", [0, 1, 2, 3])
def test_fec_degrade_tail_goes_into_its_lane_only(lane):
    """The tail is in the named lane (and the port's sum); the other lanes are as on a clean
    run; the port's histogram, PHY counters and timings are those of the lane-less scenario."""
    spec = "fec-degrade@10s-70s:swp2"
    model = Model(f"role=spine scenario={spec}:{lane}")
    plain = Model(f"role=spine scenario={spec}")  # lane 0 by default
    clean = Model("role=spine")
    port, base, quiet = (port_of(m, "swp2") for m in (model, plain, clean))
    first_eff = None
    for k in range(0, 80, 3):
        t = k * S + 123_456_789
        v, b, q = port.values(t), base.values(t), quiet.values(t)
        # the port's histogram and every port counter but the lanes' raw errors: unchanged
        lanes_raw = {IDX[f"phy_raw_errors_lane{i}"] for i in range(8)}
        assert [x for i, x in enumerate(v[:LANE_FEC0]) if i not in lanes_raw] == \
            [x for i, x in enumerate(b[:LANE_FEC0]) if i not in lanes_raw]
        for i in range(4):
            if i == lane:
                continue
            assert lane_bins(v, i) == lane_bins(q, i), (t, i)  # a clean lane
            assert v[IDX[f"phy_raw_errors_lane{i}"]] == q[IDX[f"phy_raw_errors_lane{i}"]]
        mine = lane_bins(v, lane)
        if 20 * S < t < 70 * S:
            assert mine[4:] != lane_bins(q, lane)[4:]  # the tail is here
            assert max(i for i, n in enumerate(mine) if n) == max(i for i, n in enumerate(v[FEC0:FEC0 + 16]) if n)
        # the lane's raw errors carry the tail's corrected bits
        tail_bits = v[IDX["phy_corrected_bits"]] - q[IDX["phy_corrected_bits"]]
        assert v[IDX[f"phy_raw_errors_lane{lane}"]] == q[IDX[f"phy_raw_errors_lane{lane}"]] + tail_bits
        if first_eff is None and v[IDX["phy_effective_errors"]]:
            first_eff = t
    assert first_eff is not None and 64 * S < first_eff <= 67 * S


def test_lane_counts_and_limits():
    """Lanes = speed / 100G (1, 2, 4): a 400G port has 176 descriptors, 251 values; 1,024 ports
    stay below the ABI's value limit (SWTEL_ASIC_MAX_VALUES)."""
    model = Model("ports=1024")
    _, _, counters = model.layout(0)
    assert {len(cs) for cs in counters} == {176}
    assert sum(sim_model.slots(cs) for cs in counters) == 1024 * 251 <= 262_144
    assert sim_model.SWITCH_VALUES == 251
    leaf = Model("role=leaf")
    _, ports, counters = leaf.layout(0)
    assert {(p[2], sim_model.slots(cs)) for p, cs in zip(ports, counters, strict=True)} == \
        {(200_000, 187 + 32), (400_000, 187 + 64)}
