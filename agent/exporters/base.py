"""What the engine calls on every exporter (and on the insights runner).

All ``on_*`` methods run on the engine's tick thread: they must not block
(enqueue and return). ``start``/``stop``/``status`` run on the main thread.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from agent.counters import Batch, Container, StateUpdate
    from agent.store import Store


class Listener(Protocol):
    name: str

    def start(self, store: Store) -> None:
        """Begin work; ``store`` gives the latest value of every path (for snapshots and Get)."""

    def on_batch(self, batch: Batch) -> None:
        """Counters of one source changed (or, with ``batch.snapshot``, all of them)."""

    def on_state(self, updates: list[StateUpdate]) -> None:
        """Non-counter values changed (oper-status, events, health)."""

    def on_delete(self, ts_ns: int, containers: list[Container]) -> None:
        """These containers are gone (a port was removed): send gNMI deletes."""

    def stop(self, timeout: float) -> None:
        """Flush what is queued within ``timeout`` seconds, then stop."""

    def status(self) -> dict[str, Any]:
        """State for ``swtel status``: state, queue depth, sent, dropped, reconnects, last error."""
