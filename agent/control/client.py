"""Talk to a running agent over its control socket; ``swtel status``.

Exit codes of ``swtel status``: 0 healthy, 1 unhealthy (see :func:`health_problems`),
2 no agent answered (absent: no socket, a stale one, not a swtel agent, no answer in time),
3 the agent is there but busy (every control connection running a command, after retrying
for :data:`BUSY_RETRY_S`), 4 the agent answered with an error of its own (a command that
failed inside it: :class:`AgentError`).
"""

from __future__ import annotations

import json
import os
import random
import socket
import stat
import sys
import time
from typing import Any

from agent import config as config_mod
from agent.control.printable import far_end, printable
from agent.control.protocol import KIND_BUSY, MAX_REPLY, ProtocolError, pack, read_frame

EXIT_HEALTHY, EXIT_UNHEALTHY, EXIT_NO_AGENT, EXIT_BUSY, EXIT_AGENT_ERROR = 0, 1, 2, 3, 4
STALE_INTERVALS = 3  # a source is unhealthy after this many intervals without a good poll


class ControlError(Exception):
    """The agent could not be reached, or it answered with an error."""


class AgentBusy(ControlError):
    """The agent answered, but has no connection to spare (too many clients)."""


def _group_hint(st: os.stat_result) -> str:
    """What to do about a socket this user may not open: join its group."""
    try:
        import grp

        group = grp.getgrgid(st.st_gid).gr_name
    except (KeyError, ImportError):
        group = str(st.st_gid)
    return (f"the socket is group {group}'s: add yourself to it (sudo usermod -aG {group} "
            "$USER, then log in again) or run as root")


class AgentError(ControlError):
    """The agent answered, with an error: the command failed inside it (or, from an agent of
    another version, the request was refused). An agent that is there, never "no agent"."""


def exit_code(exc: ControlError) -> int:
    """The exit code of ``swtel status`` and ``swtel top`` for a request that failed."""
    if isinstance(exc, AgentBusy):
        return EXIT_BUSY
    return EXIT_AGENT_ERROR if isinstance(exc, AgentError) else EXIT_NO_AGENT


