"""rdma source: RDMA port counters from sysfs, e.g.
``<root>/class/infiniband/mlx5_0/ports/1/hw_counters/roce_adp_retrans``.

The files stay open; each poll is one pread per file (C reader). mlx5's
Q counters are 32-bit in firmware and wrap, so they are declared 32-bit here
and the change kernel unwraps them. The root is injectable for tests.

Each RDMA port's netdev (the port's ``gid_attrs/ndevs/*``, else the device's ``device/net/*``
matched by ``dev_port``) is a state, ``.../port[id=P]/state/netdev``, and the info series
``swtel_rdma_port_info{interface, port, netdev}``: it ties the host's RoCE counters to the netdev
that lldpd runs on, and so to its LLDP neighbour (``nvswitch_lldp_neighbor_info``, sources.lldp).
"""

from __future__ import annotations

import errno
import fnmatch
import os
import stat
import time
from array import array
from dataclasses import dataclass

from agent import _backend
from agent.config import CounterFilter, setting
from agent.counters import COUNTER, SWTEL_ORIGIN, Container, CounterSpec, CounterTable, StateUpdate
from agent.pathgrammar import escape_name, rdma_port_path
from agent.registry import InfoMetric, PortAlias
from agent.sources.base import Source, SourceConfig, counter_wanted, doc_row, leaf_name, register

#: Counters the driver keeps in 32 bits (they wrap); everything else is 64-bit.
WIDTH_32 = {
    "roce_adp_retrans", "roce_adp_retrans_to", "roce_slow_restart", "roce_slow_restart_cnps",
    "roce_slow_restart_trans", "out_of_sequence", "packet_seq_err", "local_ack_timeout_err",
    "rnr_nak_retry_err", "duplicate_request", "implied_nak_seq_err", "out_of_buffer",
    "rx_read_requests", "rx_write_requests", "rx_atomic_requests", "req_cqe_error",
    "resp_cqe_error", "req_remote_access_errors", "resp_local_length_error",
    "req_remote_invalid_request", "resp_remote_access_errors", "req_cqe_flush_error",
    "resp_cqe_flush_error", "rx_icrc_encapsulated",
    # IB PMA port counters without the extended (64-bit) variants
    "symbol_error", "link_error_recovery", "link_downed", "port_rcv_errors",
    "port_rcv_remote_physical_errors", "port_rcv_switch_relay_errors", "port_xmit_discards",
    "port_xmit_constraint_errors", "port_rcv_constraint_errors", "local_link_integrity_errors",
    "excessive_buffer_overrun_errors", "VL15_dropped", "port_xmit_wait",
}
_DIRS = ("hw_counters", "counters")
RESCAN_S = 30.0  # how often to look for RDMA devices and counter files that came or went


@dataclass
class RdmaConfig(SourceConfig):
    """``sources.rdma``."""

    enabled: bool = setting(False)
    root: str = setting("/sys", type="absolute path", doc="sysfs root (tests point it elsewhere)")
    devices: list[str] = setting(factory=lambda: ["*"], type="globs", doc="RDMA device names, e.g. `mlx5_*`")
    counters: CounterFilter = setting(factory=CounterFilter)


