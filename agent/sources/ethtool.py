"""ethtool source: driver statistics (``ethtool -S``) of every selected port.

Per port, driver info and the string table are read once (and again when the
link changes or the driver's count changes); each poll issues only
ETHTOOL_GSTATS, written by the reader straight into this source's value array.
The driver picks the name table below; names no table knows are still streamed,
under ``swtel:/interfaces/interface[name=X]/ethtool/<name>``, so nothing is hidden.
"""

from __future__ import annotations

import errno
import re
import socket
from array import array
from dataclasses import dataclass

from agent import _backend
from agent.counters import (
    COUNTER,
    GAUGE,
    HIDDEN,
    OPENCONFIG,
    SWTEL_ORIGIN,
    Container,
    CounterSpec,
    CounterTable,
    escape_key,
)
from agent.links import Link, select
from agent.sources.base import Source, counter_wanted, leaf_name, register

# Containers, by short name; {port} and {n} are filled per counter.
_ETH = (OPENCONFIG, "/interfaces/interface[name={port}]/ethernet/state/counters")
_PFC = (SWTEL_ORIGIN, "/interfaces/interface[name={port}]/pfc/priority[id={n}]/state")
_QUEUE = (OPENCONFIG, "/qos/interfaces/interface[interface-id={port}]/output/queues/queue[name={n}]/state")
_SWQUEUE = (SWTEL_ORIGIN, "/qos/interfaces/interface[interface-id={port}]/output/queues/queue[name={n}]/state")
_HW = (SWTEL_ORIGIN, "/interfaces/interface[name={port}]/hw/state/counters")
_RAW = (SWTEL_ORIGIN, "/interfaces/interface[name={port}]/ethtool")


@dataclass(frozen=True)
class Rule:
    pattern: re.Pattern[str]
    container: tuple[str, str]
    leaf: str  # may use {n}
    kind: int = COUNTER


def _rules(*rows: tuple) -> list[Rule]:
    return [Rule(re.compile(f"^{p}$"), c, leaf, *rest) for p, c, leaf, *rest in rows]


# Cumulus Linux switchd (swpN). HwIf* duplicates the kernel's interface counters
# under the hardware path, so netdev keeps OpenConfig's state/counters.
SWITCHD = _rules(
    (r"HwIfInPausePkt", _ETH, "in-mac-pause-frames"),
    (r"HwIfOutPausePkt", _ETH, "out-mac-pause-frames"),
    (r"HwIfInDot3FrameErrors", _ETH, "in-crc-errors"),
    (r"HwIfInPfc(?P<n>[0-7])Pkt", _PFC, "in-pause-pkts"),
    (r"HwIfOutPfc(?P<n>[0-7])Pkt", _PFC, "out-pause-pkts"),
    (r"HwIfOutQ(?P<n>\d)WredDrops", _SWQUEUE, "wred-dropped-pkts"),
    (r"HwIfOutQLen", _HW, "out-queue-length", GAUGE),
    (r"HwIf(?P<name>\w+)", _HW, "{name}"),
)

# mlxsw (Spectrum, upstream driver: spectrum_ethtool.c).
MLXSW = _rules(
    (r"a_frame_check_sequence_errors", _ETH, "in-crc-errors"),
    (r"a_symbol_error_during_carrier", _ETH, "in-symbol-error"),
    (r"a_pause_mac_ctrl_frames_received", _ETH, "in-mac-pause-frames"),
    (r"a_pause_mac_ctrl_frames_transmitted", _ETH, "out-mac-pause-frames"),
    (r"a_pause_mac_ctrl_frames_xmitted", _ETH, "out-mac-pause-frames"),
    (r"ether_stats_undersize_pkts", _ETH, "in-undersize-frames"),
    (r"ether_stats_oversize_pkts", _ETH, "in-oversize-frames"),
    (r"ether_stats_fragments", _ETH, "in-fragment-frames"),
    (r"ether_stats_jabbers", _ETH, "in-jabber-frames"),
    (r"rx_octets_prio_(?P<n>[0-7])", _PFC, "in-octets"),
    (r"rx_frames_prio_(?P<n>[0-7])", _PFC, "in-pkts"),
    (r"tx_octets_prio_(?P<n>[0-7])", _PFC, "out-octets"),
    (r"tx_frames_prio_(?P<n>[0-7])", _PFC, "out-pkts"),
    (r"rx_pause_prio_(?P<n>[0-7])", _PFC, "in-pause-pkts"),
    (r"tx_pause_prio_(?P<n>[0-7])", _PFC, "out-pause-pkts"),
    (r"rx_pause_duration_prio_(?P<n>[0-7])", _PFC, "in-pause-duration"),
    (r"tx_pause_duration_prio_(?P<n>[0-7])", _PFC, "out-pause-duration"),
    (r"tc_transmit_queue_tc_(?P<n>\d+)", _SWQUEUE, "transmit-queue-octets", GAUGE),
    (r"tc_no_buffer_discard_uc_tc_(?P<n>\d+)", _QUEUE, "dropped-pkts"),
)

