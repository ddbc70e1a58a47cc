"""Capabilities, checked by processes that really lack one (issue 34, item 6): ``swtel
validate`` run without CAP_NET_ADMIN (dropped from its bounding set by setpriv) warns for an
enabled devlink source, run as root it speaks for the units, and the agent run so lists it in
status (needs root: setpriv, a namespace). The venv's python is not executable by another user
here, so the process keeps uid 0 and loses the capability itself."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import status_doc
from tests.namespaces import AgentProcess, delete_namespace, new_namespace, sh

ROOT = Path(__file__).resolve().parents[2]
WITHOUT_NET_ADMIN = ["setpriv", "--bounding-set=-net_admin", "--inh-caps=-net_admin", "--"]
WARNING = "warning: sources.devlink: needs CAP_NET_ADMIN, which this process does not have"

pytestmark = pytest.mark.root


def _config(workdir: Path) -> Path:
    path = workdir / "swtel.yaml"
    path.write_text(
        "interval: 100ms\n"
        "sources: {devlink: {enabled: true}, netdev: {enabled: false}, ethtool: {enabled: false}}\n"
        f"exporters:\n  jsonl: {{path: {workdir / 'out.jsonl'}}}\n"
        f"control: {{socket: {workdir / 'swtel.sock'}, group: null}}\n")
    return path


def _validate(prefix: list[str], path: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([*prefix, sys.executable, "-m", "agent", "validate", str(path)], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=60)


def test_validate_without_cap_net_admin_says_so(tmp_path):
    from agent import caps

    path = _config(tmp_path)
    out = _validate(WITHOUT_NET_ADMIN, path)
    assert out.returncode == 0 and out.stdout.strip() == "OK", out.stderr
    assert WARNING in out.stderr and "/usr/share/swtel/systemd/devlink-caps.conf" in out.stderr, out.stderr
    # as root with every capability: not this process's but the units' (user swtel) question
    out = _validate([], path)
    assert out.returncode == 0 and WARNING not in out.stderr, out.stderr
    assert "root has it, but swtel.service and swtel@.service" in out.stderr or caps.unit_grants(
        caps.CAP_NET_ADMIN), out.stderr


def test_the_agent_without_cap_net_admin_lists_it_in_status(tmp_path):
    ns = new_namespace("c")
    sh("ip", "link", "add", "swp1", "type", "veth", "peer", "name", "swp2", ns=ns)
    path = _config(tmp_path)
    agent = AgentProcess(ns, path.read_text(), tmp_path, prefix=WITHOUT_NET_ADMIN)
    try:
        agent.wait_ready()
        devlink = agent.wait_for(lambda: (s := status_doc(tmp_path)["sources"]["devlink"])["reads"] and s,
                                 what="a devlink poll")
        assert devlink["missing_capabilities"] == ["CAP_NET_ADMIN"] and devlink["errors"] == 0
        # a namespace with veth has no shared buffer: nothing to read, so no fault (docs/devlink.md)
        assert devlink["fault"] is None or devlink["fault"].startswith("needs CAP_NET_ADMIN")
    finally:
        assert agent.stop() == 0
        delete_namespace(ns)
