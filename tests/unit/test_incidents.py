"""Incidents (agent/control/incidents.py): a host's RoCE retransmissions and the link faults on
its paths, grouped by the LLDP neighbours the agents stream and by time. Hand-built fabrics with
an injected clock (``now_ns``); the field scenarios through the simulator's model in simulated
time; then ``swtel demo`` and ``swtel fabric`` end to end."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from agent.config import Insights
from agent.control.incidents import (
    NS,
    WINDOW_NS,
    Event,
    IncidentBook,
    Neighbor,
    StreamView,
    correlate,
    host_paths,
    links,
    port_ranges,
)
from agent.sources.lldp import neighbor_states, parse_neighbors
from agent.tools.topology import Topology, sim_mac, uplink_ports
from tests.helpers import demo_until, swtel_until, wait_until

ROOT = Path(__file__).resolve().parents[2]
T0 = 1_700_000_000 * NS


def lldp_lines(topo: Topology) -> list[dict]:
    """What every device's agent streams of its neighbours (sources.lldp on the document
    ``swtel fabric`` writes for it), as the collector's lines."""
    out = []
    for node in topo.nodes:
        states = neighbor_states(parse_neighbors(topo.lldp_document(node.name)))
        out += [{"target": node.name, "path": c.full(leaf), "value": v} for (c, leaf), v in states.items()]
    return out


def view_of(topo: Topology) -> StreamView:
    view = StreamView()
    view.on_lines(lldp_lines(topo), 0)
    return view


def at(seconds: float) -> int:
    return T0 + round(seconds * NS)


def retrans(host: str = "host-1", start: float = 3.1, end: float | None = None, port: str = "mlx5_0") -> Event:
    return Event(host, "roce-retrans", (port,), at(start), None if end is None else at(end), "1")


def fault(device: str, port: str, start: float, kind: str = "symbol-ber", end: float | None = None) -> Event:
    return Event(device, kind, (port,), at(start), None if end is None else at(end), f"{kind}@{port}")


# ---------------------------------------------------------------- a 2-spine, 4-leaf, 4-host fabric


CLOS = Topology.clos(2, 4, 4)


def test_the_clos_as_lldp_tells_it():
    """host-1 sits on leaf-1 swp1; leaf-1's uplinks swp61/63 go to spine-1 swp1/2, swp62/64 to
    spine-2; spine-1 swp3/4 face leaf-2. Every link from both ends, the host seen by its MAC."""
    neighbors = view_of(CLOS).neighbors()
    assert len(neighbors) == 2 * len(CLOS.links)
    assert Neighbor("leaf-1", "swp1", "host-1", "mlx5_0", True) in neighbors
    assert Neighbor("host-1", "mlx5_0", "leaf-1", "swp1", False) in neighbors
    far = links(neighbors)
    assert far[("leaf-1", "swp61")] == ("spine-1", "swp1") and far[("spine-1", "swp3")] == ("leaf-2", "swp61")
    assert ("leaf-2", "swp5") not in far  # an unused server port: no link


def test_host_1_s_paths_are_its_link_its_leaf_s_uplinks_and_the_spines_ports_down():
    view = view_of(CLOS)
    hosts = {n.peer for n in view.neighbors() if n.peer_is_host}
    assert hosts == {"host-1", "host-2", "host-3", "host-4"}
    on_path = host_paths("host-1", ["mlx5_0"], links(view.neighbors()), hosts)
    assert {end for end, hop in on_path.items() if hop == 1} == {("host-1", "mlx5_0"), ("leaf-1", "swp1")}
    assert {end for end, hop in on_path.items() if hop == 2} == {
        *(("leaf-1", p) for p in uplink_ports(4)), ("spine-1", "swp1"), ("spine-1", "swp2"),
        ("spine-2", "swp1"), ("spine-2", "swp2")}
    # the spines' ports down to the other leaves, and those leaves' uplinks: the far ends
    assert {end for end, hop in on_path.items() if hop == 3} == {
        *((s, f"swp{i}") for s in ("spine-1", "spine-2") for i in range(3, 9)),
        *((f"leaf-{n}", p) for n in (2, 3, 4) for p in uplink_ports(4))}
    # never another host's link, nor a port without a neighbour
    assert not {("leaf-2", "swp1"), ("host-2", "mlx5_0"), ("leaf-1", "swp5")} & set(on_path)


