"""Reading the Store through gNMI paths: request paths -> patterns, matching, rendering, Get.

Used by the dial-in server for Get and for every Subscribe snapshot. Matching a
pattern against a whole :class:`CounterTable` is done once per table (cached on
the :class:`PathSet` by table identity), so later reads and per-tick filtering
cost per matched or changed counter, not per counter of the agent.

Rendering yields serialized ``gnmi.SubscribeResponse`` bytes: PROTO encoding goes
through the shared encoder (C fast path, ``uint_val`` counters); JSON_IETF and
JSON are built here, as ``json_ietf_val`` (RFC 7951: counters as JSON strings) and
``json_val`` (counters as JSON numbers).
"""

from __future__ import annotations

import json
import threading
import time
import weakref
from array import array
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import grpc
from pygnmi.spec.v080 import gnmi_pb2

from agent import _backend
from agent.counters import (
    HIDDEN,
    OPENCONFIG,
    SWTEL_ORIGIN,
    Container,
    CounterTable,
    StateUpdate,
)
from agent.gnmi import encode, paths
from agent.handoff import TICK_PASSES
from agent.pathgrammar import format_path

Elems = tuple[tuple[str, dict[str, str]], ...]
Pattern = tuple[str, Elems]  # (origin, elems)

#: Advertised in Capabilities and the only ones answered. JSON (0) is the proto3 default: what
#: gnmic sends by default and what openconfig's gnmi_cli sends by leaving the field out.
SUPPORTED_ENCODINGS = (gnmi_pb2.JSON, gnmi_pb2.PROTO, gnmi_pb2.JSON_IETF)
ACCEPTED_ENCODINGS = SUPPORTED_ENCODINGS  # kept for importers: nothing is accepted unadvertised


#: Paths in one request: Subscriptions in a SubscriptionList, paths in a GetRequest. Real
#: collectors send a handful to a few dozen (gnmic and Telegraf one per configured path); past
#: this a request is refused with RESOURCE_EXHAUSTED before any matching is done.
MAX_PATHS = 1000

#: longest request text (a path, an origin, a target) echoed in an error status: a huge
#: one must not make the reply huge
DISPLAY_MAX = 200


def shown(text: str) -> str:
    """Request text as echoed in a status message: quoted, escaped, at most DISPLAY_MAX characters."""
    if len(text) > DISPLAY_MAX:
        return f"{text[:DISPLAY_MAX]!r}... ({len(text)} characters)"
    return repr(text)


#: Whole-tree reads rendered at once, agent-wide: a Get, a Poll, a stream's first sync, its
#: resyncs, samples and heartbeats. Each is seconds of Python on a spine's ~17,000 values,
#: holding the interpreter lock the tick thread needs; one at a time, the tick thread still
#: gets its share however many clients ask (bench/bench_server_load.py).
RENDERS_AT_ONCE = 1
#: how long a Get or a Poll waits for its turn before RESOURCE_EXHAUSTED (a stream waits on)
TURN_WAIT_S = 5.0
_TURN_SLICE_S = 0.5  # a waiting stream looks this often whether it was closed


class _Turns:
    """Turns in the order asked (a semaphore lets a thread that comes later take a freed turn
    first: a client repeating Gets back to back would starve the Polls waiting)."""

    def __init__(self, at_once: int) -> None:
        self._lock = threading.Lock()
        self._free = at_once
        self._waiting: deque[threading.Event] = deque()

    def take(self, wait_s: float | None, closed: Callable[[], bool] | None = None) -> bool:
        with self._lock:
            if self._free and not self._waiting:
                self._free -= 1
                return True
            mine = threading.Event()
            self._waiting.append(mine)
        deadline = None if wait_s is None else time.monotonic() + wait_s
        while True:
            left = _TURN_SLICE_S if deadline is None else min(_TURN_SLICE_S, deadline - time.monotonic())
            if left > 0 and mine.wait(left):
                return True
            if (deadline is not None and time.monotonic() >= deadline) or (closed is not None and closed()):
                with self._lock:
                    if mine.is_set():  # handed over just now: it is ours
                        return True
                    self._waiting.remove(mine)
                return False

    def give(self) -> None:
        with self._lock:
            if self._waiting:
                self._waiting.popleft().set()  # the turn goes straight to the longest waiter
            else:
                self._free += 1


