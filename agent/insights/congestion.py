"""Queue congestion (config ``insights.congestion``), event ``congestion``.

LANZ-style records per egress queue (port, traffic class): the event is raised when the
queue's level crosses ``high`` bytes, updated while it stays at or above ``low`` (its
maximum, the time of the maximum, the port's egress drops and the queue's ECN marks since
it began), and ends once the level has stayed below ``low`` for ``clear_after``.

``high`` and ``low`` are bytes, or shares of the queue's limit (``"80%"``) where a source
reports the limit (a level ``limit`` beside the queue's occupancy: classify's
``queue-limit``); a queue whose limit no source reports is not judged by a share, and
status says which queues those are rather than guessing a limit.

The level is the queue's peak since the previous read (the ASIC's ``PEAK`` kind, devlink's
``occ max``) where a source gives one: a burst between two polls is never missed. Where
only the instantaneous occupancy exists, that is judged instead, and bursts shorter than
the poll interval can pass unseen.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from typing import Any

from agent.config import Duration, setting
from agent.insights import classify as c
from agent.insights.base import (
    CRITICAL,
    NS,
    WARNING,
    Detector,
    fmt_count,
    register,
)

MAX_BYTES = 1 << 40  # thresholds: a buffer is far below a terabyte
_SHARE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*%\s*$")
_BYTES = re.compile(r"^\s*(\d+)\s*$")
MAX_LISTED = 10  # queues without a known limit named in status (the rest are counted)


def parse_threshold(value: Any) -> tuple[int | None, float | None]:
    """``(bytes, None)`` for a byte count, ``(None, percent)`` for a share of the queue's limit
    (``"80%"``); ValueError for anything else."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value, None
    if isinstance(value, str):
        m = _BYTES.match(value)
        if m:
            return int(m.group(1)), None
        m = _SHARE.match(value)
        if m:
            return None, float(m.group(1))
    raise ValueError(f"expected bytes (an integer) or a share of the queue's limit such as \"80%\", "
                     f"got {value!r}")

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
    high: int | str = setting(4 << 20, type="integer, bytes, 1–2^40; or a share of the queue's limit, `\"80%\"`",
                              doc=(
        "a queue's level at or above this raises the event (4 MiB: a quarter of a Spectrum "
        "port's usual dynamic share; an idle RoCE queue stays below 64 KiB). A share (0–100 %) is "
        "judged against the queue's limit where a source reports it (`…/queue[name=N]/state/limit`); "
        "a queue without a known limit is not judged, and status lists it"))
    low: int | str = setting(1 << 20, type="integer, bytes, below `high`; or a share, below `high`", doc=(
        "the event stays open while the level is at or above this (hysteresis: a queue "
        "hovering at `high` is one event); bytes when `high` is bytes, a share when it is a share"))
    clear_after: Duration = setting(Duration(1.0), type="duration, ≤ 24h", doc=(
        "the event ends once the level stayed below `low` this long"))


