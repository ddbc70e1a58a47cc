"""nvswitch_lldp_neighbor_info in Debian's real Prometheus (remote write): every link of a
simulated fabric from both ends, agreeing; and a neighbour that changes leaves no old series to
match (stale at once, not for Prometheus' 5-minute lookback)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import yaml

from agent.sources.lldp import parse_neighbors
from agent.tools.fabric import Fabric, agent_command, failed_codes, lldp_file
from agent.tools.topology import Topology
from tests.helpers import wait_until
from tests.interop.test_remote_write import engines  # noqa: F401 - the fixture

INFO = "nvswitch_lldp_neighbor_info"
FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "lldp"


def test_every_link_of_the_fabric_from_both_ends(tmp_path, engines):  # noqa: F811
    prom = engines("prometheus")
    topo = Topology.clos(2, 2, 2)
    fabric = Fabric(tmp_path / "fabric", None, "clean", topology=topo,
                    remote_write={"url": prom.write_url, "interval": "1s"})
    fabric.start()
    try:
        want = 2 * len(topo.links)
        got = wait_until(lambda: len(r := prom.query(INFO)) >= want and r, 120,
                         f"{want} info series in Prometheus", detail=lambda: str(fabric.failed()))
        assert len(got) == want
        ends = {(s["metric"]["target"], s["metric"]["interface"]): s["metric"] for s in got}
        roles = {n.name: n.role for n in topo.nodes}
        for link in topo.links:
            for (me, port), (peer, peer_port) in ((link.a, link.b), (link.b, link.a)):
                labels = ends[(me, port)]
                assert (labels["system_name"], labels["port_description"]) == (peer, peer_port)
                if roles[peer] != "host":
                    assert (labels["port_id"], labels["port_id_type"]) == (peer_port, "INTERFACE_NAME")
                else:
                    assert labels["port_id_type"] == "MAC_ADDRESS"
                # the far end's own series names this end: the two ends agree
                back = ends[(peer, peer_port)]
                assert back["system_name"] == me and back["port_description"] == port
    finally:
        codes = fabric.stop(60)
    assert not failed_codes(codes)


def test_a_changed_neighbour_leaves_no_old_series(tmp_path, engines):  # noqa: F811
    prom = engines("prometheus")
    doc = json.loads((FIXTURES / "host.json").read_text())
    neighbours = lldp_file(tmp_path, "host-1")
    neighbours.write_text(json.dumps(doc))
    cfg = {"target": "host-1", "interval": "100ms",
           "sources": {"netdev": {"enabled": False}, "ethtool": {"enabled": False}, "system": {"enabled": False},
                       "lldp": {"enabled": True, "file": str(neighbours), "refresh": "1s", "interval": "100ms"}},
           "exporters": {"remote_write": [{"name": "p", "url": prom.write_url, "interval": "1s"}]},
           "control": {"socket": str(tmp_path / "s.sock"), "group": None}}
    path = tmp_path / "swtel.yaml"
    path.write_text(yaml.safe_dump(cfg))
    log = open(tmp_path / "agent.log", "w")
    proc = subprocess.Popen([*agent_command(), "run", "-c", str(path)], stdout=log, stderr=subprocess.STDOUT,
                            stdin=subprocess.DEVNULL)
    try:
        (leaf,) = parse_neighbors(doc)
        wait_until(lambda: prom.query(f'{INFO}{{system_name="{leaf.system_name}"}}'), 60, "the leaf's series",
                   detail=lambda: (tmp_path / "agent.log").read_text()[-2000:])
        doc["lldp"][0]["interface"][0]["chassis"][0]["name"][0]["value"] = "leaf-9"
        neighbours.write_text(json.dumps(doc))
        wait_until(lambda: prom.query(f'{INFO}{{system_name="leaf-9"}}'), 60, "the renamed leaf's series")
        # the old labels: stale now, not matched for the 5-minute lookback (this bound is 60 s)
        wait_until(lambda: not prom.query(f'{INFO}{{system_name="{leaf.system_name}"}}'), 60,
                   "the old series gone from an instant query")
        assert len(prom.query(INFO)) == 1
    finally:
        proc.terminate()
        proc.wait(60)
        log.close()
