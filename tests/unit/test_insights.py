"""Insights: the detectors on synthetic counter streams with the real path shapes, fed
with explicit sample times (100 ms apart unless a test says otherwise)."""

from __future__ import annotations

import dataclasses

import pytest

from agent import config
from agent.config import ConfigError, Insights
from agent.counters import SWTEL_ORIGIN, Container, CounterSpec, CounterTable
from agent.insights import InsightsPipeline
from agent.insights.classify import classify
from tests.insights_stream import (
    ASIC,
    NETDEV,
    NS,
    STEP_NS,
    T0,
    Healthy,
    Stream,
    port_table,
    rdma_table,
)

pytestmark = pytest.mark.nolibs  # no versioned library decides its outcome: not in the Debian pass

PORTS = ["swp1", "swp2", "swp11s0", "swp11s1", "swp51", "swp52", "swp53", "swp54"]
SPEED = 100e9


class Log:
    def __init__(self) -> None:
        self.lines: list[tuple[str, str, dict]] = []

    def warning(self, event, **kw):
        self.lines.append(("warning", event, kw))

    def info(self, event, **kw):
        self.lines.append(("info", event, kw))


def cfg(**sections) -> Insights:
    ins = Insights()
    for name, values in sections.items():
        if isinstance(values, dict):
            values = dataclasses.replace(getattr(ins, name), **values)
        setattr(ins, name, values)
    return ins


class Rig:
    """A switch (asic-like source) plus a host (rdma) feeding one runner."""

    def __init__(self, ins: Insights | None = None, ports=PORTS, step_ns: int = STEP_NS, load: Healthy | None = None):
        self.log = Log()
        self.runner = InsightsPipeline(ins or Insights(), log=self.log)
        self.runner.set_port_speeds(dict.fromkeys(ports, int(SPEED)))
        self.asic = Stream(*port_table("asic", ports, ASIC))
        self.rdma = Stream(*rdma_table(["mlx5_0", "mlx5_1"]))
        self.load = load or Healthy(ports, SPEED)
        self.step = step_ns
        self.ts = T0
        self.updates = []
        self.raised: list[tuple[float, dict]] = []  # (t of the pass, event dict)
        self._seen: set[int] = set()

    @property
    def t(self) -> float:
        return (self.ts - T0) / NS

    def tick(self, fault=None, host=None, reset: bool = False) -> None:
        """One engine pass: every source read once, then end_pass."""
        self.ts += self.step
        dt = self.step / NS
        deltas = self.load.deltas(self.t, dt)
        if fault:
            fault(self.t, dt, deltas)
        for stream, d in ((self.asic, deltas), (self.rdma, host(self.t, dt) if host else {})):
            b = stream.batch(self.ts, d, reset=reset)
            if b is not None:
                self.runner.on_batch(b)
        self.updates += self.runner.end_pass(self.ts)
        for ev in self.runner.status()["open"]:
            if ev["id"] not in self._seen:
                self._seen.add(ev["id"])
                self.raised.append((self.t, ev))

    def run(self, seconds: float, fault=None, host=None) -> None:
        for _ in range(round(seconds * NS / self.step)):
            self.tick(fault, host)

    def events(self, etype: str | None = None) -> list[dict]:
        st = self.runner.status()
        return [e for e in st["open"] + st["recent"] if etype is None or e["type"] == etype]


def symbol_errors(port: str, start: float, end: float, ber: float = 3e-10, corrected: float = 2e-6, eff: int = 0):
    def fault(t, dt, d):
        if start <= t < end:
            bits = SPEED * dt
            d[(port, "sym")] = max(1, round(bits * ber))
            d[(port, "corr")] = round(bits * corrected)
            if eff:
                d[(port, "eff")] = eff
    return fault


# ---------------------------------------------------------------- classification


