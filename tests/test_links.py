"""The link listener: ``link_parse`` in both backends (agent/_ext/links.c and
agent/_fallback/links.py, which decodes with pyroute2) and ``LinkTracker`` on the real kernel.

* Real dumps in a fresh namespace: both parsers give the same tuples, and those match
  ``socket.if_nameindex()``, the veth kind and ``ip link set up/down``.
* ``LinkTracker`` in a namespace follows add/rename/down/delete within 2 s, ignores a
  bridge's per-port (AF_BRIDGE) messages, recovers from a socket overflow with a full
  dump, and stops at once.
* Hostile buffers: both parsers raise or skip alike; hypothesis checks they agree on
  mutated buffers.
* With the C backend, the agent never imports pyroute2 (about 10 MiB of RSS).
"""

from __future__ import annotations

import errno
import os
import socket
import struct
import subprocess
import sys
import time
from collections.abc import Callable
from types import ModuleType

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agent import _backend, _fallback, links
from agent.links import LinkTracker
from tests.helpers import wait_until
from tests.netns import ROOT, delete_namespace, in_namespace, new_namespace, sh

NLMSG_ERROR, NLMSG_DONE = 2, 3
RTM_NEWLINK, RTM_DELLINK, RTM_NEWADDR = 16, 17, 20
IFLA_IFNAME, IFLA_MTU, IFLA_OPERSTATE, IFLA_LINKINFO, IFLA_CARRIER_CHANGES = 3, 4, 16, 18, 35
IFLA_INFO_KIND, IFLA_INFO_DATA = 1, 2
IF_OPER_DOWN, IF_OPER_LOWERLAYERDOWN, IF_OPER_UP = 2, 3, 6
IFF_UP = 0x1
AF_BRIDGE = 7
NLA_F_NESTED = 0x8000

root = pytest.mark.root


def c_parser() -> ModuleType:
    """The C extension (even when SWTEL_PUREPYTHON picked the fallback), or a skip."""
    try:
        return _backend._load_c()
    except ImportError as exc:
        pytest.skip(f"C extension not loaded: {exc}")


# ---------------------------------------------------------------- message builders


def rta(rta_type: int, payload: bytes) -> bytes:
    raw = struct.pack("=HH", 4 + len(payload), rta_type) + payload
    return raw + bytes(-len(raw) % 4)


def nlmsg(mtype: int, payload: bytes, seq: int = 0) -> bytes:
    raw = struct.pack("=IHHII", 16 + len(payload), mtype, 0, seq, 0) + payload
    return raw + bytes(-len(raw) % 4)


def ifinfo(ifindex: int, flags: int = IFF_UP, family: int = 0) -> bytes:
    return struct.pack("=BxHiII", family, 1, ifindex, flags, 0)


def link_msg(
    ifindex: int,
    name: bytes = b"",
    *,
    attrs: bytes = b"",
    mtype: int = RTM_NEWLINK,
    flags: int = IFF_UP,
    family: int = 0,
) -> bytes:
    named = rta(IFLA_IFNAME, name + b"\0") if name else b""
    return nlmsg(mtype, ifinfo(ifindex, flags, family) + named + attrs)


def error_msg(error: int, mtype: int = NLMSG_ERROR) -> bytes:
    return nlmsg(mtype, struct.pack("=i", error) + bytes(16))  # the error and the request's header


def linkinfo(kind: bytes) -> bytes:
    nest = rta(IFLA_INFO_KIND, kind + b"\0") + rta(IFLA_INFO_DATA, rta(1, bytes(8)))
    return rta(IFLA_LINKINFO | NLA_F_NESTED, nest)


def full_link(ifindex: int, name: bytes, kind: bytes, oper: int, carrier: int) -> bytes:
    attrs = (
        rta(IFLA_MTU, struct.pack("=I", 1500))
        + rta(IFLA_OPERSTATE, bytes([oper]))
        + linkinfo(kind)
        + rta(IFLA_CARRIER_CHANGES, struct.pack("=I", carrier))
    )
    return link_msg(ifindex, name, attrs=attrs)


SEED = (
    full_link(1, b"lo", b"", 0, 0)
    + full_link(7, b"swp1", b"veth", IF_OPER_UP, 3)
    + link_msg(8, b"swp2", mtype=RTM_DELLINK)
    + nlmsg(NLMSG_DONE, struct.pack("=i", 0))
)


# ---------------------------------------------------------------- hostile buffers


def outcome(parse: Callable, buf) -> tuple:
    """A comparable result: the value, or the exception's type and what it says."""
    try:
        return ("ok", parse(buf))
    except OSError as exc:
        return ("OSError", type(exc), exc.errno, exc.strerror)
    except ValueError as exc:
        return ("ValueError", str(exc))


