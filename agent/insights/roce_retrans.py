"""RoCE retransmission spikes on hosts (config ``insights.roce_retrans``), event
``roce-retrans``: at least ``threshold`` of the configured RDMA counters
(``roce_adp_retrans`` ..., summed) within ``window`` on one device port. Go-back-N
goodput collapses above about 1 % loss, so a link that FEC barely holds shows here
first. A sample longer than the window counts pro rata.
"""

from __future__ import annotations

from agent.insights import classify as c
from agent.insights.base import NS, WARNING, Detector, Window, fmt_count, fmt_duration, register


@register
class RoceRetrans(Detector):
    name = "roce_retrans"
    types = ("roce-retrans",)
    every_sample = False
    sems = frozenset({c.ROCE})

    def __init__(self, cfg, ctx) -> None:
        super().__init__(cfg, ctx)
        self.span = int(cfg.window * NS)
        self.counted = frozenset(x.strip().replace("_", "-") for x in cfg.counters)
        self.ports: dict[str, Window] = {}

    def sample(self, port, ts, dt, acc, owned) -> None:
        if c.ROCE not in owned:
            return
        scale = min(1.0, self.span / dt)
        n = 0
        parts: dict[str, int] = {}
        for (sem, sub), v in acc.items():
            if sem == c.ROCE and sub in self.counted and v:
                n += v
                parts[sub] = v
        win = self.ports.get(port)
        if not n and win is None:
            return
        if win is None:
            win = self.ports[port] = Window(self.span)
        if n:
            win.add(ts, n * scale)
        total = win.trim(ts)
        if not win.items:
            del self.ports[port]
            return
        if n and total >= self.cfg.threshold:  # judged when retransmissions arrive
            top = ", ".join(f"{k} {fmt_count(v)}" for k, v in sorted(parts.items(), key=lambda kv: -kv[1])[:3])
            w = fmt_duration(self.cfg.window)
            text = (f"{port}: {fmt_count(total)} RoCE retransmissions within {w} (threshold "
                    f"{self.cfg.threshold}; last sample: {top or 'none'}); packet loss on the path: look for symbol "
                    "errors, drops or a PFC storm on the switch ports towards this host")
            self.ctx.hit(self, "roce-retrans", port, ts, WARNING, total, f"retransmissions/{w}", text, [port])

    def forget(self, port: str) -> None:
        self.ports.pop(port, None)
