"""What callers of the gNMI dial-in server may read (issue 33, items 2 and 6): the authorization
policy and path rules applied by a real server over TLS, pygnmi as the client; the policy
re-read on reload; validate naming a broken policy; and the accounting (a count per result code
in status and at swtel:/agent/server/..., one log line per RPC, rate-limited).

Every case gets exactly the code and message docs/server.md documents ("What they may read").
"""

from __future__ import annotations

import json
import time
from array import array
from pathlib import Path
from types import SimpleNamespace

import grpc
import pytest
from pygnmi.client import gNMIclient, gNMIException
from pygnmi.spec.v080 import gnmi_pb2, gnmi_pb2_grpc

from agent import config, credentials
from agent.config import ConfigError, HostPort, ServerTls
from agent.counters import SWTEL_ORIGIN, Container, StateUpdate
from agent.exporters.server import GnmiServer, PathRuleConfig, ServerAuthz, ServerConfig
from agent.gnmi.paths import to_proto
from agent.store import Store
from tests.gnmi_helpers import CA, make_table

TARGET = "leaf01"
# pygnmi's reader thread raises CANCELLED when a ONCE stream's client closes: not ours to judge
pytestmark = pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")
OK, DENIED, UNAUTH = grpc.StatusCode.OK, grpc.StatusCode.PERMISSION_DENIED, grpc.StatusCode.UNAUTHENTICATED

POLICY = {
    "name": "leaf01-authz",
    "deny_rules": [{"name": "no-intruder", "source": {"principals": ["intruder"]}}],
    "allow_rules": [
        {"name": "operators", "source": {"principals": ["nvue", "tenant", "intruder", "swtel-agent"]},
         "request": {"paths": ["/gnmi.gNMI/Capabilities", "/gnmi.gNMI/Get", "/gnmi.gNMI/Subscribe"]}},
    ],
}
TENANT = PathRuleConfig(principals=["tenant"], allow=["/interfaces", "swtel:/"],
                        deny=["/interfaces/interface[name=swp2]", "swtel:/agent", "swtel:/system"])
EVERYONE = PathRuleConfig(principals=["*"])


class Clock:
    now = 1000.0

    def __call__(self) -> float:
        return self.now


def _store() -> Store:
    store = Store()
    table = make_table(["swp1", "swp2"])
    store.set_source("netdev", table, array("Q", range(1, len(table) + 1)), time.time_ns())
    ts = time.time_ns()
    store.set_states([
        StateUpdate(ts, Container(SWTEL_ORIGIN, "/agent/sources/source[name=netdev]/state"), "errors", 0, "agent"),
        StateUpdate(ts, Container(SWTEL_ORIGIN, "/system/state"), "hostname", "leaf01", "agent"),
        StateUpdate(ts, Container(SWTEL_ORIGIN, "/interfaces/interface[name=swp1]/hw/state"), "speed", 1, "agent"),
    ])
    return store


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    """tests.gnmi_helpers' PKI plus a second client certificate of the same CA (CN intruder)."""
    d = tmp_path_factory.mktemp("pki")
    ca = CA.create(d)
    server_cert, server_key = ca.issue(d, "collector.test", dns=("localhost",), ips=("127.0.0.1",))
    client_cert, client_key = ca.issue(d, "swtel-agent", client=True)
    intruder = ca.issue(d, "intruder", client=True)
    return SimpleNamespace(ca=ca.cert_path, server_cert=server_cert, server_key=server_key,
                           client_cert=client_cert, client_key=client_key, intruder=intruder)


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("authz")
    users = d / "gnmi-users"
    for name in ("nvue", "tenant", "intruder", "guest"):
        credentials.write_user(str(users), name, f"{name}-pw")
    policy = d / "authz.json"
    policy.write_text(json.dumps(POLICY))
    return {"users": users, "policy": policy}


def _cfg(pki, files, ca: bool = False, users: bool = True, paths=(TENANT, EVERYONE)) -> ServerConfig:
    return ServerConfig(
        listen=HostPort("127.0.0.1:0"), users_file=str(files["users"]) if users else None,
        tls=ServerTls(cert=str(pki.server_cert), key=str(pki.server_key), ca=str(pki.ca) if ca else None),
        authz=ServerAuthz(policy_file=str(files["policy"]), paths=list(paths)))


