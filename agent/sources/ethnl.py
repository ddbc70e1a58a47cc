"""ethnl source: FEC statistics and the standard statistics groups over ethtool netlink.

Per selected port, two generic netlink requests to the family "ethtool" (resolved once):

* ``ETHTOOL_MSG_FEC_GET`` with ``ETHTOOL_FLAG_STATS``: corrected and uncorrectable blocks
  and corrected bits, total and per lane, on the Cumulus-like PHY paths the asic source
  uses; from Linux 6.18 the codeword-error histogram, one counter per bin (per port and per
  lane) on Cumulus' layout (``.../histograms/state/rs-num-corr-err[upper-boundary=U]``), its
  bounds as the device gives them (never assumed).
* ``ETHTOOL_MSG_STATS_GET`` with the groups eth-phy, eth-mac, eth-ctrl and rmon (with
  rmon's packet-size histograms), under ``swtel:`` (``ethtool-stats/<group>/<name>``).

agent/_ext/ethnl.c does the I/O and the parsing; this file names and maps. Every port is
asked at setup (each link change): a device that answers EOPNOTSUPP, or whose reply holds
no statistics (veth), is shown as unsupported in status and not asked again until the
next link change; that is not an error. The layout follows what the device reports
(lanes, bins, statistics): when a poll finds it changed, the source is set up again.
"""

from __future__ import annotations

import errno
from array import array
from dataclasses import dataclass
from typing import Any, Protocol

from agent import _backend
from agent.config import Duration, setting
from agent.counters import (
    COUNTER,
    OPENCONFIG,
    SWTEL_ORIGIN,
    Container,
    CounterSpec,
    CounterTable,
    StateUpdate,
)
from agent.links import Link, select
from agent.pathgrammar import fec_histogram_bin_path, interface_path
from agent.sources.asic import FEC_HISTOGRAM, bin_container, fec_bounds, histogram_bin
from agent.sources.base import (
    NO_DATA,
    GenlSocket,
    GenlSource,
    SourceConfig,
    doc_row,
    interface,
    leaf_name,
    register,
)

_VANISHING = (errno.ENODEV, errno.ENXIO)  # the port is being removed: not an error
_UNSUPPORTED = (errno.EOPNOTSUPP,)

#: the standard groups, by ETHTOOL_STATS_* number (the request's bitset and the replies' ids)
GROUPS = ("eth-phy", "eth-mac", "eth-ctrl", "rmon")
#: per group, the kernel's statistic names by attribute number (ETHTOOL_A_STATS_<GROUP>_*,
#: from 0; IEEE 802.3 clause 30 attributes and RFC 2819 etherStats)
STAT_NAMES: dict[str, tuple[str, ...]] = {
    "eth-phy": ("SymbolErrorDuringCarrier",),
    "eth-mac": (
        "FramesTransmittedOK", "SingleCollisionFrames", "MultipleCollisionFrames", "FramesReceivedOK",
        "FrameCheckSequenceErrors", "AlignmentErrors", "OctetsTransmittedOK", "FramesWithDeferredXmissions",
        "LateCollisions", "FramesAbortedDueToXSColls", "FramesLostDueToIntMACXmitError", "CarrierSenseErrors",
        "OctetsReceivedOK", "FramesLostDueToIntMACRcvError", "MulticastFramesXmittedOK",
        "BroadcastFramesXmittedOK", "FramesWithExcessiveDeferral", "MulticastFramesReceivedOK",
        "BroadcastFramesReceivedOK", "InRangeLengthErrors", "OutOfRangeLengthField", "FrameTooLongErrors",
    ),
    "eth-ctrl": ("MACControlFramesTransmitted", "MACControlFramesReceived", "UnsupportedOpcodesReceived"),
    "rmon": ("etherStatsUndersizePkts", "etherStatsOversizePkts", "etherStatsFragments", "etherStatsJabbers"),
}
#: FEC_GET's three arrays, in the parser's order, and their leaves (``corrected-bits`` as the
#: asic source's ``phy_corrected_bits``)
FEC_LEAVES = ("corrected-blocks", "uncorrectable-blocks", "corrected-bits")
RMON_HISTOGRAMS = ("hist-rx", "hist-tx")

