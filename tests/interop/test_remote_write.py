"""Prometheus remote write (exporters.remote_write[]): the request bytes parsed back with the
descriptors, HTTP answers from a stdlib server (refusals, retries, auth, TLS), and real
engines on loopback: Debian's Prometheus (remote-write receiver), VictoriaMetrics single node
and vmagent in front of it, checked with PromQL / MetricsQL against the kernel's exact veth
counts and the simulated switch's reference model, and across a 30 s outage of the engine.

The engines come from Debian's packages, which .ci/setup-test installs: a missing one fails the
test that needs it (CI must not pass by skipping them)."""

from __future__ import annotations

import json
import shutil
import ssl
import subprocess
import sys
import threading
import time
import urllib.parse
import urllib.request
from array import array
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from agent import config, registry
from agent.config import Duration
from agent.exporters import otlp_names
from agent.exporters import remote_write as rw
from agent.exporters.remote_write import RemoteWriteConfig, RemoteWriteExporter
from agent.sources.events import EVENT_INFO
from agent.store import Store
from tests.gnmi_helpers import free_port, make_pki, make_table
from tests.helpers import status_json
from tests.namespaces import ROOT, AgentProcess

NS = 1_000_000_000
_NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # loopback only


def problems_of(text: str) -> list[str]:
    with pytest.raises(config.ConfigError) as info:
        config.parse(text)
    return info.value.problems


def _rw(item: str, top: str = "") -> str:
    return f"{top}exporters: {{remote_write: [{{{item}}}]}}\n"


# ---------------------------------------------------------------- config


def test_config_defaults_and_rules(tmp_path):
    d = config.parse(_rw("url: 'http://127.0.0.1:9090/api/v1/write'")).exporters.remote_write[0]
    assert (d.name, float(d.interval), float(d.resend), float(d.timeout), d.queue, d.labels) == (
        "remote_write0", 1.0, 60.0, 10.0, 300, {})
    assert config.parse("exporters: {}\n").exporters.remote_write == []

    def has(text: str, *fragments: str) -> None:
        problems = "\n".join(problems_of(text))
        for f in fragments:
            assert f in problems, (f, problems)

    has(_rw("name: a"), "exporters.remote_write[0].url: required")
    has(_rw("url: 'ftp://h/x'"), "url: expected an http:// or https:// URL")
    has(_rw("url: 'http://u:p@h:1/w'"), "url: must not carry credentials")
    has(_rw("url: 'http://:9/w'"), "url: names no host")
    has(_rw("url: 'http://h:99999/w'"), "url: not a URL")
    has(_rw("url: 'http://h/w', interval: 50ms", "interval: 100ms\n"),
        "interval: must be at least the agent's interval (100ms), got 50ms")
    has(_rw("url: 'http://h/w', resend: 5m"), "resend: must be at least the interval (1s) and at most 4m")
    has(_rw("url: 'http://h/w', interval: 2s, resend: 1s"), "resend: must be at least the interval (2s)")
    has(_rw("url: 'http://h/w', queue: 0, timeout: 10ms"),
        "queue: must be at least 1", "timeout: must be at least 100ms")
    has(_rw("url: 'http://h/w', tls: {server_name: x}"), "tls: only with an https:// url")
    has(_rw("url: 'https://h/w', tls: {cert: /nonexistent.pem}"), "tls.cert: no such file", "cert and key go together")
    has(_rw("url: 'http://h/w', labels: {'1x': a, __y: b, target: c, interface: d, ok: ''}"),
        "labels.1x: not a Prometheus label name", "labels.__y: not a Prometheus label name",
        "labels.target: the series carry this label already", "labels.interface: the series carry",
        "labels.ok: must not be empty")
    has("exporters: {remote_write: [{name: a, url: 'http://h/w'}, {name: a, url: 'http://h/w'}]}\n",
        "exporters.remote_write[1].name: duplicate destination name 'a'")
    # secrets: files only, no other user may read them, never in clear beyond loopback
    secret = tmp_path / "secret"
    secret.write_text("s3cret\n")
    secret.chmod(0o644)
    has(_rw(f"url: 'https://h/w', auth: {{token_file: {secret}}}"), "auth.token_file: readable by other users")
    has(_rw(f"url: 'https://h/w', auth: {{username: u, password_file: {secret}}}"),
        "auth.password_file: readable by other users")
    secret.chmod(0o600)
    has(_rw(f"url: 'http://metrics.example/w', auth: {{token_file: {secret}}}, insecure_remote: true"),
        "url: auth.token_file would travel in plaintext to metrics.example, not a loopback address: use https://")
    has(_rw("url: 'http://metrics.example/w'"),
        "url: plaintext remote write (http://) to metrics.example, not a loopback address: use https://, "
        "or set insecure_remote: true")
    has(_rw(f"url: 'https://h/w', auth: {{username: u, password_file: {secret}, token_file: {secret}}}"),
        "auth: basic auth or token_file, not both")
    has(_rw("url: 'https://h/w', auth: {username: u}"), "auth.username: needs password_file")
    has(_rw(f"url: 'https://h/w', auth: {{password_file: {secret}}}"), "auth.password_file: needs username")
    has(_rw("url: 'https://h/w', auth: {token_file: /nonexistent}"), "auth.token_file: no such file")
    ok = config.parse(_rw(f"url: 'http://127.0.0.1:8428/api/v1/write', auth: {{token_file: {secret}}}, "
                          "labels: {site: ams1}")).exporters.remote_write[0]
    assert ok.auth.token_file == str(secret) and ok.labels == {"site": "ams1"}


