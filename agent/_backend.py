"""Pick the hot-path backend once, at import: the C extension or the pure-Python fallback.

``SWTEL_PUREPYTHON=1`` forces the fallback. Without it a missing or mismatched
extension also selects the fallback, but never silently: ``FALLBACK_REASON``
says why, the runner logs it as a warning and ``swtel status`` shows it.

``reader`` exposes the read and change functions (netdev_read, ethtool_*,
sysfs_read, diff); ``encoder`` the gNMI encode functions. Both backends
define the same names with the same signatures.
"""

from __future__ import annotations

import os
from types import ModuleType

from agent import __version__

FORCED = os.environ.get("SWTEL_PUREPYTHON", "").strip().lower() not in ("", "0", "false", "no")
FALLBACK_REASON: str | None = None

reader: ModuleType
encoder: ModuleType


def _load_c() -> ModuleType:
    from agent import _swtel

    if _swtel.version != __version__:
        raise ImportError(
            f"C extension version {_swtel.version} does not match package {__version__}; rebuild it"
        )
    return _swtel


if FORCED:
    _c = None
    FALLBACK_REASON = "SWTEL_PUREPYTHON is set"
else:
    try:
        _c = _load_c()
    except ImportError as exc:
        _c = None
        FALLBACK_REASON = f"C extension unavailable: {exc}"

if _c is not None:
    NAME = "C"
    reader = encoder = _c
else:
    from agent import _fallback

    NAME = "python"
    reader = encoder = _fallback
