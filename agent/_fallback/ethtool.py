"""Pure-Python ethtool reader: GDRVINFO, GSTRINGS, GSTATS through fcntl.ioctl, as agent/_ext/ethtool.c."""

from __future__ import annotations

import errno
import fcntl
import os
import struct

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
        name = os.fsdecode(ifname) if isinstance(ifname, bytes) else ifname
        raise OSError(exc.errno, os.strerror(exc.errno), name) from None


def ethtool_drvinfo(fd: int, ifname: str | bytes) -> tuple[str, str, str, str, int]:
    buf = bytearray(_DRVINFO.size)
    struct.pack_into("=I", buf, 0, _ETHTOOL_GDRVINFO)
    _call(fd, ifname, buf)
    f = _DRVINFO.unpack(bytes(buf))

    def text(b: bytes) -> str:
        return b.split(b"\0", 1)[0].decode("latin-1")

    return text(f[1]), text(f[2]), text(f[3]), text(f[4]), f[8]


def _stats_count(fd: int, ifname: str | bytes) -> int:
    buf = bytearray(struct.pack("=IIQI", _ETHTOOL_GSSET_INFO, 0, 1 << _ETH_SS_STATS, 0))
    try:
        _call(fd, ifname, buf)
    except OSError:
        return ethtool_drvinfo(fd, ifname)[4]
    _cmd, _res, mask, length = struct.unpack("=IIQI", bytes(buf))
    return length if mask & (1 << _ETH_SS_STATS) else 0


def ethtool_strings(fd: int, ifname: str | bytes) -> list[str]:
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
