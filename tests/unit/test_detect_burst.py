"""The error-burst rule's steady part (bits received and corrected per port, averaged) in
arrays, updated once per pass by a kernel (``burst_run``: agent/_ext/detect.c, the rule, and
agent/_fallback/detect.py, its plain Python backend), and the events error_burst raises from it.

Held to hand-computed cases (the averages after known samples; a sample whose corrected bits
pass the warning level is looked at, with the state after it; the events' ratios worked out by
hand) and to the simulator (its errored port raises the three events, no other port does).
tests/unit/test_detect_backends.py holds the two backends together."""

from __future__ import annotations

from array import array
from types import SimpleNamespace

import pytest

from agent import _backend, _fallback
from agent.config import Duration
from agent.insights import classify as c
from agent.insights.base import CRITICAL, NS, WARNING
from agent.insights.error_burst import BurstRule, ErrorBurst, ErrorBurstConfig
from tests.unit.test_detect_dip import events_of, run_sim

pytestmark = pytest.mark.nolibs  # no versioned library decides its outcome: not in the Debian pass

KERNELS = {"fallback": _fallback.burst_run}
if _backend.NAME == "C":
    KERNELS["C"] = _backend.reader.burst_run

_BITS = (c.RX_BITS, "")
_CORR = (c.CORRECTED, "")
BOTH = frozenset({c.RX_BITS, c.CORRECTED, c.SYMBOL, c.UNCORRECTABLE, c.ERRORS})
RULE = BurstRule(span=NS, warning=5e-7)  # a 1 s window, pre_fec_ber_warning 5e-7
T0 = 1_700_000_000 * NS
STEP = NS // 10


def _arrays(rows: int = 4) -> tuple[array, array]:
    return array("d", bytes(16 * rows)), array("q", bytes(8 * rows))


class Ctx:
    def __init__(self, speeds: dict) -> None:
        self.speeds = speeds
        self.hits: list[tuple] = []

    def hit(self, det, etype, key, ts, severity, peak, unit, message, interfaces):
        self.hits.append((etype, key, ts, severity, peak, unit, message, tuple(interfaces)))


@pytest.mark.parametrize("name", ["fallback", "C"])
def test_the_averages_follow_the_samples_by_hand(name):
    if name not in KERNELS:
        pytest.skip("the C extension is not loaded")
    kernel = KERNELS[name]
    reals, ints = _arrays()
    rows: dict = {}
    # 100 ms of 40 Gb received, 400 corrected (1e-8: calm): the first sample sets the averages
    e1 = ("swp1", T0, STEP, {_BITS: 4_000_000_000, _CORR: 400}, BOTH, 0)
    assert kernel([e1], {}, rows, reals, ints, RULE) == []
    assert rows == {"swp1": 0}
    assert reals[0] == pytest.approx(40.0, rel=1e-12)  # bits per ns
    assert reals[1] == pytest.approx(4e-6, rel=1e-12)
    assert ints[0] == STEP
    # 300 ms more (alpha = dt / span = 0.3), 60 Gb and 0 corrected: 40 + 0.3 x (200 - 40) = 88
    e2 = ("swp1", T0 + 3 * STEP, 3 * STEP, {_BITS: 60_000_000_000}, BOTH, 0)
    assert kernel([e2], {}, rows, reals, ints, RULE) == []
    assert reals[0] == pytest.approx(88.0, rel=1e-12)
    assert reals[1] == pytest.approx(4e-6 * 0.7, rel=1e-12)
    assert ints[0] == 4 * STEP
    # a sample longer than the window replaces the averages (alpha capped at 1)
    e3 = ("swp1", T0 + 23 * STEP, 20 * STEP, {_BITS: 100_000_000_000, _CORR: 20}, BOTH, 0)
    kernel([e3], {}, rows, reals, ints, RULE)
    assert reals[0] == pytest.approx(50.0, rel=1e-12) and reals[1] == pytest.approx(1e-8, rel=1e-12)


@pytest.mark.parametrize("name", ["fallback", "C"])
def test_a_hot_or_rare_sample_is_handed_back_with_the_state_after_it(name):
    if name not in KERNELS:
        pytest.skip("the C extension is not loaded")
    kernel = KERNELS[name]
    reals, ints = _arrays()
    rows: dict = {}
    calm = ("swp1", T0, STEP, {_BITS: 4_000_000_000, _CORR: 1_000}, BOTH, c.mask({c.RX_BITS, c.CORRECTED}))
    assert kernel([calm], {}, rows, reals, ints, RULE) == []  # 2.5e-7 of its bits: below the warning
    hot = ("swp1", T0 + STEP, STEP, {_BITS: 4_000_000_000, _CORR: 3_000}, BOTH, c.mask({c.RX_BITS, c.CORRECTED}))
    # alpha = dt / span = 0.1: corr_rate 1e-5 + 0.1 x (3e-5 - 1e-5) = 1.2e-5 per ns
    [(k, is_hot, bitrate, corr_rate, seen)] = kernel([hot], {}, rows, reals, ints, RULE)
    assert (k, is_hot, seen) == (0, True, 2 * STEP)
    assert bitrate == pytest.approx(40.0, rel=1e-12) and corr_rate == pytest.approx(1.2e-5, rel=1e-12)
    # a symbol error moved (a rare semantic): looked at, though not hot; without a bit count the
    # link's speed x the sample's length counts (400G x 0.1 s = 40 Gb: 400 a ns)
    rare = ("swp2", T0, STEP, {(c.SYMBOL, ""): 2}, frozenset({c.SYMBOL, c.CORRECTED}), c.mask({c.SYMBOL}))
    [(k, is_hot, bitrate, corr_rate, seen)] = kernel([calm, rare], {"swp2": 400_000_000_000}, rows, reals, ints,
                                                      RULE)
    assert (k, is_hot, corr_rate, seen) == (1, False, 0.0, STEP)
    assert bitrate == pytest.approx(400.0, rel=1e-12)
    # no bit count and no speed: nothing averaged, the sample still looked at
    [(k, is_hot, bitrate, corr_rate, seen)] = kernel([rare[:0] + ("swp3",) + rare[1:]], {}, rows, reals, ints, RULE)
    assert (is_hot, bitrate, corr_rate, seen) == (False, 0.0, 0.0, 0)


