"""Every port event names its far end (issue 36 item 5): agent/insights/neighbors.py reads the
states the sources declare (sources.lldp's neighbours, sources.rdma's netdev of an RDMA port) and
the event book names the far end in the event: the gNMI leaf ``neighbor``, the log line, status,
``swtel top`` and the metric exporters' ``swtel_insights_event_info``."""

from __future__ import annotations

import json

from agent import config
from agent.config import Insights
from agent.counters import SWTEL_ORIGIN, Container, StateUpdate
from agent.engine import Engine
from agent.exporters.state_gauges import gauges
from agent.insights import InsightsPipeline
from agent.insights.neighbors import FarEnds
from agent.pathgrammar import rdma_port_path
from agent.sources.lldp import far_end_name, neighbor_container, neighbor_states, parse_neighbors
from agent.store import Store
from agent.tools.topology import Topology
from tests.helpers import wait_until
from tests.unit.test_insights import Log

NS = 1_000_000_000
EVENT_STATE = "/insights/events/event[id={}]/state"


def _lldp(document: dict, ts: int = 1) -> list[StateUpdate]:
    """The states sources.lldp publishes for a json0 document."""
    return [StateUpdate(ts, c, leaf, v, "lldp") for (c, leaf), v in neighbor_states(parse_neighbors(document)).items()]


def _gone(updates: list[StateUpdate], ts: int = 2) -> list[StateUpdate]:
    return [StateUpdate(ts, u.container, u.leaf, None, "lldp") for u in updates]


def _netdev(device: str, port: str, netdev: str | None) -> StateUpdate:
    return StateUpdate(1, Container(SWTEL_ORIGIN, f"{rdma_port_path(device, port)}/state"), "netdev", netdev, "rdma")


def test_a_neighbour_is_named_by_system_name_and_port():
    assert far_end_name({"system-name": "spine-1", "port-id": "swp1", "port-id-type": "INTERFACE_NAME",
                         "port-description": "to leaf-3"}) == "spine-1 swp1"
    # plain lldpd on a host: its MAC as port id, its ifname as description
    assert far_end_name({"system-name": "host-1", "port-id": "02:aa:bb:cc:dd:ee", "port-id-type": "MAC_ADDRESS",
                         "port-description": "enp1s0f0np0"}) == "host-1 enp1s0f0np0"
    assert far_end_name({"chassis-id": "02:00:00:00:00:01", "port-id": "7", "port-id-type": "LOCAL"}) == \
        "02:00:00:00:00:01 7"
    assert far_end_name({"system-name": "x"}) == "x" and far_end_name({}) == ""


def test_the_far_ends_of_a_leaf_from_its_lldp_states():
    far = FarEnds()
    states = _lldp(Topology.field().lldp_document("leaf-3"))
    far.on_state(states)
    assert [far.of_port(p) for p in ("swp61", "swp64", "swp1", "swp2")] == [
        "spine-1 swp11s0", "spine-1 swp11s3", "host-1 mlx5_0", ""]
    assert far.of_ports(["swp61", "swp2", "swp62"]) == "swp61: spine-1 swp11s0; swp62: spine-1 swp11s1"
    before = far.generation
    far.on_state(states)  # the same again: nothing changed
    assert far.generation == before
    far.on_state(_gone([u for u in states if "interface[name=swp61]" in u.container.path]))
    assert far.of_port("swp61") == "" and far.of_port("swp62") == "spine-1 swp11s1" and far.generation > before


def test_states_of_no_declared_shape_are_not_remembered():
    """A state whose container starts as no declared shape does is answered without a cache
    entry (issue 35: every FEC bin's upper-boundary was one); the shapes still match."""
    far = FarEnds()
    bins = [StateUpdate(1, Container("openconfig", f"/interfaces/interface[name=swp{p}]/phy/histograms/state/"
                                                   f"rs-num-corr-err[upper-boundary={u}]"), "upper-boundary", u, "asic")
            for p in range(1, 5) for u in range(16)]
    far.on_state(bins)
    assert far._of == {}
    far.on_state(_lldp(Topology.field().lldp_document("leaf-3")))
    assert far.of_port("swp61") == "spine-1 swp11s0"
    assert far._of and all(hit is not None for hit in far._of.values())


