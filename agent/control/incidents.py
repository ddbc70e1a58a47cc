"""Incidents: a fabric's events grouped by topology and time, where they meet (the collector of
``swtel demo`` and ``swtel fabric``, ``swtel top --fabric``'s poll of the agents).

A host's RoCE retransmissions (``roce-retrans``) and a link fault (:data:`LINK_FAULTS`) on a
fabric link that lies on the host's possible paths, within ``window`` of each other, form one
incident, which names the suspect port first::

    host-1 mlx5_0: RoCE retransmissions; suspect spine-1 swp11s1 (symbol errors from +3.0 s),
    on host-1's paths via leaf-3 swp61–64

The topology is the LLDP neighbours the agents stream (sources.lldp's OpenConfig leaves), never a
topology file: a link is two (device, port) ends, known from either end's LLDP (a host that runs
no lldpd is still seen by its leaf). A host's possible paths are found breadth first, without
roles: the links outward from the host (each to a device no nearer the host), at most ``hops``
links deep, never through another host (an end point forwards nothing). In a two-tier Clos the
three hops are host → its leaf, the leaf's uplinks → the spines, the spines' ports → the other
leaves. A host is a device that counts RoCE (its events, an RDMA port's netdev) or that its
neighbours see with a MAC for a port id (lldpd on a host sends the MAC; Cumulus the ifname).

Plain data in, plain data out: :class:`Neighbor` and :class:`Event` tuples, times in ns, the
caller's clock (``now_ns``), so a test builds a fabric by hand. :class:`StreamView` turns what the
agents send (gNMI paths and values, as the collector's lines carry them) into that data;
:class:`IncidentBook` keeps the incidents of a run and says which are new.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, NamedTuple

from agent.control.printable import printable
from agent.pathgrammar import split, split_origin

NS = 1_000_000_000
#: the symptom: a host's RoCE retransmissions (insights.roce_retrans)
SYMPTOM = "roce-retrans"
#: faults of a link, in the order a suspect's kinds are named when several start together
LINK_FAULTS = ("symbol-ber", "pre-fec-ber", "link-degrading", "error-burst", "link-flap", "drop-reason")
#: how an incident names each fault
FAULT_WORDS = {"symbol-ber": "symbol errors", "pre-fec-ber": "pre-FEC errors", "link-degrading": "a degrading link",
               "error-burst": "errors", "link-flap": "flaps", "drop-reason": "drops"}
#: a symptom and a fault whose times (start to end, or to now while open) come this close are one story
WINDOW_NS = 10 * NS
#: links from the host: host → leaf → spine → the other leaves (a two-tier Clos)
HOPS = 3
#: the OpenConfig LLDP leaves that say who is at the far end
_LLDP_LEAVES = ("system-name", "port-id", "port-id-type", "port-description")
_EVENT_LEAVES = ("type", "interfaces", "start-ns", "end-ns", "status")
_PORT_NUMBER = re.compile(r"^(.*?)(\d+)$")


class Neighbor(NamedTuple):
    """What ``device`` learnt by LLDP on ``port``: ``peer`` (its system name) at ``peer_port``;
    ``peer_is_host`` when the peer gave a MAC for its port id, as lldpd on a host does."""

    device: str
    port: str
    peer: str
    peer_port: str
    peer_is_host: bool = False


class Event(NamedTuple):
    """An insight event of one device: its type, the ports it names, when it started and ended
    (``end_ns`` None: still open), and the device's id for it."""

    device: str
    kind: str
    ports: tuple[str, ...]
    start_ns: int
    end_ns: int | None = None
    ident: str = ""


