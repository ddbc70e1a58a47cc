"""gNMI dial-in server against pygnmi's gNMIclient over real gRPC (plaintext, TLS, mTLS).

The Store holds synthetic CounterTables; the tests play the engine's part by
writing the Store and calling on_batch/on_state/on_delete, then check what a
real client receives. Both backends: the PROTO path uses the active encoder.
"""

from __future__ import annotations

import json
import time
from array import array
from pathlib import Path

import grpc
import pytest
from pygnmi.client import gNMIclient, gNMIException
from pygnmi.spec.v080 import gnmi_pb2, gnmi_pb2_grpc

from agent.config import HostPort, ServerTls
from agent.counters import (
    HIDDEN,
    OPENCONFIG,
    SWTEL_ORIGIN,
    Container,
    CounterSpec,
    CounterTable,
    StateUpdate,
)
from agent.exporters.server import GnmiServer, ServerConfig
from agent.gnmi import paths
from agent.gnmi.get import MAX_PATHS, PathSet, request_pattern
from agent.gnmi.subscribe import Subscriber
from agent.store import Store
from tests.gnmi_helpers import PORT_LEAVES, make_batch, make_pki, make_table, port_container

TARGET = "leaf01"
PORTS = ["v0", "v1", "v2"]
RDMA = Container(SWTEL_ORIGIN, "/rdma/device[name=mlx5_0]/port[id=1]/counters")
MIN_INTERVAL = 0.05

# pygnmi's subscriber thread re-raises CANCELLED when its channel closes under a live
# STREAM (the client's doing, after the test's checks): not a server error.
pytestmark = pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")


def oper(port: str, value: str, ts: int) -> StateUpdate:
    return StateUpdate(ts, Container(OPENCONFIG, f"/interfaces/interface[name={port}]/state"),
                       "oper-status", value, "netdev")


class Feed:
    """Plays the engine: keeps the Store current and tells the server what changed."""

    def __init__(self, store: Store):
        self.store = store
        self.server: GnmiServer | None = None
        self.table = make_table(PORTS)
        self.values = array("Q", [1000 * (i + 1) for i in range(len(self.table))])
        self.rdma = CounterTable("rdma", [CounterSpec(RDMA, "roce-adp-retrans"),
                                          CounterSpec(RDMA, "out-of-sequence"),
                                          CounterSpec(RDMA, "filtered-out", kind=HIDDEN)])
        self.rdma_values = array("Q", [7, 0, 99])
        self.ts = time.time_ns()
        store.set_source("netdev", self.table, array("Q", self.values), self.ts)
        store.set_source("rdma", self.rdma, array("Q", self.rdma_values), self.ts)
        store.set_states([oper(p, "UP", self.ts) for p in PORTS])

    def index(self, port: str, leaf: str) -> int:
        return PORTS.index(port) * len(PORT_LEAVES) + PORT_LEAVES.index(leaf)

    def bump(self, changes: dict[tuple[str, str], int]) -> int:
        """Add to counters, publish like a tick; returns the tick's timestamp."""
        self.ts = time.time_ns()
        indices = sorted(self.index(p, leaf) for p, leaf in changes)
        for (p, leaf), add in changes.items():
            self.values[self.index(p, leaf)] += add
        self.store.set_source("netdev", self.table, array("Q", self.values), self.ts)
        if self.server:
            self.server.on_batch(make_batch(self.table, list(self.values), self.ts, indices))
        return self.ts

    def set_oper(self, port: str, value: str) -> int:
        self.ts = time.time_ns()
        update = [oper(port, value, self.ts)]
        self.store.set_states(update)
        if self.server:
            self.server.on_state(update)
        return self.ts

    def value(self, port: str, leaf: str) -> int:
        return self.values[self.index(port, leaf)]


@pytest.fixture
def feed() -> Feed:
    return Feed(Store())


def _start(feed: Feed, **cfg_kw) -> GnmiServer:
    # These tests read each Notification's prefix; per-tick packing: tests/unit/test_packing.py.
    cfg_kw.setdefault("notifications", "per-container")
    cfg = ServerConfig(listen=HostPort("127.0.0.1:0"), **cfg_kw)
    server = GnmiServer(cfg, TARGET, min_interval_s=MIN_INTERVAL)
    server.start(feed.store)
    feed.server = server
    return server


@pytest.fixture
def server(feed):
    srv = _start(feed, insecure=True)
    yield srv
    srv.stop(1)


