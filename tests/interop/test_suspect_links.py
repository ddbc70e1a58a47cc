"""The shipped rules that join a host's RoCE retransmissions to the error rates of the fabric
links on its paths through nvswitch_lldp_neighbor_info (packaging/prometheus/swtel-rules.yml,
group swtel-fabric-paths) and the dashboard's "Suspect links for this host" (issue 36 item 7):
promtool's rule unit tests on hand-made series (a fault on the host's paths and one that is
not, a real host's netdev tie, two hosts behind one leaf), then Debian's real Prometheus fed by
``swtel fabric``'s agents through remote write: during the fault the rule and the panel name
spine-1 swp11s1 for host-1, and in a clean run the rule never returns anything."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from agent.tools.fabric import Fabric, failed_codes
from tests.helpers import wait_until
from tests.interop.test_remote_write import Engine
from tests.namespaces import ROOT

RULES = ROOT / "packaging" / "prometheus" / "swtel-rules.yml"
DASHBOARD = ROOT / "packaging" / "grafana" / "swtel-dashboard.json"
PANEL = "Suspect links for this host"
SUSPECTS = "host:suspect_link:errors_rate2m"
ENTRY = "host:fabric_entry:roce_retrans_rate2m"

needs_promtool = pytest.mark.skipif(shutil.which("promtool") is None,
                                    reason="Debian's prometheus is not installed (.ci/setup-test installs it)")


def _info(target: str, interface: str, system: str, port_id: str, port_type: str = "INTERFACE_NAME") -> str:
    return (f'nvswitch_lldp_neighbor_info{{target="{target}",interface="{interface}",system_name="{system}",'
            f'port_id="{port_id}",port_id_type="{port_type}"}}')


def _retrans(host: str, per_step: int, device: str = "mlx5_0") -> dict:
    return {"series": f'swtel_rdma_hw_counters_roce_adp_retrans{{target="{host}",interface="{device}",port="1"}}',
            "values": f"0+{per_step}x20"}


def _errors(target: str, interface: str, per_step: int,
            name: str = "nvswitch_interface_phy_stats_phy_symbol_errors") -> dict:
    return {"series": f'{name}{{target="{target}",interface="{interface}"}}', "values": f"0+{per_step}x20"}


def _fabric_series() -> list[dict]:
    """Two spines; leaf-3 (host-1 on swp1, host-2 on swp2) and leaf-4 (host-3 on swp1), each
    leaf's swp61 to spine-1 and swp62 to spine-2; switches name their ports by ifname, hosts by
    MAC (as lldpd does), both ends of every link."""
    out = []
    for leaf, hosts in (("leaf-3", ("host-1", "host-2")), ("leaf-4", ("host-3",))):
        for i, host in enumerate(hosts, start=1):
            out.append({"series": _info(host, "mlx5_0", leaf, f"swp{i}"), "values": "1x20"})
            out.append({"series": _info(leaf, f"swp{i}", host, "02:00:00:00:00:0{i}", "MAC_ADDRESS"),
                        "values": "1x20"})
        for uplink, spine, spine_port in (("swp61", "spine-1", "swp1" if leaf == "leaf-3" else "swp2"),
                                          ("swp62", "spine-2", "swp1" if leaf == "leaf-3" else "swp2")):
            out.append({"series": _info(leaf, uplink, spine, spine_port), "values": "1x20"})
            out.append({"series": _info(spine, spine_port, leaf, uplink), "values": "1x20"})
    return out


def _suspect(host: str, target: str, interface: str, hop: str, value: float, device: str = "mlx5_0") -> dict:
    return {"labels": f'{SUSPECTS}{{host="{host}",rdma_device="{device}",rdma_port="1",target="{target}",'
                      f'interface="{interface}",hop="{hop}"}}', "value": value}


def _promtool(tmp_path: Path, tests: list[dict]) -> None:
    doc = {"rule_files": [str(RULES)], "evaluation_interval": "15s", "tests": tests}
    path = tmp_path / "suspects_test.yml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    check = subprocess.run(["promtool", "test", "rules", str(path)], capture_output=True, text=True, timeout=120)
    assert check.returncode == 0, check.stdout + check.stderr


@needs_promtool
def test_the_rule_names_the_links_on_the_retransmitting_hosts_paths(tmp_path):
    """host-1 retransmits; spine-1 swp11s1 (a spine port: on its paths to any other leaf) and
    leaf-3's uplink swp62 have errors, and so do leaf-3's unused server port swp9 and leaf-4's
    host port: off host-1's paths, never named. host-2, behind the same leaf, retransmits less:
    the links are named once, with host-1. In a clean fabric: nothing."""
    # two counters of one port each (a sum by port: Prometheus 2 collides their rates if they are
    # summed by a {__name__=~...} selector)
    faulty = [*_fabric_series(), _retrans("host-1", 270), _retrans("host-2", 30), _retrans("host-3", 0),
              {"series": 'swtel_rdma_hw_counters_out_of_sequence{target="host-1",interface="mlx5_0",port="1"}',
               "values": "0+30x20"},
              _errors("spine-1", "swp11s1", 45),
              _errors("spine-1", "swp11s1", 15, "nvswitch_interface_dot3_stats_fcs_errors"),
              _errors("leaf-3", "swp62", 15), _errors("leaf-3", "swp9", 150),
              _errors("leaf-4", "swp1", 150), _errors("spine-1", "swp3", 0)]
    clean = [*_fabric_series(), _retrans("host-1", 0), _errors("spine-1", "swp11s1", 0), _errors("leaf-3", "swp62", 0)]
    _promtool(tmp_path, [
        {"interval": "15s", "input_series": faulty, "promql_expr_test": [
            {"expr": SUSPECTS, "eval_time": "3m", "exp_samples": [
                _suspect("host-1", "spine-1", "swp11s1", "spine", 4),
                _suspect("host-1", "leaf-3", "swp62", "leaf uplink", 1)]},
            # where each host enters the fabric: its leaf and the leaf's port, its rate
            {"expr": f'{ENTRY}{{host="host-1"}}', "eval_time": "3m", "exp_samples": [
                {"labels": f'{ENTRY}{{host="host-1",rdma_device="mlx5_0",rdma_port="1",target="leaf-3",'
                           'interface="swp1"}', "value": 20}]},
            # the dashboard's panel for host-1: the same links (it lists them whether or not the
            # host retransmits now); for host-3, behind leaf-4: its own leaf port and spine-1 swp11s1,
            # not leaf-3's uplink
            {"expr": _panel_expr("host-1"), "eval_time": "3m", "exp_samples": [
                {"labels": '{target="spine-1",interface="swp11s1"}', "value": 4},
                {"labels": '{target="leaf-3",interface="swp62"}', "value": 1}]},
            {"expr": _panel_expr("host-3"), "eval_time": "3m", "exp_samples": [
                {"labels": '{target="spine-1",interface="swp11s1"}', "value": 4},
                {"labels": '{target="leaf-4",interface="swp1"}', "value": 10}]}]},
        {"interval": "15s", "input_series": clean, "promql_expr_test": [
            {"expr": SUSPECTS, "eval_time": "3m", "exp_samples": []}]},
        {"interval": "15s", "input_series": faulty, "alert_rule_test": [
            {"alertname": "SwtelSuspectLinkForHost", "eval_time": "3m", "exp_alerts": [
                {"exp_labels": {"severity": "warning", "host": "host-1", "rdma_device": "mlx5_0", "rdma_port": "1",
                                "target": target, "interface": interface, "hop": hop},
                 "exp_annotations": {
                     "summary": f"host-1 mlx5_0: RoCE retransmissions; suspect {target} {interface} ({value} errors/s, "
                                f"{hop})",
                     "description": "A host retransmits RoCE packets and a link on its paths through the fabric (its "
                                    "leaf port, the leaf's uplinks, the spines they reach: LLDP) has symbol, "
                                    "uncorrectable or FCS errors: check that link's cable or transceiver first."}}
                for target, interface, hop, value in (("spine-1", "swp11s1", "spine", 4),
                                                      ("leaf-3", "swp62", "leaf uplink", 1))]}]},
    ])


@needs_promtool
def test_a_real_hosts_rdma_port_joins_through_its_netdev(tmp_path):
    """On a real host lldpd runs on the netdev (enp1s0f0np0), the retransmissions are the RDMA
    port's (mlx5_0 port 1): swtel_rdma_port_info ties them. The leaf's own port facing the host
    is on its paths too."""
    series = [{"series": _info("gpu-7", "enp1s0f0np0", "leaf-3", "swp5"), "values": "1x20"},
              {"series": _info("leaf-3", "swp61", "spine-1", "swp9"), "values": "1x20"},
              {"series": 'swtel_rdma_port_info{target="gpu-7",interface="mlx5_0",port="1",netdev="enp1s0f0np0"}',
               "values": "1x20"},
              _retrans("gpu-7", 150), _errors("leaf-3", "swp5", 30), _errors("spine-1", "swp9", 0)]
    _promtool(tmp_path, [{"interval": "15s", "input_series": series, "promql_expr_test": [
        {"expr": SUSPECTS, "eval_time": "3m", "exp_samples": [_suspect("gpu-7", "leaf-3", "swp5", "leaf to host", 2)]},
    ]}])


def _panel_expr(host: str) -> str:
    dash = json.loads(DASHBOARD.read_text())
    (panel,) = [p for p in dash["panels"] if p["title"] == PANEL]
    (target,) = panel["targets"]
    return (target["expr"].replace("$__rate_interval", "2m").replace('"$target"', '".*"')
            .replace('"$host"', f'"{host}"'))


class _Prometheus(Engine):
    """Debian's Prometheus, a remote-write receiver that evaluates the shipped rules every second."""

    def command(self) -> list[str]:
        cmd = super().command()
        (self.dir / "prometheus.yml").write_text(
            f"global: {{evaluation_interval: 1s}}\nrule_files: ['{RULES}']\n")
        return cmd


