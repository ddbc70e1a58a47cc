"""sysfs reader: both backends parse counter files by the same rules."""

from __future__ import annotations

import errno
import os
from array import array

import pytest

from agent import _backend, _fallback

pytestmark = pytest.mark.nolibs  # no versioned library decides its outcome: not in the Debian pass

CASES = [
    (b"123\n", 123),
    (b"  42 \n", 42),
    (b"5", 5),
    (b"18446744073709551615\n", 2**64 - 1),
    (b"7\t", None),  # a tab after the digits: not a counter file
    (b"", None),
    (b"abc\n", None),
    (b"18446744073709551616\n", None),  # does not fit in u64
]


@pytest.mark.parametrize("impl", [_fallback, _backend.reader], ids=["python", "active"])
def test_sysfs_read_parses_and_keeps_old_values_on_bad_text(tmp_path, impl):
    fds = []
    for i, (text, _) in enumerate(CASES):
        path = tmp_path / str(i)
        path.write_bytes(text)
        fds.append(os.open(path, os.O_RDONLY))
    try:
        out = array("Q", [9] * len(CASES))
        status = array("i", [-7] * len(CASES))
        ok = impl.sysfs_read(array("i", fds), out, status)
        assert ok == sum(1 for _, want in CASES if want is not None)
        for (text, want), value, st in zip(CASES, out, status, strict=True):
            if want is None:
                assert (value, st) == (9, errno.EINVAL), text
            else:
                assert (value, st) == (want, 0), text
    finally:
        for fd in fds:
            os.close(fd)


def test_sysfs_read_reports_errno_of_a_closed_fd(tmp_path):
    path = tmp_path / "c"
    path.write_text("1\n")
    fd = os.open(path, os.O_RDONLY)
    os.close(fd)
    out, status = array("Q", [3]), array("i", [0])
    assert _backend.reader.sysfs_read(array("i", [fd]), out, status) == 0
    assert (out[0], status[0]) == (3, errno.EBADF)
