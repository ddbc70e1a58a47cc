"""``swtel validate [FILE]``: check a config file without running the agent.

Problems (exit 1) are what the agent would refuse. Warnings (exit 0, on stderr before
``OK``) are what may be fine once the agent runs but looks wrong on this host now:
an imbalance group member that no interface of this host (nor the built-in sim's
layout) is called (ports appear at run time; the agent logs a member that never
appears once, after its start); a duration written as a bare number of 10 or more
(``interval: 100`` is 100 seconds: "100ms" was likely meant); and, when validate runs
as root, a file the config names that the service's user (``--user``, default
``swtel``) cannot read: the unit runs the agent as that user, so it would fail there.
Also an enabled source that needs a capability this process lacks (devlink: CAP_NET_ADMIN):
run as ExecStartPre, this process has what the unit gives the agent; run as root, what the
units' drop-ins grant.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import grp
import os
import pwd
import sys
from collections.abc import Iterator
from typing import Any

import yaml

import agent.plugins  # noqa: F401  (fills the registries the config is read with)
from agent import caps, config
from agent.control.printable import printable
from agent.insights.imbalance import is_glob
from agent.sources import REGISTRY as SOURCES
from agent.sources.asic import ASIC_BUILTIN

SYS_NET = "/sys/class/net"


SERVICE_USER = "swtel"  # the packaged unit's User=
BARE_DURATION_WARN = 10  # a bare number of seconds at least this big reads like milliseconds


def validate_main(args: Any) -> int:
    file, option = getattr(args, "file", None), getattr(args, "config", None)
    if file and option and file != option:
        print(printable(f"two config files given ({file} and -c {option}): name one"), file=sys.stderr)
        return 2
    path = file or option or config.DEFAULT_PATH
    snippets = nvue_snippets(path)
    if snippets is not None:
        return _validate_snippets(path, snippets)
    try:
        cfg = config.load(path, plugin_file=True)
    except config.ConfigError as exc:
        for problem in exc.problems:  # keys and the sim's words quote the file: never terminal control
            print(printable(problem), file=sys.stderr)
        print(printable(f"{path}: {len(exc.problems)} problem(s)"), file=sys.stderr)
        return 1
    found = warnings(cfg)
    found += bare_durations(cfg)
    found += unreadable_for(cfg, getattr(args, "user", None) or SERVICE_USER)
    for warning in found:
        print(printable(f"warning: {warning}"), file=sys.stderr)
    print("OK")
    return 0


def nvue_snippets(path: str) -> list[tuple[str, str, str]] | None:
    """When ``path`` is an NVUE patch file: its flexible snippets that write a swtel config
    (name, target file, content); None when it is not a patch file."""
    try:
        data = yaml.load(config.read_text(path), Loader=config._Loader)  # noqa: S506 - SafeLoader subclass
    except (config.ConfigError, yaml.YAMLError, RecursionError):
        return None  # not readable as YAML: the normal load reports why
    if not config.nvue_patch(data):
        return None
    out = []
    for item in data:
        snippets = (((item.get("set") or {}).get("system") or {}).get("config") or {}).get("snippet") or {}
        if not isinstance(snippets, dict):
            continue
        for name, snippet in snippets.items():
            if isinstance(snippet, dict) and str(snippet.get("file", "")).startswith("/etc/swtel/"):
                out.append((str(name), str(snippet["file"]), str(snippet.get("content") or "")))
    return out


def _validate_snippets(path: str, snippets: list[tuple[str, str, str]]) -> int:
    """An NVUE patch file: say so, and check the swtel config each snippet writes."""
    print(printable(f"{path} is an NVUE patch file (for `nv config patch`), not a swtel config; "
                    f"checking the swtel config its {len(snippets)} snippet(s) write"), file=sys.stderr)
    if not snippets:
        print(printable(f"{path}: no snippet writes a file under /etc/swtel/"), file=sys.stderr)
        return 1
    bad = 0
    for name, target, content in snippets:
        where = f"snippet {name} ({target})"
        try:
            config.parse(content, where, plugin_file=True)
        except config.ConfigError as exc:
            bad += 1
            for problem in exc.problems:
                print(printable(f"{where}: {problem}"), file=sys.stderr)
    if bad:
        print(printable(f"{path}: {bad} snippet(s) with problems"), file=sys.stderr)
        return 1
    print("OK")
    return 0


def _walk(raw: Any, obj: Any, where: str) -> Iterator[tuple[str, Any, Any]]:
    """The config file's values beside what the loader made of them: (YAML path, raw, loaded)."""
    if isinstance(raw, dict):
        for key, value in raw.items():
            if not isinstance(key, str):
                continue
            if dataclasses.is_dataclass(obj):
                child = getattr(obj, key, None)
            elif isinstance(obj, dict):
                child = obj.get(key)
            else:
                continue
            sub = f"{where}.{key}" if where else key
            yield sub, value, child
            yield from _walk(value, child, sub)
    elif isinstance(raw, list) and isinstance(obj, list | tuple):
        for i, (value, child) in enumerate(zip(raw, obj, strict=False)):
            sub = f"{where}[{i}]"
            yield sub, value, child
            yield from _walk(value, child, sub)


