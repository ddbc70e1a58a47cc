"""``swtel demo``: the two field cases in one command, no root and no hardware.

It starts a local gNMI dial-out collector and the simulated fabric (agent/tools/fabric.py:
spine-1 whose port swp11s1 gets a marginal cable, host-1 whose RoCE retransmissions rise
with it, then leaf-3 pushing about twice its share onto one uplink), one swtel agent
per device. While it runs it shows the devices' busiest ports and the insight events
as they arrive at the collector over gNMI; at the end it prints the event timeline and
where the raw data went.
"""

from __future__ import annotations

import json
import re
import shutil
import signal
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from agent.config import Duration
from agent.control.client import ControlError, request
from agent.control.printable import printable
from agent.control.top import rates
from agent.insights.congestion import CongestionConfig, fmt_bytes
from agent.tools.fabric import (
    PRESETS,
    Fabric,
    detach_stdio,
    failed_codes,
    hangup_signals,
    stop_with_collector,
)

EVENT_PATH = re.compile(r"^swtel:/insights/events/event\[id=(\d+)\]/state/([a-z-]+)$")
DEFAULT_DURATION_S = 30.0
NS_PER_S = 1_000_000_000


def events_from(latest: dict[tuple[str, str], dict[str, Any]]) -> dict[tuple[str, int], dict[str, Any]]:
    """(target, id) -> {leaf: value}: the events the collector holds, rebuilt from gNMI paths."""
    out: dict[tuple[str, int], dict[str, Any]] = {}
    for (target, path), entry in list(latest.items()):
        m = EVENT_PATH.match(path)
        if m:
            out.setdefault((target, int(m.group(1))), {})[m.group(2)] = entry["value"]
    return out


class Timeline:
    """Events in the order they were first seen at the collector, with raise/clear lines."""

    def __init__(self, origin_ns: int) -> None:
        self.origin_ns = origin_ns
        self.rows: dict[tuple[str, int], dict[str, Any]] = {}

    def rel(self, ns: Any) -> str:
        try:
            return f"{(int(ns) - self.origin_ns) / 1e9:+7.1f}s"
        except (TypeError, ValueError):
            return "      -"

    def update(self, events: dict[tuple[str, int], dict[str, Any]]) -> list[str]:
        """Take the collector's view; return one line per raise and per clear since last time."""
        lines = []
        for key, ev in sorted(events.items(), key=lambda kv: (str(kv[1].get("start-ns")), kv[0])):
            old = self.rows.get(key)
            if "type" not in ev:
                continue
            if old is None:
                lines.append(f"{self.rel(ev.get('start-ns'))}  {key[0]:<8} RAISED  {ev.get('severity', '?'):<8} "
                             f"{ev.get('type')}: {ev.get('message', '')}")
            if ev.get("status") == "cleared" and (old is None or old.get("status") != "cleared"):
                lines.append(f"{self.rel(ev.get('end-ns'))}  {key[0]:<8} cleared {ev.get('type')} on "
                             f"{ev.get('interfaces', '')}")
            self.rows[key] = dict(ev)
        # Targets, names and messages arrive over gNMI: never terminal control.
        return [printable(line) for line in lines]

    def table_lines(self, width: int = 78) -> list[str]:
        """The timeline as a table that fits ``width`` columns (an 80-column terminal)."""
        head = f"{'raised':>7} {'ended':>7} {'target':<8} {'interface':<9} {'event':<14} {'severity':<8} peak"
        lines = [head, "-" * min(width, len(head) + 12)]
        for (target, _id), ev in sorted(self.rows.items(), key=lambda kv: (str(kv[1].get("start-ns")), kv[0])):
            ended = self.rel(ev.get("end-ns")).strip() if ev.get("status") == "cleared" else "open"
            peak = ev.get("peak")
            peak_text = f"{peak:.3g}" if isinstance(peak, int | float) else str(peak)
            ifaces = printable(ev.get("interfaces", ""))
            row = (f"{self.rel(ev.get('start-ns')).strip():>7} {ended:>7} {printable(target):<8} {ifaces[:9]:<9} "
                   f"{printable(ev.get('type', '?'))[:14]:<14} {printable(ev.get('severity', '?')):<8} "
                   f"{printable(peak_text)} {printable(ev.get('peak-unit', ''))}")
            lines.append(row.rstrip()[:width])
        if len(lines) == 2:
            lines.append("(no events)")
        return lines


