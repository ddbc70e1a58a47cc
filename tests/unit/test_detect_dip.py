"""The throughput-dip rule's per-port state in arrays, updated once per pass by a kernel
(``dip_run``: agent/_ext/detect.c and its twin agent/_fallback/detect.py).

Held to the detector it replaced (kept below as it was, per port and per object): on
random passes (irregular and huge sample lengths, speeds whose product with the length
passes 64 bits, wraps, resets and jumps as huge, negative or missing deltas, ports that
go away) both kernels give the same hits, to the bit, as the old detector, and the same
state; and a simulated switch's run gives the same events and state updates through the
runner with the old detector and the new one."""

from __future__ import annotations

import random
import struct
from array import array

import pytest

from agent import _backend, _fallback
from agent.config import Duration, Insights
from agent.insights import InsightsRunner
from agent.insights import classify as c
from agent.insights.base import NS, WARNING, Detector, fmt_duration
from agent.insights.throughput_dip import ROW_INTS, ROW_REALS, ThroughputDip, ThroughputDipConfig

pytestmark = pytest.mark.nolibs  # no versioned library decides its outcome: not in the Debian pass

KERNELS = {"twin": _fallback.dip_run}
if _backend.NAME == "C":
    KERNELS["C"] = _backend.reader.dip_run


# ---------------------------------------------------------------- the detector it replaced
_DIRS = ((c.RX_OCTETS, "rx"), (c.TX_OCTETS, "tx"))


class _Dir:
    __slots__ = ("level", "seen", "start", "ref", "low", "long", "quiet_until")

    def __init__(self) -> None:
        self.level = -1.0
        self.seen = 0
        self.start = 0
        self.ref = 0.0
        self.low = 0.0
        self.long = False
        self.quiet_until = 0


class OldThroughputDip(Detector):
    """agent/insights/throughput_dip.py as it was before its state moved into arrays."""

    name = "throughput_dip"
    types = ("throughput-dip",)
    sems = frozenset({c.RX_OCTETS, c.TX_OCTETS})

    def __init__(self, cfg, ctx) -> None:
        super().__init__(cfg, ctx)
        self.tau = float(cfg.baseline) * NS
        self.ports: dict[str, tuple[_Dir, _Dir]] = {}
        self._alpha = (0, 0.0)
        self.max_ns = int(cfg.max_duration * NS)

    def sample(self, port, ts, dt, acc, owned) -> None:
        import math

        speed = self.ctx.speeds.get(port)
        if not speed:
            return
        st = self.ports.get(port)
        if st is None:
            st = self.ports[port] = (_Dir(), _Dir())
        if self._alpha[0] != dt:
            self._alpha = (dt, 1.0 - math.exp(-dt / self.tau))
        alpha = self._alpha[1]
        scale = 8 * NS / (speed * dt)
        cfg = self.cfg
        for (sem, label), d in zip(_DIRS, st, strict=True):
            if sem not in owned:
                continue
            util = acc.get((sem, ""), 0) * scale
            level = d.level
            if level < 0:
                d.level = util
                continue
            if util < cfg.dip_ratio * level:
                if d.start:
                    d.low = min(d.low, util)
                    if not d.long and ts - d.start > self.max_ns:
                        d.long = True
                elif d.seen >= NS and level >= cfg.min_utilization and ts > d.quiet_until:
                    d.start, d.ref, d.low, d.long = ts - dt, level, util, False
            elif d.start:
                took = ts - dt - d.start
                if not d.long and took <= self.max_ns:
                    share = d.low / d.ref
                    text = (f"{port}: {label} throughput dipped to {share:.0%} of its "
                            f"{fmt_duration(cfg.baseline)} level for {fmt_duration(took / NS)} "
                            f"({d.low:.0%} vs {d.ref:.0%} of {speed / 1e9:g}G); look for errors, drops "
                            "or pause on this port and its peer")
                    self.ctx.hit(self, "throughput-dip", port, ts - dt, WARNING, 1.0 - share,
                                 "share-of-level-lost", text, [port])
                elif d.long:
                    d.quiet_until = ts + int(self.tau / 2)
                d.start = 0
            d.level = level + alpha * (util - level)
            d.seen += dt

    def forget(self, port: str) -> None:
        self.ports.pop(port, None)


