"""Pure-Python change kernel: the same rules and results as agent/_ext/change.c."""

from __future__ import annotations

from agent.counters import F_CHANGED, F_JUMP, F_NEW, F_RESET, F_WRAP

_JUMP_64 = 10_000_000_000_000
_DEFAULT_RATE = 3.2e12
_MASK64 = (1 << 64) - 1


def _limit_for(rate: float, elapsed: float) -> int:
    lim = rate * elapsed * 2.0  # never above INT64_MAX: a delta is reported as int64
    if lim >= 9.2e18:
        return (1 << 63) - 1
    return 1 if lim < 1.0 else int(lim)


def diff(cur, prev, acc, known, widths, kinds, out_idx, out_delta, out_flags, rates=None,
         elapsed: float = 0.0) -> int:
    """See agent/_ext/change.c; same rules, same results."""
    n = len(cur)
    bufs = [("prev", prev), ("acc", acc), ("known", known), ("widths", widths), ("kinds", kinds),
            ("out_idx", out_idx), ("out_delta", out_delta), ("out_flags", out_flags)]
    if rates is not None:
        bufs.append(("rates", rates))
    elapsed = float(elapsed)
    if not 0.0 <= elapsed < 1e9:
        raise ValueError("elapsed must be a number of seconds >= 0")
    default_limit = max(_limit_for(_DEFAULT_RATE, elapsed), _JUMP_64)
    for name, buf in bufs:
        if len(buf) < n:
            raise ValueError(f"{name} is shorter than cur")
    nchanged = 0
    for i in range(n):
        if kinds[i] == 2:  # HIDDEN
            continue
        c = cur[i]
        p = prev[i]
        w = widths[i]
        narrow = 8 <= w < 64 and c >> w == 0 and p >> w == 0  # wider: really 64-bit
        half = 1 << (w - 1) if narrow else 0
        rate = rates[i] if rates is not None else 0
        limit = _limit_for(float(rate), elapsed) if rate else default_limit
        if narrow and limit > half - 1:
            limit = half - 1
        flags = F_CHANGED
        if not known[i]:
            known[i] = 1
            prev[i] = acc[i] = c
            delta = 0
            flags |= F_NEW
        elif c == p:
            continue
        elif kinds[i]:
            delta = c - p
            acc[i] = c
        elif c > p:
            d = c - p
            if d > limit:
                delta = 0
                flags |= F_RESET | F_JUMP
            else:
                delta = d
                acc[i] = (acc[i] + d) & _MASK64
        elif narrow and p - c > half:
            d = c + (half << 1) - p
            if d > limit:
                delta = 0
                flags |= F_RESET | F_JUMP
            else:
                delta = d
                acc[i] = (acc[i] + d) & _MASK64
                flags |= F_WRAP
        else:
            flags |= F_RESET
            if c > limit:
                delta = 0
                flags |= F_JUMP
            else:
                delta = c
            acc[i] = (acc[i] + delta) & _MASK64
        prev[i] = c
        out_idx[nchanged] = i
        out_delta[nchanged] = _to_i64(delta)
        out_flags[nchanged] = flags
        nchanged += 1
    return nchanged


def _to_i64(v: int) -> int:
    v &= _MASK64
    return v - (1 << 64) if v >= 1 << 63 else v
