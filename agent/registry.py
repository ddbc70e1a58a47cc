"""The three plugin registries: sources, exporters and detectors (insights).

Floor 2, beside :mod:`agent.config`, and importing nothing of the agent: dependency
injection as node_exporter's collectors do it. Each plugin module (one file under
``agent/sources/``, ``agent/exporters/`` or ``agent/insights/``) registers, when it is
imported, its config section: the dataclass of its keys (each documented in the field's
metadata), its ``check()`` and the row of its section in docs/config.md. The config
loader (:mod:`agent.config`) builds ``sources``, ``exporters`` and ``insights`` from
these registries, validates by calling each check, and :mod:`agent.configdoc` renders
the docs tables from them. :mod:`agent.plugins` imports every plugin package: every
entry point that reads a config imports it first.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

#: ``check(section, where, problems, cfg)``: append one problem per rule the section breaks,
#: each starting with its YAML path (``where`` is the section's, e.g. ``sources.asic``).
#: ``cfg`` is the whole config (for rules that depend on other sections).
Check = Callable[[Any, str, list[str], Any], None]


@dataclass(frozen=True)
class Section:
    """One plugin's config section (``<kind>.<name>``)."""

    name: str
    config: type  # the dataclass of its keys (e.g. NetdevConfig)
    check: Check | None = None
    #: ``swtel validate`` only (``config.parse(..., plugin_file=True)``): checks of what the
    #: agent itself meets at run time rather than at load (an ASIC plugin's file)
    validate_check: Check | None = None
    many: bool = False  # a list of sections (exporters.dialout[])
    optional: bool = False  # None until the section is present (exporters.jsonl)
    #: the section's own row in docs/config.md: its type, default and meaning
    doc: str = ""
    doc_type: str = "mapping"
    doc_default: str = ""
    plugin: Any = None  # the run-time class


class Registry:
    """Sections of one kind, iterated in ``order`` first, then any other in name order."""

    def __init__(self, kind: str, order: tuple[str, ...]) -> None:
        self.kind = kind
        self.order = order
        self._sections: dict[str, Section] = {}

    def add(self, section: Section) -> Section:
        """Register ``section`` (a module imported again replaces its own section; two
        modules claiming one name is an error, raised at import)."""
        old = self._sections.get(section.name)
        if old is not None and old.plugin is not None and section.plugin is not None and \
                old.plugin.__module__ != section.plugin.__module__:
            raise RuntimeError(f"{self.kind}.{section.name}: claimed by both {old.plugin.__module__} "
                               f"and {section.plugin.__module__}")
        self._sections[section.name] = section
        return section

    def __iter__(self) -> Iterator[Section]:
        names = [n for n in self.order if n in self._sections]
        names += sorted(set(self._sections) - set(self.order))
        return (self._sections[n] for n in names)

    def __len__(self) -> int:
        return len(self._sections)

    def __contains__(self, name: object) -> bool:
        return name in self._sections

    def __getitem__(self, name: str) -> Section:
        return self._sections[name]

    def names(self) -> list[str]:
        return [s.name for s in self]

    def shape(self) -> tuple:
        """What the config schema is built from: the sections' names, classes and kinds."""
        return tuple((s.name, s.config, s.many, s.optional) for s in self)


@dataclass(frozen=True)
class InfoMetric:
    """An info series a plugin declares (Prometheus' ``_info`` pattern, value 1): the text
    states of one container shape become its attributes. The metric exporters (OTLP, remote
    write: agent/exporters/state_gauges.py) build one series per container from the store and
    mark the old one stale when its attributes change; docs/paths.md lists it."""

    name: str  # e.g. nvswitch_lldp_neighbor_info
    container: str  # the container path with ``{X}`` for each key value
    keys: tuple[str, ...]  # the attribute each ``{X}`` becomes, in order ("": none)
    leaves: tuple[tuple[str, str], ...]  # (leaf, attribute); a leaf without a state is ""
    doc: str = ""


@dataclass(frozen=True)
class FarEnd:
    """States a plugin declares that name the far end of a local port (sources.lldp's
    neighbours): every event on that port names it (agent/insights/neighbors.py). ``container``
    is the path of the states with ``{X}`` for each key value, ``port`` the local port's name made
    of the key values (``"{0}"``: the first), and ``name`` the far end's name made of the
    container's leaves (leaf -> value; "" when they name none)."""

    container: str
    port: str
    name: Callable[[dict[str, Any]], str]


@dataclass(frozen=True)
class PortAlias:
    """A state a plugin declares that names the interface one of its ports stands on (an RDMA
    port's netdev): an event on the port names that interface's far end. ``container`` and
    ``port`` as :class:`FarEnd`'s (``"{0}/{1}"``: the RDMA port's ``mlx5_0/1``), ``leaf`` the
    state that holds the interface's name."""

    container: str
    port: str
    leaf: str


SOURCES = Registry("sources", ("netdev", "ethtool", "rdma", "system", "asic"))
EXPORTERS = Registry("exporters", ("jsonl", "dialout", "server", "tunnel", "otlp"))
DETECTORS = Registry("insights", ("error_burst", "link_flap", "pfc_storm", "drop_burst", "imbalance",
                                  "throughput_dip", "roce_retrans"))
ALL = (SOURCES, EXPORTERS, DETECTORS)
#: name -> the info series plugins declared (a source's ``info_metrics``)
INFO_METRICS: dict[str, InfoMetric] = {}
#: container shape -> the far ends (a source's ``far_ends``) and port aliases (``port_aliases``)
#: plugins declared
FAR_ENDS: dict[str, FarEnd] = {}
PORT_ALIASES: dict[str, PortAlias] = {}


def load_plugins(package: str, path: Any, registered: Callable[[], Iterable[type]],
                 order: tuple[str, ...] = ()) -> None:
    """Import every module of ``package`` (``order`` first, then by name): each plugin module
    registers itself. A helper module says so in itself (``MACHINERY = True``, module level);
    any other module that registered no class of ``registered()`` is an error, so a plugin
    whose ``@register`` was forgotten fails at import, not silently."""
    found = {m.name for m in pkgutil.iter_modules(path)}
    names = [n for n in order if n in found] + sorted(found - set(order))
    modules = [importlib.import_module(f"{package}.{name}") for name in names]
    homes = {cls.__module__ for cls in registered()}
    idle = [m.__name__ for m in modules if not getattr(m, "MACHINERY", False) and m.__name__ not in homes]
    if idle:
        raise ImportError(f"{', '.join(idle)}: registers no plugin (a helper module says MACHINERY = True)")
