"""Soak: the agent at 10 ms on 256 veth ports with dial-out, for 10 minutes; its RSS, open
fds and threads sampled every 10 s, and their slopes reported (least squares, over the
whole run and over its second half, after warm-up). At the end traffic stops and every
port's in-pkts at the collector is compared with the kernel's rx_packets.

Namespaces as bench/bench_e2e.py: A holds one end of every veth pair, B the other end,
the agent and the collector (in this process, on loopback). One Ethernet frame per port
every 100 ms from A, so every port changes about every tenth tick. Not run in CI (it takes
the whole --minutes); needs root. Prints one JSON line per sample, then a summary:

    python bench/soak.py [--minutes 10] [--interval 0.01] [--ports 256]
                         [--notifications per-tick] [--out soak.jsonl]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(HERE))
import bench_e2e  # noqa: E402 - namespaces and the packet socket

from bench.lifetime import exit_on_sigterm, with_parent_death  # noqa: E402 - after the path setup


def slope_per_min(samples: list[tuple[float, float]]) -> float | None:
    """Least-squares slope of (seconds, value) pairs, per minute."""
    if len(samples) < 3:
        return None
    n = len(samples)
    mx = sum(t for t, _ in samples) / n
    my = sum(v for _, v in samples) / n
    var = sum((t - mx) ** 2 for t, _ in samples)
    return 60 * sum((t - mx) * (v - my) for t, v in samples) / var if var else None


def outer(args: argparse.Namespace) -> int:
    if os.geteuid() != 0:
        sys.exit("soak needs root (network namespaces)")
    extra = ["--minutes", str(args.minutes), "--interval", str(args.interval),
             "--notifications", args.notifications, "--sample", str(args.sample)]
    if args.out:
        extra += ["--out", args.out]
    return bench_e2e.run_in_namespaces(__file__, args.ports, extra)


def inner(args: argparse.Namespace) -> int:
    import psutil

    from agent.control.client import request
    from agent.tools.collect import Collector
    from tests.gnmi_helpers import free_port

    tmp = Path(tempfile.mkdtemp(prefix="swtel-soak-"))
    ports_a = [f"ea{args.tag}{i}" for i in range(args.ports)]
    ports_b = [f"eb{args.tag}{i}" for i in range(args.ports)]
    port = free_port()
    col = Collector(f"127.0.0.1:{port}", insecure=True, keep_messages=False).start()
    cfg = tmp / "swtel.yaml"
    cfg.write_text(
        f"target: soak\ninterval: {args.interval}\n"
        "sources:\n  netdev: {interfaces: ['eb*']}\n  ethtool: {interfaces: ['eb*']}\n"
        "  system: {enabled: false}\n"
        f"exporters:\n  dialout:\n    - {{name: col, address: '127.0.0.1:{port}', insecure: true,"
        f" notifications: {args.notifications}}}\n"
        f"control: {{socket: {tmp / 'swtel.sock'}, group: null}}\nlog: {{level: warning}}\n"
    )
    out = open(args.out, "w") if args.out else None  # noqa: SIM115 - closed below
    agent = subprocess.Popen(with_parent_death([sys.executable, "-m", "agent", "run", "-c", str(cfg)]), cwd=ROOT,
                             env={**os.environ, "PYTHONPATH": str(ROOT)})
    sock = bench_e2e.packet_socket_in(args.ns_a)
    frames = bench_e2e.port_frames(ports_b)
    status_of = lambda: request(str(tmp / "swtel.sock"), "status")  # noqa: E731
    try:
        path = f"/interfaces/interface[name={ports_b[-1]}]/state/counters/in-pkts"
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and path not in col.values("soak"):
            time.sleep(0.2)
        proc = psutil.Process(agent.pid)
        samples: list[dict] = []
        t0 = time.monotonic()
        next_sample = t0
        next_round = t0
        while True:
            now = time.monotonic()
            if now >= next_sample:
                st = status_of()
                ex = st["exporters"]["dialout:col"]
                with proc.oneshot():
                    s = {"t_s": round(now - t0, 1), "rss_kib": proc.memory_info().rss // 1024,
                         "fds": proc.num_fds(), "threads": proc.num_threads(),
                         "cpu_s": round(sum(proc.cpu_times()[:2]), 2)}
                s.update(ticks=st["tick"]["ticks"], overruns=st["tick"]["overruns"], sent=ex["sent"],
                         dropped=ex["dropped"], superseded=ex["superseded"], snapshots=ex["snapshots"],
                         queue=ex["queue"], state=ex["state"], collector_msgs=col.received)
                samples.append(s)
                line = json.dumps(s)
                print(line, flush=True)
                if out:
                    out.write(line + "\n")
                    out.flush()
                if now - t0 >= args.minutes * 60:
                    break
                next_sample += args.sample
            for ifname, frame in zip(ports_a, frames, strict=True):
                sock.sendto(frame, (ifname, 0))
            next_round += 0.1
            time.sleep(max(0.0, min(next_round, next_sample) - time.monotonic()))
        # traffic stopped: the collector must converge on the kernel's counters
        def mismatches() -> int:
            values = col.values("soak")
            bad = 0
            for p in ports_b:
                kernel = int(Path(f"/sys/class/net/{p}/statistics/rx_packets").read_text())
                if values.get(f"/interfaces/interface[name={p}]/state/counters/in-pkts") != kernel:
                    bad += 1
            return bad

        deadline = time.monotonic() + 30
        bad = mismatches()
        while bad and time.monotonic() < deadline:
            time.sleep(0.5)
            bad = mismatches()
        half = [x for x in samples if x["t_s"] >= samples[-1]["t_s"] / 2]
        first, last = samples[0], samples[-1]
        summary = {
            "ports": args.ports, "interval_ms": args.interval * 1000, "minutes": args.minutes,
            "notifications": args.notifications, "backend": status_of()["backend"],
            "rss_kib_first_last": [first["rss_kib"], last["rss_kib"]],
            "rss_kib_per_min": slope_per_min([(x["t_s"], x["rss_kib"]) for x in samples]),
            "rss_kib_per_min_2nd_half": slope_per_min([(x["t_s"], x["rss_kib"]) for x in half]),
            "fds_first_last": [first["fds"], last["fds"]],
            "fds_per_min": slope_per_min([(x["t_s"], x["fds"]) for x in samples]),
            "fds_per_min_2nd_half": slope_per_min([(x["t_s"], x["fds"]) for x in half]),
            "threads_first_last": [first["threads"], last["threads"]],
            "cpu_percent": round(100 * (last["cpu_s"] - first["cpu_s"]) / max(last["t_s"] - first["t_s"], 1e-9), 1),
            "ticks": last["ticks"] - first["ticks"], "overruns": last["overruns"] - first["overruns"],
            "sent": last["sent"], "dropped": last["dropped"], "superseded": last["superseded"],
            "snapshots": last["snapshots"], "state": last["state"],
            "ports_with_final_value_not_equal_kernel": bad,
        }
        print("summary: " + json.dumps(summary), flush=True)
        if out:
            out.write("summary: " + json.dumps(summary) + "\n")
        return 0 if bad == 0 and agent.poll() is None else 1
    finally:
        agent.terminate()
        try:
            agent.wait(10)
        except subprocess.TimeoutExpired:
            agent.kill()
        col.stop(0)
        if out:
            out.close()
        shutil.rmtree(tmp, ignore_errors=True)  # config, control socket, PKI


def main() -> int:
    exit_on_sigterm()
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--minutes", type=float, default=10.0)
    ap.add_argument("--interval", type=float, default=0.01)
    ap.add_argument("--ports", type=int, default=256)
    ap.add_argument("--sample", type=float, default=10.0, help="seconds between samples")
    ap.add_argument("--notifications", default="per-tick", choices=("per-tick", "per-container"))
    ap.add_argument("--out", help="also write the samples and the summary here")
    ap.add_argument("--inner", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--ns-a", help=argparse.SUPPRESS)
    ap.add_argument("--tag", help=argparse.SUPPRESS)
    args = ap.parse_args()
    return inner(args) if args.inner else outer(args)


if __name__ == "__main__":
    sys.exit(main())
