"""Predictive link health (config ``insights.link_degrading``), event ``link-degrading``.

A link whose RS-FEC still corrects everything shows its decline in the codeword-error
histogram (bins S0..S15: codewords with 0..15 corrected symbols) before its first
uncorrectable codeword: the tail grows into the high bins. Per port, over the bins' deltas
(and the uncorrectable codewords') within ``window`` (kept in ten buckets: the last nine
and the current one, so between nine tenths and all of it), as SONiC's FEC FLR design
computes it:

* observed CER = uncorrectable / (uncorrectable + S0 + correctable codewords);
* predicted: a least-squares line through log10(S_i / codewords) for the bins i = 1..15
  that hold any, extrapolated to bins 16..20 (RS(544,514) corrects 15 symbols: a codeword
  with 16 or more is lost); the predicted CER is the sum of those, its fit judged by R²;
* FLR = CER x (1 + X x MFC) / MFC, MFC = 8, X the ``interleave``.

The event is raised when the predicted FLR reaches ``flr`` with R² at least ``min_r2``, or
when the highest bin with a count in the window (SONiC's maxT) reaches ``max_bin`` with at
least ``max_bin_count`` codewords at or above it. It is critical once uncorrectable
codewords come.

The per-port figures are also gauges (docs/insights.md, docs/paths.md): the predicted FLR,
the observed CER, the fit's R² and maxT over the same window, under
``swtel:/interfaces/interface[name=X]/phy/fec/prediction/state`` (Cumulus has no such leaves).
They are judged once a bucket (``window`` / 10: the window's sums change only then) and
published at most once a second per port, each leaf only when its value changed; a port whose
window empties (its link down: no samples) reads 0.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass
from operator import add, sub

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
from agent.pathgrammar import interface_path

BINS = 16  # RS(544,514): 0..15 corrected symbols (a device's further bins are not read)
PREDICTED = range(16, 21)  # the bins extrapolated: codewords the FEC cannot correct
MFC = 8  # SONiC's FLR design: FLR = CER x (1 + X x MFC) / MFC, X the interleave
MIN_POINTS = 3  # a line through fewer non-empty bins predicts nothing
UNC = BINS  # the uncorrectable codewords' place in a row, after the bins

_BIN_KEYS = tuple((c.FEC_BIN, str(i)) for i in range(BINS))
_ZEROS = (0,) * BINS
#: the uncorrectable codewords' leaves (classify.py): the PHY's effective errors, ethtool's blocks
_UNC_KEYS = ((c.UNCORRECTABLE, "effective-errors"), (c.UNCORRECTABLE, "fec-uncorrectable-blocks"))
_UNC_BIT = c.BITS[c.UNCORRECTABLE]  # none of them in a sample whose mask lacks it

#: the gauges' container below a port (swtel's origin: Cumulus 5.15+ has FEC histogram leaves,
#: none for a prediction) and their leaves
PREDICTION = "/phy/fec/prediction/state"
GAUGES = ("predicted-flr", "observed-cer", "fit-r2", "max-bin")
PUBLISH_NS = NS  # a port's gauges at most once a second
DIGITS = 4  # significant digits of a published ratio: a fit's last digits are noise, not news


def prediction_container(port: str) -> Container:
    return Container(SWTEL_ORIGIN, interface_path(port) + PREDICTION)


def _rounded(x: float) -> float:
    return float(f"{x:.{DIGITS - 1}e}")


def fit(counts: list[int], total: int) -> tuple[float, float, float, int] | None:
    """(predicted CER, R², slope, points) of the line through log10(counts[i] / total) for
    the bins i = 1..15 with a count, or None with fewer than MIN_POINTS of them."""
    pts = [(i, math.log10(counts[i] / total)) for i in range(1, BINS) if counts[i] > 0]
    n = len(pts)
    if n < MIN_POINTS:
        return None
    mx = sum(x for x, _ in pts) / n
    my = sum(y for _, y in pts) / n
    sxx = sum((x - mx) ** 2 for x, _ in pts)
    slope = sum((x - mx) * (y - my) for x, y in pts) / sxx
    icpt = my - slope * mx
    ss_tot = sum((y - my) ** 2 for _, y in pts)
    ss_res = sum((y - icpt - slope * x) ** 2 for x, y in pts)
    r2 = 1.0 - ss_res / ss_tot if ss_tot > 0 else 0.0  # a flat line explains nothing
    cer = sum(10.0 ** min(0.0, icpt + slope * i) for i in PREDICTED)
    return min(cer, 1.0), r2, slope, n


class _Port:
    """The window in ten buckets (a sample goes to the bucket its end falls in): the nine
    before the current one, summed, and the current one; and the codewords at ``max_bin`` or
    above in each part, kept so that a sample sums only its own tail."""

    __slots__ = ("done", "totals", "idx", "cur", "sent", "slot", "tail_done", "tail_cur")

    def __init__(self, idx: int) -> None:
        self.done: deque[tuple[int, list[int]]] = deque()  # (bucket, bins 0..15 + uncorrectable)
        self.totals = [0] * (BINS + 1)  # of ``done``
        self.idx = idx
        self.cur = [0] * (BINS + 1)
        self.sent: dict[str, float | int] = {}  # the gauges as last published
        self.slot = -1  # the publishing slot (a second or a bucket) they were last published in
        self.tail_done = 0  # codewords at max_bin or above in ``totals``
        self.tail_cur = 0  # ... in ``cur``


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
    doc = ("a link heading for uncorrectable codewords, from its FEC codeword-error histogram: "
           "event `link-degrading` (docs/insights.md)")
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
        self.ports: dict[str, _Port] = {}
        self.pending: list[StateUpdate] = []  # gauges due, taken by the runner (states)
        self.swept_ns = 0  # the last look for ports whose window emptied

    def sample(self, port, ts, dt, acc, owned) -> None:
        if c.FEC_BIN not in owned:
            return
        # Every sample of every port with a histogram comes here: kept to C-level list work.
        row = list(map(acc.get, _BIN_KEYS, _ZEROS))
        unc = (acc.get(_UNC_KEYS[0], 0) + acc.get(_UNC_KEYS[1], 0)
               if c.UNCORRECTABLE in owned and self.changed & _UNC_BIT else 0)
        row.append(unc)
        idx = (ts - 1) // self.bucket  # a sample ending on a boundary is the bucket's before it
        st = self.ports.get(port)
        if st is None:
            st = self.ports[port] = _Port(idx)
        mb = self.cfg.max_bin
        rolled = idx != st.idx
        if rolled:  # the bucket closes: its sums join the window's, buckets past it leave
            st.done.append((st.idx, st.cur))
            totals = list(map(add, st.totals, st.cur))
            while st.done and st.done[0][0] <= idx - 10:
                totals = list(map(sub, totals, st.done.popleft()[1]))
            st.totals, st.idx, st.cur = totals, idx, row
            st.tail_done = sum(totals[mb:BINS])
            st.tail_cur = sum(row[mb:BINS])
        else:
            st.cur = list(map(add, st.cur, row))
            st.tail_cur += sum(row[mb:BINS])
        # maxT is cheap: judged every sample; the fit once a bucket, and whenever the tail or
        # uncorrectable codewords hold.
        tail = st.tail_done + st.tail_cur
        by_bin = tail >= self.cfg.max_bin_count
        publish = rolled and idx // self.per_slot != st.slot
        if rolled or unc or by_bin:
            self._judge(port, list(map(add, st.totals, st.cur)), ts, tail, by_bin, st if publish else None)

    def _judge(self, port: str, d: list[int], ts: int, tail: int, by_bin: bool, gauges: _Port | None) -> None:
        cfg = self.cfg
        total = sum(d)
        if total <= 0:
            return
        max_t = max((i for i in range(BINS) if d[i] > 0), default=0)
        pred = fit(d, total)
        scale = (1 + cfg.interleave * MFC) / MFC
        flr = pred[0] * scale if pred else 0.0
        if gauges is not None:
            # no prediction (fewer than MIN_POINTS bins with codewords: a clean link) is 0
            self._publish(port, gauges, ts, (flr, d[UNC] / total, pred[1] if pred else 0.0, max_t))
        by_flr = pred is not None and pred[1] >= cfg.min_r2 and flr >= cfg.flr
        if not (by_flr or by_bin):
            return
        win = fmt_duration(self.span / NS)
        unc = d[UNC]
        if pred:
            text = (f"{port}: link degrading: predicted FLR {flr:.1e} (threshold {cfg.flr:.0e}; fit R² "
                    f"{pred[1]:.2f} over {pred[3]} bins)")
        else:
            text = f"{port}: link degrading: too few FEC bins with codewords for a prediction"
        text += (f", highest FEC bin S{max_t} ({fmt_count(tail)} codewords at S{cfg.max_bin} or above "
                 f"in {win})")
        if unc:
            text += f", {fmt_count(unc)} uncorrectable (FLR {unc / total * scale:.1e})"
        text += (f"; the link is heading for frame loss: clean or reseat the optic or cable on {port}, "
                 "replace it if the tail keeps growing")
        self.ctx.hit(self, "link-degrading", port, ts, CRITICAL if unc else WARNING, flr, "flr", text,
                     [port])

    @classmethod
    def doc_paths(cls) -> list[str]:
        rows = ["", "## The RS-FEC histogram in Cumulus' layout; `insights.link_degrading`'s gauges", "",
                "Cumulus Linux 5.15 streams the histogram per port (none per channel) as "
                f"`{interface_path('X')}/phy/histograms/state/rs-num-corr-err[upper-boundary=U]/count` "
                "(and `…/upper-boundary`), keyed by the bin's upper bound. swtel streams it on that "
                "layout (the asic source's and ethnl's; ethnl's lanes under "
                "`…/phy/channels/channel[id=N]/histograms/state/…`); an open last bin is keyed by its "
                "lower bound (15: RS(544,514) corrects 15 symbols). "
                "docs/gnmi.md has the mapping leaf by leaf.", "",
                "Per port with an RS-FEC codeword-error histogram, over the detector's `window` (10 s), "
                "published once a bucket (`window` / 10) and at most once a second, each leaf when it "
                "changed: states, as events are (gNMI Get/Subscribe, dial-out, `swtel collect`), and "
                "gauges in OTLP and remote write. Cumulus Linux has no such leaves: swtel's origin "
                "(docs/insights.md).", "",
                "| detector | value | path | kind |", "|---|---|---|---|"]
        for leaf, meaning in (
                ("predicted-flr", "predicted frame loss ratio (bins 16-20 extrapolated; 0: fewer than 3 bins to "
                 "fit, or no sample in the window)"),
                ("observed-cer", "observed codeword error ratio: uncorrectable / all codewords"),
                ("fit-r2", "R² of the log-linear fit of bins 1-15 (0: no fit)"),
                ("max-bin", "maxT: the highest bin with codewords")):
            rows.append(f"| link_degrading | {meaning} | `{prediction_container('X').full(leaf)}` | "
                        f"gauge ({'integer' if leaf == 'max-bin' else 'double'}) |")
        return rows

    def _publish(self, port: str, st: _Port, ts: int, values: tuple[float, float, float, int]) -> None:
        """The port's gauges that changed since they were last published."""
        st.slot = st.idx // self.per_slot
        box = None
        for leaf, value in zip(GAUGES, values, strict=True):
            value = value if isinstance(value, int) else _rounded(value)
            if st.sent.get(leaf) != value:
                st.sent[leaf] = value
                box = box or prediction_container(port)
                self.pending.append(StateUpdate(ts, box, leaf, value, "insights"))

    def end_pass(self, ts: int) -> None:
        # A port whose bins stopped moving (its link down) gets no samples, so it would keep its
        # last prediction: once its window holds no sample, its gauges read an empty window (0).
        if ts - self.swept_ns < PUBLISH_NS:
            return
        self.swept_ns = ts
        idx = (ts - 1) // self.bucket
        for port, st in list(self.ports.items()):
            if st.idx <= idx - 10:
                self._publish(port, st, ts, (0.0, 0.0, 0.0, 0))
                del self.ports[port]

    def states(self) -> list[StateUpdate]:
        out, self.pending = self.pending, []
        return out

    def forget(self, port: str) -> None:
        self.ports.pop(port, None)  # its gauges go with the port's subtree (the engine's delete)
