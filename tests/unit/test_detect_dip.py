"""The throughput-dip rule's per-port state in arrays, updated once per pass by a kernel
(``dip_run``: agent/_ext/detect.c, the rule, and agent/_fallback/detect.py, its plain Python
backend).

Held to hand-computed cases (a dip reported once the port is back, with its depth, its level
and its length; a drop longer than ``max_duration`` is a change of load and quiets the port;
nothing during the warm-up or without a link speed) and to the simulator (a scenario's dips
are on its port alone). tests/unit/test_detect_backends.py holds the two backends together."""

from __future__ import annotations

import math
import random
from array import array
from types import SimpleNamespace

import pytest

from agent import _backend, _fallback
from agent.config import Insights
from agent.insights import InsightsPipeline
from agent.insights import classify as c
from agent.insights.base import NS
from agent.insights.throughput_dip import ROW_INTS, ROW_REALS, DipRule

pytestmark = pytest.mark.nolibs  # no versioned library decides its outcome: not in the Debian pass

KERNELS = {"fallback": _fallback.dip_run}
if _backend.NAME == "C":
    KERNELS["C"] = _backend.reader.dip_run

GBIT = 1_000_000_000
STEP = NS // 10  # 100 ms polls
T0 = 1_700_000_000 * NS
#: baseline 10 s, dip_ratio 0.75, min_utilization 0.2, max_duration 2 s (the defaults)
RULE = DipRule(tau=10.0 * NS, dip_ratio=0.75, min_utilization=0.2, max_ns=2 * NS, quiet_ns=5 * NS)


def octets(share: float, speed: int = 100 * GBIT, dt: int = STEP) -> int:
    """The octets of a sample that fills ``share`` of the link."""
    return round(share * speed * dt / NS / 8)


class Port:
    """One port's samples through a kernel, rx only, its state arrays sized for it."""

    def __init__(self, kernel, speed: int | None = 100 * GBIT) -> None:
        self.kernel, self.speeds = kernel, ({"swp1": speed} if speed else {})
        self.rows: dict = {}
        self.reals = array("d", [-1.0, 0.0, 0.0] * 2 * 4)
        self.ints = array("q", bytes(8 * ROW_INTS * 4))
        self.ts = T0
        self.edges: list = []

    def run(self, share: float, samples: int = 1) -> None:
        for _ in range(samples):
            self.ts += STEP
            acc = {(c.RX_OCTETS, ""): octets(share)}
            entry = ("swp1", self.ts, STEP, acc, frozenset({c.RX_OCTETS}), -1)
            self.edges += [(self.ts, *edge[1:]) for edge in self.kernel([entry], self.speeds, self.rows, self.reals,
                                                                         self.ints, RULE)]

    @property
    def level(self) -> float:
        return self.reals[0]


@pytest.mark.parametrize("name", ["fallback", "C"])
def test_a_short_dip_is_reported_once_the_port_is_back(name):
    if name not in KERNELS:
        pytest.skip("the C extension is not loaded")
    port = Port(KERNELS[name])
    port.run(0.5, 30)  # 3 s at half the link: the level is 0.5 (every sample the same)
    assert port.level == pytest.approx(0.5, rel=1e-12)
    port.run(0.2, 3)  # 300 ms at a fifth: below 0.75 x 0.5
    assert port.edges == []  # not while it lasts
    back = port.ts + STEP
    port.run(0.5)
    [(ts, direction, low, ref, took)] = port.edges
    assert (ts, direction, took) == (back, 0, 300_000_000)  # rx, the three samples' 300 ms
    assert low == pytest.approx(0.2, rel=1e-9)
    assert ref == pytest.approx(0.5, rel=1e-9)  # the level when it began
    # the level followed the dip: three steps of the average, alpha = 1 - e^(-0.1 / 10)
    alpha = 1 - math.exp(-0.01)
    level = 0.5
    for util in (0.2, 0.2, 0.2, 0.5):
        level += alpha * (util - level)
    assert port.level == pytest.approx(level, rel=1e-9)


@pytest.mark.parametrize("name", ["fallback", "C"])
def test_a_long_drop_is_a_change_of_load_and_quiets_the_port(name):
    if name not in KERNELS:
        pytest.skip("the C extension is not loaded")
    port = Port(KERNELS[name])
    port.run(0.6, 30)
    port.run(0.1, 25)  # 2.5 s: longer than max_duration
    port.run(0.6, 1)
    assert port.edges == []
    quiet_until = port.ints[3]
    assert quiet_until == port.ts + 5 * NS  # half the baseline after it
    port.run(0.1, 3)  # a dip while the level settles: none starts
    port.run(0.6, 1)
    assert port.edges == [] and port.ints[1] == 0
    port.ts = quiet_until  # once quiet, a dip counts again
    port.run(0.6, 10)
    port.run(0.1, 2)
    port.run(0.6, 1)
    assert [(e[1], e[4]) for e in port.edges] == [(0, 200_000_000)]


