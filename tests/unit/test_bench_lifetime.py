"""A benchmark's agents end with it (bench/lifetime.py): killed outright (SIGKILL, no
``finally``), the benchmark's child still gets SIGTERM from the kernel; spawned through
setpriv, with no Python between fork and exec."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from bench import lifetime
from bench.lifetime import with_parent_death
from tests.helpers import wait_until

ROOT = Path(__file__).resolve().parents[2]

PARENT = """
import subprocess, sys, time
sys.path.insert(0, sys.argv[1])
from bench.lifetime import with_parent_death
child = subprocess.Popen(with_parent_death([sys.executable, "-c", "import time; time.sleep(600)"]))
print(child.pid, flush=True)
time.sleep(600)
"""


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ", 1)[1][0] != "Z"
    except FileNotFoundError:
        return False


def _cmdline(pid: int) -> list[str]:
    with open(f"/proc/{pid}/cmdline", "rb") as f:
        return f.read().decode().split("\0")[:-1]


def test_a_benchmark_killed_outright_takes_its_agents_with_it():
    parent = subprocess.Popen([sys.executable, "-c", PARENT, str(ROOT)], stdout=subprocess.PIPE, text=True)
    try:
        child = int(parent.stdout.readline())
        assert _alive(child)
        # setpriv execs in place: the pid a benchmark signals is the program's own. Wait for
        # the exec itself (argv[0] the program, not setpriv, whose own argv holds the same
        # words): setpriv asks for the signal just before it, and a parent killed earlier
        # leaves an orphan that nothing signals.
        wait_until(lambda: _cmdline(child)[:1] == [sys.executable], timeout=30,
                   what="setpriv to exec the child")
        parent.send_signal(signal.SIGKILL)
        parent.wait(30)
        wait_until(lambda: not _alive(child), timeout=30, what="the orphaned child to end")
    finally:
        parent.kill()
        parent.wait(30)
        if "child" in locals() and _alive(child):
            os.kill(child, signal.SIGKILL)


def test_the_command_asks_for_sigterm_on_the_parents_death_before_the_program():
    argv = with_parent_death(["/usr/bin/python3", "-m", "agent", "run", "-c", Path("/tmp/x.yaml")],
                             setpriv="/usr/bin/setpriv")
    assert argv == ["/usr/bin/setpriv", "--pdeathsig", "TERM", "--",
                    "/usr/bin/python3", "-m", "agent", "run", "-c", "/tmp/x.yaml"]


def test_a_user_drops_to_that_user_and_its_groups():
    argv = with_parent_death(["/usr/bin/swtel", "run"], user="swtel", setpriv="/usr/bin/setpriv")
    options = argv[1:argv.index("--")]
    assert {"--reuid=swtel", "--regid=swtel", "--init-groups"} <= set(options)
    assert options[options.index("--pdeathsig") + 1] == "TERM"
    assert argv[argv.index("--") + 1:] == ["/usr/bin/swtel", "run"]


def test_without_setpriv_it_refuses_rather_than_lose_the_property(monkeypatch):
    monkeypatch.setattr(lifetime.shutil, "which", lambda name: None)
    with pytest.raises(RuntimeError, match="setpriv"):
        with_parent_death(["/bin/true"])
