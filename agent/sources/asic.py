"""asic source: counters read straight from the switch ASIC through a plugin.

A plugin is a shared library implementing agent/asic/swtel_asic.h (a vendor SDK
shim, or the built-in simulated Spectrum switch, ``sim``). It runs in a helper process
(agent/asic/proxy.py), where the reader opens it with dlopen, so its crash or hang is
this source's fault, never the agent's; each poll is one bulk read of every counter
into memory shared with the agent.
The plugin names its counters as the switch does (Cumulus ``HwIf*``, the PHY
set ``phy_*``, mlx5 RDMA ``hw_counters`` for a host view), and this file maps
them through the same driver tables as the ethtool source, so a vendor shim
needs only its C side. The plugin's own timestamp is the sample's time.

The port set is the plugin's, not the kernel's: when the plugin's generation
changes (a breakout, a port added or removed), the layout is listed again and
the engine adds and deletes subtrees as it does on a link event.
"""

from __future__ import annotations

import fnmatch
import re
import time
from array import array
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from agent import _backend, logs
from agent.asic import builtin_path, open_plugin
from agent.asic.proxy import (
    OPEN_WAIT_S,
    READ_PENDING,
    Backoff,
    PluginAborted,
    PluginFault,
    PluginProxy,
    read_timeout,
    read_wait,
)
from agent.asic.trust import check_plugin, refusal_signature, signature
from agent.config import MAX_STRING, CounterFilter, setting
from agent.counters import (
    COUNTER,
    GAUGE,
    HIDDEN,
    OPENCONFIG,
    SWTEL_ORIGIN,
    Container,
    StateUpdate,
    TableBuilder,
)
from agent.pathgrammar import (
    FEC_HISTOGRAM_LIST,
    drop_reason_path,
    fec_histogram_bin_path,
    interface_path,
    qos_interface_path,
    rdma_port_path,
)
from agent.sources import drivers
from agent.sources.base import (
    NO_DATA,
    Source,
    SourceConfig,
    counter_wanted,
    doc_row,
    doc_rule_row,
    interface,
    leaf_name,
    rank_setting,
    register,
)
from agent.sources.drivers import MLXSW, QUEUE, SWITCHD, SWQUEUE, Rule, rules

log = logs.get("asic")
RETRY_OPEN_S = 30.0  # a plugin that failed to open is tried again this often
STUCK_CHANGES = 3  # ECHANGED this many reads in a row (each after a fresh listing): a fault
log_rate = logs.RateLimiter(60.0)
PORT_UP = 0x1  # SWTEL_ASIC_PORT_UP: operationally up
PORT_HOST = 0x2  # SWTEL_ASIC_PORT_HOST: a host-side RDMA device, not a switch port
WIDTHS = (32, 40, 48, 64)  # counter widths the change kernel unwraps
KIND_COUNTER, KIND_GAUGE, KIND_HISTOGRAM, KIND_PEAK = 0, 1, 2, 3  # enum swtel_asic_kind
KINDS = {KIND_COUNTER: "COUNTER", KIND_GAUGE: "GAUGE", KIND_HISTOGRAM: "HISTOGRAM", KIND_PEAK: "PEAK"}


def layout_problem(counters: list[list[tuple]]) -> str | None:
    """Why a layout cannot be streamed as declared (a width or kind swtel does not implement),
    or None. Refused whole, with the first offending counter named."""
    for port_no, descs in enumerate(counters):
        for name, width, kind, _nbins, _bins in descs:
            if width not in WIDTHS:
                return (f"port {port_no} counter {name!r}: width {width} (supported: "
                        f"{', '.join(map(str, WIDTHS))})")
            if kind not in KINDS:
                return (f"port {port_no} counter {name!r}: kind {kind} (unknown; this swtel knows "
                        f"{', '.join(f'{k} {v}' for k, v in KINDS.items())})")
    return None


def slots(desc: tuple) -> int:
    """Values one descriptor takes in a read: a HISTOGRAM's bins, else one."""
    return len(desc[4]) if desc[2] == KIND_HISTOGRAM else 1


#: the PHY rule's leaf for the RS-FEC codeword-error histogram (and ethnl's for the same bins)
FEC_HISTOGRAM = "rs-fec-histogram"
_FEC_STATE = "/fec/state"
_TOP = 2**64 - 1  # a bin without an upper bound (bin_info's UINT64_MAX)


