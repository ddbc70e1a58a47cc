"""The insights runner: counter batches in, events out (gNMI state updates, log, status).

Per change (tick thread, ``on_batch``) the work is a pre-filter at C speed and, for the
few counters the detectors read, one list lookup and one dict add into the port's
*feed* (what one source saw of one port since its previous sample). Once per engine
pass (``end_pass``) each feed that changed becomes one sample ``(ts, dt, deltas)`` for
the detectors that read it, then events are raised, updated or cleared.

When several sources report the same thing for a port (netdev's and the ASIC's
in-octets, ethtool's and the ASIC's PFC counters), each semantic is read from one of
them only, the one with the finest measured sample interval (on Cumulus switchd
refreshes the kernel's counters every 2 s, the ASIC source reads every 100 ms), so
nothing is counted twice and sub-second detectors see sub-second data.
"""

from __future__ import annotations

from collections import deque
from itertools import compress
from operator import itemgetter
from typing import TYPE_CHECKING, Any

from agent import logs
from agent.counters import F_NEW, F_RESET, SWTEL_ORIGIN, Batch, Container, CounterTable, StateUpdate
from agent.insights import classify
from agent.insights.base import NS, REGISTRY, SEVERITY_RANK, Detector, Event

if TYPE_CHECKING:
    from agent.config import Insights

UPDATE_NS = NS  # an open event's changed peak/message is sent at most once per second
MATERIAL = 1.10  # ... and only when its peak grew by 10 % (or severity/interfaces changed)
ELECT_NS = 5 * NS  # how often every port re-picks the finest source per semantic
_SKIP = F_NEW | F_RESET  # a baseline or a counter reset: not traffic, never an error
EVENTS_PATH = "/insights/events/event[id={id}]/state"
LEAVES = ("type", "severity", "interfaces", "start-ns", "end-ns", "peak", "peak-unit", "message", "status")


class _Feed:
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


class _Port:
    __slots__ = ("name", "feeds", "owner")

    def __init__(self, name: str) -> None:
        self.name = name
        self.feeds: list[_Feed] = []
        self.owner: dict[str, _Feed] = {}


class _Source:
    __slots__ = ("table", "layout", "feeds")

    def __init__(self, table: CounterTable, layout: classify.Layout, feeds: list[_Feed]) -> None:
        self.table = table
        self.layout = layout
        self.feeds = feeds


