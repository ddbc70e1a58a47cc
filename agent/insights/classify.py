"""Which counters the detectors read: each CounterSpec -> a semantic, computed once per table.

A semantic is a short key ``(sem, sub)``: ``sem`` names what the counter measures
(``rx-octets``, ``symbol-errors``, ``pfc-duration`` ...), ``sub`` tells apart counters
of one port that share a semantic (the PFC priority, the drop counter's leaf, the RoCE
counter's name). The table is matched by the shape of the container path below the
port (origin-agnostic), so the netdev, ethtool, asic and rdma sources all feed the
same detectors. Unknown counters map to None and cost one list lookup per change.

The tables are built from declarations: :func:`declare` (a semantic), :func:`declare_leaves`
(rows below a port) and :func:`declare_prefix` (other trees). The OpenConfig vocabulary that
several sources share is declared here; a source declares its own on its class
(``Source.semantics``, ``levels``, ``classifiers``, agent/sources/base.py), so a new source and
the detector that reads it are one file each.
"""

from __future__ import annotations

import re
from array import array
from collections.abc import Callable, Mapping

from agent.counters import COUNTER, GAUGE, CounterSpec, CounterTable
from agent.pathgrammar import (
    DEVLINK_DEVICE_PREFIX,
    INTERFACE_PREFIX,
    KEY_VALUE_RE,
    QOS_INTERFACE_PREFIX,
    RDMA_DEVICE_PREFIX,
    bin_of_count,
    interface_path,
    qos_interface_path,
    unescape_key,
)

MACHINERY = True  # the pipeline's, not a plugin (agent/registry.py load_plugins)

#: a set of semantics is an int, one bit per semantic: the feeds' per-change loop ORs a counter's
#: bit into its port's mask in a u32 (feed_add: agent/_ext/feeds.c and its fallback), so the
#: mask is MASK_WIDTH bits wide; its top bit is SPILL, never a semantic's. Semantics beyond the
#: first MASK_WIDTH - 1 share the last semantic bit (see :func:`declare`). Widening (when the
#: semantics a detector reads outgrow 31): feed_add's ``bits`` and ``mask`` to uint64_t and
#: PyLong_FromUnsignedLongLong, ``Layout.bits`` to array "Q", then MASK_WIDTH = 64 here.
MASK_WIDTH = 32
#: a sample's bit (not a semantic's) when a FEC bin's delta went into its feed's dict instead of
#: its row (a value past int64): readers of the row then take the two together (Layout.vcols)
SPILL = 1 << (MASK_WIDTH - 1)
_SHARED = MASK_WIDTH - 2  # the last semantic bit: the 31st semantic and every later one share it

#: every semantic, in the order declared (its bit is its index's, up to _SHARED)
ALL: list[str] = []
#: the semantics that are levels (read from gauges)
LEVELS: set[str] = set()
#: one bit per semantic (a set of semantics as an int: the feeds' per-change loop ORs them). A bit
#: is a hint, a superset: a lazy detector is called when one of its bits moved, so one whose
#: semantic shares the last bit may see a sample where only another of those moved (none of its
#: keys in the accumulation: as if nothing of its changed). SPILL is never a semantic's bit.
BITS: dict[str, int] = {}


def declare(sem: str, *, level: bool | None = None) -> str:
    """Make ``sem`` a semantic (idempotent) and return it: a source declares what it reads
    (Source.semantics), a detector what it reads (``sems``: :func:`mask` declares them), in
    whichever order they are imported. ``level``: read from gauges (True), counters (False),
    or None (not said here: a source says it)."""
    if sem not in BITS:
        BITS[sem] = 1 << min(len(ALL), _SHARED)
        ALL.append(sem)
    if level is not None:
        if _KIND.setdefault(sem, level) != level:
            raise ValueError(f"semantic {sem!r} declared both as a level and as a counter")
        if level:
            LEVELS.add(sem)
    return sem


_KIND: dict[str, bool] = {}  # a semantic's declared kind (True: a level), once said


