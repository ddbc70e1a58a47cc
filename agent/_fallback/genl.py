"""Generic netlink plumbing the pure-Python devlink and ethnl share: the twin of
agent/_ext/genl.h (the attribute walk and writer, the message walk with its errors,
request sequence numbers). Nothing a reply says is trusted, as on the C side."""

from __future__ import annotations

import errno
import itertools
import os
import socket
import struct
from collections.abc import Iterator

NLMSG_ERROR, NLMSG_DONE, NLMSG_MIN_TYPE = 2, 3, 0x10
NLM_F_REQUEST = 1
NLA_TYPE_MASK = 0x3FFF  # without NLA_F_NESTED / NLA_F_NET_BYTEORDER
NLA_F_NESTED = 0x8000
GENL_ID_CTRL, CTRL_CMD_NEWFAMILY, CTRL_CMD_GETFAMILY = 0x10, 1, 3
CTRL_ATTR_FAMILY_ID, CTRL_ATTR_FAMILY_NAME = 1, 2
REPLY_MAX = 65536
STALE_MAX = 64

NLMSG = struct.Struct("=IHHII")  # len, type, flags, seq, pid
GENL = struct.Struct("=BBH")  # cmd, version, reserved
NLA = struct.Struct("=HH")  # len, type
_seq = itertools.count(1)


def align4(n: int) -> int:
    return (n + 3) & ~3


def attrs(data: bytes) -> Iterator[tuple[int, bytes]]:
    """(type, payload) of each attribute up to the first bad length."""
    pos, end = 0, len(data)
    while end - pos >= NLA.size:
        nla_len, nla_type = NLA.unpack_from(data, pos)
        if nla_len < NLA.size or nla_len > end - pos:
            return
        yield nla_type & NLA_TYPE_MASK, data[pos + NLA.size : pos + nla_len]
        pos += align4(nla_len)


def attr(nla_type: int, payload: bytes) -> bytes:
    raw = NLA.pack(NLA.size + len(payload), nla_type) + payload
    return raw + bytes(-len(raw) % 4)


def messages(data: bytes) -> Iterator[tuple[int, bytes]]:
    """(cmd, attributes) of each generic netlink message; a malformed header is a
    ValueError, an error reply an OSError; acks, NLMSG_DONE and control messages are
    skipped (agent/_ext/genl.h genl_next)."""
    off, size = 0, len(data)
    while off < size:
        if size - off < NLMSG.size:
            raise ValueError("truncated netlink message header")
        length, mtype = struct.unpack_from("=IH", data, off)
        if length < NLMSG.size or length > size - off:
            raise ValueError(f"netlink message length {length} at offset {off}: {size - off} bytes left")
        start = off
        off += min(align4(length), size - off)
        if mtype in (NLMSG_ERROR, NLMSG_DONE):
            if mtype == NLMSG_ERROR and length < NLMSG.size + 4:
                raise ValueError("NLMSG_ERROR too short for its error code")
            error = struct.unpack_from("=i", data, start + NLMSG.size)[0] if length >= NLMSG.size + 4 else 0
            if error != 0:
                code = -error if -(2**31) < error < 0 else errno.EIO
                raise OSError(code, os.strerror(code))
            continue
        if mtype < NLMSG_MIN_TYPE:
            continue
        if length < NLMSG.size + GENL.size:
            raise ValueError("generic netlink message too short for its genlmsghdr")
        yield data[start + NLMSG.size], data[start + NLMSG.size + GENL.size : start + length]


def borrow(fd: int) -> socket.socket:
    """A socket object over the caller's fd (detached again, never closed, by the caller)."""
    return socket.socket(fileno=fd)


def next_seq() -> int:
    return next(_seq) & 0xFFFFFFFF
