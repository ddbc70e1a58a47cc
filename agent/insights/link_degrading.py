"""Predictive link health (config ``insights.link_degrading``), event ``link-degrading``.

A link whose RS-FEC still corrects everything shows its decline in the codeword-error
histogram (bins S0..S15: codewords with 0..15 corrected symbols) before its first
uncorrectable codeword: the tail grows into the high bins. Per lane where the port reports
lanes' histograms (the asic source's ``phy_rs_fec_histogram_laneN``, ethtool netlink's per-lane
bins), else per port, over the bins' deltas (and the port's uncorrectable codewords') within
``window`` (kept in ten buckets: the last nine and the current one, so between nine tenths and
all of it), as SONiC's FEC FLR design computes it:

* observed CER = uncorrectable / (uncorrectable + S0 + correctable codewords), the port's
  (an uncorrectable codeword is the port's: its symbols come from every lane);
* predicted: a least-squares line through log10(S_i / codewords) for the bins i = 1..15
  that hold any, extrapolated to bins 16..20 (RS(544,514) corrects 15 symbols: a codeword
  with 16 or more is lost); the predicted CER is the sum of those, its fit judged by R²;
* FLR = CER x (1 + X x MFC) / MFC, MFC = 8, X the ``interleave``.

The event (one per port and lane) is raised when the predicted FLR reaches ``flr`` with R² at
least ``min_r2``, or when the highest bin with a count in the window (SONiC's maxT) reaches
``max_bin`` with at least ``max_bin_count`` codewords at or above it. It is critical once
uncorrectable codewords come.

The figures are also gauges (docs/insights.md, docs/paths.md): the predicted FLR, the observed
CER, the fit's R² and maxT over the same window, per lane under
``swtel:/interfaces/interface[name=X]/phy/channels/channel[id=N]/fec/prediction/state`` and per
port (its worst lane's, or its own histogram's) under
``swtel:/interfaces/interface[name=X]/phy/fec/prediction/state`` (Cumulus has no such leaves).
They are judged once a bucket (``window`` / 10: the window's sums change only then) and
published at most once a second per port, each leaf only when it moved by more than its
resolution since it was last published (``FEC_RESOLUTION``: 10 % and at least 1e-15 for the
predicted FLR and the observed CER, 0.01 for R², any change of maxT; docs/insights.md); a port whose
window empties (its link down: no samples) reads 0. Each port's buckets end at its own phase
(a hash of its name), so the ports' fits spread over the bucket instead of landing on one tick.
When the detector is disabled by a reload, its gauges are deleted (:meth:`LinkDegrading.retire`).

Every sample of the pass goes through a kernel first (agent/_ext/detect.c ``fec_run``, the
rule: bucket close, fit and publish), over each port's window in one array of i64 (:class:`_Port`:
the current bucket, a ring of the last ten buckets' sums, bucket b in slot b % 10, leaving once
the current bucket is b + 10 or later, their totals, tails and alarm). The common sample (in
the current bucket, no uncorrectable codeword, no bin at ``max_bin`` or above, no tail alarm)
is added into the current bucket there; so is the close of a bucket (a sample in a later
one, no lane the port lacks, every sum within int64): the ring rolls, the window is judged (the
fits; the events; the gauges, rounded and compared with those last published, made
StateUpdates), and Python only raises the events it found, in the sample's turn. Any other
sample (lanes that came, a count past int64 or not an int, the tail alarm) runs here in its
turn, the same rule per port in Python on the same window (a list while a value is not an i64),
its fits the backend's ``fec_fits``, its gauges' rounding and comparison its ``fec_changes``. The
pure-Python backend (agent/_fallback/detect.py) leaves every sample to this per-port rule.
"""

from __future__ import annotations

import zlib
from array import array
from collections import namedtuple
from dataclasses import dataclass
from functools import lru_cache
from operator import add, sub

from agent import _backend
from agent.config import Duration, setting
from agent.counters import SWTEL_ORIGIN, Container, StateUpdate
from agent.insights import classify as c
from agent.insights.base import (
    CLEAR_AFTER_TYPE,
    CRITICAL,
    MAX_COUNT,
    NS,
    THRESHOLD_TYPE,
    WARNING,
    WINDOW_TYPE,
    Detector,
    Rules,
    fmt_count,
    fmt_duration,
    register,
)
from agent.insights.feeds import merged
from agent.pathgrammar import escape_key, interface_path

