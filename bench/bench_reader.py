"""Reader benchmark: per-poll cost of swtel's C reader + change kernel on 256 veth
ports, side by side with its anchors, measured in one run and printed as ratios.

Anchors: a minimal C loop of the same syscalls (the floor, bench/floor.c), the
pure-Python fallback, pyroute2 ``get_links()``, ``ethtool -S`` per port, and
node_exporter (Debian's prometheus-node-exporter, netdev + ethtool collectors)
when installed. Figures only: nothing here is asserted. Needs root.

    python bench/bench_reader.py [--ports 256] [--iterations 300] [--quick]
"""

from __future__ import annotations

import argparse
import os
import secrets
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from array import array
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))

TARGETS = {"floor": 1.5, "pyroute2": 100.0, "node_exporter": 50.0}


def median_us(fn, iterations: int) -> float:
    samples = []
    for _ in range(iterations):
        t0 = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - t0) * 1e6)
    return statistics.median(samples)


class Pipeline:
    """What one swtel tick does for netdev and ethtool: read into flat buffers, then diff."""

    def __init__(self, impl, ports: list[str]):
        self.impl = impl
        self.nl = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, socket.NETLINK_ROUTE)
        self.nl.bind((0, 0))
        self.ioc = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        nf = impl.NETDEV_FIELDS
        self.ifindexes = array("i", sorted(socket.if_nametoindex(p) for p in ports))
        self.nd = self._state(len(ports) * nf)
        self.seen = bytearray(len(ports))
        self.names = [p.encode() for p in ports]
        self.counts = array("I", [len(impl.ethtool_strings(self.ioc.fileno(), p)) for p in ports])
        self.et = self._state(sum(self.counts))
        self.status = array("i", bytes(4 * len(ports)))

    @staticmethod
    def _state(n: int) -> dict:
        return {
            "cur": array("Q", bytes(8 * n)), "prev": array("Q", bytes(8 * n)), "acc": array("Q", bytes(8 * n)),
            "known": bytearray(n), "widths": bytes([64]) * n, "kinds": bytes(n),
            "idx": array("I", bytes(4 * n)), "delta": array("q", bytes(8 * n)), "flags": bytearray(n),
        }

    def _diff(self, s: dict) -> int:
        return self.impl.diff(s["cur"], s["prev"], s["acc"], s["known"], s["widths"], s["kinds"],
                              s["idx"], s["delta"], s["flags"])

    def netdev_read(self) -> None:
        self.impl.netdev_read(self.nl.fileno(), self.ifindexes, self.nd["cur"], self.seen)

    def netdev(self) -> None:
        self.netdev_read()
        self._diff(self.nd)

    def ethtool_read(self) -> None:
        self.impl.ethtool_read(self.ioc.fileno(), self.names, self.counts, self.et["cur"], self.status)

    def ethtool(self) -> None:
        self.ethtool_read()
        self._diff(self.et)


