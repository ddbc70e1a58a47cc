"""Change kernel: wraps, resets, gauges; the C kernel and the fallback agree."""

from __future__ import annotations

from array import array

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agent import _backend, _fallback
from agent.counters import COUNTER, F_JUMP, F_NEW, F_RESET, F_WRAP, GAUGE, HIDDEN

pytestmark = pytest.mark.nolibs  # no versioned library decides its outcome: not in the Debian pass

U32, U64 = (1 << 32) - 1, (1 << 64) - 1


class Kernel:
    """Change-kernel state for n counters, driving one implementation of diff()."""

    def __init__(self, impl, widths: list[int], kinds: list[int]):
        n = len(widths)
        self.impl = impl
        self.widths, self.kinds = bytes(widths), bytes(kinds)
        self.prev, self.acc = array("Q", bytes(8 * n)), array("Q", bytes(8 * n))
        self.known = bytearray(n)
        self.idx, self.delta, self.flags = array("I", bytes(4 * n)), array("q", bytes(8 * n)), bytearray(n)

    def step(self, values: list[int], rates: list[int] | None = None,
             elapsed: float = 0.0) -> list[tuple[int, int, int]]:
        cur = array("Q", values)
        extra = () if rates is None else (array("Q", rates), elapsed)
        n = self.impl.diff(cur, self.prev, self.acc, self.known, self.widths, self.kinds,
                           self.idx, self.delta, self.flags, *extra)
        return [(self.idx[k], self.delta[k], self.flags[k]) for k in range(n)]


def impls():
    out = [_fallback]
    if _backend.NAME == "C":
        out.append(_backend.reader)
    return out


@pytest.mark.parametrize("impl", impls(), ids=lambda m: m.__name__)
def test_wrap_reset_gauge_hidden(impl):
    k = Kernel(impl, [32, 64, 64, 64, 32], [COUNTER, COUNTER, GAUGE, HIDDEN, COUNTER])
    first = k.step([U32 - 5, 100, 50, 1, 10])
    assert [(i, d, f & F_NEW) for i, d, f in first] == [(0, 0, F_NEW), (1, 0, F_NEW), (2, 0, F_NEW), (4, 0, F_NEW)]
    changes = k.step([4, 90, 40, 2, 10])  # wrap by 10; 64-bit drop = reset; gauge down; hidden ignored
    assert changes[0] == (0, 10, 1 | F_WRAP)
    assert changes[1] == (1, 90, 1 | F_RESET)
    assert changes[2] == (2, -10, 1)
    assert len(changes) == 3
    assert list(k.acc[:3]) == [U32 - 5 + 10, 100 + 90, 40]
    assert k.step([4, 90, 40, 3, 10]) == []  # unchanged: nothing reported
    # A 32-bit drop of less than half the range is a reset, not a wrap.
    assert k.step([2, 90, 40, 3, 10])[0] == (0, 2, 1 | F_RESET)
    # A jump too large to be traffic is a discontinuity: flagged, delta 0, total unchanged.
    acc_before = k.acc[1]
    assert k.step([2, 90 + 10**14, 40, 3, 10]) == [(1, 0, 1 | F_RESET | F_JUMP)]
    assert k.acc[1] == acc_before


@pytest.mark.parametrize("impl", impls(), ids=lambda m: m.__name__)
@pytest.mark.parametrize("width", [40, 48])
def test_40_and_48_bit_counters_wrap_at_their_width(impl, width):
    top = (1 << width) - 1
    k = Kernel(impl, [width], [COUNTER])
    k.step([top - 5])
    assert k.step([4]) == [(0, 10, 1 | F_WRAP)]  # wrapped by 10 at 2^width, not at 2^64
    assert k.acc[0] == top - 5 + 10
    assert k.step([2])[0] == (0, 2, 1 | F_RESET)  # a small drop is a reset, as for 32 bits


