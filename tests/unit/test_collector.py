"""``swtel collect``: both wire paths, JSON lines, latest values, deletes, TLS/mTLS,
Prometheus text, and the real ``python -m agent collect`` process (SIGTERM, --duration)."""

from __future__ import annotations

import io
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import grpc
import pytest

from agent.counters import SWTEL_ORIGIN, Container, StateUpdate
from agent.gnmi import encode
from agent.tools import prometheus
from agent.tools.collect import NOKIA_METHOD, SONIC_METHOD, Collector
from tests.gnmi_helpers import free_port, make_batch, make_pki, make_table, publish
from tests.helpers import wait_until

REPO = Path(__file__).resolve().parents[2]
TS = 1_700_000_000_123_456_789


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    return make_pki(tmp_path_factory.mktemp("pki"))


def _messages() -> tuple[list[bytes], dict[str, int]]:
    table = make_table(["swp1", "swp2"])
    values = [10 * (i + 1) for i in range(len(table))]
    msgs = encode.encode_batch(make_batch(table, values, TS), "leaf01")
    msgs.append(encode.encode_sync())
    expected = dict(zip(table.paths, values, strict=True))
    return msgs, expected


@pytest.mark.parametrize("method,replies", [(NOKIA_METHOD, True), (SONIC_METHOD, False)])
def test_both_wire_paths_plaintext(method, replies):
    out = io.StringIO()
    port = free_port()
    col = Collector(f"127.0.0.1:{port}", insecure=True, output=out).start()
    try:
        msgs, expected = _messages()
        got = publish(f"127.0.0.1:{port}", method, msgs, metadata=[("system-name", "leaf01"),
                                                                    ("subscription-name", "s1")])
        # Nokia: one empty PublishResponse per message; SONiC: nothing
        assert got == ([b""] * len(msgs) if replies else [])
        assert col.wait_for(lambda c: c.received == len(msgs), 30)
        assert col.values("leaf01") == expected
        (stream,) = col.streams
        assert stream.method == method and stream.synced
        assert stream.metadata["system-name"] == "leaf01"
        assert stream.metadata["subscription-name"] == "s1"
        lines = [json.loads(s) for s in out.getvalue().splitlines()]
        assert lines[-1] == {"target": "leaf01", "sync": True}
        first = lines[0]
        assert set(first) == {"target", "path", "value", "ts", "sync"}
        assert first["ts"] == TS and first["sync"] is False and first["target"] == "leaf01"
        assert first["path"] == "/interfaces/interface[name=swp1]/state/counters/in-octets"
    finally:
        col.stop(0)


def test_states_deletes_and_origin_in_path():
    port = free_port()
    col = Collector(f"127.0.0.1:{port}", insecure=True).start()
    try:
        c = Container(SWTEL_ORIGIN, "/interfaces/interface[name=swp3]/pfc")
        states = encode.encode_states([StateUpdate(5, c, "priority[id=3]/state", "storm"),
                                       StateUpdate(5, c, "paused", 0.5)], "leaf01")
        publish(f"127.0.0.1:{port}", NOKIA_METHOD, states)
        assert col.wait_for(lambda c: c.received == 1, 30)
        assert col.values() == {
            "swtel:/interfaces/interface[name=swp3]/pfc/priority[id=3]/state": "storm",
            "swtel:/interfaces/interface[name=swp3]/pfc/paused": 0.5,
        }
        publish(f"127.0.0.1:{port}", NOKIA_METHOD, encode.encode_deletes(6, [c], "leaf01"))
        assert col.wait_for(lambda c: c.received == 2, 30)
        assert col.values() == {}
        assert col.messages[-1] == {"target": "leaf01", "delete": True, "ts": 6, "sync": False,
                                    "path": "swtel:/interfaces/interface[name=swp3]/pfc"}
    finally:
        col.stop(0)


