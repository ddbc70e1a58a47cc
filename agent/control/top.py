"""``swtel top``: a live view of a running agent over its control socket, like ``top``
for the switch: ports sorted by throughput with utilization bars, error, drop and PFC
rates, and the open insight events. Refreshes every second; ``q`` quits.

Rates come from two successive ``ports`` replies (cumulative totals) divided by the
time between their samples. With stdout not a terminal it prints plain lines instead
(for scripts, logs and pipes).
"""

from __future__ import annotations

import os
import select
import sys
import time
from contextlib import contextmanager
from typing import Any

from agent.control.client import ControlError, request, socket_path

RATE_FIELDS = ("rx_octets", "tx_octets", "errors", "symbol_errors", "uncorrectable", "drops_in",
               "drops_out", "pfc_frames", "pfc_duration_us", "roce_retrans", "carrier")


def rates(old: dict[str, Any], new: dict[str, Any]) -> list[dict[str, Any]]:
    """Per-port rates between two ``ports`` replies, busiest first."""
    out = []
    for port, row in new.get("ports", {}).items():
        prev = old.get("ports", {}).get(port)
        if prev is None:
            continue
        dt = (row["ts_ns"] - prev["ts_ns"]) / 1e9
        if dt <= 0:
            dt = (new["now_ns"] - old["now_ns"]) / 1e9 or 1.0
        r: dict[str, Any] = {"port": port, "speed_bps": row.get("speed_bps")}
        for f in RATE_FIELDS:
            if f in row and f in prev:
                r[f] = max(0, row[f] - prev[f]) / dt
        r["rx_bps"] = r.get("rx_octets", 0.0) * 8
        r["tx_bps"] = r.get("tx_octets", 0.0) * 8
        speed = row.get("speed_bps")
        r["util"] = max(r["rx_bps"], r["tx_bps"]) / speed if speed else None
        # Pause duration is in microseconds per second: 1e6 is "paused all the time".
        r["paused"] = min(1.0, r["pfc_duration_us"] / 1e6) if "pfc_duration_us" in r else None
        r["drops"] = r.get("drops_in", 0.0) + r.get("drops_out", 0.0)
        r["errs"] = r.get("errors", 0.0) + r.get("uncorrectable", 0.0)
        out.append(r)
    out.sort(key=lambda r: (-(r["rx_bps"] + r["tx_bps"]), r["port"]))
    return out


def _gbps(bps: float) -> str:
    return f"{bps / 1e9:6.1f}"


def _rate(x: float | None) -> str:
    if x is None:
        return "-"
    if x >= 1e6:
        return f"{x / 1e6:.1f}M"
    if x >= 1e4:
        return f"{x / 1e3:.0f}k"
    return f"{x:.0f}"


def _bar(util: float | None, width: int = 10) -> str:
    if util is None:
        return " " * width
    full = round(min(1.0, util) * width)
    return "█" * full + "·" * (width - full)


def plain_lines(target: str, rows: list[dict[str, Any]], events: dict[str, list], limit: int) -> list[str]:
    """The view as plain text lines (no terminal needed)."""
    lines = [f"{time.strftime('%H:%M:%S')} {target}: {len(rows)} ports, "
             f"{len(events.get('open', []))} open events"]
    lines.append(f"{'port':<10} {'util':>5} {'rx Gb/s':>7} {'tx Gb/s':>7} {'err/s':>6} {'sym/s':>6} "
                 f"{'drop/s':>6} {'pfc%':>5}")
    for r in rows[:limit]:
        util = "-" if r["util"] is None else f"{r['util'] * 100:.0f}%"
        paused = "-" if r["paused"] is None else f"{r['paused'] * 100:.0f}"
        lines.append(f"{r['port']:<10} {util:>5} {_gbps(r['rx_bps']):>7} {_gbps(r['tx_bps']):>7} "
                     f"{_rate(r['errs']):>6} {_rate(r.get('symbol_errors')):>6} {_rate(r['drops']):>6} "
                     f"{paused:>5}")
    for ev in events.get("open", [])[:5]:
        lines.append(f"EVENT {ev.get('severity', '?')} {ev.get('type', '?')}: {ev.get('message', '')}")
    return lines