def client(server: GnmiServer, **kw) -> gNMIclient:
    kw.setdefault("insecure", True)
    kw.setdefault("gnmi_timeout", 5)
    return gNMIclient(target=("127.0.0.1", server.port), **kw)


def updates_by_leaf(notification: dict) -> dict[str, object]:
    return {u["path"]: u["val"] for u in notification.get("update", [])}


# ---------------------------------------------------------------- Capabilities and Get


def test_capabilities(server):
    with client(server) as gc:
        caps = gc.capabilities()
    models = {m["name"] for m in caps["supported_models"]}
    assert {"openconfig-interfaces", "openconfig-qos", "openconfig-if-ethernet", "swtel"} <= models
    assert sorted(caps["supported_encodings"]) == ["json", "json_ietf", "proto"]
    assert caps["gnmi_version"] == "0.8.0"


def test_get_interface_counters_proto_and_json_ietf(server, feed):
    with client(server) as gc:
        proto = gc.get(path=["/interfaces/interface[name=v0]/state/counters"], encoding="proto")
        ietf = gc.get(path=["/interfaces/interface[name=v0]/state/counters"], encoding="json_ietf")
    (n,) = proto["notification"]
    assert n["prefix"] == "interfaces/interface[name=v0]/state/counters"
    assert n["timestamp"] == feed.ts and n["timestamp"] > 10**18  # ns since the epoch
    expected = {leaf: feed.value("v0", leaf) for leaf in PORT_LEAVES}
    assert updates_by_leaf(n) == expected
    (j,) = ietf["notification"]
    assert updates_by_leaf(j) == {leaf: str(v) for leaf, v in expected.items()}  # RFC 7951 uint64


def test_get_wildcards_keys_prefix_and_origin(server, feed):
    with client(server) as gc:
        star = gc.get(path=["/interfaces/interface[name=*]/state/counters/in-octets"], encoding="proto")
        assert sorted(n["prefix"] for n in star["notification"]) == [
            f"interfaces/interface[name={p}]/state/counters" for p in PORTS]
        assert all(updates_by_leaf(n) == {"in-octets": feed.value(n["prefix"].split("=")[1][:2], "in-octets")}
                   for n in star["notification"])
        # a missing key matches every interface; below "state" come counters and oper-status
        nokey = gc.get(path=["/interfaces/interface/state"], encoding="proto")
        leaves = [u["path"] for n in nokey["notification"] for u in n["update"]]
        assert leaves.count("oper-status") == 3 and leaves.count("in-errors") == 3
        elem = gc.get(path=["/interfaces/*/state/oper-status"], encoding="proto")
        assert [updates_by_leaf(n) for n in elem["notification"]] == [{"oper-status": "UP"}] * 3
        # prefix + relative path, and an OpenConfig module name as origin
        pre = gc.get(prefix="/interfaces", path=["interface[name=v1]/state/counters/in-errors"],
                     encoding="proto")
        assert updates_by_leaf(pre["notification"][0]) == {"in-errors": feed.value("v1", "in-errors")}
        mod = gc.get(path=["openconfig-interfaces:interfaces/interface[name=v2]/state/oper-status"],
                     encoding="proto")
        assert updates_by_leaf(mod["notification"][0]) == {"oper-status": "UP"}
        # extension paths live under the swtel origin, not under OpenConfig
        ext = gc.get(path=["swtel:/rdma/device[name=mlx5_0]"], encoding="proto")
        # (a HIDDEN counter, filtered out by config, is never served)
        assert updates_by_leaf(ext["notification"][0]) == {"roce-adp-retrans": 7, "out-of-sequence": 0}
        with pytest.raises(gNMIException) as exc:
            gc.get(path=["/rdma/device[name=mlx5_0]"], encoding="proto")
        assert exc.value.orig_exc.code() == grpc.StatusCode.NOT_FOUND


@pytest.mark.parametrize("path", [
    "/interfaces/interface[name=nope]/state/counters",
    "/no/such/container",
    "/interfaces/interface[name=v0]/state/counters/in-nothing",
])
def test_get_unknown_path_is_not_found(server, path):
    with client(server) as gc, pytest.raises(gNMIException) as exc:
        gc.get(path=[path], encoding="proto")
    assert exc.value.orig_exc.code() == grpc.StatusCode.NOT_FOUND


