"""YAML configuration: the typed loader, the value types, the whole file's rules.

Every error names the YAML path of the offending value, e.g.
``exporters.dialout[0].address: expected host:port, got 'foo'``. Unknown keys
are errors. An empty file is a valid config. The documented default config is
``packaging/swtel.yaml``; docs/config.md documents every key.

The sections ``sources.*``, ``exporters.*`` and ``insights.*`` are the plugins': each
plugin's file declares its dataclass and its ``check`` and registers them
(agent/registry.py); ``Config`` is built from the registries (``_schema``), which
agent.plugins fills. This module keeps the top level, ``control`` and ``log``.

Conventions of the schema:

* a dataclass field is a YAML key (``-`` in keys is accepted for ``_``);
* ``X | None`` fields accept an explicit ``null`` (meaning "default"/"off" as
  each field documents); other fields reject ``null``;
* an optional section (``exporters.jsonl``, ``exporters.server``) is turned on
  by its presence, even when empty (``server: {}`` or ``server:``).
"""

from __future__ import annotations

import ipaddress
import os
import re
import socket
import stat
from dataclasses import MISSING, dataclass, field, fields, is_dataclass, make_dataclass
from typing import Any, get_args, get_origin, get_type_hints

import yaml

from agent import registry
from agent.yamlsafe import MAX_DEPTH, MAX_VALUES  # noqa: F401  (the limits, re-exported)
from agent.yamlsafe import Loader as _Loader

DEFAULT_PATH = "/etc/swtel/swtel.yaml"
DEFAULT_SOCKET = "/run/swtel/swtel.sock"
MIN_INTERVAL_S = 0.010
# Limits (docs/config.md, "Limits"): what a config file may cost to read, whoever wrote it.
MAX_FILE_BYTES = 256 * 1024  # a config file larger than this is refused unread
MAX_ITEMS = 1024  # entries of any one list or mapping
MAX_STRING = 4096  # characters of any string (PATH_MAX)
MAX_TARGET = 255  # characters of `target`
MAX_DURATION_S = 86400.0  # any duration: at most 24h
MAX_INTERVAL_S = 3600.0  # poll intervals: at most 1h
MAX_HISTORY = 10_000  # insights.history
MAX_PEM_BYTES = 1024 * 1024  # TLS files read by validate
FORBIDDEN_PORT = 9339  # Cumulus' own gNMI server and NetQ's gNMI agent: no listener of the agent's
_SUN_PATH_MAX = 107  # sockaddr_un.sun_path is 108 bytes including the NUL


class ConfigError(ValueError):
    """One or more configuration problems, each starting with its YAML path."""

    def __init__(self, problems: list[str]):
        self.problems = problems
        super().__init__("\n".join(problems))


def _short(value: Any, limit: int = 60) -> str:
    """A value for an error message: never the repr of a whole (possibly huge) list or mapping,
    never more than ``limit`` characters of a scalar."""
    if isinstance(value, dict):
        return f"a mapping of {len(value)} keys"
    if isinstance(value, list):
        return f"a list of {len(value)} items"
    text = repr(value[: limit + 1]) if isinstance(value, str | bytes) else repr(value)
    return text if len(text) <= limit else text[: limit - 4] + "...'"


def _finite(value: float) -> bool:
    return value == value and value not in (float("inf"), float("-inf"))


# ---------------------------------------------------------------- value types


