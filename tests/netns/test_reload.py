"""End to end against a real `python -m agent run -c cfg.yaml` in a network namespace of its own:
SIGHUP reloads (invalid and valid), `swtel status`, sd_notify, socket takeover rules."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import textwrap
import time
import uuid
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agent.control import client
from tests.helpers import wait_until
from tests.unit.test_control import chunks, connect, read_replies

REPO = Path(__file__).resolve().parents[2]
N_PACKETS = 50

pytestmark = [
    pytest.mark.root,
    pytest.mark.slow,
    pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("ip"), reason="needs root and iproute2"),
]


@pytest.fixture
def netns():
    name = f"swtel-rl-{uuid.uuid4().hex[:8]}"
    subprocess.run(["ip", "netns", "add", name], check=True)
    try:
        subprocess.run(["ip", "-n", name, "link", "set", "lo", "up"], check=True)
        yield name
    finally:
        subprocess.run(["ip", "netns", "del", name], check=False)


class NotifyListener:
    def __init__(self, path: str):
        self.path = path
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(path)
        self.sock.setblocking(False)
        self.received: list[str] = []

    def drain(self) -> list[str]:
        while True:
            try:
                self.received.append(self.sock.recv(4096).decode())
            except BlockingIOError:
                return self.received

    def seen(self, prefix: str) -> int:
        return sum(1 for m in self.drain() if m.startswith(prefix))


class Agent:
    """A real agent process and the files around it."""

    def __init__(self, tmp: Path, netns: str, dialout: str = "", notify: NotifyListener | None = None,
                 mem_limit: int | None = None, jsonl_path: str | None = None):
        self.tmp, self.netns = tmp, netns
        self.cfg = tmp / "swtel.yaml"
        self.sock = str(tmp / "run" / "swtel.sock")
        self.out = tmp / "changes.jsonl"
        self.log = tmp / "agent.log"
        self.dialout = dialout  # extra YAML lines under exporters:
        self.jsonl_path = jsonl_path or str(self.out)
        self.write_config(interval="100ms")
        env = dict(os.environ, PYTHONPATH=str(REPO))
        env.pop("NOTIFY_SOCKET", None)
        if notify is not None:
            env.update(NOTIFY_SOCKET=notify.path, WATCHDOG_USEC="400000")
        limit = ["prlimit", f"--as={mem_limit}"] if mem_limit else []
        self.proc = subprocess.Popen(
            ["ip", "netns", "exec", netns, *limit, sys.executable, "-m", "agent", "run", "-c", str(self.cfg)],
            stdout=open(self.log, "wb"), stderr=subprocess.STDOUT, env=env, cwd=REPO,
        )

    def write_config(self, interval: str, broken: bool = False) -> None:
        text = textwrap.dedent(f"""\
            interval: {interval}
            sources:
              netdev: {{interfaces: [lo], exclude: []}}
              ethtool: {{enabled: false}}
              system: {{enabled: false}}
            exporters:
              jsonl: {{path: {self.jsonl_path}}}
            {self.dialout}
            control: {{socket: {self.sock}, group: null, health_grace: 1s}}
            log: {{level: info, format: json}}
            """)
        if broken:
            text += "exporters_typo: {}\n"
        tmp = self.cfg.with_suffix(".tmp")
        tmp.write_text(text)
        os.replace(tmp, self.cfg)  # atomically, as an editor or NVUE would

    def status(self) -> dict:
        return client.request(self.sock, "status")

    def wait_ready(self) -> dict:
        def ready():
            assert self.proc.poll() is None, self.log.read_text()
            try:
                st = self.status()
            except client.ControlError:
                return None
            return st if st["sources"].get("netdev", {}).get("last_ok_ns") else None

        return wait_until(ready, 20, what="agent ready")

    def reloaded(self, after_ns: int) -> dict:
        def done():
            st = self.status()
            ts = st["config"]["last_reload"]["ts_ns"]
            return st if ts and ts > after_ns else None

        return wait_until(done, 60, what="reload result")

    def traffic(self, n: int = N_PACKETS) -> None:
        """n UDP datagrams over the namespace's loopback: exactly n more in-pkts and out-pkts on lo."""
        code = (
            "import socket\n"
            "r = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); r.bind(('127.0.0.1', 0))\n"
            "s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n"
            f"for _ in range({n}): s.sendto(b'x' * 100, r.getsockname())\n"
        )
        subprocess.run(["ip", "netns", "exec", self.netns, sys.executable, "-c", code], check=True, timeout=30)

    def records(self, leaf: str) -> list[dict]:
        path = f"/interfaces/interface[name=lo]/state/counters/{leaf}"
        out = []
        for line in self.out.read_text().splitlines():
            rec = json.loads(line)
            if rec.get("path") == path:
                out.append(rec)
        return out

    def value(self, leaf: str) -> int:
        recs = self.records(leaf)
        return recs[-1]["value"] if recs else -1

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode

    def logged(self) -> list[dict]:
        events = []
        for line in self.log.read_text().splitlines():
            try:
                events.append(json.loads(line))
            except ValueError:
                pass
        return events


