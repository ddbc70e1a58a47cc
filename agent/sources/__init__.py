"""Counter sources: one per file, each registering itself with :func:`register`.

Like node_exporter's collectors: importing :mod:`agent.sources` loads every module
of this package, and each adds its class to ``REGISTRY`` under the name its config
section uses (``sources.<name>``). A new source is one new file. They are polled (and
their sections listed) in ``ORDER`` first, then any other in name order.
"""

from __future__ import annotations

from agent.registry import load_plugins
from agent.sources.base import REGISTRY, Source, register

#: the first sources, in this order (the kernel before the drivers, the ASIC last)
ORDER = ("netdev", "ethtool", "rdma", "system", "asic")
load_plugins(__name__, __path__, REGISTRY.values, ORDER)  # helpers say MACHINERY = True in themselves

__all__ = ["REGISTRY", "Source", "register"]
