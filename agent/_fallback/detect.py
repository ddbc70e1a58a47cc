"""The pure-Python backend of agent/_ext/detect.c: the detectors whose per-port state lives in
flat arrays, written as plain per-port Python.

The C kernels are the rule (docs/DEVELOPING.md, "Each rule once"); this module is the same
rule in plain Python, held to them by tests/unit/test_detect_backends.py within a relative
1e-9 on every value and with the same events, never to their bits. ``fec_run`` leaves every
sample to link_degrading's own per-port Python (agent/insights/link_degrading.py
``_sample``): the fallback has no fast path to take.
"""

from __future__ import annotations

import math

_REALS = 3  # per direction: level (-1: not known yet), ref, low
_INTS = 4  # per direction: seen, start (0: no dip), long (0/1), quiet_until


def _row_of(rows: dict, port, cap: int) -> int:
    """The port's row in the state arrays, a new port taking the next one."""
    row = rows.get(port)
    if row is None:
        row = len(rows)
        if row >= cap:
            raise ValueError(f"the state arrays hold {cap} rows, row {row} is needed")
        rows[port] = row
    elif not 0 <= row < cap:
        raise IndexError(f"row {row} out of the state arrays ({cap} rows)")
    return row


def _entries(entries: list, speeds: dict, rows: dict, least: int):
    """(k, entry) of a pass's samples, each checked as the kernels check it."""
    if not isinstance(entries, list) or not isinstance(speeds, dict) or not isinstance(rows, dict):
        raise TypeError("entries must be a list, speeds and rows dicts")
    for k, entry in enumerate(entries):
        if not isinstance(entry, tuple) or len(entry) < least:
            raise TypeError(f"entries[{k}] must be (port, ts, dt, acc, owned, ...)")
        if not isinstance(entry[3], dict):
            raise TypeError(f"entries[{k}]: acc must be a dict")
        if entry[2] <= 0:
            raise ValueError(f"entries[{k}]: dt must be positive")
        yield k, entry


def _pair(conf, name: str) -> tuple:
    value = getattr(conf, name)
    if not isinstance(value, tuple) or len(value) != 2:
        raise TypeError(f"conf.{name} must be a tuple of 2")
    return value


