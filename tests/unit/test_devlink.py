"""devlink: shared-buffer occupancy and peaks (agent/_ext/devlink.c, its twin
agent/_fallback/devlink.py, agent/sources/devlink.py).

* Fixtures (tests/fixtures/devlink/*.hex, written by build.py there from the UAPI layouts):
  each parses to exact tuples; the files are what build.py writes.
* The C parser and the Python twin agree on every fixture, every truncation and every
  one-byte change of it, and on hypothesis' buffers (one process: marked ``once``).
* The requests are byte-exact (nlmsghdr, genlmsghdr, handle attributes, dump or ack flags).
* The source with an injected reader: exact values on the expected paths, snapshot, dumps
  and max-clear in that order each poll, the states (no devlink, no shared buffer, no
  occupancy) without errors, failures as errors and NO_DATA, a changed layout set up again.
* Live: this kernel has no devlink (veth only): both backends get ENOENT for the family;
  the agent's engine shows the state, no error, health OK. A dump that spans datagrams is
  gathered whole by both backends (an ethtool netlink dump through the same I/O).
"""

from __future__ import annotations

import errno
import importlib.util
import socket
import struct
import time
from array import array
from pathlib import Path
from types import ModuleType

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agent import _backend, _fallback, config
from agent.counters import GAUGE, SWTEL_ORIGIN
from agent.links import Link
from agent.sources import devlink as src
from agent.sources.base import NO_DATA

pytestmark = pytest.mark.nolibs  # no versioned library decides its outcome: not in the Debian pass


@pytest.fixture(autouse=True)
def _with_net_admin(monkeypatch):
    """The source as the unit with its drop-in runs it (CAP_NET_ADMIN), whoever runs the
    tests (CI's Debian pass: user nobody); tests/unit/test_caps.py takes it away."""
    from agent import caps

    monkeypatch.setattr(caps, "reader", lambda: 1 << caps.CAP_NET_ADMIN)

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "devlink"
NAMES = ("ports", "sb", "port_pool", "tc_bind", "no_occupancy", "empty", "ack", "eperm", "dump_error", "no_family")
PORT_GET, SB_GET, PORT_POOL_GET, TC_BIND_GET, SNAPSHOT, MAX_CLEAR = 5, 11, 19, 23, 27, 28
HANDLE = ("pci", "0000:03:00.0", 0)
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


# ---------------------------------------------------------------- exact values

B, D = "pci", "0000:03:00.0"
PORTS = [(7, B, D, 1, None, None, None, None, None, None, "swp1"),
         (7, B, D, 3, None, None, None, None, None, None, "swp2"),
         (7, B, D, 5, None, None, None, None, None, None, "swp3"),
         (7, B, D, 7, None, None, None, None, None, None, None)]
POOLS = [(21, B, D, 1, 0, 0, None, None, 1152, 30720, None), (21, B, D, 1, 0, 4, None, None, 0, 196608, None),
         (21, B, D, 3, 0, 0, None, None, 96, 96, None), (21, B, D, 3, 0, 4, None, None, 4032, 4_000_000_000, None),
         (21, B, D, 5, 0, 0, None, None, 7, 9, None), (21, B, D, 5, 0, 4, None, None, 7, 9, None)]
TCS = [(25, B, D, 1, 0, 0, 0, 0, 288, 2880, None), (25, B, D, 1, 0, 4, 0, 1, 0, 131072, None),
       (25, B, D, 1, 0, 4, 3, 1, 65536, 1048576, None), (25, B, D, 3, 0, 4, 0, 1, 144, 1440, None),
       (25, B, D, 5, 0, 4, 0, 1, 1, 2, None)]


def test_fixtures_are_what_the_builder_writes():
    spec = importlib.util.spec_from_file_location("devlink_fixture_build", FIXTURES / "build.py")
    build = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(build)
    for name, (title, messages) in build.fixtures().items():
        assert (FIXTURES / f"{name}.hex").read_text() == build.render(title, messages), name
    assert sorted(build.fixtures()) == sorted(NAMES)


def test_fixtures_parse_to_exact_values():
    parse = _backend.reader.devlink_parse
    assert parse(fixture("ports")) == PORTS
    assert parse(fixture("sb")) == [(13, B, D, None, 0, None, None, None, None, None, None)]
    assert parse(fixture("port_pool")) == POOLS
    assert parse(fixture("tc_bind")) == TCS
    assert parse(fixture("no_occupancy")) == [(21, B, D, 1, 0, 0, None, None, None, None, None)]
    assert parse(fixture("empty")) == [] and parse(fixture("ack")) == []
    for name, code in (("eperm", errno.EPERM), ("dump_error", errno.EOPNOTSUPP), ("no_family", errno.ENOENT)):
        assert outcome(parse, fixture(name)) == ("OSError", code), name


