"""devlink packet traps: per-trap packets and bytes as drop reasons (agent/_ext/devlink.c
devlink_trap_parse, its twin in agent/_fallback/devlink.py, agent/sources/devlink_trap.py).

* Fixtures (tests/fixtures/devlink/traps.hex, trap_groups.hex, written by build.py there from
  the UAPI layouts): exact tuples; the files are what build.py writes.
* The C parser and the Python twin agree on every fixture (the shared-buffer ones too),
  every truncation and one-byte change, and on hypothesis' buffers (marked ``once``).
* The source with an injected reader: exact values on the device's drop-reason paths, the
  traps set to drop in status with the command (never run), the states without errors,
  failures as errors, and a ``drop-reason`` event through the insights pipeline.
* Live: this kernel has no devlink: the engine shows the state, no error, health OK.
"""

from __future__ import annotations

import errno
import importlib.util
import struct
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agent import _backend, _fallback, config
from agent.insights import InsightsPipeline
from agent.insights.classify import DROP_REASON, classify
from agent.pathgrammar import devlink_drop_reason_path, split, split_origin
from agent.sources import devlink_trap as src
from agent.sources.base import NO_DATA
from tests.insights_stream import NS, T0, Stream
from tests.unit.test_devlink import NAMES as SB_NAMES
from tests.unit.test_devlink import _variants, c_parser, fixture, outcome

pytestmark = pytest.mark.nolibs  # no versioned library decides its outcome: not in the Debian pass

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "devlink"
TRAP_NAMES = ("traps", "trap_groups")
ALL_NAMES = TRAP_NAMES + SB_NAMES
TRAP_GET, TRAP_GROUP_GET = 61, 65
MLXSW = "pci/0000:03:00.0"
root = pytest.mark.root

# ---------------------------------------------------------------- exact values

M, N = ("pci", "0000:03:00.0"), ("netdevsim", "netdevsim10")
TRAPS = [(63, *M, "l2_drops", "ingress_vlan_filter", 0, 1, True, None, 1234, 98765, None),
         (63, *M, "l2_drops", "source_mac_is_multicast", 0, 0, True, None, 0, 0, None),
         (63, *M, "l3_drops", "blackhole_route", 0, 0, True, None, 0, 0, None),
         (63, *M, "l3_exceptions", "ttl_value_is_too_small", 1, 1, True, None, 77, 7700, None),
         (63, *M, "buffer_drops", "tail_drop", 0, 2, True, None, 500, 750000, None),
         (63, *M, "lldp", "lldp", 2, 1, True, None, 10, 1280, None),
         (63, *N, "l2_drops", "fid_miss", 1, 1, False, None, 40, 4000, 5)]
GROUPS = [(67, *M, g, None, None, None, True, p, 0, 0, None)
          for g, p in (("l2_drops", 1), ("l3_drops", 1), ("l3_exceptions", 2), ("buffer_drops", 3), ("lldp", 5))]
GROUPS.append((67, *N, "l2_drops", None, None, None, True, None, 0, 0, None))


def test_fixtures_are_what_the_builder_writes():
    spec = importlib.util.spec_from_file_location("devlink_fixture_build", FIXTURES / "build.py")
    build = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(build)
    for name, (title, messages) in build.trap_fixtures().items():
        assert (FIXTURES / f"{name}.hex").read_text() == build.render(title, messages), name
    assert sorted(build.trap_fixtures()) == sorted(TRAP_NAMES)


def test_fixtures_parse_to_exact_values():
    parse = _backend.reader.devlink_trap_parse
    assert parse(fixture("traps")) == TRAPS  # the padded stats (blackhole_route, ttl) read alike
    assert parse(fixture("trap_groups")) == GROUPS
    assert parse(fixture("empty")) == []
    assert outcome(parse, fixture("dump_error")) == ("OSError", errno.EOPNOTSUPP)
    assert outcome(parse, fixture("no_family")) == ("OSError", errno.ENOENT)


def _attr(t: int, payload: bytes) -> bytes:
    raw = struct.pack("=HH", 4 + len(payload), t) + payload
    return raw + bytes(-len(raw) % 4)


def _msg(cmd: int, attrs: bytes) -> bytes:
    body = struct.pack("=BBH", cmd, 1, 0) + attrs
    return struct.pack("=IHHII", 16 + len(body), 25, 2, 1, 0) + body


