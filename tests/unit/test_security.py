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
    config.parse("exporters:\n  server: {listen: '0.0.0.0:50051', insecure: true, insecure_remote: true}\n")


def test_dialout_is_tls_unless_insecure():
    """No TLS files given still means TLS (the system's CAs), never plaintext."""
    from agent.exporters.dialout import DialoutExporter

    cfg = config.parse("exporters:\n  dialout: [{address: '192.0.2.10:57400'}]\n")
    assert DialoutExporter(cfg.exporters.dialout[0], "t").status()["tls"] is True
    cfg = config.parse("exporters:\n  dialout: [{address: '192.0.2.10:57400', insecure: true}]\n")
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


