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
_FEC_RING = 10  # a window's buckets: the nine before the current one, and it
#: a port's words (i64; agent/insights/link_degrading.py _Port.w): its current bucket, the
#: publishing slot last published in, its alarm, the uncorrectable codewords of the current
#: bucket and of the ring's, then cur, totals, tail_done, tail_cur and the ring
_FW_IDX, _FW_SLOT, _FW_ALARM, _FW_UNC_CUR, _FW_UNC_TOT, _FW_HEAD = range(6)
_I64 = 1 << 63
_EXACT_FIT = 1 << 53
_ABSENT = object()


def _fec_words(n: int, units: int) -> int:
    return _FW_HEAD + 2 * n + 2 * units + _FEC_RING * (n + 2)


def _i64(v) -> bool:
    return type(v) is int and -_I64 <= v < _I64


def fec_line(counts: list, total: int) -> tuple | None:
    """(predicted CER, R², slope, points) of the line through log10(counts[i] / total) for
    the bins i = 1..15 with a count, or None with fewer than 3 of them (C: fec_fit's line);
    agent/insights/link_degrading.py's fit() is this one."""
    pts = [(i, math.log10(counts[i] / total)) for i in range(1, _FEC_BINS) if counts[i] > 0]
    n = len(pts)
    if n < 3:
        return None
    mx = sum(x for x, _ in pts) / n
    my = sum(y for _, y in pts) / n
    sxx = sum((x - mx) ** 2 for x, _ in pts)
    slope = sum((x - mx) * (y - my) for x, y in pts) / sxx
    icpt = my - slope * mx
    ss_tot = sum((y - my) ** 2 for _, y in pts)
    ss_res = sum((y - icpt - slope * x) ** 2 for x, y in pts)
    r2 = 1.0 - ss_res / ss_tot if ss_tot > 0 else 0.0  # a flat line explains nothing
    cer = sum(10.0 ** min(0.0, icpt + slope * i) for i in range(16, 21))  # bins 16..20 extrapolated
    return min(cer, 1.0), r2, slope, n


def _fec_fit(d: list, total: int) -> tuple:
    """(max_t, pred) of one unit's bins over total (C: fec_fit)."""
    return max((i for i in range(_FEC_BINS) if d[i] > 0), default=0), fec_line(d, total)


def _fec_unit_fits(d: list, units: int, lanes: bool, codewords: int) -> list | None:
    """Per unit, None (no codewords) or _fec_fit's (max_t, pred): a lane's over its own
    codewords, a port's over all; None when a total is past doubles' exact ints."""
    fits: list = []
    for u in range(units):
        mine = d[u * _FEC_BINS:(u + 1) * _FEC_BINS]
        total = sum(mine) if lanes else codewords
        if total > _EXACT_FIT:
            return None
        fits.append(_fec_fit(mine, total) if total > 0 else None)
    return fits


def _fec_rounded(x: float) -> float:
    return x if x == 0.0 else float(f"{x:.3e}")


#: link_degrading's gauges' resolutions in their order (predicted-flr, observed-cer, fit-r2,
#: max-bin), as (relative, absolute): a gauge is published again only when it moved by more
#: than the larger of the two from the value last published (docs/insights.md); the ratios'
#: 1e-15 floor stops a clean link's fit (1e-19..1e-16, jittering by factors) from being news.
#: C: FEC_RESOLUTION
FEC_RESOLUTION = ((0.1, 1e-15), (0.1, 1e-15), (0.0, 0.01), (0.0, 0.0))


def fec_moved(was, v, i: int) -> bool:
    """Whether gauge ``i``'s value ``v`` is news against ``was`` (``_ABSENT``: never published):
    two floats by more than the gauge's resolution, anything else when it differs (C: fec_moved)."""
    if was is _ABSENT:
        return True
    if type(was) is float and type(v) is float and i < len(FEC_RESOLUTION):
        if was == v:
            return False
        if was != was or v != v:  # NaN: news unless both are
            return not (was != was and v != v)
        rel, ab = FEC_RESOLUTION[i]
        tol = rel * max(abs(was), abs(v))
        return abs(v - was) > (ab if tol < ab else tol)
    return bool(was != v)


