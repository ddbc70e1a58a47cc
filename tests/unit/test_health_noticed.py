"""Health that notices nothing (issue 38 item 5): a source that selects no port is red after
the grace; no exporter at all is said in status."""

from __future__ import annotations

import pytest

from agent.control import client

NOW = 1_800_000_000 * 10**9
S = 10**9


def doc(sources, uptime_s, grace_s=60.0, exporters=None):
    return {"now_ns": NOW, "uptime_s": uptime_s, "sources": sources,
            "exporters": {"jsonl": {"kind": "jsonl", "state": "running"}} if exporters is None else exporters,
            "config": {"path": "/etc/swtel/swtel.yaml", "last_reload": {"ok": None}, "health_grace_s": grace_s}}


def source(ports, selects=True, last_ok_ns=NOW - S // 20):
    return {"interval_s": 0.1, "last_ok_ns": last_ok_ns, "ports": ports, "selects_ports": selects}


@pytest.mark.parametrize("sources, uptime_s, expected", [
    ({"netdev": source(0)}, 61.0, ["source netdev: selects no port"]),
    ({"netdev": source(0)}, 59.0, []),  # still within the grace: ports may yet appear
    ({"netdev": source(3)}, 3600.0, []),
    ({"system": source(0, selects=False)}, 3600.0, []),  # reads no port by nature
    ({"asic": source(0), "netdev": source(0)}, 120.0,
     ["source asic: selects no port", "source netdev: selects no port"]),
    # never read: the stale rule speaks, not this one
    ({"netdev": source(0, last_ok_ns=None)}, 120.0, ["source netdev: no successful poll since start-up"]),
])
def test_a_source_selecting_no_port_is_red_after_the_grace(sources, uptime_s, expected):
    problems = client.health_problems(doc(sources, uptime_s))
    assert [p.split(" (")[0] for p in problems] == expected, problems


def test_the_grace_is_the_configs():
    assert client.health_problems(doc({"netdev": source(0)}, 5.0, grace_s=2.0))
    assert not client.health_problems(doc({"netdev": source(0)}, 5.0, grace_s=10.0))


def test_status_says_when_no_exporter_is_configured():
    d = doc({"netdev": source(2)}, 10.0, exporters={})
    d.update(version="0.1.0", pid=1, backend="C", tick={"ticks": 1, "overruns": 0}, events={})
    text = client.render(d, client.health_problems(d))
    assert "exporters: none configured: nothing leaves this switch" in text
    d["exporters"] = {"jsonl": {"kind": "jsonl", "state": "running"}}
    assert "none configured" not in client.render(d, [])


def test_an_agent_without_exporters_warns_at_start(tmp_path):
    import os
    import subprocess
    import sys
    from pathlib import Path

    repo = Path(__file__).resolve().parents[2]
    cfg = tmp_path / "bare.yaml"
    cfg.write_text("interval: 50ms\nsources: {netdev: {interfaces: [lo], exclude: []}, ethtool: {enabled: false},"
                   " system: {enabled: false}}\n"
                   f"control: {{socket: {tmp_path}/s.sock, group: null}}\n")
    res = subprocess.run([sys.executable, "-m", "agent", "run", "-c", str(cfg), "--duration", "0.3"],
                         cwd=repo, capture_output=True, text=True, timeout=60,
                         env={**os.environ, "PYTHONPATH": str(repo)})
    assert res.returncode == 0, res.stderr + res.stdout
    assert "no exporter configured: nothing leaves this switch" in res.stdout + res.stderr


def test_a_long_error_keeps_its_code_peer_and_cause():
    error = ("UNAVAILABLE: ipv4:127.0.0.1:4317: " + "Failed to connect to remote host: " * 5
             + "Connection refused")
    cut = client._tail(error)
    assert len(cut) <= 80
    assert cut.startswith("UNAVAILABLE: ipv4:127.0.0.1:4317") and cut.endswith("Connection refused")
    assert client._tail("short error") == "short error"