def bare_durations(cfg: config.Config) -> list[str]:
    """Durations written as a bare number of 10 or more: seconds, where ms were likely meant."""
    if not getattr(cfg, "path", None):
        return []
    try:
        raw = yaml.load(config.read_text(cfg.path), Loader=config._Loader)  # noqa: S506 - SafeLoader subclass
    except (config.ConfigError, yaml.YAMLError, RecursionError):
        return []  # it loaded a moment ago; changed since: the agent's own load will say
    out = []
    for where, value, loaded in _walk(raw, cfg, ""):
        if (isinstance(loaded, config.Duration) and isinstance(value, int | float)
                and not isinstance(value, bool) and value >= BARE_DURATION_WARN):
            number = int(value) if float(value).is_integer() else value
            out.append(f"{where}: {number} is {number} seconds; did you mean {number}ms? "
                       f"(write {number}s to keep seconds and silence this)")
    return out


def config_files(cfg: Any, where: str = "") -> Iterator[tuple[str, str]]:
    """Every file the config names for the agent to read: (YAML path, file path); the keys
    documented as a ``path``, such as TLS files and password files."""
    if dataclasses.is_dataclass(cfg):
        for f in dataclasses.fields(cfg):
            value = getattr(cfg, f.name, None)
            sub = f"{where}.{f.name}" if where else f.name
            if isinstance(value, str):
                if f.metadata.get("type", "").startswith("path") and value:
                    yield sub, value
            else:
                yield from config_files(value, sub)
    elif isinstance(cfg, list | tuple):
        for i, item in enumerate(cfg):
            yield from config_files(item, f"{where}[{i}]")
    elif isinstance(cfg, dict):
        for key, item in cfg.items():
            if dataclasses.is_dataclass(item) or isinstance(item, list | dict):
                yield from config_files(item, f"{where}.{key}")


def unreadable_for(cfg: config.Config, user: str) -> list[str]:
    """When run as root: the config's files that ``user`` (the unit's User=) cannot open.
    Root reads everything, so validate would say OK where the service then fails."""
    if os.geteuid() != 0:
        return []  # validate runs as the user that will read them: the load already checked
    try:
        pw = pwd.getpwnam(user)
    except KeyError:
        return []  # no such user here (not installed from the package): nothing to compare
    files = [(where, path) for where, path in config_files(cfg) if _section_used(cfg, where)]
    if not files:
        return []
    denied = _open_as(pw, [path for _w, path in files])
    try:
        group = grp.getgrgid(pw.pw_gid).gr_name
    except KeyError:
        group = str(pw.pw_gid)
    return [f"{where}: user {user} (the service's) cannot read {path}: {denied[path]}; "
            f"make it readable by group {group} (chgrp {group} {path}; chmod g+r {path}) "
            "and its directories searchable"
            for where, path in files if path in denied]


def _section_used(cfg: config.Config, where: str) -> bool:
    """A file of an exporter or source that is not enabled is never read: not worth a warning."""
    parts = where.split(".")
    if len(parts) >= 2 and parts[0] in ("sources", "exporters"):
        section = getattr(getattr(cfg, parts[0]), parts[1].split("[")[0], None)
        if section is None or getattr(section, "enabled", True) is False:
            return False
        if getattr(section, "insecure", False) and ".tls." in where:
            return False
    return True


def _open_as(pw: pwd.struct_passwd, paths: list[str]) -> dict[str, str]:
    """Try to open each path as ``pw``'s user, in a forked child (the kernel decides: modes,
    ACLs and every parent directory's x bit count, as they will for the service)."""
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: drop to the user, try, report, exit without cleanup handlers
        code = 0
        try:
            os.close(read_fd)
            os.setgroups(os.getgrouplist(pw.pw_name, pw.pw_gid))
            os.setgid(pw.pw_gid)
            os.setuid(pw.pw_uid)
            lines = []
            for i, path in enumerate(paths):
                try:
                    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY)
                    os.close(fd)
                except OSError as exc:
                    lines.append(f"{i}\t{exc.strerror}")
            os.write(write_fd, "\n".join(lines).encode()[:65536])
        except BaseException:  # noqa: BLE001 - the child must never return into the caller
            code = 1
        finally:
            os._exit(code)
    os.close(write_fd)
    with os.fdopen(read_fd, "rb") as fh:
        data = fh.read(65537)
    _pid, status = os.waitpid(pid, 0)
    if not os.WIFEXITED(status) or os.WEXITSTATUS(status) != 0:
        return {}  # could not drop privileges here: say nothing rather than guess
    out = {}
    for line in data.decode(errors="replace").splitlines():
        index, _tab, reason = line.partition("\t")
        if index.isdigit() and int(index) < len(paths):
            out[paths[int(index)]] = reason
    return out


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
