"""devlink source: shared-buffer occupancy and its peak, per port and pool and per port
and traffic class, through the kernel's devlink (switches driven by mlxsw).

Each poll, on the generic netlink family "devlink" (resolved once):

1. ``DEVLINK_CMD_SB_OCC_SNAPSHOT`` per shared buffer: the driver reads the ASIC's
   occupancy and watermarks into its cache (``show`` only ever returns that cache);
2. dumps of ``DEVLINK_CMD_SB_PORT_POOL_GET`` and ``DEVLINK_CMD_SB_TC_POOL_BIND_GET``: the
   cached ``DEVLINK_ATTR_SB_OCC_CUR`` and ``_OCC_MAX`` of every (port, pool) and every
   (port, TC, ingress or egress);
3. ``DEVLINK_CMD_SB_OCC_MAX_CLEAR`` per shared buffer, so the next poll's max is the peak
   since this one.

Both values are gauges, in the kernel's units: bytes for mlxsw. Devlink ports are named by
their netdev (``DEVLINK_CMD_PORT_GET`` dump, read again at each setup: link changes).
agent/_ext/devlink.c does the I/O and the parsing; this file names and maps. Where the
kernel has no devlink, or no device has a shared buffer (veth, a host), status says so
and that is not an error. The snapshot on a large Spectrum-4 has no known cost, so each
poll is timed and the figures are in status (``poll_us``).
"""

from __future__ import annotations

import errno
import os
import time
from array import array
from dataclasses import dataclass
from typing import Any, Protocol

from agent import _backend, caps, logs
from agent.config import Duration, setting
from agent.counters import GAUGE, SWTEL_ORIGIN, Container, CounterSpec, CounterTable
from agent.links import Link, select
from agent.pathgrammar import escape_name, format_elem, interface_path
from agent.sources.base import (
    GENL_GONE,
    GENL_OK,
    NO_DATA,
    GenlDiscoverySource,
    GenlSocket,
    SourceConfig,
    doc_row,
    interface,
    register,
)

log = logs.get("devlink")

# The replies' commands: each GET is answered by its NEW (DEVLINK_CMD_*_NEW = *_GET + 2).
PORT_NEW, SB_NEW, PORT_POOL_NEW, TC_POOL_BIND_NEW = 7, 13, 21, 25
# devlink_parse's tuple
CMD, BUS, DEV, PORT, SB, POOL, TC, POOL_TYPE, OCC_CUR, OCC_MAX, NETDEV = range(11)
DIRECTIONS = ("ingress", "egress")  # DEVLINK_SB_POOL_TYPE_INGRESS, _EGRESS
LEAVES = ("occupancy", "peak-occupancy")  # OCC_CUR, OCC_MAX

OK = GENL_OK
NO_DEVLINK = "no devlink in this kernel"
NO_DEVICE = "no devlink device"
NO_SB = "no devlink device with a shared buffer"
NO_OCCUPANCY = "shared buffer without occupancy reporting"
NO_PORT = "no selected interface is a devlink port"
NEEDS = "needs"  # "needs CAP_NET_ADMIN": a shared buffer to read, and not the capability to snapshot it

Handle = tuple[str, str, int]  # (bus, dev, sb_index)


@dataclass
class _Seen:
    """One dump as the last setup saw it: every message's identity (devlink_parse's fields
    up to POOL_TYPE), the positions of the entries in the buffer, and where they start."""

    keys: list[tuple]
    at: list[int]
    start: int


PoolKey = tuple[str, str, int, int, int]  # (bus, dev, port, sb, pool)
TcKey = tuple[str, str, int, int, int, int]  # (bus, dev, port, sb, tc, pool_type)


def sb_container(port: str, sb: int, elem: str, keys: dict[str, str]) -> Container:
    """``swtel:/interfaces/interface[name=X]/devlink/sb[index=N]/<elem>[keys]/state``."""
    tail = f"devlink/{format_elem('sb', {'index': str(sb)})}/{format_elem(elem, keys)}/state"
    return interface(port, SWTEL_ORIGIN, tail)


def pool_container(port: str, sb: int, pool: int) -> Container:
    return sb_container(port, sb, "pool", {"index": str(pool)})


def tc_container(port: str, sb: int, tc: int, pool_type: int) -> Container:
    direction = DIRECTIONS[pool_type] if pool_type < len(DIRECTIONS) else f"type-{pool_type}"
    return sb_container(port, sb, "tc", {"index": str(tc), "type": direction})


class DevlinkIO(Protocol):
    """What the source asks the kernel (tests inject one returning fixture replies)."""

    def family(self) -> int: ...

    def dump(self, cmd: int) -> bytes: ...

    def execute(self, cmd: int, handles: list[Handle]) -> list[bytes]: ...

    def close(self) -> None: ...


