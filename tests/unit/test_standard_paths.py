"""One counter, one path (issue 20, item 8): where two sources give the same counter of one
port (the kernel's ``rx_bytes`` and an ASIC plugin's ``HwIfInOctets``), the OpenConfig leaf
carries the one of higher rank and the other stays reachable under the swtel origin; the
change-kernel state stays each source's own, so a new winner never corrupts a delta.

The election (agent/ports.py) on tables, the engine with sources made here, and the agent in
a network namespace with a veth named like a port of the simulated switch (both backends)."""

from __future__ import annotations

import fnmatch
import time
from array import array

import agent.plugins  # noqa: F401 - the config sections
from agent import config
from agent.counters import (
    F_JUMP,
    F_NEW,
    F_RESET,
    OPENCONFIG,
    SWTEL_ORIGIN,
    Container,
    CounterSpec,
    CounterTable,
)
from agent.engine import Engine, PolledSource
from agent.exporters import otlp_names
from agent.listener import Listener
from agent.ports import elect, key_path, keys_of, members, relabel, standard_key, yielded
from agent.sources import drivers
from agent.sources.asic import map_name as asic_name
from agent.sources.base import NO_DATA, Source, interface

STD = "/interfaces/interface[name={p}]/state/counters/in-octets"
HW = "swtel:/interfaces/interface[name={p}]/hw/state/counters/in-octets"
KERNEL = "swtel:/interfaces/interface[name={p}]/netdev/state/counters/in-octets"
ASIC_ASIDE = "swtel:/interfaces/interface[name={p}]/asic/hw/state/counters/in-octets"


# ---------------------------------------------------------------- the same knowledge as OTLP's


def test_the_pairs_are_the_otlp_names_pairs_and_the_ranks_their_order():
    """drivers.HW_STANDARD pairs exactly the leaves the OTLP names give one metric, and the
    default source ranks follow the OTLP shapes' (the switch's hardware counter over the
    kernel's): one ranking, not two."""
    state = otlp_names.SHAPES[0]
    hw = next(s for s in otlp_names.SHAPES if s.pattern.match("/interfaces/interface[name=x]/hw/state/counters"))
    assert state.pattern.match("/interfaces/interface[name=x]/state/counters")
    pairs = {h: s for h, name in otlp_names.HW.items() for s, other in otlp_names.STATE.items() if other == name}
    assert drivers.HW_STANDARD == pairs
    assert hw.rank > state.rank
    cfg = config.parse("")
    assert cfg.sources.asic.rank > cfg.sources.netdev.rank > cfg.sources.ethtool.rank == 0


# ---------------------------------------------------------------- the election on tables


def _netdev(port: str) -> CounterTable:
    c = interface(port, OPENCONFIG, "state/counters")
    return CounterTable("netdev", [CounterSpec(c, "in-octets", port=port), CounterSpec(c, "in-pkts", port=port),
                                   CounterSpec(c, "carrier-transitions", port=port)])


def _named(source: str, port: str, names: tuple[str, ...]) -> CounterTable:
    specs = []
    for name in names:
        if source == "asic":
            c, leaf, kind = asic_name(port, name)
        else:
            c, leaf, kind = drivers.map_name(drivers.SWITCHD, port, name)
        specs.append(CounterSpec(c, leaf, 64, kind, port))
    return CounterTable(source, specs)


def _paths(tables, ranks) -> dict[str, list[str]]:
    named = [(t.source, t, r) for t, r in zip(tables, ranks, strict=True)]
    return {t.source: relabel(t, m).paths for t, m in zip(tables, elect(named), strict=True)}


ASIC_NAMES = ("HwIfInOctets", "carrier_changes", "HwIfInL3Drops", "rx_pause_prio_3", "phy_symbol_errors")
SWITCHD_NAMES = ("HwIfInOctets", "HwIfInL3Drops", "HwIfInPfc3Pkt")


