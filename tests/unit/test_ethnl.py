"""ethtool netlink: FEC statistics with the 6.18 histogram and the standard statistics groups
(agent/_ext/ethnl.c, its twin agent/_fallback/ethnl.py, agent/sources/ethnl.py).

* Fixtures (tests/fixtures/ethnl/*.hex): genetlink replies laid out by the UAPI headers,
  annotated, plus two captured from this kernel for a veth. Each parses to exact values.
* The C parser and the Python twin agree on every fixture, every truncation and every
  one-byte change of it, and on hypothesis' buffers (one process: marked ``once``).
* The requests are byte-exact (nlmsghdr, genlmsghdr, header nest, flags or groups bitset).
* The source with an injected reader: exact values on the expected paths, a changed layout
  set up again, unsupported ports in status without errors.
* Live, in a network namespace: veth answers EOPNOTSUPP for FEC and no standard statistics;
  the agent's engine shows both ports unsupported, no error, and health OK.
"""

from __future__ import annotations

import errno
import struct
from pathlib import Path
from types import ModuleType

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agent import _backend, _fallback, config
from agent.counters import SWTEL_ORIGIN
from agent.links import Link
from agent.sources import ethnl as src
from agent.sources.base import NO_DATA

pytestmark = pytest.mark.nolibs  # no versioned library decides its outcome: not in the Debian pass

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "ethnl"
FEC, STATS = 29, 32  # ETHTOOL_MSG_FEC_GET, ETHTOOL_MSG_STATS_GET
root = pytest.mark.root


def fixture(name: str) -> bytes:
    """A .hex fixture: '#' lines are notes, the rest hex bytes."""
    lines = (FIXTURES / f"{name}.hex").read_text().splitlines()
    return bytes.fromhex(" ".join(line for line in lines if not line.startswith("#")))


def c_parser() -> ModuleType:
    """The C extension (even when SWTEL_PUREPYTHON picked the fallback), or a skip."""
    try:
        return _backend._load_c()
    except ImportError as exc:
        pytest.skip(f"C extension not loaded: {exc}")


def outcome(fn, *args) -> tuple:
    try:
        return ("ok", fn(*args))
    except OSError as exc:
        return ("OSError", exc.errno)
    except ValueError as exc:
        return ("ValueError", str(exc))


PARSERS = ("ethnl_family_parse", "ethnl_fec_parse", "ethnl_stats_parse")
NAMES = ("family", "fec_hist", "fec_totals", "stats_rmon", "veth_fec", "veth_stats")

# ---------------------------------------------------------------- exact values

FEC_HIST = (
    7,
    [1900, 100, 200, 300, 400],
    [3, 0, 1, 2, 0],
    [5000, 1000, 1500, 1250, 1250],
    [(0, 0, 123456789, [30000000, 30000000, 33456789, 30000000]),
     (1, 3, 4242, [1000, 1000, 1242, 1000]),
     (4, 7, 17, [5, 4, 4, 4]),
     (8, 15, 2**33 + 5, [2**31, 2**31, 2**31, 2**31 + 5])],
)
FEC_TOTALS = (9, [77], [2], [], [])
STATS_RMON = (7, [
    (0, 17, [(0, 11)], [], []),
    (1, 18, [(0, 5000), (3, 4990), (4, 2), (6, 640000), (12, 638720), (15, 7)], [], []),
    (2, 19, [(0, 1), (1, 2), (2, 0)], [], []),
    (3, 20, [(0, 3), (1, 4), (2, 5), (3, 6)],
     [(0, 64, 100), (65, 127, 200), (128, 255, 300), (1519, 10239, 9)], [(0, 64, 50), (65, 127, 60)]),
])
VETH_STATS = (8, [(0, 17, [], [], []), (1, 18, [], [], []), (2, 19, [], [], []), (3, 20, [], [], [])])