class NetlinkIO(GenlSocket):
    """The source's generic netlink socket, for the "devlink" family."""

    def __init__(self) -> None:
        super().__init__(lambda fd: _backend.reader.devlink_family(fd))

    def dump(self, cmd: int) -> bytes:
        return _backend.reader.devlink_dump(self.fd, self.family(), cmd)

    def execute(self, cmd: int, handles: list[Handle]) -> list[bytes]:
        return _backend.reader.devlink_exec(self.fd, self.family(), cmd, handles)


@dataclass
class DevlinkConfig(SourceConfig):
    """``sources.devlink``."""

    enabled: bool = setting(False)
    interval: Duration | None = setting(Duration(0.1), type="duration (10ms–1h) or null")
    interfaces: list[str] = setting(factory=lambda: ["*"], type="globs",
                                    doc="netdevs of the devlink ports to read (e.g. `swp*`)")
    exclude: list[str] = setting(factory=lambda: ["lo"], type="globs")


@register
class DevlinkSource(GenlDiscoverySource):
    name = "devlink"
    config_class = DevlinkConfig
    capabilities = (caps.CAP_NET_ADMIN,)  # the snapshot and the max-clear (GENL_ADMIN_PERM)
    doc = ("shared-buffer occupancy and peak per port, pool and traffic class, through devlink "
           "(mlxsw; [devlink.md](devlink.md))")
    no_family = NO_DEVLINK  # it, no shared buffer or a failed setup: looked for again in retry_s
    label = "devlink"

    @classmethod
    def doc_paths(cls) -> list[str]:
        port = "X"
        pool = pool_container(port, 0, 0).full("{leaf}").replace("sb[index=0]", "sb[index=N]")
        pool = pool.replace("pool[index=0]", "pool[index=P]")
        rows = []
        for attr, leaf in zip(("DEVLINK_ATTR_SB_OCC_CUR", "DEVLINK_ATTR_SB_OCC_MAX"), LEAVES, strict=True):
            rows.append(doc_row("devlink", f"port pool {attr}", pool.format(leaf=leaf), "gauge"))
        for direction in DIRECTIONS:
            tc = tc_container(port, 0, 0, DIRECTIONS.index(direction)).full("{leaf}")
            tc = tc.replace("sb[index=0]", "sb[index=N]").replace("tc[index=0]", "tc[index=T]")
            for attr, leaf in zip(("DEVLINK_ATTR_SB_OCC_CUR", "DEVLINK_ATTR_SB_OCC_MAX"), LEAVES, strict=True):
                rows.append(doc_row("devlink", f"{direction} TC {attr}", tc.format(leaf=leaf), "gauge"))
        return ["## devlink: shared-buffer occupancy (mlxsw)", "",
                f"Per devlink port (by its netdev X, under `swtel:{interface_path(port)}/devlink`), shared "
                "buffer N, pool P and traffic class T: the occupancy at the poll's snapshot and the peak "
                "since the previous poll (max cleared after each read), in the kernel's units (bytes for "
                "mlxsw); details: [devlink.md](devlink.md).", "",
                "| source | attribute | path | kind |", "|---|---|---|---|", *rows, ""]

    def __init__(self, cfg) -> None:
        super().__init__(cfg)
        self.io: DevlinkIO | None
        self._handles: list[Handle] = []  # the shared buffers a poll snapshots and clears
        self._devices: list[str] = []
        self._pools: dict[PoolKey, int] = {}  # -> index of its occupancy (its peak follows)
        self._tcs: dict[TcKey, int] = {}
        self._ports: dict[tuple[str, str, int], str] = {}  # (bus, dev, port index) -> selected netdev
        self._layout: tuple | None = None  # None: no table built yet
        self._seen = (_Seen([], [], 0), _Seen([], [], 0))  # the pool and TC dumps
        self.poll_us: dict[str, float] = {}
        self.poll_max_us = 0.0
        self.missing: list[str] = []  # capabilities this process lacks (agent/caps.py)

    def make_io(self) -> DevlinkIO:
        return NetlinkIO()

    def after_setup(self) -> None:
        """Shared buffers to read, and no CAP_NET_ADMIN to snapshot them: said once, plainly
        (state, fault: health is red), and nothing is polled, rather than an EPERM counted
        per poll. A host with nothing to read needs nothing and stays healthy."""
        self.missing = self.missing_capabilities()
        mine = self.fault is not None and self.fault.startswith(NEEDS)
        if self.state != OK or not self.missing:
            if mine:
                self.fault = None
            return
        need = ", ".join(self.missing)
        self.state = f"{NEEDS} {need}"
        # short: status prints a fault on one line
        self.fault = (f"{NEEDS} {need} for the shared-buffer snapshot, which this process lacks: "
                      f"enable {caps.DROPIN} (docs/devlink.md)")
        if not mine:
            log.warning("devlink source lacks a capability; nothing is read", needs=need,
                        devices=self._devices, hint=caps.ENABLE_HINT)
        self.forget()  # no table: nothing published until the values can be read

    def discover(self, links: dict[int, Link]) -> None:
        """Devices, shared buffers, port names and the (port, pool) and (port, TC) entries
        of the selected ports that report occupancy (from the driver's cache: the layout, not
        the values)."""
        assert self.io is not None
        section = self.section
        selected = {link.name for link in select(links, section.interfaces, section.exclude)}
        parse = _backend.reader.devlink_parse
        devports = [m for m in parse(self.io.dump(_backend.reader.DEVLINK_PORT_GET)) if m[CMD] == PORT_NEW]
        sbs = [m for m in parse(self.io.dump(_backend.reader.DEVLINK_SB_GET)) if m[CMD] == SB_NEW]
        self._devices = sorted({f"{m[BUS]}/{m[DEV]}" for m in devports + sbs})
        # a port's netdev name as the links name it (escaped where it is not text)
        netdev = {m[NETDEV]: escape_name(os.fsencode(m[NETDEV])) for m in devports if m[NETDEV] is not None}
        self._ports = {(m[BUS], m[DEV], m[PORT]): netdev[m[NETDEV]] for m in devports
                       if m[PORT] is not None and netdev.get(m[NETDEV]) in selected}
        handles = sorted({(m[BUS], m[DEV], m[SB]) for m in sbs if None not in (m[BUS], m[DEV], m[SB])})
        pool_msgs = parse(self.io.dump(_backend.reader.DEVLINK_SB_PORT_POOL_GET)) if handles else []
        tc_msgs = parse(self.io.dump(_backend.reader.DEVLINK_SB_TC_POOL_BIND_GET)) if handles else []
        pools, pool_at = self._entries(pool_msgs, self._pool_key)
        tcs, tc_at = self._entries(tc_msgs, self._tc_key)
        if not self._devices:
            self.state = NO_DEVICE
        elif not handles:
            self.state = NO_SB
        elif not self._ports:
            self.state = NO_PORT
        elif not pools and not tcs:
            self.state = NO_OCCUPANCY
        else:
            self.state = OK
        self._handles = handles if self.state == OK else []
        self._build(pools, tcs)  # in the dump's order, which the fast path of poll relies on
        self._seen = (_Seen([m[:POOL_TYPE + 1] for m in pool_msgs], pool_at, 0),
                      _Seen([m[:POOL_TYPE + 1] for m in tc_msgs], tc_at, 2 * len(pools)))

    def _entries(self, msgs: list[tuple], key_of) -> tuple[list[tuple[str, Any]], list[int]]:
        """The (port, key) of each entry with occupancy of a selected port, and its position."""
        entries, at = [], []
        for pos, m in enumerate(msgs):
            key = key_of(m)
            if key is not None and m[OCC_CUR] is not None and m[OCC_MAX] is not None:
                entries.append((self._ports[key[:3]], key))
                at.append(pos)
        return entries, at

    def _pool_key(self, m: tuple) -> PoolKey | None:
        """The entry's key if it is a (port, pool) of a selected port."""
        if m[CMD] != PORT_POOL_NEW or None in (m[BUS], m[DEV], m[PORT], m[SB], m[POOL]):
            return None
        key = (m[BUS], m[DEV], m[PORT], m[SB], m[POOL])
        return key if key[:3] in self._ports else None

    def _tc_key(self, m: tuple) -> TcKey | None:
        if m[CMD] != TC_POOL_BIND_NEW or None in (m[BUS], m[DEV], m[PORT], m[SB], m[TC], m[POOL_TYPE]):
            return None
        key = (m[BUS], m[DEV], m[PORT], m[SB], m[TC], m[POOL_TYPE])
        return key if key[:3] in self._ports else None

    def _build(self, pools: list[tuple[str, PoolKey]], tcs: list[tuple[str, TcKey]]) -> None:
        layout = (tuple(pools), tuple(tcs))
        if layout == self._layout:
            return  # the same entries: keep the table and the values (no new baselines)
        specs: list[CounterSpec] = []
        self._pools, self._tcs = {}, {}
        for port, key in pools:
            self._pools[key] = len(specs)
            container = pool_container(port, key[3], key[4])
            specs += [CounterSpec(container, leaf, 64, GAUGE, port) for leaf in LEAVES]
        for port, key in tcs:
            self._tcs[key] = len(specs)
            container = tc_container(port, key[3], key[4], key[5])
            specs += [CounterSpec(container, leaf, 64, GAUGE, port) for leaf in LEAVES]
        self.table = CounterTable(self.name, specs)
        self.values = array("Q", bytes(8 * len(specs)))
        self.ports = sorted({port for port, _k in pools} | {port for port, _k in tcs})
        self._layout = layout

    def forget(self) -> None:
        self._handles = []
        self._build([], [])
        self._seen = (_Seen([], [], 0), _Seen([], [], 0))

    def poll(self) -> int:
        """In state OK (shared buffers to snapshot: ``_handles``); I/O errors: see
        GenlDiscoverySource.read."""
        assert self.io is not None and self._handles
        reader = _backend.reader
        t0 = time.perf_counter_ns()
        if not self._acked(self.io.execute(reader.DEVLINK_SB_OCC_SNAPSHOT, self._handles), "snapshot"):
            return NO_DATA
        t1 = time.perf_counter_ns()
        pools = reader.devlink_parse(self.io.dump(reader.DEVLINK_SB_PORT_POOL_GET))
        tcs = reader.devlink_parse(self.io.dump(reader.DEVLINK_SB_TC_POOL_BIND_GET))
        t2 = time.perf_counter_ns()
        cleared = self._acked(self.io.execute(reader.DEVLINK_SB_OCC_MAX_CLEAR, self._handles), "max clear")
        t3 = time.perf_counter_ns()
        self.poll_us = {"snapshot": (t1 - t0) / 1e3, "dump": (t2 - t1) / 1e3, "clear": (t3 - t2) / 1e3,
                        "total": (t3 - t0) / 1e3}
        self.poll_max_us = max(self.poll_max_us, self.poll_us["total"])
        got = (self._fill(self._seen[0], pools, self._pools, self._pool_key)
               + self._fill(self._seen[1], tcs, self._tcs, self._tc_key))
        if not cleared:
            self._stale = True  # a peak not cleared would be read twice; set up again and see
        return got if got else NO_DATA

    def _acked(self, replies: list[bytes], what: str) -> bool:
        """Every shared buffer acknowledged the request; failures noted (a device gone: set up again)."""
        ok = True
        for handle, raw in zip(self._handles, replies, strict=True):
            try:
                _backend.reader.devlink_parse(raw)
            except OSError as exc:
                ok = False
                if exc.errno in GENL_GONE:
                    self._stale = True
                elif exc.errno == errno.EPERM:
                    self.note_error(f"devlink {what} on {handle[0]}/{handle[1]}: needs CAP_NET_ADMIN")
                else:
                    self.note_error(f"devlink {what} on {handle[0]}/{handle[1]}: {exc}")
            except ValueError as exc:
                ok = False
                self.note_error(f"devlink {what} on {handle[0]}/{handle[1]}: {exc}")
        return ok

    def _fill(self, seen: _Seen, msgs: list[tuple], index: dict, key_of) -> int:
        """The values of one dump into the buffer; how many entries were taken. The usual
        poll sees the setup's entries in the setup's order: they are taken by position
        (8,192 entries of a 256-port switch: a dict lookup each costs several ms)."""
        if [m[:POOL_TYPE + 1] for m in msgs] == seen.keys:
            try:
                flat = array("Q", [v for pos in seen.at for v in msgs[pos][OCC_CUR:OCC_MAX + 1]])
            except TypeError:  # an entry lost its occupancy: the slow path sees it
                pass
            else:
                self.values[seen.start:seen.start + len(flat)] = flat
                return len(seen.at)
        return self._take(msgs, index, key_of)

    def _take(self, msgs: list[tuple], index: dict, key_of) -> int:
        """Each entry's values into the buffer; how many were taken. An entry of a selected
        port that the layout lacks means it changed: set up again before the next read."""
        got = 0
        for m in msgs:
            key = key_of(m)
            if key is None or m[OCC_CUR] is None or m[OCC_MAX] is None:
                continue
            at = index.get(key)
            if at is None:
                self._stale = True
                continue
            self.values[at] = m[OCC_CUR]
            self.values[at + 1] = m[OCC_MAX]
            got += 1
        return got

    def info(self) -> dict[str, Any]:
        return {
            "state": self.state,
            "family": self._family,
            "devices": self._devices,
            "shared_buffers": [f"{bus}/{dev}/{sb}" for bus, dev, sb in self._handles],
            "pools": len(self._pools),
            "tcs": len(self._tcs),
            "poll_us": {k: round(v, 1) for k, v in self.poll_us.items()},
            "poll_max_us": round(self.poll_max_us, 1),
            "missing_capabilities": self.missing,
        }
