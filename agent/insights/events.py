"""The event book: the events the detectors raise, kept open while their rule holds,
cleared after ``clear_after`` without a hit, and sent as gNMI state updates
(``swtel:/insights/events/event[id=N]/state``); the last ``history`` cleared ones are kept
for ``swtel status``, and an event leaving the history is deleted from gNMI.

Every event names the far end of its ports when it is known (``neighbor``: ``leaf-3 swp61``,
agent/insights/neighbors.py), here, where events are made: the log line, the gNMI leaf, status
and the exporters' event series all take it from the event. An open event takes a far end
learnt after it was raised, or a new one (a port re-cabled); a far end that goes unknown leaves
the last one named (the event happened on that link).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import Any

from agent.counters import SWTEL_ORIGIN, Container, StateUpdate
from agent.insights.base import NS, SEVERITY_RANK, Detector, Event
from agent.insights.neighbors import FarEnds

MACHINERY = True  # the pipeline's, not a plugin (agent/registry.py load_plugins)

UPDATE_NS = NS  # an open event's changed peak/message is sent at most once per second
MATERIAL = 1.10  # ... and only when its peak grew by 10 % (or severity/interfaces changed)
EVENTS_PATH = "/insights/events/event[id={id}]/state"
LEAVES = ("type", "severity", "interfaces", "start-ns", "end-ns", "peak", "peak-ns", "peak-unit", "message",
          "status", "lane", "neighbor")  # lane: only an event of one lane has it (link-degrading's); neighbor:
# only one whose far end is known


class EventBook:
    """Open events by (type, key), the recently cleared ones, and the state updates due."""

    def __init__(self, log: Any, history: int, far_ends: FarEnds | None = None) -> None:
        self.log = log
        self.far_ends = far_ends if far_ends is not None else FarEnds()
        self._far_generation = self.far_ends.generation
        self.history = history  # how many cleared events are kept
        self.open: dict[tuple[str, Any], Event] = {}
        self.recent: deque[Event] = deque()
        #: ``recent`` as status shows it, each made once when its event cleared (a cleared event
        #: no longer changes): a status copies this deque instead of rebuilding every dict on
        #: the tick thread. Shared with the replies, so never mutated, only appended and popped.
        self._recent_view: deque[dict[str, Any]] = deque()
        self.next_id = 1
        self.updates: list[StateUpdate] = []
        self.raised = 0
        self.cleared = 0

    def hit(self, det: Detector, etype: str, key: Any, ts: int, severity: str, peak: float,
            unit: str, message: str, interfaces: list[str]) -> Event:
        """The detector's rule holds for ``key`` at ``ts``: raise its event, or keep it open
        and raise its peak or severity."""
        ev = self.open.get((etype, key))
        if ev is None:
            ev = Event(self.next_id, etype, severity, list(interfaces), ts, float(peak), unit, message,
                       detector=det.name, key=key, last_ns=ts, peak_ns=ts, pending=True)
            self.next_id += 1
            self.open[(etype, key)] = ev
            self.raised += 1
            self._name_far_end(ev)
            far = {"neighbor": ev.neighbor} if ev.neighbor else {}
            self.log.warning("event raised", id=ev.id, type=etype, severity=severity,
                             interfaces=",".join(ev.interfaces), peak=_round(peak), unit=unit, message=message,
                             **far)
            return ev
        ev.last_ns = max(ev.last_ns, ts)
        worse = SEVERITY_RANK[severity] > SEVERITY_RANK[ev.severity]
        if worse:
            ev.severity = severity
        if peak > ev.peak or worse:
            if peak > ev.peak * MATERIAL or worse or list(interfaces) != ev.interfaces:
                ev.pending = True
            if peak > ev.peak:
                ev.peak_ns = ts
            ev.peak = max(ev.peak, float(peak))
            ev.unit = unit
            ev.message = message
            if list(interfaces) != ev.interfaces:
                ev.interfaces = list(interfaces)
                self._name_far_end(ev)
        return ev

    def _name_far_end(self, ev: Event) -> None:
        """The one rule: an event names its ports' far end once known (and a changed one)."""
        name = self.far_ends.of_ports(ev.interfaces)
        if name and name != ev.neighbor:
            ev.neighbor = name
            ev.pending = True

    def end_pass(self, ts: int, clear_after_ns: Callable[[str], int]) -> list[StateUpdate]:
        """Clear the events quiet for their detector's ``clear_after`` (``clear_after_ns(name)``),
        send the changed ones; every state update due."""
        out, self.updates = self.updates, []
        if self.far_ends.generation != self._far_generation:  # a far end learnt or changed
            self._far_generation = self.far_ends.generation
            for ev in self.open.values():
                self._name_far_end(ev)
        for ev in list(self.open.values()):
            if ts - ev.last_ns >= clear_after_ns(ev.detector):
                self.clear(ev, ts, "quiet")
                continue
            if ev.pending and (not ev.sent or ts - ev.sent_ns >= UPDATE_NS
                               or ev.sent.get("severity") != ev.severity):
                self._emit(ev, ts)
        if self.updates:
            out += self.updates
            self.updates = []
        return out

    def clear(self, ev: Event, ts: int, reason: str) -> None:
        self.open.pop((ev.type, ev.key), None)
        ev.state = "cleared"
        ev.end_ns = ev.last_ns
        ev.cleared_ns = ts
        self.cleared += 1
        self._emit(ev, ts)
        self.recent.appendleft(ev)
        self._recent_view.appendleft(ev.as_dict())
        far = {"neighbor": ev.neighbor} if ev.neighbor else {}
        self.log.info("event cleared", id=ev.id, type=ev.type, interfaces=",".join(ev.interfaces),
                      reason=reason, duration_s=round((ev.last_ns - ev.start_ns) / NS, 3),
                      peak=_round(ev.peak), unit=ev.unit, **far)
        self.trim(ts)

    def trim(self, ts: int) -> None:
        """Events beyond the history are deleted from gNMI."""
        while len(self.recent) > self.history:
            old = self.recent.pop()
            self._recent_view.pop()
            c = _container(old.id)
            self.updates += [StateUpdate(ts, c, leaf, None, "insights") for leaf in old.sent]
            old.sent = {}

    def _emit(self, ev: Event, ts: int) -> None:
        values = {
            "type": ev.type,
            "severity": ev.severity,
            "interfaces": ",".join(ev.interfaces),
            "start-ns": ev.start_ns,
            "end-ns": ev.end_ns,
            "peak": float(ev.peak),
            "peak-ns": ev.peak_ns,
            "peak-unit": ev.unit,
            "message": ev.message,
            "status": ev.state,
            "lane": getattr(ev, "lane", None),  # set by the detector that raised it, if any
            "neighbor": ev.neighbor or None,
        }
        c = _container(ev.id)
        for leaf in LEAVES:
            value = values[leaf]
            if value is None or ev.sent.get(leaf) == value:
                continue
            ev.sent[leaf] = value
            self.updates.append(StateUpdate(ts, c, leaf, value, "insights"))
        ev.sent_ns = ts
        ev.pending = False

    # ------------------------------------------------------------ status
    def status(self) -> dict[str, Any]:
        """Open and recently cleared events, copied: call it on the tick thread (it iterates
        what the tick thread mutates); the copy may go to any thread."""
        return {
            "open": [ev.as_dict() for ev in self.open_events()],
            "recent": list(self._recent_view),
        }

    def open_events(self) -> list[Event]:
        return sorted(self.open.values(), key=lambda e: e.id)

    def open_counts(self) -> dict[str, int]:
        """How many events are open, by severity (only the severities that have one)."""
        out: dict[str, int] = {}
        for ev in self.open.values():
            out[ev.severity] = out.get(ev.severity, 0) + 1
        return out


def _container(event_id: int) -> Container:
    return Container(SWTEL_ORIGIN, EVENTS_PATH.format(id=event_id))


def _round(x: float) -> float:
    return float(f"{x:.3g}")
