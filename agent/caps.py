"""Linux capabilities a source needs, and whether this process has them.

A source that needs one (``Source.capabilities``: devlink's shared-buffer snapshot and
max-clear need CAP_NET_ADMIN) says so plainly in status and in ``swtel validate`` instead of
counting a failed call per poll. The check reads the effective set of this process
(``CapEff`` of /proc/self/status): what the kernel checks, whatever gave it (root, the
unit's AmbientCapabilities=, setpriv). The packaged units grant nothing; the drop-in below
grants CAP_NET_ADMIN (docs/packaging.md, "Capabilities").
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterable

CAP_NET_ADMIN = 12  # linux/capability.h
NAMES = {CAP_NET_ADMIN: "CAP_NET_ADMIN"}
#: the drop-ins the package installs, disabled (docs/packaging.md)
DROPIN_DIR = "/usr/share/swtel/systemd"
DROPIN = f"{DROPIN_DIR}/devlink-caps.conf"  # for swtel.service
DROPIN_VRF = f"{DROPIN_DIR}/devlink-caps@.conf"  # for swtel@.service
UNIT_DIRS = ("/etc/systemd/system", "/run/systemd/system")  # where an operator's drop-in goes
ENABLE_HINT = (f"enable the packaged drop-in: install -D -m 0644 {DROPIN} "
               "/etc/systemd/system/swtel.service.d/devlink-caps.conf (for swtel@mgmt: "
               f"{DROPIN_VRF} as /etc/systemd/system/swtel@.service.d/devlink-caps.conf), then "
               "systemctl daemon-reload and restart (docs/devlink.md)")


def effective(status_path: str = "/proc/self/status") -> int | None:
    """This process's effective capability set (a bit mask), or None when it cannot be read."""
    try:
        with open(status_path, encoding="ascii", errors="replace") as f:
            for line in f:
                if line.startswith("CapEff:"):
                    return int(line.split(":", 1)[1].strip(), 16)
    except (OSError, ValueError):
        return None
    return None


#: how the checks read the set: tests put their own here
reader: Callable[[], int | None] = effective


def missing(needed: Iterable[int], have: int | None = None) -> list[str]:
    """Names of the capabilities of ``needed`` not in ``have`` (default: this process's
    effective set); none when the set cannot be read (no false alarm)."""
    have = reader() if have is None else have
    if have is None:
        return []
    return [NAMES.get(cap, f"CAP_{cap}") for cap in needed if not have >> cap & 1]


_AMBIENT = re.compile(r"^\s*AmbientCapabilities\s*=(.*)$", re.M)
_EXEC_AMBIENT = re.compile(r"^\s*ExecStart\s*=.*--ambient-caps[= ](\S+)", re.M)


def unit_grants(cap: int, unit_dirs: Iterable[str] = UNIT_DIRS) -> dict[str, str]:
    """The units of swtel (``swtel.service``, ``swtel@.service``, ``swtel@mgmt.service``) whose
    drop-ins under ``unit_dirs`` grant ``cap`` to the agent, with the file that does: for
    swtel.service an AmbientCapabilities= naming it; for a swtel@ unit, whose agent setpriv
    starts from root, an ExecStart= adding it to setpriv's ambient set. What a root ``swtel
    validate`` can say for the units, whose user (swtel) has no capability of its own."""
    name = NAMES.get(cap, f"CAP_{cap}")
    short = "+" + name.removeprefix("CAP_").lower()
    out: dict[str, str] = {}
    for base in unit_dirs:
        try:
            dirs = sorted(d for d in os.listdir(base) if d.startswith("swtel") and d.endswith(".service.d"))
        except OSError:
            continue
        for d in dirs:
            unit = d.removesuffix(".d")
            try:
                files = sorted(f for f in os.listdir(os.path.join(base, d)) if f.endswith(".conf"))
            except OSError:
                continue
            for f in files:
                path = os.path.join(base, d, f)
                try:
                    with open(path, encoding="utf-8", errors="replace") as fh:
                        text = fh.read(65536)
                except OSError:
                    continue
                if "@" in unit:
                    grants = any(short in m.split(",") for m in _EXEC_AMBIENT.findall(text))
                else:
                    grants = any(name in m.split() for m in _AMBIENT.findall(text))
                if grants:
                    out.setdefault(unit, path)
    return out
