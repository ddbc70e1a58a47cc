"""The agent's side of an ASIC plugin that runs in its helper process (agent/asic/host.py).

``PluginProxy`` has the reader's plugin calls (``open``, ``layout``, ``read``, ``close``,
with the results of ``asic_open``/``asic_layout``/``asic_read``/``asic_close``), but the
plugin runs in a child process: a segfault in it, a call that never returns or a plugin
path that blocks (a FIFO) costs that child, never the agent. Each call has a deadline;
on a crash, an early exit or a timeout the child is killed (SIGKILL) and reaped, and the
call raises ``PluginFault`` (an OSError) naming the plugin, the call and the signal or
the timeout: ``asic plugin /x.so crashed with SIGSEGV in read``,
``asic plugin /x.so: open timed out after 5 s``. The proxy is then closed; a new one
starts a new child. The plugin's own errors (its ``open`` or ``read`` error text, a
missing symbol) are raised exactly as the in-process loader raises them.

Values go through shared memory: a memfd both processes map; the plugin's ``read``
writes into it and the agent copies it into the source's buffer, so a read costs one
small request and reply on a socketpair plus one memcpy.

``abort()`` may be called from another thread (the agent is stopping): the child is
killed at once and a call waiting on it returns with ``PluginAborted``.

``start``/``poll_open`` and ``read(..., wait_s)`` never hold the caller longer than it
asks: the agent's tick thread gives a slow plugin a few milliseconds per pass and
collects the answer at a later pass.

The helper is tied to the thread that started it (``PR_SET_PDEATHSIG`` fires when that
thread ends): in the agent, the engine's tick thread, which lives as long as the agent.

Which helper: with the C backend, the C program built with the extension
(``swtel-asic-host`` beside this file, agent/asic/swtel_asic_host.c: ~1 MiB where a Python
interpreter costs ~7), once its ``--version`` says it is this build's (a stale binary from
another build is refused, logged once); otherwise, and with the pure-Python backend, the
Python helper (agent/asic/host.py). Both speak the same protocol; ``helper`` says which runs.
"""

from __future__ import annotations

import mmap
import os
import select
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

import msgpack

from agent import logs
from agent.asic.host import HEADER, MAX_FRAME, READ_REPLY, U64

log = logs.get("asic")

OPEN_TIMEOUT_S = 5.0  # open, the helper's start-up included
LAYOUT_TIMEOUT_S = 10.0  # layout (the largest accepted one lists in up to 2.5 s with ctypes)
READ_TIMEOUT_MIN_S = 1.0  # read: max(this, READ_TIMEOUT_INTERVALS x the source's interval)
READ_TIMEOUT_INTERVALS = 10
OPEN_WAIT_S = 0.005  # per tick-thread pass, while the helper starts and opens the plugin
READ_WAIT_MAX_S, READ_WAIT_FRACTION = 0.02, 0.2  # per pass, a read waits min(20 ms, interval / 5)
CLOSE_TIMEOUT_S = 0.5  # close: the child is killed when it has not answered by then
EXIT_WAIT_S = 0.5  # after EOF, how long the child may take to become reapable
RESTART_FIRST_S, RESTART_MAX_S = 1.0, 60.0  # restart backoff after a fault: 1 s doubling to 60 s
_SLICE_S = 0.05  # waits wake this often to notice abort()
READ_PENDING = 1  # read(wait_s=...): the plugin's read is still running (not a plugin status)
ASIC_ECHANGED = -2

_EXC = {"ValueError": ValueError, "TypeError": TypeError, "MemoryError": MemoryError}


class PluginFault(OSError):
    """The plugin crashed, exited or hung in a call; its helper is gone."""

    def __init__(self, message: str, call: str, reason: str) -> None:
        super().__init__(message)
        self.call, self.reason = call, reason


class PluginAborted(OSError):
    """The call was cut short by ``abort()`` (the agent is stopping)."""


def read_timeout(interval_s: float) -> float:
    """How long a read may run before its helper is killed."""
    return max(READ_TIMEOUT_MIN_S, READ_TIMEOUT_INTERVALS * interval_s)


def read_wait(interval_s: float) -> float:
    """How long the tick thread waits for a read before going on (the read is collected on
    a later pass): a slow or hung plugin never holds the other sources back longer."""
    return min(READ_WAIT_MAX_S, READ_WAIT_FRACTION * interval_s)


