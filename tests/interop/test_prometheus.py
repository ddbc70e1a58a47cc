"""`swtel collect --prometheus`: a real Prometheus (Debian's) scrapes it and stores the values."""

from __future__ import annotations

import json
import shutil
import subprocess
import time
import urllib.parse
import urllib.request

import pytest

from agent.gnmi import encode
from agent.tools.collect import NOKIA_METHOD, Collector
from tests.gnmi_helpers import free_port, make_batch, make_table, publish

PROMETHEUS = shutil.which("prometheus")
pytestmark = pytest.mark.skipif(PROMETHEUS is None,
                                reason="Debian's prometheus is not installed (.ci/setup-test installs it)")

_NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # loopback only


def _get(url: str) -> bytes:
    return _NO_PROXY.open(url, timeout=5).read()


def test_promtool_accepts_the_exposition(tmp_path):
    port, mport = free_port(), free_port()
    col = Collector(f"127.0.0.1:{port}", insecure=True, prometheus=f"127.0.0.1:{mport}").start()
    try:
        table = make_table(["swp1", "swp2"])
        msgs = encode.encode_batch(make_batch(table, list(range(1, len(table) + 1)), 1), "leaf01")
        publish(f"127.0.0.1:{port}", NOKIA_METHOD, msgs)
        assert col.wait_for(lambda c: c.received == len(msgs), 30)
        body = _get(f"http://127.0.0.1:{mport}/metrics")
    finally:
        col.stop(0)
    check = subprocess.run(["promtool", "check", "metrics"], input=body, capture_output=True)
    # promtool exits 0 when the text parses; lint warnings (e.g. no HELP) go to stdout/stderr.
    assert check.returncode == 0, check.stdout + check.stderr


def test_real_prometheus_scrapes_the_collector(tmp_path):
    port, mport, pport = free_port(), free_port(), free_port()
    col = Collector(f"127.0.0.1:{port}", insecure=True, prometheus=f"127.0.0.1:{mport}").start()
    (tmp_path / "prometheus.yml").write_text(
        "global: {scrape_interval: 1s}\n"
        f"scrape_configs:\n  - job_name: swtel\n    static_configs: [{{targets: ['127.0.0.1:{mport}']}}]\n"
    )
    prom = subprocess.Popen(
        [PROMETHEUS, f"--config.file={tmp_path / 'prometheus.yml'}", f"--storage.tsdb.path={tmp_path / 'data'}",
         f"--web.listen-address=127.0.0.1:{pport}"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    try:
        table = make_table(["swp1"])
        values = [1234 + i for i in range(len(table))]
        publish(f"127.0.0.1:{port}", NOKIA_METHOD, encode.encode_batch(make_batch(table, values, 1), "leaf01"))
        query = urllib.parse.quote('nvswitch_interface_ether_stats_octets{interface="swp1",target="leaf01"}')
        want = values[table.paths.index("/interfaces/interface[name=swp1]/state/counters/in-octets")]
        deadline, got = time.monotonic() + 30, None
        while time.monotonic() < deadline:
            try:
                reply = json.loads(_get(f"http://127.0.0.1:{pport}/api/v1/query?query={query}"))
                result = reply["data"]["result"]
                if result:
                    got = float(result[0]["value"][1])
                    break
            except OSError:
                pass  # Prometheus still starting
            time.sleep(0.5)
        assert got == want
    finally:
        prom.terminate()
        prom.wait(10)
        col.stop(0)


def test_drop_reasons_are_exposed_under_the_otlp_names():
    """`swtel collect --prometheus` names a drop reason as remote write and OTLP do (one name
    table)."""
    from agent.tools.prometheus import render
    from tests.interop.test_remote_write import DROP_SPECS, drop_reason_table

    table = drop_reason_table()
    values = [11, 22, 33, 44, 4400]
    text = render([("leaf01", path, v) for path, v in zip(table.paths, values, strict=True)])
    for (group, reason), value, name in zip(DROP_SPECS, values[:3], ("discards_ingress_vlan_membership",
                                                                  "drops_reason_packets", "drops_reason_packets"),
                                            strict=True):
        line = (f'nvswitch_interface_{name}{{group="{group}",interface="swp1",reason="{reason}",'
                f'target="leaf01"}} {value}')
        assert line in text.splitlines(), line
    dev = 'device="pci/0000:03:00.0",group="l3",reason="unresolved-neigh",target="leaf01"'
    assert f"swtel_devlink_drops_reason_packets{{{dev}}} 44" in text.splitlines()
    assert f"swtel_devlink_drops_reason_bytes{{{dev}}} 4400" in text.splitlines()
    assert "# TYPE nvswitch_interface_drops_reason_packets gauge" in text
