"""Who may call the gNMI dial-in server (issue 33, item 1): the credentials file of salted
hashes, the password sources (metadata, Basic header), the client certificate's identity
under mTLS, the per-peer slow-down of failed logins, and what validate refuses.

The matrix runs pygnmi (and a raw stub where pygnmi cannot send the case) over TLS against a
real server; every case gets exactly the code and message docs/server.md documents. The
slow-down's clock is the test's: no case waits for it.
"""

from __future__ import annotations

import base64
import io
import os
import re
import subprocess
import sys
from pathlib import Path

import grpc
import pytest
from pygnmi.client import gNMIclient, gNMIException
from pygnmi.spec.v080 import gnmi_pb2, gnmi_pb2_grpc

from agent import config, credentials
from agent.config import ConfigError, HostPort, ServerTls
from agent.credentials import LoginThrottle, SecretError
from agent.exporters.server import GnmiServer, ServerConfig
from agent.gnmi.auth import Authenticator, AuthFailure, peer_host
from agent.gnmi.auth import credentials as creds_of
from agent.store import Store
from tests.gnmi_helpers import CA, make_pki

ROOT = Path(__file__).resolve().parents[2]
TARGET = "leaf01"
UNAUTH = grpc.StatusCode.UNAUTHENTICATED

pytestmark = pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="module")
def users_file(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("users") / "gnmi-users"
    credentials.write_user(str(path), "nvue", "s3cret pass")
    credentials.write_user(str(path), "grafana", "other")
    return path


def _server(cfg: ServerConfig, clock: Clock | None = None) -> GnmiServer:
    srv = GnmiServer(cfg, TARGET, min_interval_s=0.05, clock=clock or Clock())
    srv.start(Store())
    return srv


def _code_and_details(fn) -> tuple[grpc.StatusCode, str]:
    try:
        fn()
    except gNMIException as exc:
        return exc.orig_exc.code(), exc.orig_exc.details()
    except grpc.RpcError as exc:
        return exc.code(), exc.details()
    return grpc.StatusCode.OK, ""


# ---------------------------------------------------------------- the credentials file


def test_hash_round_trip_and_salt():
    a, b = credentials.hash_password("pw"), credentials.hash_password("pw")
    assert a != b and a.startswith("$scrypt$ln=14,r=8,p=1$")  # a fresh salt each time
    entry = credentials.Entry.parse(a)
    assert entry.verify(b"pw") and not entry.verify(b"pW") and not entry.verify(b"")


@pytest.mark.parametrize("text,fragment", [
    ("nvue\n", "line 1: expected name:$scrypt$"),
    ("# c\n\nnvue:plaintext\n", "line 3: not a $scrypt$"),
    ("nvue:$scrypt$ln=40,r=8,p=1$c2FsdHNhbHQ$aGFzaGhhc2hoYXNoaGFzaA\n", "out of range"),
    ("a b:$scrypt$ln=1,r=1,p=1$c2FsdHNhbHQ$aGFzaGhhc2hoYXNoaGFzaA\n", "line 1: expected name"),
    ("# only a comment\n", "no user in it"),
])
def test_users_file_errors_name_the_line(text, fragment):
    with pytest.raises(SecretError) as info:
        credentials.parse_users(text, "/f")
    assert fragment in str(info.value)
    entry = credentials.hash_password("x", ln=1, r=1)
    with pytest.raises(SecretError, match="listed twice"):
        credentials.parse_users(f"u:{entry}\nu:{entry}\n", "/f")


def test_write_user_adds_replaces_and_keeps_the_others(tmp_path):
    path = tmp_path / "users"
    assert credentials.write_user(str(path), "a", "one") is False
    assert path.stat().st_mode & 0o777 == 0o640
    path.write_text(path.read_text() + "# a comment\n")
    assert credentials.write_user(str(path), "b", "two") is False
    assert credentials.write_user(str(path), "a", "uno") is True
    text = path.read_text()
    # hashes only: each user's entry parses as $scrypt$..., and no field is a password (a
    # search of the whole text would find "two" inside a random base64 salt or hash now and then)
    lines = [line for line in text.splitlines() if line and not line.startswith("#")]
    assert sorted(line.split(":", 1)[0] for line in lines) == ["a", "b"]
    for line in lines:
        credentials.Entry.parse(line.split(":", 1)[1])
        assert not {"one", "uno", "two"} & set(re.split(r"[:$,]", line)), line
    assert "# a comment" in text
    users = credentials.Users(str(path))
    assert users.check("a", b"uno") and not users.check("a", b"one") and users.check("b", b"two")
    assert not users.check("nobody", b"uno")


def test_users_file_is_reread_when_it_changes(tmp_path):
    path = tmp_path / "users"
    credentials.write_user(str(path), "a", "one")
    users = credentials.Users(str(path))
    assert users.check("a", b"one")  # now remembered
    credentials.write_user(str(path), "a", "two")
    assert not users.check("a", b"one") and users.check("a", b"two")
    path.write_text("garbage\n")  # a broken edit: the last good file stays in force
    path.chmod(0o640)
    assert users.check("a", b"two")


def test_swtel_passwd_writes_a_hash_from_stdin(tmp_path):
    path = tmp_path / "gnmi-users"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    run = subprocess.run([sys.executable, "-m", "agent", "passwd", "--stdin", str(path), "nvue"],
                         input="pa ss\n", capture_output=True, text=True, env=env, timeout=60)
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == f"added nvue in {path}"
    assert "pa ss" not in path.read_text()
    assert credentials.Users(str(path)).check("nvue", b"pa ss")
    empty = subprocess.run([sys.executable, "-m", "agent", "passwd", "--stdin", str(path), "x"],
                           input="\n", capture_output=True, text=True, env=env, timeout=60)
    assert empty.returncode == 1 and "empty password" in empty.stderr


# ---------------------------------------------------------------- the one secret reader


def test_read_secret_rules(tmp_path):
    f = tmp_path / "s"
    f.write_bytes(b"  tok en \r\n\n")
    f.chmod(0o600)
    assert credentials.read_secret(str(f)) == b"tok en"  # surrounding whitespace, never inner
    f.chmod(0o644)
    with pytest.raises(SecretError, match=r"readable by other users \(mode 0644\)"):
        credentials.read_secret(str(f))
    f.chmod(0o600)
    f.write_bytes(b"x" * (credentials.MAX_SECRET_BYTES + 1))
    with pytest.raises(SecretError, match="larger than"):
        credentials.read_secret(str(f))
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo, 0o600)
    with pytest.raises(SecretError, match="not a regular file"):  # and never blocks
        credentials.read_secret(str(fifo))
    with pytest.raises(SecretError, match="no such file"):
        credentials.read_secret(str(tmp_path / "missing"))


