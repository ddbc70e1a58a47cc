"""glibc's malloc, tuned for the daemon: arenas capped, free pages handed back.

glibc gives each thread that allocates its own arena (up to eight per core), and an
arena keeps the pages of what was freed in it for reuse by that arena only. The agent has
a dozen threads (gRPC's, the exporters', the tick thread's), so each kept its own few
hundred KiB to MiBs: on the simulated spine with dial-out, two arenas instead of glibc's
default cut the agent's PSS by ~2 MiB with no cost a tick (docs/PERFORMANCE.md). The agent
holds the GIL for almost all of its allocations, so a shared arena is rarely contended.

An operator's ``MALLOC_ARENA_MAX`` (e.g. in the unit's environment) wins: glibc read it at
start, and this leaves it alone. Not glibc (musl has no arenas): nothing to do.

glibc also keeps what the start freed: the tables' construction and the first snapshot are
a burst of allocations the steady state never reuses, and glibc returns heap pages to the
kernel only from the heap's top, past a threshold it raises after each large free. With
Debian's C++ protobuf and grpcio 1.51 the installed agent's heap kept ~7 MiB that way on the
simulated spine with dial-out; ``malloc_trim(0)`` after the start, and every 10 s after
(a collector's reconnect builds a snapshot again; the ticks' freed buffers gather ~2 MiB
of free heap pages in 15 s), hands them back for ~0.5 ms each (docs/PERFORMANCE.md). A
fixed ``M_MMAP_THRESHOLD`` did as well for memory but cost about a point of a core: each
tick's messages were then mapped and faulted in anew.
"""

from __future__ import annotations

import os
from typing import Any

#: mallopt's parameter number for the arena cap (glibc's malloc.h)
_M_ARENA_MAX = -8
#: the agent's cap: one for the threads that hold the GIL, one for gRPC's C threads
ARENAS = 2


def _glibc(name: str, *argtypes: object) -> Any:
    """glibc's function ``name`` with its argument types, or None (not glibc: musl has none)."""
    try:
        import ctypes

        fn = getattr(ctypes.CDLL(None), name)
    except (OSError, AttributeError):
        return None
    fn.argtypes = argtypes
    return fn


def cap_arenas(n: int = ARENAS) -> bool:
    """Cap glibc's malloc arenas at ``n`` for threads started from now on; True if applied.
    Call before the daemon starts its threads."""
    if os.environ.get("MALLOC_ARENA_MAX"):
        return False
    import ctypes

    mallopt = _glibc("mallopt", ctypes.c_int, ctypes.c_int)
    return mallopt is not None and mallopt(_M_ARENA_MAX, n) == 1


def release_free_pages() -> bool:
    """Hand the free pages glibc's malloc holds back to the kernel (``malloc_trim(0)``: the
    heap's top and whole free pages inside every arena); True if any went. Not glibc: False."""
    import ctypes

    malloc_trim = _glibc("malloc_trim", ctypes.c_size_t)
    return malloc_trim is not None and malloc_trim(0) == 1
