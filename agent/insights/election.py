"""Source election: when several sources report the same thing for a port (netdev's and
the ASIC's in-octets, ethtool's and the ASIC's PFC counters), each semantic is read from
one of them only, the one with the finest measured sample interval (on Cumulus switchd
refreshes the kernel's counters every 2 s, the ASIC source reads every 100 ms), so
nothing is counted twice and sub-second detectors see sub-second data.

An election also decides, per feed, which detectors it is handed to (``Feed.dispatch``
for every sample, ``Feed.lazy`` only when one of their semantics changed).
"""

from __future__ import annotations

from collections.abc import Iterable

from agent.insights.base import NS, Detector
from agent.insights.feeds import Feed, FeedBook

MACHINERY = True  # the pipeline's, not a plugin (agent/registry.py load_plugins)

ELECT_NS = 5 * NS  # how often every port re-picks the finest source per semantic


class Election:
    """Elects, per port and semantic, the feed read (``Port.owner``)."""

    def __init__(self) -> None:
        self.next_ns = 0

    def due(self, book: FeedBook, ts: int) -> None:
        """Sources come, go and change pace: every ``ELECT_NS`` every port read by more than
        one looks again."""
        if ts >= self.next_ns:
            self.next_ns = ts + ELECT_NS
            book.elect.update(name for name, p in book.ports.items() if len(p.feeds) > 1)

    def run(self, book: FeedBook, detectors: Iterable[Detector], now: int) -> None:
        """Per port noted in ``book.elect`` and semantic, pick the feed (source) with the
        finest sample interval; a stale owner (its source stopped) gives way; otherwise
        switch only for 2x finer."""
        detectors = list(detectors)
        for name in book.elect:
            port = book.ports.get(name)
            if port is None:
                continue
            feeds = port.feeds
            sems: set[str] = set()
            for f in feeds:
                sems |= f.sems
            owned: dict[int, set[str]] = {id(f): set() for f in feeds}
            for sem in sems:
                cands = [f for f in feeds if sem in f.sems]
                best = min(cands, key=interval)
                cur = port.owner.get(sem)
                if cur is not None and cur in cands and not stale(cur, now):
                    if interval(best) < 0.5 * interval(cur):
                        cur = best
                else:
                    cur = best
                port.owner[sem] = cur
                owned[id(cur)].add(sem)
            for f in feeds:
                f.owned = frozenset(owned[id(f)])
                wanted = [d for d in detectors if d.sems & f.owned and d.wants(name)]
                f.dispatch = [d for d in wanted if d.every_sample]
                f.lazy = [d for d in wanted if not d.every_sample]
        book.elect.clear()


def interval(feed: Feed) -> float:
    return feed.interval if feed.interval is not None else float("inf")


def stale(feed: Feed, now: int) -> bool:
    """The feed's source stopped sending (turned off, or its table lost the port)."""
    if feed.dead:
        return True
    if not feed.prev_ts or feed.interval is None:
        return False
    return now - feed.prev_ts > max(5 * NS, 10 * feed.interval)