def test_tls_and_mtls(pki):
    port = free_port()
    col = Collector(f"127.0.0.1:{port}", tls_cert=str(pki.server_cert), tls_key=str(pki.server_key),
                    tls_client_ca=str(pki.ca)).start()
    addr = f"127.0.0.1:{port}"
    msgs, expected = _messages()
    try:
        ca = pki.ca.read_bytes()
        good = grpc.ssl_channel_credentials(ca, pki.client_key.read_bytes(), pki.client_cert.read_bytes())
        assert publish(addr, NOKIA_METHOD, msgs, credentials=good, server_name="collector.test")
        assert col.values("leaf01") == expected
        # no client certificate: the mTLS collector refuses the handshake
        with pytest.raises(grpc.RpcError) as err:
            publish(addr, NOKIA_METHOD, msgs, credentials=grpc.ssl_channel_credentials(ca), timeout=3)
        assert err.value.code() == grpc.StatusCode.UNAVAILABLE
        # the client trusts another CA: it refuses the collector
        wrong = grpc.ssl_channel_credentials(pki.wrong_ca.read_bytes(), pki.client_key.read_bytes(),
                                             pki.client_cert.read_bytes())
        with pytest.raises(grpc.RpcError):
            publish(addr, NOKIA_METHOD, msgs, credentials=wrong, timeout=3)
        assert len(col.streams) == 1
    finally:
        col.stop(0)


@pytest.mark.parametrize("names", ["paths", "both"])
def test_prometheus_text_under_the_path_names(names):
    port, mport = free_port(), free_port()
    col = Collector(f"127.0.0.1:{port}", insecure=True, prometheus=f"127.0.0.1:{mport}",
                    prometheus_names=names).start()
    try:
        msgs, _ = _messages()
        c = Container(SWTEL_ORIGIN, "/interfaces/interface[name=swp1]")
        msgs += encode.encode_states([StateUpdate(1, c, "oper-status", "UP")], "leaf01")
        publish(f"127.0.0.1:{port}", NOKIA_METHOD, msgs)
        assert col.wait_for(lambda c: c.received == len(msgs), 30)
        body = urllib.request.urlopen(f"http://127.0.0.1:{mport}/metrics", timeout=5).read().decode()
        assert "# TYPE interfaces_interface_state_counters_in_octets untyped" in body
        assert 'interfaces_interface_state_counters_in_octets{name="swp1",target="leaf01"} 10\n' in body
        assert 'interfaces_interface_state_counters_in_errors{name="swp2",target="leaf01"} 100\n' in body
        assert 'swtel_interfaces_interface_oper_status{name="swp1",target="leaf01",value="UP"} 1' in body
        cumulus = 'nvswitch_interface_ether_stats_octets{interface="swp1",target="leaf01"} 10\n'
        assert (cumulus in body) == (names == "both"), body
    finally:
        col.stop(0)


def test_prometheus_text_by_default_under_the_names_remote_write_sends():
    """The default exposition: each number once, under remote write's and OTLP's name; text,
    booleans and the agent's unnamed states (health, events) are not metrics there either."""
    latest = [("leaf01", "/interfaces/interface[name=swp1]/state/counters/in-octets", 10),
              ("leaf01", "swtel:/interfaces/interface[name=swp1]/state/oper-status", "UP"),
              ("leaf01", "swtel:/interfaces/interface[name=swp1]/netdev/state/counters/in-octets", 12),
              ("leaf01", "swtel:/agent/sources/source[name=netdev]/state/errors", 3),
              ("leaf01", "swtel:/insights/events/event[id=4]/state/peak", 2.5),
              ("leaf01", "swtel:/insights/severities/severity[name=critical]/state/open-events", 1),
              ("leaf01", "swtel:/interfaces/interface[name=swp1]/phy/fec/prediction/state/predicted-flr", 1e-12),
              ("leaf01", "swtel:/interfaces/interface[name=swp1]/state/in-flag", True),
              # the OpenConfig key leaf beside a bin's count: a state repeating the key, not a metric
              ("leaf01", "/interfaces/interface[name=swp1]/phy/histograms/state/rs-num-corr-err[upper-boundary=3]/"
                         "upper-boundary", 3)]
    lines = [line for line in prometheus.render(latest).splitlines() if not line.startswith("#")]
    assert sorted(lines) == sorted([
        'nvswitch_interface_ether_stats_octets{interface="swp1",target="leaf01"} 10',
        'swtel_interfaces_interface_netdev_state_counters_in_octets{interface="swp1",target="leaf01"} 12',
        'swtel_insights_open_events{severity="critical",target="leaf01"} 1',
        'nvswitch_interface_phy_stats_predicted_flr{interface="swp1",target="leaf01"} 1e-12',
    ]), lines
    with pytest.raises(ValueError, match="names: one of cumulus, paths, both"):
        prometheus.render(latest, "otel")


