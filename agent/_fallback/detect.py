"""Pure-Python twin of agent/_ext/detect.c: per-port detector state in flat arrays,
updated once per engine pass (the throughput-dip rule). The arithmetic is written as
agent/insights/throughput_dip.py wrote it per port, operation for operation, so both
backends give the same bits."""

from __future__ import annotations

import math

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
