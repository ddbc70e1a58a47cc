"""The ASIC plugin ABI: the loader (both backends) against a minimal plugin built
here from examples/asic-plugin/mini_plugin.c (the plugin author's example), and the asic source in a running agent."""

from __future__ import annotations

import subprocess
import sys
from array import array
from pathlib import Path

import pytest

from agent import _backend
from agent.asic import HEADER
from agent.sources.asic import map_name
from tests.helpers import asic_yaml, sim_table, status_doc
from tests.namespaces import AgentProcess

ROOT = Path(__file__).resolve().parents[2]
SOURCE = ROOT / "examples" / "asic-plugin" / "mini_plugin.c"
reader = _backend.reader


def _build(out: Path, *defines: str) -> str:
    cmd = ["gcc", "-shared", "-fPIC", "-O1", "-Wall", "-Werror", "-I", str(Path(HEADER).parent),
           *defines, "-o", str(out), str(SOURCE)]
    subprocess.run(cmd, check=True, capture_output=True, text=True)
    return str(out)


@pytest.fixture(scope="module")
def plugins(tmp_path_factory):
    d = tmp_path_factory.mktemp("plugins")
    return {
        "ok": _build(d / "mini.so"),
        "abi99": _build(d / "mini_abi99.so", "-DABI_VERSION=99"),
        "noentry": _build(d / "mini_noentry.so", "-DNO_ENTRY"),
    }


def _read(h, gen: int, n: int) -> tuple[int, int, array]:
    out = array("Q", bytes(8 * n))
    status, ts = reader.asic_read(h, gen, out)
    return status, ts, out


def test_layout_and_bulk_read(plugins):
    h = reader.asic_open(plugins["ok"], "ports=3")
    try:
        gen, ports, counters = reader.asic_layout(h)
        assert gen == 3
        assert ports == [(f"p{i}", "", 100000, 1) for i in range(3)]
        assert counters == [[("HwIfInOctets", 64, 0, 0, ()), ("phy_symbol_errors", 64, 0, 0, ()),
                             ("HwIfOutQLen", 64, 1, 0, ())]] * 3
        for k in (1, 2):
            status, ts, out = _read(h, gen, 9)
            assert status == 0 and ts > 1.6e18
            assert out.tolist() == [v for p in range(3) for v in (k * 1000 * (p + 1), k * p, (k % 2) * 10)]
    finally:
        reader.asic_close(h)
    reader.asic_close(h)  # idempotent
    with pytest.raises(ValueError, match="closed"):
        reader.asic_layout(h)


def test_generation_change_is_reported_not_read(plugins):
    h = reader.asic_open(plugins["ok"], "ports=2 grow=2")
    try:
        gen, *_ = reader.asic_layout(h)
        assert _read(h, gen, 6)[0] == 0
        status, _ts, out = _read(h, gen, 6)  # the second read adds a port
        assert status == reader.ASIC_ECHANGED and not any(out)
        gen2, ports, _ = reader.asic_layout(h)
        assert gen2 != gen and [p[0] for p in ports] == ["p0", "p1", "p2"]
        assert _read(h, gen2, 9)[0] == 0
        assert _read(h, gen2, 6)[0] == reader.ASIC_ECHANGED  # wrong size: never written past
    finally:
        reader.asic_close(h)


@pytest.mark.parametrize("which,config,reason", [
    ("missing", "", "cannot load"),
    ("noentry", "", "not a swtel ASIC plugin: no symbol swtel_asic_plugin"),
    ("abi99", "", "ABI version 99, this swtel speaks 1"),
    ("ok", "fail=open", "open failed: mini: the ASIC is not responding"),
    ("ok", "colour=red", "open failed: mini: unknown key 'colour=red'"),
])
def test_open_errors_name_the_plugin_and_the_reason(plugins, tmp_path, which, config, reason):
    path = plugins.get(which, str(tmp_path / "nope.so"))
    with pytest.raises(OSError) as err:
        reader.asic_open(path, config)
    assert str(err.value).startswith(f"asic plugin {path}: ")
    assert reason in str(err.value)


def test_read_error_names_the_plugin(plugins):
    h = reader.asic_open(plugins["ok"], "fail=read")
    try:
        gen, *_ = reader.asic_layout(h)
        with pytest.raises(OSError, match=r"mini.so: read failed: mini: register read timed out"):
            _read(h, gen, 6)
    finally:
        reader.asic_close(h)