def make_ports(ns: str, n: int) -> None:
    subprocess.run(["ip", "netns", "add", ns], check=True)
    batch = "link set lo up\n" + "".join(f"link add b{i} type veth peer name b{i}p\n" for i in range(n // 2))
    batch += "".join(f"link set b{i} up\nlink set b{i}p up\n" for i in range(n // 2))
    subprocess.run(["ip", "-n", ns, "-batch", "-"], input=batch, text=True, check=True)


def node_exporter_scrape_us(ports: list[str], iterations: int) -> float | None:
    r = node_exporter_scrape(iterations)
    return None if r is None else r[0]


def node_exporter_scrape(iterations: int) -> tuple[float, float] | None:
    """(median wall time, mean CPU time of the exporter process) per scrape, in microseconds,
    of Debian's node_exporter with only its netdev and ethtool collectors; None if absent."""
    binary = shutil.which("prometheus-node-exporter") or shutil.which("node_exporter")
    if binary is None:
        return None
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen(
        [binary, "--collector.disable-defaults", "--collector.netdev", "--collector.ethtool",
         f"--web.listen-address=127.0.0.1:{port}"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}/metrics"
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # loopback only, never a proxy
    try:
        for _ in range(100):
            try:
                opener.open(url, timeout=5).read()
                break
            except OSError:
                time.sleep(0.05)

        def cpu_s() -> float:  # utime + stime of the exporter, from /proc
            fields = Path(f"/proc/{proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
            return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

        c0 = cpu_s()
        wall = median_us(lambda: opener.open(url, timeout=30).read(), iterations)
        return wall, (cpu_s() - c0) * 1e6 / iterations
    finally:
        proc.terminate()
        proc.wait()


def floor_us(ports: list[str], iterations: int) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as tmp:
        exe = Path(tmp) / "floor"
        subprocess.run(["gcc", "-O2", "-o", str(exe), str(HERE / "floor.c")], check=True)
        out = subprocess.run([str(exe), str(iterations), *ports], capture_output=True, text=True, check=True)
    return {k: float(v) for k, v in (line.split() for line in out.stdout.splitlines())}


def inside(args) -> None:
    from agent import _fallback

    try:
        from agent import _swtel
    except ImportError:
        sys.exit("the C extension is not built: python setup.py build_ext --inplace")
    ports = sorted(name for _, name in socket.if_nameindex() if name != "lo")
    it = args.iterations
    rows: list[tuple[str, float]] = []
    floor = floor_us(ports, it)
    c = Pipeline(_swtel, ports)
    py = Pipeline(_fallback, ports)
    c.netdev()
    c.ethtool()
    py.netdev()
    py.ethtool()
    rows.append(("floor: RTM_GETSTATS dump, minimal C", floor["netdev_us"]))
    rows.append(("swtel C netdev read", median_us(c.netdev_read, it)))
    rows.append(("swtel C netdev read + diff", median_us(c.netdev, it)))
    rows.append(("floor: ETHTOOL_GSTATS x ports, minimal C", floor["ethtool_us"]))
    rows.append(("swtel C ethtool read", median_us(c.ethtool_read, it)))
    rows.append(("swtel C ethtool read + diff", median_us(c.ethtool, it)))
    rows.append(("swtel Python fallback netdev read + diff", median_us(py.netdev, max(10, it // 10))))
    rows.append(("swtel Python fallback ethtool read + diff", median_us(py.ethtool, max(10, it // 10))))

    from pyroute2 import IPRoute

    with IPRoute() as ipr:
        rows.append(("pyroute2 get_links() (stats64)", median_us(ipr.get_links, 3 if args.quick else 10)))
    if shutil.which("ethtool"):
        t0 = time.perf_counter()
        for p in ports:
            subprocess.run(["ethtool", "-S", p], capture_output=True, check=False)
        rows.append(("ethtool -S subprocess per port", (time.perf_counter() - t0) * 1e6))
    ne = node_exporter_scrape_us(ports, 3 if args.quick else 10)
    if ne is not None:
        rows.append(("node_exporter scrape (netdev + ethtool)", ne))

    v = dict(rows)
    c_total = v["swtel C netdev read + diff"] + v["swtel C ethtool read + diff"]
    floor_total = floor["netdev_us"] + floor["ethtool_us"]
    n_counters = len(c.nd["cur"]) + len(c.et["cur"])
    print(f"\nswtel reader benchmark: {len(ports)} veth ports, {n_counters} counters, "
          f"{it} iterations, medians in microseconds per poll\n")
    print(f"{'what':48} {'us/poll':>12} {'x swtel C':>10}")
    for name, us in rows:
        ref = c_total if "ethtool -S" in name or "node_exporter" in name else (
            v["swtel C netdev read + diff"] if "netdev" in name or "RTM" in name or "pyroute2" in name
            else v["swtel C ethtool read + diff"])
        print(f"{name:48} {us:12.1f} {us / ref:10.2f}")
    print("\nratios against the budgets (DESIGN.md):")
    print(f"  C netdev+ethtool read+diff / floor          = {c_total / floor_total:6.2f}  "
          f"(target <= 1.5x floor + 2 ms: {c_total:.0f} us vs {1.5 * floor_total + 2000:.0f} us)")
    print(f"  pyroute2 get_links / C netdev read+diff     = "
          f"{v['pyroute2 get_links() (stats64)'] / v['swtel C netdev read + diff']:6.0f}  (target >= 100)")
    if ne is not None:
        print(f"  node_exporter scrape / C read+diff          = {ne / c_total:6.0f}  (target >= 50)")
    fallback_total = v["swtel Python fallback netdev read + diff"] + v["swtel Python fallback ethtool read + diff"]
    print(f"  Python fallback / C (netdev + ethtool)      = "
          f"{fallback_total / c_total:6.1f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ports", type=int, default=256)
    ap.add_argument("--iterations", type=int, default=300)
    ap.add_argument("--quick", action="store_true", help="fewer iterations (CI)")
    ap.add_argument("--inside", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.quick:
        args.iterations = min(args.iterations, 100)
    if args.inside:
        inside(args)
        return
    if os.geteuid() != 0:
        sys.exit("bench_reader needs root (it builds a network namespace with veth ports)")
    ns = f"swtbench{secrets.token_hex(3)}"
    try:
        make_ports(ns, args.ports)
        cmd = ["ip", "netns", "exec", ns, sys.executable, __file__, "--inside",
               "--iterations", str(args.iterations)] + (["--quick"] if args.quick else [])
        subprocess.run(cmd, check=True)
    finally:
        subprocess.run(["ip", "netns", "del", ns], check=False)


if __name__ == "__main__":
    main()
