"""The engine's port ledger (agent/ports.py): an interface's subtree is deleted once, when the
last source holding it drops it; containers of an interface another source still reads go
one by one."""

from __future__ import annotations

import pytest

from agent.counters import OPENCONFIG, SWTEL_ORIGIN, Container, CounterSpec, CounterTable
from agent.ports import PortLedger, deletes, ports_of

pytestmark = pytest.mark.nolibs  # no versioned library decides its outcome: not in the Debian pass


def counters(port: str, origin: str = OPENCONFIG) -> Container:
    return Container(origin, f"/interfaces/interface[name={port}]/state/counters")


def table(source: str, ports: list[str], rdma: bool = False) -> CounterTable:
    specs = [CounterSpec(counters(p), "in-octets", port=p) for p in ports]
    if rdma:  # an RDMA device port: a port name, but not an interface
        specs.append(CounterSpec(Container(SWTEL_ORIGIN, "/rdma/devices/device[name=mlx5_0]/ports/port[id=1]"
                                                          "/hw-counters"), "out-of-sequence", port="mlx5_0/1"))
    specs.append(CounterSpec(Container(SWTEL_ORIGIN, "/system/state"), "cpu"))  # no port at all
    return CounterTable(source, specs)


def test_ports_of_is_the_interfaces_a_table_has_data_for():
    assert ports_of(table("netdev", ["swp1", "swp2"], rdma=True)) == {"swp1", "swp2"}
    assert ports_of(table("netdev", [])) == set()


def test_a_port_vanishes_when_its_last_holder_releases_it():
    ledger = PortLedger()
    ledger.hold("netdev", table("netdev", ["swp1", "swp2"]))
    ledger.hold("asic", table("asic", ["swp2", "swp3"]))
    assert ledger.holders("swp2") == {"netdev", "asic"}
    assert len(ledger) == 3 and "swp1" in ledger
    assert ledger.release("netdev", {"swp1", "swp2"}) == {"swp1"}  # swp2: the asic still holds it
    assert "swp1" not in ledger and ledger.holders("swp1") == frozenset()
    assert ledger.release("netdev", {"swp2"}) == set()  # released twice: nothing more
    assert ledger.release("asic", {"swp2", "swp3", "swp9"}) == {"swp2", "swp3"}  # swp9: never held
    assert len(ledger) == 0


def test_holding_again_after_a_release():
    ledger = PortLedger()
    ledger.hold("netdev", table("netdev", ["swp1"]))
    assert ledger.release("netdev", ["swp1"]) == {"swp1"}
    ledger.hold("netdev", table("netdev", ["swp1"]))
    assert ledger.holders("swp1") == {"netdev"}


def test_deletes_are_whole_subtrees_then_the_containers_left():
    ethtool = Container(OPENCONFIG, "/interfaces/interface[name=swp1]/ethernet/state/counters")
    kept = Container(SWTEL_ORIGIN, "/interfaces/interface[name=swp2]/ethtool/state")
    health = Container(SWTEL_ORIGIN, "/agent/sources/source[name=ethtool]")
    out = deletes({"swp3", "swp1"}, {ethtool, kept, health, counters("swp3", SWTEL_ORIGIN)})
    assert out == [
        Container(OPENCONFIG, "/interfaces/interface[name=swp1]"),
        Container(SWTEL_ORIGIN, "/interfaces/interface[name=swp1]"),
        Container(OPENCONFIG, "/interfaces/interface[name=swp3]"),
        Container(SWTEL_ORIGIN, "/interfaces/interface[name=swp3]"),
        health,  # sorted by (origin, path), the ones under a vanished interface left out
        kept,
    ]
    assert deletes(set(), set()) == []


def test_a_vanished_name_is_escaped_and_matches_no_longer_name():
    odd = "a]b"
    out = deletes({odd, "swp1"}, {counters("swp10")})
    assert Container(OPENCONFIG, r"/interfaces/interface[name=a\]b]") in out
    assert out[-1] == counters("swp10")  # swp1's subtree does not cover swp10's
