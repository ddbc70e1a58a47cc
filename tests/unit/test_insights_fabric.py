"""Insights on the simulated Spectrum switch's scenarios (tests/sim_model.py, the plugin's
bit-exact reference model), through the asic source's real name -> path mapping and the
change kernel, at synthetic sample times: no root, no plugin, no wall clock."""

from __future__ import annotations

from array import array

import pytest

from agent.config import Config, Insights
from agent.counters import Batch
from agent.engine import PolledSource
from agent.insights import InsightsPipeline
from agent.sources.asic import AsicSource
from tests import sim_model  # noqa: E402

pytestmark = pytest.mark.nolibs  # no versioned library decides its outcome: not in the Debian pass

NS = 1_000_000_000
T0 = 1_700_000_000 * NS


class Quiet:
    def warning(self, *a, **k):
        pass

    info = warning


def run(config: str, seconds: float, step: float = 0.1, ins: Insights | None = None):
    """The switch read every ``step`` seconds for ``seconds``: (runner, [(t raised, event)])."""
    model = sim_model.Model(f"start={T0} {config}")
    src = AsicSource(Config())
    _gen, ports, counters = model.layout(0)
    src._build(ports, [sim_model.descriptors(descs) for descs in counters])
    sr = PolledSource(src, step)
    sr.adopt_table()
    runner = InsightsPipeline(ins or Insights(), log=Quiet())
    runner.set_port_speeds(src.port_speeds)
    raised: list[tuple[float, dict]] = []
    seen: set[int] = set()
    for k in range(round(seconds / step) + 1):
        t = round(k * step * NS)
        src.values[:] = array("Q", model.values(t, round((k - 1) * step * NS) if k else None))
        n = sr.diff()
        ts = T0 + t
        if n:
            runner.on_batch(Batch("asic", ts, sr.table, sr.out_idx[:n].tolist(), array("Q", sr.acc),
                                  sr.out_delta[:n].tolist(), bytes(sr.out_flags[:n])))
        runner.end_pass(ts)
        for ev in runner.status()["open"]:
            if ev["id"] not in seen:
                seen.add(ev["id"])
                raised.append((t / NS, ev))
    return runner, raised


def events(runner) -> list[dict]:
    st = runner.status()
    return st["open"] + st["recent"]


def test_symbol_errors_on_swp11s1_flagged_within_a_second_and_cleared():
    runner, raised = run("role=spine seed=1 scenario=symbol-errors@5s-25s:swp11s1", 100)
    assert {tuple(e["interfaces"]) for _, e in raised} == {("swp11s1",)}
    first = {}
    for t, e in raised:
        first.setdefault(e["type"], t)
    assert first["symbol-ber"] <= 6.0 and first["throughput-dip"] <= 6.0
    assert {"symbol-ber", "pre-fec-ber", "throughput-dip"} <= set(first)
    assert all(e["state"] == "cleared" for e in events(runner))  # fault over at 25 s + clear_after


def test_the_host_view_flags_roce_retransmissions():
    runner, raised = run("role=host seed=1 scenario=symbol-errors@5s-25s", 10)
    assert [(e["type"], e["interfaces"]) for _, e in raised] == [("roce-retrans", ["mlx5_0"])]
    assert raised[0][0] <= 6.0


def test_imbalance_names_the_hot_uplink():
    ins = Insights()
    ins.imbalance.groups = {"spines": ["swp6[1-4]"]}
    runner, raised = run("role=leaf seed=1 scenario=imbalance@5s-30s:swp62", 12, ins=ins)
    assert [(e["type"], e["interfaces"]) for _, e in raised] == [("imbalance", ["swp62"])]
    assert raised[0][0] <= 5.0 + ins.imbalance.window * (ins.imbalance.windows + 1)
    assert raised[0][1]["peak"] == pytest.approx(2.0, abs=0.2)


@pytest.mark.parametrize("scenario,etype,port", [
    ("pfc-storm@5s-10s:swp3/3", "pfc-storm", "swp3"),
    ("microburst@5s-20s:swp2", "drop-burst", "swp2"),
    ("link-flap@5s-20s:swp4", "link-flap", "swp4"),
])
def test_each_scenario_raises_its_own_event_on_its_port(scenario, etype, port):
    runner, raised = run(f"ports=8 seed=1 scenario={scenario}", 12)
    assert etype in {e["type"] for _, e in raised}
    assert {tuple(e["interfaces"]) for _, e in raised} == {(port,)}


@pytest.mark.parametrize("config", ["role=spine seed=1", "role=leaf seed=2"])
def test_a_clean_minute_raises_nothing(config):
    ins = Insights()
    ins.imbalance.groups = {"spines": ["swp6[1-4]"]}
    runner, raised = run(config, 60, ins=ins)
    assert raised == []


def test_counter_clear_raises_nothing():
    runner, raised = run("ports=8 seed=1 scenario=counter-clear@5s", 15)
    assert raised == []


def test_sub_second_faults_are_seen_at_100ms_only():
    fast_mb, _ = run("ports=8 seed=1 scenario=microburst@5s-65s:swp2", 70)
    slow_mb, _ = run("ports=8 seed=1 scenario=microburst@5s-65s:swp2", 70, step=10)
    assert "drop-burst" in {e["type"] for e in events(fast_mb)}
    # at 10 s the drop bursts average away; the queue's peak (cleared by each read) still holds them,
    # and their tail drops (~500/s over the 10 s) still count as a drop reason
    assert {e["type"] for e in events(slow_mb)} == {"congestion", "drop-reason"}
    fast, _ = run("role=spine seed=1 scenario=symbol-errors@5s-65s:swp11s1", 70)
    slow, _ = run("role=spine seed=1 scenario=symbol-errors@5s-65s:swp11s1", 70, step=10)
    assert "throughput-dip" in {e["type"] for e in events(fast)}
    # a steady fault is seen at any rate; its sub-second dips are not
    assert {e["type"] for e in events(slow)} == {"symbol-ber", "pre-fec-ber", "error-burst"}
