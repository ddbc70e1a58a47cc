"""Changes -> serialized ``gnmi.SubscribeResponse`` bytes: the API exporters use.

Counters go through the active backend's ``encode_updates`` (C, or the gnmi_pb2
fallback) with per-table caches: the serialized relative path of every counter
and the serialized prefix (origin, target, container elems) of every container.
The caches live on ``CounterTable.cache``, so a rebuilt table starts fresh.
States, deletes and sync are rare; every message is written by :mod:`agent.gnmi.wire`, so an
agent that only sends never imports protobuf (gnmi_pb2 only for the server's messages).

Rules (DESIGN.md "Paths"): one Notification per container per batch; target and
origin only on the prefix; update paths relative to it; int64 ns timestamps.

:class:`Packer` is the per-tick shape: everything one engine pass produced (every source's
counters, every listener's states) in one Notification per origin, prefix holding only
origin and target, update paths absolute, split at :data:`MAX_MESSAGE_BYTES`.
"""

from __future__ import annotations

import json
from array import array
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import lru_cache
from itertools import chain
from typing import TYPE_CHECKING, Any, NamedTuple

from agent import _backend
from agent.counters import (
    Batch,
    Container,
    CounterTable,
    StateUpdate,
    encodable_containers,
    encodable_indices,
    encodable_states,
    text_ok,
    unencodable,
)
from agent.gnmi import paths, wire
from agent.pathgrammar import split

if TYPE_CHECKING:
    from pygnmi.spec.v080 import gnmi_pb2

#: Updates per Notification before a container is split in several (same prefix and
#: timestamp): keeps one message well below gRPC's 4 MB default receive limit.
MAX_UPDATES = 1000

#: A packed (per-tick) message's size limit: a quarter of gRPC's default 4 MiB receive limit,
#: which gnmic, pygnmi and ``swtel collect`` keep. A pass larger than this is split.
MAX_MESSAGE_BYTES = 1 << 20
#: Runs the counter encoder cuts: a message takes whole runs, so a split one is at least 3/4 full.
RUN_BYTES = MAX_MESSAGE_BYTES // 4


@dataclass(frozen=True)
class TableCodec:
    """Cached encoder inputs for one CounterTable and one target."""

    prefixes: list[bytes]  # by container id
    #: by counter index, the relative Path (per container); per tick, (pieces, heads, tails):
    #: counter i's absolute Path is pieces[heads[i]] + pieces[tails[i]]
    paths: list[bytes] | tuple[list[bytes], array, array]
    containers: array  # 'I': container id by counter index
    origins: tuple[str, ...] = ()  # per-tick codecs: the origin of each id


def prefix_bytes(container: Container, target: str) -> bytes:
    return paths.encoded(container.path, container.origin, target)


class _Pieces:
    """Absolute paths as two pieces of serialized elems, each piece one bytes object shared
    by every counter that has it: the tail is the last two elems (``counters/in-octets``, a FEC
    bin's ``rs-num-corr-err[upper-boundary=3]/count``: the same on every port), the head the
    rest (a port's or a lane's: the same for its counters). A serialized Path's elems are its
    fields one after another, so head + tail is the whole path's bytes; the encoders write the
    two, instead of a whole path kept per value, and a counter keeps two u32 indices into the
    pieces, not a tuple (what it saves: docs/PERFORMANCE.md)."""

    def __init__(self) -> None:
        self.pieces: list[bytes] = [b""]  # 0: a counter whose path cannot be encoded (never sent)
        self.heads, self.tails = array("I"), array("I")
        self._index: dict[bytes, int] = {b"": 0}

    def _piece(self, elems: list) -> int:
        raw = wire.path(elems)
        k = self._index.get(raw)
        if k is None:
            k = self._index[raw] = len(self.pieces)
            self.pieces.append(raw)
        return k

    def add(self, path: str | None) -> None:
        """The next counter's path (None: it has none that encodes)."""
        if path is None:
            self.heads.append(0)
            self.tails.append(0)
            return
        elems = split(path)
        cut = max(len(elems) - 2, 0)
        self.heads.append(self._piece(elems[:cut]))
        self.tails.append(self._piece(elems[cut:]))

    def triple(self) -> tuple[list[bytes], array, array]:
        """What the encoders take as ``paths``: (pieces, heads, tails)."""
        return (self.pieces, self.heads, self.tails)


