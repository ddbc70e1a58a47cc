"""ethtool netlink on the running kernel: veth has no FEC and no standard statistics, and the
agent says so, healthy (needs root)."""

from __future__ import annotations

import errno
import socket
import struct

from agent import _backend, _fallback
from tests.namespaces import delete_namespace, in_namespace, new_namespace, polled_alone, sh
from tests.unit.test_ethnl import FEC, STATS, outcome, root


def _veth_namespace() -> str:
    ns = new_namespace("e")
    sh("ip", "link", "add", "ve0", "type", "veth", "peer", "name", "ve1", ns=ns)
    for name in ("ve0", "ve1"):
        sh("ip", "link", "set", name, "up", ns=ns)
    return ns


@root
def test_veth_has_no_fec_and_no_standard_statistics_on_the_real_kernel():
    ns = _veth_namespace()
    try:
        def ask(impl):
            sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 16)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, struct.pack("ll", 1, 0))
            try:
                family = impl.ethnl_family(sock.fileno())
                index = socket.if_nametoindex("ve0")
                fec = impl.ethnl_query(sock.fileno(), family, FEC, [index], 0)
                stats = impl.ethnl_query(sock.fileno(), family, STATS, [index], 0xF)
                return family, index, fec, stats
            finally:
                sock.close()

        family, index, (fec,), (stats,) = in_namespace(ns, lambda: ask(_backend.reader))
        assert family >= 0x10
        assert outcome(_backend.reader.ethnl_fec_parse, fec) == ("OSError", errno.EOPNOTSUPP)
        assert _backend.reader.ethnl_stats_parse(stats) == (index, [(g, 17 + g, [], [], []) for g in range(4)])
        # the other backend's I/O gets the same answers
        other = _fallback if _backend.reader is not _fallback else None
        if other is not None:
            family2, _i, (fec2,), (stats2,) = in_namespace(ns, lambda: ask(other))
            assert family2 == family
            assert outcome(other.ethnl_fec_parse, fec2) == ("OSError", errno.EOPNOTSUPP)
            assert other.ethnl_stats_parse(stats2) == _backend.reader.ethnl_stats_parse(stats)
    finally:
        delete_namespace(ns)


@root
def test_agent_shows_veth_unsupported_with_health_ok():
    ns = _veth_namespace()
    try:
        status, problems = polled_alone(ns, "ethnl")
        assert status["unsupported"] == {"ve0": ["fec", "stats"], "ve1": ["fec", "stats"]}
        assert status["errors"] == 0 and status["fault"] is None and status["counters"] == 0
        assert problems == []
    finally:
        delete_namespace(ns)
