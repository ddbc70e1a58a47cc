"""Fabrics of any size (agent/tools/topology.py, swtel fabric): the Clos wiring, the
refusals, and a running fabric whose every device streams to one collector."""

from __future__ import annotations

import subprocess
import sys
import time
from collections import Counter

import pytest
import yaml

from agent.tools.topology import HOST_PORT, SPINE_PORTS, Topology, uplink_ports
from tests.namespaces import ROOT


@pytest.mark.parametrize(("spines", "leaves", "hosts"), [(1, 1, 1), (2, 4, 8), (4, 16, 32), (8, 24, 16), (8, 62, 0)])
def test_clos_wiring(spines, leaves, hosts):
    topo = Topology.clos(spines, leaves, hosts)
    up = 4 if spines <= 4 else 8
    roles = Counter(n.role for n in topo.nodes)
    assert roles == Counter({"spine": spines, "leaf": leaves, "host": hosts}) - Counter()
    ends = [e for link in topo.links for e in (link.a, link.b)]
    assert len(ends) == len(set(ends))  # no port is used twice
    for n in topo.nodes:
        mine = [link for link in topo.links if n.name in (link.a[0], link.b[0])]
        if n.role == "leaf":
            uplinks = [link for link in mine if link.a[0] == n.name]
            assert sorted(link.a[1] for link in uplinks) == sorted(uplink_ports(up))
            # spread evenly: each spine gets up / spines of a leaf's uplinks
            assert Counter(link.b[0] for link in uplinks) == Counter({f"spine-{s}": up // spines
                                                                       for s in range(1, spines + 1)})
        elif n.role == "spine":
            assert all(link.b[1] in SPINE_PORTS for link in mine)
            assert len(mine) == leaves * up // spines
        else:
            assert [link.a for link in mine] == [(n.name, HOST_PORT)]


def test_the_field_topology_is_the_three_devices_of_the_field_cases():
    topo = Topology.field()
    assert [(n.name, n.role) for n in topo.nodes] == [("spine-1", "spine"), ("leaf-3", "leaf"), ("host-1", "host")]
    assert yaml.safe_load(yaml.safe_dump(topo.as_dict()))["links"][0] == {"a": "leaf-3:swp61", "b": "spine-1:swp11s0"}
    # the marginal cable of the field case (spine-1 swp11s1) faces leaf-3, on host-1's paths
    assert ("spine-1", "swp11s1") in [link.b for link in topo.links]


@pytest.mark.parametrize(("args", "message"), [
    ((3, 2, 0), "must divide a leaf's 4 uplinks"),
    ((0, 0, 0), "at least one device"),
    ((1, 0, 2), "hosts need a leaf"),
    ((1, 1, 33), "need more than the leaves' server ports"),
    ((1, 16, 0), "need more than a spine's 62 ports"),
    ((300, 300, 0), "at most 512 devices"),
])
def test_impossible_fabrics_are_refused(args, message):
    with pytest.raises(ValueError, match=message):
        Topology.clos(*args)


def test_a_fault_or_preset_naming_a_missing_device_is_refused(tmp_path):
    from agent.tools.fabric import Fabric

    with pytest.raises(ValueError, match="names leaf-3, which this topology lacks"):
        Fabric(tmp_path, "127.0.0.1:1", "imbalance", topology=Topology.clos(1, 2, 0))
    with pytest.raises(ValueError, match="expected DEVICE:SCENARIO"):
        Fabric(tmp_path, "127.0.0.1:1", "clean", topology=Topology.clos(1, 2, 0), faults=["leaf-9:microburst@1s"])


