"""PFC storms (config ``insights.pfc_storm``), event ``pfc-storm``.

Per port and priority, pause received from the peer is judged every ``window`` of
sample time (100 ms: one poll of Cumulus' PFC watchdog): where the driver counts the
time paused (mlx5, mlxsw, the ASIC source), the window is over when the share of it
spent paused is at least ``paused_share``; elsewhere (switchd's frame counters) when
the pause-frame rate is at least ``pause_rate``. Frame rate alone is not used where
the duration is known: heavy but healthy congestion also sends thousands of pause
frames a second, a storm is pause that never lets go. ``windows`` over-windows in a
row (3: the watchdog's robustness) raise the event. Link-level pause frames (no
priority) are judged by rate as priority ``global``.
"""

from __future__ import annotations

from dataclasses import dataclass

from agent.config import Duration, setting
from agent.insights import classify as c
from agent.insights.base import (
    CLEAR_AFTER_TYPE,
    CRITICAL,
    MAX_WINDOWS,
    NS,
    WARNING,
    WINDOW_TYPE,
    WINDOWS_TYPE,
    Detector,
    Rules,
    fmt_count,
    fmt_duration,
    register,
)


class _Prio:
    __slots__ = ("covered", "frames", "paused_us", "streak")

    def __init__(self) -> None:
        self.covered = 0
        self.frames = 0
        self.paused_us = 0
        self.streak = 0


@dataclass
class PfcStormConfig:
    """``insights.pfc_storm``: near-continuous pause on one priority of a port, received from
    its peer: by the share of time paused (where the driver counts pause duration), else by
    the pause-frame rate."""

    enabled: bool = setting(True)
    pause_rate: float = setting(1000.0, type="number, 0 < x ≤ 10^9", doc=(
        "received pause frames per second on one priority, where the driver has no pause duration"))
    paused_share: float = setting(0.8, type="number, 0 < x ≤ 1", doc=(
        "share of the window spent paused, where the driver reports pause duration"))
    window: Duration = setting(Duration(0.1), type=WINDOW_TYPE, doc="one poll of the PFC watchdog")
    windows: int = setting(3, type=WINDOWS_TYPE, doc=(
        "consecutive windows over a threshold before the event is raised"))  # watchdog robustness
    clear_after: Duration = setting(Duration(30.0), type=CLEAR_AFTER_TYPE)


@register
class PfcStorm(Detector):
    name = "pfc_storm"
    config_class = PfcStormConfig
    doc = "near-continuous pause received on one priority"
    reads = ("ethtool", "asic")

    @classmethod
    def check(cls, section: PfcStormConfig, where: str, problems: list[str], cfg) -> None:
        rules = Rules(section, where, problems)
        rules.positive("pause_rate")
        rules.at_most("pause_rate", 1e9)
        rules.positive("window")
        rules.share("paused_share")
        rules.count("windows", 1, MAX_WINDOWS)
        super().check(section, where, problems, cfg)
    types = ("pfc-storm",)
    every_sample = False
    sems = frozenset({c.PFC_FRAMES, c.PFC_DURATION, c.PAUSE})

    def __init__(self, cfg, ctx) -> None:
        super().__init__(cfg, ctx)
        self.span = int(cfg.window * NS)
        self.ports: dict[str, dict[str, _Prio]] = {}
        self.last: dict[str, int] = {}  # port -> its last sample with pause

    def sample(self, port, ts, dt, acc, owned) -> None:
        prios = self.ports.get(port)
        if prios and ts - dt > self.last.get(port, 0) + self.span // 2:
            # Called only when pause counters move: samples in between paused nothing,
            # so no window of the gap was over.
            prios.clear()
        self.last[port] = ts
        for (sem, sub), v in acc.items():
            if sem not in self.sems or sem not in owned or not v:
                continue
            if prios is None:
                prios = self.ports[port] = {}
            key = sub if sem != c.PAUSE else "global"
            st = prios.get(key)
            if st is None:
                st = prios[key] = _Prio()
            if sem == c.PFC_DURATION:
                st.paused_us += v
            else:
                st.frames += v
        if not prios:
            return
        timed = c.PFC_DURATION in owned
        idle = []
        for key, st in prios.items():
            st.covered += dt
            if st.covered < self.span * 9 // 10:
                continue
            self._judge(port, key, st, ts, timed and key != "global")
            if not st.streak and not st.frames and not st.paused_us:
                idle.append(key)
            st.covered = st.frames = st.paused_us = 0
        for key in idle:
            del prios[key]

    def _judge(self, port: str, prio: str, st: _Prio, ts: int, timed: bool) -> None:
        cfg = self.cfg
        share = st.paused_us * 1000 / st.covered
        rate = st.frames * NS / st.covered
        over = share >= cfg.paused_share if timed else rate >= cfg.pause_rate
        if not over:
            st.streak = 0
            return
        st.streak += 1
        if st.streak < cfg.windows:
            return
        where = f"priority {prio}" if prio != "global" else "link-level pause"
        # A window is as long as the samples judged in it really were (a default 100 ms window
        # under 1 s polling judges each 1 s sample): say what was measured.
        covered = st.covered / NS
        held = f"{cfg.windows} x {fmt_duration(cfg.window if covered < 1.5 * cfg.window else round(covered, 3))}"
        if timed:
            text = (f"{port}: PFC storm on {where}: paused {min(share, 1.0):.0%} of the time for {held} "
                    f"({fmt_count(rate)} pause frames/s); the peer keeps pausing this port: check the "
                    "peer's receive path (a stuck NIC queue) and the PFC watchdog")
            self.ctx.hit(self, "pfc-storm", (port, prio), ts, CRITICAL, min(share, 1.0), "paused-share",
                         text, [port])
        else:
            text = (f"{port}: PFC storm on {where}: {fmt_count(rate)} pause frames/s for {held} "
                    f"(threshold {fmt_count(cfg.pause_rate)}/s); check the peer's receive path and the "
                    "PFC watchdog")
            self.ctx.hit(self, "pfc-storm", (port, prio), ts, WARNING, rate, "frames/s", text, [port])

    def forget(self, port: str) -> None:
        self.ports.pop(port, None)
        self.last.pop(port, None)
