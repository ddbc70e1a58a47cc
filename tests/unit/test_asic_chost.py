"""The ASIC plugin's helper process in C (agent/asic/swtel_asic_host.c, issue 35 item 4).

Driven directly over a socketpair with the simulated switch: it answers as the Python
helper (agent/asic/host.py) does, byte for byte, reads the model's values into the shared
file, and answers a malformed request with ``e`` or ends (EOF, exit 0), never a crash.
Through the proxy: the C backend runs it, the pure-Python backend the Python helper, and a
binary of another build is refused (asked once) in favour of the Python helper.
"""

from __future__ import annotations

import mmap
import os
import re
import socket
import struct
import subprocess
import sys
import time
from pathlib import Path

import msgpack
import pytest

from agent import _backend
from agent.asic import proxy as proxy_mod
from agent.asic import resolve
from agent.asic.host import HEADER, READ_REPLY, U64
from agent.asic.proxy import C_HOST, HELPER_BOOT, HELPER_ENV, PluginProxy, _package_root
from tests import sim_model

ASIC_ECHANGED = -2


def _built() -> str:
    if not os.access(C_HOST, os.X_OK):
        pytest.skip("the C helper is not built (python setup.py build_ext --inplace)")
    return C_HOST


class Driven:
    """One helper process (``kind``: "c" or "python"), its socket and shared file, the sim's
    library open as its plugin descriptor, driven frame by frame."""

    def __init__(self, kind: str, plugin: str | None = None) -> None:
        parent, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock = parent
        self.sock.settimeout(30)  # a hung helper fails the test, it does not hang it
        self.shm = os.memfd_create("test-asic-values", os.MFD_CLOEXEC)
        os.ftruncate(self.shm, 8)
        self.plugin_fd = os.open(plugin or resolve("sim"), os.O_RDONLY | os.O_CLOEXEC)
        fds = [str(child.fileno()), str(self.shm), str(os.getpid())]
        if kind == "c":
            cmd = [_built(), *fds, str(self.plugin_fd)]
        else:  # the Python helper with the ctypes loader: the other implementation of the rules
            cmd = [sys.executable, "-I", "-c", HELPER_BOOT, _package_root(), *fds, "python", str(self.plugin_fd)]
        try:
            self.proc = subprocess.Popen(cmd, pass_fds=(child.fileno(), self.shm, self.plugin_fd),
                                         env=dict(HELPER_ENV), cwd="/", stdin=subprocess.DEVNULL)
        finally:
            child.close()

    def send(self, op: bytes, payload: bytes = b"") -> None:
        self.sock.sendall(HEADER.pack(len(payload), op[0]) + payload)

    def _exact(self, n: int) -> bytes | None:
        out = b""
        while len(out) < n:
            chunk = self.sock.recv(n - len(out))
            if not chunk:
                return None
            out += chunk
        return out

    def reply(self) -> tuple[bytes, bytes] | None:
        """The next reply (op, payload), or None at EOF."""
        head = self._exact(HEADER.size)
        if head is None:
            return None
        length, op = HEADER.unpack(head)
        body = self._exact(length)
        assert body is not None, "a reply cut short"
        return bytes([op]), body

    def call(self, op: bytes, payload: bytes = b"") -> tuple[bytes, bytes]:
        self.send(op, payload)
        got = self.reply()
        assert got is not None, f"EOF after {op!r}"
        return got

    def error(self, op: bytes, payload: bytes = b"") -> list:
        rop, body = self.call(op, payload)
        assert rop == b"e", (rop, body)
        return msgpack.unpackb(body, raw=False)

    def open(self, label: str, config: str) -> tuple[bytes, bytes]:
        return self.call(b"O", msgpack.packb([label, config], use_bin_type=True))

    def close(self) -> int:
        """Ask the helper to close (C) and return its exit status."""
        try:
            assert self.call(b"C") == (b"c", b"")
        finally:
            rc = self.end()
        return rc

    def end(self) -> int:
        try:
            return self.proc.wait(30)
        finally:
            self.sock.close()
            os.close(self.shm)
            os.close(self.plugin_fd)


