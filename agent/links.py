"""Link tracking (the slow path): discovery, add/delete/rename events and oper-status,
straight from rtnetlink. The tick engine asks :attr:`LinkTracker.generation` each
tick, which costs one integer comparison; tables are rebuilt only after an event.

Two NETLINK_ROUTE sockets from the standard library: one subscribed to RTMGRP_LINK
for RTM_NEWLINK/RTM_DELLINK events, read by a thread that sleeps in poll() until an
event (or stop()) arrives, and one per full dump (RTM_GETLINK). Their messages are
decoded by the active backend's ``link_parse`` (agent/_ext/links.c, or pyroute2's
marshal in the pure-Python fallback, agent/_fallback/links.py).

Not pyroute2's IPRoute: its package ``__init__`` loads NDB, IPDB and every netlink
family, for a listener that needs two sockets and one message type. Measured
(Python 3.11, pyroute2 0.9.7): VmRSS after ``import agent.runner`` is 30.5 MiB with
the C backend, and ``import pyroute2`` on top adds 9.7 MiB; an idle agent went from
42.5 to 31.7 MiB. Only the pure-Python fallback imports pyroute2 now.
"""

from __future__ import annotations

import errno
import fnmatch
import itertools
import os
import select as _select
import socket
import struct
import threading
from collections.abc import Iterable
from dataclasses import dataclass

from agent import _backend, logs
from agent.pathgrammar import escape_name, unescape_name

log = logs.get("links")

RTMGRP_LINK = 0x1
IFF_UP = 0x1
RTM_NEWLINK, RTM_DELLINK, RTM_GETLINK = 16, 17, 18
NLM_F_REQUEST, NLM_F_DUMP = 0x1, 0x300
IFLA_EXT_MASK = 29
RTEXT_FILTER_SKIP_STATS = 1 << 3  # the dump needs no per-link counters (older kernels ignore it)

# IFLA_OPERSTATE (RFC 2863, by number) -> OpenConfig oper-status.
_OPER = ("UNKNOWN", "NOT_PRESENT", "DOWN", "LOWER_LAYER_DOWN", "TESTING", "DORMANT", "UP")

_EVENT_RCVBUF = 1 << 20  # room for a burst of events (256 ports flapping at once)
_RECV_SIZE = 1 << 16  # one datagram: a dump chunk (at most 32 KiB) or one event
_MAX_RECV_SIZE = 1 << 24
_DUMP_TIMEOUT = 10.0  # seconds; the kernel answers in milliseconds, this only bounds a hang
_EVENT_BATCH = 256  # datagrams applied under one lock and one generation step
_MAX_DISCARD = 100_000  # datagrams dropped before a re-read, if events never stop coming
_NLMSG = struct.Struct("=IHHII")  # len, type, flags, seq, pid
_IFINFOMSG = struct.Struct("=BxHiII")  # family, pad, type, index, flags, change
_RTA_U32 = struct.Struct("=HHI")
_seq = itertools.count(1)


@dataclass(frozen=True)
class Link:
    ifindex: int
    #: the interface's name as every path, log line and status shows it: the kernel's bytes,
    #: escaped where they are not plain text (agent/pathgrammar.py escape_name, docs/paths.md)
    name: str
    oper_status: str  # OpenConfig enum name
    admin_up: bool
    kind: str = ""  # IFLA_INFO_KIND: veth, bridge, bond, ... ("" for physical)
    carrier_changes: int = 0  # IFLA_CARRIER_CHANGES: OpenConfig carrier-transitions
    raw: bytes = b""  # the kernel's name, byte for byte (b"": the same as ``name``)

    @property
    def kernel_name(self) -> bytes:
        """The name to hand the kernel (an ethtool ioctl's ifr_name): its own bytes."""
        return self.raw or unescape_name(self.name)

    @property
    def escaped(self) -> bool:
        """The kernel's name is not plain text: ``name`` is its escaped form."""
        return bool(self.raw) and self.raw != self.name.encode()


