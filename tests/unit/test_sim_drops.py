"""Drop reasons on the simulated switch (issue 23's must-show): every reason injected with
``drops@START-END:PORT:REASON`` is one ``drop-reason`` event naming its port, group and reason
within 1 s of the start, a clean run raises none, and a port's drop counters are the sums of its
reasons at every read. The events come from the reference model (tests/sim_model.py, bit for bit
the plugin: tests/unit/test_sim_plugin.py) read every 100 ms through the asic source's real name ->
path mapping, the change kernel and the insights pipeline on a simulated clock; the sums are
checked on the model over a dense grid and on the C plugin itself."""

from __future__ import annotations

from array import array

import pytest

from agent.config import Config
from agent.control.portview import port_totals
from agent.control.top import rates
from agent.counters import F_CHANGED, F_NEW, Batch
from agent.insights.classify import DROP_REASON, classify
from agent.sources.asic import AsicSource
from tests import sim_model
from tests.unit.test_insights_fabric import NS, T0, events, run
from tests.unit.test_sim_plugin import load_ops, opened

pytestmark = pytest.mark.nolibs  # no versioned library decides its outcome: not in the Debian pass

START_S, END_S = 2, 6  # the injection window of the event tests
MASK64 = (1 << 64) - 1
# every reason on some port, beside the scenarios that drop on their own (microburst's and
# incast's tail and early drops), a breakout (its ports' counters start at 0) and counter clears
ALL_REASONS = ("ports=6 seed=5 scenario=" + ",".join(
    f"drops@{1 + i % 3}s-{5 + i % 4}s:swp{1 + i % 5}:{reason}"
    for i, (_group, reason) in enumerate(sim_model.DROP_REASONS))
    + ",drops@6s:swp2:tail-drop,microburst@0s:swp6,incast@1s:swp2/3,counter-clear@4.5s:swp3,"
      "counter-clear@7s")


def drop_events(raised: list[tuple[float, dict]]) -> list[tuple[float, dict]]:
    return [(t, ev) for t, ev in raised if ev["type"] == "drop-reason"]


@pytest.mark.parametrize(("group", "reason"), sim_model.DROP_REASONS)
def test_each_injected_reason_is_one_event_naming_port_group_and_reason_within_a_second(group, reason):
    runner, raised = run(f"ports=4 seed=3 scenario=drops@{START_S}s-{END_S}s:swp3:{reason}", END_S + 2)
    drops = drop_events(raised)
    assert len(drops) == 1, drops
    t, ev = drops[0]
    assert ev["interfaces"] == ["swp3"]
    assert ev["message"].startswith("swp3: ") and f"for {reason} ({group} drops" in ev["message"]
    assert START_S < t <= START_S + 1.0  # within a second of the injection's start
    final = next(e for e in events(runner) if e["id"] == ev["id"])
    # the documented rate: 1,000 packets/s (+-50 % per 10 ms slot, about 1 % over a second)
    assert final["peak"] == pytest.approx(1000, rel=0.05) and final["unit"] == "packets/s"


def test_reasons_at_once_on_two_ports_are_one_event_each():
    _runner, raised = run("ports=4 seed=4 scenario=drops@2s-5s:swp1:blackhole-route,"
                          "drops@2s-5s:swp2:ingress-vlan-filter,drops@3s-5s:swp2:egress-flow-action-drop", 6)
    got = sorted((ev["interfaces"][0], ev["message"].split(" for ")[1].split(" drops")[0])
                 for _t, ev in drop_events(raised))
    assert got == [("swp1", "blackhole-route (l3"), ("swp2", "egress-flow-action-drop (acl"),
                   ("swp2", "ingress-vlan-filter (l2")]
    assert all(2 < t <= 4 for t, _ev in drop_events(raised))


@pytest.mark.parametrize("config", [
    "role=leaf seed=2",
    # faults that drop nothing: no drop reason counts
    "role=spine seed=1 scenario=symbol-errors@2s-20s:swp11s1,pfc-storm@2s-20s:swp3/3,link-flap@2s:swp4",
])
def test_a_clean_run_raises_no_drop_reason(config):
    _runner, raised = run(config, 30)
    assert drop_events(raised) == []


