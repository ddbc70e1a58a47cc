"""Pure-Python twin of agent/_ext/detect.c: per-port detector state in flat arrays,
updated once per engine pass (the throughput-dip rule). The arithmetic is written as
agent/insights/throughput_dip.py wrote it per port, operation for operation, so both
backends give the same bits."""

from __future__ import annotations

import math
from array import array

_REALS = 3  # per direction: level (-1: not known yet), ref, low
_INTS = 4  # per direction: seen, start (0: no dip), long (0/1), quiet_until
_EIGHT_NS = 8 * 1_000_000_000


def _row_of(rows: dict, port, cap: int) -> int:
    """The port's row in the state arrays, a new port taking the next one (C: row_of)."""
    row = rows.get(port)
    if row is None:
        row = len(rows)
        if row >= cap:
            raise ValueError(f"the state arrays hold {cap} rows, row {row} is needed")
        rows[port] = row
    elif not 0 <= row < cap:
        raise IndexError(f"row {row} out of the state arrays ({cap} rows)")
    return row


def dip_run(entries: list, speeds: dict, rows: dict, reals, ints, tau: float, dip_ratio: float,
            min_utilization: float, max_ns: int, quiet_ns: int, warmup_ns: int, keys: tuple,
            sems: tuple) -> list[tuple[int, int, float, float, int]]:
    """See agent/_ext/detect.c; same rules, same results."""
    if not isinstance(entries, list) or not isinstance(speeds, dict) or not isinstance(rows, dict):
        raise TypeError("entries must be a list, speeds and rows dicts")
    if len(keys) != 2 or len(sems) != 2:
        raise ValueError("keys and sems must hold rx's and tx's")
    cap = min(len(reals) // (2 * _REALS), len(ints) // (2 * _INTS))
    dip_ratio, min_utilization = float(dip_ratio), float(min_utilization)
    edges: list[tuple[int, int, float, float, int]] = []
    scales: dict[tuple[int, int], float] = {}  # (speed, dt) -> scale: polls are regular
    alpha_of: tuple = (None, 0.0)  # (dt, alpha)
    dirs = ((0, keys[0], sems[0]), (1, keys[1], sems[1]))
    for k, entry in enumerate(entries):
        if not isinstance(entry, tuple) or len(entry) < 5:
            raise TypeError(f"entries[{k}] must be (port, ts, dt, acc, owned, ...)")
        port, ts, dt, acc, owned = entry[0], entry[1], entry[2], entry[3], entry[4]
        if not isinstance(acc, dict):
            raise TypeError(f"entries[{k}]: acc must be a dict")
        speed = speeds.get(port)
        if not speed:
            continue
        row = _row_of(rows, port, cap)
        if alpha_of[0] != dt:
            alpha_of = (dt, 1.0 - math.exp(-dt / tau))
        alpha = alpha_of[1]
        if type(speed) is not int:  # another type: never cached (as in C)
            scale = _EIGHT_NS / (speed * dt)
        else:
            scale = scales.get((speed, dt))
            if scale is None:
                scale = scales[(speed, dt)] = _EIGHT_NS / (speed * dt)
        for d, key, sem in dirs:
            if sem not in owned:
                continue
            util = acc.get(key, 0) * scale
            r = row * 2 * _REALS + d * _REALS
            s = row * 2 * _INTS + d * _INTS
            level = reals[r]
            if level < 0:
                reals[r] = util
                continue
            if util < dip_ratio * level:
                if ints[s + 1]:
                    if util < reals[r + 2]:
                        reals[r + 2] = util
                    if not ints[s + 2] and ts - ints[s + 1] > max_ns:
                        ints[s + 2] = 1
                elif ints[s] >= warmup_ns and level >= min_utilization and ts > ints[s + 3]:
                    ints[s + 1] = ts - dt
                    reals[r + 1] = level
                    reals[r + 2] = util
                    ints[s + 2] = 0
            elif ints[s + 1]:
                took = ts - dt - ints[s + 1]
                if not ints[s + 2] and took <= max_ns:
                    edges.append((k, d, reals[r + 2], reals[r + 1], took))
                elif ints[s + 2]:
                    ints[s + 3] = ts + quiet_ns
                ints[s + 1] = 0
            reals[r] = level + alpha * (util - level)
            ints[s] += dt
    return edges


_EXACT = 1 << 53  # ints up to this are doubles exactly (the C kernel's fast path)


def _burst_entry(k: int, entry: tuple, speeds: dict, rows: dict, reals, ints, cap: int, span: int,
                 warning: float, keys: tuple, sems: tuple, rare_bits: int) -> tuple | None:
    """One sample of the error-burst rule's steady part, written as
    agent/insights/link_errors.py wrote it per port: the bits received and corrected per
    ns, averaged over about one window. Returns what Python must look at (a rare semantic
    moved, or the sample's own corrected bits are over the warning level) with the state
    after the sample, else None."""
    port, dt, acc, owned, changed = entry[0], entry[2], entry[3], entry[4], entry[5]
    row = _row_of(rows, port, cap)
    if sems[0] in owned:
        bits = acc.get(keys[0], 0)
    else:
        speed = speeds.get(port)
        bits = speed * dt / 1_000_000_000 if speed else None
    corr = acc.get(keys[1], 0) if sems[1] in owned else 0
    r = 2 * row
    if bits is not None:
        alpha = min(1.0, dt / span) if ints[row] else 1.0
        reals[r] += alpha * (bits / dt - reals[r])
        reals[r + 1] += alpha * (corr / dt - reals[r + 1])
        ints[row] += dt
    hot = bool(corr and bits and corr > bits * warning)
    if hot or changed & rare_bits:
        return (k, hot, reals[r], reals[r + 1], ints[row])
    return None


def burst_run(entries: list, speeds: dict, rows: dict, reals, ints, span: int, warning: float, keys: tuple,
              sems: tuple, rare_bits: int) -> list[tuple[int, bool, float, float, int]]:
    """See agent/_ext/detect.c; same rules, same results."""
    if not isinstance(entries, list) or not isinstance(speeds, dict) or not isinstance(rows, dict):
        raise TypeError("entries must be a list, speeds and rows dicts")
    if len(keys) != 2 or len(sems) != 2:
        raise ValueError("keys and sems must hold the received bits' and the corrected bits'")
    if span <= 0:
        raise ValueError("span must be positive")
    cap = min(len(reals) // 2, len(ints))
    warning = float(warning)
    out = []
    for k, entry in enumerate(entries):
        if not isinstance(entry, tuple) or len(entry) < 6:
            raise TypeError(f"entries[{k}] must be (port, ts, dt, acc, owned, changed)")
        if not isinstance(entry[3], dict):
            raise TypeError(f"entries[{k}]: acc must be a dict")
        found = _burst_entry(k, entry, speeds, rows, reals, ints, cap, span, warning, keys, sems, rare_bits)
        if found is not None:
            out.append(found)
    return out


def burst_one(entries: list, speeds: dict, rows: dict, reals, ints, span: int, warning: float,
              keys: tuple, sems: tuple, rare_bits: int, k: int) -> tuple | None:
    """Entry ``k``, which the C kernel hands back (numbers beyond its doubles' exact range, or
    of another type): the twin's arithmetic, which is Python's, in the entries' order."""
    cap = min(len(reals) // 2, len(ints))
    return _burst_entry(k, entries[k], speeds, rows, reals, ints, cap, span, float(warning), keys, sems, rare_bits)


_FEC_BINS = 16
_FEC_MAX_UNITS = 64
_I64 = 1 << 63


def _fec_add_one(entry: tuple, state, bucket: int, unc_sem, unc_keys: tuple, unc_bit: int, max_bin: int) -> bool:
    """The common case of one sample (see fec_run): True when done (cur updated), False when
    Python's (cur untouched)."""
    if not isinstance(state, tuple) or len(state) != 5:
        return False
    idx, phase, cur, keys, hashes = state
    ts, acc, owned, changed = entry[1], entry[3], entry[4], entry[5]
    if type(changed) is not int or not -_I64 <= changed < _I64:
        return False
    if changed & unc_bit and unc_sem in owned:
        for key in unc_keys:
            v = acc.get(key)
            if v is not None and (type(v) is not int or v != 0):
                return False
    if not all(type(x) is int and -_I64 <= x < _I64 for x in (ts, phase, idx)):
        return False
    a = ts + phase - 1
    if not -_I64 <= a < _I64 or a // bucket != idx:
        return False
    n = len(keys)
    if len(cur) != n or len(hashes) != n or n % _FEC_BINS or n > _FEC_MAX_UNITS * _FEC_BINS:
        return False
    sums = list(cur)
    for j, key in enumerate(keys):
        v = acc.get(key)
        if v is None:
            continue
        if j % _FEC_BINS >= max_bin or type(v) is not int or not -_I64 <= v < _I64:
            return False
        s = sums[j] + v
        if not -_I64 <= s < _I64:
            return False
        sums[j] = s
    cur[:] = array("q", sums)  # (an array('q') in C: a buffer of i64)
    return True


def fec_run(entries: list, fast: dict, bucket: int, fec_sem, unc_sem, unc_keys: tuple, unc_bit: int,
            max_bin: int) -> list[int]:
    """See agent/_ext/detect.c; same rules, same results."""
    if not isinstance(entries, list) or not isinstance(fast, dict) or not isinstance(unc_keys, tuple):
        raise TypeError("entries must be a list, fast a dict, unc_keys a tuple")
    if bucket <= 0:
        raise ValueError("bucket must be positive")
    deferred: list[int] = []
    held: set = set()
    for k, entry in enumerate(entries):
        if not isinstance(entry, tuple) or len(entry) < 6:
            raise TypeError(f"entries[{k}] must be (port, ts, dt, acc, owned, changed)")
        if not isinstance(entry[3], dict):
            raise TypeError(f"entries[{k}]: acc must be a dict")
        if fec_sem not in entry[4]:
            continue
        port = entry[0]
        state = fast.get(port) if port not in held else None
        if state is None or not _fec_add_one(entry, state, bucket, unc_sem, unc_keys, unc_bit, max_bin):
            deferred.append(k)
            held.add(port)
    return deferred


_EXACT_FIT = 1 << 53


def _small(v) -> bool:
    return type(v) is int and -_EXACT_FIT <= v <= _EXACT_FIT


def fec_fits(counts: list, units: int, lanes: bool, codewords) -> list | None:
    """See agent/_ext/detect.c; written as link_degrading's fit() is, operation for operation."""
    if not isinstance(counts, list) or units < 0 or len(counts) != units * _FEC_BINS:
        raise ValueError("counts must hold 16 bins per unit")
    if not _small(codewords) or not all(map(_small, counts)):
        return None
    out: list = []
    for u in range(units):
        d = counts[u * _FEC_BINS:(u + 1) * _FEC_BINS]
        total = sum(d) if lanes else codewords
        if total > _EXACT_FIT:
            return None
        if total <= 0:
            out.append(None)
            continue
        max_t = max((i for i in range(_FEC_BINS) if d[i] > 0), default=0)
        pts = [(i, math.log10(d[i] / total)) for i in range(1, _FEC_BINS) if d[i] > 0]
        n = len(pts)
        if n < 3:
            out.append((max_t, None))
            continue
        mx = sum(x for x, _ in pts) / n
        my = sum(y for _, y in pts) / n
        sxx = sum((x - mx) ** 2 for x, _ in pts)
        slope = sum((x - mx) * (y - my) for x, y in pts) / sxx
        icpt = my - slope * mx
        ss_tot = sum((y - my) ** 2 for _, y in pts)
        ss_res = sum((y - icpt - slope * x) ** 2 for x, y in pts)
        r2 = 1.0 - ss_res / ss_tot if ss_tot > 0 else 0.0
        cer = sum(10.0 ** min(0.0, icpt + slope * i) for i in range(16, 21))
        out.append((max_t, (min(cer, 1.0), r2, slope, n)))
    return out


def fec_changes(sents: list, values: list, leaves: tuple) -> list | None:
    """See agent/_ext/detect.c; as link_degrading's _publish compares and rounds."""
    if not isinstance(sents, list) or not isinstance(values, list) or not isinstance(leaves, tuple):
        raise TypeError("sents and values must be lists, leaves a tuple")
    if len(sents) != len(values):
        raise ValueError("sents and values must be as long")
    for sent, row in zip(sents, values, strict=True):
        if not isinstance(sent, dict) or not isinstance(row, tuple) or len(row) != len(leaves):
            raise ValueError("sents must be dicts, values tuples as long as leaves")
        if not all(type(v) is float or isinstance(v, int) for v in row):
            return None
    out = []
    for u, (sent, row) in enumerate(zip(sents, values, strict=True)):
        for leaf, value in zip(leaves, row, strict=True):
            if type(value) is float:
                value = float(f"{value:.3e}")
            if sent.get(leaf) != value:
                sent[leaf] = value
                out.append((u, leaf, value))
    return out


def fec_lanes(acc: dict, fec_sem) -> tuple[int, ...] | None:
    """See agent/_ext/detect.c; lanes_in() of link_degrading."""
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
