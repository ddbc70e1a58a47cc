"""``swtel top``: a live view of a running agent over its control socket, like ``top``
for the switch: ports sorted by throughput with utilization bars, error, drop and PFC
rates, and the open insight events. Refreshes every second; ``q`` quits.

Rates come from two successive ``ports`` replies (cumulative totals) divided by the
time between their samples. With stdout not a terminal it prints plain lines instead
(for scripts, logs and pipes).

A fabric (``swtel fabric``'s directory, which holds topology.yaml and every agent's control
socket): ``swtel top --fabric DIR``, or ``--socket`` at a socket of that directory, lists the
devices (name, role, socket, up or down, open events) and the incidents their events form (a
host's RoCE retransmissions with the link faults on its paths, by the LLDP neighbours each agent
holds: agent/control/incidents.py); ``j``/``k`` (or the arrows) pick one, Enter views it, ``b``
(or Esc) goes back to the list.
"""

from __future__ import annotations

import os
import select
import sys
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agent.control.client import ControlError, exit_code, request, socket_path
from agent.control.incidents import Incident, StreamView
from agent.control.printable import far_end, printable

#: what ``swtel fabric`` writes into its directory beside the agents' sockets (agent/tools/fabric.py)
TOPOLOGY_FILE = "topology.yaml"
#: a device's control socket answers the list's poll within this, or shows as down
FABRIC_POLL_TIMEOUT_S = 1.0
#: the states the incidents need of each agent (control command ``states``): its LLDP neighbours
#: and, on a host, its RDMA ports' netdevs
INCIDENT_STATES = ["/lldp/", "swtel:/rdma/"]
#: the fabric's list shows at most this many incidents, the newest
INCIDENTS_SHOWN = 5


def fabric_socket(directory: Path, name: str) -> Path:
    """Where ``swtel fabric`` puts a device's control socket: ``<directory>/<name>.sock``."""
    return Path(directory) / f"{name}.sock"


@dataclass
class FabricDevice:
    """One device of a fabric's list, with what its agent answered at the last poll."""

    name: str
    role: str
    socket: Path
    up: bool = False
    open_events: int = 0
    ports: int = 0
    error: str = ""  # why it is down
    target: str = ""  # the agent's own name for itself (its events' and neighbours' device)
    events: list[dict[str, Any]] = field(default_factory=list)  # open and recently cleared
    states: list[list[Any]] = field(default_factory=list)  # [path, value] of INCIDENT_STATES


def load_fabric(directory: Path) -> list[FabricDevice]:
    """The devices of ``directory``'s topology.yaml in its order; a device's socket is the one
    the file names (relative to the directory), else ``<name>.sock`` there. ValueError when the
    file is missing or not a topology."""
    import yaml

    from agent.yamlsafe import Loader

    path = Path(directory) / TOPOLOGY_FILE
    try:
        doc = yaml.load(path.read_text(), Loader=Loader)  # noqa: S506 - agent.yamlsafe's SafeLoader
    except (OSError, yaml.YAMLError) as exc:
        raise ValueError(f"no fabric topology at {path}: {exc}") from None
    devices = doc.get("devices") if isinstance(doc, dict) else None
    if not isinstance(devices, list) or not all(isinstance(d, dict) and isinstance(d.get("name"), str)
                                                for d in devices):
        raise ValueError(f"{path}: expected a list of devices with names (swtel fabric writes it)")
    out = []
    for d in devices:
        sock = d.get("socket")
        where = Path(directory) / sock if isinstance(sock, str) and sock else fabric_socket(directory, d["name"])
        out.append(FabricDevice(d["name"], str(d.get("role", "?")), where))
    return out


def fabric_of(socket: str) -> Path | None:
    """The fabric directory a control socket belongs to (its directory holds a topology.yaml
    that lists it), else None."""
    directory = Path(socket).parent
    try:
        devices = load_fabric(directory)
    except ValueError:
        return None
    return directory if any(d.socket == Path(socket) for d in devices) else None


def poll_fabric(devices: list[FabricDevice], timeout_s: float = FABRIC_POLL_TIMEOUT_S) -> None:
    """Ask every device's agent for its ports and events (a ``ports`` request) and for the
    states incidents need (``states``; an agent without that command has none): up with its
    open events and ports, or down with why."""
    for dev in devices:
        try:
            reply = request(str(dev.socket), "ports", timeout_s=timeout_s)
        except ControlError as exc:
            dev.up, dev.open_events, dev.ports, dev.error = False, 0, 0, str(exc)
            dev.events, dev.states = [], []
            continue
        dev.up, dev.error = True, ""
        events = reply.get("events") or {}
        dev.open_events = len(events.get("open", []))
        dev.ports = len(reply.get("ports") or {})
        dev.target = str(reply.get("target") or dev.name)
        dev.events = [*events.get("open", []), *events.get("recent", [])]
        try:
            dev.states = request(str(dev.socket), "states", timeout_s=timeout_s,
                                 prefixes=INCIDENT_STATES).get("states") or []
        except ControlError:
            dev.states = []