def test_the_asic_takes_the_standard_leaf_and_the_others_step_aside():
    p = "swp1"
    got = _paths([_netdev(p), _named("ethtool", p, SWITCHD_NAMES), _named("asic", p, ASIC_NAMES)], (1, 0, 2))
    assert got["asic"] == [STD.format(p=p), "/interfaces/interface[name=swp1]/state/counters/carrier-transitions",
                           "swtel:/interfaces/interface[name=swp1]/hw/state/counters/in-l3-drops",
                           "swtel:/interfaces/interface[name=swp1]/pfc/priority[id=3]/state/in-pause-pkts",
                           "/interfaces/interface[name=swp1]/phy/state/symbol-errors"]
    assert got["netdev"] == [KERNEL.format(p=p), "/interfaces/interface[name=swp1]/state/counters/in-pkts",
                             "swtel:/interfaces/interface[name=swp1]/netdev/state/counters/carrier-transitions"]
    # switchd's copy (rank 0) moves aside where a source of rank > 0 takes its path
    assert got["ethtool"] == ["swtel:/interfaces/interface[name=swp1]/ethtool/hw/state/counters/in-octets",
                              "swtel:/interfaces/interface[name=swp1]/ethtool/hw/state/counters/in-l3-drops",
                              "swtel:/interfaces/interface[name=swp1]/ethtool/pfc/priority[id=3]/state/in-pause-pkts"]
    every = [x for paths in got.values() for x in paths]
    assert len(every) == len(set(every))  # one path, one value
    # and OTLP, which names a counter by the shape of its path, sends one value per name: the ASIC's
    names = [(src, otlp_names.for_path(x)[:2]) for src, paths in got.items() for x in paths]
    assert len({n for _s, n in names}) == len(names)
    octets = ("nvswitch_interface_ether_stats_octets", (("interface", "swp1"),))
    assert [src for src, n in names if n == octets] == ["asic"]


def test_the_override_puts_the_kernel_back_and_the_asic_under_its_own_name():
    p = "swp1"
    got = _paths([_netdev(p), _named("asic", p, ASIC_NAMES)], (3, 2))
    assert got["netdev"] == _netdev(p).paths
    assert got["asic"][:2] == [ASIC_ASIDE.format(p=p),
                               "swtel:/interfaces/interface[name=swp1]/asic/state/counters/carrier-transitions"]
    assert got["asic"][2:] == _named("asic", p, ASIC_NAMES).paths[2:]  # nobody else gives those
    # rank 0: the plugin takes no path from another source (its hardware path stays)
    got = _paths([_netdev(p), _named("asic", p, ASIC_NAMES)], (1, 0))
    assert got["netdev"] == _netdev(p).paths and got["asic"][0] == HW.format(p=p)


def test_without_a_plugin_nothing_moves():
    for p in ("swp1", "odd]na\\me"):
        tables = [_netdev(p), _named("ethtool", p, SWITCHD_NAMES)]
        assert elect([(t.source, t, r) for t, r in zip(tables, (1, 0), strict=True)]) == [{}, {}]
        assert relabel(tables[0], {}) is tables[0]


def test_a_tables_keys_are_standard_keys_made_of_its_own_strings():
    """keys_of holds no string per counter (issue 35, memory a value): a key is the spec's
    own origin, container path and leaf (a hardware alias: its standard container's path),
    and an entry lists the counters standard_key gives it, aliases marked."""
    table = _named("asic", "swp1", ("HwIfInOctets", "carrier_changes", "phy_symbol_errors", "vendor_thing"))
    keys = keys_of(table).members
    got = {(i, alias): key for key, entry in keys.items() for i, alias in members(entry)}
    assert got == {(i, standard_key(s)[1]): standard_key(s)[0] for i, s in enumerate(table.specs)}
    for (i, alias), (origin, path, leaf) in got.items():
        spec = table.specs[i]
        if not alias:
            assert origin is spec.container.origin and path is spec.container.path and leaf is spec.leaf
    assert table.specs[0].container.origin == SWTEL_ORIGIN  # HwIfInOctets: the alias of in-octets
    assert got[(0, True)] == (OPENCONFIG, interface("swp1", OPENCONFIG, "state/counters").path, "in-octets")
    assert members([3, ~0]) == [(3, False), (0, True)] and members(5) == [(5, False)]


