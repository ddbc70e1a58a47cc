"""lldp source: the LLDP neighbours lldpd knows, per local port, as OpenConfig LLDP 1.x states.

lldpd (Cumulus runs it by default; hosts often do) answers ``lldpcli -f json0 show neighbors
details``: json0 keeps one shape whatever the count (``-f json`` turns lists into dynamic keys).
lldpcli is a process outside the agent that may be missing, slow or hostile, so it never runs on
the tick thread: a worker thread runs it every ``refresh`` (and at once when ``lldpcli -f json0
watch`` prints ``lldp-added``, ``lldp-updated`` or ``lldp-deleted``), reads at most ``max_bytes``
within ``timeout``, kills it past either bound, and parses the answer into an immutable
:class:`Reading`. The tick's ``read`` only takes the newest reading (one attribute read) and turns
its changes into states; a hung lldpcli costs the worker its timeout, never a tick.

lldpd absent (no lldpcli, or no daemon behind its socket) is a state, not an error: status says
so (``info()["note"]``) and no neighbour is published. A failed run (timeout, too much output,
not json0) is counted as an error, named in the note, and keeps the last neighbours read (they
have their TTL). ``file`` reads a json0 document instead of running lldpcli: the simulator's
backend (``swtel fabric`` writes one per device from its topology).
"""

from __future__ import annotations

import json
import os
import re
import selectors
import signal
import subprocess
import threading
import time
from array import array
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from agent.config import Duration, setting
from agent.counters import OPENCONFIG, Container, CounterTable, StateUpdate
from agent.files import read_regular
from agent.pathgrammar import escape_key, interface_path
from agent.registry import FarEnd, InfoMetric
from agent.sources.base import NO_DATA, Source, SourceConfig, register

#: lldpd's id subtypes (``id[].type``) -> OpenConfig LLDP's ``chassis-id-type`` / ``port-id-type``
CHASSIS_ID_TYPES = {"mac": "MAC_ADDRESS", "ifname": "INTERFACE_NAME", "ifalias": "INTERFACE_ALIAS",
                    "ip": "NETWORK_ADDRESS", "local": "LOCAL", "component": "CHASSIS_COMPONENT"}
PORT_ID_TYPES = {"mac": "MAC_ADDRESS", "ifname": "INTERFACE_NAME", "ifalias": "INTERFACE_ALIAS",
                 "ip": "NETWORK_ADDRESS", "local": "LOCAL", "agentcid": "AGENT_CIRCUIT_ID",
                 "component": "PORT_COMPONENT"}
#: a neighbour's state leaves, in the order docs/paths.md lists them
LEAVES = ("id", "system-name", "system-description", "chassis-id", "chassis-id-type", "port-id",
          "port-id-type", "port-description", "ttl", "age")
MGMT_LEAVES = ("address", "interface-number")
#: what lldpd's TLVs can carry is short (a TLV holds at most 511 bytes): longer text is cut here
MAX_TEXT = 512
#: one local port rarely has more than a handful of neighbours; a flood beyond this is cut
MAX_NEIGHBORS = 4096
#: the words lldpcli says when no lldpd answers on the socket (lldpctl's "unable to connect")
_NOT_RUNNING = re.compile(rb"unable to connect|connection refused|no such file", re.IGNORECASE)
_AGE = re.compile(r"^\s*(\d+)\s+days?,\s*(\d+):(\d+):(\d+)\s*$")
_WATCH_EVENTS = (b'"lldp-added"', b'"lldp-updated"', b'"lldp-deleted"')


def interface_container(ifname: str) -> str:
    """``/lldp/interfaces/interface[name=X]``: the interface list under OpenConfig's lldp root."""
    return "/lldp" + interface_path(ifname)


def neighbor_container(ifname: str, nid: str) -> Container:
    """``/lldp/interfaces/interface[name=X]/neighbors/neighbor[id=N]/state``."""
    return Container(OPENCONFIG, f"{interface_container(ifname)}/neighbors/neighbor[id={escape_key(nid)}]/state")


