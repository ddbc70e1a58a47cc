"""Driver name tables: a counter's name as a driver (or switchd, or an ASIC plugin) gives
it -> its container, leaf and kind. Shared by the ethtool source and the asic source (a
plugin that names counters as switchd or mlxsw does lands on the same paths), and
rendered into docs/paths.md by agent/pathdoc.py. Not a source itself.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from agent.counters import COUNTER, GAUGE, OPENCONFIG, SWTEL_ORIGIN, Container
from agent.pathgrammar import escape_key, interface_path, qos_interface_path
from agent.sources.base import leaf_name

MACHINERY = True  # shared by the sources, not a plugin (agent/registry.py load_plugins)

# Containers, by short name; {port} (filled escaped) and {n} are filled per counter.
_IF = interface_path("{port}")
_QUEUES = qos_interface_path("{port}") + "/output/queues/queue[name={n}]/state"
ETH = (OPENCONFIG, f"{_IF}/ethernet/state/counters")
PFC = (SWTEL_ORIGIN, f"{_IF}/pfc/priority[id={{n}}]/state")
QUEUE = (OPENCONFIG, _QUEUES)
SWQUEUE = (SWTEL_ORIGIN, _QUEUES)
HW = (SWTEL_ORIGIN, f"{_IF}/hw/state/counters")
RAW = (SWTEL_ORIGIN, f"{_IF}/ethtool")


@dataclass(frozen=True)
class Rule:
    pattern: re.Pattern[str]
    container: tuple[str, str]
    leaf: str  # may use {n}
    kind: int = COUNTER


def rules(*rows: tuple) -> list[Rule]:
    return [Rule(re.compile(f"^{p}$"), c, leaf, *rest) for p, c, leaf, *rest in rows]


# Cumulus Linux switchd (swpN). HwIf* duplicates the kernel's interface counters
# under the hardware path, so netdev keeps OpenConfig's state/counters.
SWITCHD = rules(
    (r"HwIfInPausePkt", ETH, "in-mac-pause-frames"),
    (r"HwIfOutPausePkt", ETH, "out-mac-pause-frames"),
    (r"HwIfInDot3FrameErrors", ETH, "in-crc-errors"),
    (r"HwIfInPfc(?P<n>[0-7])Pkt", PFC, "in-pause-pkts"),
    (r"HwIfOutPfc(?P<n>[0-7])Pkt", PFC, "out-pause-pkts"),
    (r"HwIfOutQ(?P<n>\d)WredDrops", SWQUEUE, "wred-dropped-pkts"),
    (r"HwIfOutQLen", HW, "out-queue-length", GAUGE),
    (r"HwIf(?P<name>\w+)", HW, "{name}"),
)

#: The hardware counters (leaf below ``hw/state/counters``) that are an interface's
#: OpenConfig ``state/counters`` leaf, counted by the switch: ``HwIfInOctets`` is the
#: kernel's ``rx_bytes``. The same pairing as the OTLP names (agent/exporters/otlp_names.py
#: HW and STATE give each pair one metric name; tests/unit/test_standard_paths.py holds them
#: together). Where two sources give one of these for a port, the engine elects the one
#: the standard leaf carries (agent/ports.py ``elect``).
HW_STANDARD: dict[str, str] = {
    "in-octets": "in-octets",
    "in-ucast-pkts": "in-unicast-pkts",
    "in-mcast-pkts": "in-multicast-pkts",
    "in-bcast-pkts": "in-broadcast-pkts",
    "in-discards": "in-discards",
    "in-errors": "in-errors",
    "out-octets": "out-octets",
    "out-ucast-pkts": "out-unicast-pkts",
    "out-mcast-pkts": "out-multicast-pkts",
    "out-bcast-pkts": "out-broadcast-pkts",
    "out-discards": "out-discards",
    "out-errors": "out-errors",
}

# mlxsw (Spectrum, upstream driver: spectrum_ethtool.c).
MLXSW = rules(
    (r"a_frame_check_sequence_errors", ETH, "in-crc-errors"),
    (r"a_symbol_error_during_carrier", ETH, "in-symbol-error"),
    (r"a_pause_mac_ctrl_frames_received", ETH, "in-mac-pause-frames"),
    (r"a_pause_mac_ctrl_frames_transmitted", ETH, "out-mac-pause-frames"),
    (r"a_pause_mac_ctrl_frames_xmitted", ETH, "out-mac-pause-frames"),
    (r"ether_stats_undersize_pkts", ETH, "in-undersize-frames"),
    (r"ether_stats_oversize_pkts", ETH, "in-oversize-frames"),
    (r"ether_stats_fragments", ETH, "in-fragment-frames"),
    (r"ether_stats_jabbers", ETH, "in-jabber-frames"),
    (r"rx_octets_prio_(?P<n>[0-7])", PFC, "in-octets"),
    (r"rx_frames_prio_(?P<n>[0-7])", PFC, "in-pkts"),
    (r"tx_octets_prio_(?P<n>[0-7])", PFC, "out-octets"),
    (r"tx_frames_prio_(?P<n>[0-7])", PFC, "out-pkts"),
    (r"rx_pause_prio_(?P<n>[0-7])", PFC, "in-pause-pkts"),
    (r"tx_pause_prio_(?P<n>[0-7])", PFC, "out-pause-pkts"),
    (r"rx_pause_duration_prio_(?P<n>[0-7])", PFC, "in-pause-duration"),
    (r"tx_pause_duration_prio_(?P<n>[0-7])", PFC, "out-pause-duration"),
    (r"tc_transmit_queue_tc_(?P<n>\d+)", SWQUEUE, "transmit-queue-octets", GAUGE),
    (r"tc_no_buffer_discard_uc_tc_(?P<n>\d+)", QUEUE, "dropped-pkts"),
)

# mlx5 (ConnectX NICs, BlueField).
MLX5 = rules(
    (r"rx_prio(?P<n>[0-7])_bytes", PFC, "in-octets"),
    (r"rx_prio(?P<n>[0-7])_packets", PFC, "in-pkts"),
    (r"rx_prio(?P<n>[0-7])_pause", PFC, "in-pause-pkts"),
    (r"rx_prio(?P<n>[0-7])_pause_duration", PFC, "in-pause-duration"),
    (r"rx_prio(?P<n>[0-7])_buf_discard", PFC, "in-buffer-discards"),
    (r"rx_prio(?P<n>[0-7])_cong_discard", PFC, "in-congestion-discards"),
    (r"rx_prio(?P<n>[0-7])_marked", PFC, "in-ecn-marked-pkts"),
    (r"rx_prio(?P<n>[0-7])_discards", PFC, "in-discards"),
    (r"tx_prio(?P<n>[0-7])_bytes", PFC, "out-octets"),
    (r"tx_prio(?P<n>[0-7])_packets", PFC, "out-pkts"),
    (r"tx_prio(?P<n>[0-7])_pause", PFC, "out-pause-pkts"),
    (r"tx_prio(?P<n>[0-7])_pause_duration", PFC, "out-pause-duration"),
    (r"rx_symbol_err_phy", ETH, "in-symbol-error"),
    (r"rx_crc_errors_phy", ETH, "in-crc-errors"),
    (r"rx_undersize_pkts_phy", ETH, "in-undersize-frames"),
    (r"rx_oversize_pkts_phy", ETH, "in-oversize-frames"),
    (r"rx_fragments_phy", ETH, "in-fragment-frames"),
    (r"rx_jabbers_phy", ETH, "in-jabber-frames"),
    (r"rx_pause_ctrl_phy", ETH, "in-mac-pause-frames"),
    (r"tx_pause_ctrl_phy", ETH, "out-mac-pause-frames"),
)

# Values that are levels, not counters (a drop is not a reset); shared by all drivers.
GENERIC = rules(
    (r"peer_ifindex", RAW, "peer-ifindex", GAUGE),
)

#: driver name (ETHTOOL_GDRVINFO) -> rule table
TABLES: dict[str, list[Rule]] = {
    "mlxsw_spectrum": MLXSW,
    "mlxsw_spectrum2": MLXSW,
    "mlxsw_spectrum3": MLXSW,
    "mlxsw_spectrum4": MLXSW,
    "mlx5_core": MLX5,
}


# Per-queue / per-channel counters (mlx5 has thousands): off unless per_queue: true.
PER_QUEUE = re.compile(r"^(?:(?:rx|tx)\d+_|ch\d+_|(?:rx|tx)_queue_\d+_|queue_\d+_|.*_q\d+_)")


def table_for(driver: str, names: list[str]) -> list[Rule]:
    """The rule table for a port; switchd's ports are known by their HwIf* names."""
    if driver in TABLES:
        return TABLES[driver]
    if "HwIfInOctets" in names:
        return SWITCHD
    return []


def map_name(rules: list[Rule], port: str, name: str,
             raw: tuple[str, str] = RAW) -> tuple[Container, str, int]:
    """Counter name -> (container, leaf, kind); unknown names go to the ``raw`` path."""
    for rule in rules + GENERIC:
        m = rule.pattern.match(name)
        if m:
            groups = m.groupdict()
            leaf = rule.leaf.format(name=leaf_name(groups.get("name") or ""), n=groups.get("n", ""))
            origin, path = rule.container
            key = escape_key(port)
            return Container(origin, path.format(port=key, n=groups.get("n", ""))), leaf, rule.kind
    origin, path = raw
    return Container(origin, path.format(port=escape_key(port))), leaf_name(name), COUNTER
