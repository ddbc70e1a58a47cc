"""Pure-Python twin of agent/_ext/feeds.c: the insights feeds' per-change loop and the Feed
type it reads and writes."""

from __future__ import annotations

from typing import Any

from agent.counters import F_NEW, F_RESET

_SKIP = F_NEW | F_RESET  # a baseline or a counter reset: never traffic
_I64 = 1 << 63


class Feed:
    """What one source saw of one port since its previous sample (C: agent/_ext/feeds.c's Feed
    type, the same fields; agent/insights/feeds.py says what each holds)."""

    __slots__ = ("source", "port", "sems", "ts", "prev_ts", "acc", "discard", "pending", "interval", "owned",
                 "dispatch", "lazy", "dead", "top", "changed", "kernels", "plain", "split_of", "lazy_bits",
                 "lazy_of", "lazy_kernels", "row", "always", "gated", "lazy_plain_bits")

    def __init__(self, source: str, port: str, sems: frozenset[str]) -> None:
        self.source = source
        self.port = port
        self.sems = sems
        self.ts = 0
        self.prev_ts = 0
        self.acc: dict = {}
        self.discard = False
        self.pending = False
        self.interval: float | None = None
        self.owned: frozenset[str] = frozenset()
        self.dispatch: list = []
        self.lazy: list = []
        self.dead = False
        self.top = 0
        self.changed = 0
        self.kernels: tuple = ()
        self.plain: tuple = ()
        self.split_of: list | None = None
        self.lazy_bits = 0
        self.lazy_of: list | None = None
        self.lazy_kernels: tuple = ()
        self.row: tuple | None = None
        self.always = False
        self.gated: tuple = ()
        self.lazy_plain_bits = 0


def feed_add(indices, deltas, flags, values, slot_of, keys, levels, bits, accs: list,
             vcols=None, rows=None, width: int = 0,
             spill: int = 0) -> tuple[list[int], list[int], list[int], list[int]]:
    """See agent/_ext/feeds.c; same rules, same results."""
    if (vcols is None) != (rows is None) or (rows is not None and width <= 0):
        raise ValueError("vcols and rows go together, with a positive width")
    n = len(indices)
    ncounters = len(slot_of)
    nslots = len(accs)
    if len(deltas) < n or len(flags) < n:
        raise ValueError("deltas and flags must hold one item per index")
    if len(values) < ncounters or len(levels) < ncounters or len(bits) < ncounters or len(keys) < ncounters:
        raise ValueError("values, keys, levels and bits must hold one item per counter of slot_of")
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


def flush_first(dirty: list, live: list, kernels: list, visit: list, called: set, elect: set, split,
                shared: dict) -> None:
    """The flush's first loop (agent/insights/feeds.py FeedBook.flush; C: agent/_ext/feeds.c):
    each feed of ``dirty`` (Feed objects) ends its pass. A live one is appended to ``live`` as
    (feed, dt, top, changed) and its sample, (port, ts, dt, acc, owned, changed, place, row), to
    the batch of each of its kernel detectors (each detector whose batch was empty appended to
    ``kernels``); ``visit`` gets the places with a Python detector to call, ``called`` the ports
    visited for a gated detector, ``elect`` the ports of feeds with their first interval;
    ``split(feed, shared)`` redoes a feed's detector lists when an election changed them."""
    for feed in dirty:
        feed.pending = False
        top, changed, ts, prev = feed.top, feed.changed, feed.ts, feed.prev_ts
        feed.top = feed.changed = 0
        feed.prev_ts = ts
        if feed.dead or not prev or feed.discard:
            feed.discard = False
            feed.acc.clear()
            continue
        dt = ts - prev
        if dt <= 0:
            feed.acc.clear()
            continue
        if feed.interval is None:
            feed.interval = float(dt)
            elect.add(feed.port)
        else:
            feed.interval += 0.2 * (dt - feed.interval)
        live.append((feed, dt, top, changed))
        if feed.split_of is not feed.dispatch or feed.lazy_of is not feed.lazy:
            split(feed, shared)
        if feed.kernels or feed.lazy_kernels:
            sample = (feed.port, ts, dt, feed.acc, feed.owned, changed, len(live) - 1, feed.row)
            for det in feed.kernels:
                entries = det.batch
                if not entries:
                    kernels.append(det)
                entries.append(sample)
            for det in feed.lazy_kernels:
                if det.sem_bits & changed:  # as the flush's lazy loop would call it
                    entries = det.batch
                    if not entries:
                        kernels.append(det)
                    entries.append(sample)
        # A gated detector's ``ports`` changes only in its own call for that port: its gate
        # reads here as in the flush's second loop, unless a place before this one calls it for
        # the port (two sources' feeds of one port): such a place is visited, its gate read there.
        if feed.always or changed & feed.lazy_plain_bits:
            visit.append(len(live) - 1)
            if feed.gated:
                called.add(feed.port)
        else:
            port = feed.port
            for det in feed.gated:
                if top >= det.level_gate or port in det.ports or port in called:
                    visit.append(len(live) - 1)
                    called.add(port)
                    break


def feed_mark(feeds: list, touched: list, tops: list, masks: list, discarded: list, ts: int, dirty: list) -> None:
    """What feed_add found, onto the feeds (agent/insights/feeds.py FeedBook.add; C:
    agent/_ext/feeds.c): each touched slot's feed takes the higher top, ORs in the semantics
    that changed, and becomes pending at ``ts`` (in ``dirty``) unless it is (then its ts moves on
    to ``ts`` if later); each discarded slot's feed has its sample discarded."""
    if not len(touched) == len(tops) == len(masks):
        raise ValueError("touched, tops and masks must be as long")
    for slot, top, changed in zip(touched, tops, masks, strict=True):
        if not 0 <= slot < len(feeds):
            raise IndexError(f"slot {slot} out of feeds")
        feed = feeds[slot]
        if top > feed.top:
            feed.top = top
        feed.changed |= changed
        if not feed.pending:
            feed.pending = True
            feed.ts = ts
            dirty.append(feed)
        elif ts > feed.ts:  # two reads before a pass: one sample covering both
            feed.ts = ts
    for slot in discarded:
        if not 0 <= slot < len(feeds):
            raise IndexError(f"slot {slot} out of feeds")
        feeds[slot].discard = True


def flush_clear(live: list) -> None:
    """The end of the flush (C: agent/_ext/feeds.c): each live feed's accumulation emptied,
    every sample of the pass having been read."""
    for entry in live:
        entry[0].acc.clear()
