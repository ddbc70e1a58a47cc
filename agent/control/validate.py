"""``swtel validate [FILE]``: check a config file without running the agent.

Problems (exit 1) are what the agent would refuse. Warnings (exit 0, on stderr before
``OK``) are what may be fine once the agent runs but looks wrong on this host now:
an imbalance group member that no interface of this host (nor the built-in sim's
layout) is called. Ports appear at run time, so this can only be a warning; the
agent logs a member that never appears once, after its start. And an enabled source that
needs a capability this process lacks (devlink: CAP_NET_ADMIN): run as ExecStartPre, this
process has what the unit gives the agent; run as root, what the units' drop-ins grant.
"""

from __future__ import annotations

import fnmatch
import os
import sys
from typing import Any

import agent.plugins  # noqa: F401  (fills the registries the config is read with)
from agent import caps, config
from agent.control.printable import printable
from agent.insights.imbalance import is_glob
from agent.sources import REGISTRY as SOURCES
from agent.sources.asic import ASIC_BUILTIN

SYS_NET = "/sys/class/net"


def validate_main(args: Any) -> int:
    path = getattr(args, "file", None) or config.DEFAULT_PATH
    try:
        cfg = config.load(path, plugin_file=True)
    except config.ConfigError as exc:
        for problem in exc.problems:  # keys and the sim's words quote the file: never terminal control
            print(printable(problem), file=sys.stderr)
        print(printable(f"{path}: {len(exc.problems)} problem(s)"), file=sys.stderr)
        return 1
    for warning in warnings(cfg):
        print(printable(f"warning: {warning}"), file=sys.stderr)
    print("OK")
    return 0


def warnings(cfg: config.Config, sys_net: str = SYS_NET) -> list[str]:
    """What looks wrong on this host now but may not be wrong at run time."""
    out: list[str] = capability_warnings(cfg)
    imb = cfg.insights.imbalance
    if not (cfg.insights.enabled and imb.enabled and imb.groups):
        return out
    known = known_ports(cfg, sys_net)
    if known is None:
        return out
    names, where = known
    for group, ports in imb.groups.items():
        for port in ports:
            if not any(fnmatch.fnmatchcase(n, port) for n in names):
                what = "no port matches it" if is_glob(port) else "no such port"
                out.append(f"insights.imbalance.groups.{group}: {port!r}: {what} in {where} now; "
                           "the group is judged without it (the agent logs it once if it never appears)")
    return out


def capability_warnings(cfg: config.Config, have: int | None = None, euid: int | None = None,
                        unit_dirs: tuple[str, ...] = caps.UNIT_DIRS) -> list[str]:
    """Each enabled source that needs a capability the agent would lack. ``have``: the
    effective set (default: this process's, agent/caps.py); as root, which has every one, the
    question is the units': they run the agent as user swtel, who has one only from a drop-in."""
    out = []
    root = (os.geteuid() if euid is None else euid) == 0
    for name, cls in SOURCES.items():
        section = getattr(cfg.sources, name, None)
        if section is None or not section.enabled or not cls.capabilities:
            continue
        lacking = caps.missing(cls.capabilities, have)
        if lacking:
            out.append(f"sources.{name}: needs {', '.join(lacking)}, which this process does not have: "
                       f"the agent would read nothing from it and status would show the fault; {caps.ENABLE_HINT}")
            continue
        if not root:
            continue
        for cap in cls.capabilities:
            if not caps.unit_grants(cap, unit_dirs):
                need = caps.NAMES.get(cap, f"CAP_{cap}")
                out.append(f"sources.{name}: needs {need}; root has it, but swtel.service and swtel@.service "
                           f"run the agent as user swtel, and no drop-in in {unit_dirs[0]}/swtel.service.d/ "
                           f"or swtel@.service.d/ grants it: {caps.ENABLE_HINT}")
    return out


def known_ports(cfg: config.Config, sys_net: str = SYS_NET) -> tuple[set[str], str] | None:
    """The port names the enabled sources would report on this host now, and where they were
    looked up; None when that cannot be known (a vendor ASIC plugin is enabled)."""
    src = cfg.sources
    names: set[str] = set()
    where: list[str] = []
    if src.asic.enabled:
        if src.asic.plugin not in ASIC_BUILTIN:
            return None
        sim = _sim_ports(src.asic.config)
        if sim is None:
            return None
        names |= sim
        where.append("the sim's layout")
    if src.netdev.enabled or src.ethtool.enabled:
        try:
            names |= set(os.listdir(sys_net))
        except OSError:
            return None
        where.append("this host's interfaces")
    if not where:
        return None
    return names, " or ".join(where)


def _sim_ports(sim_config: str) -> set[str] | None:
    from agent import _backend
    from agent.asic import builtin_path

    path = builtin_path("sim")
    if path is None:
        return None
    try:
        handle = _backend.reader.asic_open(path, sim_config)
    except (OSError, ValueError):
        return None
    try:
        _gen, ports, _counters = _backend.reader.asic_layout(handle)
    except OSError:
        return None
    finally:
        _backend.reader.asic_close(handle)
    return {p[0] for p in ports}
