"""docs/paths.md is generated from the sources' tables and must stay in step with them."""

from pathlib import Path

import pytest

from agent import pathdoc
from agent.sources.drivers import MLX5, MLXSW, SWITCHD, map_name, table_for

# a check of the tree itself: the same whichever backend or libraries run it
pytestmark = pytest.mark.once


def test_paths_doc_is_current():
    doc = Path(__file__).resolve().parents[2] / "docs" / "paths.md"
    assert doc.read_text() == pathdoc.render(), "run: python -m agent.pathdoc > docs/paths.md"


def test_driver_tables_map_design_names():
    cases = [
        (MLXSW, "a_symbol_error_during_carrier", "openconfig",
         "/interfaces/interface[name=swp1]/ethernet/state/counters", "in-symbol-error"),
        (MLXSW, "rx_pause_prio_3", "swtel",
         "/interfaces/interface[name=swp1]/pfc/priority[id=3]/state", "in-pause-pkts"),
        (MLXSW, "tc_no_buffer_discard_uc_tc_12", "openconfig",
         "/qos/interfaces/interface[interface-id=swp1]/output/queues/queue[name=12]/state", "dropped-pkts"),
        (MLX5, "rx_prio5_pause_duration", "swtel",
         "/interfaces/interface[name=swp1]/pfc/priority[id=5]/state", "in-pause-duration"),
        (MLX5, "rx_symbol_err_phy", "openconfig",
         "/interfaces/interface[name=swp1]/ethernet/state/counters", "in-symbol-error"),
        (SWITCHD, "HwIfInPfc7Pkt", "swtel",
         "/interfaces/interface[name=swp1]/pfc/priority[id=7]/state", "in-pause-pkts"),
        (SWITCHD, "HwIfInBufferDrops", "swtel",
         "/interfaces/interface[name=swp1]/hw/state/counters", "in-buffer-drops"),
        (SWITCHD, "SoftInErrors", "swtel", "/interfaces/interface[name=swp1]/ethtool", "soft-in-errors"),
        ([], "some_new_counter", "swtel", "/interfaces/interface[name=swp1]/ethtool", "some-new-counter"),
    ]
    for rules, name, origin, path, leaf in cases:
        container, got_leaf, _kind = map_name(rules, "swp1", name)
        assert (container.origin, container.path, got_leaf) == (origin, path, leaf), name


def test_gauges_and_driver_detection():
    assert map_name(SWITCHD, "swp1", "HwIfOutQLen")[2] == 1
    assert map_name([], "v0", "peer_ifindex")[2] == 1
    assert table_for("mlx_sx_netdev", ["HwIfInOctets", "HwIfOutOctets"]) is SWITCHD
    assert table_for("mlxsw_spectrum2", []) is MLXSW
    assert table_for("veth", ["peer_ifindex"]) == []
