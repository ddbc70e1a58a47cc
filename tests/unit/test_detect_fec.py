"""link_degrading's per-sample accumulation in a kernel (``fec_run``: agent/_ext/detect.c and
its twin agent/_fallback/detect.py) and its fits (``fec_fits``).

Held to the detector it replaced (kept below as it was): on random passes (ports with and
without lanes' histograms, lanes that come later, irregular sample times, uncorrectable
bursts, tails crossing ``max_bin``, zero and garbage counts, counts past 2^53 and past int64,
windows that empty, forgotten ports) both kernels give the same hits, to the bit, the same
gauge updates and the same state as the old detector; and a simulated switch's run gives the
same events and state updates through the runner with the old link_degrading and the new."""

from __future__ import annotations

import random
import struct
from array import array
from collections import deque
from operator import add, sub
from types import SimpleNamespace

import pytest

from agent import _backend, _fallback
from agent.config import Duration
from agent.counters import Container, StateUpdate
from agent.insights import classify as c
from agent.insights.base import CRITICAL, NS, WARNING, Detector, fmt_count, fmt_duration
from agent.insights.feeds import merged
from agent.insights.link_degrading import (
    _EMPTY,
    _PORT_KEYS,
    _UNC_BIT,
    _UNC_KEYS,
    BINS,
    GAUGES,
    MFC,
    PORT,
    PUBLISH_NS,
    LinkDegrading,
    LinkDegradingConfig,
    _fits,
    _rounded,
    fit,
    lane_keys,
    lanes_in,
    phase_of,
    prediction_container,
)
from tests.unit.test_detect_dip import _run_both

pytestmark = pytest.mark.nolibs  # no versioned library decides its outcome: not in the Debian pass

_KERNEL_NAMES = ("fec_run", "fec_fits", "fec_changes", "fec_lanes")
KERNELS = {"twin": tuple(getattr(_fallback, n) for n in _KERNEL_NAMES)}
if _backend.NAME == "C":
    KERNELS["C"] = tuple(getattr(_backend.reader, n) for n in _KERNEL_NAMES)


#: the gauges' resolutions in GAUGES' order (docs/insights.md), (relative, absolute)
RESOLUTIONS = ((0.1, 1e-15), (0.1, 1e-15), (0.0, 0.01), (0.0, 0.0))


def _news(sent: dict, leaf: str, value, i: int) -> bool:
    """The publishing rule, written apart from both kernels: a gauge never published, a float
    that moved by more than its resolution from the one last published (NaN: unless both
    are), anything else that differs."""
    if leaf not in sent:
        return True
    was = sent[leaf]
    if type(was) is float and type(value) is float and i < len(RESOLUTIONS):
        if was != was or value != value:
            return not (was != was and value != value)
        rel, ab = RESOLUTIONS[i]
        return abs(value - was) > max(ab, rel * max(abs(was), abs(value)))
    return was != value


def _use(det: LinkDegrading, kernels: tuple) -> None:
    det.kernel, det.fits, det.changes, det.lanes_of = kernels


# ---------------------------------------------------------------- the detector it replaced
class _OldPort:
    """One port's units (its lanes, or itself) and their window in ten buckets (a sample goes
    to the bucket its end falls in): the nine before the current one, summed, and the current
    one, the units' bins side by side in one flat list (unit u's at u * BINS), the port's
    uncorrectable codewords beside them; and per unit the codewords at ``max_bin`` or above in
    each part, kept so that a sample sums only its own tail."""

    __slots__ = ("units", "keys", "zeros", "highs", "phase", "done", "totals", "unc_total", "idx", "cur",
                 "unc_cur", "sent", "boxes", "slot", "tail_done", "tail_cur", "alarm")

    def __init__(self, units: tuple[int, ...], idx: int, phase: int, max_bin: int) -> None:
        self.units = units
        self.keys = _PORT_KEYS if units == (PORT,) else sum((lane_keys(u) for u in units), ())
        self.zeros = (0,) * len(self.keys)
        #: the bins at max_bin or above: a sample that moves none of them leaves the tails as they are
        self.highs = frozenset(k for i, k in enumerate(self.keys) if i % BINS >= max_bin)
        self.phase = phase
        self.done: deque[tuple[int, list[int], int]] = deque()  # (bucket, bins, uncorrectable)
        self.totals = [0] * len(self.keys)  # of ``done``
        self.unc_total = 0
        self.idx = idx
        self.cur = [0] * len(self.keys)
        self.unc_cur = 0
        #: the gauges as last published, per unit and for the port (key None)
        self.sent: dict[int | None, dict[str, float | int]] = {}
        self.boxes: dict[int | None, Container] = {}  # their containers, built once
        self.slot = -1  # the publishing slot (a second or a bucket) they were last published in
        self.tail_done = [0] * len(units)  # codewords at max_bin or above in ``totals``, per unit
        self.tail_cur = [0] * len(units)  # ... in ``cur``
        self.alarm = False  # a unit's tail holds max_bin_count codewords or more




