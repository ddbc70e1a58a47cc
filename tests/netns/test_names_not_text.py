"""An interface renamed at run time to a name that is not UTF-8 (``swp\\xff``: any root tool
can) with the agent running netdev and ethtool: the agent stays up and healthy, the name is
escaped once (``swp%FF``, docs/paths.md) and streamed on its own path, ethtool reads it by its
own bytes, and every exporter keeps delivering the other ports: JSON lines, dial-out, gNMI Get
and the control socket's ``ports`` (what ``swtel top`` draws)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from agent.control.client import request
from tests.helpers import status_json, swtel_status
from tests.namespaces import AgentProcess, sh, veth_pair
from tests.netns.test_dialout_veth import CollectorProcess

pytestmark = pytest.mark.root

RAW = b"swp\xff"
ESCAPED = "swp%FF"
WAIT_S = 30.0  # generous: a busy machine; every wait ends as soon as its condition holds
GNMI_PORT = 50051  # the namespace is ours: its loopback has no other listener
COLLECTOR_PORT = 50052

# A gNMI Get of every interface's in-pkts, run inside the namespace (the server listens on its
# loopback): one JSON line {interface name: in-pkts}.
_GET_CLIENT = r'''
import json, sys, time
import grpc
from pygnmi.spec.v080 import gnmi_pb2, gnmi_pb2_grpc
port = int(sys.argv[1])
stub = gnmi_pb2_grpc.gNMIStub(grpc.insecure_channel(f"127.0.0.1:{port}"))
path = gnmi_pb2.Path(elem=[gnmi_pb2.PathElem(name="interfaces"),
                           gnmi_pb2.PathElem(name="interface", key={"name": "*"}),
                           gnmi_pb2.PathElem(name="state"), gnmi_pb2.PathElem(name="counters"),
                           gnmi_pb2.PathElem(name="in-pkts")])
deadline = time.monotonic() + 20
while True:
    try:
        reply = stub.Get(gnmi_pb2.GetRequest(path=[path], encoding=gnmi_pb2.PROTO), timeout=5)
        break
    except grpc.RpcError:
        if time.monotonic() > deadline:
            raise
        time.sleep(0.2)
out = {}
for n in reply.notification:
    for u in n.update:
        elems = list(n.prefix.elem) + list(u.path.elem)
        name = next(e.key["name"] for e in elems if e.name == "interface")
        out[name] = u.val.uint_val
print(json.dumps(out), flush=True)
'''


def _config(tmp_path) -> str:
    return (
        "interval: 50ms\n"
        "sources:\n"
        "  netdev: {interfaces: ['*'], exclude: [lo]}\n"
        "  ethtool: {interfaces: ['*'], exclude: [lo]}\n"
        "  system: {enabled: false}\n"
        "exporters:\n"
        f"  jsonl: {{path: {tmp_path / 'out.jsonl'}}}\n"
        f"  server: {{listen: '127.0.0.1:{GNMI_PORT}', insecure: true}}\n"
        f"  dialout: [{{name: col, address: '127.0.0.1:{COLLECTOR_PORT}', insecure: true}}]\n"
        f"control: {{socket: {tmp_path / 'swtel.sock'}, group: null}}\n"
    )


def _in_pkts(name: str) -> str:
    return f"/interfaces/interface[name={name}]/state/counters/in-pkts"


def _sum_deltas(records: list[dict], path: str, after: int = 0) -> int:
    return sum(r["delta"] for r in records[after:] if r.get("path") == path and not r.get("new"))


def _gnmi_get(ns: str, tmp_path) -> dict[str, int]:
    script = tmp_path / "get.py"
    script.write_text(_GET_CLIENT)
    out = subprocess.run(["ip", "netns", "exec", ns, sys.executable, str(script), str(GNMI_PORT)],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def test_a_name_that_is_not_utf8_is_escaped_and_nothing_else_stops(tmp_path):
    with veth_pair() as pair:
        odd, peer = f"o{pair.b_if[2:]}", f"p{pair.b_if[2:]}"
        sh("ip", "link", "add", odd, "type", "veth", "peer", "name", peer, ns=pair.b)
        for name in (odd, peer):
            sh("ip", "link", "set", name, "up", ns=pair.b)
        col = CollectorProcess(pair.b, COLLECTOR_PORT, tmp_path / "col.jsonl")
        agent = AgentProcess(pair.b, _config(tmp_path), tmp_path)
        sock = str(tmp_path / "swtel.sock")
        try:
            agent.wait_ready(WAIT_S)
            agent.wait_for(lambda: any(r.get("path") == _in_pkts(odd) for r in agent.records()),
                           WAIT_S, "the port before its rename")
            # Renamed at run time to bytes that are not UTF-8 (a link is renamed while down).
            ns = pair.b.encode()
            subprocess.run([b"ip", b"-n", ns, b"link", b"set", odd.encode(), b"down"], check=True)
            subprocess.run([b"ip", b"-n", ns, b"link", b"set", odd.encode(), b"name", RAW], check=True)
            subprocess.run([b"ip", b"-n", ns, b"link", b"set", RAW, b"up"], check=True)
            escaped = _in_pkts(ESCAPED)
            agent.wait_for(lambda: any(r.get("path") == escaped for r in agent.records()), WAIT_S,
                           "the escaped name on its own path")
            agent.wait_for(lambda: any(r.get("delete") and r["path"] == f"/interfaces/interface[name={odd}]"
                                       for r in agent.records()), WAIT_S, "the old name's delete")
            ethtool = f"swtel:/interfaces/interface[name={ESCAPED}]/"
            agent.wait_for(lambda: any(r.get("path", "").startswith(ethtool) and "/ethtool" in r["path"]
                                       for r in agent.records()), WAIT_S, "ethtool reading it by its bytes")
            # The other ports still flow: new traffic is counted after the rename.
            mark = len(agent.records())
            pair.send_udp(7, 64)
            agent.wait_for(lambda: _sum_deltas(agent.records(), _in_pkts(pair.b_if), mark) >= 7, WAIT_S,
                           "traffic on the other port after the rename")
            # dial-out: the collector gets the escaped name and the other port's new traffic
            agent.wait_for(lambda: any(ln.get("path") == escaped for ln in col.lines()), WAIT_S,
                           "the escaped name at the dial-out collector")
            kernel = int(sh("cat", f"/sys/class/net/{pair.b_if}/statistics/rx_packets", ns=pair.b).stdout)
            agent.wait_for(lambda: max([ln["value"] for ln in col.lines() if ln.get("path") == _in_pkts(pair.b_if)],
                                       default=0) >= kernel, WAIT_S, "the other port's traffic at the collector")
            # gNMI Get answers with every port, the escaped one on its own key
            got = _gnmi_get(pair.b, tmp_path)
            assert {pair.b_if, ESCAPED, peer} <= set(got), got
            assert got[pair.b_if] >= 7
            # the control socket's ports (swtel top) and status: the escaped name, healthy
            ports = request(sock, "ports", timeout_s=10)["ports"]
            assert {pair.b_if, ESCAPED, peer} <= set(ports), sorted(ports)
            assert ports[pair.b_if]["rx_octets"] >= 7 * 64
            code, status = status_json(tmp_path)
            assert code == 0, status.get("health")
            assert [(e["name"], e["kernel_name"]) for e in status["escaped_names"]] == [(ESCAPED, repr(RAW))]
            text = swtel_status(tmp_path).stdout  # what a person reads lists it too
            assert f"interface names escaped (not text): {ESCAPED} = {RAW!r}" in text, text
            for name in ("netdev", "ethtool"):
                src = status["sources"][name]
                assert src["fault"] is None and src["failures"] == 0, (name, src)
            assert status["sources"]["ethtool"]["errors"] == 0
            assert agent.proc.poll() is None
        finally:
            assert agent.stop() == 0
            col.stop()
        records = agent.records()
        # every path the exporters wrote is text, and no other spelling of the name appeared
        assert all(r["path"].isprintable() for r in records)
        assert not [r for r in records if "swp" in r["path"] and f"name={ESCAPED}]" not in r["path"]]
        assert "Traceback" not in agent.log.read_text()