def bin_container(container: Container, leaf: str, index: int, low: int, high: int) -> Container:
    """Where bin ``index`` of histogram ``leaf`` goes: a list below the histogram's own
    container, keyed by the bin's index and inclusive bounds (``upper=inf``: none; the keys sort in this
    order, as gNMI renders them), its value
    the leaf ``count`` (docs/paths.md, "Histograms")."""
    top = "inf" if high >= _TOP else str(high)
    return Container(container.origin, f"{container.path}/{leaf}/bin[index={index}][lower={low}][upper={top}]")


def fec_upper_boundary(low: int, high: int) -> int:
    """Cumulus' key of a bin: its inclusive upper bound; for an open last bin its lower one
    (Spectrum's bin 15 counts 15 corrected symbols, the most RS(544,514) corrects: a codeword
    with more is uncorrectable, not in the histogram), so every key is a distinct integer."""
    return low if high >= _TOP else high


#: the RS-FEC histogram on Cumulus' layout: its container below a PHY, and its list of bins
_FEC_CONTAINER, _, _FEC_LIST = FEC_HISTOGRAM_LIST.rpartition("/")  # histograms/state, rs-num-corr-err


@lru_cache(maxsize=256)
def fec_bin_leaf(upper: int, leaf: str) -> str:
    """A FEC bin's leaf below its histogram's container: ``rs-num-corr-err[upper-boundary=U]/<leaf>``
    (one string for every port and lane: cached)."""
    return f"{_FEC_LIST}[upper-boundary={upper}]/{leaf}"


def histogram_bin(container: Container, leaf: str, index: int, low: int, high: int) -> tuple[Container, str]:
    """Where bin ``index`` of histogram ``leaf`` counts: (container, leaf). The RS-FEC histogram
    of a port's (or a lane's) PHY is streamed on Cumulus Linux 5.15's layout,
    ``.../phy[/channels/channel[id=N]]/histograms/state/rs-num-corr-err[upper-boundary=U]/count``,
    for a collector built for a Cumulus switch: the bins of one histogram share its container
    (``.../histograms/state``), each a keyed leaf (a container and a path string a bin held 1 MiB
    on the simulated spine, issue 35); any other histogram's bin is a container of its own
    (:func:`bin_container`), leaf ``count``."""
    path = container.path
    if leaf == FEC_HISTOGRAM and container.origin == OPENCONFIG and path.endswith(_FEC_STATE):
        phy = path[:-len(_FEC_STATE)]  # .../phy or .../phy/channels/channel[id=N]
        return Container(OPENCONFIG, f"{phy}/{_FEC_CONTAINER}"), fec_bin_leaf(fec_upper_boundary(low, high), "count")
    return bin_container(container, leaf, index, low, high), "count"


def fec_bounds(where: list[tuple[Container, str]], bins: list[tuple[int, int]]) -> list[tuple[Container, str, int]]:
    """The ``upper-boundary`` leaf of each RS-FEC bin on Cumulus' layout, beside its ``count``:
    (container, leaf, U); the other bins (a histogram swtel streams in its own form) have none."""
    out = []
    for (c, leaf), (low, high) in zip(where, bins, strict=True):
        if leaf.startswith(_FEC_LIST):
            upper = fec_upper_boundary(low, high)
            out.append((c, fec_bin_leaf(upper, "upper-boundary"), upper))
    return out


_IF = interface_path("{port}")  # a str.format template: filled with an escaped name
_STATE = (OPENCONFIG, f"{_IF}/state/counters")
_PHY = (OPENCONFIG, f"{_IF}/phy/state")
_PHY_FEC = (OPENCONFIG, f"{_IF}/phy/fec/state")
_PHY_LANE = (OPENCONFIG, f"{_IF}/phy/channels/channel[id={{n}}]/fec/state")
_RAW = (SWTEL_ORIGIN, f"{_IF}/asic")
# an ingress priority group's buffer (shared and headroom), and a port's share of a pool of
# shared buffer 0 (as devlink's sb port pool reports it)
_PG = (SWTEL_ORIGIN, qos_interface_path("{port}") + "/input/priority-groups/priority-group[name={n}]/state")
_POOL_IN = (SWTEL_ORIGIN, f"{_IF}/devlink/sb[index=0]/pool[index={{n}}][type=ingress]/state")

