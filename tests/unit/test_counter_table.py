"""A CounterTable keeps its counters as columns (agent/counters.py; issue 35, memory a value):
three u32 indices into its distinct containers, leaves and ports, and a width and a kind byte.
``specs`` reads as the list of CounterSpec it was built from."""

from __future__ import annotations

import pytest

from agent import counters as counters_module
from agent.counters import (
    COUNTER,
    GAUGE,
    HIDDEN,
    OPENCONFIG,
    SWTEL_ORIGIN,
    Container,
    CounterSpec,
    CounterTable,
    TableBuilder,
)
from agent.ports import relabel

pytestmark = pytest.mark.nolibs  # no versioned library decides its outcome: not in the Debian pass


def _specs() -> list[CounterSpec]:
    out = []
    for port in ("swp1", "swp2"):
        state = Container(OPENCONFIG, f"/interfaces/interface[name={port}]/state/counters")
        phy = Container(OPENCONFIG, f"/interfaces/interface[name={port}]/phy/state")
        out += [CounterSpec(state, "in-octets", 64, COUNTER, port), CounterSpec(state, "out-octets", 32, COUNTER, port),
                CounterSpec(phy, "symbol-errors", 64, COUNTER, port), CounterSpec(phy, "temperature", 64, GAUGE, port)]
    out.append(CounterSpec(Container(SWTEL_ORIGIN, "/system/state"), "cpu", 64, GAUGE))  # no port
    out.append(CounterSpec(Container(SWTEL_ORIGIN, "/agent/asic/unselected"), "swp9/x/0", 64, HIDDEN))
    return out


def test_specs_read_back_as_they_were_given():
    specs = _specs()
    table = CounterTable("t", specs)
    assert len(table) == len(table.specs) == len(specs) and table
    assert table.specs == specs and list(table.specs) == specs and specs == list(table.specs)
    assert [table.specs[i] for i in range(len(specs))] == specs
    assert table.specs[-1] == specs[-1] and table.specs[2:5] == specs[2:5] and table.specs[::-3] == specs[::-3]
    assert table.specs + [specs[0]] == [*specs, specs[0]]
    assert table.specs.index(specs[3]) == 3 and specs[5] in table.specs
    assert table.widths == bytes(s.width for s in specs) and table.kinds == bytes(s.kind for s in specs)
    assert list(table.visible) == [i for i, s in enumerate(specs) if s.kind != HIDDEN]
    assert [table.path_at(i) for i in range(len(specs))] == [(s.container, s.leaf) for s in specs]
    assert [table.port_at(i) for i in range(len(specs))] == [s.port for s in specs]
    with pytest.raises(IndexError):
        table.specs[len(specs)]
    assert not CounterTable("empty") and CounterTable("empty").specs == []


def test_each_container_leaf_and_port_is_kept_once():
    table = CounterTable("t", _specs())
    assert len(table.containers) == len(set(table.containers)) == 6
    assert len(table.leaves) == len(set(table.leaves)) == 6
    assert table.ports == ["swp1", "swp2", None]
    assert all(ids.typecode == "I" and len(ids) == len(table)
               for ids in (table.container_ids, table.leaf_ids, table.port_ids))
    # a container's object is the one given first: its counters share it
    state = table.containers[table.container_ids[0]]
    assert table.container_at(1) is state


def test_a_builder_makes_no_counter_spec(monkeypatch):
    made = []
    monkeypatch.setattr(counters_module, "CounterSpec", lambda *a, **k: made.append(a))
    build = TableBuilder("asic")
    for s in _specs():
        build.add(s.container, s.leaf, s.width, s.kind, s.port)
    assert len(build) == len(_specs())
    table = build.done()
    assert made == []
    monkeypatch.undo()
    assert table.source == "asic" and table.specs == _specs()


def test_relabel_changes_only_the_moved_paths():
    specs = _specs()
    table = CounterTable("asic", specs)
    aside = Container(SWTEL_ORIGIN, "/interfaces/interface[name=swp1]/asic/state/counters")
    out = relabel(table, {0: (aside, "in-octets")})
    assert out.specs == [CounterSpec(aside, "in-octets", 64, COUNTER, "swp1"), *specs[1:]]
    assert out.visible is table.visible and table.specs == specs  # the source's own table unchanged
    # a container no counter is in any more is not the relabelled table's
    moved_all = relabel(table, {i: (aside, s.leaf) for i, s in enumerate(specs) if s.container == specs[2].container})
    assert specs[2].container not in moved_all.containers
