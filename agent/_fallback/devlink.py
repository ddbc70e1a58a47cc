"""Pure-Python devlink: the same functions and results as agent/_ext/devlink.c.

Shared-buffer occupancy and packet-trap statistics over the generic netlink family
"devlink". The parsers follow the C side's rules exactly, so both backends agree on any
buffer: a bad message header is a ValueError; a bad attribute length ends that message's
(or that nest's) attribute walk; of each attribute the first usable one wins; one too
short for its type is skipped.
"""

from __future__ import annotations

import errno
import os
import struct
from collections.abc import Sequence

from agent._fallback import genl
from agent._fallback.genl import NLMSG as _NLMSG
from agent._fallback.genl import NLMSG_DONE, NLMSG_ERROR
from agent._fallback.genl import align4 as _align4
from agent._fallback.genl import attr as _attr
from agent._fallback.genl import attrs as _attrs
from agent._fallback.genl import messages as _messages

# DEVLINK_CMD_* (UAPI linux/devlink.h)
DEVLINK_PORT_GET = 5
DEVLINK_SB_GET = 11
DEVLINK_SB_PORT_POOL_GET = 19
DEVLINK_SB_TC_POOL_BIND_GET = 23
DEVLINK_SB_OCC_SNAPSHOT = 27
DEVLINK_SB_OCC_MAX_CLEAR = 28
DEVLINK_TRAP_GET = 61
DEVLINK_TRAP_GROUP_GET = 65
_DUMPS = (DEVLINK_PORT_GET, DEVLINK_SB_GET, DEVLINK_SB_PORT_POOL_GET, DEVLINK_SB_TC_POOL_BIND_GET,
          DEVLINK_TRAP_GET, DEVLINK_TRAP_GROUP_GET)
_SB_REQUESTS = (DEVLINK_SB_OCC_SNAPSHOT, DEVLINK_SB_OCC_MAX_CLEAR)

DEVLINK_GENL_VERSION = 1
NLM_F_REQUEST, NLM_F_ACK, NLM_F_DUMP = 0x1, 0x4, 0x300
A_BUS_NAME, A_DEV_NAME, A_SB_INDEX = 1, 2, 11
DUMP_MAX = 64 << 20
NAME_MAX_LEN = 64

#: attribute -> (tuple slot, bytes it needs; 0: a string): DEVLINK_ATTR_BUS_NAME, _DEV_NAME,
#: _PORT_INDEX, _SB_INDEX, _SB_POOL_INDEX (u16), _SB_TC_INDEX (u16), _SB_POOL_TYPE (u8),
#: _SB_OCC_CUR, _SB_OCC_MAX (u32), _PORT_NETDEV_NAME
_FIELDS = {1: (1, 0), 2: (2, 0), 3: (3, 4), 11: (4, 4), 17: (5, 2), 22: (6, 2), 18: (7, 1),
           23: (8, 4), 24: (9, 4), 7: (10, 0)}
#: devlink_trap_parse's: DEVLINK_ATTR_BUS_NAME, _DEV_NAME, _TRAP_GROUP_NAME, _TRAP_NAME,
#: _TRAP_TYPE (u8), _TRAP_ACTION (u8), _TRAP_POLICER_ID (u32); _TRAP_GENERIC (a flag) and the
#: DEVLINK_ATTR_STATS nest are taken apart
_TRAP_FIELDS = {1: (1, 0), 2: (2, 0), 135: (3, 0), 130: (4, 0), 132: (5, 1), 131: (6, 1), 142: (8, 4)}
#: inside DEVLINK_ATTR_STATS (its own attribute space): _STATS_RX_PACKETS, _RX_BYTES, _RX_DROPPED (u64)
_STATS_FIELDS = {0: (9, 8), 1: (10, 8), 2: (11, 8)}
A_STATS, A_TRAP_GENERIC, TRAP_GENERIC_SLOT = 129, 133, 7
_UNPACK = {1: struct.Struct("=B"), 2: struct.Struct("=H"), 4: struct.Struct("=I"), 8: struct.Struct("=Q")}

Handle = tuple[str, str, int]
Message = tuple  # (cmd, bus, dev, port, sb, pool, tc, pool_type, occ_cur, occ_max, netdev)
#: (cmd, bus, dev, group, trap, type, action, generic, policer_id, rx_packets, rx_bytes, rx_dropped)
TrapMessage = tuple


# ---------------------------------------------------------------- parsing


def _fill(out: list, attrs: bytes, fields: dict[int, tuple[int, int]]) -> None:
    """The empty slots of ``out`` that ``attrs`` give (the first usable attribute wins)."""
    for t, p in _attrs(attrs):
        field = fields.get(t)
        if field is None:
            continue
        slot, size = field
        if out[slot] is not None or len(p) < size:
            continue
        if size == 0:  # a string up to its NUL, decoded as interface names are
            out[slot] = os.fsdecode(p.split(b"\0", 1)[0])
        else:
            out[slot] = _UNPACK[size].unpack_from(p)[0]


