"""What running an ASIC plugin in its helper process costs per read (agent/asic/proxy.py,
agent/asic/host.py): the simulated switch (``sim``, 256 ports x 187 values (100 counters and gauges,
13 drop reasons, 8 TC peaks, 50 PG and pool gauges and peaks, 16 FEC bins) by default)
read in process (``asic_read`` of the agent's backend) and through the helper (one request
and reply on a socketpair, the values written by the plugin into shared memory and copied
into the source's buffer), measured side by side in one run: the two alternate in blocks,
so a busy machine slows both alike. Figures only: nothing is asserted.

    python bench/bench_asic_host.py [--ports 256] [--iterations 3000] [--quick]
    SWTEL_PUREPYTHON=1 python bench/bench_asic_host.py      # the ctypes loader
    python bench/bench_asic_host.py --memory                # only: each helper's PSS

``--memory``: the PSS of each helper process (the C program ``swtel-asic-host`` and the
Python ``host.py``) with the simulated spine (``role=spine seed=1``), after its layout and
a read, one after the other in one run.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from array import array
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

BLOCK = 50  # reads per block; in-process and helper blocks alternate


def _rss_kib(pid: int | None) -> int:
    with open(f"/proc/{pid}/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))


SPINE = "role=spine seed=1"


def helper_memory(path: str) -> None:
    """Each helper's PSS with the spine open, its layout listed and one read done."""
    import psutil

    from agent.asic import proxy as proxy_mod
    from agent.asic.proxy import PluginProxy
    from agent.sources.asic import slots

    this_builds = proxy_mod.c_host
    print(f"helper PSS, sim {SPINE}, after the layout and a read (psutil memory_full_info)")
    for label, which in (("the backend's helper", this_builds), ("the Python helper (host.py)", lambda: None)):
        proxy_mod.c_host = which  # the Python helper: as when the C one is missing
        proxy = PluginProxy()
        try:
            proxy.open(path, f"{SPINE} start={time.time_ns()}")
            gen, _, counters = proxy.layout()
            values = array("Q", bytes(8 * sum(slots(d) for c in counters for d in c)))
            proxy.read(gen, values)
            mem = psutil.Process(proxy.pid).memory_full_info()
            print(f"  {label:28} runs {proxy.helper:6}  PSS {mem.pss / 2**20:5.1f} MiB  "
                  f"USS {mem.uss / 2**20:5.1f} MiB  RSS {mem.rss / 2**20:5.1f} MiB")
        finally:
            proxy.close()
            proxy_mod.c_host = this_builds


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ports", type=int, default=256)
    ap.add_argument("--iterations", type=int, default=3000)
    ap.add_argument("--quick", action="store_true", help="fewer iterations (CI)")
    ap.add_argument("--memory", action="store_true", help="only each helper's PSS with the simulated spine")
    args = ap.parse_args()
    if args.quick:
        args.iterations = min(args.iterations, 500)

    from agent import _backend, asic
    from agent.asic.proxy import PluginProxy
    from agent.sources.asic import slots

    path = asic.builtin_path("sim")
    if path is None:
        sys.exit("the sim plugin is not built: python setup.py build_ext --inplace")
    if args.memory:
        helper_memory(path)
        return
    reader = _backend.reader
    config = f"ports={args.ports} start={time.time_ns()}"

    t0 = time.perf_counter()
    proxy = PluginProxy()
    proxy.open(path, config)
    start_ms = (time.perf_counter() - t0) * 1e3
    rss_kib = _rss_kib(proxy.pid)
    h = reader.asic_open(path, config)
    try:
        gen, ports, counters = reader.asic_layout(h)
        assert proxy.layout() == (gen, ports, counters)
        n = sum(slots(d) for c in counters for d in c)
        local, remote = array("Q", bytes(8 * n)), array("Q", bytes(8 * n))
        copy_src = array("Q", bytes(8 * n))

        def in_process() -> None:
            reader.asic_read(h, gen, local)

        def helper() -> None:
            proxy.read(gen, remote, 0.02)  # as the asic source calls it

        def copy_only() -> None:
            memoryview(remote).cast("B")[:] = memoryview(copy_src).cast("B")

        cases = {"in process": in_process, "helper": helper, "copy": copy_only}
        samples: dict[str, list[float]] = {k: [] for k in cases}
        for fn in cases.values():  # warm up (maps the shared buffer)
            fn()
        for _ in range(max(1, args.iterations // BLOCK)):
            for name, fn in cases.items():
                for _ in range(BLOCK):
                    t = time.perf_counter()
                    fn()
                    samples[name].append((time.perf_counter() - t) * 1e6)
        # the two read the same model at about the same time: same values, but for the clock
        assert len(local) == len(remote) == n
        ipc = PluginProxy()
        ipc.open(path, f"ports=1 start={time.time_ns()}")
        small = array("Q", bytes(8 * sum(slots(d) for c in ipc.layout()[2] for d in c)))
        h1 = reader.asic_open(path, f"ports=1 start={time.time_ns()}")
        g1 = reader.asic_layout(h1)[0]
        rt_local, rt_remote = [], []
        for _ in range(max(1, args.iterations // BLOCK)):
            for out, fn in ((rt_local, lambda: reader.asic_read(h1, g1, small)),
                            (rt_remote, lambda: ipc.read(g1, small))):
                for _ in range(BLOCK):
                    t = time.perf_counter()
                    fn()
                    out.append((time.perf_counter() - t) * 1e6)
        ipc.close()
        reader.asic_close(h1)
    finally:
        proxy.close()
        reader.asic_close(h)

    med = {k: statistics.median(v) for k, v in samples.items()}
    p99 = {k: statistics.quantiles(v, n=100)[98] for k, v in samples.items()}
    print(f"sim plugin, {args.ports} ports x 187 values = {n} values ({n * 8 / 1024:.0f} KiB), "
          f"backend {_backend.NAME}, {len(samples['helper'])} reads each, interleaved")
    print(f"{'':28} {'median us':>10} {'p99 us':>10}")
    print(f"{'in process (asic_read)':28} {med['in process']:10.1f} {p99['in process']:10.1f}")
    print(f"{'through the helper':28} {med['helper']:10.1f} {p99['helper']:10.1f}")
    print(f"{'  of which the copy':28} {med['copy']:10.1f} {p99['copy']:10.1f}")
    print(f"helper / in process: {med['helper'] / med['in process']:.2f}x "
          f"(+{med['helper'] - med['in process']:.1f} us per read)")
    lo, hi = statistics.median(rt_local), statistics.median(rt_remote)
    print(f"round trip alone (ports=1: 187 values): in process {lo:.1f} us, helper {hi:.1f} us "
          f"(+{hi - lo:.1f} us)")
    print(f"helper start and open: {start_ms:.0f} ms (once per start); helper RSS {rss_kib / 1024:.1f} MiB")


if __name__ == "__main__":
    main()
