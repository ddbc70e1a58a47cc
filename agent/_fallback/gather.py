"""Pure-Python twin of agent/_ext/gather.c: chosen slots of one value buffer into a dense one."""

from __future__ import annotations

from array import array


def gather(src, indices, dst) -> None:
    """See agent/_ext/gather.c; same rules, same results."""
    n = len(indices)
    if len(dst) < n:
        raise ValueError("dst is shorter than indices")
    nsrc = len(src)
    if n and max(indices) >= nsrc:
        raise ValueError("an index is beyond src")
    picked = array("Q", map(src.__getitem__, indices))
    if isinstance(dst, array):
        dst[:n] = picked
    else:  # any writable buffer of u64
        memoryview(dst).cast("B")[:8 * n] = picked.tobytes()