def test_fixtures_parse_to_exact_values():
    r = _backend.reader
    assert r.ethnl_family_parse(fixture("family")) == 21
    assert r.ethnl_fec_parse(fixture("fec_hist")) == FEC_HIST
    assert r.ethnl_fec_parse(fixture("fec_totals")) == FEC_TOTALS
    assert r.ethnl_stats_parse(fixture("stats_rmon")) == STATS_RMON
    assert r.ethnl_stats_parse(fixture("veth_stats")) == VETH_STATS
    with pytest.raises(OSError) as exc:
        r.ethnl_fec_parse(fixture("veth_fec"))
    assert exc.value.errno == errno.EOPNOTSUPP
    # a reply of the other kind is not taken for this one
    with pytest.raises(ValueError, match="no ETHTOOL_MSG_STATS_GET_REPLY reply"):
        r.ethnl_stats_parse(fixture("fec_hist"))


def _msg(mtype: int, cmd: int, attrs: bytes) -> bytes:
    body = struct.pack("=BBH", cmd, 1, 0) + attrs
    raw = struct.pack("=IHHII", 16 + len(body), mtype, 0, 1, 0) + body
    return raw + bytes(-len(raw) % 4)


def _attr(t: int, payload: bytes) -> bytes:
    raw = struct.pack("=HH", 4 + len(payload), t) + payload
    return raw + bytes(-len(raw) % 4)


def test_parser_rules():
    r = _backend.reader
    u32, u64 = (lambda v: struct.pack("=I", v)), (lambda v: struct.pack("=Q", v))
    # a bin without BIN_VAL counts its lanes' sum (the kernel's rule); one without a bound is dropped;
    # a BIN_VAL of neither 4 nor 8 bytes is skipped and the next usable one taken
    bins = (_attr(5, _attr(2, u32(0)) + _attr(3, u32(0)) + _attr(5, u64(2) + u64(3)))
            + _attr(5, _attr(3, u32(5)) + _attr(4, u32(9)))
            + _attr(5, _attr(2, u32(1)) + _attr(3, u32(2)) + _attr(4, b"\1\2") + _attr(4, u64(2**40))))
    msg = _msg(21, 30, _attr(5, _attr(2, u64(1)) + _attr(2, u64(99)) + bins))  # the first CORRECTED wins
    assert r.ethnl_fec_parse(msg) == (0, [1], [], [], [(0, 0, 5, [2, 3]), (1, 2, 2**40, [])])
    # a group without an id is dropped; a stat nest may carry several; short values skipped
    groups = (_attr(4, _attr(3, u32(1)))
              + _attr(4, _attr(2, u32(9)) + _attr(4, _attr(0, u64(1)) + _attr(5, u32(2)) + _attr(7, u64(3)))))
    assert r.ethnl_stats_parse(_msg(21, 33, groups)) == (0, [(9, 0, [(0, 1), (7, 3)], [], [])])
    # an attribute longer than its message ends the walk, keeping what came before
    broken = _msg(21, 33, _attr(4, _attr(2, u32(1))) + struct.pack("=HH", 200, 4))
    assert r.ethnl_stats_parse(broken) == (0, [(1, 0, [], [], [])])
    for bad, text in ((b"\0" * 10, "truncated netlink message header"),
                      (struct.pack("=IHHII", 16, 21, 0, 0, 0), "generic netlink message too short"),
                      (struct.pack("=IHHII", 16, 2, 0, 0, 0), "NLMSG_ERROR too short")):
        with pytest.raises(ValueError, match=text):
            r.ethnl_fec_parse(bad)
    with pytest.raises(ValueError, match="without CTRL_ATTR_FAMILY_ID"):
        r.ethnl_family_parse(_msg(16, 1, _attr(2, b"ethtool\0")))


def _expected_request(family: int, cmd: int, seq: int, ifindex: int, groups: int) -> bytes:
    """The request as the UAPI lays it out, spelled independently of both builders."""
    dev = struct.pack("=HHI", 8, 1, ifindex)  # ETHTOOL_A_HEADER_DEV_INDEX
    if cmd == FEC:
        attrs = struct.pack("=HH", 4 + 16, 0x8001) + dev + struct.pack("=HHI", 8, 3, 4)  # FLAGS: STATS
    else:
        bitset = struct.pack("=HH", 4, 1) + struct.pack("=HHI", 8, 2, 4) + struct.pack("=HHI", 8, 4, groups)
        attrs = struct.pack("=HH", 12, 0x8002) + dev + struct.pack("=HH", 4 + len(bitset), 0x8003) + bitset
    return struct.pack("=IHHIIBBH", 20 + len(attrs), family, 1, seq, 0, cmd, 1, 0) + attrs