@dataclass(frozen=True)
class Suspect:
    """A port on the host's paths whose link faults came within the window of the symptom."""

    device: str
    port: str
    kinds: tuple[str, ...]  # its fault types, the first to start first
    start_ns: int  # its first fault's start
    hop: int  # 1: the host's own link, 2: the leaf's uplinks, 3: the spines' ports down

    def words(self, origin_ns: int | None) -> str:
        first, *later = (FAULT_WORDS.get(k, k) for k in self.kinds)
        then = f", then {', '.join(later)}" if later else ""
        return f"{self.device} {self.port} ({first} from {when(self.start_ns, origin_ns)}{then})"


@dataclass(frozen=True)
class Incident:
    """One host's retransmissions and the suspect ports, most likely first."""

    host: str
    host_port: str  # as its event names it (``mlx5_0``)
    symptom_id: str
    symptom_start_ns: int
    symptom_end_ns: int | None
    suspects: tuple[Suspect, ...]
    via: tuple[tuple[str, tuple[str, ...]], ...]  # (leaf, the leaf's uplinks on the host's paths)

    @property
    def key(self) -> tuple[str, str, str]:
        return self.host, self.host_port, self.symptom_id

    @property
    def formed_ns(self) -> int:
        """When both halves were known: the later of the symptom's start and the first suspect's."""
        return max(self.symptom_start_ns, min(s.start_ns for s in self.suspects))

    @property
    def first_ns(self) -> int:
        """The first of the two events."""
        return min(self.symptom_start_ns, min(s.start_ns for s in self.suspects))

    def text(self, origin_ns: int | None = None) -> str:
        """The incident in one line; times as seconds from ``origin_ns``, else UTC clock times."""
        first, *others = self.suspects
        also = "".join(f", also {s.words(origin_ns)}" for s in others)
        via = "; ".join(f"{leaf} {port_ranges(ports)}" if ports else leaf for leaf, ports in self.via)
        return (f"{self.host} {self.host_port}: RoCE retransmissions; suspect {first.words(origin_ns)}{also}, "
                f"on {self.host}'s paths via {via or 'its link'}")


def when(ns: int, origin_ns: int | None) -> str:
    if origin_ns is None:
        return time.strftime("%H:%M:%S", time.gmtime(ns / NS)) + f".{ns // 100_000_000 % 10}Z"
    return f"{(ns - origin_ns) / NS:+.1f} s"


def port_ranges(ports: Iterable[str]) -> str:
    """``swp61, swp62, swp63, swp64`` -> ``swp61–64``; other names as they are, comma-separated."""
    runs: list[tuple[str, int, int]] = []
    plain: list[str] = []
    for port in sorted(set(ports), key=_port_order):
        m = _PORT_NUMBER.match(port)
        if m is None:
            plain.append(port)
            continue
        stem, n = m.group(1), int(m.group(2))
        if runs and runs[-1][0] == stem and runs[-1][2] == n - 1 and not m.group(2).startswith("0"):
            runs[-1] = (stem, runs[-1][1], n)
        else:
            runs.append((stem, n, n))
    out = [f"{s}{a}" if a == b else f"{s}{a}–{b}" for s, a, b in runs]
    return ", ".join(out + plain)


def _port_order(port: str) -> tuple[str, int, str]:
    m = _PORT_NUMBER.match(port)
    return (m.group(1), int(m.group(2)), port) if m else (port, -1, port)


# ---------------------------------------------------------------- the topology


def links(neighbors: Iterable[Neighbor]) -> dict[tuple[str, str], tuple[str, str]]:
    """(device, port) -> (device, port) at the link's far end, from either end's report (a
    device's own report wins for its own port)."""
    far: dict[tuple[str, str], tuple[str, str]] = {}
    told = list(neighbors)
    for n in told:
        far[(n.device, n.port)] = (n.peer, n.peer_port)
    for n in told:
        far.setdefault((n.peer, n.peer_port), (n.device, n.port))
    return far


