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

from array import array
from collections.abc import Sequence
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
        """Display path of every counter, built on first use (only text exporters need it)."""
        out = self.cache.get("paths")
        if out is None:
            out = self.cache["paths"] = [s.container.full(s.leaf) for s in self.specs]
        return out

    def __len__(self) -> int:
        return len(self.specs)

    @property
    def visible(self) -> list[int]:
        """Indices of the counters that are reported (all but HIDDEN), computed once."""
        idx = self.cache.get("visible")
        if idx is None:
            idx = self.cache["visible"] = [i for i, k in enumerate(self.kinds) if k != HIDDEN]
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
        """Yield (spec, path, value, delta, flag) for every changed counter."""
        specs, paths, values = self.table.specs, self.table.paths, self.values
        for n, i in enumerate(self.indices):
            yield specs[i], paths[i], values[i], self.deltas[n], self.flags[n]


@dataclass(frozen=True, slots=True)
class StateUpdate:
    """A non-counter value that is sent on change: oper-status, insight events, agent health."""

    ts_ns: int
    container: Container
    leaf: str
    value: Any  # str, int, float or bool; None means the path was deleted
    source: str = ""

    @property
    def path(self) -> str:
        return self.container.full(self.leaf)
