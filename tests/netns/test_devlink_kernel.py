"""devlink's shared buffer on the running kernel: a dump spanning datagrams, and an agent in a
namespace without devlink (needs root)."""

from __future__ import annotations

import pytest

from agent import _backend, _fallback
from agent.sources import devlink as src
from tests.namespaces import delete_namespace, in_namespace, new_namespace, polled_alone, sh
from tests.unit.test_devlink import SB_GET, _socket, root


def _has_devlink() -> bool:
    with _socket() as sock:
        try:
            _backend.reader.devlink_family(sock.fileno())
        except OSError:
            return False
    return True


@root
def test_a_dump_spanning_datagrams_is_gathered_whole_by_both_backends():
    """devlink_dump on an ethtool netlink dump (ETHTOOL_MSG_FEATURES_GET is 11, as
    DEVLINK_CMD_SB_GET): one message per link, over several datagrams, parsed alike."""
    ns = new_namespace("d")
    try:
        for i in range(60):
            sh("ip", "link", "add", f"va{i}", "type", "veth", "peer", "name", f"vb{i}", ns=ns)

        def ask(impl):
            with _socket() as sock:
                family = impl.ethnl_family(sock.fileno())
                return impl.devlink_dump(sock.fileno(), family, SB_GET)

        raw = in_namespace(ns, lambda: ask(_backend.reader))
        msgs = _backend.reader.devlink_parse(raw)
        assert len(msgs) == 121 and len(raw) > 65536  # lo and 120 veths: more than one datagram
        other = _fallback if _backend.reader is not _fallback else None
        if other is not None:
            assert other.devlink_parse(in_namespace(ns, lambda: ask(other))) == msgs
    finally:
        delete_namespace(ns)


@root
def test_agent_shows_no_devlink_with_health_ok():
    if _has_devlink():
        pytest.skip("this kernel has devlink: the state differs")
    ns = new_namespace("d")
    sh("ip", "link", "add", "ve0", "type", "veth", "peer", "name", "ve1", ns=ns)
    try:
        status, problems = polled_alone(ns, "devlink")
        assert status["state"] == src.NO_DEVLINK and status["shared_buffers"] == []
        assert status["errors"] == 0 and status["fault"] is None and status["counters"] == 0
        assert problems == []
    finally:
        delete_namespace(ns)
