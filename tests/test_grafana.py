"""packaging/prometheus/swtel-rules.yml and packaging/grafana/swtel-dashboard.json on a real
Prometheus (Debian's) scraping `swtel collect --prometheus` during a simulated-fabric run."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import time
import urllib.parse

import pytest
import yaml

from agent.tools.collect import Collector
from agent.tools.fabric import LEAF_UPLINKS, Fabric
from tests.gnmi_helpers import free_port
from tests.netns import ROOT
from tests.test_prometheus import _get

RULES = ROOT / "packaging" / "prometheus" / "swtel-rules.yml"
DASHBOARD = ROOT / "packaging" / "grafana" / "swtel-dashboard.json"
PROMETHEUS = shutil.which("prometheus")
needs_prometheus = pytest.mark.skipif(PROMETHEUS is None or not shutil.which("promtool"),
                                      reason="Debian's prometheus is not installed (.ci/setup installs it)")


@needs_prometheus
def test_promtool_accepts_the_rules():
    check = subprocess.run(["promtool", "check", "rules", str(RULES)], capture_output=True, text=True)
    assert check.returncode == 0, check.stdout + check.stderr


def _exprs() -> list[tuple[str, str]]:
    dash = json.loads(DASHBOARD.read_text())
    threshold = next(v["query"] for v in dash["templating"]["list"] if v["name"] == "queue_threshold")
    out = []
    for panel in dash["panels"]:
        for target in panel["targets"]:
            expr = (target["expr"].replace("$__rate_interval", "10s").replace('"$interface"', '".*"')
                    .replace('"$uplinks"', '"' + "|".join(LEAF_UPLINKS) + '"')
                    .replace("$queue_threshold", threshold))
            out.append((panel["title"], expr))
    return out


def test_dashboard_and_rules_use_names_the_exporter_sends():
    """Every nvswitch_* name of the dashboard and the rules is one of the name table's (or the
    exporter's histogram), and the queue panels and alert read the TC peak, else the watermark."""
    from agent.exporters import otlp_names

    sent = {name for shape in otlp_names.SHAPES for name in shape.leaves.values()} | {otlp_names.EGRESS_HISTOGRAM}
    used = set(re.findall(r"nvswitch_\w*[a-z0-9]\b", DASHBOARD.read_text() + RULES.read_text()))
    assert used and used <= sent, used - sent
    assert not used & set(otlp_names.DEPRECATED)
    peak, watermark = otlp_names.TC["peak-occupancy"], otlp_names.TC["watermark"]
    queue_panels = [(t, e) for t, e in _exprs() if t.startswith(("Queue peaks", "Queues over"))]
    assert len(queue_panels) == 2 and all(peak in e and watermark in e for _t, e in queue_panels)
    assert "4194304" in queue_panels[1][1]  # the threshold variable's default
    rules = yaml.safe_load(RULES.read_text())
    alert = next(r for g in rules["groups"] for r in g["rules"] if r.get("alert") == "SwtelQueueOverThreshold")
    assert peak in alert["expr"] and watermark in alert["expr"] and alert["expr"].endswith(">= 4194304")


def test_dashboard_panels_have_expressions():
    exprs = _exprs()
    assert len(exprs) >= 12 and all(e and "$" not in e for _t, e in exprs)


class _Run:
    """A simulated fabric dialing out to `swtel collect --prometheus`, scraped every second by
    a real Prometheus that evaluates the rules every second."""

    def __init__(self, tmp_path, scenario: str):
        tmp_path.mkdir(parents=True)
        port, self.mport, self.pport = free_port(), free_port(), free_port()
        self.col = Collector(f"127.0.0.1:{port}", insecure=True, prometheus=f"127.0.0.1:{self.mport}",
                             keep_messages=False).start()
        self.fabric = Fabric(tmp_path / "fabric", f"127.0.0.1:{port}", scenario, start_ns=time.time_ns() + 1_500_000_000)
        (tmp_path / "prometheus.yml").write_text(
            "global: {scrape_interval: 1s, evaluation_interval: 1s}\n"
            f"rule_files: ['{RULES}']\n"
            f"scrape_configs:\n  - job_name: swtel\n    static_configs: [{{targets: ['127.0.0.1:{self.mport}']}}]\n")
        self.prom = subprocess.Popen(
            [PROMETHEUS, f"--config.file={tmp_path / 'prometheus.yml'}", f"--storage.tsdb.path={tmp_path / 'data'}",
             f"--web.listen-address=127.0.0.1:{self.pport}"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.fabric.start()

    def query(self, expr: str) -> list[dict]:
        url = f"http://127.0.0.1:{self.pport}/api/v1/query?query={urllib.parse.quote(expr)}"
        reply = json.loads(_get(url))
        assert reply["status"] == "success", reply
        return reply["data"]["result"]

    def close(self) -> None:
        self.fabric.stop()
        self.prom.terminate()
        self.prom.wait(10)
        self.col.stop(0)


def _wait(run: _Run, expr: str, timeout: float) -> list[dict]:
    deadline, result = time.monotonic() + timeout, []
    while time.monotonic() < deadline:
        try:
            result = run.query(expr)
        except OSError:
            result = []  # Prometheus still starting
        if result:
            break
        time.sleep(1)
    return result


@pytest.mark.once
@needs_prometheus
@pytest.mark.slow
def test_dashboard_and_symbol_error_alert_on_the_simulated_fabric(tmp_path):
    run = _Run(tmp_path / "faulty", "symbol-errors")
    try:
        firing = _wait(run, 'ALERTS{alertname="SwtelSymbolErrors",alertstate="firing"}', 45)
        assert {(a["metric"]["target"], a["metric"]["interface"]) for a in firing} >= {("spine-1", "swp11s1")}
        empty = [title for title, expr in _exprs() if not _wait(run, expr, 5)]
    finally:
        run.close()
    # every panel shows data (zeros are series too)
    assert empty == [], empty


@pytest.mark.once
@needs_prometheus
@pytest.mark.slow
def test_no_symbol_error_alert_in_a_clean_run(tmp_path):
    run = _Run(tmp_path / "clean", "clean")
    try:
        assert _wait(run, "nvswitch_interface_phy_stats_phy_symbol_errors", 30)
        time.sleep(20)  # the rule's 30 s window and 10 s "for" have passed
        assert run.query('ALERTS{alertname="SwtelSymbolErrors"}') == []
        assert run.query('ALERTS{alertname="SwtelQueueOverThreshold"}') == []  # no queue reached 4 MiB
        assert run.query("interface:rx_bits:rate1m > 0")  # the recording rules run
    finally:
        run.close()


@pytest.mark.once
@needs_prometheus
@pytest.mark.slow
def test_queue_alert_fires_on_a_microburst(tmp_path):
    run = _Run(tmp_path / "burst", "microburst")
    try:
        firing = _wait(run, 'ALERTS{alertname="SwtelQueueOverThreshold",alertstate="firing"}', 45)
    finally:
        run.close()
    assert {(a["metric"]["target"], a["metric"]["interface"]) for a in firing} >= {("leaf-3", "swp1")}