def failing_at(spec: str) -> tuple[str, int, float] | None:
    """(port, lane, seconds from the start) of a ``fec-degrade@START-END:PORT[:LANE]`` scenario's
    first uncorrectable codeword: END - (END - START) / 10, in the sim's 10 ms slots."""
    m = re.match(r"^fec-degrade@([^-]+)-([^:]+):([^:]+)(?::(\d+))?$", spec)
    if not m:
        return None
    a, b = (round(Duration.parse(x) * 100) for x in m.group(1, 2))
    return m.group(3), int(m.group(4) or 0), (b - (b - a) // 10) / 100


def lead_lines(fabric: Fabric, timeline: Timeline) -> list[str]:
    """For each fec-degrade scenario: when link-degrading was raised, and how long before the
    port's first uncorrectable codeword (the prediction's lead)."""
    out = []
    for sw in fabric.switches:
        for spec in sw.scenarios:
            hit = failing_at(spec)
            if hit is None:
                continue
            port, lane, fail_s = hit
            # the event of the port's lane (its ``lane`` leaf; a port without lanes' histograms has none)
            starts = sorted((int(ev["start-ns"]) - timeline.origin_ns) / 1e9
                            for (target, _id), ev in timeline.rows.items()
                            if target == sw.name and ev.get("type") == "link-degrading"
                            and port in str(ev.get("interfaces", "")).split(",") and "start-ns" in ev
                            and str(ev.get("lane", lane)) == str(lane))
            if starts and starts[0] < fail_s:
                out.append(f"\n{sw.name} {port} lane {lane}: link-degrading raised at {starts[0]:+.1f}s, the first "
                           f"uncorrectable codeword at {fail_s:+.1f}s: lead {fail_s - starts[0]:.1f}s")
            else:
                out.append(f"\n{sw.name} {port} lane {lane}: link-degrading not raised before the first "
                           f"uncorrectable codeword ({fail_s:+.1f}s)")
    return out


def incast_queue(spec: str) -> tuple[str, str] | None:
    """(port, traffic class) of an ``incast@...[:PORT[/TC[/LEN[/PERIOD]]]]`` scenario (the
    sim's defaults: swp1, 3)."""
    name, _, where = spec.partition(":")
    if not name.startswith("incast"):
        return None
    port, _, rest = where.partition("/")
    return port or "swp1", rest.partition("/")[0] or "3"


def _queue_series(jsonl: Path, target: str, port: str, tc: str) -> dict[str, list[tuple[int, int]]]:
    """The (sample ns, value) updates of one queue's level and peak that the collector
    received, in order (only changed values are sent: each holds until the next)."""
    tail = f"/interface[interface-id={port}]/output/queues/queue[name={tc}]/state/"
    out: dict[str, list[tuple[int, int]]] = {"current-occupancy": [], "peak-occupancy": []}
    with open(jsonl, encoding="utf-8") as f:
        for line in f:
            if tail not in line:
                continue
            row = json.loads(line)
            leaf = row.get("path", "").rpartition("/")[2]
            if row.get("target") == target and leaf in out and isinstance(row.get("value"), int):
                out[leaf].append((int(row["ts"]), row["value"]))
    return out


def incast_lines(fabric: Fabric, timeline: Timeline, jsonl: Path, high: int) -> list[str]:
    """For each incast scenario: the queue as a 1 s poller of its instantaneous level saw it
    (the level the agent read, held at each whole second), beside the agent's peaks (the
    highest level since the previous 100 ms read) and its congestion events, from one run."""
    out = []
    for sw in fabric.switches:
        for spec in sw.scenarios:
            queue = incast_queue(spec)
            if queue is None:
                continue
            port, tc = queue
            series = _queue_series(jsonl, sw.name, port, tc)
            levels, peaks = series["current-occupancy"], series["peak-occupancy"]
            if not levels or not peaks:
                out.append(f"\n{sw.name} {port} queue {tc}: no readings reached the collector")
                continue
            # the 1 s poller: the level last read at or before each whole second of the run
            seconds = range(-(-(levels[0][0] - fabric.start_ns) // NS_PER_S), (levels[-1][0] - fabric.start_ns) // NS_PER_S + 1)
            polled, i = [], 0
            for k in seconds:
                while i + 1 < len(levels) and levels[i + 1][0] <= fabric.start_ns + k * NS_PER_S:
                    i += 1
                polled.append(levels[i][1])
            # swtel's bursts: each rise of the peak to `high` or above
            bursts = sum(1 for j, (_, v) in enumerate(peaks) if v >= high and (j == 0 or peaks[j - 1][1] < high))
            events = sum(1 for (target, _id), ev in timeline.rows.items()
                         if target == sw.name and ev.get("type") == "congestion"
                         and port in str(ev.get("interfaces", "")).split(",")
                         and f"queue {tc}:" in str(ev.get("message", "")))
            above = sum(v >= high for v in polled)
            verdict = "calm" if 4 * above <= len(polled) else "congested"  # three readings in four below
            out.append(f"\n{sw.name} {port} queue {tc} ({spec}):\n"
                       f"  a 1 s poller of the instantaneous level: {len(polled)} readings, {above} at or above "
                       f"{fmt_bytes(high)} (highest {fmt_bytes(max(polled))}): {verdict}\n"
                       f"  swtel's peaks at {fabric.interval}: {bursts} bursts at or above {fmt_bytes(high)} "
                       f"(highest {fmt_bytes(max(v for _, v in peaks))}), {events} congestion events")
    return out


def _port_rates(fabric: Fabric, prev: dict[str, dict]) -> dict[str, list[dict[str, Any]]]:
    """Busiest ports per device, from each agent's control socket (rates since last call)."""
    out = {}
    for sw in fabric.switches:
        try:
            cur = request(str(sw.socket), "ports", timeout_s=1.0)
        except ControlError:
            continue
        if sw.name in prev:
            out[sw.name] = rates(prev[sw.name], cur)
        prev[sw.name] = cur
    return out


def _view(fabric: Fabric, elapsed: float, duration: float, ports: dict[str, list], timeline: Timeline,
          height: int):
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    parts: list[Any] = [Text(f"swtel demo — scenario {fabric.scenario}  t={elapsed:+5.1f}s ({duration:.0f}s run)  "
                             "(Ctrl-C or q to stop)", style="bold")]
    table = Table(box=None, pad_edge=False, header_style="bold")
    for name in ("device", "port", "util", "rx Gb/s", "tx Gb/s", "err/s", "sym/s", "drop/s", "pfc%"):
        table.add_column(name, justify="left" if name in ("device", "port") else "right", no_wrap=True)
    open_ifs = {(t, i) for (t, _), ev in timeline.rows.items() if ev.get("status") != "cleared"
                for i in str(ev.get("interfaces", "")).split(",")}
    per_device = max(2, (height - 12) // max(1, len(ports) or 1))
    for device, rows in ports.items():
        hot = [r for r in rows if (device, r["port"]) in open_ifs]
        shown = hot + [r for r in rows if r not in hot]
        for r in shown[:per_device]:
            style = "bold red" if (device, r["port"]) in open_ifs else ""
            table.add_row(printable(device), Text(printable(r["port"]), style=style),
                          "-" if r["util"] is None else f"{r['util'] * 100:.0f}%",
                          f"{r['rx_bps'] / 1e9:.1f}", f"{r['tx_bps'] / 1e9:.1f}", f"{r['errs']:.0f}",
                          f"{r.get('symbol_errors', 0):.0f}", f"{r['drops']:.0f}",
                          "-" if r["paused"] is None else f"{r['paused'] * 100:.0f}")
    parts.append(table)
    parts.append(Text("events at the collector (gNMI dial-out):", style="bold"))
    rows = sorted(timeline.rows.items(), key=lambda kv: str(kv[1].get("start-ns")))[-6:]
    for (target, _id), ev in rows:
        color = "red" if ev.get("severity") == "critical" else "yellow"
        if ev.get("status") == "cleared":
            color = "green"
        parts.append(Text(printable(f" {timeline.rel(ev.get('start-ns'))} {target:<8} {ev.get('status', '?'):<7} "
                                    f"{ev.get('message', '')}"), style=color, no_wrap=True, overflow="ellipsis"))
    if not rows:
        parts.append(Text(" (none yet)", style="dim"))
    return Group(*parts)


def _quiet_collector_logs() -> None:
    """The collector's per-stream log lines would interleave with the view: warnings only."""
    import logging

    import structlog

    structlog.configure(logger_factory=structlog.PrintLoggerFactory(sys.stderr),
                        wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))


def demo_main(args: Any) -> int:
    from agent.tools.collect import Collector

    _quiet_collector_logs()
    duration = DEFAULT_DURATION_S if args.duration is None else float(args.duration)
    if not 0 < duration <= 86400:  # also NaN and inf, for callers that skip the command line's check
        print("swtel demo: --duration must be more than 0 and at most 24h", file=sys.stderr)
        return 2
    if args.scenario not in PRESETS:
        print(f"swtel demo: --scenario: unknown {args.scenario!r} (known: {', '.join(PRESETS)})",
              file=sys.stderr)
        return 2
    own_dir = not args.dir
    workdir = Path(args.dir) if args.dir else Path(tempfile.mkdtemp(prefix="swtel-demo-"))
    workdir.mkdir(parents=True, exist_ok=True)
    out_path = workdir / "collector.jsonl"
    tui = not args.no_tui and sys.stdout.isatty()
    stop, hung_up = threading.Event(), threading.Event()
    hangup_signals(stop, hung_up)  # SIGINT, SIGTERM, and SIGHUP: a closed terminal or ssh session

    with open(out_path, "w", encoding="utf-8") as out:
        collector = Collector("127.0.0.1:0", insecure=True, output=out, keep_messages=False).start()
        fabric = Fabric(workdir, f"127.0.0.1:{collector.port}", args.scenario, seed=args.seed)
        timeline = Timeline(fabric.start_ns)
        plan = "; ".join(f"{sw.name} ({sw.role}): {', '.join(sw.scenarios) or 'clean'}" for sw in fabric.switches)
        try:  # whatever happens from here (Ctrl-C, a closed stdout or terminal), the agents are stopped
            fabric.start()
            print(f"swtel demo: {len(fabric.switches)} simulated devices, each its own swtel agent, streaming "
                  f"gNMI dial-out to a collector on 127.0.0.1:{collector.port}\n  {plan}\n"
                  f"  times are seconds from the fabric's start; running {duration:.0f}s", flush=True)
            if tui:
                _run_tui(fabric, collector, timeline, duration, stop)
            else:
                _run_plain(fabric, collector, timeline, duration, stop)
        except Exception:
            # A terminal that hung up fails every write (EIO) and termios call: expected then.
            if not hung_up.is_set():
                raise
        finally:
            # every agent at once, killed after Fabric.stop's bound; one that exited has closed
            # its stream only once the collector read it all, so the last clears are in
            codes = stop_with_collector(fabric, collector, hung_up.is_set(), stop.is_set())
            if not hung_up.is_set():
                timeline.update(events_from(collector.latest))
    if hung_up.is_set():
        # Nobody reads the terminal any more: no timeline, and no temporary directory left
        # behind whose name nobody saw (a --dir is kept).
        detach_stdio()
        if own_dir:
            shutil.rmtree(workdir, ignore_errors=True)
        return 128 + signal.SIGHUP
    failed = failed_codes(codes)
    print("\nevent timeline (seconds from the fabric's start):")
    print("\n".join("  " + line for line in timeline.table_lines()))
    for line in lead_lines(fabric, timeline):
        print(line)
    for line in incast_lines(fabric, timeline, out_path, CongestionConfig().high):
        print(line)
    print(f"\nraw data: every update the collector received, one JSON line each: {out_path}\n"
          f"configs, control sockets and agent logs: {workdir}\n"
          f"run it yourself: swtel run -c {workdir / 'spine-1.yaml'}  |  swtel fabric  |  swtel top")
    if failed:
        print(f"swtel demo: agents failed: {failed}; see their logs in {workdir}", file=sys.stderr)
        for sw in fabric.switches:
            if sw.name in failed and sw.log_path is not None and sw.log_path.exists():
                tail = sw.log_path.read_text(errors="replace").splitlines()[-8:]
                print(f"--- {sw.name} log (last lines)\n" + "\n".join(printable(line) for line in tail),
                      file=sys.stderr)
        return 1
    return 0


def _run_plain(fabric: Fabric, collector: Any, timeline: Timeline, duration: float,
               stop: threading.Event) -> None:
    deadline = time.monotonic() + duration
    while not stop.is_set() and time.monotonic() < deadline:
        stop.wait(0.5)
        for line in timeline.update(events_from(collector.latest)):
            print(line, flush=True)
        if fabric.failed():
            return


def _run_tui(fabric: Fabric, collector: Any, timeline: Timeline, duration: float,
             stop: threading.Event) -> None:
    from rich.console import Console
    from rich.live import Live

    from agent.control.top import _cbreak, _key_pressed

    console = Console()
    fd = sys.stdin.fileno() if sys.stdin.isatty() else None
    prev: dict[str, dict] = {}
    start = time.monotonic()
    ports: dict[str, list] = {}
    with _cbreak(fd) if fd is not None else _null(), Live(
            console=console, screen=True, auto_refresh=False, transient=True) as live:
        while not stop.is_set() and time.monotonic() - start < duration:
            timeline.update(events_from(collector.latest))
            ports = _port_rates(fabric, prev) or ports
            since_origin = (time.time_ns() - fabric.start_ns) / 1e9  # the events' time axis
            live.update(_view(fabric, since_origin, duration, ports, timeline, console.size.height),
                        refresh=True)
            if "q" in _key_pressed(fd, 1.0).lower() or fabric.failed():
                break


class _null:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False
