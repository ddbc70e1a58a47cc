"""gRPC tunnel end to end: a real agent in a namespace with a veth pair registers through
``exporters.tunnel`` with ``swtel tunnel-server`` (a subprocess), and pygnmi reaches the agent's
gNMI service through the server's listener for that target: Capabilities, Get of a counter equal to
the kernel's, a STREAM subscription that sees exactly the N packets sent; mTLS with a test CA and
plaintext with ``insecure: true``; the tunnel server restarted mid-stream, the agent re-registered
within its retry interval and the subscription working again; the tunnel's state in ``status``.

The agent runs in the veth's namespace (127.0.0.1 there is its own); the tunnel server and pygnmi
run here, on 127.0.0.1, and :class:`Forward` carries the agent's connections out of its namespace.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from pygnmi.client import gNMIclient

from agent.control.client import request
from tests.gnmi_helpers import free_port, make_pki

ROOT = Path(__file__).resolve().parents[2]
TARGET = "leaf-e2e"
RETRY_S = 2.0
PACKETS = 25

pytestmark = [pytest.mark.root, pytest.mark.slow,
              pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")]


# ---------------------------------------------------------------- helpers (also used by test_tunnel_interop)


class TunnelServerProcess:
    """``swtel tunnel-server`` as a subprocess; its JSON-lines events collected in :attr:`events`."""

    def __init__(self, port: int, target_ports: dict[str, int], tls_args: list[str] | None = None):
        cmd = [sys.executable, "-m", "agent", "tunnel-server", "--listen", f"127.0.0.1:{port}"]
        cmd += tls_args if tls_args else ["--insecure"]
        for name, p in target_ports.items():
            cmd += ["--target-port", f"{name}={p}"]
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        self.events: list[dict] = []
        self.proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True)
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        wait(lambda: any(e["event"] == "listening" for e in self.events) or self.proc.poll() is not None,
             what="the tunnel server to listen")
        assert self.proc.poll() is None, f"tunnel server failed: {self.proc.stderr.read()}"

    def _read(self) -> None:
        for line in self.proc.stdout:
            self.events.append(json.loads(line))

    def added(self, target: str) -> dict | None:
        return next((e for e in self.events if e["event"] == "target-added" and e["target"] == target), None)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._reader.join(2)
        self.proc.stdout.close()
        self.proc.stderr.close()


def wait(predicate, timeout: float = 15.0, what: str = "condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        result = predicate()
        if result:
            return result
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def agent_config(ifname: str, sock: Path, tunnel: str) -> str:
    return (
        f"target: {TARGET}\ninterval: 50ms\n"
        f"sources:\n  netdev: {{interfaces: [{ifname}]}}\n  ethtool: {{enabled: false}}\n"
        "  system: {enabled: false}\n"
        f"exporters:\n  tunnel:\n    - {tunnel}\n"
        f"control: {{socket: {sock}, group: null}}\n"
    )


def kernel_rx(pair) -> int:
    from tests.namespaces import sh

    return int(sh("cat", f"/sys/class/net/{pair.b_if}/statistics/rx_packets", ns=pair.b).stdout)


def wait_carrier(pair) -> None:
    from tests.namespaces import sh

    wait(lambda: sh("cat", f"/sys/class/net/{pair.b_if}/operstate", ns=pair.b).stdout.strip() == "up",
         timeout=5, what="the veth to come up")


def leaf_updates(updates: list[dict]) -> list[dict]:
    """pygnmi's updates with each path cut to its leaf: a STREAM's per-tick Notification
    (the default) has absolute paths under an origin-only prefix, a per-container one
    paths relative to the container; the values are the same."""
    return [{**u, "path": u["path"].rsplit("/", 1)[-1]} for u in updates]


def check_through_tunnel(pair, port: int, timeout: float = 10) -> None:
    """Capabilities, Get of in-pkts (the kernel's count) and a STREAM that sees exactly PACKETS packets."""
    path = f"/interfaces/interface[name={pair.b_if}]/state/counters/in-pkts"
    with gNMIclient(target=("127.0.0.1", port), insecure=True, gnmi_timeout=timeout) as gc:
        caps = gc.capabilities()
        assert caps["gnmi_version"] == "0.8.0" and {"swtel", "openconfig-interfaces"} <= {
            m["name"] for m in caps["supported_models"]}
        got = gc.get(path=[path], encoding="proto")
        before = kernel_rx(pair)
        assert got["notification"][0]["update"] == [{"path": "in-pkts", "val": before}]
        sub = gc.subscribe2(subscribe={"mode": "stream", "encoding": "proto", "subscription": [
            {"path": path, "mode": "on_change"}]})
        first = sub.get_update(timeout=10)
        assert first["sync_response"] is True
        assert leaf_updates(first["update"]["update"]) == [{"path": "in-pkts", "val": before}]
        pair.send_udp(PACKETS, 200)
        value = before
        while value < before + PACKETS:
            update = sub.get_update(timeout=10)["update"]
            (u,) = leaf_updates(update["update"])
            assert u["path"] == "in-pkts" and u["val"] > value
            value = u["val"]
        assert value == before + PACKETS == kernel_rx(pair)  # exactly the datagrams sent
        sub.close()


def tunnel_status(sock: Path) -> dict:
    return request(str(sock), "status")["exporters"]["tunnel:t1"]


# ---------------------------------------------------------------- the tests


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.mark.parametrize("secure", [False, True], ids=["plaintext", "mtls"])
def test_agent_through_swtel_tunnel_server(tmp_path, pki, secure):
    from tests.namespaces import AgentProcess, Forward, veth_pair

    port, target_port = free_port(), free_port()
    if secure:
        tls_args = ["--tls-cert", str(pki.server_cert), "--tls-key", str(pki.server_key),
                    "--tls-client-ca", str(pki.ca)]
        tunnel = (f"{{name: t1, address: 127.0.0.1, port: {port}, retry_interval: {RETRY_S:g}s, "
                  f"tls: {{ca: {pki.ca}, cert: {pki.client_cert}, key: {pki.client_key}, "
                  "server_name: collector.test}}")
    else:
        tls_args = None
        tunnel = f"{{name: t1, address: 127.0.0.1, port: {port}, retry_interval: {RETRY_S:g}s, insecure: true}}"
    sock = tmp_path / "swtel.sock"
    with veth_pair() as pair:
        wait_carrier(pair)
        server = TunnelServerProcess(port, {TARGET: target_port}, tls_args)
        forward = Forward(pair.b, port)
        agent = AgentProcess(pair.b, agent_config(pair.b_if, sock, tunnel), tmp_path)
        try:
            agent.wait_ready()
            agent.wait_for(lambda: server.added(TARGET), what="the agent's registration")
            assert server.added(TARGET)["type"] == "GNMI_GNOI"
            assert server.added(TARGET)["listen"] == f"127.0.0.1:{target_port}"
            check_through_tunnel(pair, target_port)
            status = tunnel_status(sock)
            assert (status["kind"], status["state"], status["tls"], status["target"]) == (
                "tunnel", "registered", secure, TARGET)
            assert status["sessions_total"] >= 1 and status["last_error"] is None
            if secure:
                return
            # Mid-stream: a subscription is open when the tunnel server goes away.
            gc = gNMIclient(target=("127.0.0.1", target_port), insecure=True, gnmi_timeout=10).connect()
            sub = gc.subscribe2(subscribe={"mode": "stream", "encoding": "proto", "subscription": [
                {"path": f"/interfaces/interface[name={pair.b_if}]/state/counters/in-pkts",
                 "mode": "on_change"}]})
            assert sub.get_update(timeout=10)["sync_response"] is True
            assert tunnel_status(sock)["sessions"] == 1
            server.stop()
            agent.wait_for(lambda: tunnel_status(sock)["state"] != "registered", what="the agent to notice")
            with pytest.raises(Exception):  # noqa: B017 - the stream is gone, whatever pygnmi makes of it
                sub.get_update(timeout=1)
            gc.close()
            status = tunnel_status(sock)
            assert status["last_error"] and status["sessions"] == 0
            # the outage lasts a retry interval at least, so that the backoff reaches its cap (that
            # the cap holds, whatever the outage, is tests/unit/test_tunnel.py's: delays recorded)
            time.sleep(RETRY_S)  # wallclock: the outage's length is the scenario
            server = TunnelServerProcess(port, {TARGET: target_port})
            restarted = time.monotonic()  # listening from here on
            agent.wait_for(lambda: server.added(TARGET), timeout=60, what="re-registration")
            print(f"re-registered {time.monotonic() - restarted:.2f}s after the tunnel server's restart "
                  f"(retry_interval {RETRY_S:g}s)")  # the figure, not asserted
            # the server reports the target before the agent has read its acceptance
            status = agent.wait_for(lambda: (st := tunnel_status(sock))["state"] == "registered" and st,
                                    timeout=30, what="the agent to see its registration accepted")
            assert status["reconnects"] == 1
            check_through_tunnel(pair, target_port)  # same listener: the collector's config is unchanged
        finally:
            assert agent.stop() == 0
            forward.close()
            server.stop()
