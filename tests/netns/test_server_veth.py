"""The gNMI server end to end: an agent in a namespace, pygnmi Get and ON_CHANGE on a port
taken down (needs root)."""

from __future__ import annotations

import json
import time

import pytest

from tests.unit.test_server import _E2E_CLIENT


@pytest.mark.root
@pytest.mark.slow
def test_end_to_end_agent_in_namespace_pygnmi_get_on_change_oper_down(tmp_path):
    import subprocess
    import sys

    from tests.namespaces import AgentProcess, sh, veth_pair

    with veth_pair() as pair:
        port = 50051  # the namespace is ours: its loopback has no other listener
        cfg = (
            "interval: 50ms\n"
            f"sources:\n  netdev: {{interfaces: [{pair.b_if}]}}\n  ethtool: {{enabled: false}}\n"
            "  system: {enabled: false}\n"
            f"exporters:\n  server: {{listen: '127.0.0.1:{port}', insecure: true}}\n"
            f"control: {{socket: {tmp_path / 'swtel.sock'}, group: null}}\n"
        )
        # The kernel reports a fresh veth's carrier up to a second late (linkwatch): start from UP.
        deadline = time.monotonic() + 5
        while sh("cat", f"/sys/class/net/{pair.b_if}/operstate", ns=pair.b).stdout.strip() != "up":
            assert time.monotonic() < deadline, "veth never came up"
            time.sleep(0.05)
        agent = AgentProcess(pair.b, cfg, tmp_path)
        script = tmp_path / "client.py"
        script.write_text(_E2E_CLIENT)
        client_proc = None
        try:
            agent.wait_ready()
            client_proc = subprocess.Popen(
                ["ip", "netns", "exec", pair.b, sys.executable, str(script), str(port), pair.b_if],
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            lines = []

            def next_line() -> dict:
                line = client_proc.stdout.readline()
                assert line, f"client ended early: {client_proc.stderr.read()}\nagent: {agent.log.read_text()}"
                lines.append(json.loads(line))
                return lines[-1]

            got = next_line()
            kernel = int(sh("cat", f"/sys/class/net/{pair.b_if}/statistics/rx_packets", ns=pair.b).stdout)
            assert got["get"]["in-pkts"] == kernel  # quiet namespace: nothing moves between the two reads
            assert {"in-octets", "out-pkts", "carrier-transitions"} <= set(got["get"])
            assert got["ts"] > 1.6e18
            sync = next_line()
            assert sync["sync"] is True and sync["initial"]["oper-status"] == "UP"
            pair.send_udp(25, 200)
            seen = next_line()
            while seen["update"].get("in-pkts", 0) < kernel + 25:
                seen = next_line()
            assert seen["update"] == {"in-pkts": kernel + 25}  # exactly the datagrams sent
            sh("ip", "link", "set", pair.b_if, "down", ns=pair.b)
            while "oper-status" not in seen["update"]:
                seen = next_line()
            assert seen["update"]["oper-status"] == "DOWN"
            assert f"interfaces/interface[name={pair.b_if}]/state/oper-status" in seen["paths"]
            assert client_proc.wait(10) == 0
        finally:
            if client_proc and client_proc.poll() is None:
                client_proc.kill()
                client_proc.wait()
            assert agent.stop() == 0
