"""OTLP's cumulus names as Debian's Prometheus sees them: an exposition of the names, scraped
and queried with PromQL."""

from __future__ import annotations

import json
import subprocess
import time

import pytest

from tests.gnmi_helpers import free_port
from tests.unit.test_otlp import _collector_with


@pytest.mark.skipif(not __import__("shutil").which("prometheus"), reason="Debian's prometheus is not installed")
def test_real_prometheus_queries_the_cumulus_names(tmp_path):
    import urllib.parse

    from tests.interop.test_prometheus import PROMETHEUS, _get

    port, mport, pport = free_port(), free_port(), free_port()
    col = _collector_with(port, mport)
    (tmp_path / "prometheus.yml").write_text(
        "global: {scrape_interval: 1s}\n"
        f"scrape_configs:\n  - job_name: swtel\n    static_configs: [{{targets: ['127.0.0.1:{mport}']}}]\n")
    prom = subprocess.Popen([PROMETHEUS, f"--config.file={tmp_path / 'prometheus.yml'}",
                             f"--storage.tsdb.path={tmp_path / 'data'}", f"--web.listen-address=127.0.0.1:{pport}"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        query = urllib.parse.quote('sum by (interface) (nvswitch_interface_ether_stats_octets)')
        deadline, got = time.monotonic() + 30, {}
        while time.monotonic() < deadline and len(got) < 2:
            try:
                reply = json.loads(_get(f"http://127.0.0.1:{pport}/api/v1/query?query={query}"))
                got = {r["metric"]["interface"]: float(r["value"][1]) for r in reply["data"]["result"]}
            except OSError:
                pass  # Prometheus still starting
            time.sleep(0.5)
        assert got == {"swp1": 7777.0, "swp2": 105.0}
    finally:
        prom.terminate()
        prom.wait(10)
        col.stop(0)
