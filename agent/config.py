"""YAML configuration: schema, defaults and validation.

Every error names the YAML path of the offending value, e.g.
``exporters.dialout[0].address: expected host:port, got 'foo'``. Unknown keys
are errors. An empty file is a valid config. The documented default config is
``packaging/swtel.yaml``; the README's configuration table mirrors this module.
"""

from __future__ import annotations

import os
import re
import socket
from dataclasses import dataclass, field, fields, is_dataclass
from typing import Any, get_args, get_origin, get_type_hints

import yaml

DEFAULT_PATH = "/etc/swtel/swtel.yaml"
MIN_INTERVAL_S = 0.010
_FORBIDDEN_PORT = 9339  # Cumulus' own gNMI server and NetQ's gNMI agent


class ConfigError(ValueError):
    """One or more configuration problems, each starting with its YAML path."""

    def __init__(self, problems: list[str]):
        self.problems = problems
        super().__init__("\n".join(problems))


# ---------------------------------------------------------------- value types


class Duration(float):
    """Seconds, written in YAML as ``100ms``, ``2s``, ``1m``, ``1h`` or a bare number of seconds."""

    _RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(us|ms|s|m|h)?\s*$")
    _UNIT = {"us": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0, None: 1.0}

    @classmethod
    def parse(cls, value: Any) -> Duration:
        if isinstance(value, bool):
            raise ValueError(f"expected a duration like 100ms or 2s, got {value!r}")
        if isinstance(value, int | float):
            if value < 0:
                raise ValueError(f"must not be negative, got {value!r}")
            return cls(value)
        if isinstance(value, str):
            if value.strip().startswith("-"):
                raise ValueError(f"must not be negative, got {value!r}")
            m = cls._RE.match(value)
            if m:
                return cls(float(m.group(1)) * cls._UNIT[m.group(2)])
        raise ValueError(f"expected a duration like 100ms or 2s, got {value!r}")

    def __str__(self) -> str:
        if self >= 1 and float(self).is_integer():
            return f"{int(self)}s"
        return f"{round(self * 1000, 3):g}ms"


class HostPort(str):
    """``host:port`` or ``[v6addr]:port``."""

    @classmethod
    def parse(cls, value: Any) -> HostPort:
        if not isinstance(value, str):
            raise ValueError(f"expected host:port, got {value!r}")
        host, sep, port = value.rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError(f"expected host:port, got {value!r}")
        if host.startswith("[") != host.endswith("]"):
            raise ValueError(f"expected host:port, got {value!r}")
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
        raise ValueError(f"expected an octal mode like \"0660\", got {value!r}")


_CUSTOM = (Duration, HostPort, FileMode)

# ---------------------------------------------------------------- schema


@dataclass
class CounterFilter:
    """Counter-name globs: a name is read if it matches include (empty = all) and no exclude."""

    include: list[str] = field(default_factory=list)
    exclude: list[str] = field(default_factory=list)


@dataclass
class NetdevSource:
    enabled: bool = True
    interval: Duration | None = None  # None: the top-level interval
    interfaces: list[str] = field(default_factory=lambda: ["*"])
    exclude: list[str] = field(default_factory=lambda: ["lo"])
    counters: CounterFilter = field(default_factory=CounterFilter)


@dataclass
class EthtoolSource:
    enabled: bool = True
    interval: Duration | None = None
    interfaces: list[str] = field(default_factory=lambda: ["*"])
    exclude: list[str] = field(default_factory=lambda: ["lo"])
    counters: CounterFilter = field(default_factory=CounterFilter)
    per_queue: bool = False  # per-queue/per-channel driver counters (mlx5 has thousands)


@dataclass
class RdmaSource:
    enabled: bool = False
    interval: Duration | None = None
    root: str = "/sys"
    devices: list[str] = field(default_factory=lambda: ["*"])
    counters: CounterFilter = field(default_factory=CounterFilter)


@dataclass
class SystemSource:
    enabled: bool = True
    interval: Duration | None = Duration(5.0)


@dataclass
class SimSource:
    enabled: bool = False
    interval: Duration | None = None
    ports: int = 64
    scenario: str = "symbol-errors"
    seed: int = 1


@dataclass
class Sources:
    netdev: NetdevSource = field(default_factory=NetdevSource)
    ethtool: EthtoolSource = field(default_factory=EthtoolSource)
    rdma: RdmaSource = field(default_factory=RdmaSource)
    system: SystemSource = field(default_factory=SystemSource)
    sim: SimSource = field(default_factory=SimSource)


