"""What every counter source is, and the registry they add themselves to."""

from __future__ import annotations

import errno
import fnmatch
import re
import socket
import struct
import time
from array import array
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from agent import caps, registry
from agent.config import Duration, setting
from agent.counters import Container, CounterTable, StateUpdate
from agent.insights import classify
from agent.pathgrammar import interface_path

if TYPE_CHECKING:
    from agent.config import Config
    from agent.links import Link

MACHINERY = True  # the sources' base class, not a plugin (agent/registry.py load_plugins)

REGISTRY: dict[str, type[Source]] = {}

#: what ``Source.read`` returns when it produced no data this time (the engine must not diff
#: the buffer: it may be freshly zeroed for a new layout)
NO_DATA = -1


@dataclass
class SourceConfig:
    """What every source's section has; a source's ``config_class`` adds its own keys."""

    enabled: bool = setting(True)
    interval: Duration | None = setting(None, type="duration (10ms–1h) or null")  # None: the top-level one


def rank_setting(default: int) -> Any:
    """``rank``, the key of a source that gives an interface's counters: which source's value
    a path carries when two give the same counter of one port (agent/ports.py elect)."""
    return setting(default, type="integer", doc=(
        "precedence of this source's counters where another source gives the same counter of one "
        "port (the kernel's `rx_bytes` and an ASIC plugin's `HwIfInOctets` are both the port's "
        "`in-octets`): the higher rank is published on the path (the OpenConfig leaf), the other "
        "under `swtel:` with its source's name in the path "
        "([paths.md](paths.md#one-counter-one-path-when-two-sources-give-it)); `0`: never takes a "
        "path from another source (ethtool's default: without a plugin no path moves). Defaults: "
        "asic 2, netdev 1, ethtool 0"))


def register(cls: type[Source]) -> type[Source]:
    """Class decorator: make a source available under ``cls.name``, and its config section
    (``sources.<name>``: ``cls.config_class``, ``cls.check``, ``cls.doc``) to the config."""
    REGISTRY[cls.name] = cls
    # what it reads that the detectors use: classify's tables are built from these
    classify.declare_leaves(cls.semantics)
    for sem, level in cls.levels.items():
        classify.declare(sem, level=level)
    for prefix, matcher in cls.classifiers.items():
        classify.declare_prefix(prefix, matcher)
    for metric in cls.info_metrics:
        registry.INFO_METRICS[metric.name] = metric
    for far in cls.far_ends:
        registry.FAR_ENDS[far.container] = far
    for alias in cls.port_aliases:
        registry.PORT_ALIASES[alias.container] = alias
    registry.SOURCES.add(registry.Section(cls.name, cls.config_class, check=cls.check,
                                          validate_check=cls.validate_check, doc=cls.doc, plugin=cls))
    return cls


