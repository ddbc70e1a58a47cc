"""`swtel validate` catches the operator's mistakes before the agent meets them (issue 38,
item 4): a certificate and a key that are not a pair, a duration written as a bare number
that reads like milliseconds, and `-c` taken as run, status and top take it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from agent import config
from agent.control import validate
from tests.gnmi_helpers import make_pki

REPO = Path(__file__).resolve().parents[2]


def run_validate(*args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(REPO))
    return subprocess.run([sys.executable, "-m", "agent", "validate", *args],
                          capture_output=True, text=True, env=env, timeout=60, cwd=REPO)


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    return make_pki(tmp_path_factory.mktemp("pki"))


def server_yaml(path: Path, cert: Path, key: Path) -> Path:
    path.write_text(f"exporters:\n  server:\n    listen: 127.0.0.1:50053\n"
                    f"    tls: {{cert: {cert}, key: {key}}}\n")
    return path


def test_a_key_that_is_not_the_certificates_is_refused(tmp_path, pki):
    f = server_yaml(tmp_path / "s.yaml", pki.server_cert, pki.client_key)
    r = run_validate(str(f))
    assert r.returncode == 1, r.stderr
    assert "exporters.server.tls.key: key does not match certificate" in r.stderr
    assert "OK" not in r.stdout


def test_the_pair_passes(tmp_path, pki):
    f = server_yaml(tmp_path / "s.yaml", pki.server_cert, pki.server_key)
    r = run_validate(str(f))
    assert (r.returncode, r.stdout.strip()) == (0, "OK"), r.stderr


def test_a_dialout_client_pair_is_checked_too(tmp_path, pki):
    f = tmp_path / "d.yaml"
    f.write_text(f"exporters:\n  dialout:\n    - address: 127.0.0.1:57400\n"
                 f"      tls: {{ca: {pki.ca}, cert: {pki.client_cert}, key: {pki.server_key}}}\n")
    with pytest.raises(config.ConfigError) as err:
        config.load(str(f))
    assert any("exporters.dialout[0].tls.key: key does not match certificate" in p
               for p in err.value.problems), err.value.problems


def test_an_encrypted_key_is_named_not_prompted_for(tmp_path, pki):
    from cryptography.hazmat.primitives import serialization

    key = serialization.load_pem_private_key(pki.server_key.read_bytes(), password=None)
    locked = tmp_path / "locked.key"
    locked.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                         serialization.BestAvailableEncryption(b"secret")))
    locked.chmod(0o600)  # a key others can read is refused first (agent/credentials.py)
    f = server_yaml(tmp_path / "s.yaml", pki.server_cert, locked)
    r = run_validate(str(f))
    assert r.returncode == 1 and "key is encrypted" in r.stderr, r.stderr


def test_dash_c_is_taken(tmp_path):
    f = tmp_path / "ok.yaml"
    f.write_text("interval: 250ms\n")
    r = run_validate("-c", str(f))
    assert (r.returncode, r.stdout.strip()) == (0, "OK"), r.stderr
    bad = tmp_path / "bad.yaml"
    bad.write_text("interval: never\n")
    r = run_validate("-c", str(bad))
    assert r.returncode == 1 and "interval" in r.stderr
    r = run_validate(str(f), "-c", str(bad))
    assert r.returncode == 2 and "name one" in r.stderr


@pytest.mark.parametrize("text, where, number", [
    ("interval: 100\n", "interval", "100"),
    ("sources:\n  system: {interval: 250}\n", "sources.system.interval", "250"),
    ("exporters:\n  dialout:\n    - address: 127.0.0.1:57400\n      insecure: true\n      heartbeat: 30\n",
     "exporters.dialout[0].heartbeat", "30"),
])
def test_a_bare_number_of_seconds_is_questioned(tmp_path, text, where, number):
    f = tmp_path / "c.yaml"
    f.write_text(text)
    found = validate.bare_durations(config.load(str(f)))
    assert found == [f"{where}: {number} is {number} seconds; did you mean {number}ms? "
                     f"(write {number}s to keep seconds and silence this)"]
    r = run_validate(str(f))
    assert r.returncode == 0 and f"warning: {where}: {number} is {number} seconds" in r.stderr


@pytest.mark.parametrize("text", ["interval: 2\n", "interval: 100ms\n", "interval: 100s\n",
                                  "interval: 0.5\n"])
def test_small_numbers_and_units_are_not_questioned(tmp_path, text):
    f = tmp_path / "c.yaml"
    f.write_text(text)
    assert validate.bare_durations(config.load(str(f))) == []


def test_config_files_lists_the_files_the_agent_reads(tmp_path, pki):
    f = server_yaml(tmp_path / "s.yaml", pki.server_cert, pki.server_key)
    files = dict(validate.config_files(config.load(str(f))))
    assert files["exporters.server.tls.cert"] == str(pki.server_cert)
    assert files["exporters.server.tls.key"] == str(pki.server_key)
