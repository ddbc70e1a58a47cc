"""ABI 1.1's kinds, PEAK and HISTOGRAM: the loader (both backends) against the example plugin
(examples/asic-plugin/mini_plugin.c, ``kinds=1``), a 1.0 plugin loading unchanged, the
checks on bins, and exact values through jsonl, gNMI dial-out and dial-in, and OTLP in both
profiles."""

from __future__ import annotations

import subprocess
from array import array
from pathlib import Path

import pytest
from pygnmi.client import gNMIclient

from agent import _backend
from agent.asic import HEADER
from tests.gnmi_helpers import free_port
from tests.namespaces import AgentProcess
from tests.otlp_receiver import Receiver

ROOT = Path(__file__).resolve().parents[2]
SOURCE = ROOT / "examples" / "asic-plugin" / "mini_plugin.c"
reader = _backend.reader
U64_MAX = 2**64 - 1
BINS = ((0, 0), (1, 1), (2, 3), (4, U64_MAX))  # the example's RS-FEC histogram
FREEZE = 12  # reads after which the example's values stop moving


def _build(out: Path, *defines: str) -> str:
    cmd = ["gcc", "-shared", "-fPIC", "-O1", "-Wall", "-Werror", "-I", str(Path(HEADER).parent),
           *defines, "-o", str(out), str(SOURCE)]
    subprocess.run(cmd, check=True, capture_output=True, text=True)
    out.chmod(0o755)
    return str(out)


@pytest.fixture(scope="module")
def plugins(tmp_path_factory):
    d = tmp_path_factory.mktemp("kinds")
    d.chmod(0o755)
    return {"1.1": _build(d / "mini.so"), "1.0": _build(d / "mini_10.so", "-DABI_1_0")}


def expected(k: int, port: int) -> dict[str, int]:
    """The example's values after ``k`` reads, by what they are."""
    out = {"octets": k * 1000 * (port + 1), "symbols": k * port, "qlen": (k % 2) * 10,
           "peak": (k * 37 + port) % 1000}
    for b in range(len(BINS)):
        out[f"bin{b}"] = k * (len(BINS) - b) * (port + 1)
    return out


def test_peak_and_histogram_layout_and_read(plugins):
    h = reader.asic_open(plugins["1.1"], "ports=2 kinds=1")
    try:
        gen, _ports, counters = reader.asic_layout(h)
        assert counters[0] == [("HwIfInOctets", 64, 0, 0, ()), ("phy_symbol_errors", 64, 0, 0, ()),
                               ("HwIfOutQLen", 64, 1, 0, ()), ("tc_peak_occupancy_3", 64, 3, 0, ()),
                               ("phy_rs_fec_histogram", 64, 2, 4, BINS)]
        out = array("Q", bytes(8 * 2 * 8))  # 4 values and 4 bins per port
        for k in (1, 2, 3):
            status, _ts = reader.asic_read(h, gen, out)
            assert status == 0
            want = []
            for p in range(2):
                e = expected(k, p)
                want += [e["octets"], e["symbols"], e["qlen"], e["peak"]] + [e[f"bin{b}"] for b in range(4)]
            assert out.tolist() == want
        # a buffer sized by descriptors, not by values: the plugin sees the wrong n
        assert reader.asic_read(h, gen, array("Q", bytes(8 * 2 * 5)))[0] == reader.ASIC_ECHANGED
    finally:
        reader.asic_close(h)


def test_a_1_0_plugin_loads_unchanged_and_cannot_declare_1_1_kinds(plugins):
    h = reader.asic_open(plugins["1.0"], "ports=2")
    try:
        gen, ports, counters = reader.asic_layout(h)
        assert [p[0] for p in ports] == ["p0", "p1"] and len(counters[0]) == 3
        out = array("Q", bytes(8 * 6))
        assert reader.asic_read(h, gen, out)[0] == 0 and out.tolist() == [1000, 0, 10, 2000, 1, 10]
    finally:
        reader.asic_close(h)
    h = reader.asic_open(plugins["1.0"], "ports=1 kinds=1")
    try:
        with pytest.raises(OSError, match=r"layout refused: port 'p0' counter 'tc_peak_occupancy_3': PEAK needs "
                                          r"ABI 1.1 \(the plugin was built against 1.0\)"):
            reader.asic_layout(h)
    finally:
        reader.asic_close(h)


def _config(tmp_path: Path, plugin: str, extra: str) -> str:
    return (
        "interval: 50ms\n"
        "target: kinds\n"
        "sources:\n"
        "  netdev: {enabled: false}\n  ethtool: {enabled: false}\n  system: {enabled: false}\n"
        f"  asic: {{enabled: true, plugin: {plugin}, config: 'ports=2 kinds=1 freeze={FREEZE}'}}\n"
        f"exporters:\n  jsonl: {{path: {tmp_path / 'out.jsonl'}}}\n{extra}"
        f"control: {{socket: {tmp_path / 'swtel.sock'}, group: null}}\n"
    )


def upper_boundary(b: int) -> int:
    """Cumulus' key of bin ``b``: its upper bound; the open last bin's lower bound."""
    low, high = BINS[b]
    return low if high == U64_MAX else high


