"""Structured logs: one event per line to stdout (journald), as logfmt-style ``kv`` or ``json``.

Modules take a logger with :func:`get` at import time; :func:`configure` may run
later (and again on reload): loggers are resolved lazily, so they follow it.

Repeated errors, such as a destination that stays down, go through a
:class:`RateLimiter` so they are logged once per period with a count of what was
suppressed, not once per tick. Limiters are keyed by the *kind* of event (see
:func:`kind`), never by text a peer controls, so varying messages share one limit.

Values are escaped in both formats: the ``kv`` renderer quotes and escapes every
control character (C0, C1, ESC, DEL), ``json`` escapes them as ``\\uNNNN``.
"""

from __future__ import annotations

import importlib
import logging
import sys
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from types import ModuleType
from typing import Any, TextIO


class _AsyncioOnFirstUse(ModuleType):
    """What structlog's ``import asyncio`` binds: the real asyncio, imported when an
    attribute is first asked for (only structlog's async loggers do, which swtel never
    uses). asyncio brings ssl, OpenSSL's initialised libraries, inspect and ~45 modules:
    ~6 MiB of a dial-out agent's 50 MB. Only structlog holds this stand-in: it leaves
    ``sys.modules`` once structlog is imported, so every other ``import asyncio`` is the
    real one. (importlib's ``LazyLoader`` does not help: an ``import`` statement reads
    the module's ``__spec__``, which loads it.)"""

    def __getattr__(self, name: str) -> Any:
        if sys.modules.get("asyncio") is self:  # asked while structlog is still importing
            del sys.modules["asyncio"]
        return getattr(importlib.import_module("asyncio"), name)


def _import_structlog() -> ModuleType:
    if "asyncio" in sys.modules or "structlog" in sys.modules:
        import structlog

        return structlog
    stand_in = _AsyncioOnFirstUse("asyncio")
    sys.modules["asyncio"] = stand_in
    try:
        import structlog
    finally:
        if sys.modules.get("asyncio") is stand_in:
            del sys.modules["asyncio"]
    return structlog


structlog = _import_structlog()

LEVELS = {
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "warning": logging.WARNING,
    "error": logging.ERROR,
}
FORMATS = ("kv", "json")


_KV_FIRST = ("timestamp", "level", "component", "event")


def _kv_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list | tuple | set | frozenset):
        # sources=asic,netdev rather than a Python repr
        items = sorted(value, key=str) if isinstance(value, set | frozenset) else value
        text = ",".join(_kv_value(v).strip('"') for v in items)
        return _kv_value(text) if text else '""'
    text = "null" if value is None else str(value)
    if text and not any(c in text for c in ' ="\\') and text.isprintable():
        return text
    return '"' + text.translate(_KV_ESCAPES) + '"'


class _KvEscapes(dict):
    """``str.translate`` table for quoted kv values: backslash and quote escaped, and every
    character that is not printable (C0 and C1 controls, ESC, DEL, line and paragraph
    separators, ...) written as ``\\n``, ``\\xNN`` or ``\\uNNNN``: a port name or a
    peer's text can never move the cursor, clear the screen or forge a second line."""

    def __missing__(self, code: int) -> str:
        ch = chr(code)
        if ch.isprintable():
            out = ch
        elif code < 0x100:
            out = f"\\x{code:02x}"
        elif code < 0x10000:
            out = f"\\u{code:04x}"
        else:
            out = f"\\U{code:08x}"
        if len(self) < 4096:  # bounded: a peer's text cannot grow the table without end
            self[code] = out
        return out


_KV_ESCAPES = _KvEscapes({ord("\\"): "\\\\", ord('"'): '\\"', ord("\n"): "\\n", ord("\r"): "\\r",
                          ord("\t"): "\\t"})


def _render_kv(_logger: Any, _method: str, event: dict[str, Any]) -> str:
    """logfmt: ``key=value`` pairs, quoted when needed, never more than one line
    (structlog 22.3's LogfmtRenderer leaves newlines in tracebacks raw)."""
    keys = [k for k in _KV_FIRST if k in event] + [k for k in event if k not in _KV_FIRST]
    return " ".join(f"{k}={_kv_value(event[k])}" for k in keys)


def _renderer(fmt: str) -> Any:
    if fmt == "json":
        return structlog.processors.JSONRenderer(sort_keys=False)
    return _render_kv


