"""Pause frames this switch sends (config ``insights.pfc_sent``), event ``pfc-sent``: at least
``threshold`` PFC pause frames (all priorities) and link-level pause frames sent on one port
within ``window`` of sample time.

``pfc_storm`` watches the pause a port receives: its peer holds this switch back, the switch
is a victim. This is the other side: the switch pauses its peer because the ingress buffer
of that port's priority group has filled past XOFF, so the congestion is here or downstream
of this switch (the egress queues the port feeds: ``congestion``, an incast). In a lossless
RoCE fabric an occasional pause is PFC doing its job; many within a second hold a sender
back and spread head-of-line blocking upstream. A sample longer than the window counts pro
rata.

It reads the sources' ``pfc/priority[id=N]/state/out-pause-pkts`` (ethtool's
``tx_pause_prio_N``/``tx_prioN_pause``, the ASIC's ``HwIfOutPfcNPkt``) and
``ethernet/state/counters/out-mac-pause-frames`` (link-level pause), declared below as the
semantic it reads.
"""

from __future__ import annotations

from dataclasses import dataclass

from agent.config import setting
from agent.insights.base import (
    THRESHOLD_TYPE,
    WARNING,
    WindowCount,
    WindowedConfig,
    fmt_count,
    fmt_duration,
    register,
)

PAUSE_SENT = "pause-sent"  # pause frames sent; sub = the PFC priority, "link" for link-level pause
_LINK = "link"
_PRIORITIES = tuple(str(p) for p in range(8))
_SLOTS = {**{p: i for i, p in enumerate(_PRIORITIES)}, _LINK: len(_PRIORITIES)}


@dataclass
class PfcSentConfig(WindowedConfig):
    """``insights.pfc_sent``: PFC and link-level pause frames this switch sends on a port."""

    threshold: int = setting(500, type=THRESHOLD_TYPE, doc=(
        "pause frames sent within `window` (all priorities and link-level pause together); the "
        "default is a peer held back again and again within a second, not the odd pause a "
        "lossless fabric sends in normal operation"))


@register
class PfcSent(WindowCount):
    name = "pfc_sent"
    config_class = PfcSentConfig
    doc = "pause frames this switch sends: its ingress buffer holds a peer back"
    reads = ("ethtool", "asic")
    types = ("pfc-sent",)
    sems = frozenset({PAUSE_SENT})
    # the "pfc" tail is pfc/priority[id=N]/state: classify makes the priority the sub
    leaves = {("pfc", "out-pause-pkts"): (PAUSE_SENT, ""),
              ("ethernet/state/counters", "out-mac-pause-frames"): (PAUSE_SENT, _LINK)}

    def counts(self, acc, owned) -> tuple[float, ...]:
        out = [0] * len(_SLOTS)
        if PAUSE_SENT in owned:
            for (sem, sub), v in acc.items():
                if sem == PAUSE_SENT and v:
                    slot = _SLOTS.get(sub)
                    if slot is not None:
                        out[slot] += v
        return tuple(out)

    def report(self, port, ts, totals) -> None:
        total, w = sum(totals), fmt_duration(self.cfg.window)
        names = [*(f"priority {p}" for p in _PRIORITIES), "link-level pause"]
        parts = sorted(((n, name) for n, name in zip(totals, names, strict=True) if n), reverse=True)
        which = ", ".join(f"{name} {fmt_count(n)}" for n, name in parts[:3])
        text = (f"{port}: sent {fmt_count(total)} pause frames within {w} (threshold {self.cfg.threshold}; "
                f"{which}): this switch's ingress buffer for the port is full and holds the peer back; the "
                "congestion is here or downstream: look at the egress queues it feeds (congestion, incast)")
        self.ctx.hit(self, "pfc-sent", port, ts, WARNING, total, f"frames/{w}", text, [port])
