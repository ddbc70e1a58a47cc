"""Pure-Python ``link_parse``: the same results as agent/_ext/links.c, decoded by pyroute2.

pyroute2's rtnetlink marshal decodes the link messages. It trusts the lengths it is
given (a short attribute is read past its end, an unknown operstate raises), so the
framing and the attribute chains are checked here first, with the C parser's bounds,
and pyroute2 decodes a canonical copy of each link message: its header and ifinfomsg
plus the attributes the agent reads, each well-formed. Both backends therefore agree
on any buffer, hostile or not.

Importing pyroute2 costs about 10 MiB of RSS on top of the rest of the agent (its
package ``__init__`` loads NDB, IPDB and every netlink family), so only this fallback
imports it; the C backend never does (agent/links.py).
"""

from __future__ import annotations

import errno
import os
import struct
from collections.abc import Iterator
from typing import Any

# (msg_type, ifindex, ifi_flags, name, operstate, kind, carrier_changes)
LinkTuple = tuple[int, int, int, str, int, str, int]

NLMSG_ERROR, NLMSG_DONE = 2, 3
RTM_NEWLINK, RTM_DELLINK = 16, 17
IFLA_IFNAME, IFLA_OPERSTATE, IFLA_LINKINFO, IFLA_CARRIER_CHANGES = 3, 16, 18, 35
IFLA_INFO_KIND = 1
NLA_TYPE_MASK = 0x3FFF  # the type without NLA_F_NESTED / NLA_F_NET_BYTEORDER
AF_UNSPEC = 0

# IFLA_OPERSTATE values (RFC 2863), in kernel order: pyroute2 decodes them to these names.
OPER_NAMES = ("UNKNOWN", "NOTPRESENT", "DOWN", "LOWERLAYERDOWN", "TESTING", "DORMANT", "UP")

_NLMSG = struct.Struct("=IHHII")  # len, type, flags, seq, pid
_IFINFO_LEN = 16  # struct ifinfomsg: family, pad, type, index, flags, change
_RTA = struct.Struct("=HH")  # len, type
_ERRNO = struct.Struct("=i")


def _align4(n: int) -> int:
    return (n + 3) & ~3


def _messages(data: bytes) -> Iterator[tuple[int, int, int]]:
    """(type, offset, length) of each message; ValueError where the next cannot be found."""
    off, size = 0, len(data)
    while off < size:
        if size - off < _NLMSG.size:
            raise ValueError("truncated netlink message header")
        length, mtype = struct.unpack_from("=IH", data, off)
        if length < _NLMSG.size or length > size - off:
            raise ValueError(
                f"netlink message length {length} at offset {off}: {size - off} bytes left"
            )
        yield mtype, off, length
        off += min(_align4(length), size - off)  # the last message's padding may be missing


def _attrs(data: bytes, start: int, end: int) -> Iterator[tuple[int, bytes]]:
    """(type, payload) of each attribute in data[start:end], up to the first bad length
    (nothing after it can be located)."""
    pos = start
    while end - pos >= _RTA.size:
        rta_len, rta_type = _RTA.unpack_from(data, pos)
        if rta_len < _RTA.size or rta_len > end - pos:
            return
        yield rta_type & NLA_TYPE_MASK, data[pos + _RTA.size : pos + rta_len]
        pos += _align4(rta_len)


def _attr(rta_type: int, payload: bytes) -> bytes:
    raw = _RTA.pack(_RTA.size + len(payload), rta_type) + payload
    return raw + bytes(-len(raw) % 4)


def _cstring(payload: bytes) -> bytes:
    """A string attribute's bytes up to its first NUL, NUL-terminated again."""
    return payload.split(b"\0", 1)[0] + b"\0"