BINS = 16  # RS(544,514): 0..15 corrected symbols (a device's further bins are not read)
PREDICTED = range(16, 21)  # the bins extrapolated: codewords the FEC cannot correct
MFC = 8  # SONiC's FLR design: FLR = CER x (1 + X x MFC) / MFC, X the interleave
MIN_POINTS = 3  # a line through fewer non-empty bins predicts nothing
PORT = -1  # the unit of a port without lanes' histograms: its own
RING = 10  # a window's buckets: the nine before the current one, and it
#: a port's words (_Port.w, the kernels' layout): its current bucket, the publishing slot last
#: published in, its alarm, its uncorrectable codewords in the current bucket and in the ring's
IDX, SLOT, ALARM, UNC_CUR, UNC_TOT, HEAD = range(6)
DEAD = -(1 << 63)  # the bucket of a ring slot never filled

_PORT_KEYS = tuple((c.FEC_BIN, str(i)) for i in range(BINS))
#: the uncorrectable codewords' leaves (classify.py): the PHY's effective errors, ethtool's blocks
_UNC_KEYS = ((c.UNCORRECTABLE, "effective-errors"), (c.UNCORRECTABLE, "fec-uncorrectable-blocks"))
_UNC_BIT = c.BITS[c.UNCORRECTABLE]  # none of them in a sample whose mask lacks it

#: the gauges' container below a port or a lane (swtel's origin: Cumulus 5.15+ has FEC histogram
#: leaves, none for a prediction) and their leaves
PREDICTION = "/phy/fec/prediction/state"
LANE_PREDICTION = "/phy/channels/channel[id={lane}]/fec/prediction/state"
GAUGES = ("predicted-flr", "observed-cer", "fit-r2", "max-bin")
_EMPTY = (0.0, 0.0, 0.0, 0)  # an empty window's gauges
PUBLISH_NS = NS  # a port's gauges at most once a second


@dataclass(frozen=True, slots=True)
class FecRule:
    """The rule's settings as the kernel reads them (``fec_run``'s conf, by attribute)."""

    bucket: int  # ns: a tenth of the window
    max_bin: int
    max_bin_count: int
    flr: float
    min_r2: float
    scale: float  # FLR = CER x scale: (1 + interleave x MFC) / MFC
    per_slot: int  # buckets per publishing slot
    fec_sem: str = c.FEC_BIN
    unc_sem: str = c.UNCORRECTABLE
    unc_keys: tuple = _UNC_KEYS
    unc_bit: int = _UNC_BIT
    leaves: tuple = GAUGES
    update: type = StateUpdate  # a gauge's update: update(ts, container, leaf, value, source)
    source: str = "insights"
    spill: int = c.SPILL  # a sample's bit: a bin's delta in acc, not in its row


def prediction_container(port: str, lane: int | None = None) -> Container:
    """The gauges of a port (its worst lane's), or of one lane."""
    tail = PREDICTION if lane is None or lane == PORT else LANE_PREDICTION.format(lane=escape_key(str(lane)))
    return Container(SWTEL_ORIGIN, interface_path(port) + tail)


@lru_cache(maxsize=64)  # the same keys on every port: one copy (~0.3 MiB on the spine's 68 ports)
def lane_keys(lane: int) -> tuple[tuple[str, str], ...]:
    """A lane's bins as the feeds key them (classify.py: sub = ``lane/upper-boundary``)."""
    return tuple((c.FEC_BIN, f"{lane}/{i}") for i in range(BINS))


def lanes_in(acc) -> tuple[int, ...]:
    """The lanes whose bins a sample carries, ascending."""
    found = {int(sub.partition("/")[0]) for sem, sub in acc if sem == c.FEC_BIN and "/" in sub}
    return tuple(sorted(found))


def phase_of(port: str, bucket_ns: int) -> int:
    """Where in a bucket the port's buckets end (ns): fixed per name (not Python's salted
    hash), so runs and restarts agree."""
    return zlib.crc32(port.encode()) % bucket_ns