class Duration(float):
    """Seconds, written in YAML as ``100ms``, ``2s``, ``1m``, ``1h`` or a bare number of seconds."""

    _RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(us|ms|s|m|h)?\s*$")
    _UNIT = {"us": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0, None: 1.0}

    @classmethod
    def parse(cls, value: Any) -> Duration:
        """A finite duration from 0 to 24h (:data:`MAX_DURATION_S`)."""
        seconds: float | None = None
        if isinstance(value, bool):
            pass
        elif isinstance(value, int | float):
            seconds = float(value) if not isinstance(value, int) or abs(value) < 10**30 else float("inf")
        elif isinstance(value, str) and len(value) <= 64:
            if value.strip().startswith("-"):
                raise ValueError(f"must not be negative, got {_short(value)}")
            m = cls._RE.match(value)
            if m:
                seconds = float(m.group(1)) * cls._UNIT[m.group(2)]
        if seconds is None:
            raise ValueError(f"expected a duration like 100ms or 2s, got {_short(value)}")
        if not _finite(seconds):
            raise ValueError(f"must be a finite duration, got {_short(value)}")
        if seconds < 0:
            raise ValueError(f"must not be negative, got {_short(value)}")
        if seconds > MAX_DURATION_S:
            raise ValueError(f"must be at most 24h, got {_short(value)}")
        return cls(seconds)

    def __str__(self) -> str:
        if self >= 1 and float(self).is_integer():
            return f"{int(self)}s"
        return f"{round(self * 1000, 3):g}ms"


class HostPort(str):
    """``host:port`` or ``[v6addr]:port``."""

    _HOST = re.compile(r"^[A-Za-z0-9_](?:[A-Za-z0-9_.-]{0,252}[A-Za-z0-9_])?$")

    @classmethod
    def parse(cls, value: Any) -> HostPort:
        """``host:port`` where host is a host name, an IPv4 address or ``[IPv6]``, port 1-65535."""
        if not isinstance(value, str) or len(value) > 300:
            raise ValueError(f"expected host:port, got {_short(value)}")
        host, sep, port = value.rpartition(":")
        if (not sep or not host or not port.isascii() or not port.isdigit() or len(port) > 5
                or not 0 < int(port) < 65536):
            raise ValueError(f"expected host:port, got {_short(value)}")
        if host.startswith("[") != host.endswith("]"):
            raise ValueError(f"expected host:port, got {_short(value)}")
        if ":" in host and not host.startswith("["):
            raise ValueError(f"expected host:port (IPv6 as [addr]:port), got {_short(value)}")
        if host.startswith("["):
            try:
                ipaddress.IPv6Address(host[1:-1])
            except ValueError:
                raise ValueError(f"expected [IPv6 address]:port, got {_short(value)}") from None
        elif not cls._HOST.match(host) or ".." in host:
            raise ValueError(f"expected host:port with a host name or IP address, got {_short(value)}")
        return cls(value)

    @property
    def host(self) -> str:
        return self.rpartition(":")[0].strip("[]")

    @property
    def port(self) -> int:
        return int(self.rpartition(":")[2])


class FileMode(int):
    """Octal permission bits written as a string, e.g. ``"0660"``."""

    @classmethod
    def parse(cls, value: Any) -> FileMode:
        text = str(value) if isinstance(value, int) and not isinstance(value, bool) else value
        if isinstance(text, str) and re.fullmatch(r"0?[0-7]{3}", text):
            return cls(int(text, 8))
        raise ValueError(f"expected an octal mode like \"0660\", got {_short(value)}")


_CUSTOM = (Duration, HostPort, FileMode)


def setting(default: Any = MISSING, *, factory: Any = MISSING, doc: str = "", type: str | None = None,
            shown: str | None = None, choices: tuple[str, ...] | None = None,
            sub: dict[str, dict[str, str]] | None = None) -> Any:
    """A documented key of a section dataclass: a ``field`` whose metadata the loader and
    the docs renderer (agent/configdoc.py) read. ``doc``: the one-line meaning in
    docs/config.md; ``type``, ``shown``: its type and default there, when the ones derived
    from the annotation and the default would not say it right; ``choices``: the only
    values accepted; ``sub``: per-key doc overrides of a nested mapping (a ``tls`` or
    ``counters`` whose keys mean something particular here)."""
    meta: dict[str, Any] = {"doc": doc}
    for name, value in (("type", type), ("shown", shown), ("choices", choices), ("sub", sub)):
        if value is not None:
            meta[name] = value
    return field(default=default, default_factory=factory, metadata=meta)


# ---------------------------------------------------------------- shared building blocks of sections


@dataclass
class CounterFilter:
    """Counter-name globs: a name is read if it matches include (empty = all) and no exclude."""

    include: list[str] = setting(factory=list, type="globs", shown="`[]` (all)")
    exclude: list[str] = setting(factory=list, type="globs", shown="`[]`")


