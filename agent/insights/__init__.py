"""Insights at the edge: detectors over the counter deltas, raising events that go to
gNMI (``swtel:/insights/events/event[id=N]/state``), the log and ``swtel status``.

One detector per file, each registering itself (``base.register``) under its config
section of ``insights``; docs/insights.md documents every rule, default and path.
Importing this package imports every module of it (a new detector is one new file),
then the pipeline, which finds them all in ``REGISTRY``.
"""

from agent.insights.base import REGISTRY, Detector, Event, register
from agent.registry import load_plugins

load_plugins(__name__, __path__, REGISTRY.values)  # helpers say MACHINERY = True in themselves

from agent.insights.pipeline import InsightsPipeline  # noqa: E402  (after the detectors registered)

__all__ = ["REGISTRY", "Detector", "Event", "InsightsPipeline", "register"]