@pytest.mark.parametrize("cmd,groups", [(FEC, 0), (STATS, 0xF), (STATS, 0x9)])
def test_requests_are_byte_exact(cmd, groups):
    got = _backend.reader.ethnl_request(21, cmd, 77, 6, groups)
    assert got == _expected_request(21, cmd, 77, 6, groups)


@pytest.mark.parametrize("args", [(21, 30, 1, 1, 0), (21, STATS, 1, 1, 0), (21, STATS, 1, 1, 0x10),
                                  (3, FEC, 1, 1, 0), (0x10000, FEC, 1, 1, 0)])
def test_bad_requests_are_refused(args):
    with pytest.raises(ValueError):
        _backend.reader.ethnl_request(*args)


# ---------------------------------------------------------------- C == Python


def _variants(data: bytes):
    yield data
    for n in range(len(data)):
        yield data[:n]
    for i in range(len(data)):
        for v in (0x00, 0xFF, data[i] ^ 0x04):
            yield data[:i] + bytes([v]) + data[i + 1:]


@pytest.mark.once
@pytest.mark.parametrize("name", NAMES)
def test_c_and_python_agree_on_every_fixture_truncation_and_byte_change(name):
    c = c_parser()
    for data in _variants(fixture(name)):
        for parser in PARSERS:
            assert outcome(getattr(c, parser), data) == outcome(getattr(_fallback, parser), data), (parser, data.hex())


@pytest.mark.once
@pytest.mark.parametrize("cmd,groups", [(FEC, 0), (STATS, 0xF), (STATS, 0x5)])
def test_c_and_python_build_the_same_requests(cmd, groups):
    c = c_parser()
    for seq, ifindex in ((1, 1), (2**32 - 1, 2**31 + 3)):
        assert c.ethnl_request(21, cmd, seq, ifindex, groups) == _fallback.ethnl_request(21, cmd, seq, ifindex, groups)


def _edit(seed: bytes, edits) -> bytes:
    out = bytearray(seed)
    for pos, value in edits:
        if out:
            out[pos % len(out)] = value
    return bytes(out)


@pytest.mark.once
@settings(deadline=None, suppress_health_check=list(HealthCheck), database=None, max_examples=1500)
@given(st.one_of(st.binary(max_size=1024),
                 st.tuples(st.sampled_from(NAMES), st.lists(st.tuples(st.integers(0, 4095), st.integers(0, 255)),
                                                            max_size=8))
                 .map(lambda a: _edit(fixture(a[0]), a[1]))))
def test_c_and_python_agree_on_fuzzed_buffers(data):
    c = c_parser()
    for parser in PARSERS:
        assert outcome(getattr(c, parser), data) == outcome(getattr(_fallback, parser), data)


# ---------------------------------------------------------------- the source, injected replies


class FakeIO:
    """Replies by (command, ifindex); ``raise_on`` makes a command's query fail as a socket would."""

    def __init__(self, replies: dict[tuple[int, int], bytes]):
        self.replies = replies
        self.asked: list[tuple[int, list[int], int]] = []
        self.raise_on: int | None = None

    def family(self) -> int:
        return 21

    def query(self, cmd: int, ifindexes: list[int], groups: int) -> list[bytes]:
        self.asked.append((cmd, list(ifindexes), groups))
        if cmd == self.raise_on:
            raise BlockingIOError(errno.EAGAIN, "Resource temporarily unavailable")
        return [self.replies[(cmd, i)] for i in ifindexes]

    def close(self) -> None:
        pass


def _links(*ports: tuple[int, str]) -> dict[int, Link]:
    return {i: Link(i, name, "UP", True, "") for i, name in ports}