@pytest.mark.parametrize("name", ["fallback", "C"])
def test_no_dip_while_warming_up_below_min_utilization_or_without_a_speed(name):
    if name not in KERNELS:
        pytest.skip("the C extension is not loaded")
    kernel = KERNELS[name]
    port = Port(kernel)
    port.run(0.5, 5)  # 0.5 s: the level is not trusted before 1 s of samples
    port.run(0.1, 2)
    port.run(0.5, 1)
    assert port.edges == []
    idle = Port(kernel)
    idle.run(0.1, 30)  # a level of 0.1: below min_utilization
    idle.run(0.01, 2)
    idle.run(0.1, 1)
    assert idle.edges == []
    unknown = Port(kernel, speed=None)
    unknown.run(0.5, 30)
    assert unknown.rows == {} and unknown.level == -1.0  # skipped: no row taken


@pytest.mark.parametrize("name", ["fallback", "C"])
def test_bad_input_is_refused_not_written_past(name):
    if name not in KERNELS:
        pytest.skip("the C extension is not loaded")
    kernel = KERNELS[name]
    e = ("swp1", 10 * NS, NS, {}, frozenset({c.RX_OCTETS}))
    reals, ints = array("d", bytes(8 * ROW_REALS)), array("q", bytes(8 * ROW_INTS))
    with pytest.raises(ValueError):  # no room for a new row
        kernel([e], {"swp1": 1}, {}, array("d"), array("q"), RULE)
    with pytest.raises(IndexError):  # a row beyond the arrays
        kernel([e], {"swp1": 1}, {"swp1": 5}, reals, ints, RULE)
    with pytest.raises(TypeError):
        kernel([("swp1", 1)], {"swp1": 1}, {}, reals, ints, RULE)
    with pytest.raises(TypeError):
        kernel([("swp1", 10 * NS, NS, [], frozenset())], {"swp1": 1}, {}, reals, ints, RULE)
    with pytest.raises(ValueError):  # a sample of no length
        kernel([("swp1", 10 * NS, 0, {}, frozenset())], {"swp1": 1}, {}, reals, ints, RULE)
    with pytest.raises(TypeError):  # settings without rx's and tx's keys
        kernel([e], {"swp1": 1}, {}, reals, ints,
               SimpleNamespace(**{**vars(_settings()), "keys": ((c.RX_OCTETS, ""),)}))
    with pytest.raises(AttributeError):  # settings are read by name: one missing is an error, not a default
        kernel([e], {"swp1": 1}, {}, reals, ints, SimpleNamespace(tau=1.0))


def _settings() -> SimpleNamespace:
    return SimpleNamespace(**{name: getattr(RULE, name) for name in RULE.__dataclass_fields__})


# ---------------------------------------------------------------- a simulated switch's run
class _Quiet:
    def warning(self, *a, **k):
        pass

    info = warning


def fallback_kernels(runner: InsightsPipeline) -> None:
    """The runner's feeds and detector kernels made the pure-Python backend's (as bench/ does)."""
    runner._feeds.use(_fallback)
    for det in runner.detectors.values():
        for attr in ("kernel", "fits", "changes", "lanes_of"):
            if hasattr(det, attr):
                setattr(det, attr, getattr(_fallback, getattr(det, attr).__name__))


def run_sim(config: str, seconds: float, step: float, jitter: float = 0.0, seed: int = 1, ways=(None,),
            ins: Insights | None = None):
    """The simulated switch's reads (tests/sim_model.py) through one runner per way (``way(runner)``
    sets it up; None: as built): the runners and, per runner, each pass's state updates."""
    from agent.config import Config
    from agent.counters import Batch
    from agent.engine import PolledSource
    from agent.sources.asic import AsicSource
    from tests import sim_model

    model = sim_model.Model(f"start={T0} {config}")
    src = AsicSource(Config())
    _gen, ports, counters = model.layout(0)
    src._build(ports, [sim_model.descriptors(descs) for descs in counters])
    sr = PolledSource(src, step)
    sr.adopt_table()
    runners = []
    for way in ways:
        r = InsightsPipeline(ins or Insights(), log=_Quiet())
        r.set_port_speeds(src.port_speeds)
        if way is not None:
            way(r)
        runners.append(r)
    rng = random.Random(seed)
    outs: list[list] = [[] for _ in runners]
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


def events_of(runner: InsightsPipeline) -> list[dict]:
    status = runner.status()
    return status["open"] + status["recent"]


@pytest.mark.parametrize(("config", "seconds", "port"), [
    ("ports=8 seed=3 scenario=symbol-errors@4s-12s:swp5", 14, "swp5"),
    ("role=spine seed=1 scenario=symbol-errors@5s-25s:swp11s1", 30, "swp11s1"),
    ("ports=16 seed=5", 15, None),
])
def test_a_scenarios_dips_are_on_its_port_alone(config, seconds, port):
    """The simulator's errored port loses frames (its throughput dips); its healthy ports, at a
    steady load with jitter, never dip below three quarters of their level."""
    (runner,), _ = run_sim(config, seconds, 0.1)
    dips = [e for e in events_of(runner) if e["type"] == "throughput-dip"]
    assert {p for e in dips for p in e["interfaces"]} == ({port} if port else set())
    det = runner.detectors["throughput_dip"]
    assert len(det.rows) == len(runner.port_names())  # every port with a speed has its row
