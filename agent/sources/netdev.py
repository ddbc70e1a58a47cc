"""netdev source: kernel interface statistics (``struct rtnl_link_stats64``) of every
selected link from one netlink RTM_GETSTATS dump per poll; carrier transitions
and oper-status from link events (no per-tick cost).
"""

from __future__ import annotations

import socket
from array import array
from dataclasses import dataclass

from agent import _backend
from agent.config import CounterFilter, setting
from agent.counters import (
    COUNTER,
    HIDDEN,
    OPENCONFIG,
    SWTEL_ORIGIN,
    CounterSpec,
    CounterTable,
    StateUpdate,
)
from agent.links import Link, select
from agent.pathgrammar import interface_path
from agent.sources import drivers
from agent.sources.base import (
    Source,
    SourceConfig,
    counter_wanted,
    doc_row,
    interface,
    rank_setting,
    register,
)

_OC, _EXT = "state/counters", "netdev"

#: Kernel field (in struct rtnl_link_stats64 order) -> (origin, container below the
#: interface, leaf). Fields without an OpenConfig leaf use the swtel extension path.
FIELDS: list[tuple[str, str, str, str]] = [
    ("rx_packets", OPENCONFIG, _OC, "in-pkts"),
    ("tx_packets", OPENCONFIG, _OC, "out-pkts"),
    ("rx_bytes", OPENCONFIG, _OC, "in-octets"),
    ("tx_bytes", OPENCONFIG, _OC, "out-octets"),
    ("rx_errors", OPENCONFIG, _OC, "in-errors"),
    ("tx_errors", OPENCONFIG, _OC, "out-errors"),
    ("rx_dropped", OPENCONFIG, _OC, "in-discards"),
    ("tx_dropped", OPENCONFIG, _OC, "out-discards"),
    ("multicast", OPENCONFIG, _OC, "in-multicast-pkts"),
    ("collisions", SWTEL_ORIGIN, _EXT, "collisions"),
    ("rx_length_errors", SWTEL_ORIGIN, _EXT, "rx-length-errors"),
    ("rx_over_errors", SWTEL_ORIGIN, _EXT, "rx-over-errors"),
    ("rx_crc_errors", OPENCONFIG, _OC, "in-fcs-errors"),
    ("rx_frame_errors", SWTEL_ORIGIN, _EXT, "rx-frame-errors"),
    ("rx_fifo_errors", SWTEL_ORIGIN, _EXT, "rx-fifo-errors"),
    ("rx_missed_errors", SWTEL_ORIGIN, _EXT, "rx-missed-errors"),
    ("tx_aborted_errors", SWTEL_ORIGIN, _EXT, "tx-aborted-errors"),
    ("tx_carrier_errors", SWTEL_ORIGIN, _EXT, "tx-carrier-errors"),
    ("tx_fifo_errors", SWTEL_ORIGIN, _EXT, "tx-fifo-errors"),
    ("tx_heartbeat_errors", SWTEL_ORIGIN, _EXT, "tx-heartbeat-errors"),
    ("tx_window_errors", SWTEL_ORIGIN, _EXT, "tx-window-errors"),
    ("rx_compressed", SWTEL_ORIGIN, _EXT, "rx-compressed"),
    ("tx_compressed", SWTEL_ORIGIN, _EXT, "tx-compressed"),
    ("rx_nohandler", SWTEL_ORIGIN, _EXT, "rx-nohandler"),
    ("rx_otherhost_dropped", SWTEL_ORIGIN, _EXT, "rx-otherhost-dropped"),
]
#: From link events (IFLA_CARRIER_CHANGES), appended after the kernel fields of each port.
CARRIER = ("carrier_changes", OPENCONFIG, _OC, "carrier-transitions")


