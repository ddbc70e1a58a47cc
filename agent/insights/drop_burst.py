"""Drop bursts / microbursts (config ``insights.drop_burst``), event ``drop-burst``.

Per port, the drops of each sample are ingress drops (the largest of in-discards and
in-buffer-drops: switchd's in-discards contains the buffer drops) plus egress drops
(the largest of out-discards, out-q-drops, out-wred-drops and the per-queue
dropped/WRED counters summed over queues). A packet is dropped once, at ingress or at
egress, so the two sides add; the counters of one side overlap, so they do not. At
least ``threshold`` drops within ``window`` (100 ms) raise the event. A sample longer
than the window counts pro rata: polled every 10 s, a 200 ms burst is spread over the
10 s and is not a burst any more, which is why sub-second polling matters.
"""

from __future__ import annotations

from dataclasses import dataclass

from agent.config import Duration, setting
from agent.insights import classify as c
from agent.insights.base import (
    THRESHOLD_TYPE,
    WARNING,
    WINDOW_TYPE,
    WindowCount,
    WindowedConfig,
    fmt_count,
    fmt_duration,
    register,
)


@dataclass
class DropBurstConfig(WindowedConfig):
    """``insights.drop_burst``: buffer, queue and WRED drops concentrated in a short window
    (microbursts)."""

    threshold: int = setting(100, type=THRESHOLD_TYPE, doc="drops within `window`")
    window: Duration = setting(Duration(0.1), type=WINDOW_TYPE)


@register
class DropBurst(WindowCount):
    name = "drop_burst"
    config_class = DropBurstConfig
    doc = "buffer, queue and WRED drops"
    reads = ("netdev", "ethtool", "asic")
    types = ("drop-burst",)
    sems = frozenset({c.DROP_IN, c.DROP_OUT})

    def counts(self, acc, owned) -> tuple[float, ...]:
        din = dout = 0
        for (sem, _sub), v in acc.items():
            if sem == c.DROP_IN and v > din and sem in owned:
                din = v
            elif sem == c.DROP_OUT and v > dout and sem in owned:
                dout = v
        return (din, dout)

    def report(self, port, ts, totals) -> None:
        tin, tout = totals
        total, win = tin + tout, fmt_duration(self.cfg.window)
        text = (f"{port}: {fmt_count(total)} drops within {win} (threshold {self.cfg.threshold}; "
                f"ingress {fmt_count(tin)}, egress {fmt_count(tout)}); a microburst: check the "
                "queue's buffer and ECN/PFC profile and the senders' incast")
        self.ctx.hit(self, "drop-burst", port, ts, WARNING, total, f"drops/{win}", text, [port])
