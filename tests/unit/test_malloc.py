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


RELEASE = """
import ctypes
from agent.malloc import release_free_pages

libc = ctypes.CDLL(None)
libc.malloc.restype = ctypes.c_void_p
libc.free.argtypes = (ctypes.c_void_p,)

def resident_kib():
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))

# 64 MiB in 1 KiB blocks, written so they are resident; all freed but the last, which pins
# the heap's top: free() alone gives none of it back (glibc trims only from the top)
blocks = [libc.malloc(1024) for _ in range(65536)]
for b in blocks:
    ctypes.memset(b, 1, 1024)
for b in blocks[:-1]:
    libc.free(b)
held = resident_kib()
released = release_free_pages()
print(released, held - resident_kib())
"""


def test_free_pages_inside_the_heap_go_back_to_the_kernel():
    out = subprocess.run([sys.executable, "-c", RELEASE], cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)},
                         capture_output=True, text=True, check=True).stdout.split()
    released, freed_kib = out[0], int(out[1])
    assert released == "True"
    assert freed_kib > 48 * 1024, out  # most of the 64 MiB freed in the middle of the heap


def test_the_agent_hands_back_what_its_start_freed_when_it_freezes_and_then_each_minute():
    text = (ROOT / "agent" / "runner.py").read_text()
    freeze = text[text.index("def freeze_long_lived"):text.index("def run_main")]
    assert freeze.index("gc.collect()") < freeze.index("release_free_pages()")
    run = text[text.index("    def run(self"):text.index("    def request_stop")]
    assert "release_free_pages()" in run and "TRIM_EVERY_S" in run
