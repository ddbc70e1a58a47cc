"""The data model between sources, the change engine and the exporters.

A source describes what it reads as a :class:`CounterTable`: one flat array of
counters, each belonging to a :class:`Container` (what becomes one gNMI
Notification prefix, e.g. ``/interfaces/interface[name=swp1]/state/counters``)
and named by a relative ``leaf`` (e.g. ``in-pkts``). The table is rebuilt only
when the set of ports changes; per tick only flat buffers move.

Each tick the engine publishes a :class:`Batch`: the indices of counters whose
value changed, with their cumulative values and deltas. Exporters read only
those indices, so unchanged counters cost no Python work.
"""

from __future__ import annotations

import threading
from array import array
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

# the path grammar is agent/pathgrammar.py; escape_key stays importable from here
from agent.pathgrammar import escape_key as escape_key

OPENCONFIG = "openconfig"
#: Origin of the agent's own extension paths (PFC, RDMA, raw driver counters,
#: insights, agent health); documented in docs/paths.md.
SWTEL_ORIGIN = "swtel"

COUNTER = 0
GAUGE = 1
HIDDEN = 2  # read (it shares a buffer layout with wanted counters) but never reported

# Change-kernel flags (agent/_ext/swtel.h mirrors these).
F_CHANGED = 0x01
F_WRAP = 0x02
F_RESET = 0x04
F_NEW = 0x08
F_JUMP = 0x10  # with F_RESET: a move larger than the counter's limit (see jump_limits)


@dataclass(frozen=True, slots=True)
class Container:
    """A gNMI notification prefix: origin plus an absolute path.

    ``path`` is in gNMI string form with keys, e.g.
    ``/interfaces/interface[name=swp1]/state/counters``.
    """

    origin: str
    path: str

    def full(self, leaf: str) -> str:
        """Display form of one leaf below this container (``origin:`` only if not OpenConfig)."""
        base = f"{self.path}/{leaf}" if leaf else self.path
        return base if self.origin == OPENCONFIG else f"{self.origin}:{base}"


@dataclass(frozen=True, slots=True)
class CounterSpec:
    """One counter as a source declares it."""

    container: Container
    leaf: str
    width: int = 64  # 32 or 64: a 32-bit counter wraps
    kind: int = COUNTER  # COUNTER, GAUGE or HIDDEN
    port: str | None = None  # interface name, for per-port insights


class SpecView(Sequence):
    """A :class:`CounterTable`'s counters as :class:`CounterSpec` objects, each made when it is
    read (the table keeps columns): indexable, sliceable, iterable; equal to a list of the same
    specs."""

    __slots__ = ("_table",)

    def __init__(self, table: CounterTable) -> None:
        self._table = table

    def __len__(self) -> int:
        return len(self._table.kinds)

    def __getitem__(self, i):  # type: ignore[override] - an int gives a spec, a slice a list
        if isinstance(i, slice):
            return [self[k] for k in range(*i.indices(len(self)))]
        t = self._table
        return CounterSpec(t.containers[t.container_ids[i]], t.leaves[t.leaf_ids[i]], t.widths[i], t.kinds[i],
                           t.ports[t.port_ids[i]])

    def __iter__(self) -> Iterator[CounterSpec]:
        t = self._table
        containers, leaves, ports = t.containers, t.leaves, t.ports
        for c, leaf, width, kind, port in zip(t.container_ids, t.leaf_ids, t.widths, t.kinds, t.port_ids, strict=True):
            yield CounterSpec(containers[c], leaves[leaf], width, kind, ports[port])

    def __eq__(self, other: object) -> bool:
        if isinstance(other, SpecView | list | tuple):
            return list(self) == list(other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment] - as a list's

    def __add__(self, other: Iterable[CounterSpec]) -> list[CounterSpec]:
        return [*self, *other]

    def __repr__(self) -> str:
        return f"SpecView({list(self)!r})"


