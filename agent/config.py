"""YAML configuration: schema, defaults and validation.

Every error names the YAML path of the offending value, e.g.
``exporters.dialout[0].address: expected host:port, got 'foo'``. Unknown keys
are errors. An empty file is a valid config. The documented default config is
``packaging/swtel.yaml``; docs/config.md documents every key of this module.

Conventions of the schema below:

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
from dataclasses import dataclass, field, fields, is_dataclass
from typing import Any, get_args, get_origin, get_type_hints

import yaml

DEFAULT_PATH = "/etc/swtel/swtel.yaml"
DEFAULT_SOCKET = "/run/swtel/swtel.sock"
MIN_INTERVAL_S = 0.010
# Limits (docs/config.md, "Limits"): what a config file may cost to read, whoever wrote it.
MAX_FILE_BYTES = 256 * 1024  # a config file larger than this is refused unread
MAX_DEPTH = 32  # nesting of mappings and lists
MAX_VALUES = 50_000  # YAML values (scalars, lists, mappings), counted after alias expansion
MAX_ITEMS = 1024  # entries of any one list or mapping
MAX_STRING = 4096  # characters of any string (PATH_MAX)
MAX_TARGET = 255  # characters of `target`
MAX_DURATION_S = 86400.0  # any duration: at most 24h
MAX_INTERVAL_S = 3600.0  # poll intervals: at most 1h
MAX_IDLE_INTERVAL_S = 60.0  # sources.ethtool.idle_interval
MAX_QUEUE = 1_000_000  # exporters.dialout[].queue
MAX_COUNT = 1_000_000_000  # thresholds (events within a window)
MAX_WINDOWS = 1000  # consecutive windows of pfc_storm / imbalance
MAX_HISTORY = 10_000  # insights.history
MAX_PEM_BYTES = 1024 * 1024  # TLS files read by validate
ASIC_BUILTIN = ("sim",)  # built-in ASIC plugins (agent/asic/__init__.py builds the path)
_FORBIDDEN_PORT = 9339  # Cumulus' own gNMI server and NetQ's gNMI agent
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

# ---------------------------------------------------------------- schema: sources


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
    # A port none of whose counters moved for this long is read once per idle_interval
    # (turns spread over the polls) until one moves again; 0: every port every poll.
    idle_interval: Duration = Duration(1.0)


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
class AsicSource:
    """Counters read straight from the switch ASIC through a plugin (agent/asic/swtel_asic.h)."""

    enabled: bool = False
    interval: Duration | None = None
    plugin: str = "sim"  # a built-in name (sim: the simulated Spectrum switch) or an absolute .so path
    config: str = ""  # handed to the plugin's open() as is (sim: "role=spine seed=1 scenario=...")
    interfaces: list[str] = field(default_factory=lambda: ["*"])
    exclude: list[str] = field(default_factory=list)
    counters: CounterFilter = field(default_factory=CounterFilter)


@dataclass
class Sources:
    netdev: NetdevSource = field(default_factory=NetdevSource)
    ethtool: EthtoolSource = field(default_factory=EthtoolSource)
    rdma: RdmaSource = field(default_factory=RdmaSource)
    system: SystemSource = field(default_factory=SystemSource)
    asic: AsicSource = field(default_factory=AsicSource)


# ---------------------------------------------------------------- schema: exporters


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
    # per-tick (default): one Notification per origin per tick, absolute update paths: far
    # fewer gRPC messages, the only mode within the latency budget at full churn;
    # per-container: one Notification per container per tick (OpenConfig-style prefixes).
    notifications: str = "per-tick"


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
    # plaintext (insecure: true) on an address other hosts can reach: refused unless true
    insecure_remote: bool = False
    tls: ServerTls = field(default_factory=ServerTls)
    username: str | None = None
    password_file: str | None = None


@dataclass
class TunnelServer:
    """A gRPC tunnel server (openconfig grpctunnel) to register with, as NVUE's
    ``system grpc-tunnel server <name>``; carries the agent's gNMI service."""

    name: str = ""
    address: str = ""  # host name or IP address of the tunnel server
    port: int = 0  # required
    target: str | None = None  # registered target name; None: the agent's target
    retry_interval: Duration = Duration(30.0)  # longest wait between attempts
    insecure: bool = False
    tls: ClientTls = field(default_factory=ClientTls)


