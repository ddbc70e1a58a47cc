"""``swtel demo``: the two field cases in one command, no root and no hardware.

It starts a local gNMI dial-out collector and the simulated fabric (agent/tools/fabric.py:
spine-1 whose port swp11s1 gets a marginal cable, host-1 whose RoCE retransmissions rise
with it, then leaf-3 pushing about twice its share onto one uplink), one swtel agent
per device. While it runs it shows the devices' busiest ports and the insight events
as they arrive at the collector over gNMI, and the incidents they form: a host's RoCE
retransmissions with the link faults on its paths, by the LLDP neighbours the agents send
(agent/control/incidents.py); at the end it prints the event timeline, the incidents and
where the raw data went.
"""

from __future__ import annotations

import json
import math
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
from agent.control.incidents import IncidentPrinter, StreamView
from agent.control.printable import printable
from agent.control.top import rates
from agent.insights.congestion import CongestionConfig, fmt_bytes
from agent.signals import StopSignals
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


class EventFeed:
    """Every event leaf the collector receives, kept as it arrives (``Collector(on_lines=)``):
    an event raised and cleared between two refreshes, or deleted by its agent after it
    cleared, is still here, where the collector's latest values would have lost it."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._events: dict[tuple[str, int], dict[str, Any]] = {}

    def on_lines(self, lines: list[dict[str, Any]], _rx_ns: int) -> None:
        """The collector's callback (its receiving threads): updates only, deletes ignored."""
        with self._lock:
            for line in lines:
                m = EVENT_PATH.match(line.get("path", ""))
                if m and not line.get("delete"):
                    event_key = (line.get("target", ""), int(m.group(1)))
                    self._events.setdefault(event_key, {})[m.group(2)] = line.get("value")

    def events(self) -> dict[tuple[str, int], dict[str, Any]]:
        """(target, id) -> {leaf: value} of every event seen so far."""
        with self._lock:
            return {key: dict(ev) for key, ev in self._events.items()}


#: a wall-clock time in an event's message (congestion's "peak ... at 10:57:05.302Z")
_WALL_TIME = re.compile(r"\b(\d{2}):(\d{2}):(\d{2})\.(\d{3})Z\b")
_DAY_NS = 86400 * NS_PER_S


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

    def rebase(self, text: str) -> str:
        """``text`` with every wall-clock time (``HH:MM:SS.mmmZ``, UTC) as seconds from the
        fabric's start (``+5.3s``), the time base of every other line of the demo."""
        def relative(m: re.Match[str]) -> str:
            h, mi, sec, ms = (int(g) for g in m.groups())
            of_day = ((h * 60 + mi) * 60 + sec) * NS_PER_S + ms * 1_000_000
            day = self.origin_ns - self.origin_ns % _DAY_NS
            # the day closest to the origin (a run across midnight UTC)
            ns = min((day + d * _DAY_NS + of_day for d in (-1, 0, 1)), key=lambda t: abs(t - self.origin_ns))
            return f"{(ns - self.origin_ns) / 1e9:+.1f}s"

        return _WALL_TIME.sub(relative, text)

    def update(self, events: dict[tuple[str, int], dict[str, Any]]) -> list[str]:
        """Take the collector's view; return one line per raise and per clear since last time."""
        lines = []
        for key, ev in sorted(events.items(), key=lambda kv: (str(kv[1].get("start-ns")), kv[0])):
            old = self.rows.get(key)
            if "type" not in ev:
                continue
            if old is None:
                lines.append(f"{self.rel(ev.get('start-ns'))}  {key[0]:<8} RAISED  {ev.get('severity', '?'):<8} "
                             f"{ev.get('type')}: {self.rebase(str(ev.get('message', '')))}")
            if ev.get("status") == "cleared" and (old is None or old.get("status") != "cleared"):
                lines.append(f"{self.rel(ev.get('end-ns'))}  {key[0]:<8} cleared {ev.get('type')} on "
                             f"{ev.get('interfaces', '')}")
            self.rows[key] = dict(ev)
        # Targets, names and messages arrive over gNMI: never terminal control.
        return [printable(line) for line in lines]

    def table_lines(self, width: int = 78) -> list[str]:
        """The timeline as a table that fits ``width`` columns (an 80-column terminal): the
        peak's number whole, its unit in short words (:func:`short_unit`)."""
        head = f"{'raised':>7} {'ended':>7} {'target':<8} {'interface':<9} {'event':<14} {'sev':<4} peak"
        lines = [head, "-" * min(width, len(head) + 16)]
        for (target, _id), ev in sorted(self.rows.items(), key=lambda kv: (str(kv[1].get("start-ns")), kv[0])):
            ended = self.rel(ev.get("end-ns")).strip() if ev.get("status") == "cleared" else "open"
            peak = ev.get("peak")
            peak_text = f"{peak:.3g}" if isinstance(peak, int | float) else str(peak)
            ifaces = printable(ev.get("interfaces", ""))
            severity = SEVERITY_SHORT.get(str(ev.get("severity")), printable(str(ev.get("severity", "?")))[:4])
            row = (f"{self.rel(ev.get('start-ns')).strip():>7} {ended:>7} {printable(target)[:8]:<8} {ifaces[:9]:<9} "
                   f"{printable(ev.get('type', '?'))[:14]:<14} {severity:<4} {printable(peak_text)[:12]}")
            unit = short_unit(printable(str(ev.get("peak-unit", ""))))
            room = width - len(row) - 1
            if unit and room > 0:
                row += " " + (unit if len(unit) <= room else unit[:room - 1] + "~")
            lines.append(row.rstrip())
        if len(lines) == 2:
            lines.append("(no events)")
        return lines