def test_an_election_keeps_nothing_in_the_tables():
    """The keys are made at each election and dropped after it (issue 35: the spine's ~17,000
    would hold ~2 MiB for the agent's life); a second election elects the same."""
    tables = [_netdev("swp1"), _named("asic", "swp1", ("HwIfInOctets", "carrier_changes"))]
    args = [(t.source, t, r) for t, r in zip(tables, (0, 1), strict=True)]
    first = elect(args)
    assert first[1]  # the ASIC's hardware counter takes in-octets: something moved
    assert all(set(t.cache) <= {"visible"} for t in tables)  # (the reported indices: kept)
    assert elect(args) == first


def test_an_election_keys_only_the_counters_that_can_share_a_path(monkeypatch):
    """Only counters in a container two tables have (or a hardware counter's standard one) get
    a key (issue 35: the spine's 17,000 keys were the start's peak of small objects); the
    election elects what keying every counter elects."""
    from agent import ports

    p = "swp1"
    cases = [([_netdev(p), _named("ethtool", p, SWITCHD_NAMES), _named("asic", p, ASIC_NAMES)], (1, 0, 2)),
             ([_netdev(p), _named("asic", p, ASIC_NAMES)], (3, 2)),
             ([_netdev(p), _named("asic", p, ASIC_NAMES)], (1, 0)),
             ([_named("asic", p, ASIC_NAMES), _named("asic", "swp2", ASIC_NAMES)], (2, 2)),
             ([_netdev(p), _netdev("swp2"), _named("ethtool", "swp2", SWITCHD_NAMES)], (1, 1, 0))]
    restricted = [elect([(t.source, t, r) for t, r in zip(tables, ranks, strict=True)]) for tables, ranks in cases]
    std = interface(p, OPENCONFIG, "state/counters")
    assert ports.contested([_netdev(p), _named("asic", p, ASIC_NAMES)]) == {std}  # the alias's standard one
    assert ports.contested([_named("asic", p, ASIC_NAMES)]) == set()
    assert any(any(m) for m in restricted)  # (the cases move counters)
    monkeypatch.setattr(ports, "contested", lambda tables: None)  # every counter keyed, as before
    assert restricted == [elect([(t.source, t, r) for t, r in zip(tables, ranks, strict=True)])
                          for tables, ranks in cases]
    asic = _named("asic", p, ASIC_NAMES)
    alone = keys_of(asic, set()).members  # a table alone: its hardware alias only
    assert [members(e) for e in alone.values()] == [[(0, True)]]


def test_keys_and_aside_paths_keep_escaped_names_and_every_key():
    p = "we]ird\\x"
    spec = _named("asic", p, ("HwIfInOctets",)).specs[0]
    key, alias = standard_key(spec)
    container, leaf = key_path(key)
    path = container.path
    assert alias and (container.origin, path, leaf) == (
        OPENCONFIG, "/interfaces/interface[name=we\\]ird\\\\x]/state/counters", "in-octets")
    assert yielded(container, "netdev").path == \
        "/interfaces/interface[name=we\\]ird\\\\x]/netdev/state/counters"
    queue = Container(OPENCONFIG, "/qos/interfaces/interface[interface-id=swp1]/output/queues/queue[name=3]/state")
    assert yielded(queue, "ethtool") == Container(
        SWTEL_ORIGIN, "/qos/interfaces/interface[interface-id=swp1]/ethtool/output/queues/queue[name=3]/state")
    assert yielded(Container(SWTEL_ORIGIN, "/a[x=1][y=2]/b"), "asic").path == "/a[x=1][y=2]/asic/b"