def _source(section: str = "enabled: true") -> src.EthnlSource:
    cfg = config.parse(f"sources: {{ethnl: {{{section}}}}}\n")
    return src.EthnlSource(cfg)


def _values(source: src.EthnlSource) -> dict[str, int]:
    return {path: source.values[i] for i, path in enumerate(source.table.paths)}


def test_source_maps_fixture_replies_to_exact_paths():
    io = FakeIO({(FEC, 7): fixture("fec_hist"), (STATS, 7): fixture("stats_rmon"),
                 (FEC, 8): fixture("veth_fec"), (STATS, 8): fixture("veth_stats")})
    source = _source()
    source.io = io
    source.setup(_links((7, "swp1"), (8, "veth0")))
    assert source.read() == 1
    got = _values(source)
    phy = "/interfaces/interface[name=swp1]/phy"
    lane = phy + "/channels/channel[id={}]/fec/state"
    hist = phy + "/histograms/state/rs-num-corr-err"
    lane_hist = phy + "/channels/channel[id={}]/histograms/state/rs-num-corr-err"
    ext = "swtel:/interfaces/interface[name=swp1]/ethtool-stats"
    want = {
        f"{phy}/fec/state/corrected-blocks": 1900, f"{phy}/fec/state/uncorrectable-blocks": 3,
        f"{phy}/fec/state/corrected-bits": 5000,
        lane.format(0) + "/corrected-blocks": 100, lane.format(3) + "/corrected-blocks": 400,
        lane.format(2) + "/uncorrectable-blocks": 2, lane.format(1) + "/corrected-bits": 1500,
        # the histogram on Cumulus' layout: keyed by each bin's upper bound, per lane below its channel
        f"{hist}[upper-boundary=0]/count": 123456789,
        f"{hist}[upper-boundary=3]/count": 4242,
        f"{hist}[upper-boundary=15]/count": 2**33 + 5,
        lane_hist.format(2) + "[upper-boundary=0]/count": 33456789,
        lane_hist.format(3) + "[upper-boundary=15]/count": 2**31 + 5,
        f"{ext}/eth-phy/symbol-error-during-carrier": 11,
        f"{ext}/eth-mac/frames-transmitted-ok": 5000, f"{ext}/eth-mac/frames-received-ok": 4990,
        f"{ext}/eth-mac/frame-check-sequence-errors": 2, f"{ext}/eth-mac/octets-transmitted-ok": 640000,
        f"{ext}/eth-mac/octets-received-ok": 638720, f"{ext}/eth-mac/broadcast-frames-xmitted-ok": 7,
        f"{ext}/eth-ctrl/mac-control-frames-transmitted": 1, f"{ext}/eth-ctrl/unsupported-opcodes-received": 0,
        f"{ext}/rmon/ether-stats-undersize-pkts": 3, f"{ext}/rmon/ether-stats-jabbers": 6,
        f"{ext}/rmon/hist-rx/bin[index=0][lower=0][upper=64]/count": 100,
        f"{ext}/rmon/hist-rx/bin[index=3][lower=1519][upper=10239]/count": 9,
        f"{ext}/rmon/hist-tx/bin[index=1][lower=65][upper=127]/count": 60,
    }
    assert {p: got.get(p) for p in want} == want
    # 3 arrays x 5 + 4 bins x 5 FEC counters; 1 + 6 + 3 + 4 statistics and 4 + 2 buckets
    assert len(got) == 15 + 20 + 14 + 6
    assert all(s.port == "swp1" for s in source.table.specs)
    assert {s.container.origin for s in source.table.specs if "ethtool-stats" in s.container.path} == {SWTEL_ORIGIN}
    assert not any("rs-fec-histogram" in p for p in got)  # swtel's own bin form is not streamed for FEC
    # Cumulus' upper-boundary leaf beside every bin's count (port and lanes), once per layout
    bounds = {u.path: u.value for u in source.states(123)}
    assert bounds[f"{hist}[upper-boundary=3]/upper-boundary"] == 3
    assert bounds[lane_hist.format(3) + "[upper-boundary=15]/upper-boundary"] == 15
    assert len(bounds) == 20 and all(p.endswith(f"[upper-boundary={v}]/upper-boundary") for p, v in bounds.items())
    assert source.states(124) == []
    # veth: unsupported in status, not an error, and never asked again until the next setup
    info = source.info()
    assert info["unsupported"] == {"veth0": ["fec", "stats"]}
    assert info["port_state"]["swp1"] == {"fec": "ok", "stats": "ok"}
    assert source.errors == 0 and source.fault is None and source.ports == ["swp1", "veth0"]
    assert io.asked[-2:] == [(FEC, [7], 0), (STATS, [7], 0xF)]


