"""Link flaps (config ``insights.link_flap``), event ``link-flap``: at least ``threshold``
carrier transitions (one down+up is 2) within ``window`` of sample time."""

from __future__ import annotations

from dataclasses import dataclass

from agent.config import Duration, setting
from agent.insights import classify as c
from agent.insights.base import (
    CLEAR_AFTER_TYPE,
    THRESHOLD_TYPE,
    WARNING,
    WINDOW_TYPE,
    WindowCount,
    WindowedConfig,
    fmt_count,
    fmt_duration,
    register,
)

_CARRIER = (c.CARRIER, "")


@dataclass
class LinkFlapConfig(WindowedConfig):
    """``insights.link_flap``: carrier transitions on a port."""

    threshold: int = setting(2, type=THRESHOLD_TYPE, doc="carrier transitions within `window`")  # one down+up is 2
    window: Duration = setting(Duration(60.0), type=WINDOW_TYPE, shown="`1m`")
    clear_after: Duration = setting(Duration(300.0), type=CLEAR_AFTER_TYPE, shown="`5m`")


@register
class LinkFlap(WindowCount):
    name = "link_flap"
    config_class = LinkFlapConfig
    doc = "carrier transitions on a port"
    reads = ("netdev", "ethtool", "asic")
    types = ("link-flap",)
    sems = frozenset({c.CARRIER})
    pro_rata = False  # a transition is one whatever the sample's length

    def counts(self, acc, owned) -> tuple[float, ...]:
        return (acc.get(_CARRIER, 0) if c.CARRIER in owned else 0,)

    def report(self, port, ts, totals) -> None:
        total, win = totals[0], fmt_duration(self.cfg.window)
        text = (f"{port}: link flapped: {fmt_count(total)} carrier transitions within {win} "
                f"(threshold {self.cfg.threshold}); check the cable, optics and the peer's port, "
                "and the log for the reason")
        self.ctx.hit(self, "link-flap", port, ts, WARNING, total, f"transitions/{win}", text, [port])
