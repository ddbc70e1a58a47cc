"""End to end through the real kernel: veth traffic -> swtel run -> JSON lines."""

from __future__ import annotations

import pytest

from tests.netns import UDP_OVERHEAD, AgentProcess, sh, veth_pair

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
            import time

            time.sleep(0.3)  # a few more ticks: nothing beyond the N datagrams may appear
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