def test_two_neighbours_on_one_port_are_both_named():
    doc = {"lldp": [{"interface": [
        {"name": "swp1", "rid": "1", "chassis": [{"name": [{"value": "b-host"}]}],
         "port": [{"id": [{"type": "ifname", "value": "eth0"}]}]},
        {"name": "swp1", "rid": "2", "chassis": [{"name": [{"value": "a-host"}]}],
         "port": [{"id": [{"type": "ifname", "value": "eth1"}]}]}]}]}
    far = FarEnds()
    far.on_state(_lldp(doc))
    assert far.of_port("swp1") == "a-host eth1, b-host eth0"


def test_an_rdma_port_takes_its_netdevs_far_end():
    """On a host, roce-retrans is an event of the RDMA port (``mlx5_0/1``); its netdev is what
    lldpd runs on: the event names the netdev's neighbour."""
    far = FarEnds()
    doc = {"lldp": [{"interface": [{"name": "enp1s0f0np0", "rid": "1", "chassis": [{"name": [{"value": "leaf-3"}]}],
                                    "port": [{"id": [{"type": "ifname", "value": "swp1"}]}]}]}]}
    far.on_state([_netdev("mlx5_0", "1", "enp1s0f0np0"), *_lldp(doc)])
    assert far.of_port("mlx5_0/1") == "leaf-3 swp1" and far.of_port("mlx5_0/2") == ""
    far.on_state([_netdev("mlx5_0", "1", None)])  # the tie is gone
    assert far.of_port("mlx5_0/1") == "" and far.of_port("enp1s0f0np0") == "leaf-3 swp1"


def _pipeline() -> tuple[InsightsPipeline, Log]:
    log = Log()
    return InsightsPipeline(Insights(), log=log), log


def _leaves(updates: list[StateUpdate], event_id: int) -> dict[str, object]:
    return {u.leaf: u.value for u in updates if u.container.path == EVENT_STATE.format(event_id)}


def test_an_event_names_its_far_end_everywhere_it_goes():
    pipeline, log = _pipeline()
    det = pipeline.detectors["error_burst"]
    pipeline.on_state(_lldp(Topology.field().lldp_document("leaf-3")))
    pipeline.hit(det, "symbol-ber", "swp61", 1 * NS, "warning", 1e-10, "ber", "swp61: symbol BER", ["swp61"])
    pipeline.hit(det, "symbol-ber", "swp7", 1 * NS, "warning", 1e-10, "ber", "swp7: symbol BER", ["swp7"])
    updates = pipeline.end_pass(1 * NS)
    # gNMI: the leaf beside the event's others; none for a port without a known neighbour
    assert _leaves(updates, 1)["neighbor"] == "spine-1 swp11s0" and _leaves(updates, 1)["type"] == "symbol-ber"
    assert "neighbor" not in _leaves(updates, 2) and _leaves(updates, 2)["type"] == "symbol-ber"
    # the log line
    raised = [kw for level, event, kw in log.lines if event == "event raised"]
    assert raised[0]["neighbor"] == "spine-1 swp11s0" and "neighbor" not in raised[1]
    # status
    opened = {e["interfaces"][0]: e for e in pipeline.status()["open"]}
    assert opened["swp61"]["neighbor"] == "spine-1 swp11s0" and opened["swp7"]["neighbor"] == ""
    # OTLP and remote write: the event's info series
    store = Store()
    store.set_states(updates)
    info = {dict(attrs)["id"]: dict(attrs) for name, attrs, value, _ts in gauges(store)
            if name == "swtel_insights_event_info" and value == 1.0}
    assert info["1"] == {"id": "1", "type": "symbol-ber", "severity": "warning", "interface": "swp61",
                         "neighbor": "spine-1 swp11s0", "status": "open"}
    assert info["2"]["neighbor"] == "" and info["2"]["interface"] == "swp7"


