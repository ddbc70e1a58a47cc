"""Transient throughput dips (config ``insights.throughput_dip``), event ``throughput-dip``.

Per port and direction, each sample's utilization is its octet delta over link speed
x the sample's length. It is compared to the port's own trailing level (an
exponential average with time constant ``baseline``): a sample below ``dip_ratio`` x
the level while the level is at least ``min_utilization`` is a dip. A port whose
speed is unknown is skipped. The level needs 1 s of samples before it is trusted.

Polled every 100 ms, a 300 ms dip to half the level shows as three samples at half;
polled every 10 s, the same dip averages into one sample at 98.5 % and is not seen,
which is what this detector exists to show.
"""

from __future__ import annotations

import math

from agent.insights import classify as c
from agent.insights.base import NS, WARNING, Detector, fmt_duration, register

WARMUP_NS = NS
_DIRS = ((c.RX_OCTETS, "rx"), (c.TX_OCTETS, "tx"))


class _Dir:
    __slots__ = ("level", "seen")

    def __init__(self) -> None:
        self.level = -1.0  # not known yet
        self.seen = 0


@register
class ThroughputDip(Detector):
    name = "throughput_dip"
    types = ("throughput-dip",)
    sems = frozenset({c.RX_OCTETS, c.TX_OCTETS})

    def __init__(self, cfg, ctx) -> None:
        super().__init__(cfg, ctx)
        self.tau = float(cfg.baseline) * NS
        self.ports: dict[str, tuple[_Dir, _Dir]] = {}
        self._alpha = (0, 0.0)  # (dt, 1 - exp(-dt / tau)): polls are regular, so compute it once

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
            if d.seen >= WARMUP_NS and level >= cfg.min_utilization and util < cfg.dip_ratio * level:
                share = util / level
                text = (f"{port}: {label} throughput dipped to {share:.0%} of its {fmt_duration(cfg.baseline)} "
                        f"level ({util:.0%} vs {level:.0%} of {speed / 1e9:g}G); look for errors, "
                        "drops or pause on this port and its peer")
                self.ctx.hit(self, "throughput-dip", port, ts, WARNING, 1.0 - share, "share-of-level-lost",
                             text, [port])
            d.level = level + alpha * (util - level)
            d.seen += dt

    def forget(self, port: str) -> None:
        self.ports.pop(port, None)
