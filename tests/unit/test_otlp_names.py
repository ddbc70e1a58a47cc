"""The OTLP (and Prometheus) names of agent/exporters/otlp_names.py against Cumulus Linux 5.19's
list: the buffer shapes (TC, PG, devlink), the names Cumulus 5.15 deprecated, and the record of
which name is Cumulus' and which is swtel's own. Both profiles name a value alike."""

from __future__ import annotations

import pytest

from agent.exporters import otlp_names
from agent.sources import drivers
from agent.sources.asic import map_name

pytestmark = pytest.mark.libs  # no backend code in its path: not in the pure-Python pass

P = "nvswitch_interface_"
Q = "swtel:/qos/interfaces/interface[interface-id=swp7]/output/queues/queue[name=3]/state"
PG = "swtel:/qos/interfaces/interface[interface-id=swp7]/input/priority-groups/priority-group[name=2]/state"
SB = "swtel:/interfaces/interface[name=swp7]/devlink/sb[index=0]"
TC_ATTRS = (("interface", "swp7"), ("tc", "3"))
PG_ATTRS = (("interface", "swp7"), ("pg", "2"))

# path -> (name, attributes): every buffer shape, and the names 5.19 changed
NAMES = {
    f"{Q}/current-occupancy": (P + "shared_buffer_port_tc_curr_occupancy", TC_ATTRS),
    f"{Q}/watermark": (P + "shared_buffer_port_tc_watermark", TC_ATTRS),
    f"{Q}/peak-occupancy": (P + "shared_buffer_port_tc_peak_occupancy", TC_ATTRS),
    f"{Q}/instant-queue-len": (P + "tc_tx_queue", TC_ATTRS),
    f"{Q}/transmit-uc-pkts": (P + "tc_tx_uc_frames", TC_ATTRS),
    # the OpenConfig origin lands on the same names
    Q.removeprefix("swtel:") + "/peak-occupancy": (P + "shared_buffer_port_tc_peak_occupancy", TC_ATTRS),
    f"{PG}/current-occupancy": (P + "shared_buffer_port_pg_curr_occupancy", PG_ATTRS),
    f"{PG}/watermark": (P + "shared_buffer_port_pg_watermark", PG_ATTRS),
    f"{PG}/peak-occupancy": (P + "shared_buffer_port_pg_peak_occupancy", PG_ATTRS),
    f"{PG}/headroom-occupancy": (P + "headroom_buffer_pg_curr_occupancy", PG_ATTRS),
    f"{PG}/headroom-watermark": (P + "headroom_buffer_pg_watermark", PG_ATTRS),
    f"{PG}/headroom-peak-occupancy": (P + "headroom_buffer_pg_peak_occupancy", PG_ATTRS),
    f"{PG}/in-pkts": (P + "pg_rx_frames", PG_ATTRS),
    f"{PG}/in-octets": (P + "pg_rx_octet", PG_ATTRS),
    f"{SB}/tc[index=3][type=egress]/state/occupancy":
        (P + "shared_buffer_port_tc_curr_occupancy", (("interface", "swp7"), ("sb", "0"), ("tc", "3"))),
    f"{SB}/tc[index=3][type=egress]/state/peak-occupancy":
        (P + "shared_buffer_port_tc_peak_occupancy", (("interface", "swp7"), ("sb", "0"), ("tc", "3"))),
    f"{SB}/tc[index=2][type=ingress]/state/occupancy":
        (P + "shared_buffer_port_pg_curr_occupancy", (("interface", "swp7"), ("sb", "0"), ("pg", "2"))),
    f"{SB}/tc[index=2][type=ingress]/state/peak-occupancy":
        (P + "shared_buffer_port_pg_peak_occupancy", (("interface", "swp7"), ("sb", "0"), ("pg", "2"))),
    f"{SB}/pool[index=1][type=ingress]/state/occupancy":
        (P + "shared_buffer_port_ingress_pool_curr_occupancy", (("interface", "swp7"), ("sb", "0"), ("pool", "1"))),
    f"{SB}/pool[index=4][type=egress]/state/peak-occupancy":
        (P + "shared_buffer_port_egress_pool_peak_occupancy", (("interface", "swp7"), ("sb", "0"), ("pool", "4"))),
    f"{SB}/pool[index=4]/state/occupancy":
        (P + "shared_buffer_port_pool_curr_occupancy", (("interface", "swp7"), ("sb", "0"), ("pool", "4"))),
    f"{SB}/pool[index=4]/state/threshold":
        (P + "devlink_pool_threshold", (("interface", "swp7"), ("sb", "0"), ("pool", "4"))),
    # Cumulus 5.15 retired if_in_multicast_pkts and if_in_broadcast_pkts for these
    "/interfaces/interface[name=swp7]/state/counters/in-multicast-pkts":
        (P + "ether_stats_multicast_pkts", TC_ATTRS[:1]),
    "/interfaces/interface[name=swp7]/state/counters/in-broadcast-pkts":
        (P + "ether_stats_broadcast_pkts", TC_ATTRS[:1]),
    "swtel:/interfaces/interface[name=swp7]/hw/state/counters/in-mcast-pkts":
        (P + "ether_stats_multicast_pkts", TC_ATTRS[:1]),
    "swtel:/interfaces/interface[name=swp7]/hw/state/counters/in-bcast-pkts":
        (P + "ether_stats_broadcast_pkts", TC_ATTRS[:1]),
    # and sp_rx_octets & co. (unsupported on Spectrum): swtel's own per-priority counts
    "swtel:/interfaces/interface[name=swp7]/pfc/priority[id=3]/state/in-octets":
        (P + "sp_in_octets", (("interface", "swp7"), ("priority", "3"))),
    "swtel:/interfaces/interface[name=swp7]/pfc/priority[id=3]/state/out-pkts":
        (P + "sp_out_pkts", (("interface", "swp7"), ("priority", "3"))),
    # drop reasons: Cumulus' discard counter where it has one, else one metric for every reason
    "swtel:/interfaces/interface[name=swp7]/drops/group[name=l2]/reason[name=ingress-vlan-filter]/state/packets":
        (P + "discards_ingress_vlan_membership",
         (("interface", "swp7"), ("group", "l2"), ("reason", "ingress-vlan-filter"))),
    "swtel:/interfaces/interface[name=swp7]/drops/group[name=buffer]/reason[name=head-of-queue-timeout]/state/packets":
        (P + "discards_egress_hoq", (("interface", "swp7"), ("group", "buffer"), ("reason", "head-of-queue-timeout"))),
    "swtel:/interfaces/interface[name=swp7]/drops/group[name=l3]/reason[name=blackhole-route]/state/packets":
        (P + "drops_reason_packets", (("interface", "swp7"), ("group", "l3"), ("reason", "blackhole-route"))),
    # a reason of Cumulus' name in another group is not that counter
    "swtel:/interfaces/interface[name=swp7]/drops/group[name=l3]/reason[name=ingress-vlan-filter]/state/packets":
        (P + "drops_reason_packets", (("interface", "swp7"), ("group", "l3"), ("reason", "ingress-vlan-filter"))),
    "swtel:/devlink/devices/device[name=pci/0000:03:00.0]/drops/group[name=l2]/reason[name=ingress-vlan-filter]/state/packets":
        ("swtel_devlink_drops_reason_packets",
         (("device", "pci/0000:03:00.0"), ("group", "l2"), ("reason", "ingress-vlan-filter"))),
    "swtel:/devlink/devices/device[name=pci/0000:03:00.0]/drops/group[name=l3]/reason[name=a\\]b]/state/bytes":
        ("swtel_devlink_drops_reason_bytes", (("device", "pci/0000:03:00.0"), ("group", "l3"), ("reason", "a]b"))),
}


