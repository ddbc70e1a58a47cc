"""The engine's port ledger: which sources hold data for which interface, so that an
interface's whole subtree is deleted once, when the last source holding it drops it.

A source holds the interfaces its counter table has data for (``ports_of``). When a source
drops ports (its table lost them, or it was turned off), :meth:`PortLedger.release` says
which of them no source holds any more; :func:`deletes` turns those and the containers
dropped in the same pass into the deletes that go out: each vanished interface's subtree
in both origins, then the other containers one by one (those of an interface that another
source still reads).
"""

from __future__ import annotations

from collections.abc import Iterable

from agent.counters import OPENCONFIG, SWTEL_ORIGIN, Container, CounterTable
from agent.sources.base import interface_path


def ports_of(table: CounterTable) -> set[str]:
    """Interfaces this table has data for (their subtree is deleted when the last source drops them)."""
    return {s.port for s in table.specs if s.port and s.container.path.startswith("/interfaces/interface[")}


class PortLedger:
    """Interface name -> the sources holding data for it."""

    def __init__(self) -> None:
        self._holders: dict[str, set[str]] = {}

    def hold(self, source: str, table: CounterTable) -> None:
        """``source``'s (new) table: it holds every interface the table has data for."""
        for port in ports_of(table):
            self._holders.setdefault(port, set()).add(source)

    def release(self, source: str, ports: Iterable[str]) -> set[str]:
        """``source`` no longer has data for ``ports``: those no source holds any more."""
        vanished: set[str] = set()
        for port in ports:
            holders = self._holders.get(port)
            if holders is None:
                continue
            holders.discard(source)
            if not holders:
                del self._holders[port]
                vanished.add(port)
        return vanished

    def holders(self, port: str) -> frozenset[str]:
        """The sources holding data for ``port`` (empty: none)."""
        return frozenset(self._holders.get(port, ()))

    def __contains__(self, port: object) -> bool:
        return port in self._holders

    def __len__(self) -> int:
        return len(self._holders)


def deletes(vanished: set[str], containers: set[Container]) -> list[Container]:
    """What goes out for one pass's drops: the whole subtree (both origins) of each vanished
    interface, sorted by name, then the dropped containers not under one of those, sorted."""
    whole = [interface_path(p) for p in sorted(vanished)]
    out = [Container(origin, p) for p in whole for origin in (OPENCONFIG, SWTEL_ORIGIN)]
    out += sorted((c for c in containers if not any(c.path.startswith(p + "/") for p in whole)),
                  key=lambda c: (c.origin, c.path))
    return out