def dip_run(entries: list, speeds: dict, rows: dict, reals, ints, conf) -> list[tuple[int, int, float, float, int]]:
    """See agent/_ext/detect.c dip_run."""
    keys, sems = _pair(conf, "keys"), _pair(conf, "sems")
    cap = min(len(reals) // (2 * _REALS), len(ints) // (2 * _INTS))
    edges: list[tuple[int, int, float, float, int]] = []
    for k, (port, ts, dt, acc, owned, *_) in _entries(entries, speeds, rows, 5):
        speed = speeds.get(port)
        if not speed:
            continue
        row = _row_of(rows, port, cap)
        alpha = 1.0 - math.exp(-dt / conf.tau)
        scale = 8e9 / (speed * dt)  # octets over what the link could carry
        for d in (0, 1):
            if sems[d] not in owned:
                continue
            util = acc.get(keys[d], 0) * scale
            r = row * 2 * _REALS + d * _REALS
            s = row * 2 * _INTS + d * _INTS
            level = reals[r]
            if level < 0:
                reals[r] = util
                continue
            if util < conf.dip_ratio * level:
                if ints[s + 1]:
                    reals[r + 2] = min(reals[r + 2], util)
                    if not ints[s + 2] and ts - ints[s + 1] > conf.max_ns:
                        ints[s + 2] = 1
                elif ints[s] >= conf.warmup_ns and level >= conf.min_utilization and ts > ints[s + 3]:
                    ints[s + 1] = ts - dt
                    reals[r + 1] = level
                    reals[r + 2] = util
                    ints[s + 2] = 0
            elif ints[s + 1]:
                took = ts - dt - ints[s + 1]
                if not ints[s + 2] and took <= conf.max_ns:
                    edges.append((k, d, reals[r + 2], reals[r + 1], took))
                elif ints[s + 2]:
                    ints[s + 3] = ts + conf.quiet_ns
                ints[s + 1] = 0
            reals[r] = level + alpha * (util - level)
            ints[s] += dt
    return edges


def burst_run(entries: list, speeds: dict, rows: dict, reals, ints, conf) -> list[tuple[int, bool, float, float, int]]:
    """See agent/_ext/detect.c burst_run."""
    keys, sems = _pair(conf, "keys"), _pair(conf, "sems")
    span = conf.span
    if span <= 0:
        raise ValueError("span must be positive")
    cap = min(len(reals) // 2, len(ints))
    out = []
    for k, (port, _ts, dt, acc, owned, changed, *_) in _entries(entries, speeds, rows, 6):
        if sems[0] in owned:
            bits = acc.get(keys[0], 0)
        else:  # no bit count: the link's speed x the sample's length
            speed = speeds.get(port)
            bits = speed * dt / 1e9 if speed else None
        corr = acc.get(keys[1], 0) if sems[1] in owned else 0
        row = _row_of(rows, port, cap)
        r = 2 * row
        if bits is not None:
            alpha = min(1.0, dt / span) if ints[row] else 1.0
            reals[r] += alpha * (bits / dt - reals[r])
            reals[r + 1] += alpha * (corr / dt - reals[r + 1])
            ints[row] += dt
        hot = bool(corr and bits and corr > bits * conf.warning)
        if hot or changed & conf.rare_bits:
            out.append((k, hot, reals[r], reals[r + 1], ints[row]))
    return out


_FEC_BINS = 16
_FEC_DIGITS = 4
#: the gauges' resolutions in their order (predicted-flr, observed-cer, fit-r2, max-bin), as
#: (relative, absolute); see agent/_ext/detect.c FEC_RESOLUTION
_FEC_RESOLUTION = ((0.1, 1e-15), (0.1, 1e-15), (0.0, 0.01), (0.0, 0.0))
_ABSENT = object()


def fec_run(entries: list, fast: dict, conf, pending: list) -> dict:
    """See agent/_ext/detect.c fec_run: here every sample with FEC bins is Python's (None),
    link_degrading's per-port rule."""
    if not (isinstance(entries, list) and isinstance(fast, dict) and isinstance(pending, list)):
        raise TypeError("entries must be a list, fast a dict, pending a list")
    todo: dict = {}
    for k, entry in enumerate(entries):
        if not isinstance(entry, tuple) or len(entry) < 6:
            raise TypeError(f"entries[{k}] must be (port, ts, dt, acc, owned, changed)")
        if conf.fec_sem in entry[4]:
            todo[k] = None
    return todo


def _fec_fit(d: list, total) -> tuple:
    """(max_t, pred) of one unit's bins over total: see agent/_ext/detect.c fec_fit."""
    max_t = max((i for i in range(_FEC_BINS) if d[i] > 0), default=0)
    pts = [(i, math.log10(d[i] / total)) for i in range(1, _FEC_BINS) if d[i] > 0]
    n = len(pts)
    if n < 3:
        return max_t, None
    mx = sum(x for x, _ in pts) / n
    my = sum(y for _, y in pts) / n
    slope = sum((x - mx) * (y - my) for x, y in pts) / sum((x - mx) ** 2 for x, _ in pts)
    icpt = my - slope * mx
    ss_tot = sum((y - my) ** 2 for _, y in pts)
    ss_res = sum((y - icpt - slope * x) ** 2 for x, y in pts)
    r2 = 1.0 - ss_res / ss_tot if ss_tot > 0 else 0.0  # a flat line explains nothing
    cer = sum(10.0 ** min(0.0, icpt + slope * i) for i in range(16, 21))  # bins 16..20 extrapolated
    return max_t, (min(cer, 1.0), r2, slope, n)


def fec_fits(counts: list, units: int, lanes: bool, codewords) -> list:
    """See agent/_ext/detect.c fec_fits."""
    if not isinstance(counts, list) or units < 0 or len(counts) != units * _FEC_BINS:
        raise ValueError("counts must hold 16 bins per unit")
    out: list = []
    for u in range(units):
        d = [float(x) for x in counts[u * _FEC_BINS:(u + 1) * _FEC_BINS]]
        total = sum(d) if lanes else float(codewords)
        out.append(_fec_fit(d, total) if total > 0 else None)
    return out


def _fec_round(x: float) -> float:
    """x to 4 significant digits, half away from zero (agent/_ext/detect.c fec_round)."""
    if x == 0.0 or not math.isfinite(x):
        return x
    try:
        m = 10.0 ** (_FEC_DIGITS - 1 - math.floor(math.log10(abs(x))))
    except OverflowError:
        return x
    y = abs(x) * m
    whole = math.floor(y)
    return math.copysign(whole + 1.0 if y - whole >= 0.5 else whole, x) / m


def _fec_moved(was, v, i: int) -> bool:
    """Whether gauge ``i`` moved from ``was`` to ``v``: see agent/_ext/detect.c fec_moved."""
    if was is _ABSENT:
        return True
    if type(was) is float and type(v) is float and i < len(_FEC_RESOLUTION):
        if was == v:
            return False
        if math.isnan(was) or math.isnan(v):
            return not (math.isnan(was) and math.isnan(v))
        rel, ab = _FEC_RESOLUTION[i]
        return abs(v - was) > max(rel * max(abs(was), abs(v)), ab)
    return bool(was != v)


def fec_changes(sents: list, values: list, leaves: tuple) -> list:
    """See agent/_ext/detect.c fec_changes."""
    if not isinstance(sents, list) or not isinstance(values, list) or not isinstance(leaves, tuple):
        raise TypeError("sents and values must be lists, leaves a tuple")
    if len(sents) != len(values):
        raise ValueError("sents and values must be as long")
    for sent, row in zip(sents, values, strict=True):
        if not isinstance(sent, dict) or not isinstance(row, tuple) or len(row) != len(leaves):
            raise ValueError("sents must be dicts, values tuples as long as leaves")
    out = []
    for u, (sent, row) in enumerate(zip(sents, values, strict=True)):
        for i, (leaf, value) in enumerate(zip(leaves, row, strict=True)):
            if type(value) is float:
                value = _fec_round(value)
            if _fec_moved(sent.get(leaf, _ABSENT), value, i):
                sent[leaf] = value
                out.append((u, leaf, value))
    return out


def fec_lanes(acc: dict, fec_sem) -> tuple[int, ...] | None:
    """See agent/_ext/detect.c fec_lanes."""
    if not isinstance(acc, dict):
        raise TypeError("acc must be a dict")
    lanes = set()
    for key in acc:
        if type(key) is not tuple or len(key) != 2:
            return None
        sem, sub = key
        if not sem == fec_sem:
            continue
        if type(sub) is not str or not sub.isascii():
            return None
        head, slash, _ = sub.partition("/")
        if not slash:
            continue
        if not head or len(head) > 9 or not all("0" <= ch <= "9" for ch in head):
            return None
        lanes.add(int(head))
        if len(lanes) > 64:
            return None
    return tuple(sorted(lanes))
