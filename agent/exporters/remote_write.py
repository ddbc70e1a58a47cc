"""Prometheus remote write 1.0 (``exporters.remote_write[]``): the counters, once per
interval, to anything that takes remote write (Prometheus with
``--web.enable-remote-write-receiver``, VictoriaMetrics, vmagent, Mimir, Thanos Receive,
Cortex); docs/remote_write.md.

Names and labels are those of ``swtel collect --prometheus`` and of the OTLP ``cumulus``
profile (agent/exporters/otlp_names.py: ``nvswitch_interface_*{interface=...}``, one table
for all three), plus ``target`` (the agent's) and the destination's own ``labels``. Every
value, counters and gauges alike, is a sample of its latest value (swtel's wrap- and
reset-corrected total for a counter), at the time its source read it.

A series is sent when its value changed since it was last sent, and at least every
``resend`` (60 s) otherwise: Prometheus treats a series without a sample for 5 minutes as
gone (its lookback), so an idle counter must still be seen. When a series changes after
being left out, the value it kept is sent too, at the previous export's read, so that a
rate over the gap shows the increase where it happened, not spread across the silence.

The request (protobuf ``WriteRequest``, snappy block compression) goes over http.client,
plaintext or TLS (CA, client certificate, server name), with basic auth or a bearer token
read from files. Requests wait in a bounded queue (the oldest dropped and counted); a
connection error, a 5xx or a 429 keeps the request and retries it with backoff (0.5 s
doubling to 5 s, with jitter); any other answer refuses it for good: counted, logged
(rate-limited), shown in status with the receiver's text, dropped, and every series is sent
again in the next export. Values are totals, so what arrives after an outage or a drop
still carries every count.
"""

from __future__ import annotations

import re
import socket
import struct
import threading
import time
import urllib.parse
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from agent import __version__, logs, tls
from agent.config import ClientTls, Duration, setting
from agent.counters import CounterTable, encodable_indices
from agent.exporters import otlp_names
from agent.exporters.base import (
    Exporter,
    check_auth,
    check_plaintext,
    check_secret,
    check_tls,
    lazy_imports,
    read_text_secret,
    register,
)
from agent.exporters.otlp import names_of
from agent.exporters.sender import BoundedQueue, PeriodicSender
from agent.exporters.state_gauges import gauges as state_gauges
from agent.gnmi import wire

if TYPE_CHECKING:
    import http.client
    import ssl

    from agent.store import Store

BACKOFF_MIN_S = 0.5
BACKOFF_MAX_S = 5.0  # values pile up in the queue meanwhile: keep retries frequent
MAX_SAMPLES = 10_000  # samples per request (about 1 MB before compression)
MAX_QUEUE = 100_000
MAX_RESEND_S = 240.0  # under Prometheus' 5-minute lookback, with room for a late request
MAX_REPLY = 64 * 1024  # bytes of a reply read; a longer one closes the connection
REPLY_SHOWN = 200  # characters of a refusal's text in status and logs
MAX_RETRY_AFTER_S = 300.0  # a receiver's Retry-After is honoured up to 5 minutes (the queue keeps filling)
#: labels of the series themselves (otlp_names' attributes and ``target``): not ``labels`` keys
RESERVED = frozenset({"target", "bin"} | {a for shape in otlp_names.SHAPES for a in shape.attrs})
_LABEL = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")

log = logs.get("remote_write")

# snappy, http.client and the protobuf messages: imported and made when a destination is
# built (base.lazy_imports, then _built_on_load). http.client (and the email package it
# parses headers with) is ~1.5 MiB of an agent's PSS that an agent without remote write
# never uses.
snappy: Any = None
http_client: Any = None
WriteRequest: Any = None
TimeSeries: Any = None
Label: Any = None
Sample: Any = None
_Https: Any = None


def _built_on_load() -> dict[str, Any]:
    built: dict[str, Any] = dict(zip(("WriteRequest", "TimeSeries", "Label", "Sample"), _messages(), strict=True))
    built["_Https"] = _https_class()
    return built


_load = lazy_imports(globals(), _built_on_load, snappy="snappy", http_client="http.client")


# ---------------------------------------------------------------- the messages