@pytest.mark.parametrize("path", sorted(NAMES))
def test_exact_names_and_attributes_of_each_shape(path):
    name, attrs, rank = otlp_names.for_path(path)
    assert (name, attrs) == NAMES[path]
    assert rank == (2 if "/hw/" in path else 1)  # switchd's counters win over the kernel's


def test_the_simulated_asic_s_queue_gauges_take_cumulus_buffer_names():
    for counter, name in (("tc_curr_occupancy_3", "shared_buffer_port_tc_curr_occupancy"),
                          ("tc_watermark_3", "shared_buffer_port_tc_watermark"),
                          ("tc_peak_occupancy_3", "shared_buffer_port_tc_peak_occupancy")):
        container, leaf, _kind = map_name("swp7", counter)
        assert otlp_names.metric_name(container.path, leaf)[:2] == (P + name, TC_ATTRS)


def test_switchd_and_mlxsw_multicast_land_on_the_5_19_name():
    for rules, counter in ((drivers.SWITCHD, "HwIfInMcastPkts"), (drivers.SWITCHD, "HwIfInBcastPkts")):
        container, leaf, _kind = drivers.map_name(rules, "swp1", counter)
        name = otlp_names.metric_name(container.path, leaf)[0]
        assert name in (P + "ether_stats_multicast_pkts", P + "ether_stats_broadcast_pkts"), (counter, name)


