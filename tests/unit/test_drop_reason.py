"""The drop-reason detector (agent/insights/drop_reason.py) on synthetic per-reason counters
with the real path shape, fed through the insights pipeline at explicit sample times."""

from __future__ import annotations

import pytest

from agent import config
from agent.config import Insights
from agent.counters import GAUGE, SWTEL_ORIGIN, Container, CounterSpec, CounterTable
from agent.insights import InsightsPipeline
from agent.insights.classify import DROP_REASON, classify
from agent.pathgrammar import drop_reason_path, qos_interface_path
from tests.insights_stream import NS, T0, Stream

pytestmark = pytest.mark.nolibs  # no versioned library decides its outcome: not in the Debian pass

STEP = NS // 10
REASONS = [("l2", "ingress-vlan-filter"), ("l3", "blackhole-route"), ("buffer", "tail-drop"),
           ("acl", "ingress-port-acl")]
PORTS = ["swp1", "swp2", "swp3"]


def _rig(ins: Insights | None = None):
    specs, where = [], {}
    for port in PORTS:
        for group, reason in REASONS:
            where[(port, reason)] = len(specs)
            specs.append(CounterSpec(Container(SWTEL_ORIGIN, drop_reason_path(port, group, reason)), "packets",
                                     port=port))
        # the egress queue's peak, for the buffer reason's pointer to a congestion event
        where[(port, "peak")] = len(specs)
        specs.append(CounterSpec(Container(SWTEL_ORIGIN,
                                           qos_interface_path(port) + "/output/queues/queue[name=3]/state"),
                                 "peak-occupancy", 64, GAUGE, port))
    stream = Stream(CounterTable("asic", specs), where)
    runner = InsightsPipeline(ins or Insights(), log=None)
    return runner, stream


def _drive(runner, stream, seconds: float, fault) -> list[tuple[float, dict]]:
    """Passes every 100 ms; ``fault(t)`` -> {(port, reason|peak): delta}. (t raised, event)."""
    raised, seen = [], set()
    ts = T0
    for k in range(round(seconds * 10)):
        ts += STEP
        t = k / 10
        batch = stream.batch(ts, fault(t))
        if batch is not None:
            runner.on_batch(batch)
        runner.end_pass(ts)
        for ev in runner.status()["open"]:
            if ev["id"] not in seen:
                seen.add(ev["id"])
                raised.append((t, ev))
    return raised


@pytest.mark.parametrize(("group", "reason"), REASONS)
def test_each_reason_is_one_event_naming_port_group_and_reason_within_a_second(group, reason):
    runner, stream = _rig()

    def fault(t):  # 50 drops per 100 ms (500/s) from 2 s to 8 s on swp2; noise elsewhere
        out = {(p, r): 1 for p in PORTS for _g, r in REASONS if int(t * 10) % 20 == 0}
        if 2 <= t < 8:
            out[("swp2", reason)] = 50
        return out

    raised = _drive(runner, stream, 12, fault)
    assert len(raised) == 1, raised
    t, ev = raised[0]
    assert ev["type"] == "drop-reason" and ev["interfaces"] == ["swp2"]
    assert f"for {reason} ({group} drops" in ev["message"]
    assert 2.0 <= t <= 2.3  # 100 within the 1 s window: the second or third poll of the fault
    final = next(e for e in runner.status()["open"] + runner.status()["recent"] if e["id"] == ev["id"])
    assert final["peak"] == pytest.approx(500, rel=0.05) and final["unit"] == "packets/s"


def test_a_clean_run_raises_nothing():
    runner, stream = _rig()
    raised = _drive(runner, stream, 30, lambda t: {(p, r): 3 for p in PORTS for _g, r in REASONS})
    assert raised == []  # 30/s per reason: below 100 within 1 s