def _messages() -> tuple[type, type, type, type]:
    """Remote write 1.0's messages, defined here in code as agent/gnmi/tunnel_pb.py defines
    the tunnel's (no .proto file, no generated module; protobuf 3.21 and current). The wire
    names and field numbers are the protocol's (package ``prometheus``), only what a sender
    writes (no metadata, exemplars or native histograms):

        WriteRequest { repeated TimeSeries timeseries = 1; }
        TimeSeries   { repeated Label labels = 1; repeated Sample samples = 2; }
        Label        { string name = 1; string value = 2; }
        Sample       { double value = 1; int64 timestamp = 2; }   // ms since the epoch
    """
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

    f_ = descriptor_pb2.FieldDescriptorProto
    fd = descriptor_pb2.FileDescriptorProto(name="swtel/prometheus_remote.proto", package="prometheus",
                                            syntax="proto3")

    def message(name: str, *specs: tuple) -> None:
        m = fd.message_type.add(name=name)
        for field_name, number, ftype, label, *rest in specs:
            f = m.field.add(name=field_name, number=number, type=ftype, label=label)
            if rest:
                f.type_name = f".prometheus.{rest[0]}"

    one, many = f_.LABEL_OPTIONAL, f_.LABEL_REPEATED
    message("WriteRequest", ("timeseries", 1, f_.TYPE_MESSAGE, many, "TimeSeries"))
    message("TimeSeries", ("labels", 1, f_.TYPE_MESSAGE, many, "Label"),
            ("samples", 2, f_.TYPE_MESSAGE, many, "Sample"))
    message("Label", ("name", 1, f_.TYPE_STRING, one), ("value", 2, f_.TYPE_STRING, one))
    message("Sample", ("value", 1, f_.TYPE_DOUBLE, one), ("timestamp", 2, f_.TYPE_INT64, one))
    pool = descriptor_pool.DescriptorPool()  # our own: nothing loaded elsewhere can clash
    pool.Add(fd)
    get_class = getattr(message_factory, "GetMessageClass", None)  # protobuf >= 4.22
    factory = None if get_class is not None else message_factory.MessageFactory(pool)  # 3.x (Debian 12)
    out = []
    for name in ("WriteRequest", "TimeSeries", "Label", "Sample"):
        desc = pool.FindMessageTypeByName(f"prometheus.{name}")
        out.append(get_class(desc) if get_class is not None else factory.GetPrototype(desc))
    return tuple(out)  # type: ignore[return-value]


# protobuf's wire format, the same as the gNMI messages': one varint, one length-delimited field
_varint, _field = wire.varint, wire.field


_TIMESERIES = 1 << 3 | 2  # WriteRequest.timeseries: field 1, length-delimited
_SAMPLES = 2 << 3 | 2  # TimeSeries.samples: field 2, length-delimited


#: Prometheus' staleness marker (model/value.StaleNaN): a series that ended
STALE_NAN = struct.unpack("<d", struct.pack("<Q", 0x7FF0000000000002))[0]


def series_head(labels: list[tuple[str, str]]) -> bytes:
    """A TimeSeries holding ``labels`` (sorted by name, as remote write requires), serialized
    once per series: each export appends the series' samples to these bytes."""
    return TimeSeries(labels=[Label(name=k, value=v) for k, v in sorted(labels)]).SerializeToString()


def timeseries_field(head: bytes, samples: list[tuple[float, int]]) -> bytes:
    """One ``timeseries`` field of a WriteRequest: a series' head and its (value, ms) samples.

    The framing (tag, length) is written here because protobuf's API cannot append bytes
    already serialized to a repeated field without parsing them back, and a switch's label
    sets do not change between exports: serializing them once is most of an export's cost
    saved. Appending a field to a serialized message is how protobuf merges a repeated field,
    so the result is the TimeSeries the descriptors define (a test parses it back)."""
    body = head + b"".join(_field(_SAMPLES, Sample(value=v, timestamp=t).SerializeToString())
                           for v, t in samples)
    return _field(_TIMESERIES, body)


# ---------------------------------------------------------------- config