_turns = _Turns(RENDERS_AT_ONCE)


@contextmanager
def render_turn(wait_s: float | None = None, closed: Callable[[], bool] | None = None) -> Iterator[None]:
    """Hold the turn to read and render a snapshot, turns given in the order asked. ``wait_s``:
    RESOURCE_EXHAUSTED when the turn has not come by then (a Get, a Poll); None: wait until
    it comes or ``closed()``."""
    if not _turns.take(wait_s, closed):
        if wait_s is None:
            raise RequestError(grpc.StatusCode.CANCELLED, "the stream closed while waiting to read")
        raise RequestError(grpc.StatusCode.RESOURCE_EXHAUSTED,
                           f"server busy: no turn to read within {wait_s:g} s (other clients' Get, Poll "
                           f"and subscription snapshots are read {RENDERS_AT_ONCE} at a time)")
    try:
        yield
    finally:
        _turns.give()


#: A read whose render took long (a spine's whole tree: 0.1-1 s of Python, CPU time) answers
#: the same request again for REUSE_FACTOR times its render time, at most REUSE_MAX_S: a flood of such
#: reads then costs about 1/REUSE_FACTOR of a thread instead of all of it, and the tick loop
#: keeps its ticks (issue 33, bench/bench_server_load.py). Each value keeps its own timestamp,
#: so a reused reply is only older, never wrong. A cheaper read is reused only while nothing
#: was written since it was rendered (the Store's generation): then it is the same reply.
REUSE_FACTOR = 10
REUSE_MAX_S = 2.0
REUSE_MIN_COST_S = 0.05
_REPLIES_KEPT = 32  # per store: distinct (paths, encoding, target, path rules) kept


@dataclass
class _Reply:
    generation: int
    done: float  # the clock when it was rendered
    keep_s: float  # how long after that it answers the same request, whatever was written
    chunks: list[bytes]


class Replies:
    """The last rendered reply of each whole read (Get path, Poll, ONCE), per store: a request
    asked again answers from it while it is fresh (see REUSE_FACTOR); otherwise the request
    takes its turn (:func:`render_turn`), looks again (another may have rendered it meanwhile),
    renders and keeps the result. ``clock`` (wall) and ``cpu`` (the thread's CPU time) are
    injectable for tests."""

    def __init__(self, clock: Callable[[], float] = time.monotonic,
                 cpu: Callable[[], float] = time.thread_time) -> None:
        self._clock = clock
        self._cpu = cpu  # a render's cost is its thread's CPU time: a loaded machine's waits are not
        self._lock = threading.Lock()
        self._by_store: weakref.WeakKeyDictionary[Any, dict[tuple, _Reply]] = weakref.WeakKeyDictionary()

    def fresh(self, store: Any, key: tuple) -> list[bytes] | None:
        with self._lock:
            kept = self._by_store.get(store)
            reply = kept.get(key) if kept else None
        if reply is None:
            return None
        if reply.generation == store.generation or self._clock() - reply.done < reply.keep_s:
            return reply.chunks
        return None

    def read(self, store: Any, key: tuple, render: Callable[[], list[bytes]],
             wait_s: float | None = None, closed: Callable[[], bool] | None = None) -> list[bytes]:
        """``render()``'s chunks, or a fresh earlier answer to ``key``; ``wait_s``/``closed`` as
        :func:`render_turn`."""
        chunks = self.fresh(store, key)
        if chunks is not None:
            return chunks
        with render_turn(wait_s, closed):
            chunks = self.fresh(store, key)  # rendered by another while this one waited
            if chunks is not None:
                return chunks
            generation = store.generation  # read first: a write during the render makes it stale
            began = self._cpu()
            chunks = render()
            cost = self._cpu() - began
            keep = min(REUSE_FACTOR * cost, REUSE_MAX_S) if cost >= REUSE_MIN_COST_S else 0.0
            reply = _Reply(generation, self._clock(), keep, chunks)
            with self._lock:  # kept before the turn goes on: the next waiter finds it
                kept = self._by_store.setdefault(store, {})
                kept.pop(key, None)
                kept[key] = reply
                while len(kept) > _REPLIES_KEPT:
                    del kept[next(iter(kept))]  # the oldest kept
        return chunks


