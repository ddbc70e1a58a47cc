"""The engine's port ledger: which sources hold data for which interface, so that an
interface's whole subtree is deleted once, when the last source holding it drops it.

A source holds the interfaces its counter table has data for (``ports_of``). When a source
drops ports (its table lost them, or it was turned off), :meth:`PortLedger.release` says
which of them no source holds any more; :func:`deletes` turns those and the containers
dropped in the same pass into the deletes that go out: each vanished interface's subtree
in both origins, then the other containers one by one (those of an interface that another
source still reads).

It also elects which source's counter a path carries when two sources give the same counter
of one port (:func:`elect`): the kernel's ``rx_bytes`` and an ASIC plugin's ``HwIfInOctets``
are both the port's ``/interfaces/interface[name=X]/state/counters/in-octets``; the one of
higher rank (``sources.<name>.rank``) is published there, the other under the swtel origin
with its source's name in the path (:func:`yielded`). A switch's hardware counter that no
other source gives is published on its standard leaf as well, and while a source of higher
rank is still opening (an ASIC plugin in its helper), the standard leaves it may give are
kept from the lower-ranked sources (``holds``), so a leaf's first value is already the
winner's. Only the labels published change:
each source's change-kernel state stays keyed by its own table, so a new winner never
corrupts a delta. docs/paths.md ("One counter, one path") says it for users.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import NamedTuple

from agent.counters import HIDDEN, OPENCONFIG, SWTEL_ORIGIN, Container, CounterSpec, CounterTable, TableBuilder
from agent.pathgrammar import INTERFACE_PREFIX, interface_path, read_key
from agent.sources.drivers import HW_STANDARD


def ports_of(table: CounterTable) -> set[str]:
    """Interfaces this table has data for (their subtree is deleted when the last source drops them)."""
    port_at, container_at = table.port_at, table.container_at
    return {port for i in range(len(table))
            if (port := port_at(i)) and container_at(i).path.startswith(INTERFACE_PREFIX)}


class PortLedger:
    """Interface name -> the sources holding data for it."""

    def __init__(self) -> None:
        self._holders: dict[str, set[str]] = {}

    def hold(self, source: str, table: CounterTable) -> None:
        """``source``'s (new) table: it holds every interface the table has data for."""
        for port in ports_of(table):
            self._holders.setdefault(port, set()).add(source)

    def release(self, source: str, ports: Iterable[str]) -> set[str]:
        """``source`` no longer has data for ``ports``: those no source holds any more."""
        vanished: set[str] = set()
        for port in ports:
            holders = self._holders.get(port)
            if holders is None:
                continue
            holders.discard(source)
            if not holders:
                del self._holders[port]
                vanished.add(port)
        return vanished

    def holders(self, port: str) -> frozenset[str]:
        """The sources holding data for ``port`` (empty: none)."""
        return frozenset(self._holders.get(port, ()))

    def __contains__(self, port: object) -> bool:
        return port in self._holders

    def __len__(self) -> int:
        return len(self._holders)


def deletes(vanished: set[str], containers: set[Container]) -> list[Container]:
    """What goes out for one pass's drops: the whole subtree (both origins) of each vanished
    interface, sorted by name, then the dropped containers not under one of those, sorted."""
    whole = [interface_path(p) for p in sorted(vanished)]
    out = [Container(origin, p) for p in whole for origin in (OPENCONFIG, SWTEL_ORIGIN)]
    out += sorted((c for c in containers if not any(c.path.startswith(p + "/") for p in whole)),
                  key=lambda c: (c.origin, c.path))
    return out


# ---------------------------------------------------------------- one counter, one path

#: a counter's group, the path it stands for: ``(origin, container path, leaf)``, a tuple of
#: strings the table's specs already hold (no string made per counter; a tuple of strings
#: hashes in C from their cached hashes, so the sets below cost no Python loop per counter)
Key = tuple[str, str, str]
#: a key's counters in one table: the index of the one counter on its own path (the common
#: case: no list, no tuple), ``~index`` of a hardware counter
#: standing for a standard leaf (an alias), or a list of those when several share the key
Members = int | list[int]
#: a table's relabelled counters: index -> (container, leaf) published instead of its own
Moves = dict[int, tuple[Container, str]]

_HW_TAIL = "/hw/state/counters"
_STD_TAIL = "/state/counters"
#: the standard leaves of a port that a hardware source may give (its HwIf* counters and its
#: carrier changes): what a source still opening keeps from the lower-ranked ones
STANDARD_LEAVES = frozenset(HW_STANDARD.values()) | {"carrier-transitions"}
#: a source still opening: (its rank, whether it may give a port's counters)
Hold = tuple[int, Callable[[str], bool]]


