"""A synthetic counter stream for the insights tests and bench/bench_insights.py: tables with the real path
shapes of the netdev, ethtool, asic and rdma sources, and batches built the way the
engine builds them (F_NEW baselines, only changed counters, explicit sample times)."""

from __future__ import annotations

import random
from array import array

from agent.counters import (
    F_CHANGED,
    F_NEW,
    F_RESET,
    OPENCONFIG,
    SWTEL_ORIGIN,
    Batch,
    Container,
    CounterSpec,
    CounterTable,
)

NS = 1_000_000_000
STEP_NS = 100_000_000  # 100 ms
T0 = 1_700_000_000 * NS

# short name -> (origin, container tail below /interfaces/interface[name=X], leaf)
ASIC = {
    "rx": (SWTEL_ORIGIN, "hw/state/counters", "in-octets"),
    "tx": (SWTEL_ORIGIN, "hw/state/counters", "out-octets"),
    "rx-pkts": (SWTEL_ORIGIN, "hw/state/counters", "in-ucast-pkts"),
    "tx-pkts": (SWTEL_ORIGIN, "hw/state/counters", "out-ucast-pkts"),
    "in-errors": (SWTEL_ORIGIN, "hw/state/counters", "in-errors"),
    "in-discards": (SWTEL_ORIGIN, "hw/state/counters", "in-discards"),
    "in-buffer-drops": (SWTEL_ORIGIN, "hw/state/counters", "in-buffer-drops"),
    "out-q-drops": (SWTEL_ORIGIN, "hw/state/counters", "out-q-drops"),
    "out-wred-drops": (SWTEL_ORIGIN, "hw/state/counters", "out-wred-drops"),
    "fcs": (OPENCONFIG, "ethernet/state/counters", "in-crc-errors"),
    "pause": (OPENCONFIG, "ethernet/state/counters", "in-mac-pause-frames"),
    "bits": (OPENCONFIG, "phy/state", "received-bits"),
    "sym": (OPENCONFIG, "phy/state", "symbol-errors"),
    "eff": (OPENCONFIG, "phy/state", "effective-errors"),
    "corr": (OPENCONFIG, "phy/fec/state", "corrected-bits"),
    "carrier": (OPENCONFIG, "state/counters", "carrier-transitions"),
    **{f"pfc{n}": (SWTEL_ORIGIN, f"pfc/priority[id={n}]/state", "in-pause-pkts") for n in range(8)},
    **{f"pfcdur{n}": (SWTEL_ORIGIN, f"pfc/priority[id={n}]/state", "in-pause-duration") for n in range(8)},
    **{f"ecn{n}": (SWTEL_ORIGIN, f"pfc/priority[id={n}]/state", "in-ecn-marked-pkts") for n in range(8)},
}
NETDEV = {
    "rx": (OPENCONFIG, "state/counters", "in-octets"),
    "tx": (OPENCONFIG, "state/counters", "out-octets"),
    "in-errors": (OPENCONFIG, "state/counters", "in-errors"),
    "carrier": (OPENCONFIG, "state/counters", "carrier-transitions"),
}
RDMA_LEAVES = ("roce-adp-retrans", "roce-adp-retrans-to", "out-of-sequence", "np-cnp-sent")


def port_table(source: str, ports: list[str], names: dict, filler: int = 0) -> tuple[CounterTable, dict]:
    """A table of ``names`` for every port (plus ``filler`` unread counters per port, as a real
    switch has ~100); returns it and (port, name) -> index."""
    specs = []
    where = {}
    for p in ports:
        for name, (origin, tail, leaf) in names.items():
            where[(p, name)] = len(specs)
            specs.append(CounterSpec(Container(origin, f"/interfaces/interface[name={p}]/{tail}"), leaf, port=p))
        for k in range(filler):
            specs.append(CounterSpec(Container(SWTEL_ORIGIN, f"/interfaces/interface[name={p}]/hw/state/counters"),
                                     f"other-{k}", port=p))
    return CounterTable(source, specs), where


def rdma_table(devices: list[str]) -> tuple[CounterTable, dict]:
    specs = []
    where = {}
    for dev in devices:
        c = Container(SWTEL_ORIGIN, f"/rdma/devices/device[name={dev}]/ports/port[id=1]/hw-counters")
        for leaf in RDMA_LEAVES:
            where[(f"{dev}/1", leaf)] = len(specs)
            specs.append(CounterSpec(c, leaf, 32, port=f"{dev}/1"))
    return CounterTable("rdma", specs), where


class Stream:
    """Cumulative values of one table; ``batch(ts, deltas)`` is what the engine would hand on."""

    def __init__(self, table: CounterTable, where: dict) -> None:
        self.table = table
        self.where = where
        self.values = array("Q", bytes(8 * len(table)))
        self.started = False

    def batch(self, ts: int, deltas: dict, reset: bool = False) -> Batch | None:
        if not self.started:
            self.started = True
            n = len(self.table)
            return Batch(self.table.source, ts, self.table, list(range(n)), array("Q", self.values),
                         [0] * n, bytes([F_CHANGED | F_NEW]) * n)
        changed = sorted((self.where[k], int(d)) for k, d in deltas.items() if int(d) > 0)
        if not changed:
            return None
        flag = F_CHANGED | (F_RESET if reset else 0)
        for i, d in changed:
            self.values[i] += d
        return Batch(self.table.source, ts, self.table, [i for i, _ in changed], array("Q", self.values),
                     [d for _, d in changed], bytes([flag]) * len(changed))


class Healthy:
    """Jittery constant load on every port: utilization ``util`` +/- ``jitter``, PHY bits at line
    rate, corrected bits at pre-FEC BER ``ber`` (1e-9: a healthy link), no errors."""

    def __init__(self, ports: list[str], speed: float = 100e9, util: float = 0.6, jitter: float = 0.08,
                 ber: float = 1e-9, seed: int = 1) -> None:
        self.ports = ports
        self.speed = speed
        self.util = dict.fromkeys(ports, util)
        self.jitter = jitter
        self.ber = ber
        self.rng = random.Random(seed)

    def deltas(self, t: float, dt: float) -> dict:
        out = {}
        rng = self.rng
        for p in self.ports:
            u = self.util[p] * (1 + rng.uniform(-self.jitter, self.jitter))
            octets = self.speed * u * dt / 8
            bits = self.speed * dt
            out[(p, "rx")] = octets
            out[(p, "tx")] = octets * rng.uniform(0.97, 1.03)
            out[(p, "rx-pkts")] = octets / 4000
            out[(p, "tx-pkts")] = octets / 4000
            out[(p, "bits")] = bits
            # Poisson-like: mean bits*ber corrected bits per sample
            mean = bits * self.ber
            out[(p, "corr")] = max(0, round(rng.gauss(mean, mean ** 0.5)))
        return out
