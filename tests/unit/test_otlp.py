"""OTLP/gRPC metrics export (exporters.otlp): an in-test receiver built on opentelemetry-proto's
MetricsService definition, both profiles, against the real kernel (veth, root) and the simulated
switch (its reference model is the oracle)."""

from __future__ import annotations

import subprocess
import time
from array import array
from pathlib import Path

import grpc
import pytest
from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2

from agent import config
from agent.counters import F_CHANGED, F_RESET, Batch
from agent.exporters import otlp_names
from agent.exporters.otlp import OtlpConfig, OtlpExporter
from agent.sources.asic import histogram_bin, map_name
from agent.sources.events import EVENT_INFO
from agent.store import Store
from tests import sim_model
from tests.gnmi_helpers import free_port, make_pki, make_table
from tests.helpers import record_retries, status_doc, wait_until
from tests.namespaces import AgentProcess
from tests.otlp_receiver import Receiver
from tests.sim_model import Model

NS = 1_000_000_000

# Cumulus Linux 5.15/5.16 "Open Telemetry Export", as shared/DESIGN.md quotes it ("Counter
# names by driver"), checked against 5.19's list (agent/exporters/otlp_names.py CUMULUS_519):
# the metric names of the interface and buffer export, and the swtel path each must come from
# (X = the interface, N = the traffic class or switch priority).
CUMULUS = {
    "nvswitch_interface_ether_stats_octets": "/interfaces/interface[name=X]/state/counters/in-octets",
    "nvswitch_interface_ether_stats_multicast_pkts":
        "swtel:/interfaces/interface[name=X]/hw/state/counters/in-mcast-pkts",
    "nvswitch_interface_ether_stats_broadcast_pkts": "/interfaces/interface[name=X]/state/counters/in-broadcast-pkts",
    "nvswitch_interface_shared_buffer_port_tc_curr_occupancy":
        "swtel:/qos/interfaces/interface[interface-id=X]/output/queues/queue[name=N]/state/current-occupancy",
    "nvswitch_interface_shared_buffer_port_tc_watermark":
        "swtel:/qos/interfaces/interface[interface-id=X]/output/queues/queue[name=N]/state/watermark",
    "nvswitch_interface_ether_stats_pkts": "/interfaces/interface[name=X]/state/counters/in-pkts",
    "nvswitch_interface_if_in_ucast_pkts": "swtel:/interfaces/interface[name=X]/hw/state/counters/in-ucast-pkts",
    "nvswitch_interface_if_in_discards": "/interfaces/interface[name=X]/state/counters/in-discards",
    "nvswitch_interface_if_in_errors": "/interfaces/interface[name=X]/state/counters/in-errors",
    "nvswitch_interface_if_out_octets": "/interfaces/interface[name=X]/state/counters/out-octets",
    "nvswitch_interface_if_out_ucast_pkts": "swtel:/interfaces/interface[name=X]/hw/state/counters/out-ucast-pkts",
    "nvswitch_interface_if_out_discards": "/interfaces/interface[name=X]/state/counters/out-discards",
    "nvswitch_interface_if_out_errors": "/interfaces/interface[name=X]/state/counters/out-errors",
    "nvswitch_interface_dot3_stats_symbol_errors":
        "/interfaces/interface[name=X]/ethernet/state/counters/in-symbol-error",
    "nvswitch_interface_dot3_stats_fcs_errors": "/interfaces/interface[name=X]/ethernet/state/counters/in-crc-errors",
    "nvswitch_interface_dot3_in_pause_frames":
        "/interfaces/interface[name=X]/ethernet/state/counters/in-mac-pause-frames",
    "nvswitch_interface_carrier_changes_total": "/interfaces/interface[name=X]/state/counters/carrier-transitions",
    "nvswitch_interface_tc_tx_frames":
        "/qos/interfaces/interface[interface-id=X]/output/queues/queue[name=N]/state/transmit-pkts",
    "nvswitch_interface_tc_tx_octet":
        "/qos/interfaces/interface[interface-id=X]/output/queues/queue[name=N]/state/transmit-octets",
    "nvswitch_interface_tc_tx_wred_discard":
        "swtel:/qos/interfaces/interface[interface-id=X]/output/queues/queue[name=N]/state/wred-dropped-pkts",
    "nvswitch_interface_tc_tx_ecn_marked_tc":
        "/qos/interfaces/interface[interface-id=X]/output/queues/queue[name=N]/state/ecn-marked-pkts",
    "nvswitch_interface_tc_tx_no_buffer_discard_uc":
        "/qos/interfaces/interface[interface-id=X]/output/queues/queue[name=N]/state/dropped-pkts",
    "nvswitch_interface_sp_rx_pause": "swtel:/interfaces/interface[name=X]/pfc/priority[id=N]/state/in-pause-pkts",
    "nvswitch_interface_sp_rx_pause_duration":
        "swtel:/interfaces/interface[name=X]/pfc/priority[id=N]/state/in-pause-duration",
    "nvswitch_interface_sp_tx_pause": "swtel:/interfaces/interface[name=X]/pfc/priority[id=N]/state/out-pause-pkts",
    "nvswitch_interface_sp_tx_pause_duration":
        "swtel:/interfaces/interface[name=X]/pfc/priority[id=N]/state/out-pause-duration",
    "nvswitch_interface_phy_stats_phy_received_bits": "/interfaces/interface[name=X]/phy/state/received-bits",
    "nvswitch_interface_phy_stats_phy_symbol_errors": "/interfaces/interface[name=X]/phy/state/symbol-errors",
    "nvswitch_interface_phy_stats_phy_effective_errors": "/interfaces/interface[name=X]/phy/state/effective-errors",
    "nvswitch_interface_phy_stats_phy_raw_errors": "/interfaces/interface[name=X]/phy/state/raw-errors",
    "nvswitch_interface_phy_stats_phy_corrected_bits": "/interfaces/interface[name=X]/phy/fec/state/corrected-bits",
    "nvswitch_interface_phy_stats_raw_ber": "/interfaces/interface[name=X]/phy/ber/state/raw-ber",
    "nvswitch_interface_phy_stats_symbol_ber": "/interfaces/interface[name=X]/phy/ber/state/symbol-ber",
    "nvswitch_interface_phy_stats_effective_ber": "/interfaces/interface[name=X]/phy/ber/state/effective-ber",
}


