"""Insights at the edge: detectors over the counter deltas, raising events that go to
gNMI (``swtel:/insights/events/event[id=N]/state``), the log and ``swtel status``.

One detector per file, each registering itself (``base.register``) under its config
section of ``insights``; docs/insights.md documents every rule, default and path.
"""

from agent.insights.base import REGISTRY, Detector, Event, register
from agent.insights.runner import InsightsRunner

__all__ = ["REGISTRY", "Detector", "Event", "InsightsRunner", "register"]