OK, UNSUPPORTED, OFF = "ok", "unsupported", "off"

# the layout of one reply, as compared between polls: (array lengths, (low, high, lanes) per
# bin) for FEC; per group (id, statistic numbers, rx bucket bounds, tx bucket bounds)
FecShape = tuple[tuple[int, ...], tuple[tuple[int, int, int], ...]]
StatsShape = tuple[tuple[int, tuple[int, ...], tuple[tuple[int, int], ...], tuple[tuple[int, int], ...]], ...]


def fec_flat(reply: tuple) -> tuple[FecShape, list[int]]:
    """An ``ethnl_fec_parse`` result as its shape and its values in spec order."""
    _ifindex, *arrays, hist = reply
    values = [v for arr in arrays for v in arr]
    for _low, _high, total, lanes in hist:
        values.append(total)
        values += lanes
    return (tuple(len(a) for a in arrays), tuple((lo, hi, len(lanes)) for lo, hi, _t, lanes in hist)), values


def stats_flat(reply: tuple) -> tuple[StatsShape, list[int]]:
    """An ``ethnl_stats_parse`` result as its shape and its values in spec order."""
    shape, values = [], []
    for gid, _ss, stats, rx, tx in reply[1]:
        shape.append((gid, tuple(a for a, _v in stats), tuple((lo, hi) for lo, hi, _v in rx),
                      tuple((lo, hi) for lo, hi, _v in tx)))
        values += [v for _a, v in stats] + [v for *_b, v in rx] + [v for *_b, v in tx]
    return tuple(shape), values


def _parse(cmd: int, raw: bytes) -> tuple[Any, list[int]]:
    """One reply, parsed by the backend, as (shape, values); OSError/ValueError as the parser raises."""
    reader = _backend.reader
    if cmd == reader.ETHNL_FEC_GET:
        return fec_flat(reader.ethnl_fec_parse(raw))
    return stats_flat(reader.ethnl_stats_parse(raw))


def _fec_state(port: str, lane: int | str | None) -> Container:
    """The PHY containers of the asic source (Cumulus' gNMI tree): the port's, or a lane's."""
    tail = "phy/fec/state" if lane is None else f"phy/channels/channel[id={lane}]/fec/state"
    return interface(port, OPENCONFIG, tail)


def fec_bin_bounds(port: str, shape: FecShape) -> list[tuple[Container, str, int]]:
    """The ``upper-boundary`` leaf of every histogram bin :func:`fec_specs` streams (port and
    lanes): (container, leaf, U)."""
    out = []
    shared: dict[Container, Container] = {}  # one container object a histogram (the store keeps these)
    for index, (low, high, lanes) in enumerate(shape[1]):
        for lane in (None, *range(lanes)):
            out += [(shared.setdefault(c, c), leaf, upper) for c, leaf, upper in fec_bounds(
                [histogram_bin(_fec_state(port, lane), FEC_HISTOGRAM, index, low, high)], [(low, high)])]
    return out


def fec_specs(port: str, shape: FecShape) -> list[CounterSpec]:
    """Specs in ``fec_flat``'s order: each array's total then lanes 0.., then per bin its
    total and its lanes."""
    lengths, bins = shape
    specs = []
    for leaf, n in zip(FEC_LEAVES, lengths, strict=True):
        specs += [CounterSpec(_fec_state(port, None if k == 0 else k - 1), leaf, 64, COUNTER, port)
                  for k in range(n)]
    for index, (low, high, lanes) in enumerate(bins):
        for lane in (None, *range(lanes)):
            # Cumulus' layout, as the asic source's bins (per lane below the lane's channel)
            where, leaf = histogram_bin(_fec_state(port, lane), FEC_HISTOGRAM, index, low, high)
            specs.append(CounterSpec(where, leaf, 64, COUNTER, port))
    return specs


def group_name(gid: int) -> str:
    return GROUPS[gid] if gid < len(GROUPS) else f"group-{gid}"


