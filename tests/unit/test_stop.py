"""Prompt stop (issue 34, item 4): at SIGTERM every exporter waits only while it has something
to send, all of them at once, and ``swtel fabric``/``swtel demo`` signal their agents together
and kill what is left after a bound.

No test here times anything: promptness is shown by what the stop did. Each exporter logs
whether its stop waits and why (``exporter stopping``: ``queued``, ``waits``, ``reason``) and
how it ended (``exporter stopped``: ``outcome``, ``left``, ``cut_off``), and the tests hold
those to "waited only for what was queued, and that wait ended because it was sent, never at
a deadline". Unit tests give the senders a clock and record their sends, so that a stop with
nothing queued is seen never to try. The figures are bench/bench_stop.py's.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
from concurrent import futures
from pathlib import Path
from typing import Any

import grpc
import pytest

from agent import runner
from agent.config import HostPort
from agent.exporters import sender as sender_mod
from agent.exporters.dialout import DialoutConfig, DialoutExporter
from agent.exporters.sender import BoundedQueue, PeriodicSender
from agent.store import Store
from agent.tools.collect import NOKIA_METHOD
from agent.tools.fabric import failed_codes, stop_all
from tests.gnmi_helpers import free_port
from tests.helpers import status_json, wait_until
from tests.namespaces import AgentProcess
from tests.peers import KINDS, Peers, all_connected

# ---------------------------------------------------------------- the agent, all four connected


def _records(log: Path) -> list[dict[str, Any]]:
    out = []
    for line in log.read_text().splitlines():
        if line.startswith("{"):
            out.append(json.loads(line))
    return out


def _agent_yaml(workdir: Path, peers: Peers, server_port: int) -> str:
    return (f"interval: 100ms\n"
            f"sources: {{netdev: {{interfaces: [lo], exclude: []}}, ethtool: {{enabled: false}},"
            f" system: {{interval: 200ms}}}}\n"
            f"exporters:\n{peers.exporters_yaml()}"
            f"  server: {{listen: '127.0.0.1:{server_port}', insecure: true}}\n"
            f"control: {{socket: {workdir}/swtel.sock, group: null}}\n"
            f"log: {{format: json, level: info}}\n")


# pygnmi's subscriber thread re-raises CANCELLED when the agent goes away under a live STREAM
@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")
def test_sigterm_with_every_exporter_connected_waits_only_for_what_is_queued(tmp_path):
    from pygnmi.client import gNMIclient

    peers = Peers()
    port = free_port()
    agent = AgentProcess(None, _agent_yaml(tmp_path, peers, port), tmp_path)
    gc = None
    try:
        agent.wait_for(lambda: all_connected(status_json(tmp_path)[1]), 60, "every exporter connected")
        # and a live Subscribe on the gNMI server, whose RPC the stop must end
        gc = gNMIclient(target=("127.0.0.1", port), insecure=True, gnmi_timeout=10)
        gc.connect()
        sub = gc.subscribe2(subscribe={"mode": "stream", "encoding": "proto", "subscription": [
            {"path": "/interfaces", "mode": "sample", "sample_interval": 100_000_000}]})
        assert sub.get_update(timeout=10)
        agent.proc.send_signal(signal.SIGTERM)
        rc = agent.proc.wait(60)  # generous: what is asserted is what the stop did, not its time
    finally:
        agent.stop()
        peers.stop()
        if gc is not None:
            gc.close()
    assert rc == 0, agent.log.read_text()
    records = _records(agent.log)
    stopping = {r["exporter"]: r for r in records if r.get("event") == "exporter stopping"}
    stopped = {r["exporter"]: r for r in records if r.get("event") == "exporter stopped"}
    names = {"dialout": "col", "tunnel": "tun", "otlp": "otlp", "remote_write": "rw"}
    assert set(stopping) == set(stopped) == set(names.values()), records
    for kind in KINDS:
        plan, end = stopping[names[kind]], stopped[names[kind]]
        if plan["queued"] == 0:
            # nothing to send: no wait at all, whatever the timeout
            assert plan["waits"] is False and plan["reason"].startswith("flushed: nothing queued"), plan
            assert end["outcome"] == "nothing to send", end
        else:
            # something to send to a connected peer: waited, and the wait ended because it was sent
            assert plan["waits"] is True and plan["reason"] == f"waiting for {plan['queued']} queued", plan
            assert end["outcome"] == "flushed" and end["left"] == 0, end
        # (whether dial-out's collector closed the stream itself or was cut off at the end of
        # CLOSE_GRACE_S depends on how soon its thread runs: a bound, not asserted here; the
        # lingering collector's test below takes the cut-off path on purpose)
    final = [r for r in records if r.get("event") == "stopped"]
    assert final and final[-1]["exporters_late"] == [], final


# ---------------------------------------------------------------- dial-out: a collector that never closes


class _Lingering:
    """A dial-out collector that reads the stream and never ends it (as some collectors do
    after the agent half-closes): only the agent can end the call."""

    def __init__(self) -> None:
        self.messages = 0
        self._release = threading.Event()

        def publish(requests, context):
            for _ in requests:
                self.messages += 1
            self._release.wait(60)  # the agent half-closed: this collector keeps the call open
            return iter(())

        handler = grpc.method_handlers_generic_handler(NOKIA_METHOD.split("/")[1], {
            NOKIA_METHOD.split("/")[2]: grpc.stream_stream_rpc_method_handler(publish)})
        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        self.server.add_generic_rpc_handlers([handler])
        self.port = self.server.add_insecure_port("127.0.0.1:0")
        self.server.start()

    def stop(self) -> None:
        self._release.set()
        self.server.stop(0)


def test_dialout_stop_with_nothing_queued_does_not_wait_for_a_collector_that_never_closes():
    col = _Lingering()
    store = Store()
    store.primed.set()
    exp = DialoutExporter(DialoutConfig(name="c", address=HostPort(f"127.0.0.1:{col.port}"), insecure=True),
                          "leaf01")
    exp.start(store)
    try:
        wait_until(lambda: exp._current.ready.is_set() and col.messages >= 1 and exp._pending() == 0,
                   30, "the snapshot sent")
        done = threading.Thread(target=exp.stop, args=(3600.0,))  # the old stop waited all of it
        done.start()
        done.join(120)
        assert not done.is_alive()
    finally:
        col.stop()
    report = exp.stop_report
    assert report["queued"] == 0 and report["waits"] is False and report["wait_s"] == 0, report
    assert report["reason"] == "flushed: nothing queued"
    # everything was sent and the stream half-closed; the collector kept it open, and the
    # agent cut it off at the end of the grace instead of waiting out the hour
    assert report["cut_off"] is True and report["outcome"] == "nothing to send"


def test_dialout_stop_without_a_connection_drops_the_queue_without_waiting():
    store = Store()
    # nothing listens on port 1: the stream never gets up
    exp = DialoutExporter(DialoutConfig(name="c", address=HostPort("127.0.0.1:1"), insecure=True), "leaf01")
    exp._queue.put([(0, b"x", None)] * 3)
    exp.start(store)
    done = threading.Thread(target=exp.stop, args=(3600.0,))
    done.start()
    done.join(120)
    assert not done.is_alive()
    report = exp.stop_report
    assert report["queued"] == 3 and report["waits"] is False, report
    assert report["reason"] == "not waiting: 3 queued, no stream to the collector"
    assert report["outcome"] == "dropped" and report["left"] == 3


# ---------------------------------------------------------------- the periodic senders, with a clock


class _Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class _Periodic(PeriodicSender):
    """OTLP's and remote write's loop with a recording send; ``exports`` items queued per export."""

    def __init__(self, exports: int, state: str, send_ok: bool = True) -> None:
        super().__init__(sender_mod.logs.get("test"), 0.5, 30.0, state=state)
        self.name = "p"
        self.cfg = type("Cfg", (), {"timeout": 10.0})()
        self.interval = 3600.0  # one export at start, then only the stop's
        self._queue = BoundedQueue(100)
        self._wake = threading.Event()
        self._flush_deadline = 0.0
        self.retries = 0
        self.per_export = exports
        self.send_ok = send_ok
        self.sends: list[float] = []  # the timeout of each send tried
        self.clock = self._clock = _Clock()
        self.closed = False
        self.exported = threading.Event()

    def _export(self) -> None:
        self._queue.put([b"req"] * self.per_export)
        self.exported.set()

    def _send_one(self, timeout: float) -> bool:
        self.sends.append(timeout)
        if self.send_ok:
            self._queue.take(0)
        return self.send_ok

    def _close(self) -> None:
        self.closed = True


def _run_and_stop(p: _Periodic, exports_at_stop: int) -> None:
    p.per_export = 0
    p._start_thread("test-periodic")
    wait_until(p.exported.is_set, 30, "the first export")
    sent_before = len(p.sends)
    p.sends.clear()
    p.per_export = exports_at_stop
    p._stop_thread(5.0)  # what OTLP's and remote write's stop() call
    assert p.closed and sent_before == 0


def test_periodic_stop_with_nothing_queued_never_tries_a_send():
    p = _Periodic(0, state="connected")
    _run_and_stop(p, exports_at_stop=0)
    assert p.sends == []  # no request tried, so nothing that could wait
    assert p.stop_report["waits"] is False and p.stop_report["outcome"] == "nothing to send"


def test_periodic_stop_sends_the_last_export_to_a_receiver_it_reaches():
    p = _Periodic(0, state="connected")
    _run_and_stop(p, exports_at_stop=2)
    assert len(p.sends) == 2 and p.stop_report["reason"] == "waiting for 2 queued"
    assert p.stop_report["outcome"] == "flushed" and p.stop_report["left"] == 0
    assert all(t == pytest.approx(5.0) for t in p.sends)  # each send bounded by what is left of the timeout


def test_periodic_stop_does_not_wait_on_a_receiver_it_does_not_reach():
    p = _Periodic(0, state="down")
    _run_and_stop(p, exports_at_stop=2)
    assert p.sends == []
    assert p.stop_report["reason"] == "not waiting: 2 queued, destination down"
    assert p.stop_report["outcome"] == "dropped" and p.stop_report["left"] == 2


def test_periodic_stop_ends_at_the_first_failed_send():
    p = _Periodic(0, state="connected", send_ok=False)
    _run_and_stop(p, exports_at_stop=3)
    assert len(p.sends) == 1 and p.stop_report["outcome"] == "send failed" and p.stop_report["left"] == 3


# ---------------------------------------------------------------- the runner stops every exporter at once


class _Slow:
    """An exporter whose stop returns only once every other one's stop has begun: stopped one
    after the other, the first would never see the others begin."""

    def __init__(self, barrier: threading.Barrier) -> None:
        self.barrier = barrier
        self.met = False

    def stop(self, timeout: float) -> None:
        self.barrier.wait()
        self.met = True


def test_the_runner_stops_every_exporter_at_once():
    barrier = threading.Barrier(3, timeout=60)
    exporters = {f"e{i}": _Slow(barrier) for i in range(3)}
    assert runner.stop_exporters(exporters, 1.0 + 60) == []
    assert all(e.met for e in exporters.values())


def test_the_runner_leaves_an_exporter_that_does_not_stop_behind():
    hang = threading.Event()

    class Stuck:
        def stop(self, timeout: float) -> None:
            hang.wait(60)

    class Quick:
        stopped = False

        def stop(self, timeout: float) -> None:
            Quick.stopped = True

    try:
        saved, runner.STOP_SLACK_S = runner.STOP_SLACK_S, 1.0
        assert runner.stop_exporters({"quick": Quick(), "stuck": Stuck()}, 0.0) == ["stuck"]
    finally:
        runner.STOP_SLACK_S = saved
        hang.set()
    assert Quick.stopped


# ---------------------------------------------------------------- fabric and demo: all at once, then SIGKILL


def test_stop_all_signals_together_and_kills_what_ignores_sigterm():
    ignore = ("import signal, sys, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print(1, flush=True); "
              "time.sleep(600)")
    obey = "import sys, time; print(1, flush=True); time.sleep(600)"
    procs = {name: subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE)
             for name, code in (("a", obey), ("stubborn", ignore), ("b", obey))}
    for proc in procs.values():
        proc.stdout.readline()  # its handlers are in place
    try:
        codes = stop_all(procs, 2.0)
    finally:
        for proc in procs.values():
            if proc.poll() is None:
                proc.kill()
            proc.stdout.close()
    assert codes == {"a": -signal.SIGTERM, "stubborn": None, "b": -signal.SIGTERM}
    assert all(proc.poll() is not None for proc in procs.values())
    assert failed_codes(codes) == {}
    assert failed_codes({"x": 1, "y": 0, "z": -signal.SIGSEGV}) == {"x": 1, "z": -signal.SIGSEGV}
