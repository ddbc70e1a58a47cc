"""gRPC messages a tick and CPU on the simulated spine dialing out (issue 35).

The agent runs the built-in simulated SN5600 spine (68 ports, ``role=spine``, about 174
values a port), every detector on, at 100 ms, dialing out to a collector on loopback (in
this process). Printed, not asserted:

* the snapshot after connecting: its messages and values;
* over ``--seconds`` of steady state: messages a tick at the collector (ticks from the
  agent's status), link_degrading's gauge updates a second, overruns, and the CPU of the
  agent and its plugin helper (% of one core).

    python bench/bench_spine_dialout.py [--seconds 10] [--interval 100ms]
        [--notifications per-tick|per-container] [--tree DIR]

``--tree`` runs the agent from another checkout (e.g. ``git archive e9b83a0`` unpacked and
built with ``setup.py build_ext --inplace``) to print the figures before a change beside
after. Needs no root.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))
from bench.lifetime import exit_on_sigterm, with_parent_death  # noqa: E402 - after the path setup

SIM = "role=spine seed=1 scenario=symbol-errors@5s-25s:swp11s1"
GAUGE = "/fec/prediction/state/"


def _cpu(proc) -> float:
    """User + system seconds of ``proc`` and its live children (the plugin helper)."""
    import psutil

    total = 0.0
    for p in [proc, *proc.children(recursive=True)]:
        try:
            t = p.cpu_times()
        except psutil.Error:
            continue
        total += t.user + t.system
    return total


def run(args: argparse.Namespace) -> int:
    import psutil

    from agent.control.client import request
    from agent.tools.collect import Collector
    from tests.gnmi_helpers import free_port

    tree = Path(args.tree).resolve() if args.tree else ROOT
    tmp = Path(tempfile.mkdtemp(prefix="swtel-spine-"))
    lock = threading.Lock()
    counts = {"gauges": 0, "values": 0}

    def on_lines(lines, _rx_ns) -> None:
        n = sum(1 for ln in lines if GAUGE in ln.get("path", ""))
        with lock:
            counts["gauges"] += n
            counts["values"] += sum(1 for ln in lines if "path" in ln)

    port = free_port()
    col = Collector(f"127.0.0.1:{port}", insecure=True, keep_messages=True, on_lines=on_lines).start()
    sock = tmp / "swtel.sock"
    cfg = tmp / "swtel.yaml"
    cfg.write_text(
        f"target: spine-1\ninterval: {args.interval}\n"
        "sources:\n  netdev: {enabled: false}\n  ethtool: {enabled: false}\n  system: {interval: 1s}\n"
        f"  asic: {{enabled: true, plugin: sim, config: '{SIM}'}}\n"
        f"exporters:\n  dialout:\n    - {{name: col, address: '127.0.0.1:{port}', insecure: true, "
        f"notifications: {args.notifications}}}\n"
        f"control: {{socket: {sock}, group: null}}\nlog: {{level: warning}}\n")
    agent = subprocess.Popen(with_parent_death([sys.executable, "-m", "agent", "run", "-c", str(cfg)]), cwd=tree,
                             env={**os.environ, "PYTHONPATH": str(tree), "PYTHONDONTWRITEBYTECODE": "1"})
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not any(s.synced for s in col.streams):
            time.sleep(0.1)
        if not any(s.synced for s in col.streams):
            print("no sync_response from the agent within 60 s")
            return 1
        stream = col.streams[0]
        snap = next(i for i, r in enumerate(stream.responses) if r.sync_response)
        values = sum(len(r.update.update) + len(r.update.delete) for r in stream.responses[:snap])
        time.sleep(args.settle)  # past the first buckets and the gauges' first publication
        proc = psutil.Process(agent.pid)
        tick0 = request(str(sock), "status").get("tick", {})
        msgs0, cpu0, wall0 = col.received, _cpu(proc), time.monotonic()
        with lock:
            gauges0, values0 = counts["gauges"], counts["values"]
        time.sleep(args.seconds)
        msgs1, cpu1, wall1 = col.received, _cpu(proc), time.monotonic()
        tick1 = request(str(sock), "status").get("tick", {})
        with lock:
            gauges1, values1 = counts["gauges"], counts["values"]
        ticks = tick1.get("ticks", 0) - tick0.get("ticks", 0)
        window = wall1 - wall0
        print(f"simulated spine ({SIM}), every detector on, interval {args.interval}, dial-out "
              f"{args.notifications}, agent from {tree}")
        print(f"| figure | value |\n|---|---|\n"
              f"| snapshot after connecting | {snap} messages, {values} values |\n"
              f"| gRPC messages a tick (steady state, {window:.1f} s) | "
              f"{(msgs1 - msgs0) / max(ticks, 1):.2f} ({msgs1 - msgs0} messages, {ticks} ticks) |\n"
              f"| values a second at the collector | {(values1 - values0) / window:.0f} |\n"
              f"| link_degrading gauge updates a second | {(gauges1 - gauges0) / window:.1f} |\n"
              f"| overruns in the window (since start) | {tick1.get('overruns', 0) - tick0.get('overruns', 0)} "
              f"({tick1.get('overruns')}) |\n"
              f"| agent + helper CPU | {100 * (cpu1 - cpu0) / window:.1f} % of one core |")
        return 0
    finally:
        agent.terminate()
        try:
            agent.wait(10)
        except subprocess.TimeoutExpired:
            agent.kill()
        col.stop(0)
        shutil.rmtree(tmp, ignore_errors=True)


def main() -> int:
    exit_on_sigterm()
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=10.0, help="steady-state window")
    ap.add_argument("--settle", type=float, default=3.0, help="seconds after sync before measuring")
    ap.add_argument("--interval", default="100ms")
    ap.add_argument("--notifications", default="per-tick", choices=("per-tick", "per-container"))
    ap.add_argument("--tree", default=None, help="run the agent from this checkout (a 'before')")
    return run(ap.parse_args())


if __name__ == "__main__":
    sys.exit(main())