# ---------------------------------------------------------------- the engine: exact deltas across a new winner


class _Made(Source):
    """A source built here: ``ports`` -> its table; each read adds ``step`` to every value."""

    uses_links = False

    def __init__(self, cfg, name: str, build, step: int) -> None:
        self.name = name  # the config section it reads its rank from
        super().__init__(cfg)
        self._build, self.step, self.ports_now = build, step, ["swp1"]
        self._shape: list[str] | None = None
        self.total: dict[str, int] = {}

    @property
    def needs_setup(self) -> bool:
        return self.ports_now != self._shape

    def setup(self, links) -> None:
        if self.ports_now != self._shape:
            self._shape = list(self.ports_now)
            specs = [s for p in self._shape for s in self._build(p).specs]
            self.table = CounterTable(self.name, specs)
            self.values = array("Q", [self.total.get(s.container.full(s.leaf), 0) for s in specs])

    def read(self) -> int:
        for i, s in enumerate(self.table.specs):
            key = s.container.full(s.leaf)
            self.total[key] = self.total.get(key, 0) + self.step
            self.values[i] = self.total[key]
        return len(self._shape)


class _Recorder(Listener):
    name = "recorder"

    def __init__(self) -> None:
        self.lines: list[tuple] = []  # (source, path, value, delta, flags)
        self.deleted: list[str] = []
        self.events: list[tuple] = []  # ("value", source, path, ...) and ("delete", path), in order

    def start(self, store) -> None:
        pass

    def on_batch(self, batch) -> None:
        got = [(batch.source, path, v, d, f) for _s, path, v, d, f in batch.items()]
        self.lines += got
        self.events += [("value", *x) for x in got]

    def on_state(self, updates) -> None:
        pass

    def on_delete(self, ts_ns, containers) -> None:
        self.deleted += [c.full("") for c in containers]
        self.events += [("delete", c.full("")) for c in containers]

    def stop(self, timeout) -> None:
        pass

    def status(self) -> dict:
        return {}


def _engine(text: str = ""):
    cfg = config.parse(text)
    rec = _Recorder()
    engine = Engine(cfg, [rec])
    kernel = _Made(cfg, "netdev", _netdev, 10)
    asic = _Made(cfg, "asic", lambda p: _named("asic", p, ("HwIfInOctets", "carrier_changes")), 1000)
    engine._polled = [PolledSource(kernel, 0.1), PolledSource(asic, 0.1)]
    return engine, rec, kernel, asic


def _passes(engine: Engine, n: int) -> None:
    for _ in range(n):
        for runner in engine._polled:
            engine._poll(runner, time.monotonic())
        engine._end_holds()  # as the tick loop does after its polls
        engine._flush_drops()


def _sources_never_switch_on_a_path(events: list[tuple]) -> None:
    """Per path, two values from different sources always have a delete of that path (or of a
    container above it) between them: a collector never sees a counter jump between sources."""
    last: dict[str, str] = {}  # path -> source of its latest value since its latest delete
    for ev in events:
        if ev[0] == "delete":
            gone = ev[1]
            last = {p: src for p, src in last.items() if p != gone and not p.startswith(gone + "/")}
            continue
        _kind, source, path = ev[:3]
        assert last.setdefault(path, source) == source, (path, last[path], source)