# mlx5 (ConnectX NICs, BlueField).
MLX5 = _rules(
    (r"rx_prio(?P<n>[0-7])_bytes", _PFC, "in-octets"),
    (r"rx_prio(?P<n>[0-7])_packets", _PFC, "in-pkts"),
    (r"rx_prio(?P<n>[0-7])_pause", _PFC, "in-pause-pkts"),
    (r"rx_prio(?P<n>[0-7])_pause_duration", _PFC, "in-pause-duration"),
    (r"rx_prio(?P<n>[0-7])_buf_discard", _PFC, "in-buffer-discards"),
    (r"rx_prio(?P<n>[0-7])_cong_discard", _PFC, "in-congestion-discards"),
    (r"rx_prio(?P<n>[0-7])_marked", _PFC, "in-ecn-marked-pkts"),
    (r"rx_prio(?P<n>[0-7])_discards", _PFC, "in-discards"),
    (r"tx_prio(?P<n>[0-7])_bytes", _PFC, "out-octets"),
    (r"tx_prio(?P<n>[0-7])_packets", _PFC, "out-pkts"),
    (r"tx_prio(?P<n>[0-7])_pause", _PFC, "out-pause-pkts"),
    (r"tx_prio(?P<n>[0-7])_pause_duration", _PFC, "out-pause-duration"),
    (r"rx_symbol_err_phy", _ETH, "in-symbol-error"),
    (r"rx_crc_errors_phy", _ETH, "in-crc-errors"),
    (r"rx_undersize_pkts_phy", _ETH, "in-undersize-frames"),
    (r"rx_oversize_pkts_phy", _ETH, "in-oversize-frames"),
    (r"rx_fragments_phy", _ETH, "in-fragment-frames"),
    (r"rx_jabbers_phy", _ETH, "in-jabber-frames"),
    (r"rx_pause_ctrl_phy", _ETH, "in-mac-pause-frames"),
    (r"tx_pause_ctrl_phy", _ETH, "out-mac-pause-frames"),
)

# Values that are levels, not counters (a drop is not a reset); shared by all drivers.
GENERIC = _rules(
    (r"peer_ifindex", _RAW, "peer-ifindex", GAUGE),
)

#: driver name (ETHTOOL_GDRVINFO) -> rule table
TABLES: dict[str, list[Rule]] = {
    "mlxsw_spectrum": MLXSW,
    "mlxsw_spectrum2": MLXSW,
    "mlxsw_spectrum3": MLXSW,
    "mlxsw_spectrum4": MLXSW,
    "mlx5_core": MLX5,
}

_VANISHING = (errno.ENODEV, errno.ENXIO)
_SKIPPED = -2  # ethtool_read: an idle port whose turn in the sweep is a later poll (values kept)

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
             raw: tuple[str, str] = _RAW) -> tuple[Container, str, int]:
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


@dataclass
class _Port:
    link: Link
    driver: str
    names: list[str]