def test_parsing_a_config_leaves_protobuf_and_snappy_unloaded():
    """A remote_write section loads nothing when parsed (the pure-Python backend may load
    protobuf by itself: compared with a config without the section)."""
    code = ("import sys, agent.plugins, agent.config as c; c.parse({!r}); "
            "print(sorted({{m.split('.')[0] for m in sys.modules}} & {{'google', 'snappy', 'grpc', 'cramjam'}}))")
    loaded = []
    for text in ("exporters: {jsonl: {path: '-'}}", "exporters: {remote_write: [{url: 'http://127.0.0.1:9/w'}]}"):
        out = subprocess.run([sys.executable, "-c", code.format(text)], cwd=ROOT, capture_output=True, text=True,
                             timeout=60)
        assert out.returncode == 0, out.stderr
        loaded.append(out.stdout.strip())
    assert loaded[1] == loaded[0] and "snappy" not in loaded[1] and "grpc" not in loaded[1], loaded


# ---------------------------------------------------------------- the requests, parsed back


def _exporter(url: str, **kw) -> RemoteWriteExporter:
    kw.setdefault("interval", Duration(0.1))
    return RemoteWriteExporter(RemoteWriteConfig(name="t", url=url, **kw), "leaf01")


def _parse(body: bytes) -> dict[tuple, list[tuple[float, int]]]:
    """labels (sorted pairs, checked sorted on the wire) -> samples."""
    out = {}
    for ts in rw.WriteRequest.FromString(body).timeseries:
        labels = [(lb.name, lb.value) for lb in ts.labels]
        assert labels == sorted(labels) and len({k for k, _ in labels}) == len(labels), labels
        out[tuple(labels)] = [(s.value, s.timestamp) for s in ts.samples]
    return out


def _series(name: str, interface: str = "swp1", **extra: str) -> tuple:
    return tuple(sorted({"__name__": name, "interface": interface, "target": "leaf01", **extra}.items()))


def test_changed_series_each_interval_every_series_each_resend():
    exp = _exporter("http://127.0.0.1:9/w", resend=Duration(0.5), labels={"site": "ams1"})  # 5 exports
    store = Store()
    table = make_table(["swp1"])  # in-octets, in-unicast-pkts, out-octets, out-unicast-pkts, in-errors
    exp._store = store

    def export(values: list[int], t_ms: int) -> dict:
        store.set_source("netdev", table, array("Q", values), t_ms * 1_000_000 + 123)
        built = exp.build()
        exp.exports += 1
        assert all(n == sum(len(s) for s in _parse(b).values()) for b, n in built)
        return _parse(b"".join(b for b, _n in built))

    octets = _series("nvswitch_interface_ether_stats_octets", site="ams1")
    in_errors = _series("nvswitch_interface_if_in_errors", site="ams1")
    first = export([1, 2, 3, 4, 5], 1000)  # export 0
    assert len(first) == 5 and first[octets] == [(1.0, 1000)] and first[in_errors] == [(5.0, 1000)]
    assert export([1, 2, 3, 4, 5], 1100) == {}  # nothing changed, nothing due
    # changed after being left out: the value it kept at the previous read, then the new one
    assert export([7, 2, 3, 4, 5], 1200) == {octets: [(1.0, 1100), (7.0, 1200)]}
    assert export([7, 2, 3, 4, 5], 1300) == {}
    assert export([7, 2, 3, 4, 9], 1400) == {in_errors: [(5.0, 1300), (9.0, 1400)]}
    # export 5: the series last sent by export 0 are due
    due = export([7, 2, 3, 4, 9], 1500)
    assert len(due) == 3 and octets not in due and in_errors not in due
    assert all(samples == [(samples[0][0], 1500)] for samples in due.values())
    assert export([7, 2, 3, 4, 9], 1600) == {}
    assert export([7, 2, 3, 4, 9], 1700) == {octets: [(7.0, 1700)]}  # due: sent by export 2
    # a dropped request: the next export sends every series read since it was last sent, and
    # a sample already sent is never sent again (a refused one would be refused again)
    exp._on_drop((b"", 0))
    assert len(export([7, 2, 3, 4, 9], 1800)) == 5
    assert export([7, 2, 3, 4, 9], 1800) == {}
    assert exp.series == 5


#: drop reasons of one port and one devlink device (constructed paths, as the sources build them)
DROP_SPECS = [("l2", "ingress-vlan-filter"), ("l3", "blackhole-route"), ("buffer", "tail-drop")]


def drop_reason_table():
    """A table of the drop-reason trees: three reasons of swp1 (one Cumulus has a discard
    counter for), one devlink trap's packets and bytes."""
    from agent.counters import SWTEL_ORIGIN, Container, CounterSpec, CounterTable
    from agent.pathgrammar import devlink_drop_reason_path, drop_reason_path

    specs = [CounterSpec(Container(SWTEL_ORIGIN, drop_reason_path("swp1", g, r)), "packets", port="swp1")
             for g, r in DROP_SPECS]
    trap = Container(SWTEL_ORIGIN, devlink_drop_reason_path("pci/0000:03:00.0", "l3", "unresolved-neigh"))
    specs += [CounterSpec(trap, "packets"), CounterSpec(trap, "bytes")]
    return CounterTable("drops", specs)


