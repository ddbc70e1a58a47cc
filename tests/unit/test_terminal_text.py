"""What a person reads on a terminal never carries terminal control (issue 24, item 10): port
names, targets and messages holding escape sequences are shown escaped by ``swtel status``,
``swtel top`` (live and plain) and ``swtel demo``'s view and timeline; and ``swtel top`` on a
narrow terminal drops columns, not names."""

from __future__ import annotations

import io
import re
import time

import pytest
from rich.console import Console

from agent.control import client
from agent.control.printable import printable
from agent.control.top import _rich_view, layout, plain_lines, rates
from agent.tools.demo import Timeline, _view

NS = 1_000_000_000
TITLE = "\x1b]0;pwn\x07"  # OSC 0: set the window title
CLEAR = "\x1b[2J"  # CSI 2J: clear the screen
HOSTILE = [f"{TITLE}swp1", f"{CLEAR}swp2", "swp3\x9b2J", "swp4\u202egnp", "swp5\r\nforged", "swp6\x08\x7f"]
# Any C0 control but the line break, DEL, C1, and the bidi overrides.
RAW = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def _clean(text: str) -> None:
    assert "\x1b" not in text and "\x07" not in text, repr(text)
    assert not RAW.search(text), repr(RAW.search(text))


def test_printable_escapes_controls_and_keeps_the_rest():
    assert printable(TITLE + "swp1") == "\\x1b]0;pwn\\x07swp1"
    assert printable(CLEAR) == "\\x1b[2J"
    assert printable("a\u202eb\u2028c\x9bd") == "a\\u202eb\\u2028c\\x9bd"
    assert printable("a\r\nb\tc\x00") == "a\\r\\nb\\tc\\x00"
    assert printable("swp11s1 — ünïcode ok") == "swp11s1 — ünïcode ok"
    assert printable(42) == "42"


def _event(port: str, eid: int) -> dict:
    return {"id": eid, "start_ns": time.time_ns() - 2 * NS, "type": "symbol-ber", "severity": "critical",
            "interfaces": [port], "message": f"{port}: symbol BER 3.1e-10; check the cable", "state": "open"}


def test_status_render_escapes_every_name_and_message():
    now = time.time_ns()
    doc = {
        "now_ns": now, "uptime_s": 10, "version": "0.1.0", "pid": 1, "backend": "C",
        "backend_fallback_reason": CLEAR,
        "config": {"path": f"/etc/{TITLE}.yaml", "last_reload": {"ok": False, "ts_ns": now, "error": CLEAR}},
        "sources": {f"asic{TITLE}": {"interval_s": 0.1, "last_ok_ns": now, "ports": 3}},
        "exporters": {f"dialout:{CLEAR}": {"kind": "dialout", "state": TITLE, "last_error": f"x{CLEAR}y"}},
        "events": {"open": [_event(p, i) for i, p in enumerate(HOSTILE)],
                   "recent": [dict(_event(HOSTILE[0], 99), cleared_ns=now)]},
    }
    text = client.render(doc, [f"source {TITLE}: no successful poll"])
    _clean(text)
    assert "\\x1b]0;pwn\\x07swp1: symbol BER" in text and "\\x1b[2Jswp2" in text
    assert "swp5\\r\\nforged" in text  # a line break inside a name does not forge a line


def _rows(names: list[str]) -> list[dict]:
    old = {"now_ns": 0, "ports": {n: {"ts_ns": 0, "speed_bps": 100e9, "rx_octets": 0, "tx_octets": 0,
                                       "errors": 0, "symbol_errors": 0} for n in names}}
    new = {"now_ns": NS, "ports": {n: {"ts_ns": NS, "speed_bps": 100e9, "rx_octets": 5e9, "tx_octets": 4e9,
                                       "errors": 1, "symbol_errors": 7} for n in names}}
    return rates(old, new)


def _draw(renderable, width: int, height: int) -> str:
    buf = io.StringIO()
    Console(file=buf, width=width, height=height, color_system=None, force_terminal=False,
            legacy_windows=False).print(renderable)
    return buf.getvalue()


@pytest.mark.parametrize("width,height", [(80, 24), (40, 10)])
def test_top_live_view_escapes_names_and_messages(width, height):
    rows = _rows(HOSTILE)
    events = {"open": [_event(HOSTILE[0], 1), _event(HOSTILE[1], 2)]}
    text = _draw(_rich_view(f"sw{TITLE}", rows, events, height, width), width, height)
    _clean(text)
    assert "\\x1b]0;pwn\\x07swp1" in text and "sw\\x1b]0;pwn" in text


