"""Counter sources: one per file, each registering itself with :func:`register`.

Like node_exporter's collectors: importing :mod:`agent.sources` loads every module
of this package, and each adds its class to ``REGISTRY`` under the name its config
section uses (``sources.<name>``). A new source is one new file. They are polled (and
their sections listed) in ``ORDER`` first, then any other in name order.
"""

from __future__ import annotations

import importlib
import pkgutil

from agent.sources.base import REGISTRY, Source, register

#: the first sources, in this order (the kernel before the drivers, the ASIC last)
ORDER = ("netdev", "ethtool", "rdma", "system", "asic")
_MACHINERY = frozenset({"base", "drivers"})  # shared by the sources, not sources

_found = {m.name for m in pkgutil.iter_modules(__path__)} - _MACHINERY
for _name in [n for n in ORDER if n in _found] + sorted(_found - set(ORDER)):
    importlib.import_module(f"agent.sources.{_name}")

__all__ = ["REGISTRY", "Source", "register"]
