"""Each local port's far end, for the events (``neighbor: leaf-3 swp61``).

The sources declare which of their states name a port's far end (``registry.FarEnd``: sources.lldp's
neighbours) and which tie a port to the interface it stands on (``registry.PortAlias``: an RDMA
port's netdev). The insights pipeline hands this book every state update it sees (the engine's
``on_state``) and the store's states when it starts; the event book asks it for the far end of
an event's ports. No source is named here: a new neighbour source declares its states and is
read the same way.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from agent import registry
from agent.counters import Container, StateUpdate
from agent.pathgrammar import KEY_VALUE_RE, unescape_key

MACHINERY = True  # the pipeline's, not a plugin (agent/registry.py load_plugins)

#: containers whose shape was looked up (a state of any other shape costs one dict look-up)
MAX_SHAPES_CACHED = 100_000

_Shape = tuple[re.Pattern[str], Any]  # (the container path's pattern, the FarEnd or PortAlias)


def _pattern(container: str) -> re.Pattern[str]:
    return re.compile("^" + re.escape(container).replace(re.escape("{X}"), f"({KEY_VALUE_RE})") + "$")


class FarEnds:
    """What the declared states say of each port's far end, kept current from state updates
    (tick thread only, as the pipeline)."""

    def __init__(self) -> None:
        self._shapes: list[_Shape] = []
        self._declared = (-1, -1)
        self._heads: tuple[str, ...] = ()  # each shape's text before its first key (_shape_of)
        #: container -> (the declaration, the local port) or None (a container of no declared shape)
        self._of: dict[Container, tuple[Any, str] | None] = {}
        self._leaves: dict[Container, dict[str, Any]] = {}  # a far end's container -> its leaves
        self._names: dict[str, dict[Container, str]] = {}  # port -> container -> the far end's name
        self._aliases: dict[Container, tuple[str, str]] = {}  # container -> (port, interface)
        #: bumped whenever a port's far end may have changed: the event book looks again then only
        self.generation = 0

    # ------------------------------------------------------------ input
    def on_state(self, updates: Iterable[StateUpdate]) -> None:
        touched: dict[Container, tuple[Any, str]] = {}
        for u in updates:
            hit = self._shape_of(u.container)
            if hit is None:
                continue
            decl, port = hit
            if isinstance(decl, registry.PortAlias):
                if u.leaf == decl.leaf:
                    self._alias(u.container, port, u.value)
                continue
            leaves = self._leaves.setdefault(u.container, {})
            if u.value is None:
                leaves.pop(u.leaf, None)
            else:
                leaves[u.leaf] = u.value
            touched[u.container] = hit
        for container, (decl, port) in touched.items():
            leaves = self._leaves.get(container) or {}
            try:
                name = decl.name(leaves) if leaves else ""
            except Exception:  # noqa: BLE001 - a source's bad naming costs its far end, never the events
                name = ""
            if not leaves:
                self._leaves.pop(container, None)
            names = self._names.get(port, {})
            if names.get(container, "") == name:
                continue
            if name:
                self._names.setdefault(port, names)[container] = name
            else:
                names.pop(container, None)
                if not names:
                    self._names.pop(port, None)
            self.generation += 1

    def _alias(self, container: Container, port: str, value: Any) -> None:
        new = (port, str(value)) if value else None
        if self._aliases.get(container) == new:
            return
        if new is None:
            self._aliases.pop(container, None)
        else:
            self._aliases[container] = new
        self.generation += 1

    def _shape_of(self, container: Container) -> tuple[Any, str] | None:
        declared = (len(registry.FAR_ENDS), len(registry.PORT_ALIASES))
        if declared != self._declared:  # a plugin registered since
            self._declared = declared
            self._shapes = [(_pattern(d.container), d)
                            for d in (*registry.FAR_ENDS.values(), *registry.PORT_ALIASES.values())]
            # each shape's text before its first key value: a container that starts with none
            # of them is no shape's, answered without a cache entry (every state's container,
            # a spine's 5,184 FEC bins among them, was cached: 0.3 MiB, issue 35)
            self._heads = tuple(d.container.split("{X}", 1)[0] for _p, d in self._shapes)
            self._of.clear()
        if not container.path.startswith(self._heads):
            return None
        if container in self._of:
            return self._of[container]
        hit = None
        for pattern, decl in self._shapes:
            m = pattern.match(container.path)
            if m is not None:
                keys = [unescape_key(g) for g in m.groups()]
                try:
                    hit = decl, decl.port.format(*keys)
                except (IndexError, KeyError, ValueError):  # a declaration whose port names a key it lacks
                    hit = None
                break
        if len(self._of) >= MAX_SHAPES_CACHED:  # ports and events come and go
            self._of.clear()
        self._of[container] = hit
        return hit

    # ------------------------------------------------------------ answers
    def of_port(self, port: str) -> str:
        """The far end of ``port`` (``leaf-3 swp61``; several: comma-joined), else that of the
        interface it stands on (an RDMA port's netdev); "" when unknown."""
        names = self._names.get(port)
        if not names:
            for alias_port, interface in self._aliases.values():
                if alias_port == port and interface != port:
                    names = self._names.get(interface)
                    if names:
                        break
        return ", ".join(sorted(set(names.values()))) if names else ""

    def of_ports(self, ports: list[str]) -> str:
        """The far end of an event's ports: one port's as it is, several as ``port: far end``
        joined by ``; `` (only the ports whose far end is known)."""
        if len(ports) == 1:
            return self.of_port(ports[0])
        known = [(p, self.of_port(p)) for p in ports]
        return "; ".join(f"{p}: {name}" for p, name in known if name)