@dataclass
class JsonlExporter:
    path: str = "-"  # "-" is stdout


@dataclass
class ClientTls:
    ca: str | None = None
    cert: str | None = None
    key: str | None = None
    server_name: str | None = None


@dataclass
class DialoutExporter:
    name: str = ""
    address: HostPort = HostPort("127.0.0.1:57400")
    protocol: str = "nokia"  # nokia | sonic
    insecure: bool = False
    tls: ClientTls = field(default_factory=ClientTls)
    heartbeat: Duration = Duration(60.0)
    queue: int = 10000
    subscription_name: str = "swtel"
    username: str | None = None
    password_file: str | None = None


@dataclass
class ServerTls:
    cert: str | None = None
    key: str | None = None
    ca: str | None = None  # client CA: mTLS when set


@dataclass
class ServerExporter:
    enabled: bool = True  # the section's presence turns the server on
    listen: HostPort = HostPort("127.0.0.1:50051")
    insecure: bool = False
    tls: ServerTls = field(default_factory=ServerTls)
    username: str | None = None
    password_file: str | None = None


@dataclass
class Exporters:
    jsonl: JsonlExporter | None = None
    dialout: list[DialoutExporter] = field(default_factory=list)
    server: ServerExporter | None = None


@dataclass
class Control:
    socket: str = "/run/swtel/swtel.sock"
    mode: FileMode = FileMode(0o660)
    group: str | None = "swtel"  # None or missing group: keep the agent's own group


@dataclass
class Log:
    level: str = "info"  # debug | info | warning | error
    format: str = "kv"  # kv | json


@dataclass
class Config:
    target: str = field(default_factory=socket.gethostname)
    interval: Duration = Duration(0.1)
    sources: Sources = field(default_factory=Sources)
    exporters: Exporters = field(default_factory=Exporters)
    control: Control = field(default_factory=Control)
    log: Log = field(default_factory=Log)
    insights: dict[str, Any] = field(default_factory=dict)
    path: str | None = None  # the file it was loaded from (not a YAML key)

    def interval_of(self, source: str) -> float:
        own = getattr(self.sources, source).interval
        return float(own if own is not None else self.interval)


_CHOICES = {
    ("DialoutExporter", "protocol"): ("nokia", "sonic"),
    ("Log", "level"): ("debug", "info", "warning", "error"),
    ("Log", "format"): ("kv", "json"),
}
_NOT_KEYS = {"path"}  # Config.path is bookkeeping, not a YAML key


def _type_name(tp: Any) -> str:
    if tp in (Duration,):
        return "a duration like 100ms"
    if tp is HostPort:
        return "host:port"
    return {bool: "a boolean", int: "an integer", str: "a string", float: "a number"}.get(
        tp, getattr(tp, "__name__", str(tp))
    )


def _convert(value: Any, tp: Any, where: str, problems: list[str]) -> Any:
    origin = get_origin(tp)
    args = get_args(tp)
    if origin is not None and type(None) in args:  # Optional[X]
        if value is None:
            return None
        (inner,) = [a for a in args if a is not type(None)]
        return _convert(value, inner, where, problems)
    if origin is list:
        if not isinstance(value, list):
            problems.append(f"{where}: expected a list, got {value!r}")
            return []
        return [_convert(v, args[0], f"{where}[{i}]", problems) for i, v in enumerate(value)]
    if origin is dict:
        if not isinstance(value, dict):
            problems.append(f"{where}: expected a mapping, got {value!r}")
            return {}
        return dict(value)
    if is_dataclass(tp):
        return _build(tp, value, where, problems)
    if tp in _CUSTOM:
        try:
            return tp.parse(value)
        except ValueError as exc:
            problems.append(f"{where}: {exc}")
            return None
    if tp is bool:
        if not isinstance(value, bool):
            problems.append(f"{where}: expected a boolean, got {value!r}")
        return value
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            problems.append(f"{where}: expected an integer, got {value!r}")
        return value
    if tp is str:
        if not isinstance(value, str | int | float) or isinstance(value, bool):
            problems.append(f"{where}: expected a string, got {value!r}")
            return value
        return str(value)
    return value