# ---------------------------------------------------------------- random passes
class Ctx:
    def __init__(self, speeds: dict) -> None:
        self.speeds = speeds
        self.hits: list[tuple] = []

    def hit(self, det, etype, key, ts, severity, peak, unit, message, interfaces):
        # floats as their bits: equal means the same double, -0.0 and all
        self.hits.append((etype, key, ts, severity, struct.pack("<d", peak), unit, message, tuple(interfaces)))


SPEEDS = (400_000_000_000, 100_000_000_000, 25_000_000_000, 1_600_000_000_000, 399_999_999_977,
          800_000_000_000, 1e11)  # (a float speed: Python's arithmetic, uncached)
OWNED = (frozenset({c.RX_OCTETS, c.TX_OCTETS}),) * 4 + (frozenset({c.RX_OCTETS}), frozenset({c.TX_OCTETS}),
                                                         frozenset({c.SYMBOL}))


def _passes(rng: random.Random, ports: list[str], speeds: dict, n: int):
    """Per pass, its samples (port, ts, dt, acc, owned) and the ports forgotten after it:
    utilization that wanders, dips (short and long) and now and then garbage deltas."""
    util = {p: rng.uniform(0.1, 0.9) for p in ports}
    dip_until = dict.fromkeys(ports, 0)
    share = dict.fromkeys(ports, 1.0)
    ts = 1_700_000_000 * NS
    step = rng.choice((100_000_000, 50_000_000, 1_000_000_000))
    for k in range(n):
        dt = step if rng.random() < 0.7 else rng.choice((
            step + rng.randrange(-step // 10, step // 10), rng.randrange(1, 3 * step),
            rng.randrange(1 << 40, 1 << 45), 1))
        ts += dt
        entries = []
        order = list(ports)
        rng.shuffle(order)
        for p in order[:rng.randrange(len(order) // 2, len(order) + 1)]:
            if k >= dip_until[p] and rng.random() < 0.03:
                dip_until[p] = k + rng.choice((1, 2, 3, 5, 8, 30))
                share[p] = rng.uniform(0.0, 0.8)
            if rng.random() < 0.02:
                util[p] = rng.uniform(0.05, 0.95)  # a change of load
            s = share[p] if k < dip_until[p] else 1.0
            speed = speeds.get(p) or 100_000_000_000
            acc = {}
            for sem in (c.RX_OCTETS, c.TX_OCTETS):
                v = int(util[p] * s * speed * dt / 8 / NS * rng.uniform(0.97, 1.03))
                r = rng.random()
                if r < 0.01:
                    v = rng.choice((0, -rng.randrange(1 << 30), rng.randrange(1 << 62), (1 << 63) - 1))
                elif r < 0.02:
                    continue  # the key absent: no delta in this sample
                acc[(sem, "")] = v
            if rng.random() < 0.05:
                acc[(c.SYMBOL, "")] = 3
            entries.append((p, ts, dt, acc, rng.choice(OWNED)))
        gone = [p for p in ports if rng.random() < 0.002]
        yield entries, gone


def _state_of_old(old: OldThroughputDip, port: str) -> tuple:
    st = old.ports.get(port)
    if st is None:
        return ()
    return tuple((struct.pack("<3d", d.level, d.ref, d.low), (d.seen, d.start, int(d.long), d.quiet_until))
                 for d in st)


def _state_of_new(det: ThroughputDip, port: str) -> tuple:
    row = det.rows.get(port)
    if row is None:
        return ()
    reals = det.reals[row * ROW_REALS:(row + 1) * ROW_REALS]
    ints = det.ints[row * ROW_INTS:(row + 1) * ROW_INTS]
    return tuple((struct.pack("<3d", *reals[3 * d:3 * d + 3]), tuple(ints[4 * d:4 * d + 4])) for d in range(2))


@pytest.mark.parametrize("seed", range(16))
def test_both_kernels_hit_and_keep_state_as_the_old_detector_did(seed):
    rng = random.Random(seed)
    ports = [f"swp{i}" for i in range(1, rng.randrange(2, 24))]
    speeds = {p: rng.choice(SPEEDS) for p in ports}
    for p in rng.sample(ports, len(ports) // 6):
        speeds[p] = rng.choice((0, None))  # unknown speeds: skipped
    speeds = {p: s for p, s in speeds.items() if s is not None}
    cfg = ThroughputDipConfig(baseline=Duration(rng.choice((0.5, 1.0, 10.0, 7.3))),
                              max_duration=Duration(rng.choice((0.3, 1.0, 2.0))),
                              dip_ratio=rng.choice((0.75, 0.5, 1)), min_utilization=rng.choice((0.2, 0.05)))
    old = OldThroughputDip(cfg, Ctx(speeds))
    news = {}
    for name, kernel in KERNELS.items():
        det = news[name] = ThroughputDip(cfg, Ctx(speeds))
        det.kernel = kernel
    for entries, gone in _passes(rng, ports, speeds, 700):
        for e in entries:
            old.sample(*e)
        for det in news.values():
            det.batch.extend(entries)
            for k in det.run_batch():
                det.emit(k)
        for p in gone:
            old.forget(p)
            for det in news.values():
                det.forget(p)
    assert old.ctx.hits, "the passes raised no dip: the test proves nothing"
    for name, det in news.items():
        assert det.ctx.hits == old.ctx.hits, name
        for p in ports:
            if p in old.ports or p in det.rows:
                want = _state_of_old(old, p) or ((struct.pack("<3d", -1.0, 0.0, 0.0), (0, 0, 0, 0)),) * 2
                assert _state_of_new(det, p) == want, (name, p)
    if "C" in news:
        assert news["C"].reals.tobytes() == news["twin"].reals.tobytes()
        assert news["C"].ints.tobytes() == news["twin"].ints.tobytes()


def test_a_division_past_64_bits_is_rounded_as_python_rounds_it():
    """8e9 / (speed * dt) with a product beyond 2^64, where a division of doubles rounds
    differently from Python's exact int division: the kernels take Python's."""
    speed, dt = 400_000_000_000, 29_311_955_818_750
    exact = 8 * NS / (speed * dt)
    assert speed * dt > 1 << 64 and exact != 8e9 / (float(speed) * float(dt))  # the trap is there
    entries = [("swp1", 10 * NS, dt, {(c.RX_OCTETS, ""): 987_654_321_987_654_321}, frozenset({c.RX_OCTETS}))]
    for kernel in KERNELS.values():
        rows: dict = {}
        reals, ints = array("d", [-1.0, 0.0, 0.0] * 2), array("q", bytes(64))
        assert kernel(entries, {"swp1": speed}, rows, reals, ints, 1e10, 0.75, 0.2, 2 * NS, 5 * NS, NS,
                      ((c.RX_OCTETS, ""), (c.TX_OCTETS, "")), (c.RX_OCTETS, c.TX_OCTETS)) == []
        assert rows == {"swp1": 0}
        assert struct.pack("<d", reals[0]) == struct.pack("<d", 987_654_321_987_654_321 * exact)


@pytest.mark.parametrize("name", ["twin", "C"])
def test_bad_input_is_refused_not_written_past(name):
    if name not in KERNELS:
        pytest.skip("the C extension is not loaded")
    kernel = KERNELS[name]
    keys, sems = ((c.RX_OCTETS, ""), (c.TX_OCTETS, "")), (c.RX_OCTETS, c.TX_OCTETS)
    e = ("swp1", 10 * NS, NS, {}, frozenset({c.RX_OCTETS}))
    args = (1e10, 0.75, 0.2, 2 * NS, 5 * NS, NS, keys, sems)
    with pytest.raises(ValueError):  # no room for a new row
        kernel([e], {"swp1": 1}, {}, array("d"), array("q"), *args)
    with pytest.raises(IndexError):  # a row beyond the arrays
        kernel([e], {"swp1": 1}, {"swp1": 5}, array("d", bytes(48)), array("q", bytes(64)), *args)
    with pytest.raises(TypeError):
        kernel([("swp1", 1)], {"swp1": 1}, {}, array("d", bytes(48)), array("q", bytes(64)), *args)
    with pytest.raises(TypeError):
        kernel([("swp1", 10 * NS, NS, [], frozenset())], {"swp1": 1}, {}, array("d", bytes(48)),
               array("q", bytes(64)), *args)
    with pytest.raises(ValueError):
        kernel([e], {"swp1": 1}, {}, array("d", bytes(48)), array("q", bytes(64)), *args[:6], keys[:1], sems)


# ---------------------------------------------------------------- a simulated switch's run
def _run_both(config: str, seconds: float, step: float, jitter: float = 0.0, seed: int = 1, before=None):
    """The simulated switch's reads through two runners, the second with the old detectors
    (``before(runner)`` swaps them in; by default the old throughput_dip): both runners and
    their passes' outputs."""
    from agent.config import Config
    from agent.counters import Batch
    from agent.engine import SourceRunner
    from agent.sources.asic import AsicSource
    from tests import sim_model

    T0 = 1_700_000_000 * NS
    model = sim_model.Model(f"start={T0} {config}")
    src = AsicSource(Config())
    _gen, ports, counters = model.layout(0)
    src._build(ports, [sim_model.descriptors(descs) for descs in counters])
    sr = SourceRunner(src, step)
    sr.adopt_table()
    runners = []
    for old in (False, True):
        r = InsightsRunner(Insights(), log=_Quiet())
        r.set_port_speeds(src.port_speeds)
        if old and before is not None:
            before(r)
        elif old:
            r._detectors["throughput_dip"] = OldThroughputDip(r.cfg.throughput_dip, r)
        runners.append(r)
    assert isinstance(runners[0].detectors["throughput_dip"], ThroughputDip)
    rng = random.Random(seed)
    outs: list[list] = [[], []]
    t, prev = 0, None
    while t <= seconds * NS:
        src.values[:] = array("Q", model.values(t, prev))
        n = sr.diff()
        for r, out in zip(runners, outs, strict=True):
            if n:
                r.on_batch(Batch("asic", T0 + t, sr.table, sr.out_idx[:n].tolist(), array("Q", sr.acc),
                                 sr.out_delta[:n].tolist(), bytes(sr.out_flags[:n])))
            out.append([(u.container, u.leaf, u.value) for u in r.end_pass(T0 + t)])
        prev = t
        t += round(step * NS * (1 + rng.uniform(-jitter, jitter)))
    return runners, outs


class _Quiet:
    def warning(self, *a, **k):
        pass

    info = warning


@pytest.mark.parametrize(("config", "seconds", "step", "jitter"), [
    ("role=spine seed=1 scenario=symbol-errors@5s-25s:swp11s1", 40, 0.1, 0.0),
    ("ports=8 seed=2 scenario=link-flap@5s-20s:swp4,microburst@3s-9s:swp2", 25, 0.1, 0.15),
    ("ports=8 seed=3 scenario=counter-clear@6s:swp3,symbol-errors@4s-12s:swp5", 20, 0.05, 0.3),
])
def test_a_simulated_run_gives_the_old_detectors_events_bit_for_bit(config, seconds, step, jitter):
    (new, old), (new_out, old_out) = _run_both(config, seconds, step, jitter)
    events = old.status()["open"] + old.status()["recent"]
    if "symbol-errors" in config:
        assert any(e["type"] == "throughput-dip" for e in events)  # the rule was exercised
    assert new.status() == old.status()
    assert new_out == old_out
    det, ref = new.detectors["throughput_dip"], old.detectors["throughput_dip"]
    assert set(det.rows) == set(ref.ports)
    for p in ref.ports:
        assert _state_of_new(det, p) == _state_of_old(ref, p)