def both(buf) -> tuple:
    """The C and Python outcomes, asserted equal."""
    py = outcome(_fallback.link_parse, buf)
    c = outcome(c_parser().link_parse, buf)
    assert c == py
    return py


def link_tuple(
    ifindex: int,
    name: str = "",
    *,
    mtype: int = RTM_NEWLINK,
    flags: int = IFF_UP,
    oper: int = 0,
    kind: str = "",
    carrier: int = 0,
) -> tuple:
    return (mtype, ifindex, flags, name, oper, kind, carrier)


GOOD = link_msg(3, b"eth0")
HOSTILE = {
    "empty": (b"", ("ok", ([], False))),
    "truncated header": (GOOD[:10], ("ValueError", "truncated netlink message header")),
    "garbage after a message": (
        GOOD + b"\1\2\3",
        ("ValueError", "truncated netlink message header"),
    ),
    "nlmsg_len below 16": (
        struct.pack("=IHHII", 8, RTM_NEWLINK, 0, 0, 0) + bytes(32),
        ("ValueError", "netlink message length 8 at offset 0: 48 bytes left"),
    ),
    "nlmsg_len past the buffer": (
        GOOD + struct.pack("=IHHII", 400, RTM_NEWLINK, 0, 0, 0),
        ("ValueError", f"netlink message length 400 at offset {len(GOOD)}: 16 bytes left"),
    ),
    "link message without its ifinfomsg": (
        nlmsg(RTM_NEWLINK, bytes(8)),
        ("ValueError", "link message too short for its ifinfomsg"),
    ),
    "error message without its code": (
        nlmsg(NLMSG_ERROR, b""),
        ("ValueError", "NLMSG_ERROR too short for its error code"),
    ),
    "NLMSG_ERROR -EPERM": (
        GOOD + error_msg(-errno.EPERM),
        ("OSError", PermissionError, errno.EPERM, os.strerror(errno.EPERM)),
    ),
    "NLMSG_ERROR positive": (error_msg(7), ("OSError", OSError, errno.EIO, os.strerror(errno.EIO))),
    "ACK is no error": (GOOD + error_msg(0) + GOOD, ("ok", ([link_tuple(3, "eth0")] * 2, False))),
    "dump done": (
        GOOD + nlmsg(NLMSG_DONE, struct.pack("=i", 0)),
        ("ok", ([link_tuple(3, "eth0")], True)),
    ),
    "dump done without payload": (nlmsg(NLMSG_DONE, b""), ("ok", ([], True))),
    "dump failed in NLMSG_DONE": (
        error_msg(-errno.EINTR, NLMSG_DONE),
        ("OSError", InterruptedError, errno.EINTR, os.strerror(errno.EINTR)),
    ),
    "rta_len 0 ends the attributes": (
        link_msg(4, b"a", attrs=struct.pack("=HH", 0, IFLA_OPERSTATE) + rta(IFLA_OPERSTATE, b"\6")),
        ("ok", ([link_tuple(4, "a")], False)),
    ),
    "rta_len past the message": (
        link_msg(
            4, attrs=rta(IFLA_OPERSTATE, b"\6") + struct.pack("=HH", 60, IFLA_IFNAME) + b"abcd"
        ),
        ("ok", ([link_tuple(4, oper=IF_OPER_UP)], False)),
    ),
    "attributes too short for their type are ignored": (
        link_msg(
            4,
            attrs=rta(IFLA_OPERSTATE, b"")
            + rta(IFLA_CARRIER_CHANGES, b"\1\2")
            + rta(IFLA_CARRIER_CHANGES, struct.pack("=I", 9)),
        ),
        ("ok", ([link_tuple(4, carrier=9)], False)),
    ),
    "the first of a repeated attribute wins": (
        link_msg(
            4, b"one", attrs=rta(IFLA_IFNAME, b"two\0") + linkinfo(b"veth") + linkinfo(b"bond")
        ),
        ("ok", ([link_tuple(4, "one", kind="veth")], False)),
    ),
    "operstate beyond RFC 2863 reads as unknown": (
        link_msg(4, attrs=rta(IFLA_OPERSTATE, b"\x09")),
        ("ok", ([link_tuple(4)], False)),
    ),
    "a name ends at its first NUL": (
        link_msg(4, attrs=rta(IFLA_IFNAME, b"ab\0cd")),
        ("ok", ([link_tuple(4, "ab")], False)),
    ),
    "a name without NUL": (
        link_msg(4, attrs=rta(IFLA_IFNAME, b"abcd")),
        ("ok", ([link_tuple(4, "abcd")], False)),
    ),
    "a name that is not UTF-8": (
        link_msg(4, b"p\xff"),
        ("ok", ([link_tuple(4, os.fsdecode(b"p\xff"))], False)),
    ),
    "a bad length inside IFLA_LINKINFO": (
        link_msg(
            4,
            attrs=rta(IFLA_LINKINFO, struct.pack("=HH", 2, IFLA_INFO_KIND) + b"veth")
            + rta(IFLA_OPERSTATE, b"\2"),
        ),
        ("ok", ([link_tuple(4, oper=IF_OPER_DOWN)], False)),
    ),
    "a bridge port's AF_BRIDGE messages are skipped": (
        link_msg(4, b"swp1", family=AF_BRIDGE)
        + link_msg(4, b"swp1", mtype=RTM_DELLINK, family=AF_BRIDGE),
        ("ok", ([], False)),
    ),
    "other message types are skipped": (
        nlmsg(RTM_NEWADDR, bytes(8)) + GOOD,
        ("ok", ([link_tuple(3, "eth0")], False)),
    ),
    "the last message's padding may be missing": (  # nlmsg_len 39, 39 bytes
        nlmsg(RTM_NEWLINK, ifinfo(5) + struct.pack("=HH", 7, IFLA_IFNAME) + b"abc")[:-1],
        ("ok", ([link_tuple(5, "abc")], False)),
    ),
    "delete": (
        link_msg(5, b"x", mtype=RTM_DELLINK, flags=0),
        ("ok", ([link_tuple(5, "x", mtype=RTM_DELLINK, flags=0)], False)),
    ),
    "seed": (
        SEED,
        (
            "ok",
            (
                [
                    link_tuple(1, "lo"),
                    link_tuple(7, "swp1", oper=IF_OPER_UP, kind="veth", carrier=3),
                    link_tuple(8, "swp2", mtype=RTM_DELLINK),
                ],
                True,
            ),
        ),
    ),
}