def _fec_gauges(conf: tuple, sent: dict, unit, box, ts, vals: tuple, max_t: int, updates: list) -> None:
    """A unit's gauges as _publish publishes them (C: fec_gauges)."""
    leaves, update, source = conf[11], conf[12], conf[13]
    mine = sent.get(unit, _ABSENT)
    if mine is _ABSENT:
        mine = sent[unit] = {}
    if not isinstance(mine, dict):
        raise TypeError("sent must map a unit to a dict")
    for i, (leaf, v) in enumerate(zip(leaves, (*map(_fec_rounded, vals), max_t), strict=True)):
        if fec_moved(mine.get(leaf, _ABSENT), v, i):
            mine[leaf] = v
            updates.append(update(ts, box, leaf, v, source))


def _fec_row_view(vrow, row_keys, cols, n: int):
    """The sample's row from its first bin (C: fec_row_view), when the port's columns were mapped
    for that row's keys, else None (Python's)."""
    if not isinstance(vrow, tuple) or len(vrow) != 3 or vrow[2] is not row_keys:
        return None
    rows, base = vrow[0], vrow[1]
    if not isinstance(rows, array) or rows.itemsize != 8 or not isinstance(cols, array) or cols.itemsize != 4:
        raise TypeError("rows must be an i64 array, cols an i32 one")
    words = len(rows)
    if not 0 <= base <= words or len(cols) < n or any(col >= words - base for col in cols):
        return None
    return memoryview(rows)[base:]


