"""OTLP/gRPC metrics export (``exporters.otlp``): every counter, once per export interval,
to an OpenTelemetry collector's ``MetricsService/Export``.

Two profiles:

* ``cumulus`` (the default): what Cumulus Linux's own OTLP export sends, so a pipeline and
  dashboard built for a Cumulus switch (OTLP -> OpenTelemetry Collector -> Prometheus ->
  Grafana) shows swtel's switch unchanged: every value, counters included, an OTel
  **gauge** with ``asDouble`` values, named ``nvswitch_interface_*`` with the attribute
  ``interface`` (plus ``tc`` or ``priority``); names in agent/exporters/otlp_names.py and
  docs/paths.md. Values are swtel's wrap- and reset-corrected totals, so they never go down.
  With ``egress_histogram``, also Cumulus' egress buffer histogram (an OTel Histogram, as
  Cumulus sends it), binned here from every TC's level of each read (:class:`EgressHistogram`).
* ``otel``: the OTel data model: counters are monotonic cumulative **Sums** (``asInt``)
  with ``start_time_unix_nano``, gauges are Gauges. A counter's start time is when swtel
  first saw it (its value is the device's count, as an OTel collector's Prometheus
  receiver does); after a counter reset (the change engine's ``F_RESET``) the point gets a
  new start time, the previous read of its source, and counts from the reset, so a
  consumer never computes a negative rate.

Resource attributes: ``host.name``, ``service.name`` (``swtel``), ``service.version`` and
``swtel.target`` (the gNMI target). Messages are opentelemetry-proto's generated classes;
the request goes over grpc's generic unary call (no stubs, no SDK).

Cost on the tick thread: nothing for ``cumulus`` (the store already holds the newest values
of every source); for ``otel`` a C-speed scan of a batch's flags for resets. On the
exporter's own thread, once per interval: the store's latest values are written into a
prebuilt request (rebuilt only when a source's port set changes), serialized, and queued.
The queue is bounded (``queue`` requests; the oldest is dropped and counted); a failed
export is retried with exponential backoff and jitter (0.5 s doubling to 5 s), a refused
one (a status OTLP calls non-retryable) is dropped and counted. Values are totals, so what
arrives after an outage carries everything that was counted during it.
"""

from __future__ import annotations

import socket
import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from agent import __version__, logs, tls
from agent.config import ClientTls, Duration, HostPort, setting
from agent.counters import COUNTER, F_RESET, HIDDEN, Batch, CounterTable, encodable_indices
from agent.exporters import otlp_names, state_gauges
from agent.exporters.base import Exporter, check_plaintext, check_tls, lazy_imports, register
from agent.exporters.sender import BoundedQueue, PeriodicSender, grpc_channel, rpc_error

if TYPE_CHECKING:
    from agent.store import Store

METHOD = "/opentelemetry.proto.collector.metrics.v1.MetricsService/Export"
BACKOFF_MIN_S = 0.5
BACKOFF_MAX_S = 5.0  # retries are cheap and values pile up meanwhile: keep them frequent
MAX_POINTS = 4000  # data points per request: far below a collector's 4 MiB default limit
# OTLP/gRPC: the statuses worth retrying (names of grpc.StatusCode); any other refuses the
# request for good.
RETRYABLE = frozenset({"CANCELLED", "DEADLINE_EXCEEDED", "RESOURCE_EXHAUSTED", "ABORTED", "OUT_OF_RANGE",
                       "UNAVAILABLE", "DATA_LOSS"})
_MAX_INT64 = 2**63 - 1
# bytes.translate table: a flag byte -> 1 if it carries F_RESET, else 0
_RESET_BIT = bytes(1 if b & F_RESET else 0 for b in range(256))

log = logs.get("otlp")

# gRPC and the OTLP messages: imported when an exporter is built (base.lazy_imports)
grpc: Any = None
ms_pb2: Any = None
common_pb2: Any = None
metrics_pb2: Any = None
resource_pb2: Any = None
_load = lazy_imports(
    globals(), grpc="grpc",
    ms_pb2="opentelemetry.proto.collector.metrics.v1.metrics_service_pb2",
    common_pb2="opentelemetry.proto.common.v1.common_pb2",
    metrics_pb2="opentelemetry.proto.metrics.v1.metrics_pb2",
    resource_pb2="opentelemetry.proto.resource.v1.resource_pb2")


