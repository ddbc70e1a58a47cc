"""Derived gauges for the exporters that send the store's counter tables (OTLP, remote write),
and the one rule of which values those exporters send, for readers that see only gNMI paths.

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
from agent.pathgrammar import split, split_origin

if TYPE_CHECKING:
    from agent.store import Store

MACHINERY = True  # shared by the metric exporters, not a plugin (agent/registry.py load_plugins)

#: (metric name, attributes, value, ts_ns)
Gauge = tuple[str, tuple[tuple[str, str], ...], float, int]

#: Where the agent's own states without a named shape live: its health and the server's
#: accounting (``swtel:/agent/...``), insight events (``swtel:/insights/...``). The metric
#: exporters never send them (a state is sent only under a named shape, :func:`gauges`); every
#: counter table, named or not, is sent. A reader that sees only gNMI paths cannot tell a
#: counter from a state, so it leaves out unnamed values below these roots, and unnamed leaves
#: that repeat their list's key (:func:`metric_of_path`); tests/unit/test_collector.py holds
#: docs/paths.md's states to it.
UNNAMED_STATE_ROOTS = ("/agent/", "/insights/")


def metric_of_path(path: str, value: object) -> otlp_names.Name | None:
    """The (name, attributes, rank) remote write and OTLP send ``value`` under, judged from its
    gNMI path (``origin:`` allowed) alone, or None when they do not send it: text, booleans and
    the agent's unnamed states (:data:`UNNAMED_STATE_ROOTS`). ``swtel collect --prometheus``
    serves this, so that its names are remote write's for the same run."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    hit = otlp_names.for_path(path)
    if hit[2] == 0 and _unnamed_state(path):
        return None
    return hit


def _unnamed_state(path: str) -> bool:
    """Below :data:`UNNAMED_STATE_ROOTS`, or a leaf that repeats its list entry's key (the
    OpenConfig key leaf: ``rs-num-corr-err[upper-boundary=12]/upper-boundary``): a state."""
    _origin, text = split_origin(path)
    if text.startswith(UNNAMED_STATE_ROOTS):
        return True
    elems = split(text)
    return len(elems) >= 2 and not elems[-1][1] and elems[-1][0] in elems[-2][1]

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