def test_classification_covers_the_documented_paths():
    def spec(path, leaf, port="swp1", origin=SWTEL_ORIGIN):
        return CounterSpec(Container(origin, path), leaf, port=port)

    i = "/interfaces/interface[name=swp1]"
    assert classify(spec(f"{i}/state/counters", "in-octets")) == ("swp1", "rx-octets", "")
    assert classify(spec(f"{i}/hw/state/counters", "out-octets")) == ("swp1", "tx-octets", "")
    assert classify(spec(f"{i}/phy/state", "received-bits")) == ("swp1", "rx-bits", "")
    assert classify(spec(f"{i}/ethernet/state/counters", "in-symbol-error"))[1] == "symbol-errors"
    assert classify(spec(f"{i}/phy/state", "effective-errors"))[1] == "uncorrectable"
    assert classify(spec(f"{i}/ethernet/state/counters", "fec-uncorrectable-blocks"))[1] == "uncorrectable"
    assert classify(spec(f"{i}/phy/fec/state", "corrected-bits"))[1] == "corrected-bits"
    assert classify(spec(f"{i}/pfc/priority[id=3]/state", "in-pause-duration")) == ("swp1", "pfc-duration", "3")
    assert classify(spec(f"{i}/pfc/priority[id=3]/state", "out-pause-pkts")) == ("swp1", "pause-sent", "3")  # pfc_sent
    assert classify(spec(f"{i}/hw/state/counters", "out-wred-drops"))[1] == "drops-out"
    q = "/qos/interfaces/interface[interface-id=swp1]/output/queues/queue[name=3]/state"
    assert classify(spec(q, "dropped-pkts"))[1] == "drops-out"
    assert classify(spec(f"{i}/state/counters", "carrier-transitions"))[1] == "carrier"
    r = "/rdma/devices/device[name=mlx5_0]/ports/port[id=1]/hw-counters"
    assert classify(spec(r, "roce-adp-retrans", port="mlx5_0/1")) == ("mlx5_0/1", "roce", "roce-adp-retrans")
    assert classify(spec(r, "np-cnp-sent", port="mlx5_0")) is None
    assert classify(spec(f"{i}/state/counters", "in-pkts")) is None
    assert classify(spec(f"{i}/state/counters", "in-octets", port=None)) is None


def test_classification_is_cached_on_the_table():
    table, _ = port_table("asic", ["swp1"], ASIC)
    Rig().runner.on_batch(Stream(table, {}).batch(T0, {}))
    assert "insights" in table.cache


# ---------------------------------------------------------------- link errors


def test_symbol_errors_raise_one_event_on_that_port_within_a_second_and_clear():
    rig = Rig(cfg(error_burst={"clear_after": 5.0}))
    rig.run(5.0)
    rig.run(10.0, symbol_errors("swp11s1", 5.0, 15.0))
    ber = rig.events("symbol-ber")
    assert len(ber) == 1, ber
    ev = ber[0]
    assert ev["interfaces"] == ["swp11s1"] and ev["severity"] == "warning"
    t_raised = next(t for t, e in rig.raised if e["type"] == "symbol-ber")
    assert t_raised - 5.0 <= 1.0 + 1e-9
    assert "symbol BER 3.0e-10 (threshold 1e-12)" in ev["message"] and "pre-FEC BER " in ev["message"]
    assert "check the cable or transceiver" in ev["message"]
    assert ev["unit"] == "ber" and ev["peak"] == pytest.approx(3e-10, rel=0.2)
    # the same fault's pre-FEC BER (2e-6 > 1e-6) is its own, critical event
    pre = rig.events("pre-fec-ber")
    assert [e["interfaces"] for e in pre] == [["swp11s1"]] and pre[0]["severity"] == "critical"
    assert pre[0]["peak"] == pytest.approx(2e-6, rel=0.1)
    assert not [e for e in rig.events() if e["interfaces"] != ["swp11s1"]]
    rig.run(4.5)
    assert rig.events("symbol-ber")[0]["state"] == "open"  # clear_after (5 s) not over
    rig.run(1.0)
    ev = rig.events("symbol-ber")[0]
    assert ev["state"] == "cleared"
    assert (ev["end_ns"] - T0) / NS == pytest.approx(15.0, abs=0.11)  # the last errored sample
    assert ev["cleared_ns"] - ev["end_ns"] >= 5 * NS
    rig.run(1.0)  # pre-FEC BER: its 1 s window held the fault's corrected bits until 15.9 s
    assert rig.runner.status()["open"] == []


def test_uncorrectable_errors_are_critical():
    rig = Rig()
    rig.run(2.0)
    rig.run(1.0, symbol_errors("swp2", 2.0, 2.3, ber=0, corrected=1e-9, eff=3))
    (ev,) = rig.events("symbol-ber")
    assert ev["severity"] == "critical" and ev["interfaces"] == ["swp2"]
    assert "uncorrectable" in ev["message"]


