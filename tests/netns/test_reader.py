"""The reader against the real kernel, through whichever backend is active."""

from __future__ import annotations

import json
import sys

import pytest

from tests.namespaces import ROOT, sh, veth_pair

pytestmark = pytest.mark.root

_PROBE = """
import array, json, socket, sys
from agent import _backend
r = _backend.reader
ifname = sys.argv[1]
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
names = r.ethtool_strings(s.fileno(), ifname)
counts = array.array("I", [len(names)])
values = array.array("Q", bytes(8 * len(names)))
status = array.array("i", [99])
ok = r.ethtool_read(s.fileno(), [ifname.encode()], counts, values, status)
nl = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, socket.NETLINK_ROUTE)
nl.bind((0, 0))
idx = array.array("i", [socket.if_nametoindex(ifname)])
stats = array.array("Q", bytes(8 * r.NETDEV_FIELDS))
seen = bytearray(1)
found = r.netdev_read(nl.fileno(), idx, stats, seen)
print(json.dumps({"backend": _backend.NAME, "driver": r.ethtool_drvinfo(s.fileno(), ifname)[0],
                  "names": names, "values": list(values), "ok": ok, "status": list(status),
                  "found": found, "seen": seen[0], "netdev": list(stats)}))
"""


def _probe(ns: str, ifname: str) -> dict:
    out = sh(sys.executable, "-c", _PROBE, ifname, ns=ns, cwd=ROOT, env={"PYTHONPATH": str(ROOT), **_env()})
    return json.loads(out.stdout)


def _env() -> dict:
    import os

    return {k: v for k, v in os.environ.items() if k in ("SWTEL_PUREPYTHON", "PATH")}


def _ethtool_s(ns: str, ifname: str) -> list[tuple[str, int]]:
    lines = sh("ethtool", "-S", ifname, ns=ns).stdout.splitlines()[1:]  # first line: "NIC statistics:"
    pairs = []
    for line in lines:
        name, _, value = line.strip().rpartition(":")
        pairs.append((name.strip(), int(value)))
    return pairs


def test_ethtool_names_and_peer_ifindex_match_the_kernel():
    with veth_pair() as pair:
        got = _probe(pair.b, pair.b_if)
        assert got["driver"] == "veth"
        assert got["ok"] == 1 and got["status"] == [0]
        expected = _ethtool_s(pair.b, pair.b_if)
        assert got["names"] == [name for name, _ in expected]
        values = dict(zip(got["names"], got["values"], strict=True))
        assert values["peer_ifindex"] == pair.ifindex("a")


def test_netdev_dump_counts_exact_traffic():
    with veth_pair() as pair:
        before = _probe(pair.b, pair.b_if)
        pair.send_udp(77, 200)
        after = _probe(pair.b, pair.b_if)
        assert before["found"] == after["found"] == 1 and after["seen"] == 1
        rx_packets, rx_bytes = 0, 2  # struct rtnl_link_stats64 order
        assert after["netdev"][rx_packets] - before["netdev"][rx_packets] == 77
        assert after["netdev"][rx_bytes] - before["netdev"][rx_bytes] == 77 * (200 + 42)


def test_missing_link_is_reported_not_invented():
    with veth_pair() as pair:
        code = (
            "import array, socket\nfrom agent import _backend\nr = _backend.reader\n"
            "nl = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, socket.NETLINK_ROUTE); nl.bind((0, 0))\n"
            "idx = array.array('i', [socket.if_nametoindex('lo'), 999999])\n"
            "out = array.array('Q', [7] * (2 * r.NETDEV_FIELDS)); seen = bytearray(2)\n"
            "print(r.netdev_read(nl.fileno(), idx, out, seen), list(seen), out[r.NETDEV_FIELDS])\n"
        )
        res = sh(sys.executable, "-c", code, ns=pair.b, cwd=ROOT, env={"PYTHONPATH": str(ROOT), **_env()})
        assert res.stdout.split() == ["1", "[1,", "0]", "7"]  # the unknown ifindex keeps its old value