def mgmt_container(ifname: str, nid: str, address: str) -> Container:
    """``.../neighbor[id=N]/mgmt-addresses/mgmt-address[address=A]/state`` (OpenConfig LLDP 1.0's list)."""
    base = f"{interface_container(ifname)}/neighbors/neighbor[id={escape_key(nid)}]"
    return Container(OPENCONFIG, f"{base}/mgmt-addresses/mgmt-address[address={escape_key(address)}]/state")


@dataclass(frozen=True)
class Neighbor:
    """One neighbour of one local port, as lldpd reported it."""

    interface: str
    id: str  # lldpd's remote index (``rid``): the list key OpenConfig leaves to the system
    chassis_id: str = ""
    chassis_id_type: str = ""
    system_name: str = ""
    system_description: str = ""
    port_id: str = ""
    port_id_type: str = ""
    port_description: str = ""
    ttl: int | None = None
    age: int | None = None  # seconds since lldpd last saw it change
    mgmt: tuple[tuple[str, int | None], ...] = ()  # (address, interface number)

    def leaves(self) -> dict[str, Any]:
        values = {"id": self.id, "system-name": self.system_name, "system-description": self.system_description,
                  "chassis-id": self.chassis_id, "chassis-id-type": self.chassis_id_type, "port-id": self.port_id,
                  "port-id-type": self.port_id_type, "port-description": self.port_description,
                  "ttl": self.ttl, "age": self.age}
        return {k: v for k, v in values.items() if v is not None and v != ""}


@dataclass(frozen=True)
class Reading:
    """What the worker made of one lldpcli run (immutable: the tick only reads it)."""

    generation: int
    #: "ok", "absent" (no lldpcli, no lldpd: not an error) or "error"
    state: str
    note: str
    neighbors: tuple[Neighbor, ...] | None  # None: keep the last ones (a failed run)
    took_ms: float = 0.0
    size: int = 0
    #: (container, leaf) -> value of the neighbours' states, made on the worker's thread (the
    #: tick only compares): None with ``neighbors``
    states: dict[tuple[Container, str], Any] | None = None

    def __post_init__(self) -> None:
        if self.states is None and self.neighbors is not None:
            object.__setattr__(self, "states", neighbor_states(self.neighbors))


# ---------------------------------------------------------------- json0, defensively


def _text(value: Any) -> str:
    """A string of lldpcli's JSON made safe: str, cut, no lone surrogates (unencodable in gNMI)."""
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        return ""
    text = str(value)[:MAX_TEXT]
    return text.encode("utf-8", "replace").decode("utf-8")


def _items(obj: Any, key: str) -> list[dict]:
    """json0's lists of objects (``"chassis": [{...}]``): the dicts of ``obj[key]``, else none."""
    value = obj.get(key) if isinstance(obj, dict) else None
    if isinstance(value, dict):  # -f json's shape for a single item: accepted too
        value = [value]
    return [v for v in value if isinstance(v, dict)] if isinstance(value, list) else []


def _value(obj: Any, key: str) -> str:
    """The first ``{"value": V}`` of ``obj[key]`` (json0), or a plain string there."""
    raw = obj.get(key) if isinstance(obj, dict) else None
    if isinstance(raw, str):
        return _text(raw)
    for item in _items(obj, key):
        if "value" in item:
            return _text(item["value"])
    return ""


def _int(text: str) -> int | None:
    return int(text) if text.isdigit() and len(text) < 12 else None


def parse_age(text: str) -> int | None:
    """lldpd's ``"1 day, 02:03:04"`` in seconds (None when it is not that shape)."""
    m = _AGE.match(text)
    if m is None:
        return None
    days, hours, minutes, seconds = (int(g) for g in m.groups())
    return days * 86400 + hours * 3600 + minutes * 60 + seconds


def _id(obj: dict, types: dict[str, str]) -> tuple[str, str]:
    for item in _items(obj, "id"):
        raw_type = _text(item.get("type")).lower()
        return _text(item.get("value")), types.get(raw_type, raw_type.upper())
    return "", ""