# What the ASIC has beyond switchd's HwIf* set: the PHY (PPCNT) counters that
# `nv show interface swpN link phy-detail` and Cumulus' OTLP export show (paths as
# Cumulus' own gNMI tree), carrier changes, per-TC ECN marks and buffer occupancy.
PHY = rules(
    (r"phy_received_bits", _PHY, "received-bits"),
    (r"phy_symbol_errors", _PHY, "symbol-errors"),
    (r"phy_effective_errors", _PHY, "effective-errors"),
    (r"phy_raw_errors", _PHY, "raw-errors"),
    (r"phy_corrected_bits", _PHY_FEC, "corrected-bits"),
    (r"phy_raw_errors_lane(?P<n>\d+)", _PHY_LANE, "raw-errors"),
    (r"carrier_changes", _STATE, "carrier-transitions"),
    (r"ecn_marked_tc_(?P<n>\d+)", QUEUE, "ecn-marked-pkts"),
    (r"tc_curr_occupancy_(?P<n>\d+)", SWQUEUE, "current-occupancy", GAUGE),
    (r"tc_watermark_(?P<n>\d+)", SWQUEUE, "watermark", GAUGE),
    # ABI 1.1: the highest occupancy since the previous read (PEAK), the RS-FEC histogram
    (r"tc_peak_occupancy_(?P<n>\d+)", SWQUEUE, "peak-occupancy", GAUGE),
    (r"pg_curr_occupancy_(?P<n>\d+)", _PG, "current-occupancy", GAUGE),
    (r"pg_watermark_(?P<n>\d+)", _PG, "watermark", GAUGE),
    (r"pg_peak_occupancy_(?P<n>\d+)", _PG, "peak-occupancy", GAUGE),
    (r"pg_headroom_occupancy_(?P<n>\d+)", _PG, "headroom-occupancy", GAUGE),
    (r"pg_headroom_watermark_(?P<n>\d+)", _PG, "headroom-watermark", GAUGE),
    (r"pg_headroom_peak_occupancy_(?P<n>\d+)", _PG, "headroom-peak-occupancy", GAUGE),
    (r"ingress_pool_occupancy_(?P<n>\d+)", _POOL_IN, "occupancy", GAUGE),
    (r"ingress_pool_peak_occupancy_(?P<n>\d+)", _POOL_IN, "peak-occupancy", GAUGE),
    (r"phy_rs_fec_histogram", _PHY_FEC, FEC_HISTOGRAM),
    (r"phy_rs_fec_histogram_lane(?P<n>\d+)", _PHY_LANE, FEC_HISTOGRAM),  # below the lane's channel, as ethnl's
)

#: every switch-port name goes through these, first match wins (SWITCHD ends in a HwIf* catch-all)
RULES: list[Rule] = PHY + MLXSW + SWITCHD


def host_container(port: str) -> Container:
    """A host view's RDMA device (``mlx5_0`` or ``mlx5_0/2``): the rdma source's own path,
    so a collector sees a simulated host exactly as a real one."""
    dev, _, num = port.partition("/")
    return Container(
        SWTEL_ORIGIN,
        f"{rdma_port_path(dev, num or '1')}/hw-counters",
    )


#: a per-reason drop counter, ``wjh_<group>_<reason>``: What Just Happened's group and the reason
#: as devlink names its trap (``wjh_l2_ingress_vlan_filter``); the simulated switch's, or a vendor
#: plugin's that names them alike
DROP_REASON = re.compile(r"^wjh_(l1|l2|l3|tunnel|buffer|acl)_([a-z0-9]+(?:_[a-z0-9]+)*)$")
DROP_REASON_DOC = ("wjh_<group>_<reason>", drop_reason_path("X", "<group>", "<reason>") + "/packets")


def map_name(port: str, name: str, host: bool = False) -> tuple[Container, str, int]:
    """A plugin's counter name -> (container, leaf, kind); unknown names keep a raw path. A drop
    reason's counter goes to the drop-reason tree (docs/insights.md), its reason kebab-cased as
    the devlink_trap source writes a trap's."""
    if host:
        return host_container(port), leaf_name(name), COUNTER
    m = DROP_REASON.match(name)
    if m:
        return Container(SWTEL_ORIGIN, drop_reason_path(port, m.group(1), leaf_name(m.group(2)))), "packets", COUNTER
    return drivers.map_name(RULES, port, name, raw=_RAW)