def codec(table: CounterTable, target: str, per_tick: bool = False) -> TableCodec:
    """The table's cached codec for ``target``, built on first use.

    ``per_tick``: one Notification per origin instead of per container (prefix: origin
    and target only, update paths absolute). Far fewer messages when many ports change
    at once; gRPC's per-message cost then stops dominating latency.
    """
    key = f"gnmi:{target}:{'tick' if per_tick else 'container'}"
    cached = table.cache.get(key)
    if cached is None:
        ids: dict[Any, int] = {}
        containers = array("I")
        # a counter whose path cannot be encoded gets an empty path, never used:
        # encodable_indices leaves it out of every batch
        bad = unencodable(table)
        if per_tick:
            for spec in table.specs:
                containers.append(ids.setdefault(spec.container.origin, len(ids)))
            prefixes = [paths.encoded("/", origin, target) for origin in ids]
            pieces = _Pieces()
            for i, s in enumerate(table.specs):
                pieces.add(None if i in bad else f"{s.container.path}/{s.leaf}")
            leaf_paths = pieces.triple()
        else:
            for spec in table.specs:
                containers.append(ids.setdefault(spec.container, len(ids)))
            prefixes = [prefix_bytes(c, target) if text_ok(c.path) else b"" for c in ids]
            leaves = {leaf: paths.encoded(leaf)
                      for leaf in {spec.leaf for i, spec in enumerate(table.specs) if i not in bad}}
            # one bytes object per leaf name, not per counter
            leaf_paths = [b"" if i in bad else leaves[spec.leaf] for i, spec in enumerate(table.specs)]
        origins = tuple(ids) if per_tick else ()
        cached = TableCodec(prefixes=prefixes, paths=leaf_paths, containers=containers, origins=origins)
        table.cache[key] = cached
    return cached


def encode_batch(batch: Batch, target: str, max_updates: int = MAX_UPDATES, per_tick: bool = False) -> list[bytes]:
    """One SubscribeResponse per container (or, ``per_tick``, per origin) with changed
    counters (uint_val values), split every ``max_updates`` updates."""
    indices = encodable_indices(batch.table, batch.indices)
    if not indices:
        return []
    c = codec(batch.table, target, per_tick)
    return _backend.encoder.encode_updates(
        batch.ts_ns, indices, batch.values, c.containers, c.prefixes, c.paths, max_updates
    )


#: One run of a pass's update fields: (origin, timestamp, serialized fields, the state it
#: carries or None for counters).
Run = tuple[str, int, bytes, "StateUpdate | None"]


def counter_runs(ts_ns: int, table: CounterTable, indices: Any, values: array, target: str,
                 run_bytes: int = RUN_BYTES) -> list[Run]:
    """A batch's changed counters as runs of ``Notification.update`` fields (absolute paths,
    uint_val), at most ``run_bytes`` each, for a :class:`Packer`; encoded in C."""
    indices = encodable_indices(table, indices)  # a path that is not text: that value alone is dropped
    if not len(indices):
        return []
    c = codec(table, target, per_tick=True)
    got = _backend.encoder.encode_fields(indices, values, c.containers, c.paths, len(c.origins), run_bytes)
    return [(c.origins[group], ts_ns, fields, None) for group, _n, fields in got]


def absolute_path(container: Container, leaf: str) -> bytes:
    """The serialized absolute path of a leaf: its container's elems then the leaf's (a Path's
    elems are its fields one after another, so the two pieces joined are the whole path)."""
    return _container_elems(container) + _leaf_elems(leaf) if leaf else _container_elems(container)


