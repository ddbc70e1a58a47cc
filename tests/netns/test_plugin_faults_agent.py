"""A faulting ASIC plugin inside a running agent that also reads veth ports: the fault stays
the asic source's (needs root)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import psutil
import pytest

from tests.helpers import OFF, asic_yaml, swtel_status, wait_polls
from tests.namespaces import AgentProcess, sh, veth_pair
from tests.unit.test_plugin_faults import CASES, _gone


def _config(tmp_path: Path, ifname: str, plugin: str, asic_config: str, asic_interval: str) -> str:
    return asic_yaml(tmp_path, plugin, asic_config, asic=f", interval: {asic_interval}",
                     netdev=f"{{interfaces: [{ifname}]}}", system=OFF, interval="100ms")


def _swtel_status(tmp_path: Path, *extra: str) -> subprocess.CompletedProcess:
    # it answers while the plugin hangs (its timeout only bounds a failure); that the tick went
    # on meanwhile is in what it says (polls_left_in_flight)
    return swtel_status(tmp_path, *extra, timeout=60)


def _helpers(agent: AgentProcess) -> list[psutil.Process]:
    try:
        kids = psutil.Process(agent.proc.pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return []
    out = []
    for k in kids:
        try:
            cmdline = " ".join(k.cmdline())
            if "agent.asic.host" in cmdline or "swtel-asic-host" in cmdline:  # the Python helper or the C one
                out.append(k)
        except psutil.NoSuchProcess:
            pass
    return out


def _in_pkts(records: list[dict], path: str) -> int:
    return sum(r["delta"] for r in records if r.get("path") == path and not r.get("new"))


@pytest.mark.root
@pytest.mark.parametrize("case", list(CASES))
def test_agent_contains_plugin_fault(case, faulty, plugin_dir, tmp_path):
    asic_config, asic_interval, fault_text = CASES[case]
    plugin = faulty
    if case == "fifo":
        plugin = str(plugin_dir / f"fifo-{os.getpid()}.so")
        if not os.path.exists(plugin):
            os.mkfifo(plugin, 0o600)
    with veth_pair() as pair:
        agent = AgentProcess(pair.b, _config(tmp_path, pair.b_if, plugin, asic_config, asic_interval), tmp_path)
        pids: set[int] = set()
        try:
            agent.wait_ready()
            in_pkts = f"/interfaces/interface[name={pair.b_if}]/state/counters/in-pkts"
            agent.wait_for(lambda: any(r.get("path") == in_pkts for r in agent.records()),
                           what="baseline of in-pkts")

            # status answers, unhealthy, and names the plugin and its fault
            def named() -> dict | None:
                pids.update(p.pid for p in _helpers(agent))
                out = _swtel_status(tmp_path)
                asic = json.loads(_swtel_status(tmp_path, "--json").stdout)["sources"]["asic"]
                fault = asic.get("fault") or ""
                want = fault_text or ""
                if out.returncode == 1 and plugin in fault and want in fault and want in out.stdout:
                    return asic
                return None

            asic = agent.wait_for(named, timeout=20, what=f"status naming the fault {fault_text!r}")
            assert asic["errors"] >= 1 and asic["open"] is False and asic["helper_pid"] is None
            assert asic["plugin_faults"] >= (0 if case == "fifo" else 1)

            # netdev keeps counting exact veth packets meanwhile
            n = 53
            pair.send_udp(n, 64)
            agent.wait_for(lambda: _in_pkts(agent.records(), in_pkts) >= n, timeout=60, what=f"{n} packets")
            wait_polls(tmp_path, 3, "netdev")  # a few more polls: nothing beyond the n datagrams
            assert _in_pkts(agent.records(), in_pkts) == n
            kernel = int(sh("cat", f"/sys/class/net/{pair.b_if}/statistics/rx_packets", ns=pair.b).stdout)
            last = [r["value"] for r in agent.records() if r.get("path") == in_pkts][-1]
            assert last == kernel

            if case == "crash-read":  # restarted with backoff: five more good reads, another crash
                agent.wait_for(lambda: agent.log.read_text().count("asic plugin opened") >= 2, timeout=10,
                               what="a restart of the plugin")
                octets = "/interfaces/interface[name=fp1]/state/counters/in-octets"
                agent.wait_for(lambda: [r["value"] for r in agent.records() if r.get("path") == octets][-1:] > [1000],
                               timeout=10, what="values from the restarted plugin")
                values = [r["value"] for r in agent.records() if r.get("path") == octets]
                # five reads of 200 per start; a restart's fresh count is a reset: the total goes on
                assert values[:5] == [200, 400, 600, 800, 1000] and values == sorted(values)
            log = agent.log.read_text()
            assert plugin in log and ("asic plugin fault" in log or case == "fifo")

            # ... and the tick thread never waited out the plugin: a hung open or read was left
            # running in its helper at some poll (the tick went on), and netdev kept being read
            status = json.loads(_swtel_status(tmp_path, "--json").stdout)["sources"]
            netdev, asic = status["netdev"], status["asic"]
            print(case, "netdev reads", netdev["reads"], "asic polls left in flight",
                  asic["polls_left_in_flight"])
            assert netdev["reads"] > 0, netdev
            if case.startswith("hang-"):
                assert asic["polls_left_in_flight"] > 0, asic

            # SIGTERM ends it within 2 s, whatever the plugin is doing (a helper in flight when possible)
            if case not in ("crash-open", "fifo"):  # (a FIFO may be refused before any helper starts)
                agent.wait_for(lambda: _helpers(agent), timeout=15, what="a helper process")
            pids.update(p.pid for p in _helpers(agent))
            before = len(agent.log.read_text())
            t0 = time.monotonic()
            agent.proc.send_signal(signal.SIGTERM)
            rc = agent.proc.wait(60)  # a failure bound: the figure is printed, not asserted
            print(case, f"SIGTERM to exit {time.monotonic() - t0:.2f} s")
            # it did not wait the plugin out: no call of the helper ran into its deadline after
            # the SIGTERM (a hang in flight is cut short, not timed out)
            after = agent.log.read_text()[before:]
            assert rc == 0 and "timed out" not in after, (rc, after)
        finally:
            agent.stop()
        assert all(_gone(pid, 30) for pid in pids), "a helper outlived the agent"
