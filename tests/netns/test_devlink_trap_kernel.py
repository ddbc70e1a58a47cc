"""devlink traps on the running kernel: an agent in a namespace without devlink reports it,
healthy (needs root)."""

from __future__ import annotations

import struct

import pytest

from agent import _backend
from agent.sources import devlink_trap as src
from tests.namespaces import delete_namespace, new_namespace, polled_alone, sh
from tests.unit.test_devlink_trap import TRAP_GET, TRAP_GROUP_GET, root


def _has_devlink() -> bool:
    import socket

    with socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 16) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, struct.pack("ll", 1, 0))
        try:
            family = _backend.reader.devlink_family(sock.fileno())
        except OSError:
            return False
        for cmd in (TRAP_GET, TRAP_GROUP_GET):  # whatever devices there are, the dumps are well formed
            _backend.reader.devlink_trap_parse(_backend.reader.devlink_dump(sock.fileno(), family, cmd))
    return True


@root
def test_agent_shows_no_devlink_with_health_ok():
    if _has_devlink():
        pytest.skip("this kernel has devlink: the state differs")
    ns = new_namespace("t")
    sh("ip", "link", "add", "ve0", "type", "veth", "peer", "name", "ve1", ns=ns)
    try:
        status, problems = polled_alone(ns, "devlink_trap")
        assert status["state"] == src.NO_DEVLINK and status["set_to_drop"] == []
        assert status["errors"] == 0 and status["fault"] is None and status["counters"] == 0
        assert problems == []
    finally:
        delete_namespace(ns)