def test_symbol_errors_without_phy_bits_use_the_link_speed():
    """mlxsw/mlx5 expose in-symbol-error but no received-bits: BER over speed x time."""
    table, where = port_table("ethtool", ["swp1"], {
        "rx": ASIC["rx"], "sym": ("openconfig", "ethernet/state/counters", "in-symbol-error")})
    s = Stream(table, where)
    r = InsightsPipeline(Insights(), log=Log())
    r.set_port_speeds({"swp1": int(SPEED)})
    ts = T0
    for k in range(20):
        ts += STEP_NS
        b = s.batch(ts, {("swp1", "rx"): 1e9, ("swp1", "sym"): 10 if k >= 10 else 0})
        if b:
            r.on_batch(b)
        r.end_pass(ts)
    (ev,) = r.status()["open"]
    assert ev["type"] == "symbol-ber" and ev["unit"] == "ber"
    assert ev["peak"] == pytest.approx(10 / (SPEED * 0.1), rel=0.5)


def test_fcs_burst():
    rig = Rig()
    rig.run(2.0)

    def fcs(t, dt, d):
        if 2.0 <= t < 2.5:
            d[("swp1", "fcs")] = 30
            d[("swp1", "in-errors")] = 30  # in-errors contains the FCS errors: not added up

    rig.run(1.0, fcs)
    (ev,) = rig.events("error-burst")
    assert ev["interfaces"] == ["swp1"]
    assert ev["peak"] < 200  # at most 10 samples x 30 in a 1 s window, never 2 x that


def test_counter_reset_raises_no_error_event():
    rig = Rig()
    rig.run(3.0)

    def huge(t, dt, d):
        for p in PORTS:
            d[(p, "in-errors")] = 1_000_000
            d[(p, "fcs")] = 1_000_000
            d[(p, "sym")] = 1_000_000
            d[(p, "eff")] = 1_000_000
            d[(p, "carrier")] = 7
            d[(p, "out-q-drops")] = 1_000_000
            d[(p, "rx")] = 1  # octets since the clear: must not look like a dip

    rig.tick(huge, reset=True)
    rig.run(3.0)
    assert rig.events() == []


# ---------------------------------------------------------------- throughput dip


def dip(port: str, start: float, end: float, share: float):
    def fault(t, dt, d):
        if start <= t < end:
            d[(port, "rx")] *= share
            d[(port, "tx")] *= share
    return fault


def test_throughput_dip_on_the_dipping_port():
    rig = Rig()
    rig.run(10.0)
    rig.run(5.0, dip("swp11s1", 10.0, 10.3, 0.45))
    evs = rig.events("throughput-dip")
    assert [e["interfaces"] for e in evs] == [["swp11s1"]]
    assert evs[0]["peak"] == pytest.approx(0.55, abs=0.1)
    assert "dipped to" in evs[0]["message"]


def test_a_lasting_drop_is_a_change_of_load_not_a_dip():
    rig = Rig()
    rig.run(10.0)
    rig.load.util["swp1"] = 0.3  # from 0.6, for good (a job phase, ECMP moved flows)
    rig.run(30.0)
    assert rig.events() == []


def test_throughput_dip_needs_a_known_speed():
    rig = Rig()
    rig.runner.set_port_speeds({})
    rig.run(5.0)
    rig.run(2.0, dip("swp1", 5.0, 5.5, 0.3))
    assert rig.events() == []


def test_dips_and_drop_bursts_are_seen_at_100ms_not_at_10s():
    def fault(t, dt, d):
        dip("swp11s1", 30.0, 30.3, 0.45)(t, dt, d)
        if 40.0 <= t < 40.2:  # a 200 ms burst of 2,500 drops per 100 ms
            d[("swp2", "out-q-drops")] = d.get(("swp2", "out-q-drops"), 0) + 2500 * dt / 0.1

    def sampled(step_s: float) -> tuple[list, Rig]:
        rig = Rig(step_ns=int(step_s * NS))
        fine = 0.1
        # The sample of a slow poll carries the deltas of every 100 ms inside it.
        for _ in range(round(60 / step_s)):
            total: dict = {}
            for k in range(round(step_s / fine)):
                t = rig.t + (k + 1) * fine
                d = rig.load.deltas(t, fine)
                fault(t - fine + 1e-9, fine, d)
                for key, v in d.items():
                    total[key] = total.get(key, 0) + v
            rig.tick(lambda t, dt, d, total=total: (d.clear(), d.update(total)))
        return sorted({e["type"] for e in rig.events()}), rig

    fast, rig = sampled(0.1)
    assert fast == ["drop-burst", "throughput-dip"]
    assert {e["type"]: e["interfaces"] for e in rig.events()} == {
        "drop-burst": ["swp2"], "throughput-dip": ["swp11s1"]}
    slow, _ = sampled(10.0)
    assert slow == []