@register
class EthtoolSource(Source):
    name = "ethtool"

    def __init__(self, cfg) -> None:
        super().__init__(cfg)
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self._fd = self._sock.fileno()
        self._ports: dict[int, _Port] = {}  # ifindex -> cached driver and strings
        self._order: list[_Port] = []
        self._ifnames: list[bytes] = []
        self._counts = array("I")
        self._status = array("i")
        self._quiet = array("I")  # per port: reads since its values last moved (the reader keeps it)
        self._reads = 0
        self._refresh: set[int] = set()

    def setup(self, links: dict[int, Link]) -> None:
        sec = self.section
        chosen = select(links, sec.interfaces, sec.exclude)
        ports: dict[int, _Port] = {}
        for link in chosen:
            cached = self._ports.get(link.ifindex)
            if cached is not None and cached.link == link and link.ifindex not in self._refresh:
                ports[link.ifindex] = cached
                continue
            try:
                port = self._discover(link)
            except OSError as exc:
                # ENODEV: the link is being removed and its RTM_DELLINK is on the way; keep
                # what we had so it leaves together with the other sources' data.
                port = cached if cached is not None and exc.errno in _VANISHING else None
            if port is not None:
                ports[link.ifindex] = port
        self._refresh.clear()
        order = [ports[i] for i in sorted(ports)]
        layout = [(p.link.name, tuple(p.names)) for p in order]
        if layout != [(p.link.name, tuple(p.names)) for p in self._order] or not self.ports:
            self._build(order)
        self._ports = ports
        self._order = order

    def _discover(self, link: Link) -> _Port | None:
        """Driver and string table of one port; None if it has no ethtool stats (lo,
        bridges, ...); OSError if the link is gone."""
        reader = _backend.reader
        try:
            driver = reader.ethtool_drvinfo(self._fd, link.name)[0]
            names = reader.ethtool_strings(self._fd, link.name)
        except OSError as exc:
            if exc.errno in _VANISHING:
                raise
            return None
        return _Port(link, driver, names) if names else None

    def _build(self, order: list[_Port]) -> None:
        sec = self.section
        specs: list[CounterSpec] = []
        for port in order:
            rules = table_for(port.driver, port.names)
            for name in port.names:
                container, leaf, kind = map_name(rules, port.link.name, name)
                wanted = counter_wanted(name, sec.counters.include, sec.counters.exclude) and (
                    sec.per_queue or not PER_QUEUE.match(name)
                )
                specs.append(CounterSpec(container, leaf, 64, kind if wanted else HIDDEN, port.link.name))
        self.table = CounterTable(self.name, specs)
        self.values = array("Q", bytes(8 * len(specs)))
        self._ifnames = [p.link.name.encode() for p in order]
        self._counts = array("I", [len(p.names) for p in order])
        self._status = array("i", bytes(4 * len(order)))
        self._quiet = array("I", bytes(4 * len(order)))  # all "moved": the first reads see every port
        self.ports = [p.link.name for p in order]

    @property
    def sweep(self) -> int:
        """Polls between two reads of an idle port (1: every port every poll)."""
        idle = float(self.section.idle_interval)
        interval = self.cfg.interval_of(self.name)
        return max(1, round(idle / interval)) if idle > interval else 1

    def read(self) -> int:
        if not self._ifnames:
            return 0
        # GSTATS is one ioctl per port and most of a tick's CPU (kernel time); a port whose
        # counters have not moved for idle_interval is read once per idle_interval, its turn
        # spread over the ticks, and every poll again as soon as one of them moves.
        sweep = self.sweep
        self._reads += 1
        ok = _backend.reader.ethtool_read(self._fd, self._ifnames, self._counts, self.values, self._status,
                                          self._quiet if sweep > 1 else None, sweep, self._reads)
        if ok != len(self._ifnames):
            self._note_failures()
        return ok

    def _note_failures(self) -> None:
        for i, st in enumerate(self._status):
            if st == 0 or st == _SKIPPED or st in _VANISHING:  # a port being removed: not an error
                continue
            port = self._order[i]
            if st == -1:  # the driver's stat count changed: re-read its strings next setup
                self._refresh.add(port.link.ifindex)
            else:
                self.note_error(f"{port.link.name}: GSTATS failed: errno {st}")

    @property
    def needs_setup(self) -> bool:
        return bool(self._refresh)

    def info(self) -> dict:
        sweep = self.sweep
        idle = sum(1 for q in self._quiet if q >= sweep) if sweep > 1 else 0
        return {"drivers": sorted({p.driver for p in self._order}), "idle_ports": idle, "sweep": sweep}

    def close(self) -> None:
        self._sock.close()