@dataclass
class OtlpExporter:
    """OTLP/gRPC metrics export (agent/exporters/otlp.py, docs/otlp.md)."""

    enabled: bool = True  # the section's presence turns it on
    endpoint: HostPort = HostPort("127.0.0.1:4317")
    profile: str = "cumulus"  # cumulus: Cumulus' names, gauges; otel: cumulative Sums
    interval: Duration = Duration(1.0)  # at least the agent's smallest poll interval
    insecure: bool = False
    tls: ClientTls = field(default_factory=ClientTls)
    queue: int = 60  # requests kept while the receiver is slow or down
    timeout: Duration = Duration(10.0)  # per Export call


@dataclass
class Exporters:
    jsonl: JsonlExporter | None = None
    dialout: list[DialoutExporter] = field(default_factory=list)
    server: ServerExporter | None = None
    tunnel: list[TunnelServer] = field(default_factory=list)
    otlp: OtlpExporter | None = None


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
    level: str = "info"  # debug | info | warning | error
    format: str = "kv"  # kv | json
    # Repeated identical errors (e.g. a down destination) are logged at most once per period.
    rate_limit: Duration = Duration(10.0)


# ---------------------------------------------------------------- schema: insights
# Detector thresholds (agent/insights/, documented with the reasons for each default in
# docs/insights.md). A detector raises an event when its rule holds and clears it after the
# port (or group) has been quiet for `clear_after`. Windows are measured in sample time (the
# collection timestamps of the counters), so a window never holds less data than it says.


@dataclass
class ErrorBurst:
    """Physical-layer errors on a port. Three event types:
    `symbol-ber` (post-FEC symbol errors over the bits received, warning above `symbol_ber`;
    any uncorrectable/effective error makes it critical), `pre-fec-ber` (corrected bits over
    the bits received) and `error-burst` (FCS/CRC and in-errors counted within `window`)."""

    enabled: bool = True
    # Leaves counted by error-burst. Per sample the largest of them counts (in-errors already
    # includes FCS errors, so they are not added up).
    counters: list[str] = field(default_factory=lambda: ["in-fcs-errors", "in-crc-errors", "in-errors"])
    threshold: int = 10  # error-burst: errors within `window`
    window: Duration = Duration(1.0)  # window of the BER ratios and of the error count
    symbol_ber: float = 1e-12  # symbol-ber: warning above this (IEEE 802.3's target BER)
    pre_fec_ber_warning: float = 5e-7  # pre-fec-ber: warning above this (NVIDIA UFM PDR plugin)
    pre_fec_ber_critical: float = 1e-6  # pre-fec-ber: critical above this (UFM PDR plugin)
    clear_after: Duration = Duration(60.0)


@dataclass
class LinkFlap:
    """Carrier transitions on a port."""

    enabled: bool = True
    threshold: int = 2  # carrier transitions within `window` (one down+up is 2)
    window: Duration = Duration(60.0)
    clear_after: Duration = Duration(300.0)


@dataclass
class PfcStorm:
    """Near-continuous pause on one priority of a port, received from its peer: by the share of
    time paused (where the driver counts pause duration), else by the pause-frame rate."""

    enabled: bool = True
    pause_rate: float = 1000.0  # received pause/PFC frames per second (ports without a duration)
    paused_share: float = 0.8  # share of the window paused (ports with a pause duration)
    window: Duration = Duration(0.1)  # one poll of the PFC watchdog
    windows: int = 3  # consecutive windows over a threshold before firing (watchdog robustness)
    clear_after: Duration = Duration(30.0)


@dataclass
class DropBurst:
    """Buffer, queue and WRED drops concentrated in a short window (microbursts)."""

    enabled: bool = True
    threshold: int = 100  # drops within `window`
    window: Duration = Duration(0.1)
    clear_after: Duration = Duration(30.0)


@dataclass
class Imbalance:
    """Uneven transmit load across a group of uplinks (ECMP members)."""

    enabled: bool = True
    groups: dict[str, list[str]] = field(default_factory=dict)  # name -> ports (globs allowed)
    max_over_mean: float = 1.5  # fire when max/mean of the members' tx rates exceeds this ...
    cv: float = 0.5  # ... or their coefficient of variation (std/mean) exceeds this
    window: Duration = Duration(1.0)
    windows: int = 3  # consecutive windows over a threshold before firing
    min_mean_bps: float = 1e8  # ignore groups idler than this mean rate (bits/s per member)
    clear_after: Duration = Duration(60.0)