#: What the kernel (fec_run, agent/_ext/detect.c) reads of a port it may take on its own, by
#: position in this order (detect.c's FP_* indices): w, the _Port's words (i64); keys, the acc
#: key of each bin; units; sent, the last value published per unit; boxes, the containers per
#: unit; phase; row_keys, the feed rows its cols were mapped for; cols (i32), each bin's column.
FecPort = namedtuple("FecPort", "w keys units sent boxes phase row_keys cols")


class _Port:
    """One port's units (its lanes, or itself) and their window in ten buckets (a sample goes
    to the bucket its end falls in): the nine before the current one and the current one, in
    ``w``, a flat array of i64 (the kernels' layout, agent/_ext/detect.c; a list while a count
    is past int64 or not an int: Python's alone then): the current bucket, the publishing slot
    the gauges were last published in, the alarm (a unit's tail holds ``max_bin_count``
    codewords or more), the port's uncorrectable codewords in the current bucket and in the
    ring's, then the current bucket's bins (``cur``: the units' side by side, unit u's at
    u * BINS), the ring's buckets' sums (``totals``), per unit the codewords at ``max_bin`` or
    above in each of the two (``tail_done``, ``tail_cur``: a sample sums only its own tail),
    and the ring: RING slots of (bucket, uncorrectable, bins), bucket b in slot b % RING."""

    __slots__ = ("units", "keys", "zeros", "highs", "phase", "w", "sent", "boxes", "row_keys", "cols")

    def __init__(self, units: tuple[int, ...], idx: int, phase: int, max_bin: int) -> None:
        self.units = units
        self.keys = _PORT_KEYS if units == (PORT,) else sum((lane_keys(u) for u in units), ())
        self.zeros = (0,) * len(self.keys)
        #: the bins at max_bin or above: a sample that moves none of them leaves the tails as they are
        self.highs = frozenset(k for i, k in enumerate(self.keys) if i % BINS >= max_bin)
        self.phase = phase
        n = len(self.keys)
        w = [idx, -1, 0, 0, 0] + [0] * (2 * n + 2 * len(units)) + ([DEAD, 0] + [0] * n) * RING
        self.w: list | array = _packed(w)
        #: the gauges as last published, per unit and for the port (key None)
        self.sent: dict[int | None, dict[str, float | int]] = {}
        self.boxes: dict[int | None, Container] = {}  # their containers, built once
        #: the feed's row keys (feeds.Feed.row) its bins' columns were mapped for, and those
        #: columns (:func:`_columns`); None: not mapped (the kernel reads acc then)
        self.row_keys: tuple | None = None
        self.cols: array | None = None

    # the parts of ``w``, for Python's turns and tests
    def at(self) -> tuple[int, int, int, int, int, int]:
        """(n, units, where totals, tail_done, tail_cur and the ring start in ``w``)."""
        n, nu = len(self.keys), len(self.units)
        return n, nu, HEAD + n, HEAD + 2 * n, HEAD + 2 * n + nu, HEAD + 2 * n + 2 * nu

    @property
    def idx(self) -> int:
        return self.w[IDX]

    @property
    def slot(self) -> int:
        return self.w[SLOT]

    @property
    def alarm(self) -> bool:
        return bool(self.w[ALARM])

    @property
    def unc_cur(self) -> int:
        return self.w[UNC_CUR]

    @property
    def unc_total(self) -> int:
        return self.w[UNC_TOT]

    @property
    def cur(self) -> list[int]:
        return list(self.w[HEAD:HEAD + len(self.keys)])

    @property
    def totals(self) -> list[int]:
        n, _nu, tot, td, _tc, _ring = self.at()
        return list(self.w[tot:td])

    @property
    def tail_done(self) -> list[int]:
        _n, _nu, _tot, td, tc, _ring = self.at()
        return list(self.w[td:tc])

    @property
    def tail_cur(self) -> list[int]:
        _n, _nu, _tot, _td, tc, ring = self.at()
        return list(self.w[tc:ring])

    @property
    def done(self) -> list[tuple[int, list[int], int]]:
        """The ring's buckets in the window, oldest first: (bucket, bins, uncorrectable)."""
        n, _nu, _tot, _td, _tc, ring = self.at()
        w, idx, out = self.w, self.w[IDX], []
        for b in range(idx - RING + 1, idx):
            at = ring + b % RING * (n + 2)
            if w[at] == b:
                out.append((b, list(w[at + 2:at + 2 + n]), w[at + 1]))
        return out


