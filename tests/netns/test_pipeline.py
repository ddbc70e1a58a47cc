"""End to end through the real kernel: veth traffic -> swtel run -> JSON lines."""

from __future__ import annotations

import pytest

from tests.helpers import status_json, wait_polls, wait_until
from tests.namespaces import UDP_OVERHEAD, AgentProcess, sh, veth_pair

pytestmark = pytest.mark.root


def _config(tmp_path, interfaces: list[str], extra: str = "") -> str:
    return (
        "interval: 50ms\n"
        "sources:\n"
        f"  netdev: {{interfaces: {interfaces}, exclude: [lo]}}\n"
        f"  ethtool: {{interfaces: {interfaces}}}\n"
        "  system: {enabled: false}\n"
        f"exporters:\n  jsonl: {{path: {tmp_path / 'out.jsonl'}}}\n"
        f"control: {{socket: {tmp_path / 'swtel.sock'}, group: null}}\n" + extra
    )


def _sum_deltas(records: list[dict], path: str) -> int:
    return sum(r["delta"] for r in records if r.get("path") == path and not r.get("new"))


@pytest.mark.parametrize("count,size", [(1000, 100), (250, 1400)])
def test_exact_udp_counts_reach_jsonl(tmp_path, count, size):
    with veth_pair() as pair:
        agent = AgentProcess(pair.b, _config(tmp_path, [pair.b_if]), tmp_path)
        try:
            agent.wait_ready()
            base = f"/interfaces/interface[name={pair.b_if}]/state/counters"
            agent.wait_for(lambda: any(r.get("path") == f"{base}/in-pkts" for r in agent.records()),
                           what="baseline of in-pkts")
            pair.send_udp(count, size)
            agent.wait_for(lambda: _sum_deltas(agent.records(), f"{base}/in-pkts") >= count,
                           what=f"{count} packets counted")
            wait_polls(tmp_path, 3, "netdev")  # a few more polls: nothing beyond the N datagrams may appear
        finally:
            assert agent.stop() == 0
        records = agent.records()
        assert _sum_deltas(records, f"{base}/in-pkts") == count
        assert _sum_deltas(records, f"{base}/in-octets") == count * (size + UDP_OVERHEAD)
        # Timestamps are realtime ns, and each change carries the cumulative value.
        pkts = [r for r in records if r.get("path") == f"{base}/in-pkts"]
        assert all(r["ts"] > 1.6e18 for r in pkts)
        assert pkts[-1]["value"] - pkts[0]["value"] == count


def test_ports_added_and_removed_while_running(tmp_path):
    with veth_pair() as pair:
        agent = AgentProcess(pair.b, _config(tmp_path, ["*"]), tmp_path)
        try:
            agent.wait_ready()
            new_a, new_b = f"n{pair.b_if[2:]}x", f"n{pair.b_if[2:]}y"
            sh("ip", "link", "add", new_a, "type", "veth", "peer", "name", new_b, ns=pair.b)
            sh("ip", "link", "set", new_a, "up", ns=pair.b)
            sh("ip", "link", "set", new_b, "up", ns=pair.b)
            added = f"/interfaces/interface[name={new_a}]/state/counters/in-pkts"
            agent.wait_for(lambda: any(r.get("path") == added for r in agent.records()), what="new port")
            oper = f"/interfaces/interface[name={new_a}]/state/oper-status"
            agent.wait_for(lambda: any(r.get("path") == oper and r.get("value") == "UP" for r in agent.records()),
                           what="oper-status UP of the new port")
            sh("ip", "link", "del", new_a, ns=pair.b)
            gone = f"/interfaces/interface[name={new_a}]"
            agent.wait_for(lambda: any(r.get("delete") and r["path"] == gone for r in agent.records()),
                           what="delete of the removed port")
            n_before = len(agent.records())
            pair.send_udp(10, 64)  # the agent keeps working on the remaining port
            base = f"/interfaces/interface[name={pair.b_if}]/state/counters/in-pkts"
            agent.wait_for(lambda: _sum_deltas(agent.records(), base) >= 10, what="traffic after delete")
            assert agent.proc.poll() is None
        finally:
            assert agent.stop() == 0
        records = agent.records()
        deleted_at = next(i for i, r in enumerate(records) if r.get("delete") and r["path"] == gone)
        assert deleted_at < n_before
        # The port's subtree is deleted once per origin, and nothing else about it follows.
        deletes = [r["path"] for r in records if r.get("delete")]
        both_ends = [f"/interfaces/interface[name={n}]" for n in (new_a, new_b)]  # a veth dies whole
        assert sorted(deletes) == sorted(both_ends + [f"swtel:{p}" for p in both_ends])
        assert not [r for r in records[deleted_at + 1:] if f"[name={new_a}]" in r["path"] and not r.get("delete")]