def test_source_follows_the_device_layout_and_keeps_values_on_the_same_one():
    io = FakeIO({(FEC, 9): fixture("fec_totals"), (STATS, 9): fixture("veth_stats")})
    source = _source("enabled: true, groups: [eth-mac, rmon]")
    source.io = io
    source.setup(_links((9, "eth0")))
    table = source.table
    assert source.read() == 1
    assert _values(source) == {"/interfaces/interface[name=eth0]/phy/fec/state/corrected-blocks": 77,
                               "/interfaces/interface[name=eth0]/phy/fec/state/uncorrectable-blocks": 2}
    assert io.asked[:2] == [(FEC, [9], 0), (STATS, [9], 0b1010)]  # eth-mac and rmon
    source.setup(_links((9, "eth0")))  # a link event, the same layout: the same table
    assert source.table is table
    # the device now reports lanes and a histogram: this read is skipped, the next setup rebuilds
    io.replies[(FEC, 9)] = fixture("fec_hist")
    assert source.read() == NO_DATA and source.needs_setup
    source.setup(_links((9, "eth0")))
    assert source.read() == 1 and len(source.table) == 35 and not source.needs_setup


def test_source_reports_failures_as_errors_and_no_data():
    io = FakeIO({(FEC, 7): fixture("fec_hist"), (STATS, 7): fixture("stats_rmon")})
    source = _source()
    source.io = io
    source.setup(_links((7, "swp1")))
    io.raise_on = STATS
    assert source.read() == NO_DATA
    assert source.errors == 1 and "ethtool netlink" in source.last_error
    io.raise_on = None
    io.replies[(FEC, 7)] = io.replies[(STATS, 7)] = b"\0" * 8  # malformed: an error per request
    assert source.read() == NO_DATA and source.errors == 3
    # a port that stops offering FEC is set up again and shown unsupported, not an error
    io.replies[(FEC, 7)], io.replies[(STATS, 7)] = fixture("veth_fec"), fixture("stats_rmon")
    assert source.read() == 1 and source.errors == 3 and source.needs_setup
    source.setup(_links((7, "swp1")))
    assert source.info()["unsupported"] == {"swp1": ["fec"]} and len(source.table) == 20


def test_nothing_supported_reads_as_an_empty_good_poll():
    io = FakeIO({(FEC, 8): fixture("veth_fec"), (STATS, 8): fixture("veth_stats")})
    source = _source("enabled: true, fec: true")
    source.io = io
    source.setup(_links((8, "veth0")))
    assert len(source.table) == 0 and source.read() == 0  # nothing to ask: not NO_DATA (health stays OK)
    assert len(io.asked) == 2  # the probe only


def test_config_defaults_and_checks():
    section = config.parse("").sources.ethnl
    assert section.enabled is False and float(section.interval) == 1.0
    assert section.groups == ["eth-phy", "eth-mac", "eth-ctrl", "rmon"] and section.fec is True
    for bad, text in (("groups: [eth-phy, phy]", "unknown group 'phy'"),
                      ("groups: [rmon, rmon]", "names a group more than once")):
        with pytest.raises(config.ConfigError) as exc:
            config.parse(f"sources: {{ethnl: {{{bad}}}}}\n")
        assert f"sources.ethnl.groups: {text}" in str(exc.value)


# ---------------------------------------------------------------- the real kernel


