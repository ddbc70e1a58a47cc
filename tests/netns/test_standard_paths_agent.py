"""The standard-path election in a running agent: swp1 a veth in a namespace and a simulated
switch's port of the same name; the higher-ranked source publishes the standard leaf and the
other stays reachable (needs root)."""

from __future__ import annotations

import time
from contextlib import contextmanager
from pathlib import Path

import pytest

import agent.plugins  # noqa: F401 - the config sections
from tests.unit.test_asic_boundary import shifty  # noqa: F401 - the fixture: a plugin built here
from tests.unit.test_standard_paths import ASIC_ASIDE, HW, KERNEL, STD


@contextmanager
def _swp1():
    """swp1 (a veth) in a namespace of its own, its peer in another: traffic sent from the
    peer is exactly what swp1's kernel counters count."""
    from tests.namespaces import Pair, delete_namespace, new_namespace, sh

    a, b = new_namespace("s"), new_namespace("p")
    try:
        sh("ip", "link", "add", "swp1", "netns", a, "type", "veth", "peer", "name", "peer1", "netns", b)
        macs = {}
        for ns, ifname, ip in ((a, "swp1", "198.18.0.1"), (b, "peer1", "198.18.0.2")):
            sh("ip", "link", "set", ifname, "arp", "off", ns=ns)
            sh("ip", "addr", "add", f"{ip}/30", "dev", ifname, ns=ns)
            sh("ip", "link", "set", ifname, "up", ns=ns)
            macs[ns] = sh("cat", f"/sys/class/net/{ifname}/address", ns=ns).stdout.strip()
        sh("ip", "neigh", "add", "198.18.0.1", "lladdr", macs[a], "dev", "peer1", "nud", "permanent", ns=b)
        sh("ip", "neigh", "add", "198.18.0.2", "lladdr", macs[b], "dev", "swp1", "nud", "permanent", ns=a)
        # the peer's side first: send_udp goes from `a` of the Pair to its `b_ip`
        yield a, Pair(b, a, "peer1", "swp1", "198.18.0.2", "198.18.0.1")
    finally:
        delete_namespace(a)
        delete_namespace(b)


def _agent_config(tmp_path: Path, start: int, extra: str = "") -> str:
    return (
        "interval: 100ms\n"
        "sources:\n"
        f"  netdev: {{interfaces: [swp1]{extra}}}\n"
        "  ethtool: {interfaces: [swp1]}\n"
        "  system: {enabled: false}\n"
        f"  asic: {{enabled: true, plugin: sim, config: 'ports=1 seed=7 start={start}'}}\n"
        f"exporters:\n  jsonl: {{path: {tmp_path / 'out.jsonl'}}}\n"
        f"control: {{socket: {tmp_path / 'swtel.sock'}, group: null}}\n"
    )


def _sim_octets(config_text: str, start: int, ts: int) -> int:
    """The simulated switch's HwIfInOctets of swp1 at ``ts`` (tests/sim_model.py)."""
    from tests.sim_model import IDX, Model

    return Model(config_text).values(ts - start)[IDX["HwIfInOctets"]]


def _run(tmp_path: Path, extra: str):
    from agent.asic import builtin_path
    from tests.namespaces import AgentProcess

    if builtin_path("sim") is None:
        pytest.skip("sim plugin not built")
    start = time.time_ns()
    sim_config = f"ports=1 seed=7 start={start}"
    count, size = 25, 300
    with _swp1() as (ns, peer):
        agent = AgentProcess(ns, _agent_config(tmp_path, start, extra), tmp_path)
        try:
            agent.wait_ready()
            peer.send_udp(count, size)
            kernel_total = count * (size + 42)  # UDP payload + Ethernet, IPv4 and UDP headers

            def seen() -> bool:
                recs = agent.records()
                return any(r.get("value") == kernel_total and "in-octets" in r.get("path", "") for r in recs) and \
                    sum(1 for r in recs if r.get("path") in (STD.format(p="swp1"), ASIC_ASIDE.format(p="swp1"))
                        and r["value"] > kernel_total) >= 5

            agent.wait_for(seen, timeout=20, what="the kernel's octets and five ASIC samples")
        finally:
            assert agent.stop() == 0
        records = agent.records()
    return records, kernel_total, lambda ts: _sim_octets(sim_config, start, ts)


