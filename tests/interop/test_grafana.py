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
from tests.interop.test_prometheus import _get
from tests.namespaces import ROOT

RULES = ROOT / "packaging" / "prometheus" / "swtel-rules.yml"
DASHBOARD = ROOT / "packaging" / "grafana" / "swtel-dashboard.json"
PROMETHEUS = shutil.which("prometheus")
needs_prometheus = pytest.mark.skipif(PROMETHEUS is None or not shutil.which("promtool"),
                                      reason="Debian's prometheus is not installed (.ci/setup-test installs it)")
needs_victoria = pytest.mark.skipif(shutil.which("victoria-metrics") is None,
                                    reason="Debian's victoria-metrics is not installed (.ci/setup-test installs it)")
#: the open events per device: a gauge (sources.events), on every exporter alike
EVENTS = "Fabric: open swtel events by device"
#: drop reasons: the simulated switch's per-reason counters, on every device
DROP_REASONS = "Drops by reason (/s)"
#: joins through nvswitch_lldp_neighbor_info, an info series remote write and OTLP send and
#: `swtel collect --prometheus` does not (tests/interop/test_suspect_links.py: on Prometheus fed by
#: remote write)
SUSPECTS = "Suspect links for this host"


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
                    .replace('"$target"', '".*"').replace('"$host"', '".*"')
                    .replace('"$uplinks"', '"' + "|".join(LEAF_UPLINKS) + '"')
                    .replace("$queue_threshold", threshold))
            out.append((panel["title"], expr))
    return out


def test_dashboard_and_rules_use_names_the_exporter_sends():
    """Every nvswitch_* name of the dashboard and the rules is one of the name table's (or the
    exporter's histogram), and the queue panels and alert read the TC peak, else the watermark."""
    from agent.exporters import otlp_names

    sent = {name for shape in otlp_names.SHAPES for name in shape.leaves.values()} | {otlp_names.EGRESS_HISTOGRAM}
    sent |= set(otlp_names.DISCARDS.values())
    import agent.plugins  # noqa: F401  (the info series the sources declare)
    from agent import registry

    sent |= set(registry.INFO_METRICS)  # nvswitch_lldp_neighbor_info: remote write's and OTLP's
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
    # every variable replaced; a label_replace's group reference ("$1") is PromQL's own (Grafana leaves a
    # name it has no variable for as it is)
    assert len(exprs) >= 12 and all(e and not re.search(r"\$(?!\d)", e) for _t, e in exprs)


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
    assert {"Fabric: top ports by errors (/s, every selected device)", EVENTS, "Agents reporting",
            DROP_REASONS} <= set(titles)
    for panel in dash["panels"]:
        for t in panel["targets"]:
            # a selector by name pattern ({__name__=~"a|b", ...}) counts as one selector
            expr = re.sub(r'\{__name__=~"[^"]*", ', "swtel_by_name{", t["expr"])
            selectors = re.findall(r"\b(?:nvswitch|swtel)_\w+(\{[^}]*\})?", expr)
            assert selectors and all('target=~"$target"' in sel for sel in selectors), (panel["title"], t["expr"])
            for by in re.findall(r"by \(([^)]*)\)", t["expr"]):
                assert "target" in by.split(", "), (panel["title"], by)


