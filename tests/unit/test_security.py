"""Least privilege at the edges: who may talk to the control socket, and which plaintext or
secret-leaking settings a config may not have."""

from __future__ import annotations

from pathlib import Path

import pytest

from agent import config
from agent.config import ConfigError

ROOT = Path(__file__).resolve().parents[2]
STATUS_REQUEST = bytes([0x81, 0xA3]) + b"cmd" + bytes([0xA6]) + b"status"  # msgpack {"cmd": "status"}


def _problems(text: str) -> list[str]:
    with pytest.raises(ConfigError) as info:
        config.parse(text)
    return info.value.problems


@pytest.mark.parametrize("listen", ["0.0.0.0:50051", "192.0.2.1:50051", "[2001:db8::1]:50051", "switch1:50051"])
def test_plaintext_server_on_a_reachable_address_is_refused(listen):
    problems = _problems(f"exporters:\n  server: {{listen: '{listen}', insecure: true}}\n")
    assert any("plaintext gNMI (insecure: true)" in p and "insecure_remote: true" in p for p in problems), problems


@pytest.mark.parametrize("listen", ["127.0.0.1:50051", "127.0.0.2:50051", "[::1]:50051", "localhost:50051"])
def test_plaintext_server_on_loopback_is_allowed(listen):
    config.parse(f"exporters:\n  server: {{listen: '{listen}', insecure: true}}\n")


def test_plaintext_server_on_a_reachable_address_when_explicitly_allowed():
    config.parse("exporters:\n  server: {listen: '0.0.0.0:50051', insecure: true, insecure_remote: true, "
                 "allow_anonymous: true}\n")


def test_dialout_is_tls_unless_insecure():
    """No TLS files given still means TLS (the system's CAs), never plaintext."""
    from agent.exporters.dialout import DialoutExporter

    cfg = config.parse("exporters:\n  dialout: [{address: '192.0.2.10:57400'}]\n")
    assert DialoutExporter(cfg.exporters.dialout[0], "t").status()["tls"] is True
    cfg = config.parse("exporters:\n  dialout: [{address: '192.0.2.10:57400', insecure: true, "
                       "insecure_remote: true}]\n")
    assert DialoutExporter(cfg.exporters.dialout[0], "t").status()["tls"] is False


@pytest.mark.parametrize("mode,ok", [(0o600, True), (0o640, True), (0o644, False), (0o604, False)])
def test_password_file_readable_by_others_is_refused(tmp_path, mode, ok):
    from agent import credentials

    pw = tmp_path / "pw"
    credentials.write_user(str(pw), "u", "secret")
    pw.chmod(mode)
    text = f"exporters:\n  server: {{listen: '127.0.0.1:50051', insecure: true, username: u, password_file: {pw}}}\n"
    if ok:
        config.parse(text)
    else:
        problems = _problems(text)
        assert problems == [f"exporters.server.password_file: readable by other users (mode {mode:04o}); "
                            "chmod 0640 (group swtel) or 0600"]




# ---------------------------------------------------------------- exposure defaults (issue 33, item 3)


@pytest.fixture
def users_file(tmp_path):
    from agent import credentials

    path = tmp_path / "users"
    credentials.write_user(str(path), "nvue", "pw")
    return path


@pytest.fixture
def tls_files(tmp_path):
    from tests.gnmi_helpers import make_pki

    pki = make_pki(tmp_path / "pki")
    return f"tls: {{cert: {pki.server_cert}, key: {pki.server_key}}}", pki


@pytest.mark.parametrize("listen", ["0.0.0.0:50051", "192.0.2.1:50051", "[2001:db8::1]:50051", "switch1:50051"])
def test_an_anonymous_server_on_a_reachable_address_is_refused(tls_files, listen):
    tls, _ = tls_files
    host = listen.rpartition(":")[0].strip("[]")
    assert _problems(f"exporters:\n  server: {{listen: '{listen}', {tls}}}\n") == [
        f"exporters.server: listens on {host}, which other hosts can reach, without client authentication "
        "(anyone there could read every counter): set users_file, tls.ca (mTLS), or allow_anonymous: true"]


def test_a_reachable_server_with_client_authentication_or_the_opt_in(tls_files, users_file):
    tls, pki = tls_files
    config.parse(f"exporters:\n  server: {{listen: '0.0.0.0:50051', {tls}, users_file: {users_file}}}\n")
    config.parse(f"exporters:\n  server: {{listen: '0.0.0.0:50051', tls: {{cert: {pki.server_cert}, "
                 f"key: {pki.server_key}, ca: {pki.ca}}}}}\n")
    config.parse(f"exporters:\n  server: {{listen: '0.0.0.0:50051', {tls}, allow_anonymous: true}}\n")
    config.parse(f"exporters:\n  server: {{listen: '127.0.0.1:50051', {tls}}}\n")  # loopback: this host only


def test_status_shows_an_anonymous_server(users_file):
    from agent.config import HostPort
    from agent.exporters.server import GnmiServer, ServerConfig
    from agent.store import Store

    for kw, anonymous in (({}, True), ({"users_file": str(users_file)}, False)):
        srv = GnmiServer(ServerConfig(listen=HostPort("127.0.0.1:0"), insecure=True, **kw), "t")
        srv.start(Store())
        try:
            assert srv.status()["anonymous"] is anonymous
        finally:
            srv.stop(1)


