"""Dial-out end to end from an agent reading veth ports in a namespace: exact packet counts at
the collector, and a collector killed for 5 s (needs root)."""

from __future__ import annotations

import time

import pytest

from tests.gnmi_helpers import free_port
from tests.helpers import wait_polls


class CollectorProcess:
    """``python -m agent collect`` inside a namespace, JSON lines to a file."""

    def __init__(self, ns: str, port: int, out, pki=None):
        import os
        import subprocess
        import sys

        from tests.namespaces import ROOT

        tls = (["--tls-cert", str(pki.server_cert), "--tls-key", str(pki.server_key)] if pki
               else ["--insecure"])
        self.out = out
        self.err = open(f"{out}.err", "w")  # noqa: SIM115 - closed in stop()
        env = {**os.environ,
               "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
        self.proc = subprocess.Popen(
            ["ip", "netns", "exec", ns, sys.executable, "-m", "agent", "collect",
             "--listen", f"127.0.0.1:{port}", "--output", str(out), *tls],
            cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=self.err)

    def lines(self) -> list[dict]:
        import json
        from pathlib import Path

        p = Path(self.out)
        if not p.exists():
            return []
        return [json.loads(s) for s in p.read_text().splitlines() if s.endswith("}")]

    def stop(self, kill: bool = False) -> None:
        if self.proc.poll() is None:
            self.proc.kill() if kill else self.proc.terminate()
            self.proc.wait(10)
        self.err.close()


def _agent_config(tmp_path, pair, port: int, pki=None, protocol: str = "nokia",
                  notifications: str = "per-container") -> str:
    tls = (f"tls: {{ca: {pki.ca}, server_name: collector.test}}" if pki else "insecure: true")
    return (
        "target: e2e-leaf\n"
        "interval: 50ms\n"
        "sources:\n"
        f"  netdev: {{interfaces: [{pair.b_if}], exclude: [lo]}}\n"
        "  ethtool: {enabled: false}\n"
        "  system: {enabled: false}\n"
        "exporters:\n"
        "  dialout:\n"
        f"    - {{name: col, address: '127.0.0.1:{port}', protocol: {protocol}, {tls}, queue: 100,"
        f" notifications: {notifications}}}\n"
        f"control: {{socket: {tmp_path / 'swtel.sock'}, group: null}}\n"
    )


def _in_pkts(lines: list[dict], path: str, synced: bool | None = None) -> list[int]:
    return [ln["value"] for ln in lines
            if ln.get("path") == path and (synced is None or ln["sync"] is synced)]


def _snapshot_then_sync(col: CollectorProcess, path: str):
    lines = col.lines()
    if not any(ln.get("sync") is True and "path" not in ln for ln in lines):
        return None
    snap = _in_pkts(lines, path, synced=False)
    return (snap[-1],) if snap else None  # a tuple: a snapshot value of 0 is still an answer


@pytest.mark.root
@pytest.mark.parametrize("secure,protocol,notifications",
                         [(True, "nokia", "per-container"), (False, "sonic", "per-container"),
                          (False, "nokia", "per-tick")])
def test_e2e_exact_packets_reach_collector(tmp_path, pki, secure, protocol, notifications):
    from tests.namespaces import AgentProcess, veth_pair

    n = 777
    with veth_pair() as pair:
        port = free_port()
        col = CollectorProcess(pair.b, port, tmp_path / "col.jsonl", pki if secure else None)
        agent = AgentProcess(pair.b, _agent_config(tmp_path, pair, port, pki if secure else None, protocol,
                                                   notifications), tmp_path)
        path = f"/interfaces/interface[name={pair.b_if}]/state/counters/in-pkts"
        try:
            agent.wait_ready()
            (snapshot,) = agent.wait_for(lambda: _snapshot_then_sync(col, path), 20, "snapshot + sync")
            pair.send_udp(n, 64)
            agent.wait_for(lambda: (_in_pkts(col.lines(), path) or [0])[-1] >= snapshot + n, 10,
                           f"{n} packets at the collector")
            wait_polls(tmp_path, 3, "netdev")  # a few more polls: nothing beyond the N datagrams may appear
            lines = col.lines()
            assert _in_pkts(lines, path)[-1] - snapshot == n
            assert all(v > snapshot for v in _in_pkts(lines, path, synced=True))
            assert all(ln["target"] == "e2e-leaf" for ln in lines)
            assert all(ln["ts"] > 1.6e18 for ln in lines if "ts" in ln)
        finally:
            assert agent.stop() == 0
            col.stop()
        if not secure:
            assert "plaintext dial-out" in agent.log.read_text()


@pytest.mark.root
@pytest.mark.slow
def test_e2e_collector_killed_5s_final_values_equal_kernel(tmp_path, pki):
    from agent.control.client import request
    from tests.namespaces import AgentProcess, sh, veth_pair

    with veth_pair() as pair:
        port = free_port()
        col = CollectorProcess(pair.b, port, tmp_path / "col1.jsonl", pki)
        agent = AgentProcess(pair.b, _agent_config(tmp_path, pair, port, pki), tmp_path)
        path = f"/interfaces/interface[name={pair.b_if}]/state/counters/in-pkts"
        try:
            agent.wait_ready()
            agent.wait_for(lambda: _snapshot_then_sync(col, path) is not None, 20, "first snapshot")
            col.stop(kill=True)  # SIGKILL: no goodbye on the stream
            for _ in range(10):  # traffic and polling go on while the collector is away
                pair.send_udp(100, 64)
                time.sleep(0.3)  # wallclock: paces the traffic
            down = agent.wait_for(
                lambda: request(str(tmp_path / "swtel.sock"), "status")["exporters"]["dialout:col"]
                if request(str(tmp_path / "swtel.sock"), "status")["exporters"]["dialout:col"]["state"] != "connected"
                else None, 30, "dial-out down")
            assert down["down_since_ns"] and down["last_error"]
            wait_polls(tmp_path, 40, "netdev")  # and on for 40 more polls (2 s at 50 ms): about 5 s down
            col = CollectorProcess(pair.b, port, tmp_path / "col2.jsonl", pki)
            kernel = int(sh("cat", f"/sys/class/net/{pair.b_if}/statistics/rx_packets", ns=pair.b).stdout)
            (snap,) = agent.wait_for(lambda: _snapshot_then_sync(col, path), 45, "reconnect + resnapshot")
            assert snap == kernel  # the resnapshot restores the totals
            pair.send_udp(5, 64)
            kernel += 5
            agent.wait_for(lambda: _in_pkts(col.lines(), path)[-1] == kernel, 10, "changes after reconnect")
            st = agent.wait_for(  # "connected" is confirmed by the collector's first reply
                lambda: (s := request(str(tmp_path / "swtel.sock"), "status")["exporters"]["dialout:col"])[
                    "state"] == "connected" and s, 10, "dial-out connected")
            assert st["reconnects"] == 1
            assert "dropped" in st and st["down_since_ns"] is None
        finally:
            assert agent.stop() == 0
            col.stop()
        assert _in_pkts(col.lines(), path)[-1] == kernel
        log = agent.log.read_text()
        assert "destination down" in log and log.count("destination connected") == 2