# ---------------------------------------------------------------- names


@pytest.mark.parametrize("name,path", sorted(CUMULUS.items()))
def test_cumulus_names(name, path):
    got, attrs, _rank = otlp_names.for_path(path.replace("=X]", "=swp7]").replace("=N]", "=3]"))
    assert got == name
    want = {"interface": "swp7"}
    if "[name=N]" in path:
        want["tc"] = "3"
    if "[id=N]" in path:
        want["priority"] = "3"
    assert dict(attrs) == want


def test_every_driver_table_lands_on_the_cumulus_names():
    """The kernel's, switchd's and mlxsw's names for one quantity give one metric."""
    from agent.sources import drivers as ethtool

    def via(rules, name):
        container, leaf, _kind = ethtool.map_name(rules, "swp1", name)
        return otlp_names.metric_name(container.path, leaf)[0]

    assert via(ethtool.SWITCHD, "HwIfInOctets") == CUMULUS_NAME("ether_stats_octets")
    assert via(ethtool.SWITCHD, "HwIfInUcastPkts") == CUMULUS_NAME("if_in_ucast_pkts")
    assert via(ethtool.SWITCHD, "HwIfInMcastPkts") == CUMULUS_NAME("ether_stats_multicast_pkts")
    assert via(ethtool.SWITCHD, "HwIfInDot3FrameErrors") == CUMULUS_NAME("dot3_stats_fcs_errors")
    assert via(ethtool.SWITCHD, "HwIfInPfc3Pkt") == CUMULUS_NAME("sp_rx_pause")
    assert via(ethtool.SWITCHD, "HwIfOutQ3WredDrops") == CUMULUS_NAME("tc_tx_wred_discard")
    assert via(ethtool.MLXSW, "a_symbol_error_during_carrier") == CUMULUS_NAME("dot3_stats_symbol_errors")
    assert via(ethtool.MLXSW, "rx_pause_duration_prio_3") == CUMULUS_NAME("sp_rx_pause_duration")
    assert via(ethtool.MLXSW, "tc_no_buffer_discard_uc_tc_5") == CUMULUS_NAME("tc_tx_no_buffer_discard_uc")
    assert via(ethtool.MLX5, "rx_prio3_pause") == CUMULUS_NAME("sp_rx_pause")
    for name in ("phy_received_bits", "phy_symbol_errors", "phy_effective_errors", "phy_corrected_bits"):
        container, leaf, _kind = map_name("swp1", name)
        assert otlp_names.metric_name(container.path, leaf)[0] == CUMULUS_NAME(f"phy_stats_{name}")


def CUMULUS_NAME(suffix: str) -> str:  # noqa: N802 - reads as a constant
    name = "nvswitch_interface_" + suffix
    assert name in CUMULUS
    return name


def test_other_paths_get_names_in_the_same_style():
    assert otlp_names.for_path("swtel:/interfaces/interface[name=swp1]/hw/state/counters/in-l3-drops")[0] == \
        "nvswitch_interface_hw_in_l3_drops"
    assert otlp_names.for_path("swtel:/interfaces/interface[name=swp1]/ethtool/rx-queue-0-xdp-drops")[:2] == \
        ("nvswitch_interface_ethtool_rx_queue_0_xdp_drops", (("interface", "swp1"),))
    assert otlp_names.for_path("swtel:/rdma/devices/device[name=mlx5_0]/ports/port[id=1]/hw-counters/"
                               "roce_adp_retrans")[:2] == \
        ("swtel_rdma_hw_counters_roce_adp_retrans", (("interface", "mlx5_0"), ("port", "1")))
    # an escaped key value is unescaped; an unknown shape still gets a name and attributes
    assert otlp_names.for_path("/interfaces/interface[name=a\\]b]/state/counters/in-octets")[1] == \
        (("interface", "a]b"),)
    assert otlp_names.for_path("swtel:/agent/sources/source[name=netdev]/state/overruns")[:2] == \
        ("swtel_agent_sources_source_state_overruns", (("source", "netdev"),))


# ---------------------------------------------------------------- config


def test_config_defaults_and_limits():
    cfg = config.parse("exporters: {otlp: {insecure: true}}\n")
    o = cfg.exporters.otlp
    assert (o.profile, float(o.interval), str(o.endpoint), o.queue) == ("cumulus", 1.0, "127.0.0.1:4317", 60)
    assert float(config.parse("interval: 100ms\nexporters: {otlp: {insecure: true, interval: 100ms}}\n")
                 .exporters.otlp.interval) == 0.1
    with pytest.raises(config.ConfigError) as info:
        config.parse("interval: 100ms\nexporters: {otlp: {insecure: true, interval: 50ms, profile: prom}}\n")
    text = "\n".join(info.value.problems)
    assert "exporters.otlp.profile: expected one of cumulus, otel" in text
    with pytest.raises(config.ConfigError) as info:
        config.parse("interval: 100ms\nexporters: {otlp: {insecure: true, interval: 50ms}}\n")
    assert info.value.problems == ["exporters.otlp.interval: must be at least the agent's interval (100ms), got 50ms"]
    with pytest.raises(config.ConfigError) as info:
        config.parse("exporters: {otlp: {endpoint: 'collector', queue: 0}}\n")
    assert any(p.startswith("exporters.otlp.endpoint: expected host:port") for p in info.value.problems)
    assert (o.egress_histogram, o.egress_histogram_min, o.egress_histogram_size) == (False, 960, 12288)
    with pytest.raises(config.ConfigError) as info:
        config.parse("exporters: {otlp: {insecure: true, egress_histogram_size: 100, egress_histogram_min: -1}}\n")
    assert info.value.problems == [
        "exporters.otlp.egress_histogram_min: must be 0 to 2^32 bytes, got -1",
        "exporters.otlp.egress_histogram_size: must be a multiple of 8 from 8 to 2^32 bytes, got 100"]
    with pytest.raises(config.ConfigError) as info:
        config.parse("exporters: {otlp: {queue: 0, tls: {cert: /nonexistent.pem}}}\n")
    text = "\n".join(info.value.problems)
    assert "exporters.otlp.queue: must be at least 1" in text and "exporters.otlp.tls.cert: no such file" in text
    assert "cert and key go together" in text


