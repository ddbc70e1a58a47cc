"""What many tests share: waiting for a condition, asking a running agent for its status,
and writing an agent's config (sources, JSON lines to ``out.jsonl``, the control socket
``swtel.sock``, all in one work directory: tests/namespaces.py's AgentProcess reads them there).
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

ROOT = Path(__file__).resolve().parent.parent
SOCKET = "swtel.sock"  # the control socket's name in an agent's work directory
JSONL = "out.jsonl"  # the jsonl exporter's file there
OFF = "{enabled: false}"

T = TypeVar("T")


# ---------------------------------------------------------------- waiting


def wait_until(predicate: Callable[[], T], timeout: float = 10.0, what: str = "condition", *,
               interval: float = 0.02, detail: Callable[[], str] | None = None) -> T:
    """The first truthy result of ``predicate()``, polled every ``interval`` seconds; an
    AssertionError naming ``what`` (and ``detail()``, e.g. a log) after ``timeout``.
    The predicate runs once more at the deadline, so a slow poll never loses the last chance."""
    deadline = time.monotonic() + timeout
    while True:
        result = predicate()
        if result:
            return result
        if time.monotonic() >= deadline:
            extra = f"\n{detail()}" if detail is not None else ""
            raise AssertionError(f"timed out after {timeout} s waiting for {what}{extra}")
        time.sleep(interval)


class FakeClock:
    """A monotonic clock for code that takes one (``Engine(clock=...)``, ``PluginProxy(clock=...)``):
    the test sets ``t``, or lets each reading move it ``step`` s. Deadlines and schedules judged
    on it say the same on a loaded machine as on a quiet one."""

    def __init__(self, t: float = 1000.0, step: float = 0.0) -> None:
        self.t = t
        self.step = step

    def __call__(self) -> float:
        now = self.t
        self.t += self.step
        return now


@contextmanager
def failure_bound(seconds: float, what: str) -> Iterator[None]:
    """Fail (AssertionError in the main thread) if the block has not ended after ``seconds``:
    for a call that would otherwise block for good when the code is wrong. A bound on a
    failure, not a measure: make it generous."""
    def expired(_sig: int, _frame: object) -> None:
        raise AssertionError(f"{what}: still running after {seconds} s")

    old = signal.signal(signal.SIGALRM, expired)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def record_retries(sender: Any) -> list[float]:
    """The delays a ReconnectingSender's backoff (agent/exporters/sender.py) chooses, one per
    failed attempt, in order: a test waits for "it tried again" on this list, and judges the
    backoff by the delays chosen rather than by how long the retries took."""
    delays: list[float] = []
    choose = sender.backoff.next

    def recorded() -> float:
        delays.append(choose())
        return delays[-1]

    sender.backoff.next = recorded
    return delays


# ---------------------------------------------------------------- a running agent's status


def swtel_status(workdir: Path, *args: str, timeout: float = 10) -> subprocess.CompletedProcess:
    """``swtel status --socket <workdir>/swtel.sock [args]``, as an operator runs it."""
    return subprocess.run(
        [sys.executable, "-m", "agent", "status", "--socket", str(Path(workdir) / SOCKET), *args],
        cwd=ROOT, capture_output=True, text=True, timeout=timeout,
    )


def status_json(workdir: Path) -> tuple[int, dict]:
    """(exit code, the ``--json`` document or ``{}`` when there was none) of ``swtel status``:
    the exit code is the health (0 healthy, 1 not)."""
    out = swtel_status(workdir, "--json")
    return out.returncode, (json.loads(out.stdout) if out.stdout.strip() else {})


def status_doc(workdir: Path) -> dict:
    """The ``swtel status --json`` document (which must be there)."""
    return json.loads(swtel_status(workdir, "--json").stdout)


# ---------------------------------------------------------------- configs


def wait_polls(workdir: Path, n: int, source: str = "system", timeout: float = 60.0) -> None:
    """Wait until the agent in ``workdir`` has polled ``source`` ``n`` more times: a test that
    lets the agent run on before asserting what did (not) happen counts polls, where a sleep
    would guess how many a loaded machine makes."""
    def reads() -> int:
        doc = status_json(workdir)[1]
        return doc["sources"][source]["reads"] if doc else -1

    first = wait_until(lambda: (r := reads()) >= 0 and r + 1, timeout, "status") - 1
    wait_until(lambda: reads() >= first + n, timeout, f"{n} more polls of {source}")


def demo_until(workdir: Path, *args: str, seen: Callable[[str], bool],
               bound_s: float = 180.0) -> subprocess.CompletedProcess:
    """``swtel demo --no-tui ARGS`` run until ``seen(output so far)`` (the events a test needs
    reached the collector and were printed), then ended with SIGINT as a user's Ctrl-C: its
    timeline and summaries follow. The run is bounded by the events, not by a duration a loaded
    machine may not fit them into; ``bound_s`` is only the failure bound."""
    return swtel_until(workdir, "demo", "--no-tui", "--duration", "3600", "--dir", str(workdir), *args,
                       seen=seen, bound_s=bound_s)


def swtel_until(workdir: Path, *argv: str, seen: Callable[[str], bool], then: Callable[[], object] | None = None,
                bound_s: float = 180.0) -> subprocess.CompletedProcess:
    """``swtel ARGV`` (a command that runs until Ctrl-C: demo, fabric) run until ``seen(its
    output so far)``, then ``then()`` while it still runs (more to wait for or ask it), then
    SIGINT; killed if it outlives that by 120 s. Its stderr goes to ``workdir/<verb>.stderr``."""
    import os
    import signal
    import threading

    workdir.mkdir(parents=True, exist_ok=True)
    err_path = workdir / f"{argv[0]}.stderr"
    with open(err_path, "w") as err:
        proc = subprocess.Popen([sys.executable, "-m", "agent", *argv], cwd=ROOT, stdout=subprocess.PIPE,
                                stderr=err, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(iter(proc.stdout.readline, "")), daemon=True)
    reader.start()
    try:
        wait_until(lambda: seen("".join(lines)) or proc.poll() is not None, bound_s, f"swtel {argv[0]}'s output",
                   interval=0.2, detail=lambda: "".join(lines)[-3000:] + err_path.read_text()[-3000:])
        if then is not None and proc.poll() is None:
            then()
        proc.send_signal(signal.SIGINT)
        proc.wait(120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    reader.join(30)
    return subprocess.CompletedProcess(proc.args, proc.returncode, "".join(lines), err_path.read_text())


def agent_yaml(workdir: Path, sources: Mapping[str, str], *, interval: str = "50ms",
               exporters: str = "", control: str = "", extra: str = "", head: str = "") -> str:
    """An agent's config: ``sources`` (name -> its YAML flow mapping, in order), JSON lines to
    ``<workdir>/out.jsonl`` plus ``exporters`` (more lines of that section, indented), the
    control socket ``<workdir>/swtel.sock`` (group: null) plus ``control`` (``, key: value``),
    then ``extra`` (top-level sections). ``head`` goes first (e.g. ``target: x``)."""
    workdir = Path(workdir)
    lines = [head, f"interval: {interval}\n", "sources:\n"]
    lines += [f"  {name}: {body}\n" for name, body in sources.items()]
    lines += [f"exporters:\n  jsonl: {{path: {workdir / JSONL}}}\n", exporters,
              f"control: {{socket: {workdir / SOCKET}, group: null{control}}}\n", extra]
    return "".join(lines)


def asic_yaml(workdir: Path, plugin: str, asic_config: str = "", *, asic: str = "",
              netdev: str = OFF, system: str = "{interval: 100ms}", **kw: str) -> str:
    """:func:`agent_yaml` for the asic source with ``plugin`` and its config string (plus
    ``asic``: ``, key: value`` of that section); ethtool off, netdev off and the system source
    at 100 ms unless told. ``kw`` goes to :func:`agent_yaml`."""
    sources = {
        "netdev": netdev,
        "ethtool": OFF,
        "system": system,
        "asic": f"{{enabled: true, plugin: '{plugin}', config: '{asic_config}'{asic}}}",
    }
    return agent_yaml(workdir, sources, **kw)


def sim_table(sim: str = "role=spine seed=1"):
    """The asic source's CounterTable for the built-in sim plugin's ``sim`` config (the
    simulated spine's 16,812 values by default), built as the agent builds it; skips when
    the plugin is not built."""
    import pytest

    import agent.plugins  # noqa: F401 - fills the registries a config is read against
    from agent import _backend, asic, config
    from agent.sources.asic import AsicSource

    if asic.builtin_path("sim") is None:
        pytest.skip("the sim plugin is not built")
    src = AsicSource(config.parse(f"sources:\n  asic: {{enabled: true, plugin: sim, config: '{sim}'}}\n"))
    handle = _backend.reader.asic_open(asic.builtin_path("sim"), sim)
    try:
        _gen, ports, counters = _backend.reader.asic_layout(handle)
    finally:
        _backend.reader.asic_close(handle)
    src._build(ports, counters)
    return src.table
