"""gRPC tunnel interop with the openconfig reference implementation (Go), built once per session by
``../shared/interop/grpctunnel/build.sh`` into a cache directory (skipped, saying why, where
``../shared`` is absent or the build fails):

* the agent (in a namespace with a veth pair) registers with the Go ``tunnel-server``; pygnmi
  reaches it through the Go ``tunnel-client`` under socat (one tunnel session per TCP connection):
  Capabilities, Get, a STREAM subscription with exact counts, in plaintext and TLS;
* the Go ``tunnel-target`` registers with swtel's ``tunnel-server``; pygnmi reaches the gNMI server
  behind it (swtel's dial-in server, in-process) through swtel's listener for that target.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest
from pygnmi.client import gNMIclient

from agent.config import HostPort
from agent.exporters.server import GnmiServer, ServerConfig
from agent.store import Store
from tests.gnmi_helpers import free_port, make_pki
from tests.interop_build import CACHE, build_reference
from tests.namespaces import Forward
from tests.netns.test_tunnel_e2e import (
    RETRY_S,
    TARGET,
    TunnelServerProcess,
    agent_config,
    check_through_tunnel,
    leaf_updates,
    tunnel_status,
    wait,
    wait_carrier,
)
from tests.unit.test_server import Feed

ROOT = Path(__file__).resolve().parents[2]
SHARED = ROOT.parent / "shared" / "interop" / "grpctunnel"

pytestmark = [pytest.mark.slow,
              pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")]


@pytest.fixture(scope="session")
def go_bin() -> Path:
    """The Go reference programs, built once (rebuilt when ../shared/interop/grpctunnel changes)."""
    return build_reference(SHARED, CACHE, ("tunnel-server", "tunnel-client", "tunnel-target"),
                           "the Go reference implementation")


class Procs:
    """Processes a test starts; all ended at teardown."""

    def __init__(self) -> None:
        self.procs: list[subprocess.Popen] = []

    def start(self, cmd: list[str], log: Path) -> subprocess.Popen:
        fh = open(log, "w")  # noqa: SIM115 - closed with the process
        proc = subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT, start_new_session=True)
        fh.close()
        self.procs.append(proc)
        return proc

    def close(self) -> None:
        for proc in reversed(self.procs):
            if proc.poll() is None:
                os.killpg(proc.pid, 15)  # socat and the tunnel-clients it forked
                try:
                    proc.wait(5)
                except subprocess.TimeoutExpired:
                    os.killpg(proc.pid, 9)
                    proc.wait()


@pytest.fixture
def procs():
    p = Procs()
    yield p
    p.close()


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    return make_pki(tmp_path_factory.mktemp("pki"))


def wait_port(port: int, proc: subprocess.Popen, log: Path, timeout: float = 10) -> None:
    import socket

    def up() -> bool:
        assert proc.poll() is None, f"{proc.args[0]} exited: {log.read_text()}"
        with socket.socket() as s:
            return s.connect_ex(("127.0.0.1", port)) == 0

    wait(up, timeout, f"{proc.args[0]} to listen on {port}")


@pytest.mark.root
@pytest.mark.parametrize("secure", [False, True], ids=["plaintext", "tls"])
def test_agent_registers_with_go_tunnel_server_pygnmi_via_tunnel_client(go_bin, procs, pki, tmp_path, secure):
    from tests.namespaces import AgentProcess, veth_pair

    socat = shutil.which("socat")
    if socat is None:
        pytest.skip("socat is not installed (apt-get install socat)")
    port, gnmi_port = free_port(), free_port()
    server_cmd = [str(go_bin / "tunnel-server"), f"--tunnel_address=127.0.0.1:{port}"]
    client_tls = ""
    if secure:
        server_cmd += [f"--cert_file={pki.server_cert}", f"--key_file={pki.server_key}"]
        client_tls = f" --ca_file={pki.ca}"
        tunnel = (f"{{name: t1, address: 127.0.0.1, port: {port}, retry_interval: {RETRY_S:g}s, "
                  f"tls: {{ca: {pki.ca}}}}}")
    else:
        tunnel = f"{{name: t1, address: 127.0.0.1, port: {port}, retry_interval: {RETRY_S:g}s, insecure: true}}"
    server = procs.start(server_cmd, tmp_path / "tunnel-server.log")
    wait_port(port, server, tmp_path / "tunnel-server.log")
    via = tmp_path / "via.sh"  # socat splits EXEC arguments on ':'
    via.write_text(f"#!/bin/sh\nexec {go_bin / 'tunnel-client'} --tunnel_server_address=127.0.0.1:{port} "
                   f"--dial_target={TARGET} --dial_target_type=GNMI_GNOI{client_tls} 2>>{tmp_path}/client.log\n")
    via.chmod(0o755)
    relay = procs.start([socat, f"TCP-LISTEN:{gnmi_port},bind=127.0.0.1,reuseaddr,fork", f"EXEC:{via}"],
                        tmp_path / "socat.log")
    wait_port(gnmi_port, relay, tmp_path / "socat.log")
    sock = tmp_path / "swtel.sock"
    with veth_pair() as pair:
        wait_carrier(pair)
        forward = Forward(pair.b, port)
        agent = AgentProcess(pair.b, agent_config(pair.b_if, sock, tunnel), tmp_path)
        try:
            agent.wait_ready()
            agent.wait_for(lambda: tunnel_status(sock)["state"] == "registered", what="registration")
            # every connection is a new tunnel-client, whose first look for the target takes 0.5-1.5 s
            check_through_tunnel(pair, gnmi_port, timeout=15)
            status = tunnel_status(sock)
            assert status["sessions_total"] >= 1 and status["tls"] is secure and status["last_error"] is None
        finally:
            assert agent.stop() == 0
            forward.close()


@pytest.mark.parametrize("secure", [False, True], ids=["plaintext", "tls"])
def test_go_tunnel_target_registers_with_swtel_tunnel_server(go_bin, procs, pki, tmp_path, secure):
    feed = Feed(Store())
    gnmi = GnmiServer(ServerConfig(listen=HostPort("127.0.0.1:0"), insecure=True), "leaf01",
                      min_interval_s=0.05)
    gnmi.start(feed.store)
    feed.server = gnmi
    port, target_port = free_port(), free_port()
    creds = ""
    tls_args = None
    if secure:
        tls_args = ["--tls-cert", str(pki.server_cert), "--tls-key", str(pki.server_key)]
        creds = f' credentials: < tls: < ca_file: "{pki.ca}" > >'
    server = TunnelServerProcess(port, {"go-target": target_port}, tls_args)
    cfg = tmp_path / "target.cfg"
    cfg.write_text(f'tunnel_server_default: < tunnel_server_address: "127.0.0.1:{port}"{creds} >\n'
                   f'tunnel_target: < target: "go-target" type: "GNMI_GNOI" dial_address: "127.0.0.1:{gnmi.port}" >\n')
    try:
        target = procs.start([str(go_bin / "tunnel-target"), f"--config_file={cfg}"], tmp_path / "target.log")
        wait(lambda: server.added("go-target") or target.poll() is not None, what="the Go target to register")
        assert target.poll() is None, (tmp_path / "target.log").read_text()
        assert server.added("go-target")["listen"] == f"127.0.0.1:{target_port}"
        leaf = "/interfaces/interface[name=v0]/state/counters/in-octets"
        with gNMIclient(target=("127.0.0.1", target_port), insecure=True, gnmi_timeout=10) as gc:
            assert gc.capabilities()["gnmi_version"] == "0.8.0"
            got = gc.get(path=[leaf], encoding="proto")
            assert got["notification"][0]["update"] == [{"path": "in-octets", "val": feed.value("v0", "in-octets")}]
            sub = gc.subscribe2(subscribe={"mode": "stream", "encoding": "proto", "subscription": [
                {"path": leaf, "mode": "on_change"}]})
            assert sub.get_update(timeout=10)["sync_response"] is True
            for _ in range(3):
                feed.bump({("v0", "in-octets"): 1000})
                (u,) = leaf_updates(sub.get_update(timeout=10)["update"]["update"])  # either shape
                assert u == {"path": "in-octets", "val": feed.value("v0", "in-octets")}
            sub.close()
        opened = [e for e in server.events if e["event"] == "session-opened"]
        assert opened and all(e["target"] == "go-target" for e in opened)
        time.sleep(0.2)  # wallclock: the closed session's goodbye lands before the server stops
    finally:
        server.stop()
        gnmi.stop(1)