def _link(fields: tuple[int, int, int, str, int, str, int]) -> Link:
    _msg_type, ifindex, flags, name, operstate, kind, carrier_changes = fields
    # The parsers decode the name with the file system's codec (surrogateescape): its
    # bytes come back exactly, and are escaped here, once, for both backends.
    raw = os.fsencode(name)
    return Link(
        ifindex=ifindex,
        name=escape_name(raw) or f"if{ifindex}",
        oper_status=_OPER[operstate] if 0 <= operstate < len(_OPER) else "UNKNOWN",
        admin_up=bool(flags & IFF_UP),
        kind=escape_name(os.fsencode(kind)),
        carrier_changes=carrier_changes,
        raw=raw,
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


class _Truncated(Exception):
    """A datagram was larger than the receive buffer (its tail is lost)."""


def _netlink_socket() -> socket.socket:
    return socket.socket(
        socket.AF_NETLINK, socket.SOCK_RAW | socket.SOCK_CLOEXEC, socket.NETLINK_ROUTE
    )


def _receive(sock: socket.socket, buf: bytearray, flags: int = 0) -> memoryview:
    # MSG_TRUNC makes netlink report a datagram's full length, so a cut one is noticed.
    n = sock.recv_into(buf, 0, flags | socket.MSG_TRUNC)
    if n > len(buf):
        raise _Truncated(n)
    return memoryview(buf)[:n]


def _dump_request(seq: int) -> bytes:
    body = _IFINFOMSG.pack(socket.AF_UNSPEC, 0, 0, 0, 0)
    body += _RTA_U32.pack(_RTA_U32.size, IFLA_EXT_MASK, RTEXT_FILTER_SKIP_STATS)
    flags = NLM_F_REQUEST | NLM_F_DUMP
    return _NLMSG.pack(_NLMSG.size + len(body), RTM_GETLINK, flags, seq, 0) + body


def dump_links() -> dict[int, Link]:
    """Every link of this network namespace: one RTM_GETLINK dump on a socket of its own."""
    size = _RECV_SIZE
    while True:
        try:
            return _dump_links(size)
        except _Truncated as exc:
            if size >= _MAX_RECV_SIZE:
                raise OSError(errno.EMSGSIZE, f"link message of {exc.args[0]} bytes") from None
            size *= 4  # a link with huge attributes: dump again with room for it


def _dump_links(size: int) -> dict[int, Link]:
    seq = next(_seq) & 0xFFFFFFFF
    buf = bytearray(size)
    links: dict[int, Link] = {}
    with _netlink_socket() as sock:
        sock.settimeout(_DUMP_TIMEOUT)
        sock.bind((0, 0))
        port_id = sock.getsockname()[0]
        sock.send(_dump_request(seq))
        done = False
        while not done:
            chunk = _receive(sock, buf)
            # A chunk is one reply skb: every message in it shares the first one's seq and port.
            if len(chunk) >= _NLMSG.size:
                _len, _type, _flags, chunk_seq, chunk_port = _NLMSG.unpack_from(chunk)
                if chunk_seq != seq or chunk_port != port_id:
                    continue  # not a reply to this request
            parsed, done = _backend.reader.link_parse(chunk)
            for fields in parsed:
                if fields[0] == RTM_NEWLINK:
                    links[fields[1]] = _link(fields)
    return links


class LinkTracker:
    """Current links of this network namespace, kept fresh by RTM_NEWLINK/RTM_DELLINK events."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._links: dict[int, Link] = {}
        self.generation = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._events: socket.socket | None = None
        self._wake_reader: socket.socket | None = None
        self._wake_writer: socket.socket | None = None

    def start(self) -> None:
        # Subscribe first, then dump: an event between the two waits in the socket's
        # queue and is applied on top of the dump, in order, once the thread runs.
        events = _netlink_socket()
        try:
            # The kernel caps this at net.core.rmem_max; an overflow costs one full dump.
            events.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, _EVENT_RCVBUF)
            events.bind((0, RTMGRP_LINK))
            self.refresh()
        except BaseException:
            events.close()
            raise
        self._events = events
        self._wake_reader, self._wake_writer = socket.socketpair()
        self._thread = threading.Thread(target=self._listen, name="swtel-links", daemon=True)
        self._thread.start()

    def refresh(self) -> None:
        """Full re-discovery (start, and after the event socket overflowed)."""
        links = dump_links()
        with self._lock:
            if links != self._links:
                self._links = links
                self.generation += 1

    def _listen(self) -> None:
        assert self._events is not None and self._wake_reader is not None
        poller = _select.poll()
        poller.register(self._events, _select.POLLIN)
        poller.register(self._wake_reader, _select.POLLIN)
        buf = bytearray(_RECV_SIZE)
        while not self._stop.is_set():
            poller.poll()  # no timeout: wakes for an event or for stop()
            if self._stop.is_set():
                return
            try:
                self._apply(self._drain(buf))
            except _Truncated as exc:
                buf = bytearray(min(max(2 * len(buf), exc.args[0]), _MAX_RECV_SIZE))
                self._resync("link event larger than the receive buffer", f"{exc.args[0]} bytes")
            except OSError as exc:
                if exc.errno != errno.ENOBUFS:
                    log.error("link event reader failed", error=repr(exc))
                    self._stop.wait(1.0)
                    continue
                self._resync("link events lost", str(exc))  # the socket queue overflowed
            except ValueError as exc:  # a malformed message: what followed it is lost
                self._resync("malformed link event", str(exc))
            except Exception as exc:  # noqa: BLE001 - the thread must outlive a bug
                log.error("link event reader failed", error=repr(exc))
                self._stop.wait(1.0)

    def _drain(self, buf: bytearray) -> list[tuple]:
        """The link messages of every datagram waiting now (at most _EVENT_BATCH)."""
        assert self._events is not None
        parsed: list[tuple] = []
        for _ in range(_EVENT_BATCH):
            try:
                chunk = _receive(self._events, buf, socket.MSG_DONTWAIT)
            except BlockingIOError:
                break
            parsed.extend(_backend.reader.link_parse(chunk)[0])
        return parsed

    def _resync(self, reason: str, error: str) -> None:
        """The view may have missed events: a full dump makes it right again."""
        log.warning("re-reading links", reason=reason, error=error)
        while not self._stop.is_set():
            try:
                self._discard_queued()
                self.refresh()
                return
            except (OSError, ValueError) as exc:
                log.error("re-reading links failed; retrying in 1 s", error=repr(exc))
                self._stop.wait(1.0)

    def _discard_queued(self) -> None:
        """Empty the event queue before a dump, which covers what was in it. The kernel
        reports an overflow (ENOBUFS) only once until the queue has been empty: events
        lost while stale ones still wait would otherwise go unnoticed."""
        assert self._events is not None
        scratch = bytearray(_NLMSG.size)  # MSG_TRUNC drops the rest of each datagram
        for _ in range(_MAX_DISCARD):
            try:
                self._events.recv_into(scratch, 0, socket.MSG_DONTWAIT | socket.MSG_TRUNC)
            except BlockingIOError:
                return
            except OSError as exc:
                if exc.errno != errno.ENOBUFS:
                    raise

    def _apply(self, messages: Iterable[tuple]) -> None:
        with self._lock:
            before = dict(self._links)
            for fields in messages:
                if fields[0] == RTM_NEWLINK:
                    self._links[fields[1]] = _link(fields)
                elif fields[0] == RTM_DELLINK:
                    self._links.pop(fields[1], None)
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
        if self._wake_writer is not None:
            try:
                self._wake_writer.send(b"\0")
            except OSError:
                pass  # already woken: its buffer is full
        if self._thread is not None:
            self._thread.join(timeout=1.0)
            if self._thread.is_alive():
                return  # still inside a dump: leave its sockets open; it is a daemon thread
        for sock in (self._events, self._wake_reader, self._wake_writer):
            if sock is not None:
                sock.close()
        self._events = self._wake_reader = self._wake_writer = None