@dataclass
class ClientTls:
    """A TLS client's files (a section's ``tls``; not read when ``insecure: true``)."""

    ca: str | None = setting(None, type="path or null", shown="`null` (system CAs)")
    cert: str | None = setting(None, type="path or null", doc="client certificate, for mTLS (with `key`)")
    key: str | None = setting(None, type="path or null", doc="client key, for mTLS (with `cert`)")
    server_name: str | None = setting(None, type="string or null", shown="`null` (the host)")
    crl: str | None = setting(None, type="path or null", doc=(
        "a PEM CRL of the CA that signed the peer's certificate: a peer certificate it revokes is "
        "refused (remote write checks it in the handshake; the gRPC exporters in a TLS check before each "
        "connection); re-read on SIGHUP when changed"))


@dataclass
class ServerTls:
    """A TLS server's files (``exporters.server.tls``)."""

    cert: str | None = setting(None, type="path or null", doc="server certificate")
    key: str | None = setting(None, type="path or null", doc="server key")
    ca: str | None = setting(None, type="path or null",
                             doc="client CA: when set, clients need a certificate it signed (mTLS)")
    crl: str | None = setting(None, type="path or null", doc=(
        "a PEM CRL signed by the client CA (with `ca`): a client certificate it revokes is refused with "
        "UNAUTHENTICATED (`client certificate revoked`); re-read with the other files on SIGHUP"))


# ---------------------------------------------------------------- schema: control, log


@dataclass
class Control:
    enabled: bool = True
    socket: str = DEFAULT_SOCKET
    mode: FileMode = FileMode(0o660)
    group: str | None = "swtel"  # None or a missing group: keep the agent's own group
    # `swtel status` reports unhealthy once every dial-out destination has been down this long.
    health_grace: Duration = Duration(60.0)


@dataclass
class Log:
    level: str = setting("info", choices=("debug", "info", "warning", "error"))
    format: str = setting("kv", choices=("kv", "json"))
    # Repeated identical errors (e.g. a down destination) are logged at most once per period.
    rate_limit: Duration = Duration(10.0)


# ---------------------------------------------------------------- the whole file, from the registries
# config.Config, .Sources, .Exporters, .Insights: built when first asked for (agent.plugins first).


def _interval_of(self: Any, source: str) -> float:
    """A source's poll interval: its own, else the top-level ``interval``."""
    own = getattr(self.sources, source).interval
    return float(own if own is not None else self.interval)


def _min_interval(self: Any) -> float:
    """The smallest poll interval of any enabled source."""
    return min((self.interval_of(f.name) for f in fields(self.sources) if getattr(self.sources, f.name).enabled),
               default=float(self.interval))


def _section_field(sec: registry.Section) -> tuple[str, Any, Any]:
    if sec.many:
        return sec.name, list[sec.config], field(default_factory=list)
    if sec.optional:
        return sec.name, sec.config | None, field(default=None)
    return sec.name, sec.config, field(default_factory=sec.config)


def _make(name: str, items: list[tuple[str, Any, Any]], doc: str, **namespace: Any) -> type:
    cls = make_dataclass(name, items, namespace={"__doc__": doc, **namespace})
    cls.__module__ = __name__
    return cls


_schema_cache: dict[tuple, dict[str, type]] = {}  # per registries' shape: a class stays the same class


