"""Latest value of every path, for full snapshots (dial-out reconnect, heartbeat) and gNMI Get.

The engine owns the writes (tick thread). Readers on other threads get
consistent per-source snapshots: a source's table and value array are swapped
together, and :meth:`snapshot_batches` copies the values.
"""

from __future__ import annotations

import threading
from array import array
from collections.abc import Callable

from agent.counters import Batch, Container, CounterTable, StateUpdate


class Store:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._tables: dict[str, tuple[CounterTable, array, int]] = {}
        self._states: dict[tuple[Container, str], StateUpdate] = {}
        #: counts writes: a reader that rendered at generation G knows nothing changed while it
        #: is still G (agent/gnmi/get.py answers a repeated read from its last render then)
        self.generation = 0
        #: set once the store holds the initial state (the engine clears it until every source
        #: has tried its first read): snapshots followed by sync_response wait for it
        self.primed = threading.Event()
        self.primed.set()

    # -- writes (engine thread)
    def set_source(self, source: str, table: CounterTable, values: array, ts_ns: int) -> None:
        with self._lock:
            self._tables[source] = (table, values, ts_ns)
            self.generation += 1

    def touch_source(self, source: str, ts_ns: int) -> None:
        with self._lock:
            entry = self._tables.get(source)
            if entry:
                self._tables[source] = (entry[0], entry[1], ts_ns)
                self.generation += 1

    def drop_source(self, source: str) -> None:
        with self._lock:
            self._tables.pop(source, None)
            self.generation += 1

    def set_states(self, updates: list[StateUpdate]) -> None:
        with self._lock:
            self.generation += 1
            for u in updates:
                key = (u.container, u.leaf)
                if u.value is None:
                    self._states.pop(key, None)
                else:
                    self._states[key] = u

    def drop_containers(self, containers: list[Container]) -> None:
        """Forget states at or below these containers (a deleted port)."""

        def below(c: Container) -> bool:
            return any(c.origin == g.origin and (c.path == g.path or c.path.startswith(g.path + "/"))
                       for g in containers)

        with self._lock:
            self.generation += 1
            for key in [k for k in self._states if below(k[0])]:
                del self._states[key]

    # -- reads (any thread)
    def wait_primed(self, give_up: Callable[[], bool], step_s: float = 0.05) -> bool:
        """Block until the initial state is in (True), or ``give_up()`` says stop (False)."""
        while not self.primed.wait(step_s):
            if give_up():
                return False
        return True

    def snapshot_batches(self) -> list[Batch]:
        """One snapshot Batch per source: every counter, values copied."""
        with self._lock:
            entries = list(self._tables.items())
        out = []
        for source, (table, values, ts_ns) in entries:
            copy = array("Q", values)
            idx = table.visible
            n = len(idx)
            out.append(Batch(source, ts_ns, table, idx, copy, [0] * n, bytes(n), snapshot=True))
        return out

    def latest(self) -> dict[str, tuple[CounterTable, array, int]]:
        """source -> (table, values, ts_ns) as stored, not copied (the engine never mutates a
        value array it handed over; it stores a new one)."""
        with self._lock:
            return dict(self._tables)

    def states(self) -> list[StateUpdate]:
        with self._lock:
            return list(self._states.values())