def parse_neighbors(document: Any) -> tuple[Neighbor, ...]:
    """Every neighbour of a ``lldpcli -f json0 show neighbors details`` document; what is not
    that shape is skipped, never raised (``{"lldp": [{}]}``, lldpd's answer without neighbours,
    gives none). Raises ValueError only when the document is not lldpcli's at all."""
    if not isinstance(document, dict) or "lldp" not in document:
        raise ValueError("no top-level 'lldp'")
    out: list[Neighbor] = []
    seen: set[tuple[str, str]] = set()
    for lldp in _items(document, "lldp"):
        for index, iface in enumerate(_items(lldp, "interface")):
            ifname = _text(iface.get("name"))
            if not ifname:
                continue
            nid = _text(iface.get("rid")) or str(index + 1)
            if (ifname, nid) in seen or len(out) >= MAX_NEIGHBORS:
                continue
            seen.add((ifname, nid))
            chassis = (_items(iface, "chassis") or [{}])[0]
            port = (_items(iface, "port") or [{}])[0]
            chassis_id, chassis_type = _id(chassis, CHASSIS_ID_TYPES)
            port_id, port_type = _id(port, PORT_ID_TYPES)
            # lldpd 1.0.16 puts the TTL below the port; later versions beside it
            ttl = _int(_value(port, "ttl") or _value(iface, "ttl"))
            ifnums = [_int(v) for v in (_text(i.get("value")) for i in _items(chassis, "mgmt-iface"))]
            mgmt = []
            for k, item in enumerate(_items(chassis, "mgmt-ip")):
                address = _text(item.get("value"))
                if address and address not in (a for a, _n in mgmt):
                    mgmt.append((address, ifnums[k] if k < len(ifnums) else None))
            out.append(Neighbor(
                interface=ifname, id=nid, chassis_id=chassis_id, chassis_id_type=chassis_type,
                system_name=_value(chassis, "name"), system_description=_value(chassis, "descr"),
                port_id=port_id, port_id_type=port_type, port_description=_value(port, "descr"),
                ttl=ttl, age=parse_age(_text(iface.get("age"))), mgmt=tuple(mgmt)))
    return tuple(out)


def neighbor_states(neighbors: tuple[Neighbor, ...]) -> dict[tuple[Container, str], Any]:
    """(container, leaf) -> value of every state the neighbours make."""
    out: dict[tuple[Container, str], Any] = {}
    for n in neighbors:
        container = neighbor_container(n.interface, n.id)
        for leaf, value in n.leaves().items():
            out[(container, leaf)] = value
        for address, ifnum in n.mgmt:
            mc = mgmt_container(n.interface, n.id, address)
            out[(mc, "address")] = address
            if ifnum is not None:
                out[(mc, "interface-number")] = ifnum
    return out


def far_end_name(leaves: dict[str, Any]) -> str:
    """How an event names a neighbour (``leaf-3 swp61``): its system name (else its chassis id)
    and its port. A switch's port id is its ifname (Cumulus' ``portidsubtype ifname``); plain
    lldpd on a host sends its MAC as port id and its ifname as description, which names it
    better."""
    system = str(leaves.get("system-name") or leaves.get("chassis-id") or "")
    port = str(leaves.get("port-id") or "")
    if (leaves.get("port-id-type") == "MAC_ADDRESS" and leaves.get("port-description")) or not port:
        port = str(leaves.get("port-description") or port)
    return " ".join(part for part in (system, port) if part)


# ---------------------------------------------------------------- lldpcli, bounded


@dataclass
class Run:
    """One bounded run of a command: its exit code (None: killed), what it printed, why it was cut."""

    code: int | None
    out: bytes
    err: bytes
    cut: str = ""  # "": ended by itself


def run_bounded(argv: list[str], timeout_s: float, max_bytes: int,
                started: Callable[[subprocess.Popen | None], None] = lambda _p: None) -> Run:
    """Run ``argv`` without a shell, reading at most ``max_bytes`` of stdout (and 4 KiB of
    stderr) within ``timeout_s``; past either bound the process (its own session) is killed.
    ``started`` is told the process, then None when it is over (so that a stop can kill it).
    Raises FileNotFoundError / PermissionError when it cannot be started."""
    proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            start_new_session=True, close_fds=True)
    started(proc)
    try:
        return _read_bounded(proc, timeout_s, max_bytes)
    finally:
        started(None)