class _Run:
    """A simulated fabric dialing out to `swtel collect --prometheus`, scraped every second by
    a real Prometheus that evaluates the rules every second."""

    def __init__(self, tmp_path, scenario: str, victoria: bool = False, faults: tuple[str, ...] = ()):
        from tests.interop.test_remote_write import Engine

        tmp_path.mkdir(parents=True)
        port, self.mport, self.pport = free_port(), free_port(), free_port()
        # with ``victoria``, every agent also remote-writes to a VictoriaMetrics single node; an
        # idle counter every 5 s, so that the panels' 10 s rates hold two samples of it (a range
        # of at least twice `resend`, docs/remote_write.md). Started first: a failed start leaves
        # nothing else running.
        self.vm = Engine("victoria-metrics", tmp_path).start() if victoria else None
        self.col = Collector(f"127.0.0.1:{port}", insecure=True, prometheus=f"127.0.0.1:{self.mport}",
                             keep_messages=False).start()
        self.fabric = Fabric(tmp_path / "fabric", f"127.0.0.1:{port}", scenario,
                             start_ns=time.time_ns() + 1_500_000_000,
                             remote_write={"url": self.vm.write_url, "resend": "5s"} if self.vm else None,
                             faults=faults)
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
    top, events = panels["Fabric: top ports by errors (/s, every selected device)"], panels[EVENTS]
    sockets = {sw.name: str(sw.socket) for sw in run.fabric.switches}

    def status_counts() -> dict[tuple, float]:
        """Each device's open events as its `swtel status` lists them."""
        from agent.control.client import request

        return {(name,): float(len(request(path, "status")["events"]["open"])) for name, path in sockets.items()}

    matched: list[dict[tuple, float]] = []  # the status counts each engine's answer matched

    def same_as_status(result: list[dict]) -> bool:
        counts = status_counts()
        if _by(result, "target") != counts:
            return False
        matched.append(counts)
        return True

    try:
        firing = _wait(run, 'ALERTS{alertname="SwtelSymbolErrors",alertstate="firing"}', 120)
        assert {(a["metric"]["target"], a["metric"]["interface"]) for a in firing} >= {("spine-1", "swp11s1")}
        tops = {}
        for name, query in (("prometheus", run.query), ("victoria-metrics", run.vm.query)):
            tops[name] = _by(_wait(run, top, 60, query, lambda r: ("spine-1", "swp11s1", "symbol errors")
                                   in _by(r, "target", "interface", "counter")), "target", "interface", "counter")
        # open events by device on both engines: exactly what each agent's status lists
        open_events = {name: _by(_wait(run, events, 60, query, same_as_status), "target")
                       for name, query in (("prometheus", run.query), ("victoria-metrics", run.vm.query))}
        # the selector's list (Grafana's label_values: the series' values of `target`)
        listed = {name: {r["metric"]["target"] for r in query("group by (target) (swtel_agent_rss_bytes)")}
                  for name, query in (("prometheus", run.query), ("victoria-metrics", run.vm.query))}
        # (failure bounds: a panel with data answers at once)
        empty = [title for title, expr in _exprs() if title != SUSPECTS and not _wait(run, expr, 30)]
        empty_vm = [title for title, expr in _exprs() if not _wait(run, expr, 30, run.vm.query)]
    finally:
        run.close()
    # every panel shows data (zeros are series too), the same panels on both engines
    assert empty == [], empty
    assert empty_vm == [], empty_vm
    assert listed == {"prometheus": devices, "victoria-metrics": devices}
    for name, found in tops.items():
        # the failing port ranks first across the devices: the rest of the fabric is clean
        assert max(found, key=found.__getitem__) == ("spine-1", "swp11s1", "symbol errors"), (name, found)
        assert len(found) == 10, (name, found)
    assert len(matched) == 2 and open_events == {"prometheus": matched[0], "victoria-metrics": matched[1]}, \
        (open_events, matched)
    for counts in matched:
        assert {t for (t,) in counts} == devices and counts[("spine-1",)] >= 1 and counts[("leaf-3",)] == 0, counts


@pytest.mark.once
@needs_prometheus
@pytest.mark.slow
def test_no_symbol_error_alert_in_a_clean_run(tmp_path):
    run = _Run(tmp_path / "clean", "clean")
    try:
        # (a bound, not a figure: the collector's first exposition of a fabric parses ~30,000 paths,
        # ~1.7 s of CPU, which a machine loaded 10-deep stretches past 30 s)
        assert _wait(run, "nvswitch_interface_phy_stats_phy_symbol_errors", 120)
        time.sleep(20)  # wallclock: the rule's 30 s window and 10 s "for" pass; no alert must fire
        assert run.query('ALERTS{alertname="SwtelSymbolErrors"}') == []
        assert run.query('ALERTS{alertname="SwtelQueueOverThreshold"}') == []  # no queue reached 4 MiB
        assert run.query('ALERTS{alertname="SwtelLinkPredictedFrameLoss"}') == []  # low-bin noise only
        assert run.query("nvswitch_interface_phy_stats_predicted_flr")  # the gauges are there
        assert run.query("interface:rx_bits:rate1m > 0")  # the recording rules run
    finally:
        run.close()


@pytest.mark.once
@needs_prometheus
@pytest.mark.slow
def test_queue_alert_fires_on_a_microburst(tmp_path):
    run = _Run(tmp_path / "burst", "microburst")
    try:
        firing = _wait(run, 'ALERTS{alertname="SwtelQueueOverThreshold",alertstate="firing"}', 120)
    finally:
        run.close()
    assert {(a["metric"]["target"], a["metric"]["interface"]) for a in firing} >= {("leaf-3", "swp1")}