CONFIGS = ["ports=4", "role=spine seed=1", "role=leaf seed=2", "role=host seed=3"]


@pytest.mark.parametrize("config", CONFIGS)
def test_the_c_host_answers_as_the_python_helper(config):
    """The same requests, the same replies: the layout's msgpack byte for byte."""
    replies = {}
    for kind in ("c", "python"):
        host = Driven(kind)
        try:
            got = [host.open("/lab/sim.so", config), host.call(b"L"), host.call(b"M", U64.pack(0))]
        finally:
            assert host.close() == 0
        replies[kind] = got
    assert replies["c"][0] == (b"o", b"")
    assert replies["c"][1][0] == b"l"
    gen, ports, counters = msgpack.unpackb(replies["c"][1][1], raw=False)
    assert len(ports) == len(counters) > 0
    assert msgpack.unpackb(replies["c"][1][1], raw=False) == msgpack.unpackb(replies["python"][1][1], raw=False)
    assert replies["c"] == replies["python"]


def test_the_c_host_reads_the_models_values_into_the_shared_file():
    config = "role=spine seed=1"
    start = time.time_ns() - 5 * 10**9
    host = Driven("c")
    try:
        assert host.open("sim", f"{config} start={start}") == (b"o", b"")
        rop, body = host.call(b"L")
        gen, ports, counters = msgpack.unpackb(body, raw=False)
        n = sum(sim_model.slots(row) for row in counters)
        os.ftruncate(host.shm, n * 8)
        assert host.call(b"M", U64.pack(n)) == (b"m", b"")
        rop, body = host.call(b"R", U64.pack(gen))
        assert rop == b"r"
        status, ts = READ_REPLY.unpack(body)
        assert status == 0
        with mmap.mmap(host.shm, n * 8) as mm:
            values = list(struct.unpack(f"<{n}Q", mm[: n * 8]))
        assert values == sim_model.Model(config).values(ts - start)
        # a stale generation: the plugin's ECHANGED passes through as a status
        assert READ_REPLY.unpack(host.call(b"R", U64.pack(gen + 1))[1])[0] == ASIC_ECHANGED
    finally:
        assert host.close() == 0


def test_errors_are_the_python_helpers(tmp_path):
    """The plugin's own refusal and a file that is no library: the same exception and text."""
    text = tmp_path / "not-a-library.so"
    text.write_text("not ELF\n")
    for plugin, config in ((None, "colour=red"), (str(text), "")):
        answers = []
        for kind in ("c", "python"):
            host = Driven(kind, plugin)
            try:
                answers.append(host.error(b"O", msgpack.packb(["/lab/x.so", config], use_bin_type=True)))
            finally:
                assert host.close() == 0
        # (each loads its own descriptor: the number dlerror names may differ)
        answers = [[kind, re.sub(r"/proc/self/fd/\d+", "/proc/self/fd/N", text)] for kind, text in answers]
        assert answers[0] == answers[1], answers
        assert answers[0][0] == "OSError" and answers[0][1].startswith("asic plugin /lab/x.so: ")


MALFORMED = [
    # (what, frames before, the error's class and text)
    ("unknown op", [(b"X", b"")], ["ValueError", "unknown request 88"]),
    ("read before open", [(b"R", U64.pack(1))], ["ValueError", "asic plugin handle is closed"]),
    ("layout before open", [(b"L", b"")], ["ValueError", "asic plugin handle is closed"]),
    ("short read request", [(b"R", b"\x01\x02\x03")], ["ValueError", "request R: 3 payload bytes (8 expected)"]),
    ("map beyond the file", [(b"M", U64.pack(2))], ["ValueError", "shared buffer has 8 bytes, 2 values need 16"]),
    ("not msgpack", [(b"O", b"\xc1")], None),
    ("not two strings", [(b"O", msgpack.packb([1, 2]))], None),
    ("three strings", [(b"O", msgpack.packb(["a", "b", "c"]))], None),
    ("bytes after", [(b"O", msgpack.packb(["a", "b"]) + b"\x00")], None),
    ("a string cut short", [(b"O", msgpack.packb(["a", "bcdef"])[:-2])], None),
    ("a NUL in the config", [(b"O", msgpack.packb(["a", "ports=2\x00x"]))], ["ValueError", "embedded null character"]),
]