def _read_bounded(proc: subprocess.Popen, timeout_s: float, max_bytes: int) -> Run:
    out, err, cut = bytearray(), bytearray(), ""
    deadline = time.monotonic() + timeout_s
    assert proc.stdout is not None and proc.stderr is not None
    with selectors.DefaultSelector() as sel:
        sel.register(proc.stdout, selectors.EVENT_READ, out)
        sel.register(proc.stderr, selectors.EVENT_READ, err)
        open_pipes = 2
        while open_pipes:
            left = deadline - time.monotonic()
            if left <= 0:
                cut = f"no answer in {timeout_s:g} s"
                break
            for key, _ev in sel.select(left):
                chunk = os.read(key.fd, 65536)
                if not chunk:
                    sel.unregister(key.fileobj)
                    open_pipes -= 1
                    continue
                buf = key.data
                if buf is out and len(out) + len(chunk) > max_bytes:
                    cut = f"output over {max_bytes} bytes"
                    break
                if buf is err and len(err) >= 4096:
                    continue
                buf += chunk
            if cut:
                break
    if cut:
        _kill(proc)
    try:
        code = proc.wait(max(0.0, deadline - time.monotonic()) + 1.0)
    except subprocess.TimeoutExpired:  # closed its pipes but lingers: the bound still holds
        _kill(proc)
        cut = cut or f"no exit in {timeout_s:g} s"
        code = None
    proc.stdout.close()
    proc.stderr.close()
    return Run(None if cut else code, bytes(out), bytes(err), cut)


def _kill(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)  # its own session: whatever it started goes too
    except (ProcessLookupError, PermissionError):
        pass
    try:
        proc.wait(5.0)
    except subprocess.TimeoutExpired:  # unkillable (D state): reaped by init later
        pass


# ---------------------------------------------------------------- the worker (off the tick thread)