@dataclass
class ThroughputDip:
    """Transient throughput drops from sub-second utilization (octet deltas over link speed)."""

    enabled: bool = True
    baseline: Duration = Duration(10.0)  # time constant of the trailing level a sample is compared to
    dip_ratio: float = 0.75  # fire when utilization falls below this fraction of the trailing level
    min_utilization: float = 0.2  # ... but only if the trailing level is at least this busy
    # A dip is reported once the port is back, if it lasted at most this long; a longer drop
    # is a change of load (job phase, ECMP moving flows), not a dip.
    max_duration: Duration = Duration(2.0)
    clear_after: Duration = Duration(10.0)


@dataclass
class RoceRetrans:
    """RoCE retransmission spikes on hosts (mlx5 hw_counters)."""

    enabled: bool = True
    # Counter names (as in hw_counters; `-` and `_` are the same) summed per device port.
    counters: list[str] = field(
        default_factory=lambda: [
            "roce_adp_retrans", "roce_adp_retrans_to", "roce_slow_restart",
            "out_of_sequence", "packet_seq_err",
        ]
    )
    threshold: int = 100  # retransmissions within `window`
    window: Duration = Duration(1.0)
    clear_after: Duration = Duration(30.0)


@dataclass
class Insights:
    enabled: bool = True
    history: int = 100  # recent (cleared) events kept for `swtel status`
    error_burst: ErrorBurst = field(default_factory=ErrorBurst)
    link_flap: LinkFlap = field(default_factory=LinkFlap)
    pfc_storm: PfcStorm = field(default_factory=PfcStorm)
    drop_burst: DropBurst = field(default_factory=DropBurst)
    imbalance: Imbalance = field(default_factory=Imbalance)
    throughput_dip: ThroughputDip = field(default_factory=ThroughputDip)
    roce_retrans: RoceRetrans = field(default_factory=RoceRetrans)


# ---------------------------------------------------------------- the whole file


@dataclass
class Config:
    target: str = field(default_factory=socket.gethostname)
    interval: Duration = Duration(0.1)
    sources: Sources = field(default_factory=Sources)
    exporters: Exporters = field(default_factory=Exporters)
    control: Control = field(default_factory=Control)
    log: Log = field(default_factory=Log)
    insights: Insights = field(default_factory=Insights)
    path: str | None = None  # the file it was loaded from (not a YAML key)

    def interval_of(self, source: str) -> float:
        own = getattr(self.sources, source).interval
        return float(own if own is not None else self.interval)


# ---------------------------------------------------------------- conversion

_CHOICES = {
    ("DialoutExporter", "protocol"): ("nokia", "sonic"),
    ("DialoutExporter", "notifications"): ("per-container", "per-tick"),
    ("OtlpExporter", "profile"): ("cumulus", "otel"),
    ("Log", "level"): ("debug", "info", "warning", "error"),
    ("Log", "format"): ("kv", "json"),
}
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
    known = {f.name for f in fields(cls) if (cls.__name__, f.name) not in _NOT_KEYS}
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
        choices = _CHOICES.get((cls.__name__, name))
        if choices and converted not in choices:
            problems.append(f"{sub}: expected one of {', '.join(choices)}, got {_short(value)}")
            continue
        kwargs[name] = converted
    return cls(**kwargs)


# ---------------------------------------------------------------- cross-field rules