@pytest.mark.parametrize("buf,expected", HOSTILE.values(), ids=HOSTILE.keys())
def test_hostile_buffers_both_backends(buf, expected):
    assert both(buf) == expected


def test_python_parser_alone_on_hostile_buffers():
    """The fallback's answers without the C extension (the C half of the test above may skip)."""
    for buf, expected in HOSTILE.values():
        assert outcome(_fallback.link_parse, buf) == expected


def test_any_buffer_protocol_object():
    expected = ([link_tuple(3, "eth0")], False)
    for wrapped in (bytearray(GOOD), memoryview(GOOD), memoryview(b"xx" + GOOD)[2:]):
        assert c_parser().link_parse(wrapped) == _fallback.link_parse(wrapped) == expected
    for bad in ("text", 5, None):
        for parse in (c_parser().link_parse, _fallback.link_parse):
            with pytest.raises(TypeError):
                parse(bad)


def _mutate(seed: bytes, cut: int, edits: list[tuple[int, int]]) -> bytes:
    out = bytearray(seed[: cut % (len(seed) + 1)] or seed)
    for pos, value in edits:
        out[pos % len(out)] = value
    return bytes(out)


@settings(deadline=None, suppress_health_check=list(HealthCheck), database=None, max_examples=400)
@given(
    st.one_of(
        st.binary(max_size=512),
        st.builds(
            _mutate,
            st.just(SEED),
            st.integers(0, 4096),
            st.lists(st.tuples(st.integers(0, 4095), st.integers(0, 255)), max_size=6),
        ),
    )
)
def test_backends_agree_on_mutated_buffers(data):
    both(data)


# ---------------------------------------------------------------- the real kernel


@pytest.fixture
def ns():
    name = new_namespace("l")
    try:
        yield name
    finally:
        delete_namespace(name)


def dump_chunks() -> list[bytes]:
    """The raw replies to one RTM_GETLINK dump (the request agent/links.py sends)."""
    chunks = []
    with socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, socket.NETLINK_ROUTE) as sock:
        sock.bind((0, 0))
        sock.send(links._dump_request(1))
        while True:
            chunks.append(sock.recv(1 << 16))
            if _fallback.link_parse(chunks[-1])[1]:
                return chunks


@pytest.fixture(params=["python", "C"])
def parser(request) -> ModuleType:
    """Each backend's link_parse (C skips when the extension is not built)."""
    return _fallback if request.param == "python" else c_parser()