class OldLinkDegrading(Detector):
    """agent/insights/link_degrading.py's detector as it was before its kernel (git ef8694d),
    config rules and docs left out."""

    name = "link_degrading"
    doc = ("a link heading for uncorrectable codewords, from its FEC codeword-error histogram (per lane "
           "where lanes are reported): event `link-degrading` (docs/insights.md)")
    reads = ("asic", "ethnl")
    types = ("link-degrading",)
    every_sample = False  # bin 0 counts every codeword received: each sample of a live link
    sems = frozenset({c.FEC_BIN, c.UNCORRECTABLE})

    def __init__(self, cfg, ctx) -> None:
        super().__init__(cfg, ctx)
        self.span = int(cfg.window * NS)
        self.bucket = max(1, self.span // 10)
        # buckets per publishing slot: the gauges once a bucket, but at most once a second
        self.per_slot = max(1, -(-PUBLISH_NS // self.bucket))
        self.ports: dict[str, _OldPort] = {}
        self.pending: list[StateUpdate] = []  # gauges due, taken by the runner (states)
        self.swept_ns = 0  # the last look for ports whose window emptied
        #: ports whose window emptied: the gauges they read 0 on (deleted on retire)
        self.zeroed: dict[str, dict[int | None, dict[str, float | int]]] = {}

    def phase(self, port: str) -> int:
        """Where in a bucket the port's buckets end (tests set it to 0 to compare)."""
        return phase_of(port, self.bucket)

    def sample(self, port, ts, dt, acc, owned) -> None:
        if c.FEC_BIN not in owned:
            return
        st = self.ports.get(port)
        if st is None:
            st = self.ports[port] = self._start(port, acc, ts)
        # Every sample of every port with a histogram comes here: kept to C-level list work.
        unc = (acc.get(_UNC_KEYS[0], 0) + acc.get(_UNC_KEYS[1], 0)
               if c.UNCORRECTABLE in owned and self.changed & _UNC_BIT else 0)
        idx = (ts - 1 + st.phase) // self.bucket  # a sample ending on a boundary is the bucket's before it
        if idx == st.idx:  # the common case: add the sample to the current bucket
            st.cur = list(map(add, st.cur, map(acc.get, st.keys, st.zeros)))
            st.unc_cur += unc
            if not acc.keys().isdisjoint(st.highs):  # a tail moved (rare on a healthy link)
                mb = self.cfg.max_bin
                row = list(map(acc.get, st.keys, st.zeros))
                st.tail_cur = list(map(add, st.tail_cur, (sum(row[at + mb:at + BINS])
                                                          for at in range(0, len(row), BINS))))
                st.alarm = max(map(add, st.tail_done, st.tail_cur)) >= self.cfg.max_bin_count
            # maxT is cheap: judged every sample; the fit once a bucket, and whenever the tail or
            # uncorrectable codewords hold
            if unc or st.alarm:
                self._judge(port, st, ts, False)
            return
        lanes = lanes_in(acc)  # once a bucket: a lane that came (a sample may miss a calm one)
        if lanes and not set(lanes) <= set(st.units):  # the port starts afresh with them
            st = self.ports[port] = self._start(port, acc, ts, st)
            st.cur = list(map(acc.get, st.keys, st.zeros))
            st.unc_cur = unc
            return
        # the bucket closes: its sums join the window's, buckets past it leave
        row = list(map(acc.get, st.keys, st.zeros))
        mb = self.cfg.max_bin
        st.done.append((st.idx, st.cur, st.unc_cur))
        totals = list(map(add, st.totals, st.cur))
        unc_total = st.unc_total + st.unc_cur
        while st.done and st.done[0][0] <= idx - 10:
            _b, old, old_unc = st.done.popleft()
            totals = list(map(sub, totals, old))
            unc_total -= old_unc
        st.totals, st.unc_total, st.idx, st.cur, st.unc_cur = totals, unc_total, idx, row, unc
        st.tail_done = [sum(totals[at + mb:at + BINS]) for at in range(0, len(totals), BINS)]
        st.tail_cur = [sum(row[at + mb:at + BINS]) for at in range(0, len(row), BINS)]
        st.alarm = max(map(add, st.tail_done, st.tail_cur)) >= self.cfg.max_bin_count
        self._judge(port, st, ts, idx // self.per_slot != st.slot)

    def _start(self, port: str, acc, ts: int, old: _OldPort | None = None) -> _OldPort:
        """A port's state from its first sample (or afresh, when lanes came: ``old``)."""
        lanes = set(lanes_in(acc))
        if old is not None and old.units != (PORT,):
            lanes |= set(old.units)
        st = _OldPort(tuple(sorted(lanes)) or (PORT,), 0, self.phase(port), self.cfg.max_bin)
        st.idx = (ts - 1 + st.phase) // self.bucket
        if old is not None:
            st.sent, st.slot = old.sent, old.slot
            if st.units != (PORT,):  # the port's own histogram is no longer a unit of its own
                st.sent.pop(PORT, None)
        self.zeroed.pop(port, None)
        return st

    def _judge(self, port: str, st: _OldPort, ts: int, publish: bool) -> None:
        cfg = self.cfg
        tails = list(map(add, st.tail_done, st.tail_cur))
        d_all = list(map(add, st.totals, st.cur))
        unc = st.unc_total + st.unc_cur
        codewords = sum(d_all) + unc  # the port's, every lane's
        if codewords <= 0:
            return
        cer = unc / codewords
        scale = (1 + cfg.interleave * MFC) / MFC
        lanes = st.units != (PORT,)
        worst: tuple[float, int, float, float] | None = None  # the port's gauges: its worst lane's
        for u, unit in enumerate(st.units):
            d = d_all[u * BINS:(u + 1) * BINS]
            # a lane's fit over its own codewords; a port's over all, uncorrectable ones included
            total = sum(d) if lanes else codewords
            if total <= 0:
                continue
            max_t = max((i for i in range(BINS) if d[i] > 0), default=0)
            pred = fit(d, total)
            flr = pred[0] * scale if pred else 0.0
            r2 = pred[1] if pred else 0.0  # no prediction (fewer than MIN_POINTS bins with codewords) is 0
            if publish:
                if lanes:
                    self._publish(port, st, unit, ts, (flr, cer, r2, max_t))
                if worst is None or (flr, max_t) > (worst[0], worst[1]):
                    worst = (flr, max_t, r2, cer)
            by_bin = tails[u] >= cfg.max_bin_count
            by_flr = pred is not None and pred[1] >= cfg.min_r2 and flr >= cfg.flr
            if by_flr or by_bin:
                self._raise(port, unit if lanes else None, ts, flr, pred, max_t, tails[u], unc, codewords, scale)
        if publish and worst is not None:
            st.slot = st.idx // self.per_slot
            self._publish(port, st, None, ts, (worst[0], worst[3], worst[2], worst[1]))

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

    def _publish(self, port: str, st: _OldPort, unit: int | None, ts: int,
                 values: tuple[float, float, float, int]) -> None:
        """The gauges of a lane (or of the port: ``unit`` None) that changed since they were
        last published."""
        sent = st.sent.setdefault(unit, {})
        box = st.boxes.get(unit)
        if box is None:
            box = st.boxes[unit] = prediction_container(port, unit)
        pending = self.pending
        for i, (leaf, value) in enumerate(zip(GAUGES, values, strict=True)):
            value = value if isinstance(value, int) else _rounded(value)
            if _news(sent, leaf, value, i):
                sent[leaf] = value
                pending.append(StateUpdate(ts, box, leaf, value, "insights"))

    def end_pass(self, ts: int) -> None:
        # A port whose bins stopped moving (its link down) gets no samples, so it would keep its
        # last prediction: once its window holds no sample, its gauges read an empty window (0).
        if ts - self.swept_ns < PUBLISH_NS:
            return
        self.swept_ns = ts
        for port, st in list(self.ports.items()):
            if st.idx <= (ts - 1 + st.phase) // self.bucket - 10:
                for unit in st.sent:
                    self._publish(port, st, unit, ts, _EMPTY)
                self.zeroed[port] = st.sent
                del self.ports[port]

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
        return out

    def forget(self, port: str) -> None:
        self.ports.pop(port, None)  # its gauges go with the port's subtree (the engine's delete)
        self.zeroed.pop(port, None)


# ---------------------------------------------------------------- random passes
T0 = 1_700_000_000 * NS
_OTHER = (c.RX_OCTETS, "")


class Ctx:
    speeds: dict = {}

    def __init__(self) -> None:
        self.hits: list[list] = []

    def hit(self, det, etype, key, ts, severity, peak, unit, message, interfaces):
        ev = SimpleNamespace(lane=None)  # the detector sets a lane's
        # floats as their bits: equal means the same double
        self.hits.append([etype, key, ts, severity, struct.pack("<d", peak), unit, message, tuple(interfaces), ev])
        return ev


def _hits(ctx: Ctx) -> list[tuple]:
    return [tuple(h[:-1]) + (h[-1].lane,) for h in ctx.hits]


def _updates(ups: list[StateUpdate]) -> list[tuple]:
    return [(u.ts_ns, u.container, u.leaf, type(u.value),
             struct.pack("<d", u.value) if isinstance(u.value, float) else u.value, u.source) for u in ups]


def _counts(rng: random.Random, level: float, tail: bool) -> list[int]:
    """One unit's bins: bin 0 large, the others falling off log-linearly (slope ``level``),
    the high bins only now and then."""
    b0 = rng.randrange(10**5, 10**7)
    out = [b0]
    for i in range(1, BINS):
        v = b0 * 10 ** (-level * i + rng.uniform(-0.3, 0.3))
        out.append(int(v) if (tail or i < 8) and v >= 1 else 0)
    return out


def _sample(rng: random.Random, units: tuple[int, ...], level: float, also_port: bool):
    acc: dict = {_OTHER: rng.randrange(1000)}
    tail = rng.random() < 0.15
    port_sum = [0] * BINS
    for u in units:
        bins = _counts(rng, level, tail)
        keys = _PORT_KEYS if u == PORT else lane_keys(u)
        for i, (k, v) in enumerate(zip(keys, bins, strict=True)):
            if v or rng.random() < 0.02:  # now and then a bin present at 0
                acc[k] = v
            port_sum[i] += v
        if u != PORT and rng.random() < 0.05:  # a device's bin past 15: not read
            acc[(c.FEC_BIN, f"{u}/16")] = rng.randrange(5)
    if also_port and units != (PORT,):
        acc.update((k, v) for k, v in zip(_PORT_KEYS, port_sum, strict=True) if v)
    r = rng.random()
    if r < 0.04:  # an uncorrectable burst
        acc[rng.choice(_UNC_KEYS)] = rng.randrange(1, 200)
    elif r < 0.06:
        acc[rng.choice(_UNC_KEYS)] = 0
    elif r < 0.065:  # one up, one down: 0 in all
        acc[_UNC_KEYS[0]], acc[_UNC_KEYS[1]] = 7, -7
    r = rng.random()
    fec = [k for k in acc if k[0] == c.FEC_BIN]
    if r < 0.004 and fec:  # past doubles' exact ints
        acc[rng.choice(fec)] = 2**53 + rng.randrange(1, 1000)
    elif r < 0.006 and fec:  # past int64
        acc[rng.choice(fec)] = 2**63 + rng.randrange(1000)
    elif r < 0.01 and fec:  # a negative delta (a wrap the feed did not catch)
        acc[rng.choice(fec)] = -rng.randrange(1, 50)
    elif r < 0.012 and fec:  # not an int
        acc[rng.choice(fec)] = 3.0
    return acc


def _passes(rng: random.Random, ports: list[str], n: int):
    """Per pass, its samples (port, ts, dt, acc, owned, changed), its end and the ports
    forgotten after it."""
    units: dict[str, tuple[int, ...]] = {}
    later: dict[str, list[int]] = {}
    for p in ports:
        if rng.random() < 0.4:
            units[p] = (PORT,)
            later[p] = rng.sample(range(4), rng.randrange(3)) if rng.random() < 0.3 else []
        else:
            lanes = rng.sample(range(8), rng.randrange(1, 5))
            units[p] = tuple(sorted(lanes[:-1] or lanes))
            later[p] = [x for x in lanes if x not in units[p]]
    level = {p: rng.uniform(0.3, 1.6) for p in ports}
    also = {p: rng.random() < 0.5 for p in ports}
    prev = dict.fromkeys(ports, 0)
    away = dict.fromkeys(ports, 0)
    ts = T0 + rng.randrange(NS)
    step = rng.choice((100_000_000, 50_000_000, 250_000_000))
    for _ in range(n):
        r = rng.random()
        ts += step if r < 0.7 else rng.randrange(1, 2 * NS) if r < 0.98 else rng.randrange(10 * NS, 14 * NS)
        entries = []
        for p in ports:
            if ts < away[p] or rng.random() < 0.1:
                continue
            if rng.random() < 0.002:  # its link down a while: its window empties
                away[p] = ts + rng.randrange(5 * NS, 15 * NS)
                continue
            if later[p] and rng.random() < 0.01:  # a lane comes
                lane = later[p].pop()
                units[p] = tuple(sorted({u for u in units[p] if u != PORT} | {lane}))
            t = max(prev[p] + 1, ts - rng.randrange(3) * 1_000_000)
            dt, prev[p] = t - prev[p], t
            if rng.random() < 0.03:  # its level moves
                level[p] = rng.uniform(0.2, 1.6)
            acc = _sample(rng, units[p], level[p], also[p])
            q = rng.random()
            owned = (frozenset({c.FEC_BIN, c.UNCORRECTABLE, c.RX_OCTETS}) if q < 0.85 else
                     frozenset({c.FEC_BIN, c.RX_OCTETS}) if q < 0.95 else frozenset({c.RX_OCTETS, c.UNCORRECTABLE}))
            q = rng.random()
            changed = (c.mask({k[0] for k in acc}) if q < 0.9 else -1 if q < 0.95 else
                       c.mask({c.FEC_BIN}))
            entries.append((p, t, dt, acc, owned, changed))
        gone = [p for p in ports if rng.random() < 0.002]
        yield entries, ts, gone


def _state(st) -> tuple:
    return (st.units, st.keys, st.phase, st.idx, list(st.cur), st.unc_cur, list(st.totals), st.unc_total,
            [(b, list(bins), u) for b, bins, u in st.done], list(st.tail_done), list(st.tail_cur), st.alarm,
            st.sent, st.slot, st.highs, st.zeros)


def _config(rng: random.Random) -> LinkDegradingConfig:
    return LinkDegradingConfig(window=Duration(rng.choice((10.0, 3.0, 1.0, 25.0))),
                               max_bin=rng.choice((9, 5, 12, 15, 1)), max_bin_count=rng.choice((3, 1, 50)),
                               flr=rng.choice((1e-9, 1e-6, 1e-12)), min_r2=rng.choice((0.9, 0.5)),
                               interleave=rng.choice((1, 2, 4)))


#: the feeds' row keys of every port in the passes below: its own bins, then lanes 0..7's
_ROW_KEYS = _PORT_KEYS + sum((lane_keys(u) for u in range(8)), ())
_ROW_COLS = {k: col for col, k in enumerate(_ROW_KEYS)}


def _rowed(entries: list) -> list:
    """A pass's samples as the feeds give them (feeds.FeedBook): each FEC bin's delta in the
    port's row (an i64 within int64), not in acc; a value past int64 or not an int stays in acc
    and the sample takes classify.SPILL (feed_add's rule); a zero is dropped (feed_add adds none)."""
    width = len(_ROW_KEYS)
    rows = array("q", bytes(8 * width * len(entries)))
    out = []
    for n, (port, ts, dt, acc, owned, changed) in enumerate(entries):
        rest = {}
        for key, v in acc.items():
            col = _ROW_COLS.get(key)
            if col is None:
                rest[key] = v
            elif type(v) is int and -2**63 <= v < 2**63:
                rows[n * width + col] = v
            else:
                rest[key] = v
                changed |= c.SPILL
        out.append((port, ts, dt, rest, owned, changed, n, (rows, n * width, _ROW_KEYS)))
    return out


@pytest.mark.parametrize("seed", range(20))
@pytest.mark.parametrize("rows", [False, True], ids=["acc", "rows"])
def test_both_kernels_hit_publish_and_keep_state_as_the_old_detector_did(seed, rows):
    """With the bins in acc (a sample outside the feeds) and in the feeds' rows: the old
    detector reads the two merged (feeds.merged, as the feeds give a Python detector)."""
    rng = random.Random(seed)
    ports = [f"swp{i}" for i in range(1, rng.randrange(2, 16))]
    cfg = _config(rng)
    old = OldLinkDegrading(cfg, Ctx())
    news = {}
    for name, kernels in KERNELS.items():
        _use(news.setdefault(name, LinkDegrading(cfg, Ctx())), kernels)
    deferred = {name: 0 for name in news}
    samples = 0
    for entries, ts, gone in _passes(rng, ports, 400):
        samples += len(entries)
        if rows:
            entries = _rowed(entries)
        for e in entries:
            old.changed = e[5]
            old.sample(*e[:3], merged(e[3], e[7] if rows else None), e[4])
        for name, det in news.items():
            det.batch.extend(entries)
            found = det.run_batch()
            deferred[name] += sum(todo is None for todo in det._todo.values())
            for k in found:
                det.emit(k)
        old.end_pass(ts)
        want = _updates(old.states())
        for p in gone:
            old.forget(p)
        for name, det in news.items():
            det.end_pass(ts)
            assert _updates(det.states()) == want, name
            for p in gone:
                det.forget(p)
    kinds = {h[3] for h in old.ctx.hits}
    assert old.ctx.hits and {WARNING, CRITICAL} <= kinds, "the passes missed a rule: the test proves little"
    for name, det in news.items():
        assert _hits(det.ctx) == _hits(old.ctx), name
        assert det.ports.keys() == old.ports.keys(), name
        for p, st in old.ports.items():
            assert _state(det.ports[p]) == _state(st), (name, p)
        assert det.zeroed == old.zeroed, name
        for p, (w, keys, hashes, units, sent, boxes, phase, row_keys, cols) in det.fast.items():  # the port's own
            st = det.ports[p]
            assert (w, keys, hashes, units, sent, boxes, phase, row_keys, cols) == (
                st.w, st.keys, st.hashes, st.units, st.sent, st.boxes, st.phase, st.row_keys, st.cols)
            assert list(hashes) == list(map(hash, keys))
            assert w is st.w and sent is st.sent and type(w) is array
        assert deferred[name] < samples, name  # some samples were the kernel's own
    retired = _updates(old.retire(ts))
    for name, det in news.items():
        assert _updates(det.retire(ts)) == retired, name
    if "C" in news:
        assert deferred["C"] == deferred["twin"]


@pytest.mark.parametrize("seed", range(8))
def test_c_and_twin_kernels_write_the_same_bytes(seed):
    """Both kernels, pass for pass, on the same arrays: the same bytes and the same deferrals."""
    if "C" not in KERNELS:
        pytest.skip("no C extension")
    rng = random.Random(100 + seed)
    ports = [f"swp{i}" for i in range(1, 12)]
    cfg = _config(rng)
    dets = {name: LinkDegrading(cfg, Ctx()) for name in KERNELS}
    for name, det in dets.items():
        _use(det, KERNELS[name])
    for entries, ts, _gone in _passes(rng, ports, 200):
        got = {}
        for name, det in dets.items():
            det.batch.extend(entries)
            found = det.run_batch()
            got[name] = (found, [k for k, todo in det._todo.items() if todo is None],
                         {p: bytes(f[0]) for p, f in det.fast.items()}, _updates(det.pending))
            for k in found:
                det.emit(k)
            det.end_pass(ts)
            det.states()
        assert got["C"] == got["twin"]


def _fit_bits(found):
    if found is None:
        return None
    return [u if u is None else (u[0], u[1] if u[1] is None else struct.pack("<3di", *u[1])) for u in found]


@pytest.mark.parametrize("seed", range(16))
def test_fits_are_pythons_to_the_bit(seed):
    rng = random.Random(seed)
    for _ in range(300):
        units = rng.randrange(1, 6)
        lanes = rng.random() < 0.7
        counts = []
        for _u in range(units):
            counts += _counts(rng, rng.uniform(0.1, 2.0), rng.random() < 0.5)
        r = rng.random()
        if r < 0.05:
            counts[rng.randrange(len(counts))] = 2**53 + rng.randrange(1, 5)
        elif r < 0.1:
            counts[rng.randrange(len(counts))] = 2**53
        elif r < 0.15:
            counts = [0] * len(counts)
        elif r < 0.2:
            counts[rng.randrange(len(counts))] = -rng.randrange(1, 100)
        codewords = sum(counts) + (rng.randrange(100) if rng.random() < 0.3 else 0)
        want = _fit_bits(_fits(counts, units, lanes, codewords))
        for name, kernels in KERNELS.items():
            got = _fit_bits(kernels[1](counts, units, lanes, codewords))
            if got is None:  # Python's to do: only past doubles' exact ints
                assert any(abs(x) > 2**53 for x in counts) or abs(codewords) > 2**53 or (
                    lanes and any(sum(counts[u * BINS:(u + 1) * BINS]) > 2**53 for u in range(units))), name
            else:
                assert got == want, name


@pytest.mark.parametrize("name", ["twin", "C"])
def test_bad_input_is_refused(name):
    if name not in KERNELS:
        pytest.skip("no C extension")
    run, fits, changes, lanes = KERNELS[name]
    conf = (10, c.FEC_BIN, c.UNCORRECTABLE, _UNC_KEYS, _UNC_BIT, 9, 3, 1e-9, 0.9, 1.125, 1, GAUGES, StateUpdate,
            "insights", c.SPILL)
    with pytest.raises(TypeError):
        run([("swp1", 1, 1, {}, frozenset())], {}, conf, [])
    with pytest.raises(TypeError):
        run([], {}, conf[:5], [])
    with pytest.raises(ValueError):
        run([], {}, (0, *conf[1:]), [])
    with pytest.raises(ValueError):
        run([], {}, (*conf[:10], 0, *conf[11:]), [])
    with pytest.raises(ValueError):
        run([], {}, (*conf[:11], GAUGES[:3], *conf[12:]), [])
    with pytest.raises(TypeError):  # update: called for each gauge, so a callable
        run([], {}, (*conf[:12], 5, *conf[13:]), [])
    # a port's state the kernel cannot read (short words, a list, odd units): Python's, untouched
    acc = {_PORT_KEYS[0]: 5}
    entry = ("swp1", 10**9, 10**8, acc, frozenset({c.FEC_BIN}), -1)
    keys = _PORT_KEYS
    hashes = array("q", map(hash, keys))
    for w, units in ((array("q", bytes(8 * 10)), (PORT,)), (array("q", bytes(8 * 5000)), (PORT,)),
                     (array("q", bytes(8 * 5000)), (PORT, 1))):
        before = bytes(w)
        assert run([entry], {"swp1": (w, keys, hashes, units, {}, {}, 0, None, None)}, conf, []) == {0: None}
        assert bytes(w) == before
    with pytest.raises(TypeError):
        run([entry], {"swp1": ([0] * 5000, keys, hashes, (PORT,), {}, {}, 0, None, None)}, conf, [])
    with pytest.raises(ValueError):
        fits([0] * 15, 1, True, 0)
    with pytest.raises(ValueError):
        changes([{}], [(1.0,)], ())
    with pytest.raises(ValueError):
        changes([{}], [], ())
    assert changes([{}], [("x",)], ("a",)) is None  # Python's
    assert lanes({(c.FEC_BIN, "1/2"): 1, (c.FEC_BIN, "x/2"): 1}, c.FEC_BIN) is None
    assert lanes({(c.FEC_BIN, "3/2"): 1, (c.FEC_BIN, "03/5"): 1, (c.FEC_BIN, "0/1"): 1, (c.FEC_BIN, "7"): 1,
                  _UNC_KEYS[0]: 4}, c.FEC_BIN) == (0, 3)


@pytest.mark.parametrize("seed", range(8))
def test_gauge_rounding_and_lanes_are_pythons(seed):
    rng = random.Random(seed)
    values = [0.0, -0.0, 1.0, 1e-300, 5e-324, 1.7976931348623157e308, float("inf"), float("nan"), 0.99995, 1.23455e-9]
    # ties and near-ties, powers of 10 and the fast way's edges (agent/_ext/detect.c fec_rounded)
    values += [1234.5, 0.5, 1.2345, 1.0005, 9999.5, 99995.0, 0.125, 1e-19, 9.9995e-20, 1e19, 9.9995e18, 1e-3, 1e3,
               123456789.0, -2.5e-7, 1.00005, 0.001234500000001, 3.0000000000000004]
    values += [rng.randrange(1, 10**4) / 10 ** rng.randrange(0, 23) for _ in range(200)]  # d x 10^-k exactly
    values += [(rng.randrange(1, 10**5) + 0.5) * 10 ** rng.randrange(-22, 15) for _ in range(200)]
    values += [rng.uniform(0, 1) * 10 ** rng.uniform(-30, 0) for _ in range(200)]
    leaves = ("a", "b", "c")

    def bits(pairs) -> list:
        return [(k, struct.pack("<d", v) if type(v) is float else v) for k, v in pairs]

    for name, kernels in KERNELS.items():
        sents_py: list[dict] = [{}, {}, {}]
        sents: list[dict] = [{}, {}, {}]
        for v in values:
            rows = [(rng.choice(values), rng.randrange(3), True) for _ in sents]
            rows[rng.randrange(len(rows))] = (v, 1, False)
            want = []
            for u, (sent, row) in enumerate(zip(sents_py, rows, strict=True)):  # _publish's rule
                for i, (leaf, value) in enumerate(zip(leaves, row, strict=True)):
                    value = value if isinstance(value, int) else float(f"{value:.3e}")
                    if _news(sent, leaf, value, i):
                        sent[leaf] = value
                        want.append((u, leaf, value))
            got = kernels[2](sents, rows, leaves)
            assert [(u, k, struct.pack("<d", x) if type(x) is float else x) for u, k, x in got] == [
                (u, k, struct.pack("<d", x) if type(x) is float else x) for u, k, x in want], (name, v)
            assert [bits(s.items()) for s in sents] == [bits(s.items()) for s in sents_py], (name, v)
        for _ in range(50):
            acc = {(c.FEC_BIN, f"{rng.randrange(12)}/{rng.randrange(20)}"): 1 for _ in range(rng.randrange(40))}
            acc.update({(c.FEC_BIN, str(i)): 1 for i in range(rng.randrange(16))})
            assert kernels[3](acc, c.FEC_BIN) == lanes_in(acc), name


# ---------------------------------------------------------------- a simulated switch's run
@pytest.mark.parametrize(("config", "seconds", "step", "jitter"), [
    ("ports=12 seed=2 scenario=fec-degrade@4s-34s:swp7:3", 34, 0.1, 0.0),
    ("ports=8 seed=4 scenario=fec-degrade@2s-30s:swp2,counter-clear@9s:swp2,symbol-errors@3s-6s:swp6", 30, 0.1,
     0.2),
    ("role=spine seed=1 scenario=symbol-errors@5s-25s:swp11s1", 25, 0.1, 0.0),
    ("ports=16 seed=5", 15, 0.05, 0.3),
])
def test_a_simulated_run_gives_the_old_detectors_events_and_gauges(config, seconds, step, jitter):
    def before(runner):
        runner._detectors["link_degrading"] = OldLinkDegrading(runner.cfg.link_degrading, runner)

    (new, old), (new_out, old_out) = _run_both(config, seconds, step, jitter, before=before)
    assert isinstance(new.detectors["link_degrading"], LinkDegrading)
    assert isinstance(old.detectors["link_degrading"], OldLinkDegrading)
    kinds = [e["type"] for e in old.status()["open"] + old.status()["recent"]]
    if "fec-degrade" in config:
        assert "link-degrading" in kinds  # the rule was exercised
    assert new.status() == old.status()
    assert new_out == old_out
    assert any(u for out in old_out for u in out if u[1] in GAUGES)  # gauges were published
    det, ref = new.detectors["link_degrading"], old.detectors["link_degrading"]
    assert det.ports.keys() == ref.ports.keys()
    for p, st in ref.ports.items():
        assert _state(det.ports[p]) == _state(st)


# ---------------------------------------------------------------- the ring, step by step
def _ring_script(lanes: bool) -> list[tuple[int, dict]]:
    """One port's samples (ts, acc), 1 s buckets (window 10 s), 4 a bucket: 25 buckets in a row
    (the ring rolls over more than twice), a gap of 3 buckets without samples, 12 more, a tail
    at and past max_bin for 2 buckets (the alarm, then its samples judged one by one), 14 calm
    buckets while the tail leaves the window (the alarm ends), then a gap longer than the
    window and 3 buckets more."""
    units = (0, 1, 2, 3) if lanes else (PORT,)
    out: list[tuple[int, dict]] = []
    ts = T0 + 250_000_000

    def bucket(n: int, tail: bool) -> None:
        nonlocal ts
        for _ in range(4):
            acc: dict = {}
            for u in units:
                keys = _PORT_KEYS if u == PORT else lane_keys(u)
                for i in range(BINS):
                    v = (n * 7 + u * 13 + i * 5) % 97 + (10**6 >> i if i < 8 else 0)
                    if i < 8 or (tail and i in (9, 11)):
                        acc[keys[i]] = v
            out.append((ts, acc))
            ts += 250_000_000

    n = 0
    # (seconds of gap before, buckets, with the tail)
    for gap, buckets, tail in ((0, 25, False), (3, 12, False), (0, 2, True), (0, 14, False), (15, 3, False)):
        ts += gap * NS
        for _ in range(buckets):
            bucket(n, tail)
            n += 1
    return out


@pytest.mark.parametrize("lanes", [True, False])
def test_the_ring_rolls_gaps_and_alarm_as_the_old_detector_did(lanes):
    """Pass by pass, the kernels' ring (more than 10 buckets, a gap of 3 buckets, a tail alarm
    that holds and then leaves the window, a gap past the window) gives the old detector's
    events, updates and state; the kernel closed every calm bucket itself."""
    cfg = LinkDegradingConfig(window=Duration(10.0), max_bin=9, max_bin_count=3)
    old = OldLinkDegrading(cfg, Ctx())
    old.phase = lambda port: 0
    news = {}
    for name, kernels in KERNELS.items():
        det = news[name] = LinkDegrading(cfg, Ctx())
        det.phase = lambda port: 0
        _use(det, kernels)
    owned = frozenset({c.FEC_BIN, c.UNCORRECTABLE})
    closed = {name: 0 for name in news}
    alarmed = False
    for ts, acc in _ring_script(lanes):
        entry = ("swp1", ts, 250_000_000, acc, owned, c.mask({c.FEC_BIN}))
        old.changed = entry[5]
        old.sample(*entry[:5])
        alarmed = alarmed or old.ports["swp1"].alarm
        want = _updates(old.states())
        for name, det in news.items():
            st = det.ports.get("swp1")
            was = st.idx if st is not None else None
            det.batch.append(entry)
            python = bool(det.run_batch()) and det._todo.get(0, False) is None
            det.emit(0)
            if st is not None and det.ports["swp1"].idx != was and not python:
                closed[name] += 1
            assert _updates(det.states()) == want, (name, ts)
            assert _state(det.ports["swp1"]) == _state(old.ports["swp1"]), (name, ts)
    assert alarmed and not old.ports["swp1"].alarm  # the alarm came and went
    kinds = {h[3] for h in old.ctx.hits}
    assert kinds == {WARNING}
    for name, det in news.items():
        assert _hits(det.ctx) == _hits(old.ctx), name
        # the closes (55) were the kernel's but while the alarm held (the tail's 2 buckets and the 10
        # of the window it stays in) and after the gaps (past the window: the port started afresh)
        assert closed[name] >= 40, name


@pytest.mark.parametrize("name", sorted(KERNELS))
def test_a_gauge_is_published_when_it_moved_by_more_than_its_resolution(name):
    """A gauge drifting in small steps goes out once its drift from the value last published
    passes its resolution (10 % for FLR and CER, 0.01 for R², any change of maxT): not every
    bucket; a window emptied (0) is news."""
    changes = KERNELS[name][2]
    sent = [{}]
    rows = [(1e-9, 1e-6, 0.9, 3), (1.05e-9, 1.04e-6, 0.905, 3), (1.09e-9, 0.95e-6, 0.909, 3),
            (1.12e-9, 0.95e-6, 0.911, 4), (1.2e-9, 0.89e-6, 0.911, 4), (0.0, 0.0, 0.0, 0)]
    got = [[(leaf, v) for _u, leaf, v in changes(sent, [row], GAUGES)] for row in rows]
    assert got == [
        [("predicted-flr", 1e-9), ("observed-cer", 1e-6), ("fit-r2", 0.9), ("max-bin", 3)],
        [],  # every move within its resolution
        [],
        [("predicted-flr", 1.12e-9), ("fit-r2", 0.911), ("max-bin", 4)],  # drift from 1e-9, 0.9
        [("observed-cer", 8.9e-7)],  # 11 % below the 1e-6 published
        [("predicted-flr", 0.0), ("observed-cer", 0.0), ("fit-r2", 0.0), ("max-bin", 0)],
    ]
    # below 1e-15 a predicted FLR (a clean link's floor, 1e-19..1e-16) jitters by factors: no news
    floor = [[(leaf, v) for _u, leaf, v in changes(sent, [(x, 0.0, 0.0, 0)], GAUGES)]
             for x in (8.1e-20, 3.5e-16, 1.6e-19, 9e-16, 2e-15)]
    assert floor == [[], [], [], [], [("predicted-flr", 2e-15)]]
