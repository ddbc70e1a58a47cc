"""link_degrading's window in a kernel (``fec_run``: agent/_ext/detect.c, the rule: bucket
close, fit and publish; agent/_fallback/detect.py, its plain Python backend, leaves every sample
to the detector's per-port Python) and its fits (``fec_fits``) and gauges (``fec_changes``).

Held to hand-computed cases: fits of log-linear histograms worked out by hand, gauges rounded
to 4 digits and published when they moved by more than their resolution, and a port's ring
(pass by pass, its window's sums are the sums of the samples of its last ten buckets, its
alarm whether a unit's tail holds ``max_bin_count`` codewords). The simulator's degrading
link raises the event alone (tests/unit/test_link_degrading.py holds its figures to the
simulator's model). tests/unit/test_detect_backends.py holds the two backends together on
random passes and on the simulator."""

from __future__ import annotations

import random
from array import array
from types import SimpleNamespace

import pytest

from agent import _backend, _fallback
from agent.config import Duration
from agent.counters import StateUpdate
from agent.insights import classify as c
from agent.insights.base import NS, WARNING
from agent.insights.link_degrading import (
    _PORT_KEYS,
    _UNC_KEYS,
    BINS,
    GAUGES,
    PORT,
    FecPort,
    FecRule,
    LinkDegrading,
    LinkDegradingConfig,
    lane_keys,
    prediction_container,
)
from tests.unit.test_detect_dip import events_of, run_sim

pytestmark = pytest.mark.nolibs  # no versioned library decides its outcome: not in the Debian pass

_KERNEL_NAMES = ("fec_run", "fec_fits", "fec_changes", "fec_lanes")
KERNELS = {"fallback": tuple(getattr(_fallback, n) for n in _KERNEL_NAMES)}
if _backend.NAME == "C":
    KERNELS["C"] = tuple(getattr(_backend.reader, n) for n in _KERNEL_NAMES)
T0 = 1_700_000_000 * NS
_OTHER = (c.RX_OCTETS, "")


def use(det: LinkDegrading, kernels: tuple) -> None:
    det.kernel, det.fits, det.changes, det.lanes_of = kernels


class Ctx:
    speeds: dict = {}

    def __init__(self) -> None:
        self.hits: list[list] = []

    def hit(self, det, etype, key, ts, severity, peak, unit, message, interfaces):
        ev = SimpleNamespace(lane=None)  # the detector sets a lane's
        self.hits.append([etype, key, ts, severity, peak, unit, message, tuple(interfaces), ev])
        return ev


def _hits(ctx: Ctx) -> list[tuple]:
    return [tuple(h[:-1]) + (h[-1].lane,) for h in ctx.hits]


def _updates(ups: list[StateUpdate]) -> list[tuple]:
    return [(u.ts_ns, u.container, u.leaf, type(u.value), u.value, u.source) for u in ups]


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



# ---------------------------------------------------------------- fits by hand
def _line(top: int, bins: int) -> list[int]:
    """Bins 0..bins-1 falling tenfold a bin from 10^top: log10 of each over any total is a line
    of slope -1 (R² 1)."""
    return [10 ** (top - i) for i in range(bins)] + [0] * (BINS - bins)


@pytest.mark.parametrize("name", ["fallback", "C"])
def test_fits_by_hand(name):
    if name not in KERNELS:
        pytest.skip("the C extension is not loaded")
    fits = KERNELS[name][1]
    counts = _line(12, 9)
    total = sum(counts)
    # the line through log10(10^(12-i) / total), extrapolated to bins 16..20, summed
    cer = sum(10.0 ** (12 - i) for i in range(16, 21)) / total
    [(max_t, (got_cer, r2, slope, pts))] = fits(counts, 1, True, total + 999)  # a lane: its own total
    assert (max_t, pts) == (8, 8)
    assert got_cer == pytest.approx(cer, rel=1e-9) and cer == pytest.approx(1.0000009e-16, rel=1e-6)
    assert slope == pytest.approx(-1.0, rel=1e-12) and r2 == pytest.approx(1.0, rel=1e-12)
    # a port's own histogram: over all its codewords, uncorrectable ones included
    [(_, (port_cer, _r2, _slope, _pts))] = fits(counts, 1, False, 10 * total)
    assert port_cer == pytest.approx(cer / 10, rel=1e-9)
    # a line whose bins 16..20 would pass 1 is capped at it
    [(_, (capped, *_))] = fits([1] + [10 ** i for i in range(1, 16)], 1, True, 0)
    assert capped == 1.0
    # fewer than three bins past bin 0 predict nothing; no codewords: no unit
    few = [100, 5, 0, 0, 1] + [0] * 11
    assert fits(few + [0] * BINS, 2, True, 0) == [(4, None), None]
    assert fits([0] * BINS, 1, False, 0) == [None]
    # two units side by side are fitted apart
    [(_, (a, *_)), (_, (b, *_))] = fits(_line(12, 9) + _line(10, 9), 2, True, 0)
    assert a == pytest.approx(cer, rel=1e-9) and b == pytest.approx(cer, rel=1e-9)  # the same shape