def test_a_far_end_learnt_after_the_event_is_sent_as_an_update():
    pipeline, log = _pipeline()
    det = pipeline.detectors["error_burst"]
    pipeline.hit(det, "error-burst", "swp3", 1 * NS, "warning", 5, "errors/1s", "swp3: errors", ["swp3"])
    assert "neighbor" not in _leaves(pipeline.end_pass(1 * NS), 1)
    doc = {"lldp": [{"interface": [{"name": "swp3", "rid": "1", "chassis": [{"name": [{"value": "leaf-9"}]}],
                                    "port": [{"id": [{"type": "ifname", "value": "swp50"}]}]}]}]}
    neighbours = _lldp(doc)
    pipeline.on_state(neighbours)
    pipeline.hit(det, "error-burst", "swp3", 2 * NS, "warning", 5, "errors/1s", "swp3: errors", ["swp3"])
    assert _leaves(pipeline.end_pass(2 * NS + 1), 1) == {"neighbor": "leaf-9 swp50"}
    # the neighbour goes (its TTL, lldpd restarted): the event keeps the name it had
    pipeline.on_state(_gone(neighbours))
    assert _leaves(pipeline.end_pass(4 * NS), 1) == {}
    assert pipeline.status()["open"][0]["neighbor"] == "leaf-9 swp50"
    # re-cabled while open: the new far end
    doc["lldp"][0]["interface"][0]["chassis"][0]["name"][0]["value"] = "leaf-8"
    pipeline.on_state(_lldp(doc))
    assert _leaves(pipeline.end_pass(6 * NS), 1) == {"neighbor": "leaf-8 swp50"}


def test_a_pipeline_reads_the_far_ends_already_in_the_store():
    """A pipeline a reload makes (insights turned on) starts after the neighbours were sent:
    it reads them from the store."""
    store = Store()
    store.set_states(_lldp(Topology.field().lldp_document("host-1")))
    pipeline, _log = _pipeline()
    pipeline.start(store)
    assert pipeline.far_ends.of_port("mlx5_0") == "leaf-3 swp1"


def test_status_and_top_show_the_far_end():
    from agent.control.client import _event_line
    from agent.control.top import _rich_view, plain_lines

    ev = {"id": 1, "type": "roce-retrans", "severity": "warning", "interfaces": ["mlx5_0"], "start_ns": 1,
          "message": "mlx5_0: 2,400 RoCE retransmissions", "neighbor": "leaf-3 swp1"}
    assert _event_line(2, ev).endswith("roce-retrans: mlx5_0: 2,400 RoCE retransmissions  neighbor: leaf-3 swp1")
    assert plain_lines("host-1", [], {"open": [ev]}, 5)[-1] == (
        "EVENT warning roce-retrans: mlx5_0: 2,400 RoCE retransmissions  neighbor: leaf-3 swp1")
    view = _rich_view("host-1", [], {"open": [ev]}, 20, 120)
    assert any(" roce-retrans (neighbor: leaf-3 swp1): mlx5_0" in str(part) for part in view.renderables)
    unknown = {**ev, "neighbor": ""}
    assert "neighbor" not in _event_line(2, unknown) and "neighbor" not in plain_lines("h", [], {"open": [unknown]},
                                                                                          5)[-1]


def test_a_hosts_roce_retransmissions_name_the_leaf_through_the_netdev(tmp_path):
    """The engine end to end on a host: sources.rdma on a sysfs tree (mlx5_0 port 1 on
    enp1s0f0np0), sources.lldp on lldpd's answer for that netdev, insights.roce_retrans: the
    event of ``mlx5_0/1`` names ``leaf-3 swp1`` in the store (what gNMI and the exporters read)."""
    port = tmp_path / "class" / "infiniband" / "mlx5_0" / "ports" / "1"
    (port / "hw_counters").mkdir(parents=True)
    (port / "gid_attrs" / "ndevs").mkdir(parents=True)
    (port / "gid_attrs" / "ndevs" / "0").write_text("enp1s0f0np0\n")
    counter = port / "hw_counters" / "roce_adp_retrans"
    counter.write_text("0\n")
    doc = {"lldp": [{"interface": [{"name": "enp1s0f0np0", "rid": "1", "chassis": [{"name": [{"value": "leaf-3"}]}],
                                    "port": [{"id": [{"type": "ifname", "value": "swp1"}]}]}]}]}
    (tmp_path / "lldp.json").write_text(json.dumps(doc))
    cfg = config.parse(json.dumps({"interval": "50ms", "sources": {
        "netdev": {"enabled": False}, "ethtool": {"enabled": False}, "system": {"enabled": False},
        "rdma": {"enabled": True, "root": str(tmp_path)},
        "lldp": {"enabled": True, "interval": "50ms", "file": str(tmp_path / "lldp.json")}},
        "insights": {"roce_retrans": {"threshold": 10, "window": "1s"}}}))
    store = Store()
    pipeline = InsightsPipeline(cfg.insights, log=Log())
    engine = Engine(cfg, [pipeline], store=store)
    engine.insights = pipeline
    engine.start()

    def neighbours_of_events() -> dict[str, str]:
        states = {(u.container.path, u.leaf): u.value for u in store.states()}
        return {states[(c, "interfaces")]: states.get((c, "neighbor"), "") for c, leaf in states
                if leaf == "type" and states[(c, leaf)] == "roce-retrans"}

    try:
        # the netdev is stored after the rdma source's first read: its counters' baseline
        wait_until(lambda: any(u.leaf == "system-name" for u in store.states())
                   and any(u.leaf == "netdev" for u in store.states()), 30, "the neighbour and the netdev stored")
        with open(counter, "r+") as fh:  # in place, as the kernel presents it (the source keeps it open)
            fh.write("1000\n")
        got = wait_until(neighbours_of_events, 30, "a roce-retrans event in the store")
    finally:
        engine.stop()
    assert got == {"mlx5_0/1": "leaf-3 swp1"}
    assert store is engine.store and neighbor_container("enp1s0f0np0", "1") in {u.container for u in store.states()}