def election_doc() -> list[str]:
    """docs/paths.md's section on a counter two sources give (agent/ports.py elect)."""
    x = interface_path("X")
    out = [
        "## One counter, one path: when two sources give it", "",
        "A path carries one source's value. Where two sources give the same counter of one port, "
        "the engine elects, whenever a source's port set changes and at a reload, the one a path "
        "carries: the kernel's `rx_bytes` (netdev) and an ASIC plugin's `HwIfInOctets` (asic; switchd's "
        "name, whose own path is the hardware one below) are both the port's "
        f"`{x}/state/counters/in-octets`. The counter of the source with the higher `rank` "
        "(docs/config.md: `sources.asic.rank` 2, `sources.netdev.rank` 1, `sources.ethtool.rank` 0, "
        "the order of the OTLP names' ranks below: the switch's hardware counter over the kernel's) "
        "is published on that path; every other one stays reachable under the `swtel` origin, its "
        "source's name after the interface: the kernel's then at "
        f"`swtel:{x}/netdev/state/counters/in-octets`, a plugin that lost at "
        f"`swtel:{x}/asic/hw/state/counters/in-octets`, switchd's copy read by ethtool at "
        f"`swtel:{x}/ethtool/hw/state/counters/in-octets`. So a gNMI collector subscribed to the "
        "OpenConfig leaves gets the plugin's sub-second values, not the 2 s copy switchd gives the "
        "kernel, and OTLP sends the same value under the same name.", "",
        "- A source of rank `0` never takes a path from another source; its counters move aside "
        "only where a source of rank above 0 takes their path (so OTLP never sends two values under "
        "one name). On a switch without a plugin nothing moves: ethtool's `HwIf*` stay on the "
        "hardware path, the kernel's counters on the OpenConfig leaves. Equal ranks: a counter on "
        "its own path first, then the later source (netdev, ethtool, rdma, system, asic).",
        "- Counters on one same path from two sources (an ASIC plugin's and the kernel's "
        "`carrier_changes`, a plugin's and a driver's mlxsw or `HwIf*` names) are elected the same way.",
        "- The kernel's counters back on the OpenConfig leaves (the plugin's under "
        "`swtel:.../asic/...`): `sources: {netdev: {rank: 3}}`. A plugin that takes no path from "
        "another source (its hardware counters stay on the hardware path): `sources: {asic: {rank: 0}}`.",
        "- A hardware counter that only the plugin gives (an ASIC-only port: the kernel's sources "
        "off, or not selecting it) is published on its OpenConfig leaf too, not only where two "
        "sources give it: the port's `in-octets` is its `HwIfInOctets`, and its "
        "`swtel:.../hw/state/counters/in-octets` carries nothing (with `sources.asic.rank: 0` it stays there).",
        "- A leaf's first value is already the winner's. At start-up (and when enabled by a reload) "
        "the plugin opens in its helper process, within its open deadline (5 s); meanwhile the "
        "standard leaves it may give (the OpenConfig leaves in the table below and "
        "`carrier-transitions`, of the ports its `interfaces` select) are not published from a "
        "source of lower rank: the kernel's are on their `swtel:` path from their first value. An "
        "open that fails or outlasts its deadline ends this: the lower-ranked counters take those "
        "leaves and the log says `source did not open`; a plugin that opens later takes them as any "
        "new winner does.",
        "- When a winner changes (a plugin's port appears or goes, a plugin opens late, a reload "
        "changes a rank), a path that now carries another source's counter is first deleted, then "
        "gets the new source's current value, delta 0 and flagged new (a collector's rate restarts "
        "there): a collector never sees one path's counter jump from one source's total to another's. "
        "Each moved counter is sent at once under its new path the same way; a path no source "
        "carries any more is deleted. Totals and deltas are each source's own: a change of winner "
        "never turns into a reset or a jump.",
        "- The detectors ([insights.md](insights.md)) read the counters where they are published: the "
        "winner's (with `sources.netdev.rank: 3`, the kernel's octets, refreshed as the kernel is).", "",
        "Hardware counters (switchd's names, `swtel:.../hw/state/counters/<leaf>`) that are an "
        "OpenConfig leaf:", "",
        "| hardware leaf | OpenConfig leaf |", "|---|---|",
    ]
    for hw, std in drivers.HW_STANDARD.items():
        out.append(f"| `{hw}` | `{x}/state/counters/{std}` |")
    return out + [""]


@dataclass
class NetdevConfig(SourceConfig):
    """``sources.netdev``."""

    interfaces: list[str] = setting(factory=lambda: ["*"], type="globs", doc="interfaces to read")
    exclude: list[str] = setting(factory=lambda: ["lo"], type="globs", doc="interfaces to skip")
    counters: CounterFilter = setting(factory=CounterFilter, doc="counter-name filter", sub={
        "include": {"doc": "counter names (leaf names, e.g. `in-octets`) to read"},
        "exclude": {"doc": "counter names to skip"}})
    rank: int = rank_setting(1)