def parsed_dump(ns: str, parser: ModuleType) -> dict[int, tuple]:
    """ns's links by ifindex as ``parser`` reads a dump (checked against the fallback)."""
    out = {}
    for chunk in in_namespace(ns, dump_chunks):
        result = parser.link_parse(chunk)
        assert result == _fallback.link_parse(chunk)
        out.update((fields[1], fields) for fields in result[0])
    return out


def until_event(predicate: Callable[[], object], what: str):
    """A link event's effect, seen within 2 s (polled every 10 ms)."""
    return wait_until(predicate, 2.0, what, interval=0.01)


@root
def test_real_dump_matches_the_kernel(ns, parser):
    sh("ip", "link", "add", "la", "type", "veth", "peer", "name", "lb", ns=ns)
    sh("ip", "link", "add", "lc", "type", "veth", "peer", "name", "ld", ns=ns)
    got = parsed_dump(ns, parser)
    assert {i: f[3] for i, f in got.items()} == dict(in_namespace(ns, socket.if_nameindex))
    kinds = {f[3]: f[5] for f in got.values()}
    assert kinds == {"lo": "", "la": "veth", "lb": "veth", "lc": "veth", "ld": "veth"}
    assert all(f[0] == RTM_NEWLINK for f in got.values())


@root
def test_real_dump_follows_ip_link_set_up_and_down(ns, parser):
    sh("ip", "link", "add", "la", "type", "veth", "peer", "name", "lb", ns=ns)

    def state(name: str) -> tuple[bool, int]:
        fields = next(f for f in parsed_dump(ns, parser).values() if f[3] == name)
        return bool(fields[2] & IFF_UP), fields[4]

    assert state("la") == state("lb") == (False, IF_OPER_DOWN)
    sh("ip", "link", "set", "la", "up", ns=ns)  # its peer is down: no carrier
    until_event(lambda: state("la") == (True, IF_OPER_LOWERLAYERDOWN), "la up, lower layer down")
    sh("ip", "link", "set", "lb", "up", ns=ns)
    until_event(lambda: state("la") == state("lb") == (True, IF_OPER_UP), "both ends up")
    sh("ip", "link", "set", "la", "down", ns=ns)
    until_event(
        lambda: (
            state("la") == (False, IF_OPER_DOWN) and state("lb") == (True, IF_OPER_LOWERLAYERDOWN)
        ),
        "la down, lb without carrier",
    )


def _names(tracker: LinkTracker) -> dict[int, str]:
    return {i: link.name for i, link in tracker.links().items()}


def _by_name(tracker: LinkTracker, name: str) -> links.Link | None:
    return next((link for link in tracker.links().values() if link.name == name), None)


def _started(ns: str) -> LinkTracker:
    tracker = LinkTracker()
    in_namespace(ns, tracker.start)  # its sockets and listener thread live in ns
    return tracker


def _stop_promptly(tracker: LinkTracker) -> None:
    t0 = time.monotonic()
    tracker.stop()
    assert time.monotonic() - t0 < 1.0
    assert tracker._thread is not None and not tracker._thread.is_alive()


@root
def test_tracker_follows_add_rename_down_and_delete(ns):
    sh("ip", "link", "add", "la", "type", "veth", "peer", "name", "lb", ns=ns)
    tracker = _started(ns)
    try:
        assert tracker._thread is not None and tracker._thread.name == "swtel-links"
        assert _names(tracker) == dict(in_namespace(ns, socket.if_nameindex))
        la = _by_name(tracker, "la")
        assert la is not None and la.kind == "veth" and la.oper_status == "DOWN" and not la.admin_up

        gen = tracker.generation
        sh("ip", "link", "add", "lc", "type", "veth", "peer", "name", "ld", ns=ns)
        until_event(
            lambda: tracker.generation > gen and {"lc", "ld"} <= set(_names(tracker).values()),
            "add",
        )

        gen = tracker.generation
        sh("ip", "link", "set", "lc", "name", "le", ns=ns)
        until_event(
            lambda: (
                tracker.generation > gen
                and "le" in _names(tracker).values()
                and "lc" not in _names(tracker).values()
            ),
            "rename",
        )

        sh("ip", "link", "set", "le", "up", ns=ns)
        sh("ip", "link", "set", "ld", "up", ns=ns)
        until_event(
            lambda: (le := _by_name(tracker, "le")) and le.admin_up and le.oper_status == "UP", "up"
        )
        gen = tracker.generation
        sh("ip", "link", "set", "le", "down", ns=ns)
        until_event(
            lambda: (
                tracker.generation > gen
                and (le := _by_name(tracker, "le"))
                and not le.admin_up
                and le.oper_status == "DOWN"
            ),
            "set down",
        )

        gen = tracker.generation
        sh("ip", "link", "del", "le", ns=ns)
        until_event(
            lambda: tracker.generation > gen and not {"le", "ld"} & set(_names(tracker).values()),
            "delete (both ends of the veth)",
        )
        assert _names(tracker) == dict(in_namespace(ns, socket.if_nameindex))
        generation, snapshot = tracker.snapshot()
        assert generation == tracker.generation and snapshot == tracker.links()
    finally:
        _stop_promptly(tracker)