@pytest.mark.parametrize(("device", "port", "named"), [
    ("spine-1", "swp1", True),   # faces host-1's leaf
    ("spine-2", "swp3", True),   # a spine's port down to another leaf
    ("leaf-1", "swp62", True),   # host-1's leaf's uplink
    ("leaf-3", "swp63", True),   # another leaf's uplink: the far end of a spine's port down
    ("leaf-1", "swp1", True),    # host-1's own link, at the leaf
    ("leaf-2", "swp5", False),   # an unused server port
    ("leaf-2", "swp1", False),   # host-2's link: not on host-1's paths
    ("spine-1", "swp20", False),  # a spine port with no neighbour
])
def test_a_fault_is_named_when_on_the_host_s_paths_and_only_then(device, port, named):
    found = correlate([retrans(), fault(device, port, 3.0)], view_of(CLOS).neighbors(), at(5))
    assert [(s.device, s.port) for i in found for s in i.suspects] == ([(device, port)] if named else [])


def test_the_spine_port_on_the_path_is_named_and_the_unused_server_port_never():
    """The must-show case: spine-1 swp3 (on host-1's paths) and leaf-2 swp5 (an unused server
    port) both fault at once; as the incident forms and for as long as it lasts, it names
    spine-1 swp3 and never leaf-2 swp5. The clock is the caller's: stepped here."""
    view = view_of(CLOS)
    events = [fault("leaf-2", "swp5", 2.9), fault("spine-1", "swp3", 3.0), retrans(start=3.2)]
    book = IncidentBook()
    formed = []
    for tenth in range(0, 600):
        now = at(tenth / 10)
        seen = [e for e in events if e.start_ns <= now]  # each event as it reaches the collector
        formed += book.update(correlate(seen, view.neighbors(), now))
        for inc in book.all():
            assert ("leaf-2", "swp5") not in [(s.device, s.port) for s in inc.suspects]
    assert len(formed) == 1
    inc = formed[0]
    assert (inc.host, inc.host_port, inc.suspects[0].device, inc.suspects[0].port) == (
        "host-1", "mlx5_0", "spine-1", "swp3")
    assert inc.formed_ns == at(3.2) and inc.first_ns == at(3.0)
    assert inc.text(T0) == ("host-1 mlx5_0: RoCE retransmissions; suspect spine-1 swp3 (symbol errors from +3.0 s), "
                            "on host-1's paths via leaf-1 swp61–64")


def test_the_suspect_nearest_the_symptom_in_time_comes_first_and_kinds_are_named():
    events = [retrans(start=10.0), fault("spine-2", "swp4", 2.0, "link-flap"), fault("spine-1", "swp1", 9.8),
              fault("spine-1", "swp1", 9.9, "pre-fec-ber"), fault("leaf-1", "swp64", 10.5, "drop-reason")]
    (inc,) = correlate(events, view_of(CLOS).neighbors(), at(12))
    assert [(s.device, s.port, s.kinds) for s in inc.suspects] == [
        ("spine-1", "swp1", ("symbol-ber", "pre-fec-ber")), ("leaf-1", "swp64", ("drop-reason",)),
        ("spine-2", "swp4", ("link-flap",))]
    assert inc.text(T0).startswith("host-1 mlx5_0: RoCE retransmissions; suspect spine-1 swp1 (symbol errors "
                                   "from +9.8 s, then pre-FEC errors), also leaf-1 swp64 (drops from +10.5 s), also "
                                   "spine-2 swp4 (flaps from +2.0 s), on host-1's paths")