@pytest.mark.parametrize("impl", impls(), ids=lambda m: m.__name__)
def test_jump_limits_follow_port_speed_and_elapsed_time(impl):
    speed = 400 * 10**9  # bits/s: a 400G port's counters cannot move more per second
    k = Kernel(impl, [64, 64], [COUNTER, COUNTER])
    k.step([0, 0], [speed, 0], 0.1)
    octets_5min = speed // 8 * 300  # 1.5e13 octets: above the old fixed 1e13 limit
    # polled 5 minutes later: real traffic on both (with and without a known speed)
    assert k.step([octets_5min, octets_5min], [speed, 0], 300.0) == [(0, octets_5min, 1), (1, octets_5min, 1)]
    # 100 ms later, more than the wire can carry in 2 x 100 ms is a jump, reported as such
    jump = 2 * speed // 10 + 10
    assert k.step([octets_5min + jump, octets_5min + 5], [speed, 0], 0.1) == [(0, 0, 1 | F_RESET | F_JUMP),
                                                                              (1, 5, 1)]
    assert k.acc[0] == octets_5min
    # after a reset, a value above the limit is a discontinuity too
    assert k.step([jump, octets_5min + 5], [speed, 0], 0.1) == [(0, 0, 1 | F_RESET | F_JUMP)]
    assert k.step([7, octets_5min + 5], [speed, 0], 0.1) == [(0, 7, 1 | F_RESET)]


@pytest.mark.parametrize("impl", impls(), ids=lambda m: m.__name__)
def test_bad_elapsed_is_refused(impl):
    k = Kernel(impl, [64], [COUNTER])
    for bad in (-1.0, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="elapsed"):
            k.step([1], [0], bad)


_widths = st.sampled_from([32, 40, 48, 64])
_kinds = st.sampled_from([COUNTER, COUNTER, GAUGE, HIDDEN])


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_fallback_and_c_agree_and_totals_never_go_down(data):
    n = data.draw(st.integers(1, 12))
    widths = data.draw(st.lists(_widths, min_size=n, max_size=n))
    kinds = data.draw(st.lists(_kinds, min_size=n, max_size=n))
    steps = data.draw(st.integers(1, 8))
    kernels = [Kernel(impl, widths, kinds) for impl in impls()]
    rates = data.draw(st.one_of(st.none(), st.lists(st.one_of(st.just(0), st.integers(0, U64)),
                                                    min_size=n, max_size=n)))
    for _ in range(steps):
        # A narrow counter may still show a wider value (a driver table can be wrong).
        values = [data.draw(st.one_of(st.integers(0, (1 << w) - 1), st.integers(0, U64)) if w < 64
                            else st.integers(0, U64)) for w in widths]
        elapsed = data.draw(st.floats(0.0, 1e6, allow_nan=False))
        before = list(kernels[0].acc)
        results = [k.step(values, rates, elapsed) for k in kernels]
        assert all(r == results[0] for r in results), "C and Python disagree"
        assert all(list(k.acc) == list(kernels[0].acc) for k in kernels)
        changed = {i: (d, f) for i, d, f in results[0]}
        for i in range(n):
            if kinds[i] != COUNTER or i not in changed:
                continue
            d, f = changed[i]
            if f & F_NEW:
                assert kernels[0].acc[i] == values[i]
            else:  # the total moves by exactly the (never negative) delta
                assert d >= 0 and kernels[0].acc[i] == (before[i] + d) & U64
        for i, d, f in results[0]:
            assert kinds[i] != HIDDEN
            if kinds[i] == COUNTER:
                assert d >= 0, "a counter's delta is never negative"
                if rates is None or not rates[i]:
                    limit = 1 << (widths[i] - 1) if widths[i] < 64 else max(10**13, int(6.4e12 * elapsed))
                    assert d <= max(limit, values[i]) or f & F_NEW
                if f & F_JUMP:
                    assert d == 0 and f & F_RESET


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 0x7FFFFFFF), min_size=1, max_size=40), st.integers(0, U32))
def test_32bit_counter_total_survives_wraps(increments, start):
    """Feed a 32-bit counter true increments below half the range: the exported total is exact."""
    for impl in impls():
        k = Kernel(impl, [32], [COUNTER])
        k.step([start])
        true_total = start
        for inc in increments:
            true_total += inc
            k.step([true_total & U32])
        assert k.acc[0] == true_total


@pytest.mark.parametrize("impl", impls(), ids=lambda m: m.__name__)
def test_a_limit_never_lets_a_delta_overflow_int64(impl):
    k = Kernel(impl, [64], [COUNTER])
    k.step([0], [U64], 1.0)
    assert k.step([1 << 63], [U64], 1.0) == [(0, 0, 1 | F_RESET | F_JUMP)]
    assert k.step([(1 << 63) + (1 << 62)], [U64], 1.0) == [(0, 1 << 62, 1)]
