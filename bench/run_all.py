"""The benchmark entry command for the veth tables of docs/PERFORMANCE.md (the simulated spine's table is
bench/bench_spine.py's): every figure of them, measured side by side
in one run and printed as one markdown table of medians and ratios, then the scaling table
(64 to 1024 ports, veth and the simulated switch) with its least-squares slopes.

It reuses the other bench modules: bench_reader's pipeline, floor and node_exporter scrape
(run inside a namespace this command makes and removes), bench_encode, bench_sim and
bench_e2e (run as they are, their output parsed). Figures only: nothing is asserted. Root.

    python bench/run_all.py [--quick] [--ports 256] [--sizes 64,128,256,512,1024]
                            [--no-scaling] [--no-e2e] [--json FILE]

``--quick`` (CI) fits in about 3 minutes on a 2-core VM; the full run takes about 12.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import secrets
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(HERE))
from bench.lifetime import exit_on_sigterm, with_parent_death  # noqa: E402 - after the path setup

PY = sys.executable


# ------------------------------------------------------------------ helpers

def slope(xs: list[float], ys: list[float]) -> tuple[float, float, float]:
    """Least squares y = a + b x: (b, a, r^2)."""
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    sxx = sum((x - mx) ** 2 for x in xs)
    sxy = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True))
    b = sxy / sxx
    a = my - b * mx
    ss_tot = sum((y - my) ** 2 for y in ys)
    ss_res = sum((y - a - b * x) ** 2 for x, y in zip(xs, ys, strict=True))
    return b, a, (1 - ss_res / ss_tot) if ss_tot else 1.0


def run_inner(ns: str | None, what: str, args: argparse.Namespace, *extra: str) -> dict:
    """Run this file's ``--inner WHAT`` (in namespace ``ns``); its last stdout line is JSON."""
    cmd = ([] if ns is None else ["ip", "netns", "exec", ns]) + [
        PY, __file__, "--inner", what, "--iterations", str(args.iterations),
        "--agent-seconds", str(args.agent_seconds), *extra]
    out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=900)
    if out.returncode != 0:
        raise RuntimeError(f"inner {what} failed: {out.stderr[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


class Namespace:
    """A network namespace holding ``n`` veth ports (n/2 pairs), removed on exit."""

    def __init__(self, n: int):
        self.name = f"swtrun{secrets.token_hex(3)}"
        self.n = n

    def __enter__(self) -> str:
        from bench_reader import make_ports

        try:
            make_ports(self.name, self.n)
        except BaseException:
            self.__exit__()
            raise
        return self.name

    def __exit__(self, *_exc) -> None:
        subprocess.run(["ip", "netns", "del", self.name], capture_output=True, check=False)


# ------------------------------------------------------------------ inner: the agent itself

def cpu_ns(pid: int) -> int:
    """CPU time of every thread of ``pid`` in ns (schedstat: no 10 ms clock-tick granularity)."""
    total = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            total += int((task / "schedstat").read_text().split()[0])
        except (OSError, ValueError, IndexError):
            pass  # a thread that just ended
    return total


def agent_idle(seconds: float, interval: str = "100ms", pure: bool = False,
               sources: str | None = None, exporters: str = "  jsonl: {path: /dev/null}\n",
               idle_interval: str | None = None) -> dict:
    """Run ``swtel run`` (jsonl exporter to /dev/null) and measure its CPU per tick, % of a
    core and RSS over ``seconds`` after a settle second (its plugin helper process included);
    ticks and overruns from its status."""
    import psutil

    from agent.control.client import request

    interval_s = float(interval.removesuffix("ms")) / 1e3
    tmp = Path(tempfile.mkdtemp(prefix="swtel-runall-"))
    sock = tmp / "swtel.sock"
    if sources is None:
        idle = "" if idle_interval is None else f", idle_interval: {idle_interval}"
        sources = f"  netdev: {{interfaces: ['*']}}\n  ethtool: {{interfaces: ['*']{idle}}}\n"
    (tmp / "swtel.yaml").write_text(
        f"target: bench\ninterval: {interval}\nsources:\n{sources}"
        f"exporters:\n{exporters}"
        f"control: {{socket: {sock}, group: null}}\nlog: {{level: warning}}\n")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("SWTEL_PUREPYTHON", None)
    if pure:
        env["SWTEL_PUREPYTHON"] = "1"
    agent = subprocess.Popen(with_parent_death([PY, "-m", "agent", "run", "-c", str(tmp / "swtel.yaml")]), cwd=ROOT,
                             env=env, stdout=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        status = None
        while time.monotonic() < deadline:
            try:
                status = request(str(sock), "status")
                if status["tick"]["ticks"] >= 3:
                    break
            except Exception:  # noqa: BLE001 - not up yet
                pass
            if agent.poll() is not None:
                raise RuntimeError(f"agent exited with {agent.returncode}")
            time.sleep(0.1)
        else:
            raise RuntimeError("agent did not start ticking")
        time.sleep(1.0)  # settle after the first snapshot
        # the agent and its ASIC plugin's helper process (agent/asic/host.py), when it has one
        procs = [psutil.Process(agent.pid), *psutil.Process(agent.pid).children(recursive=True)]
        s0, c0, w0 = request(str(sock), "status")["tick"], sum(cpu_ns(p.pid) for p in procs), time.monotonic()
        time.sleep(seconds)
        s1, c1, w1 = request(str(sock), "status")["tick"], sum(cpu_ns(p.pid) for p in procs), time.monotonic()
        cpu = (c1 - c0) / 1e9
        ticks = s1["ticks"] - s0["ticks"]
        return {"backend": status.get("backend"), "ticks": ticks,
                "overruns": s1["overruns"] - s0["overruns"], "wall_s": w1 - w0,
                # a tick is one interval (the loop may wake more than once in it: "passes")
                "cpu_ms_per_tick": cpu * 1e3 / ((w1 - w0) / interval_s), "cpu_pct": 100 * cpu / (w1 - w0),
                "passes_per_tick": ticks / ((w1 - w0) / interval_s),
                "rss_mib": sum(p.memory_info().rss for p in procs) / 2**20}
    finally:
        agent.terminate()
        try:
            agent.wait(10)
        except subprocess.TimeoutExpired:
            agent.kill()
        shutil.rmtree(tmp, ignore_errors=True)


def inner_reader(args: argparse.Namespace) -> dict:
    """In the namespace: bench_reader's figures, node_exporter's CPU, the idle agent."""
    from bench_reader import Pipeline, floor_us, median_us, node_exporter_scrape

    from agent import _fallback, _swtel

    ports = sorted(name for _, name in socket.if_nameindex() if name != "lo")
    it = args.iterations
    r: dict = {"ports": len(ports)}
    r["floor"] = floor_us(ports, it)
    c, py = Pipeline(_swtel, ports), Pipeline(_fallback, ports)
    for p in (c, py):
        p.netdev()
        p.ethtool()
    r["counters"] = len(c.nd["cur"]) + len(c.et["cur"])
    r["c_netdev_read"] = median_us(c.netdev_read, it)
    r["c_netdev"] = median_us(c.netdev, it)
    r["c_ethtool_read"] = median_us(c.ethtool_read, it)
    r["c_ethtool"] = median_us(c.ethtool, it)
    def cold() -> None:  # as in the agent: caches gone cold in the 100 ms between ticks
        time.sleep(0.1)
        t = time.perf_counter()
        c.netdev()
        c.ethtool()
        cold_us.append((time.perf_counter() - t) * 1e6)

    cold_us: list[float] = []
    for _ in range(20 if args.quick else 50):
        cold()
    r["c_cold"] = statistics.median(cold_us)
    r["py_netdev"] = median_us(py.netdev, max(10, it // 10))
    r["py_ethtool"] = median_us(py.ethtool, max(10, it // 10))
    from pyroute2 import IPRoute

    with IPRoute() as ipr:
        r["pyroute2"] = median_us(ipr.get_links, 3 if args.quick else 10)
    if shutil.which("ethtool"):
        t0 = time.perf_counter()
        for p in ports:
            subprocess.run(["ethtool", "-S", p], capture_output=True, check=False)
        r["ethtool_s"] = (time.perf_counter() - t0) * 1e6
    ne = node_exporter_scrape(5 if args.quick else 20)
    if ne is not None:
        r["ne_wall"], r["ne_cpu"] = ne
    if args.agent_seconds > 0:
        r["agent_c"] = agent_idle(args.agent_seconds)
        # ethtool's every port every tick: the cost when every port's driver counters move
        r["agent_c_all"] = agent_idle(args.agent_seconds, idle_interval="0")
        r["agent_py"] = agent_idle(args.agent_seconds, pure=True)
        r["agent_10ms"] = agent_idle(args.agent_seconds, interval="10ms")
        r["agent_10ms_all"] = agent_idle(args.agent_seconds, interval="10ms", idle_interval="0")
    return r


def inner_scale(args: argparse.Namespace) -> dict:
    """In a namespace of N veth ports: C read+diff per poll and the idle agent; then the
    simulated switch with N ports (the agent reads only it)."""
    from bench_reader import Pipeline, median_us
    from bench_sim import _agent_path

    from agent import _swtel

    ports = sorted(name for _, name in socket.if_nameindex() if name != "lo")
    c = Pipeline(_swtel, ports)
    c.netdev()
    c.ethtool()
    it = args.iterations
    r: dict = {"ports": len(ports), "counters": len(c.nd["cur"]) + len(c.et["cur"]),
               "c_us": median_us(c.netdev, it) + median_us(c.ethtool, it)}
    r["agent"] = agent_idle(args.agent_seconds)
    n = len(ports)
    sim = _agent_path(n, it)
    r["sim_counters"] = sim[1][2]
    r["sim_us"] = sim[1][1]
    r["sim_agent"] = agent_idle(args.agent_seconds, sources=(
        "  netdev: {enabled: false}\n  ethtool: {enabled: false}\n  system: {enabled: false}\n"
        f"  asic: {{enabled: true, plugin: sim, config: 'ports={n}'}}\n"), exporters="  {}\n")
    return r


# ------------------------------------------------------------------ outer: other modules, parsed

def num(pattern: str, text: str, group: int = 1) -> float:
    m = re.search(pattern, text, re.M)
    if m is None:
        raise ValueError(f"no match for {pattern!r} in:\n{text}")
    return float(m.group(group))


def run_module(*argv: str, timeout: float = 900) -> str:
    out = subprocess.run([PY, *argv], cwd=ROOT, capture_output=True, text=True, timeout=timeout)
    if out.returncode != 0:
        raise RuntimeError(f"{argv[0]} failed ({out.returncode}): {out.stdout[-1500:]}{out.stderr[-1500:]}")
    return out.stdout


def encoders(args: argparse.Namespace) -> dict:
    out = run_module(str(HERE / "bench_encode.py"), "--runs", "3" if args.quick else "7")
    r = {"backend": re.search(r"^protobuf (\S+) backend", out, re.M).group(1)}
    for key, label in (("snap", r"snapshot \(all\)"), ("tick", r"tick, 10% changed")):
        m = re.search(label + r"\s+(\d+)\s+([\d.]+)ms\s+([\d.]+)ms\s+([\d.]+)ms", out)
        r[key] = {"updates": int(m.group(1)), "c_ms": float(m.group(2)), "pb_ms": float(m.group(3)),
                  "py_ms": float(m.group(4))}
    return r


def sim(args: argparse.Namespace) -> dict:
    out = run_module(str(HERE / "bench_sim.py"), "--ports", str(args.ports), *(["--quick"] if args.quick else []))
    return {"read_us": num(rf"^ports={args.ports}, healthy\s+\d+\s+([\d.]+)", out),
            "counters": int(num(rf"^ports={args.ports}, healthy\s+(\d+)", out)),
            "read_diff_us": num(r"^agent reader \(\S+\): read \+ diff\s+\d+\s+([\d.]+)", out)}


def e2e(args: argparse.Namespace, mode: str, tls: bool, idle_interval: str | None = None) -> dict:
    out = run_module(str(HERE / "bench_e2e.py"), "--ports", str(args.ports), "--seconds", str(args.e2e_seconds),
                     "--notifications", mode, *(["--tls"] if tls else []),
                     *(["--idle-interval", idle_interval] if idle_interval is not None else []))
    return {"cpu_pct": num(r"agent CPU: ([\d.]+)%", out), "rss_mib": num(r"RSS: ([\d.]+) MiB", out),
            "p50": num(r"frame sent -> collector received\s+([\d.]+)", out),
            "p99": num(r"frame sent -> collector received\s+[\d.]+\s+([\d.]+)", out),
            "overruns": int(num(r"overruns=(\d+)", out)), "probes": int(num(r"probes=(\d+)", out))}


# ------------------------------------------------------------------ the tables

def stop(args: argparse.Namespace) -> dict:
    """SIGTERM to exit of an agent with all four networked exporters connected, and the tools'
    stop after SIGHUP/SIGTERM/Ctrl-C (bench_stop.py; its last line is JSON)."""
    out = run_module(str(HERE / "bench_stop.py"), *(["--quick"] if args.quick else ["--runs", "5"]))
    return json.loads(out.strip().splitlines()[-1])


def machine() -> str:
    model = "?"
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            model = line.split(":", 1)[1].strip()
            break
    return f"{os.cpu_count()} CPUs ({model}), kernel {os.uname().release}, Python {sys.version.split()[0]}"


def main_table(r: dict, args: argparse.Namespace) -> list[str]:
    rows: list[tuple[str, str, str]] = []

    def row(what: str, value: str, ratio: str = "") -> None:
        rows.append((what, value, ratio))

    rd = r.get("reader")
    if rd:
        c_total = rd["c_netdev"] + rd["c_ethtool"]
        floor = rd["floor"]["netdev_us"] + rd["floor"]["ethtool_us"]
        py = rd["py_netdev"] + rd["py_ethtool"]
        n, k = rd["ports"], rd["counters"]
        row(f"**swtel C path**: netdev + ethtool read + diff, {n} veth ports, {k} counters",
            f"{c_total:.0f} µs/poll", "1 (reference)")
        row("  netdev: RTM_GETSTATS dump + diff", f"{rd['c_netdev']:.0f} µs",
            f"{rd['c_netdev'] / rd['floor']['netdev_us']:.2f}× its floor")
        row("  ethtool: ETHTOOL_GSTATS per port + diff", f"{rd['c_ethtool']:.0f} µs",
            f"{rd['c_ethtool'] / rd['floor']['ethtool_us']:.2f}× its floor")
        row("  the same, each read 100 ms after the last (cold caches, as in the agent)",
            f"{rd['c_cold']:.0f} µs/poll", f"{rd['c_cold'] / c_total:.2f}× back-to-back")
        row("syscall floor (bench/floor.c: the same syscalls in a minimal C loop)", f"{floor:.0f} µs/poll",
            f"swtel C = {c_total / floor:.2f}× floor")
        row("pure-Python fallback (SWTEL_PUREPYTHON=1), read + diff", f"{py:.0f} µs/poll",
            f"{py / c_total:.1f}× swtel C")
        row("pyroute2 `get_links()` (netdev only)", f"{rd['pyroute2'] / 1e3:.1f} ms",
            f"{rd['pyroute2'] / rd['c_netdev']:,.0f}× swtel C netdev")
        if "ethtool_s" in rd:
            row(f"`ethtool -S` subprocess × {n} ports", f"{rd['ethtool_s'] / 1e3:,.0f} ms",
                f"{rd['ethtool_s'] / c_total:,.0f}× swtel C")
        if "ne_cpu" in rd:
            row("node_exporter (Debian, netdev + ethtool collectors): CPU per scrape",
                f"{rd['ne_cpu'] / 1e3:.1f} ms", f"{rd['ne_cpu'] / c_total:,.0f}× swtel C")
            row("  node_exporter wall time per scrape", f"{rd['ne_wall'] / 1e3:.1f} ms",
                f"{rd['ne_wall'] / c_total:,.0f}× swtel C")
        for key, label in (("agent_c", "swtel agent idle, C backend"),
                           ("agent_c_all", "swtel agent idle, C backend, ethtool `idle_interval: 0`"),
                           ("agent_py", "swtel agent idle, pure-Python backend")):
            a = rd.get(key)
            if a:
                ratio = (f"node_exporter scrape CPU = {rd['ne_cpu'] / 1e3 / a['cpu_ms_per_tick']:.0f}× a tick"
                         if "ne_cpu" in rd else "")
                what = ("every port's GSTATS every tick" if key.endswith("_all")
                        else "idle ports' GSTATS once per 1 s")
                row(f"{label} (netdev + ethtool at 100 ms, {what}, system at 5 s, insights, jsonl): CPU per tick",
                    f"{a['cpu_ms_per_tick']:.2f} ms", ratio)
                row("  its share of one core; RSS", f"{a['cpu_pct']:.2f} %; {a['rss_mib']:.0f} MiB",
                    f"{a['overruns']} overruns; {a['passes_per_tick']:.1f} loop passes per tick")
        for key, what in (("agent_10ms", "idle ports' GSTATS once per 1 s"),
                          ("agent_10ms_all", "`idle_interval: 0`, every port's GSTATS every tick")):
            a = rd.get(key)
            if a:
                row(f"swtel agent at **10 ms**, {n} ports (netdev + ethtool, {what}): CPU per tick",
                    f"{a['cpu_ms_per_tick']:.2f} ms", f"{a['cpu_pct']:.1f} % of a core")
                row("  loop passes / overruns (missed ticks)", f"{a['ticks']} / {a['overruns']}",
                    f"in {a['wall_s']:.0f} s: {a['passes_per_tick']:.1f} passes per tick")
    en = r.get("encode")
    if en:
        for key, label in (("snap", "snapshot"), ("tick", "tick, 10 % changed")):
            e = en[key]
            row(f"encoder, {label} ({e['updates']:,} updates): C", f"{e['c_ms']:.2f} ms", "1")
            row(f"  protobuf ({en['backend']}) messages + SerializeToString", f"{e['pb_ms']:.2f} ms",
                f"{e['pb_ms'] / e['c_ms']:.0f}× C")
            row("  pure-Python fallback encoder", f"{e['py_ms']:.2f} ms", f"{e['py_ms'] / e['c_ms']:.0f}× C")
    s = r.get("sim")
    if s:
        row(f"simulated ASIC read, {args.ports} ports × 187 values ({s['counters']:,}), ctypes",
            f"{s['read_us']:.1f} µs", f"{s['read_us'] * 100 / 1e4:.2f} % of a core at 100 Hz")
        row("  agent reader asic_read + diff", f"{s['read_diff_us']:.1f} µs",
            f"{s['read_diff_us'] / s['counters'] * 1e3:.2f} ns/counter")
    for key, val in r.get("e2e", {}).items():
        if "error" in val:
            row(f"end-to-end dial-out {key}", "failed", val["error"][:80])
            continue
        row(f"end-to-end dial-out, {key}, full churn {args.ports} ports: p50 / p99 change→collector",
            f"{val['p50']:.0f} / {val['p99']:.0f} ms",
            f"budget p99 ≤ 110 ms: {'met' if val['p99'] <= 110 else 'missed'}")
        row("  agent CPU; RSS", f"{val['cpu_pct']:.1f} % of a core; {val['rss_mib']:.0f} MiB",
            f"{val['overruns']} overruns, {val['probes']} probes")
    st = r.get("stop")
    if st:
        a = st["agent_four"]
        row("agent stop: SIGTERM → exit, dial-out + tunnel + OTLP + remote write connected",
            f"{a['median_s']:.2f} s", f"max {a['max_s']:.2f} s; goal ≤ 1 s")
        a = st["agent_lingering"]
        row("  the same, dial-out to a collector that never closes the stream",
            f"{a['median_s']:.2f} s", f"max {a['max_s']:.2f} s (CLOSE_GRACE_S 0.5 s)")
        for key, label in (("fabric_SIGHUP", "swtel fabric, SIGHUP"), ("fabric_SIGTERM", "swtel fabric, SIGTERM"),
                           ("demo_SIGHUP", "swtel demo, SIGHUP"), ("demo_SIGINT", "swtel demo, Ctrl-C")):
            t = st.get(key)
            if t:
                row(f"{label} → every agent and plugin helper gone", f"{t['all_gone']['median_s']:.2f} s",
                    f"max {t['all_gone']['max_s']:.2f} s; goal ≤ 2 s")
    out = ["| what | median | ratio |", "|---|---:|---|"]
    out += [f"| {w} | {v} | {x} |" for w, v, x in rows]
    return out


def scaling_table(sc: list[dict]) -> list[str]:
    out = ["| ports | counters (veth) | C read+diff µs | agent ms/tick | agent RSS MiB "
           "| sim counters | sim read+diff µs | sim agent ms/tick | sim agent RSS MiB |",
           "|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for s in sc:
        out.append(f"| {s['ports']} | {s['counters']} | {s['c_us']:.0f} | {s['agent']['cpu_ms_per_tick']:.2f} "
                   f"| {s['agent']['rss_mib']:.1f} | {s['sim_counters']} | {s['sim_us']:.1f} "
                   f"| {s['sim_agent']['cpu_ms_per_tick']:.3f} | {s['sim_agent']['rss_mib']:.1f} |")
    if len(sc) >= 2:
        xs = [s["ports"] for s in sc]
        out.append("")
        out.append("least-squares fit y = a + b·ports (b per port; r² near 1 = linear):")
        out.append("")
        for label, ys, unit in (
            ("veth C read+diff", [s["c_us"] for s in sc], "µs"),
            ("veth agent CPU per tick", [s["agent"]["cpu_ms_per_tick"] * 1e3 for s in sc], "µs"),
            ("veth agent RSS", [s["agent"]["rss_mib"] * 1024 for s in sc], "KiB"),
            ("sim read+diff", [s["sim_us"] for s in sc], "µs"),
            ("sim agent CPU per tick", [s["sim_agent"]["cpu_ms_per_tick"] * 1e3 for s in sc], "µs"),
            ("sim agent RSS", [s["sim_agent"]["rss_mib"] * 1024 for s in sc], "KiB"),
        ):
            b, a, r2 = slope(xs, ys)
            out.append(f"- {label}: slope {b:.2f} {unit}/port, intercept {a:.0f} {unit}, r² {r2:.3f}")
    return out


def main() -> int:
    exit_on_sigterm()
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="CI settings: about 3 minutes")
    ap.add_argument("--ports", type=int, default=256)
    ap.add_argument("--sizes", default="64,128,256,512,1024", help="scaling port counts")
    ap.add_argument("--no-scaling", action="store_true")
    ap.add_argument("--no-e2e", action="store_true")
    ap.add_argument("--iterations", type=int, default=300)
    ap.add_argument("--agent-seconds", type=float, default=10.0)
    ap.add_argument("--e2e-seconds", type=float, default=20.0)
    ap.add_argument("--json", help="also write the raw figures here")
    ap.add_argument("--inner", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.quick:
        args.iterations = min(args.iterations, 100)
        args.agent_seconds = min(args.agent_seconds, 3.0)
        args.e2e_seconds = min(args.e2e_seconds, 4.0)
    if args.inner:
        print(json.dumps({"reader": inner_reader, "scale": inner_scale}[args.inner](args)))
        return 0
    if os.geteuid() != 0:
        sys.exit("run_all needs root (it builds network namespaces with veth ports)")
    try:
        from agent import _swtel  # noqa: F401
    except ImportError:
        sys.exit("the C extension is not built: python setup.py build_ext --inplace")

    t0 = time.monotonic()
    r: dict = {"machine": machine(), "args": vars(args)}

    def step(name: str, fn) -> None:
        t = time.monotonic()
        print(f"[{time.monotonic() - t0:5.0f}s] {name} ...", file=sys.stderr, flush=True)
        try:
            return fn()
        except Exception as exc:  # noqa: BLE001 - figures only: report and go on
            print(f"  {name} failed: {exc}", file=sys.stderr)
            return {"error": str(exc)}
        finally:
            print(f"  ({time.monotonic() - t:.0f}s)", file=sys.stderr, flush=True)

    def reader() -> dict:
        with Namespace(args.ports) as ns:
            return run_inner(ns, "reader", args)

    r["reader"] = step(f"reader, node_exporter, idle agent ({args.ports} veth ports)", reader)
    if "error" in r["reader"]:
        r.pop("reader")
    r["encode"] = step("encoders (bench_encode.py)", lambda: encoders(args))
    r["sim"] = step("simulated ASIC (bench_sim.py)", lambda: sim(args))
    r["stop"] = step("prompt stop (bench_stop.py)", lambda: stop(args))
    for k in ("encode", "sim", "stop"):
        if "error" in r[k]:
            r.pop(k)
    r["e2e"] = {}
    if not args.no_e2e:
        for mode in ("per-tick", "per-container"):
            for tls in (False, True):
                key = f"{mode}{', TLS' if tls else ', plaintext'}"
                r["e2e"][key] = step(f"end-to-end {key} (bench_e2e.py)", lambda m=mode, t=tls: e2e(args, m, t))
            if mode == "per-tick":
                # veth's driver counters do not move with traffic, so the default skips their
                # GSTATS; a NIC's or switchd's do: every port every tick is that case
                key = "per-tick, plaintext, ethtool `idle_interval: 0`"
                r["e2e"][key] = step(f"end-to-end {key} (bench_e2e.py)",
                                     lambda m=mode: e2e(args, m, False, idle_interval="0"))
    sc: list[dict] = []
    if not args.no_scaling:
        for n in (int(x) for x in args.sizes.split(",")):
            def one(n=n) -> dict:
                with Namespace(n) as ns:
                    return run_inner(ns, "scale", args)
            res = step(f"scaling: {n} ports", one)
            if "error" not in res:
                sc.append(res)
    r["scaling"] = sc
    elapsed = time.monotonic() - t0

    print(f"\n## swtel benchmark ({'--quick' if args.quick else 'full'}, {elapsed:.0f} s)\n")
    print(f"Machine: {r['machine']}. One run; every ratio is measured side by side in it.\n")
    print("\n".join(main_table(r, args)))
    if sc:
        print(f"\n### Scaling (agent: netdev + ethtool at 100 ms on veth ports, idle ports' ethtool read once "
              f"per 1 s, the default; sim: `sources.asic` "
              f"plugin sim `ports=N` only, its default load (every counter moves), no exporter; "
              f"{args.agent_seconds:.0f} s each)\n")
        print("\n".join(scaling_table(sc)))
    if args.json:
        Path(args.json).write_text(json.dumps(r, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
