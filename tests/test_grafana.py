"""packaging/prometheus/swtel-rules.yml and packaging/grafana/swtel-dashboard.json on a real
Prometheus (Debian's) scraping `swtel collect --prometheus` during a simulated-fabric run, and
the dashboard's panels on a real VictoriaMetrics (Debian's) fed by the same agents' remote write."""

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
needs_victoria = pytest.mark.skipif(shutil.which("victoria-metrics") is None,
                                    reason="Debian's victoria-metrics is not installed (.ci/setup installs it)")
#: panels fed by states (events), which reach Prometheus through the collector only: remote write
#: and OTLP carry counters (the panel's description says so)
STATES_ONLY = {"Fabric: open swtel events by device"}


@needs_prometheus
def test_promtool_accepts_the_rules():
    check = subprocess.run(["promtool", "check", "rules", str(RULES)], capture_output=True, text=True)
    assert check.returncode == 0, check.stdout + check.stderr


def _exprs(rate_interval: str = "10s") -> list[tuple[str, str]]:
    """Every panel's (title, expression) as Grafana sends it with every device and port selected."""
    dash = json.loads(DASHBOARD.read_text())
    threshold = next(v["query"] for v in dash["templating"]["list"] if v["name"] == "queue_threshold")
    out = []
    for panel in dash["panels"]:
        for target in panel["targets"]:
            expr = (target["expr"].replace("$__rate_interval", rate_interval).replace('"$interface"', '".*"')
                    .replace('"$target"', '".*"')
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


def test_every_panel_follows_the_device_selector():
    """A fleet: the `target` variable lists the agents, every series a panel reads is narrowed
    to it, and nothing per port adds up the same port name of different devices."""
    dash = json.loads(DASHBOARD.read_text())
    variables = {v["name"]: v for v in dash["templating"]["list"]}
    target = variables["target"]
    assert target["query"] == "label_values(swtel_agent_rss_bytes, target)"
    assert target["multi"] and target["includeAll"] and target["allValue"] == ".*"
    assert '{target=~"$target"}' in variables["interface"]["query"]
    titles = [p["title"] for p in dash["panels"]]
    assert {"Fabric: top ports by errors (/s, every selected device)", *STATES_ONLY, "Agents reporting"} <= set(titles)
    for panel in dash["panels"]:
        for t in panel["targets"]:
            selectors = re.findall(r"\b(?:nvswitch|swtel)_\w+(\{[^}]*\})?", t["expr"])
            assert selectors and all('target=~"$target"' in sel for sel in selectors), (panel["title"], t["expr"])
            for by in re.findall(r"by \(([^)]*)\)", t["expr"]):
                assert "target" in by.split(", "), (panel["title"], by)


class _Run:
    """A simulated fabric dialing out to `swtel collect --prometheus`, scraped every second by
    a real Prometheus that evaluates the rules every second."""

    def __init__(self, tmp_path, scenario: str, victoria: bool = False):
        from tests.test_remote_write import Engine

        tmp_path.mkdir(parents=True)
        port, self.mport, self.pport = free_port(), free_port(), free_port()
        # with ``victoria``, every agent also remote-writes to a VictoriaMetrics single node; an
        # idle counter every 5 s, so that the panels' 10 s rates hold two samples of it (a range
        # of at least twice `resend`, docs/remote_write.md). Started first: a failed start leaves
        # nothing else running.
        self.vm = Engine("victoria-metrics", tmp_path).start() if victoria else None
        self.col = Collector(f"127.0.0.1:{port}", insecure=True, prometheus=f"127.0.0.1:{self.mport}",
                             keep_messages=False).start()
        self.fabric = Fabric(tmp_path / "fabric", f"127.0.0.1:{port}", scenario, start_ns=time.time_ns() + 1_500_000_000,
                             remote_write={"url": self.vm.write_url, "resend": "5s"} if self.vm else None)
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
        if self.vm is not None:
            self.vm.stop()
        self.col.stop(0)


def _wait(run: _Run, expr: str, timeout: float, query=None, until=bool) -> list[dict]:
    """``expr``'s result on Prometheus (or ``query``'s engine) once ``until`` holds for it."""
    deadline, result = time.monotonic() + timeout, []
    while time.monotonic() < deadline:
        try:
            result = (query or run.query)(expr)
        except OSError:
            result = []  # the engine still starting
        if result and until(result):
            break
        time.sleep(1)
    return result


def _by(result: list[dict], *labels: str) -> dict[tuple, float]:
    return {tuple(r["metric"].get(k, "") for k in labels): float(r["value"][1]) for r in result}


@pytest.mark.once
@needs_prometheus
@needs_victoria
@pytest.mark.slow
def test_dashboard_and_symbol_error_alert_on_the_simulated_fabric(tmp_path):
    """Two switches and a host (spine-1's swp11s1 and host-1 with symbol errors): the alert,
    then every panel on Prometheus (scraping the collector) and on VictoriaMetrics (the same
    agents' remote write), the device selector's list and the fabric overview on both."""
    run = _Run(tmp_path / "faulty", "symbol-errors", victoria=True)
    assert run.vm is not None
    devices = {sw.name for sw in run.fabric.switches}
    panels = dict(_exprs("1m"))  # a minute: the errors (3 s to 20 s) stay in the window
    top, events = panels["Fabric: top ports by errors (/s, every selected device)"], panels[next(iter(STATES_ONLY))]
    try:
        firing = _wait(run, 'ALERTS{alertname="SwtelSymbolErrors",alertstate="firing"}', 45)
        assert {(a["metric"]["target"], a["metric"]["interface"]) for a in firing} >= {("spine-1", "swp11s1")}
        tops = {}
        for name, query in (("prometheus", run.query), ("victoria-metrics", run.vm.query)):
            tops[name] = _by(_wait(run, top, 10, query, lambda r: ("spine-1", "swp11s1", "symbol errors")
                                   in _by(r, "target", "interface", "counter")), "target", "interface", "counter")
        open_events = _by(_wait(run, events, 10, until=lambda r: len(r) == len(devices)), "target")
        # the selector's list (Grafana's label_values: the series' values of `target`)
        listed = {name: {r["metric"]["target"] for r in query("group by (target) (swtel_agent_rss_bytes)")}
                  for name, query in (("prometheus", run.query), ("victoria-metrics", run.vm.query))}
        empty = [title for title, expr in _exprs() if not _wait(run, expr, 5)]
        empty_vm = [title for title, expr in _exprs() if not _wait(run, expr, 5, run.vm.query)]
        vm_events = run.vm.query(events)
    finally:
        run.close()
    # every panel shows data (zeros are series too), the same panels on both engines
    assert empty == [], empty
    assert sorted(empty_vm) == sorted(STATES_ONLY), empty_vm
    assert vm_events == []  # events are states: not in remote write
    assert listed == {"prometheus": devices, "victoria-metrics": devices}
    for name, found in tops.items():
        # the failing port ranks first across the devices: the rest of the fabric is clean
        assert max(found, key=found.__getitem__) == ("spine-1", "swp11s1", "symbol errors"), (name, found)
        assert len(found) == 10, (name, found)
    assert {t for (t,) in open_events} == devices, open_events
    assert open_events[("spine-1",)] >= 1 and open_events[("leaf-3",)] == 0, open_events


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
