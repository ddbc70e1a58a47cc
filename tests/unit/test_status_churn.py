"""Status during an incident: the control thread never iterates the tick thread's live
structures (agent/handoff.py), so `status` and `ports` answer every time while events open
and clear as fast as the detectors can raise them (issue 34: "deque mutated during
iteration" failed 4 of 1,500 `swtel status` and 30 of 1,000 `ports` under churn)."""

from __future__ import annotations

import socket
import time

import pytest

from agent.control.protocol import MAX_REPLY, pack, read_frame
from tests.helpers import SOCKET
from tests.namespaces import AgentProcess

pytestmark = pytest.mark.slow

PORTS = 60
REQUESTS = 3_000  # status and ports, alternating
# 60 scenarios (the sim's limit is 64): every port in one of them, from the start, for good
SCENARIOS = (
    [f"microburst@0s-:swp{p}" for p in range(1, 21)]
    + [f"link-flap@0s-:swp{p}" for p in range(21, 41)]
    + [f"drops@0s-:swp{p}:{reason}" for p, reason in
       zip(range(41, 61), ["ingress-vlan-filter", "blackhole-route"] * 10, strict=True)]
)


def churn_config(workdir) -> str:
    sim = f"role=spine ports={PORTS} seed=1 start={time.time_ns()} " + " ".join(
        f"scenario={s}" for s in SCENARIOS)
    # every drop and flap raises an event (threshold 1) that clears after 100 ms without one:
    # the event book's open map and its recent deque change at every pass
    fast = "{threshold: 1, window: 100ms, clear_after: 100ms}"
    return (
        "target: churn\ninterval: 100ms\nsources:\n"
        "  netdev: {enabled: false}\n  ethtool: {enabled: false}\n  system: {enabled: false}\n"
        f"  asic: {{enabled: true, plugin: sim, config: '{sim}'}}\n"
        f"insights:\n  history: 300\n  drop_burst: {fast}\n  link_flap: {fast}\n  drop_reason: {fast}\n"
        f"control: {{socket: {workdir / SOCKET}, group: null}}\n"
    )


def ask(conn: socket.socket, cmd: str) -> dict:
    conn.sendall(pack({"cmd": cmd}))
    return read_frame(conn, MAX_REPLY, 10.0)


def test_3000_status_and_ports_requests_during_event_churn(tmp_path):
    agent = AgentProcess(None, churn_config(tmp_path), tmp_path)
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        agent.wait_ready()
        conn.settimeout(10.0)
        conn.connect(str(tmp_path / SOCKET))

        def churning() -> bool:
            events = ask(conn, "status")["result"]["events"]
            return len(events["recent"]) >= 20 and len(events["open"]) >= 5

        agent.wait_for(churning, 30, "events to open and clear")
        first = ask(conn, "status")["result"]
        failures: list[str] = []
        types: set[str] = set()
        last: dict = {}
        for n in range(REQUESTS):
            cmd = "status" if n % 2 == 0 else "ports"
            reply = ask(conn, cmd)  # one persistent connection: a failed command keeps it usable
            if not reply.get("ok"):
                failures.append(f"{cmd}: {reply.get('error')}")
                continue
            result = reply["result"]
            events = result["events"]
            types |= {ev["type"] for ev in events["open"] + events["recent"]}
            if cmd == "ports":
                assert len(result["ports"]) == PORTS, sorted(result["ports"])
                assert result["stale_s"] is None
            else:
                assert result["tick"]["stale_s"] is None and not result["tick"]["loop_error"]
                last = result
        assert failures == [], f"{len(failures)} of {REQUESTS} failed, e.g. {failures[:3]}"
        # the churn went on throughout: events were raised and cleared while we asked
        ids = lambda doc: {ev["id"] for ev in doc["events"]["open"] + doc["events"]["recent"]}  # noqa: E731
        assert max(ids(last)) > max(ids(first)) + 50, (max(ids(first)), max(ids(last)))
        assert last["tick"]["ticks"] > first["tick"]["ticks"]
        assert {"link-flap", "drop-burst", "drop-reason"} <= types, types
    finally:
        conn.close()
        assert agent.stop() == 0