def _paths(port: int) -> dict[str, str]:
    """The example's 1.1 counters by what they are -> their paths (docs/paths.md): the RS-FEC
    bins on Cumulus Linux 5.15's layout."""
    fec = f"/interfaces/interface[name=p{port}]/phy/histograms/state/rs-num-corr-err"
    out = {"peak": f"swtel:/qos/interfaces/interface[interface-id=p{port}]/output/queues/queue[name=3]/state/"
                   "peak-occupancy"}
    for b in range(len(BINS)):
        out[f"bin{b}"] = f"{fec}[upper-boundary={upper_boundary(b)}]/count"
    return out


def _want() -> dict[str, int]:
    return {path: expected(FREEZE, p)[what] for p in (0, 1) for what, path in _paths(p).items()}


@pytest.mark.parametrize("profile", ["cumulus", "otel"])
def test_peak_and_histogram_reach_every_exporter_exactly(plugins, tmp_path, profile):
    from agent.tools.collect import Collector

    collector = Collector("127.0.0.1:0", insecure=True, keep_messages=False).start()
    rx = Receiver().start()
    port = free_port()
    extra = (f"  dialout: [{{name: c, address: '127.0.0.1:{collector.port}', insecure: true}}]\n"
             f"  server: {{listen: '127.0.0.1:{port}', insecure: true}}\n"
             f"  otlp: {{endpoint: '{rx.address}', insecure: true, interval: 100ms, profile: {profile}}}\n")
    agent = AgentProcess(None, _config(tmp_path, plugins["1.1"], extra), tmp_path)
    want = _want()
    try:
        agent.wait_ready()
        # jsonl: every value the agent streamed is one the plugin gave at some read k, the
        # bins of one read together; the last is the frozen state
        def settled():
            last = {r["path"]: r["value"] for r in agent.records() if r.get("path") in want}
            return last == want and last
        agent.wait_for(settled, 20, "jsonl values at the frozen state")
        by_ts: dict[int, dict[str, int]] = {}
        for r in agent.records():
            if r.get("path") in want:
                by_ts.setdefault(r["ts"], {})[r["path"]] = r["value"]
        for values in by_ts.values():
            ks = set()
            for p in (0, 1):
                for b in range(len(BINS)):
                    v = values.get(_paths(p)[f"bin{b}"])
                    if v is not None:
                        assert v % ((len(BINS) - b) * (p + 1)) == 0, (b, p, v)
                        ks.add(v // ((len(BINS) - b) * (p + 1)))
            assert len(ks) <= 1, values  # one read's bins, never a mix
        # dial-out: the collector holds the same values
        assert collector.wait_for(lambda c: {p: v for p, v in c.values().items() if p in want} == want, 10), \
            {p: v for p, v in collector.values().items() if "p0" in p}
        # dial-in: pygnmi's Get of the histogram and the peak
        with gNMIclient(target=("127.0.0.1", port), insecure=True, timeout=10) as gc:
            got = gc.get(path=["/interfaces/interface[name=p1]/phy/histograms"], encoding="json")
            values = {f"{n.get('prefix', '')}/{u['path']}": u["val"] for n in got["notification"]
                      for u in n.get("update", [])}
            counts = {p: v for p, v in values.items() if p.endswith("/count")}
            assert len(counts) == len(BINS), values
            for b in range(len(BINS)):  # each bin's count and Cumulus' upper-boundary leaf beside it
                at = f"rs-num-corr-err[upper-boundary={upper_boundary(b)}]"
                assert [v for p, v in counts.items() if at in p] == [expected(FREEZE, 1)[f"bin{b}"]], values
                assert [v for p, v in values.items() if at in p and p.endswith("/upper-boundary")] == \
                    [upper_boundary(b)], values
        # OTLP
        name = "nvswitch_interface_phy_rs_fec_histogram"
        if profile == "cumulus":  # a gauge per bin, the attribute bin (its upper boundary)
            def otlp_ok(r):
                return all((pt := r.latest(name, interface=f"p{p}", bin=str(upper_boundary(b)))) is not None
                           and pt.value == expected(FREEZE, p)[f"bin{b}"] for p in (0, 1) for b in range(4))
            assert rx.wait_for(otlp_ok, 10), rx.series(name, interface="p0")[-4:]
            point = rx.latest(name, interface="p0", bin="0")
            assert point.kind == "gauge" and point.value_type == "as_double"
        else:  # one cumulative OTel Histogram per port, the bins' high bounds but the last
            def otlp_ok(r):
                return all((pt := r.latest(name, interface=f"p{p}")) is not None and list(pt.value) == [
                    expected(FREEZE, p)[f"bin{b}"] for b in range(4)] for p in (0, 1))
            assert rx.wait_for(otlp_ok, 10), rx.series(name, interface="p0")[-2:]
            point = rx.latest(name, interface="p1")
            assert point.kind == "histogram" and point.bounds == (0.0, 1.0, 3.0)
            assert point.temporality == 2 and 0 < point.start_ns <= point.time_ns  # cumulative
            assert "bin" not in point.attr
        peak = rx.latest("nvswitch_interface_shared_buffer_port_tc_peak_occupancy", interface="p1", tc="3")
        assert peak is not None and peak.kind == "gauge" and peak.value == expected(FREEZE, 1)["peak"]
    finally:
        assert agent.stop() == 0
        collector.stop(0)
        rx.stop()