def test_get_repeated_paths_answered_once_and_huge_paths_not_echoed(server, feed):
    stub = gnmi_pb2_grpc.gNMIStub(grpc.insecure_channel(f"127.0.0.1:{server.port}"))
    leaf = gnmi_pb2.Path(elem=[gnmi_pb2.PathElem(name="interfaces"),
                               gnmi_pb2.PathElem(name="interface", key={"name": "v0"}),
                               gnmi_pb2.PathElem(name="state"), gnmi_pb2.PathElem(name="counters"),
                               gnmi_pb2.PathElem(name="in-octets")])
    reply = stub.Get(gnmi_pb2.GetRequest(path=[leaf] * MAX_PATHS, encoding=gnmi_pb2.PROTO))
    assert len(reply.notification) == 1
    with pytest.raises(grpc.RpcError) as exc:  # past the cap: refused before any matching
        stub.Get(gnmi_pb2.GetRequest(path=[leaf] * (MAX_PATHS + 1), encoding=gnmi_pb2.PROTO))
    assert exc.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert exc.value.details() == f"{MAX_PATHS + 1} paths in one GetRequest (limit {MAX_PATHS})"
    huge = gnmi_pb2.Path(elem=[gnmi_pb2.PathElem(name="interfaces"),
                               gnmi_pb2.PathElem(name="interface", key={"name": "x" * 1_000_000})])
    with pytest.raises(grpc.RpcError) as exc:
        stub.Get(gnmi_pb2.GetRequest(path=[huge], encoding=gnmi_pb2.PROTO))
    assert exc.value.code() == grpc.StatusCode.NOT_FOUND
    assert len(exc.value.details()) < 400 and "characters)" in exc.value.details()


def test_get_unknown_origin_and_target(server):
    stub = gnmi_pb2_grpc.gNMIStub(grpc.insecure_channel(f"127.0.0.1:{server.port}"))
    with pytest.raises(grpc.RpcError) as exc:
        stub.Get(gnmi_pb2.GetRequest(path=[gnmi_pb2.Path(origin="acme")], encoding=gnmi_pb2.PROTO))
    assert exc.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    with pytest.raises(grpc.RpcError) as exc:
        stub.Get(gnmi_pb2.GetRequest(prefix=gnmi_pb2.Path(target="spine9"), encoding=gnmi_pb2.PROTO))
    assert exc.value.code() == grpc.StatusCode.NOT_FOUND
    with pytest.raises(grpc.RpcError) as exc:
        stub.Get(gnmi_pb2.GetRequest(encoding=gnmi_pb2.ASCII))
    assert exc.value.code() == grpc.StatusCode.UNIMPLEMENTED
    with pytest.raises(grpc.RpcError) as exc:
        stub.Set(gnmi_pb2.SetRequest())
    assert exc.value.code() == grpc.StatusCode.UNIMPLEMENTED
    whole = stub.Get(gnmi_pb2.GetRequest(prefix=gnmi_pb2.Path(target=TARGET), encoding=gnmi_pb2.PROTO))
    assert len(whole.notification) == 6  # 3 counter containers + 3 state containers
    assert all(n.prefix.target == TARGET and n.prefix.origin == OPENCONFIG for n in whole.notification)


# ---------------------------------------------------------------- Subscribe


def _stream(gc: gNMIclient, path: str, mode: str, **entry) -> object:
    extra = {k: entry.pop(k) for k in ("updates_only",) if k in entry}
    return gc.subscribe2(subscribe={
        "mode": "stream", "encoding": "proto", **extra,
        "subscription": [{"path": path, "mode": mode, **entry}],
    })


def test_stream_sample_snapshot_sync_then_samples(server, feed):
    with client(server) as gc:
        sub = _stream(gc, "/interfaces/interface[name=v0]/state/counters", "sample",
                      sample_interval=100_000_000)
        first = sub.get_update(timeout=5)
        assert first["sync_response"] is True
        assert updates_by_leaf(first["update"]) == {leaf: feed.value("v0", leaf) for leaf in PORT_LEAVES}
        ts = feed.bump({("v0", "in-octets"): 1500, ("v1", "in-octets"): 9})
        seen = []
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            n = sub.get_update(timeout=10)["update"]
            seen.append(n)
            if updates_by_leaf(n).get("in-octets") == feed.value("v0", "in-octets"):
                break
        assert updates_by_leaf(seen[-1])["in-octets"] == feed.value("v0", "in-octets")
        assert seen[-1]["timestamp"] == ts  # the collection time, not the send time
        # SAMPLE repeats unchanged values every interval
        again = [sub.get_update(timeout=10)["update"] for _ in range(2)]
        assert all(set(updates_by_leaf(n)) == set(PORT_LEAVES) for n in again)
        sub.close()
    assert server.status()["sent"] >= 5