class InsightsRunner:
    """Runs the enabled detectors of ``cfg`` (agent.config.Insights) over counter batches."""

    name = "insights"

    def __init__(self, cfg: Insights, log: Any = None) -> None:
        self.cfg = cfg
        self.log = log if log is not None else logs.get("insights")
        self.speeds: dict[str, int] = {}
        self._detectors: dict[str, Detector] = {}
        self._sources: dict[str, _Source] = {}
        self._ports: dict[str, _Port] = {}
        self._dirty: list[_Feed] = []
        self._elect: set[str] = set()
        self._next_elect = 0
        self._open: dict[tuple[str, Any], Event] = {}
        self._recent: deque[Event] = deque()
        self._next_id = 1
        self._updates: list[StateUpdate] = []
        self._last_ts = 0
        self.raised = 0
        self.cleared = 0
        self._build_detectors()

    # ------------------------------------------------------------ configuration
    def _build_detectors(self) -> None:
        for name, cls in REGISTRY.items():
            section = getattr(self.cfg, name)
            on = self.cfg.enabled and section.enabled
            cur = self._detectors.get(name)
            if not on:
                if cur is not None:
                    del self._detectors[name]
                    for ev in [e for e in self._open.values() if e.detector == name]:
                        self._clear(ev, self._last_ts, "detector disabled")
                continue
            if cur is not None and cur.cfg == section:
                cur.cfg = section
                continue
            self._detectors[name] = cls(section, self)
        self._elect.update(self._ports)

    def reconfigure(self, cfg: Insights) -> None:
        """A config reload: detectors whose section is unchanged keep their state; a changed
        one starts afresh (its open events stay open, and clear unless it finds the fault
        again); a disabled one's open events are cleared."""
        self.cfg = cfg
        self._build_detectors()
        self._trim_history(self._last_ts)

    def set_port_speeds(self, speeds: dict[str, int]) -> None:
        """Port name -> link speed in bits/s; utilization detectors skip other ports."""
        self.speeds = dict(speeds)

    @property
    def detectors(self) -> dict[str, Detector]:
        return self._detectors

    def port_names(self) -> list[str]:
        """Every port (and RDMA device port) a source has reported so far."""
        return list(self._ports)

    # ------------------------------------------------------------ input
    def on_batch(self, batch: Batch) -> None:
        if not self._detectors or batch.snapshot:
            return
        src = self._sources.get(batch.source)
        if src is None or src.table is not batch.table:
            src = self._adopt(batch.source, batch.table)
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
        slots, feeds, deltas, flags = lay.slots, src.feeds, batch.deltas, batch.flags
        ts = batch.ts_ns
        dirty = self._dirty
        for k in sel:
            slot, key = slots[idx[k]]
            feed = feeds[slot]
            if not feed.pending:
                feed.pending = True
                feed.ts = ts
                dirty.append(feed)
            elif ts > feed.ts:  # two reads before a pass: one sample covering both
                feed.ts = ts
            if flags[k] & _SKIP:
                feed.discard = True
                continue
            d = deltas[k]
            if d:
                acc = feed.acc
                acc[key] = acc.get(key, 0) + d

    def _adopt(self, source: str, table: CounterTable) -> _Source:
        """A source's (new) table: carry its ports' feeds over by name."""
        lay = classify.layout(table)
        old = self._sources.get(source)
        before = {f.port: f for f in old.feeds} if old is not None else {}
        feeds = []
        for slot, port in enumerate(lay.ports):
            sems = frozenset(lay.sems[slot])
            feed = before.pop(port, None)
            if feed is None:
                feed = _Feed(source, port, sems)
                self._port(port).feeds.append(feed)
                self._elect.add(port)
            elif feed.sems != sems:
                feed.sems = sems
                self._elect.add(port)
            feeds.append(feed)
        for feed in before.values():
            self._drop_feed(feed)
        src = self._sources[source] = _Source(table, lay, feeds)
        return src

    def _port(self, name: str) -> _Port:
        p = self._ports.get(name)
        if p is None:
            p = self._ports[name] = _Port(name)
        return p

    def _drop_feed(self, feed: _Feed) -> None:
        feed.dead = True
        port = self._ports.get(feed.port)
        if port is None:
            return
        if feed in port.feeds:
            port.feeds.remove(feed)
        for sem in [s for s, f in port.owner.items() if f is feed]:
            del port.owner[sem]
        self._elect.add(feed.port)

    def on_delete(self, containers: Any, *rest: Any) -> None:
        """Ports (or RDMA device ports) were removed: forget them and clear their open
        events. Takes the containers (also accepts the listeners' ``(ts_ns, containers)``).
        Only whole subtrees count: ``/interfaces/interface[name=X]`` or an RDMA port's
        counters container."""
        if isinstance(containers, int) and rest:
            containers = rest[0]
        gone: set[str] = set()
        for c in containers:
            gone.update(_deleted_ports(c.path))
        gone &= set(self._ports)
        for name in sorted(gone):
            self._forget(name)

    def _forget(self, name: str) -> None:
        port = self._ports.pop(name, None)
        for feed in port.feeds if port is not None else ():
            feed.dead = True
        # A source's table lists the port until it rebuilds: fresh feeds start from a new
        # baseline should its counters move again.
        for src in self._sources.values():
            for i, feed in enumerate(src.feeds):
                if feed.port == name:
                    fresh = src.feeds[i] = _Feed(feed.source, name, feed.sems)
                    self._port(name).feeds.append(fresh)
                    self._elect.add(name)
        for det in self._detectors.values():
            det.forget(name)
        for ev in list(self._open.values()):
            det = self._detectors.get(ev.detector)
            if det is not None and det.per_port and name in ev.interfaces:
                self._clear(ev, self._last_ts, "port removed")

    # ------------------------------------------------------------ per pass
    def end_pass(self, ts_ns: int) -> list[StateUpdate]:
        ts = ts_ns
        self._last_ts = max(self._last_ts, ts)
        if ts >= self._next_elect:
            # Sources come, go and change pace: every port read by more than one looks again.
            self._next_elect = ts + ELECT_NS
            self._elect.update(name for name, p in self._ports.items() if len(p.feeds) > 1)
        if self._elect:
            self._run_elections()
        dirty, self._dirty = self._dirty, []
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
                self._elect.add(feed.port)
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
        for det in self._detectors.values():
            det.end_pass(ts)
        if self._elect:
            self._run_elections()
        return self._events_pass(ts)

    def _run_elections(self) -> None:
        """Per port and semantic, pick the feed (source) with the finest sample interval; a
        stale owner (its source stopped) gives way; otherwise switch only for 2x finer."""
        now = self._last_ts
        for name in self._elect:
            port = self._ports.get(name)
            if port is None:
                continue
            feeds = port.feeds
            sems: set[str] = set()
            for f in feeds:
                sems |= f.sems
            owned: dict[int, set[str]] = {id(f): set() for f in feeds}
            for sem in sems:
                cands = [f for f in feeds if sem in f.sems]
                best = min(cands, key=_interval)
                cur = port.owner.get(sem)
                if cur is not None and cur in cands and not _stale(cur, now):
                    if _interval(best) < 0.5 * _interval(cur):
                        cur = best
                else:
                    cur = best
                port.owner[sem] = cur
                owned[id(cur)].add(sem)
            for f in feeds:
                f.owned = frozenset(owned[id(f)])
                wanted = [d for d in self._detectors.values() if d.sems & f.owned and d.wants(name)]
                f.dispatch = [d for d in wanted if d.every_sample]
                f.lazy = [d for d in wanted if not d.every_sample]
        self._elect.clear()

    # ------------------------------------------------------------ events
    def hit(self, det: Detector, etype: str, key: Any, ts: int, severity: str, peak: float,
            unit: str, message: str, interfaces: list[str]) -> Event:
        """The detector's rule holds for ``key`` at ``ts``: raise its event, or keep it open
        and raise its peak or severity."""
        ev = self._open.get((etype, key))
        if ev is None:
            ev = Event(self._next_id, etype, severity, list(interfaces), ts, float(peak), unit, message,
                       detector=det.name, key=key, last_ns=ts, pending=True)
            self._next_id += 1
            self._open[(etype, key)] = ev
            self.raised += 1
            self.log.warning("event raised", id=ev.id, type=etype, severity=severity,
                             interfaces=",".join(ev.interfaces), peak=_round(peak), unit=unit, message=message)
            return ev
        ev.last_ns = max(ev.last_ns, ts)
        worse = SEVERITY_RANK[severity] > SEVERITY_RANK[ev.severity]
        if worse:
            ev.severity = severity
        if peak > ev.peak or worse:
            if peak > ev.peak * MATERIAL or worse or list(interfaces) != ev.interfaces:
                ev.pending = True
            ev.peak = max(ev.peak, float(peak))
            ev.unit = unit
            ev.message = message
            ev.interfaces = list(interfaces)
        return ev

    def _events_pass(self, ts: int) -> list[StateUpdate]:
        out, self._updates = self._updates, []
        for ev in list(self._open.values()):
            det = self._detectors.get(ev.detector)
            clear_after = det.clear_after_ns if det is not None else 0
            if ts - ev.last_ns >= clear_after:
                self._clear(ev, ts, "quiet")
                continue
            if ev.pending and (not ev.sent or ts - ev.sent_ns >= UPDATE_NS
                               or ev.sent.get("severity") != ev.severity):
                self._emit(ev, ts)
        if self._updates:
            out += self._updates
            self._updates = []
        return out

    def _clear(self, ev: Event, ts: int, reason: str) -> None:
        self._open.pop((ev.type, ev.key), None)
        ev.state = "cleared"
        ev.end_ns = ev.last_ns
        ev.cleared_ns = ts
        self.cleared += 1
        self._emit(ev, ts)
        self._recent.appendleft(ev)
        self.log.info("event cleared", id=ev.id, type=ev.type, interfaces=",".join(ev.interfaces),
                      reason=reason, duration_s=round((ev.last_ns - ev.start_ns) / NS, 3),
                      peak=_round(ev.peak), unit=ev.unit)
        self._trim_history(ts)

    def _trim_history(self, ts: int) -> None:
        while len(self._recent) > self.cfg.history:
            old = self._recent.pop()
            c = _container(old.id)
            self._updates += [StateUpdate(ts, c, leaf, None, "insights") for leaf in old.sent]
            old.sent = {}

    def _emit(self, ev: Event, ts: int) -> None:
        values = {
            "type": ev.type,
            "severity": ev.severity,
            "interfaces": ",".join(ev.interfaces),
            "start-ns": ev.start_ns,
            "end-ns": ev.end_ns,
            "peak": float(ev.peak),
            "peak-unit": ev.unit,
            "message": ev.message,
            "status": ev.state,
        }
        c = _container(ev.id)
        for leaf in LEAVES:
            value = values[leaf]
            if value is None or ev.sent.get(leaf) == value:
                continue
            ev.sent[leaf] = value
            self._updates.append(StateUpdate(ts, c, leaf, value, "insights"))
        ev.sent_ns = ts
        ev.pending = False

    # ------------------------------------------------------------ status
    def status(self) -> dict[str, Any]:
        return {
            "open": [ev.as_dict() for ev in sorted(self._open.values(), key=lambda e: e.id)],
            "recent": [ev.as_dict() for ev in self._recent],
        }

    def open_events(self) -> list[Event]:
        return sorted(self._open.values(), key=lambda e: e.id)