replies = Replies()


def reply_key(kind: str, renderer: Renderer, patterns: Iterable[Pattern], access: Any) -> tuple:
    """What a rendered read depends on: its kind, the renderer's target and encoding, the
    patterns and the caller's path rules (authz.Access objects are shared per principal set)."""
    return (kind, renderer.target, renderer.encoding, tuple(map(pattern_key, patterns)), access)


def pattern_key(pattern: Pattern) -> tuple:
    return (pattern[0], tuple((n, tuple(sorted(ks.items()))) for n, ks in pattern[1]))


class RequestError(Exception):
    """A request the server refuses: carries the gRPC status to abort with."""

    def __init__(self, code: grpc.StatusCode, message: str):
        super().__init__(message)
        self.code = code
        self.message = message


# ---------------------------------------------------------------- request paths


def resolve_origin(origin: str) -> str:
    """Empty, ``openconfig`` and OpenConfig module names mean OpenConfig; ``swtel`` the extensions."""
    if not origin or origin == OPENCONFIG or origin.startswith("openconfig-"):
        return OPENCONFIG
    if origin == SWTEL_ORIGIN:
        return SWTEL_ORIGIN
    raise RequestError(
        grpc.StatusCode.INVALID_ARGUMENT,
        f"unknown origin {shown(origin)}: this target serves {OPENCONFIG!r} and {SWTEL_ORIGIN!r}",
    )


def _elems(path: gnmi_pb2.Path) -> list[tuple[str, dict[str, str]]]:
    if not path.elem and path.element:  # gNMI 0.3 string elements
        text = "/" + "/".join(path.element)
        try:
            return list(paths.split(text))
        except ValueError as exc:  # e.g. "a[" or "]": the client's mistake, not ours
            why = str(exc).partition(" in ")[0]
            raise RequestError(grpc.StatusCode.INVALID_ARGUMENT,
                               f"malformed path element: {why} in {shown(text)}") from None
    out = []
    for e in path.elem:
        name = e.name.split(":", 1)[1] if ":" in e.name else e.name  # "module:name" qualifier
        out.append((name, dict(e.key)))
    return out


def request_pattern(prefix: gnmi_pb2.Path | None, path: gnmi_pb2.Path, target: str) -> Pattern:
    """Absolute pattern of ``prefix`` + ``path``; the target, if named, must be ours."""
    prefix = prefix if prefix is not None else gnmi_pb2.Path()
    named = path.target or prefix.target
    if named and named != target:
        raise RequestError(grpc.StatusCode.NOT_FOUND, f"unknown target {shown(named)} (this is {target!r})")
    origin = resolve_origin(path.origin or prefix.origin)
    return origin, tuple(_elems(prefix) + _elems(path))


def display(pattern: Pattern) -> str:
    origin, elems = pattern
    text = format_path(elems)
    text = text if origin == OPENCONFIG else f"{origin}:{text}"
    if len(text) > DISPLAY_MAX:
        return f"{_printable(text[:DISPLAY_MAX])}... ({len(text)} characters)"
    return _printable(text)


