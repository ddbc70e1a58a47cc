"""rdma source against a fake sysfs tree (injected root), through the real engine."""

from __future__ import annotations

from pathlib import Path

import pytest

from agent import config
from agent.counters import F_NEW, F_WRAP
from agent.engine import Engine
from agent.listener import Listener
from tests.helpers import wait_until

pytestmark = pytest.mark.nolibs  # no versioned library decides its outcome: not in the Debian pass

DEV = "class/infiniband/mlx5_0/ports/1"


class Collect(Listener):
    name = "collect"

    def __init__(self):
        self.batches = []

    def start(self, store):
        pass

    def on_batch(self, batch):
        self.batches.append(batch)

    def on_state(self, updates):
        pass

    def on_delete(self, ts_ns, containers):
        pass

    def stop(self, timeout):
        pass

    def status(self):
        return {}

    def changes(self, leaf: str) -> list[tuple[int, int, int]]:
        return [(v, d, f) for b in self.batches for spec, _p, v, d, f in b.items() if spec.leaf == leaf]


def _write(root: Path, sub: str, name: str, value: int) -> None:
    # In place, as the kernel presents it: the agent keeps the file open.
    path = root / DEV / sub / name
    with open(path, "r+" if path.exists() else "w") as fh:
        fh.write(f"{value}\n")
        fh.truncate()


def _rdma_only(root: Path, rdma: str = "enabled: true") -> config.Config:
    """A config with only the rdma source, reading the fake sysfs tree at ``root``."""
    return config.parse(
        f"interval: 20ms\nsources: {{netdev: {{enabled: false}}, ethtool: {{enabled: false}},"
        f" system: {{enabled: false}}, rdma: {{root: {root}, {rdma}}}}}\n"
    )


def test_rdma_counters_wrap_and_count(tmp_path):
    for sub in ("hw_counters", "counters"):
        (tmp_path / DEV / sub).mkdir(parents=True)
    _write(tmp_path, "hw_counters", "roce_adp_retrans", 4294967290)  # 32-bit, about to wrap
    _write(tmp_path, "hw_counters", "np_cnp_sent", 10)
    _write(tmp_path, "hw_counters", "out_of_sequence", 0)
    _write(tmp_path, "counters", "port_rcv_data", 1000)
    sink = Collect()
    engine = Engine(_rdma_only(tmp_path), [sink])
    engine.start()
    try:
        wait_until(lambda: len(sink.changes("roce-adp-retrans")) == 1, 30, "the first roce-adp-retrans change")
        _write(tmp_path, "hw_counters", "roce_adp_retrans", 5)  # wrapped: +11
        _write(tmp_path, "hw_counters", "np_cnp_sent", 25)
        wait_until(lambda: len(sink.changes("roce-adp-retrans")) == 2 and len(sink.changes("np-cnp-sent")) == 2,
                   5, "second changes of both counters")
        status = engine.status()["sources"]["rdma"]
    finally:
        engine.stop()
    (v0, d0, f0), (v1, d1, f1) = sink.changes("roce-adp-retrans")
    assert f0 & F_NEW and v0 == 4294967290
    assert (v1, d1) == (4294967290 + 11, 11) and f1 & F_WRAP
    assert sink.changes("np-cnp-sent")[1][:2] == (25, 15)
    paths = {p for b in sink.batches for _s, p, *_ in b.items()}
    assert "swtel:/rdma/devices/device[name=mlx5_0]/ports/port[id=1]/hw-counters/roce-adp-retrans" in paths
    assert "swtel:/rdma/devices/device[name=mlx5_0]/ports/port[id=1]/counters/port-rcv-data" in paths
    assert status["counters"] == 4 and status["errors"] == 0


def test_rdma_device_appearing_later_is_picked_up(tmp_path, monkeypatch):
    from agent.sources import rdma

    monkeypatch.setattr(rdma, "RESCAN_S", 0.1)
    sink = Collect()
    engine = Engine(_rdma_only(tmp_path), [sink])
    engine.start()
    try:
        wait_until(lambda: engine.status()["sources"]["rdma"]["reads"] > 3, 30, "four rdma reads")
        assert engine.status()["sources"]["rdma"]["counters"] == 0
        (tmp_path / DEV / "hw_counters").mkdir(parents=True)  # mlx5_ib loads late
        _write(tmp_path, "hw_counters", "roce_adp_retrans", 3)
        wait_until(lambda: len(sink.changes("roce-adp-retrans")) == 1, 30, "the first roce-adp-retrans change")
        _write(tmp_path, "hw_counters", "roce_adp_retrans", 9)
        wait_until(lambda: len(sink.changes("roce-adp-retrans")) == 2, 30, "the second roce-adp-retrans change")
    finally:
        engine.stop()
    assert sink.changes("roce-adp-retrans")[1][:2] == (9, 6)