@pytest.fixture(scope="module")
def server(pki, files):
    srv = GnmiServer(_cfg(pki, files), TARGET, min_interval_s=0.05, clock=Clock())
    srv.start(_store())
    yield srv
    srv.stop(1)


def _client(srv: GnmiServer, pki, user: str | None, **kw) -> gNMIclient:
    cred = {"username": user, "password": f"{user}-pw"} if user else {}
    return gNMIclient(target=("127.0.0.1", srv.port), path_cert=str(pki.ca), gnmi_timeout=5, **cred, **kw)


def _code(fn) -> tuple[grpc.StatusCode, str]:
    try:
        fn()
    except gNMIException as exc:
        return exc.orig_exc.code(), exc.orig_exc.details()
    except grpc.RpcError as exc:
        return exc.code(), exc.details()
    return OK, ""


def _prefixes(reply: dict) -> list[str]:
    return sorted(n.get("prefix", "") for n in reply["notification"])


# (case, user, path, code, message) -- docs/server.md, "What they may read"
MATRIX = [
    ("the right user", "nvue", "swtel:/agent", OK, ""),
    ("a user the policy denies by a deny rule", "intruder", "/interfaces", DENIED,
     "intruder may not call /gnmi.gNMI/Capabilities: denied by rule 'no-intruder' "
     "(authorization policy 'leaf01-authz')"),
    ("a user no allow rule names", "guest", "/interfaces", DENIED,
     "guest may not call /gnmi.gNMI/Capabilities: no allow rule matches (authorization policy 'leaf01-authz')"),
    ("a path the rules deny", "tenant", "swtel:/agent", DENIED,
     "swtel:/agent: not readable by this caller (path rules)"),
    ("a key the rules deny", "tenant", "/interfaces/interface[name=swp2]", DENIED,
     "/interfaces/interface[name=swp2]: not readable by this caller (path rules)"),
    ("a path the rules allow", "tenant", "/interfaces/interface[name=swp1]", OK, ""),
    ("no credentials", None, "/interfaces", UNAUTH,
     "credentials required: username and password metadata, or an authorization: Basic header"),
]


@pytest.mark.parametrize("case,user,path,code,message", MATRIX, ids=[m[0] for m in MATRIX])
def test_matrix_over_tls(server, pki, case, user, path, code, message):
    server._auth.throttle.succeeded("127.0.0.1")  # a case never inherits a slow-down
    before = dict(server.status()["results"])

    def call():
        with _client(server, pki, user) as gc:
            gc.capabilities()
            return gc.get(path=[path], encoding="proto")
    assert _code(call) == (code, message)
    after = server.status()["results"]
    counted = "OK" if code == OK else code.name
    assert after.get(counted, 0) > before.get(counted, 0)
    # Subscribe is refused alike; a raw stub, since pygnmi's connect stops at Capabilities
    server._auth.throttle.succeeded("127.0.0.1")
    origin, _, text = path.rpartition(":") if path.startswith("swtel:") else ("", "", path)
    request = gnmi_pb2.SubscribeRequest(subscribe=gnmi_pb2.SubscriptionList(
        mode=gnmi_pb2.SubscriptionList.ONCE, encoding=gnmi_pb2.PROTO,
        subscription=[gnmi_pb2.Subscription(path=to_proto(text, origin))]))
    stub = gnmi_pb2_grpc.gNMIStub(grpc.secure_channel(
        f"127.0.0.1:{server.port}", grpc.ssl_channel_credentials(pki.ca.read_bytes())))
    meta = [("username", user), ("password", f"{user}-pw")] if user else []
    got = _code(lambda: [r for r in stub.Subscribe(iter([request]), metadata=meta, timeout=5)])
    assert got == (code, message.replace("Capabilities", "Subscribe"))


