"""Captured-style ``ethtool -S`` outputs (tests/fixtures/ethtool/) through the ethtool source.

Each fixture is one port's ``ethtool -S`` text: an mlx5 ConnectX port, an mlxsw Spectrum
port and a Cumulus switchd port. The test turns it into what the kernel would answer
(the driver name, a GSTRINGS and a GSTATS reply), parses those with the active backend's
own parsers, and runs the real EthtoolSource over them: its driver detection, name tables
(agent/sources/drivers.py), per-queue filter and path mapping. Specific counters must land
on specific paths with their values; the detectors and the OTLP names read them there.
"""

from __future__ import annotations

import struct
from pathlib import Path
from typing import Any

import pytest

from agent import _backend, config
from agent.counters import COUNTER, GAUGE, HIDDEN
from agent.exporters import otlp_names
from agent.insights.classify import classify
from agent.links import Link
from agent.sources.ethtool import EthtoolSource

pytestmark = pytest.mark.nolibs  # no versioned library decides its outcome: not in the Debian pass

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "ethtool"
ETH_GSTRING_LEN = 32  # a driver's counter name fits in 32 bytes (not always with a NUL)

#: fixture -> (interface name, driver as ETHTOOL_GDRVINFO names it)
PORTS = {
    "mlx5": ("enp65s0f0np0", "mlx5_core"),
    "mlxsw": ("swp3", "mlxsw_spectrum2"),
    "switchd": ("swp1", "mlx_sx_netdev"),  # not a table's driver: known by its HwIf* names
}


def parse_ethtool_s(text: str) -> list[tuple[str, int]]:
    """``ethtool -S`` text -> [(name, value)] in the driver's order."""
    lines = text.splitlines()
    assert lines[0] == "NIC statistics:", lines[0]
    out = []
    for line in lines[1:]:
        name, sep, value = line.strip().rpartition(": ")
        assert sep and name and line.startswith("     "), line
        out.append((name, int(value)))
    return out


def _gstrings(names: list[str]) -> bytes:
    """struct ethtool_gstrings as ETHTOOL_GSTRINGS fills it (cmd, string_set, len, data)."""
    head = struct.pack("=III", 0x1B, 1, len(names))
    return head + b"".join(n.encode().ljust(ETH_GSTRING_LEN, b"\0") for n in names)


def _gstats(values: list[int]) -> bytes:
    """struct ethtool_stats as ETHTOOL_GSTATS fills it (cmd, n_stats, data)."""
    return struct.pack(f"=II{len(values)}Q", 0x1D, len(values), *values)


class FixtureReader:
    """The backend's reader, but the kernel's answers come from one fixture: what the
    source asks and how the replies are parsed stay the backend's own."""

    def __init__(self, real: Any, driver: str, rows: list[tuple[str, int]]) -> None:
        self._real, self._driver, self._rows = real, driver, rows

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)

    def ethtool_drvinfo(self, fd: int, ifname: str) -> tuple[str, str, str, str, int]:
        return self._driver, "6.1.0", "22.39.1002", "0000:41:00.0", len(self._rows)

    def ethtool_strings(self, fd: int, ifname: str) -> list[str]:
        return self._real.ethtool_strings_parse(_gstrings([n for n, _ in self._rows]))

    def ethtool_read(self, fd: int, ifnames: list[bytes], counts, out, status, quiet=None,
                     sweep: int = 1, tick: int = 0) -> int:
        replies = [_gstats([v for _, v in self._rows]) for _ in ifnames]
        return self._real.ethtool_parse(replies, counts, out, status)


