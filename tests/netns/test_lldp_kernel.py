"""sources.lldp against Debian's real lldpd (1.0.16): one lldpd per network namespace, each with
its own control socket (``lldpd -u SOCK``), joined by a veth pair. The leaf side is configured as
Cumulus configures it (port id = ifname), the host side is plain lldpd (port id = MAC). The
agent's engine reads each lldpd through ``sources.lldp.socket``; every wait is for the data."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from agent import config
from agent.engine import Engine
from agent.sources.lldp import neighbor_container
from agent.store import Store
from tests.helpers import wait_until
from tests.namespaces import Pair, is_root, sh, veth_pair

pytestmark = [pytest.mark.root, pytest.mark.skipif(not is_root(), reason="needs root (network namespaces)"),
              pytest.mark.skipif(shutil.which("lldpd") is None, reason="lldpd not installed (.ci/setup-test)")]


@contextmanager
def lldpd(ns: str, ifname: str, sock: Path, hostname: str, switch: bool) -> Iterator[subprocess.Popen]:
    """lldpd in ``ns`` on ``ifname`` only, in the foreground (``-d``: its pid is ours to stop),
    reading no system config (``-O`` an empty file), sending every second."""
    empty = sock.with_suffix(".conf")
    empty.write_text("")
    proc = subprocess.Popen(["ip", "netns", "exec", ns, "lldpd", "-d", "-u", str(sock), "-I", ifname,
                             "-O", str(empty), "-S", f"{hostname} test system"],
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_until(lambda: lldpcli(sock, "show", "configuration", check=False).returncode == 0, 30,
                   f"lldpd's socket {sock}")
        lldpcli(sock, "configure", "system", "hostname", hostname)
        if switch:
            lldpcli(sock, "configure", "lldp", "portidsubtype", "ifname")
        lldpcli(sock, "configure", "lldp", "tx-interval", "1")
        yield proc
    finally:
        stop(proc)


def stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


@pytest.fixture
def sockdir() -> Iterator[Path]:
    """Where the lldpd sockets go: lldpcli run as root drops to lldpd's user (_lldpd), which must
    reach the socket, so not below pytest's root-only tmp_path."""
    path = Path(tempfile.mkdtemp(prefix="swtel-lldp-"))
    os.chmod(path, 0o755)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def lldpcli(sock: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(["lldpcli", "-u", str(sock), *args], capture_output=True, text=True, check=check,
                          timeout=30)


@contextmanager
def engine_on(sock: Path, refresh: str) -> Iterator[tuple[Engine, Store]]:
    cfg = config.parse(json.dumps({"interval": "50ms", "sources": {
        "netdev": {"enabled": False}, "ethtool": {"enabled": False}, "system": {"enabled": False},
        "lldp": {"enabled": True, "interval": "50ms", "socket": str(sock), "refresh": refresh}}}))
    store = Store()
    engine = Engine(cfg, [], store=store)
    engine.start()
    try:
        yield engine, store
    finally:
        engine.stop()


def neighbour(store: Store, pair: Pair, side: str) -> dict[str, object]:
    """The leaves of the (one) neighbour the store holds on ``side``'s interface."""
    ifname = pair.a_if if side == "a" else pair.b_if
    prefix = neighbor_container(ifname, "N").path.split("/neighbor[", 1)[0]
    return {u.leaf: u.value for u in store.states() if u.container.path.startswith(prefix)
            and u.container.path.endswith("/state") and "/mgmt-address" not in u.container.path}


def test_real_lldpd_neighbours_both_ways_then_watch_and_delete(sockdir):
    with veth_pair() as pair:
        host_mac = sh("cat", f"/sys/class/net/{pair.b_if}/address", ns=pair.b).stdout.strip()
        leaf_sock, host_sock = sockdir / "leaf.sock", sockdir / "host.sock"
        with lldpd(pair.a, pair.a_if, leaf_sock, "leaf-3", switch=True), \
                lldpd(pair.b, pair.b_if, host_sock, "host-1", switch=False) as host_proc:
            # refresh 1h: after the first run, only lldpcli's watch makes the source read again
            with engine_on(leaf_sock, "1h") as (leaf_engine, leaf_store), \
                    engine_on(host_sock, "2s") as (_host_engine, host_store):
                seen = wait_until(lambda: (n := neighbour(leaf_store, pair, "a")).get("system-name") == "host-1"
                                  and n, 60, "the leaf's lldpd finds host-1")
                # plain lldpd on a host: the MAC as port id, the ifname as description
                assert (seen["port-id"], seen["port-id-type"], seen["port-description"]) == (
                    host_mac, "MAC_ADDRESS", pair.b_if)
                assert seen["chassis-id-type"] == "MAC_ADDRESS" and seen["system-description"] == "host-1 test system"
                assert isinstance(seen["ttl"], int) and seen["ttl"] > 0
                back = wait_until(lambda: (n := neighbour(host_store, pair, "b")).get("system-name") == "leaf-3"
                                  and n, 60, "the host's lldpd finds leaf-3")
                # the Cumulus way (portidsubtype ifname): the switch's ifname as port id
                assert (back["port-id"], back["port-id-type"]) == (pair.a_if, "INTERFACE_NAME")
                mgmt = [u for u in host_store.states() if u.leaf == "address" and "/mgmt-address" in u.container.path]
                assert pair.a_ip in {u.value for u in mgmt}

                runs = leaf_engine.status()["sources"]["lldp"]["lldpcli_runs"]
                lldpcli(host_sock, "configure", "system", "hostname", "host-2")
                wait_until(lambda: neighbour(leaf_store, pair, "a").get("system-name") == "host-2", 60,
                           "the rename, through lldpcli watch")
                status = leaf_engine.status()["sources"]["lldp"]
                assert status["watch_events"] >= 1 and status["lldpcli_runs"] > runs

                stop(host_proc)  # lldpd's shutdown LLDPDU (TTL 0): the neighbour is gone at once
                wait_until(lambda: not neighbour(leaf_store, pair, "a"), 60, "host-1's neighbour deleted")
                assert leaf_engine.status()["sources"]["lldp"]["note"] == "lldp ok: 0 neighbours"


def test_lldpd_stopped_is_absent_not_an_error(sockdir):
    with veth_pair() as pair:
        sock = sockdir / "leaf.sock"
        with lldpd(pair.a, pair.a_if, sock, "leaf-3", switch=True) as proc:
            stop(proc)
        with engine_on(sock, "1s") as (engine, _store):
            status = wait_until(lambda: (s := engine.status()["sources"]["lldp"])["lldp_state"] == "absent" and s,
                                30, "lldp absent in status")
            assert status["note"].startswith("lldp absent: lldpd not running") and status["errors"] == 0
            assert status["fault"] is None