def _why_not(path: str, exc: BaseException) -> str:
    """Why nothing (or not a swtel agent) answered on ``path``, in words."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return f"no agent answered: {path} does not exist (is swtel running?)"
    except OSError as err:
        return f"no agent answered: {path}: {err.strerror}"
    if not stat.S_ISSOCK(st.st_mode):
        return f"no agent answered: {path} is not a socket"
    if isinstance(exc, ConnectionRefusedError):
        return f"no agent answered: {path} is a stale socket (nothing listens on it; an agent that exited?)"
    if isinstance(exc, PermissionError):
        return f"no agent answered: {path}: permission denied ({_group_hint(st)})"
    if isinstance(exc, TimeoutError | socket.timeout):
        return f"no agent answered on {path} in time"
    if isinstance(exc, ProtocolError):
        return f"{path} answered, but not as a swtel agent ({exc})"
    return f"no agent answered on {path}: {getattr(exc, 'strerror', None) or exc}"


#: How long :func:`request` keeps retrying while the agent is busy (a full listen backlog,
#: EAGAIN on connect, or a ``busy`` answer: every connection slot running a command)
#: before it gives up with :class:`AgentBusy`. Bounded by the request's own timeout.
BUSY_RETRY_S = 2.0


def request(path: str, cmd: str, timeout_s: float = 5.0, **args: Any) -> Any:
    """Send one command and return its result; raise :class:`ControlError` otherwise
    (:class:`AgentBusy` when the agent is there but has no connection to spare).

    A busy agent is retried for up to :data:`BUSY_RETRY_S` (short, jittered pauses) before
    :class:`AgentBusy` is raised, so a burst of clients is answered, not turned away."""
    if not path:
        raise ControlError("no agent answered: empty socket path")
    start = time.monotonic()
    give_up = start + min(BUSY_RETRY_S, timeout_s)
    pause = 0.01
    while True:
        try:
            return _request_once(path, cmd, max(0.1, timeout_s - (time.monotonic() - start)), args)
        except AgentBusy:
            if time.monotonic() + pause >= give_up:
                raise
        time.sleep(pause * random.uniform(0.5, 1.5))
        pause = min(pause * 2, 0.2)


def _request_once(path: str, cmd: str, timeout_s: float, args: dict[str, Any]) -> Any:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
    sock.settimeout(timeout_s)
    reply: Any = None
    try:
        try:
            sock.connect(path)
        except BlockingIOError:  # EAGAIN: the agent's listen backlog is full
            raise AgentBusy(f"agent on {path} is busy: its listen backlog is full") from None
        except OSError as exc:
            raise ControlError(_why_not(path, exc)) from None
        try:
            sock.sendall(pack({"cmd": cmd, **args}))
        except OSError:
            pass  # a busy agent replies and closes before reading: its reply is still there
        try:
            reply = read_frame(sock, MAX_REPLY, timeout_s)
        except (OSError, ProtocolError) as exc:
            raise ControlError(_why_not(path, exc)) from None
    finally:
        sock.close()
    if not isinstance(reply, dict):
        raise ControlError(f"{path} answered, but not as a swtel agent")
    if not reply.get("ok"):
        error = str(reply.get("error", "error reply without a message"))
        if reply.get("kind") == KIND_BUSY or error.startswith("busy"):  # an agent before kinds: the text
            raise AgentBusy(f"agent on {path} is busy: {error}")
        raise AgentError(f"the agent on {path} answered with an error: {error}")
    return reply.get("result")


# ---------------------------------------------------------------- health


def health_problems(status: dict[str, Any], grace_s: float | None = None) -> list[str]:
    """Why the agent is unhealthy (empty list: healthy).

    * A source is stale when it has had no successful poll for 3 of its intervals
      (counting from start-up if it never had one).
    * Dial-out is down when every dial-out destination has been down (``down_since_ns``
      set) for longer than ``grace_s`` (default: ``status["config"]["health_grace_s"]``, else 60 s).
    * A source reports a fault (a plugin that cannot be opened, a refused layout, a layout
      that keeps changing, a crashed or hung plugin).
    * Any other exporter (jsonl, the gNMI server, a tunnel, OTLP) that has failed (state
      ``failed`` or ``stopped``), or that has been down (a tunnel not registered, an OTLP
      receiver unreachable or rejecting every point) for longer than ``grace_s``.
    * The tick loop has stopped (``tick.loop_error``): nothing is polled any more.
    * A source that reads ports selects none (an interface glob matching nothing, a plugin
      with no port) once the agent has been up longer than ``grace_s``.
    * The tick loop did not answer the status in time (``tick.stale_s``: the status is an
      earlier one, that old): a poll is blocking it.
    """
    now_ns = int(status.get("now_ns") or time.time_ns())
    started_ns = now_ns - int(float(status.get("uptime_s") or 0) * 1e9)
    problems: list[str] = []
    for name, src in sorted((status.get("sources") or {}).items()):
        if src.get("enabled") is False:
            continue
        interval_s = float(src.get("interval_s") or 0)
        if interval_s <= 0:
            continue
        limit_ns = STALE_INTERVALS * interval_s * 1e9
        last_ok = src.get("last_ok_ns")
        if last_ok is None:
            if now_ns - started_ns > limit_ns:
                problems.append(f"source {name}: no successful poll since start-up")
        elif now_ns - int(last_ok) > limit_ns:
            age = (now_ns - int(last_ok)) / 1e9
            problems.append(
                f"source {name}: no successful poll for {age:.1f}s (interval {_fmt_s(interval_s)})"
            )
        if src.get("fault"):
            problems.append(f"source {name}: {_tail(str(src['fault']), 200)}")
    if grace_s is None:
        grace_s = float((status.get("config") or {}).get("health_grace_s") or 60.0)
    for name, src in sorted((status.get("sources") or {}).items()):
        # a glob that matches nothing reads fine and streams nothing: red once the grace is over
        if (src.get("selects_ports") and src.get("ports") == 0 and src.get("last_ok_ns") is not None
                and now_ns - started_ns > grace_s * 1e9):
            problems.append(f"source {name}: selects no port (check its interfaces; "
                            f"up {_fmt_s((now_ns - started_ns) / 1e9)}, grace {_fmt_s(grace_s)})")
    loop_error = (status.get("tick") or {}).get("loop_error")
    if loop_error:
        problems.append(f"tick loop stopped: {_tail(str(loop_error))}")
    stale_s = (status.get("tick") or {}).get("stale_s")
    if stale_s is not None:  # the tick thread did not answer: the sources' figures are this old
        problems.append(f"tick loop busy: it did not answer, this status is {float(stale_s):.1f}s old "
                        "(a poll blocking the tick thread?)")
    for name, e in sorted((status.get("exporters") or {}).items()):
        if not isinstance(e, dict) or e.get("kind") == "dialout":
            continue
        error = f": {_tail(str(e['last_error']))}" if e.get("last_error") else ""
        if e.get("state") in ("failed", "stopped"):
            problems.append(f"exporter {name} {e.get('state')}{error}")
        elif e.get("down_since_ns") is not None and now_ns - int(e["down_since_ns"]) > grace_s * 1e9:
            down = (now_ns - int(e["down_since_ns"])) / 1e9
            problems.append(f"exporter {name} failing for {down:.0f}s (grace {_fmt_s(grace_s)}){error}")
    dialouts = {
        n: e for n, e in (status.get("exporters") or {}).items() if e.get("kind") == "dialout"
    }
    if dialouts:
        downs = [e.get("down_since_ns") for e in dialouts.values()]
        if all(d is not None and now_ns - int(d) > grace_s * 1e9 for d in downs):
            shortest = min((now_ns - int(d)) / 1e9 for d in downs)
            problems.append(
                f"every dial-out destination has been down for at least {shortest:.0f}s "
                f"(grace {_fmt_s(grace_s)})"
            )
    return problems


# ---------------------------------------------------------------- swtel status


def socket_path(args: Any) -> str:
    """--socket, else the config's control.socket (from -c or the default file), else the default."""
    if getattr(args, "socket", None):
        return args.socket
    cfg_path = getattr(args, "config", None)
    if cfg_path or os.path.exists(config_mod.DEFAULT_PATH):
        import agent.plugins  # noqa: F401  (the registries the config is read with; only when one is read)

        try:
            return config_mod.load(cfg_path or config_mod.DEFAULT_PATH).control.socket
        except config_mod.ConfigError as exc:
            if cfg_path:  # asked for explicitly: say why it was not used
                print(printable(f"swtel status: ignoring {cfg_path}: {exc.problems[0]}"), file=sys.stderr)
    return config_mod.DEFAULT_SOCKET


