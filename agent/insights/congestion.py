"""Queue congestion (config ``insights.congestion``), event ``congestion``.

LANZ-style records per egress queue (port, traffic class): the event is raised when the
queue's level crosses ``high`` bytes, updated while it stays at or above ``low`` (its
maximum, the time of the maximum, the port's egress drops and the queue's ECN marks since
it began), and ends once the level has stayed below ``low`` for ``clear_after``.

The level is the queue's peak since the previous read (the ASIC's ``PEAK`` kind, devlink's
``occ max``) where a source gives one: a burst between two polls is never missed. Where
only the instantaneous occupancy exists, that is judged instead, and bursts shorter than
the poll interval can pass unseen.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from agent.config import Duration, setting
from agent.insights import classify as c
from agent.insights.base import (
    CRITICAL,
    NS,
    WARNING,
    Detector,
    Rules,
    fmt_count,
    register,
)

MAX_BYTES = 1 << 40  # thresholds: a buffer is far below a terabyte

#: the port's egress drops, by the first leaf a source has (they overlap: never summed)
_DROPS = (("out-q-drops",), ("queue-dropped-pkts", "queue-wred-dropped-pkts"), ("out-discards",))


def fmt_bytes(n: float) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale:
            return f"{n / scale:.3g} {unit}"
    return f"{n:.0f} B"


class _Queue:
    """One queue from its first level at or above ``high`` until the event's end."""

    __slots__ = ("level", "active", "max", "max_ns", "drops", "ecn")

    def __init__(self) -> None:
        self.level = 0
        self.active = False
        self.max = 0
        self.max_ns = 0
        self.drops = 0
        self.ecn = 0


@dataclass
class CongestionConfig:
    """``insights.congestion``: an egress queue filled past a level, as records (start,
    updates with the maximum, end), from the queue's peak occupancy where a source gives it."""

    enabled: bool = setting(True)
    high: int = setting(4 << 20, type="integer, bytes, 1–2^40", doc=(
        "a queue's level at or above this raises the event (4 MiB: a quarter of a Spectrum "
        "port's usual dynamic share; an idle RoCE queue stays below 64 KiB)"))
    low: int = setting(1 << 20, type="integer, bytes, below `high`", doc=(
        "the event stays open while the level is at or above this (hysteresis: a queue "
        "hovering at `high` is one event)"))
    clear_after: Duration = setting(Duration(1.0), type="duration, ≤ 24h", doc=(
        "the event ends once the level stayed below `low` this long"))


@register
class Congestion(Detector):
    name = "congestion"
    config_class = CongestionConfig
    doc = "an egress queue filled past `high` bytes (LANZ-style start, update, end)"
    types = ("congestion",)
    sems = frozenset({c.QUEUE_PEAK, c.QUEUE_LEVEL})

    @classmethod
    def check(cls, section: CongestionConfig, where: str, problems: list[str], cfg) -> None:
        rules = Rules(section, where, problems)
        rules.count("high", 1, MAX_BYTES)
        rules.count("low", 1, MAX_BYTES)
        if 1 <= section.low and section.low >= section.high:
            problems.append(f"{where}.low: must be below {where}.high ({section.high}), got {section.low}")
        super().check(section, where, problems, cfg)

    def __init__(self, cfg, ctx) -> None:
        super().__init__(cfg, ctx)
        self.ports: dict[str, dict[str, _Queue]] = {}

    def sample(self, port, ts, dt, acc, owned) -> None:
        level = c.QUEUE_PEAK if c.QUEUE_PEAK in owned else c.QUEUE_LEVEL
        queues = self.ports.get(port)
        if queues is None:
            # The common case, kept cheap (every port, every poll): no queue of the port is
            # congested, so only a level at or above `high` matters.
            high = self.cfg.high
            if not any(v >= high and sem == level for (sem, _sub), v in acc.items()):
                return
            queues = self.ports[port] = {}
        for (sem, sub), v in acc.items():
            if sem == level:
                q = queues.get(sub)
                if q is None:
                    q = queues[sub] = _Queue()
                q.level = v
        drops = next((n for leaves in _DROPS if (n := sum(acc.get((c.DROP_OUT, x), 0) for x in leaves))), 0)
        for name, q in list(queues.items()):
            self._judge(port, name, q, ts, drops, acc.get((c.ECN, name), 0))
            if not q.active:
                del queues[name]  # calm again: the port is back on the cheap path
        if not queues:
            del self.ports[port]

    def _judge(self, port: str, name: str, q: _Queue, ts: int, drops: int, ecn: int) -> None:
        """The queue's sample: raise, update or end its record. ``drops`` and ``ecn`` are the
        sample's; they count from the sample that raised the record (a peak cleared on read
        puts a whole burst between two polls into that one sample)."""
        cfg = self.cfg
        if not q.active:
            if q.level < cfg.high:
                return
            q.active, q.max, q.max_ns, q.drops, q.ecn = True, 0, ts, 0, 0
        elif q.level < cfg.low:
            q.active = False  # no more hits: the event ends after clear_after
            return
        q.drops += drops
        q.ecn += ecn
        if q.level > q.max:
            q.max, q.max_ns = q.level, ts
        at = time.strftime("%H:%M:%S", time.gmtime(q.max_ns // NS)) + f".{q.max_ns % NS // 1_000_000:03d}Z"
        text = (f"{port} queue {name}: congested, peak {fmt_bytes(q.max)} at {at} (high {fmt_bytes(cfg.high)}); "
                f"{fmt_count(q.drops)} egress drops and {fmt_count(q.ecn)} ECN marks since it began; check "
                "the senders converging on this port (incast) and the queue's ECN and PFC thresholds")
        self.ctx.hit(self, "congestion", (port, name), ts, CRITICAL if q.drops else WARNING, q.max, "bytes",
                     text, [port])

    def forget(self, port: str) -> None:
        self.ports.pop(port, None)
