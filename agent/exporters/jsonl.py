"""jsonl exporter (debugging): one JSON line per change, to stdout or a file.

``{"ts": ns, "path": "/interfaces/interface[name=v0]/state/counters/in-pkts", "value": 1234, "delta": 42}``
Paths outside OpenConfig carry their origin (``swtel:/...``). A counter's first
value (its baseline) has ``"delta": 0`` and ``"new": true``; a wrap or a reset
adds ``"wrap": true`` or ``"reset": true``. Deletes are ``{"ts", "path", "delete": true}``.
Lines are written on a thread of its own, straight to the file descriptor (no hidden
buffer), at least every 200 ms and at stop.

A line is counted as ``sent`` once the kernel took it, as ``dropped`` when the queue
was full or the write failed (``/dev/full``, a full disk): the error is kept in
``last_error``, logged at most once per rate-limit period, and ``down_since_ns`` says
since when writes have been failing (health turns red after ``control.health_grace``).
A closed reader (EPIPE, ``swtel run ... | head``) stops the output: logged once, every
later line counted as dropped.
"""

from __future__ import annotations

import errno
import json
import os
import queue
import stat
import sys
import threading
import time
from dataclasses import dataclass
from typing import Any, TextIO

from agent import logs
from agent.config import setting
from agent.counters import F_JUMP, F_NEW, F_RESET, F_WRAP, Batch, Container, StateUpdate
from agent.exporters.base import Exporter, register

log = logs.get("jsonl")
_STOP = object()


@dataclass
class JsonlConfig:
    """``exporters.jsonl``."""

    path: str = setting("-", type="string", doc="output file; `-` is stdout (not for the systemd service)")


@register
class JsonlExporter(Exporter):
    name = "jsonl"
    config_name = "jsonl"
    config_class = JsonlConfig
    optional = True
    doc, doc_type, doc_default = "one JSON line per change, for debugging", "mapping or absent", "absent (off)"

    @classmethod
    def check(cls, section: JsonlConfig | None, where: str, problems: list[str], cfg) -> None:
        if section is not None and not section.path:
            problems.append(f"{where}.path: must not be empty (use \"-\" for stdout)")

    @classmethod
    def listeners_for(cls, section: JsonlConfig | None, cfg) -> dict:
        if section is None:
            return {}
        return {"jsonl": cls(section.path, rate_limit_s=float(cfg.log.rate_limit))}

    @classmethod
    def built_from(cls, key: str, cfg) -> object:
        return cfg.exporters.jsonl

    def __init__(self, path: str = "-", max_queue: int = 100_000, rate_limit_s: float = 10.0) -> None:
        self.path = path
        self._queue: queue.Queue = queue.Queue(max_queue)
        self._out: TextIO | None = None  # stdout without a file descriptor (tests capturing it)
        self._fd: int | None = None
        self._own_fd = False
        self._thread: threading.Thread | None = None
        self.sent = 0
        self.dropped = 0
        self.last_error: str | None = None
        self.down_since_ns: int | None = None  # writes failing since then (None: last write ok)
        self.closed = False  # the reader went away (EPIPE): output stopped
        self.log_limiter = logs.RateLimiter(rate_limit_s)

    def start(self, store) -> None:
        """Open the output; raise OSError (with the path) if it cannot be opened for writing."""
        if self.path == "-":
            try:
                self._fd = sys.stdout.fileno()
            except (AttributeError, OSError, ValueError):
                self._out = sys.stdout
        else:
            fd = -1
            try:
                fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC
                             | os.O_NOCTTY | os.O_NONBLOCK, 0o644)
                if stat.S_ISREG(os.fstat(fd).st_mode):
                    os.lseek(fd, 0, os.SEEK_END)  # a file that cannot be appended to (/proc) fails here
                os.set_blocking(fd, True)  # O_NONBLOCK only so that opening a FIFO never hangs
            except OSError as exc:
                if fd >= 0:
                    os.close(fd)
                raise OSError(exc.errno, f"cannot open {self.path!r}: {exc.strerror}") from None
            self._fd, self._own_fd = fd, True
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
                if flags & F_JUMP:
                    rec["jump"] = True
                out.append(json.dumps(rec))
            return out
        if isinstance(item, list):
            return [json.dumps({"ts": u.ts_ns, "path": u.path, "value": u.value}) for u in item]
        ts_ns, containers = item
        return [json.dumps({"ts": ts_ns, "path": c.full(""), "delete": True}) for c in containers]

    def _write_loop(self) -> None:
        pending: list[str] = []
        while True:
            try:
                item = self._queue.get(timeout=0.2)
            except queue.Empty:
                self._emit(pending)
                continue
            if item is _STOP:
                self._emit(pending)
                return
            try:
                pending.extend(self.lines(item))
            except Exception as exc:  # an unencodable value: count it, never stop writing
                self.dropped += 1
                self._failed(f"cannot encode a change: {exc}")
            if len(pending) >= 1000 or self._queue.empty():
                self._emit(pending)

    def _emit(self, lines: list[str]) -> None:
        """Write ``lines`` (and clear the list): sent when written, dropped when not."""
        if not lines:
            return
        n = len(lines)
        data = ("\n".join(lines) + "\n").encode("utf-8", "surrogateescape")
        lines.clear()
        if self.closed:
            self.dropped += n
            return
        try:
            if self._fd is not None:
                view = memoryview(data)
                while view:
                    view = view[os.write(self._fd, view):]
            else:
                self._out.write(data.decode("utf-8", "surrogateescape"))
                self._out.flush()
        except (OSError, ValueError) as exc:
            self.dropped += n
            if isinstance(exc, BrokenPipeError) or getattr(exc, "errno", None) == errno.EPIPE:
                self.closed = True
                self._failed("output closed by its reader (broken pipe)")
                log.warning("jsonl output closed by its reader; no more lines are written", path=self.path)
                return
            self._failed(exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc))
            return
        self.sent += n
        self.down_since_ns = None
        self.log_limiter.forget("write")

    def _failed(self, error: str) -> None:
        self.last_error = error
        if self.down_since_ns is None:
            self.down_since_ns = time.time_ns()
        if not self.closed:
            self.log_limiter.log(log, "error", "write", "jsonl write failed; lines dropped",
                                 path=self.path, error=error, dropped=self.dropped)

    def stop(self, timeout: float) -> None:
        """Write what is queued within ``timeout``, then close; never raises."""
        if self._thread is not None:
            try:
                self._queue.put(_STOP, timeout=timeout)
            except queue.Full:
                self.last_error = "stop: queue full"
            self._thread.join(timeout)
        if self._own_fd and self._fd is not None and not (self._thread and self._thread.is_alive()):
            try:
                os.close(self._fd)
            except OSError as exc:
                self.last_error = exc.strerror
            self._fd = None

    def status(self) -> dict[str, Any]:
        alive = bool(self._thread and self._thread.is_alive())
        state = "stopped"
        if alive:
            state = "closed" if self.closed else ("failing" if self.down_since_ns is not None else "running")
        return {
            "kind": "jsonl",
            "state": state,
            "path": self.path,
            "queue": self._queue.qsize(),
            "sent": self.sent,
            "dropped": self.dropped,
            "last_error": self.last_error,
            "down_since_ns": self.down_since_ns,
        }