def stream(monkeypatch, fixture: str, per_queue: bool = False) -> dict[str, tuple[int, int]]:
    """Every counter the ethtool source builds for the fixture's port: display path ->
    (value after one read, kind)."""
    port, driver = PORTS[fixture]
    rows = parse_ethtool_s((FIXTURES / f"{fixture}.txt").read_text())
    monkeypatch.setattr(_backend, "reader", FixtureReader(_backend.reader, driver, rows))
    cfg = config.parse("interval: 100ms\nsources: {netdev: {enabled: false}, system: {enabled: false}, "
                       f"ethtool: {{per_queue: {str(per_queue).lower()}, idle_interval: 0s}}}}\n")
    src = EthtoolSource(cfg)
    try:
        src.setup({7: Link(7, port, "UP", True)})
        assert src.ports == [port] and src.read() == 1
        specs = src.table.specs
        assert len(specs) == len(rows)  # one counter per name, index-aligned with the values
        out = {s.container.full(s.leaf): (src.values[i], s.kind) for i, s in enumerate(specs)}
        assert len(out) == len(specs), "two names on one path"
        return out
    finally:
        src.close()


@pytest.mark.parametrize("fixture", sorted(PORTS))
def test_fixture_names_are_what_a_driver_can_give(fixture):
    rows = parse_ethtool_s((FIXTURES / f"{fixture}.txt").read_text())
    names = [n for n, _ in rows]
    assert len(set(names)) == len(names)
    assert all(0 < len(n.encode()) <= ETH_GSTRING_LEN and " " not in n for n in names)


def test_mlxsw_spectrum_port(monkeypatch):
    got = stream(monkeypatch, "mlxsw")
    eth = "/interfaces/interface[name=swp3]/ethernet/state/counters"
    pfc3 = "swtel:/interfaces/interface[name=swp3]/pfc/priority[id=3]/state"
    queue5 = "/qos/interfaces/interface[interface-id=swp3]/output/queues/queue[name=5]/state"
    raw = "swtel:/interfaces/interface[name=swp3]/ethtool"
    assert got[f"{pfc3}/in-octets"] == (6000000000124, COUNTER)  # rx_octets_prio_3
    assert got[f"{pfc3}/in-pkts"] == (4400000068, COUNTER)  # rx_frames_prio_3
    assert got[f"{pfc3}/out-octets"] == (5600000000116, COUNTER)  # tx_octets_prio_3
    assert got[f"{pfc3}/in-pause-pkts"] == (118802, COUNTER)
    assert got[f"{pfc3}/in-pause-duration"] == (15530217, COUNTER)
    assert got[f"{pfc3}/out-pause-duration"] == (402, COUNTER)
    assert got["swtel:/interfaces/interface[name=swp3]/pfc/priority[id=0]/state/in-octets"] == (
        1500000000031, COUNTER)
    assert got[f"{eth}/in-crc-errors"] == (6, COUNTER)  # a_frame_check_sequence_errors
    assert got[f"{eth}/in-symbol-error"] == (19, COUNTER)
    assert got[f"{eth}/in-mac-pause-frames"] == (118802, COUNTER)
    assert got[f"{eth}/out-mac-pause-frames"] == (3344, COUNTER)  # a_pause_mac_ctrl_frames_xmitted
    assert got[f"{eth}/in-oversize-frames"] == (2, COUNTER)
    assert got[f"swtel:{queue5}/transmit-queue-octets"] == (91392, GAUGE)  # a depth, not a count
    assert got[f"{queue5}/dropped-pkts"] == (733, COUNTER)  # tc_no_buffer_discard_uc_tc_5
    assert got[f"{raw}/a-octets-received-ok"] == (12010223344556, COUNTER)  # no table: raw
    assert got[f"{raw}/discard-ingress-vlan-membership"] == (4398, COUNTER)
    assert got[f"{raw}/ecn-marked"] == (552019, COUNTER)
    assert not [p for p, (_v, kind) in got.items() if kind == HIDDEN]  # no per-queue names here
    assert sum(1 for p in got if p.startswith("swtel:/qos/")) == 16  # tc 0..15


