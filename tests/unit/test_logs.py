"""Structured logs: one event per line, kv or json, levels, rate limiting; also on Debian's structlog."""

from __future__ import annotations

import io
import json
import os
import subprocess
import threading
from pathlib import Path

import pytest

from agent import logs

REPO = Path(__file__).resolve().parents[2]
SYSTEM_PYTHON = "/usr/bin/python3"


@pytest.fixture
def out():
    buf = io.StringIO()
    yield buf
    logs.configure("info", "kv")  # leave the default for other tests


def lines(buf: io.StringIO) -> list[str]:
    return buf.getvalue().splitlines()


def test_kv_one_event_per_line_even_with_tracebacks(out):
    log = logs.get("dialout")  # taken before configure(): must follow it
    logs.configure("info", "kv", stream=out)
    log.info("connected", dest="collector1", address="192.0.2.10:57400", ok=True, note='say "hi"')
    try:
        raise ValueError("line one\nline two")
    except ValueError:
        log.error("send failed", dest="collector1", exc_info=True)
    first, second = lines(out)
    assert first.split(" ")[1:4] == ["level=info", "component=dialout", "event=connected"]
    assert 'dest=collector1 address=192.0.2.10:57400 ok=true note="say \\"hi\\""' in first
    assert second.startswith("timestamp=") and "level=error" in second and "event=\"send failed\"" in second
    assert "ValueError: line one\\nline two" in second


def test_kv_lists_are_comma_joined_not_python_reprs(out):
    logs.configure("info", "kv", stream=out)
    logs.get("agent").info("ready", sources=["ethtool", "netdev"], ports={"swp2", "swp1"}, none=[],
                           spaced=["a b", "c"])
    (line,) = lines(out)
    assert 'sources=ethtool,netdev ports=swp1,swp2 none="" spaced="a b,c"' in line
    assert "[" not in line and "'" not in line


def test_json_format_and_levels(out):
    logs.configure("warning", "json", stream=out)
    log = logs.get("engine")
    log.debug("hidden")
    log.info("hidden too")
    log.warning("overrun", source="netdev", took_ms=12.5)
    log.error("bad", err=None)
    (warning, error) = [json.loads(line) for line in lines(out)]
    assert warning["event"] == "overrun" and warning["level"] == "warning"
    assert warning["component"] == "engine" and warning["took_ms"] == 12.5 and "timestamp" in warning
    assert error["level"] == "error" and error["err"] is None


def test_bad_level_or_format():
    with pytest.raises(ValueError, match="log level"):
        logs.configure("loud", "kv")
    with pytest.raises(ValueError, match="log format"):
        logs.configure("info", "xml")


class FakeClock:
    def __init__(self):
        self.t = 1000.0

    def __call__(self):
        return self.t


def test_rate_limiter_counts_what_it_suppressed():
    clock = FakeClock()
    rl = logs.RateLimiter(10.0, clock=clock)
    assert rl.check("dialout:c1") == 0
    assert [rl.allow("dialout:c1") for _ in range(5)] == [False] * 5
    assert rl.suppressed("dialout:c1") == 5
    assert rl.check("dialout:c2") == 0, "keys are independent"
    clock.t += 10.0
    assert rl.check("dialout:c1") == 5, "the next allowed message reports the suppressed count"
    assert rl.check("dialout:c1") is None
    rl.forget("dialout:c1")  # the destination came back: its next failure logs at once
    assert rl.check("dialout:c1") == 0


def test_rate_limiter_per_call_period_for_backoff_steps():
    clock = FakeClock()
    rl = logs.RateLimiter(60.0, clock=clock)
    logged = []
    assert rl.allow("c1")  # first failure
    for waited in (1, 2, 4, 8):  # each retry after its backoff delay fails again: log each step
        clock.t += waited
        if rl.allow("c1", period_s=waited * 0.9):
            logged.append(waited)
    assert logged == [1, 2, 4, 8]
    for _ in range(100):  # a per-tick error (100 ms ticks) is logged once per 60 s period
        rl.allow("tick-error")
        clock.t += 0.1
    assert rl.suppressed("tick-error") == 99