def stat_leaf(group: str, attr: int) -> str:
    names = STAT_NAMES.get(group, ())
    return leaf_name(names[attr]) if attr < len(names) else f"stat-{attr}"


def stats_specs(port: str, shape: StatsShape) -> list[CounterSpec]:
    """Specs in ``stats_flat``'s order."""
    specs = []
    for gid, attrs, rx, tx in shape:
        group = group_name(gid)
        container = interface(port, SWTEL_ORIGIN, f"ethtool-stats/{group}")
        specs += [CounterSpec(container, stat_leaf(group, a), 64, COUNTER, port) for a in attrs]
        for leaf, buckets in zip(RMON_HISTOGRAMS, (rx, tx), strict=True):
            specs += [CounterSpec(bin_container(container, leaf, i, low, high), "count", 64, COUNTER, port)
                      for i, (low, high) in enumerate(buckets)]
    return specs


class EthnlIO(Protocol):
    """What the source asks the kernel (tests inject one returning fixture replies)."""

    def family(self) -> int: ...

    def query(self, cmd: int, ifindexes: list[int], groups: int) -> list[bytes]: ...

    def close(self) -> None: ...


class NetlinkIO(GenlSocket):
    """The source's generic netlink socket, for the "ethtool" family."""

    def __init__(self) -> None:
        super().__init__(lambda fd: _backend.reader.ethnl_family(fd))

    def query(self, cmd: int, ifindexes: list[int], groups: int) -> list[bytes]:
        return _backend.reader.ethnl_query(self.fd, self.family(), cmd, ifindexes, groups)


@dataclass
class _Port:
    link: Link
    fec: str = OFF  # OK, UNSUPPORTED, OFF (not asked) or "error: ..."
    stats: str = OFF
    fec_shape: FecShape | None = None
    stats_shape: StatsShape | None = None
    fec_at: int = 0  # where its values start in the source's buffer
    stats_at: int = 0


@dataclass
class EthnlConfig(SourceConfig):
    """``sources.ethnl``."""

    enabled: bool = setting(False)
    interval: Duration | None = setting(Duration(1.0), type="duration (10ms–1h) or null")
    interfaces: list[str] = setting(factory=lambda: ["*"], type="globs")
    exclude: list[str] = setting(factory=lambda: ["lo"], type="globs")
    fec: bool = setting(True, doc="read FEC blocks, bits and the codeword-error histogram (`ETHTOOL_MSG_FEC_GET`)")
    groups: list[str] = setting(factory=lambda: list(GROUPS), type="list of eth-phy, eth-mac, eth-ctrl, rmon",
                                doc="standard statistics groups to read (`ETHTOOL_MSG_STATS_GET`); `[]`: none")