class Backoff:
    """Restart delays after faults: 1 s, 2 s, 4 s ... 60 s; back to 1 s once the plugin has
    run a full ``RESTART_MAX_S`` without a fault."""

    def __init__(self, first: float = RESTART_FIRST_S, cap: float = RESTART_MAX_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.first, self.cap = first, cap
        self.clock = clock  # monotonic seconds; a test's own clock drives the delays
        self.delay = 0.0  # the last delay given (0: none yet)
        self.faults = 0
        self._last_fault = -float("inf")

    def fault(self) -> float:
        """A fault now: the delay before the next start."""
        now = self.clock()
        self.faults += 1
        if now - self._last_fault > self.delay + self.cap:
            self.delay = self.first  # the first fault, or the plugin had run a full cap since the last
        else:
            self.delay = min(self.cap, self.delay * 2)
        self._last_fault = now
        return self.delay


def _backend_name() -> str:
    from agent import _backend

    return "C" if _backend.NAME == "C" else "python"


#: the helper's whole environment: none of the agent's (a PYTHONPATH, LD_PRELOAD or
#: LD_LIBRARY_PATH set for the agent never reaches the plugin's process)
HELPER_ENV = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "LANG": "C.UTF-8"}
#: the helper's program: ``python -I`` (isolated: no PYTHON* variables, no user site, no
#: script directory on the path), told where this agent package is by argument
HELPER_BOOT = ("import sys; sys.path.insert(0, sys.argv[1]); from agent.asic.host import main; "
               "sys.exit(main(sys.argv[2:]))")


#: the C helper (agent/asic/swtel_asic_host.c), built by setup.py beside this file
C_HOST = os.path.join(os.path.dirname(os.path.abspath(__file__)), "swtel-asic-host")
#: the protocol this proxy speaks: the C helper's ``--version`` names the one it speaks
HOST_PROTOCOL = 1
_C_HOST_CHECKED: dict[str, bool] = {}  # path -> its --version is this build's (asked once a process)


def c_host() -> str | None:
    """The C helper's path when the agent's backend is C and the binary there is this
    build's (its ``--version``: the agent's version and ``HOST_PROTOCOL``); else None, and
    the Python helper runs. A binary that is missing or answers otherwise is logged once."""
    if _backend_name() != "C":
        return None
    path = C_HOST
    ok = _C_HOST_CHECKED.get(path)
    if ok is None:
        ok = _C_HOST_CHECKED[path] = _is_this_builds(path)
    return path if ok else None


def _is_this_builds(path: str) -> bool:
    from agent import __version__

    want = f"swtel-asic-host {__version__} protocol {HOST_PROTOCOL}"
    if not os.path.isfile(path) or not os.access(path, os.X_OK):
        log.warning("asic plugin helper: no C helper; the Python helper runs instead", path=path)
        return False
    try:
        run = subprocess.run([path, "--version"], env=dict(HELPER_ENV), cwd="/", stdin=subprocess.DEVNULL,
                             capture_output=True, text=True, timeout=OPEN_TIMEOUT_S, check=False)
        got = run.stdout.strip()
    except (OSError, subprocess.SubprocessError, UnicodeDecodeError) as exc:
        got = f"({exc})"
    if got != want:
        log.warning("asic plugin helper: the C helper is another build's; the Python helper runs instead",
                    path=path, version=got, expected=want)
        return False
    return True


def _package_root() -> str:
    """The directory this agent package was imported from, so the child runs the very same
    package (a source tree, a venv or the .deb)."""
    import agent

    return os.path.dirname(os.path.dirname(os.path.abspath(agent.__file__)))


def _stderr_fd() -> int:
    """The helper's stdout goes to the agent's stderr (the log): never into stdout, where
    the jsonl exporter may write."""
    try:
        os.fstat(2)
    except OSError:
        return subprocess.DEVNULL
    return 2


