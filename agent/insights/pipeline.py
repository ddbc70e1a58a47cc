"""The insights pipeline: counter batches in, events out (gNMI state updates, log, status).

Per change (tick thread, ``on_batch``) the changes the detectors read go into the
port's *feed* (what one source saw of one port since its previous sample: feeds.py).
Once per engine pass (``end_pass``) the ports' sources are elected where due (each
semantic read from the source with the finest sample interval: election.py), each feed
that changed becomes one sample ``(ts, dt, deltas)`` for the detectors that read it,
then events are raised, updated or cleared (the event book: events.py). A deleted
container forgets the ports whose whole subtree it removes (paths.py).

The pipeline builds the enabled detectors of the config and is their context
(``base.Context``): ``ctx.hit`` raises or keeps an event, ``ctx.speeds`` holds the ports'
link speeds.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from agent import logs
from agent.counters import Batch, StateUpdate
from agent.insights.base import REGISTRY, Detector, Event
from agent.insights.election import Election
from agent.insights.events import EventBook
from agent.insights.feeds import FeedBook, Port
from agent.insights.neighbors import FarEnds
from agent.insights.paths import deleted_ports
from agent.listener import Listener

if TYPE_CHECKING:
    from agent.config import Insights

MACHINERY = True  # runs the detectors, not a plugin (agent/registry.py load_plugins)


class InsightsPipeline(Listener):
    """Runs the enabled detectors of ``cfg`` (agent.config.Insights) over counter batches."""

    name = "insights"

    def __init__(self, cfg: Insights, log: Any = None) -> None:
        self.cfg = cfg
        self.log = log if log is not None else logs.get("insights")
        self.speeds: dict[str, int] = {}
        self._detectors: dict[str, Detector] = {}
        self._feeds = FeedBook()
        self._ports: dict[str, Port] = self._feeds.ports  # the same dict, by port name
        self._election = Election()
        #: each port's far end, from the states the sources declare (sources.lldp's neighbours)
        self.far_ends = FarEnds()
        self._events = EventBook(self.log, cfg.history, self.far_ends)
        self._last_ts = 0
        self._retired: list[StateUpdate] = []  # a disabled detector's last states (its gauges' deletes)
        self._build_detectors()

    # ------------------------------------------------------------ configuration
    def _build_detectors(self) -> None:
        self._feeds.shared.clear()  # (the feeds split their lists again with the election below)
        for name, cls in REGISTRY.items():
            section = getattr(self.cfg, name)
            on = self.cfg.enabled and section.enabled
            cur = self._detectors.get(name)
            if not on:
                if cur is not None:
                    del self._detectors[name]
                    # derived gauges leave the store, not stay at their last value
                    self._retired += cur.retire(self._last_ts)
                    for ev in [e for e in self._events.open.values() if e.detector == name]:
                        self._events.clear(ev, self._last_ts, "detector disabled")
                continue
            if cur is not None and cur.cfg == section:
                cur.cfg = section
                continue
            self._detectors[name] = cls(section, self)
        self._feeds.elect.update(self._ports)

    def reconfigure(self, cfg: Insights) -> None:
        """A config reload: detectors whose section is unchanged keep their state; a changed
        one starts afresh (its open events stay open, and clear unless it finds the fault
        again); a disabled one's open events are cleared."""
        self.cfg = cfg
        self._events.history = cfg.history
        self._build_detectors()
        self._events.trim(self._last_ts)

    def set_port_speeds(self, speeds: dict[str, int]) -> None:
        """Port name -> link speed in bits/s; utilization detectors skip other ports."""
        self.speeds = dict(speeds)

    # ------------------------------------------------------------ the engine's Listener contract
    # (agent/exporters/base.py): the engine feeds the pipeline as it feeds the exporters, and
    # takes its events from end_pass.
    def start(self, store: Any) -> None:
        """Nothing to open (the detectors keep their own state): the far ends the store
        already holds are read (a pipeline made by a reload starts after the neighbours came)."""
        if store is not None:
            self.far_ends.on_state(store.states())

    def stop(self, timeout: float) -> None:
        """Nothing to flush."""

    def on_state(self, updates: list[StateUpdate]) -> None:
        """States (oper-status, the pipeline's own events) feed no detector; the ones that name a
        port's far end (LLDP neighbours, an RDMA port's netdev) name it in the events."""
        self.far_ends.on_state(updates)

    def on_port_speeds(self, speeds: dict[str, int]) -> None:
        self.set_port_speeds(speeds)

    def on_config(self, cfg: Any) -> None:
        """A reload, applied on the tick thread: the ``insights`` section, if it changed."""
        if cfg.insights != self.cfg:
            self.reconfigure(cfg.insights)

    @property
    def detectors(self) -> dict[str, Detector]:
        return self._detectors

    @property
    def raised(self) -> int:
        """Events raised since start."""
        return self._events.raised

    @property
    def cleared(self) -> int:
        """Events cleared since start."""
        return self._events.cleared

    def port_names(self) -> list[str]:
        """Every port (and RDMA device port) a source has reported so far."""
        return list(self._ports)

    # ------------------------------------------------------------ input
    def on_batch(self, batch: Batch) -> None:
        if not self._detectors or batch.snapshot:
            return
        self._feeds.add(batch)

    def on_delete(self, containers: Any, *rest: Any) -> None:
        """Ports (or RDMA device ports) were removed: forget them and clear their open
        events. Takes the containers (also accepts the listeners' ``(ts_ns, containers)``).
        Only whole subtrees count: ``/interfaces/interface[name=X]`` or an RDMA port's
        counters container."""
        if isinstance(containers, int) and rest:
            containers = rest[0]
        gone: set[str] = set()
        for c in containers:
            gone.update(deleted_ports(c.path))
        gone &= set(self._ports)
        for name in sorted(gone):
            self._forget(name)

    def _forget(self, name: str) -> None:
        self._feeds.forget(name)
        for det in self._detectors.values():
            det.forget(name)
        for ev in list(self._events.open.values()):
            det = self._detectors.get(ev.detector)
            if det is not None and det.per_port and name in ev.interfaces:
                self._events.clear(ev, self._last_ts, "port removed")

    # ------------------------------------------------------------ per pass
    def end_pass(self, ts_ns: int) -> list[StateUpdate]:
        ts = ts_ns
        self._last_ts = max(self._last_ts, ts)
        self._election.due(self._feeds, ts)
        if self._feeds.elect:
            self._election.run(self._feeds, self._detectors.values(), self._last_ts)
        self._feeds.flush()
        for det in self._detectors.values():
            det.end_pass(ts)
        if self._feeds.elect:
            self._election.run(self._feeds, self._detectors.values(), self._last_ts)
        out = self._events.end_pass(ts, self._clear_after_ns)
        out += self._retired
        self._retired = []
        for det in self._detectors.values():
            out += det.states()  # derived gauges (link_degrading's FLR), with the events
        return out

    def _clear_after_ns(self, detector: str) -> int:
        det = self._detectors.get(detector)
        return det.clear_after_ns if det is not None else 0

    # ------------------------------------------------------------ events
    def hit(self, det: Detector, etype: str, key: Any, ts: int, severity: str, peak: float,
            unit: str, message: str, interfaces: list[str]) -> Event:
        """The detector's rule holds for ``key`` at ``ts``: raise its event, or keep it open
        and raise its peak or severity (the event book's)."""
        return self._events.hit(det, etype, key, ts, severity, peak, unit, message, interfaces)

    # ------------------------------------------------------------ status
    def status(self) -> dict[str, Any]:
        out = self._events.status()
        notes = self._detector_notes()
        if notes:
            out["detectors"] = notes
        return out

    def _detector_notes(self) -> dict[str, dict[str, Any]]:
        """Per detector, what it says of itself, and (for one with ``no_data`` words) that it
        has no data when ports are reported but no source carries any semantic it reads (say
        buffer data turned off)."""
        carried: set[str] = set()
        for port in self._ports.values():
            for feed in port.feeds:
                carried |= feed.sems
        notes = {}
        for name, det in self._detectors.items():
            note = det.status() or {}
            if det.no_data and self._ports and carried.isdisjoint(det.sems):
                note = {"data": False, "note": det.no_data, **note}
            if note:
                notes[name] = note
        return notes

    def open_events(self) -> list[Event]:
        return self._events.open_events()

    def open_event_counts(self) -> dict[str, int]:
        """Open events by severity (agent/sources/events.py makes them gauges)."""
        return self._events.open_counts()
