"""Test hosts in network namespaces: veth pairs, exact traffic, the agent inside.

Every name carries a random suffix so parallel runs never collide, and every
helper undoes what it made. Addresses come from 198.18.0.0/15 (RFC 2544's
benchmarking range) and exist only inside namespaces the tests create.
"""

from __future__ import annotations

import ctypes
import json
import os
import secrets
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from tests.helpers import wait_until

ROOT = Path(__file__).resolve().parent.parent
CLONE_NEWNET = 0x40000000
UDP_OVERHEAD = 14 + 20 + 8  # Ethernet + IPv4 + UDP headers: on-wire bytes beyond the payload


def sh(*args: str, check: bool = True, ns: str | None = None, **kw) -> subprocess.CompletedProcess:
    cmd = (["ip", "netns", "exec", ns] if ns else []) + list(args)
    return subprocess.run(cmd, check=check, capture_output=True, text=True, **kw)


def kernel_statistics(ns: str, ifname: str) -> dict[str, int]:
    """Every counter of /sys/class/net/IFNAME/statistics in namespace ``ns``, by file name."""
    out = sh("sh", "-c", f"cd /sys/class/net/{ifname}/statistics && grep . *", ns=ns).stdout
    return {k: int(v) for k, v in (line.split(":") for line in out.split())}


def polled_alone(ns: str, source: str, polls: int = 5) -> tuple[dict, list[str]]:
    """An engine in namespace ``ns`` with only ``source`` on, at 50 ms, until it has polled
    ``polls`` times: that source's status and the health problems the agent would report."""
    from agent import config
    from agent.control.client import health_problems
    from agent.engine import Engine

    cfg = config.parse("interval: 50ms\nsources: {netdev: {enabled: false}, ethtool: {enabled: false}, "
                       f"system: {{enabled: false}}, {source}: {{enabled: true, interval: 50ms}}}}\n")
    engine = in_namespace(ns, lambda: Engine(cfg))
    started = time.time_ns()
    in_namespace(ns, engine.start)
    try:
        status = wait_until(lambda: (s := engine.status()["sources"][source])["reads"] >= polls and s, 10,
                            f"{polls} {source} polls")
        whole = {"now_ns": time.time_ns(), "uptime_s": (time.time_ns() - started) / 1e9,
                 "sources": engine.status()["sources"]}
        return status, health_problems(whole)
    finally:
        engine.stop()


def is_root() -> bool:
    return os.geteuid() == 0


@dataclass
class Pair:
    """Two namespaces joined by one veth: ``a_if`` in ``a``, ``b_if`` in ``b``."""

    a: str
    b: str
    a_if: str
    b_if: str
    a_ip: str
    b_ip: str

    def ifindex(self, side: str) -> int:
        ns, ifname = (self.a, self.a_if) if side == "a" else (self.b, self.b_if)
        return int(sh("cat", f"/sys/class/net/{ifname}/ifindex", ns=ns).stdout)

    def send_udp(self, count: int, size: int, port: int = 9) -> None:
        """Exactly ``count`` datagrams of ``size`` payload bytes from a to b."""
        code = (
            "import socket,sys\n"
            "s=socket.socket(socket.AF_INET,socket.SOCK_DGRAM)\n"
            f"p=b'x'*{size}\n"
            f"for _ in range({count}): s.sendto(p,('{self.b_ip}',{port}))\n"
        )
        sh(sys.executable, "-c", code, ns=self.a)


def _quiet_namespace(ns: str) -> None:
    # No IPv6 (no ND/MLD/router solicitations): only the test's own packets cross.
    sh("sysctl", "-qw", "net.ipv6.conf.all.disable_ipv6=1", ns=ns)
    sh("sysctl", "-qw", "net.ipv6.conf.default.disable_ipv6=1", ns=ns)
    sh("ip", "link", "set", "lo", "up", ns=ns)


def new_namespace(tag: str = "t") -> str:
    name = f"swt{tag}{secrets.token_hex(3)}"
    sh("ip", "netns", "add", name)
    _quiet_namespace(name)
    return name


def delete_namespace(name: str) -> None:
    sh("ip", "netns", "del", name, check=False)


def in_namespace(ns: str, fn: Callable[[], object]):
    """``fn()`` on a short-lived thread that entered ``ns`` (setns changes only that thread).
    Sockets it creates, and threads it starts, stay in ``ns``."""
    out: list = []

    def enter() -> None:
        try:
            fd = os.open(f"/run/netns/{ns}", os.O_RDONLY)
            try:
                if ctypes.CDLL(None, use_errno=True).setns(fd, CLONE_NEWNET) != 0:
                    err = ctypes.get_errno()
                    raise OSError(err, f"setns {ns}: {os.strerror(err)}")
            finally:
                os.close(fd)
            out.append(fn())
        except BaseException as exc:  # noqa: BLE001 - re-raised on the caller's thread
            out.append(exc)

    thread = threading.Thread(target=enter)
    thread.start()
    thread.join()
    if isinstance(out[0], BaseException):
        raise out[0]
    return out[0]


def socket_in(ns: str) -> socket.socket:
    """A TCP socket created inside network namespace ``ns`` (a socket keeps its namespace)."""
    return in_namespace(ns, lambda: socket.socket(socket.AF_INET, socket.SOCK_STREAM))