@pytest.mark.parametrize("what,frames,error", MALFORMED, ids=[m[0] for m in MALFORMED])
def test_a_malformed_request_is_answered_and_the_host_goes_on(what, frames, error):
    host = Driven("c")
    try:
        for op, payload in frames:
            got = host.error(op, payload)
            if error is None:
                assert got[0] == "ValueError" and "malformed open request" in got[1], got
            else:
                assert got == error
        # still serving: it opens the sim and lists it
        assert host.open("sim", "ports=2") == (b"o", b"")
        assert host.call(b"L")[0] == b"l"
    finally:
        assert host.close() == 0


def test_an_oversized_request_is_answered_then_the_host_ends():
    host = Driven("c")
    try:
        host.sock.sendall(HEADER.pack(1 << 31, ord("O")))
        rop, body = host.reply()
        assert rop == b"e" and msgpack.unpackb(body, raw=False) == [
            "ValueError", f"a request of {1 << 31} bytes (at most {64 << 20})"]
        assert host.reply() is None  # EOF
    finally:
        assert host.end() == 0


def test_a_truncated_request_ends_the_host():
    host = Driven("c")
    try:
        host.sock.sendall(HEADER.pack(100, ord("O")) + b"\x92" * 10)
        host.sock.shutdown(socket.SHUT_WR)
        assert host.reply() is None
    finally:
        assert host.end() == 0


def test_version_names_this_build():
    from agent import __version__

    run = subprocess.run([_built(), "--version"], capture_output=True, text=True, check=True)
    assert run.stdout == f"swtel-asic-host {__version__} protocol {proxy_mod.HOST_PROTOCOL}\n"
    bad = subprocess.run([_built(), "1", "2"], capture_output=True, text=True)
    assert bad.returncode == 2 and "usage" in bad.stderr


# ---------------------------------------------------------------- which helper the proxy runs


def test_the_backend_decides_which_helper_runs():
    if _backend.NAME == "C":
        _built()
    proxy = PluginProxy()
    proxy.open(resolve("sim"), "ports=2")
    try:
        exe = os.path.realpath(f"/proc/{proxy.pid}/exe")
        if _backend.NAME == "C":
            assert proxy.helper == "c" and exe == os.path.realpath(_built())
        else:
            assert proxy.helper == "python" and exe == os.path.realpath(sys.executable)
        _, ports, _ = proxy.layout()
        assert len(ports) == 2
    finally:
        proxy.close()


def test_a_binary_of_another_build_is_refused_once(tmp_path, monkeypatch):
    asked = tmp_path / "asked"
    stale = tmp_path / "swtel-asic-host"
    stale.write_text(f"#!/bin/sh\necho once >> {asked}\necho 'swtel-asic-host 0.0.0-old protocol 1'\n")
    stale.chmod(0o755)
    monkeypatch.setattr(proxy_mod, "_backend_name", lambda: "C")
    monkeypatch.setattr(proxy_mod, "_C_HOST_CHECKED", {})
    monkeypatch.setattr(proxy_mod, "C_HOST", str(stale))
    assert proxy_mod.c_host() is None
    assert proxy_mod.c_host() is None
    assert asked.read_text() == "once\n"  # asked once a process, not at every start
    proxy = PluginProxy()
    proxy.open(resolve("sim"), "ports=2")
    try:
        assert proxy.helper == "python"
        assert len(proxy.layout()[1]) == 2
    finally:
        proxy.close()
    # missing: refused as well; this build's: run
    monkeypatch.setattr(proxy_mod, "C_HOST", str(tmp_path / "missing"))
    assert proxy_mod.c_host() is None
    monkeypatch.setattr(proxy_mod, "C_HOST", _built())
    assert proxy_mod.c_host() == _built()
    assert Path(proxy_mod.c_host()).name == "swtel-asic-host"