def _schema() -> dict[str, type]:
    """``Config`` and its plugin sections, built from the registries (cached per content)."""
    key = tuple(r.shape() for r in registry.ALL)
    built = _schema_cache.get(key)
    if built is not None:
        return built
    empty = [r.kind for r in registry.ALL if not len(r)]
    if empty:
        raise RuntimeError(f"agent.config: no {' or '.join(empty)} registered: import agent.plugins "
                           "before reading a config (it fills the plugin registries)")
    sources = _make("Sources", [_section_field(s) for s in registry.SOURCES], "sources: one per source.")
    exporters = _make("Exporters", [_section_field(s) for s in registry.EXPORTERS], "exporters: one each.")
    insights = _make("Insights", [
        ("enabled", bool, setting(True, doc="run the detectors at all")),
        ("history", int, setting(100, type=f"integer, 1–{MAX_HISTORY}",
                                 doc="recent events kept for `swtel status`")),
        *(_section_field(s) for s in registry.DETECTORS)], "insights: the detectors' sections.")
    cfg = _make("Config", [
        ("target", str, field(default_factory=socket.gethostname)),
        ("interval", Duration, field(default=Duration(0.1))),
        ("sources", sources, field(default_factory=sources)),
        ("exporters", exporters, field(default_factory=exporters)),
        ("control", Control, field(default_factory=Control)),
        ("log", Log, field(default_factory=Log)),
        ("insights", insights, field(default_factory=insights)),
        ("path", str | None, field(default=None)),  # the file it was loaded from (not a YAML key)
    ], "A whole config file.", interval_of=_interval_of, min_interval=_min_interval)
    built = _schema_cache[key] = {"Config": cfg, "Sources": sources, "Exporters": exporters, "Insights": insights}
    return built


def __getattr__(name: str) -> Any:
    if name in ("Config", "Sources", "Exporters", "Insights"):
        return _schema()[name]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


# ---------------------------------------------------------------- conversion

_NOT_KEYS = {("Config", "path")}  # Config.path is bookkeeping, not a YAML key
_MISSING = object()  # a conversion failed; its problem is already recorded


def _type_name(tp: Any) -> str:
    if get_origin(tp) is list:
        return "a list"
    if get_origin(tp) is dict or is_dataclass(tp):
        return "a mapping"
    return {
        Duration: "a duration like 100ms",
        HostPort: "host:port",
        FileMode: 'an octal mode like "0660"',
        bool: "a boolean",
        int: "an integer",
        str: "a string",
        float: "a number",
    }.get(tp, getattr(tp, "__name__", str(tp)))


def _optional_inner(tp: Any) -> Any | None:
    """X for ``X | None``, else None."""
    args = get_args(tp)
    if get_origin(tp) is not None and type(None) in args:
        (inner,) = [a for a in args if a is not type(None)]
        return inner
    return None


def _convert(value: Any, tp: Any, where: str, problems: list[str]) -> Any:
    """``value`` as type ``tp``; on failure record a problem and return ``_MISSING``."""
    inner = _optional_inner(tp)
    if inner is not None:
        if value is None:
            # An optional section is turned on by its mere presence.
            return _build(inner, {}, where, problems) if is_dataclass(inner) else None
        return _convert(value, inner, where, problems)
    if value is None and not is_dataclass(tp):
        problems.append(f"{where}: expected {_type_name(tp)}, got null")
        return _MISSING
    origin, args = get_origin(tp), get_args(tp)
    if isinstance(value, list | dict) and len(value) > MAX_ITEMS:
        problems.append(f"{where}: at most {MAX_ITEMS} entries, got {len(value)}")
        return _MISSING
    if origin is list:
        if not isinstance(value, list):
            problems.append(f"{where}: expected a list, got {_short(value)}")
            return _MISSING
        items = [_convert(v, args[0], f"{where}[{i}]", problems) for i, v in enumerate(value)]
        return _MISSING if _MISSING in items else items
    if origin is dict:
        if not isinstance(value, dict):
            problems.append(f"{where}: expected a mapping, got {_short(value)}")
            return _MISSING
        out = {}
        for key, item in value.items():
            if not isinstance(key, str) or len(key) > MAX_STRING:
                problems.append(f"{where}: keys must be strings of at most {MAX_STRING} characters, "
                                f"got {_short(key)}")
                continue
            out[key] = _convert(item, args[1], f"{where}.{key}", problems)
        # The entries that converted are kept (the config is refused all the same): the
        # cross-field rules then still report the other entries' problems (every problem at once).
        return {k: v for k, v in out.items() if v is not _MISSING}
    if is_dataclass(tp):
        return _build(tp, value, where, problems)
    if tp in _CUSTOM:
        try:
            return tp.parse(value)
        except ValueError as exc:
            problems.append(f"{where}: {exc}")
            return _MISSING
    if tp is float and isinstance(value, str) and _NUMBER.match(value):
        value = float(value)  # YAML 1.1 reads 1e-12 (no dot) as a string
    ok = {
        bool: lambda v: isinstance(v, bool),
        int: lambda v: isinstance(v, int) and not isinstance(v, bool),
        float: lambda v: isinstance(v, int | float) and not isinstance(v, bool),
        str: lambda v: isinstance(v, str | int | float) and not isinstance(v, bool),
    }.get(tp)
    if ok is not None and not ok(value):
        problems.append(f"{where}: expected {_type_name(tp)}, got {_short(value)}")
        return _MISSING
    if tp is int and abs(value) > 2**63 - 1:
        problems.append(f"{where}: out of range, got {_short(value)}")
        return _MISSING
    if tp is float:
        try:
            value = float(value)
        except OverflowError:
            value = float("inf")
        if not _finite(value):
            problems.append(f"{where}: must be a finite number, got {_short(value)}")
            return _MISSING
        return value
    if tp is str:
        value = str(value)
        if len(value) > MAX_STRING:
            problems.append(f"{where}: at most {MAX_STRING} characters, got {len(value)}")
            return _MISSING
        return value
    return value