def test_rename_is_a_delete_and_a_new_port_and_health_is_published(tmp_path):
    with veth_pair() as pair:
        extra = ""
        agent = AgentProcess(pair.b, _config(tmp_path, ["*"], extra), tmp_path)
        try:
            agent.wait_ready()
            old = f"/interfaces/interface[name={pair.b_if}]"
            agent.wait_for(lambda: any(r.get("path") == f"{old}/state/counters/in-pkts" for r in agent.records()),
                           what="the port's baseline")
            renamed = f"r{pair.b_if[2:]}"
            sh("ip", "link", "set", pair.b_if, "down", ns=pair.b)
            sh("ip", "link", "set", pair.b_if, "name", renamed, ns=pair.b)
            sh("ip", "link", "set", renamed, "up", ns=pair.b)
            new = f"/interfaces/interface[name={renamed}]/state/counters/in-pkts"
            agent.wait_for(lambda: any(r.get("path") == new for r in agent.records()), what="renamed port")
            agent.wait_for(lambda: any(r.get("delete") and r["path"] == old for r in agent.records()),
                           what="delete of the old name")
            cadence = "swtel:/agent/sources/source[name=netdev]/state/interval-ms"
            agent.wait_for(lambda: any(r.get("path") == cadence and r["value"] == 50 for r in agent.records()),
                           what="per-source health")
        finally:
            assert agent.stop() == 0


def test_odd_interface_names_are_escaped_and_polling_goes_on(tmp_path):
    """Linux allows ']' and '\\' in interface names; paths escape them and nothing chokes."""
    from agent.gnmi import encode, paths

    with veth_pair() as pair:
        odd = "x]y\\z"
        sh("ip", "link", "add", odd, "type", "veth", "peer", "name", "odd-peer", ns=pair.b)
        sh("ip", "link", "set", odd, "up", ns=pair.b)
        agent = AgentProcess(pair.b, _config(tmp_path, ["*"]), tmp_path)
        try:
            agent.wait_ready()
            escaped = "/interfaces/interface[name=x\\]y\\\\z]/state/counters/in-pkts"
            agent.wait_for(lambda: any(r.get("path") == escaped for r in agent.records()), what="escaped path")
            pair.send_udp(5, 64)
            base = f"/interfaces/interface[name={pair.b_if}]/state/counters/in-pkts"
            agent.wait_for(lambda: _sum_deltas(agent.records(), base) >= 5, what="polling goes on")
        finally:
            assert agent.stop() == 0
    # The escaped path parses back to the raw name, and encodes to gNMI with it.
    elems = paths.split(escaped)
    assert elems[1] == ("interface", {"name": odd})
    from agent.counters import CounterSpec, CounterTable
    from agent.sources.base import interface

    table = CounterTable("netdev", [CounterSpec(interface(odd, "openconfig", "state/counters"), "in-pkts")])
    from tests.gnmi_helpers import make_batch

    (msg,) = encode.encode_batch(make_batch(table, [7], ts_ns=1), "t")
    from pygnmi.spec.v080 import gnmi_pb2

    n = gnmi_pb2.SubscribeResponse.FromString(msg).update
    assert n.prefix.elem[1].key["name"] == odd


def test_a_failing_exporter_does_not_stop_polling(tmp_path):
    """One listener raising on new data is counted and logged; the others still get it."""
    import time

    from agent import config
    from agent.engine import Engine
    from agent.listener import Listener

    class Broken(Listener):
        name = "broken"

        def start(self, store): ...
        def on_batch(self, batch): raise RuntimeError("boom")
        def on_state(self, updates): raise RuntimeError("boom")
        def on_delete(self, ts, containers): raise RuntimeError("boom")
        def stop(self, timeout): ...
        def status(self): return {}

    class Counting(Broken):
        name = "counting"
        batches = 0

        def on_batch(self, batch):
            Counting.batches += 1

        def on_state(self, updates): ...

    cfg = config.parse("interval: 20ms\n"
                       "sources: {netdev: {interfaces: [lo], exclude: []}, ethtool: {enabled: false}}\n")
    engine = Engine(cfg, [Broken(), Counting()])
    engine.start()
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and (engine.listener_errors < 1 or Counting.batches < 1):
            time.sleep(0.02)
        ticks = engine.ticks
        wait_until(lambda: engine.ticks > ticks, 30, "more ticks")
        assert engine.loop_error is None
        assert engine.listener_errors >= 1 and Counting.batches >= 1
    finally:
        engine.stop()


