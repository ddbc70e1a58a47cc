"""events source: how many events the insights pipeline holds open, by severity, as gauges.

The events themselves are states (``swtel:/insights/events/event[id=N]/state``): gNMI collectors
get every leaf; the metric exporters (OTLP, remote write), which carry numbers, get one info
series per event this source declares, ``swtel_insights_event_info{id, type, severity,
interface, neighbor, status} 1`` (agent/exporters/state_gauges.py; its old series is marked
stale when a label changes, e.g. the status at its clearing). This count is a gauge like the
agent's own RSS (sources/system.py), so a fleet's dashboard can show open events by device over
every exporter alike (``swtel_insights_open_events{severity=...}``, agent/exporters/otlp_names.py).

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
from agent.insights.events import EVENTS_PATH, LEAVES
from agent.pathgrammar import escape_key
from agent.registry import InfoMetric
from agent.sources.base import NO_DATA, Source, SourceConfig, doc_row, register

OPEN_EVENTS = "open-events"
EVENT_INFO = "swtel_insights_event_info"
#: an event's state leaves, as docs/paths.md words them
EVENT_LEAVES = {
    "type": "the event's type (`symbol-ber`, `roce-retrans` ...)",
    "severity": "`warning` or `critical`",
    "interfaces": "its ports, comma-joined (`swp53`; an RDMA port `mlx5_0/1`)",
    "start-ns": "when its rule first held (ns since the epoch)",
    "end-ns": "once cleared: the last time its rule held",
    "peak": "its highest figure", "peak-ns": "when the peak was seen", "peak-unit": "the peak's unit",
    "message": "what it means, in words",
    "status": "`open` or `cleared`",
    "lane": "link-degrading's only: the lane (absent for the whole port)",
    "neighbor": "the far end of its ports, when known: the LLDP neighbour's system name and port "
                "(`leaf-3 swp61`; several ports: `swp1: leaf-3 swp61; swp2: ...`); an RDMA port's is "
                "its netdev's (sources.rdma's `netdev`)",
}
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
    #: the events for the metric exporters: one series per event in the book (open, and the
    #: cleared ones of the history), its far end as ``neighbor``
    info_metrics = (InfoMetric(
        EVENT_INFO, EVENTS_PATH.format(id="{X}"), ("id",),
        (("type", "type"), ("severity", "severity"), ("interfaces", "interface"), ("neighbor", "neighbor"),
         ("status", "status")),
        doc="the insights pipeline: one per event it holds (open, and the cleared ones of `insights.history`)"),)

    @classmethod
    def doc_paths(cls) -> list[str]:
        out = ["## Open events (the insights pipeline)", "",
               "How many events are open now, per severity (0 included); nothing while `insights.enabled` "
               "is false. OTLP and Prometheus: `swtel_insights_open_events` with the attribute `severity`.", "",
               "| source | value | path | kind |", "|---|---|---|---|"]
        for severity in SEVERITIES:
            out.append(doc_row("events", severity, f"swtel:{severity_container(severity).path}/{OPEN_EVENTS}",
                               "gauge"))
        out += ["", "### The events", "",
                "Each event the detectors raise (docs/insights.md), sent when it changes and deleted when it "
                f"leaves the history (`insights.history`). OTLP and Prometheus: `{EVENT_INFO}` (info series, "
                "below).", "", "| source | value | path | kind |", "|---|---|---|---|"]
        for leaf in LEAVES:  # (a leaf the book sends without words here fails the docs' render)
            out.append(f"| insights | {EVENT_LEAVES[leaf]} | `swtel:{EVENTS_PATH.format(id='N')}/{leaf}` | state |")
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