def test_only_faults_within_the_window_of_the_symptom_count():
    w = WINDOW_NS / NS
    neighbors = view_of(CLOS).neighbors()
    long_gone = fault("spine-1", "swp1", 1.0, end=2.0)
    assert correlate([retrans(start=2.0 + w + 0.1), long_gone], neighbors, at(60)) == []
    assert len(correlate([retrans(start=2.0 + w - 0.1), long_gone], neighbors, at(60))) == 1
    # a fault still open when the host starts retransmitting long after it began: one story
    assert len(correlate([retrans(start=50), fault("spine-1", "swp1", 1.0)], neighbors, at(60))) == 1
    # a host's retransmissions that ended long before a fault began: none
    assert correlate([retrans(start=1, end=2), fault("spine-1", "swp1", 3 + w)], neighbors, at(60)) == []


def test_only_a_roce_retrans_event_is_a_symptom_and_only_link_faults_are_suspects():
    neighbors = view_of(CLOS).neighbors()
    assert correlate([fault("host-1", "mlx5_0", 3, "throughput-dip"), fault("spine-1", "swp1", 3)],
                     neighbors, at(5)) == []
    assert correlate([retrans(), fault("spine-1", "swp1", 3, "congestion"), fault("leaf-1", "swp61", 3, "imbalance")],
                     neighbors, at(5)) == []


def test_without_lldp_there_is_no_topology_and_no_incident():
    """The topology is the stream's LLDP and nothing else: the same events with no neighbours
    known form nothing; a neighbour deleted from the stream takes its link with it, a host that
    runs no lldpd is still found by its leaf's report."""
    events = [retrans(), fault("spine-1", "swp1", 3.0)]
    assert StreamView().incidents(at(5)) == [] and correlate(events, [], at(5)) == []
    view = view_of(CLOS)
    # host-1 runs no lldpd: its leaf's report alone links it
    view.on_lines([{"target": "host-1", "path": line["path"], "delete": True}
                   for line in lldp_lines(CLOS) if line["target"] == "host-1"], 0)
    assert all(n.device != "host-1" for n in view.neighbors())
    view.add_events("host-1", [{"id": 1, "type": "roce-retrans", "interfaces": ["mlx5_0"], "start_ns": at(3.1),
                                "end_ns": at(3.1), "state": "open"}])
    view.add_events("spine-1", [{"id": 7, "type": "symbol-ber", "interfaces": ["swp1"], "start_ns": at(3.0),
                                 "end_ns": at(3.0), "state": "open"}])
    assert [i.suspects[0].port for i in view.incidents(at(5))] == ["swp1"]
    # spine-1 and leaf-1 forget the link between them: neither end knows it any more
    gone = [line for line in lldp_lines(CLOS) if (line["target"], line["path"].split("]")[0]) in {
        ("spine-1", "/lldp/interfaces/interface[name=swp1"), ("leaf-1", "/lldp/interfaces/interface[name=swp61")}]
    view.on_lines([{**line, "delete": True, "value": None} for line in gone], 0)
    assert view.incidents(at(5)) == []


