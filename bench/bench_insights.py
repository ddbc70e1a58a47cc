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

Then the simulated switch itself (the built-in ``sim`` plugin, 251 values a port with its 4
lanes' FEC histograms, read in
process every 100 ms: its default load moves every port's traffic counters, PHY bits,
queue occupancy and ECN marks every tick, ~21 values a port) at 256 and 1,024 ports: the cost
of one tick from the read's values to the end of the insights pass (diff, batch, feeds,
detectors; the plugin's read itself is bench_sim.py's), measured round-robin in one run so
the machine's load falls on every row alike:

* without insights (the change kernel and the batch only);
* with the default detectors, the feeds' per-change loop and the detectors' kernels in C
  (agent/_ext/feeds.c, detect.c) and the pure-Python backend's (agent/_fallback/), side by
  side as a ratio;
* ``sources.asic.buffers: false`` (the source gathers the non-buffer values out of the
  plugin's read, timed here; the buffer levels are not diffed, stored or exported) against
  the layout without any buffer slot (the same table, its values handed over untimed, as a
  plugin without buffer data would), without and with insights: "within 10 % with buffer
  data off";
* with ``--without link_degrading,error_burst,...``: the default detectors with each named one
  turned off, a row each: what each detector costs a tick, in the same run;
* then, in a second run, the default detectors' runner alone in the process (beside the
  tick without insights), as an agent holds one runner: the figure to read against the
  5 ms target at 1,024 ports (the runners of the comparison share the caches);
* with ``--timed``: every detector's own calls timed inside the tick (less noisy than
  ``--without``'s differences on a shared machine); ``--off`` turns detectors off in every row.