# Semantics (the ``sem`` part), in the order of their bits: the semantics every source below
# shares (the OpenConfig vocabulary); a new source declares its own (Source.semantics).
RX_OCTETS = declare("rx-octets", level=False)
TX_OCTETS = declare("tx-octets", level=False)
RX_BITS = declare("rx-bits", level=False)  # PHY received bits (line rate x time: idles count too)
SYMBOL = declare("symbol-errors", level=False)  # post-FEC symbol errors
UNCORRECTABLE = declare("uncorrectable", level=False)  # FEC uncorrectable blocks / effective errors
CORRECTED = declare("corrected-bits", level=False)  # FEC corrected bits (pre-FEC errors)
ERRORS = declare("errors", level=False)  # FCS/CRC and in-errors; sub = leaf
PAUSE = declare("pause-frames", level=False)  # link-level (global) pause frames received
PFC_FRAMES = declare("pfc-frames", level=False)  # PFC frames received; sub = priority
PFC_DURATION = declare("pfc-duration", level=False)  # time paused by the peer, microseconds; sub = priority
DROP_IN = declare("drops-in", level=False)  # ingress drops; sub = leaf
DROP_OUT = declare("drops-out", level=False)  # egress drops; sub = leaf (per-queue leaves summed over queues)
CARRIER = declare("carrier", level=False)  # carrier transitions
ROCE = declare("roce", level=False)  # RDMA retransmission-related counters; sub = counter name (hyphenated)
ECN = declare("ecn-marks", level=False)  # packets ECN-marked on egress; sub = queue
DROP_REASON = declare("drop-reason", level=False)  # packets dropped for one reason; sub = "group/reason"
# RS-FEC codewords by corrected symbols (histogram bin); sub = the bin's index, ``lane/index`` for a lane's bin
FEC_BIN = declare("fec-bin", level=False)
# Levels (gauges): a feed carries a level's latest value, not a delta.
QUEUE_PEAK = declare("queue-peak", level=True)  # highest occupancy since the previous read, bytes; sub = queue
QUEUE_LEVEL = declare("queue-level", level=True)  # occupancy at the read, bytes; sub = queue
QUEUE_LIMIT = declare("queue-limit", level=True)  # the most the queue may hold, bytes; sub = queue

#: the bins of a FEC histogram (port or lane) kept in a feed's row: RS(544,514)'s 0..15
ROW_BINS = 16


def mask(sems: frozenset[str] | set[str]) -> int:
    """The bits of ``sems`` (a semantic not declared yet is declared: a detector may be imported
    before the source that produces what it reads)."""
    out = 0
    for sem in sems:
        out |= BITS[declare(sem)]
    return out


#: the levels that are a queue's occupancy
QUEUE_LEVELS = frozenset({QUEUE_PEAK, QUEUE_LEVEL})
_BY_QUEUE = "*"  # a _LEAVES sub meaning "the queue's name"

# (tail of the container path below the port, leaf) -> (sem, sub). A tail of
# "pfc" stands for pfc/priority[id=N]/state, "queue" for a qos output queue. Built from the
# declarations (:func:`declare_leaves`): these, shared by several sources, and each source's own.
_LEAVES: dict[tuple[str, str], tuple[str, str]] = {}
#: (container path prefix, matcher(spec, port) -> (port, sem, sub) or None): what a source
#: declares for paths outside the interface and qos trees (Source.classifiers)
_PREFIXES: list[tuple[str, Callable[[CounterSpec, str], tuple[str, str, str] | None]]] = []


def declare_leaves(leaves: Mapping[tuple[str, str], tuple[str, str]]) -> None:
    """Add ``(tail below the port, leaf) -> (sem, sub)`` rows (Source.semantics): every semantic
    named is declared; a row already declared must say the same."""
    for key, (sem, sub) in leaves.items():
        if _LEAVES.setdefault(key, (declare(sem), sub)) != (sem, sub):
            raise ValueError(f"classify: {key} declared as {_LEAVES[key]} and as {(sem, sub)}")


def declare_prefix(prefix: str, matcher: Callable[[CounterSpec, str], tuple[str, str, str] | None]) -> None:
    """Classify counters whose container path starts with ``prefix`` (outside the interface and
    qos trees) with ``matcher(spec, port)`` (Source.classifiers)."""
    if (prefix, matcher) not in _PREFIXES:
        _PREFIXES.append((prefix, matcher))