def _columns(row_keys: tuple, keys: tuple, units: tuple[int, ...]) -> array:
    """Per bin of the port (``keys``) its column in the feed's row (-1: none), then the columns
    of the row's lanes outside ``units`` (a lane that came, found where the kernel closes a
    bucket): the kernels' ``cols``."""
    where = {key: col for col, key in enumerate(row_keys) if key is not None}
    mine = set(keys)
    others = [col for col, key in enumerate(row_keys)
              if key is not None and key not in mine and "/" in key[1] and int(key[1].partition("/")[0]) not in units]
    return array("i", [where.get(key, -1) for key in keys] + others)


def _packed(w: list) -> list | array:
    """A port's words as i64, or as they are (a list) when one is past int64 or not an int."""
    try:
        return array("q", w)
    except (OverflowError, TypeError):
        return w


@dataclass
class LinkDegradingConfig:
    """``insights.link_degrading``: a link heading for its first uncorrectable codeword, from
    its RS-FEC codeword-error histogram: the predicted frame loss ratio of a log-linear fit of
    the bins (SONiC's FEC FLR), or the highest bin with codewords (maxT)."""

    enabled: bool = setting(True)
    flr: float = setting(1e-9, type="number, 0 < x < 1", shown="`1.0e-9`", doc=(
        "predicted frame loss ratio (bins 16–20 extrapolated) that raises the event, with a good fit"))
    min_r2: float = setting(0.9, type="number, 0 < x ≤ 1", doc=(
        "the fit's R² needed for the predicted FLR to count"))
    max_bin: int = setting(9, type="integer, 1–15", doc=(
        "maxT (the highest bin with codewords in the window) at or above this raises the event"))
    max_bin_count: int = setting(3, type=THRESHOLD_TYPE, doc=(
        "... with at least this many codewords at or above `max_bin` in the window"))
    interleave: int = setting(1, type="integer: 1, 2 or 4", doc=(
        "FEC interleave X in FLR = CER x (1 + 8X) / 8"))
    window: Duration = setting(Duration(10.0), type=WINDOW_TYPE, doc="window of the bins' counts")
    clear_after: Duration = setting(Duration(300.0), type=CLEAR_AFTER_TYPE, shown="`5m`",
                                    doc="quiet time before the event clears")