# States repeat (a detector's gauges every bucket), so their pieces are cached, but each once
# and bounded: a cache per (container, leaf) held ~3.8 MiB on the simulated spine, most of it
# paths sent once (every FEC bin's upper-boundary, at start and in snapshots); its steady state
# (~90 states a second) hits 1,024 containers every time (measured: 0 misses in 15 s).
@lru_cache(maxsize=1024)
def _container_elems(container: Container) -> bytes:
    return wire.path(split(container.path))


@lru_cache(maxsize=256)
def _leaf_elems(leaf: str) -> bytes:
    return wire.path(split(leaf))


update_field = wire.update  # (path bytes, TypedValue bytes) -> a Notification.update field
delete_field = wire.delete  # path bytes -> a Notification.delete field


def state_run(u: StateUpdate) -> Run:
    """One state as a ``Notification.update`` field (absolute path), or ``delete`` when None."""
    path = absolute_path(u.container, u.leaf)
    if u.value is None:
        return (u.container.origin, u.ts_ns, delete_field(path), u)
    return (u.container.origin, u.ts_ns, update_field(path, wire.typed_value(u.value)), u)


class Packed(NamedTuple):
    """One packed SubscribeResponse and what it carries (the dial-out queue keeps its states
    through a snapshot, which supersedes its counters)."""

    message: bytes
    counters: bool
    states: list[StateUpdate]


class _Message:
    """One Notification being packed: its head, the counters' runs as they are (bytes the
    runs already hold), the states' fields written into one buffer as they come; copied
    into the SubscribeResponse once (a tick's two 130 kB messages were copied three times
    each, and moved as the buffer grew)."""

    def __init__(self, head: bytes) -> None:
        self.parts: list[bytes] = [head]
        self.states = bytearray()
        self.size = len(head)
        self.counters = False
        self.carried: list[StateUpdate] = []

    def add(self, fields: bytes, state: StateUpdate | None) -> None:
        if state is None:  # counters come before states (Packer.take)
            self.parts.append(fields)
            self.counters = True
        else:
            self.states += fields
            self.carried.append(state)
        self.size += len(fields)

    def packed(self) -> Packed:
        return Packed(wire.response_of(self.parts + [self.states], self.size), self.counters, self.carried)