# ---------------------------------------------------------------- imbalance


def test_imbalance_names_the_hot_uplink():
    ins = cfg(imbalance={"groups": {"spines": ["swp5*"]}})
    rig = Rig(ins)
    rig.run(5.0)
    assert rig.events() == []
    # leaf misconfiguration: swp53 carries 2/N of the group's bytes (max/mean = 2)
    rig.load.util.update({"swp51": 0.4, "swp52": 0.4, "swp53": 0.8, "swp54": 0.4})
    start = rig.t
    rig.run(6.0)
    (ev,) = rig.events("imbalance")
    assert ev["interfaces"] == ["swp53"] and "group spines" in ev["message"]
    assert ev["peak"] == pytest.approx(1.6, abs=0.15)  # 0.8 / mean(0.4, 0.4, 0.8, 0.4)
    t_raised = next(t for t, e in rig.raised if e["type"] == "imbalance")
    assert t_raised - start <= 4.1  # 3 windows of 1 s, plus the window it started in


def test_imbalance_ignores_an_idle_group():
    ins = cfg(imbalance={"groups": {"spines": ["swp51", "swp52", "swp53", "swp54"]}, "min_mean_bps": 50e9})
    rig = Rig(ins)
    rig.load.util.update({"swp51": 0.1, "swp52": 0.1, "swp53": 0.3, "swp54": 0.1})
    rig.run(10.0)
    assert rig.events() == []


# ---------------------------------------------------------------- pfc, drops, flaps, roce


def pfc_storm(port: str, prio: int, start: float, share: float = 0.97):
    def fault(t, dt, d):
        if t >= start:
            d[(port, f"pfc{prio}")] = 1500 * dt / 0.1
            d[(port, f"pfcdur{prio}")] = share * dt * 1e6
    return fault


def test_pfc_storm_after_three_polls_not_two():
    rig = Rig()
    rig.run(2.0)
    storm = pfc_storm("swp1", 3, rig.t + 0.05)
    rig.tick(storm)
    rig.tick(storm)
    assert rig.events() == []
    rig.tick(storm)
    (ev,) = rig.events("pfc-storm")
    assert ev["interfaces"] == ["swp1"] and "priority 3" in ev["message"]
    assert ev["severity"] == "critical" and ev["unit"] == "paused-share"


def test_congestion_pause_is_not_a_storm():
    rig = Rig()
    rig.run(2.0, pfc_storm("swp1", 3, 0.0, share=0.4))
    assert rig.events() == []


def test_pfc_storm_by_frame_rate_without_duration():
    table, where = port_table("ethtool", ["swp9"], {"rx": ASIC["rx"], "pfc3": ASIC["pfc3"]})
    s = Stream(table, where)
    r = InsightsPipeline(Insights(), log=Log())
    ts = T0
    for _ in range(6):
        ts += STEP_NS
        b = s.batch(ts, {("swp9", "rx"): 1e6, ("swp9", "pfc3"): 500})  # 5,000 frames/s
        if b:
            r.on_batch(b)
        r.end_pass(ts)
    (ev,) = r.status()["open"]
    assert ev["type"] == "pfc-storm" and ev["severity"] == "warning" and ev["unit"] == "frames/s"


def test_drop_burst():
    rig = Rig()
    rig.run(2.0)

    def burst(t, dt, d):
        if 2.0 <= t < 2.2:
            d[("swp2", "out-q-drops")] = 2000
            d[("swp2", "out-wred-drops")] = 1500  # overlaps out-q-drops: the larger counts
            d[("swp2", "in-discards")] = 300

    rig.run(1.0, burst)
    (ev,) = rig.events("drop-burst")
    assert ev["interfaces"] == ["swp2"] and ev["peak"] == 2300