@register
class RdmaSource(Source):
    name = "rdma"
    config_class = RdmaConfig
    doc = "RoCE `hw_counters` of RDMA devices (hosts with mlx5)"

    @classmethod
    def doc_paths(cls) -> list[str]:
        return ["## RDMA (sysfs)", "", "| source | file | path | kind |", "|---|---|---|---|",
                doc_row("rdma", "<root>/class/infiniband/D/ports/P/hw_counters/<name>",
                        "swtel:/rdma/devices/device[name=D]/ports/port[id=P]/hw-counters/<name>"),
                doc_row("rdma", "<root>/class/infiniband/D/ports/P/counters/<name>",
                        "swtel:/rdma/devices/device[name=D]/ports/port[id=P]/counters/<name>"),
                "| rdma | the port's netdev (`ports/P/gid_attrs/ndevs/*`, else `device/net/*` by `dev_port`) | "
                "`swtel:/rdma/devices/device[name=D]/ports/port[id=P]/state/netdev` | state |",
                "", "32-bit (they wrap, and are unwrapped): " + ", ".join(f"`{n}`" for n in sorted(WIDTH_32)),
                ""]
    uses_links = False
    info_metrics = (InfoMetric("swtel_rdma_port_info", f"{rdma_port_path('{X}', '{X}')}/state", ("interface", "port"),
                               (("netdev", "netdev"),),
                               doc="sources.rdma: an RDMA port's netdev (the join to its LLDP neighbour)"),)
    #: an event on the RDMA port (``mlx5_0/1``, the counters' port label) names its netdev's LLDP
    #: neighbour (agent/insights/neighbors.py)
    port_aliases = (PortAlias(f"{rdma_port_path('{X}', '{X}')}/state", "{0}/{1}", "netdev"),)

    @classmethod
    def check(cls, section: RdmaConfig, where: str, problems: list[str], cfg) -> None:
        if not section.root.startswith("/"):
            problems.append(f"{where}.root: expected an absolute path, got {section.root!r}")

    def __init__(self, cfg) -> None:
        super().__init__(cfg)
        self._fds = array("i")
        self._status = array("i")
        self._files: list[str] = []
        self._listed: list[str] = []  # what the last scan found (some may not open)
        self._next_scan = 0.0
        self._reopen = False
        #: (device, port) -> its netdev as last found, and as last published
        self._netdevs: dict[tuple[str, str], str] = {}
        self._netdevs_sent: dict[tuple[str, str], str] = {}

    @property
    def needs_setup(self) -> bool:
        # Devices appear late (mlx5_ib loads after boot) or come back after a driver
        # reload with new files: look again every RESCAN_S, and at once after errors.
        return self._reopen or time.monotonic() >= self._next_scan

    def setup(self, links) -> None:
        self._next_scan = time.monotonic() + RESCAN_S
        found = self._scan()
        self._netdevs = self._scan_netdevs()
        if [f for f, *_ in found] == self._listed and not self._reopen:
            return  # same files, still readable: keep the table and the open fds
        self._reopen = False
        self.close()
        self._listed = [f for f, *_ in found]
        specs: list[CounterSpec] = []
        fds: list[int] = []
        files: list[str] = []
        for path, container, name, label in found:
            fd = _open_counter(path)
            if fd is None:
                continue
            fds.append(fd)
            files.append(path)
            width = 32 if name in WIDTH_32 else 64
            specs.append(CounterSpec(container, leaf_name(name), width, COUNTER, label))
        self._files = files
        self.table = CounterTable(self.name, specs)
        self.values = array("Q", bytes(8 * len(specs)))
        self._fds = array("i", fds)
        self._status = array("i", bytes(4 * len(fds)))
        self.ports = sorted({s.port for s in specs if s.port})

    def _scan(self) -> list[tuple[str, Container, str, str]]:
        """Every counter file under the root: (path, container, name, "dev/port"), in a stable order."""
        sec = self.section
        base = os.path.join(sec.root, "class", "infiniband")
        out = []
        for dev in sorted(_listdir(base)):
            # file names are bytes: the ones that are not text are escaped as interface names are
            dev_name = _text(dev)
            if not any(fnmatch.fnmatchcase(dev_name, p) for p in sec.devices):
                continue
            ports_dir = os.path.join(base, dev, "ports")
            for port in sorted(_listdir(ports_dir), key=_num):
                port_name = _text(port)
                for sub in _DIRS:
                    folder = os.path.join(ports_dir, port, sub)
                    container = Container(
                        SWTEL_ORIGIN,
                        f"{rdma_port_path(dev_name, port_name)}/{sub.replace('_', '-')}",
                    )
                    for name in sorted(_listdir(folder)):
                        text = _text(name)
                        if text != "lifespan" and counter_wanted(text, sec.counters.include, sec.counters.exclude):
                            out.append((os.path.join(folder, name), container, text, f"{dev_name}/{port_name}"))
        return out

    def _scan_netdevs(self) -> dict[tuple[str, str], str]:
        """(device, port) -> netdev of every RDMA port of the selected devices that has one."""
        sec = self.section
        base = os.path.join(sec.root, "class", "infiniband")
        out = {}
        for dev in sorted(_listdir(base)):
            dev_name = _text(dev)
            if not any(fnmatch.fnmatchcase(dev_name, p) for p in sec.devices):
                continue
            nets = sorted(_listdir(os.path.join(base, dev, "device", "net")))
            for port in _listdir(os.path.join(base, dev, "ports")):
                ndevs = os.path.join(base, dev, "ports", port, "gid_attrs", "ndevs")
                names = {_small_text(os.path.join(ndevs, f)) for f in _listdir(ndevs)} - {""}
                if len(names) != 1:  # no RoCE GID yet: the device's netdev of this port (dev_port is 0-based)
                    names = {_text(n) for n in nets if len(nets) == 1 or _small_text(
                        os.path.join(base, dev, "device", "net", n, "dev_port")) == str(_num(port)[0] - 1)}
                if len(names) == 1:
                    out[(dev_name, _text(port))] = names.pop()
        return out

    def states(self, ts_ns: int) -> list[StateUpdate]:
        if self._netdevs == self._netdevs_sent:
            return []
        now, old = self._netdevs, self._netdevs_sent
        out = [StateUpdate(ts_ns, Container(SWTEL_ORIGIN, f"{rdma_port_path(*key)}/state"), "netdev", name, self.name)
               for key, name in now.items() if old.get(key) != name]
        out += [StateUpdate(ts_ns, Container(SWTEL_ORIGIN, f"{rdma_port_path(*key)}/state"), "netdev", None,
                            self.name) for key in old if key not in now]
        self._netdevs_sent = dict(now)
        return out

    def read(self) -> int:
        if not self._fds:
            return 0
        ok = _backend.reader.sysfs_read(self._fds, self.values, self._status)
        if ok != len(self._fds):
            bad = [i for i, st in enumerate(self._status) if st]
            self.note_error(f"unreadable: {', '.join(self.table.specs[i].leaf for i in bad[:5])}")
            # The device went away (driver reload): reopen at once. Other errors wait
            # for the periodic rescan rather than reopening every poll.
            if any(self._status[i] in (errno.ENODEV, errno.ENOENT, errno.ENXIO) for i in bad):
                self._reopen = True
        return ok

    def close(self) -> None:
        for fd in self._fds:
            try:
                os.close(fd)
            except OSError:
                pass
        self._fds = array("i")
        self._files = []