# ---------------------------------------------------------------- predicted FLR (issue 22 item 3)

FLR_PANEL = "Links by predicted FLR"
FLR_ALERT = "SwtelLinkPredictedFrameLoss"


def _flr_alert() -> dict:
    rules = yaml.safe_load(RULES.read_text())
    return next(r for g in rules["groups"] for r in g["rules"] if r.get("alert") == FLR_ALERT)


def test_flr_panel_and_alert_read_the_detector_s_gauges_at_its_defaults():
    """The panel ranks the selected devices' links by insights.link_degrading's predicted FLR
    gauge, its red line at the detector's threshold; the alert asks what the detector asks by
    default (FLR at or over `flr` with R² at least `min_r2`), per port."""
    from agent.config import Insights
    from agent.exporters import otlp_names

    defaults = Insights().link_degrading
    flr, r2 = otlp_names.PHY_PREDICTION["predicted-flr"], otlp_names.PHY_PREDICTION["fit-r2"]
    panel = next(p for p in json.loads(DASHBOARD.read_text())["panels"] if p["title"] == FLR_PANEL)
    (expr,) = [e for t, e in _exprs() if t == FLR_PANEL]
    assert expr == f'topk(10, max by (target, interface) ({flr}{{target=~".*", interface=~".*"}}))'
    assert panel["fieldConfig"]["defaults"]["thresholds"]["steps"][-1]["value"] == defaults.flr
    m = re.fullmatch(rf"{flr} >= (\S+) and {r2} >= (\S+)", _flr_alert()["expr"])
    assert m and (float(m[1]), float(m[2])) == (defaults.flr, defaults.min_r2), _flr_alert()["expr"]


@needs_prometheus
def test_flr_alert_fires_on_a_good_fit_only(tmp_path):
    """promtool's rule unit test: a port over the threshold with a good fit fires at once, and
    keeps firing after its prediction dips (a climbing prediction wobbles); one over it with a
    poor fit, one below it and a port without a fit do not."""
    def series(name: str, port: str, values: str) -> dict:
        return {"series": f'nvswitch_interface_phy_stats_{name}{{target="leaf01",interface="{port}"}}',
                "values": values}

    alert = _flr_alert()
    swp1 = {"exp_labels": {"severity": "warning", "target": "leaf01", "interface": "swp1"},
            "exp_annotations": {"summary": "swp1 on leaf01: predicted frame loss ratio 3n",
                                "description": alert["annotations"]["description"]}}
    test = {"rule_files": [str(RULES)], "evaluation_interval": "1s", "tests": [{
        "interval": "1s",
        "input_series": [series("predicted_flr", "swp1", "1e-12 3e-9 3e-9 8e-10x3"),
                         series("fec_fit_r2", "swp1", "0.99x6"),
                         series("predicted_flr", "swp2", "3e-9x6"), series("fec_fit_r2", "swp2", "0.5x6"),
                         series("predicted_flr", "swp3", "1e-18x6"), series("fec_fit_r2", "swp3", "0.99x6"),
                         series("predicted_flr", "swp4", "0x6"), series("fec_fit_r2", "swp4", "0x6")],
        "alert_rule_test": [
            {"eval_time": "0s", "alertname": FLR_ALERT, "exp_alerts": []},
            {"eval_time": "1s", "alertname": FLR_ALERT, "exp_alerts": [swp1]},
            {"eval_time": "5s", "alertname": FLR_ALERT, "exp_alerts": [swp1]}],
    }]}
    path = tmp_path / "flr-test.yml"
    path.write_text(yaml.safe_dump(test))
    check = subprocess.run(["promtool", "test", "rules", str(path)], capture_output=True, text=True)
    assert check.returncode == 0, check.stdout + check.stderr