class PluginProxy:
    def __init__(self, read_timeout_s: float = READ_TIMEOUT_MIN_S, open_timeout_s: float = OPEN_TIMEOUT_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        #: the deadlines' clock (monotonic seconds): a test steps its own to judge them
        self.clock = clock
        self.read_timeout_s = read_timeout_s
        self.open_timeout_s = open_timeout_s
        self.path = ""
        self.proc: subprocess.Popen | None = None
        self._sock: socket.socket | None = None
        self._shm_fd = -1
        self._mm: mmap.mmap | None = None
        self._mv: memoryview | None = None
        self._mapped = -1  # values the child has mapped (M), -1: none yet
        self._aborted = False
        self._buf = bytearray()
        #: the request in flight: (op, call, deadline), or None
        self._pending: tuple[int, str, float] | None = None
        self._read_n = 0  # the values the read in flight was asked for
        #: which helper runs the plugin: "c" (swtel-asic-host) or "python" (host.py); None before one starts
        self.helper: str | None = None

    # ------------------------------------------------------------ the calls
    def open(self, path: str, config: str, fd: int | None = None) -> None:
        """Start the helper and open the plugin in it (asic_open); blocks until it answers.
        ``fd``: as for ``start``."""
        self.start(path, config, fd)
        self._finish(None)

    def start(self, path: str, config: str, fd: int | None = None) -> None:
        """Start the helper and ask it to open the plugin, without waiting: ``poll_open``
        collects the answer (so the agent's tick thread never waits out a slow ``open``).

        ``fd`` is the plugin file, open: the descriptor ``trust.open_checked`` checked. The
        helper gets a copy and loads ``/proc/self/fd/N``, so the file loaded is the one
        checked, whatever ``path`` names by then (the caller keeps and closes ``fd``).
        Without it the proxy opens ``path`` itself, unchecked (tests, benchmarks)."""
        if self.proc is not None:
            raise ValueError("asic plugin proxy is already open")
        self.path = path
        deadline = self.clock() + self.open_timeout_s
        own = fd is None
        if own:
            try:  # O_NONBLOCK: a FIFO does not block here (the helper's dlopen of it does)
                fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY)
            except OSError as exc:
                raise OSError(f"asic plugin {path}: cannot load: {exc.strerror or exc}") from None
        try:
            self._spawn(fd)
        finally:
            if own:
                os.close(fd)
        self._request(b"O", msgpack.packb([path, config], use_bin_type=True), "open", deadline)

    def poll_open(self, wait_s: float = 0.0) -> bool:
        """True once the plugin is open; False while its open is still running (for up to
        ``open_timeout_s`` from ``start``). Raises what ``open`` raises."""
        if self._pending is None or self._pending[0] != ord("O"):
            if self.proc is None:
                raise ValueError("asic plugin handle is closed")
            return True
        return self._finish(self.clock() + wait_s) is not None

    def layout(self) -> tuple[int, list[tuple], list[list[tuple]]]:
        payload = self._call(b"L", b"", "layout", self.clock() + LAYOUT_TIMEOUT_S)
        gen, ports, counters = msgpack.unpackb(payload, raw=False)
        # msgpack gives lists: back to the reader's tuples ((low, high) pairs for the bins)
        return gen, [tuple(p) for p in ports], [
            [(*c[:4], tuple(tuple(b) for b in c[4])) for c in row] for row in counters]

    def read(self, generation: int, values: Any, wait_s: float | None = None) -> tuple[int, int]:
        """One bulk read into ``values`` (a writable buffer of u64, the layout's length).

        With ``wait_s`` the call waits at most that long and returns ``(READ_PENDING, 0)``
        while the plugin's read is still running; a later call (any generation) collects
        that same read, until ``read_timeout_s`` after it was asked for (then: PluginFault)."""
        if self.proc is None:
            raise ValueError("asic plugin handle is closed")
        out = memoryview(values).cast("B")
        n = out.nbytes // 8
        now = self.clock()
        if self._pending is None:
            if n != self._mapped:
                self._map(n)
            self._read_n = n
            self._request(b"R", U64.pack(generation), "read", now + self.read_timeout_s)
        elif self._pending[0] != ord("R"):
            raise ValueError(f"asic plugin {self.path}: {self._pending[1]} still in flight")
        payload = self._finish(None if wait_s is None else now + wait_s)
        if payload is None:
            return READ_PENDING, 0
        status, ts = READ_REPLY.unpack(payload)
        if status == 0 and n != self._read_n:
            return ASIC_ECHANGED, ts  # the buffer was resized while the read ran: read again
        if status == 0 and n:
            out[:] = self._mv[: n * 8]
        return status, ts

    def close(self) -> None:
        """Close the plugin; a helper that does not answer within CLOSE_TIMEOUT_S is killed."""
        if self.proc is None:
            return
        try:
            if self.proc.poll() is None and self._sock is not None:
                soon = self.clock() + CLOSE_TIMEOUT_S
                if self._pending is None or self._finish(soon) is not None:
                    self._call(b"C", b"", "close", soon)
        except (OSError, ValueError, TypeError, MemoryError):
            pass
        self._teardown()

    def abort(self) -> None:
        """From any thread: kill the helper now; a call waiting on it raises PluginAborted."""
        self._aborted = True
        proc = self.proc
        if proc is not None:
            try:
                proc.kill()
            except OSError:
                pass

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    # ------------------------------------------------------------ machinery
    def _spawn(self, plugin_fd: int) -> None:
        parent, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            self._shm_fd = os.memfd_create("swtel-asic-values", os.MFD_CLOEXEC)
            os.ftruncate(self._shm_fd, 8)
            host = c_host()
            if host is not None:
                cmd = [host, str(child.fileno()), str(self._shm_fd), str(os.getpid()), str(plugin_fd)]
            else:
                cmd = [sys.executable, "-I", "-c", HELPER_BOOT, _package_root(), str(child.fileno()),
                       str(self._shm_fd), str(os.getpid()), _backend_name(), str(plugin_fd)]
            self.helper = "python" if host is None else "c"
            self.proc = subprocess.Popen(
                cmd, pass_fds=(child.fileno(), self._shm_fd, plugin_fd), env=dict(HELPER_ENV), cwd="/",
                stdin=subprocess.DEVNULL,
                stdout=_stderr_fd(),
                start_new_session=True)
        except OSError as exc:
            parent.close()
            self._teardown()
            raise PluginFault(f"asic plugin {self.path}: cannot start its helper process: {exc}",
                              "open", "spawn") from None
        finally:
            child.close()
        parent.setblocking(False)
        self._sock = parent
        if self._aborted:  # abort() came before there was a process to kill
            self.proc.kill()

    def _map(self, n: int) -> None:
        size = max(8, n * 8)
        if self._mm is None or len(self._mm) < size:
            if self._mv is not None:
                self._mv.release()
            if self._mm is not None:
                self._mm.close()
            os.ftruncate(self._shm_fd, size)
            self._mm = mmap.mmap(self._shm_fd, size)
            self._mv = memoryview(self._mm)
        self._call(b"M", U64.pack(n), "read", self.clock() + self.read_timeout_s)
        self._mapped = n

    def _request(self, op: bytes, payload: bytes, call: str, deadline: float) -> None:
        if self.proc is None or self._sock is None:
            raise ValueError("asic plugin handle is closed")
        frame = HEADER.pack(len(payload), op[0]) + payload
        self._pending = (op[0], call, deadline)
        try:
            sent = self._sock.send(frame)
        except BlockingIOError:
            sent = 0
        except OSError:
            self._fail(call, "eof")
        if sent < len(frame):
            self._send_rest(memoryview(frame)[sent:], call, deadline)

    def _finish(self, soft: float | None) -> bytes | None:
        """The reply to the request in flight; None when ``soft`` passed first."""
        op, call, deadline = self._pending
        got = self._recv_frame(call, deadline, soft)
        if got is None:
            return None
        self._pending = None
        rop, body = got
        if rop == ord("e"):
            kind, message = msgpack.unpackb(body, raw=False)
            raise _EXC.get(kind, OSError)(message)
        if rop != op + 32:  # the lowercase letter
            self._fail(call, f"protocol error (reply {rop!r} to {op!r})")
        return body

    def _call(self, op: bytes, payload: bytes, call: str, deadline: float) -> bytes:
        if self._pending is not None:  # a read still running: its answer comes first
            try:
                self._finish(None)
            except (OSError, ValueError, TypeError, MemoryError):
                if self.proc is None:  # a fault: the helper is gone
                    raise
                # else an error of the plugin's own in that read: the helper is fine
        self._request(op, payload, call, deadline)
        return self._finish(None)

    def _send_rest(self, view: memoryview, call: str, deadline: float) -> None:
        while view:
            self._wait(select.POLLOUT, call, deadline, None)
            try:
                view = view[self._sock.send(view):]
            except BlockingIOError:
                continue
            except OSError:
                self._fail(call, "eof")

    def _wait(self, event: int, call: str, deadline: float, soft: float | None) -> bool:
        """Wait for ``event`` on the socket: True when it came, False when ``soft`` passed;
        a passed ``deadline`` is a fault (the helper is killed)."""
        poller = select.poll()
        poller.register(self._sock, event)
        while True:
            if self._aborted:
                self._fail(call, "aborted")
            now = self.clock()
            if now >= deadline:
                self._fail(call, "timeout")
            until = deadline if soft is None else min(deadline, soft)
            if soft is not None and now >= soft:
                return False
            if poller.poll(max(0.0, min(until - now, _SLICE_S)) * 1000):
                return True

    def _recv_frame(self, call: str, deadline: float, soft: float | None) -> tuple[int, bytes] | None:
        buf = self._buf
        while True:
            if len(buf) >= HEADER.size:
                length, rop = HEADER.unpack_from(buf)
                if length > MAX_FRAME:
                    self._fail(call, f"protocol error (a {length}-byte reply)")
                end = HEADER.size + length
                if len(buf) >= end:
                    body = bytes(buf[HEADER.size:end])
                    del buf[:end]
                    return rop, body
            want = 65536
            if len(buf) >= HEADER.size:  # a large reply (a layout): take the rest in few calls
                want = max(want, min(HEADER.size + HEADER.unpack_from(buf)[0] - len(buf), 4 << 20))
            try:
                chunk = self._sock.recv(want)
            except BlockingIOError:
                if not self._wait(select.POLLIN, call, deadline, soft):
                    return None
                continue
            except OSError:
                chunk = b""
            if not chunk:
                self._fail(call, "eof")
            buf += chunk

    def _fail(self, call: str, why: str) -> None:
        """The helper is gone or stuck: kill and reap it, and raise what happened."""
        proc = self.proc
        if self._aborted or why == "aborted":
            self._teardown()
            raise PluginAborted(f"asic plugin {self.path}: {call} cut short (the agent is stopping)")
        if why == "timeout":
            limit = {"read": self.read_timeout_s, "close": CLOSE_TIMEOUT_S, "layout": LAYOUT_TIMEOUT_S}.get(
                call, self.open_timeout_s)
            self._teardown()
            raise PluginFault(f"asic plugin {self.path}: {call} timed out after {limit:g} s", call, "timeout")
        rc = None
        if proc is not None:
            try:
                rc = proc.wait(EXIT_WAIT_S)
            except subprocess.TimeoutExpired:
                rc = None
        self._teardown()
        if rc is not None and rc < 0:
            try:
                name = signal.Signals(-rc).name
            except ValueError:
                name = f"signal {-rc}"
            raise PluginFault(f"asic plugin {self.path} crashed with {name} in {call}", call, name)
        if rc is not None:
            raise PluginFault(f"asic plugin {self.path}: its helper exited with status {rc} in {call}",
                              call, f"exit {rc}")
        reason = "closed its socket" if why == "eof" else why
        raise PluginFault(f"asic plugin {self.path}: helper {reason} in {call}", call, why)

    def _teardown(self) -> None:
        proc, self.proc = self.proc, None
        if proc is not None:
            if proc.poll() is None:
                try:
                    proc.kill()
                except OSError:
                    pass
            try:
                proc.wait(2.0)
            except subprocess.TimeoutExpired:  # unkillable (D state): leave it to init
                pass
        if self._sock is not None:
            self._sock.close()
            self._sock = None
        if self._mv is not None:
            self._mv.release()
            self._mv = None
        if self._mm is not None:
            self._mm.close()
            self._mm = None
        if self._shm_fd >= 0:
            os.close(self._shm_fd)
            self._shm_fd = -1
        self._mapped = -1
        self._buf = bytearray()
        self._pending = None

    def __del__(self) -> None:
        try:
            if self.proc is not None:
                self._teardown()
        except Exception:  # noqa: BLE001, S110 - interpreter shutdown
            pass