declare_leaves({
    ("state/counters", "in-octets"): (RX_OCTETS, ""),
    ("state/counters", "out-octets"): (TX_OCTETS, ""),
    ("state/counters", "in-errors"): (ERRORS, "in-errors"),
    ("state/counters", "in-fcs-errors"): (ERRORS, "in-fcs-errors"),
    ("state/counters", "in-discards"): (DROP_IN, "in-discards"),
    ("state/counters", "out-discards"): (DROP_OUT, "out-discards"),
    ("state/counters", "carrier-transitions"): (CARRIER, ""),
    ("hw/state/counters", "in-octets"): (RX_OCTETS, ""),
    ("hw/state/counters", "out-octets"): (TX_OCTETS, ""),
    ("hw/state/counters", "in-errors"): (ERRORS, "in-errors"),
    ("hw/state/counters", "in-discards"): (DROP_IN, "in-discards"),
    ("hw/state/counters", "in-buffer-drops"): (DROP_IN, "in-buffer-drops"),
    ("hw/state/counters", "out-discards"): (DROP_OUT, "out-discards"),
    ("hw/state/counters", "out-q-drops"): (DROP_OUT, "out-q-drops"),
    ("hw/state/counters", "out-wred-drops"): (DROP_OUT, "out-wred-drops"),
    ("ethernet/state/counters", "in-crc-errors"): (ERRORS, "in-crc-errors"),
    ("ethernet/state/counters", "in-symbol-error"): (SYMBOL, "in-symbol-error"),
    ("ethernet/state/counters", "fec-uncorrectable-blocks"): (UNCORRECTABLE, "fec-uncorrectable-blocks"),
    ("ethernet/state/counters", "in-mac-pause-frames"): (PAUSE, ""),
    ("phy/state", "received-bits"): (RX_BITS, ""),
    ("phy/state", "symbol-errors"): (SYMBOL, "symbol-errors"),
    ("phy/state", "effective-errors"): (UNCORRECTABLE, "effective-errors"),
    ("phy/fec/state", "corrected-bits"): (CORRECTED, ""),
    ("pfc", "in-pause-pkts"): (PFC_FRAMES, ""),
    ("pfc", "in-pause-duration"): (PFC_DURATION, ""),
    ("queue", "dropped-pkts"): (DROP_OUT, "queue-dropped-pkts"),
    ("queue", "wred-dropped-pkts"): (DROP_OUT, "queue-wred-dropped-pkts"),
    ("queue", "ecn-marked-pkts"): (ECN, _BY_QUEUE),
    ("queue", "peak-occupancy"): (QUEUE_PEAK, _BY_QUEUE),
    ("queue", "current-occupancy"): (QUEUE_LEVEL, _BY_QUEUE),
    ("queue", "limit"): (QUEUE_LIMIT, _BY_QUEUE),
})

#: RDMA hw_counters read as RoCE retransmission evidence (hyphenated leaf names).
ROCE_LEAVES = frozenset({
    "roce-adp-retrans", "roce-adp-retrans-to", "roce-slow-restart", "out-of-sequence",
    "packet-seq-err", "local-ack-timeout-err", "implied-nak-seq-err", "duplicate-request",
})

_PFC = re.compile(r"^pfc/priority\[id=(\d+)\]/state$")
_DROP_REASON = re.compile(rf"^drops/group\[name=({KEY_VALUE_RE})\]/reason\[name=({KEY_VALUE_RE})\]/state$")
# a devlink device's trap (sources/devlink_trap.py): per device, so the device is the "port"
_DEVLINK_DROP_REASON = re.compile(rf"^{re.escape(DEVLINK_DEVICE_PREFIX)}({KEY_VALUE_RE})\]/drops/group\[name="
                                  rf"({KEY_VALUE_RE})\]/reason\[name=({KEY_VALUE_RE})\]/state$")
# issue 22 item 3: the port's bin on Cumulus' layout (sources/asic.py histogram_bin); sub = its
# upper boundary, the bin's index on Spectrum (an open last bin: its lower bound, 15)
_FEC_BIN = re.compile(r"^phy/histograms/state/rs-num-corr-err\[upper-boundary=(\d+)\]$")
# ... and a lane's, below its channel (the asic source's phy_rs_fec_histogram_laneN, ethnl's lanes):
# sub = ``lane/upper-boundary``, so a port's feed carries its lanes' bins beside its own
_LANE_FEC_BIN = re.compile(r"^phy/channels/channel\[id=(\d+)\]/histograms/state/rs-num-corr-err"
                           r"\[upper-boundary=(\d+)\]$")
