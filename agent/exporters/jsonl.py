"""jsonl exporter (debugging): one JSON line per change, to stdout or a file.

``{"ts": ns, "path": "/interfaces/interface[name=v0]/state/counters/in-pkts", "value": 1234, "delta": 42}``
Paths outside OpenConfig carry their origin (``swtel:/...``). A counter's first
value (its baseline) has ``"delta": 0`` and ``"new": true``; a wrap or a reset
adds ``"wrap": true`` or ``"reset": true``. Deletes are ``{"ts", "path", "delete": true}``.
Lines are written on a thread of its own and flushed at least every 200 ms and at stop.
"""

from __future__ import annotations

import json
import queue
import sys
import threading
from typing import Any, TextIO

from agent import logs
from agent.counters import F_NEW, F_RESET, F_WRAP, Batch, Container, StateUpdate

log = logs.get("jsonl")
_STOP = object()


class JsonlExporter:
    name = "jsonl"

    def __init__(self, path: str = "-", max_queue: int = 100_000) -> None:
        self.path = path
        self._queue: queue.Queue = queue.Queue(max_queue)
        self._out: TextIO | None = None
        self._thread: threading.Thread | None = None
        self.sent = 0
        self.dropped = 0
        self.last_error: str | None = None

    def start(self, store) -> None:
        self._out = sys.stdout if self.path == "-" else open(self.path, "a", encoding="utf-8")  # noqa: SIM115
        self._thread = threading.Thread(target=self._write_loop, name="swtel-jsonl", daemon=True)
        self._thread.start()

    def _put(self, item: Any) -> None:
        try:
            self._queue.put_nowait(item)
        except queue.Full:
            self.dropped += 1

    def on_batch(self, batch: Batch) -> None:
        self._put(batch)

    def on_state(self, updates: list[StateUpdate]) -> None:
        self._put(updates)

    def on_delete(self, ts_ns: int, containers: list[Container]) -> None:
        self._put((ts_ns, containers))

    @staticmethod
    def lines(item: Any) -> list[str]:
        if isinstance(item, Batch):
            out = []
            for _spec, path, value, delta, flags in item.items():
                rec: dict[str, Any] = {"ts": item.ts_ns, "path": path, "value": value, "delta": delta}
                if flags & F_NEW:
                    rec["new"] = True
                if flags & F_WRAP:
                    rec["wrap"] = True
                if flags & F_RESET:
                    rec["reset"] = True
                out.append(json.dumps(rec))
            return out
        if isinstance(item, list):
            return [json.dumps({"ts": u.ts_ns, "path": u.path, "value": u.value}) for u in item]
        ts_ns, containers = item
        return [json.dumps({"ts": ts_ns, "path": c.full(""), "delete": True}) for c in containers]

    def _write_loop(self) -> None:
        out = self._out
        while True:
            try:
                item = self._queue.get(timeout=0.2)
            except queue.Empty:
                self._flush()
                continue
            if item is _STOP:
                self._flush()
                return
            try:
                lines = self.lines(item)
                out.write("\n".join(lines) + "\n")
                self.sent += len(lines)
                if self._queue.empty():
                    self._flush()
            except (OSError, ValueError) as exc:
                self.last_error = str(exc)
                log.error("jsonl write failed", path=self.path, error=str(exc))

    def _flush(self) -> None:
        try:
            self._out.flush()
        except (OSError, ValueError) as exc:
            self.last_error = str(exc)

    def stop(self, timeout: float) -> None:
        if self._thread is None:
            return
        try:
            self._queue.put(_STOP, timeout=timeout)
        except queue.Full:
            self.last_error = "stop: queue full"
        self._thread.join(timeout)
        if self._out is not None and self._out is not sys.stdout:
            self._out.close()

    def status(self) -> dict[str, Any]:
        return {
            "kind": "jsonl",
            "state": "running" if self._thread and self._thread.is_alive() else "stopped",
            "path": self.path,
            "queue": self._queue.qsize(),
            "sent": self.sent,
            "dropped": self.dropped,
            "last_error": self.last_error,
        }
