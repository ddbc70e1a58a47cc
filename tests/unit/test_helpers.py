"""tests/helpers.py itself: a wait that gives up says what it waited for, and the config
writers produce what the agent's loader reads as intended."""

from __future__ import annotations

import time

import pytest

from agent import config
from tests.helpers import OFF, agent_yaml, asic_yaml, wait_until

# pure Python and the libraries (protobuf, YAML): no backend in it
pytestmark = pytest.mark.libs


def test_wait_until_returns_the_first_truthy_result():
    seen = []

    def third() -> str | None:
        seen.append(1)
        return "ok" if len(seen) == 3 else None

    assert wait_until(third, 5, "the third call", interval=0.001) == "ok"
    assert len(seen) == 3


def test_wait_until_names_what_it_waited_for_and_tries_at_the_deadline():
    calls = []
    t0 = time.monotonic()
    with pytest.raises(AssertionError, match=r"timed out after 0.05 s waiting for the moon\nlog: x"):
        wait_until(lambda: calls.append(1), 0.05, "the moon", interval=0.01, detail=lambda: "log: x")
    assert time.monotonic() - t0 >= 0.05  # it waited its timeout out
    assert len(calls) >= 2  # at least the first try and the one at the deadline


def test_an_asic_config_reads_as_written(tmp_path):
    text = asic_yaml(tmp_path, "sim", "role=spine seed=1", asic=", interval: 200ms", netdev="{interfaces: [v0]}",
                     system=OFF, interval="100ms", control=", health_grace: 1s",
                     exporters="  server: {listen: '127.0.0.1:1', insecure: true}\n", head="target: t1\n")
    cfg = config.parse(text)
    assert cfg.target == "t1" and cfg.interval == 0.1
    assert cfg.sources.netdev.interfaces == ["v0"] and not cfg.sources.ethtool.enabled
    assert not cfg.sources.system.enabled
    asic = cfg.sources.asic
    assert asic.enabled and asic.plugin == "sim" and asic.config == "role=spine seed=1" and asic.interval == 0.2
    assert cfg.control.socket == str(tmp_path / "swtel.sock") and cfg.control.health_grace == 1.0
    assert cfg.exporters.jsonl.path == str(tmp_path / "out.jsonl") and cfg.exporters.server is not None


def test_agent_yaml_keeps_the_sources_in_order(tmp_path):
    text = agent_yaml(tmp_path, {"netdev": OFF, "system": "{interval: 1s}"}, extra="log: {level: debug}\n")
    assert text.index("  netdev: ") < text.index("  system: ") < text.index("exporters:") < text.index("log:")
    assert config.parse(text).sources.system.interval == 1.0
