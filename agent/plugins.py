"""Every plugin, loaded: importing this fills the three registries (agent/registry.py).

The sources, exporters and detectors each register their config section when their
module is imported, and each package imports all of its modules (a new plugin is one
new file). The config loader sits below them and cannot import them itself, so every
entry point that reads a config (the runner, ``swtel validate``, ``swtel status``, the
tools, the tests' conftest) imports this module first; ``config.parse`` refuses to run
with empty registries.
"""

import agent.exporters  # noqa: F401
import agent.insights  # noqa: F401
import agent.sources  # noqa: F401
from agent.registry import DETECTORS, EXPORTERS, SOURCES

__all__ = ["DETECTORS", "EXPORTERS", "SOURCES"]
