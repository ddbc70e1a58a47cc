"""Pure-Python sysfs reader: pread on open files, as agent/_ext/sysfs.c."""

from __future__ import annotations

import errno
import os


def sysfs_read(fds, out, status) -> int:
    """See agent/_ext/sysfs.c."""
    n = len(fds)
    if len(out) < n or len(status) < n:
        raise ValueError("out/status shorter than fds")
    ok = 0
    for i in range(n):
        try:
            text = os.pread(fds[i], 32, 0)
        except OSError as exc:
            status[i] = exc.errno
            continue
        body = text.lstrip(b" \t")
        end = 0
        while end < len(body) and 48 <= body[end] <= 57:
            end += 1
        word = body[:end]
        # Same rule as the C reader: digits, then nothing, a newline or a space.
        if not word or (end < len(body) and body[end] not in b"\n ") or int(word) >= 1 << 64:
            status[i] = errno.EINVAL
            continue
        out[i] = int(word)
        status[i] = 0
        ok += 1
    return ok