def test_drop_reasons_are_written_under_the_name_table_s_names():
    """Every reason a series of its own: Cumulus' discard name where it has one, else one
    metric with group and reason; devlink's per-device traps under swtel_devlink_*."""
    exp = _exporter("http://127.0.0.1:9/w")
    store = Store()
    exp._store = store
    store.set_source("drops", drop_reason_table(), array("Q", [11, 22, 33, 44, 4400]), 5_000_000_000)
    got = _parse(b"".join(b for b, _n in exp.build()))
    dev = {"device": "pci/0000:03:00.0", "group": "l3", "reason": "unresolved-neigh", "target": "leaf01"}
    assert got == {
        _series("nvswitch_interface_discards_ingress_vlan_membership", group="l2", reason="ingress-vlan-filter"):
            [(11.0, 5000)],
        _series("nvswitch_interface_drops_reason_packets", group="l3", reason="blackhole-route"): [(22.0, 5000)],
        _series("nvswitch_interface_drops_reason_packets", group="buffer", reason="tail-drop"): [(33.0, 5000)],
        tuple(sorted({**dev, "__name__": "swtel_devlink_drops_reason_packets"}.items())): [(44.0, 5000)],
        tuple(sorted({**dev, "__name__": "swtel_devlink_drops_reason_bytes"}.items())): [(4400.0, 5000)],
    }


def test_a_bigger_switch_is_split_into_requests(monkeypatch):
    monkeypatch.setattr(rw, "MAX_SAMPLES", 7)
    exp = _exporter("http://127.0.0.1:9/w")
    store = Store()
    table = make_table(["swp1", "swp2", "swp3"])
    store.set_source("netdev", table, array("Q", range(15)), 10**18)
    exp._store = store
    built = exp.build()
    assert [n for _b, n in built] == [7, 7, 1]
    assert sum(len(_parse(b)) for b, _n in built) == 15


# ---------------------------------------------------------------- HTTP answers (stdlib server)


class Receiver:
    """A remote-write endpoint: records every request (path, headers, parsed body) and answers
    with ``answer()`` -> (status, text)."""

    def __init__(self, answer=lambda: (204, ""), context: ssl.SSLContext | None = None) -> None:
        import snappy

        self.answer = answer
        self.requests: list[tuple[str, dict, dict]] = []
        owner = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:  # noqa: N802 - http.server's naming
                body = self.rfile.read(int(self.headers["Content-Length"]))
                owner.requests.append((self.path, dict(self.headers), _parse(snappy.uncompress(body))))
                status, text = owner.answer()
                data = text.encode()
                self.send_response(status)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        if context is not None:
            self.server.socket = context.wrap_socket(self.server.socket, server_side=True)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def _wait(predicate, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while not (result := predicate()):
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)
    return result


def test_open_events_are_written_as_swtel_status_counts_them(tmp_path):
    """A simulated spine with symbol errors on two ports: the agent writes
    swtel_insights_open_events{severity} (sources.events), and its latest values are the open
    events `swtel status` lists, by severity (0 for a severity with none)."""
    from tests.helpers import OFF, asic_yaml, status_doc
    from tests.namespaces import AgentProcess

    rw._load()  # the receiver parses with the descriptors
    receiver = Receiver()
    start = time.time_ns() + 1_000_000_000
    sim = f"role=spine seed=1 start={start} scenario=symbol-errors@1s:swp11s1 scenario=symbol-errors@1s:swp2"
    text = asic_yaml(tmp_path, "sim", sim, netdev=OFF, system="{enabled: false}\n  events: {interval: 100ms}",
                     interval="100ms", head="target: leaf01\n",
                     exporters=f"  remote_write: [{{name: t, url: 'http://127.0.0.1:{receiver.port}/w', "
                               "interval: 200ms, resend: 1s}]\n")
    agent = AgentProcess(None, text, tmp_path)

    def written() -> dict[str, float]:
        latest: dict[str, tuple[int, float]] = {}
        for _path, _headers, series in list(receiver.requests):
            for labels, samples in series.items():
                d = dict(labels)
                if d["__name__"] == "swtel_insights_open_events":
                    value, ms = samples[-1]
                    if ms >= latest.get(d["severity"], (0, 0.0))[0]:
                        latest[d["severity"]] = (ms, value)
        return {sev: v for sev, (_ms, v) in latest.items()}

    def by_severity() -> dict[str, float]:
        out = {"warning": 0.0, "critical": 0.0}
        for ev in status_doc(tmp_path)["events"]["open"]:
            out[ev["severity"]] += 1
        return out

    try:
        agent.wait_ready()
        # (bounds, not figures: a pure-Python spine on a loaded machine took more than 20 s)
        opened = agent.wait_for(lambda: c if sum((c := by_severity()).values()) >= 2 else None, 90,
                                "two open events")
        # the same counts over remote write (within a read and an export of the status call)
        # events open and clear as the faults go on: the export equals a status that held across it
        agent.wait_for(lambda: by_severity() == written() == by_severity(), 90, f"remote write to show {opened}")
        assert sum(written().values()) >= 2 and set(written()) == {"warning", "critical"}
    finally:
        assert agent.stop() == 0
        receiver.stop()


def _exported(exp: RemoteWriteExporter, n: int = 1) -> None:
    """Wait for ``n`` more of the exporter's exports (each interval's, whether or not it had
    anything to send): the test moves with the exporter, not with the wall clock."""
    first = exp.status()["exports"]
    _wait(lambda: exp.status()["exports"] >= first + n, 60, f"{n} more exports")


def _running(exp: RemoteWriteExporter, values=(1, 2, 3, 4, 5)) -> Store:
    store = Store()
    store.set_source("netdev", make_table(["swp1"]), array("Q", values), time.time_ns())
    exp.start(store)
    return store