def test_port_drop_counters_are_the_sums_of_their_reasons_at_every_read_of_the_model():
    model = sim_model.Model(ALL_REASONS)
    seen = dict.fromkeys(sim_model.REASON_NAMES, 0)
    t = 0
    while t <= 10 * NS:
        for port in model.ports_at(t):
            v = port.values(t)
            for counter, reasons in sim_model.DROP_SUMS.items():
                total = sum(v[sim_model.DROP0 + sim_model.REASON_NAMES.index(r)] for r in reasons)
                assert v[sim_model.IDX[counter]] == total & MASK64, (t, port.name, counter)
            for i, name in enumerate(sim_model.REASON_NAMES):
                seen[name] = max(seen[name], v[sim_model.DROP0 + i])
        t += 37_000_000  # 37 ms: reads anywhere in slots and cells
    assert all(seen.values()), seen  # every reason counted something: the sums are not 0 = 0


def test_port_drop_counters_are_the_sums_of_their_reasons_in_the_plugin():
    ops = load_ops()
    model = sim_model.Model(ALL_REASONS)
    for at in (0.5, 2.05, 3.3, 4.6, 6.9, 9.1):
        sim, start = opened(ops, ALL_REASONS, at)
        try:
            for _ in range(3):
                ts, values = sim.read()
                assert values == model.values(ts - start, sim.since(start))
                for j in range(len(sim.ports)):
                    v = values[j * sim_model.SWITCH_VALUES:(j + 1) * sim_model.SWITCH_VALUES]
                    for counter, reasons in sim_model.DROP_SUMS.items():
                        total = sum(v[sim_model.DROP0 + sim_model.REASON_NAMES.index(r)] for r in reasons)
                        assert v[sim_model.IDX[counter]] == total & MASK64, (at, sim.ports[j][0], counter)
        finally:
            sim.close()


def test_only_the_injected_port_and_reason_count():
    model = sim_model.Model("ports=4 scenario=drops@1s-3s:swp2:unresolved-neigh")
    before, during, after = (model.values(int(s * NS)) for s in (1.0, 2.0, 5.0))
    stride = sim_model.SWITCH_VALUES
    for j, port in enumerate(("swp1", "swp2", "swp3", "swp4")):
        for i, name in enumerate(sim_model.REASON_NAMES):
            at = j * stride + sim_model.DROP0 + i
            if (port, name) == ("swp2", "unresolved-neigh"):
                assert before[at] == 0 and 900 < during[at] < 1100 and 1900 < after[at] < 2100
            else:
                assert after[at] == 0, (port, name)
        for counter in ("HwIfInDiscards", "HwIfInL3Drops"):
            assert after[j * stride + sim_model.IDX[counter]] == (after[j * stride + sim_model.DROP0 + 6]
                                                                  if port == "swp2" else 0)


def _source(model: sim_model.Model) -> AsicSource:
    src = AsicSource(Config())
    _gen, ports, counters = model.layout(0)
    src._build(ports, [sim_model.descriptors(descs) for descs in counters])
    return src


def test_every_reason_counter_lands_on_the_drop_reason_tree_and_the_port_counters_keep_theirs():
    src = _source(sim_model.Model("ports=2"))
    hits = [classify(spec) for spec in src.table.specs if spec.port == "swp1"]
    reasons = [hit[2] for hit in hits if hit and hit[1] == DROP_REASON]
    assert len(reasons) == len(sim_model.DROP_REASONS)
    assert set(reasons) == {f"{g}/{r}" for g, r in sim_model.DROP_REASONS}
    paths = {f"{spec.container.path}/{spec.leaf}" for spec in src.table.specs if spec.port == "swp1"}
    assert "/interfaces/interface[name=swp1]/drops/group[name=l2]/reason[name=ingress-vlan-filter]/state/packets" \
        in paths
    # the HwIf* drop counters stay where they were (hw/state/counters, the per-TC WRED under the queue)
    for leaf in ("in-discards", "in-l3-drops", "in-blackhole-drops", "in-acl-drops", "out-q-drops",
                 "out-non-q-drops", "out-wred-drops", "out-discards"):
        assert f"/interfaces/interface[name=swp1]/hw/state/counters/{leaf}" in paths, leaf


def test_top_names_the_injected_reason():
    model = sim_model.Model(f"start={T0} ports=4 scenario=drops@1s:swp4:decap-error")
    src = _source(model)
    n = len(src.table)

    def snapshot(t: int) -> dict:
        values = array("Q", model.values(t))
        batch = Batch("asic", T0 + t, src.table, list(range(n)), values, [0] * n,
                      bytes([F_CHANGED | F_NEW]) * n)
        return {"now_ns": T0 + t, "ports": port_totals([batch], {})}

    rows = {r["port"]: r for r in rates(snapshot(2 * NS), snapshot(3 * NS))}
    assert rows["swp4"]["why"].startswith("decap-error ")
    assert 900 <= int(rows["swp4"]["why"].split()[1].removesuffix("/s")) <= 1100
    assert rows["swp1"]["why"] == "-"
