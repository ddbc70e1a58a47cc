"""RoCE retransmission spikes on hosts (config ``insights.roce_retrans``), event
``roce-retrans``: at least ``threshold`` of the configured RDMA counters
(``roce_adp_retrans`` ..., summed) within ``window`` on one device port. Go-back-N
goodput collapses above about 1 % loss, so a link that FEC barely holds shows here
first. A sample longer than the window counts pro rata.
"""

from __future__ import annotations

from dataclasses import dataclass

from agent.config import setting
from agent.insights import classify as c
from agent.insights.base import (
    THRESHOLD_TYPE,
    WARNING,
    Rules,
    WindowCount,
    WindowedConfig,
    fmt_count,
    fmt_duration,
    register,
)


@dataclass
class RoceRetransConfig(WindowedConfig):
    """``insights.roce_retrans``: RoCE retransmission spikes on hosts (mlx5 hw_counters)."""

    # Counter names (as in hw_counters; `-` and `_` are the same) summed per device port.
    counters: list[str] = setting(
        factory=lambda: ["roce_adp_retrans", "roce_adp_retrans_to", "roce_slow_restart", "out_of_sequence",
                         "packet_seq_err"],
        type="list of counter names, non-empty",
        shown="`[roce_adp_retrans, roce_adp_retrans_to, roce_slow_restart, out_of_sequence, packet_seq_err]`",
        doc="summed per device port (`-` and `_` alike)")
    threshold: int = setting(100, type=THRESHOLD_TYPE, doc="retransmissions within `window`")


@register
class RoceRetrans(WindowCount):
    name = "roce_retrans"
    config_class = RoceRetransConfig
    doc = "RoCE retransmission spikes on hosts (`sources.rdma`)"
    reads = ("rdma", "asic")

    @classmethod
    def check(cls, section, where, problems, cfg) -> None:
        super().check(section, where, problems, cfg)
        Rules(section, where, problems).names("counters")
    types = ("roce-retrans",)
    sems = frozenset({c.ROCE})

    def __init__(self, cfg, ctx) -> None:
        super().__init__(cfg, ctx)
        self.counted = frozenset(x.strip().replace("_", "-") for x in cfg.counters)
        self._last: dict[str, int] = {}  # the counters of the sample being judged, for the text

    def counts(self, acc, owned) -> tuple[float, ...]:
        self._last = {}
        if c.ROCE not in owned:
            return (0,)
        for (sem, sub), v in acc.items():
            if sem == c.ROCE and sub in self.counted and v:
                self._last[sub] = v
        return (sum(self._last.values()),)

    def report(self, port, ts, totals) -> None:
        total, w = totals[0], fmt_duration(self.cfg.window)
        top = ", ".join(f"{k} {fmt_count(v)}" for k, v in sorted(self._last.items(), key=lambda kv: -kv[1])[:3])
        text = (f"{port}: {fmt_count(total)} RoCE retransmissions within {w} (threshold "
                f"{self.cfg.threshold}; last sample: {top or 'none'}); packet loss on the path: look for symbol "
                "errors, drops or a PFC storm on the switch ports towards this host")
        self.ctx.hit(self, "roce-retrans", port, ts, WARNING, total, f"retransmissions/{w}", text, [port])
