"""A benchmark's agents end with it (bench/lifetime.py): killed outright (SIGKILL, no
``finally``), the benchmark's child still gets SIGTERM from the kernel."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from tests.helpers import wait_until

ROOT = Path(__file__).resolve().parents[2]

PARENT = """
import subprocess, sys, time
sys.path.insert(0, sys.argv[1])
from bench.lifetime import dies_with_parent
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"], preexec_fn=dies_with_parent)
print(child.pid, flush=True)
time.sleep(600)
"""


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ", 1)[1][0] != "Z"
    except FileNotFoundError:
        return False


def test_a_benchmark_killed_outright_takes_its_agents_with_it():
    parent = subprocess.Popen([sys.executable, "-c", PARENT, str(ROOT)], stdout=subprocess.PIPE, text=True)
    try:
        child = int(parent.stdout.readline())
        assert _alive(child)
        parent.send_signal(signal.SIGKILL)
        parent.wait(30)
        wait_until(lambda: not _alive(child), timeout=30, what="the orphaned child to end")
    finally:
        parent.kill()
        parent.wait(30)
        if "child" in locals() and _alive(child):
            os.kill(child, signal.SIGKILL)