def host_paths(host: str, host_ports: Iterable[str], far: dict[tuple[str, str], tuple[str, str]],
               hosts: set[str], hops: int = HOPS) -> dict[tuple[str, str], int]:
    """Every port end on ``host``'s possible paths (both ends of each link) -> its hop (1: the
    host's own link). Breadth first from the host's ports (those of ``host_ports`` that have a
    link, else all of the host's), each link to a device no nearer the host, never through
    another host."""
    ports_of: dict[str, list[str]] = {}
    for dev, port in far:
        ports_of.setdefault(dev, []).append(port)
    mine = sorted(ports_of.get(host, []))
    wanted = [p for p in mine if p in set(host_ports)] or mine
    depth = {host: 0}
    on_path: dict[tuple[str, str], int] = {}
    frontier = [(host, p) for p in wanted]
    for hop in range(1, hops + 1):
        reached: list[str] = []
        for dev, port in frontier:
            peer, peer_port = far[(dev, port)]
            if depth.get(peer, hop) < hop or (peer in hosts and peer != host):
                continue  # back towards the host, sideways, or into an end point
            depth.setdefault(peer, hop)
            on_path.setdefault((dev, port), hop)
            on_path.setdefault((peer, peer_port), hop)
            reached.append(peer)
        frontier = [(dev, p) for dev in dict.fromkeys(reached) for p in sorted(ports_of.get(dev, []))]
    return on_path


# ---------------------------------------------------------------- grouping


def correlate(events: Iterable[Event], neighbors: Iterable[Neighbor], now_ns: int, *,
              hosts: Iterable[str] = (), netdevs: dict[tuple[str, str], str] | None = None,
              window_ns: int = WINDOW_NS, hops: int = HOPS) -> list[Incident]:
    """The incidents among ``events`` at ``now_ns``: each host's ``roce-retrans`` event with the
    link faults on its paths whose time (start to end, to ``now_ns`` while open) comes within
    ``window_ns`` of its own. ``netdevs``: (host, RDMA port as its event names it) -> the netdev
    lldpd runs on; ``hosts``: devices known to be hosts besides those the data shows."""
    evs = list(events)
    told = list(neighbors)
    far = links(told)
    end_points = set(hosts) | {n.peer for n in told if n.peer_is_host} | {e.device for e in evs if e.kind == SYMPTOM}
    netdevs = netdevs or {}
    faults = [e for e in evs if e.kind in LINK_FAULTS]
    out = []
    for sym in sorted((e for e in evs if e.kind == SYMPTOM), key=lambda e: (e.start_ns, e.device, e.ident)):
        for port in sym.ports or ("",):
            names = {port, netdevs.get((sym.device, port), port)}
            if "/" not in port:
                names.add(netdevs.get((sym.device, f"{port}/1"), port))
            on_path = host_paths(sym.device, names, far, end_points, hops)
            hit: dict[tuple[str, str], list[Event]] = {}
            for f in faults:
                if not _near(sym, f, now_ns, window_ns):
                    continue
                for p in f.ports:
                    if (f.device, p) in on_path:
                        hit.setdefault((f.device, p), []).append(f)
            if not hit:
                continue
            suspects = [_suspect(end, fs, on_path[end]) for end, fs in hit.items()]
            # the fault that began nearest the symptom first; then the nearer hop, then by name
            suspects.sort(key=lambda s: (abs(s.start_ns - sym.start_ns), s.hop, s.device, s.port))
            via = _via(sym.device, on_path, far)
            out.append(Incident(sym.device, port, sym.ident, sym.start_ns, sym.end_ns, tuple(suspects), via))
    return out


def _near(a: Event, b: Event, now_ns: int, window_ns: int) -> bool:
    a_end = now_ns if a.end_ns is None else a.end_ns
    b_end = now_ns if b.end_ns is None else b.end_ns
    return b.start_ns <= a_end + window_ns and a.start_ns <= b_end + window_ns


def _suspect(end: tuple[str, str], faults: list[Event], hop: int) -> Suspect:
    faults = sorted(faults, key=lambda e: (e.start_ns, LINK_FAULTS.index(e.kind)))
    kinds = tuple(dict.fromkeys(e.kind for e in faults))
    return Suspect(end[0], end[1], kinds, faults[0].start_ns, hop)


