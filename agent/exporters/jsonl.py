"""jsonl exporter (debugging): one JSON line per change, to stdout or a file.

``{"ts": ns, "path": "/interfaces/interface[name=v0]/state/counters/in-pkts", "value": 1234, "delta": 42}``
Paths outside OpenConfig carry their origin (``swtel:/...``). A counter's first
value (its baseline) has ``"delta": 0`` and ``"new": true``; a wrap or a reset
adds ``"wrap": true`` or ``"reset": true``. Deletes are ``{"ts", "path", "delete": true}``.
Lines are ASCII (json.dumps' escapes). The tick thread only collects what changed; a
thread of its own formats each engine pass's lines at once (the counters' in C,
agent/_ext/jsonl.c) and writes them with one write, straight to the file descriptor (no
hidden buffer): once a pass, at least every 200 ms, and at stop.

A line is counted as ``sent`` once the kernel took it, as ``dropped`` when the queue
was full (``max_queue`` lines waiting) or the write failed (``/dev/full``, a full disk): the error is kept in
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

from agent import _backend, logs
from agent.config import setting
from agent.counters import Batch, Container, CounterTable, StateUpdate
from agent.exporters.base import Exporter, register

log = logs.get("jsonl")
_STOP = object()
_swtel = _backend.encoder


def _json(text: str) -> bytes:
    """``text`` as a JSON string literal, as json.dumps writes it (ASCII: a name that is not
    UTF-8 keeps its escaped surrogates, ``\\udcff``)."""
    return json.dumps(text).encode("ascii")


def json_paths(table: CounterTable) -> list[bytes]:
    """Every counter's display path as a JSON string literal, built once per table."""
    out = table.cache.get("jsonl")
    if out is None:
        out = table.cache["jsonl"] = [_json(s.container.full(s.leaf)) for s in table.specs]
    return out


def _state_line(u: StateUpdate) -> bytes:
    return (json.dumps({"ts": u.ts_ns, "path": u.path, "value": u.value}) + "\n").encode("ascii")


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
        # Items: (data, lines), one per engine pass; bounded by lines (max_queue), not items.
        self._queue: queue.Queue = queue.Queue()
        self._max_lines = max_queue
        self._queued_lines = 0
        # This pass's batches, states and deletes, formatted by the writer when it takes them.
        self._pass: list[Any] = []
        self._pass_lines = 0
        self._lock = threading.Lock()
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

    # The tick thread only collects (no formatting, no write); the writer formats a whole
    # pass at once (counters in C) and writes it with one write.
    def _add(self, item: Any, lines: int) -> None:
        with self._lock:
            self._pass.append(item)
            self._pass_lines += lines

    def on_batch(self, batch: Batch) -> None:
        self._add(batch, len(batch.indices))

    def on_state(self, updates: list[StateUpdate]) -> None:
        self._add(updates, len(updates))

    def on_delete(self, ts_ns: int, containers: list[Container]) -> None:
        self._add((ts_ns, containers), len(containers))

    def end_pass(self, ts_ns: int) -> None:
        """The engine's pass is over: hand its lines to the writer, one write."""
        items, lines = self._take()
        if not items:
            return
        with self._lock:
            # a pass larger than the whole bound still goes when nothing waits
            full = self._queued_lines and self._queued_lines + lines > self._max_lines
            if not full:
                self._queued_lines += lines
        if full:
            self.dropped += lines
            return
        self._queue.put((items, lines))

    def _take(self) -> tuple[list[Any], int]:
        with self._lock:
            items, lines = self._pass, self._pass_lines
            self._pass, self._pass_lines = [], 0
        return items, lines

    @staticmethod
    def format(items: list[Any]) -> bytes:
        """The lines of ``items`` (batches, state lists, deletes), newline-terminated, ASCII."""
        out = []
        for item in items:
            if isinstance(item, Batch):
                out.append(_swtel.jsonl_lines(item.ts_ns, item.indices, item.values, item.deltas, item.flags,
                                              json_paths(item.table)))
            elif isinstance(item, list):
                out.extend(_state_line(u) for u in item)
            else:
                ts_ns, containers = item
                out.extend(b'{"ts": %d, "path": %s, "delete": true}\n' % (ts_ns, _json(c.full("")))
                           for c in containers)
        return b"".join(out)

    def _write_loop(self) -> None:
        while True:
            try:
                item = self._queue.get(timeout=0.2)
            except queue.Empty:
                item = None  # no pass for 200 ms (or no engine: tests): write what was collected
            if item is _STOP:  # (what was handed over before it came first)
                self._write_pass(*self._take())
                return
            if item is None:
                self._write_pass(*self._take())
            else:
                self._write_pass(*item, queued=True)

    def _write_pass(self, items: list[Any], lines: int, queued: bool = False) -> None:
        if queued:
            with self._lock:
                self._queued_lines -= lines
        if not items:
            return
        try:
            data = self.format(items)
        except Exception as exc:  # an unencodable value: count the pass, never stop writing
            data = self._format_each(items, exc)
            lines = data.count(b"\n")
        self._emit(data, lines)

    def _format_each(self, items: list[Any], exc: Exception) -> bytes:
        """A pass with a line that cannot be encoded: every other line still goes out."""
        out = []
        bad = 0
        for item in items:
            parts = [[u] for u in item] if isinstance(item, list) else [item]
            for part in parts:
                try:
                    out.append(self.format([part]))
                except Exception as one:  # noqa: BLE001 - counted and logged below
                    bad += len(part) if isinstance(part, list) else (len(part.indices) if isinstance(part, Batch)
                                                                     else len(part[1]))
                    exc = one
        self.dropped += bad
        self._failed(f"cannot encode a change: {exc}")
        return b"".join(out)

    def _emit(self, data: bytes, n: int) -> None:
        """Write ``data`` (``n`` lines): sent when written, dropped when not."""
        if not n:
            return
        if self.closed:
            self.dropped += n
            return
        try:
            if self._fd is not None:
                view = memoryview(data)
                while view:
                    view = view[os.write(self._fd, view):]
            else:
                self._out.write(data.decode("ascii"))
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
            "queue": self._queued_lines + self._pass_lines,  # lines not yet written
            "sent": self.sent,
            "dropped": self.dropped,
            "last_error": self.last_error,
            "down_since_ns": self.down_since_ns,
        }