@pytest.mark.slow
def test_a_clos_fabric_streams_every_device_and_port_to_one_collector(tmp_path):
    """2 spines, 4 leaves (4 uplinks each, 2 to each spine), 2 hosts: 8 agents, one collector; a fault on
    a device the field cases do not have."""
    from agent.tools.collect import Collector
    from agent.tools.fabric import Fabric

    collector = Collector("127.0.0.1:0", insecure=True, keep_messages=False).start()
    topo = Topology.clos(2, 4, 2)
    fabric = Fabric(tmp_path, f"127.0.0.1:{collector.port}", "clean", start_ns=time.time_ns(), topology=topo,
                    faults=["leaf-2:microburst@1s:swp3"])
    fabric.start()
    try:
        names = [n.name for n in topo.nodes]
        want = {(name, port) for link in topo.links for name, port in (link.a, link.b)}

        def seen(c) -> set[tuple[str, str]]:
            out = set()
            for target in names:
                for path in c.values(target):
                    for _, port in want:
                        if f"[name={port}]" in path:
                            out.add((target, port))
            return out

        assert collector.wait_for(lambda c: want <= seen(c), timeout=60), (want - seen(collector), fabric.failed())
        assert fabric.failed() == []
        assert (tmp_path / "topology.yaml").exists()
        written = yaml.safe_load((tmp_path / "topology.yaml").read_text())
        assert [d["name"] for d in written["devices"]] == names
        # each device's control socket, relative to the directory (swtel top --fabric reads it)
        assert [d["socket"] for d in written["devices"]] == [f"{n}.sock" for n in names]
        assert all((tmp_path / d["socket"]).is_socket() for d in written["devices"])
        leaf2 = yaml.safe_load((tmp_path / "leaf-2.yaml").read_text())
        assert "scenario=microburst@1s:swp3" in leaf2["sources"]["asic"]["config"]
    finally:
        codes = fabric.stop()
        collector.stop(grace=0.5)
    assert set(codes.values()) == {0}


def test_cli_refuses_an_impossible_fabric():
    proc = subprocess.run([sys.executable, "-m", "agent", "fabric", "--spines", "3", "--leaves", "2",
                           "--duration", "1"],
                          cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "must divide a leaf's 4 uplinks" in proc.stderr, proc.stderr


# ---------------------------------------------------------------- LLDP: the simulator's neighbours


def test_every_link_s_two_ends_agree_in_lldp():
    """Each simulated device's lldpcli document (what sources.lldp reads from the file swtel fabric
    writes) names, on each of its linked ports, the device and port at the other end: switches by
    ifname, hosts by MAC with the ifname as description, as lldpd does."""
    from agent.sources.lldp import parse_neighbors
    from agent.tools.topology import sim_mac

    topo = Topology.clos(2, 4, 4)
    roles = {n.name: n.role for n in topo.nodes}
    seen = {n.name: {x.interface: x for x in parse_neighbors(topo.lldp_document(n.name))} for n in topo.nodes}
    assert sum(len(v) for v in seen.values()) == 2 * len(topo.links)
    for link in topo.links:
        for (me, port), (peer, peer_port) in ((link.a, link.b), (link.b, link.a)):
            n = seen[me][port]
            assert (n.system_name, n.chassis_id, n.chassis_id_type, n.port_description, n.ttl) == (
                peer, sim_mac(peer), "MAC_ADDRESS", peer_port, 120)
            if roles[peer] == "host":
                assert (n.port_id, n.port_id_type) == (sim_mac(peer, peer_port), "MAC_ADDRESS")
            else:
                assert (n.port_id, n.port_id_type) == (peer_port, "INTERFACE_NAME")
    # the MACs are the devices' own: one chassis per device, one port MAC per host port
    assert len({sim_mac(n.name) for n in topo.nodes}) == len(topo.nodes)
    assert topo.lldp_document("nobody") == {"lldp": [{}]}


def test_the_fabric_s_agents_read_their_neighbours(tmp_path):
    """swtel fabric's config per device turns sources.lldp on with the file it writes; an engine on
    that config publishes the device's neighbours."""
    import json

    from agent import config
    from agent.engine import Engine
    from agent.sources.lldp import neighbor_container
    from agent.store import Store
    from agent.tools.fabric import Fabric, lldp_file
    from tests.helpers import wait_until

    fabric = Fabric(tmp_path, None)
    leaf = next(sw for sw in fabric.switches if sw.role == "leaf")
    lldp_file(tmp_path, leaf.name).write_text(json.dumps(fabric.topology.lldp_document(leaf.name)))
    data = fabric.config(leaf)
    data["sources"]["asic"]["enabled"] = False  # the neighbours alone
    data["control"] = {"socket": str(tmp_path / "s.sock"), "group": None}
    cfg = config.parse(json.dumps(data))
    assert cfg.sources.lldp.file == str(lldp_file(tmp_path, leaf.name))
    store = Store()
    engine = Engine(cfg, [], store=store)
    engine.start()
    try:
        uplink = neighbor_container(uplink_ports(4)[0], "2")  # rid 2: swp1 (host-1) is the first
        wait_until(lambda: any(u.container == uplink and u.leaf == "system-name" and u.value == "spine-1"
                               for u in store.states()), 30, "leaf-3's first uplink faces spine-1")
        host = [u for u in store.states() if u.leaf == "system-name" and u.value == "host-1"]
        assert [u.container.path.split("]")[0].rsplit("=", 1)[1] for u in host] == ["swp1"]
    finally:
        engine.stop()
