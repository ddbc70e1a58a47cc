"""How long a stop takes: SIGTERM to exit of an agent whose dial-out, tunnel, OTLP and remote
write exporters are connected to local peers (tests/peers.py), of one whose dial-out collector
never closes the stream, and SIGHUP/SIGTERM/Ctrl-C to the moment ``swtel fabric`` and ``swtel
demo`` have exited with every agent and plugin helper gone (issue 34, item 4).

Figures only (tests/unit/test_stop.py shows the behaviour without timing it). Any user; loopback.

    python bench/bench_stop.py [--runs 5] [--quick] [--no-tools]

The last line is the figures as JSON (bench/run_all.py reads it).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from concurrent import futures
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))
from bench.lifetime import exit_on_sigterm, with_parent_death  # noqa: E402 - after the path setup

PY = sys.executable


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT)}


def _wait(predicate, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out waiting for {what}")
        time.sleep(0.05)


def _status(sock: Path) -> dict:
    from agent.control.client import ControlError, request

    try:
        return request(str(sock), "status", timeout_s=2.0)
    except (ControlError, OSError):
        return {}


def agent_stop(exporters: str, connected, settle_s: float = 1.0) -> float:
    """Start an agent (netdev on lo, system) with ``exporters`` (lines of its section), wait
    until ``connected(status)``, SIGTERM it: seconds to its exit."""
    tmp = Path(tempfile.mkdtemp(prefix="swtel-bench-stop-"))
    sock = tmp / "swtel.sock"
    (tmp / "swtel.yaml").write_text(
        "interval: 100ms\nsources: {netdev: {interfaces: [lo], exclude: []}, ethtool: {enabled: false},"
        " system: {interval: 200ms}}\n"
        f"exporters:\n{exporters}control: {{socket: {sock}, group: null}}\nlog: {{level: warning}}\n")
    proc = subprocess.Popen(with_parent_death([PY, "-m", "agent", "run", "-c", str(tmp / "swtel.yaml")]), cwd=ROOT,
                            env=_env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        _wait(lambda: connected(_status(sock)), 60, "the exporters connected")
        time.sleep(settle_s)  # steady state: the first snapshots sent
        t0 = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        proc.wait(60)
        return time.monotonic() - t0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


class Lingering:
    """A dial-out collector that never ends the stream (the agent must cut it off)."""

    def __init__(self) -> None:
        import grpc

        from agent.tools.collect import NOKIA_METHOD

        release = self._release = threading.Event()

        def publish(requests, context):
            for _ in requests:
                pass
            release.wait(120)
            return iter(())

        _, service, method = NOKIA_METHOD.split("/")
        handler = grpc.method_handlers_generic_handler(
            service, {method: grpc.stream_stream_rpc_method_handler(publish)})
        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        self.server.add_generic_rpc_handlers([handler])
        self.port = self.server.add_insecure_port("127.0.0.1:0")
        self.server.start()

    def stop(self) -> None:
        self._release.set()
        self.server.stop(0)


def tool_stop(command: str, sig: int) -> tuple[float, float]:
    """Run ``swtel <command>``, send ``sig`` once its three agents answer and have their plugin
    helpers: (seconds to the parent's exit, seconds until every process under it is gone)."""
    import psutil

    tmp = Path(tempfile.mkdtemp(prefix="swtel-bench-tool-"))
    extra = ["--no-tui"] if command == "demo" else []
    proc = subprocess.Popen(with_parent_death([PY, "-m", "agent", command, "--duration", "120", *extra]), cwd=ROOT,
                            env={**_env(), "TMPDIR": str(tmp)}, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        def ready() -> bool:
            kids = [k for k in psutil.Process(proc.pid).children() if "run" in k.cmdline()]
            socks = list(tmp.glob("*/*.sock"))
            return len(kids) == 3 and len(socks) == 3 and sum(len(k.children()) for k in kids) >= 3

        _wait(ready, 60, f"{command}'s agents")
        time.sleep(3.0)  # the fabric's scenario under way, as a user stops it
        procs = psutil.Process(proc.pid).children(recursive=True)
        t0 = time.monotonic()
        proc.send_signal(sig)
        proc.wait(60)
        parent = time.monotonic() - t0
        left = list(procs)
        while left:  # psutil.wait_procs backs off up to seconds between looks: look every 20 ms
            left = [p for p in left if _alive(p)]
            if time.monotonic() - t0 > 30:
                raise RuntimeError(f"{command}: processes left after {signal.Signals(sig).name}: {left}")
            time.sleep(0.02)
        return parent, time.monotonic() - t0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def _alive(proc) -> bool:
    """Running, not a zombie waiting for its new parent (init) to reap it."""
    import psutil

    try:
        return proc.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _summary(xs: list[float]) -> dict:
    return {"median_s": round(statistics.median(xs), 3), "max_s": round(max(xs), 3), "runs": len(xs)}


def main() -> int:
    exit_on_sigterm()
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--quick", action="store_true", help="2 agent runs, one per tool and signal")
    ap.add_argument("--no-tools", action="store_true", help="only the agent, not fabric and demo")
    args = ap.parse_args()
    runs = 2 if args.quick else args.runs
    tool_runs = 1 if args.quick else max(1, args.runs // 2)
    from tests.peers import Peers, all_connected

    out: dict[str, dict] = {}
    xs = []
    for _ in range(runs):
        peers = Peers()
        try:
            xs.append(agent_stop(peers.exporters_yaml(), all_connected))
        finally:
            peers.stop()
    out["agent_four"] = _summary(xs)
    print(f"agent, dial-out + tunnel + OTLP + remote write connected: SIGTERM -> exit "
          f"median {out['agent_four']['median_s']:.2f} s, max {out['agent_four']['max_s']:.2f} s ({runs} runs)")

    xs = []
    for _ in range(runs):
        col = Lingering()
        try:
            line = f"  dialout: [{{name: col, address: '127.0.0.1:{col.port}', insecure: true}}]\n"
            xs.append(agent_stop(line, lambda st: any(
                e.get("kind") == "dialout" and e.get("sent", 0) > 0 for e in st.get("exporters", {}).values())))
        finally:
            col.stop()
    out["agent_lingering"] = _summary(xs)
    print(f"agent, dial-out to a collector that never closes the stream: SIGTERM -> exit "
          f"median {out['agent_lingering']['median_s']:.2f} s, max {out['agent_lingering']['max_s']:.2f} s "
          f"({runs} runs)")

    if not args.no_tools:
        for command, sig in (("fabric", signal.SIGHUP), ("fabric", signal.SIGTERM),
                             ("demo", signal.SIGHUP), ("demo", signal.SIGINT)):
            parents, gones = [], []
            for _ in range(tool_runs):
                parent, gone = tool_stop(command, sig)
                parents.append(parent)
                gones.append(gone)
            key = f"{command}_{signal.Signals(sig).name}"
            out[key] = {"parent": _summary(parents), "all_gone": _summary(gones)}
            print(f"swtel {command}, {signal.Signals(sig).name}: parent exits after median "
                  f"{out[key]['parent']['median_s']:.2f} s (max {out[key]['parent']['max_s']:.2f}), every agent "
                  f"and helper gone after {out[key]['all_gone']['median_s']:.2f} s "
                  f"(max {out[key]['all_gone']['max_s']:.2f}; {tool_runs} runs)")
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
