"""The tick loop's schedule: sources with one interval are polled in one pass per interval
even when their phases differ by a hair, each keeping its own schedule; in-process, on lo."""

from __future__ import annotations

import time

import pytest

from agent import config
from agent.engine import Engine

pytestmark = pytest.mark.nolibs  # no versioned library decides its outcome: not in the Debian pass


def _engine(tmp_path) -> Engine:
    cfg = config.parse(
        "interval: 50ms\n"
        "sources: {netdev: {interfaces: [lo], exclude: []}, ethtool: {enabled: false}, "
        "system: {interval: 50ms}}\n"
        f"control: {{socket: {tmp_path}/swtel.sock, group: null}}\n"
    )
    return Engine(cfg)


def _reads(engine: Engine) -> dict[str, int]:
    return {r.name: r.reads for r in engine._runners}


def test_sources_a_hair_out_of_phase_share_one_pass_per_interval(tmp_path):
    engine = _engine(tmp_path)
    engine.start()
    try:
        assert engine.ready.wait(5.0)
        time.sleep(0.2)
        # Shift one source's phase by 0.4 ms, as drifting wake-ups or a link event can.
        system = next(r for r in engine._runners if r.name == "system")
        system.next_due += 0.0004
        reads0, ticks0 = _reads(engine), engine.ticks
        time.sleep(2.0)
        reads1, ticks1 = _reads(engine), engine.ticks
    finally:
        engine.stop()
    polled = {k: reads1[k] - reads0[k] for k in reads1}
    passes = ticks1 - ticks0
    assert 30 <= polled["netdev"] <= 45 and 30 <= polled["system"] <= 45, polled
    # one pass per interval, not two: the later source is polled in the earlier one's pass
    assert passes <= polled["netdev"] + 2, (passes, polled)
