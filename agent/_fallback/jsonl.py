"""Pure-Python jsonl formatter: the same function as agent/_ext/jsonl.c, byte for byte.

The slow path (``SWTEL_PUREPYTHON=1`` or no C extension); tests/unit/test_jsonl.py holds
both to ``json.dumps`` of the exporter's dict.
"""

from __future__ import annotations

from collections.abc import Sequence

from agent.counters import F_JUMP, F_NEW, F_RESET, F_WRAP

# Every flag combination's members, in the order the exporter has always written them.
_SUFFIX = [
    b"".join(text for flag, text in ((F_NEW, b', "new": true'), (F_WRAP, b', "wrap": true'),
                                     (F_RESET, b', "reset": true'), (F_JUMP, b', "jump": true')) if f & flag)
    + b"}\n"
    for f in range(256)
]


def jsonl_lines(
    ts_ns: int,
    indices: Sequence[int],
    values: Sequence[int],
    deltas: Sequence[int],
    flags: bytes,
    paths: list[bytes],
) -> bytes:
    """The JSON lines (each ending in a newline) of one batch of changed counters, in the
    order of ``indices``; ``paths[i]`` is counter i's path as a JSON string literal."""
    n = len(indices)
    if len(deltas) < n or len(flags) < n:
        raise ValueError("deltas and flags must hold one item per index")
    head = b'{"ts": %d, "path": ' % ts_ns
    limit = min(len(values), len(paths))
    out = []
    for k, i in enumerate(indices):
        if not 0 <= i < limit:
            raise IndexError(f"counter index {i} out of range")
        path = paths[i]
        if not isinstance(path, bytes):
            raise TypeError("paths must hold bytes")
        out.append(b'%s%s, "value": %d, "delta": %d%s' % (head, path, values[i], deltas[k], _SUFFIX[flags[k]]))
    return b"".join(out)