# ---------------------------------------------------------------- in-process exporter


def _exporter(rx: Receiver, profile: str = "cumulus", **kw) -> OtlpExporter:
    cfg = OtlpConfig(endpoint=config.HostPort(rx.address if rx else f"127.0.0.1:{free_port()}"),
                              profile=profile, insecure=True, interval=config.Duration(0.1), **kw)
    return OtlpExporter(cfg, "leaf01", hostname="leaf01.example")


def _hw_table():
    from agent.counters import SWTEL_ORIGIN, Container, CounterSpec, CounterTable

    c = Container(SWTEL_ORIGIN, "/interfaces/interface[name=swp1]/hw/state/counters")
    return CounterTable("ethtool", [CounterSpec(c, "in-octets", port="swp1"),
                                    CounterSpec(c, "in-l3-drops", port="swp1")])


def test_resource_types_and_the_hardware_source_wins_a_name_two_sources_give():
    rx = Receiver().start()
    store = Store()
    netdev = make_table(["swp1", "swp2"])  # in-octets, in-unicast-pkts, out-octets, out-unicast-pkts, in-errors
    store.set_source("netdev", netdev, array("Q", range(100, 100 + len(netdev))), 1000)
    store.set_source("ethtool", _hw_table(), array("Q", [7777, 5]), 2000)
    exp = _exporter(rx)
    try:
        exp.start(store)
        assert rx.wait_for(lambda r: r.requests >= 2, 30)
    finally:
        exp.stop(1.0)
        rx.stop()
    assert rx.resources[0] == {"host.name": "leaf01.example", "service.name": "swtel",
                               "service.version": rx.resources[0]["service.version"], "swtel.target": "leaf01"}
    octets = rx.latest("nvswitch_interface_ether_stats_octets", interface="swp1")
    assert (octets.kind, octets.value_type, octets.value, octets.time_ns) == ("gauge", "as_double", 7777.0, 2000)
    assert rx.latest("nvswitch_interface_ether_stats_octets", interface="swp2").value == 105.0
    assert rx.latest("nvswitch_interface_if_out_ucast_pkts", interface="swp2").value == 108.0
    assert rx.latest("nvswitch_interface_hw_in_l3_drops", interface="swp1").value == 5.0
    last = rx.requests
    one = [p for p in rx.points if p.time_ns == 2000 and p.name == "nvswitch_interface_ether_stats_octets"]
    assert len(one) == last  # one point per export: the kernel's in-octets of swp1 is not sent
    status = exp.status()
    assert status["state"] == "stopped" and status["sent"] >= 2 and status["dropped"] == 0
    assert status["points"] == 2 * 5 + 1  # 10 netdev counters, swp1's in-octets once, l3-drops


def test_otel_sums_start_times_and_a_reset():
    rx = Receiver().start()
    store = Store()
    table = make_table(["swp1"], ("in-octets",))
    exp = _exporter(rx, "otel")

    def tick(value: int, ts: int, delta: int, flags: int) -> None:
        values = array("Q", [value])
        store.set_source("netdev", table, values, ts)
        exp.on_batch(Batch("netdev", ts, table, [0], values, [delta], bytes([flags])))

    try:
        tick(5000, 10 * NS, 0, F_CHANGED | 0x08)
        exp.start(store)
        assert rx.wait_for(lambda r: r.points, 30)
        tick(5100, 11 * NS, 100, F_CHANGED)
        assert rx.wait_for(lambda r: r.latest("nvswitch_interface_ether_stats_octets").time_ns == 11 * NS, 30)
        tick(5130, 12 * NS, 30, F_CHANGED | F_RESET)  # cleared, then 30 counted: corrected 5130
        assert rx.wait_for(lambda r: r.latest("nvswitch_interface_ether_stats_octets").time_ns == 12 * NS, 30)
        tick(5150, 13 * NS, 20, F_CHANGED)
        assert rx.wait_for(lambda r: r.latest("nvswitch_interface_ether_stats_octets").time_ns == 13 * NS, 30)
    finally:
        exp.stop(1.0)
        rx.stop()
    series = rx.series("nvswitch_interface_ether_stats_octets")
    assert {(p.kind, p.value_type, p.monotonic, p.temporality) for p in series} == {("sum", "as_int", True, 2)}
    by_time = {p.time_ns: (p.start_ns, p.value) for p in series}
    assert by_time[10 * NS] == (10 * NS, 5000)
    assert by_time[11 * NS] == (10 * NS, 5100)
    assert by_time[12 * NS] == (11 * NS, 30)  # new start: the previous read; counts from the reset
    assert by_time[13 * NS] == (11 * NS, 50)
    _assert_no_negative_rate(series)