@pytest.mark.once
@needs_prometheus
@pytest.mark.slow
def test_flr_alert_and_panel_on_a_degrading_link_before_its_first_uncorrectable_codeword(tmp_path):
    """spine-1's swp13 degrading over 44 s (as the fabric's fec-degrade preset, over a longer
    span: the lead grows with it, and the pipeline to Prometheus takes seconds): the alert fires
    on that port alone, seen on Prometheus (the agents' dial-out, the collector, a 1 s scrape)
    before the port's first uncorrectable codeword; the panel ranks it first, every other link
    at its floor."""
    from tests.unit.test_link_degrading import first_uncorrectable

    run = _Run(tmp_path / "fec", "clean", faults=("spine-1:fec-degrade@1s-45s:swp13",))
    spine = next(sw for sw in run.fabric.switches if sw.name == "spine-1")
    sim = " ".join(p for p in run.fabric.plugin_config(spine).split() if not p.startswith("start="))
    fail_s = first_uncorrectable(sim, "swp13")
    panel = dict(_exprs())[FLR_PANEL]
    try:
        # The alert's condition on the agent's own gauges, by their sample times (when the
        # switch judged, not when a loaded pipeline delivered): the first sample meeting it.
        state = "/interfaces/interface[name=swp13]/phy/fec/prediction/state/"
        met: list[int] = []

        def alert_firing() -> list[dict]:
            flr, r2 = (run.col.latest.get(("spine-1", f"swtel:{state}{leaf}")) for leaf in ("predicted-flr", "fit-r2"))
            if not met and flr and r2 and float(flr["value"]) >= 1e-9 and float(r2["value"]) >= 0.9:
                met.append(max(flr["ts"], r2["ts"]))
            return run.query(f'ALERTS{{alertname="{FLR_ALERT}",alertstate="firing"}}')

        firing = _wait(run, "", 120, lambda _expr: alert_firing())
        seen_s = (time.time_ns() - run.fabric.start_ns) / 1e9  # when this test saw it: a figure
        unc = run.query('nvswitch_interface_phy_stats_phy_effective_errors{target="spine-1",interface="swp13"}')
        top = _by(_wait(run, panel, 5), "target", "interface")
    finally:
        run.close()
    print(f"{FLR_ALERT} seen firing at {seen_s:.1f}s (its condition met by the sample at "
          f"{(met[0] - run.fabric.start_ns) / 1e9 if met else float('nan'):.1f}s), first uncorrectable codeword "
          f"at {fail_s:.1f}s")
    assert {(a["metric"]["target"], a["metric"]["interface"]) for a in firing} == {("spine-1", "swp13")}
    assert [float(r["value"][1]) for r in unc] == [0.0]
    # predicted by a sample taken before the port's first uncorrectable codeword
    assert met and (met[0] - run.fabric.start_ns) / 1e9 < fail_s, (met, seen_s, fail_s)
    # ranked first, orders above the floor (its prediction wobbles around the threshold as it climbs)
    assert max(top, key=top.__getitem__) == ("spine-1", "swp13") and top[("spine-1", "swp13")] >= 1e-11
    assert len(top) == 10 and sorted(top.values())[-2] < 1e-15, top


@needs_prometheus
def test_insight_event_alert_reads_the_open_event_gauge_with_its_severity(tmp_path):
    """SwtelInsightEvent fires per target and severity while events of it are open, on the
    gauge every exporter sends (not on the collector's path-named event states), and carries
    the events' severity (no rule label overrides it)."""
    from agent.exporters import otlp_names

    def series(severity: str, values: str) -> dict:
        return {"series": f'{otlp_names.OPEN_EVENTS}{{target="leaf01",severity="{severity}"}}', "values": values}

    critical = {"exp_labels": {"target": "leaf01", "severity": "critical"},
                "exp_annotations": {"summary": "leaf01: 2 swtel event(s) of severity critical open "
                                               "(swtel status lists them)"}}
    test = {"rule_files": [str(RULES)], "evaluation_interval": "1s", "tests": [{
        "interval": "1s",
        "input_series": [series("critical", "0 2 0"), series("warning", "0x3")],
        "alert_rule_test": [
            {"eval_time": "0s", "alertname": "SwtelInsightEvent", "exp_alerts": []},
            {"eval_time": "1s", "alertname": "SwtelInsightEvent", "exp_alerts": [critical]},
            {"eval_time": "2s", "alertname": "SwtelInsightEvent", "exp_alerts": []}],
    }]}
    path = tmp_path / "event-test.yml"
    path.write_text(yaml.safe_dump(test))
    check = subprocess.run(["promtool", "test", "rules", str(path)], capture_output=True, text=True)
    assert check.returncode == 0, check.stdout + check.stderr
