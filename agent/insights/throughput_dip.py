"""Transient throughput dips (config ``insights.throughput_dip``), event ``throughput-dip``.

Per port and direction, each sample's utilization is its octet delta over link speed
x the sample's length. It is compared to the port's own trailing level (an
exponential average with time constant ``baseline``): samples below ``dip_ratio`` x
the level while the level is at least ``min_utilization`` are a dip, reported when
the port is back above that line, if it lasted at most ``max_duration``. A longer
drop is a change of load (a job phase, ECMP moving flows, an uplink that was carrying
too much), not a dip: nothing is reported, and no dip starts until the port is back
above ``dip_ratio`` x its (following) level and half a ``baseline`` more has passed
while the level settles. A port whose speed is unknown is
skipped. The level needs 1 s of samples before it is trusted.

Polled every 100 ms, a 300 ms dip to half the level shows as three samples at half;
polled every 10 s, the same dip averages into one sample at 98.5 % and is not seen,
which is what this detector exists to show.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from agent.config import Duration, setting
from agent.insights import classify as c
from agent.insights.base import NS, WARNING, Detector, Rules, fmt_duration, register

WARMUP_NS = NS
_DIRS = ((c.RX_OCTETS, "rx"), (c.TX_OCTETS, "tx"))


class _Dir:
    __slots__ = ("level", "seen", "start", "ref", "low", "long", "quiet_until")

    def __init__(self) -> None:
        self.level = -1.0  # not known yet
        self.seen = 0
        self.start = 0  # start of the dip in progress (0: none)
        self.ref = 0.0  # the level when it started
        self.low = 0.0  # its lowest utilization
        self.long = False  # it outlasted max_duration: a change of load, not a dip
        self.quiet_until = 0  # after a change of load: no dip until the level has settled


@dataclass
class ThroughputDipConfig:
    """``insights.throughput_dip``: transient throughput drops from sub-second utilization
    (octet deltas over link speed)."""

    enabled: bool = setting(True)
    baseline: Duration = setting(Duration(10.0), type="duration, > 0 and ≤ 24h", doc=(
        "time constant of the trailing utilization a sample is compared with"))
    dip_ratio: float = setting(0.75, type="number, 0 < x ≤ 1", doc=(
        "fire when utilization falls below this fraction of the trailing level ..."))
    min_utilization: float = setting(0.2, type="number, 0 < x ≤ 1",
                                     doc="... if the trailing level is at least this busy")
    # A longer drop is a change of load (job phase, ECMP moving flows), not a dip.
    max_duration: Duration = setting(Duration(2.0), type="duration, > 0 and ≤ 24h", doc=(
        "a dip is reported once the port is back, if it lasted at most this; a longer drop is a "
        "change of load"))
    clear_after: Duration = setting(Duration(10.0), type="duration, 0–24h")


@register
class ThroughputDip(Detector):
    name = "throughput_dip"
    config_class = ThroughputDipConfig
    doc = "transient throughput drops from sub-second utilization (octet deltas over link speed)"

    @classmethod
    def check(cls, section: ThroughputDipConfig, where: str, problems: list[str], cfg) -> None:
        rules = Rules(section, where, problems)
        rules.positive("baseline")
        rules.share("dip_ratio")
        rules.share("min_utilization")
        rules.positive("max_duration")
        super().check(section, where, problems, cfg)
    types = ("throughput-dip",)
    sems = frozenset({c.RX_OCTETS, c.TX_OCTETS})

    def __init__(self, cfg, ctx) -> None:
        super().__init__(cfg, ctx)
        self.tau = float(cfg.baseline) * NS
        self.ports: dict[str, tuple[_Dir, _Dir]] = {}
        self._alpha = (0, 0.0)  # (dt, 1 - exp(-dt / tau)): polls are regular, so compute it once
        self.max_ns = int(cfg.max_duration * NS)

    def sample(self, port, ts, dt, acc, owned) -> None:
        speed = self.ctx.speeds.get(port)
        if not speed:
            return
        st = self.ports.get(port)
        if st is None:
            st = self.ports[port] = (_Dir(), _Dir())
        if self._alpha[0] != dt:
            self._alpha = (dt, 1.0 - math.exp(-dt / self.tau))
        alpha = self._alpha[1]
        scale = 8 * NS / (speed * dt)
        cfg = self.cfg
        for (sem, label), d in zip(_DIRS, st, strict=True):
            if sem not in owned:
                continue
            util = acc.get((sem, ""), 0) * scale
            level = d.level
            if level < 0:
                d.level = util
                continue
            if util < cfg.dip_ratio * level:
                if d.start:
                    d.low = min(d.low, util)
                    if not d.long and ts - d.start > self.max_ns:
                        d.long = True
                elif d.seen >= WARMUP_NS and level >= cfg.min_utilization and ts > d.quiet_until:
                    d.start, d.ref, d.low, d.long = ts - dt, level, util, False
            elif d.start:
                took = ts - dt - d.start
                if not d.long and took <= self.max_ns:
                    share = d.low / d.ref
                    text = (f"{port}: {label} throughput dipped to {share:.0%} of its "
                            f"{fmt_duration(cfg.baseline)} level for {fmt_duration(took / NS)} "
                            f"({d.low:.0%} vs {d.ref:.0%} of {speed / 1e9:g}G); look for errors, drops "
                            "or pause on this port and its peer")
                    self.ctx.hit(self, "throughput-dip", port, ts - dt, WARNING, 1.0 - share,
                                 "share-of-level-lost", text, [port])
                elif d.long:
                    d.quiet_until = ts + int(self.tau / 2)
                d.start = 0
            d.level = level + alpha * (util - level)
            d.seen += dt

    def forget(self, port: str) -> None:
        self.ports.pop(port, None)