def _grace_from_config(args: Any) -> float | None:
    path = getattr(args, "config", None)
    if not path:
        return None
    import agent.plugins  # noqa: F401

    try:
        return float(config_mod.load(path).control.health_grace)
    except config_mod.ConfigError:
        return None


def status_main(args: Any) -> int:
    path = socket_path(args)
    try:
        status = request(path, "status")
    except AgentBusy as exc:
        print(f"swtel status: {exc}; it is running, try again", file=sys.stderr)
        return EXIT_BUSY
    except AgentError as exc:  # the agent is there: its own failure, never "no agent answered"
        print(f"swtel status: {printable(exc)}", file=sys.stderr)
        return EXIT_AGENT_ERROR
    except ControlError as exc:
        print(f"swtel status: {printable(exc)}", file=sys.stderr)
        return EXIT_NO_AGENT
    if not isinstance(status, dict):
        print(printable(f"swtel status: unexpected reply from {path}: {status!r}"[:500]), file=sys.stderr)
        return EXIT_NO_AGENT
    grace = (status.get("config") or {}).get("health_grace_s") or _grace_from_config(args)
    problems = health_problems(status, grace)
    if getattr(args, "json", False):
        out = dict(status, health={"ok": not problems, "problems": problems})
        json.dump(out, sys.stdout, indent=2, sort_keys=True, default=str)
        sys.stdout.write("\n")
    else:
        sys.stdout.write(render(status, problems))
    return EXIT_UNHEALTHY if problems else EXIT_HEALTHY


# ---------------------------------------------------------------- human summary