def _fec_one(entry: tuple, state, conf: tuple, updates: list) -> tuple[bool, list | None]:
    """One sample of a port in fast (see fec_run): (True, events or None) when done (w
    updated), (False, None) when Python's (nothing written)."""
    (bucket, fec_sem, unc_sem, unc_keys, unc_bit, max_bin, max_bin_count, flr_min, min_r2, scale, per_slot,
     _leaves, _update, _source, spill) = conf
    no = (False, None)
    if not isinstance(state, tuple) or len(state) != 9:
        return no
    w, keys, hashes, units, sent, boxes, phase, row_keys, cols = state
    ts, acc, owned, changed = entry[1], entry[3], entry[4], entry[5]
    vrow = entry[7] if len(entry) > 7 else None  # the feed's FEC row
    if not (isinstance(keys, tuple) and isinstance(units, tuple) and isinstance(sent, dict)
            and isinstance(boxes, dict)):
        return no
    n, nu = len(keys), len(units)
    if not 1 <= nu <= _FEC_MAX_UNITS or n != nu * _FEC_BINS:
        return no
    if not _i64(changed):
        return no
    if vrow is not None and changed & spill:  # a bin in acc too: Python's, which adds the two
        return no
    unc, unc_zero = 0, True
    if changed & unc_bit and unc_sem in owned:  # Python reads unc only then
        for key in unc_keys:
            v = acc.get(key, _ABSENT)
            if v is _ABSENT:
                continue
            if not _i64(v):
                return no
            unc_zero = unc_zero and v == 0
            unc += v
            if not _i64(unc):
                return no
    if not _i64(ts) or not _i64(phase) or not _i64(ts + phase) or not _i64(ts + phase - 1):
        return no
    i1 = (ts + phase - 1) // bucket
    if not isinstance(w, array) or w.itemsize != 8 or not isinstance(hashes, array) or hashes.itemsize != 8:
        raise TypeError("w and hashes must be i64 arrays")
    if len(w) != _fec_words(n, nu) or len(hashes) != n:
        return no
    if vrow is not None:
        vec = _fec_row_view(vrow, row_keys, cols, n)
        if vec is None:
            return no
    cur_at = _FW_HEAD
    tot_at = cur_at + n
    td_at = tot_at + n
    tc_at = td_at + nu
    ring_at = tc_at + nu
    i0 = w[_FW_IDX]
    if w[_FW_ALARM]:  # every sample of the port is judged: Python's
        return no
    row = [0] * n  # the sample's bins (absent: 0; C: fec_row, fec_row_of)
    high = False
    if vrow is not None:
        for j in range(n):
            row[j] = vec[cols[j]] if cols[j] >= 0 else 0
            high = high or (row[j] != 0 and j % _FEC_BINS >= max_bin)
    else:
        for j, key in enumerate(keys):
            v = acc.get(key, _ABSENT)
            if v is _ABSENT:
                continue
            if not _i64(v):
                return no
            row[j] = v
            high = high or j % _FEC_BINS >= max_bin
    cur = w[cur_at:cur_at + n]
    if i1 == i0:  # the common case: into the current bucket, unless a tail moved or unc came
        if high or not unc_zero:
            return no
        sums = [a + b for a, b in zip(cur, row, strict=True)]
        if not all(map(_i64, sums)):
            return no
        w[cur_at:cur_at + n] = array("q", sums)
        return True, None
    if i1 < i0 or i0 < -_I64 + 2 * _FEC_RING or not 0 <= max_bin <= _FEC_BINS:
        return no
    if not all(map(_i64, units)):
        return no
    lanes = not (nu == 1 and units[0] == -1)  # PORT: the port's own histogram
    found = fec_lanes(acc, fec_sem)  # a lane that came: Python's, the port starts afresh
    if found is None or any(lane not in units for lane in found):
        return no
    if vrow is not None and any(vec[col] for col in cols[n:] if col >= 0):  # the row's lanes not among units
        return no
    box_of = [boxes.get(unit, _ABSENT) for unit in (*units, None)]
    if _ABSENT in box_of:
        return no
    # the window after it: the current bucket joins the totals, buckets <= i1 - 10 leave
    tot = [a + b for a, b in zip(w[tot_at:tot_at + n], cur, strict=True)]
    utot = w[_FW_UNC_TOT] + w[_FW_UNC_CUR]
    if not all(map(_i64, tot)) or not _i64(utot):
        return no
    for bk in range(i0 - (_FEC_RING - 1), min(i1 - _FEC_RING, i0) + 1):
        if bk == i0:
            bins, bu = cur, w[_FW_UNC_CUR]
        else:
            at = ring_at + bk % _FEC_RING * (n + 2)
            if w[at] != bk:  # no sample in that bucket
                continue
            bins, bu = w[at + 2:at + 2 + n], w[at + 1]
        tot = [a - b for a, b in zip(tot, bins, strict=True)]
        utot -= bu
        if not all(map(_i64, tot)) or not _i64(utot):
            return no
    alarm, tails, new_done, new_cur = 0, [], [], []
    for u in range(nu):
        s1 = s2 = 0
        for i in range(max_bin, _FEC_BINS):
            s1 += tot[u * _FEC_BINS + i]
            if not _i64(s1):
                return no
            s2 += row[u * _FEC_BINS + i]
            if not _i64(s2):
                return no
        if not _i64(s1 + s2):
            return no
        new_done.append(s1)
        new_cur.append(s2)
        tails.append(s1 + s2)
        if s1 + s2 >= max_bin_count:
            alarm = 1
    # the judgement's figures: every one within what the fits take, else Python's
    unc_all = utot + unc
    if not _i64(unc_all):
        return no
    d, codewords = [], 0
    for a, b in zip(tot, row, strict=True):
        x = a + b
        codewords += x
        if not _i64(x) or not _i64(codewords):
            return no
        d.append(x)
    codewords += unc_all
    if not _i64(codewords):
        return no
    judge, publish = codewords > 0, i1 // per_slot != w[_FW_SLOT]
    fits: list | None = []
    if judge:
        if codewords > _EXACT_FIT or not -_EXACT_FIT <= unc_all <= _EXACT_FIT:
            return no
        if not all(-_EXACT_FIT <= x <= _EXACT_FIT for x in d):
            return no
        fits = _fec_unit_fits(d, nu, lanes, codewords)
        if fits is None:
            return no
    # no way back: the state after the sample
    at = ring_at + i0 % _FEC_RING * (n + 2)
    w[at] = i0
    w[at + 1] = w[_FW_UNC_CUR]
    w[at + 2:at + 2 + n] = cur
    w[tot_at:tot_at + n] = array("q", tot)
    w[cur_at:cur_at + n] = array("q", row)
    w[td_at:td_at + nu] = array("q", new_done)
    w[tc_at:tc_at + nu] = array("q", new_cur)
    w[_FW_IDX], w[_FW_UNC_TOT], w[_FW_UNC_CUR], w[_FW_ALARM] = i1, utot, unc, alarm
    if not judge:
        return True, None
    cer = unc_all / codewords
    worst = None  # (flr, r2, max_t)
    events = None
    for u, got in enumerate(fits):
        if got is None:  # no codewords
            continue
        max_t, pred = got
        flr = pred[0] * scale if pred else 0.0
        r2 = pred[1] if pred else 0.0
        if publish:
            if lanes:
                _fec_gauges(conf, sent, units[u], box_of[u], ts, (flr, cer, r2), max_t, updates)
            if worst is None or (flr > worst[0] if flr != worst[0] else max_t > worst[2]):
                worst = (flr, r2, max_t)
        by_bin = tails[u] >= max_bin_count
        by_flr = pred is not None and pred[1] >= min_r2 and flr >= flr_min
        if by_flr or by_bin:
            if events is None:
                events = []
            events.append((units[u] if lanes else None, flr, pred, max_t, tails[u], unc_all, codewords))
    if publish and worst is not None:
        w[_FW_SLOT] = i1 // per_slot
        _fec_gauges(conf, sent, None, box_of[nu], ts, (worst[0], cer, worst[1]), worst[2], updates)
    return True, events


