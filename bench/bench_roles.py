"""Collector sizing per switch role (docs/OPERATIONS.md): one simulated spine, leaf and host
(the field topology of ``swtel demo``, scenario ``clean``: traffic, no fault), one agent each
at the default 100 ms, every agent dialing out (per-tick) to one ``swtel collect``; the updates
per second each device sends once past its first snapshot, and their share by kind of path, so
that an operator sees what to exclude. Figures only: nothing is asserted. No root.

    python bench/bench_roles.py [--seconds 30] [--warmup 5] [--exclude GLOB ...] [--json FILE]

``--exclude`` adds plugin counter names to every agent's ``sources.asic.counters.exclude``
(e.g. ``'phy_rs_fec_histogram_lane*'``): the same run without them, for what an exclusion saves.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import tempfile
import threading
import time
from collections import Counter, defaultdict
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from agent.control.client import ControlError, request  # noqa: E402 - after the path setup
from agent.tools.collect import Collector  # noqa: E402
from agent.tools.fabric import Fabric  # noqa: E402

#: kinds of path, first match wins: what an operator can switch off by name (docs/OPERATIONS.md)
KINDS = [
    ("FEC histogram bins, per lane", re.compile(r"/channels/channel\[[^]]*\]/histograms/")),
    ("FEC histogram bins, per port", re.compile(r"/histograms/")),
    ("FEC prediction gauges", re.compile(r"/fec/prediction/")),
    ("per-lane PHY counters", re.compile(r"/channels/channel\[")),
    ("PHY counters", re.compile(r"/phy/")),
    ("queues (per TC)", re.compile(r"/queues/queue\[")),
    ("priority groups", re.compile(r"/priority-groups/")),
    ("PFC per priority", re.compile(r"/pfc/|/priority\[")),
    ("drop reasons", re.compile(r"/drops/")),
    ("interface counters", re.compile(r"/state/counters/|/ethernet/|/hw/")),
    ("agent health and events", re.compile(r"^swtel:/(agent|insights)/")),
    ("RDMA (host NIC)", re.compile(r"/rdma/")),
]


def kind_of(path: str) -> str:
    for name, pattern in KINDS:
        if pattern.search(path):
            return name
    return "other"


class _Excluding(Fabric):
    """The demo's fabric, each agent leaving out the plugin counters ``excluded`` names."""

    excluded: list[str] = []

    def config(self, sw):  # type: ignore[no-untyped-def]
        cfg = super().config(sw)
        if self.excluded:
            cfg["sources"]["asic"]["counters"] = {"exclude": list(self.excluded)}
        return cfg


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=30.0)
    ap.add_argument("--warmup", type=float, default=5.0, help="after the fabric's start: the snapshot goes first")
    ap.add_argument("--exclude", action="append", default=[], metavar="GLOB",
                    help="a plugin counter name glob every agent leaves out (repeatable)")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    lock = threading.Lock()
    counting = threading.Event()
    updates: Counter[str] = Counter()
    by_kind: dict[str, Counter[str]] = defaultdict(Counter)
    ports: dict[str, set[str]] = defaultdict(set)

    def on_lines(lines: list[dict], _rx_ns: int) -> None:
        if not counting.is_set():
            return
        with lock:
            for line in lines:
                path = line.get("path")
                if path is None or line.get("delete"):
                    continue
                target = line.get("target", "")
                updates[target] += 1
                by_kind[target][kind_of(path)] += 1
                m = re.search(r"/(?:interface|port)\[(?:name|interface-id|id)=([^]]+)\]", path)
                if m:
                    ports[target].add(m.group(1))

    with tempfile.TemporaryDirectory(prefix="swtel-bench-roles-") as tmp:
        col = Collector("127.0.0.1:0", insecure=True, keep_messages=False, on_lines=on_lines).start()
        fabric = _Excluding(Path(tmp), f"127.0.0.1:{col.port}", "clean")
        fabric.excluded = args.exclude
        try:
            fabric.start()
            time.sleep(max(0.0, (fabric.start_ns - time.time_ns()) / 1e9) + args.warmup)
            counting.set()
            started = time.monotonic()
            time.sleep(args.seconds)
            counting.clear()
            took = time.monotonic() - started
            health = {}
            for sw in fabric.switches:  # did each agent keep up (no ticks skipped, nothing dropped)?
                try:
                    st = request(str(sw.socket), "status", timeout_s=5.0)
                except ControlError as exc:
                    health[sw.name] = f"no status: {exc}"
                    continue
                e = next(iter(st.get("exporters", {}).values()), {})
                health[sw.name] = (f"overruns {st.get('tick', {}).get('overruns')}, dropped {e.get('dropped')}, "
                                   f"superseded {e.get('superseded')}, queue {e.get('queue')}")
        finally:
            fabric.stop(10.0)
            col.stop(0)
        roles = {sw.name: sw.role for sw in fabric.switches}
    out = {}
    print("| device (role) | ports | updates/s | per port/s | top kinds (share) |\n|---|---|---|---|---|")
    for target in sorted(updates):
        rate = updates[target] / took
        kinds = by_kind[target].most_common(4)
        share = ", ".join(f"{k} {n / updates[target]:.0%}" for k, n in kinds)
        n_ports = len(ports[target])
        print(f"| {target} ({roles.get(target, '?')}) | {n_ports} | {rate:,.0f} | "
              f"{rate / max(n_ports, 1):,.0f} | {share} |")
        out[target] = {"role": roles.get(target), "ports": n_ports, "updates_per_s": rate,
                       "kinds": {k: n / took for k, n in by_kind[target].items()}, "agent": health.get(target)}
    for name, text in sorted(health.items()):
        print(f"{name}: {text}")
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