def _printable(text: str) -> str:
    """Control characters written as escapes (``\\x1b``): a status message is read by people."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def check_encoding(encoding: int) -> int:
    """The encoding, if this server produces it; never silently answered in another one.

    A gNMI encoding it does not produce (ASCII, BYTES) is UNIMPLEMENTED; a value that is
    no gNMI encoding at all is INVALID_ARGUMENT.
    """
    if encoding in SUPPORTED_ENCODINGS:
        return encoding
    supported = ", ".join(gnmi_pb2.Encoding.Name(e) for e in SUPPORTED_ENCODINGS)
    if encoding in gnmi_pb2.Encoding.values():
        raise RequestError(
            grpc.StatusCode.UNIMPLEMENTED,
            f"encoding {gnmi_pb2.Encoding.Name(encoding)} not supported: use one of {supported}",
        )
    raise RequestError(
        grpc.StatusCode.INVALID_ARGUMENT, f"unknown encoding {encoding}: use one of {supported}"
    )


# ---------------------------------------------------------------- matching


@lru_cache(maxsize=65536)
def _split(path: str) -> Elems:
    return tuple(paths.split(path))


@dataclass
class TableMatch:
    table: CounterTable
    indices: list[int]  # matching counter indices, ascending
    mask: bytearray | None  # membership by index; None: every counter matches


class _Node:
    """One node of a compiled pattern trie: what is left of the patterns after the elements
    that lead here. Edges are keyed by element name (``*`` for any) and then by the set of
    literal ``(key, value)`` pairs the element requires (``*`` values dropped: they match any
    value, present or not); ``...`` is a separate edge to a node that may consume any number
    of elements."""

    __slots__ = ("edges", "dots", "spread", "ends", "through")

    def __init__(self, spread: bool = False) -> None:
        self.edges: dict[str, dict[frozenset, _Node]] = {}
        self.dots: _Node | None = None
        self.spread = spread  # reached through "...": stays active on every further element
        self.ends: frozenset[int] = frozenset()  # patterns that end here (match at or below)
        self.through: set[int] = set()  # patterns that pass through or end here


States = frozenset  # of _Node: where a walk through a path can be
_NONE: frozenset[int] = frozenset()


class _Trie:
    """Patterns (numbered) of one origin compiled into a trie, walked as an NFA.

    Matching a concrete path costs per element of the path (and per live wildcard branch),
    not per pattern: a subscription with a thousand paths costs about what one does. A walk
    tells which patterns match, with the same answers as :func:`paths.matches` applied
    pattern by pattern.
    """

    def __init__(self, patterns: Iterable[tuple[int, Elems]]) -> None:
        self.root = _Node()
        for k, elems in patterns:
            node = self.root
            node.through.add(k)
            for name, keys in elems:
                if name == "...":
                    if node.dots is None:
                        node.dots = _Node(spread=True)
                    node = node.dots
                else:
                    required = frozenset((key, v) for key, v in keys.items() if v != "*")
                    by_keys = node.edges.setdefault(name, {})
                    child = by_keys.get(required)
                    if child is None:
                        child = by_keys[required] = _Node()
                    node = child
                node.through.add(k)
            node.ends = node.ends | {k}
        self.start: States = _closure((self.root,))

    @staticmethod
    def walk(states: States, elems: Iterable[tuple[str, dict[str, str]]]) -> tuple[frozenset[int], States]:
        """Consume ``elems`` from ``states``: (the patterns that ended on the way, where the walk is now)."""
        ended: set[int] = set()
        for n in states:
            if n.ends:
                ended |= n.ends
        for name, keys in elems:
            if not states:
                break
            states = _step(states, name, keys)
            for n in states:
                if n.ends:
                    ended |= n.ends
        return (frozenset(ended) if ended else _NONE), states


def _closure(nodes: Iterable[_Node]) -> States:
    out = set()
    todo = list(nodes)
    while todo:
        node = todo.pop()
        if node in out:
            continue
        out.add(node)
        if node.dots is not None:
            todo.append(node.dots)
    return frozenset(out)


def _step(states: States, name: str, keys: dict[str, str]) -> States:
    nxt: list[_Node] = []
    items = None
    for node in states:
        if node.spread:
            nxt.append(node)
        for edge_name in (name, "*"):
            by_keys = node.edges.get(edge_name)
            if not by_keys:
                continue
            if items is None:
                items = frozenset(keys.items())
            if len(by_keys) <= 1 << len(items):
                nxt.extend(child for required, child in by_keys.items() if required <= items)
            else:  # many key variants (interface[name=swp1..swp512]): look the subsets up
                for required in _subsets(items):
                    child = by_keys.get(required)
                    if child is not None:
                        nxt.append(child)
    return _closure(nxt) if nxt else frozenset()


@lru_cache(maxsize=4096)
def _subsets(items: frozenset) -> tuple[frozenset, ...]:
    out = [frozenset()]
    for item in items:
        out += [s | {item} for s in out]
    return tuple(out)


_CACHE_MAX = 100_000  # entries of each per-PathSet cache of containers and leaves


class PathSet:
    """A set of path patterns, matched against tables (cached by identity) and states.

    The patterns are compiled into one trie per origin (:class:`_Trie`), so matching a
    container or a leaf costs per path element, not per pattern. One pass over a table also
    tells which counters each pattern matches: :meth:`member` is the view of one pattern
    (a Subscription of a list) that reuses that pass instead of scanning the table again.
    """

    def __init__(self, patterns: Iterable[Pattern], access: Any = None):
        self.patterns: tuple[Pattern, ...] = tuple(patterns)
        #: what the caller may read (agent/gnmi/authz.py Access; None: everything): a value it
        #: denies never matches, so every reply built from this set leaves it out
        self.access = access
        by_origin: dict[str, list[tuple[int, Elems]]] = {}
        for k, (origin, elems) in enumerate(self.patterns):
            by_origin.setdefault(origin, []).append((k, elems))
        self._tries = {origin: _Trie(elems) for origin, elems in by_origin.items()}
        self._per_pattern = len(self.patterns) > 1
        # by source; valid while .table is the same object: (union, indices per pattern)
        self._tables: dict[str, tuple[TableMatch, dict[int, list[int]]]] = {}
        self._states: dict[tuple[Container, str], frozenset[int]] = {}
        self._containers: dict[Container, tuple[frozenset[int], States]] = {}

    def member(self, *ks: int) -> _Member:
        """The view of patterns ``ks`` (numbers in the order given) alone."""
        return _Member(self, frozenset(ks))

    def table(self, table: CounterTable) -> TableMatch:
        return self._table(table)[0]

    def _table(self, table: CounterTable) -> tuple[TableMatch, dict[int, list[int]]]:
        m = self._tables.get(table.source)
        if m is None or m[0].table is not table:
            m = self._match_table(table)
            self._tables[table.source] = m
        return m

    def _container(self, container: Container) -> tuple[frozenset[int], States]:
        """(patterns that match every leaf below, where the walk stands after the container)."""
        hit = self._containers.get(container)
        if hit is None:
            trie = self._tries.get(container.origin)
            hit = (_NONE, frozenset()) if trie is None else trie.walk(trie.start, _split(container.path))
            if len(self._containers) < _CACHE_MAX:
                self._containers[container] = hit
        return hit

    def _match_table(self, table: CounterTable) -> tuple[TableMatch, dict[int, list[int]]]:
        # Decided once per container and, below it, once per distinct leaf name for each
        # distinct walk state. Specs of one container are usually adjacent: an identity check
        # skips the hashing.
        leaf_caches: dict[States, dict[str, frozenset[int]]] = {}
        kinds = table.kinds
        per_pattern = self._per_pattern
        indices: list[int] = []
        per: dict[int, list[int]] = {}
        last, whole, states, leaf_ids = None, _NONE, frozenset(), {}
        step_aside = TICK_PASSES.step_aside  # seconds of Python on a spine: the tick goes first
        for i, spec in enumerate(table.specs):
            c = spec.container
            if c is not last:
                last = c
                step_aside()
                whole, states = self._container(c)
                leaf_ids = leaf_caches.setdefault(states, {}) if states else {}
            if kinds[i] == HIDDEN:  # read for the layout, never reported
                continue
            ids = whole
            if states and (per_pattern or not ids):
                more = leaf_ids.get(spec.leaf)
                if more is None:
                    more = leaf_ids[spec.leaf] = _Trie.walk(states, _split(spec.leaf))[0]
                if more:
                    ids = ids | more if ids else more
            if not ids or (self.access is not None
                           and not self.access.allows_leaf(c.origin, c.path, spec.leaf)):
                continue
            indices.append(i)
            if per_pattern:
                for k in ids:
                    per.setdefault(k, []).append(i)
        if len(indices) == len(table.specs):
            return TableMatch(table, indices, None), per
        mask = bytearray(len(table.specs))
        for i in indices:
            mask[i] = 1
        return TableMatch(table, indices, mask), per

    def _leaf_ids(self, container: Container, leaf: str) -> frozenset[int]:
        key = (container, leaf)
        ids = self._states.get(key)
        if ids is None:
            whole, states = self._container(container)
            ids = whole
            if states:
                more = _Trie.walk(states, _split(leaf))[0]
                ids = ids | more if ids else more
            if ids and self.access is not None and not self.access.allows_leaf(
                    container.origin, container.path, leaf):
                ids = _NONE
            if len(self._states) < _CACHE_MAX:
                self._states[key] = ids
        return ids

    def matches_leaf(self, container: Container, leaf: str) -> bool:
        return bool(self._leaf_ids(container, leaf))

    def known_leaf(self, container: Container, leaf: str) -> bool | None:
        """:meth:`matches_leaf` if already worked out, else None (never walks: the tick thread
        leaves a leaf it has not seen to the subscriber's own thread)."""
        ids = self._states.get((container, leaf))
        return None if ids is None else bool(ids)

    def touches(self, container: Container) -> bool:
        """A deleted container concerns us if it lies at, below or above one of our patterns
        (above: some pattern goes on below it)."""
        whole, states = self._container(container)
        if self.access is not None and not self.access.sees_container(container.origin, container.path):
            return False  # a denied subtree's deletes would name what the caller may not read
        return bool(whole) or bool(states)

    def filter_changes(self, table: CounterTable, changed: list[int],
                       changed_mask: Callable[[], bytearray] | None = None) -> list[int]:
        """The changed indices this set matches: cost per change, or per matched counter when
        those are far fewer and ``changed_mask`` gives the changes by index (built once per
        batch for every subscriber: 40 narrow subscriptions do not each walk a spine's
        ~17,000 changes on the tick thread)."""
        m = self.table(table)
        if not m.indices:
            return []
        if m.mask is None:
            return changed
        if changed_mask is not None and len(m.indices) * 4 < len(changed):
            was = changed_mask()
            return [i for i in m.indices if was[i]]
        mask = m.mask
        return [i for i in changed if mask[i]]

    def matched(self, table: CounterTable) -> TableMatch | None:
        """The table's match if already worked out, else None (never computes it)."""
        m = self._tables.get(table.source)
        return m[0] if m is not None and m[0].table is table else None


class _Member:
    """Some patterns of a :class:`PathSet` (one Subscription of a list, or the ones due at
    once), for :func:`read`: their counters come from the set's single pass over each table,
    their states from the set's per-leaf cache."""

    __slots__ = ("_set", "_ks", "_tables")

    def __init__(self, pathset: PathSet, ks: frozenset[int]) -> None:
        self._set, self._ks = pathset, ks
        self._tables: dict[str, TableMatch] = {}

    def table(self, table: CounterTable) -> TableMatch:
        m = self._tables.get(table.source)
        if m is None or m.table is not table:
            union, per = self._set._table(table)
            if not self._set._per_pattern or len(self._ks) == len(self._set.patterns):
                indices = union.indices
            elif len(self._ks) == 1:
                indices = per.get(next(iter(self._ks)), [])
            else:
                indices = sorted({i for k in self._ks for i in per.get(k, ())})
            m = self._tables[table.source] = TableMatch(table, indices, None)  # read() only
        return m

    def matches_leaf(self, container: Container, leaf: str) -> bool:
        return not self._ks.isdisjoint(self._set._leaf_ids(container, leaf))


# ---------------------------------------------------------------- reading the Store


@dataclass
class Counters:
    """Matched counters of one source, values copied: what a snapshot or a queued change carries."""

    ts_ns: int
    table: CounterTable
    indices: list[int]
    values: array


def read(store: Any, pathset: PathSet | _Member) -> tuple[list[Counters], list[StateUpdate]]:
    """Current values of everything ``pathset`` matches."""
    counters = []
    for batch in store.snapshot_batches():
        indices = pathset.table(batch.table).indices
        if indices:
            counters.append(Counters(batch.ts_ns, batch.table, indices, batch.values))
    states = []
    for k, u in enumerate(store.states()):
        if not k & 255:
            TICK_PASSES.step_aside()
        if pathset.matches_leaf(u.container, u.leaf):
            states.append(u)
    return counters, states


# ---------------------------------------------------------------- rendering


def _json_scalar(value: Any, counter: bool, ietf: bool) -> bytes:
    if counter:  # RFC 7951 (JSON_IETF): 64-bit integers are JSON strings; JSON: numbers
        return b'"%d"' % value if ietf else b"%d" % value
    return json.dumps(value).encode()


class Renderer:
    """Builds serialized SubscribeResponses for one target and encoding."""

    def __init__(self, target: str, encoding: int):
        self.target = target
        self.encoding = encoding
        self._ietf = encoding != gnmi_pb2.JSON
        self._json_field = "json_ietf_val" if self._ietf else "json_val"

    @property
    def proto(self) -> bool:
        return self.encoding == gnmi_pb2.PROTO

    def counters(self, c: Counters) -> list[bytes]:
        indices = encode.encodable_indices(c.table, c.indices)  # one bad path never fails the reply
        if not indices:
            return []
        if self.proto:
            codec = encode.codec(c.table, self.target)
            return _backend.encoder.encode_updates(
                c.ts_ns, indices, c.values, codec.containers, codec.prefixes, codec.paths,
                encode.MAX_UPDATES,
            )
        groups: dict[Container, list[int]] = {}
        container_at, leaf_at = c.table.container_at, c.table.leaf_at
        for i in indices:
            groups.setdefault(container_at(i), []).append(i)
        out = []
        step = encode.MAX_UPDATES  # split big containers as the PROTO encoder does
        for container, members in groups.items():
            TICK_PASSES.step_aside()
            for start in range(0, len(members), step):
                notif = self._notification(container, c.ts_ns)
                for i in members[start : start + step]:
                    self._add(notif, leaf_at(i), _json_scalar(c.values[i], True, self._ietf))
                out.append(_response(notif))
        return out

    def states(self, updates: list[StateUpdate]) -> list[bytes]:
        if not updates:
            return []
        if self.proto:
            return encode.encode_states(updates, self.target)
        groups: dict[tuple[int, Container], gnmi_pb2.Notification] = {}
        for k, u in enumerate(encode.encodable_states(updates)):
            if not k & 255:
                TICK_PASSES.step_aside()
            key = (u.ts_ns, u.container)
            notif = groups.get(key)
            if notif is None:
                notif = groups[key] = self._notification(u.container, u.ts_ns)
            if u.value is None:
                notif.delete.add().MergeFromString(paths.encoded(u.leaf))
            else:
                self._add(notif, u.leaf, _json_scalar(u.value, False, self._ietf))
        return [_response(n) for n in groups.values()]

    def deletes(self, ts_ns: int, containers: list[Container]) -> list[bytes]:
        return encode.encode_deletes(ts_ns, containers, self.target) if containers else []

    def snapshot(self, counters: list[Counters], states: list[StateUpdate]) -> list[bytes]:
        out = []
        for c in counters:
            out += self.counters(c)
        return out + self.states(states)

    # ---------------------------------------------------------------- per tick (STREAM)

    def packer(self) -> encode.Packer:
        """An empty :class:`encode.Packer` for this target and encoding."""
        return encode.Packer(self.target, encode_state=None if self.proto else self._json_state)

    def pack(self, packer: encode.Packer, counters: list[Counters], states: list[StateUpdate]) -> None:
        """Counters and states into ``packer`` (absolute paths, one Notification per origin)."""
        for c in counters:
            if not c.indices:
                continue
            if self.proto:
                packer.add_runs(encode.counter_runs(c.ts_ns, c.table, c.indices, c.values, self.target))
                continue
            path_at, values, ietf = c.table.path_at, c.values, self._ietf
            packer.add_runs([self._json_run(*path_at(i), c.ts_ns, _json_scalar(values[i], True, ietf), None)
                             for i in c.indices])
        packer.add_states(states)

    def packed(self, counters: list[Counters], states: list[StateUpdate]) -> list[bytes]:
        """:meth:`snapshot`'s values, packed per tick."""
        packer = self.packer()
        self.pack(packer, counters, states)
        return packer.messages()

    def _json_run(self, container: Container, leaf: str, ts_ns: int, payload: bytes,
                  state: StateUpdate | None) -> encode.Run:
        value = gnmi_pb2.TypedValue(**{self._json_field: payload}).SerializeToString()
        return (container.origin, ts_ns, encode.update_field(encode.absolute_path(container, leaf), value), state)

    def _json_state(self, u: StateUpdate) -> encode.Run:
        if u.value is None:
            return (u.container.origin, u.ts_ns, encode.delete_field(encode.absolute_path(u.container, u.leaf)), u)
        return self._json_run(u.container, u.leaf, u.ts_ns, _json_scalar(u.value, False, self._ietf), u)

    def _notification(self, container: Container, ts_ns: int) -> gnmi_pb2.Notification:
        notif = gnmi_pb2.Notification(timestamp=ts_ns)
        notif.prefix.MergeFromString(encode.prefix_bytes(container, self.target))
        return notif

    def _add(self, notif: gnmi_pb2.Notification, leaf: str, payload: bytes) -> None:
        update = notif.update.add()
        update.path.MergeFromString(paths.encoded(leaf))
        setattr(update.val, self._json_field, payload)


def _response(notif: gnmi_pb2.Notification) -> bytes:
    return gnmi_pb2.SubscribeResponse(update=notif).SerializeToString()


# ---------------------------------------------------------------- Get


def refuse_denied(pattern: Pattern, access: Any) -> None:
    """PERMISSION_DENIED for a request path whose every value the caller's path rules deny; a
    wider one (the root, a wildcard) is answered with the denied values left out."""
    if access is not None and access.refuses(*pattern):
        raise RequestError(grpc.StatusCode.PERMISSION_DENIED,
                           f"{display(pattern)}: not readable by this caller (path rules)")


def get(store: Any, request: gnmi_pb2.GetRequest, target: str, access: Any = None) -> gnmi_pb2.GetResponse:
    """Latest values under every requested path; a path with no data is NOT_FOUND; ``access``
    (agent/gnmi/authz.py) leaves out what the caller may not read."""
    return gnmi_pb2.GetResponse.FromString(get_bytes(store, request, target, access))


def get_bytes(store: Any, request: gnmi_pb2.GetRequest, target: str, access: Any = None) -> bytes:
    """:func:`get`'s reply, serialized, as the server sends it: a GetResponse's notifications
    are its field 1, as a SubscribeResponse's update is, so the rendered SubscribeResponses
    joined are the GetResponse (no message is built, parsed back or serialized again: for a
    spine's whole tree that was a quarter of a Get's time, the last part outside any turn)."""
    renderer = Renderer(target, check_encoding(request.encoding))
    if request.type == gnmi_pb2.GetRequest.CONFIG:
        raise RequestError(grpc.StatusCode.NOT_FOUND, "this target serves state data only")
    if len(request.path) > MAX_PATHS:
        raise RequestError(grpc.StatusCode.RESOURCE_EXHAUSTED,
                           f"{len(request.path)} paths in one GetRequest (limit {MAX_PATHS})")
    requested = list(request.path) or [gnmi_pb2.Path()]
    out: list[bytes] = []
    seen: set[tuple] = set()
    for path in requested:
        pattern = request_pattern(request.prefix, path, target)
        refuse_denied(pattern, access)
        key = pattern_key(pattern)
        if key in seen:  # the same path asked again is answered once
            continue
        seen.add(key)
        chunks = replies.read(store, reply_key("get", renderer, [pattern], access),
                              lambda p=pattern: renderer.snapshot(*read(store, PathSet([p], access))),
                              TURN_WAIT_S)
        if not chunks:
            raise RequestError(grpc.StatusCode.NOT_FOUND, f"no data at {display(pattern)}")
        out += chunks
    return b"".join(out)
