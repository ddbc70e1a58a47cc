"""Cost of the insights detectors per engine pass (figures only, nothing asserted).

A simulated switch of 256 ports x ~100 counters each (the asic source's path shapes:
hw counters, PHY, PFC per priority, plus counters no detector reads), healthy load
with jitter, read every 100 ms. Per pass about 25 counters of every port change (the
octet and packet counters, PHY received and corrected bits, per-size packet
counters), as on a loaded switch. Prints the median and p99 cost of one pass:
``on_batch`` (per change) plus ``end_pass`` (per sample and event handling). A third row
adds buffer and drop-reason data: 8 egress-queue peaks per port (gauges, every one
changing every pass, as an ASIC's clear-on-read peaks do) and 6 drop reasons per port
(counting now and then), read by the congestion and drop-reason detectors. A fourth adds
the 16-bin RS-FEC histogram per port (low bins moving every pass, as on a healthy 400G
link), read by the link-degrading detector.

    .venv/bin/python bench/bench_insights.py [--ports 256] [--passes 600]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import agent.plugins  # noqa: E402, F401  (fills the config registries)
from agent.config import Insights  # noqa: E402
from agent.counters import GAUGE, OPENCONFIG, SWTEL_ORIGIN, Container, CounterSpec, CounterTable  # noqa: E402
from agent.insights import InsightsRunner  # noqa: E402
from agent.pathgrammar import drop_reason_path, interface_path, qos_interface_path  # noqa: E402
from tests.test_insights_sim import ASIC, STEP_NS, T0, Healthy, Stream, port_table  # noqa: E402

FILLER = 100 - len(ASIC)  # counters no detector reads, to ~100 per port
BUSY_FILLER = 19  # of which change every pass (per-size packet counters and the like)
REASONS = [("l2", "ingress-vlan-filter"), ("l2", "ingress-spanning-tree-filter"), ("l3", "blackhole-route"),
           ("l3", "unresolved-neigh"), ("buffer", "tail-drop"), ("acl", "ingress-port-acl")]


def _with_buffers(table: CounterTable, where: dict, names: list[str]) -> tuple[CounterTable, list[int]]:
    """``table`` plus 8 queue peaks and 6 drop reasons per port; the peaks' indices."""
    specs = list(table.specs)
    peaks = []
    for p in names:
        for tc in range(8):
            c = Container(SWTEL_ORIGIN, qos_interface_path(p) + f"/output/queues/queue[name={tc}]/state")
            peaks.append(len(specs))
            specs.append(CounterSpec(c, "peak-occupancy", 64, GAUGE, p))
        for group, reason in REASONS:
            where[(p, reason)] = len(specs)
            specs.append(CounterSpec(Container(SWTEL_ORIGIN, drop_reason_path(p, group, reason)), "packets", port=p))
    return CounterTable(table.source, specs), peaks


class _Quiet:
    def warning(self, *a, **k):
        pass

    info = warning


def _with_fec(table: CounterTable, where: dict, names: list[str]) -> CounterTable:
    """``table`` plus a 16-bin RS-FEC histogram per port (bin b: codewords with b corrected symbols)."""
    specs = list(table.specs)
    for p in names:
        for b in range(16):
            c = Container(OPENCONFIG, interface_path(p) + f"/phy/fec/state/rs-fec-histogram/bin[index={b}][lower={b}][upper={b}]")
            where[(p, f"bin{b}")] = len(specs)
            specs.append(CounterSpec(c, "count", port=p))
    return CounterTable(table.source, specs)


def run(ports: int, passes: int, groups: bool, buffers: bool = False, fec: bool = False) -> dict[str, float]:
    names = [f"swp{i // 4 + 1}s{i % 4}" for i in range(ports)]
    ins = Insights()
    if groups:
        ins.imbalance.groups = {"uplinks": names[-8:]}
    runner = InsightsRunner(ins, log=_Quiet())
    runner.set_port_speeds(dict.fromkeys(names, 400_000_000_000))
    table, where = port_table("asic", names, ASIC, filler=FILLER)
    for p in names:
        base = where[(p, "rx")] - list(ASIC).index("rx") + len(ASIC)
        for k in range(BUSY_FILLER):
            where[(p, f"other-{k}")] = base + k
    peaks: list[int] = []
    if buffers:
        table, peaks = _with_buffers(table, where, names)
    if fec:
        table = _with_fec(table, where, names)
    stream = Stream(table, where)
    load = Healthy(names, speed=400e9)
    ts = T0
    costs, changed = [], []
    for n in range(passes):
        ts += STEP_NS
        deltas = load.deltas(n * 0.1, 0.1)
        for p in names:
            for k in range(BUSY_FILLER):
                deltas[(p, f"other-{k}")] = 1 + (n + k) % 7
            if fec:  # 400G: ~6e9 codewords/s in bin 0 ... a few in bin 3 per pass
                for b in range(4):
                    deltas[(p, f"bin{b}")] = (600_000_000 >> (5 * b)) + (n + b) % 3
            if buffers and n % 10 == 0:
                deltas[(p, REASONS[n // 10 % len(REASONS)][1])] = 1 + n % 3
        batch = stream.batch(ts, deltas)
        if peaks:  # levels: every peak changes, below the congestion threshold (idle queues)
            moved = dict(zip(batch.indices, batch.deltas, strict=True))
            batch.indices = sorted(set(moved) | set(peaks))
            for k, i in enumerate(peaks):
                batch.values[i] = (n * 7919 + k * 104729) % 65536
            batch.deltas = [moved.get(i, 0) for i in batch.indices]
            batch.flags = bytes([batch.flags[0]]) * len(batch.indices)
        t0 = time.perf_counter()
        runner.on_batch(batch)
        runner.end_pass(ts)
        costs.append((time.perf_counter() - t0) * 1e6)
        changed.append(len(batch.indices))
    steady = costs[20:]  # past the baseline and warm-up
    steady.sort()
    return {
        "counters": len(table),
        "changed": statistics.median(changed[20:]),
        "median_us": statistics.median(steady),
        "p99_us": steady[int(len(steady) * 0.99) - 1],
        "events": len(runner.status()["open"]) + len(runner.status()["recent"]),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ports", type=int, default=256)
    ap.add_argument("--passes", type=int, default=600)
    args = ap.parse_args()
    from agent import _backend

    print(f"insights cost per 100 ms pass, {args.ports} ports, reader backend {_backend.NAME}")
    run(args.ports, 100, False)  # warm-up: the first run in a process pays for the allocator
    for groups, buffers, fec in ((False, False, False), (True, False, False), (False, True, False),
                                 (False, False, True)):
        r = run(args.ports, args.passes, groups, buffers, fec)
        label = ("with an 8-uplink imbalance group" if groups else
                 "with 8 queue peaks + 6 drop reasons" if buffers else
                 "with a 16-bin FEC histogram" if fec else "default detectors")
        print(f"  {label:34s} {r['counters']:6d} counters, {r['changed']:6.0f} changed/pass: "
              f"median {r['median_us']:7.0f} us, p99 {r['p99_us']:7.0f} us per pass "
              f"({r['median_us'] / 1e3:.2f} % of one core at 10 passes/s), events {r['events']}")


if __name__ == "__main__":
    main()