_NUMBER = re.compile(r"^\s*[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?\s*$")


def _build(cls: type, data: Any, where: str, problems: list[str]) -> Any:
    if data is None:
        data = {}
    if not isinstance(data, dict):
        problems.append(f"{where or '(top level)'}: expected a mapping, got {_short(data)}")
        return cls()
    hints = get_type_hints(cls)
    declared = {f.name: f for f in fields(cls)}
    known = {name for name in declared if (cls.__name__, name) not in _NOT_KEYS}
    kwargs: dict[str, Any] = {}
    for key, value in data.items():
        name = str(key).replace("-", "_")
        key = key if len(str(key)) <= 64 else str(key)[:61] + "..."
        sub = f"{where}.{key}" if where else str(key)
        if name not in known:
            problems.append(f"{sub}: unknown key (known: {', '.join(sorted(known))})")
            continue
        converted = _convert(value, hints[name], sub, problems)
        if converted is _MISSING:
            continue
        choices = declared[name].metadata.get("choices")
        if choices and converted not in choices:
            problems.append(f"{sub}: expected one of {', '.join(choices)}, got {_short(value)}")
            continue
        kwargs[name] = converted
    return cls(**kwargs)


# ---------------------------------------------------------------- cross-field rules


def _check(cfg: Any, problems: list[str], plugin_file: bool = False) -> None:
    """Rules that the types alone cannot express: the whole file's here, each section's by
    its plugin's ``check`` (and ``validate_check`` for ``swtel validate``)."""
    if cfg.interval < MIN_INTERVAL_S:
        problems.append(f"interval: must be at least 10ms, got {cfg.interval}")
    elif cfg.interval > MAX_INTERVAL_S:
        problems.append(f"interval: must be at most 1h, got {cfg.interval}")
    for sec in registry.SOURCES:
        src = getattr(cfg.sources, sec.name)
        if src.interval is not None and src.interval < MIN_INTERVAL_S:
            problems.append(f"sources.{sec.name}.interval: must be at least 10ms, got {src.interval}")
        elif src.interval is not None and src.interval > MAX_INTERVAL_S:
            problems.append(f"sources.{sec.name}.interval: must be at most 1h, got {src.interval}")
    if not cfg.target.strip():
        problems.append("target: must not be empty")
    elif len(cfg.target) > MAX_TARGET:
        problems.append(f"target: at most {MAX_TARGET} characters, got {len(cfg.target)}")
    _check_sections(cfg, "sources", registry.SOURCES, problems, plugin_file)
    _check_sections(cfg, "exporters", registry.EXPORTERS, problems, plugin_file)
    _check_control(cfg.control, problems)
    if cfg.log.rate_limit <= 0:
        problems.append("log.rate_limit: must be positive")
    if not 1 <= cfg.insights.history <= MAX_HISTORY:
        problems.append(f"insights.history: must be at least 1 and at most {MAX_HISTORY}, "
                        f"got {cfg.insights.history}")
    _check_sections(cfg, "insights", registry.DETECTORS, problems, plugin_file)


