"""What reading one HFT job file costs the agent's other threads (agent/sources/hft.py): a
synthetic file of the documented shape (``--samples`` samples, 8 ports, 8 traffic classes,
pretty-printed as NVIDIA's example is) decoded the obvious way (``json.loads``, then fold) and
the way the hft worker does (one top-level member at a time, folded as it goes), each beside a
thread that wakes every 10 ms, as the tick does. Printed: the time each took and the longest
extra wait the 10 ms thread saw (the GIL held by one C call, the garbage collector's passes),
and their ratio. Figures only: nothing is asserted.

    python bench/bench_hft.py [--samples 4000] [--runs 2]

4000 samples is a 20 s job at 5 ms (the defaults) on 8 ports: about 30 MiB.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from agent.sources.hft import SampleParser, fold, members, parse_samples  # noqa: E402

PORTS = [f"swp{p}s{s}" for p in range(1, 3) for s in range(4)]


def job_file(samples: int) -> bytes:
    doc: dict[str, object] = {"hostname": "leaf01"}
    t0 = 1715957858 * 10**9
    for i in range(samples):
        t = t0 + i * 5_000_000
        doc[str(i)] = {"sample_index": i + 1, "metadata": {"sec": t // 10**9, "nsec": t % 10**9},
                       "port_data": {p: {"if_out_octets": i * 1000, "if_in_octets": i * 2000,
                                         "tc_data": {str(tc): {"tc_curr_occupancy": i % 97} for tc in range(8)}}
                                     for p in PORTS}}
    return json.dumps(doc, indent=4).encode()


def whole(data: bytes) -> object:
    samples, _ = parse_samples(json.loads(data))
    return fold(samples, 0)


def by_member(data: bytes) -> object:
    parser = SampleParser()
    return fold((s for name, obj in members(data) if (s := parser.sample(name, obj)) is not None), 0)


def beside_a_ticker(fn: Callable[[bytes], object], data: bytes) -> tuple[float, float]:
    """(seconds ``fn`` took, the longest extra wait of a 10 ms sleeper meanwhile)."""
    stop = threading.Event()
    worst = [0.0]

    def ticker() -> None:
        last = time.perf_counter()
        while not stop.is_set():
            time.sleep(0.01)
            now = time.perf_counter()
            worst[0] = max(worst[0], now - last - 0.01)
            last = now

    thread = threading.Thread(target=ticker)
    thread.start()
    time.sleep(0.05)
    t0 = time.perf_counter()
    fn(data)
    took = time.perf_counter() - t0
    stop.set()
    thread.join()
    return took, worst[0]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--samples", type=int, default=4000)
    ap.add_argument("--runs", type=int, default=2)
    args = ap.parse_args()
    data = job_file(args.samples)
    print(f"job file: {args.samples} samples, {len(PORTS)} ports, 8 TCs, {len(data) / 2**20:.1f} MiB")
    worst: dict[str, float] = {}
    for name, fn in (("json.loads + fold", whole), ("by member (the worker)", by_member)):
        for _ in range(args.runs):
            took, wait = beside_a_ticker(fn, data)
            worst[name] = max(worst.get(name, 0.0), wait)
            print(f"  {name:24} {took:6.2f} s   a 10 ms thread's longest extra wait {wait * 1000:6.0f} ms")
    a, b = worst["json.loads + fold"], worst["by member (the worker)"]
    print(f"longest extra wait, json.loads / by member: {a / max(b, 1e-4):.0f}x")


if __name__ == "__main__":
    main()
