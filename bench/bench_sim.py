"""Simulated Spectrum switch benchmark: the cost of one plugin read (agent/asic/sim/) of
every counter of every port, through the ASIC ABI, called from Python with ctypes (so the
figures include ctypes' call overhead, shown separately), and the per-reason drop counters'
and the lanes' RS-FEC histograms' (``phy_rs_fec_histogram_laneN``, 16 bins a lane) cost per port
in the agent's read + diff (with them against the same reads without them, as a ratio measured
in one run). Figures only: nothing is asserted.

    python bench/bench_sim.py [--ports 256] [--iterations 2000] [--quick]
"""

from __future__ import annotations

import argparse
import ctypes
import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

POLL_HZ = 100


def median_us(fn, iterations: int) -> float:
    samples = []
    for _ in range(iterations):
        t0 = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - t0) * 1e6)
    return statistics.median(samples)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ports", type=int, default=256)
    ap.add_argument("--iterations", type=int, default=2000)
    ap.add_argument("--quick", action="store_true", help="fewer iterations (CI)")
    args = ap.parse_args()
    if args.quick:
        args.iterations = min(args.iterations, 300)

    from agent import asic

    if asic.builtin_path("sim") is None:
        sys.exit("the sim plugin is not built: python setup.py build_ext --inplace")
    from tests.unit.test_sim_plugin import OK, Sim, load_ops

    ops = load_ops()
    cases = [
        (f"ports={args.ports}, healthy", f"ports={args.ports}"),
        (f"ports={args.ports}, 4 scenarios",
         f"ports={args.ports} scenario=symbol-errors@0s:swp1,pfc-storm@0s:swp2,"
         "microburst@0s:swp3,link-flap@0s:swp4"),
        ("role=spine (68 ports), healthy", "role=spine"),
    ]
    rows: list[tuple[str, float, int]] = []
    overhead = None
    for label, config in cases:
        sim = Sim(ops, config)
        try:
            ts = ctypes.c_int64()
            err = ctypes.create_string_buffer(256)
            read, h, gen, buf, n = ops.read, sim.h, sim.gen, sim.buf, sim.n

            def once(read=read, h=h, gen=gen, buf=buf, n=n, ts=ts, err=err):
                if read(h, gen, buf, n, ctypes.byref(ts), err, 256) != OK:
                    raise RuntimeError("read failed")

            once()
            rows.append((label, median_us(once, args.iterations), n))
            if overhead is None:
                count = ops.port_count
                overhead = median_us(lambda count=count, h=h: count(h), args.iterations)
        finally:
            sim.close()

    agent_rows = _agent_path(args.ports, args.iterations)
    reasons = _reason_cost(args.ports, args.iterations)
    busy = _reason_cost(args.ports, args.iterations, counting=True)
    lanes = _reason_cost(args.ports, args.iterations, prefix=LANE_HISTOGRAMS)

    print(f"\nswtel sim plugin benchmark: {args.iterations} reads each, medians in microseconds "
          f"per read (ctypes call included)\n")
    print(f"{'what':40} {'counters':>9} {'us/read':>10} {'ns/counter':>11} {'% core @100Hz':>14}")
    for label, us, n in rows:
        print(f"{label:40} {n:9d} {us:10.1f} {us * 1000 / n:11.2f} "
              f"{us * POLL_HZ / 1e6 * 100:14.3f}")
    print(f"{'ctypes call overhead (port_count)':40} {'':9} {overhead:10.2f}")
    for label, us, n in agent_rows:
        print(f"{label:40} {n:9d} {us:10.1f} {us * 1000 / n:11.2f} "
              f"{us * POLL_HZ / 1e6 * 100:14.3f}")
    us, per_port = rows[0][1], rows[0][2] // args.ports
    print(f"\n  {args.ports} ports x {per_port} values at {POLL_HZ} Hz = {us * POLL_HZ / 1e4:.2f} % "
          f"of one core (target: a small fraction; read well under 1 ms: {us:.0f} us)")
    for what, r in (("healthy: no reason counts", reasons), ("every reason counting at every read", busy)):
        print(f"\nper-reason drop counters ({r['reasons']} a port: {r['with']} values a port with them, "
              f"{r['without']} without), ports={args.ports}, {what}, medians of {args.iterations} reads:")
        for label, key in (("asic_read (computes the reasons)", "read"), ("diff with the reasons", "diff_with"),
                           ("diff without them", "diff_without")):
            print(f"  {label:36} {r[key]:9.1f} us {r[key] * 1000 / args.ports:8.1f} ns/port")
        extra = (r["diff_with"] - r["diff_without"]) * 1000 / args.ports
        print(f"  read + diff with / without the reasons: "
              f"{(r['read'] + r['diff_with']) / (r['read'] + r['diff_without']):.3f}x (diff alone "
              f"{r['diff_with'] / r['diff_without']:.3f}x; values {r['with'] / r['without']:.3f}x); "
              f"{extra:.1f} ns a port a read")
    r = lanes
    print(f"\nper-lane RS-FEC histograms ({r['reasons']} values a port: {r['with']} values a port with them, "
          f"{r['without']} without), ports={args.ports}, healthy (every lane's low bins move), medians of "
          f"{args.iterations} reads:")
    for label, key in (("asic_read (computes the lanes)", "read"), ("diff with the lanes", "diff_with"),
                       ("diff without them", "diff_without")):
        print(f"  {label:36} {r[key]:9.1f} us {r[key] * 1000 / args.ports:8.1f} ns/port")
    print(f"  read + diff with / without the lanes' histograms: "
          f"{(r['read'] + r['diff_with']) / (r['read'] + r['diff_without']):.3f}x (diff alone "
          f"{r['diff_with'] / r['diff_without']:.3f}x; values {r['with'] / r['without']:.3f}x); "
          f"{(r['diff_with'] - r['diff_without']) * 1000 / args.ports:.1f} ns a port a read (the diff)")