def test_a_new_winner_is_announced_and_every_delta_stays_exact():
    engine, rec, _kernel, asic = _engine()
    _passes(engine, 3)
    std = [x for x in rec.lines if x[1] == STD.format(p="swp1")]
    assert std[0][0] == "netdev" and {x[0] for x in std[1:]} == {"asic"}  # a source that opens at once
    # the leaf changed source: deleted before the asic's first value on it
    first_asic = rec.events.index(next(e for e in rec.events if e[0] == "value" and e[1:3] == ("asic", std[1][1])))
    assert ("delete", STD.format(p="swp1")) in rec.events[:first_asic]
    aside = [x for x in rec.lines if x[1] == KERNEL.format(p="swp1")]
    assert aside and {x[0] for x in aside} == {"netdev"}
    assert not any(x[4] & (F_RESET | F_JUMP) for x in rec.lines)
    # the plugin loses the port: the kernel's counter is back on the leaf at once (its value,
    # flagged new), the aside path is deleted, and no delta is anything but the source's own
    rec.lines.clear()
    asic.ports_now = []
    _passes(engine, 2)
    assert "swtel:/interfaces/interface[name=swp1]/netdev/state/counters" in rec.deleted
    std = [x for x in rec.lines if x[1] == STD.format(p="swp1")]
    assert std[0][0] == "netdev" and std[0][4] & F_NEW and std[0][3] == 0
    assert rec.events.index(("delete", STD.format(p="swp1"))) < rec.events.index(("value", *std[0]))
    assert {x[3] for x in std[1:]} == {10} and all(x[0] == "netdev" for x in std)
    # and back: the ASIC's total goes on from where it was (its own state, kept by path)
    rec.lines.clear()
    asic.ports_now = ["swp1"]
    _passes(engine, 3)
    std = [x for x in rec.lines if x[1] == STD.format(p="swp1") and x[0] == "asic"]
    assert [x[3] for x in std if not x[4] & F_NEW] == [1000, 1000]
    assert not any(x[4] & (F_RESET | F_JUMP) for x in rec.lines)
    latest = {(b.source, p): v for b in engine.store.snapshot_batches() for _s, p, v, _d, _f in b.items()}
    assert latest[("asic", STD.format(p="swp1"))] == asic.total[HW.format(p="swp1")]
    assert latest[("netdev", KERNEL.format(p="swp1"))] == _kernel.total[STD.format(p="swp1")]
    assert len({p for _s, p in latest}) == len(latest)  # one value per path
    _sources_never_switch_on_a_path(rec.events)


def test_a_leaf_only_the_asic_gave_is_deleted_alone_when_its_port_goes():
    engine, rec, kernel, asic = _engine()
    kernel._build = lambda p: CounterTable("netdev", _netdev(p).specs[:2])  # no carrier counter
    _passes(engine, 2)
    assert any(x[1] == "/interfaces/interface[name=swp1]/state/counters/carrier-transitions" for x in rec.lines)
    asic.ports_now = []
    _passes(engine, 1)
    assert "/interfaces/interface[name=swp1]/state/counters/carrier-transitions" in rec.deleted
    assert "/interfaces/interface[name=swp1]/state/counters" not in rec.deleted  # the kernel's go on
    assert "swtel:/interfaces/interface[name=swp1]/hw/state/counters" not in rec.deleted  # never published


def test_the_engine_without_a_plugin_publishes_the_sources_own_tables():
    cfg = config.parse("")
    rec = _Recorder()
    engine = Engine(cfg, [rec])
    kernel = _Made(cfg, "netdev", _netdev, 10)
    driver = _Made(cfg, "ethtool", lambda p: _named("ethtool", p, SWITCHD_NAMES), 5)
    engine._polled = [PolledSource(kernel, 0.1), PolledSource(driver, 0.1)]
    _passes(engine, 2)
    kernel.ports_now = driver.ports_now = ["swp1", "swp2"]
    _passes(engine, 2)
    assert all(r.published is r.table and not r.moves for r in engine._polled)
    own = {p for r in engine._polled for p in r.table.paths}
    assert {x[1] for x in rec.lines} == own and not rec.deleted
    assert [x[3] for x in rec.lines if x[1] == STD.format(p="swp1")] == [0, 10, 10, 10]


