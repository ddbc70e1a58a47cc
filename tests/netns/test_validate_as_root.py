"""`swtel validate` run as root names the files the service's user cannot read (issue 38,
item 4): root reads everything, so without this it says OK where the unit then fails."""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from tests.gnmi_helpers import make_pki

pytestmark = pytest.mark.root
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def open_dir():
    """A directory every user can search (pytest's tmp_path sits in root's 0700 one)."""
    path = Path(tempfile.mkdtemp(prefix="swtel-validate-"))
    os.chmod(path, 0o755)
    yield path
    shutil.rmtree(path)


def test_a_key_only_root_can_read_is_named(open_dir):
    user = pwd.getpwnam("nobody")
    tmp_path = open_dir
    home = tmp_path / "pki"
    pki = make_pki(home)
    # the directory world-searchable, the certificate world-readable, the key root's alone
    os.chmod(home, 0o755)
    os.chmod(pki.server_cert, 0o644)
    os.chmod(pki.server_key, 0o600)
    f = tmp_path / "s.yaml"
    f.write_text(f"exporters:\n  server:\n    listen: 127.0.0.1:50053\n"
                 f"    tls: {{cert: {pki.server_cert}, key: {pki.server_key}}}\n")
    env = dict(os.environ, PYTHONPATH=str(REPO))
    r = subprocess.run([sys.executable, "-m", "agent", "validate", "--user", user.pw_name, str(f)],
                       capture_output=True, text=True, env=env, timeout=60, cwd=REPO)
    assert r.returncode == 0, r.stderr
    assert (f"warning: exporters.server.tls.key: user nobody (the service's) cannot read "
            f"{pki.server_key}: Permission denied") in r.stderr
    assert "tls.cert" not in r.stderr  # the readable one is not named
    # readable through the user's group (a key others can read is refused by the loader)
    os.chown(pki.server_key, 0, user.pw_gid)
    os.chmod(pki.server_key, 0o640)
    r = subprocess.run([sys.executable, "-m", "agent", "validate", "--user", user.pw_name, str(f)],
                       capture_output=True, text=True, env=env, timeout=60, cwd=REPO)
    assert r.returncode == 0 and "cannot read" not in r.stderr, r.stderr