@pytest.fixture
def agent(tmp_path, netns):
    a = Agent(tmp_path, netns)
    yield a
    a.stop()


def status_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "agent", "status", *args], capture_output=True, text=True,
                          timeout=30, cwd=REPO, env=dict(os.environ, PYTHONPATH=str(REPO)))


# ---------------------------------------------------------------- reload


def test_sighup_with_invalid_file_keeps_the_running_config(agent):
    before = agent.wait_ready()
    assert before["config"]["last_reload"]["ok"] is None
    agent.write_config(interval="100ms", broken=True)
    sent_ns = time.time_ns()
    agent.proc.send_signal(signal.SIGHUP)
    after = agent.reloaded(sent_ns)
    assert agent.proc.poll() is None, "still running"
    last = after["config"]["last_reload"]
    assert last["ok"] is False
    assert "exporters_typo: unknown key" in last["error"]
    assert before["config"]["reloads"] == {"applied": 0, "rejected": 0}
    assert after["config"]["reloads"] == {"applied": 0, "rejected": 1}
    assert after["sources"]["netdev"]["interval_s"] == 0.1, "old config still in force"
    assert after["config"]["path"] == str(agent.cfg)
    reads = after["sources"]["netdev"]["reads"]
    wait_until(lambda: agent.status()["sources"]["netdev"]["reads"] > reads + 3, what="polling goes on")
    assert any(e.get("event", "").startswith("reload rejected") for e in agent.logged())
    # The human summary says so too.
    r = status_cli("--socket", agent.sock)
    assert r.returncode == 0 and "REJECTED" in r.stdout and "exporters_typo" in r.stdout


def test_sighup_with_valid_file_changes_interval_without_resets(agent):
    agent.wait_ready()
    agent.traffic()
    wait_until(lambda: agent.value("in-pkts") >= N_PACKETS, what="first traffic seen")
    in_before = agent.value("in-pkts")
    st = agent.status()
    reads_before = st["sources"]["netdev"]["reads"]

    agent.write_config(interval="250ms")
    sent_ns = time.time_ns()
    agent.proc.send_signal(signal.SIGHUP)
    after = agent.reloaded(sent_ns)
    assert after["config"]["last_reload"] == {"ok": True, "ts_ns": after["config"]["last_reload"]["ts_ns"],
                                               "error": None}
    assert after["config"]["reloads"] == {"applied": 1, "rejected": 0}
    wait_until(lambda: agent.status()["sources"]["netdev"]["interval_s"] == 0.25, what="new interval")
    assert agent.status()["sources"]["netdev"]["reads"] >= reads_before, "source state kept"

    agent.traffic()
    wait_until(lambda: agent.value("in-pkts") >= in_before + N_PACKETS, what="traffic after reload")
    recs = agent.records("in-pkts")
    values = [r["value"] for r in recs]
    assert values == sorted(values), "cumulative counters never go back"
    assert not any(r.get("reset") for r in recs), "no spurious resets"
    assert sum(1 for r in recs if r.get("new")) == 1, "no new baseline/snapshot after the reload"
    assert sum(r["delta"] for r in recs) == values[-1] - values[0], "deltas add up across the reload"


def test_reload_over_the_control_socket(agent):
    agent.wait_ready()
    agent.write_config(interval="200ms")
    result = client.request(agent.sock, "reload")
    assert result["ok"] is True
    assert agent.status()["sources"]["netdev"]["interval_s"] == 0.2 or wait_until(
        lambda: agent.status()["sources"]["netdev"]["interval_s"] == 0.2, what="new interval")
    agent.write_config(interval="200ms", broken=True)
    result = client.request(agent.sock, "reload")
    assert result["ok"] is False and "exporters_typo" in result["error"]


# ---------------------------------------------------------------- swtel status


