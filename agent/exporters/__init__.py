"""Exporters: where changes go, one per file, each registering itself (``base.register``).

Importing this package imports every module of it that is an exporter (a new exporter is
one new file); each adds its class to ``REGISTRY`` and its config section
(``exporters.<name>``) to agent/registry.py's ``EXPORTERS``.
"""

import importlib
import pkgutil

from agent.exporters.base import REGISTRY, Listener, register

#: the modules of this package that are not exporters
_MACHINERY = frozenset({"base", "otlp_names", "sender", "state_gauges"})

for _module in sorted(m.name for m in pkgutil.iter_modules(__path__)):
    if _module not in _MACHINERY:
        importlib.import_module(f"{__name__}.{_module}")

__all__ = ["REGISTRY", "Listener", "register"]
