"""Pure-Python reader and change kernel: the same functions, signatures and
results as the C extension (agent/_ext/{netdev,ethtool,sysfs,change}.c).

Used when ``SWTEL_PUREPYTHON=1`` or the extension is missing. The raw netlink
and ioctl requests are the same ones the C code issues, built with ``struct``.
"""

from __future__ import annotations

import errno
import fcntl
import os
import socket
import struct
from bisect import bisect_left

from agent._pyasic import (  # noqa: F401 - the reader API: ASIC plugins, via ctypes
    ASIC_ABI_VERSION,
    ASIC_ECHANGED,
    ASIC_MAX_BINS,
    ASIC_MAX_COUNTERS,
    ASIC_MAX_PORTS,
    ASIC_MAX_VALUES,
    asic_close,
    asic_layout,
    asic_open,
    asic_read,
)
from agent._pylinks import link_parse  # noqa: F401

NETDEV_FIELDS = 25
F_CHANGED, F_WRAP, F_RESET, F_NEW, F_JUMP = 0x01, 0x02, 0x04, 0x08, 0x10
version = "0.1.0"  # mirrors agent._swtel.version

# ------------------------------------------------------------------ netdev

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


# ------------------------------------------------------------------ ethtool

_SIOCETHTOOL = 0x8946
_ETHTOOL_GDRVINFO, _ETHTOOL_GSTRINGS, _ETHTOOL_GSTATS, _ETHTOOL_GSSET_INFO = 0x3, 0x1B, 0x1D, 0x37
_ETH_SS_STATS = 1
_ETH_GSTRING_LEN = 32
_IFNAMSIZ = 16
_DRVINFO = struct.Struct("=I32s32s32s32s32s12sIIIII")


def _ifreq(ifname: str | bytes, data_addr: int) -> bytes:
    name = ifname.encode() if isinstance(ifname, str) else ifname
    if not 0 < len(name) < _IFNAMSIZ or b"\0" in name:
        raise ValueError(f"bad interface name {name!r}")
    # struct ifreq: the name, then the union whose ifr_data pointer we set (native alignment).
    req = struct.pack(f"@{_IFNAMSIZ}sP", name, data_addr)
    return req + bytes(40 - len(req))


def _ethtool(fd: int, ifname: str | bytes, buf: bytearray) -> None:
    """SIOCETHTOOL with ifr_data pointing at buf (mutated in place)."""
    import ctypes

    addr = ctypes.addressof((ctypes.c_char * len(buf)).from_buffer(buf))
    fcntl.ioctl(fd, _SIOCETHTOOL, _ifreq(ifname, addr))


def _call(fd: int, ifname: str | bytes, buf: bytearray) -> None:
    try:
        _ethtool(fd, ifname, buf)
    except OSError as exc:
        name = ifname.decode() if isinstance(ifname, bytes) else ifname
        raise OSError(exc.errno, os.strerror(exc.errno), name) from None


def ethtool_drvinfo(fd: int, ifname: str) -> tuple[str, str, str, str, int]:
    buf = bytearray(_DRVINFO.size)
    struct.pack_into("=I", buf, 0, _ETHTOOL_GDRVINFO)
    _call(fd, ifname, buf)
    f = _DRVINFO.unpack(bytes(buf))

    def text(b: bytes) -> str:
        return b.split(b"\0", 1)[0].decode("latin-1")

    return text(f[1]), text(f[2]), text(f[3]), text(f[4]), f[8]


def _stats_count(fd: int, ifname: str) -> int:
    buf = bytearray(struct.pack("=IIQI", _ETHTOOL_GSSET_INFO, 0, 1 << _ETH_SS_STATS, 0))
    try:
        _call(fd, ifname, buf)
    except OSError:
        return ethtool_drvinfo(fd, ifname)[4]
    _cmd, _res, mask, length = struct.unpack("=IIQI", bytes(buf))
    return length if mask & (1 << _ETH_SS_STATS) else 0


def ethtool_strings(fd: int, ifname: str) -> list[str]:
    count = _stats_count(fd, ifname)
    if count == 0:
        return []
    room = count * 2 + 1024  # the kernel writes the driver's current count: headroom
    buf = bytearray(12 + room * _ETH_GSTRING_LEN)
    struct.pack_into("=III", buf, 0, _ETHTOOL_GSTRINGS, _ETH_SS_STATS, count)
    _call(fd, ifname, buf)
    return _gstrings_list(buf, room)


