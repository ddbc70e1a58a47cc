"""Simulated Spectrum switch benchmark: the cost of one plugin read (agent/asic/sim/) of
every counter of every port, through the ASIC ABI, called from Python with ctypes (so the
figures include ctypes' call overhead, shown separately). Figures only: nothing is asserted.

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
    from test_sim_plugin import OK, Sim, load_ops

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
    us = rows[0][1]
    print(f"\n  {args.ports} ports x 174 values at {POLL_HZ} Hz = {us * POLL_HZ / 1e4:.2f} % "
          f"of one core (target: a small fraction; read well under 1 ms: {us:.0f} us)")


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


if __name__ == "__main__":
    main()
