"""agent/malloc.py: the daemon caps glibc's arenas unless the operator set the cap."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PROBE = "from agent.malloc import cap_arenas; print(cap_arenas())"


def _probe(**env: str) -> str:
    base = {k: v for k, v in os.environ.items() if k != "MALLOC_ARENA_MAX"}
    out = subprocess.run([sys.executable, "-c", PROBE], cwd=ROOT, env={**base, "PYTHONPATH": str(ROOT), **env},
                         capture_output=True, text=True, check=True)
    return out.stdout.strip()


def test_glibc_takes_the_cap():
    # this machine's libc is glibc (Debian, as Cumulus): mallopt answers 1
    assert _probe() == "True"


def test_an_operators_malloc_arena_max_wins():
    assert _probe(MALLOC_ARENA_MAX="4") == "False"


def test_swtel_run_caps_before_it_imports_the_runner():
    # the cap applies to arenas made after it: it must come before the runner's imports
    # (gRPC's) and threads
    text = (ROOT / "agent" / "cli.py").read_text()
    run = text[text.index('if args.verb == "run":'):text.index('if args.verb == "validate":')]
    assert run.index("cap_arenas()") < run.index("from agent.runner import")
