"""Reading a file that someone else may have planted: a regular file only, opened without
blocking (a FIFO or a device in its place is refused, never waited on) and read with a bound
(a file growing while it is read stops at the bound)."""

from __future__ import annotations

import errno
import os
import stat


def read_regular(path: str, limit: int, *, follow_symlinks: bool = True) -> bytes:
    """At most ``limit`` bytes of the regular file ``path`` (ask ``limit + 1`` to tell a file
    over the limit). OSError: it cannot be opened or read, or it is not a regular file
    (EINVAL); a symlink when ``follow_symlinks`` is False (ELOOP)."""
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY
    fd = os.open(path, flags if follow_symlinks else flags | os.O_NOFOLLOW)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(errno.EINVAL, "not a regular file")
        chunks, left = [], limit
        while left > 0:
            chunk = os.read(fd, min(left, 1 << 20))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)