def _check(cfg: Config, problems: list[str]) -> None:
    """Rules that the types alone cannot express."""
    if cfg.interval < MIN_INTERVAL_S:
        problems.append(f"interval: must be at least 10ms, got {cfg.interval}")
    elif cfg.interval > MAX_INTERVAL_S:
        problems.append(f"interval: must be at most 1h, got {cfg.interval}")
    for f in fields(Sources):
        src = getattr(cfg.sources, f.name)
        if src.interval is not None and src.interval < MIN_INTERVAL_S:
            problems.append(f"sources.{f.name}.interval: must be at least 10ms, got {src.interval}")
        elif src.interval is not None and src.interval > MAX_INTERVAL_S:
            problems.append(f"sources.{f.name}.interval: must be at most 1h, got {src.interval}")
    if cfg.sources.ethtool.idle_interval > MAX_IDLE_INTERVAL_S:
        problems.append(f"sources.ethtool.idle_interval: must be at most 1m (a quiet port is still read "
                        f"that often), got {cfg.sources.ethtool.idle_interval}")
    if not cfg.target.strip():
        problems.append("target: must not be empty")
    elif len(cfg.target) > MAX_TARGET:
        problems.append(f"target: at most {MAX_TARGET} characters, got {len(cfg.target)}")
    asic = cfg.sources.asic
    if not asic.plugin or not (asic.plugin in ASIC_BUILTIN or asic.plugin.startswith("/")):
        problems.append(f"sources.asic.plugin: expected {' or '.join(ASIC_BUILTIN)} or an absolute path "
                        f"to a plugin's shared library, got {asic.plugin!r}")
    if len(asic.config) > 4096:
        problems.append(f"sources.asic.config: at most 4096 characters, got {len(asic.config)}")
    if not cfg.sources.rdma.root.startswith("/"):
        problems.append(f"sources.rdma.root: expected an absolute path, got {cfg.sources.rdma.root!r}")
    _check_exporters(cfg.exporters, problems)
    _check_otlp(cfg, problems)
    _check_control(cfg.control, problems)
    if cfg.log.rate_limit <= 0:
        problems.append("log.rate_limit: must be positive")
    _check_insights(cfg.insights, problems, cfg)
    _check_sim_config(cfg.sources.asic, problems)


def _check_exporters(exp: Exporters, problems: list[str]) -> None:
    if exp.jsonl is not None and not exp.jsonl.path:
        problems.append("exporters.jsonl.path: must not be empty (use \"-\" for stdout)")
    names: set[str] = set()
    for i, d in enumerate(exp.dialout):
        where = f"exporters.dialout[{i}]"
        if not d.name:
            d.name = f"dialout{i}"
        if d.name in names:
            problems.append(f"{where}.name: duplicate destination name {d.name!r}")
        names.add(d.name)
        if d.queue < 1:
            problems.append(f"{where}.queue: must be at least 1, got {d.queue}")
        elif d.queue > MAX_QUEUE:
            problems.append(f"{where}.queue: must be at most {MAX_QUEUE}, got {d.queue}")
        if d.heartbeat < 1:
            problems.append(f"{where}.heartbeat: must be at least 1s, got {d.heartbeat}")
        if not d.insecure:
            _check_files(problems, f"{where}.tls", d.tls.ca, d.tls.cert, d.tls.key)
            if bool(d.tls.cert) != bool(d.tls.key):
                problems.append(f"{where}.tls: cert and key go together (mTLS)")
        _check_auth(problems, where, d.username, d.password_file)
    srv = exp.server
    if srv is not None and srv.enabled:
        if srv.listen.port == _FORBIDDEN_PORT:
            problems.append(
                "exporters.server.listen: port 9339 belongs to Cumulus' own gNMI server; pick another"
            )
        if srv.insecure and not srv.insecure_remote and not _loopback(srv.listen.host):
            problems.append(
                f"exporters.server.listen: plaintext gNMI (insecure: true) on {srv.listen.host or '*'}, "
                "which other hosts can reach: use TLS, listen on 127.0.0.1, or set insecure_remote: true"
            )
        if not srv.insecure:
            if not (srv.tls.cert and srv.tls.key):
                problems.append(
                    "exporters.server.tls: cert and key are required unless insecure: true"
                )
            _check_files(problems, "exporters.server.tls", srv.tls.ca, srv.tls.cert, srv.tls.key)
        _check_auth(problems, "exporters.server", srv.username, srv.password_file)
    _check_tunnels(exp.tunnel, problems)


def _check_otlp(cfg: Config, problems: list[str]) -> None:
    otlp = cfg.exporters.otlp
    if otlp is None or not otlp.enabled:
        return
    where = "exporters.otlp"
    fastest = min((cfg.interval_of(f.name) for f in fields(Sources) if getattr(cfg.sources, f.name).enabled),
                  default=float(cfg.interval))
    if otlp.interval < fastest:
        problems.append(f"{where}.interval: must be at least the agent's interval ({Duration(fastest)}), "
                        f"got {otlp.interval}")
    if not 1 <= otlp.queue <= 10_000:
        problems.append(f"{where}.queue: must be at least 1 and at most 10000, got {otlp.queue}")
    if otlp.timeout < 0.1:
        problems.append(f"{where}.timeout: must be at least 100ms, got {otlp.timeout}")
    if not otlp.insecure:
        _check_files(problems, f"{where}.tls", otlp.tls.ca, otlp.tls.cert, otlp.tls.key)
        if bool(otlp.tls.cert) != bool(otlp.tls.key):
            problems.append(f"{where}.tls: cert and key go together (mTLS)")