def test_stream_sample_suppress_redundant_and_heartbeat(server, feed):
    with client(server) as gc:
        sub = _stream(gc, "/interfaces/interface[name=v1]/state/counters", "sample",
                      sample_interval=50_000_000, suppress_redundant=True, heartbeat_interval=1_000_000_000)
        sub.get_update(timeout=5)  # snapshot + sync
        time.sleep(0.3)  # wallclock: six sample intervals pass; that nothing is sent is the claim
        assert not sub.peek()  # nothing changed: nothing sent
        feed.bump({("v1", "out-octets"): 64})
        n = sub.get_update(timeout=10)["update"]
        assert updates_by_leaf(n) == {"out-octets": feed.value("v1", "out-octets")}
        beat = sub.get_update(timeout=10)["update"]  # the heartbeat resends everything
        assert set(updates_by_leaf(beat)) == set(PORT_LEAVES)
        sub.close()


def test_stream_on_change_counters_oper_status_and_delete(server, feed):
    with client(server) as gc:
        sub = _stream(gc, "/interfaces/interface[name=v1]", "on_change")
        first = sub.get_update(timeout=5)
        assert first["sync_response"] is True and first["update"]["update"]
        feed.bump({("v0", "in-octets"): 5})  # not ours
        ts = feed.bump({("v1", "in-errors"): 2, ("v1", "out-octets"): 100})
        n = sub.get_update(timeout=10)["update"]
        assert n["prefix"] == "interfaces/interface[name=v1]/state/counters" and n["timestamp"] == ts
        assert updates_by_leaf(n) == {"in-errors": feed.value("v1", "in-errors"),
                                      "out-octets": feed.value("v1", "out-octets")}
        feed.set_oper("v2", "DOWN")  # not ours
        feed.set_oper("v1", "DOWN")
        n = sub.get_update(timeout=10)["update"]
        assert n["prefix"] == "interfaces/interface[name=v1]/state"
        assert updates_by_leaf(n) == {"oper-status": "DOWN"}
        server.on_delete(time.time_ns(), [port_container("v0"), port_container("v1")])
        n = sub.get_update(timeout=10)["update"]
        assert n["delete"] == [{"path": "interfaces/interface[name=v1]/state/counters"}]
        time.sleep(0.2)  # wallclock: time for a stray update to arrive; none must
        assert not sub.peek()
        sub.close()


def test_target_defined_is_on_change_and_updates_only_skips_snapshot(server, feed):
    with client(server) as gc:
        sub = _stream(gc, "/interfaces/interface[name=v2]/state/counters", "target_defined",
                      updates_only=True)
        first = sub.get_update(timeout=5)
        assert first == {"update": {}, "sync_response": True}  # sync, no snapshot
        feed.bump({("v2", "in-unicast-pkts"): 3})
        n = sub.get_update(timeout=10)["update"]
        assert updates_by_leaf(n) == {"in-unicast-pkts": feed.value("v2", "in-unicast-pkts")}
        sub.close()


def test_stream_json_ietf(server, feed):
    with client(server) as gc:
        sub = gc.subscribe2(subscribe={"mode": "stream", "encoding": "json_ietf", "subscription": [
            {"path": "/interfaces/interface[name=v0]/state", "mode": "on_change"}]})
        sub.get_update(timeout=5)
        feed.bump({("v0", "in-octets"): 1})
        assert updates_by_leaf(sub.get_update(timeout=10)["update"]) == {
            "in-octets": str(feed.value("v0", "in-octets"))}
        feed.set_oper("v0", "LOWER_LAYER_DOWN")
        assert updates_by_leaf(sub.get_update(timeout=10)["update"]) == {"oper-status": "LOWER_LAYER_DOWN"}
        sub.close()


def test_poll(server, feed):
    with client(server) as gc:
        sub = gc.subscribe_poll(subscribe={"encoding": "proto", "subscription": [
            {"path": "/interfaces/interface[name=v0]/state/counters/in-octets"}]})
        time.sleep(0.2)  # wallclock: time for a stray update to arrive; none must
        assert not sub.peek()  # nothing before the first Poll
        r1 = sub.get_update(timeout=5)
        assert r1["sync_response"] is True
        assert updates_by_leaf(r1["update"]) == {"in-octets": feed.value("v0", "in-octets")}
        feed.bump({("v0", "in-octets"): 4242})
        r2 = sub.get_update(timeout=5)
        assert updates_by_leaf(r2["update"]) == {"in-octets": feed.value("v0", "in-octets")}
        sub.close()


