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
from array import array
from collections.abc import Iterable
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
    escape_key,
)
from agent.gnmi import encode, paths

Elems = tuple[tuple[str, dict[str, str]], ...]
Pattern = tuple[str, Elems]  # (origin, elems)

#: Advertised in Capabilities and the only ones answered. JSON (0) is the proto3 default: what
#: gnmic sends by default and what openconfig's gnmi_cli sends by leaving the field out.
SUPPORTED_ENCODINGS = (gnmi_pb2.JSON, gnmi_pb2.PROTO, gnmi_pb2.JSON_IETF)
ACCEPTED_ENCODINGS = SUPPORTED_ENCODINGS  # kept for importers: nothing is accepted unadvertised


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
        f"unknown origin {origin!r}: this target serves {OPENCONFIG!r} and {SWTEL_ORIGIN!r}",
    )


def _elems(path: gnmi_pb2.Path) -> list[tuple[str, dict[str, str]]]:
    if not path.elem and path.element:  # gNMI 0.3 string elements
        return list(paths.split("/" + "/".join(path.element)))
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
        raise RequestError(grpc.StatusCode.NOT_FOUND, f"unknown target {named!r} (this is {target!r})")
    origin = resolve_origin(path.origin or prefix.origin)
    return origin, tuple(_elems(prefix) + _elems(path))


#: longest request path echoed in an error status: a huge path must not make the reply huge
DISPLAY_MAX = 200


def display(pattern: Pattern) -> str:
    origin, elems = pattern
    text = "/" + "/".join(n + "".join(f"[{k}={escape_key(v)}]" for k, v in sorted(ks.items())) for n, ks in elems)
    text = text if origin == OPENCONFIG else f"{origin}:{text}"
    return text if len(text) <= DISPLAY_MAX else f"{text[:DISPLAY_MAX]}... ({len(text)} characters)"


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


def _has_dots(elems: Elems) -> bool:
    return any(name == "..." for name, _ in elems)


@dataclass
class TableMatch:
    table: CounterTable
    indices: list[int]  # matching counter indices, ascending
    mask: bytearray | None  # membership by index; None: every counter matches


#: What a container's leaves must still match: (pattern number, elements already consumed);
#: a consumed count of -1 means "match the whole path" (patterns with ``...``).
Tails = tuple[tuple[int, int], ...]


class PathSet:
    """A set of path patterns, matched against tables (cached by identity) and states."""

    def __init__(self, patterns: Iterable[Pattern]):
        self.patterns: tuple[Pattern, ...] = tuple(patterns)
        self._tables: dict[str, TableMatch] = {}  # by source; valid while .table is the same object
        self._states: dict[tuple[Container, str], bool] = {}

    def table(self, table: CounterTable) -> TableMatch:
        m = self._tables.get(table.source)
        if m is None or m.table is not table:
            m = self._match_table(table)
            self._tables[table.source] = m
        return m

    def _match_table(self, table: CounterTable) -> TableMatch:
        # Decided once per container and, below it, once per distinct leaf name. Specs
        # of one container are usually adjacent: an identity check skips the hashing.
        verdicts: dict[Container, bool | Tails] = {}
        leaf_caches: dict[tuple, dict[str, bool]] = {}  # by (tails, container path if "...")
        kinds = table.kinds
        indices = []
        last, verdict, leaf_hits = None, False, {}
        for i, spec in enumerate(table.specs):
            c = spec.container
            if c is not last:
                last = c
                verdict = verdicts.get(c)
                if verdict is None:
                    verdict = verdicts[c] = self._container_verdict(c)
                if verdict is not True and verdict:
                    key = (verdict, c.path if any(n < 0 for _, n in verdict) else None)
                    leaf_hits = leaf_caches.setdefault(key, {})
            if not verdict or kinds[i] == HIDDEN:  # HIDDEN: read for the layout, never reported
                continue
            if verdict is True:
                indices.append(i)
                continue
            hit = leaf_hits.get(spec.leaf)
            if hit is None:
                hit = leaf_hits[spec.leaf] = self._leaf_matches(verdict, c, spec.leaf)
            if hit:
                indices.append(i)
        if len(indices) == len(table.specs):
            return TableMatch(table, indices, None)
        mask = bytearray(len(table.specs))
        for i in indices:
            mask[i] = 1
        return TableMatch(table, indices, mask)

    def _container_verdict(self, container: Container) -> bool | Tails:
        """True: every leaf below matches; otherwise the pattern tails its leaves must match
        (empty: none can)."""
        celems = list(_split(container.path))
        n = len(celems)
        tails = []
        for k, (origin, elems) in enumerate(self.patterns):
            if origin != container.origin:
                continue
            if paths.matches(list(elems), celems):
                return True
            if _has_dots(elems):
                tails.append((k, -1))
            elif len(elems) > n and paths.matches(list(elems[:n]), celems):
                tails.append((k, n))
        return tuple(tails)

    def _leaf_matches(self, tails: Tails, container: Container, leaf: str) -> bool:
        leaf_elems = list(_split(leaf))
        for k, n in tails:
            elems = self.patterns[k][1]
            if n < 0:
                if paths.matches(list(elems), list(_split(container.path)) + leaf_elems):
                    return True
            elif paths.matches(list(elems[n:]), leaf_elems):
                return True
        return False

    def matches_leaf(self, container: Container, leaf: str) -> bool:
        key = (container, leaf)
        hit = self._states.get(key)
        if hit is None:
            concrete = list(_split(container.path) + _split(leaf))
            hit = any(
                origin == container.origin and paths.matches(list(elems), concrete)
                for origin, elems in self.patterns
            )
            if len(self._states) < 100_000:
                self._states[key] = hit
        return hit

    def touches(self, container: Container) -> bool:
        """A deleted container concerns us if it lies at, below or above one of our patterns."""
        celems = list(_split(container.path))
        return any(
            origin == container.origin
            and (paths.matches(list(elems), celems) or paths.matches(celems, list(elems)))
            for origin, elems in self.patterns
        )

    def filter_changes(self, table: CounterTable, changed: list[int]) -> list[int]:
        """The changed indices this set matches: cost per change."""
        m = self.table(table)
        if not m.indices:
            return []
        if m.mask is None:
            return changed
        mask = m.mask
        return [i for i in changed if mask[i]]