class Worker:
    """Runs lldpcli every ``refresh`` and when its watch reports a change; ``latest`` is the
    newest :class:`Reading` (None until the first run ends). Two threads: the reader and the
    watcher; ``stop`` ends both and kills what they run."""

    def __init__(self, section: Any) -> None:
        self.section = section
        self.latest: Reading | None = None
        self.runs = 0
        self.watch_events = 0
        self._wake = threading.Event()
        self._stopping = threading.Event()
        self._watch_proc: subprocess.Popen | None = None
        self._run_proc: subprocess.Popen | None = None  # the lldpcli run under way
        self._lock = threading.Lock()  # the process handles, between the worker's threads and stop
        self._threads: list[threading.Thread] = []

    def base_argv(self) -> list[str]:
        argv = [str(self.section.lldpcli)]
        if self.section.socket:
            argv += ["-u", str(self.section.socket)]
        return argv

    def start(self) -> None:
        self._threads = [threading.Thread(target=self._read_loop, name="swtel-lldp", daemon=True)]
        if self.section.watch and not self.section.file:
            self._threads.append(threading.Thread(target=self._watch_loop, name="swtel-lldp-watch", daemon=True))
        for t in self._threads:
            t.start()

    def interrupt(self) -> None:
        """Stop now: what runs is killed (the threads then end by themselves)."""
        self._stopping.set()
        self._wake.set()
        with self._lock:
            procs = [p for p in (self._watch_proc, self._run_proc) if p is not None]
        for proc in procs:
            _kill(proc)

    def stop(self) -> None:
        self.interrupt()
        for t in self._threads:
            t.join(float(self.section.timeout) + 2.0)

    def _running(self, proc: subprocess.Popen | None) -> None:
        with self._lock:
            self._run_proc = proc
        if proc is not None and self._stopping.is_set():
            _kill(proc)

    def poke(self) -> None:
        """Read again now (a watch event)."""
        self._wake.set()

    def _read_loop(self) -> None:
        generation = 0
        while not self._stopping.is_set():
            self._wake.clear()
            generation += 1
            try:
                self.latest = self.fetch(generation)
            except Exception as exc:  # noqa: BLE001 - a bug here must not end the neighbours for good
                self.latest = Reading(generation, "error", f"internal: {exc!r}"[:300], None)
            self.runs += 1
            self._wake.wait(float(self.section.refresh))

    def fetch(self, generation: int) -> Reading:
        """One read of lldpd's neighbours (or of ``file``), bounded: a Reading, never raises."""
        sec = self.section
        t0 = time.monotonic()
        if sec.file:
            try:
                data = read_regular(sec.file, int(sec.max_bytes) + 1)
            except FileNotFoundError:
                return Reading(generation, "absent", f"no neighbours file {sec.file}", ())
            except OSError as exc:
                return Reading(generation, "error", f"{sec.file}: {exc.strerror or exc}", None)
            if len(data) > sec.max_bytes:
                return Reading(generation, "error", f"{sec.file}: over {sec.max_bytes} bytes", None)
            return self._parse(generation, data, t0, sec.file)
        argv = [*self.base_argv(), "-f", "json0", "show", "neighbors", "details"]
        try:
            run = run_bounded(argv, float(sec.timeout), int(sec.max_bytes), self._running)
        except FileNotFoundError:
            return Reading(generation, "absent", f"lldpd absent: no {sec.lldpcli} (no neighbours read)", ())
        except OSError as exc:
            return Reading(generation, "error", f"{sec.lldpcli} not run: {exc.strerror or exc}", None)
        took = (time.monotonic() - t0) * 1000
        if self._stopping.is_set():
            return Reading(generation, "error", "stopped", None, took)
        if run.cut:
            return Reading(generation, "error", f"lldpcli killed: {run.cut}", None, took, len(run.out))
        if run.code != 0:
            said = run.err.decode("utf-8", "replace").strip().splitlines()
            detail = said[-1][:200] if said else f"exit {run.code}"
            if _NOT_RUNNING.search(run.err):
                return Reading(generation, "absent", f"lldpd not running ({detail})", (), took)
            return Reading(generation, "error", f"lldpcli failed: {detail}", None, took)
        return self._parse(generation, run.out, t0, "lldpcli")

    @staticmethod
    def _parse(generation: int, data: bytes, t0: float, what: str) -> Reading:
        took = (time.monotonic() - t0) * 1000
        try:
            neighbors = parse_neighbors(json.loads(data))
        except (ValueError, RecursionError) as exc:  # UnicodeDecodeError and JSONDecodeError are ValueErrors
            return Reading(generation, "error", f"{what}'s output is not lldpd json0: {str(exc)[:120]}", None,
                           took, len(data))
        return Reading(generation, "ok", f"{len(neighbors)} neighbours", neighbors, took, len(data))

    def _watch_loop(self) -> None:
        """``lldpcli -f json0 watch``: each added/updated/deleted record pokes the reader (its
        content is not parsed: the reader's full answer is the one truth). Started again after
        ``refresh`` when it ends (lldpd restarted, absent)."""
        argv = [*self.base_argv(), "-f", "json0", "watch"]
        while not self._stopping.is_set():
            try:
                proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                        stderr=subprocess.DEVNULL, start_new_session=True, close_fds=True)
            except OSError:
                proc = None
            if proc is not None:
                with self._lock:
                    self._watch_proc = proc
                if self._stopping.is_set():
                    _kill(proc)
                for _event in self._watch_events(proc):
                    self.watch_events += 1
                    self._wake.set()
                _kill(proc)
                with self._lock:
                    self._watch_proc = None
            self._stopping.wait(float(self.section.refresh))

    @staticmethod
    def _watch_events(proc: subprocess.Popen) -> Iterator[bytes]:
        """The event names in the watch's output, read in chunks: only a short tail is kept
        across chunks, so a watch that prints without end costs no memory."""
        assert proc.stdout is not None
        tail = b""
        keep = max(len(e) for e in _WATCH_EVENTS)
        while True:
            chunk = os.read(proc.stdout.fileno(), 65536)
            if not chunk:
                proc.stdout.close()
                return
            text = tail + chunk
            for event in _WATCH_EVENTS:
                if event in text:
                    yield event
            tail = text[-keep:]


