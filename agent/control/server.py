"""The control socket: a UNIX stream socket answering length-prefixed msgpack requests.

Runs on its own threads (one acceptor, one per connection, bounded), so a slow
or hostile client can delay only itself: never the tick loop, never another
client. Handlers run on the connection's thread.

Rules, per connection: each request frame must arrive whole within
``timeout_s``; a malformed, oversized or unknown request gets an error reply (kind
``request``) and the connection is closed; a handler that raises gets an error reply of
kind ``agent`` (the agent is there, and failed) and the connection stays usable.

Idle connections cannot hold the socket: when every slot is taken, the connection
that has waited longest for a request (idle, or sending one slowly) is closed to
make room for the new one. Only when every slot is busy running a command does a
new client get the distinct ``busy`` answer.
"""

from __future__ import annotations

import contextlib
import errno
import grp
import os
import selectors
import socket
import stat
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from agent import logs
from agent.control.protocol import (
    KIND_AGENT,
    KIND_BUSY,
    KIND_REQUEST,
    MAX_REPLY,
    MAX_REQUEST,
    PeerClosed,
    ProtocolError,
    pack,
    read_frame,
)
from agent.signals import Wakeup

if TYPE_CHECKING:
    from agent.config import Control

Handler = Callable[[dict[str, Any]], Any]
#: Connections the kernel queues before the acceptor takes them: a burst of clients waits
#: here instead of failing with EAGAIN (the kernel caps it at net.core.somaxconn).
LISTEN_BACKLOG = 128
#: A connection is idle, and may be closed to make room, once it has waited this long for
#: its request; younger ones are still sending theirs.
EVICT_AFTER_S = 0.5
log = logs.get("control")


class ControlServerError(RuntimeError):
    """The socket cannot be set up (e.g. another agent holds it)."""