def _via(host: str, on_path: dict[tuple[str, str], int], far: dict[tuple[str, str], tuple[str, str]]
         ) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """The host's leaves (its link's far ends) and each leaf's ports on the second hop."""
    leaves = sorted({far[(dev, port)][0] for (dev, port), hop in on_path.items() if hop == 1 and dev == host})
    return tuple((leaf, tuple(sorted((p for (d, p), hop in on_path.items() if d == leaf and hop == 2),
                                     key=_port_order))) for leaf in leaves)


class IncidentBook:
    """The incidents of a run, newest view of each: :meth:`update` returns those that formed
    since the last call."""

    def __init__(self) -> None:
        self.incidents: dict[tuple[str, str, str], Incident] = {}

    def update(self, found: Iterable[Incident]) -> list[Incident]:
        new = []
        for inc in found:
            if inc.key not in self.incidents:
                new.append(inc)
            self.incidents[inc.key] = inc
        return new

    def all(self) -> list[Incident]:
        return sorted(self.incidents.values(), key=lambda i: (i.formed_ns, i.key))


class IncidentPrinter:
    """The incidents of a fabric whose stream a collector receives (``Collector(on_lines=
    view.on_lines)``) as lines for people: times as seconds from ``origin_ns`` (a simulated
    fabric's start), else UTC clock times."""

    def __init__(self, view: StreamView, origin_ns: int | None = None) -> None:
        self.view = view
        self.origin_ns = origin_ns
        self.book = IncidentBook()

    def rel(self, ns: int) -> str:
        return when(ns, None) if self.origin_ns is None else f"{(ns - self.origin_ns) / NS:+7.1f}s"

    def update(self, now_ns: int | None = None) -> list[str]:
        """One line for each incident formed since the last call."""
        found = self.view.incidents(time.time_ns() if now_ns is None else now_ns)
        # names and ports arrive over gNMI: never terminal control
        return [printable(f"{self.rel(inc.formed_ns)}  INCIDENT {inc.text(self.origin_ns)}")
                for inc in self.book.update(found)]

    def summary_lines(self) -> list[str]:
        """Every incident of the run as it stands now, when it formed first."""
        rows = [printable(f"{self.rel(inc.formed_ns)}  {inc.text(self.origin_ns)}") for inc in self.book.all()]
        return rows or ["(no incidents)"]


# ---------------------------------------------------------------- from the stream


