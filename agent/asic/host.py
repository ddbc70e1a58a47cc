"""The ASIC plugin's helper process (the child side of agent/asic/proxy.py), in Python: the
pure-Python backend's, and the C backend's fallback (the C backend runs ``swtel-asic-host``,
agent/asic/swtel_asic_host.c, the same protocol in ~1 MiB where this costs ~7).

A plugin is native code: a segfault in it, or a call that never returns, must not take
the agent with it. So the agent never loads a plugin itself: it starts this module as a
small process of its own (``python -I -c HELPER_BOOT ROOT SOCK_FD SHM_FD PARENT_PID BACKEND
PLUGIN_FD``: isolated, in an environment of its own, agent/asic/proxy.py) that loads the
plugin with the agent's own loader (the C extension's ``dlopen`` or the ctypes fallback,
``BACKEND`` ``C`` or ``python``, whichever the agent uses) and answers the agent's
requests on a UNIX stream socket, one at a time:

    frame: <u32 payload length> <u8 op> payload
    O msgpack [path, config]  -> o                      asic_open of PLUGIN_FD
    L                         -> l msgpack [gen, ports, counters]   asic_layout
    M <u64 n>                 -> m                      map n values of the shared file
    R <u64 generation>        -> r <i32 status> <i64 ts_ns>         asic_read
    C                         -> c, then exit 0         asic_close
    any request               -> e msgpack [exception class, message] on an error

The plugin is loaded through ``PLUGIN_FD``, the file the agent checked and passed open
(``dlopen("/proc/self/fd/N")``): the path, given only to name it in messages, is never
opened here, so a file swapped in on disk after the check is not the one loaded.

The values never cross the socket: ``SHM_FD`` is a memfd both processes map, and a read
is the plugin writing straight into it (``asic_read`` on a memoryview of the mapping).
The process dies with the agent (``PR_SET_PDEATHSIG``), and exits on EOF.
"""

from __future__ import annotations

# Only what the helper needs, and C modules where the stdlib's wrapper would import more
# (socket and signal import enum, typing is a megabyte): the helper is a process of its own,
# its every module is resident memory beside the agent's (docs/PERFORMANCE.md).
import _signal
import _socket
import ctypes
import gc
import mmap
import os
import struct
import sys

import msgpack

HEADER = struct.Struct("<IB")
U64 = struct.Struct("<Q")
READ_REPLY = struct.Struct("<iq")
MAX_FRAME = 64 << 20  # bytes: no request or reply is ever near this
PR_SET_PDEATHSIG = 1


def _die_with_parent(parent_pid: int) -> None:
    """SIGKILL when the agent (the thread that started us) goes, even while the plugin hangs."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, _signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):
        pass
    if os.getppid() != parent_pid:  # it died before prctl took effect
        os._exit(0)


def _reader(backend: str) -> object:
    if backend == "python":
        return _fallback_asic()
    from agent import _swtel  # the C extension itself: agent._backend would import more

    return _swtel


def _fallback_asic() -> object:
    """agent/_fallback/asic.py alone: the package's __init__ imports every other fallback
    module (the change kernel, the encoder, ...: ~3 MiB of the helper's memory), none of
    which the plugin's loader uses."""
    import importlib.util

    path = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "_fallback", "asic.py")
    spec = importlib.util.spec_from_file_location("agent._fallback.asic", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _give_back() -> None:
    """Return the memory a layout's lists used to the kernel: a full collection empties the
    interpreter's free lists (their tuples keep an arena each), glibc keeps freed heap pages
    mapped until trimmed. After the one large reply the helper only reads values into the
    shared file."""
    gc.collect()
    try:
        ctypes.CDLL(None).malloc_trim(0)
    except (OSError, AttributeError):  # not glibc
        pass


def _recv_exact(sock: _socket.socket, n: int) -> bytes:
    buf = bytearray(n)
    view, got = memoryview(buf), 0
    while got < n:
        k = sock.recv_into(view[got:])
        if k == 0:
            raise EOFError
        got += k
    return bytes(buf)


def _send(sock: _socket.socket, op: bytes, payload: bytes = b"") -> None:
    sock.sendall(HEADER.pack(len(payload), op[0]) + payload)


class Host:
    def __init__(self, sock: _socket.socket, shm_fd: int, reader: object, plugin_fd: int) -> None:
        self.sock, self.shm_fd, self.reader, self.plugin_fd = sock, shm_fd, reader, plugin_fd
        self.handle: object = None
        self.mm: mmap.mmap | None = None
        self.view: memoryview | None = None  # the n values, as u64

    def _map(self, n: int) -> None:
        if self.view is not None:
            self.view.release()
            self.view = None
        size = os.fstat(self.shm_fd).st_size
        if n * 8 > size:
            raise ValueError(f"shared buffer has {size} bytes, {n} values need {n * 8}")
        if self.mm is None or len(self.mm) != size:
            if self.mm is not None:
                self.mm.close()
            self.mm = mmap.mmap(self.shm_fd, size)
        self.view = memoryview(self.mm).cast("Q")[:n]

    def serve(self) -> None:
        r = self.reader
        while True:
            try:
                length, op = HEADER.unpack(_recv_exact(self.sock, HEADER.size))
                payload = _recv_exact(self.sock, length) if length else b""
            except (EOFError, OSError):
                return
            try:
                if op == ord("R"):
                    (gen,) = U64.unpack(payload)
                    status, ts = r.asic_read(self.handle, gen, self.view)
                    _send(self.sock, b"r", READ_REPLY.pack(status, ts))
                elif op == ord("M"):
                    self._map(U64.unpack(payload)[0])
                    _send(self.sock, b"m")
                elif op == ord("L"):
                    _send(self.sock, b"l", msgpack.packb(r.asic_layout(self.handle), use_bin_type=True))
                    _give_back()
                elif op == ord("O"):
                    label, config = msgpack.unpackb(payload, raw=False)
                    self.handle = r.asic_open(f"/proc/self/fd/{self.plugin_fd}", config, label)
                    _send(self.sock, b"o")
                elif op == ord("C"):
                    if self.handle is not None:
                        r.asic_close(self.handle)
                    _send(self.sock, b"c")
                    return
                else:
                    raise ValueError(f"unknown request {op!r}")
            except (EOFError, BrokenPipeError, ConnectionResetError):
                return
            except Exception as exc:  # noqa: BLE001 - every error goes back to the agent as text
                try:
                    _send(self.sock, b"e", msgpack.packb([type(exc).__name__, str(exc)], use_bin_type=True))
                except OSError:
                    return


def main(argv: list[str]) -> int:
    sock_fd, shm_fd, parent_pid, backend, plugin_fd = int(argv[0]), int(argv[1]), int(argv[2]), argv[3], \
        int(argv[4])
    _die_with_parent(parent_pid)
    # The agent decides when this process ends (a request, EOF or SIGKILL), not a terminal.
    for sig in (_signal.SIGINT, _signal.SIGHUP, _signal.SIGPIPE):
        _signal.signal(sig, _signal.SIG_IGN)
    sock = _socket.socket(fileno=sock_fd)
    Host(sock, shm_fd, _reader(backend), plugin_fd).serve()
    # Skip interpreter teardown: a plugin's handle may be in any state after an error.
    sys.stdout.flush()
    os._exit(0)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
