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
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
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


@dataclass
class CounterTable:
    """Flat description of every counter one source reads, index-aligned with its buffers."""

    source: str
    specs: list[CounterSpec]
    widths: bytes = b""
    kinds: bytes = b""
    #: Exporter caches keyed by exporter (e.g. pre-encoded path bytes); cleared on rebuild.
    cache: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.widths = bytes(s.width for s in self.specs)
        self.kinds = bytes(s.kind for s in self.specs)

    @property
    def paths(self) -> list[str]:
        """Display path of every counter, built on first use and kept (tests and tools; the
        agent's own code makes the few it needs: a spine's table would keep ~0.6 MiB)."""
        out = self.cache.get("paths")
        if out is None:
            out = self.cache["paths"] = [s.container.full(s.leaf) for s in self.specs]
        return out

    def __len__(self) -> int:
        return len(self.specs)

    @property
    def visible(self) -> array:
        """Indices of the counters that are reported (all but HIDDEN), computed once: an
        ``array('I')`` (4 bytes an index; a list of ints kept ~0.5 MiB on the spine)."""
        idx = self.cache.get("visible")
        if idx is None:
            idx = self.cache["visible"] = array("I", [i for i, k in enumerate(self.kinds) if k != HIDDEN])
        return idx


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
