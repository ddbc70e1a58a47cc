"""What every detector is, the registry they add themselves to, and the event they raise.

A detector reads per-port samples: the deltas one source saw for one port since its
previous sample of that port, with the sample's timestamp ``ts`` and length ``dt`` (ns,
from the counters' collection times, never wall time). It keeps its own small
per-port state and calls ``ctx.hit(...)`` whenever its rule holds; the pipeline owns the
events (raise, update, clear after ``clear_after`` without a hit, history).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol

from agent import registry
from agent.config import Duration, _finite, setting
from agent.insights import classify

MACHINERY = True  # the detectors' base class, not a plugin (agent/registry.py load_plugins)

MAX_COUNT = 1_000_000_000  # thresholds (events within a window)
MAX_WINDOWS = 1000  # consecutive windows (pfc_storm, imbalance)

#: how docs/config.md words the types of the keys most detectors share
WINDOW_TYPE = "duration, > 0 and ≤ 24h; if set, ≥ the poll interval of the sources it reads"
CLEAR_AFTER_TYPE = "duration, ≥ `window`, ≤ 24h"
THRESHOLD_TYPE = "integer, 1–10^9"
WINDOWS_TYPE = "integer, 1–1000"

REGISTRY: dict[str, type[Detector]] = {}

WARNING = "warning"
CRITICAL = "critical"
SEVERITY_RANK = {WARNING: 1, CRITICAL: 2}

NS = 1_000_000_000

Acc = dict[tuple[str, str], int]  # (sem, sub) -> delta over the sample


class Context(Protocol):
    """What a detector sees of the pipeline that feeds it (agent/insights/pipeline.py): declared
    here so that detectors depend on this file alone, never on the pipeline."""

    log: Any
    speeds: dict[str, int]

    def hit(self, det: Detector, etype: str, key: Any, ts: int, severity: str, peak: float,
            unit: str, message: str, interfaces: list[str]) -> Event: ...

    def port_names(self) -> list[str]: ...

    def open_events(self) -> list[Event]: ...


def register(cls: type[Detector]) -> type[Detector]:
    """Class decorator: make a detector available under ``cls.name``, and its config section
    (``insights.<name>``: ``cls.config_class``, ``cls.check``, ``cls.doc``) to the config."""
    REGISTRY[cls.name] = cls
    registry.DETECTORS.add(registry.Section(cls.name, cls.config_class, check=cls.check, doc=cls.doc,
                                            plugin=cls))
    return cls


@dataclass
class WindowedConfig:
    """The keys of a detector that counts within a window (the ``WindowCount`` detectors,
    drop_reason, error_burst): at least ``threshold`` within ``window`` raise its event, and
    ``clear_after`` without one clears it. A detector's config subclasses it, restating a key
    only to change its default or its words (``threshold`` says what is counted); its own
    keys follow these four."""

    enabled: bool = setting(True)
    threshold: int = setting(100, type=THRESHOLD_TYPE, doc="events within `window`")
    window: Duration = setting(Duration(1.0), type=WINDOW_TYPE)
    clear_after: Duration = setting(Duration(30.0), type=CLEAR_AFTER_TYPE)


# ---------------------------------------------------------------- config rules
# Detector thresholds are documented with the reasons for each default in docs/insights.md. A
# detector raises an event when its rule holds and clears it after the port (or group) has been
# quiet for `clear_after`. Windows are measured in sample time (the collection timestamps of the
# counters), so a window never holds less data than it says.


class Rules:
    """The number rules of one detector section, each problem named by its YAML path
    (``where``, e.g. ``insights.pfc_storm``)."""

    def __init__(self, section: Any, where: str, problems: list[str]) -> None:
        self.section = section
        self.where = where
        self.problems = problems

    def finite(self, key: str) -> bool:
        value = getattr(self.section, key)
        if not _finite(value):  # NaN or infinite
            self.problems.append(f"{self.where}.{key}: must be a finite number, got {value}")
            return False
        return True

    def positive(self, key: str) -> None:
        if self.finite(key) and getattr(self.section, key) <= 0:
            self.problems.append(f"{self.where}.{key}: must be positive, got {getattr(self.section, key)}")

    def share(self, key: str) -> None:
        if self.finite(key) and not 0 < getattr(self.section, key) <= 1:
            self.problems.append(f"{self.where}.{key}: expected 0 < x <= 1, got {getattr(self.section, key)}")

    def ratio(self, key: str) -> None:
        if self.finite(key) and not 0 < getattr(self.section, key) < 1:
            self.problems.append(f"{self.where}.{key}: expected a ratio 0 < x < 1 (e.g. 1e-12), "
                                 f"got {getattr(self.section, key)}")

    def at_most(self, key: str, limit: float) -> None:
        value = getattr(self.section, key)
        if _finite(value) and value > limit:
            self.problems.append(f"{self.where}.{key}: must be at most {limit:g}, got {value:g}")

    def count(self, key: str, low: int, high: int) -> None:
        value = getattr(self.section, key)
        if not low <= value <= high:
            self.problems.append(f"{self.where}.{key}: must be at least {low} and at most {high}, got {value}")

    def threshold(self) -> None:
        """``threshold``: events within ``window``, 1 to MAX_COUNT."""
        value = self.section.threshold
        if value < 1:
            self.problems.append(f"{self.where}.threshold: must be at least 1, got {value}")
        elif value > MAX_COUNT:
            self.problems.append(f"{self.where}.threshold: must be at most {MAX_COUNT}, got {value}")

    def names(self, key: str) -> None:
        """A non-empty list of non-empty names (``counters``)."""
        names = getattr(self.section, key)
        if not names:
            self.problems.append(f"{self.where}.{key}: must not be empty")
        for i, name in enumerate(names):
            if not name.strip():
                self.problems.append(f"{self.where}.{key}[{i}]: must not be empty")

    def window(self, cfg: Any, reads: tuple[str, ...]) -> None:
        """Events that cannot flap and windows that can hold a sample (docs/insights.md,
        "Windows and clear_after"): a `window` set below the poll interval of the sources the
        detector reads (``reads``) is refused (it never holds more than one sample; the
        default windows, shorter than a slow interval, keep counting long samples pro rata as
        documented), and `clear_after` must be at least `window` (a detector judges its rule
        once per window at most, so a shorter clear_after clears an ongoing fault between two
        judgements and raises it again: one fault, many events)."""
        det, where = self.section, self.where
        if not det.enabled or not _finite(det.window) or det.window <= 0:
            return
        if _finite(det.clear_after) and det.clear_after < det.window:
            self.problems.append(f"{where}.clear_after: must be at least the window "
                                 f"({where}.window, {Duration(det.window)}), got {Duration(det.clear_after)}: "
                                 "a shorter one clears an ongoing fault between two judgements and raises "
                                 "it again")
        if cfg is None or det.window == type(det)().window:
            return
        polled = [(cfg.interval_of(s), s) for s in reads if getattr(cfg.sources, s).enabled]
        if not polled:
            return
        fastest, source = min(polled, key=lambda item: item[0])
        if det.window < fastest:
            self.problems.append(f"{where}.window: must be at least the poll interval of the sources it "
                                 f"reads ({Duration(fastest)}, sources.{source}), got {Duration(det.window)}")


class Detector:
    """One rule over per-port samples.

    ``name`` is the config section (``insights.<name>``), ``types`` the event types it
    raises, ``sems`` the semantics (agent/insights/classify.py) it reads: it is called
    only for samples that carry one of them.
    """

    name: ClassVar[str]
    types: ClassVar[tuple[str, ...]]
    sems: ClassVar[frozenset[str]]
    #: the dataclass of its config section (``insights.<name>``) and the section's meaning in
    #: docs/config.md
    config_class: ClassVar[type]
    doc: ClassVar[str] = ""
    #: the sources it reads (agent/insights/classify.py: the paths each semantic is read
    #: from): a `window` set below the fastest one's poll interval is refused
    reads: ClassVar[tuple[str, ...]] = ()
    #: True when an event's key is one port (its events clear when the port goes away).
    per_port: ClassVar[bool] = True
    #: True: called for every sample of a port whose source it reads (rates, levels);
    #: False: only for samples in which one of its semantics changed (event counters).
    every_sample: ClassVar[bool] = True
    #: what status says while no source reports any semantic it reads ("": nothing)
    no_data: ClassVar[str] = ""
    #: a queue level (bytes) below which a sample of a port it keeps no state for (not in
    #: ``self.ports``) cannot concern it: such samples are not passed (the feed knows the
    #: port's highest queue level of the pass). None: every sample is passed.
    level_gate: int | None = None
    #: the semantics (classify.BITS) that moved in the sample being passed: the feeds set it
    #: before each ``sample`` call, so a detector can skip looking for what did not move; all
    #: bits (-1) when called otherwise
    changed: int = -1

    #: rows below a port it reads that no source declares, as a source's ``semantics`` are written
    #: (``(tail below the port, leaf) -> (sem, sub)``: classify.declare_leaves): paths the sources
    #: already publish, made semantics by the detector that reads them (pfc_sent's out-pause-pkts)
    leaves: ClassVar[Mapping[tuple[str, str], tuple[str, str]]] = {}
    #: ``sems`` as classify.BITS (set for every subclass from its ``sems``)
    sem_bits: ClassVar[int] = 0
    #: a detector whose per-port state lives in arrays updated by a kernel once per pass
    #: (agent/_ext/detect.c) sets a list here: the feeds append its samples ``(port, ts, dt,
    #: acc, owned, changed, ...)`` to it (a sample may carry more items), call :meth:`run_batch`
    #: once, then :meth:`emit` for each sample it named, at that sample's place among the pass's
    #: samples, so that its hits are raised where ``sample`` would have raised them (event ids
    #: and order unchanged); a lazy one (``every_sample`` False) gets the samples it would have
    #: been called for. None: ``sample`` per port.
    batch: list | None = None
    #: it reads FEC bins: the feeds keep their deltas in a row of i64 per port (a sample's 8th
    #: item, feeds.Feed.row), and a ``sample`` call gets them in ``acc`` (feeds.merged) all the same
    reads_rows: ClassVar[bool] = False

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        classify.declare_leaves(cls.leaves)
        cls.sem_bits = classify.mask(getattr(cls, "sems", frozenset()))
        cls.reads_rows = bool(cls.sem_bits & classify.BITS[classify.FEC_BIN])

    def __init__(self, cfg: Any, ctx: Context) -> None:
        self.cfg = cfg
        self.ctx = ctx

    @classmethod
    def check(cls, section: Any, where: str, problems: list[str], cfg: Any) -> None:
        """The section's rules that its types cannot express: append one problem per broken
        rule, each starting with its YAML path (``where`` is ``insights.<name>``)."""
        rules = Rules(section, where, problems)
        rules.finite("clear_after")
        if cls.reads:
            rules.window(cfg, cls.reads)

    @property
    def clear_after_ns(self) -> int:
        """``clear_after``, but never shorter than the detector's ``window``: a rule is judged
        at most once per window, so a shorter one would clear an ongoing fault between two
        judgements and raise it again (config validation refuses it; this holds for any
        config object all the same)."""
        return int(max(self.cfg.clear_after, getattr(self.cfg, "window", 0)) * NS)

    def wants(self, port: str) -> bool:
        """Whether samples of ``port`` concern this detector at all (asked when the port's
        sources are (re)elected, not per sample)."""
        return True

    def sample(self, port: str, ts: int, dt: int, acc: Acc, owned: frozenset[str]) -> None:
        """One sample of ``port``: ``acc`` holds the deltas over ``(ts - dt, ts]``; read only
        the semantics in ``owned`` (another source may be the better one for the rest)."""

    def run_batch(self) -> Sequence[int]:
        """(``batch`` detectors) The pass's samples in ``batch`` through the kernel: the
        indexes (ascending) of those with something to report (:meth:`emit`); empty: none."""
        return ()

    def emit(self, k: int) -> None:
        """(``batch`` detectors) Report what sample ``k`` of the last :meth:`run_batch` found."""

    def batch_of_one(self, port: str, ts: int, dt: int, acc: Acc, owned: frozenset[str]) -> None:
        """(``batch`` detectors) ``sample`` for one sample outside the feeds: a batch of one."""
        pending, self.batch = self.batch, [(port, ts, dt, acc, owned, self.changed)]
        for k in self.run_batch():
            self.emit(k)
        self.batch = pending

    def end_pass(self, ts: int) -> None:
        """Once per engine pass, after every sample (group windows are closed here)."""

    @classmethod
    def doc_paths(cls) -> list[str]:
        """Its part of docs/paths.md: the paths of the values it derives (none by default)."""
        return []

    def states(self) -> list[Any]:
        """The values it derived since the previous pass (gauges: StateUpdates), taken by the
        pipeline after ``end_pass``; they go to the store and every listener as events do."""
        return []

    def forget(self, port: str) -> None:
        """The port is gone."""

    def retire(self, ts: int) -> list[Any]:
        """Disabled by a reload: the states that take back what it published (deletes of its
        gauges). Default: it published none."""
        return []

    def status(self) -> dict[str, Any] | None:
        """What status should say of it beyond its events (None: nothing)."""
        return None


class Window:
    """Values with their sample times; ``total`` is the sum of those within the last
    ``span`` ns. A sample covers ``(ts - dt, ts]``; it is kept while its end lies in
    ``(now - 0.95 span, now]`` (the 5 % absorb poll jitter), so at 100 ms polling a 1 s
    window holds 10 samples and a 100 ms window one."""

    __slots__ = ("span", "items", "total")

    def __init__(self, span_ns: int) -> None:
        self.span = span_ns
        self.items: deque[tuple[int, float]] = deque()
        self.total = 0.0

    def add(self, ts: int, value: float) -> None:
        self.items.append((ts, value))
        self.total += value

    def trim(self, now: int) -> float:
        cutoff = now - self.span + self.span // 20
        items = self.items
        while items and items[0][0] <= cutoff:
            self.total -= items.popleft()[1]
        if not items:
            self.total = 0.0
        return self.total


class WindowCount(Detector):
    """Events counted per port within a sliding ``window``: at least ``threshold`` raise the
    event, judged when new ones arrive (so an event's last time is its last count). A port
    keeps state only while its windows hold something.

    A subclass says what one sample counts (:meth:`counts`, one number per window: drops
    count ingress and egress apart) and words the event (:meth:`report`)."""

    every_sample = False
    #: a sample longer than the window counts pro rata (rates); False: whole (transitions)
    pro_rata: ClassVar[bool] = True

    @classmethod
    def check(cls, section: Any, where: str, problems: list[str], cfg: Any) -> None:
        rules = Rules(section, where, problems)
        rules.threshold()
        rules.positive("window")
        super().check(section, where, problems, cfg)

    def __init__(self, cfg: Any, ctx: Context) -> None:
        super().__init__(cfg, ctx)
        self.span = int(cfg.window * NS)
        self.ports: dict[str, tuple[Window, ...]] = {}

    def counts(self, acc: Acc, owned: frozenset[str]) -> tuple[float, ...]:
        """What this sample adds to each window (zeros: nothing)."""
        raise NotImplementedError

    def report(self, port: str, ts: int, totals: tuple[float, ...]) -> None:
        """The rule holds: call ``ctx.hit`` with the event's words."""
        raise NotImplementedError

    def sample(self, port: str, ts: int, dt: int, acc: Acc, owned: frozenset[str]) -> None:
        counts = self.counts(acc, owned)
        wins = self.ports.get(port)
        new = any(counts)
        if not new and wins is None:
            return
        if wins is None:
            wins = self.ports[port] = tuple(Window(self.span) for _ in counts)
        scale = min(1.0, self.span / dt) if self.pro_rata else 1
        for win, n in zip(wins, counts, strict=True):
            if n:
                win.add(ts, n * scale)
        totals = tuple(win.trim(ts) for win in wins)
        if not any(win.items for win in wins):
            del self.ports[port]
            return
        if new and sum(totals) >= self.cfg.threshold:
            self.report(port, ts, totals)

    def forget(self, port: str) -> None:
        self.ports.pop(port, None)


@dataclass(eq=False)
class Event:
    """One insight. ``end_ns`` is None while open; once cleared it is the last time the
    rule held (the fault's end), and ``cleared_ns`` when the event was cleared."""

    id: int
    type: str
    severity: str
    interfaces: list[str]
    start_ns: int
    peak: float
    unit: str
    message: str
    end_ns: int | None = None
    state: str = "open"  # open | cleared
    detector: str = ""  # config section of the detector that raised it
    key: Any = None  # the detector's key (port, group, (port, priority))
    last_ns: int = 0  # last time the rule held
    cleared_ns: int | None = None
    peak_ns: int = 0  # when the peak was seen (the sample's time)
    #: the far end of its ports (``leaf-3 swp61``; agent/insights/neighbors.py), "" while unknown
    neighbor: str = ""
    # gNMI bookkeeping
    sent: dict[str, Any] = field(default_factory=dict)
    sent_ns: int = 0
    pending: bool = False

    def as_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "type": self.type,
            "severity": self.severity,
            "interfaces": list(self.interfaces),
            "start_ns": self.start_ns,
            "end_ns": self.end_ns,
            "last_ns": self.last_ns,
            "cleared_ns": self.cleared_ns,
            "peak": self.peak,
            "peak_ns": self.peak_ns,
            "unit": self.unit,
            "message": self.message,
            "state": self.state,
            "neighbor": self.neighbor,
        }


# ---------------------------------------------------------------- formatting helpers


def fmt_duration(seconds: float) -> str:
    """``100ms``, ``1s``, ``1.5s``, ``1m``."""
    if seconds < 1:
        return f"{seconds * 1000:g}ms"
    if seconds >= 60 and seconds % 60 == 0:
        return f"{seconds / 60:g}m"
    return f"{seconds:g}s"


def fmt_bps(bps: float) -> str:
    for unit, scale in (("Tb/s", 1e12), ("Gb/s", 1e9), ("Mb/s", 1e6), ("kb/s", 1e3)):
        if bps >= scale:
            return f"{bps / scale:.3g} {unit}"
    return f"{bps:.0f} b/s"


def fmt_count(n: float) -> str:
    return f"{n:,.0f}"