def test_buffer_drops_name_the_congested_queue_and_its_event():
    runner, stream = _rig()

    def fault(t):
        if 2 <= t < 6:
            return {("swp3", "peak"): 8 << 20, ("swp3", "tail-drop"): 80}
        return {}

    raised = _drive(runner, stream, 8, fault)
    kinds = {ev["type"]: ev for _, ev in raised}
    assert set(kinds) == {"congestion", "drop-reason"}
    cong = kinds["congestion"]
    assert f"queue 3 is congested (event {cong['id']})" in kinds["drop-reason"]["message"]


def test_the_path_classifies_as_a_reason_with_escaped_names():
    spec = CounterSpec(Container(SWTEL_ORIGIN, drop_reason_path("swp]1", "l2", "a]b")), "packets", port="swp]1")
    assert classify(spec) == ("swp]1", DROP_REASON, "l2/a]b")
    assert classify(CounterSpec(spec.container, "bytes", port="swp]1")) is None


@pytest.mark.parametrize(("yaml", "message"), [
    ("insights: {drop_reason: {threshold: 0}}", "insights.drop_reason.threshold: must be at least 1"),
    ("insights: {drop_reason: {window: 2s, clear_after: 1s}}", "insights.drop_reason.clear_after: must be at least"),
])
def test_config_refuses_what_cannot_work(yaml, message):
    with pytest.raises(config.ConfigError) as err:
        config.parse(yaml)
    assert message in str(err.value)


def test_top_shows_the_reason_a_port_drops_most_for():
    from agent.control.portview import port_totals
    from agent.control.top import plain_lines, rates

    _runner, stream = _rig()
    stream.batch(T0, {})  # the baseline
    first = stream.batch(T0 + NS, {("swp2", "ingress-vlan-filter"): 10, ("swp2", "tail-drop"): 30})
    old = {"now_ns": T0 + NS, "ports": port_totals([first], {})}
    second = stream.batch(T0 + 2 * NS, {("swp2", "ingress-vlan-filter"): 20, ("swp2", "tail-drop"): 500})
    new = {"now_ns": T0 + 2 * NS, "ports": port_totals([second], {})}
    assert new["ports"]["swp2"]["drop_reasons"] == {"l2/ingress-vlan-filter": 30, "buffer/tail-drop": 530,
                                                    "l3/blackhole-route": 0, "acl/ingress-port-acl": 0}
    row = next(r for r in rates(old, new) if r["port"] == "swp2")
    assert row["why"] == "tail-drop 500/s"
    assert next(r for r in rates(old, new) if r["port"] == "swp1")["why"] == "-"
    assert any(line.startswith("swp2 ") and line.endswith("tail-drop 500/s")
               for line in plain_lines("sw", rates(old, new), {}, 10))


@pytest.mark.parametrize(("name", "group", "reason"), [
    ("wjh_l2_ingress_vlan_filter", "l2", "ingress-vlan-filter"),
    ("wjh_l1_link_down", "l1", "link-down"),
    ("wjh_tunnel_decap_error", "tunnel", "decap-error"),
    ("wjh_buffer_tail_drop", "buffer", "tail-drop"),
])
def test_a_plugins_reason_counter_maps_to_the_reason_tree(name, group, reason):
    from agent.sources.asic import map_name

    container, leaf, kind = map_name("swp]7", name)
    assert (container.origin, container.path, leaf) == (SWTEL_ORIGIN, drop_reason_path("swp]7", group, reason),
                                                        "packets")
    assert classify(CounterSpec(container, leaf, port="swp]7")) == ("swp]7", DROP_REASON, f"{group}/{reason}")


@pytest.mark.parametrize("name", ["wjh_l4_ingress_vlan_filter", "wjh_l2_", "wjh_l2_Tail_Drop", "wjh_l2__x"])
def test_names_that_are_not_a_reason_keep_the_raw_path(name):
    from agent.sources.asic import map_name

    container, _leaf, _kind = map_name("swp1", name)
    assert "/drops/" not in container.path and container.path.endswith("/asic")