def _queue_table():
    """swp1 TC 3 with its occupancy and peak, swp2 TC 0 with only its occupancy (as the asic
    source declares them), and a counter the histogram leaves alone."""
    from agent.counters import GAUGE, SWTEL_ORIGIN, Container, CounterSpec, CounterTable

    def q(port, tc):
        return Container(SWTEL_ORIGIN,
                         f"/qos/interfaces/interface[interface-id={port}]/output/queues/queue[name={tc}]/state")

    return CounterTable("asic", [
        CounterSpec(q("swp1", 3), "current-occupancy", kind=GAUGE, port="swp1"),
        CounterSpec(q("swp1", 3), "peak-occupancy", kind=GAUGE, port="swp1"),
        CounterSpec(q("swp2", 0), "current-occupancy", kind=GAUGE, port="swp2"),
        CounterSpec(q("swp2", 0), "ecn-marked-pkts", port="swp2"),
    ])


def _egress_points(requests) -> dict[tuple[str, int], object]:
    out = {}
    for request in requests:
        for m in request.resource_metrics[0].scope_metrics[0].metrics:
            if m.name == otlp_names.EGRESS_HISTOGRAM:
                assert m.unit == "bytes" and m.histogram.aggregation_temporality == 2  # cumulative
                for dp in m.histogram.data_points:
                    attrs = {a.key: a.value for a in dp.attributes}
                    out[(attrs["interface"].string_value, attrs["tc"].int_value)] = dp
    return out


@pytest.mark.parametrize("profile", ["cumulus", "otel"])
def test_egress_buffer_histogram_bins_each_read_once(profile):
    """min 1000, size 8000: bin 0 below 1000, bins 1-8 1000 bytes each, bin 9 at 9000 and above;
    swp1's level is its peak (its occupancy says otherwise), swp2's its occupancy."""
    store, table = Store(), _queue_table()
    exp = _exporter(None, profile, egress_histogram=True, egress_histogram_min=1000, egress_histogram_size=8000)
    exp._store = store
    peaks = [999, 1000, 1999, 2000, 8999, 9000, 10**12]
    levels = [0, 999, 5500, 0, 0, 123456, 8999]
    for n, (peak, level) in enumerate(zip(peaks, levels, strict=True)):
        store.set_source("asic", table, array("Q", [5, peak, level, 7]), (10 + n) * NS)
        points = _egress_points(exp.build())
        if n == 2:
            points = _egress_points(exp.build())  # the same read again: binned once
    assert set(points) == {("swp1", 3), ("swp2", 0)}
    one, two = points[("swp1", 3)], points[("swp2", 0)]
    assert list(one.bucket_counts) == [1, 2, 1, 0, 0, 0, 0, 0, 1, 2] and one.count == 7
    assert list(two.bucket_counts) == [4, 0, 0, 0, 0, 1, 0, 0, 1, 1] and two.count == 7
    assert list(one.explicit_bounds) == [999, 1999, 2999, 3999, 4999, 5999, 6999, 7999, 8999]
    assert (one.start_time_unix_nano, one.time_unix_nano) == (10 * NS, 16 * NS)
    assert exp.points == 4 + 2  # the table's 4 values as before, and a histogram per TC


def test_no_egress_histogram_unless_asked():
    store = Store()
    exp = _exporter(None)
    exp._store = store
    store.set_source("asic", _queue_table(), array("Q", [5, 6, 7, 8]), NS)
    assert _egress_points(exp.build()) == {}
    assert exp.points == 4


def test_egress_histogram_bins_of_cumulus_defaults():
    from agent.exporters.otlp import EgressHistogram

    h = EgressHistogram(960, 12288)
    assert h.bounds() == [959, 2495, 4031, 5567, 7103, 8639, 10175, 11711, 13247]
    assert [h.bin(v) for v in (0, 959, 960, 2495, 2496, 13247, 13248)] == [0, 0, 1, 1, 2, 8, 9]


def _assert_no_negative_rate(series):
    last: dict[tuple, tuple[int, float]] = {}
    for p in sorted(series, key=lambda p: p.time_ns):
        key = (p.name, p.attrs)
        if key in last:
            start, value = last[key]
            assert p.start_ns >= start, p
            if p.start_ns == start:
                assert p.value >= value, p
        last[key] = (p.start_ns, p.value)


def test_refused_requests_are_dropped_and_overflow_is_counted():
    def refuse(request, context):
        context.abort(grpc.StatusCode.INVALID_ARGUMENT, "no thanks")

    rx = Receiver()
    rx.Export = refuse
    rx.start()
    store = Store()
    store.set_source("netdev", make_table(["swp1"]), array("Q", [1, 2, 3, 4, 5]), 1000)
    exp = _exporter(rx)
    try:
        exp.start(store)
        deadline = time.monotonic() + 5
        while exp.status()["dropped"] < 3 and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        exp.stop(0.5)
        rx.stop()
    status = exp.status()
    assert status["dropped"] >= 3 and status["sent"] == 0 and status["retries"] == 0
    assert status["last_error"] == "INVALID_ARGUMENT: no thanks" and status["down_since_ns"]

    # nobody listening: retried with backoff, the queue bounded, the overflow counted
    exp = _exporter(None, queue=3)
    delays = record_retries(exp)
    exp.start(store)
    try:
        # nine exports (at 100 ms) and two retries: the wait is for what happened, not a time
        status = wait_until(lambda: (st := exp.status())["exports"] >= 9 and len(delays) >= 2 and st, 60,
                            "nine exports and two retries")
    finally:
        exp.stop(0.2)
    assert status["state"] == "connecting" and status["queue"] == 3 and status["sent"] == 0
    assert status["dropped"] >= status["exports"] - 3 > 5 and status["retries"] >= 1
    assert delays[1] > delays[0], delays  # with backoff: each wait longer than the last (jitter included)
    assert status["last_error"].startswith("UNAVAILABLE")