def _trap(device: str, group: str, trap: str, ttype: int, action: int, packets: int, nbytes: int) -> bytes:
    """One DEVLINK_CMD_TRAP_NEW as net/devlink/trap.c lays it out (no metadata)."""
    bus, dev = device.split("/", 1)
    stats = _attr(0, struct.pack("=Q", packets)) + _attr(1, struct.pack("=Q", nbytes))
    return _msg(63, _attr(1, bus.encode() + b"\0") + _attr(2, dev.encode() + b"\0")
                + _attr(135, group.encode() + b"\0") + _attr(130, trap.encode() + b"\0")
                + _attr(132, bytes([ttype])) + _attr(131, bytes([action])) + _attr(133, b"")
                + _attr(0x8000 | 129, stats))


def test_parser_rules():
    parse = _backend.reader.devlink_trap_parse
    u64 = lambda v: struct.pack("=Q", v)  # noqa: E731
    # statistics too short are skipped, the first usable wins, across nests too; other attributes
    # inside the nest (DEVLINK_ATTR_PAD) are ignored; the generic flag is True with any payload
    stats1 = _attr(0, b"\1\2\3\4") + _attr(61, b"") + _attr(0, u64(2**64 - 1))
    stats2 = _attr(0, u64(3)) + _attr(1, u64(4)) + _attr(2, u64(5))
    attrs = _attr(129, stats1) + _attr(133, b"x") + _attr(0x8000 | 129, stats2) + _attr(142, b"\1\0")
    assert parse(_msg(63, attrs)) == [(63, None, None, None, None, None, None, True, None, 2**64 - 1, 4, 5)]
    # a bad length inside the nest ends the nest's walk, not the message's
    broken = _attr(129, _attr(1, u64(9)) + struct.pack("=HH", 99, 0)) + _attr(130, b"t\0")
    assert parse(_msg(63, broken)) == [(63, None, None, None, "t", None, None, False, None, None, 9, None)]
    with pytest.raises(ValueError, match="truncated netlink message header"):
        parse(b"\0" * 10)


def test_trap_dumps_are_requested_byte_exact():
    for cmd in (TRAP_GET, TRAP_GROUP_GET):
        want = struct.pack("=IHHIIBBH", 20, 25, 0x301, 9, 0, cmd, 1, 0)  # REQUEST | DUMP
        assert _backend.reader.devlink_request(25, cmd, 9, None) == want
    assert _backend.reader.DEVLINK_TRAP_GET == TRAP_GET and _backend.reader.DEVLINK_TRAP_GROUP_GET == TRAP_GROUP_GET


# ---------------------------------------------------------------- C == Python


@pytest.mark.once
@pytest.mark.parametrize("name", ALL_NAMES)
def test_c_and_python_agree_on_every_fixture_truncation_and_byte_change(name):
    c = c_parser()
    for data in _variants(fixture(name)):
        assert outcome(c.devlink_trap_parse, data) == outcome(_fallback.devlink_trap_parse, data), data.hex()


def _edit(seed: bytes, edits) -> bytes:
    out = bytearray(seed)
    for pos, value in edits:
        if out:
            out[pos % len(out)] = value
    return bytes(out)


@pytest.mark.once
@settings(deadline=None, suppress_health_check=list(HealthCheck), database=None, max_examples=1500)
@given(st.one_of(st.binary(max_size=1024),
                 st.tuples(st.sampled_from(ALL_NAMES),
                           st.lists(st.tuples(st.integers(0, 4095), st.integers(0, 255)), max_size=8))
                 .map(lambda a: _edit(fixture(a[0]), a[1])),
                 st.lists(st.sampled_from(ALL_NAMES), min_size=2, max_size=4)
                 .map(lambda names: b"".join(fixture(n) for n in names))))
def test_c_and_python_agree_on_fuzzed_buffers(data):
    c = c_parser()
    assert outcome(c.devlink_trap_parse, data) == outcome(_fallback.devlink_trap_parse, data)


def test_the_fuzz_harness_runs_the_trap_parser():
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "fuzz"))
    try:
        import fuzz_parsers
    finally:
        sys.path.pop(0)
    assert "devlink_trap_parse" in fuzz_parsers.ETHNL_PARSERS
    assert fixture("traps") in fuzz_parsers.all_seeds()


# ---------------------------------------------------------------- the source, injected replies


class FakeIO:
    """Dumps by command (fixtures unless replaced); every dump logged."""

    def __init__(self) -> None:
        self.dumps = {TRAP_GET: fixture("traps"), TRAP_GROUP_GET: fixture("trap_groups")}
        self.asked: list[int] = []
        self.family_error: int | None = None
        self.raise_on: int | None = None

    def family(self) -> int:
        if self.family_error is not None:
            raise OSError(self.family_error, "no such family")
        return 25

    def dump(self, cmd: int) -> bytes:
        self.asked.append(cmd)
        if cmd == self.raise_on:
            raise BlockingIOError(errno.EAGAIN, "Resource temporarily unavailable")
        return self.dumps.get(cmd, fixture("empty"))

    def close(self) -> None:
        pass


