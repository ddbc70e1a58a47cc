"""Counter sources: one per file, each registering itself with :func:`register`.

Like node_exporter's collectors: importing :mod:`agent.sources` loads every
module listed in ``_MODULES``, and each adds its class to ``REGISTRY`` under the
name its config section uses (``sources.<name>``).
"""

from __future__ import annotations

import importlib

from agent.sources.base import REGISTRY, Source, register

_MODULES = ("netdev", "ethtool", "rdma", "system", "asic")

for _name in _MODULES:
    importlib.import_module(f"agent.sources.{_name}")

__all__ = ["REGISTRY", "Source", "register"]