class CounterTable:
    """Flat description of every counter one source reads, index-aligned with its buffers.

    Kept as columns, not as a CounterSpec a counter (issue 35, memory a value): a counter is
    three u32 indices into the table's distinct containers, leaves and ports, plus its width
    and kind bytes. The simulated spine's 17,637 counters took 1.3 MiB as objects in a list,
    0.25 MiB as columns. :attr:`specs` makes CounterSpec objects as they are read, for code
    that runs when a table is built; a loop over every counter can read the columns."""

    __slots__ = ("source", "containers", "leaves", "ports", "container_ids", "leaf_ids", "port_ids",
                 "widths", "kinds", "cache")

    def __init__(self, source: str, specs: Iterable[CounterSpec] = ()) -> None:
        self.source = source
        #: distinct containers, leaves and ports (None among them) in order of first use
        self.containers: list[Container] = []
        self.leaves: list[str] = []
        self.ports: list[str | None] = []
        self.container_ids, self.leaf_ids, self.port_ids = array("I"), array("I"), array("I")
        self.widths = self.kinds = b""
        #: Exporter caches keyed by exporter (e.g. pre-encoded path bytes); cleared on rebuild.
        self.cache: dict[str, Any] = {}
        if specs:
            build = TableBuilder(table=self)
            for s in specs:
                build.add(s.container, s.leaf, s.width, s.kind, s.port)
            build.done()

    @property
    def specs(self) -> SpecView:
        """Every counter as a :class:`CounterSpec` (made on access)."""
        return SpecView(self)

    def container_at(self, i: int) -> Container:
        return self.containers[self.container_ids[i]]

    def leaf_at(self, i: int) -> str:
        return self.leaves[self.leaf_ids[i]]

    def port_at(self, i: int) -> str | None:
        return self.ports[self.port_ids[i]]

    def path_at(self, i: int) -> tuple[Container, str]:
        """Counter ``i``'s (container, leaf), no CounterSpec made."""
        return self.containers[self.container_ids[i]], self.leaves[self.leaf_ids[i]]

    def __repr__(self) -> str:
        return f"CounterTable({self.source!r}, {len(self)} counters)"

    @property
    def paths(self) -> list[str]:
        """Display path of every counter, built on first use and kept (tests and tools; the
        agent's own code makes the few it needs: a spine's table would keep ~0.6 MiB)."""
        out = self.cache.get("paths")
        if out is None:
            out = self.cache["paths"] = [s.container.full(s.leaf) for s in self.specs]
        return out

    def __len__(self) -> int:
        return len(self.kinds)

    @property
    def visible(self) -> array:
        """Indices of the counters that are reported (all but HIDDEN), computed once: an
        ``array('I')`` (4 bytes an index; a list of ints kept ~0.5 MiB on the spine)."""
        idx = self.cache.get("visible")
        if idx is None:
            idx = self.cache["visible"] = array("I", [i for i, k in enumerate(self.kinds) if k != HIDDEN])
        return idx


class TableBuilder:
    """A :class:`CounterTable`'s columns, filled as a source adds its counters one by one (no
    CounterSpec object made: a source that lists a spine's 17,637 counters as objects first
    made a 1.3 MiB peak at start that Python's allocator keeps as empty pools)."""

    def __init__(self, source: str = "", table: CounterTable | None = None) -> None:
        self.table = CounterTable(source) if table is None else table
        t = self.table
        # the lists' values -> their index, while building only (not kept with the table)
        self._ids: tuple[dict, dict, dict] = tuple({v: k for k, v in enumerate(column)}  # type: ignore[assignment]
                                                   for column in (t.containers, t.leaves, t.ports))
        self._widths, self._kinds = bytearray(t.widths), bytearray(t.kinds)

    def __len__(self) -> int:
        return len(self._kinds)

    def _index(self, value: Any, which: int, column: list) -> int:
        ids = self._ids[which]
        k = ids.get(value)
        if k is None:
            k = ids[value] = len(column)
            column.append(value)
        return k

    def add(self, container: Container, leaf: str, width: int = 64, kind: int = COUNTER,
            port: str | None = None) -> None:
        t = self.table
        t.container_ids.append(self._index(container, 0, t.containers))
        t.leaf_ids.append(self._index(leaf, 1, t.leaves))
        t.port_ids.append(self._index(port, 2, t.ports))
        self._widths.append(width)
        self._kinds.append(kind)

    def done(self) -> CounterTable:
        t = self.table
        t.widths, t.kinds = bytes(self._widths), bytes(self._kinds)
        return t


@dataclass
class Batch:
    """What changed in one read of one source.

    ``values`` is the source's whole cumulative-value array (u64, wrap- and
    reset-corrected, so it never goes down for a counter); only ``indices`` changed.
    ``deltas[i]`` and ``flags[i]`` belong to ``indices[i]``. The engine gives ``indices`` as
    an ``array('I')`` and ``deltas`` as an ``array('q')`` (no Python int made per change: the C
    loops read them in place); any sequence of ints is taken as well.
    """

    source: str
    ts_ns: int
    table: CounterTable
    indices: Sequence[int]
    values: array
    deltas: Sequence[int]
    flags: bytes
    snapshot: bool = False  # True: every counter of the table, sent as a full snapshot

    def items(self):
        """Yield (spec, path, value, delta, flag) for every changed counter (each path made
        here: the table's whole list of paths is not kept for a few changes' sake)."""
        specs, values = self.table.specs, self.values
        for n, i in enumerate(self.indices):
            spec = specs[i]
            yield spec, spec.container.full(spec.leaf), values[i], self.deltas[n], self.flags[n]