@pytest.mark.parametrize("name", ["fallback", "C"])
def test_bad_input_is_refused_not_written_past(name):
    if name not in KERNELS:
        pytest.skip("the C extension is not loaded")
    kernel = KERNELS[name]
    e = ("swp1", 10 * NS, NS, {_BITS: 5}, BOTH, 0)
    with pytest.raises(ValueError):  # no room for a new row
        kernel([e], {}, {}, array("d"), array("q"), RULE)
    with pytest.raises(IndexError):  # a row beyond the arrays
        kernel([e], {}, {"swp1": 3}, *_arrays(1), RULE)
    with pytest.raises(TypeError):
        kernel([e[:5]], {}, {}, *_arrays(1), RULE)
    with pytest.raises(ValueError):  # a sample of no length
        kernel([("swp1", 10 * NS, 0, {}, BOTH, 0)], {}, {}, *_arrays(1), RULE)
    settings = {name: getattr(RULE, name) for name in RULE.__dataclass_fields__}
    with pytest.raises(ValueError):
        kernel([e], {}, {}, *_arrays(1), SimpleNamespace(**{**settings, "span": 0}))
    with pytest.raises(AttributeError):
        kernel([e], {}, {}, *_arrays(1), SimpleNamespace(span=NS))


@pytest.mark.parametrize("name", ["fallback", "C"])
def test_the_events_ratios_by_hand(name):
    """A 100G port at 1e-6 pre-FEC (critical), then symbol errors and FCS errors: each event's
    figure is what the window's counts give by hand."""
    if name not in KERNELS:
        pytest.skip("the C extension is not loaded")
    cfg = ErrorBurstConfig(window=Duration(1.0), threshold=10)
    ctx = Ctx({"swp1": 100_000_000_000})
    det = ErrorBurst(cfg, ctx)
    det.kernel = KERNELS[name]
    bits = 10_000_000_000  # 100 ms at 100G
    ts = T0
    for _ in range(10):  # 1 s of samples at 2e-7 corrected: nothing
        ts += STEP
        det.sample("swp1", ts, STEP, {_BITS: bits, _CORR: 2_000}, BOTH)
    assert ctx.hits == []
    ts += STEP  # 3e-6 of this sample's bits: the average moves by a tenth, to 2e-7 + 0.1 x 2.8e-6 = 4.8e-7
    det.sample("swp1", ts, STEP, {_BITS: bits, _CORR: 30_000}, BOTH)
    assert ctx.hits == []  # the average is still below the warning
    ts += STEP  # 4.8e-7 + 0.1 x (2e-5 - 4.8e-7) = 2.432e-6: critical
    det.sample("swp1", ts, STEP, {_BITS: bits, _CORR: 200_000}, BOTH)
    [(etype, key, at, severity, peak, unit, message, ports)] = ctx.hits
    assert (etype, key, at, severity, unit, ports) == ("pre-fec-ber", "swp1", ts, CRITICAL, "ber", ("swp1",))
    assert peak == pytest.approx(2.432e-6, rel=1e-9)
    assert "pre-FEC BER 2.4e-06" in message
    ctx.hits.clear()
    ts += STEP  # 3 symbol errors over the window's bits (1 s x 100 Gb/s): 3e-11, over 1e-12
    det.sample("swp1", ts, STEP, {_BITS: bits, _CORR: 2_000, (c.SYMBOL, ""): 3}, BOTH)
    [(etype, _key, _at, severity, peak, unit, _message, _ports)] = ctx.hits
    assert (etype, severity, unit) == ("symbol-ber", WARNING, "ber")
    assert peak == pytest.approx(3e-11, rel=1e-6)  # (the average bitrate is 100 Gb/s to ~1e-9)
    ctx.hits.clear()
    for errors in (4, 7):  # 11 FCS errors within the window: over 10
        ts += STEP
        det.sample("swp1", ts, STEP, {_BITS: bits, (c.ERRORS, "in-fcs-errors"): errors}, BOTH)
    [(etype, _key, _at, severity, peak, unit, _message, _ports)] = ctx.hits
    assert (etype, severity, peak, unit) == ("error-burst", WARNING, 11, "errors/1s")


@pytest.mark.parametrize(("config", "seconds", "port"), [
    ("ports=8 seed=3 scenario=symbol-errors@4s-12s:swp5", 14, "swp5"),
    ("ports=8 seed=4 scenario=fec-degrade@2s-30s:swp2,counter-clear@9s:swp2,symbol-errors@3s-6s:swp6", 12, "swp6"),
])
def test_the_simulated_errored_port_raises_the_three_events_alone(config, seconds, port):
    (runner,), _ = run_sim(config, seconds, 0.1)
    mine = [e for e in events_of(runner) if e["type"] in ("symbol-ber", "pre-fec-ber", "error-burst")]
    assert {e["type"] for e in mine} == {"symbol-ber", "pre-fec-ber", "error-burst"}
    assert {p for e in mine for p in e["interfaces"]} == {port}
