"""Derived gauges for the exporters that send the store's counter tables (OTLP, remote write),
and the one rule of which values those exporters send, for readers that see only gNMI paths.

Counters reach the store as tables; a value the agent derives (insights.link_degrading's
predicted FLR, observed CER, the fit's R² and maxT) reaches it as a state, as events do, and
gNMI Get/Subscribe and dial-out carry it from there. OTLP and remote write build their
requests from the tables, so they also take, at each export, every numeric state whose path
has a named shape in agent/exporters/otlp_names.py: a gauge under that name. Events, agent
health and oper-status have no shape (or are text) and stay out, as before.

Text states reach them through an info series a plugin declares (agent/registry.py
``InfoMetric``, a source's ``info_metrics``): one series of value 1 per container of the
declared shape, its key values and text leaves as attributes (sources.lldp's
``nvswitch_lldp_neighbor_info``). When those change, the series is another one: each exporter
marks the one that went stale (remote write's stale NaN, OTLP's no-recorded-value flag).
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from agent import registry
from agent.counters import Container
from agent.exporters import otlp_names
from agent.pathgrammar import KEY_VALUE_RE, split, split_origin, unescape_key

if TYPE_CHECKING:
    from agent.store import Store

MACHINERY = True  # shared by the metric exporters, not a plugin (agent/registry.py load_plugins)

#: (metric name, attributes, value, ts_ns)
Gauge = tuple[str, tuple[tuple[str, str], ...], float, int]

#: Where the agent's own states without a named shape live: its health and the server's
#: accounting (``swtel:/agent/...``), insight events (``swtel:/insights/...``). The metric
#: exporters never send them (a state is sent only under a named shape, :func:`gauges`); every
#: counter table, named or not, is sent. A reader that sees only gNMI paths cannot tell a
#: counter from a state, so it leaves out unnamed values below these roots, unnamed leaves
#: directly in a ``state`` container (OpenConfig's place for a state leaf: LLDP's ``ttl``, an
#: RDMA port's ``netdev``; an unnamed counter never sits there) and unnamed leaves that repeat
#: their list's key (:func:`metric_of_path`). tests/unit/test_collector.py holds every row of
#: docs/paths.md to this rule, so a new source's states need no entry here.
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
    """Below :data:`UNNAMED_STATE_ROOTS`, a leaf directly in a ``state`` container, or a leaf
    that repeats its list entry's key (the OpenConfig key leaf:
    ``rs-num-corr-err[upper-boundary=12]/upper-boundary``): a state (for values without a
    named shape only: a named counter in a ``state`` container is a counter)."""
    _origin, text = split_origin(path)
    if text.startswith(UNNAMED_STATE_ROOTS):
        return True
    elems = split(text)
    if len(elems) < 2 or elems[-1][1]:
        return False
    return elems[-2] == ("state", {}) or elems[-1][0] in elems[-2][1]

_names: dict[tuple[Container, str], otlp_names.Name | None] = {}


def _name(container: Container, leaf: str) -> otlp_names.Name | None:
    key = (container, leaf)
    if key not in _names:
        if len(_names) > 100_000:  # ports and events come and go
            _names.clear()
        _names[key] = otlp_names.cumulus_name(container.path, leaf)
    return _names[key]


_Info = tuple[registry.InfoMetric, re.Pattern[str]]
_info_shapes: list[_Info] = []
_info_of: dict[Container, tuple[registry.InfoMetric, tuple[tuple[str, str], ...]] | None] = {}


def _info(container: Container) -> tuple[registry.InfoMetric, tuple[tuple[str, str], ...]] | None:
    """The declared info series ``container`` belongs to, and its key attributes, or None."""
    if len(_info_shapes) != len(registry.INFO_METRICS):  # a plugin registered since
        _info_shapes[:] = [(m, re.compile("^" + re.escape(m.container).replace(re.escape("{X}"),
                                                                                f"({KEY_VALUE_RE})") + "$"))
                           for m in registry.INFO_METRICS.values()]
        _info_of.clear()
    if container not in _info_of:
        if len(_info_of) > 100_000:
            _info_of.clear()
        hit = None
        for metric, pattern in _info_shapes:
            m = pattern.match(container.path)
            if m is not None:
                hit = metric, tuple((k, unescape_key(g)) for k, g in zip(metric.keys, m.groups(), strict=True) if k)
                break
        _info_of[container] = hit
    return _info_of[container]


def gauges(store: Store | None) -> list[Gauge]:
    """The store's numeric states that have a metric name, and the declared info series of its
    text states (value 1), sorted by name and attributes."""
    if store is None:
        return []
    out = []
    infos: dict[Container, tuple[registry.InfoMetric, tuple[tuple[str, str], ...], dict[str, str], list[int]]] = {}
    for u in store.states():
        value = u.value
        if _info_shapes or registry.INFO_METRICS:
            info = _info(u.container)
            if info is not None:
                entry = infos.setdefault(u.container, (info[0], info[1], {}, [0]))
                entry[2][u.leaf] = str(value)
                entry[3][0] = max(entry[3][0], u.ts_ns)
                continue
        if isinstance(value, bool) or not isinstance(value, int | float):
            continue
        hit = _name(u.container, u.leaf)
        if hit is not None:
            out.append((hit[0], hit[1], float(value), u.ts_ns))
    for metric, keys, leaves, ts in infos.values():
        attrs = (*keys, *((attr, leaves.get(leaf, "")) for leaf, attr in metric.leaves))
        out.append((metric.name, attrs, 1.0, ts[0]))
    out.sort()
    return out