class Packer:
    """Everything one engine pass produced, as one Notification per origin (split at
    ``max_bytes``): every source's counters and every listener's states, whatever produced
    them. The prefix holds only origin and target; update paths are absolute, so a collector
    joining prefix and path sees what the per-container shape gives. A Notification has one
    timestamp: the newest of the values it carries (so none is stamped before it was seen;
    the others at most a pass later). A state set twice in a pass goes out once, its latest
    value (every path is unique within a Notification)."""

    def __init__(self, target: str, max_bytes: int = MAX_MESSAGE_BYTES,
                 encode_state: Callable[[StateUpdate], Run] | None = None) -> None:
        self.target = target
        self.max_bytes = max_bytes
        #: how a state becomes a run (the dial-in server's JSON encodings: its own)
        self.encode_state = encode_state or state_run
        self._runs: list[Run] = []
        self._states: dict[tuple[Container, str], StateUpdate] = {}

    def __bool__(self) -> bool:
        return bool(self._runs or self._states)

    def add_runs(self, runs: list[Run]) -> None:
        self._runs += runs

    def add_batch(self, batch: Batch) -> None:
        self._runs += counter_runs(batch.ts_ns, batch.table, batch.indices, batch.values, self.target,
                                   max(self.max_bytes // 4, 1))

    def add_states(self, updates: Iterable[StateUpdate]) -> None:
        states = self._states
        # a state that cannot be encoded is dropped and counted, never the destination's pass
        for u in encodable_states(updates):
            key = (u.container, u.leaf)
            states.pop(key, None)  # the latest goes where the latest change came
            states[key] = u

    def take(self) -> list[Packed]:
        """The pass as messages (origins in order of first appearance, counters before states
        within one); the packer is empty again. Each state is encoded as it is written into its
        message, not all first: a snapshot's ~12,000 states on a spine would otherwise be as many
        runs alive at once, a peak Python's allocator keeps as empty pools afterwards."""
        runs, states = self._runs, self._states
        self._runs, self._states = [], {}
        by_origin: dict[str, tuple[list[Run], list[StateUpdate]]] = {}
        for run in runs:
            by_origin.setdefault(run[0], ([], []))[0].append(run)
        for u in states.values():
            by_origin.setdefault(u.container.origin, ([], []))[1].append(u)
        out: list[Packed] = []
        for origin, (mine, pending) in by_origin.items():
            ts = max([run[1] for run in mine] + [u.ts_ns for u in pending])
            head = wire.notification_head(ts, _prefix(origin, self.target))
            message = _Message(head)
            for fields, state in chain(((run[2], run[3]) for run in mine), ((None, u) for u in pending)):
                if fields is None:
                    fields = self.encode_state(state)[2]
                if message.size > len(head) and message.size + len(fields) > self.max_bytes:
                    out.append(message.packed())
                    message = _Message(head)
                message.add(fields, state)
            out.append(message.packed())
        return out

    def messages(self) -> list[bytes]:
        return [p.message for p in self.take()]


@lru_cache(maxsize=64)
def _prefix(origin: str, target: str) -> bytes:
    return paths.encoded("/", origin, target)


def typed_value(value: Any) -> gnmi_pb2.TypedValue:
    """A Python value as the gNMI TypedValue a collector expects for it (the message, for the
    server's replies): :func:`wire.typed_value`'s rule, decoded."""
    from pygnmi.spec.v080 import gnmi_pb2

    return gnmi_pb2.TypedValue.FromString(wire.typed_value(value))


def python_value(tv: gnmi_pb2.TypedValue) -> Any:
    """The inverse of :func:`typed_value` (JSON values decoded)."""
    kind = tv.WhichOneof("value")
    if kind is None:
        return None
    value = getattr(tv, kind)
    if kind in ("json_val", "json_ietf_val"):
        return json.loads(value)
    if kind == "leaflist_val":
        return [python_value(e) for e in value.element]
    if kind == "decimal_val":
        return value.digits / 10**value.precision
    return value


def encode_states(updates: Iterable[StateUpdate], target: str) -> list[bytes]:
    """Non-counter values, one Notification per (timestamp, container); ``None`` deletes the leaf."""
    groups: dict[tuple[int, Container], tuple[list[bytes], list[bytes]]] = {}
    for u in encodable_states(updates):
        changed, deleted = groups.setdefault((u.ts_ns, u.container), ([], []))
        leaf = paths.encoded(u.leaf)
        if u.value is None:
            deleted.append(wire.delete(leaf))
        else:
            changed.append(wire.update(leaf, wire.typed_value(u.value)))
    return [wire.response(wire.notification_head(ts_ns, prefix_bytes(container, target)) + b"".join(changed)
                          + b"".join(deleted))
            for (ts_ns, container), (changed, deleted) in groups.items()]


def encode_deletes(ts_ns: int, containers: Iterable[Container], target: str) -> list[bytes]:
    """Whole containers gone (a port removed): one Notification per origin, prefix without elems."""
    groups: dict[str, list[bytes]] = {}
    for c in encodable_containers(containers):
        groups.setdefault(c.origin, []).append(wire.delete(wire.path(split(c.path))))
    return [wire.response(wire.notification_head(ts_ns, wire.path((), origin, target)) + b"".join(deleted))
            for origin, deleted in groups.items()]


def encode_sync() -> bytes:
    """``SubscribeResponse{sync_response: true}``: the initial snapshot is complete."""
    return wire.SYNC