def test_a_receiver_that_comes_back_moves_the_error_to_previous_error():
    """Two UNAVAILABLE answers, then the receiver takes the points: connected, ``last_error``
    empty (nothing is wrong now), the outage's error in ``previous_error``."""
    answers = ["UNAVAILABLE: not yet", "UNAVAILABLE: not yet"]

    class Flaky(Receiver):
        def Export(self, request, context):  # noqa: N802 - the service's name
            if answers:
                context.abort(grpc.StatusCode.UNAVAILABLE, answers.pop(0).split(": ", 1)[1])
            return super().Export(request, context)

    rx = Flaky().start()
    store = Store()
    store.set_source("netdev", make_table(["swp1"]), array("Q", [1, 2, 3, 4, 5]), 1000)
    exp = _exporter(rx)
    try:
        exp.start(store)
        status = wait_until(lambda: (st := exp.status())["state"] == "connected" and st, 60, "the receiver reached")
    finally:
        exp.stop(0.5)
        rx.stop()
    assert status["last_error"] is None and status["down_since_ns"] is None, status
    assert status["previous_error"] == "UNAVAILABLE: not yet", status


def test_partial_success_is_counted():
    def partial(request):
        reply = metrics_service_pb2.ExportMetricsServiceResponse()
        reply.partial_success.rejected_data_points = 2
        reply.partial_success.error_message = "two too many"
        return reply

    rx = Receiver(reply=partial).start()
    store = Store()
    store.set_source("netdev", make_table(["swp1"]), array("Q", [1, 2, 3, 4, 5]), 1000)
    exp = _exporter(rx)
    try:
        exp.start(store)
        assert rx.wait_for(lambda r: r.requests >= 1, 30)
    finally:
        exp.stop(0.5)
        rx.stop()
    assert exp.status()["rejected_points"] >= 2 and "two too many" in exp.status()["last_error"]


def test_tls_files_changed_then_reload_makes_a_new_channel_that_reads_them(tmp_path):
    """SIGHUP (reload_tls) with the client certificate renewed in place: the next request goes
    on a new channel built from the new files; unchanged files keep the running channel."""
    import shutil

    from agent import tls
    from tests.gnmi_helpers import CA

    pki = make_pki(tmp_path / "pki")
    rx = Receiver("127.0.0.1:0", credentials=tls.server_credentials(pki.server_cert, pki.server_key, pki.ca)).start()
    store = Store()
    store.set_source("netdev", make_table(["swp1"]), array("Q", [1, 2, 3, 4, 5]), 1000)
    cert, key = tmp_path / "client.pem", tmp_path / "client.key"
    shutil.copyfile(pki.client_cert, cert)
    shutil.copyfile(pki.client_key, key)
    key.chmod(0o600)
    cfg = OtlpConfig(endpoint=config.HostPort(rx.address), insecure=False, interval=config.Duration(0.1),
                     tls=config.ClientTls(ca=str(pki.ca), cert=str(cert), key=str(key), server_name="collector.test"))
    exp = OtlpExporter(cfg, "leaf01")
    try:
        exp.start(store)
        assert rx.wait_for(lambda r: r.requests >= 1, 10), exp.status()
        first = exp._channel
        assert exp.reload_tls() is False and exp._channel is first
        # renewed: another certificate of an unrelated CA, which the receiver refuses (mTLS)
        other = CA.create(tmp_path, "other-ca").issue(tmp_path, "renewed", client=True)
        shutil.copyfile(other[1], key)
        shutil.copyfile(other[0], cert)
        assert exp.reload_tls() is True
        wait_until(lambda: exp._channel is not first and exp.status()["state"] != "connected", 30,
                   "a new channel with the new (refused) certificate")
    finally:
        exp.stop(0.5)
        rx.stop()


def test_a_3mb_partial_success_message_is_cut_in_the_log_and_status():
    """A receiver's 3 MB error_message reaches neither a log line nor status whole: the one
    cutter (logs.remote_text) keeps its head and tail, a few hundred characters in all."""
    import structlog

    from agent.logs import REMOTE_TEXT_MAX

    message = "head of the message " + "x" * 3_000_000 + " tail of the message"

    def partial(request):
        reply = metrics_service_pb2.ExportMetricsServiceResponse()
        reply.partial_success.rejected_data_points = 1_000_000  # every point: logged as rejecting
        reply.partial_success.error_message = message
        return reply

    rx = Receiver(reply=partial).start()
    store = Store()
    store.set_source("netdev", make_table(["swp1"]), array("Q", [1, 2, 3, 4, 5]), 1000)
    exp = _exporter(rx)
    with structlog.testing.capture_logs() as captured:
        try:
            exp.start(store)
            wait_until(lambda: exp.status()["state"] == "rejecting", 30, "the rejection")
        finally:
            exp.stop(0.5)
            rx.stop()
    error = exp.status()["last_error"]
    assert len(error) <= REMOTE_TEXT_MAX and error.startswith("receiver rejected 1000000 of ")
    assert "head of the message" in error and error.endswith("tail of the message") and "chars, cut]" in error
    lines = [e for e in captured if e["event"] == "OTLP receiver rejects every point"]
    assert lines and all(len(e["error"]) <= REMOTE_TEXT_MAX for e in lines)
    assert max(len(repr(e)) for e in captured) < 2000  # no line carries the message whole


def test_remote_text_cuts_the_middle_and_keeps_the_code():
    from agent.exporters.sender import rpc_error
    from agent.logs import REMOTE_TEXT_MAX, remote_text

    assert remote_text("short") == "short" and remote_text(42) == "42"
    cut = remote_text("A" * 10 + "b" * 1000 + "Z" * 10)
    assert len(cut) == REMOTE_TEXT_MAX and cut.startswith("A" * 10) and cut.endswith("Z" * 10)
    assert "[1020 chars, cut]" in cut

    class Err(grpc.RpcError):
        def code(self):
            return grpc.StatusCode.RESOURCE_EXHAUSTED

        def details(self):
            return "y" * 100_000 + " end"

    text = rpc_error(Err())
    assert len(text) == REMOTE_TEXT_MAX and text.startswith("RESOURCE_EXHAUSTED: yyy") and text.endswith(" end")