class Source:
    """Reads one kind of counter into a flat u64 buffer.

    Lifecycle: ``setup(links)`` (re)builds ``table`` and ``values`` for the
    current links; ``read()`` fills ``values`` in place (a port that could not
    be read keeps its previous values, so it shows no change); ``close()``.
    """

    name: ClassVar[str]
    #: the dataclass of its config section (``sources.<name>``): ``enabled``, ``interval`` and its own keys
    config_class: ClassVar[type]
    #: the section's meaning in docs/config.md
    doc: ClassVar[str] = ""
    #: True when the table depends on the set of network links.
    uses_links: ClassVar[bool] = True
    #: True when the source reads ports (interfaces, a plugin's ports, RDMA ports): one that
    #: selects none is reported in status and, after the health grace, makes health red
    selects_ports: ClassVar[bool] = True
    #: True when the source's table may come seconds after the agent starts (an ASIC plugin
    #: opening in its helper): until then it keeps the standard leaves it may give (``serves``)
    #: from lower-ranked sources (agent/ports.py elect)
    opens_late: ClassVar[bool] = False
    #: Linux capabilities its calls need (agent/caps.py): status and ``swtel validate`` say
    #: plainly when this process lacks one, rather than counting a failed call per poll
    capabilities: ClassVar[tuple[int, ...]] = ()
    #: ``swtel validate`` only: ``validate_check(section, where, problems, cfg)``, see ``check``
    validate_check: ClassVar[Any] = None
    # What it reads that the detectors use (agent/insights/classify.py builds its tables from
    # these at @register; a detector names the semantics in its ``sems``):
    #: ``(tail of the container path below the port, leaf) -> (semantic, sub)``, e.g.
    #: ``("state/counters", "in-widgets"): ("widgets", "")``; the OpenConfig rows several sources
    #: share are classify's own
    semantics: ClassVar[Mapping[tuple[str, str], tuple[str, str]]] = {}
    #: semantic -> True for a level (read from a gauge), False for a counter
    levels: ClassVar[Mapping[str, bool]] = {}
    #: container path prefix (outside the interface and qos trees) -> ``matcher(spec, port)``,
    #: which returns ``(port, semantic, sub)`` or None
    classifiers: ClassVar[Mapping[str, Callable[[Any, str], tuple[str, str, str] | None]]] = {}
    #: info series the metric exporters build from its text states (agent/registry.py
    #: InfoMetric; OTLP and remote write carry them, docs/paths.md lists them)
    info_metrics: ClassVar[tuple[registry.InfoMetric, ...]] = ()
    #: states that name a local port's far end (registry.FarEnd: sources.lldp's neighbours) and
    #: that tie a port to the interface it stands on (registry.PortAlias: an RDMA port's
    #: netdev): every event on the port names its far end (agent/insights/neighbors.py)
    far_ends: ClassVar[tuple[registry.FarEnd, ...]] = ()
    port_aliases: ClassVar[tuple[registry.PortAlias, ...]] = ()

    @classmethod
    def check(cls, section: Any, where: str, problems: list[str], cfg: Config) -> None:
        """The section's rules that its types cannot express: append one problem per broken
        rule, each starting with its YAML path (``where`` is ``sources.<name>``)."""

    @classmethod
    def doc_paths(cls) -> list[str]:
        """Its part of docs/paths.md (agent/pathdoc.py): markdown lines, ending with a blank
        one; ``doc_row``/``doc_rule_row`` make the table rows."""
        return []

    def __init__(self, cfg: Config) -> None:
        self.cfg = cfg
        self.section = getattr(cfg.sources, self.name)
        self.table = CounterTable(self.name, [])
        self.values = array("Q")
        self.errors = 0
        self.last_error: str | None = None
        self.ports: list[str] = []
        #: the source's own collection time of the last read, when it has one (an ASIC
        #: plugin's timestamp); 0: the engine stamps the sample with the time it asked
        self.sample_ts_ns = 0
        #: port -> link speed in bits/s, where the source knows it (an ASIC plugin): the
        #: engine hands it to the change kernel's jump limits and to the detectors
        self.port_speeds: dict[str, int] = {}
        #: a condition that makes the source unhealthy while it lasts (a plugin that cannot be
        #: opened, a layout that keeps changing, a crashed plugin); None when all is well
        self.fault: str | None = None
        self.clock_refused = 0  # samples whose own timestamp was refused (agent's clock used)

    @property
    def needs_setup(self) -> bool:
        """True when the source wants ``setup`` again before the next read (e.g. a driver's
        stat count changed)."""
        return False

    @property
    def starting(self) -> bool:
        """True while the source cannot yet have read anything (an ASIC plugin still being
        opened in its helper process): its attempts do not count toward the first snapshot."""
        return False

    @property
    def enabled(self) -> bool:
        return bool(self.section.enabled)

    def missing_capabilities(self) -> list[str]:
        """The names of the :attr:`capabilities` this process's effective set lacks."""
        return caps.missing(self.capabilities) if self.capabilities else []

    def serves(self, port: str) -> bool:
        """Whether this source may give ``port``'s counters (its interface globs), asked while
        it opens and has no table yet."""
        return True

    def setup(self, links: dict[int, Link]) -> None:
        raise NotImplementedError

    def read(self) -> int:
        """Fill ``self.values``; return how many units (ports, files) were read, or
        ``NO_DATA`` when nothing was read this time (the values must not be diffed)."""
        raise NotImplementedError

    def inherit(self, old: Source) -> None:
        """Take over what a replaced instance of this source knew (config reload), so
        nothing already sent is sent again. Default: nothing to carry."""

    def states(self, ts_ns: int) -> list[StateUpdate]:
        """Non-counter values changed since the last call (default: none)."""
        return []

    def close(self) -> None:
        pass

    def interrupt(self) -> None:
        """From another thread, when the agent stops: a ``setup`` or ``read`` blocked in
        outside code (an ASIC plugin's helper) returns at once. Default: nothing to cut short."""

    def bind_insights(self, insights: Callable[[], Any]) -> None:
        """The engine hands every source ``insights``, which returns its current insights
        pipeline (None: insights off; a reload may swap it). Default: not read."""

    def info(self) -> dict[str, Any]:
        """Extra per-source fields for ``swtel status``."""
        return {}

    def note_error(self, message: str) -> None:
        self.errors += 1
        self.last_error = message