def test_passwords_never_reach_a_plaintext_server_off_loopback(users_file):
    problems = _problems(f"exporters:\n  server: {{listen: '0.0.0.0:50051', insecure: true, insecure_remote: true, "
                         f"users_file: {users_file}}}\n")
    assert problems == [
        "exporters.server.listen: users' passwords would travel in plaintext on 0.0.0.0, which other hosts can "
        "reach: use TLS (credentials never go in clear beyond loopback, whatever insecure_remote says)"]
    config.parse(f"exporters:\n  server: {{listen: '127.0.0.1:50051', insecure: true, users_file: {users_file}}}\n")


@pytest.fixture
def pw(tmp_path):
    path = tmp_path / "pw"
    path.write_text("secret\n")
    path.chmod(0o600)
    return path


def test_dialout_with_a_password_off_loopback_is_refused_without_tls_whatever_the_opt_in(pw):
    for opt_in in ("", ", insecure_remote: true"):
        problems = _problems(f"exporters:\n  dialout: [{{address: '192.0.2.10:57400', insecure: true, username: u, "
                             f"password_file: {pw}{opt_in}}}]\n")
        assert problems == [
            "exporters.dialout[0].address: username and password_file would travel in plaintext to 192.0.2.10, "
            "not a loopback address: use TLS (credentials never go in clear beyond loopback, whatever "
            "insecure_remote says)"]
    # over TLS, or plaintext on loopback, it may
    config.parse(f"exporters:\n  dialout: [{{address: '192.0.2.10:57400', username: u, password_file: {pw}}}]\n")
    config.parse(f"exporters:\n  dialout: [{{address: '127.0.0.1:57400', insecure: true, username: u, "
                 f"password_file: {pw}}}]\n")


TUNNEL = "{address: tunnel.example, port: 57401, insecure: true%s}"


@pytest.mark.parametrize("section,where,what,host", [
    ("dialout: [{address: '192.0.2.10:57400', insecure: true%s}]", "dialout[0].address", "gNMI dial-out "
     "(insecure: true)", "192.0.2.10"),
    (f"tunnel: [{TUNNEL}]", "tunnel[0].address", "tunnel (insecure: true), which carries the gNMI service,",
     "tunnel.example"),
    ("otlp: {endpoint: '[2001:db8::5]:4317', insecure: true%s}", "otlp.endpoint", "OTLP (insecure: true)",
     "2001:db8::5"),
])
def test_one_plaintext_rule_for_every_exporter(section, where, what, host):
    """Plaintext to a host other than loopback needs insecure_remote: true, worded alike everywhere."""
    assert _problems(f"exporters:\n  {section % ''}\n") == [
        f"exporters.{where}: plaintext {what} to {host}, not a loopback address: use TLS, "
        "or set insecure_remote: true"]
    config.parse(f"exporters:\n  {section % ', insecure_remote: true'}\n")
    config.parse(f"exporters:\n  {section.replace(host, '::1' if ':' in host else '127.0.0.1') % ''}\n")


# ---------------------------------------------------------------- one secret reader (issue 33, item 7)


def test_every_secret_is_read_by_one_reader_with_one_rule(tmp_path):
    """Dial-out's password, remote write's password and token: the same size bound, mode
    check and whitespace rule (surrounding whitespace stripped), the same refusals."""
    from agent.exporters import dialout, remote_write
    from agent.exporters.base import SecretError

    f = tmp_path / "secret"
    f.write_text("\t s3cret \r\n")
    f.chmod(0o600)
    assert dialout.read_password(str(f)) == remote_write.read_secret(str(f)) == "s3cret"
    for mode, content, fragment in [(0o644, "s3cret\n", "readable by other users (mode 0644)"),
                                    (0o600, "\n\n", "empty (or only whitespace)"),
                                    (0o600, "x" * 70_000, "larger than 65536 bytes"),
                                    (0o600, "pässword", "printable ASCII only")]:
        f.write_text(content)
        f.chmod(mode)
        with pytest.raises(dialout.CredentialsError, match=fragment.replace("(", r"\(").replace(")", r"\)")):
            dialout.read_password(str(f))
        with pytest.raises(SecretError, match=fragment.replace("(", r"\(").replace(")", r"\)")):
            remote_write.read_secret(str(f))


@pytest.mark.parametrize("content", ["", "\n", "  \n\n"])
def test_validate_refuses_an_empty_dialout_password_file(tmp_path, content):
    pw = tmp_path / "pw"
    pw.write_text(content)
    pw.chmod(0o600)
    assert _problems(f"exporters:\n  dialout: [{{address: '127.0.0.1:57400', insecure: true, username: u, "
                     f"password_file: {pw}}}]\n") == [
        "exporters.dialout[0].password_file: empty (or only whitespace)"]


def test_a_tls_key_other_users_can_read_is_refused_by_validate_and_at_start(tmp_path):
    from agent.config import HostPort, ServerTls
    from agent.exporters.server import GnmiServer, ServerConfig
    from agent.store import Store
    from tests.gnmi_helpers import make_pki

    pki = make_pki(tmp_path / "pki")
    pki.server_key.chmod(0o644)
    problems = _problems(f"exporters:\n  server: {{listen: '127.0.0.1:50051', tls: {{cert: {pki.server_cert}, "
                         f"key: {pki.server_key}}}}}\n")
    assert problems == ["exporters.server.tls.key: readable by other users (mode 0644); "
                        "chmod 0640 (group swtel) or 0600"]
    srv = GnmiServer(ServerConfig(listen=HostPort("127.0.0.1:0"),
                                  tls=ServerTls(cert=str(pki.server_cert), key=str(pki.server_key))), "t")
    with pytest.raises(RuntimeError, match=r"key .*: readable by other users \(mode 0644\)"):
        srv.start(Store())