def _series(records: list[dict], path: str) -> list[dict]:
    return [r for r in records if r.get("path") == path]


@pytest.mark.root
def test_the_standard_leaf_carries_the_asic_and_the_kernel_stays_reachable(tmp_path):
    records, kernel_total, sim = _run(tmp_path, "")
    std = _series(records, STD.format(p="swp1"))
    # from the ASIC's first sample on, the OpenConfig leaf is the ASIC's value, exactly
    first = next(n for n, r in enumerate(std) if r["value"] > kernel_total)
    assert len(std) - first >= 5
    for r in std[first:]:
        assert r["value"] == sim(r["ts"]), r
    assert all(b["value"] - a["value"] == b["delta"] for a, b in zip(std[first:], std[first + 1:], strict=False))
    # the kernel's counter: on its swtel path, exact
    kernel = _series(records, KERNEL.format(p="swp1"))
    assert kernel and kernel[-1]["value"] == kernel_total
    assert all(r["value"] <= kernel_total for r in kernel)
    # the plugin's hardware path no longer carries it; no reset or jump anywhere
    assert not _series(records, HW.format(p="swp1"))
    assert not any(r.get("reset") or r.get("jump") for r in records)


@pytest.mark.root
def test_the_override_puts_the_kernel_on_the_standard_leaf(tmp_path):
    records, kernel_total, sim = _run(tmp_path, ", rank: 3")
    std = _series(records, STD.format(p="swp1"))
    assert std and std[-1]["value"] == kernel_total and all(r["value"] <= kernel_total for r in std)
    aside = _series(records, ASIC_ASIDE.format(p="swp1"))
    assert len(aside) >= 5
    for r in aside:
        assert r["value"] == sim(r["ts"]), r
    assert not _series(records, KERNEL.format(p="swp1")) and not _series(records, HW.format(p="swp1"))
    assert not any(r.get("reset") or r.get("jump") for r in records)


def _gated_config(tmp_path: Path, plugin: str, gate: Path) -> str:
    """The kernel's swp1 and shifty's swp0 and swp1, whose open returns once ``gate`` exists."""
    return (
        "interval: 100ms\n"
        "sources:\n"
        "  netdev: {interfaces: [swp1]}\n"
        "  ethtool: {enabled: false}\n"
        "  system: {enabled: false}\n"
        f"  asic: {{enabled: true, plugin: '{plugin}', config: 'ports=2 prefix=swp open_gate={gate}'}}\n"
        f"exporters:\n  jsonl: {{path: {tmp_path / 'out.jsonl'}}}\n"
        f"control: {{socket: {tmp_path / 'swtel.sock'}, group: null}}\n"
    )


