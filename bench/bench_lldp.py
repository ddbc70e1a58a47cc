"""What sources.lldp costs at 64 neighbours (issue 36): a Cumulus leaf's 64 ports each facing one
neighbour, lldpd's answer the shape of tests/fixtures/lldp/switch.json.

Per refresh (30 s by default, or a watch event) the worker thread runs lldpcli and parses its
answer; the tick then takes the reading and turns its changes into states; OTLP and remote
write build the info series from the store at each export. Figures are CPU time (thread time,
not wall-clock), medians of ``--runs``; the lldpcli run is a stand-in that prints the
document (process start and pipe read: what the agent pays for lldpcli, lldpd's own work
aside). Figures only, nothing asserted. Any user.

    python bench/bench_lldp.py [--neighbors 64] [--runs 50]

The last line is the figures as JSON.
"""

from __future__ import annotations

import argparse
import copy
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))


def document(n: int) -> dict:
    """lldpd's json0 answer with ``n`` neighbours, each made from the captured switch fixture's."""
    base = json.loads((ROOT / "tests" / "fixtures" / "lldp" / "switch.json").read_text())
    shapes = base["lldp"][0]["interface"]
    out = []
    for i in range(n):
        iface = copy.deepcopy(shapes[i % len(shapes)])
        iface["name"], iface["rid"] = f"swp{i + 1}", str(i + 1)
        iface["chassis"][0]["name"][0]["value"] = f"peer-{i + 1}"
        out.append(iface)
    return {"lldp": [{"interface": out}]}


def cpu_us(fn, runs: int) -> float:
    """Median thread CPU time of ``fn()`` in µs."""
    samples = []
    for _ in range(runs):
        t0 = time.thread_time_ns()
        fn()
        samples.append((time.thread_time_ns() - t0) / 1000)
    return statistics.median(samples)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--neighbors", type=int, default=64)
    ap.add_argument("--runs", type=int, default=50)
    args = ap.parse_args()

    import agent.plugins  # noqa: F401 - the registries (the info series' declaration)
    from agent import config
    from agent.counters import StateUpdate
    from agent.exporters.state_gauges import gauges
    from agent.sources.lldp import (
        LldpSource,
        Reading,
        Worker,
        neighbor_states,
        parse_neighbors,
        run_bounded,
    )
    from agent.store import Store

    doc = document(args.neighbors)
    raw = json.dumps(doc, indent=2).encode()  # lldpcli's json0 is indented
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "n.json"
        path.write_bytes(raw)
        section = config.parse(json.dumps({"sources": {"lldp": {"file": str(path)}}})).sources.lldp
        r: dict[str, float | int] = {"neighbors": args.neighbors, "answer_bytes": len(raw)}
        r["parse_us"] = cpu_us(lambda: parse_neighbors(json.loads(raw)), args.runs)
        r["file_read_and_parse_us"] = cpu_us(lambda: Worker(section).fetch(1), args.runs)
        # a stand-in lldpcli: a process that prints the answer (CPU of this process only: the
        # child's is its own)
        argv = ["cat", str(path)]
        r["lldpcli_run_us_this_process"] = cpu_us(lambda: run_bounded(argv, 5.0, 4 << 20), min(args.runs, 20))
        t0 = time.monotonic()
        for _ in range(10):
            run_bounded(argv, 5.0, 4 << 20)
        r["lldpcli_run_wall_ms"] = (time.monotonic() - t0) / 10 * 1000

        neighbors = parse_neighbors(doc)
        renamed = parse_neighbors(json.loads(raw.replace(b'"peer-1"', b'"peer-x"')))
        src = LldpSource(config.parse(json.dumps({"sources": {"lldp": {"enabled": True, "file": str(path)}}})))
        src.table, src._seen = None, 0

        class _Fixed:
            latest: Reading | None = None

        src._worker = _Fixed()  # type: ignore[assignment]
        # the readings as the worker makes them (its thread builds their states), ready beforehand
        readings = iter([Reading(g, "ok", "", renamed if g % 2 else neighbors) for g in range(2, 8 * args.runs)])
        first = iter([Reading(1, "ok", "", neighbors) for _ in range(args.runs)])

        def tick(reading: Reading) -> None:
            src._worker.latest = reading
            src.read()
            src.states(0)

        def tick_first() -> None:
            src._published, src._seen = {}, 0
            tick(next(first))

        r["tick_first_reading_us"] = cpu_us(tick_first, args.runs)
        r["tick_one_neighbour_changed_us"] = cpu_us(lambda: tick(next(readings)), args.runs)
        r["tick_nothing_new_us"] = cpu_us(src.read, args.runs * 20)
        store = Store()
        store.set_states([StateUpdate(1, c, leaf, v, "lldp") for (c, leaf), v in neighbor_states(neighbors).items()])
        r["states"] = len(store.states())
        r["export_info_series_us"] = cpu_us(lambda: gauges(store), args.runs)
        r["worker_states_us"] = cpu_us(lambda: neighbor_states(neighbors), args.runs)
        per_refresh = (r["file_read_and_parse_us"] + r["worker_states_us"] + r["lldpcli_run_us_this_process"]
                       + r["tick_first_reading_us"])
        r["cpu_percent_at_30s_refresh"] = per_refresh / 30e6 * 100
        r["cpu_percent_ticks_1s"] = r["tick_nothing_new_us"] / 1e6 * 100

    width = max(map(len, r))
    print(f"sources.lldp at {args.neighbors} neighbours (CPU time, medians of {args.runs}):")
    for k, v in r.items():
        print(f"  {k:<{width}}  {v:,.3f}" if isinstance(v, float) else f"  {k:<{width}}  {v}")
    print(json.dumps(r))


if __name__ == "__main__":
    main()
