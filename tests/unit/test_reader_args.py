"""Bad arguments to the reader and change kernel raise clear errors in both backends;
the C extension never crashes or writes past a buffer."""

from __future__ import annotations

import socket
from array import array

import pytest

from agent import _backend, _fallback

pytestmark = pytest.mark.nolibs  # no versioned library decides its outcome: not in the Debian pass

IMPLS = [_fallback] + ([_backend.reader] if _backend.NAME == "C" else [])


def _ids(m):
    return "C" if m.__name__ == "agent._swtel" else "python"


@pytest.fixture
def netlink():
    s = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, socket.NETLINK_ROUTE)
    s.bind((0, 0))
    yield s.fileno()
    s.close()


@pytest.mark.parametrize("impl", IMPLS, ids=_ids)
def test_short_buffers_are_refused(impl, netlink):
    with pytest.raises(ValueError):
        impl.netdev_read(netlink, array("i", [1, 2]), array("Q", bytes(8 * 25)), bytearray(2))
    with pytest.raises(ValueError):
        impl.ethtool_read(0, [b"lo"], array("I", [10]), array("Q", bytes(8 * 9)), array("i", [0]))
    with pytest.raises(ValueError):
        impl.sysfs_read(array("i", [0, 1]), array("Q", [0]), array("i", [0, 0]))
    n = 4
    cur, prev, acc = (array("Q", bytes(8 * n)) for _ in range(3))
    with pytest.raises(ValueError):
        impl.diff(cur, prev, acc, bytearray(n), bytes(n), bytes(n), array("I", bytes(4 * (n - 1))),
                  array("q", bytes(8 * n)), bytearray(n))


@pytest.mark.skipif(_backend.NAME != "C", reason="item-size checks are the C extension's")
def test_c_refuses_wrong_item_sizes_and_read_only_outputs(netlink):
    c = _backend.reader
    with pytest.raises(TypeError):  # int32 values where u64 are written
        c.netdev_read(netlink, array("i", [1]), array("i", bytes(4 * 50)), bytearray(1))
    with pytest.raises(BufferError):  # read-only output
        c.netdev_read(netlink, array("i", [1]), bytes(8 * 25), bytearray(1))
    with pytest.raises(ValueError):
        c.ethtool_read(0, [b"x" * 20], array("I", [1]), array("Q", [0]), array("i", [0]))
    with pytest.raises(TypeError):
        c.ethtool_read(0, ["lo"], array("I", [1]), array("Q", [0]), array("i", [0]))


@pytest.mark.parametrize("impl", IMPLS, ids=_ids)
def test_bad_interface_names_are_refused(impl):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        for bad in ("", "x" * 16, "a\0b"):
            with pytest.raises(ValueError):
                impl.ethtool_strings(s.fileno(), bad)
    finally:
        s.close()