def fec_run(entries: list, fast: dict, conf: tuple, pending: list) -> dict:
    """See agent/_ext/detect.c; same rules, same results."""
    if not (isinstance(entries, list) and isinstance(fast, dict) and isinstance(conf, tuple)
            and isinstance(pending, list)):
        raise TypeError("entries must be a list, fast a dict, conf a tuple, pending a list")
    if len(conf) != 15 or not isinstance(conf[3], tuple) or not isinstance(conf[11], tuple):
        raise TypeError("conf must be (bucket, fec_sem, unc_sem, unc_keys, unc_bit, max_bin, max_bin_count, flr, "
                        "min_r2, scale, per_slot, leaves, update, source, spill)")
    if not callable(conf[12]):
        raise TypeError("update must be callable")
    if conf[0] <= 0 or conf[10] <= 0:
        raise ValueError("bucket and per_slot must be positive")
    if len(conf[11]) != 4:
        raise ValueError("leaves must name the 4 gauges")
    fec_sem = conf[1]
    todo: dict = {}
    held: set = set()
    direct = True  # no sample left to Python yet: updates straight to pending
    for k, entry in enumerate(entries):
        if not isinstance(entry, tuple) or len(entry) < 6:
            raise TypeError(f"entries[{k}] must be (port, ts, dt, acc, owned, changed)")
        if not isinstance(entry[3], dict):
            raise TypeError(f"entries[{k}]: acc must be a dict")
        if fec_sem not in entry[4]:
            continue
        port = entry[0]
        state = fast.get(port) if port not in held else None
        done, events = False, None
        if state is not None:
            ups = pending if direct else []
            done, events = _fec_one(entry, state, conf, ups)
        if done:
            if events is not None or (not direct and ups):
                todo[k] = (events, None if direct or not ups else ups)
        else:
            direct = False
            todo[k] = None
            held.add(port)
    return todo


def _small(v) -> bool:
    return type(v) is int and -_EXACT_FIT <= v <= _EXACT_FIT


def fec_fits(counts: list, units: int, lanes: bool, codewords) -> list | None:
    """See agent/_ext/detect.c; written as link_degrading's fit() is, operation for operation."""
    if not isinstance(counts, list) or units < 0 or len(counts) != units * _FEC_BINS:
        raise ValueError("counts must hold 16 bins per unit")
    if not _small(codewords) or not all(map(_small, counts)):
        return None
    return _fec_unit_fits(counts, units, lanes, codewords)


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
        for i, (leaf, value) in enumerate(zip(leaves, row, strict=True)):
            if type(value) is float:
                value = float(f"{value:.3e}")
            if fec_moved(sent.get(leaf, _ABSENT), value, i):
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