def _check_sections(cfg: Any, kind: str, sections: registry.Registry, problems: list[str], plugin_file: bool) -> None:
    for sec in sections:
        value = getattr(getattr(cfg, kind), sec.name)
        for check in (sec.check, sec.validate_check if plugin_file else None):
            if check is not None:
                check(value, f"{kind}.{sec.name}", problems, cfg)


def check_listen(problems: list[str], where: str, listen: HostPort) -> None:
    """A listening address of the agent: never :data:`FORBIDDEN_PORT`."""
    if listen.port == FORBIDDEN_PORT:
        problems.append(f"{where}: port {FORBIDDEN_PORT} belongs to Cumulus' own gNMI server; pick another")


def _check_control(ctl: Control, problems: list[str]) -> None:
    if not ctl.socket.startswith("/"):
        problems.append(f"control.socket: expected an absolute path, got {ctl.socket!r}")
    elif len(os.fsencode(ctl.socket)) > _SUN_PATH_MAX:
        problems.append(f"control.socket: longer than {_SUN_PATH_MAX} bytes, too long for a UNIX socket")
    if ctl.mode & 0o002:  # connecting to a UNIX socket takes write permission: any local user
        problems.append(f"control.mode: writable by others ({ctl.mode:04o}): any local user could command the "
                        "agent; use 0660 (group swtel) or 0600")
    if ctl.group is not None and not ctl.group.strip():
        problems.append("control.group: must not be empty (use null to keep the agent's group)")


_PEM_KIND = {"ca": "certificate", "cert": "certificate", "key": "private key", "crl": "CRL"}
_PEM_BEGIN = re.compile(rb"-----BEGIN ([A-Z0-9 ]+)-----")


