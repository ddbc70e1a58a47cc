"""Insights at the edge: detectors over the counter deltas, raising events that go to
gNMI (``swtel:/insights/events/event[id=N]/state``), the log and ``swtel status``.

One detector per file, each registering itself (``base.register``) under its config
section of ``insights``; docs/insights.md documents every rule, default and path.
Importing this package imports every module of it (a new detector is one new file),
then the runner, which finds them all in ``REGISTRY``.
"""

import importlib
import pkgutil

from agent.insights.base import REGISTRY, Detector, Event, register

#: the modules of this package that are not detectors
_MACHINERY = frozenset({"base", "classify", "election", "events", "feeds", "paths", "runner"})

for _module in sorted(m.name for m in pkgutil.iter_modules(__path__)):
    if _module not in _MACHINERY:
        importlib.import_module(f"{__name__}.{_module}")

from agent.insights.runner import InsightsRunner  # noqa: E402  (after the detectors registered)

__all__ = ["REGISTRY", "Detector", "Event", "InsightsRunner", "register"]