def test_link_flap():
    rig = Rig()
    rig.run(2.0)

    def flaps(t, dt, d):
        if round(t * 10) in (25, 40):
            d[("swp54", "carrier")] = 2

    rig.run(3.0, flaps)
    (ev,) = rig.events("link-flap")
    assert ev["interfaces"] == ["swp54"]


def test_roce_retransmissions_on_a_host_device():
    rig = Rig()
    rig.run(2.0)

    def host(t, dt):
        if t >= 2.0:
            return {("mlx5_1/1", "roce-adp-retrans"): 40, ("mlx5_1/1", "out-of-sequence"): 5,
                    ("mlx5_1/1", "np-cnp-sent"): 1000}
        return {("mlx5_1/1", "np-cnp-sent"): 1000}

    rig.run(1.0, host=host)
    (ev,) = rig.events("roce-retrans")
    assert ev["interfaces"] == ["mlx5_1/1"] and "roce-adp-retrans" in ev["message"]


# ---------------------------------------------------------------- healthy


def test_a_healthy_minute_raises_nothing():
    ins = cfg(imbalance={"groups": {"spines": ["swp5*"], "edge": ["swp1", "swp2"]}})
    rig = Rig(ins)

    def host(t, dt):
        return {("mlx5_0/1", "np-cnp-sent"): 100, ("mlx5_0/1", "roce-adp-retrans"): 1 if round(t * 10) % 50 == 0 else 0}

    def pause(t, dt, d):
        d[("swp1", "pfc3")] = 20
        d[("swp1", "pfcdur3")] = 2000  # 2 % of the time paused: ordinary congestion
        if round(t * 10) % 97 == 0:
            d[("swp2", "out-q-drops")] = 5

    rig.run(60.0, pause, host)
    assert rig.events() == [] and rig.updates == []
    assert rig.log.lines == []


# ---------------------------------------------------------------- sources and ports


def test_the_finest_source_is_read_when_two_report_a_port():
    """netdev's in-octets refreshed every 2 s (switchd) beside the ASIC's every 100 ms: the
    ASIC's are read, so the netdev's long gaps are no dips and nothing counts twice."""
    rig = Rig()
    netdev = Stream(*port_table("netdev", PORTS, NETDEV))
    pending: dict = {}
    for k in range(150):
        rig.tick()
        d = rig.load.deltas(rig.t, 0.1)
        for key, v in d.items():
            if key[1] in ("rx", "tx"):
                pending[key] = pending.get(key, 0) + v
        if k % 20 == 0:
            b = netdev.batch(rig.ts + 1, pending)
            pending = {}
            if b:
                rig.runner.on_batch(b)
    assert rig.events() == []
    port = rig.runner._ports["swp1"]
    assert port.owner["rx-octets"].source == "asic"


def test_a_removed_port_is_forgotten_and_its_events_cleared():
    rig = Rig(cfg(error_burst={"clear_after": 60.0}))
    rig.run(1.0)
    rig.run(1.0, symbol_errors("swp1", 1.0, 2.0))
    assert rig.events("symbol-ber")[0]["state"] == "open"
    rig.runner.on_delete([Container("openconfig", "/interfaces/interface[name=swp1]")])
    ups = rig.runner.end_pass(rig.ts + STEP_NS)
    (ev,) = rig.events("symbol-ber")
    assert ev["state"] == "cleared"
    assert any(u.leaf == "status" and u.value == "cleared" for u in ups)
    assert "swp1" not in rig.runner.detectors["error_burst"].ports
    # a partial delete (one source's container) forgets nothing
    rig.runner.on_delete([Container("openconfig", "/interfaces/interface[name=swp2]/ethernet/state/counters")])
    assert "swp2" in rig.runner._ports


def test_a_removed_rdma_device_is_forgotten():
    rig = Rig()
    rig.run(1.0, host=lambda t, dt: {("mlx5_0/1", "roce-adp-retrans"): 500})
    assert rig.events("roce-retrans")[0]["state"] == "open"
    rig.runner.on_delete(rig.ts, [Container(SWTEL_ORIGIN,
                                            "/rdma/devices/device[name=mlx5_0]/ports/port[id=1]/hw-counters")])
    rig.runner.end_pass(rig.ts + 1)
    assert rig.events("roce-retrans")[0]["state"] == "cleared"