@dataclass
class RemoteWriteAuth:
    """``auth``: basic auth or a bearer token, each secret in a file."""

    username: str | None = setting(None, type="string or null", doc="basic auth user (with `password_file`)")
    password_file: str | None = setting(None, type="path or null", doc=(
        "file holding the basic auth password; refused when other users can read it"))
    token_file: str | None = setting(None, type="path or null", doc=(
        "file holding a bearer token (`Authorization: Bearer`), read again on every new "
        "connection (a rotated token is picked up); refused when other users can read it"))


@dataclass
class RemoteWriteConfig:
    """One ``exporters.remote_write[]`` destination."""

    name: str = setting("", type="string", shown="`remote_write<N>`", doc="unique name, shown in status and logs")
    url: str = setting("", type="`http://` or `https://` URL", shown="required", doc=(
        "the receiver's write endpoint, e.g. `http://127.0.0.1:9090/api/v1/write` (Prometheus), "
        "`http://127.0.0.1:8428/api/v1/write` (VictoriaMetrics, vmagent), `https://mimir/api/v1/push`"))
    insecure_remote: bool = setting(False, doc=(
        "an `http://` (plaintext) url naming a host other than loopback (127.0.0.0/8, `::1`, `localhost`) "
        "is refused unless this is `true`; credentials (`auth`) are never sent over `http://` beyond loopback"))
    interval: Duration = setting(Duration(1.0), type="duration, at least the agent's interval", doc=(
        "export period: the newest value of every series that changed"))
    resend: Duration = setting(Duration(60.0), type="duration, `interval`–4m", doc=(
        "every series is sent at least this often, changed or not (Prometheus forgets a series after "
        "5 minutes without a sample)"))
    timeout: Duration = setting(Duration(10.0), type="duration, 100ms–24h", doc=(
        "deadline of one request (connect, send, answer)"))
    queue: int = setting(300, type=f"integer, 1–{MAX_QUEUE}", doc=(
        f"requests kept while the receiver is slow or down (one per interval, more past {MAX_SAMPLES} "
        "samples); the oldest is dropped and counted, and every series is sent again"))
    tls: ClientTls = setting(factory=ClientTls, sub={
        "ca": {"doc": "CA that signed the receiver's certificate (`https://` only)"},
        "server_name": {"doc": "name to verify in the receiver's certificate"}})
    auth: RemoteWriteAuth = setting(factory=RemoteWriteAuth, doc=(
        "basic auth (`username`, `password_file`) or a bearer token (`token_file`); over `http://` "
        "only to a loopback address, whatever `insecure_remote` says"))
    labels: dict[str, str] = setting(factory=dict, type="mapping of label name to value", doc=(
        "labels added to every series (e.g. `site: ams1`); not `target` nor a series' own labels"))


def _url_problem(url: str) -> str | None:
    if not url:
        return "required (the receiver's write endpoint)"
    try:
        parts = urllib.parse.urlsplit(url)
        port = parts.port
    except ValueError as exc:
        return f"not a URL: {exc}"
    if parts.scheme not in ("http", "https"):
        return f"expected an http:// or https:// URL, got {url[:60]!r}"
    if not parts.hostname:
        return "names no host"
    if parts.username is not None or parts.password is not None:
        return "must not carry credentials (use auth, with files)"
    if parts.fragment:
        return "must not have a #fragment"
    if port == 0:
        return "port 0"
    return None


def read_secret(path: str) -> str:
    """A password or token, by the one secret reader (exporters/base.py); ValueError if unusable."""
    return read_text_secret(path, "secret file")


# ---------------------------------------------------------------- the series of the sources


class _Layout:
    """Every exported series of one set of source tables, built once: its labels serialized,
    and what was last sent of it."""

    def __init__(self, tables: list[CounterTable], target: str, extra: dict[str, str]) -> None:
        self.tables = tables
        # (name, attributes) -> (rank, source position, value index); the best-ranked source
        # wins, as in the OTLP export and `swtel collect --prometheus`
        chosen: dict[tuple[str, tuple], tuple[int, int, int]] = {}
        for pos, table in enumerate(tables):
            names = names_of(table)
            for i in encodable_indices(table, table.visible):  # one odd name never fails a request
                name, attrs, rank = names[i]
                old = chosen.get((name, attrs))
                if old is None or rank > old[0]:
                    chosen[(name, attrs)] = (rank, pos, i)
        #: per source position: (value index, series slot) of its series
        self.slots: list[list[tuple[int, int]]] = [[] for _ in tables]
        self.heads: list[bytes] = []
        for (name, attrs), (_rank, pos, i) in sorted(chosen.items()):
            labels = {**extra, "target": target, **dict(attrs), "__name__": name}  # a series' own win
            self.slots[pos].append((i, len(self.heads)))
            self.heads.append(series_head(list(labels.items())))
        n = len(self.heads)
        self.last_value: list[int | None] = [None] * n  # last value sent
        self.last_ms: list[int] = [0] * n  # its timestamp
        self.last_export: list[int] = [-1] * n  # the export that sent it
        self.prev_ms: list[int] = [0] * len(tables)  # each source's read at the previous export

    def matches(self, tables: list[CounterTable]) -> bool:
        return len(tables) == len(self.tables) and all(
            a is b for a, b in zip(tables, self.tables, strict=True))