def _source(section: str = "enabled: true", io: FakeIO | None = None) -> src.DevlinkTrapSource:
    cfg = config.parse(f"sources: {{devlink_trap: {{{section}}}}}\n")
    source = src.DevlinkTrapSource(cfg)
    source.io = io if io is not None else FakeIO()
    return source


def _values(source) -> dict[str, int]:
    return {path: source.values[i] for i, path in enumerate(source.table.paths)}


def _path(device: str, group: str, reason: str, leaf: str) -> str:
    return f"swtel:/devlink/devices/device[name={device}]/drops/group[name={group}]/reason[name={reason}]/state/{leaf}"


def test_source_maps_drop_traps_to_exact_paths():
    source = _source()
    source.setup({})
    io = source.io
    assert source.info()["state"] == src.OK and source.ports == [MLXSW]
    assert source.info()["devices"] == ["netdevsim/netdevsim10", MLXSW] and source.info()["traps"] == 4
    io.asked.clear()
    assert source.read() == 4  # drop traps only (the default types): three of mlxsw, none of netdevsim
    assert io.asked == [TRAP_GET]  # one dump per poll
    assert _values(source) == {
        _path(MLXSW, "l2", "ingress-vlan-filter", "packets"): 1234,
        _path(MLXSW, "l2", "ingress-vlan-filter", "bytes"): 98765,
        _path(MLXSW, "l2", "source-mac-is-multicast", "packets"): 0,
        _path(MLXSW, "l2", "source-mac-is-multicast", "bytes"): 0,
        _path(MLXSW, "l3", "blackhole-route", "packets"): 0,
        _path(MLXSW, "l3", "blackhole-route", "bytes"): 0,
        _path(MLXSW, "buffer", "tail-drop", "packets"): 500,
        _path(MLXSW, "buffer", "tail-drop", "bytes"): 750000,
    }
    assert {s.port for s in source.table.specs} == {MLXSW}
    assert source.errors == 0 and not source.needs_setup
    # every key through the path grammar: the device name keeps its '/'
    origin, path = split_origin(source.table.paths[0])
    assert origin == "swtel" and split(path)[2] == ("device", {"name": MLXSW})
    # the same traps at the next setup: the same table, values kept
    table = source.table
    source.setup({})
    assert source.table is table and _values(source)[_path(MLXSW, "l2", "ingress-vlan-filter", "packets")] == 1234


def test_types_and_devices_select():
    source = _source("enabled: true, types: [exception, control], devices: ['pci/*']")
    source.setup({})
    assert source.read() == 2
    assert _values(source) == {_path(MLXSW, "l3", "ttl-value-is-too-small", "packets"): 77,
                               _path(MLXSW, "l3", "ttl-value-is-too-small", "bytes"): 7700,
                               _path(MLXSW, "lldp", "lldp", "packets"): 10,
                               _path(MLXSW, "lldp", "lldp", "bytes"): 1280}
    source = _source("enabled: true, types: [exception], devices: ['netdevsim/*']")
    source.setup({})
    assert source.read() == 1 and source.info()["set_to_drop"] == []  # netdevsim's trap drops nothing here


def test_status_lists_traps_set_to_drop_with_the_command_and_changes_nothing():
    source = _source()
    source.setup({})
    source.read()
    assert source.info()["set_to_drop"] == [
        {"device": MLXSW, "group": "l2_drops", "traps": ["source_mac_is_multicast"],
         "command": f"devlink trap group set {MLXSW} group l2_drops action trap policer 1"},
        {"device": MLXSW, "group": "l3_drops", "traps": ["blackhole_route"],
         "command": f"devlink trap group set {MLXSW} group l3_drops action trap policer 1"},
    ]
    assert set(source.io.asked) == {TRAP_GET, TRAP_GROUP_GET}  # dumps only: nothing set
    # the operator turned l2_drops to trap, and buffer drops are set to drop: seen at the next poll
    io = source.io
    io.dumps[TRAP_GET] = (_trap(MLXSW, "l2_drops", "source_mac_is_multicast", 0, 1, 3, 300)
                          + _trap(MLXSW, "buffer_drops", "early_drop", 0, 0, 0, 0))
    source.read()
    dropping = source.info()["set_to_drop"]
    assert dropping == [{"device": MLXSW, "group": "buffer_drops", "traps": ["early_drop"],
                         "note": src.NOT_BY_DEVLINK["buffer_drops"]}]
    assert source.needs_setup  # early_drop is a trap the layout lacks
    # a group without a policer: the command says where to find one
    assert src.group_command(MLXSW, "g", None).startswith(
        f"devlink trap group set {MLXSW} group g action trap policer ")