def _msg(cmd: int, attrs: bytes, mtype: int = 25) -> bytes:
    body = struct.pack("=BBH", cmd, 1, 0) + attrs
    raw = struct.pack("=IHHII", 16 + len(body), mtype, 2, 1, 0) + body
    return raw + bytes(-len(raw) % 4)


def _attr(t: int, payload: bytes) -> bytes:
    raw = struct.pack("=HH", 4 + len(payload), t) + payload
    return raw + bytes(-len(raw) % 4)


def test_parser_rules():
    parse = _backend.reader.devlink_parse
    u32 = lambda v: struct.pack("=I", v)  # noqa: E731
    # the first usable attribute wins; one too short for its type is skipped; a string ends at its NUL
    # (or at the payload's end without one); the nested flag bits are masked off the type
    attrs = (_attr(23, b"\1\2") + _attr(23, u32(5)) + _attr(23, u32(6)) + _attr(1, b"pc") + _attr(1, b"x\0")
             + _attr(0x8000 | 24, u32(9)) + _attr(17, b"\3") + _attr(18, b"\1\2") + _attr(7, b"sw\0p\0"))
    assert parse(_msg(21, attrs)) == [(21, "pc", None, None, None, None, None, 1, 5, 9, "sw")]
    # an attribute longer than its message ends that message's walk, keeping what came before
    broken = _msg(25, _attr(3, u32(4)) + struct.pack("=HH", 200, 23))
    assert parse(broken + _msg(25, _attr(3, u32(8)))) == [(25, None, None, 4, *[None] * 7),
                                                           (25, None, None, 8, *[None] * 7)]
    # control messages below NLMSG_MIN_TYPE other than ERROR and DONE are skipped
    assert parse(struct.pack("=IHHII", 16, 1, 0, 0, 0) + _msg(7, b"")) == [(7, *[None] * 10)]
    # not UTF-8: decoded as the filesystem encoding (surrogateescape), as interface names are
    assert parse(_msg(7, _attr(7, b"\xffa\0")))[0][10] == "\udcffa"
    for bad, text in ((b"\0" * 10, "truncated netlink message header"),
                      (struct.pack("=IHHII", 16, 25, 0, 0, 0), "generic netlink message too short"),
                      (struct.pack("=IHHII", 16, 2, 0, 0, 0), "NLMSG_ERROR too short"),
                      (struct.pack("=IHHII", 40, 25, 0, 0, 0), "netlink message length 40 at offset 0")):
        with pytest.raises(ValueError, match=text):
            parse(bad)
    # a positive or INT_MIN error is EIO; the first error ends the parse
    for error, code in ((7, errno.EIO), (-(2**31), errno.EIO), (-16, errno.EBUSY)):
        raw = struct.pack("=IHHIIi", 20, 2, 0, 0, 0, error)
        assert outcome(parse, _msg(7, b"") + raw + _msg(7, b"")) == ("OSError", code)


def _expected_request(family: int, cmd: int, seq: int, handle) -> bytes:
    """The request as the UAPI lays it out, spelled independently of both builders."""
    if handle is None:
        return struct.pack("=IHHIIBBH", 20, family, 0x301, seq, 0, cmd, 1, 0)  # REQUEST | DUMP
    bus, dev, sb = handle
    attrs = b""
    for t, payload in ((1, bus.encode() + b"\0"), (2, dev.encode() + b"\0"), (11, struct.pack("=I", sb))):
        attrs += struct.pack("=HH", 4 + len(payload), t) + payload + bytes(-len(payload) % 4)
    return struct.pack("=IHHIIBBH", 20 + len(attrs), family, 0x5, seq, 0, cmd, 1, 0) + attrs  # REQUEST | ACK


@pytest.mark.parametrize("cmd,handle", [(PORT_GET, None), (SB_GET, None), (PORT_POOL_GET, None), (TC_BIND_GET, None),
                                        (SNAPSHOT, HANDLE), (MAX_CLEAR, ("pci", "0000:01:00.0", 2**32 - 1)),
                                        (SNAPSHOT, ("netdevsim", "netdevsim10", 1))])
def test_requests_are_byte_exact(cmd, handle):
    assert _backend.reader.devlink_request(25, cmd, 77, handle) == _expected_request(25, cmd, 77, handle)