class StreamView:
    """What the agents send that incidents need, from gNMI paths and values (the collector's
    lines, ``{"target", "path", "value"}`` with ``"delete": true`` for a delete; the control
    socket's ``states`` and ``ports`` replies): LLDP neighbours, RDMA ports' netdevs and
    insight events, per target. Thread-safe: collectors call :meth:`on_lines` from their
    receiving threads."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._lldp: dict[tuple[str, str, str], dict[str, Any]] = {}  # (target, port, neighbour id) -> leaves
        self._netdevs: dict[tuple[str, str], str] = {}  # (target, "dev/port") -> netdev
        self._events: dict[tuple[str, str], dict[str, Any]] = {}  # (target, event id) -> leaves
        self._rdma: set[str] = set()  # targets with an RDMA port

    def on_lines(self, lines: list[dict[str, Any]], _rx_ns: int = 0) -> None:
        """A collector's callback (``Collector(on_lines=)``): each update or delete."""
        with self._lock:
            for line in lines:
                path = line.get("path")
                if isinstance(path, str):
                    self._take(str(line.get("target", "")), path, None if line.get("delete") else line.get("value"))

    def add_events(self, target: str, events: Iterable[dict[str, Any]]) -> None:
        """Events as an agent's status or ``ports`` reply lists them (``as_dict``)."""
        with self._lock:
            for ev in events:
                self._events[(target, str(ev.get("id")))] = {
                    "type": ev.get("type"), "interfaces": ",".join(ev.get("interfaces") or ()),
                    "start-ns": ev.get("start_ns"), "end-ns": ev.get("end_ns"), "status": ev.get("state")}

    def _take(self, target: str, path: str, value: Any) -> None:
        origin, rest = split_origin(path)
        if not (rest.startswith("/lldp/") or rest.startswith("/rdma/") or rest.startswith("/insights/events/")):
            return
        try:
            elems = split(rest)
        except ValueError:
            return
        names = [e[0] for e in elems]
        if names[:6] == ["lldp", "interfaces", "interface", "neighbors", "neighbor", "state"]:
            key = (target, elems[2][1].get("name", ""), elems[4][1].get("id", ""))
            self._set(self._lldp, key, names[6:], value, _LLDP_LEAVES)
        elif origin == "swtel" and names[:6] == ["rdma", "devices", "device", "ports", "port", "state"]:
            self._rdma.add(target)
            port = (target, f"{elems[2][1].get('name', '')}/{elems[4][1].get('id', '')}")
            if names[6:] in (["netdev"], []):
                if value is None:
                    self._netdevs.pop(port, None)
                elif names[6:] == ["netdev"] and isinstance(value, str):
                    self._netdevs[port] = value
        elif origin == "swtel" and names[:4] == ["insights", "events", "event", "state"]:
            key = (target, elems[2][1].get("id", ""))
            if value is not None:  # a delete trims the agent's history: the incident keeps it
                self._set(self._events, key, names[4:], value, _EVENT_LEAVES)

    @staticmethod
    def _set(table: dict, key: tuple, rest: list[str], value: Any, wanted: tuple[str, ...]) -> None:
        if not rest or value is None:  # the container or a leaf deleted
            if not rest:
                table.pop(key, None)
            elif key in table:
                table[key].pop(rest[0], None)
            return
        if len(rest) == 1 and rest[0] in wanted:
            table.setdefault(key, {})[rest[0]] = value

    def neighbors(self) -> list[Neighbor]:
        with self._lock:
            items = list(self._lldp.items())
        out = []
        for (target, port, _nid), leaves in items:
            peer = leaves.get("system-name")
            if not isinstance(peer, str) or not peer:
                continue
            by_name = leaves.get("port-id-type") == "INTERFACE_NAME" and isinstance(leaves.get("port-id"), str)
            # a host's lldpd sends its MAC as port id and its ifname as description
            peer_port = leaves.get("port-id") if by_name else (leaves.get("port-description") or leaves.get("port-id"))
            if isinstance(peer_port, str) and peer_port:
                out.append(Neighbor(target, port, peer, peer_port, leaves.get("port-id-type") == "MAC_ADDRESS"))
        return out

    def netdevs(self) -> dict[tuple[str, str], str]:
        with self._lock:
            return dict(self._netdevs)

    def hosts(self) -> set[str]:
        with self._lock:
            return set(self._rdma)

    def events(self) -> list[Event]:
        with self._lock:
            items = list(self._events.items())
        out = []
        for (target, ident), leaves in items:
            kind, start = leaves.get("type"), leaves.get("start-ns")
            if not isinstance(kind, str) or not isinstance(start, int):
                continue  # not all of it has come yet
            end = leaves.get("end-ns") if leaves.get("status") == "cleared" else None
            ports = tuple(p for p in str(leaves.get("interfaces") or "").split(",") if p)
            out.append(Event(target, kind, ports, start, end if isinstance(end, int) else None, ident))
        return out

    def incidents(self, now_ns: int, window_ns: int = WINDOW_NS, hops: int = HOPS) -> list[Incident]:
        return correlate(self.events(), self.neighbors(), now_ns, hosts=self.hosts(), netdevs=self.netdevs(),
                         window_ns=window_ns, hops=hops)