def test_tls_with_a_test_ca(tmp_path):
    from agent import tls

    pki = make_pki(tmp_path / "pki")
    rx = Receiver("127.0.0.1:0", credentials=tls.server_credentials(pki.server_cert, pki.server_key, pki.ca)).start()
    store = Store()
    store.set_source("netdev", make_table(["swp1"]), array("Q", [1, 2, 3, 4, 5]), 1000)
    cfg = OtlpConfig(endpoint=config.HostPort(rx.address), insecure=False, interval=config.Duration(0.1),
                              tls=config.ClientTls(ca=pki.ca, cert=pki.client_cert, key=pki.client_key,
                                                   server_name="collector.test"))
    exp = OtlpExporter(cfg, "leaf01")
    try:
        exp.start(store)
        assert rx.wait_for(lambda r: r.requests >= 1, 10), exp.status()
    finally:
        exp.stop(0.5)
        rx.stop()
    assert exp.status()["tls"] is True
    assert rx.latest("nvswitch_interface_ether_stats_octets", interface="swp1").value == 1.0


# ---------------------------------------------------------------- the real kernel (veth)


VETH = {  # Cumulus name -> the kernel's statistics file it equals
    "nvswitch_interface_ether_stats_octets": "rx_bytes",
    "nvswitch_interface_ether_stats_pkts": "rx_packets",
    "nvswitch_interface_if_in_errors": "rx_errors",
    "nvswitch_interface_if_in_discards": "rx_dropped",
    "nvswitch_interface_if_out_octets": "tx_bytes",
    "nvswitch_interface_if_out_errors": "tx_errors",
    "nvswitch_interface_if_out_discards": "tx_dropped",
    "nvswitch_interface_dot3_stats_fcs_errors": "rx_crc_errors",
}


# ---------------------------------------------------------------- the simulated switch


def _sim_config(tmp_path, sim: str, rx_port: int, profile: str, interval: str = "200ms", queue: int = 60) -> str:
    return (
        "target: sim-1\ninterval: 100ms\nsources:\n"
        "  netdev: {enabled: false}\n  ethtool: {enabled: false}\n  system: {enabled: false}\n"
        f"  asic: {{enabled: true, plugin: sim, config: '{sim}'}}\n"
        f"exporters:\n  otlp: {{endpoint: '127.0.0.1:{rx_port}', insecure: true, interval: {interval}, "
        f"profile: {profile}, queue: {queue}}}\n"
        f"control: {{socket: {tmp_path / 'swtel.sock'}, group: null}}\n"
    )


def _model_keys(model: Model, t: int) -> dict[tuple, int]:
    """(metric name, attributes) -> index into the model's values, for every counter."""
    _gen, ports, counters = model.layout(t)
    out: dict[tuple, int] = {}
    i = 0
    for (name, _parent, _speed, flags), descs in zip(ports, counters, strict=True):
        for cname, _width, kind in descs:
            container, leaf, _kind = map_name(name, cname, host=bool(flags & 2))
            # a histogram's bins (the sim's FEC bins are [b, b]) each take a value and a point
            bins = range(sim_model.FEC_BINS) if kind == sim_model.HISTOGRAM else [None]
            for b in bins:
                where, what = (container, leaf) if b is None else histogram_bin(container, leaf, b, b, b)
                metric, attrs, _rank = otlp_names.metric_name(where.path, what)
                assert (metric, attrs) not in out, (metric, attrs)  # one counter per exported point
                out[(metric, attrs)] = i
                i += 1
    return out


def _check_against_model(rx: Receiver, model: Model, start: int) -> int:
    """Every point's value equals the model's at the point's time; the number checked."""
    values_at: dict[int, list[int]] = {}
    widest_at: dict[int, list[int]] = {}  # one model pass per time, not one per peak point
    keys = _model_keys(model, 0)
    kinds = sim_model.value_kinds(model.layout(0)[2])
    checked = 0
    derived = set(otlp_names.PREDICTION_NAMES)  # the detectors' gauges: tests/unit/test_link_degrading.py
    derived.add(otlp_names.OPEN_EVENTS)  # the agent's open events: tests/unit/test_events_source.py
    derived.add(EVENT_INFO)  # the events themselves, one info series each: tests/unit/test_far_ends.py
    for p in rx.points:
        if p.name in derived:
            continue
        values = values_at.get(p.time_ns)
        if values is None:
            values = values_at[p.time_ns] = model.values(p.time_ns - start)
        i = keys[(p.name, p.attrs)]
        if kinds[i] == sim_model.PEAK:
            # a peak reaches back to the read before, which an export does not show: at least
            # its own cell's level, at most the highest level of the second before
            widest_all = widest_at.get(p.time_ns)
            if widest_all is None:
                widest_all = widest_at[p.time_ns] = model.values(p.time_ns - start, p.time_ns - start - NS)
            widest = widest_all[i]
            assert values[i] <= p.value <= widest, (p, values[i], widest)
        else:
            assert p.value == values[i], p
        checked += 1
    return checked