class Forward:
    """``host``:``port`` inside ``ns`` forwarded to 127.0.0.1:``port`` here, one TCP connection
    for each (a refused connection here closes the one there, as a down server would).

    This is how a server of this process (a collector, a receiver) is reached from a namespace:
    never create a gRPC server or channel on a thread inside another namespace. The threads
    gRPC starts from there stay in that namespace, its thread pool later grows from them, and
    the process's connects to 127.0.0.1 that land on those threads are refused: blocks of
    dial-out, collector and tunnel tests failed that way on a loaded machine (issue 34)."""

    def __init__(self, ns: str, port: int, host: str = "127.0.0.1"):
        self.port = port
        self.listener = socket_in(ns)
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.listener.bind((host, port))
        self.listener.listen(16)
        self._socks: list[socket.socket] = []
        self._lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True, name="forward").start()

    def _accept(self) -> None:
        while True:
            try:
                inner, _ = self.listener.accept()
            except OSError:
                return
            try:
                outer = socket.create_connection(("127.0.0.1", self.port), timeout=2)
                outer.settimeout(None)
            except OSError:
                inner.close()
                continue
            with self._lock:
                self._socks += [inner, outer]
            for a, b in ((inner, outer), (outer, inner)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    @staticmethod
    def _pump(a: socket.socket, b: socket.socket) -> None:
        try:
            while data := a.recv(65536):
                b.sendall(data)
        except OSError:
            pass
        for s in (a, b):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def close(self) -> None:
        try:
            self.listener.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.listener.close()
        with self._lock:
            for s in self._socks:
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                s.close()




@contextmanager
def veth_pair() -> Iterator[Pair]:
    suffix = secrets.token_hex(3)
    a, b = new_namespace("a"), new_namespace("b")
    pair = Pair(a, b, f"va{suffix}", f"vb{suffix}", "198.18.0.1", "198.18.0.2")
    try:
        sh("ip", "link", "add", pair.a_if, "netns", a, "type", "veth", "peer", "name", pair.b_if, "netns", b)
        macs = {}
        for ns, ifname, ip in ((a, pair.a_if, pair.a_ip), (b, pair.b_if, pair.b_ip)):
            sh("ip", "link", "set", ifname, "arp", "off", ns=ns)
            sh("ip", "addr", "add", f"{ip}/30", "dev", ifname, ns=ns)
            sh("ip", "link", "set", ifname, "up", ns=ns)
            macs[ns] = sh("cat", f"/sys/class/net/{ifname}/address", ns=ns).stdout.strip()
        # Static neighbours: no ARP packets on the wire.
        sh("ip", "neigh", "add", pair.b_ip, "lladdr", macs[b], "dev", pair.a_if, "nud", "permanent", ns=a)
        sh("ip", "neigh", "add", pair.a_ip, "lladdr", macs[a], "dev", pair.b_if, "nud", "permanent", ns=b)
        yield pair
    finally:
        delete_namespace(a)
        delete_namespace(b)


class AgentProcess:
    """``python -m agent run`` inside a namespace, with JSON lines to a file."""

    def __init__(self, ns: str | None, config_text: str, workdir: Path, env: dict | None = None,
                 prefix: list[str] | None = None):
        """``prefix``: a command the agent runs under (``setpriv --bounding-set=-net_admin --``)."""
        self.workdir = workdir
        self.config = workdir / "swtel.yaml"
        self.config.write_text(config_text)
        self.jsonl = workdir / "out.jsonl"
        self.log = workdir / "agent.log"
        cmd = [*(prefix or []), sys.executable, "-m", "agent", "run", "-c", str(self.config)]
        if ns:
            cmd = ["ip", "netns", "exec", ns] + cmd
        path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
        full_env = {**os.environ, **(env or {}), "PYTHONPATH": path}
        self._log_fh = open(self.log, "w")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(cmd, cwd=ROOT, env=full_env, stdout=self._log_fh, stderr=subprocess.STDOUT)

    def wait_for(self, predicate, timeout: float = 10.0, what: str = "condition"):
        """``wait_until`` that fails at once when the agent has exited, and shows its log."""

        def alive_and():
            result = predicate()
            if not result and self.proc.poll() is not None:
                raise AssertionError(f"agent exited ({self.proc.returncode}) waiting for {what}:\n"
                                     f"{self.log.read_text()}")
            return result

        return wait_until(alive_and, timeout, what, interval=0.05,
                          detail=lambda: f"agent log:\n{self.log.read_text()}")

    def records(self) -> list[dict]:
        if not self.jsonl.exists():
            return []
        out = []
        text = self.jsonl.read_text()
        # The agent may be mid-write: only lines it has finished (newline-terminated) count.
        for line in text[: text.rfind("\n") + 1].splitlines():
            if line.strip():
                out.append(json.loads(line))
        return out

    def wait_ready(self, timeout: float = 60.0) -> None:  # a failure bound: start-up under load
        self.wait_for(lambda: "event=ready" in self.log.read_text() or '"event": "ready"' in self.log.read_text(),
                      timeout, "ready")

    def stop(self, timeout: float = 10.0) -> int:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log_fh.close()
        return self.proc.returncode