def doc_row(source: str, name: str, path: str, kind: str = "counter") -> str:
    """A row of docs/paths.md: a source's counter name and the path it is streamed under."""
    return f"| {source} | `{name}` | `{path}` | {kind} |"


def doc_rule_row(source: str, rule: Any) -> str:
    """A row of docs/paths.md for a driver table's rule (agent/sources/drivers.py)."""
    origin, container = rule.container
    path = container.format(port="X", n="N") + "/" + rule.leaf.format(name="<name>", n="N")
    shown = path if origin == "openconfig" else f"swtel:{path}"
    pattern = rule.pattern.pattern.strip("^$").replace("(?P<n>[0-7])", "N").replace("(?P<n>\\d+)", "N")
    pattern = pattern.replace("(?P<n>\\d)", "N").replace("(?P<name>\\w+)", "<name>")
    return doc_row(source, pattern, shown, "gauge" if rule.kind == 1 else "counter")


def counter_wanted(name: str, include: list[str], exclude: list[str]) -> bool:
    """Counter-name filter: include globs (empty = all), then exclude globs."""
    if include and not any(fnmatch.fnmatchcase(name, p) for p in include):
        return False
    return not any(fnmatch.fnmatchcase(name, p) for p in exclude)


_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])")


def leaf_name(raw: str) -> str:
    """A driver's counter name as a path leaf: lowercase, hyphenated (``HwIfInOctets`` ->
    ``hw-if-in-octets``, ``rx_prio3_bytes`` -> ``rx-prio3-bytes``)."""
    text = _CAMEL.sub("-", raw.strip()).replace("_", "-").replace(" ", "-").replace(".", "-")
    text = re.sub(r"[^A-Za-z0-9-]", "-", text).lower()
    return re.sub(r"-{2,}", "-", text).strip("-") or "unnamed"


def interface(port: str, origin: str, tail: str) -> Container:
    """Container below one interface, e.g. ``interface(p, OPENCONFIG, "state/counters")``."""
    return Container(origin, f"{interface_path(port)}/{tail}")


NETLINK_GENERIC = 16
#: SO_RCVTIMEO of a generic netlink socket: the kernel answers at once; this bounds a stuck request
GENL_RECV_TIMEOUT_S = 1


class GenlSocket:
    """One NETLINK_GENERIC socket of a source (devlink, ethnl): blocking with a receive timeout
    (not settimeout, which would make the fd non-blocking for the C reader), its family
    resolved on first use by ``resolve(fd)`` and then kept."""

    def __init__(self, resolve: Callable[[int], int]) -> None:
        self._sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_GENERIC)
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, struct.pack("ll", GENL_RECV_TIMEOUT_S, 0))
        self._resolve = resolve
        self._family: int | None = None

    @property
    def fd(self) -> int:
        return self._sock.fileno()

    def family(self) -> int:
        if self._family is None:
            self._family = self._resolve(self.fd)
        return self._family

    def close(self) -> None:
        self._sock.close()


#: a generic netlink source's states (:class:`GenlSource`): ready to poll, and a setup that
#: failed (``"setup failed: <why>"``)
GENL_OK = "ok"
SETUP_FAILED = "setup failed"
#: a device removed under a generic netlink source: set up again, not an error
GENL_GONE = (errno.ENODEV, errno.ENOENT)