def fabric_incidents(devices: list[FabricDevice], now_ns: int | None = None) -> list[Incident]:
    """The incidents of the devices' last poll: their events grouped by the LLDP neighbours the
    agents hold (never topology.yaml), newest last."""
    view = StreamView()
    for dev in devices:
        if not dev.up:
            continue
        view.on_lines([{"target": dev.target or dev.name, "path": p, "value": v}
                       for p, v in (s for s in dev.states if isinstance(s, list | tuple) and len(s) == 2)])
        view.add_events(dev.target or dev.name, (e for e in dev.events if isinstance(e, dict)))
    found = view.incidents(time.time_ns() if now_ns is None else now_ns)
    return sorted(found, key=lambda i: (i.formed_ns, i.key))


def incident_lines(incidents: list[Incident]) -> list[str]:
    """The newest incidents as plain lines (``INCIDENT`` and the incident, times in UTC)."""
    return [printable(f"INCIDENT {inc.text()}") for inc in incidents[-INCIDENTS_SHOWN:]]


def fabric_lines(directory: Path, devices: list[FabricDevice], selected: int | None = None) -> list[str]:
    """The device list as plain text lines; ``selected`` marked with ``>``."""
    up = sum(d.up for d in devices)
    lines = [f"{time.strftime('%H:%M:%S')} fabric {printable(str(directory))}: {len(devices)} devices, "
             f"{up} up, {sum(d.open_events for d in devices)} open events"]
    name_w = max([6, *(len(printable(d.name)) for d in devices)])
    lines.append(f"  {'device':<{name_w}} {'role':<5} {'state':<5} {'events':>6} {'ports':>5} socket")
    for i, d in enumerate(devices):
        mark = ">" if i == selected else " "
        state = "up" if d.up else "down"
        lines.append(f"{mark} {printable(d.name):<{name_w}} {printable(d.role):<5} {state:<5} "
                     f"{d.open_events if d.up else '-':>6} {d.ports if d.up else '-':>5} {printable(str(d.socket))}")
    return lines + incident_lines(fabric_incidents(devices))

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
        lines.append(printable(f"EVENT {ev.get('severity', '?')} {ev.get('type', '?')}: {ev.get('message', '')}"
                               f"{far_end(ev)}"))
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
               width: int = 80, hint: str = "q: quit"):
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
            # the far end first: the message's end is what an ellipsis cuts
            far = f" (neighbor: {ev['neighbor']})" if ev.get("neighbor") else ""
            parts.append(Text(printable(f" {ev.get('type', '?')}{far}: {ev.get('message', '')}"), style=color,
                              overflow="ellipsis", no_wrap=True))
    parts.append(Text(hint, style="dim"))
    return Group(*parts)


FABRIC_HINT = "j/k or ↑/↓: pick  Enter: view the device  q: quit"
DEVICE_HINT = "b or Esc: the fabric's devices  q: quit"


def _rich_fabric(directory: Path, devices: list[FabricDevice], selected: int, height: int, width: int = 80):
    """The fabric's device list: the selected row reversed, a down device red, one with open
    events yellow; rows scroll to keep the selected one shown."""
    from rich.console import Group
    from rich.text import Text

    up = sum(d.up for d in devices)
    # the counts first: a long directory is what gives way
    title = Text(f"swtel top — fabric: {len(devices)} devices, {up} up, {sum(d.open_events for d in devices)} "
                 f"open events  {time.strftime('%H:%M:%S')}  {printable(str(directory))}",
                 style="bold", no_wrap=True, overflow="ellipsis")
    name_w = min(_NAME_MAX, max([6, *(len(printable(d.name)) for d in devices)]))
    header = Text(f"{'device':<{name_w}} {'role':<5} {'state':<5} {'events':>6} {'ports':>5} socket",
                  style="bold", no_wrap=True, overflow="ellipsis")
    incidents = incident_lines(fabric_incidents(devices))
    room = max(1, height - 3 - len(incidents))
    first = min(max(0, selected - room + 1), max(0, len(devices) - room))
    lines: list[Any] = [title, header]
    for i, d in enumerate(devices[first:first + room], start=first):
        name = printable(d.name)
        name = name if len(name) <= name_w else name[:name_w - 1] + "…"
        state = "up" if d.up else "down"
        text = (f"{name:<{name_w}} {printable(d.role):<5} {state:<5} {d.open_events if d.up else '-':>6} "
                f"{d.ports if d.up else '-':>5} {printable(str(d.socket) if d.up else d.error or str(d.socket))}")
        style = "red" if not d.up else ("yellow" if d.open_events else "")
        if i == selected:
            style = (style + " reverse").strip()
        lines.append(Text(text, style=style, no_wrap=True, overflow="ellipsis"))
    lines += [Text(line, style="bold red", no_wrap=True, overflow="ellipsis") for line in incidents]
    lines.append(Text(FABRIC_HINT, style="dim"))
    return Group(*lines)


#: keys: (arrow escape sequences first: they begin with Esc)
_UP, _DOWN = ("\x1b[A", "\x1bOA", "k"), ("\x1b[B", "\x1bOB", "j")
_OPEN = ("\r", "\n", "l")