def _message(cmd: int, attrs: bytes) -> Message:
    out: list = [cmd] + [None] * 10
    _fill(out, attrs, _FIELDS)
    return tuple(out)


def _trap_message(cmd: int, attrs: bytes) -> TrapMessage:
    out: list = [cmd] + [None] * 11
    _fill(out, attrs, _TRAP_FIELDS)
    for t, p in _attrs(attrs):
        if t == A_TRAP_GENERIC:
            out[TRAP_GENERIC_SLOT] = True
        elif t == A_STATS:  # every nest walked, the first usable value of each winning
            _fill(out, p, _STATS_FIELDS)
    if out[TRAP_GENERIC_SLOT] is None:
        out[TRAP_GENERIC_SLOT] = False
    return tuple(out)


def devlink_trap_parse(buf) -> list[TrapMessage]:
    """See agent/_ext/devlink.c: every devlink trap (or trap group) message in ``buf``."""
    return [_trap_message(cmd, body) for cmd, body in _messages(memoryview(buf).tobytes())]


def devlink_parse(buf) -> list[Message]:
    """See agent/_ext/devlink.c: every devlink message in ``buf`` as a tuple."""
    return [_message(cmd, body) for cmd, body in _messages(memoryview(buf).tobytes())]


# ---------------------------------------------------------------- requests


def _check_request(family: int, cmd: int, dump: bool) -> None:
    genl.check_family(family)
    if cmd not in (_DUMPS if dump else _SB_REQUESTS):
        kind = "dump" if dump else "shared-buffer request"
        raise ValueError(f"devlink command {cmd} is not a {kind} this module sends")


def _name(value: str) -> bytes:
    raw = value.encode()
    if not 0 < len(raw) <= NAME_MAX_LEN or b"\0" in raw:
        raise ValueError("devlink bus and device names: 1-64 bytes, no NUL")
    return raw


def _handle(obj) -> tuple[bytes, bytes, int]:
    if not isinstance(obj, tuple) or len(obj) != 3:
        raise TypeError("a handle is (bus, dev, sb_index)")
    bus, dev, sb = obj
    if not isinstance(bus, str) or not isinstance(dev, str) or not isinstance(sb, int):
        raise TypeError("a handle is (bus, dev, sb_index)")
    if not 0 <= sb <= 0xFFFFFFFF:
        raise OverflowError("sb_index out of range")
    return _name(bus), _name(dev), sb


def _request(family: int, cmd: int, seq: int, handle: tuple[bytes, bytes, int] | None) -> bytes:
    attrs, flags = b"", NLM_F_REQUEST | NLM_F_DUMP
    if handle is not None:
        bus, dev, sb = handle
        attrs = (_attr(A_BUS_NAME, bus + b"\0") + _attr(A_DEV_NAME, dev + b"\0")
                 + _attr(A_SB_INDEX, struct.pack("=I", sb)))
        flags = NLM_F_REQUEST | NLM_F_ACK
    return genl.message(family, flags, seq, cmd, DEVLINK_GENL_VERSION, attrs)


def devlink_request(family: int, cmd: int, seq: int, handle: Handle | None) -> bytes:
    """See agent/_ext/devlink.c: the request devlink_dump or devlink_exec sends."""
    _check_request(family, cmd, handle is None)
    return _request(family, cmd, seq & 0xFFFFFFFF, None if handle is None else _handle(handle))


# ---------------------------------------------------------------- I/O


def _ends_reply(data: bytes) -> bool:
    """The datagram holds NLMSG_DONE or NLMSG_ERROR, or cannot be walked."""
    off, size = 0, len(data)
    while off < size:
        if size - off < _NLMSG.size:
            return True
        length, mtype = struct.unpack_from("=IH", data, off)
        if length < _NLMSG.size or length > size - off or mtype in (NLMSG_DONE, NLMSG_ERROR):
            return True
        off += _align4(length)
    return size == 0


def devlink_dump(fd: int, family: int, cmd: int) -> bytes:
    """See agent/_ext/devlink.c: every datagram of a dump's answer, concatenated."""
    _check_request(family, cmd, True)
    sock = genl.borrow(fd)
    try:
        seq = genl.next_seq()
        sock.send(_request(family, cmd, seq, None))
        parts: list[bytes] = []
        used = 0
        while True:
            data = genl.receive(sock, seq)
            used += len(data)
            if used > DUMP_MAX:
                raise OSError(errno.EMSGSIZE, os.strerror(errno.EMSGSIZE))
            parts.append(data)
            if _ends_reply(data):
                return b"".join(parts)
    finally:
        sock.detach()


def devlink_exec(fd: int, family: int, cmd: int, handles: Sequence[Handle]) -> list[bytes]:
    """See agent/_ext/devlink.c: ``cmd`` on each shared buffer, the raw answer of each."""
    _check_request(family, cmd, False)
    wanted = [_handle(h) for h in handles]
    return genl.batch(fd, [_request(family, cmd, genl.next_seq(), h) for h in wanted])


def devlink_family(fd: int) -> int:
    """See agent/_ext/devlink.c: resolve the "devlink" generic netlink family."""
    return genl.family(fd, b"devlink")