def test_wider_requests_are_filtered_not_refused(server, pki):
    """The tenant asking for everything gets its own subtrees, the denied ones left out."""
    server._auth.throttle.succeeded("127.0.0.1")
    with _client(server, pki, "tenant") as gc:
        oc = gc.get(path=["/interfaces"], encoding="proto")
        assert _prefixes(oc) == ["interfaces/interface[name=swp1]/state/counters"]
        ext = gc.get(path=["swtel:/"], encoding="proto")
        assert _prefixes(ext) == ["interfaces/interface[name=swp1]/hw/state"]  # pygnmi leaves the origin out
        # the snapshot of a root subscription: the same view
        seen = []
        for reply in gc.subscribe2(subscribe={"mode": "once", "encoding": "proto",
                                              "subscription": [{"path": "swtel:/"}, {"path": "/"}]}):
            if reply.get("sync_response"):
                break
            seen.append(reply["update"]["prefix"])
        assert sorted(seen) == ["interfaces/interface[name=swp1]/hw/state",
                                "interfaces/interface[name=swp1]/state/counters"]
    with _client(server, pki, "nvue") as gc:  # the admin's rule (`*`) reads it all
        everything = gc.get(path=["swtel:/"], encoding="proto")
        assert len(everything["notification"]) == 3


def test_mtls_an_allowed_and_a_denied_certificate(pki, files):
    """mTLS alone: the certificate's CN is the principal the policy and the path rules see."""
    srv = GnmiServer(_cfg(pki, files, ca=True, users=False), TARGET, min_interval_s=0.05)
    srv.start(_store())
    try:
        with gNMIclient(target=("127.0.0.1", srv.port), path_cert=str(pki.client_cert),
                        path_key=str(pki.client_key), path_root=str(pki.ca), gnmi_timeout=5) as gc:
            assert gc.get(path=["/interfaces"], encoding="proto")["notification"]  # CN swtel-agent: allowed
        # the same CA signed it, so the handshake succeeds: the policy refuses its CN
        got = _code(lambda: _get_with_cert(srv, pki, *pki.intruder))
        assert got == (DENIED, "intruder may not call /gnmi.gNMI/Capabilities: denied by rule 'no-intruder' "
                               "(authorization policy 'leaf01-authz')")
        assert srv.status()["results"].get("PERMISSION_DENIED") == 1
    finally:
        srv.stop(1)


def _get_with_cert(srv, pki, cert: Path, key: Path):
    with gNMIclient(target=("127.0.0.1", srv.port), path_cert=str(cert), path_key=str(key),
                    path_root=str(pki.ca), gnmi_timeout=5) as gc:
        gc.capabilities()


def test_reload_rereads_the_policy_file_and_keeps_a_good_one(pki, files, tmp_path):
    policy = tmp_path / "authz.json"
    policy.write_text(json.dumps(POLICY))
    cfg = _cfg(pki, files)
    cfg.authz = ServerAuthz(policy_file=str(policy))
    srv = GnmiServer(cfg, TARGET, min_interval_s=0.05, clock=Clock())
    srv.start(_store())
    stub = gnmi_pb2_grpc.gNMIStub(grpc.secure_channel(
        f"127.0.0.1:{srv.port}", grpc.ssl_channel_credentials(pki.ca.read_bytes())))
    guest = [("username", "guest"), ("password", "guest-pw")]

    def caps():
        return _code(lambda: stub.Capabilities(gnmi_pb2.CapabilityRequest(), metadata=guest, timeout=5))
    try:
        assert caps()[0] == DENIED
        opened = {**POLICY, "allow_rules": [*POLICY["allow_rules"], {"name": "guests", "source": {
            "principals": ["guest"]}, "request": {"paths": ["/gnmi.gNMI/Capabilities"]}}]}
        policy.write_text(json.dumps(opened) + "\n")  # a different size: seen as changed
        parsed = type("Cfg", (), {})()
        parsed.exporters = type("E", (), {"server": cfg})()
        srv.on_config(parsed)
        assert caps()[0] == OK
        policy.write_text("{broken")
        srv.on_config(parsed)
        assert caps()[0] == OK  # the last good policy stays in force
        assert "authorization not reloaded: policy file" in srv.status()["authz"]["error"]
    finally:
        srv.stop(1)