def test_a_real_host_s_rdma_port_is_its_netdev_s_lldp_neighbour():
    """On a real host the event names the RDMA port (``mlx5_0/1``, sources.rdma) and lldpd runs
    on its netdev: the rdma source's netdev state joins the two; a second NIC port's link is
    not on this port's paths."""
    view = StreamView()
    swp = "swtel:/rdma/devices/device[name=mlx5_0]/ports/port[id={}]/state/netdev"
    doc = {"lldp": [{"interface": [
        {"name": "enp1s0f0np0", "chassis": [{"name": [{"value": "leaf-1"}], "id": [{"type": "mac", "value": "a"}]}],
         "port": [{"id": [{"type": "ifname", "value": "swp1"}]}]},
        {"name": "enp1s0f1np1", "chassis": [{"name": [{"value": "leaf-2"}], "id": [{"type": "mac", "value": "b"}]}],
         "port": [{"id": [{"type": "ifname", "value": "swp1"}]}]}]}]}
    states = neighbor_states(parse_neighbors(doc))
    view.on_lines([{"target": "gpu-7", "path": c.full(leaf), "value": v} for (c, leaf), v in states.items()]
                  + [{"target": "gpu-7", "path": swp.format(1), "value": "enp1s0f0np0"},
                     {"target": "gpu-7", "path": swp.format(2), "value": "enp1s0f1np1"}], 0)
    view.on_lines([{"target": "leaf-1", "path": "/lldp/interfaces/interface[name=swp61]/neighbors/neighbor[id=1]/"
                    f"state/{leaf}", "value": v} for leaf, v in (("system-name", "spine-1"), ("port-id", "swp1"),
                                                                   ("port-id-type", "INTERFACE_NAME"))], 0)
    view.add_events("gpu-7", [{"id": 3, "type": "roce-retrans", "interfaces": ["mlx5_0/1"], "start_ns": at(4),
                               "state": "open"}])
    view.add_events("leaf-2", [{"id": 1, "type": "error-burst", "interfaces": ["swp1"], "start_ns": at(4),
                                "state": "open"}])
    assert view.incidents(at(5)) == []  # leaf-2 swp1 faces the other NIC port
    view.add_events("spine-1", [{"id": 9, "type": "link-flap", "interfaces": ["swp1"], "start_ns": at(3.5),
                                 "state": "open"}])
    (inc,) = view.incidents(at(5))
    assert inc.text(T0) == ("gpu-7 mlx5_0/1: RoCE retransmissions; suspect spine-1 swp1 (flaps from +3.5 s), "
                            "on gpu-7's paths via leaf-1 swp61")
    assert view.hosts() == {"gpu-7"}


def test_the_stream_s_event_leaves_make_events_and_its_deletes_trim_nothing():
    view = StreamView()
    base = "swtel:/insights/events/event[id=4]/state/"
    view.on_lines([{"target": "spine-1", "path": base + "type", "value": "symbol-ber"}], 0)
    assert view.events() == []  # not all of it has come yet
    view.on_lines([{"target": "spine-1", "path": base + leaf, "value": v} for leaf, v in (
        ("interfaces", "swp11s1"), ("start-ns", at(3)), ("end-ns", at(3)), ("status", "open"))], 0)
    assert view.events() == [Event("spine-1", "symbol-ber", ("swp11s1",), at(3), None, "4")]
    view.on_lines([{"target": "spine-1", "path": base + "end-ns", "value": at(9)},
                   {"target": "spine-1", "path": base + "status", "value": "cleared"}], 0)
    view.on_lines([{"target": "spine-1", "path": base + "type", "delete": True}], 0)  # the agent's history
    assert view.events() == [Event("spine-1", "symbol-ber", ("swp11s1",), at(3), at(9), "4")]
    # garbage costs nothing
    view.on_lines([{"target": "x", "path": "swtel:/insights/events/event[id=1/state/type", "value": 1},
                   {"target": "x", "path": 7}, {"path": "/lldp/interfaces/interface[name=a]/neighbors/neighbor[id=1]"
                                                "/state/system-name", "value": 5}], 0)
    assert view.neighbors() == [] and len(view.events()) == 1


def test_port_ranges():
    assert port_ranges(["swp64", "swp61", "swp62", "swp63"]) == "swp61–64"
    assert port_ranges(["swp57", "swp58", "swp60", "mlx5_0", "swp11s1"]) == "mlx5_0, swp57–58, swp60, swp11s1"


def test_the_field_incident_reads_as_the_issue_wrote_it():
    (inc,) = correlate([retrans(start=3.1), fault("spine-1", "swp11s1", 3.0)], view_of(Topology.field()).neighbors(),
                       at(5))
    assert inc.text(T0) == ("host-1 mlx5_0: RoCE retransmissions; suspect spine-1 swp11s1 (symbol errors from "
                            "+3.0 s), on host-1's paths via leaf-3 swp61–64")
    assert sim_mac("host-1", "mlx5_0") in json.dumps(Topology.field().lldp_document("leaf-3"))


