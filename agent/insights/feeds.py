"""The feeds: what one source saw of one port since its previous sample.

Per change (tick thread, :meth:`FeedBook.add`) the work is a pre-filter at C speed and,
for the few counters the detectors read, one list lookup and one dict add into the
port's feed. Once per engine pass (:meth:`FeedBook.flush`) each feed that changed becomes
one sample ``(ts, dt, deltas)`` for the detectors its source was elected for
(``Feed.dispatch``, ``Feed.lazy``: agent/insights/election.py fills them).

Ports whose feeds came, went or changed what they carry, and feeds that got their first
sample interval, are noted in ``FeedBook.elect``: their sources are elected again.
"""

from __future__ import annotations

from itertools import compress
from operator import itemgetter
from typing import Any

from agent.counters import F_NEW, F_RESET, Batch, CounterTable
from agent.insights import classify
from agent.insights.base import Detector

_SKIP = F_NEW | F_RESET  # a baseline or a counter reset: not traffic, never an error


class Feed:
    """What one source saw of one port since its previous sample."""

    __slots__ = ("source", "port", "sems", "ts", "prev_ts", "acc", "discard", "pending",
                 "interval", "owned", "dispatch", "lazy", "dead")

    def __init__(self, source: str, port: str, sems: frozenset[str]) -> None:
        self.source = source
        self.port = port
        self.sems = sems
        self.ts = 0
        self.prev_ts = 0
        self.acc: dict[tuple[str, str], int] = {}
        self.discard = False
        self.pending = False
        self.interval: float | None = None  # EWMA of the sample interval, ns
        self.owned: frozenset[str] = frozenset()
        self.dispatch: list[Detector] = []  # detectors called for every sample
        self.lazy: list[Detector] = []  # ... only when one of their semantics changed
        self.dead = False


class Port:
    """One port (or RDMA device port): its feeds, one per source reporting it, and which
    feed each semantic is read from (``owner``)."""

    __slots__ = ("name", "feeds", "owner")

    def __init__(self, name: str) -> None:
        self.name = name
        self.feeds: list[Feed] = []
        self.owner: dict[str, Feed] = {}


class SourceFeeds:
    """One source's table, its classification and a feed per port slot of it."""

    __slots__ = ("table", "layout", "feeds")

    def __init__(self, table: CounterTable, layout: classify.Layout, feeds: list[Feed]) -> None:
        self.table = table
        self.layout = layout
        self.feeds = feeds


class FeedBook:
    """Every source's feeds, by source and by port."""

    def __init__(self) -> None:
        self.sources: dict[str, SourceFeeds] = {}
        self.ports: dict[str, Port] = {}
        self.dirty: list[Feed] = []
        #: ports whose sources are to be elected again
        self.elect: set[str] = set()

    # ------------------------------------------------------------ input
    def add(self, batch: Batch) -> None:
        """One batch of changes into the feeds of the ports it concerns."""
        src = self.sources.get(batch.source)
        if src is None or src.table is not batch.table:
            src = self.adopt(batch.source, batch.table)
        idx = batch.indices
        n = len(idx)
        if not n or not src.layout.ports:
            return
        lay = src.layout
        mask = lay.mask
        if n == 1:
            sel: Any = (0,) if mask[idx[0]] else ()
        else:
            sel = compress(range(n), itemgetter(*idx)(mask))
        slots, feeds, deltas, flags, values = lay.slots, src.feeds, batch.deltas, batch.flags, batch.values
        levels = classify.LEVELS
        ts = batch.ts_ns
        dirty = self.dirty
        for k in sel:
            slot, key = slots[idx[k]]
            feed = feeds[slot]
            if not feed.pending:
                feed.pending = True
                feed.ts = ts
                dirty.append(feed)
            elif ts > feed.ts:  # two reads before a pass: one sample covering both
                feed.ts = ts
            if key[0] in levels:  # a level: its latest value (a baseline is a level too)
                feed.acc[key] = values[idx[k]]
                continue
            if flags[k] & _SKIP:
                feed.discard = True
                continue
            d = deltas[k]
            if d:
                acc = feed.acc
                acc[key] = acc.get(key, 0) + d

    def adopt(self, source: str, table: CounterTable) -> SourceFeeds:
        """A source's (new) table: carry its ports' feeds over by name."""
        lay = classify.layout(table)
        old = self.sources.get(source)
        before = {f.port: f for f in old.feeds} if old is not None else {}
        feeds = []
        for slot, port in enumerate(lay.ports):
            sems = frozenset(lay.sems[slot])
            feed = before.pop(port, None)
            if feed is None:
                feed = Feed(source, port, sems)
                self.port(port).feeds.append(feed)
                self.elect.add(port)
            elif feed.sems != sems:
                feed.sems = sems
                self.elect.add(port)
            feeds.append(feed)
        for feed in before.values():
            self.drop_feed(feed)
        src = self.sources[source] = SourceFeeds(table, lay, feeds)
        return src

    def port(self, name: str) -> Port:
        p = self.ports.get(name)
        if p is None:
            p = self.ports[name] = Port(name)
        return p

    def drop_feed(self, feed: Feed) -> None:
        feed.dead = True
        port = self.ports.get(feed.port)
        if port is None:
            return
        if feed in port.feeds:
            port.feeds.remove(feed)
        for sem in [s for s, f in port.owner.items() if f is feed]:
            del port.owner[sem]
        self.elect.add(feed.port)

    def forget(self, name: str) -> None:
        """The port is gone: its feeds are dead."""
        port = self.ports.pop(name, None)
        for feed in port.feeds if port is not None else ():
            feed.dead = True
        # A source's table lists the port until it rebuilds: fresh feeds start from a new
        # baseline should its counters move again.
        for src in self.sources.values():
            for i, feed in enumerate(src.feeds):
                if feed.port == name:
                    fresh = src.feeds[i] = Feed(feed.source, name, feed.sems)
                    self.port(name).feeds.append(fresh)
                    self.elect.add(name)

    # ------------------------------------------------------------ per pass
    def flush(self) -> None:
        """Every feed that changed since the last pass becomes one sample for its detectors."""
        dirty, self.dirty = self.dirty, []
        for feed in dirty:
            feed.pending = False
            acc = feed.acc
            prev = feed.prev_ts
            feed.prev_ts = feed.ts
            if feed.dead or not prev or feed.discard:
                feed.discard = False
                acc.clear()
                continue
            dt = feed.ts - prev
            if dt <= 0:
                acc.clear()
                continue
            if feed.interval is None:
                feed.interval = float(dt)
                self.elect.add(feed.port)
            else:
                feed.interval += 0.2 * (dt - feed.interval)
            owned = feed.owned
            for det in feed.dispatch:
                det.sample(feed.port, feed.ts, dt, acc, owned)
            if feed.lazy:
                changed = {key[0] for key in acc}
                for det in feed.lazy:
                    if not det.sems.isdisjoint(changed):
                        det.sample(feed.port, feed.ts, dt, acc, owned)
            acc.clear()
