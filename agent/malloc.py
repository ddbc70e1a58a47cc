"""glibc's malloc arenas, capped for the daemon.

glibc gives each thread that allocates its own arena (up to eight per core), and an
arena keeps the pages of what was freed in it for reuse by that arena only. The agent has
a dozen threads (gRPC's, the exporters', the tick thread's), so each kept its own few
hundred KiB to MiBs: on the simulated spine with dial-out, two arenas instead of glibc's
default cut the agent's PSS by ~2 MiB with no cost a tick (docs/PERFORMANCE.md). The agent
holds the GIL for almost all of its allocations, so a shared arena is rarely contended.

An operator's ``MALLOC_ARENA_MAX`` (e.g. in the unit's environment) wins: glibc read it at
start, and this leaves it alone. Not glibc (musl has no arenas): nothing to do.
"""

from __future__ import annotations

import os

#: mallopt's parameter number for the arena cap (glibc's malloc.h)
_M_ARENA_MAX = -8
#: the agent's cap: one for the threads that hold the GIL, one for gRPC's C threads
ARENAS = 2


def cap_arenas(n: int = ARENAS) -> bool:
    """Cap glibc's malloc arenas at ``n`` for threads started from now on; True if applied.
    Call before the daemon starts its threads."""
    if os.environ.get("MALLOC_ARENA_MAX"):
        return False
    try:
        import ctypes

        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):  # not glibc
        return False
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    return mallopt(_M_ARENA_MAX, n) == 1