# ---------------------------------------------------------------- the field scenarios in simulated time


def _fabric_events(scenario: str, seconds: float) -> list[tuple[str, dict]]:
    """Every event of the field fabric's devices (the preset's scenarios, leaf-3's uplink group)
    through the simulator's model and the real detectors, read every 100 ms of simulated time."""
    from agent.tools.fabric import Fabric
    from tests.unit.test_insights_fabric import events, run

    out = []
    for sw in Fabric(Path("/nonexistent"), None, scenario).switches:
        ins = Insights()
        if sw.role == "leaf":
            ins.imbalance.groups = {"uplinks": uplink_ports(4)}
        config = " ".join([f"role={sw.role}", "seed=1", *(f"scenario={s}" for s in sw.scenarios)])
        runner, _raised = run(config, seconds, ins=ins)
        out += [(sw.name, ev) for ev in events(runner)]
    return out


def _as_they_come(found: list[tuple[str, dict]], seconds: float) -> list:
    """The incidents formed as the events reach a collector (each at its start, cleared at its
    end), judged every 100 ms on the simulated clock; the field topology from LLDP."""
    lldp = lldp_lines(Topology.field())
    book = IncidentBook()
    formed = []
    for tenth in range(round(seconds * 10) + 1):
        now = at(tenth / 10)
        view = StreamView()
        view.on_lines(lldp, 0)
        for name, ev in found:
            if ev["start_ns"] <= now:
                done = ev["state"] == "cleared" and ev["end_ns"] <= now
                view.add_events(name, [{**ev, "state": "cleared" if done else "open"}])
        formed += book.update(view.incidents(now))
    return formed


@pytest.mark.slow
def test_the_field_scenario_forms_one_incident_within_2_s_of_its_first_event():
    found = _fabric_events("field", 20)
    assert any(name == "host-1" and ev["type"] == "roce-retrans" for name, ev in found), found
    formed = _as_they_come(found, 20)
    assert len(formed) == 1, [i.text(T0) for i in formed]
    inc = formed[0]
    assert (inc.host, inc.suspects[0].device, inc.suspects[0].port) == ("host-1", "spine-1", "swp11s1")
    assert inc.formed_ns - inc.first_ns <= 2 * NS, inc.text(T0)
    assert inc.text(T0).startswith("host-1 mlx5_0: RoCE retransmissions; suspect spine-1 swp11s1 (symbol errors")


@pytest.mark.slow
def test_the_clean_scenario_forms_no_incident_in_60_s_of_simulated_time():
    found = _fabric_events("clean", 60)
    assert _as_they_come(found, 60) == [], found


# ---------------------------------------------------------------- end to end


def _rel(line: str) -> float:
    return float(line.split()[0].rstrip("s"))


@pytest.mark.slow
def test_demo_names_spine_1_swp11s1_for_host_1_from_lldp_alone(tmp_path):
    """`swtel demo` (field): the incident line, as it forms, names host-1's retransmissions and
    spine-1 swp11s1 first, within 2 s (the events' own times) of the first of the two events;
    topology.yaml is gone before the incident forms, so the topology is the agents' LLDP."""
    removed_at: list[int] = []

    def seen(out: str) -> bool:
        topo = tmp_path / "topology.yaml"
        if not removed_at and "swtel demo:" in out and topo.exists():
            topo.unlink()
            removed_at.append(len(out))
        return bool(removed_at) and "INCIDENT" in out[removed_at[0]:]

    proc = demo_until(tmp_path, seen=seen)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = proc.stdout
    assert removed_at and "INCIDENT" not in out[:removed_at[0]], out
    assert not (tmp_path / "topology.yaml").exists()
    line = next(x for x in out.splitlines() if " INCIDENT " in x)
    assert "INCIDENT host-1 mlx5_0: RoCE retransmissions; suspect spine-1 swp11s1 (symbol errors" in line, out
    assert line.endswith("on host-1's paths via leaf-3 swp61–64"), line
    raised = [x for x in out.splitlines() if " RAISED " in x and (("host-1" in x and "roce-retrans" in x) or (
        "spine-1" in x and "swp11s1" in x and "symbol-ber" in x))]
    first = min(_rel(x) for x in raised)
    assert _rel(line) - first <= 2.0, (line, raised)
    summary = out[out.index("incidents (the events grouped"):]
    assert "suspect spine-1 swp11s1" in summary.splitlines()[1], summary


