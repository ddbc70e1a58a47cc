"""The tick loop's schedule: sources with one interval are polled in one pass per interval
even when their phases differ by a hair, each keeping its own schedule; a stalled poll skips
the ticks it missed and counts them, never bursts to catch up. Driven in-process on lo with
a fake clock (Engine(clock=...)) and the loop's waits moving it: the schedule is logic, not a
race with the machine's load."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from agent import config
from agent.engine import Engine
from tests.helpers import FakeClock

pytestmark = pytest.mark.nolibs  # no versioned library decides its outcome: not in the Debian pass

INTERVAL_S = 0.05
WAKE_LATE_S = 0.0001  # the loop wakes a little after it asked to, as a real one does


@pytest.fixture
def engine(tmp_path) -> Iterator[tuple[Engine, FakeClock]]:
    cfg = config.parse(
        "interval: 50ms\n"
        "sources: {netdev: {interfaces: [lo], exclude: []}, ethtool: {enabled: false}, "
        "system: {interval: 50ms}}\n"
        f"control: {{socket: {tmp_path}/swtel.sock, group: null}}\n"
    )
    clock = FakeClock()
    eng = Engine(cfg, clock=clock)
    # What start() does, minus the thread: the test runs the loop's passes itself.
    eng.links.start()
    eng._polled = eng._make_polled(cfg)
    try:
        yield eng, clock
    finally:
        eng.links.stop()
        for r in eng._polled:
            r.source.close()


class _Waits:
    """Stands in for the engine's stop and wake events while the test runs its loop: each wait moves
    the fake clock by what the loop asked for (and a little more, as a real wake-up is late);
    the loop ends once ``seconds`` of fake time have passed."""

    def __init__(self, clock: FakeClock, seconds: float) -> None:
        self.clock, self.end = clock, clock.t + seconds

    def is_set(self) -> bool:
        return self.clock.t >= self.end

    def wait(self, timeout: float) -> bool:
        self.clock.t += timeout + WAKE_LATE_S
        return self.is_set()

    def clear(self) -> None:  # as the handoff's wake event: nobody asks in these tests
        pass

    def set(self) -> None:
        pass


def _run(eng: Engine, clock: FakeClock, seconds: float) -> None:
    """The engine's own loop, on this thread, for ``seconds`` of fake time."""
    waits = _Waits(clock, seconds)
    # the loop idles on the handoff's wake event (status requests are served between passes)
    # and checks the stop event: both are the fake clock's here
    stop, wake = eng._stop, eng.handoff.wake
    eng._stop = eng.handoff.wake = waits  # type: ignore[assignment]
    try:
        eng._loop()
    finally:
        eng._stop, eng.handoff.wake = stop, wake
    assert eng.loop_error is None, eng.loop_error


def _reads(eng: Engine) -> dict[str, int]:
    return {r.name: r.reads for r in eng._polled}


def test_sources_a_hair_out_of_phase_share_one_pass_per_interval(engine):
    eng, clock = engine
    _run(eng, clock, 0.2)
    assert eng.ready.is_set()
    # Shift one source's phase by 0.4 ms, as drifting wake-ups or a link event can.
    system = next(r for r in eng._polled if r.name == "system")
    system.next_due += 0.0004
    reads0, ticks0 = _reads(eng), eng.ticks
    _run(eng, clock, 2.0)
    polled = {k: v - reads0[k] for k, v in _reads(eng).items()}
    passes = eng.ticks - ticks0
    # each source keeps its own 50 ms schedule: 40 polls in 2 s
    assert 39 <= polled["netdev"] <= 41 and 39 <= polled["system"] <= 41, polled
    # one pass per interval, not two: the later source is polled in the earlier one's pass
    assert passes == polled["netdev"], (passes, polled)
    assert eng.overruns == 0


def test_a_stalled_poll_skips_the_ticks_it_missed_and_says_so(engine):
    eng, clock = engine
    _run(eng, clock, 0.2)
    netdev = next(r for r in eng._polled if r.name == "netdev")
    read = netdev.source.read

    def stalled() -> int:
        clock.t += 3.5 * INTERVAL_S  # one read blocks for three and a half intervals
        return read()

    netdev.source.read = stalled  # type: ignore[method-assign]
    reads0 = netdev.reads
    assert netdev.next_due <= clock.t  # _run left the clock where the next pass is due
    _run(eng, clock, WAKE_LATE_S)  # one pass
    netdev.source.read = read  # type: ignore[method-assign]
    assert netdev.reads == reads0 + 1
    assert netdev.overruns == 3 and netdev.longest_stall == 3, (netdev.overruns, netdev.longest_stall)
    assert eng.overruns >= 3
    # back on its grid: no burst of catch-up polls, 20 polls in the next second
    reads1 = netdev.reads
    _run(eng, clock, 1.0)
    assert 19 <= netdev.reads - reads1 <= 21, netdev.reads - reads1