@pytest.mark.slow
def test_sim_phy_pfc_and_tc_names_and_values_equal_the_model(tmp_path):
    start = time.time_ns() - 2 * NS
    sim = f"role=leaf seed=5 start={start} scenario=pfc-storm@1s:swp1/3,symbol-errors@1s:swp2"
    rx = Receiver().start()
    agent = AgentProcess(None, _sim_config(tmp_path, sim, rx.port, "cumulus"), tmp_path)
    try:
        agent.wait_ready()
        # five exports with the simulator's values (the plugin opens after the agent is ready)
        received_bits = "nvswitch_interface_phy_stats_phy_received_bits"
        agent.wait_for(lambda: len({p.time_ns for p in list(rx.points) if p.name == received_bits}) >= 5, 60,
                       "5 exports of the simulator's values")
    finally:
        assert agent.stop() == 0
        rx.stop()
    model = Model(sim)
    assert _check_against_model(rx, model, start) > 5 * 3000
    recorded = [p for p in rx.points if p.value is not None]
    assert {p.kind for p in rx.points} == {"gauge"} and {p.value_type for p in recorded} == {"as_double"}
    # a point without a value ends a derived gauge that had one (flag NO_RECORDED_VALUE: a
    # detector's state that went, e.g. when the storm's event changed within the window)
    had_value = {(p.name, p.attrs) for p in recorded}
    assert all((p.name, p.attrs) in had_value for p in rx.points if p.value is None)
    assert rx.latest("nvswitch_interface_sp_rx_pause", interface="swp1", priority="3").value > 10_000
    assert rx.latest("nvswitch_interface_sp_rx_pause_duration", interface="swp1", priority="3").value > 500_000
    assert rx.latest("nvswitch_interface_sp_rx_pause", interface="swp1", priority="2").value == 0
    assert rx.latest("nvswitch_interface_phy_stats_phy_symbol_errors", interface="swp2").value > 0
    assert rx.latest("nvswitch_interface_phy_stats_phy_effective_errors", interface="swp2").value > 0
    assert rx.latest("nvswitch_interface_phy_stats_phy_corrected_bits", interface="swp2").value > 0
    assert rx.latest("nvswitch_interface_phy_stats_phy_received_bits", interface="swp2").value > 0
    assert rx.latest("nvswitch_interface_phy_stats_phy_raw_errors_lane", interface="swp2", lane="0").value > 0
    assert rx.latest("nvswitch_interface_tc_tx_ecn_marked_tc", interface="swp1", tc="3") is not None
    assert rx.latest("nvswitch_interface_tc_tx_wred_discard", interface="swp1", tc="3") is not None
    assert rx.latest("nvswitch_interface_dot3_in_pause_frames", interface="swp1") is not None
    assert rx.latest("nvswitch_interface_carrier_changes_total", interface="swp1") is not None
    names = {p.name for p in rx.points}
    assert set(CUMULUS) - names == {  # what the simulated switch has no counter for
        "nvswitch_interface_ether_stats_pkts", "nvswitch_interface_dot3_stats_symbol_errors",
        "nvswitch_interface_tc_tx_frames", "nvswitch_interface_tc_tx_octet",
        "nvswitch_interface_tc_tx_no_buffer_discard_uc", "nvswitch_interface_phy_stats_phy_raw_errors",
        "nvswitch_interface_phy_stats_raw_ber", "nvswitch_interface_phy_stats_symbol_ber",
        "nvswitch_interface_phy_stats_effective_ber"}


def _otel_run_to_a_clear(workdir: Path, clear_s: int) -> tuple[Receiver, int, str] | None:
    """A leaf cleared ``clear_s`` after its start (1 s from now), exported with the otel
    profile until a sample a second after the clear; None when the agent's first export came
    after the clear (a machine too loaded for the test's precondition)."""
    workdir.mkdir()
    start = time.time_ns() + 1 * NS
    sim = f"role=leaf seed=3 start={start} scenario=counter-clear@{clear_s}s"
    rx = Receiver().start()
    agent = AgentProcess(None, _sim_config(workdir, sim, rx.port, "otel"), workdir)
    octets = "nvswitch_interface_ether_stats_octets"
    try:
        agent.wait_ready()
        assert rx.wait_for(lambda r: r.latest(octets, interface="swp1"), 60)
        if rx.latest(octets, interface="swp1").time_ns >= start + clear_s * NS:
            return None
        assert rx.wait_for(lambda r: r.latest(octets, interface="swp1").time_ns > start + (clear_s + 1) * NS,
                           clear_s + 60)
    finally:
        assert agent.stop() == 0
        rx.stop()
    return rx, start, sim


@pytest.mark.slow
def test_otel_counter_clear_gives_a_new_start_time_and_no_negative_rate(tmp_path):
    # The clear comes 2 s after the simulator's start, after the agent's first exports (the
    # test's precondition, not its claim): on a machine too loaded for that, the run is
    # repeated with the clear later, never failed for being slow.
    octets = "nvswitch_interface_ether_stats_octets"
    for clear_s in (2, 10, 30):
        if (run := _otel_run_to_a_clear(tmp_path / f"clear-{clear_s}s", clear_s)) is not None:
            rx, start, sim = run
            break
    else:
        raise AssertionError("no run exported before the clear")
    series = rx.series(octets, interface="swp1")
    starts = sorted({p.start_ns for p in series})
    clear_ns = start + clear_s * NS
    assert len(starts) == 2 and clear_ns - 200_000_000 <= starts[1] <= clear_ns
    _assert_no_negative_rate([p for p in rx.points if p.kind == "sum"])
    # every value is the device's own count since its start time: the model's, exactly
    sums = [p for p in rx.points if p.kind == "sum"]
    assert len(sums) > 10_000
    # the sim's levels (the detectors' derived gauges apart: tests/unit/test_link_degrading.py)
    gauges = {p.name for p in rx.points if p.kind == "gauge"} - otlp_names.PREDICTION_NAMES
    gauges.discard(otlp_names.OPEN_EVENTS)  # the agent's, not the sim's: tests/unit/test_events_source.py
    buffer = "nvswitch_interface_shared_buffer_port_"
    assert gauges == {f"{buffer}{q}_{leaf}" for q in ("tc", "pg")
                      for leaf in ("curr_occupancy", "watermark", "peak_occupancy")} | {
        f"nvswitch_interface_headroom_buffer_pg_{leaf}" for leaf in ("curr_occupancy", "watermark", "peak_occupancy")
    } | {f"{buffer}ingress_pool_{leaf}" for leaf in ("curr_occupancy", "peak_occupancy")}
    rx.points = sums
    assert _check_against_model(rx, Model(sim), start) == len(sums)


