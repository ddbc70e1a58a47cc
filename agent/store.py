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
        # leaf -> container -> its latest state: keyed by objects the states already hold, not
        # a (container, leaf) tuple each (a spine keeps ~7,000 states: 0.55 MiB of tuples, issue 35)
        self._states: dict[str, dict[Container, StateUpdate]] = {}
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
            states = self._states
            for u in updates:
                if u.value is None:
                    of_leaf = states.get(u.leaf)
                    if of_leaf is not None:
                        of_leaf.pop(u.container, None)
                        if not of_leaf:
                            del states[u.leaf]
                else:
                    of_leaf = states.get(u.leaf)
                    if of_leaf is None:
                        of_leaf = states[u.leaf] = {}
                    of_leaf[u.container] = u

    def drop_containers(self, containers: list[Container]) -> None:
        """Forget states at or below these containers (a deleted port)."""

        def below(c: Container) -> bool:
            return any(c.origin == g.origin and (c.path == g.path or c.path.startswith(g.path + "/"))
                       for g in containers)

        with self._lock:
            self.generation += 1
            for leaf, of_leaf in list(self._states.items()):
                for c in [c for c in of_leaf if below(c)]:
                    del of_leaf[c]
                if not of_leaf:
                    del self._states[leaf]

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
            return [u for of_leaf in self._states.values() for u in of_leaf.values()]
