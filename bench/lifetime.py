"""Agents a benchmark starts end with it, however it ends.

``.ci/run``'s ``timeout`` signals the benchmark's whole process group, but a benchmark killed
alone (``kill PID``, an engineer's tool stopping a job) left its agents running: three of
bench_server_load's ran 90 minutes on after it. ``dies_with_parent`` is a ``preexec_fn`` for
``subprocess.Popen``: the kernel sends the child SIGTERM when the benchmark exits (Linux
``PR_SET_PDEATHSIG``; it survives the exec into the agent), so the agent stops as it does
under systemd. ``exit_on_sigterm`` turns the benchmark's own SIGTERM into SystemExit, so its
``finally`` blocks stop agents and remove their directories."""

from __future__ import annotations

import ctypes
import signal
import sys

_PR_SET_PDEATHSIG = 1
_libc = ctypes.CDLL(None, use_errno=True)  # loaded before any fork: the child only calls it


def dies_with_parent() -> None:
    _libc.prctl(_PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0)


def exit_on_sigterm() -> None:
    signal.signal(signal.SIGTERM, lambda signum, _frame: sys.exit(128 + signum))