# ---------------------------------------------------------------- the source


@dataclass
class LldpConfig(SourceConfig):
    """``sources.lldp``."""

    enabled: bool = setting(False)
    interval: Duration | None = setting(Duration(1.0), type="duration (10ms–1h) or null", doc=(
        "how often the tick takes lldpcli's newest answer (a look-up: lldpcli runs on its own "
        "thread, every `refresh`)"))
    refresh: Duration = setting(Duration(30.0), type="duration (1s–1h)", doc=(
        "how often lldpcli is asked again (30 s is LLDP's transmit interval); at once too when "
        "`lldpcli watch` reports a neighbour added, updated or deleted"))
    lldpcli: str = setting("lldpcli", type="command name or absolute path", doc=(
        "the lldpcli to run (`-f json0 show neighbors details`); missing, lldpd is taken as absent"))
    socket: str | None = setting(None, type="path or null", doc=(
        "lldpd's control socket (`lldpcli -u`, for an lldpd started with `-u`); null: lldpd's default "
        "(`/run/lldpd.socket`, group `_lldpd`: the agent's user needs that group)"))
    file: str | None = setting(None, type="path or null", doc=(
        "read a `lldpcli -f json0 show neighbors details` document from this file instead of running "
        "lldpcli (the simulator: `swtel fabric` writes one per device)"))
    timeout: Duration = setting(Duration(5.0), type="duration (100ms–60s)", doc=(
        "an lldpcli run that has not ended by then is killed (status says so; the last neighbours stay)"))
    max_bytes: int = setting(4 << 20, type="integer (4096–67108864)", doc=(
        "the most of lldpcli's output read; more and it is killed (about 2 KB a neighbour)"))
    watch: bool = setting(True, doc=(
        "run `lldpcli -f json0 watch` beside, to read again as soon as a neighbour changes"))