MAX_TUNNELS = 10  # as NVUE's grpc-tunnel


def _check_tunnels(tunnels: list[TunnelServer], problems: list[str]) -> None:
    if len(tunnels) > MAX_TUNNELS:
        problems.append(f"exporters.tunnel: at most {MAX_TUNNELS} servers, got {len(tunnels)}")
    names: set[str] = set()
    seen: set[tuple[str, int, str | None]] = set()
    for i, t in enumerate(tunnels):
        where = f"exporters.tunnel[{i}]"
        if not t.name:
            t.name = f"tunnel{i}"
        if t.name in names:
            problems.append(f"{where}.name: duplicate tunnel server name {t.name!r}")
        names.add(t.name)
        host = t.address.strip()
        if not host or any(c.isspace() for c in host) or "/" in host:
            problems.append(f"{where}.address: expected a host name or IP address, got {t.address!r}")
        elif host.startswith("[") or (host.count(":") == 1 and host.rpartition(":")[2].isdigit()):
            problems.append(f"{where}.address: the port goes in {where}.port, got {t.address!r}")
        if not 0 < t.port < 65536:
            problems.append(f"{where}.port: required, 1-65535, got {t.port}")
        if t.target is not None and not t.target.strip():
            problems.append(f"{where}.target: must not be empty (null: the agent's target)")
        if t.retry_interval < 1:
            problems.append(f"{where}.retry_interval: must be at least 1s, got {t.retry_interval}")
        key = (host, t.port, t.target)
        if key in seen:
            problems.append(f"{where}: registers the same target with {host}:{t.port} twice")
        seen.add(key)
        if not t.insecure:
            _check_files(problems, f"{where}.tls", t.tls.ca, t.tls.cert, t.tls.key)
            if bool(t.tls.cert) != bool(t.tls.key):
                problems.append(f"{where}.tls: cert and key go together (mTLS)")


def _check_auth(problems: list[str], where: str, username: str | None, password_file: str | None) -> None:
    if password_file and not username:
        problems.append(f"{where}.password_file: needs username")
    if password_file:
        problem = _file_problem(password_file, None)
        if problem:
            problems.append(f"{where}.password_file: {problem}")
        else:
            try:
                mode = os.stat(password_file).st_mode & 0o777
            except OSError:
                mode = 0
            if mode & 0o007:  # a secret any local user can read is no secret
                problems.append(f"{where}.password_file: readable by other users (mode {mode:04o}); "
                                "chmod 0640 (group swtel) or 0600")