@register
class EthnlSource(GenlSource):
    name = "ethnl"
    config_class = EthnlConfig
    doc = ("FEC statistics with the codeword-error histogram and the standard statistics groups, over "
           "ethtool netlink ([ethnl.md](ethnl.md))")
    # retry_s (GenlSource): a failed probe (not "unsupported") or a missing family is tried again

    @classmethod
    def check(cls, section: EthnlConfig, where: str, problems: list[str], cfg) -> None:
        unknown = [g for g in section.groups if g not in GROUPS]
        if unknown:
            problems.append(f"{where}.groups: unknown group {unknown[0]!r} (known: {', '.join(GROUPS)})")
        elif len(set(section.groups)) != len(section.groups):
            problems.append(f"{where}.groups: names a group more than once")

    @classmethod
    def doc_paths(cls) -> list[str]:
        port = "X"
        rows = []
        for leaf in FEC_LEAVES:
            rows.append(doc_row("ethnl", f"FEC {leaf}, total", _fec_state(port, None).full(leaf)))
            rows.append(doc_row("ethnl", f"FEC {leaf}, lane N", _fec_state(port, "N").full(leaf)))
        for lane, what in ((None, "total"), ("N", "lane N")):
            rows.append(doc_row("ethnl", f"FEC histogram bin up to U, {what}",
                                fec_histogram_bin_path(port, "U", lane) + "/count"))
        for group in GROUPS:
            container = interface(port, SWTEL_ORIGIN, f"ethtool-stats/{group}")
            rows += [doc_row("ethnl", f"{group} {name}", container.full(leaf_name(name)))
                     for name in STAT_NAMES[group]]
        for leaf in RMON_HISTOGRAMS:
            path = bin_container(interface(port, SWTEL_ORIGIN, "ethtool-stats/rmon"), leaf, 0, 0, 0).full("count")
            rows.append(doc_row("ethnl", f"rmon {leaf} bucket I",
                                path.replace("[index=0][lower=0][upper=0]", "[index=I][lower=L][upper=U]")))
        return ["## ethnl: FEC and standard statistics (ethtool netlink)", "",
                "FEC per port and per lane (N from 0), on the asic source's PHY leaves; histogram bins "
                "as the device reports them, on Cumulus' layout (U: the bin's inclusive upper bound in "
                "corrected symbols per codeword; an open last bin's lower bound), Cumulus' `upper-boundary` "
                "leaf (U) beside each `count`, sent once as a state; the standard "
                f"groups under `swtel:{interface_path(port)}/ethtool-stats/<group>`, statistics the "
                "kernel adds later as `stat-<number>` (details: [ethnl.md](ethnl.md)).", "",
                "| source | counter | path | kind |", "|---|---|---|---|", *rows, ""]

    def __init__(self, cfg) -> None:
        super().__init__(cfg)
        self.io: EthnlIO | None
        self._order: list[_Port] = []
        self._layout: list[tuple] = []
        self._bounds: list[tuple[Container, str, int]] = []  # the FEC bins' upper-boundary leaves
        self._bounds_due = False  # sent as states once per layout

    def make_io(self) -> EthnlIO:
        return NetlinkIO()

    def _groups_for(self, cmd: int) -> int:
        """The request's groups mask (ETHTOOL_STATS_* bits; FEC_GET has none)."""
        if cmd != _backend.reader.ETHNL_STATS_GET:
            return 0
        return sum(1 << GROUPS.index(g) for g in self.section.groups)

    def setup(self, links: dict[int, Link]) -> None:
        self._stale = False
        self._retry_at = None
        ports = [_Port(link) for link in select(links, self.section.interfaces, self.section.exclude)]
        if ports and not self._probe(ports):
            return  # the kernel could not be asked: keep what we had, try again in retry_s
        layout = [(p.link.name, p.fec_shape, p.stats_shape) for p in ports]
        if layout != self._layout:
            self._build(ports)
            self._layout = layout
        else:  # same layout: keep the table and the values (no new baselines)
            for new, old in zip(ports, self._order, strict=True):
                new.fec_at, new.stats_at = old.fec_at, old.stats_at
        self._order = ports
        self.ports = [p.link.name for p in ports]

    def _probe(self, ports: list[_Port]) -> bool:
        """Ask every port once: its state per request, and the shape of what it reports.
        False when ethtool netlink itself cannot be reached (a fault, tried again later)."""
        io = self._open_io()
        try:
            self._family = io.family()
        except OSError as exc:
            self.fault = f"ethtool netlink not available: {exc}"
            self._retry_later()
            return False
        self.fault = None
        for cmd, wanted in ((_backend.reader.ETHNL_FEC_GET, self.section.fec),
                            (_backend.reader.ETHNL_STATS_GET, bool(self.section.groups))):
            if not wanted:
                continue
            try:
                replies = io.query(cmd, [p.link.ifindex for p in ports], self._groups_for(cmd))
            except OSError as exc:
                self.note_error(f"ethtool netlink: {exc}")
                self._retry_later()
                return False
            for port, raw in zip(ports, replies, strict=True):
                self._take_probe(port, cmd, raw)
        return True

    def _take_probe(self, port: _Port, cmd: int, raw: bytes) -> None:
        fec = cmd == _backend.reader.ETHNL_FEC_GET
        try:
            shape, values = _parse(cmd, raw)
        except OSError as exc:
            if exc.errno in _VANISHING:
                state = OFF
            elif exc.errno in _UNSUPPORTED:
                state = UNSUPPORTED
            else:
                state = f"error: {exc.strerror or exc}"
                self.note_error(f"{port.link.name}: {'FEC' if fec else 'stats'}: {exc}")
                self._retry_later()
            shape = None
        except ValueError as exc:
            state, shape = f"error: {exc}", None
            self.note_error(f"{port.link.name}: {'FEC' if fec else 'stats'}: {exc}")
            self._retry_later()
        else:
            state = OK if values else UNSUPPORTED  # a reply without statistics (veth): nothing to stream
            if not values:
                shape = None
        if fec:
            port.fec, port.fec_shape = state, shape
        else:
            port.stats, port.stats_shape = state, shape

    def _build(self, ports: list[_Port]) -> None:
        specs: list[CounterSpec] = []
        bounds: list[tuple[Container, str, int]] = []
        for port in ports:
            port.fec_at = len(specs)
            if port.fec_shape is not None:
                specs += fec_specs(port.link.name, port.fec_shape)
                bounds += fec_bin_bounds(port.link.name, port.fec_shape)
            port.stats_at = len(specs)
            if port.stats_shape is not None:
                specs += stats_specs(port.link.name, port.stats_shape)
        self.table = CounterTable(self.name, specs)
        self.values = array("Q", bytes(8 * len(specs)))
        self._bounds, self._bounds_due = bounds, bool(bounds)

    def states(self, ts_ns: int) -> list[StateUpdate]:
        """Each FEC bin's ``upper-boundary`` (Cumulus' leaf beside ``count``), once per layout."""
        if not self._bounds_due:
            return []
        self._bounds_due = False
        return [StateUpdate(ts_ns, c, leaf, upper, self.name) for c, leaf, upper in self._bounds]

    def read(self) -> int:
        fec = [p for p in self._order if p.fec == OK]
        stats = [p for p in self._order if p.stats == OK]
        if not fec and not stats:
            return 0  # nothing to ask (every port unsupported, or none selected): an empty read
        assert self.io is not None
        reader = _backend.reader
        read: set[str] = set()
        try:
            for cmd, ports in ((reader.ETHNL_FEC_GET, fec), (reader.ETHNL_STATS_GET, stats)):
                if ports:
                    replies = self.io.query(cmd, [p.link.ifindex for p in ports], self._groups_for(cmd))
                    for port, raw in zip(ports, replies, strict=True):
                        if self._take(port, cmd, raw):
                            read.add(port.link.name)
        except OSError as exc:
            self.note_error(f"ethtool netlink: {exc}")
            return NO_DATA
        return len(read) if read else NO_DATA

    def _take(self, port: _Port, cmd: int, raw: bytes) -> bool:
        """One port's reply into the buffer; False when it gave nothing."""
        fec = cmd == _backend.reader.ETHNL_FEC_GET
        try:
            shape, values = _parse(cmd, raw)
        except OSError as exc:
            if exc.errno in _UNSUPPORTED:  # no longer offered (FEC turned off): not an error
                self._stale = True
            elif exc.errno not in _VANISHING:  # a removed port leaves with its link event
                self.note_error(f"{port.link.name}: {'FEC' if fec else 'stats'}: {exc}")
            return False
        except ValueError as exc:
            self.note_error(f"{port.link.name}: {'FEC' if fec else 'stats'}: {exc}")
            return False
        if shape != (port.fec_shape if fec else port.stats_shape):
            self._stale = True  # lanes, bins or statistics changed: set up again before the next read
            return False
        start = port.fec_at if fec else port.stats_at
        self.values[start:start + len(values)] = array("Q", values)
        return True

    def info(self) -> dict[str, Any]:
        unsupported = {p.link.name: [what for what, state in (("fec", p.fec), ("stats", p.stats))
                                     if state == UNSUPPORTED] for p in self._order}
        return {
            "family": self._family,
            "port_state": {p.link.name: {"fec": p.fec, "stats": p.stats} for p in self._order},
            "unsupported": {name: what for name, what in unsupported.items() if what},
        }