# ---------------------------------------------------------------- the slow-down and the authenticator (no gRPC)


def test_login_throttle_doubles_per_failure_per_peer_and_forgets():
    clock = Clock()
    t = LoginThrottle(base_s=0.5, cap_s=2.0, forget_s=60, clock=clock)
    assert t.wait_s("a") == 0
    assert [t.failed("a") for _ in range(4)] == [0.5, 1.0, 2.0, 2.0]
    assert t.wait_s("a") == 2.0 and t.wait_s("b") == 0  # per peer
    clock.now += 2.0
    assert t.wait_s("a") == 0
    assert t.failed("a") == 2.0  # still counted: consecutive failures
    clock.now += 61
    assert t.wait_s("a") == 0 and t.failed("a") == 0.5  # forgotten
    t.succeeded("a")
    assert t.wait_s("a") == 0


@pytest.mark.parametrize("meta,expected", [
    ([], (None, None)),
    ([("username", ""), ("password", "")], (None, None)),  # pygnmi without credentials
    ([("username", "u"), ("password", "p")], ("u", b"p")),
    ([("username", "u")], ("u", None)),
    ([("username", "u"), ("password", "")], ("u", b"")),
    ([("authorization", "Basic " + base64.b64encode(b"u:p:q").decode())], ("u", b"p:q")),
    ([("authorization", "basic " + base64.b64encode(b"u:").decode())], ("u", b"")),
    ([("username", "m"), ("password", "x"), ("authorization", "Basic " + base64.b64encode(b"u:p").decode())],
     ("m", b"x")),
])
def test_where_credentials_come_from(meta, expected):
    assert creds_of(meta) == expected


@pytest.mark.parametrize("header,fragment", [
    ("Bearer abc", "only the Basic scheme"), ("Basic !!!", "not base64"),
    ("Basic " + base64.b64encode(b"nocolon").decode(), "not user:password")])
def test_malformed_basic_header(header, fragment):
    with pytest.raises(AuthFailure, match=fragment):
        creds_of([("authorization", header)])


def test_peer_host():
    assert peer_host("ipv4:10.0.0.1:5555") == "10.0.0.1"
    assert peer_host("ipv6:[2001:db8::1]:5555") == "2001:db8::1"
    assert peer_host("unix:/x") == "unix:/x"


