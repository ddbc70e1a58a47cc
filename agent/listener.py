"""What the engine feeds: the one contract of every exporter and of the insights pipeline.

Floor 0 so that both the exporters (floor 4) and the insights pipeline (floor 3) can subclass
it. Every hook is declared here with a no-op default: the engine calls each on every
listener, never asks ``hasattr``; a listener overrides the ones it takes.

All ``on_*`` methods run on the engine's tick thread: they must not block (enqueue and
return). ``start``/``stop``/``status`` run on the main thread.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from agent.counters import Batch, Container, StateUpdate


class Listener:
    """What the engine feeds: every exporter, and the insights pipeline. Besides the data
    (``on_batch``, ``on_state``, ``on_delete``), five hooks whose defaults do nothing:
    ``end_pass(ts_ns)`` once per pass, returning state updates derived from it (the detectors'
    events), which go to the store and every listener; ``on_port_speeds(speeds)`` when a
    source's port speeds change (port -> bits/s); ``on_config(cfg)`` with a reloaded config, on
    the tick thread; ``open_pass()`` and ``close_pass()`` around each pass (every ``on_*`` of a
    pass comes between them), so a listener may send a pass's output together (dial-out per
    tick: one Notification per origin). A call outside them (a test, a tool) is sent on its own."""

    name: str = ""

    def start(self, store: Any) -> None:
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
        return {}

    # the optional hooks: no-op defaults
    def end_pass(self, ts_ns: int) -> list[StateUpdate]:
        """State updates derived from the pass (none by default)."""
        return []

    def on_port_speeds(self, speeds: dict[str, int]) -> None:
        """Port speeds changed (port -> bits/s)."""

    def on_config(self, cfg: Any) -> None:
        """A reloaded config, on the tick thread."""

    def open_pass(self) -> None:
        """A pass begins."""

    def close_pass(self) -> None:
        """A pass ended: send what it gathered."""

    def health_values(self) -> list[tuple[Any, str, Any]]:
        """The listener's own health as (container, leaf, value), published on change with the
        engine's health pass (the gNMI server's RPC counts); none by default."""
        return []

    def reload_tls(self) -> bool:
        """On a reload: re-read TLS files that changed; True when new ones are in use. Raise
        when new files cannot serve (the running ones are kept). Default: nothing to re-read."""
        return False