def _identity(b: bytes) -> bytes:
    return b


def names_of(table: CounterTable) -> list[otlp_names.Name | None]:
    """Metric name, attributes and rank of every counter of ``table`` (None: hidden), cached."""
    out = table.cache.get("otlp")
    if out is None:
        out = table.cache["otlp"] = [
            None if s.kind == HIDDEN else otlp_names.metric_name(s.container.path, s.leaf)
            for s in table.specs
        ]
    return out


def bins_of(table: CounterTable) -> list[tuple[int, int, float] | None]:
    """(bin index, low, high) of every counter of ``table`` that is a histogram's bin, else
    None; cached."""
    out = table.cache.get("otlp-bins")
    if out is None:
        out = table.cache["otlp-bins"] = [
            (hit[2], hit[3], hit[4]) if (hit := otlp_names.histogram_bin(s.container.path, s.leaf)) else None
            for s in table.specs
        ]
    return out


#: OTLP's DataPointFlags.DATA_POINT_FLAGS_NO_RECORDED_VALUE_MASK: "the series ended here"
_NO_RECORDED_VALUE = 1


def _attr(key: str, value: str) -> common_pb2.KeyValue:
    return common_pb2.KeyValue(key=key, value=common_pb2.AnyValue(string_value=value))


# the levels the egress buffer histogram bins, the preferred first: swtel's peak, the occupancy
_EGRESS_LEVELS = (otlp_names.TC["peak-occupancy"], otlp_names.TC["current-occupancy"])