def _table_names() -> set[str]:
    return {name for shape in otlp_names.SHAPES for name in shape.leaves.values()} | set(otlp_names.DISCARDS.values())


def test_no_name_cumulus_deprecated_is_sent():
    deprecated = set(otlp_names.DEPRECATED)
    assert P + "if_in_multicast_pkts" in deprecated and P + "sp_rx_octets" in deprecated
    assert _table_names() & deprecated == set()
    # nor through a shape's default name: the leaves the retired names stood for
    for path in ("/interfaces/interface[name=swp1]/state/counters/in-unknown-protos",
                 "swtel:/interfaces/interface[name=swp1]/hw/state/counters/in-octets",
                 "swtel:/interfaces/interface[name=swp1]/pfc/priority[id=0]/state/in-pkts",
                 "swtel:/interfaces/interface[name=swp1]/pfc/priority[id=0]/state/out-octets"):
        assert otlp_names.for_path(path)[0] not in deprecated, path
    # every replacement Cumulus names is one of its 5.19 names
    assert {new for new in otlp_names.DEPRECATED.values() if new} <= otlp_names.CUMULUS_519


def test_every_table_name_is_cumulus_5_19_s_or_swtel_s_with_a_reason():
    names = _table_names()
    assert names - otlp_names.CUMULUS_519 == set(otlp_names.SWTEL_OWN)
    assert otlp_names.CUMULUS_519 - names == {otlp_names.EGRESS_HISTOGRAM}  # built by the exporter
    assert all(why for why in otlp_names.SWTEL_OWN.values())
    assert not set(otlp_names.SWTEL_OWN) & otlp_names.CUMULUS_519
    # swtel's PEAK is never sent under Cumulus' watermark: each TC / PG has both, apart
    assert otlp_names.TC["peak-occupancy"] != otlp_names.TC["watermark"]


def test_the_docs_table_says_whose_each_name_is():
    rows = "\n".join(otlp_names.doc_rows())
    assert otlp_names.SOURCE_519 in rows
    assert f"| `{P}shared_buffer_port_tc_watermark` | `interface`, `tc` | 1 | yes |" in rows
    assert f"| `{P}shared_buffer_port_tc_peak_occupancy` | `interface`, `tc` | 1 | swtel |" in rows
    assert "if_in_multicast_pkts" not in rows


def test_drop_reasons_name_from_the_path_builders():
    """The trees as agent/pathgrammar builds them (escaped names) and agent/sources/devlink_trap
    names a trap: every reason of one port is one series apart, by group and reason."""
    from agent.pathgrammar import devlink_drop_reason_path, drop_reason_path
    from agent.sources.devlink_trap import trap_container

    got = {otlp_names.for_path(f"swtel:{drop_reason_path('swp[1]', g, r)}/packets")
           for g, r in (("l2", "ingress-vlan-filter"), ("l3", "ipv4-lpm-miss"), ("buffer", "tail-drop"))}
    assert got == {(P + "discards_ingress_vlan_membership", (("interface", "swp[1]"), ("group", "l2"),
                                                              ("reason", "ingress-vlan-filter")), 1),
                   (P + "drops_reason_packets", (("interface", "swp[1]"), ("group", "l3"),
                                                 ("reason", "ipv4-lpm-miss")), 1),
                   (P + "drops_reason_packets", (("interface", "swp[1]"), ("group", "buffer"),
                                                 ("reason", "tail-drop")), 1)}
    trap = trap_container("pci/0000:03:00.0", "l3_exceptions", "unresolved_neigh")
    assert trap.path == devlink_drop_reason_path("pci/0000:03:00.0", "l3", "unresolved-neigh")
    assert otlp_names.metric_name(trap.path, "packets") == (
        "swtel_devlink_drops_reason_packets", (("device", "pci/0000:03:00.0"), ("group", "l3"),
                                               ("reason", "unresolved-neigh")), 1)