class ControlServer:
    def __init__(
        self,
        control_cfg: Control,
        handlers: dict[str, Handler],
        *,
        timeout_s: float = 5.0,
        max_clients: int = 8,
        max_request: int = MAX_REQUEST,
    ) -> None:
        self.path = control_cfg.socket
        self.mode = int(control_cfg.mode)
        self.group = control_cfg.group
        self.handlers = dict(handlers)
        self.handlers.setdefault("ping", lambda _req: "pong")
        self.timeout_s = timeout_s
        self.max_request = max_request
        self._slots = threading.BoundedSemaphore(max_clients)
        self._listener: socket.socket | None = None
        self._inode: tuple[int, int] | None = None
        self._wakeup: Wakeup | None = None  # ends the accept loop's select at stop
        self._thread: threading.Thread | None = None
        self._conns: set[socket.socket] = set()
        self._waiting: dict[socket.socket, float] = {}  # connection -> since when it waits for a request
        self._workers: set[threading.Thread] = set()
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._log = logs.RateLimiter(10.0)  # e.g. EMFILE on every accept: once per 10 s
        self.stats = {"connections": 0, "requests": 0, "errors": 0, "rejected": 0, "evicted": 0}

    # ---------------------------------------------------------------- lifecycle

    def start(self) -> None:
        """Create the socket; raise :class:`ControlServerError` with the reason if it cannot."""
        try:
            os.makedirs(os.path.dirname(self.path) or ".", mode=0o755, exist_ok=True)
        except OSError as exc:
            raise ControlServerError(f"cannot create the directory of {self.path}: {exc.strerror}") from None
        _claim(self.path)
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
        try:
            sock.bind(self.path)
            st = os.stat(self.path)
            self._inode = (st.st_dev, st.st_ino)
            os.chmod(self.path, self.mode)
        except OSError as exc:
            sock.close()
            raise ControlServerError(f"cannot set up control socket {self.path}: {exc.strerror}") from None
        self._set_group()
        sock.listen(LISTEN_BACKLOG)
        sock.setblocking(False)
        self._listener = sock
        self._wakeup = Wakeup()
        self._stopping.clear()
        self._thread = threading.Thread(target=self._accept_loop, name="swtel-control", daemon=True)
        self._thread.start()
        log.info("control socket listening", path=self.path, mode=f"{self.mode:04o}")

    def stop(self, timeout: float = 2.0) -> None:
        if self._listener is None:
            return
        self._stopping.set()
        if self._wakeup is not None:
            self._wakeup.wake()
        if self._thread is not None:
            self._thread.join(timeout)
        with self._lock:
            for conn in self._conns:
                with contextlib.suppress(OSError):
                    conn.shutdown(socket.SHUT_RDWR)  # wakes a worker blocked in recv
            workers = list(self._workers)
        for worker in workers:
            worker.join(timeout)
        self._listener.close()
        self._listener = None
        if self._wakeup is not None:
            self._wakeup.close()
            self._wakeup = None
        self._remove_own_socket()

    def _set_group(self) -> None:
        if not self.group:
            return
        try:
            gid = grp.getgrnam(self.group).gr_gid
        except KeyError:
            log.warning("control socket group does not exist; keeping the agent's group",
                        group=self.group, path=self.path)
            return
        try:
            os.chown(self.path, -1, gid)
        except OSError as exc:
            log.warning("cannot set control socket group", group=self.group, error=exc.strerror)

    def _remove_own_socket(self) -> None:
        """Unlink the socket file unless someone else has replaced it meanwhile."""
        try:
            st = os.stat(self.path)
            if (st.st_dev, st.st_ino) == self._inode:
                os.unlink(self.path)
        except OSError:
            pass

    # ---------------------------------------------------------------- accepting

    def _accept_loop(self) -> None:
        assert self._listener is not None and self._wakeup is not None
        wake_fd = self._wakeup.fileno()
        with selectors.DefaultSelector() as sel:
            sel.register(self._listener, selectors.EVENT_READ)
            sel.register(wake_fd, selectors.EVENT_READ)
            while not self._stopping.is_set():
                for key, _ in sel.select():
                    if key.fd == wake_fd:
                        return
                    self._accept_one()

    def _accept_one(self) -> None:
        assert self._listener is not None
        try:
            conn, _ = self._listener.accept()
        except (BlockingIOError, InterruptedError):
            return
        except OSError as exc:  # EMFILE and friends: back off by returning to select
            if exc.errno not in (errno.ECONNABORTED,):
                self._log.log(log, "warning", ("accept", exc.errno), "control accept failed",
                              error=exc.strerror)
            return
        conn.settimeout(self.timeout_s)
        self._count("connections")
        if not self._slots.acquire(blocking=False) and not self._evict_idle():
            self._count("rejected")
            with contextlib.suppress(OSError):
                conn.settimeout(0.2)
                conn.sendall(pack({"ok": False, "error": "busy: too many control connections", "kind": KIND_BUSY}))
                _linger(conn, timeout_s=0.0)  # drain only what already arrived: never wait here
            conn.close()
            return
        worker = threading.Thread(target=self._serve, args=(conn,), name="swtel-control-conn", daemon=True)
        with self._lock:
            self._conns.add(conn)
            self._workers.add(worker)
        worker.start()

    def _evict_idle(self) -> bool:
        """Close the connection that has waited longest for a request and take its slot
        (waiting up to 1 s for its worker to let go); False if none has waited for
        :data:`EVICT_AFTER_S`. A client that connected a moment ago is sending its request:
        closing it would lose that request, so in a burst new clients get ``busy`` (and
        retry) instead of closing each other's fresh connections."""
        with self._lock:
            if not self._waiting:
                return False
            victim = min(self._waiting, key=self._waiting.__getitem__)
            if time.monotonic() - self._waiting[victim] < EVICT_AFTER_S:
                return False
            del self._waiting[victim]
        with contextlib.suppress(OSError):
            victim.shutdown(socket.SHUT_RDWR)  # its worker's read fails; the worker ends
        self._count("evicted")
        return self._slots.acquire(timeout=1.0)

    # ---------------------------------------------------------------- one connection

    def _serve(self, conn: socket.socket) -> None:
        try:
            while not self._stopping.is_set():
                if not self._serve_one(conn):
                    return
        finally:
            with self._lock:
                self._conns.discard(conn)
                self._waiting.pop(conn, None)
                self._workers.discard(threading.current_thread())
            conn.close()
            self._slots.release()

    def _serve_one(self, conn: socket.socket) -> bool:
        """Answer one request; False when the connection must close."""
        with self._lock:
            self._waiting[conn] = time.monotonic()
        try:
            request = read_frame(conn, self.max_request, self.timeout_s)
        except PeerClosed:
            return False
        except ProtocolError as exc:
            return self._fail(conn, str(exc))
        except OSError:
            return False
        finally:
            with self._lock:
                evicted = self._waiting.pop(conn, None) is None
        if evicted:
            return False  # its slot went to a newer client
        cmd = request.get("cmd")
        if not isinstance(cmd, str):
            return self._fail(conn, "request needs a string 'cmd'")
        handler = self.handlers.get(cmd)
        if handler is None:
            known = ", ".join(sorted(self.handlers))
            return self._fail(conn, f"unknown command {cmd[:64]!r}; known: {known}")
        self._count("requests")
        try:
            reply = {"ok": True, "result": handler(request)}
        except Exception as exc:  # a handler bug must not take the socket down
            self._count("errors")
            log.error("control command failed", cmd=cmd, error=str(exc), exc_info=True)
            reply = agent_error(f"{cmd} failed: {exc}")
        try:
            frame = pack(reply)
        except Exception as exc:
            self._count("errors")
            frame = pack(agent_error(f"{cmd}: reply not encodable: {exc}"))
        if len(frame) > MAX_REPLY:
            self._count("errors")
            frame = pack(agent_error(f"{cmd}: reply of {len(frame)} bytes is too large"))
        return self._send(conn, frame)

    def _fail(self, conn: socket.socket, error: str) -> bool:
        self._count("errors")
        if self._send(conn, pack({"ok": False, "error": error, "kind": KIND_REQUEST})):
            _linger(conn)
        return False

    def stats_copy(self) -> dict[str, int]:
        """The counters, copied under the lock the connection threads count under."""
        with self._lock:
            return dict(self.stats)

    def _count(self, what: str) -> None:
        with self._lock:
            self.stats[what] += 1

    def _send(self, conn: socket.socket, frame: bytes) -> bool:
        try:
            conn.settimeout(self.timeout_s)  # total for sendall (Python >= 3.5)
            conn.sendall(frame)
            return True
        except OSError:
            return False


