"""Hostile and odd conditions at run time (issue 14): the tick loop dying, an output whose
reader went away, a jsonl exporter on a full device; in-process, no root needed."""

from __future__ import annotations

import io
import os
import threading
import time

import pytest

from agent import config, logs, runner
from agent.control import client
from agent.counters import OPENCONFIG, Container, StateUpdate
from agent.engine import Engine
from agent.exporters.jsonl import JsonlExporter
from tests.helpers import failure_bound


def _cfg(tmp_path, extra: str = "") -> config.Config:
    return config.parse(
        "interval: 50ms\n"
        "sources: {netdev: {interfaces: [lo], exclude: []}, ethtool: {enabled: false}, "
        "system: {enabled: false}}\n"
        f"control: {{socket: {tmp_path}/swtel.sock, group: null, health_grace: 1s}}\n"
        "log: {format: json}\n" + extra
    )


@pytest.fixture
def log_lines():
    buf = io.StringIO()
    logs.configure("info", "json", stream=buf)
    yield lambda: [line for line in buf.getvalue().splitlines() if line]
    logs.configure("info", "kv")


def test_tick_loop_death_is_logged_once_unhealthy_and_exits_nonzero(tmp_path, monkeypatch, log_lines):
    passes = []
    real = Engine._flush_drops

    def dying(self):
        passes.append(1)
        if len(passes) == 5:
            raise RuntimeError("injected failure in the tick loop")
        return real(self)

    monkeypatch.setattr(Engine, "_flush_drops", dying)
    seen: dict = {}
    real_run = runner.Agent.run

    def run_and_look(self, duration=None):
        rc = real_run(self, duration)
        seen["status"] = self.status()  # what `swtel status` would have shown
        return rc

    monkeypatch.setattr(runner.Agent, "run", run_and_look)
    monkeypatch.setattr(runner, "_configure_logs", lambda cfg: None)  # keep the fixture's stream
    cfg = _cfg(tmp_path)
    # exits at the loop's death, not at the end of --duration: an hour it would wait otherwise
    with failure_bound(120, "serve after its tick loop died"):
        rc = runner.serve(cfg, duration=3600)
    assert rc == 1, "non-zero exit, so that systemd's Restart=on-failure acts"
    st = seen["status"]
    assert "injected failure" in st["tick"]["loop_error"]
    problems = client.health_problems(st)
    assert any(p.startswith("tick loop stopped: RuntimeError: injected failure") for p in problems), problems
    failed = [line for line in log_lines() if "tick loop failed" in line]
    assert len(failed) == 1, failed
    assert not os.path.exists(cfg.control.socket), "the control socket is cleaned up"
    assert not any(t.name == "swtel-tick" for t in threading.enumerate())


def _state(i: int) -> list[StateUpdate]:
    return [StateUpdate(time.time_ns(), Container(OPENCONFIG, "/interfaces/interface[name=x]/state"),
                        "oper-status", f"UP{i}")]


def test_jsonl_to_a_closed_reader_stops_cleanly(tmp_path, log_lines):
    fifo = tmp_path / "out.fifo"
    os.mkfifo(fifo)
    reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
    exp = JsonlExporter(str(fifo))
    exp.start(None)
    exp.on_state(_state(0))
    deadline = time.monotonic() + 5
    while exp.sent < 1 and time.monotonic() < deadline:
        time.sleep(0.02)
    assert exp.sent == 1 and os.read(reader, 4096).startswith(b'{"ts"')
    os.close(reader)  # the reader goes away (`swtel run | head -1`)
    for i in range(200):
        exp.on_state(_state(i))
        time.sleep(0.001)
    deadline = time.monotonic() + 5
    while exp.dropped < 200 and time.monotonic() < deadline:
        time.sleep(0.02)
    exp.stop(2.0)
    st = exp.status()
    assert exp.closed and st["sent"] == 1 and st["dropped"] == 200, st
    assert "broken pipe" in st["last_error"] and st["down_since_ns"]
    warned = [line for line in log_lines() if "closed by its reader" in line]
    assert len(warned) == 1, warned
    assert not any("jsonl write failed" in line for line in log_lines())


def test_jsonl_to_dev_full_counts_drops_and_never_raises(log_lines):
    exp = JsonlExporter("/dev/full", rate_limit_s=60)
    exp.start(None)
    for i in range(50):
        exp.on_state(_state(i))
    deadline = time.monotonic() + 5
    while exp.dropped < 50 and time.monotonic() < deadline:
        time.sleep(0.02)
    st = exp.status()
    assert (st["sent"], st["dropped"], st["state"]) == (0, 50, "failing"), st
    assert st["last_error"] == "No space left on device"
    exp.stop(1.0)  # no ENOSPC at close: nothing is buffered
    assert len([line for line in log_lines() if "jsonl write failed" in line]) == 1
    now = time.time_ns()
    status = {"now_ns": now, "uptime_s": 5, "exporters": {"jsonl": dict(st, down_since_ns=now - 2_000_000_000)}}
    assert client.health_problems(status, grace_s=1.0)[0].startswith("exporter jsonl failing for 2s")
    assert client.health_problems(status, grace_s=5.0) == []


@pytest.mark.parametrize("path", ["/proc/version", "/nonexistent/dir/out.jsonl"])
def test_jsonl_that_cannot_open_its_path_raises_a_clear_error(path):
    with pytest.raises(OSError, match=f"cannot open '{path}': "):
        JsonlExporter(path).start(None)
