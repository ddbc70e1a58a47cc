"""Pure-Python gNMI encoder: the same functions as agent/_ext/encode.c, built with gnmi_pb2.

This is the slow path (``SWTEL_PUREPYTHON=1`` or no C extension) and the
reference the property test holds the C bytes to.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

#: A counter's serialized Path: bytes, or a (head, tail) pair whose concatenation it is
Path = bytes | tuple[bytes, bytes]


def _path(p: Path) -> bytes:
    if isinstance(p, bytes):
        return p
    if isinstance(p, tuple) and len(p) == 2 and isinstance(p[0], bytes) and isinstance(p[1], bytes):
        return p[0] + p[1]
    raise TypeError("paths must hold bytes or (bytes, bytes) pairs")


#: The paths argument: a list by counter index, or (pieces, heads, tails): counter i's path is
#: pieces[heads[i]] + pieces[tails[i]]
Paths = list[Path] | tuple[list[bytes], Sequence[int], Sequence[int]]


def _path_getter(paths: Paths) -> tuple[int, Callable[[int], bytes]]:
    """(how many counters have a path, counter index -> its serialized Path)."""
    if isinstance(paths, list):
        return len(paths), lambda i: _path(paths[i])
    if isinstance(paths, tuple) and len(paths) == 3 and isinstance(paths[0], list):
        pieces, heads, tails = paths

        def piece(k: int) -> bytes:
            if not 0 <= k < len(pieces):
                raise IndexError(f"path piece {k} out of range")
            if not isinstance(pieces[k], bytes):
                raise TypeError("path pieces must be bytes")
            return pieces[k]

        return min(len(heads), len(tails)), lambda i: piece(heads[i]) + piece(tails[i])
    raise TypeError("paths must be a list or a (pieces, heads, tails) triple")


def encode_updates(
    ts_ns: int,
    indices: Sequence[int],
    values: Sequence[int],
    containers: Sequence[int],
    prefixes: list[bytes],
    paths: Paths,
    max_updates: int,
) -> list[bytes]:
    """One serialized SubscribeResponse per container with changed counters
    (split every ``max_updates`` updates), containers in order of first appearance."""
    # imported here, not with the module: the fallback loads whole with agent._backend, which a
    # config parse reaches through the detectors' kernels, and a parse must not load the gRPC
    # stack (tests/unit/test_layers.py); after the first call this is a sys.modules lookup
    from pygnmi.spec.v080 import gnmi_pb2

    if max_updates < 1:
        raise ValueError("max_updates must be at least 1")
    npaths, path_of = _path_getter(paths)
    groups: dict[int, list[int]] = {}
    for i in indices:
        if not 0 <= i < min(len(values), len(containers), npaths):
            raise IndexError(f"counter index {i} out of range")
        c = containers[i]
        if c >= len(prefixes):
            raise IndexError(f"container id {c} out of range")
        groups.setdefault(c, []).append(i)
    out = []
    for c, members in groups.items():
        prefix = gnmi_pb2.Path.FromString(prefixes[c])
        for s in range(0, len(members), max_updates):
            notif = gnmi_pb2.Notification(timestamp=ts_ns, prefix=prefix)
            for i in members[s : s + max_updates]:
                update = notif.update.add()
                update.path.MergeFromString(path_of(i))
                update.val.uint_val = values[i]
            out.append(gnmi_pb2.SubscribeResponse(update=notif).SerializeToString())
    return out


def encode_fields(
    indices: Sequence[int],
    values: Sequence[int],
    containers: Sequence[int],
    paths: Paths,
    ngroups: int,
    max_bytes: int,
) -> list[tuple[int, int, bytes]]:
    """Changed counters as serialized ``Notification.update`` fields, one (group, updates,
    bytes) per run of one group's updates of at most ``max_bytes`` (a lone larger update is a
    run of its own); groups in order of first appearance, index order within one."""
    from pygnmi.spec.v080 import gnmi_pb2

    if max_bytes < 1 or not 0 <= ngroups <= 0xFFFFFFFF:
        raise ValueError("max_bytes must be at least 1, ngroups within u32")
    npaths, path_of = _path_getter(paths)
    groups: dict[int, list[int]] = {}
    for i in indices:
        if not 0 <= i < min(len(values), len(containers), npaths):
            raise IndexError(f"counter index {i} out of range")
        c = containers[i]
        if c >= ngroups:
            raise IndexError(f"container id {c} out of range")
        groups.setdefault(c, []).append(i)
    out: list[tuple[int, int, bytes]] = []
    for c, members in groups.items():
        run: list[bytes] = []
        size = 0
        for i in members:
            one = gnmi_pb2.Notification()  # only its update field set: serializes to that field alone
            update = one.update.add()
            update.path.MergeFromString(path_of(i))
            update.val.uint_val = values[i]
            field = one.SerializeToString()
            if run and size + len(field) > max_bytes:
                out.append((c, len(run), b"".join(run)))
                run, size = [], 0
            run.append(field)
            size += len(field)
        if run:
            out.append((c, len(run), b"".join(run)))
    return out