def test_reload_changing_a_source_keeps_its_data_and_disabling_it_deletes(tmp_path):
    (tmp_path / DEV / "hw_counters").mkdir(parents=True)
    _write(tmp_path, "hw_counters", "np_cnp_sent", 41)

    def cfg(rdma: str):
        return _rdma_only(tmp_path, rdma)

    sink = Collect()
    deletes = []
    sink.on_delete = lambda ts, containers: deletes.extend(containers)
    engine = Engine(cfg("enabled: true, interval: 50ms"), [sink])
    engine.start()
    try:
        wait_until(lambda: len(sink.changes("np-cnp-sent")) == 1, 30, "the first np-cnp-sent change")
        engine.reload(cfg("enabled: true, interval: 60ms"))  # the section changed: a new runner
        wait_until(lambda: engine.status()["sources"]["rdma"]["interval_s"] == 0.06, 30, "the reloaded interval")
        reads = engine.status()["sources"]["rdma"]["reads"]  # then three polls of the new runner
        wait_until(lambda: engine.status()["sources"]["rdma"]["reads"] >= reads + 3, 30, "three more polls")
        # The quiet counter is still in the store (snapshots, gNMI Get), unchanged, not reset.
        snap = {b.source: b for b in engine.store.snapshot_batches()}
        assert [snap["rdma"].values[i] for i in snap["rdma"].indices] == [41]
        assert len(sink.changes("np-cnp-sent")) == 1  # no new baseline after the reload
        engine.reload(cfg("enabled: false"))
        wait_until(lambda: "rdma" not in engine.status()["sources"], 30, "the rdma source gone")
        wait_until(lambda: any(c.path.startswith("/rdma/devices/device[name=mlx5_0]") for c in deletes),
                   5, "mlx5_0's delete")
        assert "rdma" not in {b.source for b in engine.store.snapshot_batches()}
    finally:
        engine.stop()


def test_rdma_odd_port_and_device_names_are_read_not_fatal(tmp_path):
    """A port directory named ``²`` (``str.isdigit()`` is True, ``int()`` refuses it) and a
    device whose name is not UTF-8 are read like any other, under escaped printable names."""
    import os

    (tmp_path / DEV / "hw_counters").mkdir(parents=True)
    _write(tmp_path, "hw_counters", "roce_adp_retrans", 1)
    odd_port = tmp_path / "class/infiniband/mlx5_0/ports/²/hw_counters"
    odd_port.mkdir(parents=True)
    (odd_port / "np_cnp_sent").write_text("7\n")
    odd_dev = os.path.join(os.fsencode(tmp_path), b"class/infiniband/mlx5_\xff/ports/1/hw_counters")
    os.makedirs(odd_dev)
    with open(os.path.join(odd_dev, b"out_of_sequence"), "w") as fh:
        fh.write("3\n")
    sink = Collect()
    engine = Engine(_rdma_only(tmp_path), [sink])
    engine.start()
    try:
        wait_until(lambda: sink.changes("roce-adp-retrans") and sink.changes("np-cnp-sent")
                   and sink.changes("out-of-sequence"), 30, "the first reads of all three ports")
        _write(tmp_path, "hw_counters", "roce_adp_retrans", 4)
        wait_until(lambda: len(sink.changes("roce-adp-retrans")) == 2, 30, "polling to go on")
        status = engine.status()["sources"]["rdma"]
    finally:
        engine.stop()
    assert status["fault"] is None and status["errors"] == 0 and status["counters"] == 3
    paths = {p for b in sink.batches for _s, p, *_ in b.items()}
    base = "swtel:/rdma/devices/device[name="
    assert f"{base}mlx5_0]/ports/port[id=²]/hw-counters/np-cnp-sent" in paths
    assert f"{base}mlx5_%FF]/ports/port[id=1]/hw-counters/out-of-sequence" in paths
    assert all(p.isprintable() for p in paths)