def _container(event_id: int) -> Container:
    return Container(SWTEL_ORIGIN, EVENTS_PATH.format(id=event_id))


def _interval(feed: _Feed) -> float:
    return feed.interval if feed.interval is not None else float("inf")


def _stale(feed: _Feed, now: int) -> bool:
    """The feed's source stopped sending (turned off, or its table lost the port)."""
    if feed.dead:
        return True
    if not feed.prev_ts or feed.interval is None:
        return False
    return now - feed.prev_ts > max(5 * NS, 10 * feed.interval)


def _round(x: float) -> float:
    return float(f"{x:.3g}")


def _unescape_key(text: str, start: int) -> tuple[str, int]:
    """The key value starting at ``text[start]`` up to its unescaped ``]``: (value, index of ']')."""
    out = []
    i = start
    while i < len(text):
        ch = text[i]
        if ch == "\\" and i + 1 < len(text):
            out.append(text[i + 1])
            i += 2
            continue
        if ch == "]":
            return "".join(out), i
        out.append(ch)
        i += 1
    return "".join(out), i


def _deleted_ports(path: str) -> list[str]:
    """Port names whose whole data a deleted container path removes."""
    head = "/interfaces/interface[name="
    if path.startswith(head):
        name, end = _unescape_key(path, len(head))
        return [name] if path[end + 1:] in ("", "/") else []
    head = "/rdma/devices/device[name="
    if path.startswith(head):
        dev, end = _unescape_key(path, len(head))
        rest = path[end + 1:]
        if rest in ("", "/"):
            return [dev]
        if rest.startswith("/ports/port[id="):
            port, end2 = _unescape_key(rest, len("/ports/port[id="))
            if rest[end2 + 1:] in ("", "/", "/hw-counters"):
                return [f"{dev}/{port}", dev]
    return []