def fabric_key(key: str, viewing: bool, selected: int, count: int) -> tuple[str, int]:
    """What a key press does: (``quit``, ``open``, ``back`` or ``""``, the selection after it).
    In the list ``j``/``k`` and the arrows move, Enter (or ``l``) opens; viewing a device, ``b``
    or Esc goes back to the list."""
    if "q" in key.lower():
        return "quit", selected
    if viewing:
        return ("back", selected) if key in ("b", "h", "\x1b") else ("", selected)
    if any(k in key for k in _UP):
        return "", max(0, selected - 1)
    if any(k in key for k in _DOWN):
        return "", min(max(0, count - 1), selected + 1)
    if any(k in key for k in _OPEN):
        return "open", selected
    return "", selected


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
    interval = max(0.2, float(args.interval))
    plain = args.plain or not sys.stdout.isatty()
    iterations = args.iterations
    fabric = getattr(args, "fabric", None)
    if fabric:  # the fabric's device list first
        try:
            devices = load_fabric(Path(fabric))
        except ValueError as exc:
            print(f"swtel top: {printable(exc)}", file=sys.stderr)
            return 2
        if plain:
            return _run_fabric_plain(Path(fabric), devices, interval, iterations)
        return _run_live(None, None, interval, iterations, Path(fabric), devices)
    path = socket_path(args)
    try:
        prev = request(path, "ports")
    except ControlError as exc:
        print(f"swtel top: {printable(exc)}", file=sys.stderr)
        return exit_code(exc)
    if plain:
        return _run_plain(path, prev, interval, iterations, args.limit)
    directory = fabric_of(path)  # a socket of a fabric: its device list is a key away
    devices = load_fabric(directory) if directory is not None else None
    return _run_live(path, prev, interval, iterations, directory, devices)


def _run_fabric_plain(directory: Path, devices: list[FabricDevice], interval: float,
                      iterations: int | None) -> int:
    n = 0
    while iterations is None or n < iterations:
        if n:
            time.sleep(interval)
        poll_fabric(devices)
        print("\n".join(fabric_lines(directory, devices)), flush=True)
        n += 1
    return 0


def _run_plain(path: str, prev: dict, interval: float, iterations: int | None, limit: int) -> int:
    n = 0
    while iterations is None or n < iterations:
        time.sleep(interval)
        try:
            cur = request(path, "ports")
        except ControlError as exc:
            print(f"swtel top: {printable(exc)}", file=sys.stderr)
            return exit_code(exc)
        print("\n".join(plain_lines(cur.get("target", "?"), rates(prev, cur), cur.get("events", {}), limit)),
              flush=True)
        prev = cur
        n += 1
    return 0


def _run_live(path: str | None, prev: dict | None, interval: float, iterations: int | None,
              fabric: Path | None = None, devices: list[FabricDevice] | None = None) -> int:
    """The live view of one agent (``path``), or of a fabric's device list (``path`` None) from
    which a device is opened; with a fabric, ``b`` goes back from a device to the list."""
    from rich.console import Console
    from rich.live import Live

    console = Console()
    fd = sys.stdin.fileno() if sys.stdin.isatty() else None
    devices = devices or []
    selected = next((i for i, d in enumerate(devices) if path is not None and str(d.socket) == path), 0)
    hint = DEVICE_HINT if fabric is not None else "q: quit"

    def draw() -> Any:
        size = console.size
        if path is None:
            assert fabric is not None
            return _rich_fabric(fabric, devices, selected, size.height, size.width)
        return _rich_view(prev.get("target", "?"), rates(prev, cur), cur.get("events", {}), size.height,
                          size.width, hint)

    if path is None:
        poll_fabric(devices)
    cur = prev
    n = 0
    with (_cbreak(fd) if fd is not None else _nullcontext()), Live(
            draw(), console=console, screen=True, auto_refresh=False, transient=True) as live:
        while iterations is None or n < iterations:
            key = _key_pressed(fd, interval)
            action, selected = fabric_key(key, path is not None, selected, len(devices)) if fabric is not None \
                else ("quit" if "q" in key.lower() else "", 0)
            if action == "quit":
                break
            if action == "back":
                path = prev = cur = None
            elif action == "open" and devices:
                try:
                    prev = cur = request(str(devices[selected].socket), "ports")
                    path = str(devices[selected].socket)
                except ControlError as exc:  # down: it stays in the list, with why
                    devices[selected].up, devices[selected].error = False, str(exc)
            if path is None:
                poll_fabric(devices)
            elif action != "open":
                try:
                    prev, cur = cur, request(path, "ports")
                except ControlError as exc:
                    if fabric is None:
                        live.stop()
                        print(f"swtel top: {printable(exc)}", file=sys.stderr)
                        return exit_code(exc)
                    path = prev = cur = None  # the device went down: back to the list, which says so
                    poll_fabric(devices)
            live.update(draw(), refresh=True)
            n += 1
    return 0


@contextmanager
def _nullcontext():
    yield
