"""Pure-Python netdev reader: one RTM_GETSTATS dump per poll, as agent/_ext/netdev.c."""

from __future__ import annotations

import errno
import os
import socket
import struct
from bisect import bisect_left

NETDEV_FIELDS = 25

_RTM_NEWSTATS, _RTM_GETSTATS = 92, 94
_NLM_F_REQUEST, _NLM_F_DUMP = 0x1, 0x300
_NLMSG_ERROR, _NLMSG_DONE = 2, 3
_IFLA_STATS_LINK_64 = 1
_NLMSG_HDR = struct.Struct("=IHHII")  # len, type, flags, seq, pid
_IF_STATS_MSG = struct.Struct("=BBHiI")  # family, pad1, pad2, ifindex, filter_mask
_RTA = struct.Struct("=HH")
_seq = 0


def _align4(n: int) -> int:
    return (n + 3) & ~3


def _check_netdev(ifindexes, out, seen) -> int:
    n = len(ifindexes)
    if len(out) < n * NETDEV_FIELDS or len(seen) < n:
        raise ValueError("out or seen buffer too small for ifindexes")
    return n


def netdev_read(fd: int, ifindexes, out, seen) -> int:
    """See agent/_ext/netdev.c."""
    global _seq
    n = _check_netdev(ifindexes, out, seen)
    _seq = (_seq + 1) & 0xFFFFFFFF
    seq = _seq
    body = _IF_STATS_MSG.pack(socket.AF_UNSPEC, 0, 0, 0, 1 << (_IFLA_STATS_LINK_64 - 1))
    req = _NLMSG_HDR.pack(_NLMSG_HDR.size + len(body), _RTM_GETSTATS,
                          _NLM_F_REQUEST | _NLM_F_DUMP, seq, 0) + body
    for i in range(n):
        seen[i] = 0
    os.write(fd, req)
    found = [0]
    idx_list = list(ifindexes)
    while True:
        data = os.read(fd, 65536)
        if not data:
            raise OSError(errno.EPIPE, os.strerror(errno.EPIPE))
        if _parse_dump(data, seq, idx_list, out, seen, found):
            return found[0]


def netdev_parse(buf, ifindexes, out, seen, seq: int = 1) -> int:
    """See agent/_ext/netdev.c: netdev_read's parser on a caller's buffer."""
    n = _check_netdev(ifindexes, out, seen)
    if not 0 <= seq <= 0xFFFFFFFF:
        raise OverflowError("seq must be an unsigned 32-bit int")
    for i in range(n):
        seen[i] = 0
    found = [0]
    _parse_dump(bytes(buf), seq, list(ifindexes), out, seen, found)
    return found[0]


def _parse_dump(data: bytes, seq: int, idx_list, out, seen, found: list[int]) -> bool:
    """One chunk of the dump: True once NLMSG_DONE is seen; raises OSError for NLMSG_ERROR.
    Same bounds as the C parser: messages within the chunk, attributes within their message."""
    off, size = 0, len(data)
    while size - off >= _NLMSG_HDR.size:
        length, mtype, _flags, mseq, _pid = _NLMSG_HDR.unpack_from(data, off)
        if length < _NLMSG_HDR.size or length > size - off:
            return False
        msg = off
        off += min(_align4(length), size - off)
        if mseq != seq:
            continue
        if mtype == _NLMSG_DONE:
            return True
        if mtype == _NLMSG_ERROR:
            err = struct.unpack_from("=i", data, msg + _NLMSG_HDR.size)[0] if length >= _NLMSG_HDR.size + 4 else 0
            code = -err if -(1 << 31) < err < 0 else errno.EIO
            raise OSError(code, os.strerror(code))
        if mtype == _RTM_NEWSTATS and length >= _NLMSG_HDR.size + _IF_STATS_MSG.size:
            found[0] += _parse_stats(data, msg + _NLMSG_HDR.size, msg + length, idx_list, out, seen)
    return False


def _parse_stats(data: bytes, pos: int, end: int, idx_list, out, seen) -> int:
    ifindex = _IF_STATS_MSG.unpack_from(data, pos)[3]
    slot = bisect_left(idx_list, ifindex)
    if slot >= len(idx_list) or idx_list[slot] != ifindex:
        return 0
    pos += _align4(_IF_STATS_MSG.size)
    new = 0
    while pos + _RTA.size <= end:
        alen, atype = _RTA.unpack_from(data, pos)
        if alen < _RTA.size or alen > end - pos:
            break
        if atype == _IFLA_STATS_LINK_64:
            have = (alen - _RTA.size) // 8
            take = min(have, NETDEV_FIELDS)
            values = struct.unpack_from(f"={take}Q", data, pos + _RTA.size)
            base = slot * NETDEV_FIELDS
            out[base:base + take] = type(out)(out.typecode, values) if hasattr(out, "typecode") else values
            if not seen[slot]:
                seen[slot] = 1
                new = 1
        pos += _align4(alen)
    return new