def test_a_simulated_hosts_event_carries_its_leaf_to_gnmi_otlp_status_and_the_log(tmp_path):
    """An agent process: the simulated host-1 with RoCE retransmissions, its neighbours as
    ``swtel fabric`` writes them (leaf-3 swp1): the roce-retrans event names the leaf in a gNMI
    Get, in OTLP's swtel_insights_event_info, in ``swtel status`` and in its log line."""
    import time

    from pygnmi.client import gNMIclient

    from tests.gnmi_helpers import free_port
    from tests.helpers import status_doc
    from tests.namespaces import AgentProcess
    from tests.otlp_receiver import Receiver

    neighbours = tmp_path / "host-1.lldp.json"
    neighbours.write_text(json.dumps(Topology.field().lldp_document("host-1")))
    rx = Receiver(names={"swtel_insights_event_info"}).start()
    port = free_port()
    start = time.time_ns() + 1_000_000_000  # the simulator's clock: its scenario from 1 s after
    sim = f"role=host seed=1 start={start} scenario=symbol-errors@1s"
    agent = AgentProcess(None, (
        "target: host-1\ninterval: 100ms\nsources:\n"
        "  netdev: {enabled: false}\n  ethtool: {enabled: false}\n  system: {enabled: false}\n"
        f"  asic: {{enabled: true, plugin: sim, config: '{sim}'}}\n"
        f"  lldp: {{enabled: true, interval: 100ms, file: '{neighbours}'}}\n"
        f"exporters:\n  server: {{listen: '127.0.0.1:{port}', insecure: true}}\n"
        f"  otlp: {{endpoint: '{rx.address}', insecure: true, interval: 200ms}}\n"
        f"control: {{socket: {tmp_path / 'swtel.sock'}, group: null}}\n"), tmp_path)

    def opened() -> list[dict]:
        """The open roce-retrans events once they name a far end (one learnt after the event was
        raised comes as an update)."""
        found = [e for e in status_doc(tmp_path)["events"]["open"] if e["type"] == "roce-retrans"]
        return found if all(e["neighbor"] for e in found) else []

    try:
        agent.wait_ready()
        (event,) = agent.wait_for(opened, 60, "the roce-retrans event")
        with gNMIclient(target=("127.0.0.1", port), insecure=True, gnmi_timeout=10) as gc:
            got = gc.get(path=[f"swtel:{EVENT_STATE.format(event['id'])}"], encoding="json")
        leaves = {u["path"]: u["val"] for n in got["notification"] for u in n.get("update", [])}
        point = agent.wait_for(lambda: rx.latest("swtel_insights_event_info", type="roce-retrans",
                                                 neighbor="leaf-3 swp1"), 30, "the event's info series over OTLP")
        log = agent.log.read_text()
    finally:
        assert agent.stop() == 0
        rx.stop()
    assert event["interfaces"] == ["mlx5_0"] and event["neighbor"] == "leaf-3 swp1"
    assert leaves["neighbor"] == "leaf-3 swp1" and leaves["interfaces"] == "mlx5_0", leaves
    assert point.attr["id"] == str(event["id"]) and point.attr["interface"] == "mlx5_0" and point.value == 1
    assert 'type=roce-retrans' in log and 'neighbor="leaf-3 swp1"' in log