def _agent_path(ports: int, iterations: int) -> list[tuple[str, float, int]]:
    """The same read as the agent does it: the reader backend's asic_read (C extension,
    GIL released; or ctypes under SWTEL_PUREPYTHON=1), then with the change kernel's diff."""
    from array import array

    from agent import _backend, asic
    from agent.sources.asic import slots

    reader = _backend.reader
    h = reader.asic_open(asic.builtin_path("sim"), f"ports={ports}")
    try:
        gen, _ports, counters = reader.asic_layout(h)
        # one value per descriptor, a histogram's bins each (counters to the change kernel)
        per_value = [(d[1], 0 if d[2] == 2 else d[2]) for c in counters for d in c for _ in range(slots(d))]
        n = len(per_value)
        values = array("Q", bytes(8 * n))
        prev, acc, known = array("Q", bytes(8 * n)), array("Q", bytes(8 * n)), bytearray(n)
        widths = bytes(w for w, _k in per_value)
        kinds = bytes(k for _w, k in per_value)
        out_idx, out_delta, out_flags = array("I", bytes(4 * n)), array("q", bytes(8 * n)), bytearray(n)

        def read(h=h, gen=gen, values=values):
            reader.asic_read(h, gen, values)

        def read_diff(h=h, gen=gen, values=values):
            reader.asic_read(h, gen, values)
            reader.diff(values, prev, acc, known, widths, kinds, out_idx, out_delta, out_flags)

        read_diff()
        name = _backend.NAME
        return [(f"agent reader ({name}): asic_read", median_us(read, iterations), n),
                (f"agent reader ({name}): read + diff", median_us(read_diff, iterations), n)]
    finally:
        reader.asic_close(h)


LANE_HISTOGRAMS = "phy_rs_fec_histogram_lane"  # the lanes' histograms' names (a prefix)


def _reason_cost(ports: int, iterations: int, counting: bool = False, prefix: str = "wjh_") -> dict:
    """The per-reason drop counters' cost in the agent's read + diff, in one run: every read's
    values diffed whole (with the ``wjh_*`` reasons), and the same values without the reasons
    (copied, untimed, to a layout that lacks them) diffed by a second change kernel: the two
    diffs see the same reads, so their ratio is the reasons' share. The read itself always
    computes them (one plugin build); on a healthy port that is a zero fill and the sums.
    ``counting``: every reason of every port rises at every read (added after the read,
    untimed), the worst case for the diff. ``prefix``: the names of the values measured (the
    reasons', or the lanes' histograms': LANE_HISTOGRAMS), "reasons" in the figures either way."""
    from array import array

    from agent import _backend, asic
    from agent.sources.asic import slots

    reader = _backend.reader
    h = reader.asic_open(asic.builtin_path("sim"), f"ports={ports}")
    try:
        gen, _ports, counters = reader.asic_layout(h)
        per_value = [(d[0], d[1], 0 if d[2] == 2 else d[2]) for c in counters for d in c for _ in range(slots(d))]
        keep = [i for i, (name, _w, _k) in enumerate(per_value) if not name.startswith(prefix)]
        runs: list[tuple[int, int]] = []  # the kept values as contiguous ranges, for a quick copy
        for i in keep:
            if runs and runs[-1][1] == i:
                runs[-1] = (runs[-1][0], i + 1)
            else:
                runs.append((i, i + 1))

        def kernel(sel: list[int]):
            n = len(sel)
            state = (array("Q", bytes(8 * n)), array("Q", bytes(8 * n)), bytearray(n),
                     bytes(per_value[i][1] for i in sel), bytes(per_value[i][2] for i in sel),
                     array("I", bytes(4 * n)), array("q", bytes(8 * n)), bytearray(n))
            return lambda cur: reader.diff(cur, *state)

        full, lean = kernel(list(range(len(per_value)))), kernel(keep)
        values = array("Q", bytes(8 * len(per_value)))
        reasons = [i for i, (name, _w, _k) in enumerate(per_value) if name.startswith(prefix)]
        times: dict[str, list[float]] = {"read": [], "diff_with": [], "diff_without": []}
        for k in range(iterations + 1):
            t0 = time.perf_counter()
            reader.asic_read(h, gen, values)
            read_us = (time.perf_counter() - t0) * 1e6
            if counting:
                for i in reasons:
                    values[i] = 7 * k
            t1 = time.perf_counter()
            full(values)
            t2 = time.perf_counter()
            without = array("Q")
            for a, b in runs:
                without.extend(values[a:b])
            t3 = time.perf_counter()
            lean(without)
            t4 = time.perf_counter()
            if k:  # the first diff of each is the baseline
                times["read"].append(read_us)
                times["diff_with"].append((t2 - t1) * 1e6)
                times["diff_without"].append((t4 - t3) * 1e6)
        out: dict = {name: statistics.median(v) for name, v in times.items()}
        out.update(reasons=(len(per_value) - len(keep)) // ports, with_=len(per_value) // ports,
                   without=len(keep) // ports)
        out["with"] = out.pop("with_")
        return out
    finally:
        reader.asic_close(h)


if __name__ == "__main__":
    main()
