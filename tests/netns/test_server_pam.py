"""The gNMI server's PAM user source (issue 33, item 1) against a real local account: the test
makes one (useradd, chpasswd) and a PAM service file of its own (pam_unix), runs the server
over TLS and calls it with pygnmi. Root: it adds a user and writes /etc/pam.d."""

from __future__ import annotations

import secrets
import subprocess
from pathlib import Path

import grpc
import pytest
from pygnmi.client import gNMIclient, gNMIException

from agent import config
from agent.config import ConfigError, HostPort, ServerTls
from agent.exporters.server import GnmiServer, ServerConfig
from agent.store import Store
from tests.gnmi_helpers import make_pki

pytestmark = [pytest.mark.root, pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")]


@pytest.fixture(scope="module")
def account():
    """A local account and a PAM service that checks it with pam_unix (nodelay: the test's
    wrong passwords need not wait pam_unix's 2 s)."""
    name = f"swteltest{secrets.token_hex(3)}"
    password = "Pa55 " + secrets.token_hex(8)
    service = f"swtel-test-{secrets.token_hex(3)}"
    pam_file = Path("/etc/pam.d") / service
    subprocess.run(["useradd", "--no-create-home", "--shell", "/usr/sbin/nologin", name], check=True)
    try:
        subprocess.run(["chpasswd"], input=f"{name}:{password}\n", text=True, check=True)
        pam_file.write_text("auth    required pam_unix.so nodelay\naccount required pam_unix.so\n")
        yield name, password, service
    finally:
        pam_file.unlink(missing_ok=True)
        subprocess.run(["userdel", name], check=False)


def _code(fn) -> tuple[grpc.StatusCode, str]:
    try:
        fn()
    except gNMIException as exc:
        return exc.orig_exc.code(), exc.orig_exc.details()
    return grpc.StatusCode.OK, ""


def test_pam_users_over_tls(account, tmp_path):
    name, password, service = account
    pki = make_pki(tmp_path / "pki")
    srv = GnmiServer(ServerConfig(listen=HostPort("127.0.0.1:0"), pam_service=service,
                                  tls=ServerTls(cert=str(pki.server_cert), key=str(pki.server_key))), "leaf01")
    srv.start(Store())

    def caps(user: str, pw: str):
        def call():
            with gNMIclient(target=("127.0.0.1", srv.port), path_cert=str(pki.ca), username=user, password=pw,
                            gnmi_timeout=10) as gc:
                gc.capabilities()
        return call

    try:
        assert _code(caps(name, password)) == (grpc.StatusCode.OK, "")
        assert _code(caps(name, password)) == (grpc.StatusCode.OK, "")  # remembered: no second PAM call
        for user, pw in ((name, "wrong"), ("root", password), ("nosuchuser" + name, password)):
            srv._auth.throttle.succeeded("127.0.0.1")  # each case on its own, not slowed by the last
            assert _code(caps(user, pw)) == (grpc.StatusCode.UNAUTHENTICATED, "bad username or password")
        srv._auth.throttle.succeeded("127.0.0.1")
        assert _code(caps(name, "")) == (grpc.StatusCode.UNAUTHENTICATED, "an empty password")
        assert srv.status()["auth_failures"] == 4 and srv.status()["anonymous"] is False
    finally:
        srv.stop(1)


def test_validate_checks_the_pam_service(account, tmp_path):
    _, _, service = account
    pki = make_pki(tmp_path / "pki")
    tls = f"tls: {{cert: {pki.server_cert}, key: {pki.server_key}}}"
    # a PAM user source is client authentication: a reachable address needs no allow_anonymous
    config.parse(f"exporters:\n  server: {{listen: '0.0.0.0:50051', {tls}, pam_service: {service}}}\n")
    for bad, problem in (("no-such-service-x", "no PAM service file /etc/pam.d/no-such-service-x"),
                         ("../etc/passwd", "expected a PAM service name")):
        with pytest.raises(ConfigError) as info:
            config.parse(f"exporters:\n  server: {{listen: '127.0.0.1:50051', insecure: true, pam_service: '{bad}'}}\n")
        assert any(problem in p for p in info.value.problems), info.value.problems
    with pytest.raises(ConfigError) as info:
        config.parse(f"exporters:\n  server: {{listen: '127.0.0.1:50051', insecure: true, pam_service: {service}, "
                     "username: u}\n")
    assert "exporters.server: one user source: users_file, username/password_file or pam_service" in \
        info.value.problems