def _loopback(host: str) -> bool:
    """True for an address only this host reaches (127.0.0.0/8, ::1, localhost)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _check_control(ctl: Control, problems: list[str]) -> None:
    if not ctl.socket.startswith("/"):
        problems.append(f"control.socket: expected an absolute path, got {ctl.socket!r}")
    elif len(os.fsencode(ctl.socket)) > _SUN_PATH_MAX:
        problems.append(f"control.socket: longer than {_SUN_PATH_MAX} bytes, too long for a UNIX socket")
    if ctl.group is not None and not ctl.group.strip():
        problems.append("control.group: must not be empty (use null to keep the agent's group)")


def _check_insights(ins: Insights, problems: list[str], cfg: Config | None = None) -> None:
    def finite(where: str, value: float) -> bool:
        if value != value or value in (float("inf"), float("-inf")):  # NaN or infinite
            problems.append(f"insights.{where}: must be a finite number, got {value}")
            return False
        return True

    def positive(where: str, value: float) -> None:
        if finite(where, value) and value <= 0:
            problems.append(f"insights.{where}: must be positive, got {value}")

    def share(where: str, value: float) -> None:
        if finite(where, value) and not 0 < value <= 1:
            problems.append(f"insights.{where}: expected 0 < x <= 1, got {value}")

    def ratio(where: str, value: float) -> None:
        if finite(where, value) and not 0 < value < 1:
            problems.append(f"insights.{where}: expected a ratio 0 < x < 1 (e.g. 1e-12), got {value}")

    def at_most(where: str, value: float, limit: float) -> None:
        if _finite(value) and value > limit:
            problems.append(f"insights.{where}: must be at most {limit:g}, got {value:g}")

    if not 1 <= ins.history <= MAX_HISTORY:
        problems.append(f"insights.history: must be at least 1 and at most {MAX_HISTORY}, got {ins.history}")
    for name in ("error_burst", "link_flap", "drop_burst", "roce_retrans"):
        det = getattr(ins, name)
        if det.threshold < 1:
            problems.append(f"insights.{name}.threshold: must be at least 1, got {det.threshold}")
        elif det.threshold > MAX_COUNT:
            problems.append(f"insights.{name}.threshold: must be at most {MAX_COUNT}, got {det.threshold}")
        positive(f"{name}.window", det.window)
    for name in ("error_burst", "roce_retrans"):
        det = getattr(ins, name)
        if not det.counters:
            problems.append(f"insights.{name}.counters: must not be empty")
        for i, counter in enumerate(det.counters):
            if not counter.strip():
                problems.append(f"insights.{name}.counters[{i}]: must not be empty")
    for name in ("error_burst", "link_flap", "pfc_storm", "drop_burst", "imbalance", "throughput_dip",
                 "roce_retrans"):
        finite(f"{name}.clear_after", getattr(ins, name).clear_after)
    err = ins.error_burst
    ratio("error_burst.symbol_ber", err.symbol_ber)
    ratio("error_burst.pre_fec_ber_warning", err.pre_fec_ber_warning)
    ratio("error_burst.pre_fec_ber_critical", err.pre_fec_ber_critical)
    if err.pre_fec_ber_warning > err.pre_fec_ber_critical:
        problems.append(
            "insights.error_burst.pre_fec_ber_warning: must not exceed pre_fec_ber_critical, "
            f"got {err.pre_fec_ber_warning} > {err.pre_fec_ber_critical}"
        )
    pfc = ins.pfc_storm
    positive("pfc_storm.pause_rate", pfc.pause_rate)
    at_most("pfc_storm.pause_rate", pfc.pause_rate, 1e9)
    positive("pfc_storm.window", pfc.window)
    share("pfc_storm.paused_share", pfc.paused_share)
    imb = ins.imbalance
    if finite("imbalance.max_over_mean", imb.max_over_mean) and imb.max_over_mean <= 1:
        problems.append(f"insights.imbalance.max_over_mean: must be greater than 1, got {imb.max_over_mean}")
    at_most("imbalance.max_over_mean", imb.max_over_mean, 1000)
    positive("imbalance.cv", imb.cv)
    at_most("imbalance.cv", imb.cv, 100)
    at_most("imbalance.min_mean_bps", imb.min_mean_bps, 1e13)
    positive("imbalance.window", imb.window)
    if finite("imbalance.min_mean_bps", imb.min_mean_bps) and imb.min_mean_bps < 0:
        problems.append(f"insights.imbalance.min_mean_bps: must not be negative, got {imb.min_mean_bps}")
    for group, ports in imb.groups.items():
        twice = sorted({p for p in ports if ports.count(p) > 1})
        if twice:
            problems.append(f"insights.imbalance.groups.{group}: names {', '.join(map(repr, twice))} more than "
                            "once (a member counts once: list each port once)")
        if len(set(ports)) < 2 and not any(_is_glob(p) for p in ports):
            got = repr(ports) if len(ports) <= 4 else _short(ports)
            problems.append(f"insights.imbalance.groups.{group}: needs at least 2 ports, got {got}")
        for i, port in enumerate(ports):
            if not port.strip():
                problems.append(f"insights.imbalance.groups.{group}[{i}]: must not be empty")
    for name in ("pfc_storm", "imbalance"):
        windows = getattr(ins, name).windows
        if not 1 <= windows <= MAX_WINDOWS:
            problems.append(f"insights.{name}.windows: must be at least 1 and at most {MAX_WINDOWS}, "
                            f"got {windows}")
    dip = ins.throughput_dip
    positive("throughput_dip.baseline", dip.baseline)
    share("throughput_dip.dip_ratio", dip.dip_ratio)
    share("throughput_dip.min_utilization", dip.min_utilization)
    positive("throughput_dip.max_duration", dip.max_duration)
    _check_windows(ins, problems, cfg)


# Which sources feed each detector with a `window` (agent/insights/classify.py: the paths
# each semantic is read from): its window is checked against the fastest of them.
_DETECTOR_SOURCES = {
    "error_burst": ("netdev", "ethtool", "asic"),
    "link_flap": ("netdev", "ethtool", "asic"),
    "pfc_storm": ("ethtool", "asic"),
    "drop_burst": ("netdev", "ethtool", "asic"),
    "imbalance": ("netdev", "ethtool", "asic"),
    "roce_retrans": ("rdma", "asic"),
}


def _is_glob(pattern: str) -> bool:
    return any(c in pattern for c in "*?[")


def _check_windows(ins: Insights, problems: list[str], cfg: Config | None) -> None:
    """Events that cannot flap and windows that can hold a sample (docs/insights.md,
    "Windows and clear_after"): a `window` set below the poll interval of the sources the
    detector reads is refused (it never holds more than one sample; the default windows,
    shorter than a slow interval, keep counting long samples pro rata as documented), and
    `clear_after` must be at least `window` (a detector judges its rule once per window at
    most, so a shorter clear_after clears an ongoing fault between two judgements and raises
    it again: one fault, many events)."""
    for name, sources in _DETECTOR_SOURCES.items():
        det = getattr(ins, name)
        if not det.enabled or not _finite(det.window) or det.window <= 0:
            continue
        if _finite(det.clear_after) and det.clear_after < det.window:
            problems.append(f"insights.{name}.clear_after: must be at least the window "
                            f"(insights.{name}.window, {Duration(det.window)}), got {Duration(det.clear_after)}: "
                            "a shorter one clears an ongoing fault between two judgements and raises it "
                            "again")
        if cfg is None or det.window == type(det)().window:
            continue
        polled = [(cfg.interval_of(s), s) for s in sources if getattr(cfg.sources, s).enabled]
        if not polled:
            continue
        fastest, source = min(polled, key=lambda item: item[0])
        if det.window < fastest:
            problems.append(f"insights.{name}.window: must be at least the poll interval of the sources it "
                            f"reads ({Duration(fastest)}, sources.{source}), got {Duration(det.window)}")


def _check_sim_config(asic: AsicSource, problems: list[str]) -> None:
    """The built-in sim's config string, judged by the sim's own parser: the sim is opened
    with it (parse and build, no I/O; it is installed with the package) and closed again, so
    validate refuses exactly what the agent's open() would."""
    if asic.plugin not in ASIC_BUILTIN or not (asic.enabled or asic.config.strip()) or len(asic.config) > 4096:
        return
    problem = sim_config_problem(asic.config)
    if problem:
        problems.append(f"sources.asic.config: {problem}")