def test_a_reload_that_changes_a_rank_moves_the_paths_at_once():
    engine, rec, kernel, asic = _engine()
    _passes(engine, 2)
    rec.lines.clear()
    engine.reload(config.parse("sources: {netdev: {rank: 3}, ethtool: {enabled: false}, "
                               "system: {enabled: false}, asic: {enabled: true}}\n"))
    for runner in engine._polled:  # the same sources go on (only the ranks changed)
        runner.source.section = getattr(engine._pending_cfg.sources, runner.name)
    engine._apply_pending_config()
    engine._flush_drops()
    moved = {(x[0], x[1]): x for x in rec.lines}
    assert moved[("netdev", STD.format(p="swp1"))][4] & F_NEW
    assert moved[("asic", ASIC_ASIDE.format(p="swp1"))][2] == asic.total[HW.format(p="swp1")]
    assert "swtel:/interfaces/interface[name=swp1]/netdev/state/counters" in rec.deleted
    _sources_never_switch_on_a_path(rec.events)


def test_a_reload_that_turns_the_plugin_off_deletes_its_leaf_before_the_kernel_s_value():
    engine, rec, kernel, asic = _engine()
    _passes(engine, 2)
    rec.events.clear()
    engine.reload(config.parse(
        "sources: {asic: {enabled: false}, ethtool: {enabled: false}, system: {enabled: false}}\n"))
    engine._polled[0].source.section = engine._pending_cfg.sources.netdev  # (the same section: kept)
    engine._apply_pending_config()
    engine._flush_drops()
    assert "asic" not in [r.name for r in engine._polled]
    std = STD.format(p="swp1")
    kernel_first = next(e for e in rec.events if e[0] == "value" and e[2] == std)
    assert kernel_first[1] == "netdev" and kernel_first[5] & F_NEW
    assert rec.events.index(("delete", std)) < rec.events.index(kernel_first)
    _sources_never_switch_on_a_path(rec.events)


class _Opening(_Made):
    """A source that opens late as an ASIC plugin does: no table while ``opening`` polls
    remain (``starting``), then the table of ``build``, or none when ``fails``."""

    opens_late = True

    def __init__(self, cfg, name: str, build, step: int, opening: int, fails: bool = False) -> None:
        super().__init__(cfg, name, build, step)
        self.opening, self.fails = opening, fails
        self.fault = None

    @property
    def starting(self) -> bool:
        return self.opening > 0

    def serves(self, port: str) -> bool:  # as the asic source's globs say
        return any(fnmatch.fnmatchcase(port, g) for g in self.section.interfaces)

    @property
    def needs_setup(self) -> bool:
        return self.opening > 0 or (not self.fails and super().needs_setup)

    def setup(self, links) -> None:
        if self.opening > 0:
            self.opening -= 1  # the last poll of its open ends it: opened, or not
        if self.opening > 0:
            return
        if self.fails:
            self.fault = "plugin not open: open timed out"
            return
        super().setup(links)

    def read(self) -> int:
        return NO_DATA if self.opening or self.fails or self._shape is None else super().read()


def _slow_engine(opening: int, fails: bool = False, ports: tuple[str, ...] = ("swp1",)):
    cfg = config.parse("sources: {asic: {enabled: true, interfaces: ['swp*']}}\n")
    rec = _Recorder()
    engine = Engine(cfg, [rec])
    kernel = _Made(cfg, "netdev", _netdev, 10)
    kernel.ports_now = list(ports)
    asic = _Opening(cfg, "asic", lambda p: _named("asic", p, ("HwIfInOctets", "carrier_changes")), 1000,
                    opening, fails)
    engine._polled = [PolledSource(kernel, 0.1), PolledSource(asic, 0.1)]
    return engine, rec, kernel, asic