def test_a_new_policy_alone_keeps_the_running_server(pki, files):
    """authz is not part of what the server is built from: a reload changing it alone keeps the
    listener (and its streams), and on_config applies it."""
    from agent.runner import _exporter_config

    text = f"""exporters:
  server:
    listen: '127.0.0.1:50999'
    users_file: {files['users']}
    tls: {{cert: {pki.server_cert}, key: {pki.server_key}}}
"""
    a = config.parse(text)
    b = config.parse(text + f"    authz: {{policy_file: {files['policy']}}}\n")
    assert _exporter_config(a, "server") == _exporter_config(b, "server")
    assert b.exporters.server.authz.policy_file == str(files["policy"])


def _problems(text: str) -> list[str]:
    with pytest.raises(ConfigError) as info:
        config.parse(text)
    return info.value.problems


LOOP = "listen: '127.0.0.1:50051', insecure: true"


def test_validate_names_the_policy_problem(tmp_path):
    bad = tmp_path / "authz.json"
    bad.write_text('{"name": "p", "allow_rules": [{"name": "r", "request": {"methods": []}}]}')
    assert _problems(f"exporters:\n  server: {{{LOOP}, authz: {{policy_file: {bad}}}}}\n") == [
        f"exporters.server.authz.policy_file: policy file {bad}: allow_rules[0].request: unknown field "
        "'methods' (known: paths, headers)"]
    missing = tmp_path / "none.json"
    assert _problems(f"exporters:\n  server: {{{LOOP}, authz: {{policy_file: {missing}}}}}\n") == [
        f"exporters.server.authz.policy_file: policy file {missing}: No such file or directory"]
    rules = "paths: [{principals: [], allow: ['interfaces']}]"
    assert _problems(f"exporters:\n  server: {{{LOOP}, authz: {{{rules}}}}}\n") == [
        "exporters.server.authz.paths[0].principals: name at least one principal (`*`: every caller)",
        "exporters.server.authz.paths[0].allow[0]: expected an absolute path (/...)"]
    good = tmp_path / "good.json"
    good.write_text(json.dumps(POLICY))
    cfg = config.parse(f"exporters:\n  server: {{{LOOP}, authz: {{policy_file: {good}, "
                       "paths: [{principals: [tenant], deny: ['swtel:/agent']}]}}\n")
    assert cfg.exporters.server.authz.paths[0].allow == ["/", "swtel:/"]


# ---------------------------------------------------------------- accounting


def test_accounting_counts_publishes_and_logs_each_rpc_once(pki, files, monkeypatch):
    from agent.exporters import server as server_mod

    lines: list[tuple[str, dict]] = []

    class Log:
        def info(self, event, **kw):
            lines.append((event, kw))

        warning = info

        def error(self, event, **kw):
            pass
    monkeypatch.setattr(server_mod, "log", Log())
    srv = GnmiServer(_cfg(pki, files), TARGET, min_interval_s=0.05, clock=Clock())
    srv.start(_store())
    try:
        with _client(srv, pki, "tenant") as gc:
            gc.get(path=["/interfaces/interface[name=swp1]"], encoding="proto")
            with pytest.raises(gNMIException):
                gc.get(path=["swtel:/system"], encoding="proto")
            with pytest.raises(gNMIException):  # the same refusal again: counted, its line suppressed
                gc.get(path=["swtel:/system"], encoding="proto")
        rpcs = [kw for event, kw in lines if event == "gNMI RPC"]
        assert [(r["rpc"], r["principal"], r["result"], r["paths"]) for r in rpcs] == [
            ("Capabilities", "tenant", "OK", []),  # pygnmi's connect asks for Capabilities
            ("Get", "tenant", "OK", ["/interfaces/interface[name=swp1]"]),
            ("Get", "tenant", "PERMISSION_DENIED", ["swtel:/system"]),
        ]
        assert all(r["peer"].startswith("ipv4:127.0.0.1:") for r in rpcs)
        assert srv.status()["results"] == {"OK": 2, "PERMISSION_DENIED": 2}
        leaves = {(c.path, leaf): v for c, leaf, v in srv.health_values()}
        assert leaves[("/agent/server/results/result[code=PERMISSION_DENIED]/state", "count")] == 2
        assert leaves[("/agent/server/results/result[code=OK]/state", "count")] == 2
        assert leaves[("/agent/server/state", "subscribers")] == 0
    finally:
        srv.stop(1)