def test_source_states_are_not_errors():
    for change, state in ((lambda io: setattr(io, "family_error", errno.ENOENT), src.NO_DEVLINK),
                          (lambda io: io.dumps.clear(), src.NO_DEVICE)):
        io = FakeIO()
        change(io)
        source = _source(io=io)
        source.setup({})
        assert source.info()["state"] == state
        assert len(source.table) == 0 and source.read() == 0  # an empty good poll: health stays OK
        assert source.errors == 0 and source.fault is None and not source.needs_setup
        source._retry_at = time.monotonic()
        assert source.needs_setup
    source = _source("enabled: true, devices: ['pci/0000:99:00.0']")
    source.setup({})
    assert source.info()["state"] == src.NO_TRAP and source.read() == 0 and source.errors == 0


def test_source_reports_failures_as_errors_and_no_data():
    io = FakeIO()
    source = _source(io=io)
    source.setup({})
    io.raise_on = TRAP_GET
    assert source.read() == NO_DATA and source.errors == 1 and "devlink trap" in source.last_error
    io.raise_on = None
    io.dumps[TRAP_GET] = fixture("dump_error")
    assert source.read() == NO_DATA and source.errors == 2
    io.dumps[TRAP_GET] = b"\0" * 8
    assert source.read() == NO_DATA and source.errors == 3 and "truncated" in source.last_error
    io.dumps[TRAP_GET] = struct.pack("=IHHIIi", 20, 2, 0, 7, 0, -errno.ENODEV)  # the device went away
    assert source.read() == NO_DATA and source.errors == 3 and source.needs_setup
    io.raise_on = TRAP_GROUP_GET
    source.setup({})
    assert source.errors == 4 and source.info()["state"].startswith("setup failed: ")
    assert len(source.table) == 0 and source.read() == NO_DATA


def test_config_defaults_and_rules():
    section = config.parse("").sources.devlink_trap
    assert section.enabled is False and float(section.interval) == 1.0
    assert section.devices == ["*"] and section.types == ["drop"]
    for bad in ("[dropped]", "[]"):
        with pytest.raises(config.ConfigError, match="sources.devlink_trap.types"):
            config.parse(f"sources: {{devlink_trap: {{types: {bad}}}}}\n")


# ---------------------------------------------------------------- insights


def test_the_path_classifies_as_a_drop_reason_of_the_device():
    from agent.counters import Container, CounterSpec

    spec = CounterSpec(Container("swtel", devlink_drop_reason_path("pci/a]b", "l2", "x]y")), "packets", port="pci/a]b")
    assert classify(spec) == ("pci/a]b", DROP_REASON, "l2/x]y")
    assert classify(CounterSpec(spec.container, "bytes", port="pci/a]b")) is None
    assert classify(CounterSpec(spec.container, "packets", port="other")) is None


def test_a_trap_counting_raises_one_drop_reason_event_naming_the_device():
    io = FakeIO()
    source = _source(io=io)
    source.setup({})
    key = (MLXSW, "l3_drops", "blackhole_route")
    where = {i: i for i in range(len(source.table))}
    stream = Stream(source.table, where)
    runner = InsightsPipeline(config.Insights(), log=None)
    previous = None
    raised = []
    for k in range(40):  # polls every 100 ms; 50 blackholed packets per poll from 1 s to 3 s
        t = k / 10
        count = 50 * max(0, min(k, 30) - 10)
        io.dumps[TRAP_GET] = (_trap(MLXSW, "l2_drops", "ingress_vlan_filter", 0, 1, 1234 + (k // 20), 0)
                              + _trap(MLXSW, *key[1:], 0, 1, count, 100 * count))
        assert source.read() > 0
        now = list(source.values)
        deltas = {} if previous is None else {i: now[i] - previous[i] for i in range(len(now))}
        previous = now
        ts = T0 + k * NS // 10
        batch = stream.batch(ts, deltas)
        if batch is not None:
            runner.on_batch(batch)
        runner.end_pass(ts)
        raised += [(t, ev) for ev in runner.status()["open"] if ev["id"] not in {e["id"] for _t, e in raised}]
    assert len(raised) == 1, raised
    t, ev = raised[0]
    assert ev["type"] == "drop-reason" and ev["interfaces"] == [MLXSW]
    assert "for blackhole-route (l3 drops" in ev["message"] and 1.0 <= t <= 1.4


# ---------------------------------------------------------------- the real kernel


