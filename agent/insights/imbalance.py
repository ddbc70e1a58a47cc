"""Uplink/ECMP imbalance (config ``insights.imbalance``), event ``imbalance``: the
leaf-misconfiguration incident.

For each configured group (ports or globs), every ``window`` of sample time each
member's tx rate is its tx octets over the time its samples covered (a member seen
before but silent in the window counts as 0). The window is over when max/mean of the
rates exceeds ``max_over_mean`` or their coefficient of variation (std/mean)
exceeds ``cv``, and only when the mean is at least ``min_mean_bps`` (an idle group
says nothing). ``windows`` over-windows in a row raise the event; it names the
hottest member. With one of N uplinks carrying 2/N of the bytes, max/mean is 2 and
the CV 1/sqrt(N-1) (0.58 for N=4, 0.38 for N=8).

A member (a port name or a glob) that no source has reported ``MEMBER_GRACE_NS`` (10 s of
sample time) after the detector started is logged once, as a warning: a group whose
members never exist can never fire.
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass

from agent.config import Duration, _short, setting
from agent.insights import classify as c
from agent.insights.base import (
    CLEAR_AFTER_TYPE,
    MAX_WINDOWS,
    NS,
    WARNING,
    WINDOW_TYPE,
    WINDOWS_TYPE,
    Detector,
    Rules,
    fmt_bps,
    fmt_duration,
    register,
)

MEMBER_GRACE_NS = 10 * NS  # sources report their ports at their first read, within an interval


class _Group:
    __slots__ = ("name", "patterns", "octets", "covered", "start", "streak")

    def __init__(self, name: str, patterns: list[str]) -> None:
        self.name = name
        self.patterns = patterns
        self.octets: dict[str, int] = {}  # member -> tx octets in this window
        self.covered: dict[str, int] = {}  # member -> ns of samples in this window
        self.start = 0
        self.streak = 0


def is_glob(pattern: str) -> bool:
    return any(c in pattern for c in "*?[")


@dataclass
class ImbalanceConfig:
    """``insights.imbalance``: uneven transmit load across a group of uplinks (ECMP members)."""

    enabled: bool = setting(True)
    groups: dict[str, list[str]] = setting(factory=dict, type="mapping of name → list of ports (globs)", doc=(
        "port groups, e.g. `{spines: [swp51, swp52, swp53, swp54]}`; a group needs ≥ 2 different ports "
        "(or a glob), names each port once (a port listed twice is refused) and no empty name; every "
        "group's problems are reported, also when another group is not a list. A member no port "
        "matches is a warning of `swtel validate` and logged once by the agent (above)"))
    max_over_mean: float = setting(1.5, type="number, 1 < x ≤ 1000", doc=(
        "fire when the busiest member's tx rate exceeds the members' mean by this factor ..."))
    cv: float = setting(0.5, type="number, 0 < x ≤ 100", doc=(
        "... or the coefficient of variation (std/mean) of the rates exceeds this"))
    window: Duration = setting(Duration(1.0), type=WINDOW_TYPE, doc="one measurement window")
    windows: int = setting(3, type=WINDOWS_TYPE, doc="consecutive windows over a threshold before the event is raised")
    min_mean_bps: float = setting(1e8, type="number, 0–10^13", shown="`100000000`", doc=(
        "ignore a group whose mean member rate (bits/s) is below this (idle links are not imbalanced)"))
    clear_after: Duration = setting(Duration(60.0), type=CLEAR_AFTER_TYPE, shown="`1m`")


@register
class Imbalance(Detector):
    name = "imbalance"
    config_class = ImbalanceConfig
    doc = "uneven load across uplinks (the leaf-misconfiguration incident)"
    reads = ("netdev", "ethtool", "asic")

    @classmethod
    def check(cls, section: ImbalanceConfig, where: str, problems: list[str], cfg) -> None:
        rules = Rules(section, where, problems)
        if rules.finite("max_over_mean") and section.max_over_mean <= 1:
            problems.append(f"{where}.max_over_mean: must be greater than 1, got {section.max_over_mean}")
        rules.at_most("max_over_mean", 1000)
        rules.positive("cv")
        rules.at_most("cv", 100)
        rules.at_most("min_mean_bps", 1e13)
        rules.positive("window")
        if rules.finite("min_mean_bps") and section.min_mean_bps < 0:
            problems.append(f"{where}.min_mean_bps: must not be negative, got {section.min_mean_bps}")
        for group, ports in section.groups.items():
            twice = sorted({p for p in ports if ports.count(p) > 1})
            if twice:
                problems.append(f"{where}.groups.{group}: names {', '.join(map(repr, twice))} more than "
                                "once (a member counts once: list each port once)")
            if len(set(ports)) < 2 and not any(is_glob(p) for p in ports):
                got = repr(ports) if len(ports) <= 4 else _short(ports)
                problems.append(f"{where}.groups.{group}: needs at least 2 ports, got {got}")
            for i, port in enumerate(ports):
                if not port.strip():
                    problems.append(f"{where}.groups.{group}[{i}]: must not be empty")
        rules.count("windows", 1, MAX_WINDOWS)
        super().check(section, where, problems, cfg)
    types = ("imbalance",)
    sems = frozenset({c.TX_OCTETS})
    per_port = False

    def __init__(self, cfg, ctx) -> None:
        super().__init__(cfg, ctx)
        self.span = int(cfg.window * NS)
        self.groups = [_Group(name, list(ports)) for name, ports in cfg.groups.items()]
        self._member_of: dict[str, list[_Group]] = {}
        self._since = 0  # the first pass's time; the members are looked for once, a grace later
        self._members_checked = not self.groups

    def _groups_of(self, port: str) -> list[_Group]:
        out = self._member_of.get(port)
        if out is None:
            out = self._member_of[port] = [
                g for g in self.groups if any(fnmatch.fnmatchcase(port, p) for p in g.patterns)
            ]
        return out

    def wants(self, port: str) -> bool:
        return bool(self._groups_of(port))

    def sample(self, port, ts, dt, acc, owned) -> None:
        if c.TX_OCTETS not in owned:
            return
        groups = self._groups_of(port)
        if not groups:
            return
        octets = acc.get((c.TX_OCTETS, ""), 0)
        for g in groups:
            g.octets[port] = g.octets.get(port, 0) + octets
            g.covered[port] = g.covered.get(port, 0) + dt
            if not g.start:
                g.start = ts - dt

    def end_pass(self, ts: int) -> None:
        if not self._members_checked:
            if not self._since:
                self._since = ts
            elif ts - self._since >= MEMBER_GRACE_NS:
                self._members_checked = True
                self._check_members(ts - self._since)
        for g in self.groups:
            if g.start and ts - g.start >= self.span * 9 // 10:
                self._judge(g, ts)

    def _check_members(self, waited_ns: int) -> None:
        """Log, once, every member no source has reported: a typo or a port this device lacks."""
        names = self.ctx.port_names()
        for g in self.groups:
            for pattern in g.patterns:
                if not any(fnmatch.fnmatchcase(n, pattern) for n in names):
                    self.ctx.log.warning("imbalance group member not found", group=g.name, port=pattern,
                                         waited_s=round(waited_ns / NS, 1),
                                         message=f"group {g.name}: no port matches {pattern!r}; the group "
                                                 "is judged without it (check insights.imbalance.groups)")

    def _judge(self, g: _Group, ts: int) -> None:
        cfg = self.cfg
        rates = {p: (g.octets[p] * 8 * NS / g.covered[p] if g.covered[p] else 0.0) for p in g.octets}
        # what the window really spanned (at least the configured one), for the message
        spanned = (ts - g.start) / NS
        span = cfg.window if spanned < 1.5 * cfg.window else round(spanned, 3)
        g.start = ts
        for p in g.octets:
            g.octets[p] = 0
            g.covered[p] = 0
        n = len(rates)
        if n < 2:
            g.streak = 0
            return
        mean = sum(rates.values()) / n
        if mean <= 0 or mean < cfg.min_mean_bps:
            g.streak = 0
            return
        hot = max(sorted(rates), key=rates.__getitem__)
        ratio = rates[hot] / mean
        cv = (sum((r - mean) ** 2 for r in rates.values()) / n) ** 0.5 / mean
        if ratio <= cfg.max_over_mean and cv <= cfg.cv:
            g.streak = 0
            return
        g.streak += 1
        if g.streak < cfg.windows:
            return
        text = (f"group {g.name}: {hot} carries {ratio:.1f}x the mean tx rate of its {n} members "
                f"({fmt_bps(rates[hot])} vs {fmt_bps(mean)}, CV {cv:.2f}, over {cfg.windows} x "
                f"{fmt_duration(span)}); compare this switch's ECMP/hash and routing config "
                "with its peers'")
        self.ctx.hit(self, "imbalance", g.name, ts, WARNING, ratio, "max/mean", text, [hot])

    def forget(self, port: str) -> None:
        for g in self._member_of.pop(port, []):
            g.octets.pop(port, None)
            g.covered.pop(port, None)