def test_mlx5_connectx_port(monkeypatch):
    got = stream(monkeypatch, "mlx5")
    port = "enp65s0f0np0"
    eth = f"/interfaces/interface[name={port}]/ethernet/state/counters"
    pfc3 = f"swtel:/interfaces/interface[name={port}]/pfc/priority[id=3]/state"
    raw = f"swtel:/interfaces/interface[name={port}]/ethtool"
    assert got[f"{pfc3}/in-octets"] == (400000001003, COUNTER)  # rx_prio3_bytes
    assert got[f"{pfc3}/out-pkts"] == (240001003, COUNTER)  # tx_prio3_packets
    assert got[f"{pfc3}/in-pause-pkts"] == (523311, COUNTER)
    assert got[f"{pfc3}/in-pause-duration"] == (80211433, COUNTER)  # not in-pause-pkts
    assert got[f"{pfc3}/out-pause-pkts"] == (7766, COUNTER)
    assert got[f"{pfc3}/out-pause-duration"] == (1198, COUNTER)
    assert got[f"{pfc3}/in-buffer-discards"] == (57, COUNTER)
    assert got[f"{pfc3}/in-congestion-discards"] == (12, COUNTER)
    assert got[f"{pfc3}/in-ecn-marked-pkts"] == (884210, COUNTER)
    assert got[f"{pfc3}/in-discards"] == (33, COUNTER)
    assert f"swtel:/interfaces/interface[name={port}]/pfc/priority[id=0]/state/in-pause-pkts" not in got
    assert got[f"{eth}/in-symbol-error"] == (41, COUNTER)  # rx_symbol_err_phy
    assert got[f"{eth}/in-crc-errors"] == (3, COUNTER)
    assert got[f"{eth}/in-mac-pause-frames"] == (523311, COUNTER)
    assert got[f"{eth}/out-mac-pause-frames"] == (7766, COUNTER)
    assert got[f"{raw}/rx-prio3-pause-transition"] == (261655, COUNTER)  # no table: raw
    assert got[f"{raw}/rx-corrected-bits-phy"] == (2207, COUNTER)
    assert got[f"{raw}/link-down-events-phy"] == (2, COUNTER)
    assert got[f"{raw}/rx-bytes"] == (61893344270115, COUNTER)
    # per-channel and per-queue counters are read (one layout) but not reported by default
    hidden = sorted(p.rpartition("/")[2] for p, (_v, kind) in got.items() if kind == HIDDEN)
    assert hidden == sorted([f"ch{c}-{x}" for c in range(2) for x in ("events", "poll", "arm")]
                            + [f"rx{q}-{x}" for q in range(2) for x in ("packets", "bytes", "csum-complete")]
                            + [f"tx{q}-{x}" for q in range(2) for x in ("packets", "bytes", "nop")])
    assert got[f"{raw}/rx0-packets"] == (24106988551, HIDDEN)


def test_mlx5_per_queue_reports_the_channels(monkeypatch):
    got = stream(monkeypatch, "mlx5", per_queue=True)
    raw = "swtel:/interfaces/interface[name=enp65s0f0np0]/ethtool"
    assert got[f"{raw}/rx1-packets"] == (24106988552, COUNTER)
    assert got[f"{raw}/ch0-events"] == (99887766, COUNTER)
    assert not [p for p, (_v, kind) in got.items() if kind == HIDDEN]


