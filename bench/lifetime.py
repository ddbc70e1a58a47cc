"""Agents a benchmark starts end with it, however it ends.

``.ci/run``'s ``timeout`` signals the benchmark's whole process group, but a benchmark killed
alone (``kill PID``, an engineer's tool stopping a job) left its agents running: three of
bench_server_load's ran 90 minutes on after it. ``with_parent_death(argv)`` is the command
to give ``subprocess.Popen`` instead of ``argv``: util-linux ``setpriv --pdeathsig TERM``
asks the kernel to send the child SIGTERM when the benchmark's spawning thread ends (Linux
``PR_SET_PDEATHSIG``; it survives the exec into the agent), then execs ``argv`` in place
(the Popen's pid is the agent's), so the agent stops as it does under systemd.

No Python runs between fork and exec (no ``preexec_fn``), so subprocess spawns with vfork:
a benchmark runs gRPC receiver threads, and a real fork() beside them ran gRPC's fork
handlers in the child ("skipping fork() handlers", an agent that exited at start; issue
34's family). ``user=`` also drops the child to that user (setpriv ``--reuid --regid
--init-groups``, as the swtel@.service unit does); setpriv sets the death signal after the
uid change, which would otherwise clear it.

``exit_on_sigterm`` turns the benchmark's own SIGTERM into SystemExit, so its ``finally``
blocks stop agents and remove their directories."""

from __future__ import annotations

import shutil
import signal
import sys
from collections.abc import Sequence
from os import PathLike

SETPRIV_MISSING = ("bench: setpriv (util-linux >= 2.33, for --pdeathsig) is not on PATH: without it the "
                   "agents a benchmark starts would outlive a benchmark killed alone; install util-linux")


def with_parent_death(argv: Sequence[str | PathLike[str]], *, user: str | None = None,
                      setpriv: str | None = None) -> list[str]:
    """``argv`` run through setpriv: SIGTERM when its parent ends, as ``user`` if given.

    ``setpriv`` is the binary (default: found on PATH); raises RuntimeError if there is none,
    rather than start a child that could outlive the benchmark."""
    binary = setpriv or shutil.which("setpriv")
    if binary is None:
        raise RuntimeError(SETPRIV_MISSING)
    drop = [f"--reuid={user}", f"--regid={user}", "--init-groups"] if user is not None else []
    return [binary, *drop, "--pdeathsig", "TERM", "--", *(str(a) for a in argv)]


def exit_on_sigterm() -> None:
    signal.signal(signal.SIGTERM, lambda signum, _frame: sys.exit(128 + signum))