def test_a_plugin_still_opening_keeps_the_standard_leaf_from_the_kernel():
    """Issue 34: the kernel's swp1 reads from the first pass while the plugin opens for three;
    every value on the standard in-octets leaf is the plugin's, the kernel's is on its own
    swtel path from its first value, and eth0 (not the plugin's) keeps the kernel's leaf."""
    engine, rec, kernel, asic = _slow_engine(4, ports=("swp1", "eth0"))
    _passes(engine, 3)
    assert asic.starting and not any(x[1] == STD.format(p="swp1") for x in rec.lines)
    assert [x[0] for x in rec.lines if x[1] == KERNEL.format(p="swp1")] == ["netdev"] * 3
    assert [x[3] for x in rec.lines if x[1] == STD.format(p="eth0")] == [0, 10, 10]  # never held
    assert not any("eth0" in x[1] and x[1].startswith("swtel:") for x in rec.lines)
    _passes(engine, 3)
    std = [x for x in rec.lines if x[1] == STD.format(p="swp1")]
    assert len(std) == 3 and {x[0] for x in std} == {"asic"}
    assert [x[2] for x in std] == [1000, 2000, 3000]
    assert [x[3] for x in rec.lines if x[1] == KERNEL.format(p="swp1")] == [0] + [10] * 5
    carrier = "/interfaces/interface[name=swp1]/state/counters/carrier-transitions"
    assert {x[0] for x in rec.lines if x[1] == carrier} == {"asic"}
    in_pkts = "/interfaces/interface[name=swp1]/state/counters/in-pkts"  # no plugin gives it: never held
    assert [x[3] for x in rec.lines if x[1] == in_pkts] == [0] + [10] * 5
    assert not rec.deleted and not any(x[4] & (F_RESET | F_JUMP) for x in rec.lines)
    _sources_never_switch_on_a_path(rec.events)


def test_a_plugin_that_does_not_open_gives_the_leaf_back_to_the_kernel(caplog):
    """Bounded by the plugin's open: when it ends without a table, the kernel's counter takes
    the leaf (its value, flagged new), its swtel path is deleted, and the switch is logged."""
    engine, rec, kernel, asic = _slow_engine(2, fails=True)
    _passes(engine, 4)
    std = [x for x in rec.lines if x[1] == STD.format(p="swp1")]
    assert std and {x[0] for x in std} == {"netdev"} and std[0][4] & F_NEW
    assert std[0][2] == kernel.total[STD.format(p="swp1")] - 10 * (len(std) - 1)
    assert "swtel:/interfaces/interface[name=swp1]/netdev/state/counters" in rec.deleted
    assert not engine._polled[1].holds
    _sources_never_switch_on_a_path(rec.events)
    # the plugin opening later (a retry) takes the leaf as any new winner does: delete, then its value
    rec.events.clear()
    asic.fails, asic.opening = False, 1
    _passes(engine, 3)
    std = [e for e in rec.events if e[0] == "value" and e[2] == STD.format(p="swp1")]
    assert [e[1] for e in std] == ["netdev", "asic", "asic", "asic"]  # (the kernel polled before it opened)
    assert rec.events.index(std[0]) < rec.events.index(("delete", STD.format(p="swp1"))) < rec.events.index(std[1])
    _sources_never_switch_on_a_path(rec.events)


def test_an_asic_only_port_has_its_standard_leaf():
    """Issue 34: with the kernel's sources off, the plugin's HwIfInOctets is the port's
    OpenConfig in-octets (not only its hardware path); rank 0 leaves it where it is."""
    p = "swp1"
    got = _paths([_named("asic", p, ASIC_NAMES)], (2,))
    assert got["asic"][0] == STD.format(p=p) and HW.format(p=p) not in got["asic"]
    assert got["asic"][1:] == _named("asic", p, ASIC_NAMES).paths[1:]
    assert _paths([_named("asic", p, ASIC_NAMES)], (0,))["asic"][0] == HW.format(p=p)
    # switchd's copy alone (ethtool, rank 0, no plugin): as it is
    assert _paths([_named("ethtool", p, SWITCHD_NAMES)], (0,))["ethtool"] == _named("ethtool", p, SWITCHD_NAMES).paths
    # and in the engine, from the first value
    cfg = config.parse("sources: {asic: {enabled: true}}\n")
    rec = _Recorder()
    engine = Engine(cfg, [rec])
    asic = _Made(cfg, "asic", lambda q: _named("asic", q, ("HwIfInOctets",)), 1000)
    engine._polled = [PolledSource(asic, 0.1)]
    _passes(engine, 2)
    assert [(x[1], x[2]) for x in rec.lines] == [(STD.format(p=p), 1000), (STD.format(p=p), 2000)]