@root
def test_tracker_ignores_a_bridge_ports_own_messages(ns):
    """Enslaving, a bridge-port setting and leaving the bridge send AF_BRIDGE RTM_NEWLINK/
    RTM_DELLINK for the port: none of them may remove it or blank its kind."""
    sh("ip", "link", "add", "la", "type", "veth", "peer", "name", "lb", ns=ns)
    sh("ip", "link", "add", "lbr", "type", "bridge", ns=ns)
    tracker = _started(ns)
    try:
        for step, cmd in enumerate(
            [("master", "lbr"), ("type", "bridge_slave", "cost", "7"), ("nomaster",)]
        ):
            sh("ip", "link", "set", "la", *cmd, ns=ns)
            # Events arrive in order: once this marker is seen, the step's messages were applied.
            sh("ip", "link", "add", f"m{step}", "type", "veth", "peer", "name", f"n{step}", ns=ns)
            until_event(lambda s=step: f"n{s}" in _names(tracker).values(), f"marker {step}")
            la = _by_name(tracker, "la")
            assert la is not None and la.kind == "veth", (cmd, la)
    finally:
        _stop_promptly(tracker)


def _count_refreshes(tracker: LinkTracker) -> list[float]:
    """Times of the tracker's full re-reads from now on."""
    refreshes: list[float] = []
    original_refresh = tracker.refresh

    def counted_refresh() -> None:
        refreshes.append(time.monotonic())
        original_refresh()

    tracker.refresh = counted_refresh
    return refreshes


@root
def test_tracker_rereads_everything_after_the_event_queue_overflows(ns):
    tracker = _started(ns)
    refreshes = _count_refreshes(tracker)
    try:
        assert tracker._events is not None
        tracker._events.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1)  # the kernel's minimum
        # The listener blocks on the lock while applying: events pile up and overflow.
        with tracker._lock:
            batch = "".join(f"link add o{i} type veth peer name p{i}\n" for i in range(40))
            subprocess.run(["ip", "-n", ns, "-batch", "-"], input=batch, text=True, check=True)
        until_event(lambda: refreshes, "a full re-read after ENOBUFS")
        kernel = dict(in_namespace(ns, socket.if_nameindex))
        assert len(kernel) == 81
        until_event(lambda: _names(tracker) == kernel, "the tracker to match the kernel")
    finally:
        _stop_promptly(tracker)


@root
def test_tracker_survives_messages_larger_than_its_buffer(ns, monkeypatch):
    monkeypatch.setattr(links, "_RECV_SIZE", 64)  # smaller than any link message
    tracker = _started(ns)  # the dump grows its buffer and starts over
    refreshes = _count_refreshes(tracker)
    try:
        assert _names(tracker) == dict(in_namespace(ns, socket.if_nameindex))
        sh("ip", "link", "add", "la", "type", "veth", "peer", "name", "lb", ns=ns)
        until_event(lambda: refreshes, "a full re-read after a cut event")
        kernel = dict(in_namespace(ns, socket.if_nameindex))
        until_event(lambda: _names(tracker) == kernel, "the tracker to match the kernel")
        sh("ip", "link", "set", "la", "name", "lc", ns=ns)  # the grown buffer takes whole events
        until_event(lambda: "lc" in _names(tracker).values(), "rename")
    finally:
        _stop_promptly(tracker)


def test_stop_without_start_and_twice():
    tracker = LinkTracker()
    tracker.stop()
    tracker.stop()


# ---------------------------------------------------------------- memory


def test_c_backend_agent_never_imports_pyroute2():
    c_parser()  # skips when the extension is not built
    code = (
        "import sys\n"
        "import agent.runner\n"
        "from agent import _backend\n"
        "from agent.links import LinkTracker\n"
        "t = LinkTracker(); t.start(); t.stop()\n"
        "print(_backend.NAME, sorted(m for m in sys.modules if m.split('.')[0] == 'pyroute2'))\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "SWTEL_PUREPYTHON"}
    env["PYTHONPATH"] = str(ROOT)
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=ROOT, check=True
    )
    assert out.stdout.split() == ["C", "[]"], out.stdout + out.stderr
