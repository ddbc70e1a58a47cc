"""The fleet's cost (issue 25, item 4): a simulated Clos fabric of N switches (N/4 spines,
the rest leaves, 64 ports each: the simulator's ``ports=64``, its traffic counters moving every tick) plus N/4
hosts, one agent per device polling at 100 ms, every agent sending by Prometheus remote
write to one VictoriaMetrics single node (Debian's) on loopback.

For each N it reports the agents' CPU (% of one core, their ASIC helper process included)
and RSS, the samples per second the engine ingested (its own vm_rows_inserted_total), the
engine's CPU and RSS, and whether every device's series are in it; then the least-squares
slope of each against N. Figures only: nothing is asserted. Needs no root. Everything it
starts is stopped and its directories removed, whatever happens.

    python bench/bench_fleet.py [--quick] [--sizes 8,16,32] [--seconds 60] [--rw-interval 1s]
                                [--json FILE]

``--quick`` (CI): 8 switches, 5 s (about 20 s). The full run (8, 16, 32; 60 s each) takes about 4
minutes.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(HERE))
from run_all import cpu_ns, machine, slope  # noqa: E402 - after the path setup

from bench.lifetime import exit_on_sigterm, with_parent_death  # noqa: E402 - after the path setup

PORTS = 64  # per switch (the sim's ports=N: plain ports with every counter of its layout)
_NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # loopback only


def _get(url: str, timeout: float = 10) -> bytes:
    return _NO_PROXY.open(url, timeout=timeout).read()


def fabric_shape(switches: int) -> tuple[int, int, int]:
    """(spines, leaves, hosts) for ``switches``: a quarter spines (1, 2, 4 or 8: they must
    divide a leaf's uplinks), the rest leaves, a quarter as many hosts (one switch: a leaf)."""
    if switches == 1:
        return 0, 1, 1
    spines = max(s for s in (1, 2, 4, 8) if s <= max(1, switches // 4))
    return spines, switches - spines, max(1, switches // 4)


class VictoriaMetrics:
    """Debian's victoria-metrics single node on loopback, its data in ``workdir``."""

    def __init__(self, workdir: Path) -> None:
        binary = shutil.which("victoria-metrics")
        if binary is None:
            raise SystemExit("victoria-metrics is not installed (Debian's package; .ci/setup-test installs it)")
        with socket.socket() as s:  # a free port on loopback
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.log = workdir / "victoria-metrics.log"
        # no latency offset: a query right after the window sees its last samples; the count of
        # every device's series touches them all (past the default limit of 300,000 at 32 switches)
        cmd = [binary, f"-storageDataPath={workdir / 'vm-data'}", f"-httpListenAddr=127.0.0.1:{self.port}",
               "-search.latencyOffset=0s", "-retentionPeriod=1", "-search.maxUniqueTimeseries=10000000"]
        with open(self.log, "w") as log:
            self.proc = subprocess.Popen(with_parent_death(cmd), stdout=log, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + 30
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"victoria-metrics exited ({self.proc.returncode}): {self.log.read_text()[-2000:]}")
            try:
                _get(f"http://127.0.0.1:{self.port}/health", 2)
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise RuntimeError("victoria-metrics not ready in 30 s") from None
                time.sleep(0.2)

    @property
    def write_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/api/v1/write"

    def rows_inserted(self) -> float:
        """Samples taken in by remote write so far (the engine's own count)."""
        text = _get(f"http://127.0.0.1:{self.port}/metrics").decode()
        m = re.search(r'^vm_rows_inserted_total\{type="promremotewrite"\} (\S+)$', text, re.M)
        return float(m.group(1)) if m else 0.0

    def query(self, expr: str) -> list[dict]:
        url = f"http://127.0.0.1:{self.port}/api/v1/query?query={urllib.parse.quote(expr)}"
        return json.loads(_get(url, 60))["data"]["result"]

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)


def _status(sock: Path) -> dict | None:
    from agent.control.client import request

    try:
        return request(str(sock), "status")
    except Exception:  # noqa: BLE001 - not up yet, or stopping
        return None


def _procs(pid: int) -> list:
    """An agent and its ASIC plugin's helper process (agent/asic/proxy.py)."""
    import psutil

    try:
        p = psutil.Process(pid)
        return [p, *p.children(recursive=True)]
    except psutil.NoSuchProcess:
        return []


def measure(switches: int, seconds: float, rw_interval: str) -> dict:
    """One fabric of ``switches`` switches into a fresh engine: its figures over ``seconds``."""
    import psutil

    from agent.tools.fabric import Fabric
    from agent.tools.topology import Topology

    spines, leaves, hosts = fabric_shape(switches)
    tmp = Path(tempfile.mkdtemp(prefix="swtel-fleet-"))
    vm: VictoriaMetrics | None = None
    fabric: Fabric | None = None
    try:
        vm = VictoriaMetrics(tmp)
        fabric = Fabric(tmp / "fabric", None, "clean", topology=Topology.clos(spines, leaves, hosts),
                        remote_write={"url": vm.write_url, "interval": rw_interval}, ports=PORTS)
        t_start = time.monotonic()
        fabric.start()
        # ready: every agent's first remote write accepted (so every one is past its start-up)
        deadline = time.monotonic() + 60 + 3 * len(fabric.switches)
        waiting = {sw.name for sw in fabric.switches}
        while waiting and time.monotonic() < deadline:
            if fabric.failed():
                raise RuntimeError(f"agents failed: {fabric.failed()}")
            for sw in fabric.switches:
                if sw.name in waiting:
                    st = _status(sw.socket)
                    if st and st["exporters"].get("remote_write:fabric", {}).get("sent", 0) >= 1:
                        waiting.discard(sw.name)
            time.sleep(0.5)
        if waiting:
            raise RuntimeError(f"no remote write accepted from {sorted(waiting)} in time")
        startup_s = time.monotonic() - t_start
        time.sleep(3.0)  # settle: the last agents' first full exports, the engine's first merges

        def snapshot() -> tuple[dict, dict, float, float, float]:
            cpu = {sw.name: sum(cpu_ns(p.pid) for p in _procs(sw.proc.pid)) for sw in fabric.switches}
            st = {sw.name: _status(sw.socket) or {} for sw in fabric.switches}
            return cpu, st, cpu_ns(vm.proc.pid), vm.rows_inserted(), time.monotonic()

        cpu0, st0, vcpu0, rows0, w0 = snapshot()
        time.sleep(seconds)
        cpu1, st1, vcpu1, rows1, w1 = snapshot()
        wall = w1 - w0
        agents = []
        for sw in fabric.switches:
            ex0 = st0[sw.name].get("exporters", {}).get("remote_write:fabric", {})
            ex1 = st1[sw.name].get("exporters", {}).get("remote_write:fabric", {})
            tick0, tick1 = st0[sw.name].get("tick", {}), st1[sw.name].get("tick", {})
            agents.append({
                "name": sw.name, "role": sw.role,
                "cpu_pct": 100 * (cpu1[sw.name] - cpu0[sw.name]) / 1e9 / wall,
                "rss_mib": sum(p.memory_info().rss for p in _procs(sw.proc.pid)) / 2**20,
                "samples_per_s": (ex1.get("samples", 0) - ex0.get("samples", 0)) / wall,
                "series": ex1.get("series", 0),
                "overruns": tick1.get("overruns", 0) - tick0.get("overruns", 0),
                "dropped": ex1.get("dropped", 0), "refused": ex1.get("refused", 0),
            })
        vm_rss = psutil.Process(vm.proc.pid).memory_info().rss / 2**20
        # every device's series in the engine (a fleet that loses a device is no fleet)
        in_engine = {r["metric"].get("target", ""): int(float(r["value"][1]))
                     for r in vm.query('count by (target) ({target=~".+"})')}
        return {
            "switches": switches, "spines": spines, "leaves": leaves, "hosts": hosts,
            "devices": len(fabric.switches), "window_s": wall, "startup_s": startup_s,
            "agents": agents,
            "engine_cpu_pct": 100 * (vcpu1 - vcpu0) / 1e9 / wall, "engine_rss_mib": vm_rss,
            "ingested_per_s": (rows1 - rows0) / wall,
            "sent_per_s": sum(a["samples_per_s"] for a in agents),
            "series_sent": sum(a["series"] for a in agents),
            "series_in_engine": sum(in_engine.values()),
            "devices_in_engine": sum(1 for sw in fabric.switches if in_engine.get(sw.name, 0) > 0),
        }
    finally:
        if fabric is not None:
            fabric.stop()
        if vm is not None:
            vm.stop()
        shutil.rmtree(tmp, ignore_errors=True)


def _mean(xs: list[float]) -> float:
    return sum(xs) / len(xs) if xs else 0.0


def summarize(r: dict) -> dict:
    sw = [a for a in r["agents"] if a["role"] != "host"]
    hs = [a for a in r["agents"] if a["role"] == "host"]
    return {
        "switch_cpu": _mean([a["cpu_pct"] for a in sw]), "switch_cpu_max": max(a["cpu_pct"] for a in sw),
        "switch_rss": _mean([a["rss_mib"] for a in sw]),
        "host_cpu": _mean([a["cpu_pct"] for a in hs]), "host_rss": _mean([a["rss_mib"] for a in hs]),
        "agents_cpu": sum(a["cpu_pct"] for a in r["agents"]),
        "overruns": sum(a["overruns"] for a in r["agents"]),
        "dropped": sum(a["dropped"] + a["refused"] for a in r["agents"]),
    }


def table(runs: list[dict]) -> list[str]:
    out = ["| switches (spines + leaves) + hosts | series | samples/s ingested | per switch "
           "| agent CPU % (switch: mean, max; host) | agent RSS MiB (switch; host) | all agents CPU % "
           "| engine CPU % | engine RSS MiB | engine CPU % per 100k samples/s | devices in engine "
           "| overruns; dropped |",
           "|---|---:|---:|---:|---|---|---:|---:|---:|---:|---:|---|"]
    for r in runs:
        s = summarize(r)
        per_100k = r["engine_cpu_pct"] / (r["ingested_per_s"] / 1e5) if r["ingested_per_s"] else 0.0
        out.append(
            f"| {r['switches']} ({r['spines']} + {r['leaves']}) + {r['hosts']} | {r['series_in_engine']:,} "
            f"| {r['ingested_per_s']:,.0f} | {r['ingested_per_s'] / r['switches']:,.0f} "
            f"| {s['switch_cpu']:.1f}, {s['switch_cpu_max']:.1f}; {s['host_cpu']:.1f} "
            f"| {s['switch_rss']:.1f}; {s['host_rss']:.1f} | {s['agents_cpu']:.0f} "
            f"| {r['engine_cpu_pct']:.1f} | {r['engine_rss_mib']:.0f} | {per_100k:.1f} "
            f"| {r['devices_in_engine']} / {r['devices']} | {s['overruns']}; {s['dropped']} |")
    if len(runs) >= 2:
        xs = [float(r["switches"]) for r in runs]
        out += ["", "least-squares fit y = a + b·switches (b per switch, its N/4 hosts included; "
                "r² near 1 = linear):", ""]
        for label, ys, unit in (
            ("samples/s ingested", [r["ingested_per_s"] for r in runs], "samples/s"),
            ("all agents' CPU", [summarize(r)["agents_cpu"] for r in runs], "% of a core"),
            ("one switch agent's CPU", [summarize(r)["switch_cpu"] for r in runs], "% of a core"),
            ("one switch agent's RSS", [summarize(r)["switch_rss"] for r in runs], "MiB"),
            ("engine CPU", [r["engine_cpu_pct"] for r in runs], "% of a core"),
            ("engine RSS", [r["engine_rss_mib"] for r in runs], "MiB"),
        ):
            b, a, r2 = slope(xs, ys)
            out.append(f"- {label}: slope {b:,.2f} {unit}/switch, intercept {a:,.1f} {unit}, r² {r2:.3f}")
        # what one more sample per second costs the engine, its fixed cost apart
        b, a, r2 = slope([r["ingested_per_s"] / 1e5 for r in runs], [r["engine_cpu_pct"] for r in runs])
        out.append(f"- engine CPU against samples/s: {b:.1f} % of a core per 100k samples/s, intercept {a:.1f} %, "
                   f"r² {r2:.3f}")
    return out


def main() -> int:
    exit_on_sigterm()
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="CI settings: 8 switches, 5 s")
    ap.add_argument("--sizes", default="8,16,32", help="switch counts")
    ap.add_argument("--seconds", type=float, default=60.0,
                    help="measured window per size (60 s: every idle series' once-a-minute resend falls in it once)")
    ap.add_argument("--rw-interval", default="1s", help="exporters.remote_write interval (its default: 1s)")
    ap.add_argument("--json", help="also write the raw figures here")
    args = ap.parse_args()
    if args.quick:
        args.sizes, args.seconds = "8", min(args.seconds, 5.0)
    # a SIGTERM unwinds like Ctrl-C: every agent and the engine are stopped, the directories removed
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))
    from agent import asic

    if asic.builtin_path("sim") is None:
        sys.exit("the sim plugin is not built: python setup.py build_ext --inplace")
    t0 = time.monotonic()
    runs = []
    for n in (int(x) for x in args.sizes.split(",")):
        spines, leaves, hosts = fabric_shape(n)
        print(f"[{time.monotonic() - t0:4.0f}s] {n} switches ({spines} spines, {leaves} leaves) + {hosts} hosts, "
              f"{args.seconds:.0f} s ...", file=sys.stderr, flush=True)
        try:
            runs.append(measure(n, args.seconds, args.rw_interval))
        except (RuntimeError, OSError) as exc:  # figures only: report and go on
            print(f"  {n} switches failed: {exc}", file=sys.stderr)
    elapsed = time.monotonic() - t0
    print(f"\n## swtel fleet benchmark ({'--quick' if args.quick else 'full'}, {elapsed:.0f} s)\n")
    print(f"Machine: {machine()}. Agents poll at 100 ms ({PORTS} simulated ports a switch) and remote-write "
          f"every {args.rw_interval} to one VictoriaMetrics on loopback; {args.seconds:.0f} s measured per size. "
          "CPU is % of one core.\n")
    print("\n".join(table(runs)))
    if args.json:
        Path(args.json).write_text(json.dumps({"machine": machine(), "args": vars(args), "runs": runs}, indent=1))
    return 0 if runs else 1


if __name__ == "__main__":
    sys.exit(main())