def test_cumulus_switchd_port(monkeypatch):
    got = stream(monkeypatch, "switchd")
    hw = "swtel:/interfaces/interface[name=swp1]/hw/state/counters"
    eth = "/interfaces/interface[name=swp1]/ethernet/state/counters"
    pfc3 = "swtel:/interfaces/interface[name=swp1]/pfc/priority[id=3]/state"
    raw = "swtel:/interfaces/interface[name=swp1]/ethtool"
    assert got[f"{hw}/in-octets"] == (7302211040593, COUNTER)  # HwIfInOctets
    assert got[f"{hw}/out-octets"] == (6911028830107, COUNTER)
    assert got[f"{hw}/in-ucast-pkts"] == (5120044128, COUNTER)
    assert got[f"{hw}/in-l3-drops"] == (2210, COUNTER)
    assert got[f"{hw}/in-buffer-drops"] == (55, COUNTER)
    assert got[f"{hw}/out-q-drops"] == (801, COUNTER)
    assert got[f"{hw}/out-queue-length"] == (42, GAUGE)  # HwIfOutQLen is a level
    assert got[f"{eth}/in-crc-errors"] == (4, COUNTER)  # HwIfInDot3FrameErrors
    assert got[f"{eth}/in-mac-pause-frames"] == (0, COUNTER)  # HwIfInPausePkt
    assert got[f"{pfc3}/in-pause-pkts"] == (772190, COUNTER)  # HwIfInPfc3Pkt
    assert got[f"{pfc3}/out-pause-pkts"] == (9120, COUNTER)
    queue3 = "swtel:/qos/interfaces/interface[interface-id=swp1]/output/queues/queue[name=3]/state"
    assert got[f"{queue3}/wred-dropped-pkts"] == (377, COUNTER)  # HwIfOutQ3WredDrops
    assert got[f"{raw}/soft-in-drops"] == (19, COUNTER)  # Soft*: no table, raw
    # 50 HwIf* names: 3 Ethernet, 16 PFC, 10 per-queue WRED, the other 21 under hw/
    assert sum(1 for p in got if p.startswith(f"{hw}/")) == 21


@pytest.mark.parametrize("fixture,path,want", [
    ("switchd", "swtel:/interfaces/interface[name=swp1]/hw/state/counters/in-octets", ("swp1", "rx-octets", "")),
    ("switchd", "swtel:/interfaces/interface[name=swp1]/hw/state/counters/in-buffer-drops",
     ("swp1", "drops-in", "in-buffer-drops")),
    ("mlxsw", "swtel:/interfaces/interface[name=swp3]/pfc/priority[id=3]/state/in-pause-duration",
     ("swp3", "pfc-duration", "3")),
    ("mlxsw", "/qos/interfaces/interface[interface-id=swp3]/output/queues/queue[name=5]/state/dropped-pkts",
     ("swp3", "drops-out", "queue-dropped-pkts")),
    ("mlx5", "/interfaces/interface[name=enp65s0f0np0]/ethernet/state/counters/in-symbol-error",
     ("enp65s0f0np0", "symbol-errors", "in-symbol-error")),
])
def test_the_detectors_read_the_fixture_counters(monkeypatch, fixture, path, want):
    port, driver = PORTS[fixture]
    rows = parse_ethtool_s((FIXTURES / f"{fixture}.txt").read_text())
    monkeypatch.setattr(_backend, "reader", FixtureReader(_backend.reader, driver, rows))
    src = EthtoolSource(config.parse("sources: {netdev: {enabled: false}, system: {enabled: false}}\n"))
    try:
        src.setup({7: Link(7, port, "UP", True)})
        spec = next(s for s in src.table.specs if s.container.full(s.leaf) == path)
        assert classify(spec) == want
    finally:
        src.close()


def test_otlp_names_of_switchd_and_mlxsw_counters(monkeypatch):
    """switchd's HwIfInOctets outranks the kernel's in-octets under one Cumulus name."""
    got = stream(monkeypatch, "switchd")
    path = "swtel:/interfaces/interface[name=swp1]/hw/state/counters/in-octets"
    assert path in got
    assert otlp_names.for_path(path) == ("nvswitch_interface_ether_stats_octets", (("interface", "swp1"),), 2)
    pause = "swtel:/interfaces/interface[name=swp3]/pfc/priority[id=3]/state/in-pause-duration"
    assert pause in stream(monkeypatch, "mlxsw")
    assert otlp_names.for_path(pause) == ("nvswitch_interface_sp_rx_pause_duration",
                                          (("interface", "swp3"), ("priority", "3")), 1)
