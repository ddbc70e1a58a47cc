"""Signal handlers that cannot stop the main thread for good.

A Python signal handler runs in the main thread between two bytecodes, wherever that thread
is: possibly inside ``threading.Event.wait()``, which holds the Event's lock (not reentrant)
while it reads the flag and enters or leaves its wait. ``Event.set()`` from the handler then
waits for that lock forever: the main thread never runs again and the process never ends
(``swtel fabric`` hung on a SIGHUP this way on a loaded CI machine; the agent's own SIGTERM and
SIGHUP handlers had the same shape). The handlers here take no lock: they note the signal in
a plain attribute and write a byte to a pipe, and the main thread waits on that pipe (the
self-pipe trick: a write to a non-blocking pipe cannot wait on anything)."""

from __future__ import annotations

import math
import os
import select
import signal

#: more than a Linux pipe holds by default (64 KiB): one read drains it
PIPE_BUF_MAX = 1 << 17


class Wakeup:
    """Wakes :meth:`wait`, from a signal handler or from any thread. A wake that comes while
    nobody waits is kept for the next wait; several are one."""

    def __init__(self) -> None:
        self._r, self._w = os.pipe2(os.O_CLOEXEC | os.O_NONBLOCK)
        # poll, not select: a busy agent's descriptors may number past select's 1024
        self._poll = select.poll()
        self._poll.register(self._r, select.POLLIN)

    def fileno(self) -> int:
        """The read end, for a selector that waits on other descriptors as well."""
        return self._r

    def wake(self) -> None:
        w = self._w
        if w < 0:  # closed: nobody will wait again
            return
        try:
            os.write(w, b"\0")
        except BlockingIOError:  # the pipe is full: a wake is pending anyway
            pass

    def wait(self, timeout: float | None) -> bool:
        """Until a wake or ``timeout`` seconds (None: no bound); True when woken. The wakes so
        far are used up. A signal that interrupts the wait runs its handler, which wakes it."""
        if self._r < 0:  # closed
            return False
        ready = self._poll.poll(None if timeout is None else max(0, math.ceil(timeout * 1000)))
        if not ready:
            return False
        try:  # one read takes what a pipe can hold: the wakes so far are one
            os.read(self._r, PIPE_BUF_MAX)
        except BlockingIOError:  # another wait took them
            pass
        return True

    def close(self) -> None:
        r, w = self._r, self._w
        self._r = self._w = -1  # first: a handler that runs between the two closes writes nothing
        for fd in (w, r):
            if fd >= 0:
                os.close(fd)


class StopSignals:
    """The signals that end a command (``swtel fabric``, ``demo``, ``collect``,
    ``tunnel-server``): which came, and a wait that returns as soon as one does. Reads like a
    ``threading.Event`` that only the signals set (``is_set``, ``wait``)."""

    def __init__(self, *signums: int) -> None:
        self.received: list[int] = []
        self._wakeup = Wakeup()
        for signum in signums:
            signal.signal(signum, self._on_signal)

    def _on_signal(self, signum: int, _frame: object) -> None:
        self.received.append(signum)  # a list's append takes no lock the main thread could hold
        self._wakeup.wake()

    def is_set(self) -> bool:
        return bool(self.received)

    def got(self, signum: int) -> bool:
        return signum in self.received

    def wait(self, timeout: float | None) -> bool:
        """Until a signal came or ``timeout`` seconds; whether one came."""
        if not self.received:
            self._wakeup.wait(timeout)
        return self.is_set()
