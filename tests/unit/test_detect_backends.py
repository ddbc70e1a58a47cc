"""The pure-Python backend of the detectors' kernels (agent/_fallback/detect.py: plain per-port
Python) held to the C kernels, the rule (agent/_ext/detect.c; docs/DEVELOPING.md, "Each rule
once"): within a relative 1e-9 on every figure (the state's doubles, the events' peaks, the
gauges) and with the same events (type, key, time, severity, unit, message, ports), the same
integer state and the same gauges published, on seeded random passes (wandering loads, dips,
garbage deltas, huge and irregular sample lengths, error bursts, lanes that come, counts past
int64, ports that go away) and on the simulator's every scenario through a whole runner (the
feeds' loop too). Both backends in one process: the C pass only."""

from __future__ import annotations

import math
import random

import pytest

from agent import _backend, _fallback
from agent.config import Duration
from agent.insights import classify as c
from agent.insights.base import NS
from agent.insights.error_burst import ErrorBurst, ErrorBurstConfig
from agent.insights.throughput_dip import ThroughputDip, ThroughputDipConfig
from tests.unit.test_detect_dip import events_of, fallback_kernels, run_sim
from tests.unit.test_detect_fec import KERNELS as FEC_KERNELS
from tests.unit.test_detect_fec import Ctx as FecCtx
from tests.unit.test_detect_fec import _config, _hits, _passes, _rowed, _state, _updates, use

pytestmark = [pytest.mark.once, pytest.mark.skipif(_backend.NAME != "C", reason="the C extension is not loaded")]

REL = 1e-9  # docs/DEVELOPING.md: the tolerance the fallback is held to