@pytest.mark.root
def test_a_slow_plugin_s_port_carries_the_standard_leaf_from_its_first_value(shifty, tmp_path):  # noqa: F811
    """Issue 34: the kernel's swp1 counts traffic while the plugin's open is still running (it
    returns once the test creates its gate); every value on swp1's standard in-octets leaf is
    the plugin's, from the first, with no delete; the kernel's is on its own path throughout.
    The plugin's swp0, which the kernel has not, is an ASIC-only port: its standard leaf too."""
    from tests.helpers import status_doc

    gate = tmp_path / "open-now"
    text = _gated_config(tmp_path, shifty, gate)
    count, size = 25, 300
    kernel_total = count * (size + 42)  # UDP payload + Ethernet, IPv4 and UDP headers
    from tests.namespaces import AgentProcess

    with _swp1() as (ns, peer):
        agent = AgentProcess(ns, text, tmp_path)
        try:
            agent.wait_ready()
            peer.send_udp(count, size)
            octets = (KERNEL.format(p="swp1"), STD.format(p="swp1"))  # (on either: the asserts say which)
            agent.wait_for(lambda: any(r.get("path") in octets and r["value"] == kernel_total
                                       for r in agent.records()), timeout=20,
                           what="the kernel's octets while the plugin opens")
            assert status_doc(tmp_path)["sources"]["asic"]["open"] is False  # still opening: the race is on
            # (the helper's open deadline, 5 s from the start, bounds the hold: past it, nothing to show)
            assert "source did not open" not in agent.log.read_text(), "the open deadline passed first"
            gate.touch()
            agent.wait_for(lambda: len(_series(agent.records(), STD.format(p="swp1"))) >= 5, timeout=20,
                           what="five of the plugin's values on swp1")
        finally:
            assert agent.stop() == 0
        records = agent.records()
    # shifty's swp1 (its port 1) counts 2000 octets per read, swp0 1000: exact, from the first value
    for port, step in (("swp1", 2000), ("swp0", 1000)):
        std = _series(records, STD.format(p=port))
        assert len(std) >= 5 and [r["value"] for r in std] == [step * (n + 1) for n in range(len(std))], std[:3]
        assert std[0].get("new") and not _series(records, HW.format(p=port))
    deleted = [r["path"] for r in records if r.get("delete")]
    assert not any(STD.format(p="swp1").startswith(d) for d in deleted), deleted
    # a standard leaf the plugin turned out not to give (shifty has no HwIfOutOctets) goes back to
    # the kernel once its table came: the kernel's aside path deleted, the leaf fresh
    out_octets = "/interfaces/interface[name=swp1]/state/counters/out-octets"
    assert f"swtel:{out_octets.replace('[name=swp1]/', '[name=swp1]/netdev/')}" in deleted
    assert _series(records, out_octets)[0].get("new")
    kernel = _series(records, KERNEL.format(p="swp1"))
    assert kernel[-1]["value"] == kernel_total and all(r["value"] <= kernel_total for r in kernel)
    assert records.index(kernel[0]) < records.index(_series(records, STD.format(p="swp1"))[0])
    assert not any(r.get("reset") or r.get("jump") for r in records)


@pytest.mark.root
def test_a_plugin_that_never_opens_gives_the_leaf_to_the_kernel_at_its_deadline(shifty, tmp_path):  # noqa: F811
    """The hold is bounded by the plugin's open deadline: the gate never opens, the open
    times out, the log says the switch, and the kernel's counter takes the standard leaf
    (flagged new), its swtel path deleted."""
    from tests.namespaces import AgentProcess

    with _swp1() as (ns, peer):
        agent = AgentProcess(ns, _gated_config(tmp_path, shifty, tmp_path / "never"), tmp_path)
        try:
            agent.wait_ready()
            agent.wait_for(lambda: _series(agent.records(), KERNEL.format(p="swp1")), timeout=20,
                           what="the kernel's octets on their own path while the plugin opens")
            agent.wait_for(lambda: "source did not open" in agent.log.read_text(), timeout=30,
                           what="the open deadline")
            peer.send_udp(10, 100)
            agent.wait_for(lambda: any(r["value"] == 10 * 142 for r in _series(agent.records(), STD.format(p="swp1"))),
                           timeout=20, what="the kernel's octets on the standard leaf")
        finally:
            assert agent.stop() == 0
        records = agent.records()
    std = _series(records, STD.format(p="swp1"))
    assert std[0].get("new") and records.index(std[0]) > records.index(_series(records, KERNEL.format(p="swp1"))[-1])
    assert any(r.get("delete") and r["path"] == "swtel:/interfaces/interface[name=swp1]/netdev/state/counters"
               for r in records)
    assert "asic" in agent.log.read_text().split("source did not open", 1)[1].splitlines()[0]