def ethtool_strings_parse(buf) -> list[str]:
    """See agent/_ext/ethtool.c: ethtool_strings' parser on a caller's buffer."""
    buf = bytes(buf)
    if len(buf) < 12:
        return []
    return _gstrings_list(buf, (len(buf) - 12) // _ETH_GSTRING_LEN)


def _gstrings_list(buf, room: int) -> list[str]:
    got = min(struct.unpack_from("=I", buf, 8)[0], room)
    names = []
    for i in range(got):
        raw = bytes(buf[12 + i * _ETH_GSTRING_LEN: 12 + (i + 1) * _ETH_GSTRING_LEN])
        names.append(raw.split(b"\0", 1)[0].decode("latin-1"))
    return names


def _gstats_take(buf, room: int, want: int, out, pos: int) -> int:
    """One GSTATS reply: 0 with its values copied to out[pos:], or -1 when the driver's
    count changed (or the reply cannot hold what it claims)."""
    if struct.unpack_from("=I", buf, 4)[0] != want or want > room:
        return -1
    out[pos:pos + want] = type(out)("Q", struct.unpack_from(f"={want}Q", buf, 8))
    return 0


# ethtool_read's status for a port its plan left to a later tick (values kept)
ETHTOOL_SKIPPED = -2
_U32_MAX = 0xFFFFFFFF


def _check_ethtool(n: int, counts, out, status) -> None:
    if len(counts) < n or len(status) < n:
        raise ValueError("counts/status shorter than ifnames")
    if len(out) < sum(counts[:n]):
        raise ValueError("out buffer shorter than the sum of counts")


def ethtool_parse(replies: list[bytes], counts, out, status) -> int:
    """See agent/_ext/ethtool.c: ethtool_read's parser on replies already received."""
    if not isinstance(replies, list):
        raise TypeError("replies must be a list")
    _check_ethtool(len(replies), counts, out, status)
    if not all(isinstance(r, bytes) for r in replies):
        raise TypeError("replies must be bytes")
    ok = pos = 0
    for i, reply in enumerate(replies):
        if len(reply) < 8:
            status[i] = errno.EMSGSIZE
        else:
            status[i] = _gstats_take(reply, (len(reply) - 8) // 8, counts[i], out, pos)
            ok += status[i] == 0
        pos += counts[i]
    return ok


def ethtool_read(fd: int, ifnames: list[bytes], counts, out, status, quiet=None, sweep: int = 1,
                 tick: int = 0) -> int:
    """See agent/_ext/ethtool.c (``quiet``: the idle-port plan)."""
    _check_ethtool(len(ifnames), counts, out, status)
    if quiet is not None and len(quiet) < len(ifnames):
        raise ValueError("counts/status/quiet shorter than ifnames")
    sweep = max(1, sweep)
    most = max(counts[: len(ifnames)], default=0)
    # The kernel writes as many stats as the driver has now: leave headroom.
    room = most * 2 + 4096
    buf = bytearray(8 + room * 8)
    ok = 0
    pos = 0
    for i, name in enumerate(ifnames):
        n = counts[i]
        if quiet is not None and quiet[i] >= sweep and (i + tick) % sweep:
            quiet[i] = min(quiet[i] + 1, _U32_MAX)
            status[i] = ETHTOOL_SKIPPED
            ok += 1
            pos += n
            continue
        struct.pack_into("=II", buf, 0, _ETHTOOL_GSTATS, n)
        try:
            _ethtool(fd, name, buf)
        except OSError as exc:
            status[i] = exc.errno
        else:
            before = out[pos : pos + n] if quiet is not None else None
            status[i] = _gstats_take(buf, room, n, out, pos)
            ok += status[i] == 0
            if quiet is not None:
                moved = status[i] == 0 and out[pos : pos + n] != before
                quiet[i] = 0 if moved else min(quiet[i] + 1, _U32_MAX)
        pos += n
    return ok


# ------------------------------------------------------------------ sysfs


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


# ------------------------------------------------------------------ change kernel

_JUMP_64 = 10_000_000_000_000
_DEFAULT_RATE = 3.2e12
_MASK64 = (1 << 64) - 1


def _limit_for(rate: float, elapsed: float) -> int:
    lim = rate * elapsed * 2.0  # never above INT64_MAX: a delta is reported as int64
    if lim >= 9.2e18:
        return (1 << 63) - 1
    return 1 if lim < 1.0 else int(lim)


def diff(cur, prev, acc, known, widths, kinds, out_idx, out_delta, out_flags, rates=None,
         elapsed: float = 0.0) -> int:
    """See agent/_ext/change.c; same rules, same results."""
    n = len(cur)
    bufs = [("prev", prev), ("acc", acc), ("known", known), ("widths", widths), ("kinds", kinds),
            ("out_idx", out_idx), ("out_delta", out_delta), ("out_flags", out_flags)]
    if rates is not None:
        bufs.append(("rates", rates))
    elapsed = float(elapsed)
    if not 0.0 <= elapsed < 1e9:
        raise ValueError("elapsed must be a number of seconds >= 0")
    default_limit = max(_limit_for(_DEFAULT_RATE, elapsed), _JUMP_64)
    for name, buf in bufs:
        if len(buf) < n:
            raise ValueError(f"{name} is shorter than cur")
    nchanged = 0
    for i in range(n):
        if kinds[i] == 2:  # HIDDEN
            continue
        c = cur[i]
        p = prev[i]
        w = widths[i]
        narrow = 8 <= w < 64 and c >> w == 0 and p >> w == 0  # wider: really 64-bit
        half = 1 << (w - 1) if narrow else 0
        rate = rates[i] if rates is not None else 0
        limit = _limit_for(float(rate), elapsed) if rate else default_limit
        if narrow and limit > half - 1:
            limit = half - 1
        flags = F_CHANGED
        if not known[i]:
            known[i] = 1
            prev[i] = acc[i] = c
            delta = 0
            flags |= F_NEW
        elif c == p:
            continue
        elif kinds[i]:
            delta = c - p
            acc[i] = c
        elif c > p:
            d = c - p
            if d > limit:
                delta = 0
                flags |= F_RESET | F_JUMP
            else:
                delta = d
                acc[i] = (acc[i] + d) & _MASK64
        elif narrow and p - c > half:
            d = c + (half << 1) - p
            if d > limit:
                delta = 0
                flags |= F_RESET | F_JUMP
            else:
                delta = d
                acc[i] = (acc[i] + d) & _MASK64
                flags |= F_WRAP
        else:
            flags |= F_RESET
            if c > limit:
                delta = 0
                flags |= F_JUMP
            else:
                delta = c
            acc[i] = (acc[i] + delta) & _MASK64
        prev[i] = c
        out_idx[nchanged] = i
        out_delta[nchanged] = _to_i64(delta)
        out_flags[nchanged] = flags
        nchanged += 1
    return nchanged


def _to_i64(v: int) -> int:
    v &= _MASK64
    return v - (1 << 64) if v >= 1 << 63 else v
