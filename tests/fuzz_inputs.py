"""Fuzz inputs for the netlink and ethtool parsers: one byte string picks a parser and its
arguments, and both backends run it (the C extension and agent/_fallback.py must agree).

Shared by tests/unit/test_fuzz.py (hypothesis, both backends) and fuzz/fuzz_parsers.py
(atheris, coverage-guided, on an instrumented build of the C extension).

Input layout: ``data[0] % 4`` picks the parser.

* 0, ``netdev_parse``: ``data[1]`` low nibble = number of wanted ifindexes (at most 8),
  bits 4-5 = the dump's sequence number; then one byte per ifindex (``b % 40 - 2``, so
  random messages often name a wanted link); the rest is the netlink buffer.
* 1, ``ethtool_parse``: ``data[1] % 5`` ports, then two bytes per port (its expected
  count ``% 65``, its reply's length ``* 4``); the rest, cut in order, are the replies.
* 2, ``ethtool_strings_parse``: ``data[1:]`` is the GSTRINGS reply.
* 3, ``link_parse``: ``data[1:]`` is a datagram of rtnetlink link messages.
"""

from __future__ import annotations

import struct
from array import array
from typing import Any

NETDEV_FIELDS = 25
RTM_NEWSTATS, NLMSG_ERROR, NLMSG_DONE = 92, 2, 3
RTM_NEWLINK, RTM_DELLINK = 16, 17
IFLA_IFNAME, IFLA_OPERSTATE, IFLA_LINKINFO, IFLA_CARRIER_CHANGES, IFLA_INFO_KIND = 3, 16, 18, 35, 1


def run(impl: Any, data: bytes) -> tuple:
    """Run the parser ``data`` picks on ``impl`` (a backend's reader module); the outcome as
    a comparable tuple (the result or the exception, and every output buffer)."""
    if len(data) < 2:
        return ("short",)
    kind = data[0] % 4
    if kind == 0:
        n = min(data[1] & 0x0F, 8)
        seq = (data[1] >> 4) & 3
        ifindexes = array("i", sorted({b % 40 - 2 for b in data[2:2 + n]}))
        buf = data[2 + n:]
        out = array("Q", bytes(8 * NETDEV_FIELDS * len(ifindexes)))
        seen = bytearray(len(ifindexes))
        try:
            result: Any = impl.netdev_parse(buf, ifindexes, out, seen, seq)
        except OSError as exc:
            result = ("OSError", exc.errno)
        return ("netdev", result, out.tolist(), bytes(seen))
    if kind == 1:
        nports = data[1] % 5
        spec = data[2:2 + 2 * nports]
        nports = len(spec) // 2
        counts = array("I", [spec[2 * i] % 65 for i in range(nports)])
        rest, replies = data[2 + 2 * nports:], []
        for i in range(nports):
            length = spec[2 * i + 1] * 4
            replies.append(bytes(rest[:length]))
            rest = rest[length:]
        out = array("Q", bytes(8 * sum(counts)))
        status = array("i", bytes(4 * nports))
        result = impl.ethtool_parse(replies, counts, out, status)
        return ("ethtool", result, out.tolist(), status.tolist())
    if kind == 3:
        try:
            return ("links", impl.link_parse(data[1:]))
        except OSError as exc:
            return ("links", "OSError", exc.errno)
        except ValueError:
            return ("links", "ValueError")
    return ("strings", impl.ethtool_strings_parse(data[1:]))


# ---------------------------------------------------------------- well-formed seeds


def nlmsg(mtype: int, seq: int, payload: bytes) -> bytes:
    msg = struct.pack("=IHHII", 16 + len(payload), mtype, 2, seq, 0) + payload
    return msg + bytes(-len(msg) % 4)


def stats_msg(ifindex: int, seq: int, values: list[int], extra_attrs: bytes = b"") -> bytes:
    body = b"".join(struct.pack("=Q", v) for v in values)
    attr = struct.pack("=HH", 4 + len(body), 1) + body
    return nlmsg(RTM_NEWSTATS, seq, struct.pack("=BBHiI", 0, 0, 0, ifindex, 1) + extra_attrs + attr)


def rta(kind: int, payload: bytes) -> bytes:
    attr = struct.pack("=HH", 4 + len(payload), kind) + payload
    return attr + bytes(-len(attr) % 4)


def link_msg(mtype: int, ifindex: int, name: bytes, kind: bytes = b"veth", oper: int = 6) -> bytes:
    attrs = (rta(IFLA_IFNAME, name + b"\0") + rta(IFLA_OPERSTATE, bytes([oper]))
             + rta(IFLA_LINKINFO, rta(IFLA_INFO_KIND, kind + b"\0")) + rta(IFLA_CARRIER_CHANGES, struct.pack("=I", 4)))
    return nlmsg(mtype, 1, struct.pack("=BxHiII", 0, 1, ifindex, 0x1043, 0) + attrs)


def seeds() -> list[bytes]:
    """A few well-formed inputs for each parser: the fuzzer's starting corpus."""
    out = []
    dump = (stats_msg(3, 1, list(range(100, 125))) + stats_msg(5, 1, [7] * 25)
            + stats_msg(9, 0, [1] * 25) + nlmsg(NLMSG_DONE, 1, b"\0\0\0\0"))
    out.append(bytes([0, 0x13, 5, 7, 11]) + dump)  # seq 1, wanted 3, 5, 9
    out.append(bytes([0, 0x12, 5, 7]) + stats_msg(3, 1, [1, 2, 3]) + nlmsg(NLMSG_ERROR, 1, struct.pack("=i", -16)))
    out.append(bytes([0, 0x11, 5]) + stats_msg(3, 1, list(range(30)), struct.pack("=HH", 8, 7) + bytes(4)))
    ports = [(4, b"\x1d\0\0\0" + struct.pack("=I", 4) + struct.pack("=4Q", 1, 2, 3, 4)),
             (2, b"\x1d\0\0\0" + struct.pack("=I", 3) + struct.pack("=3Q", 1, 2, 3))]
    spec = b"".join(bytes([c, len(r) // 4]) for c, r in ports)
    out.append(bytes([1, len(ports)]) + spec + b"".join(r for _, r in ports))
    names = [b"rx_packets", b"tx_packets", b"rx_pfc_pause_prio_3", b"x" * 32]
    table = struct.pack("=III", 0x1B, 1, len(names)) + b"".join(n.ljust(32, b"\0")[:32] for n in names)
    out.append(bytes([2]) + table)
    out.append(bytes([3]) + link_msg(RTM_NEWLINK, 3, b"swp1") + link_msg(RTM_DELLINK, 4, b"swp2s1", b"")
               + nlmsg(NLMSG_DONE, 1, b"\0\0\0\0"))
    out.append(bytes([3]) + link_msg(RTM_NEWLINK, 5, b"eth0", b"bond", 2)
               + nlmsg(NLMSG_ERROR, 1, struct.pack("=i", -1)))
    return out