class GenlSource(Source):
    """A source on one generic netlink family (devlink, devlink_trap, ethnl): its kernel
    interface ``io`` (a :class:`GenlSocket`, or what tests put there) built on first use by
    :meth:`make_io`, the family id it resolved, and when it wants ``setup`` again: after a
    poll found the layout changed (``_stale``) or, after a failure, ``retry_s`` later."""

    retry_s: ClassVar[float] = 30.0

    def __init__(self, cfg: Config) -> None:
        super().__init__(cfg)
        self.io: Any = None  # built on first setup (make_io); tests put their own here
        self._family: int | None = None
        self._stale = False
        self._retry_at: float | None = None

    def make_io(self) -> Any:
        """The source's kernel interface (a :class:`GenlSocket`), built on first setup."""
        raise NotImplementedError

    def _open_io(self) -> Any:
        if self.io is None:
            self.io = self.make_io()
        return self.io

    def _retry_later(self) -> None:
        self._retry_at = time.monotonic() + self.retry_s

    @property
    def needs_setup(self) -> bool:
        return self._stale or (self._retry_at is not None and time.monotonic() >= self._retry_at)

    def close(self) -> None:
        if self.io is not None:
            self.io.close()
            self.io = None


class GenlDiscoverySource(GenlSource):
    """A generic netlink source whose setup discovers what to poll (devlink, devlink_trap).

    ``setup`` resolves the family once (``io.family()``) and calls :meth:`discover`, which
    sets ``state`` (``GENL_OK`` when there is something to poll, else a sentence status
    shows). A family the kernel has not registered yet (ENOENT before it ever resolved) is
    the state ``no_family``, not an error; any other failure is ``setup failed: <why>``,
    counted, with :meth:`forget`. Then :meth:`after_setup`. Any state but ``GENL_OK`` is
    looked for again after ``retry_s``.

    ``read`` polls (:meth:`poll`) only in ``GENL_OK``: otherwise an empty good read, or no
    read at all after a failed setup (health sees the source go stale). A poll's OSError
    for a device gone (``GENL_GONE``) sets up again; any other OSError or ValueError is
    counted under ``label`` and the read gives no data.
    """

    #: the state while the family is not registered (the kernel has no such driver yet)
    no_family: ClassVar[str]
    #: error messages start with it (``"<label>: <error>"``, ``"<label> setup: <error>"``)
    label: ClassVar[str]

    def __init__(self, cfg: Config) -> None:
        super().__init__(cfg)
        self.state = self.no_family

    def discover(self, links: dict[int, Link]) -> None:
        """What there is to poll, from the kernel's dumps; sets ``state``. OSError and
        ValueError make the setup fail."""
        raise NotImplementedError

    def forget(self) -> None:
        """A failed setup: nothing is polled (the table emptied)."""

    def after_setup(self) -> None:
        """After each setup, failed or not (e.g. a capability the polls need)."""

    def poll(self) -> int:
        """One read in state ``GENL_OK`` (see :meth:`Source.read`); its I/O may raise OSError
        or ValueError, which ``read`` handles."""
        raise NotImplementedError

    def setup(self, links: dict[int, Link]) -> None:
        self._stale = False
        self._retry_at = None
        io = self._open_io()
        try:
            self._family = io.family()
            self.discover(links)
        except (OSError, ValueError) as exc:
            if isinstance(exc, OSError) and exc.errno == errno.ENOENT and self._family is None:
                self.state = self.no_family  # the family is registered with the first driver of it
            else:
                self.state = f"{SETUP_FAILED}: {exc}"
                self.note_error(f"{self.label} setup: {exc}")
            self.forget()
        self.after_setup()
        if self.state != GENL_OK:
            self._retry_later()

    def read(self) -> int:
        if self.state != GENL_OK:
            # nothing to ask: an empty good poll, status says why; a setup that failed is no
            # poll at all (health sees the source go stale)
            return NO_DATA if self.state.startswith(SETUP_FAILED) else 0
        try:
            return self.poll()
        except OSError as exc:
            if exc.errno in GENL_GONE:
                self._stale = True
            else:
                self.note_error(f"{self.label}: {exc}")
            return NO_DATA
        except ValueError as exc:
            self.note_error(f"{self.label}: {exc}")
            return NO_DATA