def test_reconfigure_keeps_unchanged_detectors_and_clears_disabled_ones():
    ins = cfg(imbalance={"groups": {"spines": ["swp5*"]}})
    rig = Rig(ins)
    rig.run(2.0)
    rig.run(1.0, symbol_errors("swp1", 2.0, 3.0))
    rig.run(0.5, pfc_storm("swp2", 4, 3.0))
    before = rig.runner.detectors["error_burst"]
    opened = {e["type"] for e in rig.runner.status()["open"]}
    assert {"symbol-ber", "pfc-storm"} <= opened
    new = cfg(imbalance={"groups": {"spines": ["swp5*"]}}, drop_burst={"threshold": 50},
              pfc_storm={"enabled": False})
    rig.runner.reconfigure(new)
    assert rig.runner.detectors["error_burst"] is before
    assert "pfc_storm" not in rig.runner.detectors
    rig.updates += rig.runner.end_pass(rig.ts + 1)
    st = rig.runner.status()
    assert "symbol-ber" in {e["type"] for e in st["open"]}
    assert [e["type"] for e in st["recent"]] == ["pfc-storm"]


# ---------------------------------------------------------------- events: gNMI, status, log


def test_gnmi_updates_raise_rate_limited_updates_and_clear():
    rig = Rig(cfg(error_burst={"clear_after": 2.0}))
    rig.run(1.0)
    ramp = {}

    def growing(t, dt, d):
        if 1.0 <= t < 6.0:
            k = int((t - 1.0) * 10)
            ramp[k] = True
            d[("swp1", "sym")] = 1 + k * k  # the BER keeps rising: the peak changes every tick
            d[("swp1", "corr")] = 10

    rig.run(5.0, growing)
    paths = {u.path for u in rig.updates}
    base = "swtel:/insights/events/event[id=1]/state/"
    assert {base + leaf for leaf in ("type", "severity", "interfaces", "start-ns", "peak", "peak-unit",
                                     "message", "status")} <= paths
    assert all(u.container.origin == SWTEL_ORIGIN for u in rig.updates)
    first = {u.leaf: u.value for u in rig.updates if u.path.startswith(base)}
    assert first["type"] == "symbol-ber" and first["interfaces"] == "swp1" and first["status"] == "open"
    peaks = [u for u in rig.updates if u.path == base + "peak"]
    assert 2 <= len(peaks) <= 6  # 50 ticks of a rising peak: at most one update a second
    gaps = [b.ts_ns - a.ts_ns for a, b in zip(peaks, peaks[1:], strict=False)]
    assert all(g >= NS for g in gaps)
    rig.updates.clear()
    rig.run(4.0)
    done = {u.leaf: u.value for u in rig.updates if u.path.startswith(base)}
    assert done["status"] == "cleared" and done["end-ns"] > first["start-ns"]
    lines = [(lvl, ev) for lvl, ev, kw in rig.log.lines if kw.get("type") == "symbol-ber"]
    assert lines == [("warning", "event raised"), ("info", "event cleared")]


def test_history_trimming_deletes_the_oldest_events_leaves():
    rig = Rig(cfg(history=2, link_flap={"window": 1.0, "clear_after": 1.0}))
    rig.run(1.0)
    for port in ("swp1", "swp2", "swp51"):
        rig.tick(lambda t, dt, d, port=port: d.__setitem__((port, "carrier"), 2))
        rig.run(2.0)
    st = rig.runner.status()
    assert st["open"] == []
    assert [e["interfaces"] for e in st["recent"]] == [["swp51"], ["swp2"]]  # newest first
    deleted = [u for u in rig.updates if u.value is None]
    assert deleted and {u.container.path for u in deleted} == {"/insights/events/event[id=1]/state"}
    assert {u.leaf for u in deleted} >= {"type", "status", "end-ns", "message"}