@pytest.mark.parametrize("name", ["fallback", "C"])
def test_gauges_are_rounded_to_four_digits(name):
    if name not in KERNELS:
        pytest.skip("the C extension is not loaded")
    changes = KERNELS[name][2]
    cases = [(1.23456e-9, 1.235e-9), (0.99994, 0.9999), (0.99996, 1.0), (123456.0, 123500.0), (-2.46913e-7, -2.469e-7),
             (7.0, 7.0), (0.0, 0.0), (1e-300, 1e-300)]
    for value, rounded in cases:
        [(unit, leaf, got)] = changes([{}], [(value,)], ("a",))
        assert (unit, leaf) == (0, "a") and got == pytest.approx(rounded, rel=1e-12, abs=0.0), value
    assert changes([{}], [(3, "odd")], ("a", "b")) == [(0, "a", 3), (0, "b", "odd")]  # not a float: as it is


@pytest.mark.parametrize("name", ["fallback", "C"])
def test_bad_input_is_refused(name):
    if name not in KERNELS:
        pytest.skip("the C extension is not loaded")
    run, fits, changes, lanes = KERNELS[name]
    rule = FecRule(10, 9, 3, 1e-9, 0.9, 1.125, 1)
    settings = {key: getattr(rule, key) for key in rule.__dataclass_fields__}
    with pytest.raises(TypeError):
        run([("swp1", 1, 1, {}, frozenset())], {}, rule, [])
    with pytest.raises(TypeError):
        run([], None, rule, [])
    if name == "C":  # (the fallback's has no setting of its own to read: its samples are Python's)
        for bad, error in ((dict(bucket=0), ValueError), (dict(per_slot=0), ValueError),
                           (dict(max_bin=17), ValueError), (dict(leaves=GAUGES[:3]), TypeError),
                           (dict(update=5), TypeError)):
            with pytest.raises(error):
                run([], {}, SimpleNamespace(**{**settings, **bad}), [])
        with pytest.raises(AttributeError):
            run([], {}, SimpleNamespace(bucket=10), [])
    # a port's state the kernel cannot read (short words, a list, odd units): Python's, untouched
    acc = {_PORT_KEYS[0]: 5}
    entry = ("swp1", 10**9, 10**8, acc, frozenset({c.FEC_BIN}), -1)
    keys = _PORT_KEYS
    for w, units in ((array("q", bytes(8 * 10)), (PORT,)), (array("q", bytes(8 * 5000)), (PORT,)),
                     (array("q", bytes(8 * 5000)), (PORT, 1))):
        before = bytes(w)
        assert run([entry], {"swp1": FecPort(w, keys, units, {}, {}, 0, None, None)}, rule, []) == {0: None}
        assert bytes(w) == before
    if name == "C":
        with pytest.raises(TypeError):
            run([entry], {"swp1": FecPort([0] * 5000, keys, (PORT,), {}, {}, 0, None, None)}, rule, [])
    with pytest.raises(ValueError):
        fits([0] * 15, 1, True, 0)
    with pytest.raises(ValueError):
        changes([{}], [(1.0,)], ())
    with pytest.raises(ValueError):
        changes([{}], [], ())
    assert lanes({(c.FEC_BIN, "1/2"): 1, (c.FEC_BIN, "x/2"): 1}, c.FEC_BIN) is None
    assert lanes({(c.FEC_BIN, "3/2"): 1, (c.FEC_BIN, "03/5"): 1, (c.FEC_BIN, "0/1"): 1, (c.FEC_BIN, "7"): 1,
                  _UNC_KEYS[0]: 4}, c.FEC_BIN) == (0, 3)
    assert StateUpdate is rule.update  # the class the kernel calls for each gauge


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