def test_swtel_status_json_and_summary(agent):
    agent.wait_ready()
    r = status_cli("--socket", agent.sock, "--json")
    assert r.returncode == 0, r.stderr
    st = json.loads(r.stdout)
    assert st["health"] == {"ok": True, "problems": []}
    assert st["pid"] == agent.proc.pid
    assert st["backend"] in ("C", "python")
    assert st["sources"]["netdev"]["ports"] == 1 and st["sources"]["netdev"]["counters"] > 0
    assert st["exporters"]["jsonl"]["kind"] == "jsonl"
    # The socket path can come from the config file instead of --socket.
    r = status_cli("-c", str(agent.cfg))
    assert r.returncode == 0, r.stderr
    assert "netdev" in r.stdout and "health: OK" in r.stdout


def test_swtel_status_without_an_agent(tmp_path):
    r = status_cli("--socket", str(tmp_path / "nobody.sock"))
    assert r.returncode == 2 and "no agent answered" in r.stderr


def test_swtel_status_unhealthy_when_every_dialout_is_down(tmp_path, netns):
    # Nothing listens on this port inside the fresh namespace: the destination stays down.
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    a = Agent(tmp_path, netns, dialout=f"  dialout: [{{name: down1, address: '127.0.0.1:{port}', insecure: true}}]")
    try:
        a.wait_ready()

        def unhealthy():
            # -c: socket path and control.health_grace (1s) from the agent's config file
            r = status_cli("-c", str(a.cfg), "--json")
            return r if r.returncode == 1 else None

        r = wait_until(unhealthy, 20, interval=0.3, what="unhealthy after health_grace")
        st = json.loads(r.stdout)
        assert st["exporters"]["dialout:down1"]["down_since_ns"] is not None
        assert any("every dial-out destination" in p for p in st["health"]["problems"]), st["health"]
        assert a.proc.poll() is None, "a down destination does not stop the agent"
    finally:
        a.stop()


# ---------------------------------------------------------------- hostile clients


@pytest.fixture
def fuzzed_agent(agent):
    agent.wait_ready()
    first = agent.status()
    yield agent
    # After 1,000 random and malformed frames: the agent answers, and it kept polling all along.
    last = agent.status()
    assert last["pid"] == first["pid"] and agent.proc.poll() is None
    elapsed_s = (last["now_ns"] - first["now_ns"]) / 1e9
    netdev = last["sources"]["netdev"]
    polls = netdev["reads"] - first["sources"]["netdev"]["reads"]
    print(f"{polls} polls in {elapsed_s:.1f} s of fuzzing, longest stall {netdev['longest_stall']}")  # figures
    # Not a speed test: a loaded machine skips a few ticks here and there (and says so); a loop
    # the clients stalled would miss polls in long runs.
    assert polls > 0 and netdev["longest_stall"] <= 20, (polls, netdev)
    r = status_cli("-c", str(agent.cfg))
    assert r.returncode == 0 and "health: OK" in r.stdout, r.stdout + r.stderr
    metrics = client.request(agent.sock, "metrics")
    assert metrics["control"]["errors"] > 0 and metrics["control"]["requests"] > 0