@register
class Congestion(Detector):
    name = "congestion"
    config_class = CongestionConfig
    doc = ("an egress queue filled past `high` (bytes, or a share of the queue's limit) (LANZ-style "
           "start, update, end)")
    types = ("congestion",)
    sems = frozenset({c.QUEUE_PEAK, c.QUEUE_LEVEL, c.QUEUE_LIMIT})
    no_data = ("no source reports queue levels (is sources.asic.buffers off, or does no enabled "
               "source read buffers?): no congestion can be seen")

    @classmethod
    def check(cls, section: CongestionConfig, where: str, problems: list[str], cfg) -> None:
        parsed = {}
        for key in ("high", "low"):
            try:
                parsed[key] = parse_threshold(getattr(section, key))
            except ValueError as exc:
                problems.append(f"{where}.{key}: {exc}")
        if len(parsed) == 2:
            (high, high_share), (low, low_share) = parsed["high"], parsed["low"]
            if (high is None) != (low is None):
                problems.append(f"{where}.low: must be of the kind of {where}.high (both bytes or both a "
                                f"share of the queue's limit), got high {section.high!r}, low {section.low!r}")
            elif high is not None and low is not None:
                for key, value in (("high", high), ("low", low)):
                    if not 1 <= value <= MAX_BYTES:
                        problems.append(f"{where}.{key}: must be at least 1 and at most {MAX_BYTES}, got {value}")
                if 1 <= low and low >= high:
                    problems.append(f"{where}.low: must be below {where}.high ({section.high}), got {section.low}")
            elif high_share is not None and low_share is not None:
                for key, value in (("high", high_share), ("low", low_share)):
                    if not 0 < value <= 100:
                        problems.append(f"{where}.{key}: a share must be above 0 % and at most 100 %, "
                                        f"got {getattr(section, key)!r}")
                if low_share >= high_share:
                    problems.append(f"{where}.low: must be below {where}.high ({section.high}), got {section.low}")
        super().check(section, where, problems, cfg)

    def __init__(self, cfg, ctx) -> None:
        super().__init__(cfg, ctx)
        self.ports: dict[str, dict[str, _Queue]] = {}
        high, self.high_share = parse_threshold(cfg.high)
        low, low_share = parse_threshold(cfg.low)
        self.high = high if high is not None else 0
        self.low = low if low is not None else 0
        self.low_share = low_share if low_share is not None else 0.0
        # bytes: a calm port whose every queue is below `high` is not sampled (shares must see
        # the limits and the queues without one: every sample)
        self.level_gate = high if high is not None else None
        #: port -> queue -> its limit in bytes, as a source reports it (used by shares)
        self.limits: dict[str, dict[str, int]] = {}
        #: (port, queue) seen without a known limit while thresholds are shares
        self.unjudged: set[tuple[str, str]] = set()

    def sample(self, port, ts, dt, acc, owned) -> None:
        level = c.QUEUE_PEAK if c.QUEUE_PEAK in owned else c.QUEUE_LEVEL
        queues = self.ports.get(port)
        if self.high_share is not None:
            if not self._share_sample(port, acc, level, owned) and queues is None:
                return
        elif queues is None:
            # The common case, kept cheap (every port, every poll): no queue of the port is
            # congested, so only a level at or above `high` matters.
            high = self.high
            for (sem, _sub), v in acc.items():
                if v >= high and sem == level:
                    break
            else:
                return
        if queues is None:
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

    def _share_sample(self, port: str, acc: dict, level: str, owned: frozenset[str]) -> bool:
        """Thresholds as shares: note the queues' limits, and whether a level of the sample
        reaches its queue's ``high``; a queue without a known limit is noted, not judged."""
        limits = self.limits.get(port)
        if c.QUEUE_LIMIT in owned:
            for (sem, sub), v in acc.items():
                if sem == c.QUEUE_LIMIT:
                    if limits is None:
                        limits = self.limits[port] = {}
                    limits[sub] = v
        hot = False
        for (sem, sub), v in acc.items():
            if sem != level:
                continue
            limit = limits.get(sub) if limits is not None else None
            if not limit:
                self.unjudged.add((port, sub))
            else:
                self.unjudged.discard((port, sub))
                if v >= limit * self.high_share / 100:  # as _thresholds computes it
                    hot = True
        return hot

    def _thresholds(self, port: str, name: str) -> tuple[float, float, int] | None:
        """(high, low, limit) in bytes for one queue (limit 0: thresholds in bytes); None when
        shares are configured and the queue's limit is unknown."""
        if self.high_share is None:
            return self.high, self.low, 0
        limit = self.limits.get(port, {}).get(name)
        if not limit:
            return None
        return limit * self.high_share / 100, limit * self.low_share / 100, limit

    def _judge(self, port: str, name: str, q: _Queue, ts: int, drops: int, ecn: int) -> None:
        """The queue's sample: raise, update or end its record. ``drops`` and ``ecn`` are the
        sample's; they count from the sample that raised the record (a peak cleared on read
        puts a whole burst between two polls into that one sample)."""
        bounds = self._thresholds(port, name)
        if bounds is None:  # a share without a known limit: not judged (status says so)
            return
        high, low, limit = bounds
        if not q.active:
            if q.level < high:
                return
            q.active, q.max, q.max_ns, q.drops, q.ecn = True, 0, ts, 0, 0
        elif q.level < low:
            q.active = False  # no more hits: the event ends after clear_after
            return
        q.drops += drops
        q.ecn += ecn
        if q.level > q.max:
            q.max, q.max_ns = q.level, ts
        at = time.strftime("%H:%M:%S", time.gmtime(q.max_ns // NS)) + f".{q.max_ns % NS // 1_000_000:03d}Z"
        high_text = (fmt_bytes(high) if not limit else
                     f"{fmt_bytes(high)}, {self.high_share:g} % of its {fmt_bytes(limit)} limit")
        text = (f"{port} queue {name}: congested, peak {fmt_bytes(q.max)} at {at} (high {high_text}); "
                f"{fmt_count(q.drops)} egress drops and {fmt_count(q.ecn)} ECN marks since it began; check "
                "the senders converging on this port (incast) and the queue's ECN and PFC thresholds")
        self.ctx.hit(self, "congestion", (port, name), ts, CRITICAL if q.drops else WARNING, q.max, "bytes",
                     text, [port])

    def forget(self, port: str) -> None:
        self.ports.pop(port, None)
        self.limits.pop(port, None)
        self.unjudged = {k for k in self.unjudged if k[0] != port}

    def status(self) -> dict[str, Any] | None:
        """With shares: the queues that cannot be judged for want of a known limit."""
        if self.high_share is None:
            return None
        out: dict[str, Any] = {"thresholds": f"high {self.cfg.high}, low {self.cfg.low} of each queue's limit"}
        if self.unjudged:
            names = sorted(f"{p} queue {q}" for p, q in self.unjudged)
            out["no_limit"] = len(names)
            out["note"] = (f"{len(names)} queues have no known limit, so a share cannot be judged there "
                           f"(not guessed): {', '.join(names[:MAX_LISTED])}"
                           + (" …" if len(names) > MAX_LISTED else ""))
        return out
