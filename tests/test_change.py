"""Change kernel: wraps, resets, gauges; the C kernel and the fallback agree."""

from __future__ import annotations

from array import array

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agent import _backend, _pyreader
from agent.counters import COUNTER, F_NEW, F_RESET, F_WRAP, GAUGE, HIDDEN

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

    def step(self, values: list[int]) -> list[tuple[int, int, int]]:
        cur = array("Q", values)
        n = self.impl.diff(cur, self.prev, self.acc, self.known, self.widths, self.kinds,
                           self.idx, self.delta, self.flags)
        return [(self.idx[k], self.delta[k], self.flags[k]) for k in range(n)]


def impls():
    out = [_pyreader]
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
    assert k.step([2, 90 + 10**14, 40, 3, 10]) == [(1, 0, 1 | F_RESET)]
    assert k.acc[1] == acc_before


_widths = st.sampled_from([32, 64])
_kinds = st.sampled_from([COUNTER, COUNTER, GAUGE, HIDDEN])


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_fallback_and_c_agree_and_totals_never_go_down(data):
    n = data.draw(st.integers(1, 12))
    widths = data.draw(st.lists(_widths, min_size=n, max_size=n))
    kinds = data.draw(st.lists(_kinds, min_size=n, max_size=n))
    steps = data.draw(st.integers(1, 8))
    kernels = [Kernel(impl, widths, kinds) for impl in impls()]
    for _ in range(steps):
        # A "32-bit" counter may still show a wider value (a driver table can be wrong).
        values = [data.draw(st.one_of(st.integers(0, U32), st.integers(0, U64)) if w == 32
                            else st.integers(0, U64)) for w in widths]
        before = list(kernels[0].acc)
        results = [k.step(values) for k in kernels]
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
                limit = 0x80000000 if widths[i] == 32 else 10**13
                assert d <= max(limit, values[i]) or f & F_NEW


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