def configure(level: str = "info", fmt: str = "kv", stream: TextIO | None = None) -> None:
    """Set the minimum level (debug/info/warning/error) and format (kv/json) for every logger."""
    if level not in LEVELS:
        raise ValueError(f"unknown log level {level!r}; expected one of {', '.join(LEVELS)}")
    if fmt not in FORMATS:
        raise ValueError(f"unknown log format {fmt!r}; expected kv or json")
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.format_exc_info,
            _renderer(fmt),
        ],
        wrapper_class=structlog.make_filtering_bound_logger(LEVELS[level]),
        logger_factory=structlog.PrintLoggerFactory(stream or sys.stdout),
        cache_logger_on_first_use=False,  # configure() runs again on reload
    )


def get(name: str) -> Any:
    """A logger whose events carry ``component=<name>``."""
    return structlog.get_logger(component=name)


def kind(text: str) -> str:
    """What kind of error ``text`` is, for a rate-limit key.

    Its head, the text before the first ``:``, when that is one word: a gRPC status code name
    (``UNAVAILABLE``) or an exception type (``ConnectionRefusedError``), whatever details a
    peer put after it. A head of several words (``password_file /etc/x``, ``TLS setup``) is
    not specific enough: the text up to the second ``:`` is used. Digits are blanked and at
    most 160 characters kept. Errors that differ only in their details (a peer's random
    bytes, a port, a tag) share one key, so they share one rate limit."""
    head, sep, rest = text.partition(":")
    if sep and (" " in head.strip() or "/" in head):
        head = f"{head}:{rest.partition(':')[0]}"
    return "".join("#" if c.isdigit() else c for c in head[:160])


#: characters of a peer's text (an error message, a refusal, details) kept for a log or status
REMOTE_TEXT_MAX = 300


def remote_text(text: object, limit: int = REMOTE_TEXT_MAX) -> str:
    """``text`` from a peer, cut to at most ``limit`` characters for a log line or status.

    The middle goes, so that the head (a gRPC code name, ``HTTP 429``) and the tail (often the
    cause) both stay: a receiver's 3 MB message must not become a 3 MB log line and status. The
    one cutter for every remote text; callers need not check the length first."""
    s = text if isinstance(text, str) else str(text)
    if len(s) <= limit:
        return s
    marker = f" …[{len(s)} chars, cut]… "  # the length said once: the reader knows what is missing
    keep = max(limit - len(marker), 2)
    head = keep * 2 // 3  # more of the head: the code, the status, the first words
    return f"{s[:head]}{marker}{s[len(s) - (keep - head):]}"


class RateLimiter:
    """Let one message per key through per period; count the rest.

    ``check(key)`` returns None while the key is suppressed, else the number of
    messages suppressed since the last one let through (to report with it).
    Thread-safe. Keys are bounded (least recently used are forgotten).
    """

    def __init__(
        self, period_s: float, clock: Callable[[], float] = time.monotonic, max_keys: int = 4096
    ) -> None:
        self.period_s = period_s
        self._clock = clock
        self._max_keys = max_keys
        self._lock = threading.Lock()
        # key -> (time last let through, suppressed since)
        self._seen: OrderedDict[Any, tuple[float, int]] = OrderedDict()

    def check(self, key: Any, period_s: float | None = None) -> int | None:
        period = self.period_s if period_s is None else period_s
        now = self._clock()
        with self._lock:
            last = self._seen.get(key)
            if last is not None and now - last[0] < period:
                self._seen[key] = (last[0], last[1] + 1)
                return None
            self._seen[key] = (now, 0)
            self._seen.move_to_end(key)
            while len(self._seen) > self._max_keys:
                self._seen.popitem(last=False)
            return last[1] if last is not None else 0

    def allow(self, key: Any, period_s: float | None = None) -> bool:
        """True if a message for ``key`` should be logged now."""
        return self.check(key, period_s) is not None

    def suppressed(self, key: Any) -> int:
        """Messages suppressed for ``key`` since it was last let through."""
        with self._lock:
            entry = self._seen.get(key)
            return entry[1] if entry else 0

    def forget(self, key: Any) -> None:
        """The condition ended (e.g. destination back up): the next message goes through."""
        with self._lock:
            self._seen.pop(key, None)

    def log(
        self,
        logger: Any,
        level: str,
        key: Any,
        event: str,
        period_s: float | None = None,
        **fields: Any,
    ) -> bool:
        """Log ``event`` at ``level`` unless rate-limited; adds ``suppressed=N`` when N > 0."""
        count = self.check(key, period_s)
        if count is None:
            return False
        if count:
            fields["suppressed"] = count
        getattr(logger, level)(event, **fields)
        return True