SEVERITY_SHORT = {"critical": "crit", "warning": "warn"}
#: the long words of the detectors' units (agent/insights/*.py ``ctx.hit``) in the timeline
_UNIT_WORDS = {"retransmissions": "retx", "transitions": "flaps", "share-of-level-lost": "share lost",
               "paused-share": "paused", "packets": "pkts", "errors": "errs"}


def short_unit(unit: str) -> str:
    """A detector's unit in the timeline's peak column: ``retransmissions/10s`` -> ``retx/10s``."""
    return "/".join(_UNIT_WORDS.get(part, part) for part in unit.split("/"))


def failing_at(spec: str) -> tuple[str, int, float] | None:
    """(port, lane, seconds from the start) of a ``fec-degrade@START-END:PORT[:LANE]`` scenario's
    first uncorrectable codeword: END - (END - START) / 10, in the sim's 10 ms slots."""
    m = re.match(r"^fec-degrade@([^-]+)-([^:]+):([^:]+)(?::(\d+))?$", spec)
    if not m:
        return None
    a, b = (round(Duration.parse(x) * 100) for x in m.group(1, 2))
    return m.group(3), int(m.group(4) or 0), (b - (b - a) // 10) / 100


#: after a fault's window (or its first moment) the detectors and the dial-out need this long
#: for its events to reach the collector
WINDOW_MARGIN_S, MOMENT_MARGIN_S = 2.0, 5.0
#: an incast scenario's verdict compares a 1 s poller with the peaks over this many seconds
#: of bursts (one every 2 s)
INCAST_STORY_S = 10.0
_SPEC = re.compile(r"^([a-z-]+)@([^-:]+)(?:-([^:]+))?(?::.*)?$")


def story_s(spec: str) -> float:
    """Seconds from the fabric's start a scenario (``NAME@START[-END][:WHERE]``) needs for
    its story to be told: its window and the time its events take to arrive; for
    fec-degrade, its first uncorrectable codeword; for incast, enough bursts to compare."""
    hit = failing_at(spec)
    if hit is not None:
        return hit[2] + WINDOW_MARGIN_S
    m = _SPEC.match(spec)
    if m is None:
        return 0.0
    try:
        start = Duration.parse(m.group(2))
        end = Duration.parse(m.group(3)) if m.group(3) else None
    except ValueError:
        return 0.0
    if m.group(1) == "incast":
        return start + INCAST_STORY_S
    return end + WINDOW_MARGIN_S if end is not None else start + MOMENT_MARGIN_S


def run_at_least(story: float) -> str:
    n = math.ceil(story)
    return f"run at least {n} s (--duration {n}s)"


def short_run_lines(fabric: Fabric, duration_s: float) -> list[str]:
    """Before the run: each scenario whose story needs longer than ``duration_s``."""
    return [f"  {sw.name} {spec}: needs about {math.ceil(story_s(spec))} s, longer than this run; "
            f"{run_at_least(story_s(spec))}"
            for sw in fabric.switches for spec in sw.scenarios if story_s(spec) > duration_s]


def unfinished_lines(fabric: Fabric, ended_s: float) -> list[str]:
    """After the run: each scenario without a verdict of its own (lead_lines and incast_lines
    give theirs) whose story the run ended before: what its timeline lacks, and why."""
    return [f"\n{sw.name} {spec}: the run ended at {ended_s:+.1f}s, before this scenario's story was over "
            f"({story_s(spec):+.1f}s): {run_at_least(story_s(spec))}"
            for sw in fabric.switches for spec in sw.scenarios
            if failing_at(spec) is None and incast_queue(spec) is None and story_s(spec) > ended_s]


def lead_lines(fabric: Fabric, timeline: Timeline, ended_s: float = math.inf) -> list[str]:
    """For each fec-degrade scenario: when link-degrading was raised, and how long before the
    port's first uncorrectable codeword (the prediction's lead). A run that ended (``ended_s``,
    seconds from the fabric's start) before that codeword and without the event gives no
    verdict: it says how long to run."""
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
            elif ended_s < story_s(spec):
                out.append(f"\n{sw.name} {port} lane {lane}: the run ended at {ended_s:+.1f}s, before the first "
                           f"uncorrectable codeword ({fail_s:+.1f}s) and without link-degrading: "
                           f"{run_at_least(story_s(spec))}")
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


def incast_lines(fabric: Fabric, timeline: Timeline, jsonl: Path, high: int,
                 ended_s: float = math.inf) -> list[str]:
    """For each incast scenario: the queue as a 1 s poller of its instantaneous level saw it
    (the level the agent read, held at each whole second), beside the agent's peaks (the
    highest level since the previous 100 ms read) and its congestion events, from one run;
    a run that ended (``ended_s``) before enough bursts says how long to run instead."""
    out = []
    for sw in fabric.switches:
        for spec in sw.scenarios:
            queue = incast_queue(spec)
            if queue is None:
                continue
            port, tc = queue
            if ended_s < story_s(spec):
                out.append(f"\n{sw.name} {port} queue {tc} ({spec}): the run ended at {ended_s:+.1f}s, too soon "
                           f"to compare a 1 s poller with the peaks: {run_at_least(story_s(spec))}")
                continue
            series = _queue_series(jsonl, sw.name, port, tc)
            levels, peaks = series["current-occupancy"], series["peak-occupancy"]
            if not levels or not peaks:
                out.append(f"\n{sw.name} {port} queue {tc}: no readings reached the collector")
                continue
            # the 1 s poller: the level last read at or before each whole second of the run
            seconds = range(-(-(levels[0][0] - fabric.start_ns) // NS_PER_S),
                            (levels[-1][0] - fabric.start_ns) // NS_PER_S + 1)
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
          height: int, incidents: IncidentPrinter | None = None):
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    parts: list[Any] = [Text(f"swtel demo — scenario {fabric.scenario}  t={elapsed:+5.1f}s (until {duration:+.0f}s)  "
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
                                    f"{timeline.rebase(str(ev.get('message', '')))}"), style=color, no_wrap=True,
                          overflow="ellipsis"))
    if not rows:
        parts.append(Text(" (none yet)", style="dim"))
    formed = incidents.book.all()[-2:] if incidents is not None else []
    if formed:
        parts.append(Text("incidents (by the agents' LLDP neighbours):", style="bold"))
        for inc in formed:
            parts.append(Text(printable(f" {incidents.rel(inc.formed_ns)} {inc.text(fabric.start_ns)}"),
                              style="bold red", no_wrap=True, overflow="ellipsis"))
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
    stop = hangup_signals()  # SIGINT, SIGTERM, and SIGHUP: a closed terminal or ssh session

    with open(out_path, "w", encoding="utf-8") as out:
        feed, view = EventFeed(), StreamView()

        def on_lines(lines: list[dict[str, Any]], rx_ns: int) -> None:
            feed.on_lines(lines, rx_ns)
            view.on_lines(lines, rx_ns)

        collector = Collector("127.0.0.1:0", insecure=True, output=out, keep_messages=False,
                              on_lines=on_lines).start()
        fabric = Fabric(workdir, f"127.0.0.1:{collector.port}", args.scenario, seed=args.seed)
        timeline = Timeline(fabric.start_ns)
        incidents = IncidentPrinter(view, fabric.start_ns)
        plan = "; ".join(f"{sw.name} ({sw.role}): {', '.join(sw.scenarios) or 'clean'}" for sw in fabric.switches)
        ended_s = 0.0
        late: list[str] = []
        try:  # whatever happens from here (Ctrl-C, a closed stdout or terminal), the agents are stopped
            fabric.start()
            print(f"swtel demo: {len(fabric.switches)} simulated devices, each its own swtel agent, streaming "
                  f"gNMI dial-out to a collector on 127.0.0.1:{collector.port}\n  {plan}\n"
                  f"  times are seconds from the fabric's start; running until {duration:+.0f}s", flush=True)
            short = short_run_lines(fabric, duration)
            if short:
                print("\n".join(short), flush=True)
            if tui:
                _run_tui(fabric, feed, timeline, incidents, duration, stop)
            else:
                _run_plain(fabric, feed, timeline, incidents, duration, stop)
        except Exception:
            # A terminal that hung up fails every write (EIO) and termios call: expected then.
            if not stop.got(signal.SIGHUP):
                raise
        finally:
            ended_s = max(0.0, (time.time_ns() - fabric.start_ns) / NS_PER_S)  # what the fault plan got to
            # every agent at once, killed after Fabric.stop's bound; one that exited has closed
            # its stream only once the collector read it all, so the last clears are in
            codes = stop_with_collector(fabric, collector, stop.got(signal.SIGHUP), stop.is_set())
            if not stop.got(signal.SIGHUP):
                late = timeline.update(feed.events())
                late += incidents.update()
    if stop.got(signal.SIGHUP):
        # Nobody reads the terminal any more: no timeline, and no temporary directory left
        # behind whose name nobody saw (a --dir is kept).
        detach_stdio()
        if own_dir:
            shutil.rmtree(workdir, ignore_errors=True)
        return 128 + signal.SIGHUP
    failed = failed_codes(codes)
    if late:  # events the agents flushed as they stopped: they reached the collector too
        print("\n".join(late))
    print("\nevent timeline (seconds from the fabric's start):")
    print("\n".join("  " + line for line in timeline.table_lines()))
    print("\nincidents (the events grouped by the agents' LLDP neighbours):")
    print("\n".join("  " + line for line in incidents.summary_lines()))
    for line in lead_lines(fabric, timeline, ended_s):
        print(line)
    for line in incast_lines(fabric, timeline, out_path, CongestionConfig().high, ended_s):
        print(line)
    for line in unfinished_lines(fabric, ended_s):
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


def _seconds_left(fabric: Fabric, duration: float) -> float:
    """Until ``duration`` seconds after the fabric's start: the one time base of the run's
    length, the live lines and the timeline (the agents start 1.5 s before it)."""
    return (fabric.start_ns + duration * NS_PER_S - time.time_ns()) / NS_PER_S


def _run_plain(fabric: Fabric, feed: EventFeed, timeline: Timeline, incidents: IncidentPrinter,
               duration: float, stop: StopSignals) -> None:
    while not stop.is_set() and (left := _seconds_left(fabric, duration)) > 0:
        stop.wait(min(0.5, left))
        for line in timeline.update(feed.events()) + incidents.update():
            print(line, flush=True)
        if fabric.failed():
            return


def _run_tui(fabric: Fabric, feed: EventFeed, timeline: Timeline, incidents: IncidentPrinter,
             duration: float, stop: StopSignals) -> None:
    from rich.console import Console
    from rich.live import Live

    from agent.control.top import _cbreak, _key_pressed

    console = Console()
    fd = sys.stdin.fileno() if sys.stdin.isatty() else None
    prev: dict[str, dict] = {}
    ports: dict[str, list] = {}
    with _cbreak(fd) if fd is not None else _null(), Live(
            console=console, screen=True, auto_refresh=False, transient=True) as live:
        while not stop.is_set() and _seconds_left(fabric, duration) > 0:
            timeline.update(feed.events())
            incidents.update()
            ports = _port_rates(fabric, prev) or ports
            since_origin = (time.time_ns() - fabric.start_ns) / 1e9  # the events' time axis
            live.update(_view(fabric, since_origin, duration, ports, timeline, console.size.height, incidents),
                        refresh=True)
            if "q" in _key_pressed(fd, 1.0).lower() or fabric.failed():
                break


class _null:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False
