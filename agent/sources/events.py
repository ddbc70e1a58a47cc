"""events source: how many events the insights pipeline holds open, by severity, as gauges.

The events themselves are states (``swtel:/insights/events/event[id=N]/state``): they reach
gNMI collectors, but not the metric exporters (OTLP, remote write), which carry counters and
gauges. This count is a gauge like the agent's own RSS (sources/system.py), so a fleet's
dashboard can show open events by device over every exporter alike
(``swtel_insights_open_events{severity=...}``, agent/exporters/otlp_names.py).

The engine hands the source its insights pipeline (``bind_insights``), which answers
``open_event_counts``. Without one (``insights.enabled: false``) nothing is
read: no count is not a count of 0.
"""

from __future__ import annotations

from array import array
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from agent.config import Duration, setting
from agent.counters import GAUGE, SWTEL_ORIGIN, Container, CounterSpec, CounterTable
from agent.insights.base import SEVERITY_RANK
from agent.pathgrammar import escape_key
from agent.sources.base import NO_DATA, Source, SourceConfig, doc_row, register

OPEN_EVENTS = "open-events"
#: the severities in rank order: every one has its gauge, 0 included, so a clean device shows 0
SEVERITIES = sorted(SEVERITY_RANK, key=SEVERITY_RANK.__getitem__)


def severity_container(severity: str) -> Container:
    """``swtel:/insights/severities/severity[name=S]/state``."""
    return Container(SWTEL_ORIGIN, f"/insights/severities/severity[name={escape_key(severity)}]/state")


@dataclass
class EventsConfig(SourceConfig):
    """``sources.events``."""

    interval: Duration | None = setting(Duration(1.0), type="duration (10ms–1h) or null")


@register
class EventsSource(Source):
    name = "events"
    config_class = EventsConfig
    doc = "how many insights events are open, by severity (a gauge every exporter carries)"
    uses_links = False
    selects_ports = False  # the detectors' event counts: no port to select

    @classmethod
    def doc_paths(cls) -> list[str]:
        out = ["## Open events (the insights pipeline)", "",
               "How many events are open now, per severity (0 included); nothing while `insights.enabled` "
               "is false. OTLP and Prometheus: `swtel_insights_open_events` with the attribute `severity`.", "",
               "| source | value | path | kind |", "|---|---|---|---|"]
        for severity in SEVERITIES:
            out.append(doc_row("events", severity, f"swtel:{severity_container(severity).path}/{OPEN_EVENTS}",
                               "gauge"))
        return out + [""]

    def __init__(self, cfg: Any) -> None:
        super().__init__(cfg)
        self._insights: Callable[[], Any] = lambda: None

    def bind_insights(self, insights: Callable[[], Any]) -> None:
        """The engine's current insights pipeline (a reload may swap it), asked at each read."""
        self._insights = insights

    def setup(self, links: Any) -> None:
        self.table = CounterTable(self.name, [CounterSpec(severity_container(s), OPEN_EVENTS, 64, GAUGE)
                                              for s in SEVERITIES])
        self.values = array("Q", bytes(8 * len(SEVERITIES)))

    def read(self) -> int:
        pipeline = self._insights()
        if pipeline is None:
            return NO_DATA
        counts = pipeline.open_event_counts()
        for i, severity in enumerate(SEVERITIES):
            self.values[i] = counts.get(severity, 0)
        return 1
