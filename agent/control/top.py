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
from agent.control.printable import printable

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
        r["why"] = _top_reason(prev.get("drop_reasons", {}), row.get("drop_reasons", {}), dt)
        r["errs"] = r.get("errors", 0.0) + r.get("uncorrectable", 0.0)
        out.append(r)
    out.sort(key=lambda r: (-(r["rx_bps"] + r["tx_bps"]), r["port"]))
    return out


def _top_reason(old: dict[str, int], new: dict[str, int], dt: float) -> str:
    """The reason the port dropped most for since the previous reply ("-": none), with its rate."""
    best, rate = "", 0.0
    for sub, total in new.items():
        r = max(0, total - old.get(sub, total)) / dt
        if r > rate:
            best, rate = sub, r
    return f"{best.partition('/')[2]} {_rate(rate)}/s" if best else "-"


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
    """The view as plain text lines (no terminal needed); names and messages made printable."""
    lines = [f"{time.strftime('%H:%M:%S')} {printable(target)}: {len(rows)} ports, "
             f"{len(events.get('open', []))} open events"]
    lines.append(f"{'port':<10} {'util':>5} {'rx Gb/s':>7} {'tx Gb/s':>7} {'err/s':>6} {'sym/s':>6} "
                 f"{'drop/s':>6} {'pfc%':>5} top drop reason")
    for r in rows[:limit]:
        util = "-" if r["util"] is None else f"{r['util'] * 100:.0f}%"
        paused = "-" if r["paused"] is None else f"{r['paused'] * 100:.0f}"
        lines.append(f"{printable(r['port']):<10} {util:>5} {_gbps(r['rx_bps']):>7} {_gbps(r['tx_bps']):>7} "
                     f"{_rate(r['errs']):>6} {_rate(r.get('symbol_errors')):>6} {_rate(r['drops']):>6} "
                     f"{paused:>5} {printable(r.get('why', '-'))}")
    for ev in events.get("open", [])[:5]:
        lines.append(printable(f"EVENT {ev.get('severity', '?')} {ev.get('type', '?')}: {ev.get('message', '')}"))
    return lines


# The live view's columns after the port name, in display order: (header, width, cell, rank).
# When the terminal is too narrow the highest rank goes first (the bar, then PFC, drops,
# symbol errors, ...); the port name is never what gives way.
_COLUMNS: list[tuple[str, int, Any, int]] = [
    ("util", 10, lambda r: _bar(r["util"]), 8),
    ("", 4, lambda r: "-" if r["util"] is None else f"{r['util'] * 100:3.0f}%", 1),
    ("rx Gb/s", 7, lambda r: _gbps(r["rx_bps"]), 2),
    ("tx Gb/s", 7, lambda r: _gbps(r["tx_bps"]), 3),
    ("err/s", 6, lambda r: _rate(r["errs"]), 4),
    ("sym/s", 6, lambda r: _rate(r.get("symbol_errors")), 5),
    ("drop/s", 6, lambda r: _rate(r["drops"]), 6),
    ("pfc%", 4, lambda r: "-" if r["paused"] is None else f"{r['paused'] * 100:.0f}", 7),
    ("top drop reason", 26, lambda r: printable(r.get("why", "-")), 9),  # the first to give way
]
_NAME_MAX = 24  # a port column wider than this only if the terminal has room to spare


def layout(names: list[str], width: int) -> tuple[int, list[tuple[str, int, Any, int]]]:
    """The port column's width and the other columns that fit ``width``: columns are dropped
    (highest rank first) until the names fit whole (names of up to 24 characters; a longer
    one gets whatever the remaining columns leave, all of the width once none is left)."""
    name_w = max([4, *(len(n) for n in names)])
    cols = list(_COLUMNS)

    def total(w: int) -> int:
        return w + sum(1 + c[1] for c in cols)

    while cols and total(min(name_w, _NAME_MAX)) > width:
        cols.remove(max(cols, key=lambda c: c[3]))
    room = width - total(0)
    return max(1, min(name_w, room)), cols


def _rich_view(target: str, rows: list[dict[str, Any]], events: dict[str, list], height: int,
               width: int = 80):
    from rich.console import Group
    from rich.text import Text

    opened = events.get("open", [])
    # lines: title, header, the rows, "open events:" and the events, the hint
    shown_events = opened[:min(4, max(1, (height - 5) // 3))] if opened else []
    room = max(1, height - 3 - (len(shown_events) + 1 if shown_events else 0))
    shown = rows[:room]
    names = [printable(r["port"]) for r in shown]
    name_w, cols = layout(names, width)
    header = Text("port".ljust(name_w)[:name_w], style="bold", no_wrap=True, overflow="ellipsis")
    bar = any(c[0] == "util" for c in cols)
    for head, w, _cell, _rank in cols:
        head = head or ("" if bar else "util")  # the percentage is headed "util" once the bar is gone
        header.append(" " + (head.ljust(w) if w >= 10 else head.rjust(w)), style="bold")  # wide: text
    lines: list[Any] = [header]
    hot = {i for ev in opened for i in ev.get("interfaces", [])}
    for r, name in zip(shown, names, strict=True):
        cell = name if len(name) <= name_w else name[:max(0, name_w - 1)] + "…"
        line = Text(cell.ljust(name_w), style="bold red" if r["port"] in hot else "", no_wrap=True,
                    overflow="crop")
        for _head, w, fn, _rank in cols:
            text = fn(r)[:w]
            line.append(" " + (text.ljust(w) if w >= 10 else text.rjust(w)))
        lines.append(line)
    title = Text(f"swtel top — {printable(target)}  {time.strftime('%H:%M:%S')}  {len(rows)} ports  "
                 f"{len(opened)} open events", style="bold", no_wrap=True, overflow="ellipsis")
    parts: list[Any] = [title, *lines]
    if shown_events:
        parts.append(Text("open events:", style="bold"))
        for ev in shown_events:
            color = "red" if ev.get("severity") == "critical" else "yellow"
            parts.append(Text(printable(f" {ev.get('type', '?')}: {ev.get('message', '')}"), style=color,
                              overflow="ellipsis", no_wrap=True))
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
        try:
            termios.tcsetattr(fd, termios.TCSADRAIN, old)
        except termios.error:
            pass  # the terminal hung up: nothing left to restore


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
        print(f"swtel top: {printable(exc)}", file=sys.stderr)
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
            print(f"swtel top: {printable(exc)}", file=sys.stderr)
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
    view = _rich_view(prev.get("target", "?"), [], prev.get("events", {}), console.size.height,
                      console.size.width)
    with (_cbreak(fd) if fd is not None else _nullcontext()), Live(
            view, console=console, screen=True, auto_refresh=False, transient=True) as live:
        while iterations is None or n < iterations:
            if "q" in _key_pressed(fd, interval).lower():
                break
            try:
                cur = request(path, "ports")
            except ControlError as exc:
                live.stop()
                print(f"swtel top: {printable(exc)}", file=sys.stderr)
                return 2
            live.update(_rich_view(cur.get("target", "?"), rates(prev, cur), cur.get("events", {}),
                                   console.size.height, console.size.width), refresh=True)
            prev = cur
            n += 1
    return 0


@contextmanager
def _nullcontext():
    yield