def test_rate_limited_log_adds_suppressed_field(out):
    logs.configure("info", "json", stream=out)
    clock = FakeClock()
    rl = logs.RateLimiter(5.0, clock=clock)
    log = logs.get("dialout")
    for _ in range(4):
        rl.log(log, "error", "c1-refused", "send failed", dest="c1")
    clock.t += 5
    rl.log(log, "error", "c1-refused", "send failed", dest="c1")
    events = [json.loads(line) for line in lines(out)]
    assert len(events) == 2
    assert "suppressed" not in events[0] and events[1]["suppressed"] == 3


def test_rate_limiter_is_thread_safe_and_bounded():
    rl = logs.RateLimiter(60.0, max_keys=100)
    allowed = []

    def worker(i):
        allowed.append(sum(rl.allow(k % 10) for k in range(1000)))

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sum(allowed) == 10, "exactly one message per key got through"
    for k in range(1000):
        rl.allow(("k", k))
    assert len(rl._seen) == 100


@pytest.mark.skipif(not os.path.exists(SYSTEM_PYTHON), reason="no Debian python3")
def test_same_output_on_debian_structlog():
    """Debian 12 ships structlog 22.3; the kv line must be a single line there too."""
    script = (
        "import sys; from agent import logs\n"
        "logs.configure('info', 'kv'); log = logs.get('t')\n"
        "try:\n    1/0\nexcept ZeroDivisionError:\n    log.error('boom', exc_info=True, a='x y')\n"
        "logs.configure('info', 'json'); log.info('hi', n=1)\n"
    )
    probe = subprocess.run([SYSTEM_PYTHON, "-c", "import structlog"], capture_output=True)
    if probe.returncode:
        pytest.skip("Debian python3 has no structlog")
    r = subprocess.run([SYSTEM_PYTHON, "-c", script], capture_output=True, text=True, cwd=REPO,
                       env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO)}, timeout=60)
    assert r.returncode == 0, r.stderr
    kv, js = r.stdout.splitlines()
    assert "level=error component=t event=boom" in kv and 'a="x y"' in kv and "ZeroDivisionError" in kv
    assert json.loads(js)["n"] == 1


def _fresh_interpreter(script: str) -> str:
    """What ``script`` prints in a new interpreter (this one imported asyncio long ago)."""
    import sys

    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=REPO,
                       env={**os.environ, "PYTHONPATH": str(REPO)}, timeout=60)
    assert r.returncode == 0, r.stderr
    return r.stdout


def test_structlog_is_imported_without_asyncio_which_loads_on_first_use():
    """structlog imports asyncio (and with it ssl and OpenSSL, ~6 MiB) for async loggers
    swtel never uses: agent.logs imports it with a stand-in that loads the real asyncio
    when structlog first asks it for something; any other ``import asyncio`` is the real one."""
    script = (
        "import sys, types\n"
        "from agent import logs\n"
        "logs.configure('info', 'kv'); logs.get('t').info('hi')\n"
        "print('asyncio' in sys.modules, 'ssl' in sys.modules)\n"
        "import structlog.stdlib as stdlib\n"
        "stand_in = stdlib.asyncio\n"
        "assert type(stand_in) is not types.ModuleType and 'asyncio' not in sys.modules\n"
        "loop_of = stand_in.get_running_loop\n"  # the stand-in's first use imports asyncio
        "import asyncio\n"
        "print(type(asyncio) is types.ModuleType, loop_of is asyncio.get_running_loop)\n"
        "async def main():\n"
        "    return stand_in.get_running_loop() is asyncio.get_running_loop()\n"
        "print(asyncio.run(main()))\n"
    )
    out = _fresh_interpreter(script)
    logged, *printed = out.splitlines()
    assert "event=hi" in logged
    assert " ".join(printed).split() == ["False", "False", "True", "True", "True"], out


def test_the_asyncio_stand_in_asked_while_it_is_still_in_sys_modules_loads_the_real_one():
    """Were structlog to use asyncio while it is being imported, the stand-in (still in
    sys.modules then) steps aside for the real module rather than finding itself again."""
    script = (
        "import sys\n"
        "from agent import logs\n"
        "stand_in = sys.modules['asyncio'] = logs._AsyncioOnFirstUse('asyncio')\n"
        "sleep = stand_in.sleep\n"
        "import asyncio\n"
        "print(asyncio is not stand_in, sleep is asyncio.sleep, sys.modules['asyncio'] is asyncio)\n"
    )
    out = _fresh_interpreter(script)
    assert out.split() == ["True", "True", "True"], out
