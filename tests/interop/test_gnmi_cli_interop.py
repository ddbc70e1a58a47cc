"""Interop with openconfig's reference gNMI client ``gnmi_cli`` (Go), built once per session by
``../shared/interop/gnmi/build.sh`` into a cache directory (skipped, saying why, where
``../shared/interop`` is absent or the build fails).

gnmi_cli sends no encoding at all (proto3 default JSON) and paths with both ``elem`` and the
deprecated ``element``: against swtel's dial-in server (in-process, fed by the test), in plaintext
and TLS, it gets Capabilities, a Get of a counter equal to the fed value as a JSON number, ONCE and
STREAM subscriptions with exact values, and a clear status for an encoding swtel cannot produce.
"""

from __future__ import annotations

import re
import subprocess
import threading
import time
from pathlib import Path

import pytest

from agent.config import ServerTls
from agent.store import Store
from tests.gnmi_helpers import make_pki
from tests.helpers import wait_until
from tests.interop_build import CACHE, build_reference
from tests.unit.test_server import Feed, _start

ROOT = Path(__file__).resolve().parents[2]
SHARED = ROOT.parent / "shared" / "interop" / "gnmi"

LEAF = "/interfaces/interface[name=v0]/state/counters/in-octets"
GET_PROTO = ('path: { elem: { name: "interfaces" } elem: { name: "interface" key: { key: "name" value: "v0" } } '
             'elem: { name: "state" } elem: { name: "counters" } elem: { name: "in-octets" } }')

