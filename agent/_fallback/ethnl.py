"""Pure-Python ethtool netlink: the same functions and results as agent/_ext/ethnl.c.

FEC statistics (with Linux 6.18's codeword-error histogram) and the standard statistics
groups, over the generic netlink family "ethtool". The parsers follow the C side's rules
exactly, so both backends agree on any buffer: a bad message header is a ValueError; a
bad attribute length ends that attribute walk; of an attribute read once, the first
usable one wins; one too short for its type is skipped.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence

from agent._fallback import genl
from agent._fallback.genl import NLA_F_NESTED, NLM_F_REQUEST
from agent._fallback.genl import attr as _attr
from agent._fallback.genl import attrs as _attrs
from agent._fallback.genl import find_reply as _find_reply

ETHNL_FEC_GET = 29  # ETHTOOL_MSG_FEC_GET
ETHNL_STATS_GET = 32  # ETHTOOL_MSG_STATS_GET
FEC_GET_REPLY, STATS_GET_REPLY = 30, 33  # ETHTOOL_MSG_*_GET_REPLY

ETHTOOL_GENL_VERSION = 1
A_HEADER_DEV_INDEX, A_HEADER_FLAGS = 1, 3
FLAG_STATS = 1 << 2
A_FEC_HEADER, A_FEC_STATS = 1, 5
A_FEC_STAT_CORRECTED, A_FEC_STAT_CORR_BITS, A_FEC_STAT_HIST = 2, 4, 5
# the bin's nest (Linux 6.18 UAPI): PAD 1, BIN_LOW, BIN_HIGH, BIN_VAL, BIN_VAL_PER_LANE
HIST_BIN_LOW, HIST_BIN_HIGH, HIST_BIN_VAL, HIST_BIN_VAL_PER_LANE = 2, 3, 4, 5
A_STATS_HEADER, A_STATS_GROUPS, A_STATS_GRP = 2, 3, 4
GRP_ID, GRP_SS_ID, GRP_STAT, GRP_HIST_RX, GRP_HIST_TX = 2, 3, 4, 5, 6
GRP_HIST_BKT_LOW, GRP_HIST_BKT_HI, GRP_HIST_VAL = 7, 8, 9
BITSET_NOMASK, BITSET_SIZE, BITSET_VALUE = 1, 2, 4
GROUPS_KNOWN = 4  # eth-phy, eth-mac, eth-ctrl, rmon

_U32 = struct.Struct("=I")
_U64 = struct.Struct("=Q")

FecBin = tuple[int, int, int, list[int]]
FecReply = tuple[int, list[int], list[int], list[int], list[FecBin]]
Bucket = tuple[int, int, int]
Group = tuple[int, int, list[tuple[int, int]], list[Bucket], list[Bucket]]


# ---------------------------------------------------------------- attributes


def _u64s(payload: bytes) -> list[int]:
    n = len(payload) // 8
    return list(struct.unpack_from(f"={n}Q", payload)) if n else []


def _header_ifindex(nest: bytes) -> int:
    for t, p in _attrs(nest):
        if t == A_HEADER_DEV_INDEX and len(p) >= 4:
            return _U32.unpack_from(p)[0]
    return 0


# ---------------------------------------------------------------- family


def ethnl_family_parse(buf) -> int:
    """See agent/_ext/ethnl.c: the family id in a CTRL_CMD_NEWFAMILY reply."""
    return genl.family_id(memoryview(buf).tobytes())


# ---------------------------------------------------------------- requests


def _message(family: int, seq: int, cmd: int, attrs: bytes) -> bytes:
    return genl.message(family, NLM_F_REQUEST, seq, cmd, ETHTOOL_GENL_VERSION, attrs)


def _check_request(family: int, cmd: int, groups: int) -> None:
    genl.check_family(family)
    if cmd not in (ETHNL_FEC_GET, ETHNL_STATS_GET):
        raise ValueError(f"unknown ethtool command {cmd}")
    if cmd == ETHNL_STATS_GET and (groups == 0 or groups >> GROUPS_KNOWN):
        raise ValueError(f"stats groups must be a mask of bits 0-3, got {groups}")


def _request(family: int, cmd: int, seq: int, ifindex: int, groups: int) -> bytes:
    header = _attr(A_HEADER_DEV_INDEX, _U32.pack(ifindex))
    if cmd == ETHNL_FEC_GET:  # FEC statistics only when asked for
        return _message(family, seq, cmd,
                        _attr(A_FEC_HEADER | NLA_F_NESTED, header + _attr(A_HEADER_FLAGS, _U32.pack(FLAG_STATS))))
    bitset = _attr(BITSET_NOMASK, b"") + _attr(BITSET_SIZE, _U32.pack(GROUPS_KNOWN)) + _attr(
        BITSET_VALUE, _U32.pack(groups))  # a compact bitset: these groups, no mask
    return _message(family, seq, cmd,
                    _attr(A_STATS_HEADER | NLA_F_NESTED, header) + _attr(A_STATS_GROUPS | NLA_F_NESTED, bitset))


def ethnl_request(family: int, cmd: int, seq: int, ifindex: int, groups: int) -> bytes:
    """See agent/_ext/ethnl.c: the request ethnl_query sends."""
    _check_request(family, cmd, groups)
    return _request(family, cmd, seq & 0xFFFFFFFF, ifindex & 0xFFFFFFFF, groups)


# ---------------------------------------------------------------- I/O


def ethnl_family(fd: int) -> int:
    """See agent/_ext/ethnl.c: resolve the "ethtool" generic netlink family."""
    return genl.family(fd, b"ethtool")


def ethnl_query(fd: int, family: int, cmd: int, ifindexes: Sequence[int], groups: int) -> list[bytes]:
    """See agent/_ext/ethnl.c: one request per ifindex, the raw reply of each, in order."""
    _check_request(family, cmd, groups)
    wanted = list(ifindexes)
    for ifindex in wanted:
        if not 0 < ifindex <= 0xFFFFFFFF:
            raise ValueError(f"bad ifindex {ifindex}")
    return genl.batch(fd, [_request(family, cmd, genl.next_seq(), i, groups) for i in wanted])


# ---------------------------------------------------------------- FEC


def _fec_bin(nest: bytes) -> FecBin | None:
    low = high = val = lanes = None
    for t, p in _attrs(nest):
        if t == HIST_BIN_LOW and low is None and len(p) >= 4:
            low = _U32.unpack_from(p)[0]
        elif t == HIST_BIN_HIGH and high is None and len(p) >= 4:
            high = _U32.unpack_from(p)[0]
        elif t == HIST_BIN_VAL and val is None and len(p) in (4, 8):
            val = (_U32 if len(p) == 4 else _U64).unpack_from(p)[0]
        elif t == HIST_BIN_VAL_PER_LANE and lanes is None:
            lanes = _u64s(p)
        # anything else (the PAD, a newer attribute) is skipped
    if low is None or high is None:
        return None
    per_lane = lanes or []
    if val is None:  # the kernel's own rule: the value is the lanes' sum
        val = sum(per_lane) & 0xFFFFFFFFFFFFFFFF
    return low, high, val, per_lane


def ethnl_fec_parse(buf) -> FecReply:
    """See agent/_ext/ethnl.c: (ifindex, corrected, uncorrectable, corrected_bits, hist)."""
    attrs = _find_reply(memoryview(buf).tobytes(), FEC_GET_REPLY, "ETHTOOL_MSG_FEC_GET_REPLY")
    ifindex = 0
    arrays: list[list[int] | None] = [None, None, None]
    hist: list[FecBin] = []
    header = stats = False
    for t, p in _attrs(attrs):
        if t == A_FEC_HEADER and not header:
            ifindex, header = _header_ifindex(p), True
        elif t == A_FEC_STATS and not stats:
            stats = True
            for st, sp in _attrs(p):
                if A_FEC_STAT_CORRECTED <= st <= A_FEC_STAT_CORR_BITS:
                    if arrays[st - A_FEC_STAT_CORRECTED] is None:
                        arrays[st - A_FEC_STAT_CORRECTED] = _u64s(sp)
                elif st == A_FEC_STAT_HIST:
                    b = _fec_bin(sp)
                    if b is not None:
                        hist.append(b)
    corrected, uncorr, bits = (a if a is not None else [] for a in arrays)
    return ifindex, corrected, uncorr, bits, hist


# ---------------------------------------------------------------- standard statistics


def _bucket(nest: bytes) -> Bucket | None:
    low = high = val = None
    for t, p in _attrs(nest):
        if t == GRP_HIST_BKT_LOW and low is None and len(p) >= 4:
            low = _U32.unpack_from(p)[0]
        elif t == GRP_HIST_BKT_HI and high is None and len(p) >= 4:
            high = _U32.unpack_from(p)[0]
        elif t == GRP_HIST_VAL and val is None and len(p) >= 8:
            val = _U64.unpack_from(p)[0]
    if low is None or high is None or val is None:
        return None
    return low, high, val


def _group(nest: bytes) -> Group | None:
    gid = ss_id = None
    stats: list[tuple[int, int]] = []
    rx: list[Bucket] = []
    tx: list[Bucket] = []
    for t, p in _attrs(nest):
        if t == GRP_ID and gid is None and len(p) >= 4:
            gid = _U32.unpack_from(p)[0]
        elif t == GRP_SS_ID and ss_id is None and len(p) >= 4:
            ss_id = _U32.unpack_from(p)[0]
        elif t == GRP_STAT:  # one u64 whose attribute type is the statistic
            stats += [(it, _U64.unpack_from(ip)[0]) for it, ip in _attrs(p) if len(ip) >= 8]
        elif t in (GRP_HIST_RX, GRP_HIST_TX):
            b = _bucket(p)
            if b is not None:
                (rx if t == GRP_HIST_RX else tx).append(b)
    if gid is None:
        return None
    return gid, ss_id or 0, stats, rx, tx


def ethnl_stats_parse(buf) -> tuple[int, list[Group]]:
    """See agent/_ext/ethnl.c: (ifindex, groups)."""
    attrs = _find_reply(memoryview(buf).tobytes(), STATS_GET_REPLY, "ETHTOOL_MSG_STATS_GET_REPLY")
    ifindex = 0
    header = False
    groups: list[Group] = []
    for t, p in _attrs(attrs):
        if t == A_STATS_HEADER and not header:
            ifindex, header = _header_ifindex(p), True
        elif t == A_STATS_GRP:
            g = _group(p)
            if g is not None:
                groups.append(g)
    return ifindex, groups