def file_problem(path: str, kind: str | None) -> str | None:
    """Why ``path`` cannot serve as a file of ``kind`` (a PEM certificate or private key;
    None: any readable regular file), or None if it can."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY)
    except FileNotFoundError:
        return f"no such file {_short(path)}"
    except OSError as exc:
        return f"cannot open {_short(path)}: {exc.strerror}"
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return f"{_short(path)} is not a regular file"
        if kind is None:
            return None
        if st.st_size > MAX_PEM_BYTES:
            return f"{_short(path)} is larger than {MAX_PEM_BYTES // 1024} KiB, not a PEM {kind}"
        data = os.read(fd, MAX_PEM_BYTES)
    except OSError as exc:
        return f"cannot read {_short(path)}: {exc.strerror}"
    finally:
        os.close(fd)
    labels = _PEM_BEGIN.findall(data)
    if kind == "CRL" and b"X509 CRL" not in labels:
        return f"{_short(path)} holds no PEM CRL (-----BEGIN X509 CRL-----)"
    if kind == "certificate" and b"CERTIFICATE" not in labels:
        return f"{_short(path)} holds no PEM certificate (-----BEGIN CERTIFICATE-----)"
    if kind == "private key" and not any(label.endswith(b"PRIVATE KEY") for label in labels):
        return f"{_short(path)} holds no PEM private key (-----BEGIN ... PRIVATE KEY-----)"
    if kind == "private key" and st.st_mode & 0o007:  # the one secret reader's rule (tls.read_pem)
        return f"readable by other users (mode {st.st_mode & 0o777:04o}); chmod 0640 (group swtel) or 0600"
    return None


def check_files(problems: list[str], where: str, *paths: str | None) -> None:
    before = len(problems)
    for label, path in zip(("ca", "cert", "key", "crl"), paths, strict=False):
        if path:
            problem = file_problem(path, _PEM_KIND[label])
            if problem:
                problems.append(f"{where}.{label}: {problem}")
    cert, key = (tuple(paths) + (None, None, None))[1:3]
    if cert and key and len(problems) == before:  # each file is fine alone: are they a pair?
        from agent.tls import pair_problem

        problem = pair_problem(cert, key)
        if problem:
            problems.append(f"{where}.key: {problem}")


# ---------------------------------------------------------------- entry points


def _yaml(text: str, path: str | None, where_prefix: str = "") -> Any:
    """The YAML document of one file (``where_prefix`` names the file in its errors)."""
    if len(text) > MAX_FILE_BYTES:
        raise ConfigError([f"{path or 'config'}: larger than {MAX_FILE_BYTES // 1024} KiB"])
    try:
        return yaml.load(text, Loader=_Loader)  # noqa: S506 - a SafeLoader subclass
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}" if mark else "YAML"
        problem = str(getattr(exc, "problem", None) or exc)
        raise ConfigError([f"{where_prefix}{where}: "
                           f"{problem if len(problem) <= 200 else problem[:197] + '...'}"]) from None
    except RecursionError:  # not expected with MAX_DEPTH; never a traceback all the same
        raise ConfigError([f"{where_prefix}YAML: nesting too deep"]) from None


def nvue_patch(data: Any) -> bool:
    """True when a document is an NVUE patch file (``nv config patch``: a list of ``set`` /
    ``unset`` mappings), the snippet that writes a swtel config, not a swtel config itself."""
    return (isinstance(data, list) and bool(data)
            and all(isinstance(item, dict) and set(item) <= {"set", "unset"} for item in data))


def parse(text: str, path: str | None = None, *, plugin_file: bool = False) -> Any:
    """Parse and validate YAML text; raise :class:`ConfigError` listing every problem.
    ``plugin_file`` (``swtel validate``): also check the enabled ASIC plugin's file as the
    agent does before loading it (the agent itself runs on with that source unhealthy)."""
    return _from_data(_yaml(text, path), path, plugin_file=plugin_file)


def _from_data(data: Any, path: str | None, *, plugin_file: bool = False,
               origins: dict[str, str] | None = None) -> Any:
    """Validate a loaded document. ``origins``: YAML path -> "FILE, line N" of the keys a
    conf.d file set, so that their problems name the file that caused them."""
    if nvue_patch(data):
        raise ConfigError([f"{path or 'config'}: this is an NVUE patch file (for `nv config patch`), "
                           "not a swtel config: `swtel validate` on it checks the swtel config its "
                           "snippet writes"])
    problems: list[str] = []
    cfg = _build(_schema()["Config"], data, "", problems)
    # The cross-field rules run even when some values were refused (those keep their
    # defaults), so that every problem of a file is reported at once.
    _check(cfg, problems, plugin_file)
    if problems:
        raise ConfigError([_attribute(p, origins) for p in problems] if origins else problems)
    cfg.path = path
    return cfg


def read_text(path: str) -> str:
    """A config file's text: a regular file of at most :data:`MAX_FILE_BYTES`, UTF-8. A FIFO,
    a device or a directory is refused without reading (and without blocking)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY)
    except OSError as exc:
        raise ConfigError([f"{path}: {exc.strerror}"]) from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise ConfigError([f"{path}: not a regular file"])
        if st.st_size > MAX_FILE_BYTES:
            raise ConfigError([f"{path}: larger than {MAX_FILE_BYTES // 1024} KiB ({st.st_size} bytes)"])
        chunks, total = [], 0
        while True:  # the file may grow while it is read: never read past the limit
            chunk = os.read(fd, MAX_FILE_BYTES + 1 - total)
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
            if total > MAX_FILE_BYTES:
                raise ConfigError([f"{path}: larger than {MAX_FILE_BYTES // 1024} KiB"])
    except OSError as exc:
        raise ConfigError([f"{path}: {exc.strerror}"]) from None
    finally:
        os.close(fd)
    try:
        return b"".join(chunks).decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError([f"{path}: not UTF-8 text ({exc.reason})"]) from None


CONF_D = "conf.d"  # beside the main file: fragments merged over it, in name order


