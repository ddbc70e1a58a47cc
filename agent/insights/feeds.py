"""The feeds: what one source saw of one port since its previous sample.

Per change (tick thread, :meth:`FeedBook.add`) the work is the backend's ``feed_add``
(agent/_ext/feeds.c, or its twin agent/_fallback/feeds.py): for the counters the
detectors read, one dict add into the port's feed at C speed, noting per port its
highest queue level and the semantics that changed; Python runs per port touched. Once
per engine pass (:meth:`FeedBook.flush`) each feed that changed becomes one sample
``(ts, dt, deltas)`` for the detectors its source was elected for (``Feed.dispatch``,
``Feed.lazy``: agent/insights/election.py fills them); a detector with a ``level_gate``
skips calm ports below it, a lazy one is called when one of its semantics changed.

Ports whose feeds came, went or changed what they carry, and feeds that got their first
sample interval, are noted in ``FeedBook.elect``: their sources are elected again.
"""

from __future__ import annotations

import ctypes
from array import array

from agent import _backend
from agent.counters import Batch, CounterTable
from agent.insights import classify
from agent.insights.base import Detector

MACHINERY = True  # the pipeline's, not a plugin (agent/registry.py load_plugins)

#: What one source saw of one port since its previous sample: a type the backend defines (C:
#: agent/_ext/feeds.c, whose loops read its fields as a struct; the twin: agent/_fallback/feeds.py),
#: ``Feed(source, port, sems)``. Its fields: ``source``, ``port``, ``sems``; ``ts``, ``prev_ts``
#: (ns), ``acc`` (the deltas and levels since the last sample, by (sem, sub) key), ``discard``,
#: ``pending``, ``dead``; ``interval`` (EWMA of the sample interval, ns, None before the first);
#: ``owned`` (the semantics read from this feed), ``dispatch`` (detectors called for every sample)
#: and ``lazy`` (... only when one of their semantics changed: election.py fills them); ``top``
#: (the highest queue level since the previous pass: Detector.level_gate), ``changed`` (the
#: semantics in acc, as classify.BITS); ``dispatch`` split by :func:`_split` (when ``split_of``
#: is not the current list) into ``kernels`` (Detector.batch) and ``plain``, ``lazy`` into
#: ``lazy_kernels`` and ``lazy_bits`` (``lazy_of``); which samples the flush visits after the
#: kernels: ``always`` (a plain detector without a level gate), ``gated``, ``lazy_plain_bits``;
#: ``row``: where its FEC bins' deltas are (classify.Layout.vcols): (rows, its first word there,
#: the key per column), or None, a sample's 8th item (read through :func:`merged`).
Feed = _backend.reader.Feed


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

    __slots__ = ("table", "layout", "feeds", "rows", "written")

    def __init__(self, table: CounterTable, layout: classify.Layout, feeds: list[Feed]) -> None:
        self.table = table
        self.layout = layout
        self.feeds = feeds
        #: the port slots' FEC rows side by side (layout.vwidth words each), zeroed once a pass
        self.rows = array("q", bytes(8 * layout.vwidth * len(feeds)))
        self.written = False  # a batch went into rows since they were last zeroed
        for slot, feed in enumerate(feeds):
            feed.row = (self.rows, slot * layout.vwidth, layout.vkeys[slot]) if layout.vwidth else None