# ---------------------------------------------------------------- reading the Store


@dataclass
class Counters:
    """Matched counters of one source, values copied: what a snapshot or a queued change carries."""

    ts_ns: int
    table: CounterTable
    indices: list[int]
    values: array


def read(store: Any, pathset: PathSet) -> tuple[list[Counters], list[StateUpdate]]:
    """Current values of everything ``pathset`` matches."""
    counters = []
    for batch in store.snapshot_batches():
        indices = pathset.table(batch.table).indices
        if indices:
            counters.append(Counters(batch.ts_ns, batch.table, indices, batch.values))
    states = [u for u in store.states() if pathset.matches_leaf(u.container, u.leaf)]
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
        if not c.indices:
            return []
        if self.proto:
            codec = encode.codec(c.table, self.target)
            return _backend.encoder.encode_updates(
                c.ts_ns, c.indices, c.values, codec.containers, codec.prefixes, codec.paths,
                encode.MAX_UPDATES,
            )
        groups: dict[Container, list[int]] = {}
        specs = c.table.specs
        for i in c.indices:
            groups.setdefault(specs[i].container, []).append(i)
        out = []
        step = encode.MAX_UPDATES  # split big containers as the PROTO encoder does
        for container, members in groups.items():
            for start in range(0, len(members), step):
                notif = self._notification(container, c.ts_ns)
                for i in members[start : start + step]:
                    self._add(notif, specs[i].leaf, _json_scalar(c.values[i], True, self._ietf))
                out.append(_response(notif))
        return out

    def states(self, updates: list[StateUpdate]) -> list[bytes]:
        if not updates:
            return []
        if self.proto:
            return encode.encode_states(updates, self.target)
        groups: dict[tuple[int, Container], gnmi_pb2.Notification] = {}
        for u in updates:
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


def get(store: Any, request: gnmi_pb2.GetRequest, target: str) -> gnmi_pb2.GetResponse:
    """Latest values under every requested path; a path with no data is NOT_FOUND."""
    renderer = Renderer(target, check_encoding(request.encoding))
    if request.type == gnmi_pb2.GetRequest.CONFIG:
        raise RequestError(grpc.StatusCode.NOT_FOUND, "this target serves state data only")
    requested = list(request.path) or [gnmi_pb2.Path()]
    response = gnmi_pb2.GetResponse()
    seen: set[tuple] = set()
    for path in requested:
        pattern = request_pattern(request.prefix, path, target)
        key = (pattern[0], tuple((n, tuple(sorted(ks.items()))) for n, ks in pattern[1]))
        if key in seen:  # the same path asked again is answered once
            continue
        seen.add(key)
        counters, states = read(store, PathSet([pattern]))
        chunks = renderer.snapshot(counters, states)
        if not chunks:
            raise RequestError(grpc.StatusCode.NOT_FOUND, f"no data at {display(pattern)}")
        for chunk in chunks:
            response.notification.append(gnmi_pb2.SubscribeResponse.FromString(chunk).update)
    return response