def _window(script: list[tuple[int, dict]], upto: int, bucket: int) -> tuple[dict, dict]:
    """By hand: the sums per key of the samples in the last sample's bucket (cur) and in the nine
    before it (done), phase 0 (a sample ending on a boundary is the bucket's before it)."""
    idx = (script[upto][0] - 1) // bucket
    cur: dict = {}
    done: dict = {}
    for ts, acc in script[:upto + 1]:
        b = (ts - 1) // bucket
        into = cur if b == idx else done if b > idx - 10 else None
        if into is not None:
            for key, v in acc.items():
                into[key] = into.get(key, 0) + v
    return cur, done


@pytest.mark.parametrize("lanes", [True, False])
@pytest.mark.parametrize("name", ["fallback", "C"])
def test_the_ring_holds_the_last_ten_buckets(name, lanes):
    """Pass by pass (more than 10 buckets, a gap of 3 buckets, a tail alarm that holds and then
    leaves the window, a gap past the window) the port's window is the hand-summed one, its
    alarm is whether a unit's tail (bins 9..15) holds 3 codewords; with C, the kernel closed
    every calm bucket itself."""
    if name not in KERNELS:
        pytest.skip("the C extension is not loaded")
    cfg = LinkDegradingConfig(window=Duration(10.0), max_bin=9, max_bin_count=3)
    ctx = Ctx()
    det = LinkDegrading(cfg, ctx)
    det.phase = lambda port: 0
    use(det, KERNELS[name])
    owned = frozenset({c.FEC_BIN, c.UNCORRECTABLE})
    script = _ring_script(lanes)
    closed, alarmed, published = 0, False, 0
    for n, (ts, acc) in enumerate(script):
        entry = ("swp1", ts, 250_000_000, acc, owned, c.mask({c.FEC_BIN}))
        st = det.ports.get("swp1")
        was = st.idx if st is not None else None
        det.batch.append(entry)
        python = bool(det.run_batch()) and det._todo.get(0, False) is None
        det.emit(0)
        st = det.ports["swp1"]
        if was is not None and st.idx != was and not python:
            closed += 1
        cur, done = _window(script, n, det.bucket)
        assert dict(zip(st.keys, st.cur, strict=True)) == {k: cur.get(k, 0) for k in st.keys}, n
        assert dict(zip(st.keys, st.totals, strict=True)) == {k: done.get(k, 0) for k in st.keys}, n
        tails = [sum(cur.get(k, 0) + done.get(k, 0) for k in st.keys[at + 9:at + BINS])
                 for at in range(0, len(st.keys), BINS)]
        assert st.alarm == (max(tails) >= 3), n
        alarmed = alarmed or st.alarm
        published += len(det.states())
    assert alarmed and not det.ports["swp1"].alarm  # the alarm came and went
    assert ctx.hits and {h[3] for h in ctx.hits} == {WARNING}  # maxT, no uncorrectable codeword
    assert published  # the gauges went out
    if name == "C":
        # the closes (55) were the kernel's but while the alarm held (the tail's 2 buckets and the 10
        # of the window it stays in) and after the gaps (past the window: the port started afresh)
        assert closed >= 40


# ---------------------------------------------------------------- a simulated switch's run
@pytest.mark.parametrize(("config", "seconds", "port"), [
    ("ports=12 seed=2 scenario=fec-degrade@4s-34s:swp7:3", 34, "swp7"),
    ("ports=8 seed=4 scenario=fec-degrade@2s-30s:swp2,counter-clear@9s:swp2,symbol-errors@3s-6s:swp6", 30, "swp2"),
])
def test_the_simulated_degrading_link_raises_it_alone(config, seconds, port):
    (runner,), (out,) = run_sim(config, seconds, 0.1)
    raised = [e for e in events_of(runner) if e["type"] == "link-degrading"]
    assert raised and {p for e in raised for p in e["interfaces"]} == {port}
    gauges = {box for updates in out for box, leaf, _v in updates if leaf in GAUGES}
    assert prediction_container(port) in gauges  # its gauges went out (so did the healthy ports')


@pytest.mark.parametrize("name", ["fallback", "C"])
def test_a_gauge_is_published_when_it_moved_by_more_than_its_resolution(name):
    """A gauge drifting in small steps goes out once its drift from the value last published
    passes its resolution (10 % for FLR and CER, 0.01 for R², any change of maxT): not every
    bucket; a window emptied (0) is news."""
    if name not in KERNELS:
        pytest.skip("the C extension is not loaded")
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