def _rich_view(target: str, rows: list[dict[str, Any]], events: dict[str, list], height: int):
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    opened = events.get("open", [])
    shown_events = opened[:4]
    # 24 lines: title, header, rows..., event title and events, hint
    room = max(3, height - 5 - len(shown_events) - (1 if shown_events else 0))
    table = Table(box=None, pad_edge=False, header_style="bold", expand=False)
    for name, justify in (("port", "left"), ("util", "left"), ("", "right"), ("rx Gb/s", "right"),
                          ("tx Gb/s", "right"), ("err/s", "right"), ("sym/s", "right"),
                          ("drop/s", "right"), ("pfc%", "right")):
        table.add_column(name, justify=justify, no_wrap=True)
    hot = {i for ev in opened for i in ev.get("interfaces", [])}
    for r in rows[:room]:
        util = r["util"]
        style = "bold red" if r["port"] in hot else ""
        table.add_row(
            Text(r["port"], style=style), _bar(util), "-" if util is None else f"{util * 100:3.0f}%",
            _gbps(r["rx_bps"]), _gbps(r["tx_bps"]), _rate(r["errs"]), _rate(r.get("symbol_errors")),
            _rate(r["drops"]), "-" if r["paused"] is None else f"{r['paused'] * 100:.0f}",
        )
    title = Text(f"swtel top — {target}  {time.strftime('%H:%M:%S')}  {len(rows)} ports  "
                 f"{len(opened)} open events", style="bold")
    parts: list[Any] = [title, table]
    if shown_events:
        parts.append(Text("open events:", style="bold"))
        for ev in shown_events:
            color = "red" if ev.get("severity") == "critical" else "yellow"
            parts.append(Text(f" {ev.get('type', '?')}: {ev.get('message', '')}", style=color, overflow="ellipsis",
                              no_wrap=True))
    parts.append(Text("q: quit", style="dim"))
    return Group(*parts)


@contextmanager
def _cbreak(fd: int):
    """Keys arrive one at a time, unechoed; restored on exit (even on errors)."""
    import termios
    import tty

    old = termios.tcgetattr(fd)
    try:
        tty.setcbreak(fd)
        yield
    finally:
        termios.tcsetattr(fd, termios.TCSADRAIN, old)


def _key_pressed(fd: int | None, timeout: float) -> str:
    if fd is None:
        time.sleep(timeout)
        return ""
    ready, _, _ = select.select([fd], [], [], timeout)
    return os.read(fd, 16).decode(errors="replace") if ready else ""


def top_main(args: Any) -> int:
    path = socket_path(args)
    try:
        prev = request(path, "ports")
    except ControlError as exc:
        print(f"swtel top: {exc}", file=sys.stderr)
        return 2
    interval = max(0.2, float(args.interval))
    plain = args.plain or not sys.stdout.isatty()
    iterations = args.iterations
    if plain:
        return _run_plain(path, prev, interval, iterations, args.limit)
    return _run_live(path, prev, interval, iterations)


def _run_plain(path: str, prev: dict, interval: float, iterations: int | None, limit: int) -> int:
    n = 0
    while iterations is None or n < iterations:
        time.sleep(interval)
        try:
            cur = request(path, "ports")
        except ControlError as exc:
            print(f"swtel top: {exc}", file=sys.stderr)
            return 2
        print("\n".join(plain_lines(cur.get("target", "?"), rates(prev, cur), cur.get("events", {}), limit)),
              flush=True)
        prev = cur
        n += 1
    return 0


def _run_live(path: str, prev: dict, interval: float, iterations: int | None) -> int:
    from rich.console import Console
    from rich.live import Live

    console = Console()
    fd = sys.stdin.fileno() if sys.stdin.isatty() else None
    n = 0
    view = _rich_view(prev.get("target", "?"), [], prev.get("events", {}), console.size.height)
    with (_cbreak(fd) if fd is not None else _nullcontext()), Live(
            view, console=console, screen=True, auto_refresh=False, transient=True) as live:
        while iterations is None or n < iterations:
            if "q" in _key_pressed(fd, interval).lower():
                break
            try:
                cur = request(path, "ports")
            except ControlError as exc:
                live.stop()
                print(f"swtel top: {exc}", file=sys.stderr)
                return 2
            live.update(_rich_view(cur.get("target", "?"), rates(prev, cur), cur.get("events", {}),
                                   console.size.height), refresh=True)
            prev = cur
            n += 1
    return 0


@contextmanager
def _nullcontext():
    yield