def _build(cls: type, data: Any, where: str, problems: list[str]) -> Any:
    if data is None:
        data = {}
    if not isinstance(data, dict):
        problems.append(f"{where or '(top level)'}: expected a mapping, got {data!r}")
        return cls()
    hints = get_type_hints(cls)
    known = {f.name for f in fields(cls)} - _NOT_KEYS
    kwargs: dict[str, Any] = {}
    for key, value in data.items():
        name = str(key).replace("-", "_")
        sub = f"{where}.{key}" if where else str(key)
        if name not in known:
            problems.append(f"{sub}: unknown key (known: {', '.join(sorted(known))})")
            continue
        converted = _convert(value, hints[name], sub, problems)
        choices = _CHOICES.get((cls.__name__, name))
        if choices and converted not in choices:
            problems.append(f"{sub}: expected one of {', '.join(choices)}, got {value!r}")
        kwargs[name] = converted
    try:
        return cls(**{k: v for k, v in kwargs.items() if v is not None or k in _NULLABLE})
    except TypeError as exc:  # pragma: no cover - schema bug
        problems.append(f"{where}: {exc}")
        return cls()


# Keys where an explicit YAML null is meaningful (turns the thing off / means "default").
_NULLABLE = {"jsonl", "server", "interval", "group", "username", "password_file"}


def _check(cfg: Config, problems: list[str]) -> None:
    """Cross-field rules that the types alone cannot express."""
    if cfg.interval is not None and cfg.interval < MIN_INTERVAL_S:
        problems.append(f"interval: must be at least 10ms, got {cfg.interval}")
    for f in fields(Sources):
        src = getattr(cfg.sources, f.name)
        if getattr(src, "interval", None) is not None and src.interval < MIN_INTERVAL_S:
            problems.append(f"sources.{f.name}.interval: must be at least 10ms, got {src.interval}")
    if not cfg.target:
        problems.append("target: must not be empty")
    sim = cfg.sources.sim
    if isinstance(sim.ports, int) and not 1 <= sim.ports <= 4096:
        problems.append(f"sources.sim.ports: expected 1..4096, got {sim.ports}")
    names: set[str] = set()
    for i, d in enumerate(cfg.exporters.dialout):
        where = f"exporters.dialout[{i}]"
        if not d.name:
            d.name = f"dialout{i}"
        if d.name in names:
            problems.append(f"{where}.name: duplicate destination name {d.name!r}")
        names.add(d.name)
        if isinstance(d.queue, int) and d.queue < 1:
            problems.append(f"{where}.queue: must be at least 1, got {d.queue}")
        if d.heartbeat is not None and d.heartbeat < 1:
            problems.append(f"{where}.heartbeat: must be at least 1s, got {d.heartbeat}")
        if not d.insecure:
            _check_files(problems, f"{where}.tls", d.tls.ca, d.tls.cert, d.tls.key)
            if bool(d.tls.cert) != bool(d.tls.key):
                problems.append(f"{where}.tls: cert and key go together (mTLS)")
        if d.password_file and not d.username:
            problems.append(f"{where}.password_file: needs username")
    srv = cfg.exporters.server
    if srv is not None:
        if srv.listen is not None and srv.listen.port == _FORBIDDEN_PORT:
            problems.append(
                "exporters.server.listen: port 9339 belongs to Cumulus' own gNMI server; pick another"
            )
        if not srv.insecure:
            if not (srv.tls.cert and srv.tls.key):
                problems.append(
                    "exporters.server.tls: cert and key are required unless insecure: true"
                )
            _check_files(problems, "exporters.server.tls", srv.tls.ca, srv.tls.cert, srv.tls.key)


def _check_files(problems: list[str], where: str, *paths: str | None) -> None:
    for label, path in zip(("ca", "cert", "key"), paths, strict=False):
        if path and not os.path.exists(path):
            problems.append(f"{where}.{label}: no such file {path!r}")


def parse(text: str, path: str | None = None) -> Config:
    """Parse and validate YAML text; raise :class:`ConfigError` listing every problem."""
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}" if mark else "YAML"
        raise ConfigError([f"{where}: {getattr(exc, 'problem', None) or exc}"]) from None
    problems: list[str] = []
    cfg = _build(Config, data, "", problems)
    if not problems:
        _check(cfg, problems)
    if problems:
        raise ConfigError(problems)
    cfg.path = path
    return cfg


def load(path: str) -> Config:
    """Read and validate a config file."""
    try:
        with open(path, encoding="utf-8") as fh:
            text = fh.read()
    except OSError as exc:
        raise ConfigError([f"{path}: {exc.strerror}"]) from None
    return parse(text, path)
