"""ethtool's idle-port plan (``sources.ethtool.idle_interval``) on real veth ports, through
whichever backend is active: a port whose counters stand still is read once per sweep,
its turn spread over the polls; one whose counters move is read every poll again."""

from __future__ import annotations

import json
import sys

import pytest

from tests.namespaces import ROOT, delete_namespace, new_namespace, sh

pytestmark = pytest.mark.root

PORTS = 8  # 4 veth pairs in one namespace
SWEEP = 4

# Runs in the namespace: every poll's status per port, with a value of port MOVED poked
# (so the kernel's value differs from the last one seen) before poll POKE.
_PROBE = """
import array, json, socket, sys
from agent import _backend
r = _backend.reader
sweep, poke, moved = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
names = sorted(n for _, n in socket.if_nameindex() if n != "lo")
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
counts = array.array("I", [len(r.ethtool_strings(s.fileno(), n)) for n in names])
values = array.array("Q", bytes(8 * sum(counts)))
status = array.array("i", bytes(4 * len(names)))
quiet = array.array("I", bytes(4 * len(names)))
ifnames = [n.encode() for n in names]
polls, oks = [], []
for tick in range(1, 41):
    if tick == poke:
        values[sum(counts[:moved]) + 1] += 12345  # as if that counter moved since the last read
    oks.append(r.ethtool_read(s.fileno(), ifnames, counts, values, status, quiet, sweep, tick))
    polls.append(list(status))
full = array.array("Q", bytes(8 * sum(counts)))
r.ethtool_read(s.fileno(), ifnames, counts, full, array.array("i", bytes(4 * len(names))))
print(json.dumps({"backend": _backend.NAME, "polls": polls, "oks": oks, "quiet": list(quiet),
                  "values": list(values), "full": list(full), "n": len(names)}))
"""


@pytest.fixture(scope="module")
def ns():
    name = new_namespace("idle")
    try:
        for i in range(PORTS // 2):
            sh("ip", "link", "add", f"q{i}a", "type", "veth", "peer", "name", f"q{i}b", ns=name)
        yield name
    finally:
        delete_namespace(name)


def _probe(ns: str, sweep: int, poke: int = 0, moved: int = 0) -> dict:
    import os

    env = {k: v for k, v in os.environ.items() if k in ("SWTEL_PUREPYTHON", "PATH")}
    out = sh(sys.executable, "-c", _PROBE, str(sweep), str(poke), str(moved), ns=ns, cwd=ROOT,
             env={"PYTHONPATH": str(ROOT), **env})
    return json.loads(out.stdout)


def _reads(got: dict, port: int) -> list[int]:
    """The polls (1-based) in which ``port`` was read."""
    return [t for t, st in enumerate(got["polls"], 1) if st[port] == 0]


def test_idle_ports_are_read_once_per_sweep_spread_over_the_polls(ns):
    got = _probe(ns, SWEEP)
    assert got["n"] == PORTS
    assert all(ok == PORTS for ok in got["oks"]), "skipped ports count as not failed"
    assert all(st in (0, -2) for poll in got["polls"] for st in poll)
    # A fresh plan reads every port until it has stood still for a sweep ...
    for t in range(SWEEP):
        assert got["polls"][t] == [0] * PORTS
    # ... then each port once per SWEEP polls, at a fixed phase, and never all in one poll.
    for port in range(PORTS):
        later = [t for t in _reads(got, port) if t > 2 * SWEEP]
        assert later, f"port {port} never read after it went quiet"
        assert all(b - a == SWEEP for a, b in zip(later, later[1:], strict=False)), later
    for poll in got["polls"][2 * SWEEP:]:
        assert poll.count(0) == PORTS // SWEEP
    # The values left in place are the kernel's own: nothing moved on these ports.
    assert got["values"] == got["full"]


def test_a_port_that_moves_is_read_every_poll_until_it_stands_still_again(ns):
    poke, moved = 21, 5
    got = _probe(ns, SWEEP, poke=poke, moved=moved)
    reads = _reads(got, moved)
    seen = next(t for t in reads if t >= poke)  # its next turn in the sweep finds the change
    assert seen - poke < SWEEP
    # from there, every poll until SWEEP polls without movement, then back to the sweep
    assert [t for t in reads if seen <= t <= seen + SWEEP] == list(range(seen, seen + SWEEP + 1))
    after = [t for t in reads if t > seen + SWEEP]
    assert after and all(b - a == SWEEP for a, b in zip(after, after[1:], strict=False)), after
    # the kernel's value replaced the poked one
    assert got["values"] == got["full"]


def test_sweep_of_one_reads_every_port_every_poll(ns):
    got = _probe(ns, 1)
    assert all(poll == [0] * PORTS for poll in got["polls"])


def test_quiet_shorter_than_the_ports_is_refused():
    import array

    from agent import _backend

    with pytest.raises(ValueError):
        _backend.reader.ethtool_read(0, [b"x", b"y"], array.array("I", [1, 1]), array.array("Q", [0, 0]),
                                     array.array("i", [0, 0]), array.array("I", [0]), 4, 1)


def test_idle_interval_config_and_sweep():
    from agent.config import ConfigError, parse
    from agent.sources.ethtool import EthtoolSource

    def sweep(text: str) -> int:
        src = EthtoolSource(parse(text))
        try:
            return src.sweep
        finally:
            src.close()

    assert float(parse("interval: 100ms\n").sources.ethtool.idle_interval) == 1.0
    assert sweep("interval: 100ms\n") == 10
    assert sweep("interval: 100ms\nsources: {ethtool: {idle_interval: 0}}\n") == 1
    assert sweep("interval: 2s\n") == 1  # idle_interval not above the interval: every poll
    assert sweep("interval: 10ms\nsources: {ethtool: {idle_interval: 250ms}}\n") == 25
    assert sweep("interval: 10ms\nsources: {ethtool: {interval: 50ms}}\n") == 20  # its own interval
    with pytest.raises(ConfigError, match="sources.ethtool.idle_interval: must be at most 1m"):
        parse("sources: {ethtool: {idle_interval: 2m}}\n")
