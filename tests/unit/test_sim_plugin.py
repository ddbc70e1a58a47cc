"""The simulated Spectrum switch plugin (agent/asic/sim/) through its C ABI (ctypes), against
the reference model tests/sim_model.py: exact values, layout, scenario effects, errors."""

from __future__ import annotations

import ctypes
import time

import pytest
from sim_model import IDX, SLOT, SWITCH_VALUES, ConfigError, Model  # noqa: E402

from tests import sim_model  # noqa: E402

pytestmark = pytest.mark.nolibs  # no versioned library decides its outcome: not in the Debian pass

NAME_MAX = 64
OK, ERROR, ECHANGED = 0, -1, -2
S = 1_000_000_000  # ns


class AsicPort(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char * NAME_MAX), ("parent", ctypes.c_char * NAME_MAX),
                ("speed_mbps", ctypes.c_uint64), ("flags", ctypes.c_uint32),
                ("reserved", ctypes.c_uint32)]


class AsicCounter(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char * NAME_MAX), ("width", ctypes.c_uint8),
                ("kind", ctypes.c_uint8), ("reserved", ctypes.c_uint16), ("nbins", ctypes.c_uint32)]


class AsicOps(ctypes.Structure):
    _fields_ = [
        ("abi_version", ctypes.c_uint32),
        ("ops_size", ctypes.c_uint32),
        ("name", ctypes.c_char_p),
        ("open", ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_char_p, ctypes.c_char_p,
                                  ctypes.c_size_t)),
        ("generation", ctypes.CFUNCTYPE(ctypes.c_uint64, ctypes.c_void_p)),
        ("port_count", ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p)),
        ("port_info", ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_int,
                                       ctypes.POINTER(AsicPort))),
        ("counter_count", ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_int)),
        ("counter_info", ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_int, ctypes.c_int,
                                          ctypes.POINTER(AsicCounter))),
        ("read", ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_uint64,
                                  ctypes.POINTER(ctypes.c_uint64), ctypes.c_size_t,
                                  ctypes.POINTER(ctypes.c_int64), ctypes.c_char_p,
                                  ctypes.c_size_t)),
        ("close", ctypes.CFUNCTYPE(None, ctypes.c_void_p)),
        ("bin_info", ctypes.c_void_p),  # ABI 1.1 (the sim has no histogram yet: NULL)
    ]


def plugin_path() -> str:
    from agent import asic

    path = asic.builtin_path("sim")
    if path is None:
        pytest.skip("sim plugin not built (python setup.py build_ext --inplace)")
    return path


def load_ops() -> AsicOps:
    lib = ctypes.CDLL(plugin_path())
    fn = lib.swtel_asic_plugin
    fn.restype = ctypes.POINTER(AsicOps)
    return fn().contents


class Sim:
    """One opened simulated switch, through the ABI."""

    def __init__(self, ops: AsicOps, config: str):
        self.ops = ops
        err = ctypes.create_string_buffer(512)  # the loader's is 384 (agent/_ext/asic.c)
        self.h = ops.open(config.encode(), err, len(err))
        if not self.h:
            raise ConfigError(err.value.decode())
        self.last_ts: int | None = None  # the previous successful read's time (PEAK clears on read)
        self.prev_ts: int | None = None  # and the one before it
        self.list()

    def list(self) -> None:
        ops, h = self.ops, self.h
        self.gen = ops.generation(h)
        self.ports, self.counters = [], []
        for i in range(ops.port_count(h)):
            p = AsicPort()
            assert ops.port_info(h, i, ctypes.byref(p)) == 0
            self.ports.append((p.name.decode(), p.parent.decode(), p.speed_mbps, p.flags))
            cs = []
            for j in range(ops.counter_count(h, i)):
                c = AsicCounter()
                assert ops.counter_info(h, i, j, ctypes.byref(c)) == 0
                cs.append((c.name.decode(), c.width, c.kind))
                assert c.nbins == (sim_model.FEC_BINS if c.kind == sim_model.HISTOGRAM else 0)
            self.counters.append(cs)
        self.n = sum(sim_model.slots(c) for c in self.counters)
        self.buf = (ctypes.c_uint64 * self.n)()

    def read_raw(self, gen: int | None = None, n: int | None = None) -> tuple[int, int]:
        ts = ctypes.c_int64()
        err = ctypes.create_string_buffer(256)
        rc = self.ops.read(self.h, self.gen if gen is None else gen, self.buf,
                           self.n if n is None else n, ctypes.byref(ts), err, len(err))
        return rc, ts.value

    def read(self) -> tuple[int, list[int]]:
        rc, ts = self.read_raw()
        assert rc == OK
        self.prev_ts, self.last_ts = self.last_ts, ts
        return ts, list(self.buf)

    def read_following(self) -> tuple[int, list[int]]:
        """A read; when the layout changed since it was listed (the simulator's clock is the
        real one: on a loaded machine it may cross a breakout between the open and the read),
        list it again and read, as the agent does."""
        rc, ts = self.read_raw()
        if rc == ECHANGED:
            self.list()
            rc, ts = self.read_raw()
        assert rc == OK, rc
        self.prev_ts, self.last_ts = self.last_ts, ts
        return ts, list(self.buf)

    def since(self, start: int) -> int | None:
        """The model's ``since`` for the last read: the read before it, relative to start."""
        return None if self.prev_ts is None else self.prev_ts - start

    def close(self) -> None:
        if self.h:
            self.ops.close(self.h)
            self.h = None


@pytest.fixture(scope="module")
def ops() -> AsicOps:
    return load_ops()


def opened(ops: AsicOps, config: str, at_s: float) -> tuple[Sim, int]:
    """Open with start = now - at_s, so the plugin's t is about at_s now."""
    start = time.time_ns() - int(at_s * S)
    return Sim(ops, f"{config} start={start}"), start


def port_slice(layout_ports, counters, name: str) -> slice:
    off = 0
    for (pname, *_), cs in zip(layout_ports, counters, strict=True):
        if pname == name:
            return slice(off, off + sim_model.slots(cs))
        off += sim_model.slots(cs)
    raise KeyError(name)