def standard_key(spec: CounterSpec) -> tuple[Key, bool] | None:
    """The path a reported counter of a port stands for, and whether that is another path
    than its own: a switch's hardware counter (``swtel:.../hw/state/counters/in-octets``,
    switchd's ``HwIfInOctets``) stands for the interface's OpenConfig leaf
    (``.../state/counters/in-octets``, drivers.HW_STANDARD); any other counter for its own
    path. None: not a port's reported counter."""
    if spec.kind == HIDDEN or not spec.port:
        return None
    c = spec.container
    std = HW_STANDARD.get(spec.leaf)
    if std is not None and c.origin == SWTEL_ORIGIN and c.path.endswith(_HW_TAIL):
        base = c.path[:-len(_HW_TAIL)]
        if base == interface_path(spec.port):
            return (OPENCONFIG, f"{base}{_STD_TAIL}", std), True
    return (c.origin, c.path, spec.leaf), False


def key_path(key: Key) -> tuple[Container, str]:
    """The (container, leaf) a :func:`standard_key` names."""
    origin, path, leaf = key
    return Container(origin, path), leaf


def _add(out: dict[Key, Members], key: Key, member: int) -> None:
    have = out.get(key)
    if have is None:
        out[key] = member
    elif isinstance(have, list):
        have.append(member)
    else:
        out[key] = [have, member]


def members(entry: Members) -> list[tuple[int, bool]]:
    """A :func:`keys_of` entry as (index, alias?) pairs."""
    return [(~m, True) if m < 0 else (m, False) for m in (entry if isinstance(entry, list) else (entry,))]


class TableKeys(NamedTuple):
    """What an election needs of one table (:func:`keys_of`)."""

    #: per :func:`standard_key`, the indices of the counters it gives (:func:`members` reads them)
    members: dict[Key, Members]
    #: a hardware counter's key -> the standard (container, leaf) it stands for
    standard_to: dict[Key, tuple[Container, str]]
    #: (index, port) of the counters on a port's :data:`STANDARD_LEAVES`
    standard_leaves: list[tuple[int, str]]


def keys_of(table: CounterTable, contested: set[Container] | None = None) -> TableKeys:
    """``table``'s reported counters by :func:`standard_key`. Made at each election and not
    kept: elections run only when a table changes, and the spine's ~17,000 keys would hold
    ~2 MiB for the agent's life (issue 35, memory a value). ``contested``: the containers
    another table has counters in too (:func:`contested`); a counter in none of them shares
    its path with no one, so it gets no key (a hardware counter standing for a standard leaf
    always does). The spine's single ASIC table then keys ~700 counters, not 17,000: the keys
    were the start's highest point of Python's small objects (2.5 MiB), kept as its arenas."""
    out: dict[Key, Members] = {}
    targets: dict[Key, tuple[Container, str]] = {}  # a hardware counter's key -> its standard leaf
    std: dict[Container, Container] = {}  # a port's hw container -> its standard one
    leaves: list[tuple[int, str]] = []  # (index, port) of counters on a port's standard leaves
    is_std: dict[Container, bool] = {}
    container_at, leaf_at, port_at = table.container_at, table.leaf_at, table.port_at
    for i in table.visible:
        port = port_at(i)
        if not port:
            continue
        c, leaf = container_at(i), leaf_at(i)
        if leaf in HW_STANDARD and c.path.endswith(_HW_TAIL):
            if c.origin == SWTEL_ORIGIN and c.path[:-len(_HW_TAIL)] == interface_path(port):
                to = std.get(c)  # (the key standard_key gives, with one string per container)
                if to is None:
                    to = std[c] = Container(OPENCONFIG, c.path[:-len(_HW_TAIL)] + _STD_TAIL)
                std_leaf = HW_STANDARD[leaf]
                key = (OPENCONFIG, to.path, std_leaf)
                _add(out, key, ~i)
                targets[key] = (to, std_leaf)
                continue
        if c not in is_std:
            is_std[c] = c.origin == OPENCONFIG and c.path == interface_path(port) + _STD_TAIL
        if contested is None or c in contested:
            _add(out, (c.origin, c.path, leaf), i)
        if leaf in STANDARD_LEAVES and is_std[c]:
            leaves.append((i, port))
    return TableKeys(out, targets, leaves)


def contested(tables: Sequence[CounterTable]) -> set[Container]:
    """Containers that two of ``tables`` have counters in, counting a hardware container's
    standard one (``.../state/counters`` for ``swtel:.../hw/state/counters``) as its table's
    too: only a counter in one of them can share its path with another table's."""
    seen: set[Container] = set()
    twice: set[Container] = set()
    for table in tables:
        mine = set(table.containers)
        mine |= {Container(OPENCONFIG, c.path[:-len(_HW_TAIL)] + _STD_TAIL) for c in table.containers
                 if c.origin == SWTEL_ORIGIN and c.path.endswith(_HW_TAIL)}
        twice |= seen & mine
        seen |= mine
    return twice