def test_once(server, feed):
    with client(server) as gc:
        sub = gc.subscribe_once(subscribe={"encoding": "proto", "subscription": [
            {"path": "/interfaces/interface[name=*]/state/counters/out-octets"},
            {"path": "swtel:/rdma"}]})
        messages = list(sub)  # ends by itself after sync_response
        sub.close()
    assert messages[-1] == {"sync_response": True}
    got = {(m["update"]["prefix"], u["path"]): u["val"] for m in messages[:-1] for u in m["update"]["update"]}
    assert got == {
        **{(f"interfaces/interface[name={p}]/state/counters", "out-octets"): feed.value(p, "out-octets")
           for p in PORTS},
        ("rdma/device[name=mlx5_0]/port[id=1]/counters", "roce-adp-retrans"): 7,
        ("rdma/device[name=mlx5_0]/port[id=1]/counters", "out-of-sequence"): 0,
    }


@pytest.mark.parametrize("entry,code", [
    ({"mode": "sample", "sample_interval": 1_000_000}, grpc.StatusCode.INVALID_ARGUMENT),  # 1 ms < 50 ms
    ({"mode": "on_change", "heartbeat_interval": 1_000}, grpc.StatusCode.INVALID_ARGUMENT),
])
def test_subscribe_rejects_intervals_below_the_source_interval(server, entry, code):
    with client(server) as gc:
        stream = gc.subscribe(subscribe={"mode": "stream", "encoding": "proto", "subscription": [
            {"path": "/interfaces", **entry}]})
        with pytest.raises(grpc.RpcError) as exc:
            next(iter(stream))
    assert exc.value.code() == code
    assert "below the agent's smallest source interval 50ms" in exc.value.details()


def test_subscription_count_and_status(server, feed):
    with client(server) as gc:
        sub = _stream(gc, "/interfaces", "on_change")
        sub.get_update(timeout=5)
        st = server.status()
        assert st["state"] == "listening" and st["subscribers"] == 1
        assert st["listen"] == f"127.0.0.1:{server.port}" and st["dropped"] == 0
        sub.close()
    deadline = time.monotonic() + 5
    while server.status()["subscribers"] and time.monotonic() < deadline:
        time.sleep(0.05)
    assert server.status()["subscribers"] == 0 and server.status()["sent"] > 0


# ---------------------------------------------------------------- TLS, mTLS, passwords


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    return make_pki(tmp_path_factory.mktemp("pki"))


def test_tls(feed, pki):
    srv = _start(feed, tls=ServerTls(cert=str(pki.server_cert), key=str(pki.server_key)))
    try:
        with client(srv, insecure=False, path_cert=str(pki.ca)) as gc:
            n = gc.get(path=["/interfaces/interface[name=v0]/state/counters/in-octets"], encoding="proto")
        assert updates_by_leaf(n["notification"][0]) == {"in-octets": feed.value("v0", "in-octets")}
        with pytest.raises(grpc.FutureTimeoutError):  # a client trusting another CA never connects
            client(srv, insecure=False, path_cert=str(pki.wrong_ca), gnmi_timeout=1).connect()
        # and a plaintext client is not served
        plain = gnmi_pb2_grpc.gNMIStub(grpc.insecure_channel(f"127.0.0.1:{srv.port}"))
        with pytest.raises(grpc.RpcError):
            plain.Capabilities(gnmi_pb2.CapabilityRequest(), timeout=2)
    finally:
        srv.stop(1)


def test_mtls(feed, pki):
    srv = _start(feed, tls=ServerTls(cert=str(pki.server_cert), key=str(pki.server_key), ca=str(pki.ca)))
    try:
        with client(srv, insecure=False, path_cert=str(pki.client_cert), path_key=str(pki.client_key),
                    path_root=str(pki.ca)) as gc:
            sub = _stream(gc, "/interfaces/interface[name=v0]/state/oper-status", "on_change")
            assert updates_by_leaf(sub.get_update(timeout=5)["update"]) == {"oper-status": "UP"}
            sub.close()
        # without a client certificate the handshake fails
        channel = grpc.secure_channel(f"127.0.0.1:{srv.port}",
                                      grpc.ssl_channel_credentials(pki.ca.read_bytes()))
        with pytest.raises(grpc.RpcError) as exc:
            gnmi_pb2_grpc.gNMIStub(channel).Capabilities(gnmi_pb2.CapabilityRequest(), timeout=3)
        assert exc.value.code() == grpc.StatusCode.UNAVAILABLE
    finally:
        srv.stop(1)