def test_every_unnamed_state_of_the_path_list_is_told_from_the_counters():
    """A collector tells the agent's unnamed states from counters by their paths
    (state_gauges._unnamed_state: the roots UNNAMED_STATE_ROOTS, a leaf in a `state`
    container, a list's key leaf): every state row of docs/paths.md without a named shape must
    meet the rule, and no counter row without one may (it would be lost)."""
    from agent.exporters import otlp_names
    from agent.exporters.state_gauges import _unnamed_state

    rows = []
    for line in (REPO / "docs" / "paths.md").read_text().splitlines():
        cells = [c.strip().strip("`") for c in line.strip().strip("|").split("|")]
        path = next((c for c in cells if c.startswith(("/", "swtel:/"))), None)
        if line.startswith("|") and path and cells[-1].startswith(("state", "counter", "gauge")):
            concrete = re.sub(r"=[A-Z]\]", "=1]", path)
            text = concrete.split(":", 1)[1] if concrete.startswith("swtel:") else concrete
            rows.append((cells[-1], text, otlp_names.for_path(concrete)[2]))
    states = [t for kind, t, rank in rows if kind == "state" and rank == 0]
    counters = [t for kind, t, rank in rows if kind != "state" and rank == 0]
    assert len(states) >= 8 and len(counters) > 20, (len(states), len(counters))
    assert [t for t in states if not _unnamed_state(t)] == []
    assert [t for t in counters if _unnamed_state(t)] == []  # an unnamed counter there would be lost


def test_metric_names_and_labels():
    name, labels = prometheus.metric(
        "t", "/qos/interfaces/interface[interface-id=swp1]/output/queues/queue[name=3]/state/dropped-pkts")
    assert name == "qos_interfaces_interface_output_queues_queue_state_dropped_pkts"
    assert labels == {"target": "t", "interface_id": "swp1", "name": "3"}
    # the same key twice: the second is qualified by its element
    name, labels = prometheus.metric("t", "swtel:/a[name=x]/b[name=y]/c-d")
    assert (name, labels) == ("swtel_a_b_c_d", {"target": "t", "name": "x", "b_name": "y"})


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}


def _collect(tmp_path, *extra):
    port = free_port()
    out = tmp_path / "lines.jsonl"
    proc = subprocess.Popen(
        [sys.executable, "-m", "agent", "collect", "--listen", f"127.0.0.1:{port}",
         "--output", str(out), *extra],
        cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env=_env(),
    )
    return proc, port, out


def _wait_listening(port: int, proc, timeout: float = 15.0) -> None:
    import socket

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.stderr.read()
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.1)
    raise AssertionError("collector did not start listening")


def test_cli_process_tls_sigterm(tmp_path, pki):
    proc, port, out = _collect(tmp_path, "--tls-cert", str(pki.server_cert), "--tls-key", str(pki.server_key))
    try:
        _wait_listening(port, proc)
        msgs, expected = _messages()
        creds = grpc.ssl_channel_credentials(pki.ca.read_bytes())
        assert publish(f"127.0.0.1:{port}", SONIC_METHOD, msgs, credentials=creds,
                       metadata=[("system-name", "leaf01")]) == []
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(10) == 0
        lines = [json.loads(s) for s in out.read_text().splitlines()]
        assert {ln["path"]: ln["value"] for ln in lines if "path" in ln} == expected
        assert lines[-1] == {"target": "leaf01", "sync": True}
        err = proc.stderr.read()
        assert "collector listening" in err and "stream opened" in err
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_cli_process_duration_and_stdout(tmp_path):
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "agent", "collect", "--listen", f"127.0.0.1:{port}", "--insecure",
         "--duration", "3"],
        cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env=_env(),
    )
    try:
        _wait_listening(port, proc)
        msgs, expected = _messages()
        publish(f"127.0.0.1:{port}", NOKIA_METHOD, msgs)
        stdout, stderr = proc.communicate(timeout=15)
        assert proc.returncode == 0, stderr
        lines = [json.loads(s) for s in stdout.splitlines()]  # stdout holds only JSON lines
        assert {ln["path"]: ln["value"] for ln in lines if "path" in ln} == expected
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_cli_refuses_missing_tls(tmp_path):
    r = subprocess.run([sys.executable, "-m", "agent", "collect", "--listen", "127.0.0.1:0"],
                       cwd=REPO, capture_output=True, text=True, timeout=30, env=_env())
    assert r.returncode == 2 and "--tls-cert" in r.stderr