@register
class LinkDegrading(Detector):
    name = "link_degrading"
    config_class = LinkDegradingConfig
    doc = ("a link heading for uncorrectable codewords, from its FEC codeword-error histogram (per lane "
           "where lanes are reported): event `link-degrading` (docs/insights.md)")
    reads = ("asic", "ethnl")
    types = ("link-degrading",)
    every_sample = False  # bin 0 counts every codeword received: each sample of a live link
    sems = frozenset({c.FEC_BIN, c.UNCORRECTABLE})

    @classmethod
    def check(cls, section: LinkDegradingConfig, where: str, problems: list[str], cfg) -> None:
        rules = Rules(section, where, problems)
        rules.ratio("flr")
        rules.share("min_r2")
        rules.count("max_bin", 1, BINS - 1)
        rules.count("max_bin_count", 1, MAX_COUNT)
        if section.interleave not in (1, 2, 4):
            problems.append(f"{where}.interleave: expected 1, 2 or 4, got {section.interleave}")
        rules.positive("window")
        super().check(section, where, problems, cfg)

    def __init__(self, cfg, ctx) -> None:
        super().__init__(cfg, ctx)
        self.span = int(cfg.window * NS)
        self.bucket = max(1, self.span // 10)
        # buckets per publishing slot: the gauges once a bucket, but at most once a second
        self.per_slot = max(1, -(-PUBLISH_NS // self.bucket))
        self.rule = FecRule(self.bucket, cfg.max_bin, cfg.max_bin_count, float(cfg.flr), float(cfg.min_r2),
                            (1 + cfg.interleave * MFC) / MFC, self.per_slot, update=StateUpdate)
        self.ports: dict[str, _Port] = {}
        self.pending: list[StateUpdate] = []  # gauges due, taken by the pipeline (states)
        self.swept_ns = 0  # the last look for ports whose window emptied
        #: ports whose window emptied: the gauges they read 0 on (deleted on retire)
        self.zeroed: dict[str, dict[int | None, dict[str, float | int]]] = {}
        self.batch: list = []
        #: the kernels (the backend's; tests and bench/ set the fallback's beside them)
        self.kernel = _backend.reader.fec_run
        self.fits = _backend.reader.fec_fits
        self.changes = _backend.reader.fec_changes  # a unit's gauges that changed, rounded
        self.lanes_of = _backend.reader.fec_lanes  # lanes_in()
        #: the ports whose samples the kernel may take on its own, each a FecPort
        self.fast: dict[str, FecPort] = {}
        self._entries: list = []  # the pass's samples, while the deferred ones run
        #: ... what the kernel left for their turns: entry index -> None (Python's sample) or
        #: (events, updates)
        self._todo: dict[int, tuple | None] = {}
        self._row: tuple | None = None  # the feed's row of the sample in Python's turn (feeds.Feed.row)

    def phase(self, port: str) -> int:
        """Where in a bucket the port's buckets end (tests set it to 0 to compare)."""
        return phase_of(port, self.bucket)

    def run_batch(self) -> list[int]:
        entries, self.batch = self.batch, []
        self._entries = entries
        self._todo = self.kernel(entries, self.fast, self.rule, self.pending) if entries else {}
        return list(self._todo)  # (ascending: the kernel takes the samples in order)

    def emit(self, k: int) -> None:
        todo = self._todo.get(k, False)
        if todo is False:
            return
        entry = self._entries[k]
        port, ts, dt, acc, owned, changed = entry[:6]
        if todo is None:  # Python's sample: its bins from the feed's row among its deltas
            row = entry[7] if len(entry) > 7 else None
            self.changed = changed
            self._row = row
            self._sample(port, ts, dt, merged(acc, row), owned)
            self._row = None
            return
        events, updates = todo  # the kernel's judgement: its events in their turn
        if events:
            scale = (1 + self.cfg.interleave * MFC) / MFC
            for unit, flr, pred, max_t, tail, unc, codewords in events:
                self._raise(port, unit, ts, flr, pred, max_t, tail, unc, codewords, scale)
        if updates:
            self.pending += updates

    def sample(self, port, ts, dt, acc, owned) -> None:
        """One sample alone (the feeds pass samples through ``batch``)."""
        self.batch_of_one(port, ts, dt, acc, owned)

    def _arm(self, port: str, st: _Port) -> None:
        """After Python's turn at a port: the kernel may take its next samples unless its tail
        alarm holds (every sample is then judged here) or a count is past int64 or not an int."""
        w = st.w
        if w[ALARM]:
            self.fast.pop(port, None)
            return
        if type(w) is not array:
            w = st.w = _packed(w)
            if type(w) is not array:
                self.fast.pop(port, None)
                return
        boxes = st.boxes
        if len(boxes) <= len(st.units):  # the kernel publishes into containers built here
            for unit in (*st.units, None):
                if unit not in boxes:
                    boxes[unit] = prediction_container(port, unit)
        row = self._row
        if row is not None and row[2] is not st.row_keys:  # the bins' columns in this feed's rows
            st.row_keys, st.cols = row[2], _columns(row[2], st.keys, st.units)
        self.fast[port] = FecPort(w, st.keys, st.units, st.sent, boxes, st.phase, st.row_keys, st.cols)

    @staticmethod
    def _store(st: _Port, at: int, values: list) -> list | array:
        """values into st.w from at (st.w a list from then on if one does not fit an i64)."""
        w = st.w
        if type(w) is array:
            try:
                w[at:at + len(values)] = array("q", values)
                return w
            except (OverflowError, TypeError):
                w = st.w = list(w)
        w[at:at + len(values)] = values
        return w

    def _sample(self, port: str, ts: int, dt: int, acc, owned) -> None:
        """A sample the kernel left to Python (the old per-sample rule, over the ring)."""
        if c.FEC_BIN not in owned:
            return
        st = self.ports.get(port)
        if st is None:
            st = self.ports[port] = self._start(port, acc, ts)
        unc = (acc.get(_UNC_KEYS[0], 0) + acc.get(_UNC_KEYS[1], 0)
               if c.UNCORRECTABLE in owned and self.changed & _UNC_BIT else 0)
        idx = (ts - 1 + st.phase) // self.bucket  # a sample ending on a boundary is the bucket's before it
        n, nu, tot, td, tc, ring = st.at()
        w = st.w
        # the current bucket (an earlier one too: time does not go back through the feeds)
        if idx <= w[IDX]:
            w = self._store(st, HEAD, list(map(add, w[HEAD:HEAD + n], map(acc.get, st.keys, st.zeros))))
            w = self._store(st, UNC_CUR, [w[UNC_CUR] + unc])
            if not acc.keys().isdisjoint(st.highs):  # a tail moved (rare on a healthy link)
                mb = self.cfg.max_bin
                row = list(map(acc.get, st.keys, st.zeros))
                tail_cur = list(map(add, w[tc:ring], (sum(row[at + mb:at + BINS]) for at in range(0, n, BINS))))
                w = self._store(st, tc, tail_cur)
                w = self._store(st, ALARM, [int(max(map(add, w[td:tc], tail_cur)) >= self.cfg.max_bin_count)])
            # maxT is cheap: judged every sample; the fit once a bucket, and whenever the tail or
            # uncorrectable codewords hold
            if unc or w[ALARM]:
                self._judge(port, st, ts, False)
            self._arm(port, st)
            return
        lanes = self.lanes_of(acc, c.FEC_BIN)  # once a bucket: a lane that came (a sample may miss a calm one)
        if lanes is None:  # (odd keys: Python's)
            lanes = lanes_in(acc)
        if lanes and not set(lanes) <= set(st.units):  # the port starts afresh with them
            st = self.ports[port] = self._start(port, acc, ts, st)
            self._store(st, HEAD, list(map(acc.get, st.keys, st.zeros)))
            self._store(st, UNC_CUR, [unc])
            self._arm(port, st)
            return
        # the bucket closes: its sums join the window's, buckets <= idx - RING leave (in the order
        # they joined, the closing one last)
        row = list(map(acc.get, st.keys, st.zeros))
        mb = self.cfg.max_bin
        i0, cur, unc_cur = w[IDX], list(w[HEAD:HEAD + n]), w[UNC_CUR]
        totals = list(map(add, w[tot:td], cur))
        unc_total = w[UNC_TOT] + unc_cur
        for b in range(i0 - RING + 1, min(i0, idx - RING) + 1):
            if b == i0:
                old, old_unc = cur, unc_cur
            else:
                at = ring + b % RING * (n + 2)
                if w[at] != b:  # no sample in that bucket
                    continue
                old, old_unc = w[at + 2:at + 2 + n], w[at + 1]
            totals = list(map(sub, totals, old))
            unc_total -= old_unc
        tail_done = [sum(totals[at + mb:at + BINS]) for at in range(0, n, BINS)]
        tail_cur = [sum(row[at + mb:at + BINS]) for at in range(0, n, BINS)]
        new = list(w)
        at = ring + i0 % RING * (n + 2)
        new[at:at + n + 2] = [i0, unc_cur, *cur]
        new[IDX], new[UNC_CUR], new[UNC_TOT] = idx, unc, unc_total
        new[ALARM] = int(max(map(add, tail_done, tail_cur)) >= self.cfg.max_bin_count)
        new[HEAD:ring] = row + totals + tail_done + tail_cur
        st.w = _packed(new)
        self._judge(port, st, ts, idx // self.per_slot != new[SLOT])
        self._arm(port, st)

    def _start(self, port: str, acc, ts: int, old: _Port | None = None) -> _Port:
        """A port's state from its first sample (or afresh, when lanes came: ``old``)."""
        lanes = set(lanes_in(acc))
        if old is not None and old.units != (PORT,):
            lanes |= set(old.units)
        phase = self.phase(port)
        st = _Port(tuple(sorted(lanes)) or (PORT,), (ts - 1 + phase) // self.bucket, phase, self.cfg.max_bin)
        # the feed's own key objects where it has them: a lookup then meets the same object
        # (no tuple comparison), as every sample's do
        held = {k: k for k in acc}
        st.keys = tuple([held.get(k, k) for k in st.keys])
        if old is not None:
            st.sent = old.sent
            self._store(st, SLOT, [old.w[SLOT]])
            if st.units != (PORT,):  # the port's own histogram is no longer a unit of its own
                st.sent.pop(PORT, None)
        self.zeroed.pop(port, None)
        return st

    def _judge(self, port: str, st: _Port, ts: int, publish: bool) -> None:
        cfg = self.cfg
        n, _nu, tot, td, tc, ring = st.at()
        w = st.w
        tails = list(map(add, w[td:tc], w[tc:ring]))
        d_all = list(map(add, w[tot:td], w[HEAD:HEAD + n]))
        unc = w[UNC_TOT] + w[UNC_CUR]
        codewords = sum(d_all) + unc  # the port's, every lane's
        if codewords <= 0:
            return
        cer = unc / codewords
        scale = (1 + cfg.interleave * MFC) / MFC
        lanes = st.units != (PORT,)
        worst: tuple[float, int, float, float] | None = None  # the port's gauges: its worst lane's
        gauges: list[tuple[int | None, tuple[float, float, float, int]]] = []  # to publish: lanes', the port's
        found = self.fits(d_all, len(st.units), lanes, codewords)
        for u, unit in enumerate(st.units):
            got = found[u]
            if got is None:  # no codewords
                continue
            max_t, pred = got
            flr = pred[0] * scale if pred else 0.0
            r2 = pred[1] if pred else 0.0  # no prediction (fewer than MIN_POINTS bins with codewords) is 0
            if publish:
                if lanes:
                    gauges.append((unit, (flr, cer, r2, max_t)))
                if worst is None or (flr, max_t) > (worst[0], worst[1]):
                    worst = (flr, max_t, r2, cer)
            by_bin = tails[u] >= cfg.max_bin_count
            by_flr = pred is not None and pred[1] >= cfg.min_r2 and flr >= cfg.flr
            if by_flr or by_bin:
                self._raise(port, unit if lanes else None, ts, flr, pred, max_t, tails[u], unc, codewords, scale)
        if publish and worst is not None:
            self._store(st, SLOT, [w[IDX] // self.per_slot])
            gauges.append((None, (worst[0], worst[3], worst[2], worst[1])))
        if gauges:  # (events raised meanwhile take no gauges: the order of each is kept)
            self._publish(port, st, ts, gauges)

    def _raise(self, port: str, lane: int | None, ts: int, flr: float, pred, max_t: int, tail: int, unc: int,
               codewords: int, scale: float) -> None:
        cfg = self.cfg
        win = fmt_duration(self.span / NS)
        where = port if lane is None else f"{port} lane {lane}"
        if pred:
            text = (f"{where}: link degrading: predicted FLR {flr:.1e} (threshold {cfg.flr:.0e}; fit R² "
                    f"{pred[1]:.2f} over {pred[3]} bins)")
        else:
            text = f"{where}: link degrading: too few FEC bins with codewords for a prediction"
        text += (f", highest FEC bin S{max_t} ({fmt_count(tail)} codewords at S{cfg.max_bin} or above "
                 f"in {win})")
        if unc:
            text += f", {fmt_count(unc)} uncorrectable on the port (FLR {unc / codewords * scale:.1e})"
        text += (f"; the link is heading for frame loss: clean or reseat the optic or cable on {port}"
                 f"{'' if lane is None else f' (lane {lane})'}, replace it if the tail keeps growing")
        ev = self.ctx.hit(self, "link-degrading", port if lane is None else (port, lane), ts,
                          CRITICAL if unc else WARNING, flr, "flr", text, [port])
        if lane is not None and ev is not None:
            ev.lane = lane  # events.py sends it as the event's ``lane`` leaf

    @classmethod
    def doc_paths(cls) -> list[str]:
        rows = ["", "## The RS-FEC histogram in Cumulus' layout; `insights.link_degrading`'s gauges", "",
                "Cumulus Linux 5.15 streams the histogram per port (none per channel) as "
                f"`{interface_path('X')}/phy/histograms/state/rs-num-corr-err[upper-boundary=U]/count` "
                "(and `…/upper-boundary`), keyed by the bin's upper bound. swtel streams it on that "
                "layout (the asic source's and ethnl's; their lanes under "
                "`…/phy/channels/channel[id=N]/histograms/state/…`, where Cumulus keeps a lane's other "
                "PHY leaves); an open last bin is keyed by its lower bound (15: RS(544,514) corrects 15 "
                "symbols). docs/gnmi.md has the mapping leaf by leaf.", "",
                "Per lane where a port reports lanes' histograms (else per port), over the detector's "
                "`window` (10 s), judged once a bucket (`window` / 10) and at most once a second, each "
                "leaf sent when it moved by more than its resolution (docs/insights.md): states, as events are "
                "(gNMI Get/Subscribe, dial-out, `swtel collect`), "
                "and in OTLP and remote write (the lanes' under the port's names with `_lane`). The port's "
                "leaves are its worst lane's (the highest "
                "predicted FLR, then maxT), so one per port still answers \"which links\"; the observed CER "
                "is the port's on every lane (an uncorrectable codeword is not one lane's). Cumulus Linux "
                "has no such leaves: swtel's origin (docs/insights.md).", "",
                "| detector | value | path | kind |", "|---|---|---|---|"]
        for leaf, meaning in (
                ("predicted-flr", "predicted frame loss ratio (bins 16-20 extrapolated; 0: fewer than 3 bins to "
                 "fit, or no sample in the window)"),
                ("observed-cer", "observed codeword error ratio: uncorrectable / all codewords"),
                ("fit-r2", "R² of the log-linear fit of bins 1-15 (0: no fit)"),
                ("max-bin", "maxT: the highest bin with codewords")):
            kind = f"gauge ({'integer' if leaf == 'max-bin' else 'double'})"
            rows.append(f"| link_degrading | {meaning}, the port's (its worst lane's) | "
                        f"`{prediction_container('X').full(leaf)}` | {kind} |")
            rows.append(f"| link_degrading | {meaning}, lane N's | `{prediction_container('X', 'N').full(leaf)}` | "
                        f"{kind} |")
        return rows

    def _publish(self, port: str, st: _Port, ts: int,
                 gauges: list[tuple[int | None, tuple[float, float, float, int]]]) -> None:
        """The gauges of lanes (or of the port: unit None) that changed since they were last
        published, in order: ``gauges`` holds (unit, values)."""
        sents = [st.sent.setdefault(unit, {}) for unit, _ in gauges]
        boxes = st.boxes
        for unit, _ in gauges:
            if unit not in boxes:
                boxes[unit] = prediction_container(port, unit)
        found = self.changes(sents, [values for _, values in gauges], GAUGES)
        self.pending += [StateUpdate(ts, boxes[gauges[u][0]], leaf, value, "insights") for u, leaf, value in found]

    def end_pass(self, ts: int) -> None:
        # A port whose bins stopped moving (its link down) gets no samples, so it would keep its
        # last prediction: once its window holds no sample, its gauges read an empty window (0).
        if ts - self.swept_ns < PUBLISH_NS:
            return
        self.swept_ns = ts
        for port, st in list(self.ports.items()):
            if st.w[IDX] <= (ts - 1 + st.phase) // self.bucket - RING:
                self._publish(port, st, ts, [(unit, _EMPTY) for unit in st.sent])
                self.zeroed[port] = st.sent
                del self.ports[port]
                self.fast.pop(port, None)

    def states(self) -> list[StateUpdate]:
        out, self.pending = self.pending, []
        return out

    def retire(self, ts: int) -> list[StateUpdate]:
        """Disabled by a reload: every gauge it published leaves the store (a delete), not stays
        at its last value."""
        out = self.states()
        published = [(port, st.sent) for port, st in self.ports.items()] + list(self.zeroed.items())
        for port, by_unit in published:
            for unit, sent in by_unit.items():
                box = prediction_container(port, unit)
                out += [StateUpdate(ts, box, leaf, None, "insights") for leaf in sent]
        self.ports.clear()
        self.zeroed.clear()
        self.fast.clear()
        return out

    def forget(self, port: str) -> None:
        self.ports.pop(port, None)  # its gauges go with the port's subtree (the engine's delete)
        self.zeroed.pop(port, None)
        self.fast.pop(port, None)
