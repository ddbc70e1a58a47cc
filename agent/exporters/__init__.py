"""Exporters: where changes go, one per file, each registering itself (``base.register``).

Importing this package imports every module of it (a new exporter is
one new file); each adds its class to ``REGISTRY`` and its config section
(``exporters.<name>``) to agent/registry.py's ``EXPORTERS``.
"""

from agent.exporters.base import REGISTRY, Listener, register
from agent.registry import load_plugins

load_plugins(__name__, __path__, REGISTRY.values)  # helpers say MACHINERY = True in themselves

__all__ = ["REGISTRY", "Listener", "register"]