# ---------------------------------------------------------------- command-line mistakes (issue 14)


def _collect_cli(*args, timeout=30):
    return subprocess.run([sys.executable, "-m", "agent", "collect", *args], cwd=REPO, capture_output=True,
                          text=True, timeout=timeout, env=_env())


@pytest.mark.parametrize("listen", ["127.0.0.1", ":99999", ":-1", "127.0.0.1:99999", "127.0.0.1:-1",
                                    "not a host:5000", ""])
def test_cli_listen_follows_the_config_rule(listen):
    r = _collect_cli("--listen", listen, "--insecure", "--duration", "1")
    assert r.returncode == 2, r.stderr
    assert r.stderr.startswith("swtel collect: --listen: expected host:port") and "Traceback" not in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1, r.stderr


def test_cli_refuses_a_taken_port_and_bad_options(tmp_path):
    first = Collector(f"127.0.0.1:{free_port()}", insecure=True).start()
    try:
        r = _collect_cli("--listen", f"127.0.0.1:{first.port}", "--insecure", "--duration", "1")
        assert r.returncode == 2 and f"--listen: address in use: 127.0.0.1:{first.port}" in r.stderr, r.stderr
        # In process too: gRPC's SO_REUSEPORT is off, so a second collector cannot share the port.
        with pytest.raises(OSError):
            Collector(f"127.0.0.1:{first.port}", insecure=True)
    finally:
        first.stop()
    for args, fragment in [
        (["--prometheus", "foo"], "--prometheus: expected host:port, got 'foo'"),
        (["-o", "/nonexistent/x.jsonl"], "--output: cannot open '/nonexistent/x.jsonl': No such file or directory"),
    ]:
        r = _collect_cli("--listen", f"127.0.0.1:{free_port()}", "--insecure", "--duration", "1", *args)
        assert r.returncode == 2 and fragment in r.stderr and "Traceback" not in r.stderr, r.stderr


def test_cli_logs_in_the_agents_format(tmp_path):
    r = _collect_cli("--listen", f"127.0.0.1:{free_port()}", "--insecure", "--duration", "0.5")
    assert r.returncode == 0, r.stderr
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert lines and all("component=collect" in ln and "level=" in ln for ln in lines), lines


def test_cli_incidents_from_what_agents_send(tmp_path):
    """`swtel collect --incidents`: the field fabric's LLDP neighbours and two events, as agents
    publish them (gNMI states of each target), form the incident on stderr; the JSON lines
    still go to --output."""
    from agent.sources.lldp import neighbor_states, parse_neighbors
    from agent.tools.topology import Topology

    proc, port, out = _collect(tmp_path, "--insecure", "--incidents")
    try:
        _wait_listening(port, proc)
        topo = Topology.field()
        events = {"spine-1": ("symbol-ber", "swp11s1", TS), "host-1": ("roce-retrans", "mlx5_0", TS + 10**8)}
        for node in topo.nodes:
            lldp = neighbor_states(parse_neighbors(topo.lldp_document(node.name)))
            updates = [StateUpdate(TS, c, leaf, v) for (c, leaf), v in lldp.items()]
            if node.name in events:
                kind, iface, start = events[node.name]
                c = Container(SWTEL_ORIGIN, "/insights/events/event[id=1]/state")
                updates += [StateUpdate(start, c, leaf, v) for leaf, v in (
                    ("type", kind), ("interfaces", iface), ("start-ns", start), ("end-ns", start), ("status", "open"))]
            publish(f"127.0.0.1:{port}", NOKIA_METHOD, encode.encode_states(updates, node.name))
        lines: list[str] = []
        reader = threading.Thread(target=lambda: lines.extend(iter(proc.stderr.readline, "")), daemon=True)
        reader.start()
        wait_until(lambda: any(" INCIDENT " in line for line in lines), 60, "the incident on stderr",
                   interval=0.1, detail=lambda: "".join(lines))
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0
        reader.join(30)
        line = next(x for x in lines if " INCIDENT " in x)
        assert "INCIDENT host-1 mlx5_0: RoCE retransmissions; suspect spine-1 swp11s1 (symbol errors from " in line
        assert line.rstrip().endswith("on host-1's paths via leaf-3 swp61–64"), line
        assert '"swp11s1"' in out.read_text()  # the lines as ever
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