def test_status_lists_open_and_recent():
    rig = Rig(cfg(drop_burst={"clear_after": 1.0}))
    rig.run(1.0)
    rig.tick(lambda t, dt, d: d.__setitem__(("swp1", "in-buffer-drops"), 500))
    rig.run(2.0)
    rig.tick(lambda t, dt, d: d.__setitem__(("swp2", "in-buffer-drops"), 500))
    st = rig.runner.status()
    assert [e["interfaces"] for e in st["open"]] == [["swp2"]]
    assert [e["interfaces"] for e in st["recent"]] == [["swp1"]]
    ev = st["recent"][0]
    assert set(ev) >= {"id", "type", "severity", "interfaces", "start_ns", "end_ns", "peak", "unit",
                       "message", "state"}
    assert ev["state"] == "cleared" and st["open"][0]["end_ns"] is None


# ---------------------------------------------------------------- config


@pytest.mark.parametrize("text,problem", [
    ("error_burst: {symbol_ber: 0}", "insights.error_burst.symbol_ber: expected a ratio"),
    ("error_burst: {symbol_ber: .nan}", "insights.error_burst.symbol_ber: must be a finite number"),
    # (YAML 1.1 reads 1e-5 as a string: write 1.0e-5)
    ("error_burst: {pre_fec_ber_warning: 1.0e-5, pre_fec_ber_critical: 1.0e-6}",
     "insights.error_burst.pre_fec_ber_warning: must not exceed pre_fec_ber_critical"),
    ("pfc_storm: {pause_rate: .inf}", "insights.pfc_storm.pause_rate: must be a finite number"),
    ("imbalance: {cv: -1}", "insights.imbalance.cv: must be positive"),
    ("roce_retrans: {counters: ['']}", "insights.roce_retrans.counters[0]: must not be empty"),
    ("throughput_dip: {min_utilization: 0}", "insights.throughput_dip.min_utilization: expected 0 < x <= 1"),
])
def test_config_problems_name_their_path(text, problem):
    with pytest.raises(ConfigError) as info:
        config.parse(f"insights:\n  {text}\n")
    assert any(p.startswith(problem) for p in info.value.problems), info.value.problems


def test_roce_counter_names_accept_either_spelling():
    ins = cfg(roce_retrans={"counters": ["roce-adp-retrans"]})
    table, where = rdma_table(["mlx5_0"])
    s = Stream(table, where)
    r = InsightsPipeline(ins, log=Log())
    ts = T0
    for _ in range(5):
        ts += STEP_NS
        b = s.batch(ts, {("mlx5_0/1", "roce-adp-retrans"): 200})
        if b:
            r.on_batch(b)
        r.end_pass(ts)
    assert [e["type"] for e in r.status()["open"]] == ["roce-retrans"]


def test_unknown_counters_cost_nothing():
    table = CounterTable("x", [CounterSpec(Container("openconfig", "/system/state"), "uptime")])
    r = InsightsPipeline(Insights(), log=Log())
    s = Stream(table, {("-", "u"): 0})
    r.on_batch(s.batch(T0, {}))
    assert r.end_pass(T0) == []


# ---------------------------------------------------------------- events do not flap


def _hits(rig: Rig, etype: str) -> list[dict]:
    return [ev for _t, ev in rig.raised if ev["type"] == etype]


@pytest.mark.parametrize("clear_after", [1.0, 0.0])
def test_a_steady_symbol_error_fault_is_one_event(clear_after):
    """clear_after = window (1 s), the smallest validate accepts: a fault whose errors never stop
    is one event for its whole length, cleared once after it ends. With clear_after 0 (which
    validate refuses; the detector holds it to its window all the same) it is one event too,
    where it used to be raised and cleared every poll (77 events in 8 s)."""
    rig = Rig(cfg(error_burst={"window": 1.0, "clear_after": clear_after}))
    rig.run(2.0)
    rig.run(8.0, symbol_errors("swp11s1", 2.0, 10.0, ber=1e-11, corrected=1e-9))
    assert len(_hits(rig, "symbol-ber")) == 1, rig.raised
    assert rig.runner.status()["open"][0]["type"] == "symbol-ber"
    rig.run(2.0)
    (ev,) = rig.events("symbol-ber")
    assert ev["state"] == "cleared" and rig.runner.raised == 1 and rig.runner.cleared == 1
    assert [line[1] for line in rig.log.lines] == ["event raised", "event cleared"]


