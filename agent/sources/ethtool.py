"""ethtool source: driver statistics (``ethtool -S``) of every selected port.

Per port, driver info and the string table are read once (and again when the
link changes or the driver's count changes); each poll issues only
ETHTOOL_GSTATS, written by the reader straight into this source's value array.
The driver picks the name table below; names no table knows are still streamed,
under ``swtel:/interfaces/interface[name=X]/ethtool/<name>``, so nothing is hidden.
"""

from __future__ import annotations

import errno
import socket
from array import array
from dataclasses import dataclass

from agent import _backend
from agent.config import CounterFilter, Duration, setting
from agent.counters import (
    HIDDEN,
    Container,
    CounterSpec,
    CounterTable,
)
from agent.links import Link, select
from agent.sources import drivers
from agent.sources.base import (
    Source,
    SourceConfig,
    counter_wanted,
    doc_rule_row,
    rank_setting,
    register,
)
from agent.sources.drivers import PER_QUEUE, map_name, table_for

_VANISHING = (errno.ENODEV, errno.ENXIO)
_SKIPPED = -2  # ethtool_read: an idle port whose turn in the sweep is a later poll (values kept)
@dataclass
class _Port:
    link: Link
    driver: str
    names: list[str]


MAX_IDLE_INTERVAL_S = 60.0  # idle_interval: at most 1m


@dataclass
class EthtoolConfig(SourceConfig):
    """``sources.ethtool``."""

    interfaces: list[str] = setting(factory=lambda: ["*"], type="globs")
    exclude: list[str] = setting(factory=lambda: ["lo"], type="globs")
    counters: CounterFilter = setting(factory=CounterFilter,
                                      doc="counter-name filter on driver names (e.g. `HwIfIn*`)")
    per_queue: bool = setting(False, doc="also read per-queue/per-channel counters (mlx5 exposes thousands)")
    # A port none of whose counters moved for this long is read once per idle_interval
    # (turns spread over the polls) until one moves again; 0: every port every poll.
    idle_interval: Duration = setting(Duration(1.0), type="duration (0–1m)", doc=(
        "a port none of whose ethtool counters moved for this long is read once per `idle_interval` "
        "(the idle ports' turns spread evenly over the polls) instead of every poll, and every poll "
        "again from the first poll that sees one move. One `ETHTOOL_GSTATS` ioctl per port is most of "
        "a tick's CPU (kernel time; see PERFORMANCE.md), so idle ports cost a tenth at the defaults. "
        "A change on an idle port is seen within `idle_interval` plus one poll. `0` (or anything not "
        "above the poll interval): every port every poll"))
    # 0: switchd's HwIf* never take the kernel's OpenConfig leaves (on Cumulus both are
    # switchd's 2 s copy), so a switch without a plugin streams what it always did
    rank: int = rank_setting(0)


@register
class EthtoolSource(Source):
    name = "ethtool"
    config_class = EthtoolConfig
    doc = "driver/ASIC counters (`ETHTOOL_GSTATS`, string table cached per port)"

    @classmethod
    def doc_paths(cls) -> list[str]:
        out: list[str] = []
        for title, table in (("Cumulus switchd (`HwIf*`)", drivers.SWITCHD), ("mlxsw (Spectrum)", drivers.MLXSW),
                             ("mlx5 (ConnectX)", drivers.MLX5), ("every driver", drivers.GENERIC)):
            out += [f"## ethtool: {title}", "", "| source | name pattern | path | kind |", "|---|---|---|---|"]
            out += [doc_rule_row("ethtool", rule) for rule in table] + [""]
        return out

    @classmethod
    def check(cls, section: EthtoolConfig, where: str, problems: list[str], cfg) -> None:
        if section.idle_interval > MAX_IDLE_INTERVAL_S:
            problems.append(f"{where}.idle_interval: must be at most 1m (a quiet port is still read "
                            f"that often), got {section.idle_interval}")

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
            # the kernel's own bytes: a name that is not UTF-8 is escaped in link.name only
            driver = reader.ethtool_drvinfo(self._fd, link.kernel_name)[0]
            names = reader.ethtool_strings(self._fd, link.kernel_name)
        except OSError as exc:
            if exc.errno in _VANISHING:
                raise
            return None
        return _Port(link, driver, names) if names else None

    def _build(self, order: list[_Port]) -> None:
        sec = self.section
        specs: list[CounterSpec] = []
        shared: dict[Container, Container] = {}  # one Container and one leaf string per path,
        leaves: dict[str, str] = {}  # shared by the counters that have it (not one per counter)
        for port in order:
            rules = table_for(port.driver, port.names)
            for name in port.names:
                container, leaf, kind = map_name(rules, port.link.name, name)
                container = shared.setdefault(container, container)
                leaf = leaves.setdefault(leaf, leaf)
                wanted = counter_wanted(name, sec.counters.include, sec.counters.exclude) and (
                    sec.per_queue or not PER_QUEUE.match(name)
                )
                specs.append(CounterSpec(container, leaf, 64, kind if wanted else HIDDEN, port.link.name))
        self.table = CounterTable(self.name, specs)
        self.values = array("Q", bytes(8 * len(specs)))
        self._ifnames = [p.link.kernel_name for p in order]
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