Each tick a different row goes first (the first after the poll's sleep meets cold caches).

    .venv/bin/python bench/bench_insights.py [--ports 256] [--passes 600] [--sim-ports 256,1024]
        [--ticks 40] [--without DETECTOR,...] [--timed] [--off DETECTOR,...]
"""

from __future__ import annotations

import argparse
import gc
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import agent.plugins  # noqa: E402, F401  (fills the config registries)
from agent.config import Insights  # noqa: E402
from agent.counters import GAUGE, OPENCONFIG, SWTEL_ORIGIN, Container, CounterSpec, CounterTable  # noqa: E402
from agent.insights import InsightsPipeline  # noqa: E402
from agent.pathgrammar import drop_reason_path, interface_path, qos_interface_path  # noqa: E402
from agent.runner import freeze_long_lived  # noqa: E402
from tests.insights_stream import ASIC, STEP_NS, T0, Healthy, Stream, port_table  # noqa: E402

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
            c = Container(OPENCONFIG, interface_path(p) + f"/phy/histograms/state/rs-num-corr-err[upper-boundary={b}]")
            where[(p, f"bin{b}")] = len(specs)
            specs.append(CounterSpec(c, "count", port=p))
    return CounterTable(table.source, specs)


def run(ports: int, passes: int, groups: bool, buffers: bool = False, fec: bool = False) -> dict[str, float]:
    names = [f"swp{i // 4 + 1}s{i % 4}" for i in range(ports)]
    ins = Insights()
    if groups:
        ins.imbalance.groups = {"uplinks": names[-8:]}
    runner = InsightsPipeline(ins, log=_Quiet())
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


WARM = 5  # ticks of the simulated switch before the measured ones
#: detectors turned off in every row (--off): one whose cost is in flux, not measured here
OFF: tuple[str, ...] = ()


class _Tick:
    """One way of handling the sim's reads: its own table, diff state and (optional) runner."""

    def __init__(self, table: CounterTable, keep, insights: bool, feed_add=None,
                 speeds: dict | None = None, gather: bool = False, off: str | None = None,
                 timed: bool = False) -> None:
        from array import array

        self.table, self.keep, self.gather = table, keep, gather
        n = len(table)
        self.values = array("Q", bytes(8 * n))
        self.prev, self.acc, self.known = array("Q", bytes(8 * n)), array("Q", bytes(8 * n)), bytearray(n)
        self.oi, self.od, self.of = array("I", bytes(4 * n)), array("q", bytes(8 * n)), bytearray(n)
        cfg = Insights()
        if off is not None:  # one detector turned off: what it costs is the difference
            getattr(cfg, off).enabled = False
        for name in OFF:
            getattr(cfg, name).enabled = False
        self.runner = InsightsPipeline(cfg, log=_Quiet()) if insights else None
        if self.runner is not None:
            self.runner.set_port_speeds(speeds or {})
            if feed_add is not None:
                self.runner._feeds.feed_add = feed_add
                # the pure-Python backend, the detectors' kernels too
                if feed_add.__module__.startswith("agent._fallback"):
                    from agent import _fallback

                    self.runner._feeds.use(_fallback)
                    for det in self.runner.detectors.values():
                        for attr in ("kernel", "fits", "changes", "lanes_of"):  # (link_degrading has four)
                            if hasattr(det, attr):
                                setattr(det, attr, getattr(_fallback, getattr(det, attr).__name__))
        self.costs: list[float] = []
        self.changed: list[int] = []
        #: per detector, ms of its own calls a tick (timed: every method the feeds and the
        #: runner call is wrapped, ~0.1 us a call of overhead included)
        self.spent: dict[str, list[float]] = {}
        self._clock: dict[str, float] = {}
        if timed and self.runner is not None:
            for name, det in self.runner.detectors.items():
                self.spent[name], self._clock[name] = [], 0.0
                for meth in ("sample", "run_batch", "emit", "end_pass", "states"):
                    setattr(det, meth, self._timer(name, getattr(det, meth)))

    def _timer(self, name: str, fn):
        clock, perf = self._clock, time.perf_counter

        def timed(*args):
            t0 = perf()
            try:
                return fn(*args)
            finally:
                clock[name] += perf() - t0
        return timed

    def run(self, raw, ts: int) -> None:
        from agent import _backend
        from agent.counters import Batch

        if self.keep is None:
            self.values[:] = raw
        elif not self.gather:  # the pre-buffer layout: only the non-buffer slots (outside the timing)
            self.values[:] = type(raw)("Q", [raw[i] for i in self.keep])
        t = self.table
        t0 = time.perf_counter()
        if self.gather:  # sources.asic.buffers off: the source keeps the non-buffer slots (timed)
            _backend.reader.gather(raw, self.keep, self.values)
        k = _backend.reader.diff(self.values, self.prev, self.acc, self.known, t.widths, t.kinds, self.oi,
                                 self.od, self.of)
        if self.runner is not None:
            # (as agent/engine.py hands a batch over: the arrays' copies, read in place by feed_add)
            batch = Batch("asic", ts, t, self.oi[:k], self.values, self.od[:k], bytes(self.of[:k]))
            self.runner.on_batch(batch)
            self.runner.end_pass(ts)
        self.costs.append((time.perf_counter() - t0) * 1e3)
        self.changed.append(k)
        for name, spent in self.spent.items():
            spent.append(self._clock[name] * 1e3)
            self._clock[name] = 0.0


def sim_rows(ports: int, ticks: int, without: tuple[str, ...] = (),
             spent: dict | None = None, alone: bool = False) -> dict[str, tuple[float, float, int]]:
    """Per way of handling, the median ms a tick, its p90, and the values changed a tick;
    ``spent`` (if given) gets per detector the median and p90 ms of its own calls a tick.
    ``alone``: only the default detectors' runner (and the tick without insights), as an
    agent's process holds one runner, not the eight of the full comparison."""
    from array import array

    from agent import _backend, _fallback, asic, config
    from agent.sources.asic import AsicSource

    path = asic.builtin_path("sim")
    if path is None:
        raise SystemExit("the sim plugin is not built: python setup.py build_ext --inplace")
    tables = {}
    for buffers in (True, False):
        cfg = config.parse(f"sources:\n  asic:\n    enabled: true\n    buffers: {str(buffers).lower()}\n"
                           f"    config: ports={ports}\n")
        src = AsicSource(cfg)
        h = _backend.reader.asic_open(path, f"ports={ports}")
        gen, plist, counters = _backend.reader.asic_layout(h)
        src._build(plist, counters)
        tables[buffers] = (src, h, gen)
    on, h, gen = tables[True]
    off = tables[False][0]
    _backend.reader.asic_close(tables[False][1])
    keep = off._keep if off._keep is not None else array("I", range(len(on.table)))
    pre = CounterTable("asic", list(off.table.specs))  # the same specs: a table never read through gather
    speeds = on.port_speeds
    ways = {
        "without insights": _Tick(on.table, None, False),
        "default detectors, C feed": _Tick(on.table, None, True, getattr(_backend.reader, "feed_add", None), speeds),
        "default detectors, Python backend": _Tick(on.table, None, True, _fallback.feed_add, speeds),
        "buffers off, without insights": _Tick(off.table, keep, False, gather=True),
        "buffers off, default detectors": _Tick(off.table, keep, True, None, speeds, gather=True),
        "pre-buffer layout, without insights": _Tick(pre, keep, False),
        "pre-buffer layout, default detectors": _Tick(pre, keep, True, None, speeds),
    }
    if alone:
        ways = {name: ways[name] for name in ("without insights", "default detectors, C feed")}
    for name in without:
        ways[f"default detectors but {name}"] = _Tick(on.table, None, True, None, speeds, off=name)
    if spent is not None:
        ways["default detectors, timed per detector"] = _Tick(on.table, None, True, None, speeds, timed=True)
    raw = array("Q", bytes(8 * len(on.table)))
    threshold = gc.get_threshold()
    try:
        for n in range(ticks):
            if n == WARM:
                # The comparison's runners share this process; an agent has one. Past the warm-up their
                # state is frozen out of the cyclic collector, so no row pays for scanning the
                # others' heaps (each row still pays its own garbage), and the collector is set
                # as the agent sets it (agent/runner.py freeze_long_lived).
                freeze_long_lived()
            time.sleep(0.1)  # the sim's clock is real time: a 100 ms poll's worth of change
            _backend.reader.asic_read(h, gen, raw)
            ts = time.time_ns()
            order = list(ways.values())
            for way in order[n % len(order):] + order[:n % len(order)]:  # each row first in turn: the
                way.run(raw, ts)  # first after the sleep meets cold caches
    finally:
        _backend.reader.asic_close(h)
        gc.unfreeze()
        gc.set_threshold(*threshold)
    out = {}
    for name, way in ways.items():
        steady = sorted(way.costs[WARM:])  # past the baseline and the first samples
        out[name] = (statistics.median(steady), steady[int(len(steady) * 0.9)],
                     int(statistics.median(way.changed[WARM:])))
        for det, ms in way.spent.items():
            ms = sorted(ms[WARM:])
            spent[det] = (statistics.median(ms), ms[int(len(ms) * 0.9)])  # type: ignore[index]
    return out


def print_sim(ports: int, ticks: int, without: tuple[str, ...] = (), timed: bool = False) -> None:
    from agent import _backend

    spent: dict[str, tuple[float, float]] | None = {} if timed else None
    rows = sim_rows(ports, ticks, without, spent)
    print(f"\nsim switch, {ports} ports x 251 values, its default load read every 100 ms ({ticks} ticks, "
          f"backend {_backend.NAME}): ms a tick from the read's values to the end of the insights pass")
    for name, (med, p90, changed) in rows.items():
        print(f"  {name:38s} median {med:7.2f} ms, p90 {p90:7.2f} ms, {changed:7d} values changed")
    base = rows["without insights"][0]
    c_feed, py_feed = rows["default detectors, C feed"][0], rows["default detectors, Python backend"][0]
    off, pre = rows["buffers off, without insights"][0], rows["pre-buffer layout, without insights"][0]
    off_ins, pre_ins = rows["buffers off, default detectors"][0], rows["pre-buffer layout, default detectors"][0]
    print(f"  the detectors add {c_feed - base:.2f} ms; the pure-Python backend (feed, detector kernels) costs "
          f"{py_feed / c_feed:.2f}x the C ones "
          f"({py_feed - c_feed:+.2f} ms)")
    print(f"  buffer data off vs the pre-buffer layout: {off / pre - 1:+.1%} without insights, "
          f"{off_ins / pre_ins - 1:+.1%} with the default detectors (buffers on: {base / pre - 1:+.1%}, "
          f"{c_feed / pre_ins - 1:+.1%})")
    # one runner in the process, as in an agent: the figure the 5 ms target (1,024 ports) is about
    one = sim_rows(ports, ticks, alone=True)
    print(f"  one runner alone in the process (an agent's case): default detectors median "
          f"{one['default detectors, C feed'][0]:.2f} ms, p90 {one['default detectors, C feed'][1]:.2f} ms a tick "
          f"(without insights {one['without insights'][0]:.2f} ms)")
    for name in without:
        less = rows[f"default detectors but {name}"][0]
        print(f"  {name} costs {c_feed - less:.2f} ms a tick ({(c_feed - less) / c_feed:.0%} of the default detectors' "
              "tick)")
    if spent:
        print("  per detector, its own calls in the timed row (sample, run_batch, emit, end_pass, states), "
              "ms a tick, median (p90)")
        for name, (med, p90) in sorted(spent.items(), key=lambda kv: -kv[1][0]):
            print(f"    {name:22s} {med:6.2f} ({p90:6.2f})")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ports", type=int, default=256)
    ap.add_argument("--passes", type=int, default=600, help="synthetic passes (0: skip them)")
    ap.add_argument("--sim-ports", default="256,1024", help="sizes of the simulated switch ('': none)")
    ap.add_argument("--ticks", type=int, default=40)
    ap.add_argument("--without", default="", help=(
        "detectors (comma-separated, e.g. link_degrading,error_burst,throughput_dip) each measured turned "
        "off, in the same run: a row each, and what it costs"))
    ap.add_argument("--off", default="", help="detectors turned off in every row (comma-separated)")
    ap.add_argument("--timed", action="store_true", help=(
        "one more row with every detector's calls timed: what each costs a tick, measured inside the tick "
        "(less noisy than --without's differences on a loaded machine)"))
    ap.add_argument("--unspread", action="store_true", help=(
        "link_degrading's buckets all end on the second (every port's phase 0), as before its fits were "
        "spread over the second: the anchor its spread is measured against"))
    args = ap.parse_args()
    if args.unspread:
        from agent.insights.link_degrading import LinkDegrading

        LinkDegrading.phase = lambda self, port: 0  # type: ignore[method-assign]
    global OFF
    OFF = tuple(n.strip() for n in args.off.split(",") if n.strip())
    from agent import _backend

    if args.passes > 20:  # (0: the simulated switch alone)
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
    for ports in (int(p) for p in args.sim_ports.split(",") if p.strip()):
        print_sim(ports, args.ticks, tuple(n.strip() for n in args.without.split(",") if n.strip()), args.timed)


if __name__ == "__main__":
    main()
