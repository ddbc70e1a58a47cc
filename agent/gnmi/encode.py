"""Changes -> serialized ``gnmi.SubscribeResponse`` bytes: the API exporters use.

Counters go through the active backend's ``encode_updates`` (C, or the gnmi_pb2
fallback) with per-table caches: the serialized relative path of every counter
and the serialized prefix (origin, target, container elems) of every container.
The caches live on ``CounterTable.cache``, so a rebuilt table starts fresh.
States, deletes and sync are rare and built with gnmi_pb2 directly.

Rules (DESIGN.md "Paths"): one Notification per container per batch; target and
origin only on the prefix; update paths relative to it; int64 ns timestamps.
"""

from __future__ import annotations

import json
from array import array
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from pygnmi.spec.v080 import gnmi_pb2

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
from agent.gnmi import paths

_SYNC = gnmi_pb2.SubscribeResponse(sync_response=True).SerializeToString()

#: Updates per Notification before a container is split in several (same prefix and
#: timestamp): keeps one message well below gRPC's 4 MB default receive limit.
MAX_UPDATES = 1000


@dataclass(frozen=True)
class TableCodec:
    """Cached encoder inputs for one CounterTable and one target."""

    prefixes: list[bytes]  # by container id
    paths: list[bytes]  # by counter index
    containers: array  # 'I': container id by counter index


def prefix_bytes(container: Container, target: str) -> bytes:
    return paths.encoded(container.path, container.origin, target)


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
            leaf_paths = [b"" if i in bad else paths.to_proto(f"{s.container.path}/{s.leaf}").SerializeToString()
                          for i, s in enumerate(table.specs)]
        else:
            for spec in table.specs:
                containers.append(ids.setdefault(spec.container, len(ids)))
            prefixes = [prefix_bytes(c, target) if text_ok(c.path) else b"" for c in ids]
            leaf_paths = [b"" if i in bad else paths.encoded(spec.leaf) for i, spec in enumerate(table.specs)]
        cached = TableCodec(prefixes=prefixes, paths=leaf_paths, containers=containers)
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


def typed_value(value: Any) -> gnmi_pb2.TypedValue:
    """A Python value as the gNMI TypedValue a collector expects for it."""
    if isinstance(value, bool):
        return gnmi_pb2.TypedValue(bool_val=value)
    if isinstance(value, int):
        if 0 <= value < 2**64:
            return gnmi_pb2.TypedValue(uint_val=value)
        return gnmi_pb2.TypedValue(int_val=value)
    if isinstance(value, float):
        return gnmi_pb2.TypedValue(double_val=value)
    if isinstance(value, str):
        return gnmi_pb2.TypedValue(string_val=value)
    if isinstance(value, bytes):
        return gnmi_pb2.TypedValue(bytes_val=value)
    return gnmi_pb2.TypedValue(json_ietf_val=json.dumps(value, sort_keys=True).encode())


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
    groups: dict[tuple[int, Container], gnmi_pb2.Notification] = {}
    for u in encodable_states(updates):
        notif = groups.get((u.ts_ns, u.container))
        if notif is None:
            notif = gnmi_pb2.Notification(timestamp=u.ts_ns)
            notif.prefix.MergeFromString(prefix_bytes(u.container, target))
            groups[(u.ts_ns, u.container)] = notif
        leaf = paths.to_proto(u.leaf)
        if u.value is None:
            notif.delete.append(leaf)
        else:
            notif.update.add(path=leaf, val=typed_value(u.value))
    return [gnmi_pb2.SubscribeResponse(update=n).SerializeToString() for n in groups.values()]


def encode_deletes(ts_ns: int, containers: Iterable[Container], target: str) -> list[bytes]:
    """Whole containers gone (a port removed): one Notification per origin, prefix without elems."""
    groups: dict[str, gnmi_pb2.Notification] = {}
    for c in encodable_containers(containers):
        notif = groups.get(c.origin)
        if notif is None:
            notif = gnmi_pb2.Notification(
                timestamp=ts_ns, prefix=gnmi_pb2.Path(origin=c.origin, target=target)
            )
            groups[c.origin] = notif
        notif.delete.append(paths.to_proto(c.path))
    return [gnmi_pb2.SubscribeResponse(update=n).SerializeToString() for n in groups.values()]


def encode_sync() -> bytes:
    """``SubscribeResponse{sync_response: true}``: the initial snapshot is complete."""
    return _SYNC