@dataclass(frozen=True)
class EgressHistogram:
    """Cumulus' egress buffer histogram: 10 bins of a TC's level in bytes; bin 0 below
    ``low``, bin 9 at or above ``low + size``, bins 1-8 each ``size / 8`` wide."""

    low: int
    size: int

    def bin(self, level: int) -> int:
        if level < self.low:
            return 0
        if level >= self.low + self.size:
            return 9
        return 1 + (level - self.low) * 8 // self.size

    def bounds(self) -> list[float]:
        """OTel's explicit bounds: bin k counts the levels up to bound k (whole bytes, so the
        last byte of the bin), as Cumulus' own export gives them."""
        return [float(self.low - 1 + k * self.size // 8) for k in range(9)]


class _Layout:
    """The request(s) for one set of source tables, built once: per source the
    (value index, data point, point key, counter?) of every exported counter."""

    def __init__(self, tables: list[CounterTable], profile: str, resource: resource_pb2.Resource,
                 egress: EgressHistogram | None = None) -> None:
        self.tables = tables
        # point key -> (rank, source position, index, counter?); the best-ranked source wins
        chosen: dict[tuple[str, tuple], tuple[int, int, int, bool]] = {}
        for pos, table in enumerate(tables):
            names = names_of(table)
            kinds = table.kinds
            for i in encodable_indices(table, table.visible):  # one odd name never fails a request
                name, attrs, rank = names[i]
                key = (name, attrs)
                old = chosen.get(key)
                if old is None or rank > old[0]:
                    chosen[key] = (rank, pos, i, kinds[i] == COUNTER)
        by_metric: dict[str, list[tuple[tuple, int, int, bool]]] = {}
        for key, (_rank, pos, i, counter) in chosen.items():
            by_metric.setdefault(key[0], []).append((key, pos, i, counter))
        self.points: list[list[tuple[int, Any, tuple, bool]]] = [[] for _ in tables]
        self.requests: list[ms_pb2.ExportMetricsServiceRequest] = []
        self.request_points: list[int] = []  # data points of each request
        scope = common_pb2.InstrumentationScope(name="swtel", version=__version__)
        sm = None
        in_request = MAX_POINTS
        #: otel: per histogram data point, its bins in order as (source position, index, key)
        self.histograms: list[tuple[Any, list[tuple[int, int, tuple]]]] = []
        for name in sorted(by_metric):
            members = sorted(by_metric[name], key=lambda m: m[0][1])
            if profile == "otel" and bins_of(tables[members[0][1]])[members[0][2]] is not None:
                sm, in_request = self._histogram(name, members, sm, in_request, resource, scope)
                continue
            otel_sum = profile == "otel" and members[0][3]
            for start in range(0, len(members), MAX_POINTS):
                chunk = members[start:start + MAX_POINTS]
                if in_request + len(chunk) > MAX_POINTS:
                    sm = self._new_request(resource, scope)
                    in_request = 0
                in_request += len(chunk)
                self.request_points[-1] += len(chunk)
                metric = sm.metrics.add(name=name)
                if otel_sum:
                    metric.sum.aggregation_temporality = metrics_pb2.AGGREGATION_TEMPORALITY_CUMULATIVE
                    metric.sum.is_monotonic = True
                    points = metric.sum.data_points
                else:
                    points = metric.gauge.data_points
                for key, pos, i, counter in chunk:
                    dp = points.add()
                    dp.attributes.extend(_attr(k, v) for k, v in key[1])
                    self.points[pos].append((i, dp, key, counter and otel_sum))
        #: the egress buffer histogram: per (interface, tc), its data point and the level it bins
        self.egress: list[tuple[Any, tuple[str, str], int, int]] = []
        if egress is not None:
            self._egress(egress, resource, scope)
        self.count = sum(self.request_points)  # data points (an otel histogram's bins make one)

    def _new_request(self, resource: Any, scope: Any) -> Any:
        """A new request of this export (resource and scope set); its scope metrics."""
        request = ms_pb2.ExportMetricsServiceRequest()
        rm = request.resource_metrics.add()
        rm.resource.CopyFrom(resource)
        sm = rm.scope_metrics.add()
        sm.scope.CopyFrom(scope)
        self.requests.append(request)
        self.request_points.append(0)
        return sm

    def _egress(self, egress: EgressHistogram, resource: Any, scope: Any) -> None:
        """The TC levels the histogram bins, one per (interface, tc): the peak where a source
        has one, else the occupancy at the read. Its own request(s), Cumulus' attributes."""
        levels: dict[tuple[str, str], tuple[int, int, int]] = {}  # key -> (peak?, pos, index)
        for pos, table in enumerate(self.tables):
            names = names_of(table)
            for i in table.visible:
                name, attrs, _rank = names[i]
                if name not in _EGRESS_LEVELS:
                    continue
                a = dict(attrs)
                key = (a["interface"], a["tc"])
                peak = int(name == _EGRESS_LEVELS[0])
                if key not in levels or peak > levels[key][0]:
                    levels[key] = (peak, pos, i)
        metric = None
        bounds = egress.bounds()
        for n, key in enumerate(sorted(levels, key=lambda k: (k[0], k[1].zfill(8)))):
            if n % MAX_POINTS == 0:
                sm = self._new_request(resource, scope)
                metric = sm.metrics.add(name=otlp_names.EGRESS_HISTOGRAM, unit="bytes")
                metric.histogram.aggregation_temporality = metrics_pb2.AGGREGATION_TEMPORALITY_CUMULATIVE
            dp = metric.histogram.data_points.add()
            dp.attributes.append(_attr("interface", key[0]))
            # as Cumulus sends it: tc an int here (a string in its gauges)
            tc = common_pb2.AnyValue(int_value=int(key[1])) if key[1].isdigit() else \
                common_pb2.AnyValue(string_value=key[1])
            dp.attributes.append(common_pb2.KeyValue(key="tc", value=tc))
            dp.explicit_bounds.extend(bounds)
            self.request_points[-1] += 1
            _peak, pos, i = levels[key]
            self.egress.append((dp, key, pos, i))

    def _histogram(self, name: str, members: list, sm: Any, in_request: int, resource: Any,
                   scope: Any) -> tuple[Any, int]:
        """One OTel Histogram metric: a data point per port (the bins' other attributes), its
        explicit bounds the bins' high bounds but the last's (OTel's last bucket is open)."""
        points: dict[tuple, list[tuple[int, int, int, float, tuple]]] = {}
        for key, pos, i, _counter in members:
            index, _low, high = bins_of(self.tables[pos])[i]
            rest = tuple(kv for kv in key[1] if kv[0] != "bin")
            points.setdefault(rest, []).append((index, pos, i, high, key))
        if sm is None or in_request + len(points) > MAX_POINTS:
            sm = self._new_request(resource, scope)
            in_request = 0
        in_request += len(points)
        self.request_points[-1] += len(points)
        metric = sm.metrics.add(name=name)
        metric.histogram.aggregation_temporality = metrics_pb2.AGGREGATION_TEMPORALITY_CUMULATIVE
        for rest in sorted(points):
            bins = sorted(points[rest])
            dp = metric.histogram.data_points.add()
            dp.attributes.extend(_attr(k, v) for k, v in rest)
            dp.explicit_bounds.extend(float(b[3]) for b in bins[:-1])
            self.histograms.append((dp, [(pos, i, key) for _index, pos, i, _high, key in bins]))
        return sm, in_request

    def matches(self, tables: list[CounterTable]) -> bool:
        return len(tables) == len(self.tables) and all(
            a is b for a, b in zip(tables, self.tables, strict=True))


@dataclass
class OtlpConfig:
    """``exporters.otlp``: OTLP/gRPC metrics export (docs/otlp.md)."""

    enabled: bool = setting(True, doc="lets a present section be switched off")  # its presence turns it on
    endpoint: HostPort = setting(HostPort("127.0.0.1:4317"), doc="the OTLP/gRPC receiver")
    profile: str = setting("cumulus", type="`cumulus` or `otel`", choices=("cumulus", "otel"), doc=(
        "`cumulus`: Cumulus Linux's own export (every value an OTel gauge, `asDouble`, named "
        "`nvswitch_interface_*` with the attribute `interface`, plus `tc` or `priority`), so a pipeline "
        "built for a Cumulus switch shows swtel's unchanged; `otel`: counters as monotonic cumulative "
        "Sums with a start time (a new one after a counter reset), gauges as Gauges. Names in "
        "[paths.md](paths.md)"))
    interval: Duration = setting(Duration(1.0), type="duration, at least the agent's interval", doc=(
        "export period (Cumulus: 1 s at best; swtel down to its poll interval, e.g. 100ms)"))
    insecure: bool = setting(False, doc="plaintext gRPC; TLS unless this is `true`")
    insecure_remote: bool = setting(False, doc=(
        "plaintext (`insecure: true`) to a host other than loopback (127.0.0.0/8, `::1`, `localhost`) is "
        "refused unless this is `true`; credentials are never sent in plaintext beyond loopback"))
    tls: ClientTls = setting(factory=ClientTls, sub={
        "ca": {"doc": "CA that signed the receiver's certificate"},
        "server_name": {"doc": "name to verify in the receiver's certificate"}})
    queue: int = setting(60, type="integer, 1–10000", doc=(
        "export requests kept while the receiver is slow or down (the oldest is dropped and counted); "
        "values are totals, so a dropped request loses no count"))
    egress_histogram: bool = setting(False, doc=(
        "also send `nvswitch_histogram_interface_egress_buffer` (an OTel Histogram per interface and "
        "TC, as Cumulus' histogram export): each export bins every TC's level of the newest read, "
        "its peak where the source has one, else its occupancy; counts are cumulative"))
    egress_histogram_min: int = setting(960, type="bytes, 0–2^32", doc=(
        "the histogram's minimum: bin 0 counts the levels below it (Cumulus' `bin-min-boundary`, "
        "default 960)"))
    egress_histogram_size: int = setting(12288, type="bytes, a multiple of 8, 8–2^32", doc=(
        "the histogram's size: bins 1–8 split min … min + size evenly, bin 9 counts the levels at "
        "or above min + size (Cumulus' `histogram-size`, default 12288)"))
    timeout: Duration = setting(Duration(10.0), type="duration, 100ms–24h", doc=(
        "deadline of one Export call; a failed call is retried with backoff (0.5 s doubling to 5 s, "
        "with jitter)"))


@register
class OtlpExporter(PeriodicSender, Exporter):
    """The Listener for ``exporters.otlp``.

    Its exports are unary calls, not a connection held open: PeriodicSender's loop exports
    every interval and retries the oldest queued request with the backoff; the receiver
    counts as reached once one is accepted."""

    name = "otlp"
    config_name = "otlp"
    config_class = OtlpConfig
    optional = True
    doc_type, doc_default = "mapping or absent", "absent (off)"
    doc = ("OTLP/gRPC metrics export to an OpenTelemetry collector (`MetricsService/Export`): every "
           "counter once per `interval`; see [otlp.md](otlp.md)")

    @classmethod
    def check(cls, section: OtlpConfig | None, where: str, problems: list[str], cfg) -> None:
        if section is None or not section.enabled:
            return
        fastest = cfg.min_interval()
        if section.interval < fastest:
            problems.append(f"{where}.interval: must be at least the agent's interval ({Duration(fastest)}), "
                            f"got {section.interval}")
        if not 1 <= section.queue <= 10_000:
            problems.append(f"{where}.queue: must be at least 1 and at most 10000, got {section.queue}")
        if section.timeout < 0.1:
            problems.append(f"{where}.timeout: must be at least 100ms, got {section.timeout}")
        if not 0 <= section.egress_histogram_min <= 2**32:
            problems.append(f"{where}.egress_histogram_min: must be 0 to 2^32 bytes, got "
                            f"{section.egress_histogram_min}")
        size = section.egress_histogram_size
        if not 8 <= size <= 2**32 or size % 8:  # 8 equal bins of whole bytes
            problems.append(f"{where}.egress_histogram_size: must be a multiple of 8 from 8 to 2^32 bytes, "
                            f"got {size}")
        check_tls(problems, where, section.insecure, section.tls)
        check_plaintext(problems, f"{where}.endpoint", what="OTLP (insecure: true)", host=section.endpoint.host,
                        plaintext=section.insecure, opt_in=section.insecure_remote)

    @classmethod
    def listeners_for(cls, section: OtlpConfig | None, cfg) -> dict:
        if section is None or not section.enabled:
            return {}
        otlp = cls(section, cfg.target)
        otlp.log_limiter.period_s = float(cfg.log.rate_limit)
        return {"otlp": otlp}

    def __init__(self, cfg: OtlpConfig, target: str, hostname: str | None = None) -> None:
        _load()
        super().__init__(log, BACKOFF_MIN_S, BACKOFF_MAX_S, state="connecting")
        self.name = "otlp"  # one receiver per agent: its key in status and the stop's log lines
        self.cfg = cfg
        self.target = target
        self.profile = cfg.profile
        self.interval = float(cfg.interval)
        self.hostname = hostname or socket.gethostname()
        self.resource = resource_pb2.Resource(attributes=[
            _attr("host.name", self.hostname), _attr("service.name", "swtel"),
            _attr("service.version", __version__), _attr("swtel.target", target)])
        self._store: Store | None = None
        self._wake = threading.Event()
        self._flush_deadline = 0.0
        self._queue: BoundedQueue[tuple[bytes, int]] = BoundedQueue(cfg.queue)  # (request, data points)
        self._lock = threading.Lock()
        self._layout: _Layout | None = None
        self.request_points: list[int] = []  # data points of each request of the last build
        # otel: point key -> (start ns, base); a reset restarts a point's count
        self._starts: dict[tuple, tuple[int, int]] = {}
        #: the derived gauges of the last build, (name, attrs) -> time: one gone is sent once more
        #: without a value (flag NO_RECORDED_VALUE: Prometheus' OTLP receiver makes it stale)
        self._gauge_times: dict[tuple, int] = {}
        self._resets: list[tuple[CounterTable, list[tuple[int, int]], int]] = []
        self._seen: dict[str, Batch] = {}  # otel: the newest batch of each source, with its resets
        self._egress = EgressHistogram(cfg.egress_histogram_min, cfg.egress_histogram_size) \
            if cfg.egress_histogram else None
        # egress histogram: (interface, tc) -> [start ns, ts of the read last binned, 10 counts]
        self._egress_counts: dict[tuple[str, str], list] = {}
        self._channel: grpc.Channel | None = None
        self._call: Any = None
        self._tls_stamp: tuple = ()  # the TLS files the channel was built with (tls.stamp)
        self._tls_changed = threading.Event()  # SIGHUP found them changed: a new channel
        # status (the rest: PeriodicSender)
        self.exports = 0  # export intervals built
        self.sent = 0  # requests the receiver accepted
        self.points = 0  # data points of the last export
        self.refused = 0  # requests refused by the receiver (status "dropped", with the overflow)
        self.rejected_points = 0  # partial success: points the receiver said it rejected
        self.retries = 0
        self.last_sent_ns: int | None = None

    # ------------------------------------------------------------ Listener (tick thread)
    def start(self, store: Store) -> None:
        self._store = store
        if self.cfg.insecure:
            log.warning("plaintext OTLP export (insecure: true)", endpoint=str(self.cfg.endpoint))
        self._start_thread("swtel-otlp")

    def on_batch(self, batch: Batch) -> None:
        if self.profile != "otel":
            return  # the store holds the newest values: nothing to do per tick
        previous = self._seen.get(batch.source)
        if not batch.flags.translate(_RESET_BIT).strip(b"\0"):  # no reset (the common case), at C speed
            with self._lock:
                self._seen[batch.source] = batch
            return
        # a counter reset since the previous read: the point restarts from there
        start = previous.ts_ns if previous is not None and previous.ts_ns < batch.ts_ns else batch.ts_ns - 1
        values, indices = batch.values, batch.indices
        hits = [(indices[n], values[indices[n]] - batch.deltas[n])
                for n, f in enumerate(batch.flags) if f & F_RESET]
        with self._lock:  # with the batch, so that an export sees both or neither
            self._seen[batch.source] = batch
            self._resets.append((batch.table, hits, start))

    def on_state(self, updates) -> None:
        pass  # states (oper-status, events) are not metrics of either profile

    def on_delete(self, ts_ns, containers) -> None:
        pass  # the store drops them; the next export's layout leaves them out

    def stop(self, timeout: float) -> None:
        """Export the latest values and send what is queued, while the receiver takes it, for up
        to ``timeout`` s, then stop (PeriodicSender's flush: no wait when there is nothing to send)."""
        self._stop_thread(timeout)

    def status(self) -> dict[str, Any]:
        return {
            "name": "otlp",
            "kind": "otlp",
            "state": self.state,
            "endpoint": str(self.cfg.endpoint),
            "profile": self.profile,
            "tls": not self.cfg.insecure,
            "interval_s": self.interval,
            "queue": len(self._queue),
            "queue_max": self.cfg.queue,
            "exports": self.exports,
            "sent": self.sent,
            "points": self.points,
            "dropped": self._queue.dropped + self.refused,
            "rejected_points": self.rejected_points,
            "retries": self.retries,
            "last_error": self.last_error,
            "previous_error": self.previous_error,  # the outage before the current connection
            "down_since_ns": self.down_since_ns,
            "last_sent_ns": self.last_sent_ns,
        }

    # ------------------------------------------------------------ building (own thread)
    def _sources(self) -> list[tuple[CounterTable, Any, int]]:
        """(table, values, ts) of every source, newest first from the store. For ``otel``, a
        source's values are those of the newest batch seen (its resets applied with it), the
        store's timestamp kept while the store still holds that batch's values."""
        stored = self._store.latest() if self._store is not None else {}
        if self.profile != "otel":
            return [(t, v, ts) for t, v, ts in stored.values()]
        out = []
        with self._lock:  # the values and the resets that go with them, together
            resets, self._resets = self._resets, []
            for source in [s for s in self._seen if s not in stored]:
                del self._seen[source]  # a source switched off
            for source, (table, values, ts) in stored.items():
                mine = self._seen.get(source)
                if mine is None or mine.table is not table:
                    out.append((table, values, ts))  # no batch of this layout yet: no reset to know
                elif mine.values is values:
                    out.append((table, values, ts))  # the batch seen, read again since (ts)
                else:
                    out.append((table, mine.values, mine.ts_ns))  # its batch is on its way
        self._apply_resets(resets)
        return out

    def build(self) -> list[ms_pb2.ExportMetricsServiceRequest]:
        """The requests carrying the latest value of every counter."""
        sources = self._sources()
        tables = [t for t, _v, _ts in sources]
        if self._layout is None or not self._layout.matches(tables):
            self._layout = _Layout(tables, self.profile, self.resource, self._egress)
        layout = self._layout
        otel = self.profile == "otel"
        if otel:
            starts = self._starts
            seen: set[tuple] = set()
        for (_table, values, ts), points in zip(sources, layout.points, strict=True):
            if not otel:
                for i, dp, _key, _counter in points:
                    dp.time_unix_nano = ts
                    dp.as_double = values[i]
                continue
            for i, dp, key, counter in points:
                dp.time_unix_nano = ts
                if counter:
                    start = starts.get(key)
                    if start is None:
                        start = starts[key] = (ts, 0)
                    dp.start_time_unix_nano = start[0]
                    dp.as_int = min(values[i] - start[1], _MAX_INT64)
                    seen.add(key)
                else:
                    dp.as_int = min(values[i], _MAX_INT64)
        if otel:
            self._fill_histograms(layout, sources, seen)
        if layout.egress:
            self._fill_egress(layout, sources)
        if otel and len(starts) > len(seen):
            for key in [k for k in starts if k not in seen]:  # ports that are gone
                del starts[key]
        self.points = layout.count
        self.request_points = layout.request_points
        gauges: list[Any] = state_gauges.gauges(self._store)  # derived values (states): gauges, every export
        now = {(name, attrs): ts for name, attrs, _v, ts in gauges}
        gauges += [(name, attrs, None, ts) for (name, attrs), ts in self._gauge_times.items()
                   if (name, attrs) not in now]  # gone: marked once, then forgotten
        self._gauge_times = now
        if not gauges:
            return layout.requests
        gauges.sort(key=lambda g: (g[0], g[1]))
        extra = [gauges[k:k + MAX_POINTS] for k in range(0, len(gauges), MAX_POINTS)]
        self.request_points = [*layout.request_points, *map(len, extra)]
        self.points += len(gauges)
        # a state holds until it changes: stamped with the newest read (a receiver that ages out
        # a series whose point time stands still would drop an unchanged gauge)
        newest = max((ts for _t, _v, ts in sources), default=0)
        return [*layout.requests, *(self._gauge_request(chunk, newest) for chunk in extra)]

    def _gauge_request(self, gauges: list[state_gauges.Gauge], newest_ns: int) -> Any:
        """A request of derived gauges (agent/exporters/state_gauges.py), built each export, each
        at its time or the newest read's, whichever is later."""
        request = ms_pb2.ExportMetricsServiceRequest()
        rm = request.resource_metrics.add()
        rm.resource.CopyFrom(self.resource)
        sm = rm.scope_metrics.add()
        sm.scope.name, sm.scope.version = "swtel", __version__
        metric = None
        for name, attrs, value, ts_ns in gauges:  # sorted: one metric per name
            if metric is None or metric.name != name:
                metric = sm.metrics.add(name=name)
            if value is None:  # a series that ended (state_gauges: an info series whose labels changed)
                dp = metric.gauge.data_points.add(time_unix_nano=max(ts_ns, newest_ns, time.time_ns()),
                                                  flags=_NO_RECORDED_VALUE)
            else:
                dp = metric.gauge.data_points.add(time_unix_nano=max(ts_ns, newest_ns), as_double=value)
            dp.attributes.extend(_attr(k, v) for k, v in attrs)
        return request

    def _fill_histograms(self, layout: _Layout, sources: list[tuple[CounterTable, Any, int]],
                         seen: set[tuple]) -> None:
        """Each histogram data point's bucket counts: its bins' counts since their start (a
        reset starts a bin again, as for a Sum)."""
        starts = self._starts
        for dp, bins in layout.histograms:
            counts = []
            for pos, i, key in bins:
                _table, values, ts = sources[pos]
                start = starts.get(key)
                if start is None:
                    start = starts[key] = (ts, 0)
                counts.append(min(values[i] - start[1], _MAX_INT64))
                seen.add(key)
            pos0, _i0, key0 = bins[0]
            dp.time_unix_nano = sources[pos0][2]
            dp.start_time_unix_nano = starts[key0][0]
            del dp.bucket_counts[:]
            dp.bucket_counts.extend(counts)
            dp.count = sum(counts)

    def _fill_egress(self, layout: _Layout, sources: list[tuple[CounterTable, Any, int]]) -> None:
        """Bin each TC's level once per read (an export that finds the same read again adds
        nothing), counts since the TC's first read."""
        counts, binner, seen = self._egress_counts, self._egress, set()
        for dp, key, pos, i in layout.egress:
            _table, values, ts = sources[pos]
            state = counts.get(key)
            if state is None:
                state = counts[key] = [ts, None, [0] * 10]
            if state[1] != ts:
                state[2][binner.bin(values[i])] += 1
                state[1] = ts
            seen.add(key)
            dp.time_unix_nano = ts
            dp.start_time_unix_nano = state[0]
            del dp.bucket_counts[:]
            dp.bucket_counts.extend(state[2])
            dp.count = sum(state[2])
        if len(counts) > len(seen):
            for key in [k for k in counts if k not in seen]:  # ports that are gone
                del counts[key]

    def _apply_resets(self, resets: list[tuple[CounterTable, list[tuple[int, int]], int]]) -> None:
        for table, hits, start in resets:
            names = names_of(table)
            for i, base in hits:
                name = names[i]
                if name is not None:
                    self._starts[(name[0], name[1])] = (start, base)

    def _export(self) -> None:
        """Build, serialize and queue one interval's requests (the oldest dropped on overflow)."""
        try:
            requests = self.build()
            encoded = [(r.SerializeToString(), n) for r, n in zip(requests, self.request_points, strict=True)]
        except Exception as exc:  # a bug must not end the export thread
            self.last_error = f"build: {type(exc).__name__}: {exc}"
            log.error("OTLP request not built", error=self.last_error, exc_info=exc)
            return
        self.exports += 1
        self._queue.put(encoded)

    # ------------------------------------------------------------ sending (own thread)
    def _connect(self) -> None:
        address = str(self.cfg.endpoint)
        options: list[tuple[str, Any]] = [
            ("grpc.max_send_message_length", 64 * 1024 * 1024),
            ("grpc.initial_reconnect_backoff_ms", 500),
            ("grpc.max_reconnect_backoff_ms", int(BACKOFF_MAX_S * 1000)),
        ]
        t = self.cfg.tls
        self._tls_stamp = tls.stamp(t.ca, t.cert, t.key, t.crl)
        channel = self._channel = grpc_channel(address, self.cfg.insecure, self.cfg.tls, options)
        self._call = channel.unary_unary(METHOD, request_serializer=_identity,
                                         response_deserializer=ms_pb2.ExportMetricsServiceResponse.FromString)

    def _send_one(self, timeout: float) -> bool:
        """Send the oldest queued request. True: done with it (accepted or refused for good)."""
        item = self._queue.peek()
        if item is None:
            return True
        data, npoints = item
        try:
            if self._tls_changed.is_set():  # new TLS files: the next request on a new connection
                self._tls_changed.clear()
                self._close()
            if self._call is None:
                self._connect()
            reply = self._call(data, timeout=timeout)
        except grpc.RpcError as exc:
            self._failed(rpc_error(exc))
            code = exc.code() if hasattr(exc, "code") else None
            if code is not None and code.name in RETRYABLE:
                return False
            self._queue.discard(item)
            self.refused += 1  # retrying would be refused again
            return True
        except (tls.TlsError, OSError, ValueError) as exc:
            self._failed(f"TLS setup: {exc}" if isinstance(exc, tls.TlsError) else str(exc))
            return False
        self._queue.discard(item)
        self.sent += 1
        self.last_sent_ns = time.time_ns()
        rejected = reply.partial_success.rejected_data_points if reply.HasField("partial_success") else 0
        rejection = logs.remote_text(f"receiver rejected {rejected} of "
                                     f"{npoints} points: {reply.partial_success.error_message}") if rejected else None
        self.rejected_points += rejected
        if rejected and rejected >= npoints:
            # Reached, but nothing it was sent is kept: as good as down for health. (Its
            # log line is not an outage's: reaching the receiver does not forget it.)
            self._down(rejection, "rejecting")
            self.log_limiter.log(log, "warning", "rejecting", "OTLP receiver rejects every point",
                                 endpoint=str(self.cfg.endpoint), error=rejection)
            return True
        if self.state != "connected":
            # forgets the "down" line (the next failure is news); the outage's error is previous_error
            down_for = self._connected()
            log.info("OTLP receiver reached", endpoint=str(self.cfg.endpoint), profile=self.profile,
                     tls=not self.cfg.insecure, down_for_s=round(down_for, 3))
        if rejection is not None:  # some points refused on a working connection: its current error
            self.last_error = rejection
        return True

    def _failed(self, error: str) -> None:
        self._down(error, "down" if self.state != "connecting" else "connecting")
        self._log_outage("warning", "down", "OTLP export failed; retrying",
                         endpoint=str(self.cfg.endpoint), error=error)

    def reload_tls(self) -> bool:
        """SIGHUP: if the TLS files (CA, certificate, key, CRL) changed since the channel was
        built, the next request goes on a new channel that reads them. True if they did."""
        t = self.cfg.tls
        if self.cfg.insecure or self._call is None or tls.stamp(t.ca, t.cert, t.key, t.crl) == self._tls_stamp:
            return False
        self._tls_changed.set()
        self._wake.set()
        return True

    def _close(self) -> None:
        self._call = None
        if self._channel is not None:
            self._channel.close()
            self._channel = None