#: the leaves of buffer data (queue, priority group and pool levels): not kept when
#: ``sources.asic.buffers`` is off
BUFFER_LEAVES = frozenset({"current-occupancy", "watermark", "peak-occupancy", "headroom-occupancy",
                           "headroom-watermark", "headroom-peak-occupancy", "occupancy"})

ASIC_BUILTIN = ("sim",)  # built-in ASIC plugins (agent/asic/__init__.py builds the path)
MAX_CONFIG = 4096  # characters of sources.asic.config


@dataclass
class AsicConfig(SourceConfig):
    """``sources.asic``: counters read straight from the switch ASIC through a plugin
    (agent/asic/swtel_asic.h)."""

    enabled: bool = setting(False)
    plugin: str = setting("sim", type="`sim` or absolute path", doc=(
        "a built-in plugin or a vendor's shared library implementing `swtel_asic.h`"))
    config: str = setting("", type="string (≤ 4096 chars)", doc=(
        "handed to the plugin's `open()` as is; for `sim`: `role=spine\\|leaf\\|host seed=N start=NS ports=N "
        "uplinks=4\\|8 load=F scenario=NAME@5s-25s:PORT` (see asic-plugin.md). For `sim` (when the source "
        "is enabled or the string is not empty) the config is checked by the sim's own parser: validate, "
        "run and a reload open the built-in sim with it and close it again, and refuse what its `open()` "
        "refuses, in its words (`sources.asic.config: sim: scenario 'imbalance@3s:swp99': no port "
        "'swp99'`)"))
    interfaces: list[str] = setting(factory=lambda: ["*"], type="globs", doc="ports of the plugin to report")
    exclude: list[str] = setting(factory=list, type="globs")
    counters: CounterFilter = setting(factory=CounterFilter, sub={
        "include": {"doc": "plugin counter names, e.g. `HwIf*`, `phy_*`"}})
    rank: int = rank_setting(2)  # the ASIC's fresh values over the kernel's and the driver's
    buffers: bool = setting(True, doc=(
        "buffer data: per-TC and per-PG occupancy, watermark and peak, headroom, pool occupancy "
        "(levels the plugin declares as `GAUGE` or `PEAK` whose path ends in an occupancy or watermark "
        "leaf). `false`: the plugin's bulk read still fills them, but the source keeps only the other "
        "values (gathered in C), so they are neither diffed, stored nor exported, and "
        "`insights.congestion` says in status that it has no data"))


def sim_config_problem(config: str) -> str | None:
    """Why the built-in sim's open() refuses ``config``, in its own words, or None."""
    path = builtin_path("sim")
    if path is None:
        return None  # not built: the agent says so at load; nothing to ask here
    try:
        handle = _backend.reader.asic_open(path, config)
    except OSError as exc:
        text = str(exc)
        _, sep, reason = text.partition("open failed: ")
        return reason if sep else text
    except ValueError as exc:  # an embedded NUL, which no C string carries
        return f"not a valid plugin config string ({exc})"
    _backend.reader.asic_close(handle)
    return None


