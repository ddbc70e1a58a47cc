"""Transient throughput dips (config ``insights.throughput_dip``), event ``throughput-dip``.

Per port and direction, each sample's utilization is its octet delta over link speed
x the sample's length. It is compared to the port's own trailing level (an
exponential average with time constant ``baseline``): samples below ``dip_ratio`` x
the level while the level is at least ``min_utilization`` are a dip, reported when
the port is back above that line, if it lasted at most ``max_duration``. A longer
drop is a change of load (a job phase, ECMP moving flows, an uplink that was carrying
too much), not a dip: nothing is reported, and no dip starts until the port is back
above ``dip_ratio`` x its (following) level and half a ``baseline`` more has passed
while the level settles. A port whose speed is unknown is
skipped. The level needs 1 s of samples before it is trusted.

Polled every 100 ms, a 300 ms dip to half the level shows as three samples at half;
polled every 10 s, the same dip averages into one sample at 98.5 % and is not seen,
which is what this detector exists to show.

The per-port state (level, dip in progress) lives in flat arrays updated by a kernel once
per pass for every port sampled (agent/_ext/detect.c ``dip_run``: the rule; its plain Python
backend agent/_fallback/detect.py); Python words and raises only the dips to report.
"""

from __future__ import annotations

from array import array
from dataclasses import dataclass

from agent import _backend
from agent.config import Duration, setting
from agent.insights import classify as c
from agent.insights.base import NS, WARNING, Detector, Rules, fmt_duration, register

WARMUP_NS = NS
_DIRS = ((c.RX_OCTETS, "rx"), (c.TX_OCTETS, "tx"))
_KEYS = ((c.RX_OCTETS, ""), (c.TX_OCTETS, ""))  # the feeds' acc keys of the octets, rx then tx
_SEMS = (c.RX_OCTETS, c.TX_OCTETS)
# A port's row of the state arrays (agent/_ext/detect.c), rx then tx: reals level (-1: not
# known yet), ref (the level when the dip started), low (its lowest utilization); ints seen
# (ns of samples), start (of the dip in progress, 0: none), long (it outlasted max_duration:
# a change of load, not a dip), quiet_until (after a change of load: no dip until the level
# has settled).
ROW_REALS, ROW_INTS = 6, 8
_NEW_REALS = array("d", [-1.0, 0.0, 0.0] * 2)
_NEW_INTS = array("q", bytes(8 * ROW_INTS))


@dataclass(frozen=True, slots=True)
class DipRule:
    """The rule's settings as the kernel reads them (``dip_run``'s conf, by attribute)."""

    tau: float  # ns: the trailing level's time constant
    dip_ratio: float
    min_utilization: float
    max_ns: int
    quiet_ns: int  # after a change of load
    warmup_ns: int = WARMUP_NS
    keys: tuple = _KEYS
    sems: tuple = _SEMS


@dataclass
class ThroughputDipConfig:
    """``insights.throughput_dip``: transient throughput drops from sub-second utilization
    (octet deltas over link speed)."""

    enabled: bool = setting(True)
    baseline: Duration = setting(Duration(10.0), type="duration, > 0 and ≤ 24h", doc=(
        "time constant of the trailing utilization a sample is compared with"))
    dip_ratio: float = setting(0.75, type="number, 0 < x ≤ 1", doc=(
        "fire when utilization falls below this fraction of the trailing level ..."))
    min_utilization: float = setting(0.2, type="number, 0 < x ≤ 1",
                                     doc="... if the trailing level is at least this busy")
    # A longer drop is a change of load (job phase, ECMP moving flows), not a dip.
    max_duration: Duration = setting(Duration(2.0), type="duration, > 0 and ≤ 24h", doc=(
        "a dip is reported once the port is back, if it lasted at most this; a longer drop is a "
        "change of load"))
    clear_after: Duration = setting(Duration(10.0), type="duration, 0–24h")


@register
class ThroughputDip(Detector):
    name = "throughput_dip"
    config_class = ThroughputDipConfig
    doc = "transient throughput drops from sub-second utilization (octet deltas over link speed)"

    @classmethod
    def check(cls, section: ThroughputDipConfig, where: str, problems: list[str], cfg) -> None:
        rules = Rules(section, where, problems)
        rules.positive("baseline")
        rules.share("dip_ratio")
        rules.share("min_utilization")
        rules.positive("max_duration")
        super().check(section, where, problems, cfg)
    types = ("throughput-dip",)
    sems = frozenset({c.RX_OCTETS, c.TX_OCTETS})

    def __init__(self, cfg, ctx) -> None:
        super().__init__(cfg, ctx)
        tau = float(cfg.baseline) * NS
        self.rule = DipRule(tau, float(cfg.dip_ratio), float(cfg.min_utilization), int(cfg.max_duration * NS),
                            int(tau / 2))
        #: port -> its row of the state arrays (kept, reset, when the port goes away)
        self.rows: dict[str, int] = {}
        self.reals = array("d")
        self.ints = array("q")
        self.batch: list = []
        #: the kernel (the backend's; tests and bench/ set the fallback's beside it)
        self.kernel = _backend.reader.dip_run
        self._entries: list = []  # the pass's samples, while their dips are reported
        self._edges: dict[int, list] = {}  # entry index -> its dips to report

    def _room(self, rows: int) -> None:
        """State arrays for at least ``rows`` rows (new rows: level unknown, no dip)."""
        have = len(self.ints) // ROW_INTS
        if have < rows:
            more = max(rows - have, have, 64)
            self.reals.extend(_NEW_REALS * more)
            self.ints.extend(_NEW_INTS * more)

    def run_batch(self) -> list[int]:
        entries, self.batch = self.batch, []
        self._entries, self._edges = entries, {}
        if not entries:
            return []
        self._room(len(self.rows) + len(entries))
        edges = self.kernel(entries, self.ctx.speeds, self.rows, self.reals, self.ints, self.rule)
        for edge in edges:
            self._edges.setdefault(edge[0], []).append(edge)
        return list(self._edges)  # (the kernel finds them in the samples' order)

    def emit(self, k: int) -> None:
        for _, d, low, ref, took in self._edges.get(k, ()):
            entry = self._entries[k]
            port, ts, dt = entry[0], entry[1], entry[2]
            self._report(port, ts, dt, _DIRS[d][1], low, ref, took)

    def _report(self, port: str, ts: int, dt: int, label: str, low: float, ref: float, took: int) -> None:
        """A dip that lasted at most max_duration, the port back above the line."""
        cfg = self.cfg
        speed = self.ctx.speeds.get(port)
        share = low / ref
        text = (f"{port}: {label} throughput dipped to {share:.0%} of its "
                f"{fmt_duration(cfg.baseline)} level for {fmt_duration(took / NS)} "
                f"({low:.0%} vs {ref:.0%} of {speed / 1e9:g}G); look for errors, drops "
                "or pause on this port and its peer")
        self.ctx.hit(self, "throughput-dip", port, ts - dt, WARNING, 1.0 - share,
                     "share-of-level-lost", text, [port])

    def sample(self, port, ts, dt, acc, owned) -> None:
        """One sample alone (the feeds pass samples through ``batch``)."""
        self.batch_of_one(port, ts, dt, acc, owned)

    def forget(self, port: str) -> None:
        row = self.rows.get(port)
        if row is not None:  # its row starts afresh should the port come back
            self.reals[row * ROW_REALS:(row + 1) * ROW_REALS] = _NEW_REALS
            self.ints[row * ROW_INTS:(row + 1) * ROW_INTS] = _NEW_INTS