def test_disabling_ethtool_by_reload_deletes_its_containers(tmp_path):
    import os
    import signal

    with veth_pair() as pair:
        agent = AgentProcess(pair.b, _config(tmp_path, [pair.b_if]), tmp_path)
        try:
            agent.wait_ready()
            raw = f"swtel:/interfaces/interface[name={pair.b_if}]/ethtool"
            agent.wait_for(lambda: any(r.get("path", "").startswith(raw + "/") for r in agent.records()),
                           what="ethtool counters")
            agent.config.write_text(_config(tmp_path, [pair.b_if]).replace(
                f"  ethtool: {{interfaces: ['{pair.b_if}']}}\n", "  ethtool: {enabled: false}\n"))
            assert "ethtool: {enabled: false}" in agent.config.read_text()
            os.kill(agent.proc.pid, signal.SIGHUP)
            agent.wait_for(lambda: any(r.get("delete") and r["path"] == raw for r in agent.records()),
                           what="delete of the ethtool container")
            # The port itself is still there (netdev holds it): no port-level delete.
            assert not any(r.get("delete") and r["path"].endswith(f"[name={pair.b_if}]") for r in agent.records())
        finally:
            assert agent.stop() == 0


def test_a_source_selecting_no_interface_says_so(tmp_path):
    """`Ethernet*` on a switch whose ports are swpN: both sources read nothing, log it, and
    health turns red once control.health_grace is over (issue 38 item 5)."""
    with veth_pair() as pair:
        cfg = _config(tmp_path, ["Ethernet*"]).replace("group: null}", "group: null, health_grace: 1s}")
        assert "health_grace: 1s" in cfg
        agent = AgentProcess(pair.b, cfg, tmp_path)
        try:
            agent.wait_ready()
            agent.wait_for(lambda: "source selects no interface" in agent.log.read_text(), what="warning")
            for source in ("netdev", "ethtool"):
                agent.wait_for(lambda s=source: any(
                    "source selects no port" in line and f"source={s}" in line
                    for line in agent.log.read_text().splitlines()), what=f"{source}'s log line")

            def red():
                code, doc = status_json(tmp_path)
                problems = doc.get("health", {}).get("problems", [])
                return code == 1 and problems and all("selects no port" in p for p in problems) and problems

            problems = agent.wait_for(red, what="health red after the grace")
            assert sorted(p.split(":")[0] for p in problems) == ["source ethtool", "source netdev"]
            code, doc = status_json(tmp_path)
            assert doc["sources"]["netdev"]["ports"] == 0 and doc["sources"]["netdev"]["selects_ports"]
        finally:
            assert agent.stop() == 0


def test_removed_port_is_deleted_once_even_when_sources_poll_at_different_rates(tmp_path):
    """netdev every 50 ms, ethtool every 5 s: a removed port still goes in one pass, as one
    delete per origin, without waiting for the slow source and without leftovers."""

    with veth_pair() as pair:
        # ethtool polled hourly: a delete seen within the test came from the link event
        cfg = _config(tmp_path, ["*"]).replace("  ethtool: {interfaces: ['*']}\n",
                                                "  ethtool: {interfaces: ['*'], interval: 1h}\n")
        assert "interval: 1h" in cfg
        agent = AgentProcess(pair.b, cfg, tmp_path)
        try:
            agent.wait_ready()
            a, b = f"s{pair.b_if[2:]}x", f"s{pair.b_if[2:]}y"
            sh("ip", "link", "add", a, "type", "veth", "peer", "name", b, ns=pair.b)
            raw = f"swtel:/interfaces/interface[name={a}]/ethtool/peer-ifindex"
            agent.wait_for(lambda: any(r.get("path") == raw for r in agent.records()), what="ethtool on new port")
            sh("ip", "link", "del", a, ns=pair.b)
            ends = [f"/interfaces/interface[name={n}]" for n in (a, b)]
            agent.wait_for(lambda: len([r for r in agent.records() if r.get("delete")]) >= 4, timeout=60,
                           what="the deletes of both ends, long before the slow source's next poll")
        finally:
            assert agent.stop() == 0
        deletes = sorted(r["path"] for r in agent.records() if r.get("delete"))
        assert deletes == sorted(ends + [f"swtel:{p}" for p in ends])