@settings(max_examples=1000, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(parts=st.lists(chunks, min_size=1, max_size=4))
def test_random_frames_against_the_running_agent(fuzzed_agent, parts):
    with connect(fuzzed_agent.sock) as s:
        try:
            s.sendall(b"".join(parts))
            s.shutdown(socket.SHUT_WR)
        except (BrokenPipeError, ConnectionResetError):
            pass
        for reply in read_replies(s):  # every reply is a well-formed frame
            assert reply["ok"] or reply["error"]


# ---------------------------------------------------------------- socket ownership


def test_second_agent_refuses_a_live_socket_and_replaces_a_stale_one(agent, tmp_path, netns):
    agent.wait_ready()
    second = subprocess.run(
        ["ip", "netns", "exec", netns, sys.executable, "-m", "agent", "run", "-c", str(agent.cfg)],
        capture_output=True, text=True, timeout=30, cwd=REPO, env=dict(os.environ, PYTHONPATH=str(REPO)),
    )
    assert second.returncode != 0 and "already listening" in second.stdout + second.stderr
    assert agent.status()["pid"] == agent.proc.pid, "the first agent keeps answering"

    agent.proc.kill()  # a crash leaves the socket file behind
    agent.proc.wait()
    assert os.path.exists(agent.sock)
    successor = Agent(agent.tmp, netns)
    try:
        assert successor.wait_ready()["pid"] == successor.proc.pid
    finally:
        successor.stop()


# ---------------------------------------------------------------- systemd notify


def test_sd_notify_ready_watchdog_reloading_stopping(tmp_path, netns):
    listener = NotifyListener(str(tmp_path / "notify.sock"))
    a = Agent(tmp_path, netns, notify=listener)
    try:
        a.wait_ready()
        wait_until(lambda: listener.seen("READY=1"), what="READY=1")
        wait_until(lambda: listener.seen("WATCHDOG=1") >= 3, what="periodic WATCHDOG=1")
        a.write_config(interval="200ms")
        a.proc.send_signal(signal.SIGHUP)
        wait_until(lambda: listener.seen("RELOADING=1"), what="RELOADING=1")
        wait_until(lambda: listener.seen("READY=1") >= 2, what="READY=1 after the reload")
        watchdogs = listener.seen("WATCHDOG=1")
        wait_until(lambda: listener.seen("WATCHDOG=1") > watchdogs, what="watchdog continues after reload")
        assert a.stop() == 0
        msgs = listener.drain()
        assert msgs[-1] == "STOPPING=1", msgs[-5:]
        reloading = next(m for m in msgs if m.startswith("RELOADING=1"))
        assert "MONOTONIC_USEC=" in reloading
        order = [m.split("\n")[0].split("=")[0] for m in msgs if not m.startswith("WATCHDOG")]
        assert order == ["READY", "RELOADING", "READY", "STOPPING"], order
    finally:
        a.stop()
        listener.sock.close()


# ---------------------------------------------------------------- hostile reloads (issue 14)

AGENT_MEM_LIMIT = 768 * 1024 * 1024  # address space; the expanded file below needed over 1 GB


def reload_and_wait(agent: Agent) -> dict:
    sent_ns = time.time_ns()
    agent.proc.send_signal(signal.SIGHUP)
    return agent.reloaded(sent_ns)


def _polls(agent: Agent, n: int) -> None:
    """Wait for ``n`` more netdev polls (counted, where a sleep would guess)."""
    def reads() -> int:
        return agent.status()["sources"]["netdev"]["reads"]

    first = reads()
    wait_until(lambda: reads() >= first + n, 30, f"{n} more polls")


def exact_traffic_still_counted(agent: Agent) -> None:
    """N_PACKETS datagrams on lo: exactly N_PACKETS more in-pkts in the (old) jsonl output."""
    wait_until(lambda: agent.value("in-pkts") >= 0, what="a first in-pkts record")
    _polls(agent, 3)  # settled: the last value is the kernel's before the traffic
    before = agent.value("in-pkts")
    agent.traffic()
    wait_until(lambda: agent.value("in-pkts") >= before + N_PACKETS, what="traffic after the rejected reload")
    _polls(agent, 5)  # a few more polls: nothing beyond the N datagrams may appear
    assert agent.value("in-pkts") == before + N_PACKETS


def test_sighup_with_hostile_files_is_rejected_in_bounded_memory(tmp_path, netns):
    from tests.unit.test_config import BILLION_LAUGHS

    a = Agent(tmp_path, netns, mem_limit=AGENT_MEM_LIMIT)
    try:
        a.wait_ready()
        good = a.cfg.read_text()
        hostile = [
            (BILLION_LAUGHS + good.replace("netdev: {interfaces: [lo], exclude: []}",
                                           "netdev: {interfaces: *i, exclude: []}"), "too many values"),
            (good + "target: " + "{a: " * 50000 + "1" + "}" * 50000 + "\n", "nesting too deep"),
            (good.replace("interval: 100ms", "interval: .nan"), "interval: must be a finite duration"),
            ("#" * (300 * 1024), "larger than 256 KiB"),
        ]
        for text, fragment in hostile:
            a.cfg.write_text(text)
            after = reload_and_wait(a)  # (within its failure bound: the hostile file is cut short)
            assert a.proc.poll() is None, a.log.read_text()[-2000:]
            last = after["config"]["last_reload"]
            assert last["ok"] is False and fragment in last["error"], last
            assert len(last["error"]) < 1000
            assert after["tick"]["rss_bytes"] < 300 * 1024 * 1024, after["tick"]["rss_bytes"]
            assert after["sources"]["netdev"]["interval_s"] == 0.1
        r = status_cli("--socket", a.sock)
        assert r.returncode == 0 and "REJECTED" in r.stdout, r.stdout + r.stderr
        exact_traffic_still_counted(a)
        assert not any("Traceback" in line for line in a.log.read_text().splitlines())
    finally:
        a.stop()


def test_reload_to_an_unopenable_jsonl_path_keeps_the_old_output(agent):
    agent.wait_ready()
    for bad in (str(agent.tmp / "missing-dir" / "x.jsonl"), "/proc/version"):
        agent.jsonl_path = bad
        agent.write_config(interval="100ms")
        after = reload_and_wait(agent)
        last = after["config"]["last_reload"]
        assert last["ok"] is False, last
        assert last["error"].startswith(f"exporters.jsonl.path: cannot open {bad!r}: "), last["error"]
        jsonl = after["exporters"]["jsonl"]
        assert jsonl["path"] == str(agent.out) and jsonl["state"] == "running", jsonl
    assert not any(e.get("event") == "reloaded" for e in agent.logged())
    r = status_cli("--socket", agent.sock)
    assert r.returncode == 0 and "REJECTED" in r.stdout and "health: OK" in r.stdout, r.stdout
    exact_traffic_still_counted(agent)


def test_reload_to_a_server_port_in_use_keeps_the_old_server(tmp_path, netns):
    holder = subprocess.Popen(
        ["ip", "netns", "exec", netns, sys.executable, "-c",
         "import socket, sys, time\n"
         "s = socket.socket(); s.bind(('127.0.0.1', 0)); s.listen()\n"
         "print(s.getsockname()[1], flush=True); time.sleep(120)\n"],
        stdout=subprocess.PIPE, text=True)
    try:
        taken = int(holder.stdout.readline())
        free = 50000 + (taken % 1000) + 1
        a = Agent(tmp_path, netns, dialout=f"  server: {{listen: '127.0.0.1:{free}', insecure: true}}")
        try:
            st = a.wait_ready()
            assert st["exporters"]["server"]["state"] == "listening"
            a.dialout = f"  server: {{listen: '127.0.0.1:{taken}', insecure: true}}"
            a.write_config(interval="100ms")
            after = reload_and_wait(a)
            last = after["config"]["last_reload"]
            assert last["ok"] is False and last["error"].startswith("exporters.server: "), last
            assert f"cannot listen on 127.0.0.1:{taken}" in last["error"]
            server = after["exporters"]["server"]
            assert server["state"] == "listening" and server.get("port", free) == free, server
            # The old server still accepts connections.
            probe = subprocess.run(
                ["ip", "netns", "exec", netns, sys.executable, "-c",
                 f"import socket; socket.create_connection(('127.0.0.1', {free}), 5).close()"], timeout=30)
            assert probe.returncode == 0
            # A change on the same port (stop first, start the new one) still works.
            a.dialout = f"  server: {{listen: '127.0.0.1:{free}', insecure: true, allow_anonymous: true}}"
            a.write_config(interval="100ms")
            assert reload_and_wait(a)["config"]["last_reload"]["ok"] is True
            assert a.status()["exporters"]["server"]["state"] == "listening"
            exact_traffic_still_counted(a)
        finally:
            a.stop()
    finally:
        holder.kill()
        holder.wait()


def test_a_failing_jsonl_output_shows_and_turns_health_red(tmp_path, netns):
    a = Agent(tmp_path, netns, jsonl_path="/dev/full")
    try:
        a.wait_ready()
        a.traffic(5)

        def failing():
            e = a.status()["exporters"]["jsonl"]
            return e if e["dropped"] > 0 and e["down_since_ns"] else None

        e = wait_until(failing, what="jsonl drops")
        assert e["sent"] == 0 and e["state"] == "failing" and "No space left on device" in e["last_error"], e
        r = wait_until(lambda: (lambda r: r if r.returncode == 1 else None)(status_cli("--socket", a.sock, "--json")),
                     what="unhealthy after health_grace (1s)")
        problems = json.loads(r.stdout)["health"]["problems"]
        assert any(p.startswith("exporter jsonl failing") and "No space left" in p for p in problems), problems
        failed_logs = [x for x in a.logged() if x.get("event", "").startswith("jsonl write failed")]
        assert 1 <= len(failed_logs) <= 3, "rate-limited, not one line per change"
        assert a.stop() == 0
        text = a.log.read_text()
        assert "Traceback" not in text, text[-2000:]
        assert not os.path.exists(a.sock), "the control socket is removed at shutdown"
    finally:
        a.stop()