pytestmark = [pytest.mark.slow,
              pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")]


@pytest.fixture(scope="session")
def gnmi_cli() -> Path:
    """gnmi_cli, built once (rebuilt when ../shared/interop/gnmi changes). Its own cache
    subdirectory: each build.sh empties its OUT/bin."""
    return build_reference(SHARED, CACHE / "gnmi", ("gnmi_cli",), "openconfig's gnmi_cli") / "gnmi_cli"


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture(params=[False, True], ids=["plaintext", "tls"])
def setup(request, pki):
    """(feed, the gnmi_cli arguments that reach the server) for plaintext and TLS."""
    feed = Feed(Store())
    if request.param:
        srv = _start(feed, tls=ServerTls(cert=str(pki.server_cert), key=str(pki.server_key)))
        args = ["-address", f"127.0.0.1:{srv.port}", "-ca_crt", str(pki.ca)]
    else:
        srv = _start(feed, insecure=True)
        args = ["-insecure", "-address", f"127.0.0.1:{srv.port}"]
    yield feed, args
    srv.stop(1)


def run(cli: Path, args: list[str], *extra: str, ok: bool = True) -> str:
    proc = subprocess.run([str(cli), *args, "-timeout", "10s", *extra], capture_output=True, text=True,
                          timeout=30)
    out = proc.stdout + proc.stderr
    assert (proc.returncode == 0) is ok, f"gnmi_cli {' '.join(extra)} exited {proc.returncode}: {out}"
    return out


def json_vals(text: str) -> list[int]:
    """The counters of protobuf text output, which must be json_val JSON numbers (not strings)."""
    assert "json_ietf_val" not in text and "uint_val" not in text, text
    vals = re.findall(r'json_val:\s+"(.*?)"\n', text)
    assert vals and all(re.fullmatch(r"\d+", v) for v in vals), text  # "123", never "\"123\""
    return [int(v) for v in vals]


def test_capabilities(gnmi_cli, setup):
    _, args = setup
    out = run(gnmi_cli, args, "-capabilities")
    assert set(re.findall(r"supported_encodings:\s+(\w+)", out)) == {"JSON", "JSON_IETF", "PROTO"}
    assert re.search(r'gNMI_version:\s+"0\.8\.0"', out)
    assert re.search(r'name:\s+"openconfig-interfaces"', out)


def test_get_counter(gnmi_cli, setup):
    feed, args = setup
    feed.bump({("v0", "in-octets"): 12345})
    out = run(gnmi_cli, args, "-get", "-proto", GET_PROTO)  # no encoding field: JSON
    assert json_vals(out) == [feed.value("v0", "in-octets")]
    assert re.search(r'target:\s+"leaf01"', out)
    ietf = run(gnmi_cli, args, "-get", "-proto", GET_PROTO + " encoding: JSON_IETF type: STATE")
    assert re.findall(r'json_ietf_val:\s+"(.*?)"\n', ietf) == [f'\\"{feed.value("v0", "in-octets")}\\"']


def test_unsupported_encoding(gnmi_cli, setup):
    _, args = setup
    out = run(gnmi_cli, args, "-get", "-proto", GET_PROTO + " encoding: ASCII", ok=False)
    assert "code = Unimplemented" in out and "encoding ASCII not supported" in out
    out = run(gnmi_cli, args, "-dt", "p", "-proto",
              "subscribe: { prefix: {} subscription: { path: { elem: { name: \"interfaces\" } } } "
              "mode: ONCE encoding: BYTES }", ok=False)
    assert "code = Unimplemented" in out and "encoding BYTES not supported" in out


def test_subscribe_once(gnmi_cli, setup):
    feed, args = setup
    out = run(gnmi_cli, args, "-query", "/interfaces/interface[name=*]/state/counters/out-octets", "-qt", "o",
              "-dt", "p")
    assert json_vals(out) == [feed.value(p, "out-octets") for p in ("v0", "v1", "v2")]
    assert out.rstrip().endswith("sync_response: true")
    grouped = run(gnmi_cli, args, "-query", LEAF, "-qt", "o")  # default display: the decoded tree
    value = feed.value("v0", "in-octets")
    assert re.search(rf'"in-octets": \{{Deprecated TypedValue_JsonVal {value}\}}', grouped), grouped


def test_subscribe_stream(gnmi_cli, setup):
    feed, args = setup
    proc = subprocess.Popen([str(gnmi_cli), *args, "-timeout", "30s", "-query", LEAF, "-qt", "s",
                             "-sd", "10s", "-dt", "p"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(proc.stdout), daemon=True)
    reader.start()
    try:
        deadline = time.monotonic() + 30
        while not any("sync_response: true" in line for line in lines):
            assert proc.poll() is None or lines, "gnmi_cli exited early"
            assert time.monotonic() < deadline, f"no sync_response: {''.join(lines)}"
            time.sleep(0.05)
        expected = [feed.value("v0", "in-octets")]
        for _ in range(3):
            feed.bump({("v0", "in-octets"): 1000})
            expected.append(feed.value("v0", "in-octets"))
            # each change seen before the next: two in one sample would be one update
            wait_until(lambda: json_vals("".join(lines)) == expected, 30, "the update at the client")
        proc.wait(60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    reader.join(5)
    out = "".join(lines)
    assert proc.returncode == 1 and "deadline exceeded" in out.lower()  # how -sd ends a stream
    assert json_vals(out) == expected


@pytest.mark.root
def test_get_equals_the_kernels_count_on_a_veth(gnmi_cli, tmp_path):
    """A real agent polling a veth in its namespace: gnmi_cli's Get of in-pkts moves by exactly
    the N datagrams sent and equals the kernel's rx_packets."""
    from tests.gnmi_helpers import free_port
    from tests.namespaces import AgentProcess, veth_pair

    port = free_port()
    with veth_pair() as pair:
        cfg = ("interval: 100ms\nsources:\n"
               f"  netdev: {{interfaces: [{pair.b_if}]}}\n  ethtool: {{enabled: false}}\n  system: {{enabled: false}}\n"
               f"exporters:\n  server: {{listen: '127.0.0.1:{port}', insecure: true}}\n"
               f"control: {{socket: {tmp_path / 'swtel.sock'}, group: null}}\n")
        agent = AgentProcess(pair.b, cfg, tmp_path)
        path = ('path: { elem: { name: "interfaces" } elem: { name: "interface" key: { key: "name" value: '
                f'"{pair.b_if}" }} }} elem: {{ name: "state" }} elem: {{ name: "counters" }} '
                'elem: { name: "in-pkts" } }')

        def get() -> int:
            proc = subprocess.run(["ip", "netns", "exec", pair.b, str(gnmi_cli), "-insecure", "-address",
                                   f"127.0.0.1:{port}", "-timeout", "10s", "-get", "-proto", path],
                                  capture_output=True, text=True, timeout=30)
            assert proc.returncode == 0, proc.stdout + proc.stderr
            (value,) = json_vals(proc.stdout + proc.stderr)
            return value

        def kernel() -> int:
            out = subprocess.run(["ip", "netns", "exec", pair.b, "cat",
                                  f"/sys/class/net/{pair.b_if}/statistics/rx_packets"],
                                 capture_output=True, text=True, check=True)
            return int(out.stdout)

        try:
            agent.wait_ready()
            (before,) = wait_until(lambda: (v := get()) == kernel() and (v,), 30, "Get to equal the kernel's count")
            pair.send_udp(37, 200)
            deadline = time.monotonic() + 30
            after = get()
            while after != kernel() and time.monotonic() < deadline:
                time.sleep(0.2)
                after = get()
            assert after == kernel() and after - before == 37
        finally:
            assert agent.stop() == 0