def close(a, b) -> bool:
    """a and b the same but for floats within REL of each other (NaN: both), deep."""
    if isinstance(a, float) or isinstance(b, float):
        if not isinstance(a, int | float) or not isinstance(b, int | float):
            return False
        if math.isnan(a) or math.isnan(b):
            return math.isnan(a) and math.isnan(b)
        return a == b or abs(a - b) <= REL * max(abs(a), abs(b))
    if isinstance(a, list | tuple) and isinstance(b, list | tuple):
        return type(a) is type(b) and len(a) == len(b) and all(map(close, a, b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(close(a[k], b[k]) for k in a)
    return a == b


class Ctx:
    def __init__(self, speeds: dict) -> None:
        self.speeds = speeds
        self.hits: list[tuple] = []

    def hit(self, det, etype, key, ts, severity, peak, unit, message, interfaces):
        self.hits.append((etype, key, ts, severity, peak, unit, message, tuple(interfaces)))


SPEEDS = (400_000_000_000, 100_000_000_000, 25_000_000_000, 1_600_000_000_000, 399_999_999_977,
          800_000_000_000, 1e11)
DIP_OWNED = (frozenset({c.RX_OCTETS, c.TX_OCTETS}),) * 4 + (frozenset({c.RX_OCTETS}), frozenset({c.TX_OCTETS}),
                                                             frozenset({c.SYMBOL}))
_BITS = (c.RX_BITS, "")
_CORR = (c.CORRECTED, "")


def dip_passes(rng: random.Random, ports: list[str], speeds: dict, n: int):
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
            entries.append((p, ts, dt, acc, rng.choice(DIP_OWNED)))
        gone = [p for p in ports if rng.random() < 0.002]
        yield entries, gone



SPEEDS = (400_000_000_000, 100_000_000_000, 25_000_000_000, 399_999_999_977, 1e11, True)
BOTH = frozenset({c.RX_BITS, c.CORRECTED, c.SYMBOL, c.UNCORRECTABLE, c.ERRORS})
OWNED = (BOTH,) * 4 + (frozenset({c.CORRECTED, c.SYMBOL, c.ERRORS}), frozenset({c.RX_BITS}),
                       frozenset({c.SYMBOL, c.UNCORRECTABLE}), frozenset())
ERROR_KEYS = ((c.SYMBOL, ""), (c.UNCORRECTABLE, "fec-uncorrectable-blocks"), (c.UNCORRECTABLE, "effective-errors"),
              (c.ERRORS, "in-errors"), (c.ERRORS, "in-fcs-errors"), (c.ERRORS, "in-crc-errors"),
              (c.ERRORS, "in-other"))


def burst_passes(rng: random.Random, ports: list[str], speeds: dict, n: int):
    """Per pass, its samples (port, ts, dt, acc, owned, changed) and the ports forgotten."""
    ts = 1_700_000_000 * NS
    step = rng.choice((100_000_000, 50_000_000, 1_000_000_000))
    ber = {p: rng.choice((0.0, 1e-7, 6e-7, 2e-6)) for p in ports}
    for _ in range(n):
        dt = step if rng.random() < 0.7 else rng.choice((
            step + rng.randrange(-step // 10, step // 10), rng.randrange(1, 3 * step),
            rng.randrange(1 << 53, 1 << 56), 1))
        ts += dt
        entries = []
        order = list(ports)
        rng.shuffle(order)
        for p in order[:rng.randrange(len(order) // 2, len(order) + 1)]:
            speed = speeds.get(p) or 100_000_000_000
            acc: dict = {}
            bits = int(speed * dt / NS * rng.uniform(0.99, 1.0))
            r = rng.random()
            if r < 0.02:
                bits = rng.choice((0, -rng.randrange(1 << 30), rng.randrange(1 << 53, 1 << 62), (1 << 53) + 1))
            if r < 0.97:
                acc[_BITS] = bits
            if rng.random() < 0.9:
                corr = int(bits * ber[p] * rng.uniform(0.5, 1.5))
                if rng.random() < 0.01:
                    corr = rng.choice((-5, (1 << 53) + 1, rng.randrange(1 << 60)))
                acc[_CORR] = corr
            if rng.random() < 0.08:
                for key in rng.sample(ERROR_KEYS, rng.randrange(1, 4)):
                    acc[key] = rng.choice((1, 3, 12, 500, 0, -2, 1 << 60))
            changed = c.mask({k[0] for k in acc}) if rng.random() < 0.9 else -1
            entries.append((p, ts, dt, acc, rng.choice(OWNED), changed))
        gone = [p for p in ports if rng.random() < 0.002]
        yield entries, gone



def _speeds(rng: random.Random, ports: list[str], choices: tuple) -> dict:
    speeds = {p: rng.choice(choices) for p in ports}
    for p in rng.sample(ports, len(ports) // 6):
        speeds[p] = rng.choice((0, None))  # unknown speeds
    return {p: s for p, s in speeds.items() if s is not None}


def _pair(cls, cfg, speeds: dict, kernel_name: str) -> dict:
    """The detector with each backend's kernel."""
    out = {}
    for name, backend in (("C", _backend.reader), ("fallback", _fallback)):
        det = out[name] = cls(cfg, Ctx(speeds))
        det.kernel = getattr(backend, kernel_name)
    return out


@pytest.mark.parametrize("seed", range(12))
def test_throughput_dip_agrees(seed):
    rng = random.Random(seed)
    ports = [f"swp{i}" for i in range(1, rng.randrange(2, 24))]
    speeds = _speeds(rng, ports, SPEEDS)
    cfg = ThroughputDipConfig(baseline=Duration(rng.choice((0.5, 1.0, 10.0, 7.3))),
                              max_duration=Duration(rng.choice((0.3, 1.0, 2.0))),
                              dip_ratio=rng.choice((0.75, 0.5, 1)), min_utilization=rng.choice((0.2, 0.05)))
    dets = _pair(ThroughputDip, cfg, speeds, "dip_run")
    for entries, gone in dip_passes(rng, ports, speeds, 700):
        for det in dets.values():
            det.batch.extend(entries)
            for k in det.run_batch():
                det.emit(k)
            for p in gone:
                det.forget(p)
    ref, got = dets["C"], dets["fallback"]
    assert ref.ctx.hits, "the passes raised no dip: the test proves nothing"
    assert close(got.ctx.hits, ref.ctx.hits)
    assert got.rows == ref.rows and got.ints == ref.ints
    assert close(list(got.reals), list(ref.reals))


@pytest.mark.parametrize("seed", range(12))
def test_error_burst_agrees(seed):
    rng = random.Random(seed)
    ports = [f"swp{i}" for i in range(1, rng.randrange(2, 24))]
    speeds = _speeds(rng, ports, SPEEDS + (True,))
    cfg = ErrorBurstConfig(window=Duration(rng.choice((1.0, 0.3, 5.0))), threshold=rng.choice((10, 1, 100)))
    dets = _pair(ErrorBurst, cfg, speeds, "burst_run")
    for entries, gone in burst_passes(rng, ports, speeds, 500):
        for det in dets.values():
            det.batch.extend(entries)
            for k in det.run_batch():
                det.emit(k)
            for p in gone:
                det.forget(p)
    ref, got = dets["C"], dets["fallback"]
    assert {"symbol-ber", "pre-fec-ber", "error-burst"} <= {h[0] for h in ref.ctx.hits}, "a rule was missed"
    assert close(got.ctx.hits, ref.ctx.hits)
    assert got.rows == ref.rows and got.ints == ref.ints
    assert close(list(got.reals), list(ref.reals))


@pytest.mark.parametrize("seed", range(12))
@pytest.mark.parametrize("rows", [False, True], ids=["acc", "rows"])
def test_link_degrading_agrees(seed, rows):
    """The C kernel takes most samples (bucket close, fit, publish); the fallback leaves every one
    to the detector's per-port Python: the same events, gauges and windows."""
    from agent.insights.link_degrading import LinkDegrading

    rng = random.Random(seed)
    ports = [f"swp{i}" for i in range(1, rng.randrange(2, 16))]
    cfg = _config(rng)
    dets = {name: LinkDegrading(cfg, FecCtx()) for name in ("C", "fallback")}
    for name, det in dets.items():
        use(det, FEC_KERNELS[name])
    by_kernel = 0
    for entries, ts, gone in _passes(rng, ports, 400):
        if rows:
            entries = _rowed(entries)
        ups = {}
        for name, det in dets.items():
            det.batch.extend(entries)
            found = det.run_batch()
            if name == "C":
                by_kernel += len(entries) - sum(todo is None for todo in det._todo.values())
            for k in found:
                det.emit(k)
            det.end_pass(ts)
            ups[name] = _updates(det.states())
            for p in gone:
                det.forget(p)
        assert close(ups["fallback"], ups["C"])
    ref, got = dets["C"], dets["fallback"]
    assert ref.ctx.hits and by_kernel, "no event, or no sample the kernel's: the test proves little"
    assert close(_hits(got.ctx), _hits(ref.ctx))
    assert got.ports.keys() == ref.ports.keys()
    for p, st in ref.ports.items():
        assert close(_state(got.ports[p]), _state(st)), p
    assert close(got.zeroed, ref.zeroed)
    assert close(_updates(got.retire(ts)), _updates(ref.retire(ts)))


#: every scenario of the simulator (tests/sim_model.py SCENARIOS), a switch each
SIM_RUNS = [
    ("ports=16 seed=2 scenario=breakout@0s:swp10,symbol-errors@3s-9s:swp1,pfc-storm@2s-5s:swp3/4,"
     "microburst@2s:swp4,link-flap@4s-6s:swp5,counter-clear@6s:swp6,fec-degrade@1s-14s:swp7:3,"
     "incast@2s-8s:swp8/3,drops@2s-4s:swp9:tail-drop,symbol-errors@2s-5s:swp10s2", 15, 0.1, 0.2),
    ("role=leaf seed=1 scenario=imbalance@2s-8s,symbol-errors@5s-12s:swp2", 12, 0.1, 0.0),
    ("ports=8 seed=4 scenario=fec-degrade@2s-30s:swp2,counter-clear@9s:swp2,symbol-errors@3s-6s:swp6", 30, 0.05,
     0.3),
]


def test_the_simulator_runs_cover_every_scenario():
    from tests import sim_model

    named = {part.split("@")[0] for config, *_ in SIM_RUNS for part in config.split("scenario=")[1].split(",")}
    assert named == set(sim_model.SCENARIOS)


@pytest.mark.parametrize(("config", "seconds", "step", "jitter"), SIM_RUNS)
def test_a_simulated_run_agrees(config, seconds, step, jitter):
    """The whole runner, the feeds' loop and every detector's kernels C or the pure-Python
    backend's: the same events, the same state updates (gauges within the tolerance)."""
    (ref, got), (ref_out, got_out) = run_sim(config, seconds, step, jitter, ways=(None, fallback_kernels))
    assert got.detectors["link_degrading"].kernel is _fallback.fec_run
    assert ref.detectors["link_degrading"].kernel is _backend.reader.fec_run
    kinds = {e["type"] for e in events_of(ref)}
    assert {"throughput-dip", "symbol-ber", "pre-fec-ber"} <= kinds  # the kernels' rules were exercised
    assert "link-degrading" in kinds or "fec-degrade" not in config
    assert close(got.status(), ref.status())
    assert close(got_out, ref_out)
