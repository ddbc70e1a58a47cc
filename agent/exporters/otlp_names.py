"""swtel's paths -> the metric names and attributes of Cumulus Linux's OTLP export.

Cumulus (5.15+, "Open Telemetry Export") sends every interface value as an OTel gauge
named ``nvswitch_interface_<counter>`` with the attribute ``interface`` (plus ``tc`` for
a traffic class, ``priority`` for a switch priority). A counter is recognised by the
shape of its container path below the port, whatever its origin or source (the same
idea as agent/insights/classify.py), so the netdev, ethtool and asic sources all land
on the same names. Counters Cumulus does not export get names in the same style
(``nvswitch_interface_<group>_<leaf>``); values outside an interface get ``swtel_``
names. docs/paths.md has the table (rendered from :data:`SHAPES` by agent/pathdoc.py).

Checked against Cumulus Linux 5.19's list (:data:`SOURCE_519`): every name of the tables
below is either in :data:`CUMULUS_519` (found in that page's tables) or swtel's own in
Cumulus' style (:data:`SWTEL_OWN`, with why); the names Cumulus 5.15 deprecated
(:data:`DEPRECATED`) are never sent. A test holds all three to the tables.

No protobuf here: the OTLP exporter, ``swtel collect --prometheus`` and the docs share it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from agent import registry
from agent.pathgrammar import (
    FEC_HISTOGRAM_LIST,
    KEY_VALUE_RE,
    bin_of_count,
    interface_path,
    qos_interface_path,
    unescape_key,
)

MACHINERY = True  # shared by OTLP and remote write, not a plugin (agent/registry.py load_plugins)

PREFIX = "nvswitch_interface_"
_KEY = f"({KEY_VALUE_RE})"  # a key value as it stands in a path string (escaped)


@dataclass(frozen=True)
class Shape:
    """One container shape: its path pattern, the attributes its keys become, the names
    of its leaves (Cumulus' where Cumulus has them) and a default for other leaves."""

    title: str
    pattern: re.Pattern[str]
    attrs: tuple[str, ...]  # attribute names of the pattern's groups, in order
    leaves: dict[str, str]  # leaf -> metric name
    default: str  # metric name of any other leaf: "{leaf}" is the leaf with "_" for "-"
    #: when two sources give one metric of one port (the kernel's in-octets and switchd's
    #: HwIfInOctets on a Cumulus switch), the higher rank is exported
    rank: int = 1
    doc_path: str = ""  # the container as docs/paths.md shows it


def _shape(title: str, path: str, attrs: tuple[str, ...], leaves: dict[str, str], default: str,
           rank: int = 1) -> Shape:
    """``path`` with ``{X}`` for each key value, in the order of ``attrs``."""
    regex = "^" + re.escape(path).replace(re.escape("{X}"), _KEY) + "$"
    doc = path
    for name in attrs:
        doc = doc.replace("{X}", {"interface": "X", "tc": "N", "priority": "N", "lane": "N", "pg": "N",
                                  "sb": "S", "pool": "P", "port": "P", "group": "G", "reason": "R"}.get(name, "D"), 1)
    return Shape(title, re.compile(regex), attrs, leaves, default, rank, doc)


_IF = interface_path("{X}")
_Q = qos_interface_path("{X}") + "/output/queues/queue[name={X}]/state"
_PG = qos_interface_path("{X}") + "/input/priority-groups/priority-group[name={X}]/state"
_SB = f"{_IF}/devlink/sb[index={{X}}]"  # devlink's shared buffer N of a port

#: Interface counters (OpenConfig state/counters: the kernel's, carrier changes).
STATE = {
    "in-octets": PREFIX + "ether_stats_octets",
    "in-pkts": PREFIX + "ether_stats_pkts",
    "in-unicast-pkts": PREFIX + "if_in_ucast_pkts",
    # Cumulus 5.15 retired if_in_multicast_pkts and if_in_broadcast_pkts for these (DEPRECATED)
    "in-multicast-pkts": PREFIX + "ether_stats_multicast_pkts",
    "in-broadcast-pkts": PREFIX + "ether_stats_broadcast_pkts",
    "in-discards": PREFIX + "if_in_discards",
    "in-errors": PREFIX + "if_in_errors",
    "in-fcs-errors": PREFIX + "dot3_stats_fcs_errors",
    "out-octets": PREFIX + "if_out_octets",
    "out-pkts": PREFIX + "if_out_pkts",
    "out-unicast-pkts": PREFIX + "if_out_ucast_pkts",
    "out-multicast-pkts": PREFIX + "if_out_multicast_pkts",
    "out-broadcast-pkts": PREFIX + "if_out_broadcast_pkts",
    "out-discards": PREFIX + "if_out_discards",
    "out-errors": PREFIX + "if_out_errors",
    "carrier-transitions": PREFIX + "carrier_changes_total",
}

#: Cumulus switchd's HwIf* counters (swtel:.../hw/state/counters, leaf = name after HwIf).
HW = {
    "in-octets": PREFIX + "ether_stats_octets",
    "in-ucast-pkts": PREFIX + "if_in_ucast_pkts",
    "in-mcast-pkts": PREFIX + "ether_stats_multicast_pkts",
    "in-bcast-pkts": PREFIX + "ether_stats_broadcast_pkts",
    "in-discards": PREFIX + "if_in_discards",
    "in-errors": PREFIX + "if_in_errors",
    "out-octets": PREFIX + "if_out_octets",
    "out-ucast-pkts": PREFIX + "if_out_ucast_pkts",
    "out-mcast-pkts": PREFIX + "if_out_multicast_pkts",
    "out-bcast-pkts": PREFIX + "if_out_broadcast_pkts",
    "out-discards": PREFIX + "if_out_discards",
    "out-errors": PREFIX + "if_out_errors",
}

ETHERNET = {
    "in-crc-errors": PREFIX + "dot3_stats_fcs_errors",
    "in-symbol-error": PREFIX + "dot3_stats_symbol_errors",
    "in-mac-pause-frames": PREFIX + "dot3_in_pause_frames",
    "out-mac-pause-frames": PREFIX + "dot3_out_pause_frames",
    "in-undersize-frames": PREFIX + "ether_stats_undersize_pkts",
    "in-oversize-frames": PREFIX + "ether_stats_oversize_pkts",
    "in-fragment-frames": PREFIX + "ether_stats_fragments",
    "in-jabber-frames": PREFIX + "ether_stats_jabbers",
}

#: Per switch priority (attribute ``priority``). Cumulus 5.15 retired sp_rx_octets,
#: sp_rx_frames, sp_tx_octets and sp_tx_frames (DEPRECATED): swtel's per-priority octets and
#: packets take the shape's default (``sp_in_octets`` ...), never a name Cumulus retired.
PRIORITY = {
    "in-pause-pkts": PREFIX + "sp_rx_pause",
    "in-pause-duration": PREFIX + "sp_rx_pause_duration",
    "out-pause-pkts": PREFIX + "sp_tx_pause",
    "out-pause-duration": PREFIX + "sp_tx_pause_duration",
}

#: Per traffic class (attribute ``tc``): counters, and the egress buffer of the TC.
TC = {
    "transmit-pkts": PREFIX + "tc_tx_frames",
    "transmit-uc-pkts": PREFIX + "tc_tx_uc_frames",
    "transmit-octets": PREFIX + "tc_tx_octet",
    "wred-dropped-pkts": PREFIX + "tc_tx_wred_discard",
    "ecn-marked-pkts": PREFIX + "tc_tx_ecn_marked_tc",
    "dropped-pkts": PREFIX + "tc_tx_no_buffer_discard_uc",
    # mlxsw's tc_transmit_queue_tc_N, Cumulus' gNMI instant-queue-len: the queue's depth now
    "instant-queue-len": PREFIX + "tc_tx_queue",
    "current-occupancy": PREFIX + "shared_buffer_port_tc_curr_occupancy",
    # the highest level since the last clear (Cumulus' meaning): the ASIC's own watermark
    "watermark": PREFIX + "shared_buffer_port_tc_watermark",
    # swtel's PEAK, the highest level since the previous read: its own name (docs/otlp.md)
    "peak-occupancy": PREFIX + "shared_buffer_port_tc_peak_occupancy",
}

#: Per ingress priority group (attribute ``pg``): no source has these paths yet (the
#: simulator's PG model will); the names are ready. Shared buffer and headroom apart.
PG = {
    "in-pkts": PREFIX + "pg_rx_frames",
    "in-octets": PREFIX + "pg_rx_octet",
    "current-occupancy": PREFIX + "shared_buffer_port_pg_curr_occupancy",
    "watermark": PREFIX + "shared_buffer_port_pg_watermark",
    "peak-occupancy": PREFIX + "shared_buffer_port_pg_peak_occupancy",
    "headroom-occupancy": PREFIX + "headroom_buffer_pg_curr_occupancy",
    "headroom-watermark": PREFIX + "headroom_buffer_pg_watermark",
    "headroom-peak-occupancy": PREFIX + "headroom_buffer_pg_peak_occupancy",
}


def _devlink(kind: str) -> dict[str, str]:
    """devlink's per-port buffer leaves (agent/sources/devlink*.py): ``occupancy`` is the
    level at the snapshot, ``peak-occupancy`` the maximum since the previous poll's clear."""
    return {"occupancy": f"{PREFIX}shared_buffer_port_{kind}_curr_occupancy",
            "peak-occupancy": f"{PREFIX}shared_buffer_port_{kind}_peak_occupancy"}

PHY = {
    "received-bits": PREFIX + "phy_stats_phy_received_bits",
    "symbol-errors": PREFIX + "phy_stats_phy_symbol_errors",
    "effective-errors": PREFIX + "phy_stats_phy_effective_errors",
    "raw-errors": PREFIX + "phy_stats_phy_raw_errors",
}
#: the PHY's RS-FEC histogram leaf: the name of its bins on Cumulus' layout too (histogram_bin)
FEC_HISTOGRAM = "rs-fec-histogram"
PHY_FEC = {"corrected-bits": PREFIX + "phy_stats_phy_corrected_bits",
           FEC_HISTOGRAM: PREFIX + "phy_rs_fec_histogram"}
PHY_BER = {
    "raw-ber": PREFIX + "phy_stats_raw_ber",
    "symbol-ber": PREFIX + "phy_stats_symbol_ber",
    "effective-ber": PREFIX + "phy_stats_effective_ber",
}
#: insights.link_degrading's gauges (agent/insights/link_degrading.py, swtel's origin): Cumulus
#: has no prediction, so these are swtel's, in the style of its PHY BER gauges
PHY_PREDICTION = {
    "predicted-flr": PREFIX + "phy_stats_predicted_flr",
    "observed-cer": PREFIX + "phy_stats_observed_cer",
    "fit-r2": PREFIX + "phy_stats_fec_fit_r2",
    "max-bin": PREFIX + "phy_stats_fec_max_bin",
}
#: ... of one lane (a port reporting its lanes' histograms): the same names with ``_lane`` and the
#: attribute lane, as phy_stats_phy_raw_errors_lane, so that a query over the port's figures
#: (its worst lane's) does not also see each lane's
PHY_LANE_PREDICTION = {leaf: name + "_lane" for leaf, name in PHY_PREDICTION.items()}
#: every name of link_degrading's gauges (the port's and the lanes')
PREDICTION_NAMES = frozenset(PHY_PREDICTION.values()) | frozenset(PHY_LANE_PREDICTION.values())

#: the insights pipeline's open events by severity (agent/sources/events.py): the agent's own, not the device's
OPEN_EVENTS = "swtel_insights_open_events"

#: one drop reason of a port (agent/pathgrammar.drop_reason_path), of a devlink device (its traps)
_DROP_TAIL = "/drops/group[name={X}]/reason[name={X}]/state"
_DROPS = f"{_IF}{_DROP_TAIL}"
_DEVLINK_DROPS = "/devlink/devices/device[name={X}]" + _DROP_TAIL
#: every drop reason of a port: one metric, the group and reason as attributes (swtel's own)
DROPS = {"packets": PREFIX + "drops_reason_packets"}
#: devlink's traps count per device, not per port: not an ``nvswitch_interface_`` name
DEVLINK_DROPS = {"packets": "swtel_devlink_drops_reason_packets", "bytes": "swtel_devlink_drops_reason_bytes"}
#: (group, reason) of a port's drop reason -> the discard counter Cumulus 5.19 exports for it
#: (its "Interface Statistics" table); these reasons take that name instead of DROPS' (still
#: with the attributes ``group`` and ``reason``, so that one query sees every reason). The
#: reason names are devlink's traps kebab-cased (What Just Happened's where devlink has none).
DISCARDS = {
    ("l2", "ingress-vlan-filter"): PREFIX + "discards_ingress_vlan_membership",
    ("l2", "vlan-tag-mismatch"): PREFIX + "discards_ingress_tag_frame_type",
    ("l2", "egress-vlan-filter"): PREFIX + "discards_egress_vlan_membership",
    ("l2", "port-loopback-filter"): PREFIX + "discards_loopback_filter",
    ("l2", "egress-spanning-tree-filter"): PREFIX + "discards_egress_stp_filter",
    # to a port whose link is down (the simulated switch's l1 reason; mlxsw's discard_ingress_tx_link_down)
    ("l1", "link-down"): PREFIX + "discards_ingress_tx_link_down",
    # the ACLs (Cumulus' "policy engine"): devlink's flow actions, as the simulated switch names them
    ("acl", "ingress-flow-action-drop"): PREFIX + "discards_ingress_policy_engine",
    ("acl", "egress-flow-action-drop"): PREFIX + "discards_egress_policy_engine",
    ("buffer", "head-of-queue-timeout"): PREFIX + "discards_egress_hoq",
}

SHAPES: list[Shape] = [
    _shape("interface counters", f"{_IF}/state/counters", ("interface",), STATE,
           PREFIX + "{leaf}"),
    _shape("Cumulus switchd (HwIf*)", f"{_IF}/hw/state/counters", ("interface",), HW,
           PREFIX + "hw_{leaf}", rank=2),
    _shape("Ethernet", f"{_IF}/ethernet/state/counters", ("interface",), ETHERNET,
           PREFIX + "ethernet_{leaf}", rank=2),
    _shape("switch priority (PFC)", f"{_IF}/pfc/priority[id={{X}}]/state", ("interface", "priority"),
           PRIORITY, PREFIX + "sp_{leaf}"),
    _shape("traffic class (and its egress buffer)", _Q, ("interface", "tc"), TC, PREFIX + "tc_{leaf}"),
    _shape("ingress priority group", _PG, ("interface", "pg"), PG, PREFIX + "pg_{leaf}"),
    _shape("devlink egress TC buffer", f"{_SB}/tc[index={{X}}][type=egress]/state", ("interface", "sb", "tc"),
           _devlink("tc"), PREFIX + "devlink_tc_{leaf}"),
    _shape("devlink ingress TC (priority group) buffer", f"{_SB}/tc[index={{X}}][type=ingress]/state",
           ("interface", "sb", "pg"), _devlink("pg"), PREFIX + "devlink_pg_{leaf}"),
    _shape("devlink ingress pool, per port", f"{_SB}/pool[index={{X}}][type=ingress]/state",
           ("interface", "sb", "pool"), _devlink("ingress_pool"), PREFIX + "devlink_pool_{leaf}"),
    _shape("devlink egress pool, per port", f"{_SB}/pool[index={{X}}][type=egress]/state",
           ("interface", "sb", "pool"), _devlink("egress_pool"), PREFIX + "devlink_pool_{leaf}"),
    _shape("devlink pool of unknown direction, per port", f"{_SB}/pool[index={{X}}]/state",
           ("interface", "sb", "pool"), _devlink("pool"), PREFIX + "devlink_pool_{leaf}"),
    _shape("PHY", f"{_IF}/phy/state", ("interface",), PHY, PREFIX + "phy_stats_{leaf}", rank=2),
    _shape("PHY FEC", f"{_IF}/phy/fec/state", ("interface",), PHY_FEC,
           PREFIX + "phy_stats_fec_{leaf}", rank=2),
    _shape("PHY BER", f"{_IF}/phy/ber/state", ("interface",), PHY_BER,
           PREFIX + "phy_stats_{leaf}", rank=2),
    _shape("PHY lane", f"{_IF}/phy/channels/channel[id={{X}}]/fec/state", ("interface", "lane"),
           {"raw-errors": PREFIX + "phy_stats_phy_raw_errors_lane"}, PREFIX + "phy_stats_lane_{leaf}",
           rank=2),
    _shape("PHY FEC prediction (insights.link_degrading)", f"{_IF}/phy/fec/prediction/state", ("interface",),
           PHY_PREDICTION, PREFIX + "phy_stats_fec_prediction_{leaf}"),
    _shape("PHY FEC prediction of a lane (insights.link_degrading)",
           f"{_IF}/phy/channels/channel[id={{X}}]/fec/prediction/state", ("interface", "lane"),
           PHY_LANE_PREDICTION, PREFIX + "phy_stats_fec_prediction_{leaf}_lane"),
    _shape("drop reason of a port (Cumulus' discard name where it has one: DISCARDS)", _DROPS,
           ("interface", "group", "reason"), DROPS, PREFIX + "drops_reason_{leaf}"),
    _shape("drop reason (packet trap) of a devlink device", _DEVLINK_DROPS, ("device", "group", "reason"),
           DEVLINK_DROPS, "swtel_devlink_drops_reason_{leaf}"),
    _shape("kernel extras (netdev)", f"{_IF}/netdev", ("interface",), {}, PREFIX + "netdev_{leaf}"),
    _shape("driver counters no table knows (ethtool)", f"{_IF}/ethtool", ("interface",), {},
           PREFIX + "ethtool_{leaf}"),
    _shape("ASIC counters no table knows", f"{_IF}/asic", ("interface",), {}, PREFIX + "asic_{leaf}"),
    _shape("RDMA port", "/rdma/devices/device[name={X}]/ports/port[id={X}]/hw-counters",
           ("interface", "port"), {}, "swtel_rdma_hw_counters_{leaf}"),
    _shape("RDMA port (IB counters)", "/rdma/devices/device[name={X}]/ports/port[id={X}]/counters",
           ("interface", "port"), {}, "swtel_rdma_counters_{leaf}"),
    _shape("switch (psutil)", "/system/state", (), {}, "swtel_system_{leaf}"),
    _shape("the agent itself", "/agent/state", (), {}, "swtel_agent_{leaf}"),
    _shape("open events (sources.events)", "/insights/severities/severity[name={X}]/state", ("severity",),
           {"open-events": OPEN_EVENTS}, "swtel_insights_{leaf}"),
]

#: built by the OTLP exporter from the TC levels above (its ``egress_histogram``), not from a path
EGRESS_HISTOGRAM = "nvswitch_histogram_interface_egress_buffer"

# ---------------------------------------------------------------- checked against Cumulus

#: where the names were checked: Cumulus Linux 5.19's "Open Telemetry Export" (its tables
#: "Interface Statistic Format", "Buffer Statistic Format", "Histogram Data Format"), read
#: from the source of docs.nvidia.com, github.com/CumulusNetworks/docs,
#: content/cumulus-linux-519/Monitoring-and-Troubleshooting/Open-Telemetry-Export.md
SOURCE_519 = ("https://docs.nvidia.com/networking-ethernet-software/cumulus-linux-519/"
              "Monitoring-and-Troubleshooting/Open-Telemetry-Export/")
#: and the deprecations: Cumulus Linux 5.15's "What's New", "Deprecated OTEL Metrics"
#: (content/cumulus-linux-515/Whats-New/_index.md in the same repository)
SOURCE_515 = "https://docs.nvidia.com/networking-ethernet-software/cumulus-linux-515/Whats-New/"

#: every name of the tables above that 5.19's page lists (checked one by one, 2026-12-04)
CUMULUS_519 = frozenset(PREFIX + n for n in (
    "ether_stats_octets", "ether_stats_pkts", "ether_stats_multicast_pkts", "ether_stats_broadcast_pkts",
    "if_in_ucast_pkts", "if_in_discards", "if_in_errors", "if_out_octets", "if_out_pkts",
    "if_out_ucast_pkts", "if_out_multicast_pkts", "if_out_broadcast_pkts", "if_out_discards",
    "if_out_errors", "carrier_changes_total", "dot3_stats_fcs_errors", "dot3_stats_symbol_errors",
    "dot3_in_pause_frames", "dot3_out_pause_frames", "ether_stats_undersize_pkts",
    "ether_stats_oversize_pkts", "ether_stats_fragments", "ether_stats_jabbers",
    "sp_rx_pause", "sp_rx_pause_duration", "sp_tx_pause", "sp_tx_pause_duration",
    "tc_tx_frames", "tc_tx_uc_frames", "tc_tx_octet", "tc_tx_wred_discard", "tc_tx_ecn_marked_tc",
    "tc_tx_no_buffer_discard_uc", "tc_tx_queue", "pg_rx_frames", "pg_rx_octet",
    "shared_buffer_port_tc_curr_occupancy", "shared_buffer_port_tc_watermark",
    "shared_buffer_port_pg_curr_occupancy", "shared_buffer_port_pg_watermark",
    "headroom_buffer_pg_curr_occupancy", "headroom_buffer_pg_watermark",
    "shared_buffer_port_ingress_pool_curr_occupancy", "shared_buffer_port_egress_pool_curr_occupancy",
    "phy_stats_phy_received_bits", "phy_stats_phy_symbol_errors", "phy_stats_phy_effective_errors",
    "phy_stats_phy_raw_errors", "phy_stats_phy_corrected_bits", "phy_rs_fec_histogram",
    "phy_stats_raw_ber", "phy_stats_symbol_ber", "phy_stats_effective_ber",
    # the discard counters of DISCARDS (5.19's "Interface Statistics" tab)
    "discards_ingress_policy_engine", "discards_ingress_vlan_membership", "discards_ingress_tag_frame_type",
    "discards_egress_vlan_membership", "discards_loopback_filter", "discards_egress_hoq",
    "discards_egress_policy_engine", "discards_egress_stp_filter", "discards_ingress_tx_link_down",
)) | {EGRESS_HISTOGRAM}

SWTEL_OWN_LANE = "link_degrading's per-lane"
_PEAK = "swtel's PEAK (the highest level since the previous read): Cumulus has no such value"
#: the names of the tables above that 5.19's page does not list, and why swtel has them
SWTEL_OWN = {
    PREFIX + "shared_buffer_port_tc_peak_occupancy": _PEAK,
    PREFIX + "shared_buffer_port_pg_peak_occupancy": _PEAK,
    PREFIX + "headroom_buffer_pg_peak_occupancy": _PEAK,
    PREFIX + "shared_buffer_port_ingress_pool_peak_occupancy": _PEAK,
    PREFIX + "shared_buffer_port_egress_pool_peak_occupancy": _PEAK,
    PREFIX + "shared_buffer_port_pool_peak_occupancy": _PEAK,
    PREFIX + "shared_buffer_port_pool_curr_occupancy":
        "a devlink pool whose direction the path does not give (Cumulus: ingress_pool or egress_pool)",
    PREFIX + "drops_reason_packets":
        "per-reason drops (What Just Happened, devlink traps) of the reasons Cumulus has no discard "
        "counter for, with the attributes group and reason",
    DEVLINK_DROPS["packets"]: "devlink's packet traps count per device (attribute device), not per port",
    DEVLINK_DROPS["bytes"]: "devlink's packet traps count per device (attribute device), not per port",
    OPEN_EVENTS: "swtel's events open now (sources.events), by severity",
    PHY_PREDICTION["predicted-flr"]: "link_degrading's predicted frame loss ratio (SONiC's FEC FLR: bins "
        "16-20 extrapolated from a log-linear fit of bins 1-15): Cumulus has no prediction",
    PHY_PREDICTION["observed-cer"]: "link_degrading's observed codeword error ratio over its window "
        "(uncorrectable / all codewords): Cumulus has no such ratio",
    PHY_PREDICTION["fit-r2"]: "R² of link_degrading's fit (how far the predicted FLR can be trusted)",
    PHY_PREDICTION["max-bin"]: "maxT, the highest FEC histogram bin with codewords in link_degrading's "
        "window (sonic-swss' link-health figure)",
    **{name: f"{SWTEL_OWN_LANE} {leaf} (attribute lane): the port's own is its worst lane's"
       for leaf, name in PHY_LANE_PREDICTION.items()},
    PREFIX + "phy_stats_phy_raw_errors_lane":
        "5.19 lists phy_stats_phy_raw_errors as 'lane 0 through lane 7' without saying how a lane "
        "is told apart: swtel's per-lane count keeps its own name (attribute lane)",
}

#: Cumulus 5.15's deprecated OTLP names -> the name that replaces it ("": unsupported on
#: Spectrum, none). swtel sends none of them.
DEPRECATED = {PREFIX + old: PREFIX + new if new else "" for old, new in (
    ("if_in_multicast_pkts", "ether_stats_multicast_pkts"),
    ("if_in_broadcast_pkts", "ether_stats_broadcast_pkts"),
    ("if_in_octets", "ether_stats_octets"),
    ("discards_egress_general", "if_out_discards"),
    ("discards_ingress_general", "if_in_discards"),
    *((n, "") for n in (
        "discards_egress_link_down", "discards_ingress_discard_all", "discards_port_isolation",
        "dot3_stats_alignment_errors", "dot3_stats_excessive_collisions",
        "dot3_stats_internal_mac_receive_errors", "dot3_stats_internal_mac_transmit_errors",
        "dot3_stats_late_collisions", "dot3_stats_multiple_collision_frames",
        "dot3_stats_single_collision_frames", "dot3_stats_sqe_test_errors", "ether_stats_collisions",
        "if_in_unknown_protos", "pg_rx_buffer_discard", "pg_rx_shared_buffer_discard",
        "sp_rx_bc_frames", "sp_rx_frames", "sp_rx_mc_frames", "sp_rx_octets", "sp_rx_pause_transition",
        "sp_rx_uc_frames", "sp_tx_bc_frames", "sp_tx_frames", "sp_tx_mc_frames", "sp_tx_octets",
        "sp_tx_uc_frames", "tc_tx_bc_frames", "tc_tx_mc_frames")),
)}

_BAD = re.compile(r"[^a-zA-Z0-9_]")


def _metric_leaf(leaf: str) -> str:
    return _BAD.sub("_", leaf.replace("-", "_"))


#: the answer of :func:`cumulus_name`: (metric name, attributes as (key, value) pairs, rank)
Name = tuple[str, tuple[tuple[str, str], ...], int]


def cumulus_name(container_path: str, leaf: str) -> Name | None:
    """(name, attributes, rank) for a counter below ``container_path`` (origin-agnostic),
    or None when no shape matches (see :func:`generic_name`)."""
    for shape in SHAPES:
        m = shape.pattern.match(container_path)
        if m is None:
            continue
        name = shape.leaves.get(leaf) or shape.default.format(leaf=_metric_leaf(leaf))
        attrs = tuple(zip(shape.attrs, (unescape_key(g) for g in m.groups()), strict=True))
        if shape.leaves is DROPS and leaf == "packets":  # Cumulus' discard counter, where it has one
            name = DISCARDS.get((attrs[1][1], attrs[2][1]), name)
        return name, attrs, shape.rank
    return None


_ELEM = re.compile(rf"/([^/\[]+)((?:\[[^=\]]+={KEY_VALUE_RE}\])*)")
_KV = re.compile(rf"\[([^=\]]+)=({KEY_VALUE_RE})\]")


def generic_name(container_path: str, leaf: str) -> Name:
    """``swtel_`` + the path's element names, its keys as attributes (any shape)."""
    names, attrs = ["swtel"], []
    for elem, keys in _ELEM.findall(f"{container_path}/{leaf}"):
        names.append(elem)
        for k, v in _KV.findall(keys):
            key = _metric_leaf(elem if k in ("name", "id", "interface-id") else k)
            attrs.append((key, unescape_key(v)))
    return _BAD.sub("_", "_".join(names).replace("-", "_")), tuple(attrs), 0


#: one bin of a histogram (agent/sources/asic.py bin_container): ``<container>/<histogram>/
#: bin[index=I][lower=L][upper=U]`` with the leaf ``count``
_BIN = re.compile(r"^(.*)/([^/\[]+)/bin\[index=(\d+)\]\[lower=(\d+)\]\[upper=(\d+|inf)\]$")


#: one bin of the RS-FEC histogram on Cumulus' layout (asic.py histogram_bin): ``<phy>/
#: histograms/state/rs-num-corr-err[upper-boundary=U]``, ``<phy>`` a port's ``phy`` or one of its
#: ``phy/channels/channel[id=N]``; leaf ``count``
_FEC_BIN = re.compile(rf"^(.*/phy(?:/channels/channel\[id={KEY_VALUE_RE}\])?)/{re.escape(FEC_HISTOGRAM_LIST)}"
                      r"\[upper-boundary=(\d+)\]$")


def histogram_bin(container_path: str, leaf: str) -> tuple[str, str, int, int, float] | None:
    """(histogram's container, histogram's leaf, bin index, low, high) of a bin's count, or
    None. ``high`` is ``inf`` for a last bin without an upper bound. An RS-FEC bin on Cumulus'
    layout is named as the PHY's ``fec/state/rs-fec-histogram`` and carries only its upper
    boundary: that is its index (Cumulus' ``bin``; Spectrum's bin N counts N corrected
    symbols), its high bound and, unknown, its low one (-1)."""
    bin_path = bin_of_count(container_path, leaf)
    if bin_path is None:
        return None
    m = _FEC_BIN.match(bin_path)
    if m is not None:
        upper = int(m.group(2))
        return f"{m.group(1)}/fec/state", FEC_HISTOGRAM, upper, -1, upper
    m = _BIN.match(bin_path)
    if m is None:
        return None
    parent, hist, index, low, high = m.groups()
    return parent, hist, int(index), int(low), float("inf") if high == "inf" else int(high)


def metric_name(container_path: str, leaf: str) -> Name:
    """The exported name of any counter: its shape's, else the generic one. A histogram's
    bin is named as its histogram, with its index as the attribute ``bin`` (as Cumulus
    exports its FEC histogram)."""
    hit = histogram_bin(container_path, leaf)
    if hit is not None:
        name, attrs, rank = metric_name(hit[0], hit[1])
        return name, (*attrs, ("bin", str(hit[2]))), rank
    return cumulus_name(container_path, leaf) or generic_name(container_path, leaf)


_cache: dict[str, Name] = {}


def for_path(path: str) -> Name:
    """:func:`metric_name` of a full path string (``origin:`` allowed), cached."""
    hit = _cache.get(path)
    if hit is None:
        text = path.split(":", 1)[1] if not path.startswith("/") and ":" in path else path
        container, _, leaf = text.rpartition("/")
        hit = metric_name(container, leaf)
        if len(_cache) > 500_000:
            _cache.clear()
        _cache[path] = hit
    return hit


def doc_rows() -> list[str]:
    """docs/paths.md's section on these names (agent/pathdoc.py renders it)."""
    out = ["## OTLP and Prometheus names", "",
           "The one naming scheme of the metric outputs: what `exporters.otlp` sends (both profiles; "
           "docs/otlp.md), `exporters.remote_write` writes (docs/remote_write.md) and `swtel collect "
           "--prometheus` serves (by default; `--prometheus-names paths` serves path-derived names "
           "instead, docs/gnmi.md). They send every counter (under the generic name below when no "
           "shape matches) and, of the other values, the numbers whose path has a shape here (the "
           "detectors' gauges, the open events by severity); text, booleans and the agent's own "
           "health and event states (`swtel:/agent/...`, `swtel:/insights/events/...`, and a leaf "
           "that repeats its list's key) are not metrics. A counter is named by the shape of its path, "
           "whatever its origin or source; `X` becomes the attribute (label) `interface`, `N` the "
           "one the table names. Names from Cumulus Linux's own OTLP export where it has the counter, "
           "others in its style. Where two sources give one name for one port (the kernel's "
           "`in-octets` and switchd's `HwIfInOctets`), the one of higher rank is sent.", "",
           "The column Cumulus 5.19 says whether the name is in Cumulus Linux 5.19's list "
           f"([Open Telemetry Export]({SOURCE_519})): `yes`, or `swtel` (a name of swtel's own in "
           "Cumulus' style; docs/otlp.md says why). No name Cumulus 5.15 deprecated is sent.", "",
           "| path | name | attributes | rank | Cumulus 5.19 |", "|---|---|---|---|---|"]
    for shape in SHAPES:
        attrs = ", ".join(f"`{a}`" for a in shape.attrs) or "none"
        for leaf, name in shape.leaves.items():
            known = "yes" if name in CUMULUS_519 else "swtel"
            out.append(f"| `{shape.doc_path}/{leaf}` | `{name}` | {attrs} | {shape.rank} | {known} |")
        default = shape.default.replace("{leaf}", "<leaf>")
        out.append(f"| `{shape.doc_path}/<leaf>` (any other) | `{default}` | {attrs} | {shape.rank} | swtel |")
    out += ["", "A port's drop reasons (`.../drops/group[name=G]/reason[name=R]/state/packets`) are one "
            f"metric, `{DROPS['packets']}` with the attributes `interface`, `group` and `reason`, except the "
            "reasons Cumulus 5.19 exports a discard counter for, which take Cumulus' name (keeping `group` "
            "and `reason`, so that one query over both sees every reason):", "",
            "| group | reason | name |", "|---|---|---|"]
    out += [f"| `{g}` | `{r}` | `{name}` |" for (g, r), name in DISCARDS.items()]
    out += ["", "`<leaf>` is the path's leaf with `-` as `_`. Any other path is "
            "`swtel_<element>_<element>...` with its keys as attributes (`source` for "
            "`source[name=S]`). OTLP resource attributes: `host.name`, `service.name` (`swtel`), "
            "`service.version`, `swtel.target`.", "",
            "A histogram's bins (`<histogram>/bin[index=I][lower=L][upper=U]/count`) take the "
            "histogram's name: in the `cumulus` profile (and Prometheus) one gauge per bin with the "
            "attribute `bin` = I, in the `otel` profile one cumulative OTel Histogram per port whose "
            "`explicit_bounds` are the bins' upper bounds (a bin counts the values up to its upper "
            "bound and above the previous one's). The RS-FEC histogram on Cumulus' layout "
            "(`.../phy/histograms/state/rs-num-corr-err[upper-boundary=U]/count`, per lane below "
            "`.../phy/channels/channel[id=N]`) is named as the PHY's `rs-fec-histogram` above, with "
            "`bin` = U (Spectrum's bin N counts N corrected symbols).", "",
            f"`{EGRESS_HISTOGRAM}` (attributes `interface`, `tc`) is not a path's: the OTLP exporter "
            "builds it from the TC levels above when `egress_histogram` is on (docs/otlp.md)."]
    if registry.INFO_METRICS:
        out += ["", "### Info series", "",
                "Value 1, one per container of the path, its keys and text leaves as attributes (a leaf "
                "without a value: `\"\"`), so that one PromQL join (`* on (target, interface) group_left "
                "(system_name, port_id) ...`) brings them to any series. When the attributes change, the old "
                "series is marked stale (remote write: Prometheus' stale NaN; OTLP: a point flagged "
                "`NO_RECORDED_VALUE`), not left to match for the 5-minute lookback.", "",
                "| path | name | attributes | from |", "|---|---|---|---|"]
        for m in sorted(registry.INFO_METRICS.values(), key=lambda m: m.name):
            path = m.container
            for key in m.keys:
                path = path.replace("{X}", "X" if key == "interface" else "N", 1)
            attrs = ", ".join(f"`{a}`" for a in (*(k for k in m.keys if k), *(a for _leaf, a in m.leaves)))
            out.append(f"| `{path}` | `{m.name}` | {attrs} | {m.doc} |")
    return out