@pytest.mark.parametrize("clear_after", [1.0, 0.5])
def test_a_steady_imbalance_is_one_event(clear_after):
    """imbalance with window 1 s and clear_after 1 s (or 500 ms: refused by validate, held to the
    window by the detector): judged once a window, so the hot uplink is one event, not one per
    window."""
    ins = cfg(imbalance={"groups": {"spines": ["swp5*"]}, "window": 1.0, "clear_after": clear_after})
    rig = Rig(ins)
    rig.run(2.0)
    rig.load.util.update({"swp51": 0.4, "swp52": 0.4, "swp53": 0.8, "swp54": 0.4})
    rig.run(12.0)
    assert len(_hits(rig, "imbalance")) == 1, rig.raised
    assert [e["state"] for e in rig.events("imbalance")] == ["open"]


@pytest.mark.parametrize("text,problem", [
    ("error_burst: {clear_after: 0s}",
     "insights.error_burst.clear_after: must be at least the window (insights.error_burst.window, 1s), got 0ms"),
    ("imbalance: {window: 1s, clear_after: 500ms}",
     "insights.imbalance.clear_after: must be at least the window (insights.imbalance.window, 1s), got 500ms"),
    ("imbalance: {window: 1ms}",
     "insights.imbalance.window: must be at least the poll interval of the sources it reads (100ms, "
     "sources.netdev), got 1ms"),
    ("link_flap: {window: 10m}", "insights.link_flap.clear_after: must be at least the window"),
    ("drop_burst: {window: 50ms, clear_after: 1s}", "insights.drop_burst.window: must be at least the poll"),
    ("pfc_storm: {window: 10ms, windows: 3}", "insights.pfc_storm.window: must be at least the poll interval"),
])
def test_windows_below_the_poll_and_clear_after_below_the_window_are_refused(text, problem):
    with pytest.raises(ConfigError) as info:
        config.parse(f"insights:\n  {text}\n")
    assert any(p.startswith(problem) for p in info.value.problems), info.value.problems


def test_window_rules_follow_the_sources_that_feed_the_detector():
    # roce_retrans reads rdma (and the asic's host view): rdma polled every 1 s
    with pytest.raises(ConfigError) as info:
        config.parse("sources: {rdma: {enabled: true, interval: 1s}}\ninsights: {roce_retrans: {window: 500ms}}\n")
    assert info.value.problems == ["insights.roce_retrans.window: must be at least the poll interval of the "
                                   "sources it reads (1s, sources.rdma), got 500ms"]
    # the fastest source that feeds it counts; the default windows stay valid at any interval
    config.parse("interval: 1s\nsources: {asic: {enabled: true, interval: 100ms}}\n"
                 "insights: {drop_burst: {window: 200ms}}\n")
    config.parse("interval: 1s\n")
    config.parse("insights: {error_burst: {window: 100ms, clear_after: 100ms}}\n")


def test_a_group_member_that_never_appears_is_logged_once():
    ins = cfg(imbalance={"groups": {"spines": ["swp51", "swp52", "swp99", "spine*"], "fine": ["swp1", "swp2"]}})
    rig = Rig(ins)
    rig.run(9.5)
    assert [line for line in rig.log.lines if line[1] == "imbalance group member not found"] == []
    rig.run(30.0)
    lines = [line for line in rig.log.lines if line[1] == "imbalance group member not found"]
    assert [(level, kw["group"], kw["port"]) for level, _e, kw in lines] == [
        ("warning", "spines", "swp99"), ("warning", "spines", "spine*")]
    assert "no port matches 'swp99'" in lines[0][2]["message"]


def test_messages_name_the_windows_the_data_really_had():
    """A default 100 ms pfc_storm window under 1 s samples judges each 1 s sample: the message
    says 3 x 1s, never "3 x 100ms" of data that was never there; the same for imbalance at 5 s."""
    from agent.insights.base import NS as _NS

    rig = Rig(step_ns=_NS)
    rig.run(3.0)
    rig.run(8.0, pfc_storm("swp1", 3, 3.0))
    (ev,) = rig.events("pfc-storm")
    assert "for 3 x 1s " in ev["message"], ev["message"]
    rig = Rig(cfg(imbalance={"groups": {"spines": ["swp5*"]}}), step_ns=5 * _NS)
    rig.run(10.0)
    rig.load.util.update({"swp51": 0.4, "swp52": 0.4, "swp53": 0.8, "swp54": 0.4})
    rig.run(30.0)
    (ev,) = rig.events("imbalance")
    assert "over 3 x 5s)" in ev["message"], ev["message"]