def sim_config_problem(config: str) -> str | None:
    """Why the built-in sim's open() refuses ``config``, in its own words, or None."""
    from agent import _backend
    from agent.asic import builtin_path

    path = builtin_path("sim")
    if path is None:
        return None  # not built: the agent says so at load; nothing to ask here
    try:
        handle = _backend.reader.asic_open(path, config)
    except OSError as exc:
        text = str(exc)
        _, sep, reason = text.partition("open failed: ")
        return reason if sep else text
    except ValueError as exc:  # an embedded NUL, which no C string carries
        return f"not a valid plugin config string ({exc})"
    _backend.reader.asic_close(handle)
    return None


def _check_plugin_file(asic: AsicSource, problems: list[str]) -> None:
    """An enabled ASIC plugin given by path: the checks made before it is loaded
    (agent/asic/trust.py: owner, modes, directories, ELF, the entry symbol)."""
    if not asic.enabled or asic.plugin in ASIC_BUILTIN or not asic.plugin.startswith("/") or \
            len(asic.plugin) > MAX_STRING:
        return
    from agent.asic.trust import check_plugin

    try:
        check_plugin(asic.plugin)
    except OSError as exc:
        problems.append(f"sources.asic.plugin: {exc}")


_PEM_KIND = {"ca": "certificate", "cert": "certificate", "key": "private key"}
_PEM_BEGIN = re.compile(rb"-----BEGIN ([A-Z0-9 ]+)-----")


def _file_problem(path: str, kind: str | None) -> str | None:
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
    if kind == "certificate" and b"CERTIFICATE" not in labels:
        return f"{_short(path)} holds no PEM certificate (-----BEGIN CERTIFICATE-----)"
    if kind == "private key" and not any(label.endswith(b"PRIVATE KEY") for label in labels):
        return f"{_short(path)} holds no PEM private key (-----BEGIN ... PRIVATE KEY-----)"
    return None


