"""sd_notify without libsystemd: a real AF_UNIX datagram listener stands in for systemd."""

from __future__ import annotations

import os
import socket
import time
import uuid

import pytest

from agent.sdnotify import Notifier

pytestmark = pytest.mark.libs  # no backend code in its path: not in the pure-Python pass


class Listener:
    """What systemd does: a SOCK_DGRAM socket that collects notification datagrams."""

    def __init__(self, address: str | bytes):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(address)
        self.sock.settimeout(0.5)

    def messages(self, wait_s: float = 0.2) -> list[str]:
        out = []
        deadline = time.monotonic() + wait_s
        while True:
            self.sock.settimeout(max(0.01, deadline - time.monotonic()))
            try:
                out.append(self.sock.recv(4096).decode())
            except TimeoutError:
                return out

    def close(self):
        self.sock.close()


@pytest.fixture(params=["path", "abstract"])
def systemd(request, tmp_path):
    if request.param == "path":
        address: str | bytes = str(tmp_path / "notify.sock")
        env_value = address
    else:
        name = f"swtel-test-{uuid.uuid4().hex[:12]}"
        address, env_value = b"\0" + name.encode(), "@" + name
    listener = Listener(address)
    yield listener, env_value
    listener.close()


def test_ready_status_reloading_stopping(systemd):
    listener, addr = systemd
    n = Notifier({"NOTIFY_SOCKET": addr})
    assert n.enabled and not n.watchdog_enabled
    assert n.ready("polling 2 sources")
    assert n.status("reloading\nconfig")
    assert n.reloading()
    assert n.ready()
    assert n.stopping()
    msgs = listener.messages()
    assert msgs[0] == "READY=1\nSTATUS=polling 2 sources"
    assert msgs[1] == "STATUS=reloading config", "STATUS must stay on one line"
    reload_lines = msgs[2].split("\n")
    assert reload_lines[0] == "RELOADING=1"
    key, _, usec = reload_lines[1].partition("=")
    now_usec = time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000
    assert key == "MONOTONIC_USEC" and 0 < now_usec - int(usec) < 60_000_000
    assert msgs[3:] == ["READY=1", "STOPPING=1"]
    assert n.sent == 5 and n.failed == 0
    n.close()


def test_watchdog_at_half_the_period_with_a_fake_clock(systemd):
    listener, addr = systemd
    n = Notifier({"NOTIFY_SOCKET": addr, "WATCHDOG_USEC": "2000000", "WATCHDOG_PID": str(os.getpid())})
    assert n.watchdog_enabled and n.watchdog_s == 2.0
    sent = [t for t in (0.0, 0.5, 0.99, 1.0, 1.5, 2.01, 2.5, 3.02) if n.tick(now=100 + t)]
    assert sent == [0.0, 1.0, 2.01, 3.02]
    assert listener.messages() == ["WATCHDOG=1"] * 4


def test_periodic_watchdog_from_a_tick_loop(systemd):
    listener, addr = systemd
    n = Notifier({"NOTIFY_SOCKET": addr, "WATCHDOG_USEC": "100000"})  # 100 ms: ping every 50 ms
    end = time.monotonic() + 0.5
    ticks = 0
    while time.monotonic() < end:  # a 10 ms tick loop
        n.tick()
        ticks += 1
        time.sleep(0.01)
    msgs = listener.messages()
    assert set(msgs) == {"WATCHDOG=1"}
    assert 3 <= len(msgs) < ticks, "periodic, but not on every tick"


@pytest.mark.parametrize(
    "env",
    [
        {"WATCHDOG_USEC": "1000000", "WATCHDOG_PID": "1"},  # meant for another process
        {"WATCHDOG_USEC": "0"},
        {"WATCHDOG_USEC": "soon"},
        {},
    ],
)
def test_no_watchdog_unless_meant_for_us(systemd, env):
    listener, addr = systemd
    n = Notifier({"NOTIFY_SOCKET": addr, **env})
    assert not n.watchdog_enabled
    assert not any(n.tick(now=float(t)) for t in range(5))
    assert listener.messages(0.05) == []


def test_no_op_without_systemd():
    n = Notifier({})
    assert not n.enabled
    assert not n.ready() and not n.reloading() and not n.stopping() and not n.tick()
    assert Notifier({"NOTIFY_SOCKET": "vsock:2:1234"}).enabled is False


def test_vanished_listener_never_raises(tmp_path):
    path = str(tmp_path / "gone.sock")
    listener = Listener(path)
    n = Notifier({"NOTIFY_SOCKET": path, "WATCHDOG_USEC": "1000"})
    listener.close()
    os.unlink(path)
    assert n.ready() is False and n.tick() is False
    assert n.failed == 2