@pytest.mark.parametrize("profile", ["cumulus", "otel"])
def test_drop_reasons_in_an_otlp_request(profile):
    """The OTLP request (the exporter's own layout): in `otel` the per-reason metric is one
    monotonic cumulative Sum whose points are told apart by interface, group and reason; in
    `cumulus` a gauge of the same name and points."""
    from agent.exporters import otlp
    from tests.interop.test_remote_write import drop_reason_table

    otlp._load()
    layout = otlp._Layout([drop_reason_table()], profile, otlp.resource_pb2.Resource())
    metrics = {m.name: m for req in layout.requests for rm in req.resource_metrics
               for sm in rm.scope_metrics for m in sm.metrics}
    assert set(metrics) == {P + "discards_ingress_vlan_membership", P + "drops_reason_packets",
                            "swtel_devlink_drops_reason_packets", "swtel_devlink_drops_reason_bytes"}
    reasons = metrics[P + "drops_reason_packets"]
    data = reasons.sum if profile == "otel" else reasons.gauge
    assert reasons.WhichOneof("data") == ("sum" if profile == "otel" else "gauge")
    if profile == "otel":
        assert data.is_monotonic and data.aggregation_temporality == otlp.metrics_pb2.AGGREGATION_TEMPORALITY_CUMULATIVE
    points = {tuple((a.key, a.value.string_value) for a in dp.attributes) for dp in data.data_points}
    assert points == {(("interface", "swp1"), ("group", "l3"), ("reason", "blackhole-route")),
                      (("interface", "swp1"), ("group", "buffer"), ("reason", "tail-drop"))}


def test_the_fec_histogram_on_cumulus_paths_takes_cumulus_name_and_bin():
    """The RS-FEC bins on Cumulus 5.15's layout (what the asic and ethnl sources stream) are
    named as Cumulus exports its histogram: the port's ``..._phy_rs_fec_histogram`` with
    ``bin`` (the upper boundary: Spectrum's bin index), a lane's with ``lane`` too; the
    ``upper-boundary`` leaf is no bin; other histograms keep swtel's bin form."""
    from agent.pathgrammar import fec_histogram_bin_path
    from agent.sources.asic import histogram_bin

    port, leaf, _kind = map_name("sw]p7", "phy_rs_fec_histogram")
    where, count = histogram_bin(port, leaf, 15, 15, 2**64 - 1)  # the histogram's container, the bin's leaf
    assert (where.path, count) == ("/interfaces/interface[name=sw\\]p7]/phy/histograms/state",
                                   "rs-num-corr-err[upper-boundary=15]/count")
    assert where.full(count) == fec_histogram_bin_path("sw]p7", 15) + "/count"
    # the bin's count, split either way (its own container, or its histogram's with a keyed leaf)
    for split_at in ((where.path, count), (fec_histogram_bin_path("sw]p7", 15), "count")):
        assert otlp_names.histogram_bin(*split_at) == (
            "/interfaces/interface[name=sw\\]p7]/phy/fec/state", "rs-fec-histogram", 15, -1, 15)
    assert otlp_names.for_path(where.full(count)) == (P + "phy_rs_fec_histogram", (("interface", "sw]p7"),
                                                                                    ("bin", "15")), 2)
    lane = fec_histogram_bin_path("swp7", 3, lane=2) + "/count"
    assert otlp_names.for_path(lane)[:2] == (P + "phy_stats_lane_rs_fec_histogram",
                                             (("interface", "swp7"), ("lane", "2"), ("bin", "3")))
    assert otlp_names.histogram_bin(fec_histogram_bin_path("sw]p7", 15), "upper-boundary") is None
    assert otlp_names.histogram_bin(where.path, "rs-num-corr-err[upper-boundary=15]/upper-boundary") is None
    assert otlp_names.histogram_bin("/interfaces/interface[name=swp7]/histograms/state/rs-num-corr-err"
                                    "[upper-boundary=3]", "count") is None  # not below a phy
    rmon = "swtel:/interfaces/interface[name=swp7]/ethtool-stats/rmon/hist-rx/bin[index=1][lower=65][upper=127]"
    assert otlp_names.histogram_bin(rmon.removeprefix("swtel:"), "count")[2:] == (1, 65, 127)