def _check_files(problems: list[str], where: str, *paths: str | None) -> None:
    for label, path in zip(("ca", "cert", "key"), paths, strict=False):
        if path:
            problem = _file_problem(path, _PEM_KIND[label])
            if problem:
                problems.append(f"{where}.{label}: {problem}")


# ---------------------------------------------------------------- YAML loading


class _Loader(yaml.SafeLoader):
    """SafeLoader that keeps ``0660`` as text (YAML 1.1 would make it octal 432), rejects
    duplicate keys, which plain YAML silently resolves to the last one, and bounds what a
    file can cost: nesting deeper than :data:`MAX_DEPTH` and more than :data:`MAX_VALUES`
    values after alias expansion ("billion laughs") are errors, raised while composing,
    before anything is expanded."""

    def __init__(self, stream: Any) -> None:
        super().__init__(stream)
        self._depth = 0
        self._values = 0  # values composed so far, an alias counting as everything it stands for
        self._sizes: dict[int, int] = {}  # id(node) -> its expanded size (nodes are immutable here)

    def _size(self, node: yaml.Node) -> int:
        size = self._sizes.get(id(node))
        if size is None:
            size = 1
            if isinstance(node, yaml.SequenceNode):
                size += sum(self._size(n) for n in node.value)
            elif isinstance(node, yaml.MappingNode):
                size += sum(self._size(k) + self._size(v) for k, v in node.value)
            self._sizes[id(node)] = size
        return size

    def _count(self, n: int, mark: Any) -> None:
        self._values += n
        if self._values > MAX_VALUES:
            raise yaml.composer.ComposerError(
                None, None, f"too many values: more than {MAX_VALUES} after expanding aliases", mark)

    def compose_node(self, parent: Any, index: Any) -> Any:
        event = self.peek_event()
        if isinstance(event, yaml.AliasEvent):
            node = super().compose_node(parent, index)
            self._count(self._size(node), event.start_mark)
            return node
        self._count(1, event.start_mark)
        self._depth += 1
        try:
            if self._depth > MAX_DEPTH:
                raise yaml.composer.ComposerError(
                    None, None, f"nesting too deep (more than {MAX_DEPTH} levels)", event.start_mark)
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=True)
            if isinstance(key, str | int | float | bool) and key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"duplicate key {key!r}", key_node.start_mark
                )
            if isinstance(key, str | int | float | bool):
                seen.add(key)
        return super().construct_mapping(node, deep=deep)


def _construct_int(loader: yaml.SafeLoader, node: yaml.ScalarNode) -> Any:
    text = loader.construct_scalar(node)
    if re.fullmatch(r"0[0-7]+", str(text)):
        return str(text)  # a file mode; int fields reject it with a clear message
    return yaml.SafeLoader.construct_yaml_int(loader, node)


_Loader.add_constructor("tag:yaml.org,2002:int", _construct_int)

# ---------------------------------------------------------------- entry points


def parse(text: str, path: str | None = None, *, plugin_file: bool = False) -> Config:
    """Parse and validate YAML text; raise :class:`ConfigError` listing every problem.
    ``plugin_file`` (``swtel validate``): also check the enabled ASIC plugin's file as the
    agent does before loading it (the agent itself runs on with that source unhealthy)."""
    if len(text) > MAX_FILE_BYTES:
        raise ConfigError([f"{path or 'config'}: larger than {MAX_FILE_BYTES // 1024} KiB"])
    try:
        data = yaml.load(text, Loader=_Loader)  # noqa: S506 - a SafeLoader subclass
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}" if mark else "YAML"
        problem = str(getattr(exc, "problem", None) or exc)
        raise ConfigError([f"{where}: {problem if len(problem) <= 200 else problem[:197] + '...'}"]) from None
    except RecursionError:  # not expected with MAX_DEPTH; never a traceback all the same
        raise ConfigError(["YAML: nesting too deep"]) from None
    problems: list[str] = []
    cfg = _build(Config, data, "", problems)
    # The cross-field rules run even when some values were refused (those keep their
    # defaults), so that every problem of a file is reported at once.
    _check(cfg, problems)
    if plugin_file:
        _check_plugin_file(cfg.sources.asic, problems)
    if problems:
        raise ConfigError(problems)
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


def load(path: str, *, plugin_file: bool = False) -> Config:
    """Read and validate a config file (``plugin_file``: see :func:`parse`)."""
    return parse(read_text(path), path, plugin_file=plugin_file)