class FeedBook:
    """Every source's feeds, by source and by port."""

    def __init__(self) -> None:
        self.sources: dict[str, SourceFeeds] = {}
        self.ports: dict[str, Port] = {}
        self.dirty: list[Feed] = []
        #: ports whose sources are to be elected again
        self.elect: set[str] = set()
        #: the feeds' detector tuples, one object per distinct one (_split); emptied when the
        #: detectors are built again, so old ones are not kept
        self.shared: dict[tuple, tuple] = {}
        self.use(_backend.reader)

    def use(self, backend) -> None:
        """The per-change loop (``feed_add``), what it found put onto the feeds (``feed_mark``),
        and the flush's first and last loops, from ``backend``: agent._swtel or its twins,
        agent._fallback (bench/bench_insights.py runs both side by side)."""
        self.feed_add, self.feed_mark = backend.feed_add, backend.feed_mark
        self.flush_first, self.flush_clear = backend.flush_first, backend.flush_clear
        self.Feed = backend.Feed  # (C's loops read only C's Feed; the twin's read either)

    # ------------------------------------------------------------ input
    def add(self, batch: Batch) -> None:
        """One batch of changes into the feeds of the ports it concerns. The per-change loop
        is the backend's ``feed_add`` (C, or its Python twin), and so is ``feed_mark``, which puts
        what it found per port touched onto the feeds."""
        src = self.sources.get(batch.source)
        if src is None or src.table is not batch.table:
            src = self.adopt(batch.source, batch.table)
        if not batch.indices or not src.layout.ports:
            return
        lay = src.layout
        feeds = src.feeds
        if lay.vwidth:
            src.written = True
            touched, discarded, tops, masks = self.feed_add(
                batch.indices, batch.deltas, batch.flags, batch.values, lay.slot_of, lay.keys, lay.levels, lay.bits,
                [f.acc for f in feeds], lay.vcols, src.rows, lay.vwidth, classify.SPILL)
        else:
            touched, discarded, tops, masks = self.feed_add(
                batch.indices, batch.deltas, batch.flags, batch.values, lay.slot_of, lay.keys, lay.levels, lay.bits,
                [f.acc for f in feeds])
        self.feed_mark(feeds, touched, tops, masks, discarded, batch.ts_ns, self.dirty)

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
                feed = self.Feed(source, port, sems)
                self.port(port).feeds.append(feed)
                self.elect.add(port)
            elif feed.sems != sems:
                feed.sems = sems
                self.elect.add(port)
            feeds.append(feed)
        for feed in before.values():
            self.drop_feed(feed)
        if old is not None and old.written:  # what the old rows hold goes to the dicts: the row is new
            for feed in old.feeds:
                if feed.pending and feed.row is not None:
                    feed.changed |= _spill(feed)
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
                    fresh = src.feeds[i] = self.Feed(feed.source, name, feed.sems)
                    self.port(name).feeds.append(fresh)
                    self.elect.add(name)

    # ------------------------------------------------------------ per pass
    def flush(self) -> None:
        """Every feed that changed since the last pass becomes one sample for its detectors.

        Detectors with a kernel (``Detector.batch``) get every sample of the pass first (a lazy
        one those in which one of its semantics changed), in one call; the others are then called
        per sample as before, and a kernel detector reports what a sample found at that sample's
        place, so events keep their order. A sample carries its place in the pass as its 7th
        item: only the samples a kernel named are visited for it. The first loop, which ends each
        feed's pass and lists the samples and places, is the backend's ``flush_first`` (C:
        agent/_ext/feeds.c; its twin in agent/_fallback/feeds.py says what it does)."""
        dirty, self.dirty = self.dirty, []
        live: list[tuple[Feed, int, int, int]] = []
        kernels: list[Detector] = []  # those with samples this pass
        visit: list[int] = []  # the places with a Python detector to call (the kernels' come later)
        called: set[str] = set()  # the ports of the places visited for a gated detector
        self.flush_first(dirty, live, kernels, visit, called, self.elect, _split, self.shared)
        # per place in ``live``: the kernel detectors with something to report there -> the index
        # of the sample in their batch
        due: dict[int, dict[Detector, int]] = {}
        for det in kernels:
            entries = det.batch
            for k in det.run_batch():
                due.setdefault(entries[k][6], {})[det] = k  # type: ignore[index]
        for place in sorted(due.keys() | visit) if due else visit:
            feed, dt, top, changed = live[place]
            acc = feed.acc
            found = due.get(place) if due else None
            dispatch = feed.dispatch if found else feed.plain
            if dispatch:
                owned, port, ts = feed.owned, feed.port, feed.ts
                for det in dispatch:
                    if det.batch is not None:  # (a sample a kernel named: ``found``)
                        k = found.get(det)  # type: ignore[union-attr]
                        if k is not None:
                            det.emit(k)
                        continue
                    gate = det.level_gate
                    if gate is not None and top < gate and port not in det.ports:
                        continue  # every queue of a calm port below the detector's threshold
                    det.changed = changed
                    det.sample(port, ts, dt, merged(acc, feed.row) if det.reads_rows else acc, owned)
            if changed & feed.lazy_bits:  # one of a lazy detector's semantics changed
                for det in feed.lazy:
                    if det.sem_bits & changed:  # one of its semantics changed (is in acc)
                        if det.batch is not None:
                            k = found.get(det) if found else None
                            if k is not None:
                                det.emit(k)
                            continue
                        det.changed = changed
                        det.sample(feed.port, feed.ts, dt, merged(acc, feed.row) if det.reads_rows else acc,
                                   feed.owned)
        self.flush_clear(live)
        for src in self.sources.values():
            if src.written:  # every sample of the pass has been read: the rows start again at 0
                src.written = False
                ctypes.memset(src.rows.buffer_info()[0], 0, len(src.rows) * 8)


def merged(acc: dict, row: tuple[array, int, tuple] | None) -> dict:
    """A sample's deltas with its FEC bins (``row``: a Feed's) among them, as the dict alone held
    them before rows (a bin whose delta spilled into the dict adds the two)."""
    if row is None:
        return acc
    rows, at, keys = row
    out = dict(acc)
    for col, key in enumerate(keys):
        v = rows[at + col]
        if v and key is not None:
            out[key] = out.get(key, 0) + v
    return out


def _spill(feed: Feed) -> int:
    """A feed's row into its dict (its table is rebuilt before the pass): classify.SPILL, or 0
    when the row held nothing."""
    rows, at, keys = feed.row  # type: ignore[misc]
    acc = feed.acc
    moved = 0
    for col, key in enumerate(keys):
        v = rows[at + col]
        if v and key is not None:
            acc[key] = acc.get(key, 0) + v
            moved = classify.SPILL
    return moved


def _split(feed: Feed, shared: dict[tuple, tuple]) -> None:
    """The feed's detectors for every sample, as the kernel ones and the others, and the
    semantics of its lazy ones (redone when an election gives it new lists). The lists are
    tuples taken from ``shared`` (FeedBook.shared): the feeds of one source, a thousand at 1,024
    ports, then read the same few objects each pass, in cache, not one list each."""

    def one(items: list[Detector]) -> tuple[Detector, ...]:
        t = tuple(items)
        return shared.setdefault(t, t)

    feed.kernels = one([d for d in feed.dispatch if d.batch is not None])
    feed.plain = one([d for d in feed.dispatch if d.batch is None])
    feed.split_of = feed.dispatch
    feed.lazy_kernels = one([d for d in feed.lazy if d.batch is not None])
    feed.lazy_bits = feed.lazy_plain_bits = 0
    for det in feed.lazy:
        feed.lazy_bits |= det.sem_bits
        if det.batch is None:
            feed.lazy_plain_bits |= det.sem_bits
    feed.lazy_of = feed.lazy
    feed.always = any(d.level_gate is None for d in feed.plain)
    feed.gated = one([d for d in feed.plain if d.level_gate is not None])
