"""Pure-Python twin of agent/_ext/feeds.c: the insights feeds' per-change loop."""

from __future__ import annotations

from typing import Any

from agent.counters import F_NEW, F_RESET

_SKIP = F_NEW | F_RESET  # a baseline or a counter reset: never traffic
_I64 = 1 << 63


def feed_add(indices, deltas, flags, values, slot_of, keys, levels, bits, accs: list, hashes=None,
             vcols=None, rows=None, width: int = 0, spill: int = 0) -> tuple[list[int], list[int], list[int], list[int]]:
    """See agent/_ext/feeds.c; same rules, same results (``hashes``, the keys' hashes that
    spare C a hash per change, changes nothing here: a dict hashes its key anyway)."""
    if (vcols is None) != (rows is None) or (rows is not None and width <= 0):
        raise ValueError("vcols and rows go together, with a positive width")
    n = len(indices)
    ncounters = len(slot_of)
    nslots = len(accs)
    if len(deltas) < n or len(flags) < n:
        raise ValueError("deltas and flags must hold one item per index")
    if len(values) < ncounters or len(levels) < ncounters or len(bits) < ncounters or len(keys) < ncounters:
        raise ValueError("values, keys, levels and bits must hold one item per counter of slot_of")
    if hashes is not None and len(hashes) < ncounters:
        raise ValueError("hashes must hold one item per counter of slot_of")
    if rows is not None and (len(vcols) < ncounters or len(rows) // width < nslots):
        raise ValueError("vcols must hold one item per counter of slot_of, rows width per slot")
    touched: list[int] = []
    discarded: list[int] = []
    mark = bytearray(nslots)  # per slot: 1 touched, 2 discarded too
    top = [0] * nslots  # per slot: the highest queue level
    mask = [0] * nslots  # per slot: the bits of the keys set
    for k in range(n):
        i = indices[k]
        if not 0 <= i < ncounters:
            raise IndexError(f"index {i} out of the table ({ncounters} counters)")
        slot = slot_of[i]
        if slot < 0:
            continue
        if slot >= nslots:
            raise IndexError(f"slot {slot} out of accs ({nslots})")
        if not mark[slot]:
            mark[slot] = 1
            touched.append(slot)
        acc: Any = accs[slot]
        if not isinstance(acc, dict):
            raise TypeError(f"accs[{slot}] must be a dict")
        key = keys[i]
        if levels[i]:  # a level: its latest value (a baseline is a level too)
            if levels[i] == 1 and values[i] > top[slot]:
                top[slot] = values[i]
            acc[key] = values[i]
            mask[slot] |= bits[i]
            continue
        if flags[k] & _SKIP:
            if mark[slot] != 2:
                mark[slot] = 2
                discarded.append(slot)
            continue
        d = deltas[k]
        if rows is not None and 0 <= vcols[i] < width:
            if type(d) is int and -_I64 <= d < _I64:
                if not d:
                    continue
                at = slot * width + vcols[i]
                total = rows[at] + d
                if -_I64 <= total < _I64:
                    rows[at] = total
                    mask[slot] |= bits[i]
                    continue
            mask[slot] |= spill  # not an int within int64, or a sum past it: into the dict, the row's reader told
        if d:
            acc[key] = acc.get(key, 0) + d
            mask[slot] |= bits[i]
    return touched, discarded, [top[slot] for slot in touched], [mask[slot] for slot in touched]