def test_password(feed, tmp_path: Path):
    from agent import credentials

    secret = tmp_path / "password"
    credentials.write_user(str(secret), "nvue", "s3cret")  # the hash, never the password
    srv = _start(feed, insecure=True, username="nvue", password_file=str(secret))
    try:
        with client(srv, username="nvue", password="s3cret") as gc:
            assert gc.capabilities()["gnmi_version"] == "0.8.0"
        for user, password in (("nvue", "wrong"), ("root", "s3cret"), ("", "")):
            with pytest.raises(gNMIException) as exc:
                client(srv, username=user, password=password).connect()
            assert exc.value.orig_exc.code() == grpc.StatusCode.UNAUTHENTICATED
        stub = gnmi_pb2_grpc.gNMIStub(grpc.insecure_channel(f"127.0.0.1:{srv.port}"))
        stream = stub.Subscribe(iter([gnmi_pb2.SubscribeRequest()]),
                                metadata=[("username", "nvue"), ("password", "nope")])
        with pytest.raises(grpc.RpcError) as err:
            next(stream)
        assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED
        assert "authentication failed" in srv.status()["last_error"]
    finally:
        srv.stop(1)


def test_port_9339_and_busy_port_refused(feed, server):
    with pytest.raises(ValueError, match="9339"):
        GnmiServer(ServerConfig(listen=HostPort("127.0.0.1:9339"), insecure=True), TARGET)
    twin = GnmiServer(ServerConfig(listen=HostPort(f"127.0.0.1:{server.port}"), insecure=True), TARGET)
    with pytest.raises(RuntimeError, match="cannot listen"):
        twin.start(feed.store)
    assert twin.status()["state"] == "failed"


# ---------------------------------------------------------------- queue and matching (no gRPC)


def _subscriber(path: str, queue_len: int) -> Subscriber:
    req = gnmi_pb2.SubscriptionList(
        mode=gnmi_pb2.SubscriptionList.STREAM, encoding=gnmi_pb2.PROTO,
        subscription=[gnmi_pb2.Subscription(path=gnmi_pb2.Path(elem=[
            gnmi_pb2.PathElem(name=n) for n in path.strip("/").split("/")]), mode=gnmi_pb2.ON_CHANGE)])
    return Subscriber(req, TARGET, MIN_INTERVAL, queue_len)


def test_slow_subscriber_drops_oldest_counts_and_resyncs(feed):
    srv = GnmiServer(ServerConfig(listen=HostPort("127.0.0.1:0"), insecure=True), TARGET)
    srv.store = feed.store
    sub = _subscriber("/interfaces", queue_len=3)
    assert srv.register(sub)
    feed.server = srv
    for n in range(10):
        feed.bump({("v0", "in-octets"): n + 1})
    assert sub.dropped == 7 and srv.status()["dropped"] == 7
    stream = sub.responses(feed.store, iter(()))
    snapshot = []
    for chunk in stream:  # initial snapshot (3 counter + 3 state containers), then sync
        snapshot.append(gnmi_pb2.SubscribeResponse.FromString(chunk))
        if snapshot[-1].sync_response:
            break
    after = [gnmi_pb2.SubscribeResponse.FromString(next(stream)) for _ in range(3 + 6)]
    sub.close()
    assert len(snapshot) == 7
    # the three newest changes survived, in order ...
    final = feed.value("v0", "in-octets")
    assert [r.update.update[0].val.uint_val for r in after[:3]] == [final - 19, final - 10, final]
    # ... then a resync of every on-change path heals what was dropped
    resync = {(r.update.prefix.elem[1].key["name"], u.path.elem[0].name): u.val
              for r in after[3:] for u in r.update.update}
    assert resync[("v0", "in-octets")].uint_val == final
    assert resync[("v1", "oper-status")].string_val == "UP"