def test_headers_basic_auth_and_a_4xx_refusal_counted_not_retried(tmp_path):
    from agent.control.client import health_problems

    secret = tmp_path / "password"
    secret.write_text("pa55\n")
    secret.chmod(0o600)
    rx = Receiver(lambda: (400, "out of order sample " + "x" * 500))
    exp = _exporter(f"http://127.0.0.1:{rx.port}/api/v1/write?tenant=a",
                    auth=rw.RemoteWriteAuth(username="agent", password_file=str(secret)))
    try:
        store = _running(exp)
        table = store.latest()["netdev"][0]
        for v in range(10, 14):  # a change each time: a request each export
            _exported(exp)
            store.set_source("netdev", table, array("Q", [v, 2, 3, 4, 5]), time.time_ns())
        _wait(lambda: exp.status()["refused"] >= 3, 60, "3 refusals")
        _exported(exp, 5)  # nothing new to send: nothing more is sent
        status = exp.status()
    finally:
        exp.stop(0.5)
        rx.stop()
    path, headers, series = rx.requests[0]
    assert path == "/api/v1/write?tenant=a"
    assert headers["Content-Encoding"] == "snappy" and headers["Content-Type"] == "application/x-protobuf"
    assert headers["X-Prometheus-Remote-Write-Version"] == "0.1.0"
    assert headers["User-Agent"].startswith("swtel/")
    assert headers["Authorization"] == "Basic YWdlbnQ6cGE1NQ=="  # agent:pa55
    assert _series("nvswitch_interface_ether_stats_octets") in series
    # each request was sent once: refused, dropped and counted, never retried
    assert status["retries"] == 0 and status["sent"] == 0
    assert status["refused"] == len(rx.requests) and status["dropped"] == status["refused"]
    assert status["queue"] == 0
    assert status["state"] == "rejecting" and status["down_since_ns"]
    assert status["last_refusal"].startswith("HTTP 400: out of order sample x")
    assert len(status["last_refusal"]) <= len("HTTP 400: ") + rw.REPLY_SHOWN
    assert status["url"] == f"http://127.0.0.1:{rx.port}/api/v1/write"  # the query is not shown
    # every request after a refusal carries every series again
    assert all(len(s) == 5 for _p, _h, s in rx.requests)
    problems = health_problems({"exporters": {"remote_write:t": status}}, grace_s=0)
    assert problems and problems[0].startswith("exporter remote_write:t failing for")


@pytest.mark.parametrize("status", [429, 503])
def test_429_and_5xx_are_retried_with_backoff_and_the_queue_kept(status):
    answers = [(status, "slow down")] * 3
    rx = Receiver(lambda: answers.pop(0) if answers else (204, ""))
    exp = _exporter(f"http://127.0.0.1:{rx.port}/api/v1/write", queue=100)
    try:
        store = _running(exp)
        table = store.latest()["netdev"][0]
        for v in range(10, 20):
            _exported(exp)  # one change per export
            store.set_source("netdev", table, array("Q", [v, 2, 3, 4, 5]), time.time_ns())
        _wait(lambda: exp.status()["queue"] == 0 and exp.status()["sent"] >= 5, 60, "the queue sent")
        result = exp.status()
    finally:
        exp.stop(0.5)
        rx.stop()
    assert result["retries"] == 3 and result["refused"] == 0 and result["dropped"] == 0, result
    assert result["state"] == "connected" and result["down_since_ns"] is None
    # connected now: the outage's error is history (previous_error), not beside "connected"
    assert result["last_error"] is None and result["previous_error"] == f"HTTP {status}: slow down"
    # the first request three times, then every one in order: each octets value once, increasing
    octets = [s[_series("nvswitch_interface_ether_stats_octets")][-1][0]
              for _p, _h, s in rx.requests[3:] if _series("nvswitch_interface_ether_stats_octets") in s]
    assert octets == sorted(set(octets)) and octets[-1] == 19.0
    assert [r[2] for r in rx.requests[:4]] == [rx.requests[0][2]] * 4


def test_nobody_listening_bounded_queue_overflow_counted():
    exp = _exporter(f"http://127.0.0.1:{free_port()}/api/v1/write", queue=3)
    try:
        store = _running(exp)
        table = store.latest()["netdev"][0]
        for v in range(10, 22):
            _exported(exp)  # one change per export: twelve requests queued, three kept
            store.set_source("netdev", table, array("Q", [v, 2, 3, 4, 5]), time.time_ns())
        _exported(exp)
        result = exp.status()
    finally:
        exp.stop(0.2)
    assert result["state"] == "connecting" and result["queue"] == 3 and result["sent"] == 0
    assert result["dropped"] >= 5 and result["retries"] >= 1
    assert "ConnectionRefusedError" in result["last_error"]


def test_tls_client_certificate_server_name_and_a_bearer_token(tmp_path):
    pki = make_pki(tmp_path / "pki")
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cafile=pki.ca)
    ctx.load_cert_chain(pki.server_cert, pki.server_key)
    ctx.verify_mode = ssl.CERT_REQUIRED  # mTLS: the agent's certificate is required
    token = tmp_path / "token"
    token.write_text("tok-1\n")
    token.chmod(0o600)
    rx = Receiver(context=ctx)
    tls = config.ClientTls(ca=pki.ca, cert=pki.client_cert, key=pki.client_key, server_name="collector.test")
    exp = _exporter(f"https://127.0.0.1:{rx.port}/api/v1/write", tls=tls,
                    auth=rw.RemoteWriteAuth(token_file=str(token)))
    try:
        _running(exp)
        _wait(lambda: exp.status()["sent"] >= 1, 10, "a request over TLS")
    finally:
        exp.stop(0.5)
    assert exp.status()["tls"] is True
    assert rx.requests[0][1]["Authorization"] == "Bearer tok-1"

    # a CA that did not sign the receiver: never sent, retried, the reason shown
    bad = _exporter(f"https://127.0.0.1:{rx.port}/api/v1/write",
                    tls=config.ClientTls(ca=pki.wrong_ca, server_name="collector.test"))
    try:
        _running(bad)
        _wait(lambda: bad.status()["retries"] >= 1, 10, "a failed handshake")
    finally:
        bad.stop(0.2)
        rx.stop()
    assert bad.status()["sent"] == 0 and "CERTIFICATE_VERIFY_FAILED" in bad.status()["last_error"]