def _started(tmp_path: Path, scenario: str) -> tuple[_Prometheus, Fabric]:
    prom = _Prometheus("prometheus", tmp_path).start()
    # idle counters again every 5 s, so that a 2-minute rate of a clean counter exists at once
    fabric = Fabric(tmp_path / "fabric", None, scenario,
                    remote_write={"url": prom.write_url, "interval": "1s", "resend": "5s"})
    fabric.start()
    return prom, fabric


@pytest.mark.once
@pytest.mark.slow
@needs_promtool
def test_on_a_real_prometheus_fed_by_the_fabric_the_rule_names_spine_1_swp11s1(tmp_path):
    prom, fabric = _started(tmp_path, "symbol-errors")
    try:
        firing = wait_until(lambda: prom.query('ALERTS{alertname="SwtelSuspectLinkForHost",alertstate="firing",'
                                               'host="host-1",target="spine-1",interface="swp11s1"}'), 180,
                            "the alert for host-1 naming spine-1 swp11s1",
                            detail=lambda: f"{fabric.failed()} {prom.query(SUSPECTS)} {prom.query(ENTRY)}")
        suspects = {(s["metric"]["host"], s["metric"]["target"], s["metric"]["interface"], s["metric"]["hop"])
                    for s in prom.query(SUSPECTS)}
        panel = wait_until(lambda: prom.query(_panel_expr("host-1")), 60, "the panel's answer")
        entry = prom.query(ENTRY)
    finally:
        codes = fabric.stop(60)
        prom.stop()
    assert not failed_codes(codes)
    assert firing[0]["metric"]["rdma_device"] == "mlx5_0"
    # the spine's port is the one fault of the run: the rule and the panel name it alone
    assert suspects == {("host-1", "spine-1", "swp11s1", "spine")}, suspects
    assert {(s["metric"]["target"], s["metric"]["interface"]) for s in panel} == {("spine-1", "swp11s1")}
    assert {(s["metric"]["host"], s["metric"]["target"], s["metric"]["interface"]) for s in entry} == {
        ("host-1", "leaf-3", "swp1")}


@pytest.mark.once
@pytest.mark.slow
@needs_promtool
def test_in_a_clean_run_the_rule_never_answers(tmp_path):
    prom, fabric = _started(tmp_path, "clean")
    try:
        # the chain is there (host-1 enters at leaf-3 swp1; the links' error rates, all 0) for 30
        # of the rule's evaluations, and the suspects' series never was
        wait_until(lambda: prom.query(f'count_over_time({ENTRY}{{host="host-1",target="leaf-3"}}[10m]) >= 30')
                   and prom.query('count_over_time(interface:link_errors:rate2m{target="spine-1"}[10m]) >= 30'),
                   240, "30 evaluations of the chain", detail=lambda: str(fabric.failed()))
        ever = prom.query(f"count_over_time({SUSPECTS}[10m])")
        alerts = prom.query('ALERTS{alertname="SwtelSuspectLinkForHost"}')
        panel = prom.query(_panel_expr("host-1"))
    finally:
        codes = fabric.stop(60)
        prom.stop()
    assert not failed_codes(codes)
    assert ever == [] and alerts == [] and panel == []