def _listdir(path: str) -> list[str]:
    try:
        return os.listdir(path)
    except OSError:
        return []


def _num(text: str) -> tuple[int, str]:
    # ASCII digits only: str.isdigit() is True for "²", which int() refuses
    return (int(text), text) if text.isascii() and text.isdigit() else (1 << 30, text)


def _text(name: str) -> str:
    """A directory entry's name (decoded with surrogateescape) as printable text for paths."""
    return escape_name(os.fsencode(name))


def _small_text(path: str) -> str:
    """The first line of a small sysfs file (a netdev's name), printable; "" when unreadable."""
    fd = _open_counter(path)
    if fd is None:
        return ""
    try:
        raw = os.read(fd, 256)
    except OSError:
        return ""
    finally:
        os.close(fd)
    return escape_name(raw.split(b"\n", 1)[0].strip())


def _open_counter(path: str) -> int | None:
    """An open fd of a counter file, or None when it is not one. Non-blocking, so a FIFO
    planted under the root cannot hold the tick thread at open (nor at read: pread on it
    fails), and regular files only (sysfs attributes are)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK | os.O_NOCTTY)
    except OSError:
        return None  # write-only or vanished: not a counter we can read
    try:
        if stat.S_ISREG(os.fstat(fd).st_mode):
            return fd
    except OSError:
        pass
    os.close(fd)
    return None