def test_the_engine_publishes_a_listeners_health_values(tmp_path, monkeypatch):
    """The engine's health pass carries a listener's health_values (the server's counts) to the
    store (gNMI Get) and to every listener (dial-out, OTLP...), on change only."""
    from agent import engine as engine_mod
    from agent.engine import Engine

    monkeypatch.setattr(engine_mod, "HEALTH_PERIOD_S", 0.02)  # every pass, not every 5 s
    leaf = (Container(SWTEL_ORIGIN, "/agent/server/results/result[code=OK]/state"), "count")

    class Listener:
        name = "fake"
        count = 1

        def __init__(self) -> None:
            self.seen: list[StateUpdate] = []

        def start(self, store):
            pass

        def stop(self, timeout):
            pass

        def health_values(self):
            return [(*leaf, self.count)]

        def on_batch(self, batch):
            pass

        def on_state(self, updates):
            self.seen.extend(u for u in updates if (u.container, u.leaf) == leaf)

        def on_delete(self, ts_ns, containers):
            pass
    listener = Listener()
    cfg = config.parse("interval: 20ms\nsources: {netdev: {interfaces: [lo], exclude: []}, ethtool: {enabled: false}, "
                       f"system: {{enabled: false}}}}\ncontrol: {{socket: {tmp_path}/s.sock, group: null}}\n")
    engine = Engine(cfg, [listener])
    engine.start()
    try:
        deadline = time.monotonic() + 30
        while len(listener.seen) < 1:
            assert time.monotonic() < deadline, "never published"
            time.sleep(0.01)
        listener.count = 2
        while len(listener.seen) < 2:
            assert time.monotonic() < deadline, "the change never published"
            time.sleep(0.01)
        assert [u.value for u in listener.seen] == [1, 2]  # on change only: no repeats of 1
        assert any((u.container, u.leaf, u.value) == (*leaf, 2) for u in engine.store.states())
    finally:
        engine.stop(5)


def test_sighup_reload_applies_a_changed_policy_to_the_running_server(files, tmp_path):
    """The agent's reload (what SIGHUP runs): a changed policy file takes effect on the same
    server (no restart); a broken one is rejected with the reload and the last one stays."""
    from agent import runner
    from tests.gnmi_helpers import free_port

    policy = tmp_path / "authz.json"
    policy.write_text(json.dumps(POLICY))
    port = free_port()
    path = tmp_path / "swtel.yaml"
    path.write_text(
        "interval: 50ms\nsources: {netdev: {interfaces: [lo], exclude: []}, ethtool: {enabled: false}, "
        "system: {enabled: false}}\ncontrol: {enabled: false}\n"
        f"exporters:\n  server: {{listen: '127.0.0.1:{port}', insecure: true, users_file: {files['users']}, "
        f"authz: {{policy_file: {policy}}}}}\n")
    agent = runner.Agent(config.load(str(path)))
    agent.start()
    stub = gnmi_pb2_grpc.gNMIStub(grpc.insecure_channel(f"127.0.0.1:{port}"))
    guest = [("username", "guest"), ("password", "guest-pw")]

    def caps():
        return _code(lambda: stub.Capabilities(gnmi_pb2.CapabilityRequest(), metadata=guest, timeout=5))[0]
    try:
        server = agent.exporters["server"]
        assert caps() == DENIED
        policy.write_text(json.dumps({**POLICY, "allow_rules": [{"name": "everyone"}]}))
        assert agent.reload()
        deadline = time.monotonic() + 30
        while caps() != OK:  # applied on the tick thread at its next pass
            assert time.monotonic() < deadline, "the new policy never applied"
            time.sleep(0.02)
        assert agent.exporters["server"] is server  # the same server: streams stay open
        assert server.status()["authz"]["policy"] == "leaf01-authz"
        policy.write_text('{"name": "x"}')
        assert not agent.reload()
        assert "allow_rules is required" in agent.last_reload["error"]
        assert caps() == OK
    finally:
        agent.shutdown()
