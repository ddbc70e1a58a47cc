"""Link tracking with pyroute2 (the slow path): discovery, add/delete/rename
events and oper-status. The tick engine asks :meth:`LinkTracker.changed` each
tick, which costs one integer comparison; tables are rebuilt only after an event.
"""

from __future__ import annotations

import fnmatch
import socket
import threading
from dataclasses import dataclass

from pyroute2 import IPRoute
from pyroute2.netlink.exceptions import NetlinkError

from agent import logs

log = logs.get("links")

RTMGRP_LINK = 0x1
IFF_UP = 0x1

# IFLA_OPERSTATE (RFC 2863) -> OpenConfig oper-status.
_OPER = {
    "UNKNOWN": "UNKNOWN",
    "NOTPRESENT": "NOT_PRESENT",
    "DOWN": "DOWN",
    "LOWERLAYERDOWN": "LOWER_LAYER_DOWN",
    "TESTING": "TESTING",
    "DORMANT": "DORMANT",
    "UP": "UP",
}
_OPER_BY_NUM = dict(enumerate(["UNKNOWN", "NOTPRESENT", "DOWN", "LOWERLAYERDOWN", "TESTING", "DORMANT", "UP"]))


@dataclass(frozen=True)
class Link:
    ifindex: int
    name: str
    oper_status: str  # OpenConfig enum name
    admin_up: bool
    kind: str = ""  # IFLA_INFO_KIND: veth, bridge, bond, ... ("" for physical)
    carrier_changes: int = 0  # IFLA_CARRIER_CHANGES: OpenConfig carrier-transitions


def _attr(msg, name: str, default=None):
    value = msg.get_attr(name)
    return default if value is None else value


def link_from_msg(msg) -> Link:
    oper = _attr(msg, "IFLA_OPERSTATE", "UNKNOWN")
    if isinstance(oper, int):
        oper = _OPER_BY_NUM.get(oper, "UNKNOWN")
    kind = ""
    info = msg.get_attr("IFLA_LINKINFO")
    if info is not None:
        kind = info.get_attr("IFLA_INFO_KIND") or ""
    return Link(
        ifindex=msg["index"],
        name=_attr(msg, "IFLA_IFNAME", f"if{msg['index']}"),
        oper_status=_OPER.get(str(oper), "UNKNOWN"),
        admin_up=bool(msg["flags"] & IFF_UP),
        kind=kind,
        carrier_changes=_attr(msg, "IFLA_CARRIER_CHANGES", 0),
    )


def select(links: dict[int, Link], include: list[str], exclude: list[str]) -> list[Link]:
    """Links whose name matches an include glob and no exclude glob, sorted by ifindex."""
    chosen = [
        link
        for link in links.values()
        if any(fnmatch.fnmatchcase(link.name, p) for p in include)
        and not any(fnmatch.fnmatchcase(link.name, p) for p in exclude)
    ]
    return sorted(chosen, key=lambda link: link.ifindex)


class LinkTracker:
    """Current links of this network namespace, kept fresh by RTM_NEWLINK/RTM_DELLINK events."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._links: dict[int, Link] = {}
        self.generation = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._events: IPRoute | None = None
        self._bind_error: OSError | None = None
        self._refreshed = threading.Event()

    def start(self) -> None:
        # Subscribe first, then dump, so no event between the two is lost. The event
        # socket is made on its reader thread: pyroute2 >= 0.9 ties a socket to its thread.
        bound = threading.Event()
        self._thread = threading.Thread(target=self._listen, args=(bound,), name="swtel-links", daemon=True)
        self._thread.start()
        if not bound.wait(10.0):
            raise RuntimeError("link event subscription did not start")
        if self._bind_error is not None:
            raise self._bind_error
        self.refresh()
        self._refreshed.set()  # now the queued events apply on top of the dump, in order

    def refresh(self) -> None:
        """Full re-discovery (start, and after the event socket overflowed)."""
        # One request per link rather than one dump: pyroute2 parses a whole dump into
        # memory at once (about 7 MB for 256 ports, most of it never returned to the OS).
        links: dict[int, Link] = {}
        with IPRoute() as ipr:
            for ifindex, _name in socket.if_nameindex():
                try:
                    msgs = ipr.get_links(ifindex)
                except NetlinkError:
                    continue  # gone since if_nameindex(): its RTM_DELLINK is queued anyway
                for link in map(link_from_msg, msgs):
                    links[link.ifindex] = link
        with self._lock:
            if links != self._links:
                self._links = links
                self.generation += 1

    def _listen(self, bound: threading.Event) -> None:
        try:
            self._events = IPRoute()
            self._events.bind(groups=RTMGRP_LINK)
        except OSError as exc:
            self._bind_error = exc
            return
        finally:
            bound.set()
        self._refreshed.wait()
        while not self._stop.is_set():
            try:
                msgs = self._events.get()
            except OSError as exc:
                if self._stop.is_set():
                    return
                # ENOBUFS: events were lost; a full dump makes the view right again.
                log.warning("link events lost; re-reading links", error=str(exc))
                self.refresh()
                continue
            except Exception as exc:  # pyroute2 raises its own types on close
                if self._stop.is_set():
                    return
                log.error("link event reader failed", error=repr(exc))
                self._stop.wait(1.0)
                continue
            self._apply(msgs)

    def _apply(self, msgs) -> None:
        with self._lock:
            before = dict(self._links)
            for msg in msgs:
                event = msg.get("event")
                if event == "RTM_NEWLINK":
                    link = link_from_msg(msg)
                    self._links[link.ifindex] = link
                elif event == "RTM_DELLINK":
                    self._links.pop(msg["index"], None)
            if self._links != before:
                self.generation += 1

    def links(self) -> dict[int, Link]:
        with self._lock:
            return dict(self._links)

    def snapshot(self) -> tuple[int, dict[int, Link]]:
        """(generation, links) read together, so both describe the same moment."""
        with self._lock:
            return self.generation, dict(self._links)

    def stop(self) -> None:
        self._stop.set()
        self._refreshed.set()
        if self._events is not None:
            try:
                self._events.close()
            except Exception:  # noqa: BLE001 - closing during shutdown
                pass
        if self._thread is not None:
            # pyroute2 0.7 does not wake a blocked get() on close; the thread is a daemon.
            self._thread.join(timeout=0.3)