@pytest.mark.parametrize("args,exc", [((25, SNAPSHOT, 1, None), ValueError), ((25, PORT_GET, 1, HANDLE), ValueError),
                                      ((25, 1, 1, None), ValueError), ((3, PORT_GET, 1, None), ValueError),
                                      ((0x10000, PORT_GET, 1, None), ValueError),
                                      ((25, SNAPSHOT, 1, ("", "d", 0)), ValueError),
                                      ((25, SNAPSHOT, 1, ("pci", "x" * 65, 0)), ValueError),
                                      ((25, SNAPSHOT, 1, ("pci", "a\0b", 0)), ValueError),
                                      ((25, SNAPSHOT, 1, ("pci", "d", -1)), OverflowError),
                                      ((25, SNAPSHOT, 1, ("pci", "d", 2**32)), OverflowError),
                                      ((25, SNAPSHOT, 1, ("pci", "d")), TypeError),
                                      ((25, SNAPSHOT, 1, ["pci", "d", 0]), TypeError),
                                      ((25, SNAPSHOT, 1, (b"pci", "d", 0)), TypeError)])
def test_bad_requests_are_refused(args, exc):
    with pytest.raises(exc):
        _backend.reader.devlink_request(*args)


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
        assert outcome(c.devlink_parse, data) == outcome(_fallback.devlink_parse, data), data.hex()


@pytest.mark.once
def test_c_and_python_build_the_same_requests():
    c = c_parser()
    for cmd, handle in ((PORT_GET, None), (TC_BIND_GET, None), (SNAPSHOT, HANDLE), (MAX_CLEAR, ("é", "d" * 64, 9))):
        for seq in (1, 2**32 - 1):
            assert c.devlink_request(25, cmd, seq, handle) == _fallback.devlink_request(25, cmd, seq, handle)


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
                 .map(lambda a: _edit(fixture(a[0]), a[1])),
                 st.lists(st.sampled_from(NAMES), min_size=2, max_size=4)
                 .map(lambda names: b"".join(fixture(n) for n in names))))
def test_c_and_python_agree_on_fuzzed_buffers(data):
    c = c_parser()
    assert outcome(c.devlink_parse, data) == outcome(_fallback.devlink_parse, data)


# ---------------------------------------------------------------- the source, injected replies


class FakeIO:
    """Dumps by command from fixtures; snapshot and max-clear answered by ``acks``; every
    request logged in order."""

    def __init__(self, dumps: dict[int, bytes] | None = None):
        self.dumps = dumps if dumps is not None else {
            PORT_GET: fixture("ports"), SB_GET: fixture("sb"), PORT_POOL_GET: fixture("port_pool"),
            TC_BIND_GET: fixture("tc_bind")}
        self.acks = {SNAPSHOT: fixture("ack"), MAX_CLEAR: fixture("ack")}
        self.asked: list[tuple] = []
        self.family_error: int | None = None
        self.raise_on: int | None = None

    def family(self) -> int:
        if self.family_error is not None:
            raise OSError(self.family_error, "no such family")
        return 25

    def dump(self, cmd: int) -> bytes:
        self.asked.append(("dump", cmd))
        if cmd == self.raise_on:
            raise BlockingIOError(errno.EAGAIN, "Resource temporarily unavailable")
        return self.dumps.get(cmd, fixture("empty"))

    def execute(self, cmd: int, handles: list) -> list[bytes]:
        self.asked.append(("exec", cmd, list(handles)))
        return [self.acks[cmd] for _ in handles]

    def close(self) -> None:
        pass


def _links(*names: str) -> dict[int, Link]:
    return {10 + i: Link(10 + i, name, "UP", True, "") for i, name in enumerate(names)}


def _source(section: str = "enabled: true", io: FakeIO | None = None) -> src.DevlinkSource:
    cfg = config.parse(f"sources: {{devlink: {{{section}}}}}\n")
    source = src.DevlinkSource(cfg)
    source.io = io if io is not None else FakeIO()
    return source


def _values(source: src.DevlinkSource) -> dict[str, int]:
    return {path: source.values[i] for i, path in enumerate(source.table.paths)}