@register
class NetdevSource(Source):
    name = "netdev"
    config_class = NetdevConfig
    doc = "interface counters from one netlink `RTM_GETSTATS` dump"

    @classmethod
    def doc_paths(cls) -> list[str]:
        out = ["## Interface counters (netdev)", "", "| source | kernel name | path | kind |", "|---|---|---|---|"]
        for field, origin, tail, leaf in FIELDS + [CARRIER]:
            path = f"{interface_path('X')}/{tail}/{leaf}"
            out.append(doc_row("netdev", field, path if origin == "openconfig" else f"swtel:{path}"))
        return out + ["", f"State, sent on change: `{interface_path('X')}/state/oper-status` "
                      "(UP, DOWN, LOWER_LAYER_DOWN, ...) and `.../state/admin-status` (UP, DOWN).", "",
                      *election_doc()]

    def __init__(self, cfg) -> None:
        super().__init__(cfg)
        assert len(FIELDS) == _backend.reader.NETDEV_FIELDS
        self._sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, socket.NETLINK_ROUTE)
        self._sock.bind((0, 0))
        self._fd = self._sock.fileno()
        self._links: list[Link] = []
        self._ifindexes = array("i")
        self._seen = bytearray()
        self._carrier_at = 0
        self._oper: dict[str, str] = {}
        self._pending_states: list[StateUpdate] = []

    def setup(self, links: dict[int, Link]) -> None:
        sec = self.section
        chosen = select(links, sec.interfaces, sec.exclude)
        structure = [(link.ifindex, link.name) for link in chosen]
        if structure != [(link.ifindex, link.name) for link in self._links] or not self.ports:
            self._build(chosen)
        self._links = chosen
        self._update_link_state(chosen)

    def _build(self, chosen: list[Link]) -> None:
        """Layout: NETDEV_FIELDS per port in reader order (so the C reader writes straight
        into ``values``), then one carrier-transitions counter per port. Counters the
        name filter rejects stay in the layout as HIDDEN: read, never reported."""
        sec = self.section
        specs: list[CounterSpec] = []
        carrier: list[CounterSpec] = []
        for link in chosen:
            containers: dict[tuple[str, str], object] = {}
            for field, origin, tail, leaf in FIELDS + [CARRIER]:
                if (origin, tail) not in containers:
                    containers[(origin, tail)] = interface(link.name, origin, tail)
                kind = COUNTER if counter_wanted(field, sec.counters.include, sec.counters.exclude) else HIDDEN
                spec = CounterSpec(containers[(origin, tail)], leaf, 64, kind, link.name)
                (carrier if field == CARRIER[0] else specs).append(spec)
        self.table = CounterTable(self.name, specs + carrier)
        self.values = array("Q", bytes(8 * len(self.table)))
        # Sorted for the reader's binary search (select() sorts by ifindex).
        self._ifindexes = array("i", [link.ifindex for link in chosen])
        self._seen = bytearray(len(chosen))
        self._carrier_at = len(specs)
        self.ports = [link.name for link in chosen]
        self._oper = {name: old for name, old in self._oper.items() if name in self.ports}

    def _update_link_state(self, chosen: list[Link]) -> None:
        for n, link in enumerate(chosen):
            self.values[self._carrier_at + n] = link.carrier_changes
            if self._oper.get(link.name) != link.oper_status:
                self._oper[link.name] = link.oper_status
                self._pending_states.append((link.name, link.oper_status, link.admin_up))

    def read(self) -> int:
        if not self._links:
            return 0
        return _backend.reader.netdev_read(self._fd, self._ifindexes, self.values, self._seen)

    def inherit(self, old: Source) -> None:
        self._oper = dict(getattr(old, "_oper", {}))  # states already sent are not re-sent

    def states(self, ts_ns: int) -> list[StateUpdate]:
        out = []
        for port, oper, admin_up in self._pending_states:
            container = interface(port, OPENCONFIG, "state")
            out.append(StateUpdate(ts_ns, container, "oper-status", oper, self.name))
            out.append(StateUpdate(ts_ns, container, "admin-status", "UP" if admin_up else "DOWN", self.name))
        self._pending_states.clear()
        return out

    def close(self) -> None:
        self._sock.close()