def test_holds_move_only_standard_leaves_of_served_ports_of_lower_ranks():
    tables = [_netdev("swp1"), _netdev("eth0")]
    named = [("netdev", tables[0], 1), ("netdev", tables[1], 1)]
    moves = elect(named, [(2, lambda port: port.startswith("swp"))])
    assert relabel(tables[0], moves[0]).paths == [KERNEL.format(p="swp1"),
                                                 "/interfaces/interface[name=swp1]/state/counters/in-pkts",
                                                 "swtel:/interfaces/interface[name=swp1]/netdev/state/counters/"
                                                 "carrier-transitions"]
    assert moves[1] == {}
    assert elect(named, [(1, lambda port: True)]) == [{}, {}]  # not above: nothing kept


# ------------------------------------------------------- the agent: a kernel port and a plugin port of one name




def test_the_fec_histogram_on_cumulus_paths_the_asic_s_and_ethnl_s_aside():
    """The RS-FEC histogram of one port from the ASIC (per port) and from ethtool netlink (per
    port and per lane): the ASIC's bins carry Cumulus' paths, ethnl's port bins move aside under
    its name, its lane bins (no other source has them) stay on Cumulus-style channel paths; OTLP
    sends one value per name and bin."""
    from agent.sources import ethnl
    from agent.sources.asic import histogram_bin

    p = "swp1"
    bins = ((0, 0), (1, 1), (2, 3), (4, 15))  # one device: the ASIC and the kernel give the same ranges
    container, leaf, _kind = asic_name(p, "phy_rs_fec_histogram")
    asic = CounterTable("asic", [CounterSpec(*histogram_bin(container, leaf, k, lo, hi), 64,
                                             port=p) for k, (lo, hi) in enumerate(bins)])
    shape = ((0, 0, 0), tuple((lo, hi, 2) for lo, hi in bins))  # and the kernel's per lane, 2 lanes
    eth = CounterTable("ethnl", ethnl.fec_specs(p, shape))
    got = _paths([asic, eth], (2, 0))
    hist = f"/interfaces/interface[name={p}]/phy/histograms/state/rs-num-corr-err"
    assert got["asic"] == [f"{hist}[upper-boundary={u}]/count" for u in (0, 1, 3, 15)]
    aside = f"swtel:/interfaces/interface[name={p}]/ethnl/phy/histograms/state/rs-num-corr-err"
    lane = f"/interfaces/interface[name={p}]/phy/channels/channel[id={{}}]/histograms/state/rs-num-corr-err"
    want = []
    for u in (0, 1, 3, 15):
        want += [f"{aside}[upper-boundary={u}]/count", *(lane.format(n) + f"[upper-boundary={u}]/count"
                                                         for n in (0, 1))]
    assert got["ethnl"] == want
    names = [otlp_names.for_path(x)[:2] for paths in got.values() for x in paths]
    assert len(set(names)) == len(names)
    assert otlp_names.for_path(got["asic"][2])[:2] == (
        "nvswitch_interface_phy_rs_fec_histogram", (("interface", p), ("bin", "3")))
    assert otlp_names.for_path(got["ethnl"][1])[:2] == (
        "nvswitch_interface_phy_stats_lane_rs_fec_histogram", (("interface", p), ("lane", "0"), ("bin", "0")))