def agent_error(error: str) -> dict[str, Any]:
    """The reply to a command that failed inside the agent (a handler that raised, a reply
    that cannot be sent): the agent is there and says what went wrong with itself."""
    return {"ok": False, "error": error, "kind": KIND_AGENT}


def _linger(conn: socket.socket, limit: int = 4 * MAX_REQUEST, timeout_s: float = 0.5) -> None:
    """Close gracefully after an error reply. Closing a UNIX socket with unread input
    makes the peer's recv() fail with ECONNRESET, losing the reply: so signal EOF,
    then discard what the client still sends (bounded in bytes and time)."""
    with contextlib.suppress(OSError):
        conn.shutdown(socket.SHUT_WR)
        deadline = time.monotonic() + timeout_s
        while limit > 0:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                conn.setblocking(False)  # one last non-blocking read of what is queued
            else:
                conn.settimeout(remaining)
            chunk = conn.recv(65536)
            if not chunk:
                return
            limit -= len(chunk)


def _claim(path: str) -> None:
    """Remove a stale socket left by a crash; refuse one a live agent answers on."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    if not stat.S_ISSOCK(st.st_mode):
        raise ControlServerError(f"{path} exists and is not a socket; refusing to replace it")
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
    probe.settimeout(1.0)
    try:
        probe.connect(path)
    except (ConnectionRefusedError, FileNotFoundError):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
        log.info("removed stale control socket", path=path)
        return
    except OSError as exc:
        raise ControlServerError(f"cannot tell whether {path} is in use: {exc}") from None
    finally:
        probe.close()
    raise ControlServerError(
        f"another swtel agent is already listening on {path}; stop it or set control.socket"
    )