SWP = "swtel:/interfaces/interface[name={}]/devlink/sb[index=0]"
WANT = {
    SWP.format("swp1") + "/pool[index=0]/state/occupancy": 1152,
    SWP.format("swp1") + "/pool[index=0]/state/peak-occupancy": 30720,
    SWP.format("swp1") + "/pool[index=4]/state/occupancy": 0,
    SWP.format("swp1") + "/pool[index=4]/state/peak-occupancy": 196608,
    SWP.format("swp2") + "/pool[index=0]/state/occupancy": 96,
    SWP.format("swp2") + "/pool[index=0]/state/peak-occupancy": 96,
    SWP.format("swp2") + "/pool[index=4]/state/occupancy": 4032,
    SWP.format("swp2") + "/pool[index=4]/state/peak-occupancy": 4_000_000_000,
    SWP.format("swp1") + "/tc[index=0][type=ingress]/state/occupancy": 288,
    SWP.format("swp1") + "/tc[index=0][type=ingress]/state/peak-occupancy": 2880,
    SWP.format("swp1") + "/tc[index=0][type=egress]/state/occupancy": 0,
    SWP.format("swp1") + "/tc[index=0][type=egress]/state/peak-occupancy": 131072,
    SWP.format("swp1") + "/tc[index=3][type=egress]/state/occupancy": 65536,
    SWP.format("swp1") + "/tc[index=3][type=egress]/state/peak-occupancy": 1048576,
    SWP.format("swp2") + "/tc[index=0][type=egress]/state/occupancy": 144,
    SWP.format("swp2") + "/tc[index=0][type=egress]/state/peak-occupancy": 1440,
}


def test_source_maps_fixture_replies_to_exact_paths():
    source = _source("enabled: true, exclude: [swp3]")
    source.setup(_links("swp1", "swp2", "swp3", "eth0"))
    io = source.io
    assert source.info()["state"] == src.OK and source.ports == ["swp1", "swp2"]
    io.asked.clear()
    assert source.read() == 4 + 4  # (port, pool) and (port, TC) entries
    assert _values(source) == WANT  # swp3 excluded; port 7 has no netdev
    assert all(s.kind == GAUGE and s.container.origin == SWTEL_ORIGIN for s in source.table.specs)
    assert {s.port for s in source.table.specs} == {"swp1", "swp2"}
    # each poll: snapshot, the two dumps, then max-clear (this poll's max is the peak since the last)
    assert io.asked == [("exec", SNAPSHOT, [HANDLE]), ("dump", PORT_POOL_GET), ("dump", TC_BIND_GET),
                        ("exec", MAX_CLEAR, [HANDLE])]
    info = source.info()
    assert info["shared_buffers"] == ["pci/0000:03:00.0/0"] and info["devices"] == ["pci/0000:03:00.0"]
    assert info["pools"] == 4 and info["tcs"] == 4
    assert set(info["poll_us"]) == {"snapshot", "dump", "clear", "total"} and info["poll_max_us"] > 0
    assert source.errors == 0 and source.fault is None and not source.needs_setup
    # the same layout at the next link event: the same table, values kept
    table = source.table
    source.setup(_links("swp1", "swp2", "swp3", "eth0"))
    assert source.table is table and _values(source) == WANT
    # the entries in another order (taken by key, not by position): the same values on the same paths
    io.dumps[PORT_POOL_GET] = b"".join(reversed(_messages(fixture("port_pool"))))
    source.values[:] = array("Q", bytes(8 * len(source.values)))
    assert source.read() == 8 and _values(source) == WANT and not source.needs_setup


def _messages(buf: bytes) -> list[bytes]:
    out, off = [], 0
    while off < len(buf):
        length = struct.unpack_from("=I", buf, off)[0]
        out.append(buf[off:off + length])
        off += (length + 3) & ~3
    return out


def test_source_paths_follow_the_path_grammar():
    from agent.pathgrammar import split, split_origin

    source = _source()
    source.setup(_links("swp1", "swp2", "swp3"))
    origin, path = split_origin(source.table.paths[0])
    assert origin == "swtel" and split(path)[1] == ("interface", {"name": "swp1"})
    assert split(split_origin(SWP.format("swp1") + "/tc[index=3][type=egress]/state/occupancy")[1])[4] == (
        "tc", {"index": "3", "type": "egress"})


def test_a_new_entry_sets_up_again_and_a_gone_device_is_not_an_error():
    io = FakeIO()
    io.dumps[TC_BIND_GET] = fixture("empty")
    source = _source(io=io)
    source.setup(_links("swp1", "swp2"))
    assert len(source.table) == 8 and source.read() == 4 and not source.needs_setup
    io.dumps[TC_BIND_GET] = fixture("tc_bind")  # the driver now reports TC bindings
    assert source.read() == 4 and source.needs_setup  # the pools are still read
    source.setup(_links("swp1", "swp2"))
    assert len(source.table) == 16 and source.read() == 8
    # the device went away between setup and poll: set up again, no error
    io.acks[SNAPSHOT] = struct.pack("=IHHIIi", 20, 2, 0, 7, 0, -errno.ENODEV)
    assert source.read() == NO_DATA and source.needs_setup and source.errors == 0


