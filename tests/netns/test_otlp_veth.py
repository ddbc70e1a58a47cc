"""OTLP from an agent reading veth ports in a namespace: the receiver gets the packets as the
kernel counts them (needs root)."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest

from tests.namespaces import ROOT, AgentProcess
from tests.otlp_receiver import Receiver
from tests.unit.test_otlp import VETH


@pytest.mark.root
@pytest.mark.parametrize("profile", ["cumulus", "otel"])
def test_veth_packets_reach_the_receiver_as_the_kernel_counts_them(tmp_path, profile):
    from tests.namespaces import UDP_OVERHEAD, Forward, kernel_statistics, veth_pair

    n, size = 321, 200
    rx = Receiver().start()
    with veth_pair() as pair:
        forward = Forward(pair.b, rx.port)
        agent = AgentProcess(pair.b, (
            "target: veth-otlp\ninterval: 50ms\n"
            f"sources:\n  netdev: {{interfaces: [{pair.b_if}]}}\n  ethtool: {{interfaces: [{pair.b_if}]}}\n"
            "  system: {enabled: false}\n"
            f"exporters:\n  otlp: {{endpoint: '127.0.0.1:{rx.port}', insecure: true, interval: 200ms, "
            f"profile: {profile}}}\n"
            f"control: {{socket: {tmp_path / 'swtel.sock'}, group: null}}\n"), tmp_path)
        pkts = "nvswitch_interface_ether_stats_pkts"
        try:
            agent.wait_ready()
            first = agent.wait_for(lambda: rx.latest(pkts, interface=pair.b_if), 30, "the first export")
            pair.send_udp(n, size)
            agent.wait_for(lambda: rx.latest(pkts, interface=pair.b_if).value >= first.value + n, 30,
                           f"{n} packets exported")
            kernel = kernel_statistics(pair.b, pair.b_if)
            read_at = time.time_ns()  # (a sample taken after this was read after the kernel's)
            agent.wait_for(lambda: rx.latest(pkts, interface=pair.b_if).time_ns > read_at, 30,
                           "an export after the kernel was read")
            status = json.loads(subprocess.run(
                [sys.executable, "-m", "agent", "status", "--json", "--socket", str(tmp_path / "swtel.sock")],
                cwd=ROOT, capture_output=True, text=True, timeout=10).stdout)
        finally:
            assert agent.stop() == 0
            forward.close()
            rx.stop()
    last = rx.latest(pkts, interface=pair.b_if)
    assert last.value - first.value == n
    assert rx.latest("nvswitch_interface_ether_stats_octets", interface=pair.b_if).value - \
        rx.series("nvswitch_interface_ether_stats_octets", interface=pair.b_if)[0].value == n * (size + UDP_OVERHEAD)
    for name, stat in VETH.items():
        p = rx.latest(name, interface=pair.b_if)
        assert p.value == kernel[stat], (name, p, kernel[stat])
        if profile == "cumulus":
            assert (p.kind, p.value_type) == ("gauge", "as_double"), p
        else:
            assert (p.kind, p.value_type, p.monotonic, p.temporality) == ("sum", "as_int", True, 2), p
            assert 0 < p.start_ns <= first.time_ns
    assert rx.resources[-1]["swtel.target"] == "veth-otlp"
    otlp = status["exporters"]["otlp"]
    assert otlp["state"] == "connected" and otlp["profile"] == profile and otlp["dropped"] == 0
