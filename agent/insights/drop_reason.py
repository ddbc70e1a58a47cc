"""Drops by reason (config ``insights.drop_reason``), event ``drop-reason``.

Per port and reason (``swtel:/interfaces/interface[name=X]/drops/group[name=G]/reason[name=R]/
state/packets``: the simulated switch's What-Just-Happened-style counters, a plugin's, a
trap source's), at least ``threshold`` packets within ``window`` raise one event naming
the reason, its group, the port and the rate, with what to check for that reason. A
buffer drop names the port's congested queue and its ``congestion`` event when one is
open. The group and reason names follow What Just Happened (groups ``l1``, ``l2``, ``l3``,
``tunnel``, ``buffer``, ``acl``) and devlink's trap names, kebab-cased.
"""

from __future__ import annotations

from dataclasses import dataclass

from agent.config import setting
from agent.insights import classify as c
from agent.insights.base import (
    NS,
    THRESHOLD_TYPE,
    WARNING,
    Detector,
    Rules,
    Window,
    WindowedConfig,
    fmt_count,
    fmt_duration,
    register,
)

#: what to check, by reason (the most common ones), else by group
ADVICE = {
    "ingress-vlan-filter": "frames on a VLAN the port is not a member of: check the VLAN membership at both ends",
    "ingress-spanning-tree-filter": "the port is blocked by spanning tree: check STP state and the topology",
    "source-mac-is-multicast": "frames with a multicast source MAC: find the misbehaving sender",
    "port-loopback-filter": "frames sent back to the port they came from: check for a loop",
    "blackhole-route": "traffic to a blackhole route: check the routing policy",
    "unresolved-neigh": "the next hop has no ARP/ND entry: check the neighbour is up and answering",
    "ttl-value-is-too-small": "TTL expired in the switch: look for a routing loop",
    "ipv4-lpm-miss": "no IPv4 route for the destination: check the routing table",
    "ipv6-lpm-miss": "no IPv6 route for the destination: check the routing table",
    "mtu-value-is-too-small": "packets larger than the egress MTU: check the MTU along the path",
    "tail-drop": "the egress queue was full: check the congested queue, incast, and its ECN/PFC thresholds",
    "early-drop": "WRED dropped before the queue filled: check the queue's ECN/WRED profile",
    "port-admin-down": "traffic to a port that is administratively down",
    "bad-signal-integrity": "the link's signal is bad: clean or replace the cable or optic",
}
GROUP_ADVICE = {
    "l1": "a physical-layer drop: check the link, cable and optic",
    "l2": "a layer-2 drop: check VLANs, STP and MAC learning on the port",
    "l3": "a routing drop: check routes, neighbours and MTU",
    "tunnel": "a tunnel (VXLAN) drop: check the tunnel's configuration at both ends",
    "buffer": "a buffer drop: check the congested queue, incast, and its ECN/PFC thresholds",
    "acl": "dropped by an ACL: check the rules applied to the port",
}


@dataclass
class DropReasonConfig(WindowedConfig):
    """``insights.drop_reason``: packets a port dropped for one reason (What Just Happened,
    devlink traps), per reason."""

    threshold: int = setting(100, type=THRESHOLD_TYPE, doc=(
        "packets dropped for one reason within `window`"))


@register
class DropReason(Detector):
    name = "drop_reason"
    config_class = DropReasonConfig
    doc = "packets dropped for one reason (What Just Happened, devlink traps)"
    reads = ("asic", "devlink_trap")
    types = ("drop-reason",)
    sems = frozenset({c.DROP_REASON})
    every_sample = False  # only samples in which a reason counted something

    @classmethod
    def check(cls, section: DropReasonConfig, where: str, problems: list[str], cfg) -> None:
        rules = Rules(section, where, problems)
        rules.threshold()
        rules.positive("window")
        super().check(section, where, problems, cfg)

    def __init__(self, cfg, ctx) -> None:
        super().__init__(cfg, ctx)
        self.span = int(cfg.window * NS)
        self.windows: dict[tuple[str, str], Window] = {}  # (port, "group/reason") -> its window

    def sample(self, port, ts, dt, acc, owned) -> None:
        if c.DROP_REASON not in owned:
            return
        scale = min(1.0, self.span / dt)  # a sample longer than the window counts pro rata
        for (sem, sub), n in acc.items():
            if sem != c.DROP_REASON or not n:
                continue
            win = self.windows.get((port, sub))
            if win is None:
                win = self.windows[(port, sub)] = Window(self.span)
            win.add(ts, n * scale)
            if win.trim(ts) >= self.cfg.threshold:
                self._report(port, sub, win.total, ts)

    def end_pass(self, ts: int) -> None:
        # windows that emptied: their reasons stopped counting
        for key in [k for k, w in self.windows.items() if not w.trim(ts) and not w.items]:
            del self.windows[key]

    def _report(self, port: str, sub: str, total: float, ts: int) -> None:
        group, _, reason = sub.partition("/")
        rate = total / float(self.cfg.window)
        advice = ADVICE.get(reason) or GROUP_ADVICE.get(group, "check the port's configuration and its peer")
        if group == "buffer":
            queues = [ev for ev in self.ctx.open_events()
                      if ev.type == "congestion" and isinstance(ev.key, tuple) and ev.key[0] == port]
            if queues:
                advice = "; ".join(f"queue {ev.key[1]} is congested (event {ev.id})" for ev in queues) + \
                         f"; {advice}"
        text = (f"{port}: {fmt_count(total)} packets dropped within {fmt_duration(self.cfg.window)} for "
                f"{reason} ({group} drops, {fmt_count(rate)}/s); {advice}")
        self.ctx.hit(self, "drop-reason", (port, sub), ts, WARNING, rate, "packets/s", text, [port])

    def forget(self, port: str) -> None:
        for key in [k for k in self.windows if k[0] == port]:
            del self.windows[key]