def test_certificate_identity_cn_or_san():
    ctx = {"x509_common_name": [b"grafana"], "x509_subject_alternative_name": [b"mon.example", b"10.0.0.1"]}
    assert Authenticator(None, mtls=True).authenticate("ipv4:1.2.3.4:1", [], ctx).name == "grafana"
    san = Authenticator(None, mtls=True, cert_identity="san").authenticate("ipv4:1.2.3.4:1", [], ctx)
    assert (san.name, san.how) == ("mon.example", "certificate")
    with pytest.raises(AuthFailure, match="carries no SAN"):
        Authenticator(None, mtls=True, cert_identity="san").authenticate(
            "ipv4:1.2.3.4:1", [], {"x509_common_name": [b"x"]})
    anon = Authenticator(None, mtls=False)
    assert anon.anonymous and anon.authenticate("ipv4:1.2.3.4:1", [], {}).how == "anonymous"


# ---------------------------------------------------------------- the matrix, over TLS


@pytest.fixture(scope="module")
def tls_users_server(pki, users_file):
    clock = Clock()
    srv = _server(ServerConfig(listen=HostPort("127.0.0.1:0"), users_file=str(users_file),
                               tls=ServerTls(cert=str(pki.server_cert), key=str(pki.server_key))), clock)
    srv.test_clock = clock  # type: ignore[attr-defined]
    yield srv
    srv.stop(1)


def _pygnmi(srv: GnmiServer, pki, **kw) -> gNMIclient:
    return gNMIclient(target=("127.0.0.1", srv.port), path_cert=str(pki.ca), gnmi_timeout=5, **kw)


def _stub(srv: GnmiServer, pki, cert: tuple[Path, Path] | None = None) -> gnmi_pb2_grpc.gNMIStub:
    creds = grpc.ssl_channel_credentials(
        pki.ca.read_bytes(), *(None, None) if cert is None else (cert[1].read_bytes(), cert[0].read_bytes()))
    return gnmi_pb2_grpc.gNMIStub(grpc.secure_channel(f"127.0.0.1:{srv.port}", creds))