def fragments(path: str) -> list[str]:
    """The conf.d fragments of a main config file: ``<its directory>/conf.d/*.yaml``, in name
    order (NVUE's snippet owns one whole file there; an operator may add others)."""
    directory = os.path.join(os.path.dirname(os.path.abspath(path)), CONF_D)
    try:
        names = os.listdir(directory)
    except (FileNotFoundError, NotADirectoryError):
        return []
    except OSError as exc:
        raise ConfigError([f"{directory}: {exc.strerror}"]) from None
    return [os.path.join(directory, n) for n in sorted(names)
            if n.endswith(".yaml") and not n.startswith(".")]


def load(path: str, *, plugin_file: bool = False) -> Any:
    """Read and validate a config file and its conf.d fragments (``plugin_file``: see
    :func:`parse`). Each fragment is a mapping merged over what came before: a key it sets
    replaces the earlier value, mappings merge key by key, lists are replaced whole."""
    data = _yaml(read_text(path), path)
    extra = fragments(path)
    if not extra:
        return _from_data(data, path, plugin_file=plugin_file)
    if nvue_patch(data) or not isinstance(data, dict | None):
        return _from_data(data, path, plugin_file=plugin_file)  # its own clear problem
    merged: dict[str, Any] = dict(data or {})
    origins: dict[str, str] = {}
    problems: list[str] = []
    for frag in extra:
        name = os.path.join(CONF_D, os.path.basename(frag))
        text = read_text(frag)
        doc = _yaml(text, frag, f"{name}: ")
        if doc is None:
            continue  # an empty fragment (all comments) sets nothing
        if not isinstance(doc, dict):
            hint = (" (it is an NVUE patch file: `nv config patch` it, do not copy it here)"
                    if nvue_patch(doc) else "")
            problems.append(f"{name}: expected a mapping of keys, as in swtel.yaml, "
                            f"got a {type(doc).__name__}{hint}")
            continue
        lines = key_lines(text)
        _merge(merged, doc, "", origins, name, lines)
    if problems:
        raise ConfigError(problems)
    return _from_data(merged, path, plugin_file=plugin_file, origins=origins)


def _merge(base: dict[str, Any], over: dict[str, Any], where: str, origins: dict[str, str],
           name: str, lines: dict[str, int]) -> None:
    """``over`` into ``base``: mappings merge, anything else (lists too) is replaced."""
    for key, value in over.items():
        sub = f"{where}.{key}" if where else str(key)
        if isinstance(value, dict) and isinstance(base.get(key), dict):
            base[key] = dict(base[key])
            _merge(base[key], value, sub, origins, name, lines)
            continue
        base[key] = value
        for path in [p for p in origins if p == sub or p.startswith((sub + ".", sub + "["))]:
            del origins[path]  # an earlier file's value there is gone
        line = lines.get(sub)
        origins[sub] = f"{name}, line {line}" if line else name
        for path, line in lines.items():  # the value's own keys and items, for precise lines
            if path.startswith((sub + ".", sub + "[")):
                origins[path] = f"{name}, line {line}"


def key_lines(text: str) -> dict[str, int]:
    """YAML path (``exporters.dialout[0].address``) -> the line of its key, for errors."""
    try:
        root = yaml.compose(text, Loader=_Loader)  # noqa: S506 - a SafeLoader subclass
    except (yaml.YAMLError, RecursionError):
        return {}
    out: dict[str, int] = {}

    def walk(node: Any, where: str) -> None:
        if isinstance(node, yaml.MappingNode):
            for key, value in node.value:
                sub = f"{where}.{key.value}" if where else str(key.value)
                out[sub] = key.start_mark.line + 1
                walk(value, sub)
        elif isinstance(node, yaml.SequenceNode):
            for i, item in enumerate(node.value):
                sub = f"{where}[{i}]"
                out[sub] = item.start_mark.line + 1
                walk(item, sub)

    walk(root, "")
    return out


def _attribute(problem: str, origins: dict[str, str]) -> str:
    """Prefix a problem whose YAML path a conf.d file set with that file and line."""
    where = problem.split(":", 1)[0].split(" ", 1)[0]
    best = ""
    for path in origins:
        if (where == path or where.startswith(path + ".") or where.startswith(path + "[")) \
                and len(path) > len(best):
            best = path
    return f"{origins[best]}: {problem}" if best else problem
