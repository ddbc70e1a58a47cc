"""Link events from the running kernel: the rtnetlink dump and the tracker against ip link add,
rename, up, down and delete in a namespace (needs root)."""

from __future__ import annotations

import socket
import subprocess
import time
from collections.abc import Callable
from types import ModuleType

import pytest

from agent import _fallback, links
from agent.links import LinkTracker
from tests.helpers import wait_until
from tests.namespaces import delete_namespace, in_namespace, new_namespace, sh
from tests.unit.test_links import (
    IF_OPER_DOWN,
    IF_OPER_LOWERLAYERDOWN,
    IF_OPER_UP,
    IFF_UP,
    RTM_NEWLINK,
    c_parser,
    root,
)


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
    """A link event's effect, waited for (polled every 10 ms; 30 s bound a failure)."""
    return wait_until(predicate, 30.0, what, interval=0.01)


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
    # The listener sleeps in poll() without a timeout: it ends only if stop() wakes it (the
    # bound is a failure bound, not a measure of how quickly)
    tracker.stop()
    assert tracker._thread is not None
    wait_until(lambda: not tracker._thread.is_alive(), 30, "the listener thread to end")


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