def test_table_match_is_cached_by_identity_and_filters_per_change(feed):
    ps = PathSet([request_pattern(None, gnmi_pb2.Path(elem=[
        gnmi_pb2.PathElem(name="interfaces"), gnmi_pb2.PathElem(name="interface", key={"name": "v1"}),
        gnmi_pb2.PathElem(name="state"), gnmi_pb2.PathElem(name="counters"),
        gnmi_pb2.PathElem(name="in-errors")]), TARGET)])
    m = ps.table(feed.table)
    assert m.indices == [feed.index("v1", "in-errors")]
    assert ps.table(feed.table) is m  # cached
    assert ps.filter_changes(feed.table, list(range(len(feed.table)))) == m.indices
    assert ps.filter_changes(feed.table, [0, 1]) == []
    rebuilt = make_table(PORTS)  # a new table object (ports changed): matched afresh
    assert ps.table(rebuilt) is not m and ps.table(rebuilt).indices == m.indices
    # leaf-level patterns: "*" for an element, "..." for any depth; HIDDEN never matches
    per_leaf = PathSet([(OPENCONFIG, tuple(paths.split("/interfaces/*/state/counters/out-octets"))),
                        (OPENCONFIG, tuple(paths.split("/interfaces/.../in-errors")))])
    assert per_leaf.table(feed.table).indices == sorted(
        feed.index(p, leaf) for p in PORTS for leaf in ("out-octets", "in-errors"))
    hidden = PathSet([(SWTEL_ORIGIN, ())]).table(feed.rdma)
    assert hidden.indices == [0, 1] and hidden.mask is not None
    everything = PathSet([(OPENCONFIG, ())])
    assert everything.table(feed.table).mask is None  # all match: no per-index filtering
    assert everything.filter_changes(feed.table, [3, 4]) == [3, 4]


def test_a_narrow_subscription_filters_through_the_shared_changes_by_index(feed):
    """With the batch's changes by index (built once for every subscriber), a subscription
    matching far fewer counters than changed walks its own counters: the same answer, and
    the mask is asked for only then."""
    ps = PathSet([(OPENCONFIG, tuple(paths.split("/interfaces/interface[name=v1]/state/counters/in-errors")))])
    wanted = feed.index("v1", "in-errors")
    everything = list(range(len(feed.table)))
    asked: list[int] = []

    def mask_of(changes: list[int]):
        def changed_mask() -> bytearray:
            asked.append(1)
            mask = bytearray(len(feed.table))
            for i in changes:
                mask[i] = 1
            return mask
        return changed_mask

    for changes in (everything, [i for i in everything if i != wanted]):
        assert ps.filter_changes(feed.table, changes, mask_of(changes)) == ps.filter_changes(feed.table, changes)
    assert ps.filter_changes(feed.table, everything, mask_of(everything)) == [wanted]
    assert len(asked) == 3
    ps.filter_changes(feed.table, [wanted], mask_of([wanted]))  # fewer changes than matches: the old walk
    assert len(asked) == 3


# ---------------------------------------------------------------- end to end: swtel run in a namespace

# Runs inside the agent's namespace (127.0.0.1 is per namespace); reports as JSON lines.
_E2E_CLIENT = r'''
import json, sys, time
from pygnmi.client import gNMIclient
port, ifname = int(sys.argv[1]), sys.argv[2]
def say(**kw):
    print(json.dumps(kw), flush=True)
deadline = time.monotonic() + 20
while True:
    try:
        gc = gNMIclient(target=("127.0.0.1", port), insecure=True, gnmi_timeout=2).connect()
        break
    except Exception:
        if time.monotonic() > deadline:
            raise
        time.sleep(0.2)
base = f"/interfaces/interface[name={ifname}]/state"
got = gc.get(path=[base + "/counters"], encoding="proto")
say(get={u["path"]: u["val"] for n in got["notification"] for u in n["update"]},
    ts=got["notification"][0]["timestamp"])
sub = gc.subscribe2(subscribe={"mode": "stream", "encoding": "proto", "subscription": [
    {"path": base + "/oper-status", "mode": "on_change"},
    {"path": base + "/counters/in-pkts", "mode": "on_change"}]})
def leaf(path):  # per tick the update paths are absolute, per container relative: the leaf alike
    return path.rsplit("/", 1)[-1]
def full(n, path):  # prefix and path joined, as a collector does
    return f"{n['prefix']}/{path}" if n.get("prefix") else path
first = sub.get_update(timeout=10)
say(sync=first.get("sync_response", False), initial={leaf(u["path"]): u["val"] for u in first["update"]["update"]})
while time.monotonic() < deadline:
    n = sub.get_update(timeout=10)["update"]
    vals = {leaf(u["path"]): u["val"] for u in n.get("update", [])}
    say(update=vals, paths=[full(n, u["path"]) for u in n.get("update", [])])
    if vals.get("oper-status") == "DOWN":
        break
sub.close()
gc.close()
'''


