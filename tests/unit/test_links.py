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
import struct
import subprocess
import sys
from collections.abc import Callable
from types import ModuleType

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agent import _backend, _fallback
from agent.links import LinkTracker
from tests.namespaces import ROOT

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


# ---------------------------------------------------------------- names that are not text


@pytest.mark.parametrize("raw,shown", [
    (b"swp\xff", "swp%FF"),  # not UTF-8
    (b"sw\x01p", "sw%01p"),  # a control character
    (b"\xc3\xbcp\xe2\x80\xae1", "\u00fcp%E2%80%AE1"),  # UTF-8 text kept, a bidi override escaped
    (b"x]y\\z=", "x]y\\z="),  # text: the path grammar escapes ']' and '\\' in key values
    (b"swp1", "swp1"),
])
def test_a_kernel_name_is_escaped_once_and_kept_as_bytes_both_backends(raw, shown):
    from agent.links import _link

    buf = full_link(9, raw, b"veth", IF_OPER_UP, 1)
    kind, (links, _done) = both(buf)  # both parsers give the same tuple
    assert kind == "ok" and len(links) == 1
    link = _link(links[0])
    assert (link.name, link.raw, link.kernel_name) == (shown, raw, raw)
    assert link.escaped == (shown != raw.decode("utf-8", "replace"))
    assert link.name.isprintable()


def test_a_test_made_link_hands_the_kernel_its_unescaped_name():
    from agent.links import Link

    assert Link(3, "swp%FF", "UP", True).kernel_name == b"swp\xff"
    assert Link(3, "swp1", "UP", True).kernel_name == b"swp1"
