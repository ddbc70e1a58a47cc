"""The feeds tell each detector which semantics moved in a sample (``Detector.changed``), and
a detector may skip looking for what did not (error_burst skips its walk through every key
when no error semantic moved). That must be an optimisation only: the same random stream
through a runner whose detectors are blind to the hint (always "everything moved") raises,
updates and clears exactly the same events."""

from __future__ import annotations

import random

import pytest

import agent.plugins  # noqa: F401  (fills the registries)
from agent.config import Insights
from agent.insights import InsightsPipeline
from tests.insights_stream import ASIC, STEP_NS, T0, Healthy, Stream, port_table

pytestmark = pytest.mark.nolibs  # no versioned library decides its outcome: not in the Debian pass

PORTS = [f"swp{i}" for i in range(1, 17)]
ERRORS = ("fcs", "in-errors", "sym", "eff", "corr", "carrier", "pfc3", "in-discards", "out-q-drops")


class _Quiet:
    def warning(self, *a, **k):
        pass

    info = error = debug = warning


def _blind(runner: InsightsPipeline) -> None:
    """Every detector of ``runner`` sees "all semantics moved", whatever the feeds say."""
    for det in runner.detectors.values():
        det.__class__ = type(f"Blind{type(det).__name__}", (type(det),),
                             {"changed": property(lambda self: -1, lambda self, value: None)})




@pytest.mark.parametrize("seed", [1, 2, 3])
def test_the_moved_semantics_hint_changes_no_event(seed):
    rng = random.Random(seed)
    table, where = port_table("asic", PORTS, ASIC, filler=4)
    load = Healthy(PORTS, seed=seed)
    runners = []
    for blind in (False, True):
        r = InsightsPipeline(Insights(), log=_Quiet())
        r.set_port_speeds(dict.fromkeys(PORTS, 100_000_000_000))
        if blind:
            _blind(r)
        runners.append(r)
    stream = Stream(table, where)
    records: list[list] = [[], []]
    for n in range(400):
        ts = T0 + n * STEP_NS
        deltas = load.deltas(n * 0.1, 0.1) if n else {}
        for _ in range(rng.randrange(4)):  # now and then errors, symbol errors, bursts of corrected bits
            port, name = rng.choice(PORTS), rng.choice(ERRORS)
            deltas[(port, name)] = deltas.get((port, name), 0) + rng.choice((1, 3, 20, 5_000, 2_000_000))
        batch = stream.batch(ts, deltas, reset=rng.random() < 0.005)
        for r, rec in zip(runners, records, strict=True):
            if batch is not None:
                r.on_batch(batch)
            rec.append([(u.container.path, u.leaf, u.value) for u in r.end_pass(ts)])
    assert records[0] == records[1]
    assert runners[0].raised == runners[1].raised and runners[0].cleared == runners[1].cleared
    assert [e.as_dict() for e in runners[0].open_events()] == [e.as_dict() for e in runners[1].open_events()]
    assert runners[0].raised > 0, "the stream raised nothing: the comparison would prove nothing"