@register
class AsicSource(Source):
    name = "asic"
    config_class = AsicConfig
    doc = ("counters read straight from the ASIC through a plugin ([asic-plugin.md](asic-plugin.md)); "
           "`sim` is the built-in simulated Spectrum switch")
    uses_links = False
    opens_late = True  # the plugin opens in its helper: the first table may take seconds

    @classmethod
    def doc_paths(cls) -> list[str]:
        return ["## asic plugin: what the ASIC has beyond `HwIf*`", "",
                "The asic source maps a plugin's names through this table, then the mlxsw and "
                "switchd tables of the ethtool source (so `HwIfInOctets` from a plugin lands where ethtool "
                "puts it). Names no table knows go to `swtel:/interfaces/interface[name=X]/asic/<name>`. "
                "A host view's RDMA device (`SWTEL_ASIC_PORT_HOST`) uses the RDMA paths. "
                "State, sent on change: the plugin's `UP` flag as `/interfaces/interface[name=X]/state/oper-status` "
                "(UP, DOWN) and a breakout port's parent as `.../state/hardware-port`. A `HISTOGRAM` streams "
                "one counter per bin: the RS-FEC histogram on Cumulus Linux 5.15's layout, each bin keyed "
                "by its inclusive upper bound U in corrected symbols per codeword (an open last bin: its "
                "lower bound), with Cumulus' `upper-boundary` leaf (U) beside `count`, sent once as a "
                "state; any other histogram as `<path>/<leaf>/bin[index=I][lower=L][upper=U]/count`.", "",
                "| source | name pattern | path | kind |", "|---|---|---|---|",
                *(doc_rule_row("asic", rule) for rule in PHY if rule.leaf != FEC_HISTOGRAM),
                # a HISTOGRAM: one counter per bin, the RS-FEC one on Cumulus' layout
                doc_row("asic", "phy_rs_fec_histogram (bin up to U)", f"{fec_histogram_bin_path('X', 'U')}/count"),
                doc_row("asic", "phy_rs_fec_histogram_laneN (bin up to U)",
                        f"{fec_histogram_bin_path('X', 'U', 'N')}/count"),
                doc_row("asic", DROP_REASON_DOC[0], f"swtel:{DROP_REASON_DOC[1]}"), ""]
    _refused: tuple | None = None  # the plugin file's signature when it was refused for what it is

    @classmethod
    def check(cls, section: AsicConfig, where: str, problems: list[str], cfg) -> None:
        """The plugin's name, and the built-in sim's config string judged by the sim's own
        parser: the sim is opened with it (parse and build, no I/O; it is installed with the
        package) and closed again, so validate refuses exactly what the agent's open() would."""
        if not section.plugin or not (section.plugin in ASIC_BUILTIN or section.plugin.startswith("/")):
            problems.append(f"{where}.plugin: expected {' or '.join(ASIC_BUILTIN)} or an absolute path "
                            f"to a plugin's shared library, got {section.plugin!r}")
        if len(section.config) > MAX_CONFIG:
            problems.append(f"{where}.config: at most {MAX_CONFIG} characters, got {len(section.config)}")
        elif section.plugin in ASIC_BUILTIN and (section.enabled or section.config.strip()):
            problem = sim_config_problem(section.config)
            if problem:
                problems.append(f"{where}.config: {problem}")

    @classmethod
    def validate_check(cls, section: AsicConfig, where: str, problems: list[str], cfg) -> None:
        """``swtel validate``: an enabled plugin given by path, checked as the agent checks it
        before loading it (agent/asic/trust.py: owner, modes, directories, ELF, the entry symbol)."""
        if not section.enabled or section.plugin in ASIC_BUILTIN or not section.plugin.startswith("/") or \
                len(section.plugin) > MAX_STRING:
            return
        try:
            check_plugin(section.plugin)
        except OSError as exc:
            problems.append(f"{where}.plugin: {exc}")

    def __init__(self, cfg) -> None:
        super().__init__(cfg)
        self._handle: Any = None
        self._path = ""
        self._generation = 0
        self._stale = True  # the layout must be listed (first setup, or the plugin said ECHANGED)
        self._retry_at = 0.0
        self._layout_retry_at = 0.0  # a refused layout is listed again from then on
        self._backoff = Backoff()  # restart delays after a plugin crash or hang
        self._opening: PluginProxy | None = None  # a helper whose open is in flight
        # opened, and its first read still running in the helper: the first snapshot waits
        self._first_read_pending = False
        self._interrupted = False  # the agent is stopping: start no helper
        self._oper: dict[str, tuple[str, str]] = {}  # port -> (oper-status, breakout parent)
        self._oper_sent: dict[str, tuple[str, str]] = {}
        # the RS-FEC bins' ``upper-boundary`` leaves (Cumulus' layout): a constant per bin,
        # sent as a state once per layout
        self._bounds: list[tuple[Container, str, int]] = []
        self._bounds_due = False
        self.layout_changes = 0  # reads answered ECHANGED
        # polls that found the helper still in an open or a read and went on without it
        self.polls_left_in_flight = 0
        self._raw: array | None = None  # every value the plugin fills, when not all are kept
        self._keep: array | None = None  # ... and the slots of it kept (sources.asic.buffers off)
        self._changed_in_a_row = 0

    @property
    def needs_setup(self) -> bool:
        if self._handle is None:
            return time.monotonic() >= self._retry_at
        return self._stale and time.monotonic() >= self._layout_retry_at

    def _open(self) -> bool:
        sec = self.section
        if self._refused is not None and signature(sec.plugin) == self._refused:
            # refused for what the file is (agent/asic/trust.py): unchanged, so not tried (nor
            # logged) again; a change to it or a config reload tries again
            self._retry_at = time.monotonic() + RETRY_OPEN_S
            return False
        try:
            if self._opening is None:  # (checked once per start, not at each pass while it opens)
                # checked and loaded through the same open file (agent/asic/trust.py)
                with open_plugin(sec.plugin) as plugin:
                    self._path = plugin.path
                    self._handle = self._start_plugin(self._path, sec.config, plugin.fd)
            else:
                self._handle = self._start_plugin(self._path, sec.config)
        except (OSError, ValueError) as exc:
            if isinstance(exc, PluginAborted):
                return False
            self._refused = refusal_signature(sec.plugin, exc)
            retry_s = self._faulted(exc) if isinstance(exc, PluginFault) else RETRY_OPEN_S
            self._retry_at = time.monotonic() + retry_s
            self.note_error(str(exc))
            self.fault = f"plugin not open: {exc}"
            log.error("asic plugin unavailable; other sources keep running", plugin=sec.plugin,
                      error=str(exc), retry_s=retry_s)
            return False
        if self._handle is None:
            return False  # its helper is still starting or opening it: asked again next tick
        log.info("asic plugin opened", plugin=sec.plugin, path=self._path)
        self._first_read_pending = True
        self.fault = None
        self._refused = None
        self._stale = True
        return True

    def setup(self, links) -> None:
        if self._handle is None and not self._open():
            return
        try:
            gen, ports, counters = self._plugin("layout")
        except OSError as exc:
            self._refuse_layout(str(exc))
            return
        problem = layout_problem(counters)
        if problem:
            self._refuse_layout(problem)
            return
        self._generation = gen
        self._stale = False
        self._layout_retry_at = 0.0
        self._build(ports, counters)

    def _refuse_layout(self, problem: str) -> None:
        """A layout that cannot be streamed: a fault until one can; listed again after
        RETRY_OPEN_S (a plugin does not fix its layout between two polls), counted once each."""
        self.note_error(problem)
        self.fault = f"layout refused: {problem}"
        self._layout_retry_at = time.monotonic() + RETRY_OPEN_S
        log_rate.log(log, "error", ("layout", self.section.plugin), "asic layout refused",
                     plugin=self.section.plugin, error=problem, retry_s=RETRY_OPEN_S)

    def _build(self, ports: list[tuple], counters: list[list[tuple]]) -> None:
        sec = self.section
        build = TableBuilder(self.name)  # columns as they come: no CounterSpec object a counter
        chosen: list[str] = []
        speeds: dict[str, int] = {}
        hidden = Container(SWTEL_ORIGIN, "/agent/asic/unselected")
        skipped: list[int] = []  # the plugin's value slots not kept (buffer data off)
        oper: dict[str, tuple[str, str]] = {}
        bounds: list[tuple[Container, str, int]] = []
        # one Container object per path, shared by its counters (a port's ~40 counters of
        # ``state/counters`` are one object, not 40 equal ones: ~170 B a value on a spine)
        shared: dict[Container, Container] = {}
        leaves: dict[str, str] = {}  # and one string per leaf name
        for (port, parent, speed_mbps, flags), descs in zip(ports, counters, strict=True):
            if not self.serves(port):
                # The plugin fills every counter; these keep their slots but are never reported.
                for d in descs:
                    for k in range(slots(d)):
                        build.add(hidden, f"{port}/{d[0]}/{k}", 64, HIDDEN)
                continue
            chosen.append(port)
            host = bool(flags & PORT_HOST)
            if not host:
                oper[port] = ("UP" if flags & PORT_UP else "DOWN", parent)
            if speed_mbps and not host:
                speeds[port] = int(speed_mbps) * 1_000_000
            for name, width, kind, _nbins, bins in descs:
                container, leaf, rule_kind = map_name(port, name, host)
                container = shared.setdefault(container, container)
                leaf = leaves.setdefault(leaf, leaf)
                wanted = counter_wanted(name, sec.counters.include, sec.counters.exclude)
                if kind == KIND_HISTOGRAM:  # one cumulative counter per bin, in bin order
                    where = [histogram_bin(container, leaf, k, low, high) for k, (low, high) in enumerate(bins)]
                    where = [(shared.setdefault(c, c), bin_leaf) for c, bin_leaf in where]
                    for c, bin_leaf in where:
                        build.add(c, bin_leaf, width, COUNTER if wanted else HIDDEN, port)
                    if wanted and leaf == FEC_HISTOGRAM:
                        bounds += fec_bounds(where, bins)
                    continue
                if not sec.buffers and kind in (KIND_GAUGE, KIND_PEAK) and leaf in BUFFER_LEAVES:
                    skipped.append(len(build) + len(skipped))  # read by the plugin, never kept
                    continue
                if not wanted:
                    out_kind = HIDDEN
                elif kind in (KIND_GAUGE, KIND_PEAK):  # the plugin says it is a level: trust it
                    out_kind = GAUGE  # (a PEAK is a level read once per poll: diffed as one)
                else:
                    out_kind = rule_kind
                build.add(container, leaf, width, out_kind, port)
        self.table = build.done()
        self.values = array("Q", bytes(8 * len(self.table)))
        # Buffer data off: the plugin still fills every slot (into _raw); only the others are
        # gathered into values, so nothing after the read sees the buffer slots at all.
        self._raw = self._keep = None
        if skipped:
            total = len(self.table) + len(skipped)
            gone = set(skipped)
            self._keep = array("I", (i for i in range(total) if i not in gone))
            self._raw = array("Q", bytes(8 * total))
        self.ports = chosen
        self.port_speeds = speeds
        self._oper = oper
        self._bounds, self._bounds_due = bounds, bool(bounds)

    def read(self) -> int:
        if self._handle is None or self._stale:
            self._first_read_pending = False  # (a refused layout: no read to wait for)
            return NO_DATA
        into = self.values if self._raw is None else self._raw
        status, ts_ns = self._plugin("read", self._generation, into, self._read_wait)
        if status == READ_PENDING:
            self.polls_left_in_flight += 1
            return NO_DATA  # the plugin's read is still running in its helper: collected next tick
        self._first_read_pending = False
        if status == _backend.reader.ASIC_ECHANGED:
            self._stale = True  # list the layout again before the next read
            self.layout_changes += 1
            self._changed_in_a_row += 1
            if self._changed_in_a_row >= STUCK_CHANGES:
                message = (f"layout keeps changing: {self._changed_in_a_row} reads in a row returned "
                           "ECHANGED right after listing it (the plugin's generation or value count "
                           "does not settle); no data is read meanwhile")
                self.note_error(message)
                self.fault = message
                log_rate.log(log, "error", ("stuck", self.section.plugin), "asic layout does not settle",
                             plugin=self.section.plugin, in_a_row=self._changed_in_a_row)
            return NO_DATA
        if self._changed_in_a_row >= STUCK_CHANGES:
            log.info("asic layout settled", plugin=self.section.plugin, after=self._changed_in_a_row)
        self._changed_in_a_row = 0
        if self._keep is not None:
            _backend.reader.gather(self._raw, self._keep, self.values)
        self.fault = None
        self.sample_ts_ns = ts_ns
        return len(self.ports)

    def states(self, ts_ns: int) -> list[StateUpdate]:
        """A port's oper-status (the plugin's UP flag) and, for a breakout port, its parent as
        OpenConfig's hardware-port, on change; the same leaves the netdev source sends."""
        if not self._bounds_due and self._oper_sent == self._oper:
            return []  # the steady state: one comparison in C, not a look per port a tick
        out = []
        for port, (status, parent) in self._oper.items():
            if self._oper_sent.get(port) == (status, parent):
                continue
            container = interface(port, OPENCONFIG, "state")
            out.append(StateUpdate(ts_ns, container, "oper-status", status, self.name))
            if parent:
                out.append(StateUpdate(ts_ns, container, "hardware-port", parent, self.name))
            self._oper_sent[port] = (status, parent)
        for port in [p for p in self._oper_sent if p not in self._oper]:
            del self._oper_sent[port]  # gone: its subtree is deleted with the port
        if self._bounds_due:
            # once a layout: the store keeps them (snapshots send them again), so the list goes
            # (9,800 tuples, ~0.6 MiB on the spine)
            self._bounds_due = False
            out += [StateUpdate(ts_ns, c, leaf, upper, self.name) for c, leaf, upper in self._bounds]
            self._bounds = []
        return out

    def inherit(self, old: Source) -> None:
        # Same plugin and config (only intervals or globs changed): keep the open ASIC, so
        # a simulated switch keeps its clock and a vendor's SDK is not re-initialised.
        if isinstance(old, AsicSource) and old._handle is not None and (
            old.section.plugin, old.section.config) == (self.section.plugin, self.section.config):
            self._handle, old._handle = old._handle, None
            self._path = old._path
            self._stale = True
            self._handle.read_timeout_s = read_timeout(self.cfg.interval_of(self.name))
        if isinstance(old, AsicSource) and old._refused is None:  # a refused file: checked again at once
            self._backoff, self._retry_at = old._backoff, old._retry_at

    def info(self) -> dict[str, Any]:
        return {"plugin": self.section.plugin, "path": self._path or None,
                "generation": self._generation, "open": self._handle is not None,
                "layout_changes": self.layout_changes,
                # the plugin's helper process (agent/asic/proxy.py), and its crashes and hangs
                "helper_pid": self._handle.pid if self._handle is not None else None,
                # which helper: "c" (swtel-asic-host) or "python" (agent/asic/host.py)
                "helper": self._handle.helper if self._handle is not None else None,
                "plugin_faults": self._backoff.faults,
                "polls_left_in_flight": self.polls_left_in_flight}

    def close(self) -> None:
        if self._opening is not None:
            self._opening.close()
            self._opening = None
        if self._handle is not None:
            self._handle.close()  # the helper is killed when it does not answer within 0.5 s
            self._handle = None

    def interrupt(self) -> None:
        self._interrupted = True
        for proxy in (self._opening, self._handle):
            if proxy is not None:
                proxy.abort()

    # ------------------------------------------------------------ the plugin's helper process
    def _start_plugin(self, path: str, config: str, fd: int | None = None) -> PluginProxy | None:
        """Open the plugin in a helper process of its own (agent/asic/proxy.py): its crash or
        hang is a fault of this source, never of the agent. None while the helper is still
        starting or opening the plugin: the tick thread waits at most OPEN_WAIT_S per pass.
        ``fd``, the checked file held open, starts a helper; without it, the one opening."""
        if self._interrupted:
            raise PluginAborted(f"asic plugin {path}: not started (the agent is stopping)")
        proxy = self._opening
        if fd is not None or proxy is None or proxy.path != path:
            if proxy is not None:
                proxy.close()
            if fd is None:
                raise ValueError(f"asic plugin {path}: no checked file to start its helper with")
            self._opening = proxy = PluginProxy(read_timeout(self.cfg.interval_of(self.name)))
            try:
                proxy.start(path, config, fd)
            except BaseException:
                self._opening = None
                proxy.close()
                raise
        try:
            if not proxy.poll_open(OPEN_WAIT_S):
                self.polls_left_in_flight += 1
                return None
        except BaseException:
            self._opening = None
            proxy.close()
            raise
        self._opening = None
        return proxy

    def serves(self, port: str) -> bool:
        sec = self.section
        return any(fnmatch.fnmatchcase(port, p) for p in sec.interfaces) and not any(
            fnmatch.fnmatchcase(port, p) for p in sec.exclude)

    @property
    def starting(self) -> bool:
        # A read that outlasted its pass (a loaded machine, a slow plugin) is collected on a
        # later one: until the first is, the store holds none of the ASIC's values.
        return self._opening is not None or (self._first_read_pending and self._handle is not None)

    @property
    def _read_wait(self) -> float:
        """How long a read may hold the tick thread before it is collected on a later pass."""
        return read_wait(self.cfg.interval_of(self.name))

    def _plugin(self, call: str, *args: Any) -> Any:
        """One call into the plugin's helper; a crash or hang drops the helper (a new one is
        started after the backoff) and is raised on as an OSError naming plugin, call, signal."""
        try:
            return getattr(self._handle, call)(*args)
        except PluginAborted:
            self._handle = None
            raise
        except PluginFault as exc:
            self._handle = None
            self._stale = True
            self._retry_at = time.monotonic() + self._faulted(exc)
            raise

    def _faulted(self, exc: PluginFault) -> float:
        """Report a crash or hang (status shows it until a read succeeds); the delay before
        the helper is started again."""
        delay = self._backoff.fault()
        self.fault = str(exc)
        log_rate.log(log, "error", ("fault", self.section.plugin, exc.call, exc.reason),
                     "asic plugin fault; the other sources keep running", plugin=self.section.plugin,
                     call=exc.call, reason=exc.reason, error=str(exc), restart_in_s=delay)
        return delay