_QUEUE = re.compile(rf"^/output/queues/queue\[name=({KEY_VALUE_RE})\]/state$")
_RDMA = re.compile(rf"^{re.escape(RDMA_DEVICE_PREFIX)}{KEY_VALUE_RE}\]"
                   rf"(?:/ports/port\[id={KEY_VALUE_RE}\])?/hw-counters$")


def classify(spec: CounterSpec) -> tuple[str, str, str] | None:
    """(port, sem, sub) for a counter (or level) the detectors read, else None."""
    port = spec.port
    if not port or spec.kind not in (COUNTER, GAUGE):  # hidden counters are not read
        return None
    hit = _classify(spec, port)
    # a gauge is read only as a level, a counter never as one
    if hit is None or (hit[1] in LEVELS) != (spec.kind == GAUGE):
        return None
    return hit


def _classify(spec: CounterSpec, port: str) -> tuple[str, str, str] | None:
    path = spec.container.path
    leaf = spec.leaf
    if path.startswith(INTERFACE_PREFIX):
        prefix = interface_path(port) + "/"
        if not path.startswith(prefix):
            return None
        tail = path[len(prefix):]
        m = _PFC.match(tail)
        if m:
            sem = _LEAVES.get(("pfc", leaf))
            return (port, sem[0], m.group(1)) if sem else None
        m = _DROP_REASON.match(tail) if leaf == "packets" else None
        if m:
            return port, DROP_REASON, f"{unescape_key(m.group(1))}/{unescape_key(m.group(2))}"
        bin_path = bin_of_count(tail, leaf) if tail.startswith("phy/") else None
        if bin_path is not None:
            m = _FEC_BIN.match(bin_path)
            if m:
                return port, FEC_BIN, m.group(1)
            m = _LANE_FEC_BIN.match(bin_path)
            if m:
                return port, FEC_BIN, f"{m.group(1)}/{m.group(2)}"
        sem = _LEAVES.get((tail, leaf))
        return (port, sem[0], sem[1]) if sem else None
    if path.startswith(QOS_INTERFACE_PREFIX):
        prefix = qos_interface_path(port)
        m = _QUEUE.match(path[len(prefix):]) if path.startswith(prefix) else None
        if m:
            sem = _LEAVES.get(("queue", leaf))
            if sem is None:
                return None
            return port, sem[0], unescape_key(m.group(1)) if sem[1] == _BY_QUEUE else sem[1]
        return None
    if path.startswith(DEVLINK_DEVICE_PREFIX):
        m = _DEVLINK_DROP_REASON.match(path) if leaf == "packets" else None
        if m is None or unescape_key(m.group(1)) != port:
            return None
        return port, DROP_REASON, f"{unescape_key(m.group(2))}/{unescape_key(m.group(3))}"
    if path.startswith(RDMA_DEVICE_PREFIX) and _RDMA.match(path):
        name = leaf.replace("_", "-")
        return (port, ROCE, name) if name in ROCE_LEAVES else None
    for prefix, matcher in _PREFIXES:
        if path.startswith(prefix):
            return matcher(spec, port)
    return None