def test_top_plain_lines_escape_names_and_messages():
    lines = plain_lines(f"sw{CLEAR}", _rows(HOSTILE), {"open": [_event(HOSTILE[1], 1)]}, 100)
    for line in lines:
        _clean(line)
    assert any(line.startswith("\\x1b]0;pwn\\x07swp1") for line in lines)
    assert sum(1 for line in lines if line.startswith("EVENT ")) == 1


def test_top_at_40_by_10_shows_the_port_names_by_dropping_columns():
    names = ["swp1", "swp11s1", "swp64s3", "eth0", "swp52"]
    text = _draw(_rich_view("spine-1", _rows(names), {"open": [_event("swp11s1", 1)]}, 10, 40), 40, 10)
    lines = text.splitlines()
    assert len(lines) <= 10 and all(len(line) <= 40 for line in lines), text
    body = [line for line in lines if line.split() and line.split()[0] in names]
    assert sorted(line.split()[0] for line in body) == sorted(names), text  # every name whole, no "…"
    assert "util" in lines[1] and "rx Gb/s" in lines[1]  # the most useful columns stay
    # every row keeps its numbers: utilization, rx and tx
    assert all(len(line.split()) >= 4 for line in body), text
    # at 80 columns everything is there, names included
    wide = _draw(_rich_view("spine-1", _rows(names), {}, 24, 80), 80, 24)
    assert all(h in wide for h in ("rx Gb/s", "tx Gb/s", "err/s", "sym/s", "drop/s", "pfc%"))
    assert all(n in wide for n in names)


def test_top_layout_drops_columns_before_names():
    width_name, cols = layout(["swp11s1"], 40)
    assert width_name == 7 and sum(1 + c[1] for c in cols) + width_name <= 40
    width_name, cols = layout(["swp1", "a-port-name-of-24-charss"], 40)
    assert width_name == 24 and cols  # names of up to 24 characters shown whole, beside what still fits
    width_name, cols = layout(["a-very-long-port-name-of-30-ch"], 80)
    assert width_name == 30 and len(cols) == 7  # room to spare: only the bar gives way
    width_name, cols = layout(["x" * 60], 40)
    assert width_name == 27 and [c[0] for c in cols] == ["", "rx Gb/s"]  # a 60-character name is cut
    width_name, cols = layout(["swp1", "x" * 60], 20)
    assert width_name == 20 and cols == []  # narrower than any column: names only


def test_demo_timeline_and_view_escape_targets_names_and_messages():
    origin = time.time_ns()
    tl = Timeline(origin)
    events = {(f"spine{TITLE}", 1): {"type": f"symbol-ber{CLEAR}", "severity": "critical",
                                     "interfaces": HOSTILE[0], "start-ns": origin + NS,
                                     "message": f"{HOSTILE[1]}: BER", "status": "open", "peak": 1e-9,
                                     "peak-unit": "ber"},
              ("leaf-3", 2): {"type": "imbalance", "severity": "warning", "interfaces": HOSTILE[4],
                              "start-ns": origin + 2 * NS, "end-ns": origin + 3 * NS, "message": "x",
                              "status": "cleared", "peak": 2, "peak-unit": "max/mean"}}
    lines = tl.update(events)
    assert len(lines) == 3
    for line in lines + tl.table_lines():
        _clean(line)

    class Fab:
        scenario = "field"

    ports = {f"spine{TITLE}": [dict(r, port=p) for r, p in zip(_rows(HOSTILE), HOSTILE, strict=True)]}
    text = _draw(_view(Fab(), 5.0, 30.0, ports, tl, 30), 100, 30)
    _clean(text)
    assert "\\x1b]0;pwn\\x07swp1" in text


def test_validate_prints_problems_escaped(tmp_path):
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    f = tmp_path / "hostile.yaml"
    f.write_text('insights:\n  imbalance:\n    groups:\n      "\\e]0;pwn\\a": [swp1]\n'
                 "sources: {asic: {enabled: true, config: \"role=spine \\e[2J=1\"}}\n")
    r = subprocess.run([sys.executable, "-m", "agent", "validate", str(f)], capture_output=True, text=True,
                       cwd=root, env={**os.environ, "PYTHONPATH": str(root)}, timeout=60)
    assert r.returncode == 1
    _clean(r.stderr)
    assert "insights.imbalance.groups.\\x1b]0;pwn\\x07: needs at least 2 ports" in r.stderr
    assert "sources.asic.config: sim: unknown key '\\x1b[2J" in r.stderr