# Not frozen: a frozen dataclass's __init__ sets each field through object.__setattr__, ~5x the
# cost of a plain one, and the FEC kernel calls it for every gauge that changes (~1,100 a tick at
# 1,024 ports, docs/PERFORMANCE.md). Nothing writes a StateUpdate once made; it stays hashable.
@dataclass(slots=True, unsafe_hash=True)
class StateUpdate:
    """A non-counter value that is sent on change: oper-status, insight events, agent health.
    Treated as immutable (shared by the store and every listener): never assign to one."""

    ts_ns: int
    container: Container
    leaf: str
    value: Any  # str, int, float or bool; None means the path was deleted
    source: str = ""

    @property
    def path(self) -> str:
        return self.container.full(self.leaf)


# ---------------------------------------------------------------- what can be encoded

class Unencodable:
    """Values left out of a message because they cannot be encoded (a path or a string that
    is not UTF-8): one such value is dropped and counted, never the message or the stream.
    Names from the kernel are escaped where links are parsed, so this stays 0 unless a source
    hands over raw bytes; counted across the exporters (status: tick.unencodable)."""

    def __init__(self) -> None:
        self.count = 0
        self._lock = threading.Lock()
        self._rate: Any = None

    def add(self, n: int, example: str) -> None:
        from agent import logs  # here: the data model alone (a plugin's helper) loads no logging

        with self._lock:
            self.count += n
            if self._rate is None:
                self._rate = logs.RateLimiter(60.0)
        self._rate.log(logs.get("encode"), "error", "unencodable", "value not encodable: dropped", values=n,
                       example=ascii(example)[:200], total=self.count)


UNENCODABLE = Unencodable()


def text_ok(value: str) -> bool:
    """``value`` encodes as UTF-8 (no lone surrogate, as a surrogate-escaped name holds)."""
    if value.isascii():
        return True
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _state_ok(u: StateUpdate) -> bool:
    v = u.value
    return text_ok(u.container.path) and text_ok(u.leaf) and (not isinstance(v, str) or text_ok(v))


def unencodable(table: CounterTable) -> frozenset[int]:
    """Indices of ``table``'s counters whose path cannot be encoded (cached per table)."""
    bad = table.cache.get("unencodable")
    if bad is None:
        ok_container: dict[Container, bool] = {}
        ok_leaf: dict[str, bool] = {}
        out = []
        for i, s in enumerate(table.specs):
            c = ok_container.get(s.container)
            if c is None:
                c = ok_container[s.container] = text_ok(s.container.path)
            leaf = ok_leaf.get(s.leaf)
            if leaf is None:
                leaf = ok_leaf[s.leaf] = text_ok(s.leaf)
            if not (c and leaf):
                out.append(i)
        bad = table.cache["unencodable"] = frozenset(out)
    return bad


def encodable_indices(table: CounterTable, indices: Any) -> Any:
    """``indices`` without the counters whose path cannot be encoded (dropped and counted)."""
    bad = unencodable(table)
    if not bad:
        return indices
    kept = [i for i in indices if i not in bad]
    if len(kept) != len(indices):
        dropped = next(i for i in indices if i in bad)
        UNENCODABLE.add(len(indices) - len(kept), table.specs[dropped].container.full(table.specs[dropped].leaf))
    return kept


def encodable_states(updates: Iterable[StateUpdate]) -> list[StateUpdate]:
    """``updates`` without those whose path or text value cannot be encoded (dropped and counted)."""
    updates = list(updates)
    kept = [u for u in updates if _state_ok(u)]
    if len(kept) != len(updates):
        bad = next(u for u in updates if not _state_ok(u))
        UNENCODABLE.add(len(updates) - len(kept), bad.container.full(bad.leaf))
    return kept


def encodable_containers(containers: Iterable[Container]) -> list[Container]:
    """``containers`` without those whose path cannot be encoded (dropped and counted)."""
    containers = list(containers)
    kept = [c for c in containers if text_ok(c.path)]
    if len(kept) != len(containers):
        UNENCODABLE.add(len(containers) - len(kept), next(c.path for c in containers if not text_ok(c.path)))
    return kept
