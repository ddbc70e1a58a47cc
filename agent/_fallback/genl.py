"""Generic netlink plumbing the pure-Python devlink and ethnl share: the twin of
agent/_ext/genl.h (the attribute walk and writer, the message walk with its errors,
request sequence numbers, the receive loop, the family lookup). Nothing a reply says is
trusted, as on the C side."""

from __future__ import annotations

import errno
import itertools
import os
import socket
import struct
from collections.abc import Iterable, Iterator

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


def check_family(family: int) -> None:
    """A family id a request may carry as its nlmsg_type (genl.h genl_check_family)."""
    if not NLMSG_MIN_TYPE <= family <= 0xFFFF:
        raise ValueError(f"bad generic netlink family id {family}")


def message(mtype: int, flags: int, seq: int, cmd: int, version: int, attributes: bytes) -> bytes:
    """One request: its nlmsghdr, genlmsghdr and attributes (genl.h genl_begin/genl_end)."""
    body = GENL.pack(cmd, version, 0) + attributes
    return NLMSG.pack(NLMSG.size + len(body), mtype, flags, seq, 0) + body


def find_reply(data: bytes, cmd: int, what: str) -> bytes:
    """The attributes of the first generic netlink message with command ``cmd``."""
    for got, body in messages(data):
        if got == cmd:
            return body
    raise ValueError(f"no {what} reply in the buffer")


def family_id(data: bytes) -> int:
    """The family id in a CTRL_CMD_NEWFAMILY reply (genl.h genl_family_id)."""
    for t, p in attrs(find_reply(data, CTRL_CMD_NEWFAMILY, "CTRL_CMD_NEWFAMILY")):
        if t == CTRL_ATTR_FAMILY_ID and len(p) >= 2:
            return struct.unpack_from("=H", p)[0]
    raise ValueError("CTRL_CMD_NEWFAMILY reply without CTRL_ATTR_FAMILY_ID")


def receive(sock: socket.socket, seq: int) -> bytes:
    """The datagram answering ``seq`` (older requests' answers skipped; genl.h genl_receive)."""
    for _ in range(STALE_MAX):
        try:
            data, _anc, flags, _addr = sock.recvmsg(REPLY_MAX)
        except InterruptedError:
            continue
        if flags & socket.MSG_TRUNC:
            raise OSError(errno.EMSGSIZE, os.strerror(errno.EMSGSIZE))
        if len(data) >= NLMSG.size and NLMSG.unpack_from(data)[3] != seq:
            continue  # an answer to a request that timed out earlier
        return data
    raise OSError(errno.EIO, os.strerror(errno.EIO))


def exchange(sock: socket.socket, req: bytes, seq: int) -> bytes:
    sock.send(req)
    return receive(sock, seq)


def family(fd: int, name: bytes) -> int:
    """Resolve the generic netlink family ``name`` on the NETLINK_GENERIC socket ``fd``
    (genl.h genl_family; OSError ENOENT: no such family)."""
    sock = borrow(fd)
    try:
        seq = next_seq()
        req = message(GENL_ID_CTRL, NLM_F_REQUEST, seq, CTRL_CMD_GETFAMILY, 1,
                      attr(CTRL_ATTR_FAMILY_NAME, name + b"\0"))
        reply = exchange(sock, req, seq)
    finally:
        sock.detach()
    return family_id(reply)


def batch(fd: int, requests: Iterable[bytes]) -> list[bytes]:
    """Each request (its sequence number from next_seq) sent and answered before the next:
    the raw answer of each, in order (genl.h genl_batch)."""
    sock = borrow(fd)
    try:
        return [exchange(sock, req, NLMSG.unpack_from(req)[3]) for req in requests]
    finally:
        sock.detach()


def borrow(fd: int) -> socket.socket:
    """A socket object over the caller's fd (detached again, never closed, by the caller)."""
    return socket.socket(fileno=fd)


def next_seq() -> int:
    return next(_seq) & 0xFFFFFFFF