# ---------------------------------------------------------------- real engines


def _binary(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        pytest.fail(f"{name} is not installed: Debian's package "
                    f"({'prometheus' if name == 'prometheus' else 'victoria-metrics'}) "
                    "is needed here, and .ci/setup-test installs it")
    return path


def _get(url: str, timeout: float = 5) -> bytes:
    return _NO_PROXY.open(url, timeout=timeout).read()


class Engine:
    """Debian's ``prometheus`` (remote-write receiver), ``victoria-metrics`` (single node) or
    ``vmagent`` (writing to ``upstream``), on loopback with a temporary data directory; it can
    be stopped and started again on the same port and data."""

    def __init__(self, kind: str, workdir: Path, upstream: Engine | None = None) -> None:
        self.kind = kind
        self.binary = _binary(kind)
        self.dir = workdir / kind
        self.dir.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        self.upstream = upstream
        self.proc: subprocess.Popen | None = None
        self.log = self.dir / "engine.log"

    @property
    def write_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/api/v1/write"

    def command(self) -> list[str]:
        listen = f"127.0.0.1:{self.port}"
        if self.kind == "prometheus":
            (self.dir / "prometheus.yml").write_text("global: {}\n")
            return [self.binary, f"--config.file={self.dir / 'prometheus.yml'}",
                    f"--storage.tsdb.path={self.dir / 'data'}", f"--web.listen-address={listen}",
                    "--web.enable-remote-write-receiver"]
        if self.kind == "victoria-metrics":
            # no latency offset and no cache: a query sees what was just written
            return [self.binary, f"-storageDataPath={self.dir / 'data'}", f"-httpListenAddr={listen}",
                    "-search.latencyOffset=0s", "-search.disableCache", "-retentionPeriod=1"]
        assert self.upstream is not None
        return [self.binary, f"-httpListenAddr={listen}", f"-remoteWrite.url={self.upstream.write_url}",
                f"-remoteWrite.tmpDataPath={self.dir / 'buffer'}", "-remoteWrite.flushInterval=200ms"]

    def start(self) -> Engine:
        with open(self.log, "a") as log:
            self.proc = subprocess.Popen(self.command(), stdout=log, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL)
        ready = "/-/ready" if self.kind == "prometheus" else "/health"
        deadline = time.monotonic() + 30
        while True:
            if self.proc.poll() is not None:
                raise AssertionError(f"{self.kind} exited ({self.proc.returncode}):\n{self.log.read_text()[-3000:]}")
            try:
                _get(f"http://127.0.0.1:{self.port}{ready}", 2)
                return self
            except OSError:
                if time.monotonic() > deadline:
                    raise AssertionError(f"{self.kind} not ready in 30 s:\n{self.log.read_text()[-3000:]}") from None
                time.sleep(0.2)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        self.proc = None

    def query(self, expr: str) -> list[dict]:
        """An instant query's result (PromQL; MetricsQL on VictoriaMetrics)."""
        url = f"http://127.0.0.1:{self.port}/api/v1/query?query={urllib.parse.quote(expr)}"
        reply = json.loads(_get(url, 10))
        assert reply["status"] == "success", reply
        return reply["data"]["result"]

    def value(self, expr: str) -> float | None:
        result = self.query(expr)
        assert len(result) <= 1, result
        return float(result[0]["value"][1]) if result else None

    def samples(self, expr: str) -> list[tuple[float, float]]:
        """The raw samples (seconds, value) of one series' range selector, e.g. ``m{...}[5m]``."""
        result = self.query(expr)
        assert len(result) == 1, result
        return [(float(t), float(v)) for t, v in result[0]["values"]]


@pytest.fixture
def engines(tmp_path):
    started: list[Engine] = []

    def make(kind: str, upstream: Engine | None = None) -> Engine:
        engine = Engine(kind, tmp_path, upstream)
        started.append(engine)
        return engine.start()

    yield make
    for engine in reversed(started):
        engine.stop()


def _agent_config(tmp_path: Path, sources: str, url: str, interval: str, queue: int = 300,
                  target: str = "veth-rw", poll: str = "50ms") -> str:
    return (f"target: {target}\ninterval: {poll}\nsources:\n{sources}"
            f"exporters:\n  remote_write:\n    - {{name: engine, url: '{url}', interval: {interval}, "
            f"queue: {queue}, labels: {{site: lab}}}}\n"
            f"control: {{socket: {tmp_path / 'swtel.sock'}, group: null}}\n")


def _veth_sources(ifname: str) -> str:
    return (f"  netdev: {{interfaces: [{ifname}]}}\n  ethtool: {{interfaces: [{ifname}]}}\n"
            "  system: {enabled: false}\n")


def _selector(name: str, ifname: str, target: str = "veth-rw") -> str:
    return f'{name}{{interface="{ifname}",target="{target}",site="lab"}}'


def _exporter_status(tmp_path: Path) -> dict:
    _code, doc = status_json(tmp_path)
    return doc["exporters"]["remote_write:engine"]


def _agent_exported(tmp_path: Path, n: int) -> None:
    """Wait for ``n`` more exports of the agent's remote write (its status counts them)."""
    first = _exporter_status(tmp_path)["exports"]
    _wait(lambda: _exporter_status(tmp_path)["exports"] >= first + n, 120, f"{n} more exports")


@pytest.mark.root
def test_prometheus_holds_the_exact_veth_counts(tmp_path, engines):
    from tests.namespaces import UDP_OVERHEAD, Forward, kernel_statistics, veth_pair
    from tests.unit.test_otlp import VETH

    prom = engines("prometheus")
    n, size = 321, 200
    pkts, octets = "nvswitch_interface_ether_stats_pkts", "nvswitch_interface_ether_stats_octets"
    with veth_pair() as pair:
        forward = Forward(pair.b, prom.port)
        agent = AgentProcess(pair.b, _agent_config(tmp_path, _veth_sources(pair.b_if), prom.write_url, "200ms"),
                             tmp_path)
        try:
            agent.wait_ready()
            agent.wait_for(lambda: prom.value(_selector(pkts, pair.b_if)) is not None, 15, "the first sample")
            first = prom.value(_selector(pkts, pair.b_if))
            first_octets = prom.value(_selector(octets, pair.b_if))
            pair.send_udp(n, size)
            kernel = kernel_statistics(pair.b, pair.b_if)
            want = {name: float(kernel[stat]) for name, stat in VETH.items()}
            agent.wait_for(lambda: {k: prom.value(_selector(k, pair.b_if)) for k in want} == want, 15,
                           "the kernel's counts in Prometheus")
            status = _exporter_status(tmp_path)
        finally:
            assert agent.stop() == 0
            forward.close()
    assert prom.value(_selector(pkts, pair.b_if)) - first == n
    assert prom.value(_selector(octets, pair.b_if)) - first_octets == n * (size + UDP_OVERHEAD)
    assert status["state"] == "connected" and status["dropped"] == 0 and status["refused"] == 0, status
    assert status["kind"] == "remote_write" and status["series"] >= len(VETH)


def _model_bounds(model, start: int, t_ms: int, cache: dict) -> tuple[list[int], list[int]]:
    """The model's values at the start and the end of millisecond ``t_ms`` (a sample's time:
    the read it carries happened within it)."""
    hit = cache.get(t_ms)
    if hit is None:
        lo = t_ms * 1_000_000 - start
        hit = cache[t_ms] = (model.values(lo), model.values(lo + 999_999))
    return hit


@pytest.mark.slow
@pytest.mark.parametrize("path", ["victoria-metrics", "vmagent"])
def test_victoria_metrics_has_every_series_of_the_simulated_switch(tmp_path, engines, path):
    from tests import sim_model
    from tests.unit.test_otlp import _model_keys

    vm = engines("victoria-metrics")
    front = engines("vmagent", upstream=vm) if path == "vmagent" else vm
    start = (time.time_ns() // 1_000_000 - 2000) * 1_000_000
    sim = f"role=leaf seed=5 start={start} scenario=pfc-storm@1s:swp1/3,symbol-errors@1s:swp2"
    sources = ("  netdev: {enabled: false}\n  ethtool: {enabled: false}\n  system: {enabled: false}\n"
               f"  asic: {{enabled: true, plugin: sim, config: '{sim}'}}\n")
    model = sim_model.Model(sim)
    keys = _model_keys(model, 0)
    agent = AgentProcess(None, _agent_config(tmp_path, sources, front.write_url, "500ms", target="sim-1",
                                             poll="100ms"), tmp_path)
    try:
        agent.wait_ready()
        agent.wait_for(lambda: len(vm.query('{target="sim-1"}')) >= len(keys), 30, "every series in VictoriaMetrics")
        _agent_exported(tmp_path, 4)  # a few more exports: samples that changed
        _code, doc = status_json(tmp_path)
        status = doc["exporters"]["remote_write:engine"]
        events = len(doc["events"]["open"]) + len(doc["events"]["recent"])  # each event an info series
    finally:
        assert agent.stop() == 0
    derived = set(otlp_names.PREDICTION_NAMES)  # the detectors' gauges: tests/unit/test_link_degrading.py
    derived.add(otlp_names.OPEN_EVENTS)  # the agent's open events: test_open_events_are_written_...
    derived.add(EVENT_INFO)  # the events themselves, one info series each: tests/unit/test_far_ends.py
    series = [r for r in vm.query('{target="sim-1"}') if r["metric"]["__name__"] not in derived]
    got = {(r["metric"]["__name__"], tuple(sorted((k, v) for k, v in r["metric"].items()
                                                   if k not in ("__name__", "target", "site"))))
           for r in series}
    want = {(name, tuple(sorted(attrs))) for name, attrs in keys}
    assert got == want
    assert {r["metric"]["site"] for r in series} == {"lab"}
    from agent.sources.events import SEVERITIES  # the agent's open events: a series per severity

    # and an info series per event the book holds (one raised since the last export is not in it yet)
    base = len(keys) + len(SEVERITIES)
    assert base <= status["series"] <= base + events and status["dropped"] == 0 and status["refused"] == 0, \
        (status, events)
    ports = {dict(a).get("interface") for _n, a in keys}
    assert len(ports) > 10  # the whole switch, every port
    # every raw sample of a few counters of every port lies within the model's values of its millisecond
    kinds = sim_model.value_kinds(model.layout(0)[2])
    cache: dict = {}
    checked = 0
    for name in ("nvswitch_interface_ether_stats_octets", "nvswitch_interface_if_out_octets",
                 "nvswitch_interface_sp_rx_pause", "nvswitch_interface_phy_stats_phy_corrected_bits"):
        for r in vm.query(f'{name}{{target="sim-1"}}[5m]'):
            attrs = tuple((k, v) for k, v in sorted(r["metric"].items()) if k not in ("__name__", "target", "site"))
            i = keys[(name, attrs)]
            assert kinds[i] == sim_model.COUNTER
            for t, v in r["values"]:
                lo, hi = _model_bounds(model, start, round(float(t) * 1000), cache)
                assert lo[i] <= float(v) <= hi[i], (name, attrs, t, v, lo[i], hi[i])
                checked += 1
    assert checked > 4 * 30
    assert vm.value('nvswitch_interface_sp_rx_pause{target="sim-1",interface="swp1",priority="3"}') > 10_000


@pytest.mark.root
@pytest.mark.slow
# once (the C pass): what the outage tests is the exporter's own queue, retries and backoff
# (agent/exporters/sender.py, http.client), which neither the reader backend nor a versioned
# library decides; the encoding the Debian libraries could change (protobuf, snappy) is held to
# both engines in that pass by the exact-count and every-series tests above
@pytest.mark.once
@pytest.mark.parametrize("kind", ["prometheus", "victoria-metrics"])
def test_engine_down_30s_then_back_loses_no_count(tmp_path, engines, kind):
    from tests.namespaces import Forward, kernel_statistics, veth_pair

    engine = engines(kind)
    pkts = "nvswitch_interface_ether_stats_pkts"
    # 500 ms exports, 300 requests kept: 150 s, the 30 s outage five times over
    with veth_pair() as pair:
        forward = Forward(pair.b, engine.port)
        agent = AgentProcess(pair.b, _agent_config(tmp_path, _veth_sources(pair.b_if), engine.write_url,
                                                   "500ms", queue=300), tmp_path)
        sel = _selector(pkts, pair.b_if)

        def total() -> int:
            return kernel_statistics(pair.b, pair.b_if)["rx_packets"]

        try:
            agent.wait_ready()
            agent.wait_for(lambda: engine.value(sel) is not None, 15, "the first sample")
            base = total()
            pair.send_udp(100, 64)
            agent.wait_for(lambda: engine.value(sel) == base + 100, 10, "the first burst")
            engine.stop()
            down_at = time.time()
            # the outage in the agent's exports (500 ms): 4 (2 s), 26 more (15 s), 60 in all (30 s)
            _agent_exported(tmp_path, 4)
            pair.send_udp(200, 64)  # counted while the engine is down
            during_1 = total()
            _agent_exported(tmp_path, 26)
            pair.send_udp(300, 64)
            during_2 = total()
            _agent_exported(tmp_path, 30)
            mid = _exporter_status(tmp_path)
            engine.start()
            up_at = time.time()
            final = total()
            agent.wait_for(lambda: engine.value(sel) == final, 30, "the total after the outage")
            status = _exporter_status(tmp_path)
        finally:
            assert agent.stop() == 0
            forward.close()
    assert final == base + 600 and (during_1, during_2) == (base + 300, base + 600)
    assert mid["state"] in ("down", "connecting") and mid["queue"] > 0 and mid["down_since_ns"], mid
    assert status["state"] == "connected" and status["dropped"] == 0 and status["retries"] >= 1, status
    # the samples taken during the outage arrived late, in order, with their own times
    samples = engine.samples(f"{sel}[10m]")
    values = [v for _t, v in samples]
    assert values == sorted(values) and values[-1] == final
    during = {v for t, v in samples if down_at < t < up_at}
    assert {base + 300, base + 600} <= during, (down_at, up_at, samples)


class DripReceiver:
    """A loopback HTTP endpoint that reads each request, then answers one byte every ``every``
    seconds, for ever: each read the exporter makes succeeds well within its socket timeout."""

    def __init__(self, every: float = 0.3) -> None:
        import socket

        self.every = every
        self.connections = 0
        self._stop = threading.Event()
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.connections += 1
            threading.Thread(target=self._drip, args=(conn,), daemon=True).start()

    def _drip(self, conn) -> None:
        with conn:
            try:
                conn.recv(1 << 20)  # the request (headers and a small body)
                for byte in b"HTTP/1.1 204 No Content\r\n" * 1000:
                    if self._stop.wait(self.every):  # the drip's pace, not a synchronisation
                        return
                    conn.sendall(bytes((byte,)))
            except OSError:  # the exporter gave up on the request: what this test wants
                return

    def stop(self) -> None:
        self._stop.set()
        self.sock.close()


def test_a_receiver_dripping_its_answer_is_cut_off_at_the_timeout_and_polling_goes_on():
    """``timeout`` bounds the whole request: a receiver that sends one byte every 0.3 s (each
    read inside the socket timeout) is cut off at the request's deadline, reported ``down``
    with a timeout error, and the exporter keeps trying (new connections, retries)."""
    rx = DripReceiver(every=0.3)
    exp = _exporter(f"http://127.0.0.1:{rx.port}/api/v1/write", timeout=Duration(1.0))
    try:
        _running(exp)
        status = _wait(lambda: (st := exp.status())["state"] == "down" and st, 60, "the state down")
        assert status["last_error"] == "timeout: no complete answer within the timeout (1s)", status
        assert status["down_since_ns"] and status["sent"] == 0
        # polling never stops: the request is tried again, on new connections
        _wait(lambda: rx.connections >= 3 and exp.status()["retries"] >= 2, 60, "two more attempts")
        assert exp.status()["state"] == "down" and exp.status()["queue"] >= 1
    finally:
        exp.stop(0.2)
        rx.stop()


def test_retry_after_is_honoured_and_bounded():
    """A 429 with Retry-After: the request waits that long (not the backoff's 0.5 s); a long
    one is cut to 5 minutes; a date is read too."""
    assert rw.retry_after("7") == 7.0 and rw.retry_after("100000") == rw.MAX_RETRY_AFTER_S == 300.0
    assert rw.retry_after("9" * 5000) == 300.0 and rw.retry_after("soon") is None and rw.retry_after(None) is None
    assert rw.retry_after("Wed, 21 Oct 2015 07:28:00 GMT") == 0.0  # in the past: at once
    assert rw.retry_after("Wed, 21 Oct 2015 07:28:30 GMT", now=1445412480.0) == 30.0

    answers = [(429, "slow down")]
    rx = Receiver(lambda: answers.pop(0) if answers else (204, ""))
    rx_headers = {"Retry-After": "100000"}
    orig = rx.server.RequestHandlerClass.end_headers

    def end_headers(handler) -> None:
        if rx.requests and len(rx.requests) == 1:
            for k, v in rx_headers.items():
                handler.send_header(k, v)
        orig(handler)

    rx.server.RequestHandlerClass.end_headers = end_headers
    exp = _exporter(f"http://127.0.0.1:{rx.port}/api/v1/write", queue=100)
    try:
        _running(exp)
        _wait(lambda: exp.status()["retries"] >= 1, 60, "the 429")
        _exported(exp, 10)  # ten exports (1 s at 100 ms): the backoff alone would have retried
        status = exp.status()
    finally:
        exp.stop(0.2)
        rx.stop()
    assert len(rx.requests) == 1 and status["sent"] == 0 and status["retries"] == 1, status
    assert status["retry_after_s"] == 300.0 and status["queue"] >= 1
    assert status["last_error"] == "HTTP 429: slow down (Retry-After 300s)"


# ---------------------------------------------------------------- one naming scheme (issue 38 item 7)


def test_swtel_collect_prometheus_serves_the_names_remote_write_sends_for_the_same_run(tmp_path):
    """One simulated leaf dialing out to `swtel collect --prometheus` and remote-writing to a
    receiver, in the same run: the collector's /metrics holds exactly the series (name and
    labels) remote write sent: counters under every rank (named and generic), the detectors'
    gauges and the open-event counts, nothing twice under another name."""
    from agent.tools.collect import Collector
    from agent.tools.prometheus import render

    rw._load()  # the receiver parses with the descriptors
    rx = Receiver()
    port = free_port()
    col = Collector(f"127.0.0.1:{port}", insecure=True).start()
    sim = "role=leaf seed=5 scenario=pfc-storm@1s:swp1/3,symbol-errors@1s:swp2"
    config_text = (
        "target: sim-1\ninterval: 100ms\nsources:\n"
        "  netdev: {enabled: false}\n  ethtool: {enabled: false}\n  system: {enabled: true}\n"
        f"  asic: {{enabled: true, plugin: sim, config: '{sim}'}}\n"
        f"exporters:\n  remote_write:\n    - {{name: engine, url: 'http://127.0.0.1:{rx.port}/api/v1/write', "
        "interval: 200ms}\n"
        f"  dialout: [{{name: col, address: '127.0.0.1:{port}', insecure: true}}]\n"
        f"control: {{socket: {tmp_path / 'swtel.sock'}, group: null}}\n")
    flr = otlp_names.PHY_PREDICTION["predicted-flr"]

    def sent() -> set[tuple]:
        return {labels for _p, _h, series in list(rx.requests) for labels in series}

    agent = AgentProcess(None, config_text, tmp_path)
    try:
        agent.wait_ready()
        # the slowest values are there in both: the detector's gauges (at most once a second)
        agent.wait_for(lambda: any(dict(s)["__name__"] == flr for s in sent())
                       and f"{flr}{{" in render(col.latest_triples()), 60, "the predicted FLR gauge in both")
        _agent_exported(tmp_path, 3)
    finally:
        assert agent.stop() == 0  # both exporters flush at the stop
        col.stop(0)
        rx.stop()
    served = set()
    for line in render(col.latest_triples()).splitlines():
        if line and not line.startswith("#"):
            name, _, rest = line.partition("{")
            labels = dict(pair.split("=", 1) for pair in rest.rpartition("}")[0].split(","))
            served.add(tuple(sorted({"__name__": name, **{k: v.strip('"') for k, v in labels.items()}}.items())))
    # the info series (the events' here) are remote write's and OTLP's: the collector's exposition
    # has no text states (docs/OPERATIONS.md, "Suspect links")
    infos = {s for s in sent() if dict(s)["__name__"] in registry.INFO_METRICS}
    assert {dict(s)["__name__"] for s in infos} == {EVENT_INFO}
    written = sent() - infos
    assert served == written, (sorted(served - written)[:10], sorted(written - served)[:10])
    names = {dict(s)["__name__"] for s in served}
    assert {flr, otlp_names.OPEN_EVENTS, "nvswitch_interface_ether_stats_octets", "nvswitch_interface_sp_rx_pause",
            "swtel_agent_rss_bytes"} <= names, sorted(names)
    assert not [n for n in names if n.startswith(("interfaces_", "qos_", "swtel_interfaces_interface_state"))]