def _canonical(data: bytes, off: int, length: int) -> tuple[bytes, bytes]:
    """The link message at off rebuilt with only the first usable IFLA_IFNAME,
    IFLA_OPERSTATE, IFLA_LINKINFO (holding only its IFLA_INFO_KIND) and
    IFLA_CARRIER_CHANGES, so pyroute2 decodes nothing it could misread; and the name's
    own bytes (pyroute2 versions differ on a name that is not UTF-8: some replace bytes)."""
    body_start = off + _NLMSG.size + _IFINFO_LEN
    kept: dict[int, bytes] = {}
    for rta_type, payload in _attrs(data, body_start, off + length):
        if rta_type in kept:
            continue
        if rta_type == IFLA_IFNAME:
            kept[rta_type] = _attr(rta_type, _cstring(payload))
        elif rta_type == IFLA_OPERSTATE and payload:
            state = payload[0] if payload[0] < len(OPER_NAMES) else 0  # RFC 2863 has no more
            kept[rta_type] = _attr(rta_type, bytes([state]))
        elif rta_type == IFLA_LINKINFO:
            kinds = (p for t, p in _attrs(payload, 0, len(payload)) if t == IFLA_INFO_KIND)
            kind = next(kinds, None)
            nest = _attr(IFLA_INFO_KIND, _cstring(kind)) if kind is not None else b""
            kept[rta_type] = _attr(rta_type, nest)
        elif rta_type == IFLA_CARRIER_CHANGES and len(payload) >= 4:
            kept[rta_type] = _attr(rta_type, payload[:4])
    body = data[off + _NLMSG.size : body_start] + b"".join(kept.values())
    header = bytearray(data[off : off + _NLMSG.size])
    struct.pack_into("=I", header, 0, _NLMSG.size + len(body))
    name = kept.get(IFLA_IFNAME, b"")[_RTA.size:].split(b"\0", 1)[0]
    return bytes(header) + body, name


def _text(value: str | bytes | None) -> str:
    """pyroute2 leaves a string that is not UTF-8 as bytes; decode it as the C side does."""
    if value is None:
        return ""
    return os.fsdecode(value) if isinstance(value, bytes) else value


def _operstate(value: str | int | None) -> int:
    """pyroute2 decodes IFLA_OPERSTATE to its RFC 2863 name; some versions give the number."""
    if isinstance(value, int):
        return value if 0 <= value < len(OPER_NAMES) else 0
    return OPER_NAMES.index(value) if value in OPER_NAMES else 0


def _decode_link(marshal: Any, canonical: bytes, name: bytes) -> LinkTuple:
    msgs = list(marshal.parse(canonical))
    if len(msgs) != 1 or msgs[0]["header"].get("error") is not None:
        raise RuntimeError(f"pyroute2 did not decode a well-formed link message: {msgs!r}")
    msg = msgs[0]
    info = msg.get_attr("IFLA_LINKINFO")
    return (
        msg["header"]["type"],
        msg["index"],
        msg["flags"],
        os.fsdecode(name),  # as the C parser decodes it: the bytes come back with os.fsencode
        _operstate(msg.get_attr("IFLA_OPERSTATE")),
        _text(info.get_attr("IFLA_INFO_KIND")) if info is not None else "",
        msg.get_attr("IFLA_CARRIER_CHANGES") or 0,
    )


def link_parse(buf) -> tuple[list[LinkTuple], bool]:
    """See agent/_ext/links.c: (links, done) for one recv() result of a NETLINK_ROUTE socket."""
    data = memoryview(buf).tobytes()
    # imported on first use: the fallback package stays light for whoever needs only part
    # of it (the ASIC plugin's helper process)
    from pyroute2.netlink.rtnl.marshal import MarshalRtnl

    marshal = MarshalRtnl()
    links: list[LinkTuple] = []
    done = False
    for mtype, off, length in _messages(data):
        if mtype in (NLMSG_ERROR, NLMSG_DONE):
            if mtype == NLMSG_ERROR and length < _NLMSG.size + _ERRNO.size:
                raise ValueError("NLMSG_ERROR too short for its error code")
            has_error = length >= _NLMSG.size + _ERRNO.size
            error = _ERRNO.unpack_from(data, off + _NLMSG.size)[0] if has_error else 0
            if error != 0:  # 0: an ACK, or a dump that ended well
                code = -error if -(2**31) < error < 0 else errno.EIO
                raise OSError(code, os.strerror(code))
            done = done or mtype == NLMSG_DONE
            continue
        if mtype not in (RTM_NEWLINK, RTM_DELLINK):
            continue
        if length < _NLMSG.size + _IFINFO_LEN:
            raise ValueError("link message too short for its ifinfomsg")
        # The bridge sends its ports' state on the same group as AF_BRIDGE link messages
        # (RTM_DELLINK there means "left the bridge", not "gone").
        if data[off + _NLMSG.size] != AF_UNSPEC:
            continue
        links.append(_decode_link(marshal, *_canonical(data, off, length)))
    return links, done