@pytest.mark.slow
def test_demo_clean_forms_no_incident_in_60_s(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "agent", "demo", "--no-tui", "--scenario", "clean", "--duration",
                           "60s", "--dir", str(tmp_path)], cwd=ROOT, capture_output=True, text=True, timeout=600,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "running until +60s" in proc.stdout
    assert "INCIDENT" not in proc.stdout
    summary = proc.stdout[proc.stdout.index("incidents (the events grouped"):]
    assert summary.splitlines()[1].strip() == "(no incidents)", summary
    # the agents did send their neighbours: the incidents had a topology to judge by
    assert '"/lldp/interfaces/interface[name=swp11s1]/neighbors/neighbor[id=' in (
        tmp_path / "collector.jsonl").read_text()


@pytest.mark.slow
def test_fabric_with_two_faults_names_the_one_on_the_host_s_paths(tmp_path):
    """`swtel fabric`, 2 spines, 4 leaves, 4 hosts: symbol errors on spine-1 swp3 (down to
    leaf-2: on host-1's paths) and on leaf-2 swp5 (an unused server port), host-1 retransmitting.
    The incident names spine-1 swp3 and never leaf-2 swp5, on swtel fabric's stdout and in
    `swtel top --fabric` (which asks each agent for its LLDP states), after leaf-2's own event
    on swp5 is out."""
    jsonl = tmp_path / "collector.jsonl"
    tops: list[subprocess.CompletedProcess] = []

    def leaf_2_swp5_raised() -> bool:
        with open(jsonl, encoding="utf-8") as f:
            return any('"leaf-2"' in row and "/insights/events/" in row and '"swp5"' in row for row in f)

    def then() -> None:
        wait_until(lambda: jsonl.exists() and leaf_2_swp5_raised(), 120, "leaf-2's event on swp5", interval=0.2)
        tops.append(subprocess.run([sys.executable, "-m", "agent", "top", "--fabric", str(tmp_path), "-n", "1"],
                                   cwd=ROOT, capture_output=True, text=True, timeout=120,
                                   env={**os.environ, "PYTHONPATH": str(ROOT)}))

    run = swtel_until(tmp_path, "fabric", "--spines", "2", "--leaves", "4", "--hosts", "4", "--scenario", "clean",
                      "--dir", str(tmp_path), "--fault", "spine-1:symbol-errors@3s-300s:swp3",
                      "--fault", "leaf-2:symbol-errors@3s-300s:swp5", "--fault", "host-1:symbol-errors@3s-300s",
                      seen=lambda out: " INCIDENT " in out, then=then, bound_s=240)
    out = run.stdout
    assert run.returncode == 0, out + run.stderr
    (top,) = tops
    assert top.returncode == 0, top.stderr
    incident = re.compile(r"host-1 mlx5_0: RoCE retransmissions; suspect spine-1 swp3 \(symbol errors[^)]*\)")
    live = [x for x in out.splitlines() if " INCIDENT " in x]
    assert live and all(incident.search(x) for x in live), out
    summary = out[out.index("incidents (the events grouped"):].splitlines()[1:]
    assert summary and incident.search(summary[0]), out
    top_lines = [x for x in top.stdout.splitlines() if x.startswith("INCIDENT ")]
    assert top_lines and incident.search(top_lines[0]), top.stdout
    for text in (out, top.stdout):
        assert "leaf-2 swp5" not in text, text