class Layout:
    """A table's classification: ``slots[i]`` is None or ``(port_slot, key)`` with
    ``key = (sem, sub)``; ``ports[port_slot]`` is the port name and ``sems[port_slot]``
    the semantics the table has for it."""

    __slots__ = ("ports", "sems", "mask", "slot_of", "keys", "levels", "bits", "vcols", "vwidth", "vkeys")

    def __init__(self, table: CounterTable) -> None:
        where: dict[str, int] = {}
        self.ports: list[str] = []
        self.sems: list[set[str]] = []
        slots: list[tuple[int, tuple[str, str]] | None] = []  # built here, kept as slot_of and keys
        # one key object per (sem, sub), shared by every port: the per-change loop's dict
        # updates then touch a few hundred hot keys, not one object per counter (250,000 at
        # 1,024 sim ports, each a cache miss when the tick starts cold)
        shared: dict[tuple[str, str], tuple[str, str]] = {}
        for spec in table.specs:
            hit = classify(spec)
            if hit is None:
                slots.append(None)
                continue
            port, sem, sub = hit
            slot = where.get(port)
            if slot is None:
                slot = where[port] = len(self.ports)
                self.ports.append(port)
                self.sems.append(set())
            self.sems[slot].add(sem)
            key = (sem, sub)
            slots.append((slot, shared.setdefault(key, key)))
        #: 1 where the counter is classified (for a C-speed pre-filter of a batch's indices)
        self.mask = bytes(0 if s is None else 1 for s in slots)
        # The maps of the feeds' per-change loop (feed_add, agent/_ext/feeds.c), per counter:
        # its port slot (-1: read by no detector), its key, and 0 for a counter, 1 for a
        # queue's level (the per-port highest of which gates detectors: Detector.level_gate),
        # 2 for another level.
        self.slot_of = array("i", (-1 if s is None else s[0] for s in slots))
        self.keys = [None if s is None else s[1] for s in slots]
        self.levels = bytes(0 if s is None or s[1][0] not in LEVELS else 1 if s[1][0] in QUEUE_LEVELS else 2
                            for s in slots)
        self.bits = array("I", (0 if s is None else BITS[s[1][0]] for s in slots))
        self._rows(slots)

    @property
    def slots(self) -> list[tuple[int, tuple[str, str]] | None]:
        """Per counter None or ``(port_slot, key)``, made when asked (a tuple per counter kept
        for the table's life cost ~1 MiB on a spine; the per-change maps are slot_of and keys)."""
        return [None if slot < 0 else (slot, key) for slot, key in zip(self.slot_of, self.keys, strict=True)]

    def _rows(self, slots: list[tuple[int, tuple[str, str]] | None]) -> None:
        """The FEC bins' columns: a port's histogram bins 0..15 (the feeds' ``row`` of i64 per
        port slot, ``vwidth`` wide: agent/insights/feeds.py) at columns 0..15, its lanes' at 16
        on, in lane order, 16 each. Thirteen thousand bins move a tick at 1,024 ports: an add
        into an array each, where a dict update each cost ~1.5 ms a tick (docs/PERFORMANCE.md).
        ``vcols[i]``: counter i's column (-1: none, its changes go to the dict as before);
        ``vkeys[slot]``: per column the key it holds (None: none), one tuple per slot, which
        link_degrading maps its bins through."""
        lanes: list[set[int]] = [set() for _ in self.ports]
        bins: list[tuple[int, int, int] | None] = []  # per counter: (slot, lane or -1, bin)
        for s in slots:
            hit = None
            if s is not None and s[1][0] == FEC_BIN:
                lane, _, b = s[1][1].rpartition("/")
                # canonical numbers only (link_degrading reads "3" and "1/3", never "03"): the
                # others stay in the dict, where they were
                if _canonical(b) and int(b) < ROW_BINS and (not lane or _canonical(lane)):
                    hit = (s[0], int(lane) if lane else -1, int(b))
                    if lane:
                        lanes[s[0]].add(int(lane))
            bins.append(hit)
        order = [{lane: k for k, lane in enumerate(sorted(ls), 1)} for ls in lanes]
        self.vwidth = ROW_BINS * (1 + max(map(len, lanes), default=0)) if any(bins) else 0
        self.vcols = array("i", (-1 if b is None else ROW_BINS * (order[b[0]][b[1]] if b[1] >= 0 else 0) + b[2]
                                 for b in bins))
        keys: list[list] = [[None] * self.vwidth for _ in self.ports]
        for i, b in enumerate(bins):
            if b is not None:
                keys[b[0]][self.vcols[i]] = self.keys[i]
        self.vkeys = [tuple(k) for k in keys]


def _canonical(text: str) -> bool:
    """``text`` is a non-negative integer as str(int) writes it."""
    return text.isascii() and text.isdigit() and str(int(text)) == text


def layout(table: CounterTable) -> Layout:
    """The table's classification, computed once and cached in ``table.cache["insights"]``."""
    out = table.cache.get("insights")
    if out is None:
        out = table.cache["insights"] = Layout(table)
    return out