def test_names_map_through_the_driver_tables():
    cases = {
        "HwIfInOctets": "swtel:/interfaces/interface[name=swp1]/hw/state/counters/in-octets",
        "HwIfInDot3FrameErrors": "/interfaces/interface[name=swp1]/ethernet/state/counters/in-crc-errors",
        "HwIfInPfc3Pkt": "swtel:/interfaces/interface[name=swp1]/pfc/priority[id=3]/state/in-pause-pkts",
        "rx_pause_duration_prio_3": "swtel:/interfaces/interface[name=swp1]/pfc/priority[id=3]/state/in-pause-duration",
        "HwIfOutQ5WredDrops":
            "swtel:/qos/interfaces/interface[interface-id=swp1]/output/queues/queue[name=5]/state/wred-dropped-pkts",
        "phy_symbol_errors": "/interfaces/interface[name=swp1]/phy/state/symbol-errors",
        "phy_corrected_bits": "/interfaces/interface[name=swp1]/phy/fec/state/corrected-bits",
        "phy_raw_errors_lane7": "/interfaces/interface[name=swp1]/phy/channels/channel[id=7]/fec/state/raw-errors",
        "carrier_changes": "/interfaces/interface[name=swp1]/state/counters/carrier-transitions",
        "ecn_marked_tc_2":
            "/qos/interfaces/interface[interface-id=swp1]/output/queues/queue[name=2]/state/ecn-marked-pkts",
        "vendor_thing": "swtel:/interfaces/interface[name=swp1]/asic/vendor-thing",
    }
    for name, path in cases.items():
        container, leaf, _kind = map_name("swp1", name)
        assert container.full(leaf) == path, name
    container, leaf, _ = map_name("mlx5_0", "roce_adp_retrans", host=True)
    assert container.full(leaf) == ("swtel:/rdma/devices/device[name=mlx5_0]/ports/port[id=1]/hw-counters/"
                                    "roce-adp-retrans")


def test_a_spine_table_holds_one_container_and_one_leaf_string_per_path():
    """Memory a value (issue 35): the counters of one container share one Container object
    and one string per leaf name; 16,812 values on the simulated spine had 16,812 Containers
    for 9,196 paths and 1,384 strings for 44 leaf names."""
    specs = sim_table().specs
    assert len(specs) > 16_000
    assert len({id(s.container) for s in specs}) == len({s.container for s in specs}) < len(specs)
    assert len({id(s.leaf) for s in specs}) == len({s.leaf for s in specs}) < 100


def _config(tmp_path, plugin: str, asic_config: str, extra: str = "") -> str:
    return asic_yaml(tmp_path, plugin, asic_config, extra=extra)


def test_port_set_change_adds_and_deletes_subtrees(plugins, tmp_path):
    agent = AgentProcess(None, _config(tmp_path, plugins["ok"], "ports=2 grow=10 drop=30"), tmp_path)
    p2 = "/interfaces/interface[name=p2]/state/counters/in-octets"  # an ASIC-only port: its standard leaf
    try:
        agent.wait_ready()
        agent.wait_for(lambda: any(r.get("path") == p2 for r in agent.records()), what="port p2 added")
        # drop=30 takes the last port (p2) away again: one subtree delete per origin
        agent.wait_for(lambda: any(r.get("delete") and r["path"] == "/interfaces/interface[name=p2]"
                                   for r in agent.records()), what="port p2 deleted")
        asic = status_doc(tmp_path)["sources"]["asic"]
        assert asic["ports"] == 2 and asic["errors"] == 0 and asic["open"] is True
    finally:
        assert agent.stop() == 0
    records = agent.records()
    # The plugin's own deltas arrive exactly: p1's octets grow by 2000 per read.
    p1 = [r for r in records if r.get("path") == "/interfaces/interface[name=p1]/state/counters/in-octets"]
    assert p1 and all(r["delta"] % 2000 == 0 and r["delta"] > 0 for r in p1 if not r.get("new"))
    # The gauge goes up and down without ever being flagged a reset.
    qlen = [r for r in records if r.get("path", "").endswith("hw/state/counters/out-queue-length")]
    assert {r["value"] for r in qlen} == {0, 10} and not any(r.get("reset") for r in qlen)
    # Nothing about p2 after its delete.
    gone = max(i for i, r in enumerate(records) if r.get("delete") and r["path"] == "/interfaces/interface[name=p2]")
    assert not any("[name=p2]" in r.get("path", "") and not r.get("delete") for r in records[gone + 1:])


def test_broken_plugin_leaves_other_sources_running(tmp_path):
    bad = str(tmp_path / "missing-plugin.so")
    agent = AgentProcess(None, _config(tmp_path, bad, ""), tmp_path)
    try:
        agent.wait_ready()
        agent.wait_for(lambda: any("/system/" in r.get("path", "") for r in agent.records()),
                       what="system source values")
        doc = agent.wait_for(lambda: status_doc(tmp_path), what="status")
        asic = doc["sources"]["asic"]
        assert asic["open"] is False and asic["errors"] >= 1
        assert asic["last_error"] == f"asic plugin {bad}: no such file"
        assert doc["sources"]["system"]["reads"] > 0
        assert "asic plugin unavailable" in agent.log.read_text()
    finally:
        assert agent.stop() == 0


def test_the_example_kit_builds_and_loads_with_its_makefile(tmp_path):
    """examples/asic-plugin: `make` builds the plugin against the header, `make check` opens it
    with swtel's own loader (this backend) and prints its layout and one read."""
    import shutil

    kit = tmp_path / "kit"
    kit.mkdir(mode=0o755)
    for name in ("Makefile", "mini_plugin.c"):
        shutil.copy(ROOT / "examples" / "asic-plugin" / name, kit / name)
    env = {**__import__("os").environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.run(["make", "-C", str(kit), "check", f"PYTHON={sys.executable}"], env=env,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr + out.stdout
    assert "generation 2" in out.stdout and "('p0', '', 100000, 1)" in out.stdout
    assert "read 0 " in out.stdout and "[1000, 0, 10, 2000, 1, 10]" in out.stdout
    assert (kit / "mini_plugin.so").stat().st_mode & 0o022 == 0  # not group/other-writable
