"""systemd notifications (sd_notify) without libsystemd: datagrams to $NOTIFY_SOCKET.

Every method is a cheap no-op when the agent does not run under systemd
(no NOTIFY_SOCKET), and none of them ever blocks: :meth:`Notifier.tick` is
called from the tick loop.
"""

from __future__ import annotations

import os
import socket
import threading
import time
from collections.abc import Mapping


class Notifier:
    def __init__(self, env: Mapping[str, str] = os.environ) -> None:
        self.address = _address(env.get("NOTIFY_SOCKET", ""))
        self.watchdog_s = _watchdog_period(env)
        self._sock: socket.socket | None = None
        self._lock = threading.Lock()
        self._last_watchdog = float("-inf")
        self.sent = 0  # datagrams sent, for self-metrics
        self.failed = 0
        if self.address is not None:
            self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC)

    @property
    def enabled(self) -> bool:
        return self._sock is not None

    @property
    def watchdog_enabled(self) -> bool:
        return self.enabled and self.watchdog_s is not None

    def notify(self, *fields: str) -> bool:
        """Send ``KEY=value`` lines in one datagram. False if not sent (no systemd, or an error)."""
        if self._sock is None:
            return False
        data = "\n".join(fields).encode()
        try:
            with self._lock:
                self._sock.sendto(data, socket.MSG_DONTWAIT, self.address)
        except OSError:
            self.failed += 1  # systemd gone or its queue full: never block or crash the agent
            return False
        self.sent += 1
        return True

    def ready(self, status: str | None = None) -> bool:
        fields = ["READY=1"]
        if status:
            fields.append(f"STATUS={_one_line(status)}")
        return self.notify(*fields)

    def reloading(self) -> bool:
        # systemd >= 253 (Type=notify-reload) needs MONOTONIC_USEC; older ones ignore it.
        usec = time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000
        return self.notify("RELOADING=1", f"MONOTONIC_USEC={usec}")

    def stopping(self) -> bool:
        return self.notify("STOPPING=1")

    def status(self, text: str) -> bool:
        return self.notify(f"STATUS={_one_line(text)}")

    def tick(self, now: float | None = None) -> bool:
        """Call on every tick: sends WATCHDOG=1 at most every WATCHDOG_USEC/2."""
        if self.watchdog_s is None or self._sock is None:
            return False
        now = time.monotonic() if now is None else now
        if now - self._last_watchdog < self.watchdog_s / 2:
            return False
        self._last_watchdog = now
        return self.notify("WATCHDOG=1")

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None


def _address(value: str) -> str | bytes | None:
    if not value:
        return None
    if value.startswith("@"):  # abstract namespace
        return b"\0" + value[1:].encode()
    if value.startswith("/"):
        return value
    return None  # vsock and other forms are not for a switch agent


def _watchdog_period(env: Mapping[str, str]) -> float | None:
    try:
        usec = int(env.get("WATCHDOG_USEC", ""))
    except ValueError:
        return None
    if usec <= 0:
        return None
    pid = env.get("WATCHDOG_PID")
    if pid:
        try:
            if int(pid) != os.getpid():
                return None  # meant for another process (e.g. our parent)
        except ValueError:
            return None
    return usec / 1e6


def _one_line(text: str) -> str:
    return " ".join(text.splitlines())