def yielded(container: Container, source: str) -> Container:
    """Where a counter that lost its path to another source's is published: under the swtel
    origin, with its source's name after the path's first keyed element
    (``/interfaces/interface[name=X]/state/counters`` of netdev ->
    ``swtel:/interfaces/interface[name=X]/netdev/state/counters``)."""
    path = container.path
    end = path.find("[")
    if end < 0:
        return Container(SWTEL_ORIGIN, f"/{source}{path}")
    while end < len(path) and path[end] == "[":  # every key of that element
        _value, end = read_key(path, path.find("=", end) + 1)
        end += 1
    return Container(SWTEL_ORIGIN, f"{path[:end]}/{source}{path[end:]}")


def elect(tables: list[tuple[str, CounterTable, int]], holds: Sequence[Hold] = ()) -> list[Moves]:
    """``tables``: (source name, its own table, its rank) in the sources' order. Per group of
    counters of one port that stand for one path (:func:`standard_key`), from two sources or
    more: when a source of rank > 0 holds one of them and the paths as they are would not
    do (two of rank > 0; the best of them is a hardware counter standing for a standard leaf;
    or another source's counter is on the very same path), the counter of highest rank (then
    a counter on its own path, then the later source) is published on the group's path and
    every other one on its :func:`yielded` path. A hardware counter of a source of rank > 0
    that no other counter stands beside is published on its standard leaf too (an ASIC-only
    port has its OpenConfig ``in-octets``). A source of rank 0 never takes a path (its
    counters move aside where one of rank > 0 takes theirs). ``holds``: sources still opening
    (no table yet); a counter on a port's :data:`STANDARD_LEAVES` from a source of lower rank
    than one of them that may give the port moves aside meanwhile, so the leaf's first value
    is the winner's. Returns per table the counters published elsewhere than their own path
    (empty: as they are)."""
    shared_containers = contested([table for _name, table, _rank in tables])
    made = [keys_of(table, shared_containers) for _name, table, _rank in tables]
    keyed = [k.members for k in made]
    seen: set[Key] = set()
    shared: set[Key] = set()  # keys of two tables or more (set operations: no loop per counter)
    for keys in keyed:
        shared |= seen & keys.keys()
        seen |= keys.keys()
    moves: list[Moves] = [{} for _ in tables]
    aside: dict[tuple[Container, str], Container] = {}  # (container, source) -> yielded container
    ranks = [rank for _name, _table, rank in tables]

    def step_aside(pos: int, i: int) -> None:
        container, leaf = tables[pos][1].path_at(i)
        name = tables[pos][0]
        where = aside.get((container, name))
        if where is None:
            where = aside[(container, name)] = yielded(container, name)
        moves[pos][i] = (where, leaf)

    gets = list(enumerate(k.get for k in keyed))
    for key in shared:
        group = []
        part = []
        for pos, get in gets:
            entry = get(key)
            if entry is None:
                continue
            for i, alias in members(entry):
                m = (pos, i, alias)
                group.append(m)
                if ranks[pos] > 0:
                    part.append(m)
        if not part:
            continue
        top = max(part, key=lambda m: (ranks[m[0]], not m[2], m[0])) if len(part) > 1 else part[0]
        if len(part) < 2 and not top[2] and all(m[2] for m in group if m is not top):
            continue  # the one that takes part is on its own path, alone there: as it is
        for m in group:
            pos, i, alias = m
            if m is top:
                if alias:
                    moves[pos][i] = made[pos].standard_to[key]
                continue
            step_aside(pos, i)
    for pos, (_name, _table, rank) in enumerate(tables):
        if rank > 0:  # a hardware counter alone on its standard leaf's group: it takes the leaf
            to = made[pos].standard_to
            keys = keyed[pos]
            for key in to.keys() - shared:
                entry = keys[key]
                if not isinstance(entry, list):  # alone: the hardware counter (~index)
                    moves[pos][~entry] = to[key]
        above = [serves for hold_rank, serves in holds if hold_rank > rank]
        if above:  # kept from this source while one above it opens
            for i, port in made[pos].standard_leaves:
                if i not in moves[pos] and any(serves(port) for serves in above):
                    step_aside(pos, i)
    return moves


def relabel(table: CounterTable, moves: Moves) -> CounterTable:
    """The table listeners see: ``table`` with the elected paths (itself when none moved).
    Index-aligned with the source's values; only containers and leaves differ."""
    if not moves:
        return table
    build = TableBuilder(table.source)  # columns copied, the moved counters' paths changed
    container_at, leaf_at, port_at, widths, kinds = (table.container_at, table.leaf_at, table.port_at,
                                                     table.widths, table.kinds)
    for i in range(len(table)):
        container, leaf = moves.get(i) or (container_at(i), leaf_at(i))
        build.add(container, leaf, widths[i], kinds[i], port_at(i))
    out = build.done()
    out.cache["visible"] = table.visible  # the same kinds: one list of indices for both tables
    return out