def test_big_containers_split_alike_in_proto_and_json_ietf():
    from agent.gnmi.get import Counters, Renderer

    big = Container(SWTEL_ORIGIN, "/interfaces/interface[name=swp1]/ethtool")
    table = CounterTable("ethtool", [CounterSpec(big, f"q{i}") for i in range(2500)])
    values = array("Q", range(10**12, 10**12 + 2500))
    counters = Counters(123, table, list(range(2500)), values)
    decoded = {}
    for enc in (gnmi_pb2.PROTO, gnmi_pb2.JSON_IETF):
        notifs = [gnmi_pb2.SubscribeResponse.FromString(b).update
                  for b in Renderer(TARGET, enc).counters(counters)]
        assert [len(n.update) for n in notifs] == [1000, 1000, 500]
        assert all(n.timestamp == 123 and n.prefix.origin == SWTEL_ORIGIN and n.prefix.target == TARGET
                   for n in notifs)
        decoded[enc] = {u.path.elem[0].name: (u.val.uint_val if enc == gnmi_pb2.PROTO
                                              else int(json.loads(u.val.json_ietf_val)))
                        for n in notifs for u in n.update}
    assert decoded[gnmi_pb2.PROTO] == decoded[gnmi_pb2.JSON_IETF] == {
        f"q{i}": 10**12 + i for i in range(2500)}


def test_the_tick_thread_leaves_unseen_state_leaves_to_the_subscriber(monkeypatch):
    """offer_states (tick thread) filters by the leaves already matched; a leaf never seen
    goes to the subscriber's own thread unwalked (``su``), which matches it there: a burst of
    new ports' leaves never costs the tick thread a walk per leaf and subscriber."""
    sub = _subscriber("/interfaces", 100)
    walks: list[tuple] = []
    real = PathSet.matches_leaf

    def counted(self, container, leaf):
        walks.append((container, leaf))
        return real(self, container, leaf)

    monkeypatch.setattr(PathSet, "matches_leaf", counted)
    sub.offer_states([oper("v0", "UP", 1)])
    assert walks == [] and [item[0] for item in sub._queue] == ["su"]
    assert sub._unseen_states(sub._queue[0][1]) == [oper("v0", "UP", 1)]  # the RPC thread's match
    assert len(walks) == 1
    sub.offer_states([oper("v0", "DOWN", 2)])  # seen now: filtered on the tick thread, not walked again
    assert len(walks) == 1 and [item[0] for item in sub._queue] == ["su", "s"]
    # one offer with a seen and an unseen leaf stays one item, in order (never two that could swap)
    sub.offer_states([oper("v0", "UP", 3), oper("v1", "UP", 3), oper("v0", "DOWN", 4)])
    assert len(walks) == 1 and sub._queue[-1] == ("su", [oper("v0", "UP", 3), oper("v1", "UP", 3),
                                                         oper("v0", "DOWN", 4)])


@pytest.mark.parametrize("encoding", [gnmi_pb2.PROTO, gnmi_pb2.JSON_IETF, gnmi_pb2.JSON])
def test_get_bytes_are_the_notifications_of_one_get_response(feed, encoding):
    """The server sends the rendered SubscribeResponses joined as the GetResponse (field 1 of
    both): the same notifications as one GetResponse built from each chunk's update."""
    from agent.gnmi import get as gnmi_get

    request = gnmi_pb2.GetRequest(path=[paths.to_proto("/interfaces")], encoding=encoding)
    raw = gnmi_get.get_bytes(feed.store, request, TARGET)
    pattern = request_pattern(request.prefix, request.path[0], TARGET)
    chunks = gnmi_get.Renderer(TARGET, encoding).snapshot(*gnmi_get.read(feed.store, PathSet([pattern])))
    built = gnmi_pb2.GetResponse()
    for chunk in chunks:
        built.notification.append(gnmi_pb2.SubscribeResponse.FromString(chunk).update)
    parsed = gnmi_pb2.GetResponse.FromString(raw)
    assert len(parsed.notification) == len(chunks) > 1
    assert parsed == built
    # and a state (oper-status) is among them: counters and states alike
    assert any(u.path.elem[-1].name == "oper-status" for n in parsed.notification for u in n.update)