def _tail(text: str, limit: int = 80) -> str:
    """A long error on one line, cut in the middle: its start names the gRPC status code and
    the peer (``UNAVAILABLE: ipv4:127.0.0.1:4317``), its end the cause (``Connection
    refused``); cutting either end loses half the story."""
    text = " ".join(text.split())
    if len(text) <= limit:
        return text
    head = max(1, (limit - 3) // 2)
    return text[:head].rstrip() + "..." + text[-(limit - 3 - head):].lstrip()


def _fmt_s(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    seconds = float(seconds)
    if seconds < 1:
        return f"{seconds * 1000:.0f}ms"
    if seconds < 120:
        return f"{seconds:.3g}s"
    minutes, secs = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    days, hours = divmod(hours, 24)
    if days:
        return f"{days}d{hours}h{minutes}m"
    return f"{hours}h{minutes}m" if hours else f"{minutes}m{secs}s"


def _ago(now_ns: int, ts_ns: int | None) -> str:
    return "never" if ts_ns is None else f"{_fmt_s(max(0, now_ns - int(ts_ns)) / 1e9)} ago"


def _table(rows: list[list[str]]) -> list[str]:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return ["  " + "  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows]


def _event_line(now: int, ev: Any) -> str:
    """One insight event: when it started (and cleared), severity, type, its message."""
    if not isinstance(ev, dict):
        return f"  {ev}"
    when = _ago(now, ev.get("start_ns")) if ev.get("start_ns") else ""
    if ev.get("cleared_ns"):
        when += f", cleared {_ago(now, ev['cleared_ns'])}"
    return (f"  {when:>10}  {ev.get('severity', '?')} {ev.get('type', '?')}: {ev.get('message', '')}"
            f"{far_end(ev)}")


def render(status: dict[str, Any], problems: list[str]) -> str:
    now = int(status.get("now_ns") or time.time_ns())
    lines = [
        f"swtel {status.get('version', '?')}  pid {status.get('pid', '?')}  "
        f"up {_fmt_s(status.get('uptime_s'))}  reader {status.get('backend', '?')}"
        + (f" (fallback: {status['backend_fallback_reason']})" if status.get("backend_fallback_reason") else "")
    ]
    cfg = status.get("config") or {}
    last = cfg.get("last_reload") or {}
    reload_text = "none yet"
    if last and last.get("ok") is not None:
        error = "; ".join(str(last.get("error")).splitlines())
        reload_text = ("ok" if last.get("ok") else f"REJECTED: {error}") + (
            f" ({_ago(now, last['ts_ns'])})" if last.get("ts_ns") else ""
        )
    lines.append(f"config {cfg.get('path') or '(defaults)'}  last reload: {reload_text}")

    sources = status.get("sources") or {}
    if sources:
        lines.append("sources:")
        rows = [["name", "interval", "last ok", "took", "counters", "cadence", "ports", "errors", "overruns"]]
        for name, s in sorted(sources.items()):
            took = s.get("last_duration_us")
            rows.append([
                name,
                _fmt_s(s.get("interval_s")),
                _ago(now, s.get("last_ok_ns")),
                "-" if took is None else f"{took}us",
                str(s.get("counters", "-")),
                _fmt_s(s.get("refresh_cadence_s")),
                str(s.get("ports", "-")),
                str(s.get("errors", 0)),
                str(s.get("overruns", 0)),
            ])
        lines += _table(rows)
        # a source's own status line (sources.lldp: "lldp absent: lldpd not running")
        lines += [f"sources.{name}: {s['note']}" for name, s in sorted(sources.items())
                  if isinstance(s, dict) and s.get("note")]
    escaped = status.get("escaped_names") or []
    if escaped:  # interfaces whose kernel names are not text: their paths use the escaped form
        lines.append("interface names escaped (not text): " + ", ".join(
            f"{e.get('name')} = {e.get('kernel_name')}" for e in escaped))

    exporters = status.get("exporters") or {}
    if not exporters:
        lines.append("exporters: none configured: nothing leaves this switch "
                     "(add exporters.dialout, server, otlp or remote_write)")
    if exporters:
        lines.append("exporters:")
        rows = [["name", "kind", "state", "queue", "sent", "dropped", "reconnects", "last error"]]
        for name, e in sorted(exporters.items()):
            state = str(e.get("state", "-"))
            if e.get("down_since_ns") is not None:
                state += f" (down {_ago(now, e['down_since_ns'])})"
            rows.append([
                name,
                str(e.get("kind", "-")),
                state,
                str(e.get("queue", "-")),
                str(e.get("sent", "-")),
                str(e.get("dropped", "-")),
                str(e.get("reconnects", "-")),
                _tail(str(e.get("last_error") or "-")),
            ])
        lines += _table(rows)
        # the error of the outage that a reconnect ended: why it reconnected, not a current problem
        lines += [f"  {name} previous error (before it reconnected): {_tail(str(e['previous_error']))}"
                  for name, e in sorted(exporters.items()) if e.get("previous_error")]

    tick = status.get("tick") or {}
    if tick:
        rss = tick.get("rss_bytes")
        lines.append(
            f"tick: {tick.get('ticks', '-')} ticks, {tick.get('overruns', 0)} overruns, "
            f"cpu {tick.get('cpu_percent', '-')}%, rss "
            + ("-" if rss is None else f"{rss / 1048576:.1f} MiB")
        )
    events = status.get("events") or {}
    if isinstance(events, list):  # an agent before insights landed
        events = {"open": [], "recent": events}
    opened, recent = events.get("open") or [], events.get("recent") or []
    if opened:
        lines.append(f"open events ({len(opened)}):")
        lines += [_event_line(now, ev) for ev in opened[:20]]
    if recent:
        lines.append(f"recently cleared ({len(recent)}, newest first):")
        lines += [_event_line(now, ev) for ev in recent[:5]]
    for name, note in (events.get("detectors") or {}).items():  # e.g. congestion without buffer data
        if isinstance(note, dict) and note.get("note"):
            lines.append(f"insights.{name}: {note['note']}")
    lines.append("health: OK" if not problems else "health: UNHEALTHY")
    lines += [f"  - {p}" for p in problems]
    # Names and messages come from drivers, plugins and peers: never terminal control.
    return "\n".join(printable(line) for line in lines) + "\n"