# --- ABI and layout ---------------------------------------------------------------------------

def test_abi_fields(ops):
    assert ops.abi_version == 1
    assert ops.ops_size == ctypes.sizeof(AsicOps)
    assert ops.name == b"sim"


def test_spine_layout(ops):
    sim, _ = opened(ops, "role=spine", 1)
    try:
        names = [p[0] for p in sim.ports]
        assert len(names) == 62 + 4 + 2
        assert names[:10] == [f"swp{i}" for i in range(1, 11)]
        assert names[10:16] == ["swp11s0", "swp11s1", "swp11s2", "swp11s3", "swp12s0", "swp12s1"]
        assert names[-1] == "swp64"
        info = {p[0]: p for p in sim.ports}
        assert info["swp11s2"][1:] == ("swp11", 100_000, 1)
        assert info["swp12s1"][1:] == ("swp12", 200_000, 1)
        assert info["swp13"][1:] == ("", 400_000, 1)
        for (_name, _parent, speed, _flags), cs in zip(sim.ports, sim.counters, strict=True):
            assert cs == sim_model.switch_counters(speed // 100_000)
        # 100 counters and gauges, 13 drop reasons, 8 TC peaks, 50 PG and pool values, 16 FEC bins,
        # then 16 FEC bins per lane (400G: 4 lanes, 100G: 1)
        assert len(sim.counters[0]) == 176 and sim_model.slots(sim.counters[0]) == 187 + 4 * 16
        assert sim_model.slots(sim.counters[names.index("swp11s0")]) == 187 + 16
        assert [c[0] for c in sim.counters[0][:3]] == ["HwIfInOctets", "HwIfInUcastPkts",
                                                        "HwIfInMcastPkts"]
        kinds = {c[0]: c[2] for c in sim.counters[0]}
        assert kinds["tc_watermark_7"] == 1 and kinds["carrier_changes"] == 0
        assert kinds["phy_rs_fec_histogram"] == sim_model.HISTOGRAM
        assert kinds["pg_peak_occupancy_3"] == kinds["pg_headroom_peak_occupancy_0"] == sim_model.PEAK
        assert kinds["ingress_pool_peak_occupancy_0"] == sim_model.PEAK
        assert kinds["pg_headroom_watermark_7"] == kinds["ingress_pool_occupancy_0"] == sim_model.GAUGE
        assert sim.ops.port_info(sim.h, len(sim.ports), ctypes.byref(AsicPort())) == -1
        assert kinds["wjh_l2_ingress_vlan_filter"] == kinds["wjh_acl_egress_flow_action_drop"] == sim_model.COUNTER
        assert sim.ops.counter_info(sim.h, 0, 176, ctypes.byref(AsicCounter())) == -1
        assert sim.ops.counter_info(sim.h, names.index("swp11s0"), 173, ctypes.byref(AsicCounter())) == -1
        assert sim.ops.counter_count(sim.h, -1) == -1
        assert sim.gen == 1
        model = Model("role=spine")
        gen, ports, counters = model.layout(0)
        assert (gen, ports, counters) == (sim.gen, sim.ports, sim.counters)
    finally:
        sim.close()


@pytest.mark.parametrize("uplinks", [4, 8])
def test_leaf_layout(ops, uplinks):
    sim, _ = opened(ops, f"role=leaf uplinks={uplinks}", 1)
    try:
        names = [p[0] for p in sim.ports]
        assert names == [f"swp{i}" for i in range(1, 33)] + [f"swp{i}" for i in
                                                              range(65 - uplinks, 65)]
        assert {p[2] for p in sim.ports[:32]} == {200_000}
        assert {p[2] for p in sim.ports[32:]} == {400_000}
    finally:
        sim.close()


def test_host_and_flat_layouts(ops):
    sim, _ = opened(ops, "role=host", 1)
    try:
        assert sim.ports == [("mlx5_0", "", 400_000, 3)]
        assert sim.counters[0] == sim_model.HOST_COUNTERS
        assert [c[1] for c in sim.counters[0]] == [32] * 6 + [64] * 5
    finally:
        sim.close()
    sim, _ = opened(ops, "ports=256", 1)
    try:
        assert [p[0] for p in sim.ports] == [f"swp{i}" for i in range(1, 257)]
        assert sim.n == 256 * SWITCH_VALUES
    finally:
        sim.close()


# --- exact values against the model -----------------------------------------------------------

SCENARIO_CONFIGS = [
    ("role=spine", [0.05, 3.3, 61.7]),
    ("role=spine seed=7 load=0.9", [0.5, 12.34]),
    ("role=spine scenario=symbol-errors@5s-25s:swp11s1", [4.99, 5.2, 12.3, 24.95, 26, 70.1]),
    ("role=spine seed=42 scenario=symbol-errors@1s", [0.5, 3.1, 64.2]),
    ("role=leaf scenario=imbalance@2s-8s", [1.5, 2.05, 5.5, 8.2]),
    ("role=leaf uplinks=8 seed=3 scenario=imbalance@1s-4s:swp60,link-flap@5s-30s:swp61",
     [2.5, 5.6, 9.1, 17.77, 31]),
    ("role=spine scenario=pfc-storm@1s-5s:swp3/4 scenario=microburst@0s:swp4",
     [0.3, 1.001, 2.5, 4.7, 6.1, 33.3]),
    ("role=spine scenario=link-flap@1s-20s:swp2,link-flap@21s:swp2", [1.55, 3.3, 7.7, 22.4, 40]),
    ("role=spine scenario=counter-clear@3s scenario=counter-clear@5s:swp7", [2.9, 3.2, 6]),
    ("role=spine scenario=breakout@3s:swp6,symbol-errors@4s-6s:swp6s1", [2.5, 3.5, 4.5, 7]),
    ("role=host scenario=symbol-errors@2s-9s", [1.0, 2.5, 8.8, 12]),
    ("role=host seed=99 load=0.1 scenario=symbol-errors@1s,counter-clear@3s", [0.5, 3.5, 70]),
    ("ports=16 load=1.0 scenario=microburst@1s-9s:swp16", [1.3, 4.4, 9.5]),
    ("ports=16 load=0 scenario=symbol-errors@1s-9s", [2.0, 8.0]),
    ("role=spine scenario=fec-degrade@2s-22s:swp11s1", [1.9, 2.35, 9.87, 19.7, 20.05, 21.9, 23]),
    ("role=spine seed=5 scenario=fec-degrade@1s-3s:swp7,fec-degrade@4s-64s:swp7,counter-clear@3.5s",
     [0.9, 2.85, 3.6, 33.3, 61, 70]),
    ("role=leaf scenario=fec-degrade@100ms-10s", [0.05, 5.55, 9.95, 12]),
    ("role=spine scenario=breakout@1s:swp5,fec-degrade@1s-9s:swp5s2", [0.5, 1.5, 8.5]),
    ("ports=8 scenario=incast@1s-30s:swp2/3", [0.5, 1.3, 2.02, 7.77, 29.9, 31]),
    ("role=spine asic=spectrum1 seed=9 scenario=incast@500ms:swp5/5/20ms/300ms,microburst@0s:swp5,"
     "counter-clear@2s", [0.2, 0.71, 2.5, 11.1]),
    ("role=leaf asic=spectrum3 scenario=incast@2s-4s,pfc-storm@1s-5s:swp1/3", [1.5, 2.2, 3.9, 6]),
    ("ports=4 asic=spectrum2 scenario=incast@0s:swp4/0/1ms/100ms", [0.05, 0.33, 1.7]),
    ("ports=4 scenario=incast@0s-2s:swp1/2/45ms/100ms,incast@2s:swp1/6/10ms/200ms,incast@0s:swp3,"
     "counter-clear@1s:swp1", [0.08, 1.5, 2.3, 3.9]),
    ("ports=2 scenario=incast@0s-1s:swp2/4/49ms/100ms,incast@1s:swp2/4/5ms/100ms", [0.5, 1.0, 1.02, 2.2]),
    ("ports=4 scenario=drops@1s-3s:swp2:ingress-vlan-filter,drops@2s:swp2:blackhole-route,"
     "drops@500ms-4s:swp3:egress-flow-action-drop,microburst@0s:swp3", [0.5, 1.005, 2.5, 3.7, 70.3]),
    ("role=spine seed=11 scenario=drops@0s-2s:swp11s2:tail-drop,drops@2s:swp11s2:tail-drop,"
     "incast@1s:swp11s2/3,drops@1s:swp7:early-drop,counter-clear@1.5s:swp7", [0.3, 1.6, 2.01, 9.9]),
    ("role=spine scenario=breakout@1s:swp3,drops@1s-9s:swp3s1:ttl-value-is-too-small,"
     "drops@0s:swp62:decap-error,drops@0s:swp62:link-down", [0.7, 1.2, 8.8, 12]),
    ("role=leaf seed=8 scenario=drops@0s-1s:swp63:source-mac-is-multicast,"
     "drops@0s-1s:swp63:ingress-spanning-tree-filter,drops@0s-1s:swp63:overlay-smac-is-mc,"
     "drops@0s-1s:swp63:ingress-flow-action-drop,imbalance@0s-2s", [0.25, 0.9, 1.3]),
]


@pytest.mark.parametrize(("config", "times"), SCENARIO_CONFIGS)
def test_values_equal_model(ops, config, times):
    model = Model(config)
    for at in times:
        sim, start = opened(ops, config, at)
        try:
            for _ in range(3):
                ts, values = sim.read_following()
                t = ts - start
                gen, ports, counters = model.layout(t)
                assert (gen, ports, counters) == (sim.gen, sim.ports, sim.counters)
                expected = model.values(t, sim.since(start))
                if values != expected:
                    names = [f"{p[0]}.{c[0]}" for p, cs in zip(ports, counters, strict=True)
                             for c in cs]
                    diff = [(names[i], values[i], expected[i]) for i in range(len(values))
                            if values[i] != expected[i]]
                    pytest.fail(f"{config} at t={t}: {len(diff)} values differ, e.g. {diff[:5]}")
        finally:
            sim.close()


def test_run_is_monotone_and_below_line_rate(ops):
    """A real run of the plugin: counters never go down, octets within line rate."""
    config = ("role=spine scenario=symbol-errors@0s-1s:swp11s1,pfc-storm@0s:swp1,"
              "microburst@0s:swp2,link-flap@0s:swp3")
    sim, _ = opened(ops, config, 0.5)
    try:
        kinds = sim_model.value_kinds(sim.counters)
        offsets = sim_model.offsets(sim.counters)
        prev_ts, prev = sim.read()
        for _ in range(200):
            ts, cur = sim.read()
            for i, k in enumerate(kinds):
                if k == 0:
                    assert cur[i] >= prev[i], i
            for j, (name, _, speed, _) in enumerate(sim.ports):
                base = offsets[j]
                for i in (0, 4):
                    delta_bits = (cur[base + i] - prev[base + i]) * 8
                    assert delta_bits * 1000 <= speed * (ts - prev_ts), name
            prev_ts, prev = ts, cur
    finally:
        sim.close()


# --- properties over the model (exactly the plugin, see above), on dense time grids ------------

def grid(model: Model, t0: float, t1: float, step: float):
    t = int(t0 * S)
    while t <= t1 * S:
        yield t, model.values(t)
        t += int(step * S)


def series(model: Model, port: str, counter: str, t0: float, t1: float, step: float):
    """[(t, value)] of one counter of one port (the model's per-port values, for speed)."""
    out = []
    t = int(t0 * S)
    while t <= t1 * S:
        p = next(p for p in model.ports_at(t) if p.name == port)
        out.append((t, p.values(t)[[c[0] for c in p.counters].index(counter)]))
        t += int(step * S)
    return out


def rate(model: Model, port: str, counter: str, t0: float, t1: float) -> float:
    (ta, a), (tb, b) = series(model, port, counter, t0, t1, t1 - t0)
    return (b - a) / ((tb - ta) / S)


@pytest.mark.parametrize("config", [
    "role=spine scenario=symbol-errors@0s-3s:swp11s1,pfc-storm@1s-3s:swp1/3,link-flap@0s:swp2",
    "role=leaf scenario=imbalance@1s-3s,microburst@0s:swp1",
])
def test_monotone_and_line_rate_dense(config):
    model = Model(config)
    _, ports, counters = model.layout(0)
    kinds = sim_model.value_kinds(counters)
    offsets = sim_model.offsets(counters)
    prev_t, prev = 0, model.values(0)
    for t, cur in grid(model, 0.0037, 4, 0.0131):
        for i, k in enumerate(kinds):
            if k == 0:
                assert cur[i] >= prev[i]
        for j, p in enumerate(ports):
            for i in (0, 4):
                assert (cur[offsets[j] + i] - prev[offsets[j] + i]) * 8 * 1000 <= p[2] * (t - prev_t)
        prev_t, prev = t, cur


def test_clean_fabric_raises_no_alarm():
    for config in ("role=spine", "role=leaf uplinks=8 seed=5", "ports=32 load=1.0"):
        model = Model(config)
        _, ports, counters = model.layout(0)
        a, b = model.values(1 * S), model.values(3 * S)
        offsets = sim_model.offsets(counters)
        for j, p in enumerate(ports):
            d = {c[0]: b[offsets[j] + i] - a[offsets[j] + i] for i, c in enumerate(counters[j])}
            bits = d["phy_received_bits"]
            assert bits == p[2] * 1_000_000 * 2
            assert d["phy_symbol_errors"] / bits <= 1e-12
            assert 0.5e-9 < d["phy_corrected_bits"] / bits < 2e-9 < 5e-7
            assert d["phy_effective_errors"] == 0 and d["carrier_changes"] == 0
            drops = sum(v for k, v in d.items() if "Drops" in k or "Discards" in k)
            assert drops == 0
            assert all(d[f"rx_pause_duration_prio_{i}"] == 0 for i in range(8))
            assert d["HwIfInOctets"] > 0 and d["HwIfInUcastPkts"] > 0
            assert 0 < d["HwIfInMcastPkts"] < d["HwIfInUcastPkts"] // 1000


def test_load_and_jitter():
    model = Model("role=spine load=0.55")
    per_slot = [b - a for (_, a), (_, b) in
                zip(*(lambda s: (s, s[1:]))(series(model, "swp1", "HwIfInOctets", 1, 1.5, 0.01)),
                    strict=False)]
    line = 400e9 / 8 * 0.01
    assert min(per_slot) < max(per_slot)  # jitter
    assert 0.4 * line < min(per_slot) and max(per_slot) < 0.7 * line
    r = rate(model, "swp1", "HwIfInOctets", 1, 11) * 8 / 400e9
    assert 0.53 < r < 0.56


def test_symbol_errors_scenario():
    model = Model("role=spine scenario=symbol-errors@5s-25s:swp11s1")
    _, ports, counters = model.layout(0)
    names = [p[0] for p in ports]
    offsets = sim_model.offsets(counters)
    for t0 in (1, 26):  # outside: nothing anywhere
        a, b = model.values(t0 * S), model.values((t0 + 2) * S)
        for j in range(len(names)):
            assert b[offsets[j] + IDX["phy_symbol_errors"]] == a[offsets[j] + IDX["phy_symbol_errors"]]
    a, b = model.values(10 * S), model.values(12 * S)
    for j, name in enumerate(names):
        d = {c[0]: b[offsets[j] + i] - a[offsets[j] + i] for i, c in enumerate(counters[j])}
        if name != "swp11s1":
            assert d["phy_symbol_errors"] == 0 and d["phy_effective_errors"] == 0
            continue
        bits = d["phy_received_bits"]
        assert d["phy_symbol_errors"] / bits > 1e-12
        assert 1000 < d["phy_symbol_errors"] / 2 < 6000  # per second at 100G
        assert 1e-6 < d["phy_corrected_bits"] / bits < 3e-6
        assert 5 < d["phy_effective_errors"] / 2 < 80
        assert d["HwIfInDot3FrameErrors"] > 0 and d["HwIfInErrors"] > 0
        assert d["phy_raw_errors_lane0"] == d["phy_corrected_bits"]
    # irregular dips: some 100 ms cells of the port fall to 40-70 % of its mean
    cells = series(model, "swp11s1", "HwIfInOctets", 6, 12, 0.1)
    rates = [b - a for (_, a), (_, b) in zip(cells, cells[1:], strict=False)]
    mean = rate(model, "swp11s1", "HwIfInOctets", 1, 4) / 10
    dipped = [r for r in rates if r < 0.8 * mean]
    assert 0.15 < len(dipped) / len(rates) < 0.45
    assert min(rates) > 0.3 * mean


def test_host_retransmissions():
    model = Model("role=host scenario=symbol-errors@5s-25s")
    healthy = rate(model, "mlx5_0", "roce_adp_retrans", 0, 5)
    sick = rate(model, "mlx5_0", "roce_adp_retrans", 6, 9)
    after = rate(model, "mlx5_0", "roce_adp_retrans", 26, 36)
    assert healthy <= 2 and after <= 2
    assert 200 < sick < 5000
    idx = {c[0]: i for i, c in enumerate(sim_model.HOST_COUNTERS)}
    a, b = model.values(6 * S), model.values(9 * S)
    assert b[idx["out_of_sequence"]] > a[idx["out_of_sequence"]]
    assert b[idx["packet_seq_err"]] > a[idx["packet_seq_err"]]


@pytest.mark.parametrize("uplinks", [4, 8])
def test_imbalance_scenario(uplinks):
    model = Model(f"role=leaf uplinks={uplinks} scenario=imbalance@10s-20s:swp62")
    ups = [f"swp{i}" for i in range(65 - uplinks, 65)]

    def tx(t0):
        return {u: rate(model, u, "HwIfOutOctets", t0, t0 + 1) for u in ups}

    inside, outside = tx(12), tx(3)
    assert 1.8 <= max(inside.values()) / (sum(inside.values()) / uplinks) <= 2.2
    assert max(inside, key=inside.get) == "swp62"
    assert max(outside.values()) / (sum(outside.values()) / uplinks) < 1.1
    assert abs(sum(inside.values()) / sum(outside.values()) - 1) < 0.02  # group total unchanged
    servers_rx = sum(rate(model, f"swp{i}", "HwIfInOctets", 3, 4) for i in range(1, 33))
    assert abs(sum(outside.values()) / servers_rx - uplinks * 3 / 80) < 0.01


def test_pfc_storm_scenario():
    model = Model("role=spine scenario=pfc-storm@2s-6s:swp5/4")
    pause = series(model, "swp5", "rx_pause_duration_prio_4", 3, 5, 2)
    assert (pause[1][1] - pause[0][1]) / 2e6 > 0.9  # share of wall time, in us
    assert 15_000 < rate(model, "swp5", "HwIfInPfc4Pkt", 3, 5) < 25_000
    assert rate(model, "swp5", "HwIfInPfc3Pkt", 3, 5) == 0
    ratio = rate(model, "swp5", "HwIfOutOctets", 3, 5) / rate(model, "swp5", "HwIfOutOctets", 0, 2)
    assert 0.03 < ratio < 0.07
    assert rate(model, "swp5", "rx_pause_duration_prio_4", 7, 9) == 0
    assert rate(model, "swp6", "rx_pause_duration_prio_4", 3, 5) == 0
    occ = series(model, "swp5", "tc_curr_occupancy_4", 3, 3, 1)[0][1]
    assert occ > 14 << 20


def test_microburst_scenario():
    model = Model("role=spine scenario=microburst@1s-21s:swp4")
    drops = series(model, "swp4", "HwIfOutQDrops", 0, 23, 0.01)
    assert drops[90][1] == 0 and drops[-1][1] == drops[-200][1]  # none before, none after
    bursts, cur = [], None
    for (t0, a), (_, b) in zip(drops, drops[1:], strict=False):
        if b > a and cur is None:
            cur = [t0, 0, 0]
        if cur is not None:
            if b == a:
                cur[1] = t0
                bursts.append(cur)
                cur = None
            else:
                cur[2] += b - a
    assert 5 <= len(bursts) <= 14
    for (s0, e0, n), (s1, _, _) in zip(bursts, bursts[1:], strict=False):
        assert 1.4 * S <= s1 - s0 <= 4.1 * S
        assert 0.04 * S <= e0 - s0 <= 0.21 * S
        assert 300 <= n <= 3000
    occ = [v for _, v in series(model, "swp4", "tc_curr_occupancy_3", 1, 21, 0.1)]
    assert max(occ) > 15 << 20 and sorted(occ)[len(occ) // 2] < 1 << 20
    wred = series(model, "swp4", "HwIfOutQ3WredDrops", 0, 22, 22)
    disc = series(model, "swp4", "HwIfOutDiscards", 22, 22, 1)[0][1]
    assert wred[1][1] > 0 and disc == drops[-1][1] + wred[1][1]


def test_link_flap_scenario():
    model = Model("role=spine scenario=link-flap@1s-31s:swp9")
    cc = series(model, "swp9", "carrier_changes", 0, 32, 0.01)
    octets = dict(series(model, "swp9", "HwIfInOctets", 0, 32, 0.01))
    ups = [t for (t, a), (_, b) in zip(cc, cc[1:], strict=False) if b > a]
    assert cc[-1][1] % 2 == 0 and 14 <= cc[-1][1] <= 30
    downs, ups = ups[0::2], ups[1::2]
    for d0, d1 in zip(downs, downs[1:], strict=False):
        assert 1.9 * S <= d1 - d0 <= 4.1 * S
    for d, u in zip(downs, ups, strict=True):
        assert 0.28 * S <= u - d <= 0.31 * S
        mid = d + 0.1 * S
        assert octets[round(mid / 1e7) * 10_000_000 + 10_000_000] == octets[
            round(mid / 1e7) * 10_000_000 + 20_000_000]


def test_counter_clear_scenario(ops):
    config = "role=spine scenario=counter-clear@3s:swp7"
    model = Model(config)
    _, ports, counters = model.layout(0)
    sl = port_slice(ports, counters, "swp7")
    before, at, after = (model.values(t)[sl] for t in (3 * S - 1, 3 * S, 3 * S + 50_000_000))
    assert before[0] > 0 and all(v == 0 for v in at[:84])
    assert 0 < after[0] < before[0]
    other = port_slice(ports, counters, "swp8")
    assert model.values(3 * S)[other][0] > 0
    sim, start = opened(ops, config, 3.02)  # the plugin agrees right after the clear
    try:
        ts, values = sim.read()
        assert values == model.values(ts - start, sim.since(start))
        assert values[sl][0] < values[other][0] // 10
    finally:
        sim.close()


def test_breakout_changes_generation(ops):
    config = "role=spine scenario=breakout@1s:swp6"
    sim, start = opened(ops, config, 0.8)
    try:
        assert sim.gen == 1 and "swp6" in [p[0] for p in sim.ports]
        old = sim.gen
        # the simulator's clock is the real one: sleep until it passed 1 s (oversleeping is harmless)
        time.sleep(max(0, (start + 1 * S - time.time_ns()) / S) + 0.01)  # wallclock: the sim's time
        assert sim.read_raw()[0] == ECHANGED
        assert sim.ops.generation(sim.h) == 2
        assert sim.read_raw(gen=old)[0] == ECHANGED
        sim.list()
        names = [p[0] for p in sim.ports]
        assert "swp6" not in names
        i = names.index("swp6s0")
        assert names[i - 1: i + 5] == ["swp5", "swp6s0", "swp6s1", "swp6s2", "swp6s3", "swp7"]
        assert sim.ports[i][1:] == ("swp6", 100_000, 1)
        ts, values = sim.read()
        assert values == Model(config).values(ts - start, sim.since(start))
        sl = port_slice(sim.ports, sim.counters, "swp6s1")
        assert 0 < values[sl][0] < 100e9 / 8 * (ts - start - S) / S
    finally:
        sim.close()


def test_wrong_n_and_generation(ops):
    sim, _ = opened(ops, "role=leaf", 1)
    try:
        assert sim.read_raw(n=sim.n - 1)[0] == ECHANGED
        assert sim.read_raw(n=sim.n + 1)[0] == ECHANGED
        assert sim.read_raw(gen=sim.gen + 1)[0] == ECHANGED
        before = time.time_ns()
        rc, ts = sim.read_raw()
        assert rc == OK and before <= ts <= time.time_ns()  # stamped at the read, on CLOCK_REALTIME
    finally:
        sim.close()


def test_start_in_future_reads_zero(ops):
    sim, _ = opened(ops, "role=spine", -100)
    try:
        _, values = sim.read()
        kinds = sim_model.value_kinds(sim.counters)
        assert all(v == 0 for v, k in zip(values, kinds, strict=True) if k == sim_model.COUNTER)
    finally:
        sim.close()


BAD = [
    ("role=router", "sim: role: expected spine, leaf or host, got 'router'"),
    ("foo=1", "sim: unknown key 'foo' (known: role seed start ports uplinks load asic scenario)"),
    ("seed", "sim: expected key=value, got 'seed'"),
    ("=3", "sim: expected key=value, got '=3'"),
    ("seed=1 seed=2", "sim: duplicate key 'seed'"),
    ("seed=-1", "sim: seed: expected an unsigned 64-bit integer, got '-1'"),
    ("seed=18446744073709551616", "sim: seed: expected an unsigned 64-bit integer, "
                                  "got '18446744073709551616'"),
    ("start=now", "sim: start: expected Unix epoch nanoseconds, got 'now'"),
    ("ports=0", "sim: ports: expected 1..1024, got '0'"),
    ("ports=1025", "sim: ports: expected 1..1024, got '1025'"),
    ("uplinks=6", "sim: uplinks: expected 4 or 8, got '6'"),
    ("load=1.5", "sim: load: expected 0.0..1.0, got '1.5'"),
    ("load=.5", "sim: load: expected 0.0..1.0, got '.5'"),
    ("load=0.1234567", "sim: load: expected 0.0..1.0, got '0.1234567'"),
    ("scenario=x", "sim: scenario 'x': unknown name (known: symbol-errors imbalance pfc-storm "
                   "microburst link-flap counter-clear breakout fec-degrade incast drops)"),
    ("scenario=microburst,", "sim: scenario '': unknown name (known: symbol-errors imbalance "
                             "pfc-storm microburst link-flap counter-clear breakout fec-degrade "
                             "incast drops)"),
    ("scenario=link-flap@5", "sim: scenario 'link-flap@5': bad time '5' (e.g. 5s, 500ms, 2m)"),
    ("scenario=link-flap@5s-2x",
     "sim: scenario 'link-flap@5s-2x': bad time '2x' (e.g. 5s, 500ms, 2m)"),
    ("scenario=link-flap@5s-4s", "sim: scenario 'link-flap@5s-4s': end must be after start "
                                 "(10 ms resolution)"),
    ("scenario=link-flap@5s:swp99", "sim: scenario 'link-flap@5s:swp99': no port 'swp99'"),
    ("scenario=link-flap@5s:", "sim: scenario 'link-flap@5s:': empty port name"),
    ("scenario=link-flap@5s:swp1/3", "sim: scenario 'link-flap@5s:swp1/3': a priority is only "
                                     "for pfc-storm (a traffic class for incast)"),
    ("scenario=incast:swp1/8", "sim: scenario 'incast:swp1/8': traffic class must be 0..7"),
    ("scenario=incast@1s:swp1/3/x", "sim: scenario 'incast@1s:swp1/3/x': bad burst length 'x' (e.g. 20ms)"),
    ("scenario=incast@1s:swp1/3/20ms/2", "sim: scenario 'incast@1s:swp1/3/20ms/2': bad period '2' (e.g. 2s)"),
    ("scenario=incast@1s:swp1/3/0.5ms",
     "sim: scenario 'incast@1s:swp1/3/0.5ms': burst length must be 1ms..half the period"),
    ("scenario=incast@1s:swp1/3/600ms/1s",
     "sim: scenario 'incast@1s:swp1/3/600ms/1s': burst length must be 1ms..half the period"),
    ("scenario=incast@1s:swp1/3/20ms/50ms",
     "sim: scenario 'incast@1s:swp1/3/20ms/50ms': period must be 100ms..60s"),
    ("scenario=incast@1s:swp1/3/20ms/61s",
     "sim: scenario 'incast@1s:swp1/3/20ms/61s': period must be 100ms..60s"),
    ("scenario=incast@1s:swp99/3", "sim: scenario 'incast@1s:swp99/3': no port 'swp99'"),
    ("role=host scenario=incast", "sim: scenario 'incast': not available with role=host"),
    ("asic=spectrum5", "sim: asic: expected spectrum1, spectrum2, spectrum3 or spectrum4, got 'spectrum5'"),
    ("asic=spectrum4 asic=spectrum1", "sim: duplicate key 'asic'"),
    ("scenario=incast@1s-5s:swp2/3,incast@4s:swp2/5",
     "sim: scenarios 'incast@1s-5s:swp2/3' and 'incast@4s:swp2/5' overlap on swp2"),
    ("scenario=pfc-storm:swp1/8", "sim: scenario 'pfc-storm:swp1/8': priority must be 0..7"),
    ("scenario=imbalance", "sim: scenario 'imbalance': needs role=leaf (an uplink group)"),
    ("role=leaf scenario=imbalance:swp3",
     "sim: scenario 'imbalance:swp3': 'swp3' is not an uplink"),
    ("role=host scenario=pfc-storm", "sim: scenario 'pfc-storm': not available with role=host"),
    ("role=host ports=4", "sim: ports: not with role=host"),
    ("scenario=breakout@1s", "sim: scenario 'breakout@1s': needs a port (breakout@T:swpN)"),
    ("scenario=breakout@1s:swp11s1", "sim: scenario 'breakout@1s:swp11s1': 'swp11s1' cannot be "
                                     "broken out (a 400G port, not an uplink)"),
    ("scenario=breakout@1s:swp5,breakout@2s:swp5", "sim: scenario 'breakout@2s:swp5': 'swp5' is "
                                                   "broken out twice"),
    ("scenario=link-flap@1s-9s:swp2 scenario=pfc-storm@8s:swp2",
     "sim: scenarios 'link-flap@1s-9s:swp2' and 'pfc-storm@8s:swp2' overlap on swp2"),
    ("role=leaf scenario=imbalance@1s-9s,link-flap@5s:swp63",
     "sim: scenarios 'imbalance@1s-9s' and 'link-flap@5s:swp63' overlap on swp63"),
    ("scenario=" + ",".join(["microburst"] * 65), "sim: too many scenarios (max 64)"),
    ("scenario=fec-degrade@5s", "sim: scenario 'fec-degrade@5s': needs an end at least 2s after its "
                                "start (fec-degrade@START-END)"),
    ("scenario=fec-degrade@5s-6.99s:swp1", "sim: scenario 'fec-degrade@5s-6.99s:swp1': needs an end at "
                                          "least 2s after its start (fec-degrade@START-END)"),
    ("scenario=fec-degrade@1s-9s:swp2:4", "sim: scenario 'fec-degrade@1s-9s:swp2:4': swp2 has lanes 0..3"),
    ("scenario=fec-degrade@1s-9s:swp11s1:1",
     "sim: scenario 'fec-degrade@1s-9s:swp11s1:1': swp11s1 has lanes 0..0"),
    ("scenario=fec-degrade@1s-9s:swp2:x", "sim: scenario 'fec-degrade@1s-9s:swp2:x': lane must be 0..7"),
    ("scenario=fec-degrade@1s-9s:swp2:8", "sim: scenario 'fec-degrade@1s-9s:swp2:8': lane must be 0..7"),
    ("role=host scenario=fec-degrade@1s-9s",
     "sim: scenario 'fec-degrade@1s-9s': not available with role=host"),
    ("scenario=fec-degrade@1s-9s:swp2,link-flap@8s:swp2",
     "sim: scenarios 'fec-degrade@1s-9s:swp2' and 'link-flap@8s:swp2' overlap on swp2"),
    ("scenario=drops@1s-5s", "sim: scenario 'drops@1s-5s': needs a port and a reason "
                             "(drops@START-END:PORT:REASON)"),
    ("scenario=drops@1s-5s:swp1", "sim: scenario 'drops@1s-5s:swp1': needs a port and a reason "
                                  "(drops@START-END:PORT:REASON)"),
    ("scenario=drops@1s-5s:swp1:", "sim: scenario 'drops@1s-5s:swp1:': needs a port and a reason "
                                   "(drops@START-END:PORT:REASON)"),
    ("scenario=drops@1s:swp1:tail-drops",
     "sim: scenario 'drops@1s:swp1:tail-drops': unknown drop reason 'tail-drops' (known: link-down "
     "ingress-vlan-filter source-mac-is-multicast ingress-spanning-tree-filter blackhole-route "
     "ttl-value-is-too-small unresolved-neigh decap-error overlay-smac-is-mc tail-drop early-drop "
     "ingress-flow-action-drop egress-flow-action-drop)"),
    ("scenario=drops@1s:swp99:tail-drop", "sim: scenario 'drops@1s:swp99:tail-drop': no port 'swp99'"),
    ("scenario=drops@1s::tail-drop", "sim: scenario 'drops@1s::tail-drop': empty port name"),
    ("scenario=drops@1s:swp1/3:tail-drop", "sim: scenario 'drops@1s:swp1/3:tail-drop': a priority is "
                                           "only for pfc-storm (a traffic class for incast)"),
    ("scenario=drops@1x:swp1:tail-drop", "sim: scenario 'drops@1x:swp1:tail-drop': bad time '1x' "
                                         "(e.g. 5s, 500ms, 2m)"),
    ("scenario=drops@3s-2s:swp1:tail-drop", "sim: scenario 'drops@3s-2s:swp1:tail-drop': end must be "
                                            "after start (10 ms resolution)"),
    ("role=host scenario=drops:mlx5_0:tail-drop",
     "sim: scenario 'drops:mlx5_0:tail-drop': not available with role=host"),
    ("scenario=drops@1s-5s:swp2:early-drop,drops@4s:swp2:early-drop",
     "sim: scenarios 'drops@1s-5s:swp2:early-drop' and 'drops@4s:swp2:early-drop' overlap on swp2"),
]


@pytest.mark.parametrize(("config", "message"), BAD)
def test_bad_config(ops, config, message):
    with pytest.raises(ConfigError) as plugin:
        Sim(ops, config)
    assert str(plugin.value) == message
    with pytest.raises(ConfigError) as model:
        Model(config)
    assert str(model.value) == message


def test_good_config_edge_cases(ops):
    for config in ("", "  role=spine\tseed=18446744073709551615  ", "load=1", "load=0.000001",
                   "scenario=pfc-storm@1.5s-2m:swp1/0", "scenario=counter-clear@500ms",
                   "role=leaf scenario=imbalance@1s-2s,imbalance@2s-3s:swp64",
                   "scenario=symbol-errors@1h-", "role=host scenario=symbol-errors:swp1",
                   # drops of other reasons (or other ports) may overlap, one reason's may abut
                   "scenario=drops@1s-5s:swp2:early-drop,drops@1s-5s:swp2:tail-drop,"
                   "drops@5s:swp2:early-drop,drops@1s:swp3:early-drop,link-flap@1s:swp2"):
        Sim(ops, config).close()
        Model(config)
    assert SLOT == 10_000_000


def test_far_past_start_wraps_like_the_model(ops):
    """start=0: t is ~1.7e18 ns, 128-bit intermediates; 64-bit octets wrap in both alike."""
    config = ("role=spine start=0 scenario=symbol-errors@0s:swp11s1,link-flap@0s:swp2,"
              "pfc-storm@0s:swp3,microburst@0s:swp4,incast@0s:swp5/2,drops@0s:swp6:unresolved-neigh,"
              "drops@0s:swp4:early-drop")
    sim = Sim(ops, config)
    try:
        ts, values = sim.read()
        assert values == Model(config).values(ts, sim.since(0))
    finally:
        sim.close()


def test_rs_fec_histogram_is_the_phy_counters_shape():
    """ABI 1.1's HISTOGRAM on the simulated switch: bins S0..S15 (codewords by corrected
    symbols) consistent with the PHY counters, mass in bins 0-2 on a healthy link, a longer
    tail on the port with symbol errors."""
    model = Model("role=spine scenario=symbol-errors@5s-25s:swp11s1")
    _, ports, counters = model.layout(0)
    fec0 = IDX["phy_rs_fec_histogram"]
    v = model.values(20 * S)
    tails = {}
    offsets = sim_model.offsets(counters)
    for j, (name, *_rest) in enumerate(ports):
        at = offsets[j]
        bins = v[at + fec0:at + fec0 + sim_model.FEC_BINS]
        corrected, bits = v[at + IDX["phy_corrected_bits"]], v[at + IDX["phy_received_bits"]]
        assert sum(bins) == bits // sim_model.CW_BITS  # every codeword received is in one bin
        assert sum(k * n for k, n in enumerate(bins)) <= corrected  # corrected symbols, at most
        assert bins[0] > bins[1] > bins[2] > 0
        tails[name] = max(k for k, n in enumerate(bins) if n)
    assert tails["swp11s1"] > max(t for n, t in tails.items() if n != "swp11s1")


def test_tc_peak_occupancy_is_the_highest_level_since_the_previous_read(ops):
    """ABI 1.1's PEAK on the simulated switch: each read gives the highest TC occupancy of
    every cell since the previous read (so a burst between two reads is never missed), and
    reading clears it; a handle's first read gives its own cell's level."""
    config = "role=leaf seed=3 scenario=microburst@0s:swp2"
    model = Model(config)
    sim, start = opened(ops, config, 1.0)
    try:
        sl = port_slice(sim.ports, sim.counters, "swp2")
        occ, peak = IDX["tc_curr_occupancy_3"], IDX["tc_peak_occupancy_3"]
        assert dict((c[0], c[2]) for c in sim.counters[0])["tc_peak_occupancy_3"] == sim_model.PEAK
        ts, first = sim.read()
        assert first[sl][peak] == first[sl][occ]  # nothing before the first read
        time.sleep(1.5)  # wallclock: the sim's clock runs 15 cells at least (more when loaded: fine)
        ts, values = sim.read()
        t, since = ts - start, sim.since(start)
        port = next(p for p in model.ports_at(t) if p.name == "swp2")
        cells = range(since // sim_model.CELL, t // sim_model.CELL + 1)
        assert len(cells) >= 10
        assert values[sl][peak] == max(port.occupancy(3, c) for c in cells)
        assert values[sl][peak] >= values[sl][occ]
        assert values == model.values(t, since)
        ts, again = sim.read()  # read at once: the peak starts again from the last read's cell
        assert again == model.values(ts - start, sim.since(start))
        assert again[sl][peak] <= values[sl][peak]
    finally:
        sim.close()


def test_the_peak_sees_bursts_the_instantaneous_level_misses():
    """Over 60 s of microbursts read every second, the peak shows every burst's level; the
    instantaneous level at the read shows few of them."""
    model = Model("role=leaf seed=4 scenario=microburst@0s:swp2")
    port = next(p for p in model.ports_at(0) if p.name == "swp2")
    occ, peak = IDX["tc_curr_occupancy_3"], IDX["tc_peak_occupancy_3"]
    burst = 8 << 20  # a microburst fills the queue to 15-16 MiB; the idle level stays < 64 KiB
    seen_peak = seen_level = 0
    for k in range(1, 61):
        v = port.values(k * S, (k - 1) * S)
        seen_peak += v[peak] > burst
        seen_level += v[occ] > burst
    assert seen_peak >= 15 and seen_level <= seen_peak // 3, (seen_peak, seen_level)


def test_fec_degrade_scenario():
    """fec-degrade: healthy (bins 0-2), then a log-linear tail whose highest bin moves from 3
    to 15 over the window, the first uncorrectable codeword in the last tenth (within a 100 ms
    cell of it), symbol errors from then; histogram and PHY counters stay consistent."""
    model = Model("role=spine scenario=fec-degrade@10s-70s:swp2")
    port = next(p for p in model.all_ports if p.name == "swp2")
    fec0, fail = IDX["phy_rs_fec_histogram"], (70 - 6) * S  # END - (END - START) / 10
    prev, fronts, first_eff = None, [], None
    kinds = sim_model.value_kinds([port.counters])
    for k in range(0, 801):  # 0..80 s every 100 ms
        t = k * S // 10
        v = port.values(t)
        bins = v[fec0:fec0 + sim_model.FEC_BINS]
        assert sum(bins) == v[IDX["phy_received_bits"]] // sim_model.CW_BITS
        assert sum(n * i for i, n in enumerate(bins)) <= v[IDX["phy_corrected_bits"]]
        if prev is not None:
            assert all(b >= a for a, b, k in zip(prev, v, kinds, strict=True) if k == sim_model.COUNTER)
            assert (v[IDX["phy_effective_errors"]] > prev[IDX["phy_effective_errors"]]) <= (t > fail)
            if t % (5 * S) == 0:
                d = [b - a for a, b in zip(prev[fec0:fec0 + 16], bins, strict=True)]
                fronts.append((t // S, max(i for i, n in enumerate(d) if n)))
        if first_eff is None and v[IDX["phy_effective_errors"]]:
            first_eff = t
            assert v[IDX["phy_symbol_errors"]] > 0
        prev = v
    assert fail < first_eff <= fail + S // 10
    front = dict(fronts)
    assert front[5] <= 3 and front[75] <= 3  # healthy before and after
    assert front[15] <= 4 and 8 <= front[40] <= 10 and front[65] == 15
    assert all(front[t] <= front[t + 5] for t in range(10, 60, 5))  # the front only moves out
    d = [b - a for a, b in zip(port.values(60 * S)[fec0:fec0 + 16], port.values(62 * S)[fec0:fec0 + 16],
                               strict=True)]
    assert all(0.4 < d[i + 1] / d[i] < 0.6 for i in range(1, 13))  # about 2x a bin: log-linear
    other = next(p for p in model.all_ports if p.name == "swp3")
    assert other.values(65 * S)[IDX["phy_effective_errors"]] == 0