@register
class LldpSource(Source):
    name = "lldp"
    config_class = LldpConfig
    doc = "LLDP neighbours per local port, from lldpd (`lldpcli -f json0`), as OpenConfig LLDP states"
    uses_links = False
    selects_ports = False  # neighbours of whatever ports lldpd runs on: no interface to select
    #: Cumulus' own (5.13+, `nv set system telemetry lldp export state enabled`): the same name and
    #: attributes, so that one PromQL join works over swtel and Cumulus-native switches
    info_metrics = (InfoMetric(
        "nvswitch_lldp_neighbor_info", neighbor_container("{X}", "{X}").path,
        ("interface", ""),
        (("chassis-id", "chassis_id"), ("chassis-id-type", "chassis_id_type"), ("port-id", "port_id"),
         ("port-id-type", "port_id_type"), ("port-description", "port_description"),
         ("system-name", "system_name"), ("system-description", "system_description")),
        doc="sources.lldp: one per neighbour (Cumulus 5.13+'s name and attributes)"),)
    #: every event on a port with a neighbour names it (agent/insights/neighbors.py)
    far_ends = (FarEnd(neighbor_container("{X}", "{X}").path, "{0}", far_end_name),)

    @classmethod
    def check(cls, section: LldpConfig, where: str, problems: list[str], cfg: Any) -> None:
        if not 1.0 <= float(section.refresh) <= 3600.0:
            problems.append(f"{where}.refresh: between 1s and 1h, got {section.refresh}")
        if not 0.1 <= float(section.timeout) <= 60.0:
            problems.append(f"{where}.timeout: between 100ms and 60s, got {section.timeout}")
        if not 4096 <= int(section.max_bytes) <= 64 << 20:
            problems.append(f"{where}.max_bytes: between 4096 and 67108864, got {section.max_bytes}")
        if not str(section.lldpcli).strip():
            problems.append(f"{where}.lldpcli: a command name or path, got an empty string")

    @classmethod
    def doc_paths(cls) -> list[str]:
        state = neighbor_container("X", "N").path
        mgmt = mgmt_container("X", "N", "A").path
        out = ["## LLDP neighbours (lldpd)", "",
               "From `lldpcli -f json0 show neighbors details` (`sources.lldp`), per local port X and "
               "neighbour N (lldpd's remote index), as OpenConfig LLDP 1.x states: sent when they change, "
               "deleted when the neighbour goes. `chassis-id-type` and `port-id-type` are OpenConfig's "
               "enums (`MAC_ADDRESS`, `INTERFACE_NAME` ...): a Cumulus switch sends its ifname as port "
               "id, plain lldpd on a host its MAC (and the ifname as description). `age`: seconds since "
               "lldpd saw the neighbour change, as of the last lldpcli run. Management addresses are "
               "OpenConfig LLDP 1.0's `mgmt-addresses` list; Cumulus' own gNMI still serves the "
               "deprecated `management-address` and `management-address-type` leaves, which swtel does "
               "not.", "", "| source | value | path | kind |", "|---|---|---|---|"]
        out += [f"| lldp | {leaf} | `{state}/{leaf}` | state |" for leaf in LEAVES]
        out += [f"| lldp | {leaf} | `{mgmt}/{leaf}` | state |" for leaf in MGMT_LEAVES]
        return out + [""]

    def __init__(self, cfg: Any) -> None:
        super().__init__(cfg)
        self._worker: Worker | None = None
        self._seen = 0  # the generation of the reading last taken
        self._published: dict[tuple[Container, str], Any] = {}
        self._pending: list[StateUpdate] = []
        self._state, self._note = "starting", "no lldpcli answer yet"
        self._neighbors = 0

    def setup(self, links: Any) -> None:
        self.table = CounterTable(self.name, [])
        self.values = array("Q")
        if self._worker is None:
            self._worker = Worker(self.section)
            self._worker.start()

    def read(self) -> int:
        reading = self._worker.latest if self._worker is not None else None
        if reading is None:
            return NO_DATA
        if reading.generation == self._seen:
            return 0
        self._seen = reading.generation
        self._state, self._note = reading.state, reading.note
        if reading.state == "error":
            self.note_error(reading.note)
        if reading.neighbors is None:  # a failed run: the last neighbours stand (they have their TTL)
            return 0
        self._neighbors = len(reading.neighbors)
        self._diff(reading.states or {}, time.time_ns())
        return len(reading.neighbors)

    def _diff(self, now: dict[tuple[Container, str], Any], ts_ns: int) -> None:
        old = self._published
        out = [StateUpdate(ts_ns, c, leaf, v, self.name) for (c, leaf), v in now.items() if old.get((c, leaf)) != v]
        out += [StateUpdate(ts_ns, c, leaf, None, self.name) for (c, leaf) in old if (c, leaf) not in now]
        self._published = now
        self._pending += out

    def states(self, ts_ns: int) -> list[StateUpdate]:
        out, self._pending = self._pending, []
        return out

    def inherit(self, old: Source) -> None:
        if isinstance(old, LldpSource):  # what a reload's predecessor published is not sent again
            self._published = dict(old._published)

    def interrupt(self) -> None:
        if self._worker is not None:  # a hung lldpcli is killed now, not at its timeout
            self._worker.interrupt()

    def close(self) -> None:
        if self._worker is not None:
            self._worker.stop()
            self._worker = None

    def info(self) -> dict[str, Any]:
        w = self._worker
        return {"note": f"lldp {self._state}: {self._note}", "lldp_state": self._state,
                "neighbors": self._neighbors, "lldpcli_runs": w.runs if w else 0,
                "watch_events": w.watch_events if w else 0,
                "last_run_ms": round(w.latest.took_ms, 1) if w and w.latest else None}


__all__ = ["LldpConfig", "LldpSource", "Neighbor", "Reading", "Worker", "far_end_name", "parse_neighbors",
           "run_bounded"]