# ---------------------------------------------------------------- HTTP


def _https_class() -> type:
    """HTTPS whose certificate is verified against ``server_name`` when one is given (and
    sent as SNI), not the URL's host (made on load: http.client is imported then)."""
    import http.client

    class Https(http.client.HTTPSConnection):
        def __init__(self, host: str, port: int | None, timeout: float, context: ssl.SSLContext,
                     server_name: str | None) -> None:
            super().__init__(host, port, timeout=timeout, context=context)
            self._verify_ctx = context
            self._server_name = server_name

        def connect(self) -> None:
            http.client.HTTPConnection.connect(self)
            # the TLS socket in place before the handshake: the request's deadline can shut it down
            self.sock = self._verify_ctx.wrap_socket(self.sock, server_hostname=self._server_name or self.host,
                                                     do_handshake_on_connect=False)
            self.sock.do_handshake()

    return Https


class RequestTimeout(TimeoutError):
    """The whole request (connect, send, answer) did not finish within ``timeout``."""


def retry_after(value: str | None, now: float | None = None) -> float | None:
    """A ``Retry-After`` header's wait in seconds (delta-seconds or an HTTP date), at most
    :data:`MAX_RETRY_AFTER_S`; None when absent or unreadable (then the backoff decides)."""
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        wait = float(int(value[:12]))  # a 5,000-digit value is still "long": capped below
    else:
        import email.utils  # rare: an HTTP-date Retry-After (the module is loaded on first use)

        try:
            when = email.utils.parsedate_to_datetime(value)
        except (TypeError, ValueError, IndexError):
            return None
        if when.tzinfo is None:
            return None
        wait = when.timestamp() - (time.time() if now is None else now)
    return min(max(wait, 0.0), MAX_RETRY_AFTER_S)


def ssl_context(tls_cfg: ClientTls) -> ssl.SSLContext:
    """A client context: the system's CAs or ``ca``, a client certificate for mTLS."""
    import ssl  # here, not at the top: every agent imports this module, few send over TLS (4 MiB)

    ctx = ssl.create_default_context(cafile=tls_cfg.ca) if tls_cfg.ca else ssl.create_default_context()
    if tls_cfg.crl:  # read at every new connection: a renewed CRL is taken without a reload
        try:
            ctx.load_verify_locations(cafile=tls_cfg.crl)
        except ssl.SSLError as exc:
            raise tls.TlsError(f"CRL {tls_cfg.crl!r}: cannot be loaded: {exc}") from None
        ctx.verify_flags |= ssl.VERIFY_CRL_CHECK_LEAF
    if tls_cfg.cert:
        tls.read_pem(tls_cfg.key, "client key", private=True)  # the one secret reader's rules, as gRPC's
        ctx.load_cert_chain(tls_cfg.cert, tls_cfg.key)
    return ctx


# ---------------------------------------------------------------- the exporter