@pytest.mark.slow
def test_receiver_down_10s_values_resume_and_totals_are_intact(tmp_path):
    start = time.time_ns() - 2 * NS
    sim = f"role=leaf seed=9 start={start}"
    port = free_port()
    rx = Receiver(f"127.0.0.1:{port}").start()
    # the sim's switch is more than one request per export (4000 points each) and the retry after
    # the outage waits out its backoff: a queue that holds the whole outage, so nothing is dropped
    agent = AgentProcess(None, _sim_config(tmp_path, sim, port, "cumulus", interval="500ms", queue=400), tmp_path)
    octets = "nvswitch_interface_ether_stats_octets"
    try:
        agent.wait_ready()
        assert rx.wait_for(lambda r: r.requests >= 2, 10)
        rx.stop()
        down_at = time.time_ns()
        # down for 20 of the agent's exports (10 s at 500 ms), counted by the agent, not slept
        exports = status_doc(tmp_path)["exporters"]["otlp"]["exports"]
        wait_until(lambda: status_doc(tmp_path)["exporters"]["otlp"]["exports"] >= exports + 20, 120,
                   "20 exports during the outage")
        before = rx.requests
        rx.start()  # the same port
        up_at = time.time_ns()
        assert rx.wait_for(lambda r: r.requests > before and (p := r.latest(octets, interface="swp1")) is not None
                           and p.time_ns > up_at + NS, 60)
        doc = status_doc(tmp_path)
        status, stall = doc["exporters"]["otlp"], doc["sources"]["asic"]["longest_stall"]
    finally:
        assert agent.stop() == 0
        rx.stop()
    assert status["state"] == "connected" and status["retries"] >= 1 and status["dropped"] == 0, status
    # the exports of the outage were queued and arrive late, in order: no gap in the series but
    # the ticks the agent says it skipped (status' longest_stall; 0 unless the machine is loaded)
    times = [p.time_ns for p in rx.series(octets, interface="swp1")]
    assert times == sorted(times)
    gaps = [b - a for a, b in zip(times, times[1:], strict=False)]
    assert max(gaps) < (stall + 2) * NS // 2 + NS // 2, (down_at, up_at, stall, gaps)
    assert _check_against_model(rx, Model(sim), start) > 20 * 3000


# ---------------------------------------------------------------- swtel collect --prometheus


def _collector_with(port: int, mport: int):
    from agent.gnmi import encode
    from agent.tools.collect import NOKIA_METHOD, Collector
    from tests.gnmi_helpers import make_batch, publish

    col = Collector(f"127.0.0.1:{port}", insecure=True, prometheus=f"127.0.0.1:{mport}").start()
    netdev = make_table(["swp1", "swp2"])  # in-octets, in-unicast-pkts, out-octets, out-unicast-pkts, in-errors
    hw = _hw_table()
    msgs = encode.encode_batch(make_batch(netdev, list(range(100, 110)), 1), "leaf01")
    msgs += encode.encode_batch(make_batch(hw, [7777, 5], 1), "leaf01")
    publish(f"127.0.0.1:{port}", NOKIA_METHOD, msgs)
    assert col.wait_for(lambda c: c.received == len(msgs), 30)
    return col


def test_prometheus_exposition_has_the_cumulus_names():
    from tests.interop.test_prometheus import _get

    port, mport = free_port(), free_port()
    col = _collector_with(port, mport)
    try:
        body = _get(f"http://127.0.0.1:{mport}/metrics").decode()
    finally:
        col.stop(0)
    lines = body.splitlines()
    assert "# TYPE nvswitch_interface_ether_stats_octets gauge" in lines
    # swp1: switchd's HwIfInOctets wins over the kernel's in-octets; swp2 has only the kernel's
    assert 'nvswitch_interface_ether_stats_octets{interface="swp1",target="leaf01"} 7777' in lines
    assert 'nvswitch_interface_ether_stats_octets{interface="swp2",target="leaf01"} 105' in lines
    assert 'nvswitch_interface_if_out_ucast_pkts{interface="swp2",target="leaf01"} 108' in lines
    assert 'nvswitch_interface_hw_in_l3_drops{interface="swp1",target="leaf01"} 5' in lines
    # one naming scheme by default: the path-derived names only with --prometheus-names paths
    assert not [line for line in lines if line.startswith("interfaces_interface_")], body
    import shutil

    if shutil.which("promtool"):
        check = subprocess.run(["promtool", "check", "metrics"], input=body.encode(), capture_output=True)
        assert check.returncode == 0, check.stdout + check.stderr


def test_a_receiver_rejecting_every_point_is_down_for_health():
    from agent.control.client import health_problems

    def reject_all(request):
        n = sum(len(m.gauge.data_points) + len(m.sum.data_points) for rm in request.resource_metrics
                for sm in rm.scope_metrics for m in sm.metrics)
        reply = metrics_service_pb2.ExportMetricsServiceResponse()
        reply.partial_success.rejected_data_points = n
        reply.partial_success.error_message = "schema mismatch"
        return reply

    rx = Receiver(reply=reject_all).start()
    store = Store()
    store.set_source("netdev", make_table(["swp1"]), array("Q", [1, 2, 3, 4, 5]), 1000)
    exp = _exporter(rx)
    try:
        exp.start(store)
        assert rx.wait_for(lambda r: r.requests >= 3, 30)
        status = exp.status()
    finally:
        exp.stop(0.5)
        rx.stop()
    assert status["state"] == "rejecting" and status["down_since_ns"] and "schema mismatch" in status["last_error"]
    later = status["down_since_ns"] + 3_000_000_000
    problems = health_problems({"now_ns": later, "uptime_s": 10, "exporters": {"otlp:x": status}}, 2.0)
    assert problems and problems[0].startswith("exporter otlp:x failing for 3s")