def test_source_states_are_not_errors():
    cases = (
        (lambda io: setattr(io, "family_error", errno.ENOENT), src.NO_DEVLINK),
        (lambda io: io.dumps.clear(), src.NO_DEVICE),
        (lambda io: io.dumps.pop(SB_GET), src.NO_SB),
        (lambda io: io.dumps.update({PORT_POOL_GET: fixture("no_occupancy"), TC_BIND_GET: fixture("empty")}),
         src.NO_OCCUPANCY),
    )
    for change, state in cases:
        io = FakeIO()
        change(io)
        source = _source(io=io)
        source.setup(_links("swp1", "swp2"))
        assert source.info()["state"] == state
        assert len(source.table) == 0 and source.read() == 0  # an empty good poll: health stays OK
        assert source.errors == 0 and source.fault is None, state
        assert not any(a[0] == "exec" for a in io.asked)  # nothing snapshotted
        assert not source.needs_setup  # looked for again only after RETRY_S
        source._retry_at = time.monotonic()
        assert source.needs_setup
    source = _source()
    source.setup(_links("eth0"))  # a devlink device, but no selected interface is its port
    assert source.info()["state"] == src.NO_PORT and source.read() == 0 and source.errors == 0


def test_source_reports_failures_as_errors_and_no_data():
    io = FakeIO()
    source = _source(io=io)
    source.setup(_links("swp1", "swp2"))
    io.acks[SNAPSHOT] = fixture("eperm")
    assert source.read() == NO_DATA
    assert source.errors == 1 and "needs CAP_NET_ADMIN" in source.last_error
    io.acks[SNAPSHOT] = fixture("ack")
    io.raise_on = TC_BIND_GET
    assert source.read() == NO_DATA and source.errors == 2 and "devlink" in source.last_error
    io.raise_on = None
    io.dumps[PORT_POOL_GET] = fixture("dump_error")
    assert source.read() == NO_DATA and source.errors == 3
    io.dumps[PORT_POOL_GET] = b"\0" * 8
    assert source.read() == NO_DATA and source.errors == 4 and "truncated" in source.last_error
    io.dumps[PORT_POOL_GET] = fixture("port_pool")
    io.acks[MAX_CLEAR] = fixture("eperm")  # values taken; the peak not cleared: an error, set up again
    assert source.read() == 8 and source.errors == 5 and source.needs_setup
    # a setup that fails is an error and is tried again later
    io.raise_on = PORT_GET
    source.setup(_links("swp1", "swp2"))
    assert source.errors == 6 and len(source.table) == 0 and source.read() == NO_DATA
    assert source.info()["state"].startswith("setup failed: ") and source.fault is None


def test_config_defaults():
    section = config.parse("").sources.devlink
    assert section.enabled is False and float(section.interval) == 0.1
    assert section.interfaces == ["*"] and section.exclude == ["lo"]


# ---------------------------------------------------------------- the real kernel


def _socket() -> socket.socket:
    sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 16)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, struct.pack("ll", 1, 0))
    return sock


@pytest.mark.parametrize("impl", [_backend.reader, _fallback], ids=["active", "python"])
def test_family_on_this_kernel(impl):
    with _socket() as sock:
        try:
            family = impl.devlink_family(sock.fileno())
        except OSError as exc:
            assert exc.errno == errno.ENOENT  # no devlink driver loaded (this machine: veth only)
            return
        assert family >= 0x10
        # a kernel with devlink: the dumps are well formed whatever devices there are
        for cmd in (PORT_GET, SB_GET, PORT_POOL_GET, TC_BIND_GET):
            impl.devlink_parse(impl.devlink_dump(sock.fileno(), family, cmd))


@pytest.mark.parametrize("impl", [_backend.reader, _fallback], ids=["active", "python"])
def test_exec_gets_each_request_its_own_answer_from_this_kernel(impl):
    """devlink_exec's requests, each answered before the next is sent (genl.h genl_batch),
    sent to the ethtool family (always there), which refuses them: one error answer per
    handle, in order, each raised by the parser."""
    with _socket() as sock:
        try:
            family = impl.ethnl_family(sock.fileno())
        except OSError as exc:
            assert exc.errno == errno.ENOENT  # a kernel without ethtool netlink
            return
        handles = [HANDLE, ("pci", "0000:04:00.0", 1), ("netdevsim", "netdevsim1", 2)]
        replies = impl.devlink_exec(sock.fileno(), family, SNAPSHOT, handles)
    assert len(replies) == len(handles)
    for raw in replies:
        with pytest.raises(OSError) as refused:
            impl.devlink_parse(raw)
        assert refused.value.errno not in (0, None, errno.EIO)  # the kernel's own refusal


