"""Link flaps (config ``insights.link_flap``), event ``link-flap``: at least ``threshold``
carrier transitions (one down+up is 2) within ``window`` of sample time."""

from __future__ import annotations

from agent.insights import classify as c
from agent.insights.base import NS, WARNING, Detector, Window, fmt_count, fmt_duration, register


@register
class LinkFlap(Detector):
    name = "link_flap"
    types = ("link-flap",)
    every_sample = False
    sems = frozenset({c.CARRIER})

    def __init__(self, cfg, ctx) -> None:
        super().__init__(cfg, ctx)
        self.span = int(cfg.window * NS)
        self.ports: dict[str, Window] = {}

    def sample(self, port, ts, dt, acc, owned) -> None:
        n = acc.get((c.CARRIER, ""), 0) if c.CARRIER in owned else 0
        win = self.ports.get(port)
        if not n and win is None:
            return
        if win is None:
            win = self.ports[port] = Window(self.span)
        if n:
            win.add(ts, n)
        total = win.trim(ts)
        if not win.items:
            del self.ports[port]
            return
        if n and total >= self.cfg.threshold:  # judged when transitions arrive
            text = (f"{port}: link flapped: {fmt_count(total)} carrier transitions within "
                    f"{fmt_duration(self.cfg.window)} (threshold {self.cfg.threshold}); check the cable, "
                    "optics and the peer's port, and the log for the reason")
            self.ctx.hit(self, "link-flap", port, ts, WARNING, total, f"transitions/{fmt_duration(self.cfg.window)}",
                         text, [port])

    def forget(self, port: str) -> None:
        self.ports.pop(port, None)