def test_rdma_fifo_as_a_counter_file_does_not_block_the_tick_thread(tmp_path):
    """A FIFO under the root (no writer: a blocking open never returns) is not a counter: it
    is skipped, and the real counters beside it are read every poll."""
    import os

    (tmp_path / DEV / "hw_counters").mkdir(parents=True)
    _write(tmp_path, "hw_counters", "roce_adp_retrans", 1)
    os.mkfifo(tmp_path / DEV / "hw_counters" / "np_cnp_sent")
    (tmp_path / DEV / "hw_counters" / "out_of_buffer").mkdir()  # a directory is not one either
    sink = Collect()
    engine = Engine(_rdma_only(tmp_path), [sink])
    engine.start()
    try:
        wait_until(lambda: len(sink.changes("roce-adp-retrans")) == 1, 30, "the first read")
        _write(tmp_path, "hw_counters", "roce_adp_retrans", 6)
        wait_until(lambda: len(sink.changes("roce-adp-retrans")) == 2, 30, "the next read")
        status = engine.status()["sources"]["rdma"]
    finally:
        engine.stop()
    assert not engine._thread.is_alive()  # stopped: it was never stuck in the FIFO
    assert status["counters"] == 1 and status["errors"] == 0 and status["fault"] is None
    assert sink.changes("roce-adp-retrans")[1][:2] == (6, 5)


def test_each_rdma_port_names_its_netdev_and_the_info_series_carries_it(tmp_path):
    """An RDMA port's netdev, from its RoCE GID table (gid_attrs/ndevs) or else the device's
    device/net (by dev_port): a state, and ``swtel_rdma_port_info`` for OTLP and remote write,
    the join from the host's RoCE counters to the netdev's LLDP neighbour (sources.lldp)."""
    from agent.exporters.state_gauges import gauges
    from agent.sources.rdma import RdmaSource
    from agent.store import Store

    ib = tmp_path / "class" / "infiniband"
    for dev, ports in (("mlx5_0", ("1",)), ("mlx5_1", ("1",)), ("mlx5_2", ("1", "2")), ("mlx5_3", ("1",))):
        for port in ports:
            (ib / dev / "ports" / port / "hw_counters").mkdir(parents=True)
            (ib / dev / "ports" / port / "hw_counters" / "roce_adp_retrans").write_text("0\n")
    ndevs = ib / "mlx5_0" / "ports" / "1" / "gid_attrs" / "ndevs"
    ndevs.mkdir(parents=True)
    (ndevs / "0").write_text("enp1s0f0np0\n")
    (ndevs / "1").write_text("enp1s0f0np0\n")
    (ndevs / "2").write_text("")  # an unused GID entry
    (ib / "mlx5_1" / "device" / "net" / "enp2s0np0").mkdir(parents=True)  # no RoCE GID yet: the one netdev
    for name, dev_port in (("enp3s0f0", "0"), ("enp3s0f1", "1")):  # two ports: matched by dev_port
        (ib / "mlx5_2" / "device" / "net" / name).mkdir(parents=True)
        (ib / "mlx5_2" / "device" / "net" / name / "dev_port").write_text(f"{dev_port}\n")
    src = RdmaSource(_rdma_only(tmp_path))
    src.setup({})
    try:
        got = {(u.container.path, u.leaf): u.value for u in src.states(1)}
        assert got == {
            ("/rdma/devices/device[name=mlx5_0]/ports/port[id=1]/state", "netdev"): "enp1s0f0np0",
            ("/rdma/devices/device[name=mlx5_1]/ports/port[id=1]/state", "netdev"): "enp2s0np0",
            ("/rdma/devices/device[name=mlx5_2]/ports/port[id=1]/state", "netdev"): "enp3s0f0",
            ("/rdma/devices/device[name=mlx5_2]/ports/port[id=2]/state", "netdev"): "enp3s0f1",
        }  # mlx5_3 has none: nothing said
        assert src.states(2) == []  # unchanged: nothing again
        (ndevs / "0").write_text("bond0\n")
        (ndevs / "1").write_text("bond0\n")
        src._next_scan = 0.0  # the periodic rescan, due now
        src.setup({})
        (update,) = src.states(3)
        assert (update.container.path.split("/")[3], update.value) == ("device[name=mlx5_0]", "bond0")
        store = Store()
        src._netdevs_sent = {}  # every netdev again, into a store as the engine feeds it
        store.set_states(src.states(5))
        info = sorted((name, attrs) for name, attrs, value, _ts in gauges(store) if value == 1.0)
        assert ("swtel_rdma_port_info", (("interface", "mlx5_0"), ("port", "1"), ("netdev", "bond0"))) in info
        assert len([i for i in info if i[0] == "swtel_rdma_port_info"]) == 4
    finally:
        src.close()