@register
class RemoteWriteExporter(PeriodicSender, Exporter):
    """The Listener for one ``exporters.remote_write[]`` destination.

    Its requests are single HTTP POSTs over a kept-alive connection: PeriodicSender's loop
    (as OTLP's) exports every interval and retries the oldest queued request with the
    backoff; the receiver counts as reached once one is accepted."""

    config_name = "remote_write"
    config_class = RemoteWriteConfig
    many = True
    doc, doc_type, doc_default = ("Prometheus remote write destinations (Prometheus, VictoriaMetrics, vmagent, "
                                  "Mimir...), each with its own queue and backoff; see "
                                  "[remote_write.md](remote_write.md)"), "list", "`[]`"

    @classmethod
    def check(cls, section: list[RemoteWriteConfig], where: str, problems: list[str], cfg) -> None:
        names: set[str] = set()
        fastest = cfg.min_interval()
        for n, d in enumerate(section):
            item = f"{where}[{n}]"
            if not d.name:
                d.name = f"remote_write{n}"
            if d.name in names:
                problems.append(f"{item}.name: duplicate destination name {d.name!r}")
            names.add(d.name)
            url_problem = _url_problem(d.url)
            if url_problem:
                problems.append(f"{item}.url: {url_problem}")
            parts = urllib.parse.urlsplit(d.url) if not url_problem else None
            https = parts is not None and parts.scheme == "https"
            if d.interval < fastest:
                problems.append(f"{item}.interval: must be at least the agent's interval ({Duration(fastest)}), "
                                f"got {d.interval}")
            if not d.interval <= d.resend <= MAX_RESEND_S:
                problems.append(f"{item}.resend: must be at least the interval ({d.interval}) and at most "
                                f"4m, got {d.resend}")
            if d.timeout < 0.1:
                problems.append(f"{item}.timeout: must be at least 100ms, got {d.timeout}")
            if not 1 <= d.queue <= MAX_QUEUE:
                problems.append(f"{item}.queue: must be at least 1 and at most {MAX_QUEUE}, got {d.queue}")
            if parts is not None and not https and any((d.tls.ca, d.tls.cert, d.tls.key, d.tls.server_name)):
                problems.append(f"{item}.tls: only with an https:// url")
            check_tls(problems, item, not https, d.tls)
            a = d.auth
            check_auth(problems, f"{item}.auth", a.username, a.password_file)
            if a.username and not a.password_file:
                problems.append(f"{item}.auth.username: needs password_file")
            if a.token_file:
                check_secret(problems, f"{item}.auth.token_file", a.token_file)
                if a.username or a.password_file:
                    problems.append(f"{item}.auth: basic auth or token_file, not both")
            if parts is not None:
                check_plaintext(problems, f"{item}.url", what="remote write (http://)", host=parts.hostname or "",
                                plaintext=not https, opt_in=d.insecure_remote, use_tls="use https://",
                                credentials=tuple(k for k in ("auth.username", "auth.token_file")
                                                  if getattr(a, k.partition(".")[2])))
            for key, value in d.labels.items():
                if not _LABEL.match(key) or key.startswith("__"):
                    problems.append(f"{item}.labels.{key}: not a Prometheus label name "
                                    "([a-zA-Z_][a-zA-Z0-9_]*, not starting with __)")
                elif key in RESERVED:
                    problems.append(f"{item}.labels.{key}: the series carry this label already")
                if not value:
                    problems.append(f"{item}.labels.{key}: must not be empty (an empty label is no label)")

    def __init__(self, cfg: RemoteWriteConfig, target: str) -> None:
        _load()
        super().__init__(log, BACKOFF_MIN_S, BACKOFF_MAX_S, state="connecting")
        self.cfg = cfg
        self.target = target
        self.name = cfg.name or "remote_write"  # check() names every configured one
        self.interval = float(cfg.interval)
        self.resend_every = max(1, round(float(cfg.resend) / self.interval))  # in exports
        parts = urllib.parse.urlsplit(cfg.url)
        self.https = parts.scheme == "https"
        self.host = parts.hostname or ""
        self.port = parts.port
        self.path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        #: the URL as status and logs show it: no query (it may carry a key)
        self.shown_url = urllib.parse.urlunsplit((parts.scheme, parts.netloc, parts.path, "", ""))
        self._store: Store | None = None
        self._wake = threading.Event()
        self._flush_deadline = 0.0
        self._queue: BoundedQueue[tuple[bytes, int]] = BoundedQueue(cfg.queue)  # (body, samples)
        self._layout: _Layout | None = None
        #: derived gauges (states): (name, attributes) -> (series head, (value, ms, export) sent)
        self._gauges_sent: dict[tuple, tuple[bytes, tuple[float, int, int]]] = {}
        self._resend_all = False  # a request was dropped: send every series read since
        self._conn: http.client.HTTPConnection | None = None
        self._headers: dict[str, str] = {}
        # status (the rest: PeriodicSender)
        self.exports = 0  # export intervals built
        self.sent = 0  # requests the receiver accepted
        self.samples = 0  # samples in them
        self.series = 0  # series of the current layout
        self.refused = 0  # requests refused for good (4xx), dropped
        self.retries = 0
        self.last_refusal: str | None = None
        self.last_sent_ns: int | None = None

    # ------------------------------------------------------------ Listener (tick thread)
    def start(self, store: Store) -> None:
        self._store = store
        if not self.https:
            log.warning("plaintext remote write (http://)", destination=self.name, url=self.shown_url)
        self._start_thread(f"swtel-rw-{self.name}")

    def on_batch(self, batch) -> None:
        pass  # the store holds the newest values: nothing to do per tick

    def on_state(self, updates) -> None:
        pass  # states (oper-status, events) are not samples

    def on_delete(self, ts_ns, containers) -> None:
        pass  # the store drops them; the next layout leaves them out (Prometheus ages them out)

    def stop(self, timeout: float) -> None:
        """Export the latest values and send what is queued, while the receiver takes it, for up
        to ``timeout`` s, then stop (PeriodicSender's flush: no wait when there is nothing to send)."""
        self._stop_thread(timeout)

    def status(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "kind": "remote_write",
            "state": self.state,
            "url": self.shown_url,
            "tls": self.https,
            "interval_s": self.interval,
            "resend_s": self.resend_every * self.interval,
            "series": self.series,
            "queue": len(self._queue),
            "queue_max": self.cfg.queue,
            "exports": self.exports,
            "sent": self.sent,
            "samples": self.samples,
            "dropped": self._queue.dropped + self.refused,
            "refused": self.refused,
            "last_refusal": self.last_refusal,
            "retries": self.retries,
            "retry_after_s": self.last_retry_after_s,
            "reconnects": self.reconnects,
            "last_error": self.last_error,
            "previous_error": self.previous_error,  # the outage before the current connection
            "down_since_ns": self.down_since_ns,
            "last_sent_ns": self.last_sent_ns,
        }

    # ------------------------------------------------------------ building (own thread)
    def build(self) -> list[tuple[bytes, int]]:
        """This interval's WriteRequests, uncompressed, with their sample counts: the series
        that changed or are due, each with its latest value (and the value it kept, when it
        changes after being left out)."""
        stored = self._store.latest() if self._store is not None else {}
        sources = list(stored.values())
        tables = [t for t, _v, _ts in sources]
        layout = self._layout
        if layout is None or not layout.matches(tables):
            layout = self._layout = _Layout(tables, self.target, self.cfg.labels)
            self.series = len(layout.heads)
        export = self.exports
        every = self.resend_every
        full = self._resend_all  # a request was dropped: every series read since it was last sent
        heads, last_value, last_ms, last_export = layout.heads, layout.last_value, layout.last_ms, layout.last_export
        fields: list[bytes] = []
        counts: list[int] = []
        for pos, ((_table, values, ts_ns), slots) in enumerate(zip(sources, layout.slots, strict=True)):
            ms = ts_ns // 1_000_000
            prev_ms = layout.prev_ms[pos]
            layout.prev_ms[pos] = ms
            for i, j in slots:
                value = values[i]
                if value == last_value[j]:
                    if not full and export - last_export[j] < every:
                        continue  # unchanged, and sent recently enough
                    if ms <= last_ms[j]:
                        continue  # not read again since it was sent: the same sample (never resent)
                    samples = [(float(value), ms)]
                elif last_value[j] is not None and last_export[j] < export - 1 and last_ms[j] < prev_ms < ms:
                    # left out while unchanged: its kept value at the previous export's read, so
                    # that the change falls between that read and this one
                    samples = [(float(last_value[j]), prev_ms), (float(value), ms)]
                else:
                    samples = [(float(value), ms)]
                fields.append(timeseries_field(heads[j], samples))
                counts.append(len(samples))
                last_value[j], last_ms[j], last_export[j] = value, ms, export
        self._add_gauges(export, every, full, fields, counts)
        if fields:
            self._resend_all = False
        out: list[tuple[bytes, int]] = []
        start, n = 0, 0
        for k, c in enumerate(counts):
            if n + c > MAX_SAMPLES and k > start:
                out.append((b"".join(fields[start:k]), n))
                start, n = k, 0
            n += c
        if n:
            out.append((b"".join(fields[start:]), n))
        return out

    def _add_gauges(self, export: int, every: int, full: bool, fields: list[bytes], counts: list[int]) -> None:
        """Derived gauges (states: agent/exporters/state_gauges.py): sent when they change, at
        their time, and an unchanged one again every ``resend`` at the export's time (a state
        holds until it changes and is never read again), so that Prometheus keeps it."""
        now_ms = time.time_ns() // 1_000_000
        sent: dict[tuple, tuple[bytes, tuple[float, int, int]]] = {}
        for name, attrs, value, ts_ns in state_gauges(self._store):
            key = (name, attrs)
            head, last = self._gauges_sent.get(key) or (None, None)
            if head is None:
                labels = {**self.cfg.labels, "target": self.target, **dict(attrs), "__name__": name}
                head = series_head(list(labels.items()))
            ms = ts_ns // 1_000_000
            if last is not None and last[0] == value:
                if not full and export - last[2] < every:
                    sent[key] = (head, last)
                    continue
                ms = max(now_ms, last[1] + 1)
            elif last is not None:
                ms = max(ms, last[1] + 1)
            fields.append(timeseries_field(head, [(value, ms)]))
            counts.append(1)
            sent[key] = (head, (value, ms, export))
        for key, (head, last) in self._gauges_sent.items():
            if key not in sent:  # gone (a port, or an info series whose labels changed): stale now,
                # not matched for Prometheus' 5-minute lookback
                fields.append(timeseries_field(head, [(STALE_NAN, max(now_ms, last[1] + 1))]))
                counts.append(1)
        self._gauges_sent = sent

    def _export(self) -> None:
        """Build, compress and queue one interval's requests (the oldest dropped on overflow)."""
        try:
            requests = [(snappy.compress(body), n) for body, n in self.build()]
        except Exception as exc:  # a bug must not end the export thread
            self.last_error = f"build: {type(exc).__name__}: {exc}"
            log.error("remote write request not built", destination=self.name, error=self.last_error,
                      exc_info=exc)
            return
        self.exports += 1
        if requests:
            self._queue.put(requests, self._on_drop)

    def _on_drop(self, _item: tuple[bytes, int]) -> None:
        self._resend_all = True  # what the dropped request changed is sent again

    # ------------------------------------------------------------ sending (own thread)
    def _connect(self, timeout: float) -> http.client.HTTPConnection:
        """A connection (not yet connected), its headers built: the secrets read again."""
        headers = {
            "Content-Encoding": "snappy",
            "Content-Type": "application/x-protobuf",
            "X-Prometheus-Remote-Write-Version": "0.1.0",
            "User-Agent": f"swtel/{__version__}",
        }
        auth = self.cfg.auth
        if auth.token_file:
            headers["Authorization"] = f"Bearer {read_secret(auth.token_file)}"
        elif auth.username:
            import base64

            pair = f"{auth.username}:{read_secret(auth.password_file or '')}".encode()
            headers["Authorization"] = f"Basic {base64.b64encode(pair).decode()}"
        self._headers = headers
        if self.https:
            return _Https(self.host, self.port, timeout, ssl_context(self.cfg.tls), self.cfg.tls.server_name)
        return http_client.HTTPConnection(self.host, self.port, timeout=timeout)

    def _close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def _post(self, body: bytes, timeout: float) -> tuple[int, str, float | None]:
        """POST one request within ``timeout`` s in all (the retry below included); (HTTP
        status, the start of the answer's text, its Retry-After). A kept-alive connection the
        receiver closed meanwhile is replaced once at once, not counted as a failure (a request
        sent twice is harmless: receivers drop a repeated sample)."""
        deadline = time.monotonic() + timeout
        fresh = self._conn is None
        try:
            return self._exchange(body, deadline, timeout)
        except (http_client.RemoteDisconnected, ConnectionResetError, BrokenPipeError):
            self._close()
            if fresh:
                raise
        return self._exchange(body, deadline, timeout)

    def _exchange(self, body: bytes, deadline: float, timeout: float) -> tuple[int, str, float | None]:
        """One request and its answer, by ``deadline`` (monotonic). A socket timeout bounds each
        read, not the whole: a receiver sending a byte every few seconds would hold the
        exporter for ever. A timer shuts the socket down at the deadline instead, which ends
        whatever call is blocked on it."""
        left = deadline - time.monotonic()
        if left <= 0:
            raise RequestTimeout(f"no answer within the timeout ({timeout:g}s)")
        expired = threading.Event()
        holder: list[http.client.HTTPConnection | None] = [self._conn]

        def expire() -> None:
            expired.set()
            conn = holder[0]
            sock = conn.sock if conn is not None else None
            if sock is not None:
                try:  # socket's own shutdown, also on a TLS socket: no TLS close_notify from here
                    socket.socket.shutdown(sock, socket.SHUT_RDWR)
                except OSError:
                    pass

        timer = threading.Timer(left, expire)
        timer.daemon = True
        timer.start()
        try:
            if self._conn is None:
                self._conn = holder[0] = self._connect(left)
                self._conn.connect()  # here, so that the timer can reach its socket
                if expired.is_set():
                    raise RequestTimeout(f"no answer within the timeout ({timeout:g}s)")
            conn = self._conn
            conn.timeout = left
            if conn.sock is not None:
                conn.sock.settimeout(left)
            conn.request("POST", self.path, body=body, headers=self._headers)
            reply = conn.getresponse()
            text = reply.read(MAX_REPLY)
        except (OSError, http_client.HTTPException, ValueError) as exc:
            if expired.is_set():
                self._close()
                raise RequestTimeout(f"no complete answer within the timeout ({timeout:g}s)") from exc
            raise
        finally:
            timer.cancel()
        if expired.is_set() or not reply.isclosed() or reply.will_close:
            # shut down at the deadline just as the answer came; more than we read (not worth
            # keeping the connection for); or the receiver closes it
            self._close()
        return (reply.status, logs.remote_text(text.decode("utf-8", "replace").strip(), REPLY_SHOWN),
                retry_after(reply.getheader("Retry-After")))

    def _send_one(self, timeout: float) -> bool:
        """Send the oldest queued request. True: done with it (accepted or refused for good)."""
        item = self._queue.peek()
        if item is None:
            return True
        body, nsamples = item
        try:
            status, text, wait = self._post(body, timeout)
        except RequestTimeout as exc:
            self._close()
            self._failed(f"timeout: {exc}", state="down")  # reached or not, it is not answering
            return False
        except (OSError, http_client.HTTPException, ValueError, tls.TlsError) as exc:  # ValueError: a secret file
            self._close()
            self._failed(logs.remote_text(f"{type(exc).__name__}: {exc}"))
            return False
        if 200 <= status < 300:
            self._queue.discard(item)
            self.sent += 1
            self.samples += nsamples
            self.last_sent_ns = time.time_ns()
            if self.state != self.up_state:
                down_for = self._connected()  # forgets the "down" lines: the next failure is news
                log.info("remote write receiver reached", destination=self.name, url=self.shown_url,
                         tls=self.https, down_for_s=round(down_for, 3))
            return True
        error = f"HTTP {status}" + (f": {text}" if text else "")
        if status == 429 or status >= 500:  # overloaded or failing: the same request again later
            if wait is not None:  # the receiver says when: honoured (bounded), not the backoff
                self.retry_after_s = wait
                error += f" (Retry-After {wait:g}s)"
            self._failed(error)
            return False
        # refused (4xx and anything else): the same request would be refused again
        self._queue.discard(item)
        self.refused += 1
        self.last_refusal = error
        self._resend_all = True
        self._down(error, "rejecting")
        self.log_limiter.log(log, "warning", ("refused", self.name), "remote write request refused; dropped",
                             destination=self.name, url=self.shown_url, samples=nsamples, error=error)
        return True

    def _failed(self, error: str, state: str | None = None) -> None:
        self._down(error, state or ("down" if self.state != "connecting" else "connecting"))
        self._log_outage("warning", "down", "remote write failed; retrying", destination=self.name,
                         url=self.shown_url, error=error)