def _basic(user: str, password: str) -> tuple[str, str]:
    return ("authorization", "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode())


# (name, how the client calls, the code, the message) -- docs/server.md, "Who may call"
MATRIX = [
    ("no credentials", "pygnmi", {}, UNAUTH,
     "credentials required: username and password metadata, or an authorization: Basic header"),
    ("wrong password", "pygnmi", {"username": "nvue", "password": "wrong"}, UNAUTH, "bad username or password"),
    ("unknown user", "pygnmi", {"username": "root", "password": "s3cret pass"}, UNAUTH,
     "bad username or password"),
    ("the username alone", "stub", [("username", "nvue")], UNAUTH, "a username without a password"),
    ("an empty password", "pygnmi", {"username": "nvue", "password": ""}, UNAUTH, "an empty password"),
    ("an empty Basic password", "stub", [_basic("nvue", "")], UNAUTH, "an empty password"),
    ("a Bearer token", "stub", [("authorization", "Bearer x")], UNAUTH,
     "authorization: only the Basic scheme is accepted"),
    ("the right user, metadata", "pygnmi", {"username": "nvue", "password": "s3cret pass"}, grpc.StatusCode.OK, ""),
    ("the right user, Basic header", "stub", [_basic("grafana", "other")], grpc.StatusCode.OK, ""),
]


@pytest.mark.parametrize("case,how,cred,code,message", MATRIX, ids=[m[0] for m in MATRIX])
def test_matrix_over_tls_with_users_file(tls_users_server, pki, case, how, cred, code, message):
    srv = tls_users_server
    srv.test_clock.now += 100  # a case never inherits the last one's slow-down
    before = srv.status()["auth_failures"]
    if how == "pygnmi":
        def call():
            with _pygnmi(srv, pki, **cred) as gc:
                gc.capabilities()
                gc.get(path=["/interfaces"], encoding="proto")
    else:
        def call():
            _stub(srv, pki).Capabilities(gnmi_pb2.CapabilityRequest(), metadata=cred, timeout=5)
    got = _code_and_details(call)
    if code == grpc.StatusCode.OK:
        # Get of an empty store answers NOT_FOUND: past the guard, which is what is asked here
        assert got[0] in (grpc.StatusCode.OK, grpc.StatusCode.NOT_FOUND), got
        assert srv.status()["auth_failures"] == before
    else:
        assert got == (code, message)
        assert srv.status()["auth_failures"] == before + 1
        assert srv.status()["last_error"].endswith(message)
    # Subscribe is refused before its first request is read, alike
    srv.test_clock.now += 100
    stream = _stub(srv, pki).Subscribe(iter(()), metadata=cred if how == "stub" else
                                       [(k, v) for k, v in cred.items()], timeout=5)
    sub = _code_and_details(lambda: next(stream))
    if code == grpc.StatusCode.OK:
        assert sub[0] == grpc.StatusCode.INVALID_ARGUMENT  # past the guard: no SubscriptionList
    else:
        assert sub == (code, message)


def test_a_failed_login_slows_that_peer_not_the_check(tls_users_server, pki):
    """After a failure the peer's next attempt within the delay is refused unchecked (no
    worker sleeps); once the test's clock passes the delay, the right password works."""
    srv = tls_users_server
    clock = srv.test_clock
    clock.now += 100
    stub = _stub(srv, pki)
    right = [("username", "nvue"), ("password", "s3cret pass")]
    wrong = [("username", "nvue"), ("password", "guess")]
    assert _code_and_details(lambda: stub.Capabilities(gnmi_pb2.CapabilityRequest(), metadata=wrong,
                                                       timeout=5))[0] == UNAUTH
    got = _code_and_details(lambda: stub.Capabilities(gnmi_pb2.CapabilityRequest(), metadata=right, timeout=5))
    assert got == (UNAUTH, "too many failed logins from this address: retry in 1 s")
    clock.now += 0.5
    assert stub.Capabilities(gnmi_pb2.CapabilityRequest(), metadata=right, timeout=5).gNMI_version == "0.8.0"
    for _ in range(2):  # consecutive failures double the delay
        clock.now += 100
        stub_fail = _code_and_details(lambda: stub.Capabilities(
            gnmi_pb2.CapabilityRequest(), metadata=wrong, timeout=5))
        assert stub_fail == (UNAUTH, "bad username or password")
    clock.now += 0.9
    assert "retry in" in _code_and_details(lambda: stub.Capabilities(
        gnmi_pb2.CapabilityRequest(), metadata=right, timeout=5))[1]


def test_mtls_names_the_caller_by_its_certificate(pki, tmp_path):
    cfg = ServerConfig(listen=HostPort("127.0.0.1:0"),
                       tls=ServerTls(cert=str(pki.server_cert), key=str(pki.server_key), ca=str(pki.ca)))
    srv = _server(cfg)
    seen = []
    admit = srv.admit
    srv.admit = lambda ctx: seen.append(admit(ctx)) or seen[-1]  # type: ignore[method-assign]
    try:
        with gNMIclient(target=("127.0.0.1", srv.port), path_cert=str(pki.client_cert),
                        path_key=str(pki.client_key), path_root=str(pki.ca), gnmi_timeout=5) as gc:
            assert gc.capabilities()["gnmi_version"] == "0.8.0"
        assert (seen[-1].name, seen[-1].how) == ("swtel-agent", "certificate")
        # a certificate from another CA never completes the handshake
        other = CA.create(tmp_path, "other-ca").issue(tmp_path, "intruder", client=True)
        got = _code_and_details(lambda: _stub(srv, pki, other).Capabilities(
            gnmi_pb2.CapabilityRequest(), timeout=3))
        assert got[0] == grpc.StatusCode.UNAVAILABLE
    finally:
        srv.stop(1)


def test_mtls_with_users_needs_both(pki, users_file):
    cfg = ServerConfig(listen=HostPort("127.0.0.1:0"), users_file=str(users_file),
                       tls=ServerTls(cert=str(pki.server_cert), key=str(pki.server_key), ca=str(pki.ca)))
    srv = _server(cfg)
    try:
        stub = _stub(srv, pki, (pki.client_cert, pki.client_key))
        got = _code_and_details(lambda: stub.Capabilities(gnmi_pb2.CapabilityRequest(), timeout=5))
        assert got[0] == UNAUTH
        srv._auth.throttle.succeeded("127.0.0.1")
        reply = stub.Capabilities(gnmi_pb2.CapabilityRequest(), timeout=5,
                                  metadata=[("username", "nvue"), ("password", "s3cret pass")])
        assert reply.gNMI_version == "0.8.0"
    finally:
        srv.stop(1)


def test_a_password_file_must_hold_the_users_hash_not_the_password(tmp_path):
    plain = tmp_path / "pw"
    plain.write_text("s3cret\n")
    plain.chmod(0o600)
    srv = GnmiServer(ServerConfig(listen=HostPort("127.0.0.1:0"), insecure=True, username="nvue",
                                  password_file=str(plain)), TARGET)
    with pytest.raises(RuntimeError,
                       match="password file .* line 1: expected name:.* plaintext password is never read"):
        srv.start(Store())
    assert srv.status()["state"] == "failed"


# ---------------------------------------------------------------- what validate refuses


def _problems(text: str) -> list[str]:
    with pytest.raises(ConfigError) as info:
        config.parse(text)
    return info.value.problems


LOOP = "listen: '127.0.0.1:50051', insecure: true"


def test_validate_refuses_a_username_without_a_password_source():
    assert _problems(f"exporters:\n  server: {{{LOOP}, username: nvue}}\n") == [
        "exporters.server.username: needs password_file (or use users_file); "
        "a username without a password source would let anyone in"]


@pytest.mark.parametrize("content", ["", "\n", "\n\n  \n"])
def test_validate_refuses_an_empty_or_newline_only_password_file(tmp_path, content):
    pw = tmp_path / "pw"
    pw.write_text(content)
    pw.chmod(0o600)
    problems = _problems(f"exporters:\n  server: {{{LOOP}, username: nvue, password_file: {pw}}}\n")
    assert problems == ["exporters.server.password_file: empty (or only whitespace)"]


def test_validate_refuses_a_plaintext_password_file_and_accepts_the_hash(tmp_path):
    pw = tmp_path / "pw"
    pw.write_text("s3cret\n")
    pw.chmod(0o600)
    text = f"exporters:\n  server: {{{LOOP}, username: nvue, password_file: {pw}}}\n"
    problems = _problems(text)
    assert len(problems) == 1 and "line 1: expected name:$scrypt$" in problems[0], problems
    pw.unlink()
    credentials.write_user(str(pw), "nvue", "s3cret")
    config.parse(text)
    credentials.write_user(str(pw), "nvue", "s3cret")
    other = tmp_path / "other"
    credentials.write_user(str(other), "root", "x")
    problems = _problems(f"exporters:\n  server: {{{LOOP}, username: nvue, password_file: {other}}}\n")
    assert "holds no entry for 'nvue'" in problems[0]


def test_validate_checks_the_users_file(tmp_path):
    users = tmp_path / "users"
    credentials.write_user(str(users), "nvue", "x")
    config.parse(f"exporters:\n  server: {{{LOOP}, users_file: {users}}}\n")
    users.chmod(0o644)
    assert _problems(f"exporters:\n  server: {{{LOOP}, users_file: {users}}}\n") == [
        f"exporters.server.users_file: users file {users}: readable by other users (mode 0644); "
        "chmod 0640 (group swtel) or 0600"]
    users.chmod(0o640)
    problems = _problems(f"exporters:\n  server: {{{LOOP}, users_file: {users}, username: nvue, "
                         f"password_file: {users}}}\n")
    assert "exporters.server: one user source: users_file, username/password_file or pam_service" in problems


def test_swtel_passwd_prompts_twice(monkeypatch, tmp_path, capsys):
    from agent import cli

    answers = iter(["one", "two"])
    monkeypatch.setattr("getpass.getpass", lambda prompt="": next(answers))
    assert cli.main(["passwd", str(tmp_path / "u"), "nvue"]) == 1
    assert "differ" in capsys.readouterr().err and not (tmp_path / "u").exists()
    answers = iter(["same", "same"])
    monkeypatch.setattr(sys, "stdin", io.StringIO(""))
    assert cli.main(["passwd", str(tmp_path / "u"), "nvue"]) == 0
    assert credentials.Users(str(tmp_path / "u")).check("nvue", b"same")


def test_swtel_validate_refuses_the_bypass(tmp_path):
    """The issue's bypass, through the command: a username with no password source, and with a
    newline-only password file, are exit 1 with the line that says why."""
    pw = tmp_path / "pw"
    pw.write_text("\n")
    pw.chmod(0o600)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    for extra, message in (("", "exporters.server.username: needs password_file"),
                           (f", password_file: {pw}", "exporters.server.password_file: empty (or only whitespace)")):
        f = tmp_path / "swtel.yaml"
        f.write_text(f"exporters:\n  server: {{{LOOP}, username: nvue{extra}}}\n")
        r = subprocess.run([sys.executable, "-m", "agent", "validate", str(f)], capture_output=True, text=True,
                           env=env, timeout=60)
        assert r.returncode == 1 and message in r.stdout + r.stderr, (r.stdout, r.stderr)
