"""The hardware boundary (issue 20, items 1-4 and 9): what a real SDK does to the agent.

A plugin built here from tests/plugins/shifty_plugin.c adds ports one at a time (the
generation changes on consecutive reads), never settles, stamps the wrong clock or opens
slowly; every value it gives is a known function of its successful reads, so each delta
the agent streams is checked exactly. Runs on both backends (the suite runs twice)."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import grpc
import pytest
from pygnmi.spec.v080 import gnmi_pb2, gnmi_pb2_grpc

from agent.asic import HEADER
from agent.tools.collect import Collector
from tests.gnmi_helpers import free_port
from tests.helpers import asic_yaml, status_json, wait_polls
from tests.namespaces import AgentProcess

ROOT = Path(__file__).resolve().parents[2]
SOURCE = ROOT / "tests" / "plugins" / "shifty_plugin.c"
OCTETS = "/interfaces/interface[name={p}]/state/counters/in-octets"  # no other source: the standard leaf
SYMBOLS = "/interfaces/interface[name={p}]/phy/state/symbol-errors"
QLEN = "swtel:/interfaces/interface[name={p}]/hw/state/counters/out-queue-length"


@pytest.fixture(scope="module")
def shifty(tmp_path_factory) -> str:
    d = tmp_path_factory.mktemp("shifty")
    d.chmod(0o755)
    out = d / "shifty.so"
    subprocess.run(["gcc", "-shared", "-fPIC", "-O1", "-Wall", "-Werror", "-I", str(Path(HEADER).parent),
                    "-o", str(out), str(SOURCE)], check=True, capture_output=True, text=True)
    out.chmod(0o755)
    return str(out)


def _config(tmp_path: Path, plugin: str, asic_config: str, extra: str = "") -> str:
    """``extra``: more exporters (lines of that section)."""
    return asic_yaml(tmp_path, plugin, asic_config, exporters=extra, control=", health_grace: 1s")


def _series(records: list[dict], path: str) -> list[dict]:
    return [r for r in records if r.get("path") == path]


def test_consecutive_generation_changes_keep_every_value_exact(shifty, tmp_path):
    # Ports q2 and q3 arrive on read calls 6 and 7: the read right after the first relist
    # answers ECHANGED again. Nothing read then may be diffed.
    agent = AgentProcess(None, _config(tmp_path, shifty, "ports=2 grow=6,7"), tmp_path)
    try:
        agent.wait_ready()
        agent.wait_for(lambda: len(_series(agent.records(), OCTETS.format(p="q3"))) >= 5,
                       what="q3's octets streaming", timeout=15)
        code, status = status_json(tmp_path)
        asic = status["sources"]["asic"]
        assert asic["layout_changes"] == 2 and asic["ports"] == 4
        assert asic["fault"] is None and code == 0, status.get("health")
    finally:
        assert agent.stop() == 0
    records = agent.records()
    assert not any(r.get("reset") for r in records), [r for r in records if r.get("reset")][:3]
    for p in range(4):
        octets = _series(records, OCTETS.format(p=f"q{p}"))
        symbols = _series(records, SYMBOLS.format(p=f"q{p}"))
        assert octets[0].get("new") and octets[0]["value"] > 0, octets[0]
        assert symbols[0].get("new") and symbols[0]["value"] > 0, symbols[0]
        # every later sample is exactly one successful read later: one step each
        assert {r["delta"] for r in octets[1:]} == {1000 * (p + 1)}, (p, octets[:8])
        assert {r["delta"] for r in symbols[1:]} == {100_000_000}, (p, symbols[:8])
        assert all(b["value"] - a["value"] == b["delta"] for a, b in zip(octets, octets[1:], strict=False))
        # the 32-bit counter wrapped at least once on the way, unwrapped into a 64-bit total
        assert any(r.get("wrap") for r in symbols) or symbols[-1]["value"] < 2**32
        qlen = _series(records, QLEN.format(p=f"q{p}"))
        assert {r["value"] for r in qlen} <= {0, 10}
    # the ports added late start from their real value, at the step of the others
    q0, q3 = _series(records, OCTETS.format(p="q0")), _series(records, OCTETS.format(p="q3"))
    first_q3 = q3[0]
    same_time = [r for r in q0 if r["ts"] == first_q3["ts"]]
    assert same_time and first_q3["value"] == 4 * same_time[0]["value"]
    assert not any(r.get("value") == 0 and r.get("new") for r in records
                   if "[name=q" in r.get("path", "") and "queue-length" not in r["path"])


def test_a_layout_that_never_settles_is_a_fault(shifty, tmp_path):
    agent = AgentProcess(None, _config(tmp_path, shifty, "ports=2 stuck=5"), tmp_path)
    try:
        agent.wait_ready()
        code, status = agent.wait_for(
            lambda: (lambda cs: cs if cs[0] == 1 and cs[1]["sources"]["asic"].get("fault") else None)(
                status_json(tmp_path)), what="asic fault in status", timeout=15)
        asic = status["sources"]["asic"]
        assert "layout keeps changing" in asic["fault"] and asic["errors"] >= 1
        assert any("layout keeps changing" in p for p in status["health"]["problems"])
        assert status["sources"]["system"]["reads"] > 0  # the others keep running
        wait_polls(tmp_path, 10)  # a second's polls (about 20 of asic), each would find it again
    finally:
        assert agent.stop() == 0
    log = agent.log.read_text()
    assert log.count("asic layout does not settle") == 1  # rate-limited, not once per poll
    records = [r for r in agent.records() if "[name=q" in r.get("path", "")]
    # four good reads before it got stuck, then nothing: no zeroes, no resets
    assert not any(r.get("reset") for r in records)
    octets = _series(records, OCTETS.format(p="q1"))
    assert [r["value"] for r in octets] == [2000 * k for k in range(1, len(octets) + 1)] and len(octets) == 4


def test_an_unopenable_plugin_is_unhealthy_while_others_run(shifty, tmp_path):
    agent = AgentProcess(None, _config(tmp_path, shifty, "colour=red"), tmp_path)
    try:
        agent.wait_ready()
        # the open runs in the plugin's helper process: until it has answered, the source is
        # neither open nor faulted (a loaded machine showed that status once)
        code, status = agent.wait_for(
            lambda: (lambda cs: cs if cs[1] and cs[1]["sources"]["asic"]["fault"] else None)(status_json(tmp_path)),
            what="the plugin's open refused")
        asic = status["sources"]["asic"]
        assert asic["open"] is False and "unknown key 'colour=red'" in asic["fault"]
        assert code == 1 and status["health"]["ok"] is False
        assert any(p.startswith("source asic: plugin not open") for p in status["health"]["problems"])
        assert status["sources"]["system"]["reads"] > 0
    finally:
        assert agent.stop() == 0


def test_a_timestamp_on_the_wrong_clock_is_refused(shifty, tmp_path):
    started = time.time_ns()
    agent = AgentProcess(None, _config(tmp_path, shifty, "clock=mono"), tmp_path)
    try:
        agent.wait_ready()
        agent.wait_for(lambda: len(_series(agent.records(), OCTETS.format(p="q0"))) >= 3, what="values")
        code, status = status_json(tmp_path)
        asic = status["sources"]["asic"]
        assert asic["clock_refused"] >= 3 and "not CLOCK_REALTIME" in asic["last_error"]
        # health is judged on the agent's clock: the source is fresh
        assert not any("no successful poll" in p for p in status["health"]["problems"])
    finally:
        assert agent.stop() == 0
    now = time.time_ns()
    stamps = [r["ts"] for r in agent.records() if "[name=q" in r.get("path", "")]
    assert stamps and all(started <= ts <= now for ts in stamps)  # the agent's clock, never 1970
    assert "sample timestamp refused" in agent.log.read_text()


@pytest.mark.parametrize("slow", ["slow_open_ms=1500", "slow_open_ms=1500 slow_first_read_ms=800"],
                         ids=["slow-open", "slow-open-and-first-read"])
def test_no_sync_response_before_the_first_sample(shifty, tmp_path, slow):
    # The collector is up before the agent, and the plugin's open takes 1.5 s: the dial-out
    # stream connects long before the first ASIC read. Its snapshot must hold the ASIC's
    # values, not an empty store. A first read that outlasts its poll (collected on a later
    # pass, as on a loaded machine) is waited for too.
    port, server_port = free_port(), free_port()
    col = Collector(f"127.0.0.1:{port}", insecure=True).start()
    extra = (f"  dialout:\n    - {{address: '127.0.0.1:{port}', insecure: true, name: c1}}\n"
             f"  server: {{listen: '127.0.0.1:{server_port}', insecure: true}}\n")
    cfg = _config(tmp_path, shifty, slow, extra)
    agent = AgentProcess(None, cfg, tmp_path)
    try:
        # dial-in: a STREAM Subscribe made while the plugin is still opening
        stub = gnmi_pb2_grpc.gNMIStub(grpc.insecure_channel(f"127.0.0.1:{server_port}"))
        request = gnmi_pb2.SubscribeRequest(subscribe=gnmi_pb2.SubscriptionList(
            mode=gnmi_pb2.SubscriptionList.STREAM, encoding=gnmi_pb2.PROTO,
            subscription=[gnmi_pb2.Subscription(path=gnmi_pb2.Path(origin="swtel", elem=[
                gnmi_pb2.PathElem(name="interfaces")]), mode=gnmi_pb2.ON_CHANGE)]))
        # (its 30 s deadline bounds the wait: no sync_response raises DEADLINE_EXCEEDED)
        stream = stub.Subscribe(iter([request]), timeout=30, wait_for_ready=True)
        seen: set[str] = set()
        for reply in stream:
            if reply.sync_response:
                break
            for u in reply.update.update:
                seen.add("/".join(e.name for e in list(reply.update.prefix.elem) + list(u.path.elem)))
        stream.cancel()
        assert "interfaces/interface/hw/state/counters/out-queue-length" in seen, seen
        assert col.wait_for(lambda c: any(m.get("sync") is True and "path" not in m for m in c.messages),
                            timeout=20), agent.log.read_text()
        with col._cond:
            messages = list(col.messages)
        sync_at = next(i for i, m in enumerate(messages) if m.get("sync") is True and "path" not in m)
        before = {m.get("path") for m in messages[:sync_at]}
        assert OCTETS.format(p="q0") in before and SYMBOLS.format(p="q1") in before
    finally:
        agent.stop()
        col.stop()


def test_a_jump_beyond_the_port_speed_is_reported_not_credited(shifty, tmp_path):
    # q0 (400G) moves by 1e13 octets in one 50 ms poll: more than 2 x speed x 10 s.
    agent = AgentProcess(None, _config(tmp_path, shifty, "ports=2 jump=6"), tmp_path)
    try:
        agent.wait_ready()
        agent.wait_for(lambda: len(_series(agent.records(), OCTETS.format(p="q0"))) >= 10, what="q0")
        code, status = status_json(tmp_path)
        assert status["sources"]["asic"]["jumps"] == 1
    finally:
        assert agent.stop() == 0
    q0 = _series(agent.records(), OCTETS.format(p="q0"))
    jumps = [r for r in q0 if r.get("jump")]
    assert len(jumps) == 1 and jumps[0]["reset"] and jumps[0]["delta"] == 0
    assert {r["delta"] for r in q0[1:] if not r.get("jump")} == {1000}  # the rest stays exact
    assert q0[-1]["value"] < 10**12  # never credited
    assert "counter moved more than its limit" in agent.log.read_text()


def test_oper_status_breakout_parent_and_wider_widths(shifty, tmp_path):
    agent = AgentProcess(None, _config(tmp_path, shifty, "ports=2 down=1 parent=swp9 width=40"), tmp_path)
    try:
        agent.wait_ready()
        agent.wait_for(lambda: len(_series(agent.records(), SYMBOLS.format(p="q1"))) >= 4, what="values")
    finally:
        assert agent.stop() == 0
    records = agent.records()
    state = {r["path"]: r["value"] for r in records if "/state/" in r["path"] and "counters" not in r["path"]
             and "/phy/" not in r["path"]}
    assert state["/interfaces/interface[name=q0]/state/oper-status"] == "UP"
    assert state["/interfaces/interface[name=q1]/state/oper-status"] == "DOWN"
    assert state["/interfaces/interface[name=q1]/state/hardware-port"] == "swp9"
    assert "/interfaces/interface[name=q0]/state/hardware-port" not in state
    # sent on change: once, though every pass asks the source for its states
    sent = [r["path"] for r in records if r["path"].endswith(("/oper-status", "/hardware-port"))]
    assert sorted(sent) == sorted(state_path for state_path in state if state_path.endswith(
        ("/oper-status", "/hardware-port")))
    assert {r["delta"] for r in _series(records, SYMBOLS.format(p="q1"))[1:]} == {100_000_000}


@pytest.mark.parametrize("config,message", [
    ("width=24", "counter 'phy_symbol_errors': width 24 (supported: 32, 40, 48, 64)"),
    ("kind=2", "counter 'HwIfOutQLen': a HISTOGRAM, but the plugin has no bin_info"),
    ("kind=7", "counter 'HwIfOutQLen': kind 7 (unknown; this swtel knows 0 COUNTER, 1 GAUGE, 2 HISTOGRAM, "
               "3 PEAK)"),
])
def test_undeclarable_widths_and_kinds_are_refused_at_load(shifty, tmp_path, config, message):
    agent = AgentProcess(None, _config(tmp_path, shifty, config), tmp_path)
    try:
        agent.wait_ready()
        code, status = agent.wait_for(
            lambda: (lambda cs: cs if cs[1] and cs[1]["sources"]["asic"].get("fault") else None)(status_json(tmp_path)),
            what="layout fault")
        assert message in status["sources"]["asic"]["fault"] and code == 1
        wait_polls(tmp_path, 10)  # ~20 asic polls: the refused layout is listed again only after RETRY_OPEN_S
        assert status_json(tmp_path)[1]["sources"]["asic"]["errors"] == 1
    finally:
        assert agent.stop() == 0
    assert not [r for r in agent.records() if "[name=q" in r.get("path", "")]
