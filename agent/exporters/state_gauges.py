"""Derived gauges for the exporters that send the store's counter tables (OTLP, remote write).

Counters reach the store as tables; a value the agent derives (insights.link_degrading's
predicted FLR, observed CER, the fit's R² and maxT) reaches it as a state, as events do, and
gNMI Get/Subscribe and dial-out carry it from there. OTLP and remote write build their
requests from the tables, so they also take, at each export, every numeric state whose path
has a named shape in agent/exporters/otlp_names.py: a gauge under that name. Events, agent
health and oper-status have no shape (or are text) and stay out, as before.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from agent.counters import Container
from agent.exporters import otlp_names

if TYPE_CHECKING:
    from agent.store import Store

MACHINERY = True  # shared by the metric exporters, not a plugin (agent/registry.py load_plugins)

#: (metric name, attributes, value, ts_ns)
Gauge = tuple[str, tuple[tuple[str, str], ...], float, int]

_names: dict[tuple[Container, str], otlp_names.Name | None] = {}


def _name(container: Container, leaf: str) -> otlp_names.Name | None:
    key = (container, leaf)
    if key not in _names:
        if len(_names) > 100_000:  # ports and events come and go
            _names.clear()
        _names[key] = otlp_names.cumulus_name(container.path, leaf)
    return _names[key]


def gauges(store: Store | None) -> list[Gauge]:
    """The store's numeric states that have a metric name, sorted by name and attributes."""
    if store is None:
        return []
    out = []
    for u in store.states():
        value = u.value
        if isinstance(value, bool) or not isinstance(value, int | float):
            continue
        hit = _name(u.container, u.leaf)
        if hit is not None:
            out.append((hit[0], hit[1], float(value), u.ts_ns))
    out.sort()
    return out
