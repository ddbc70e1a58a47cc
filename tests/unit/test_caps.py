"""Capabilities (issue 34, item 6): devlink's snapshot needs CAP_NET_ADMIN, the packaged units
grant none unless the packaged drop-in is enabled, and ``swtel validate`` and status say so
plainly when the agent would lack it, instead of counting an EPERM per poll."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml

import agent.plugins  # noqa: F401 - the config sections
from agent import caps, config
from agent.control.client import health_problems
from agent.control.validate import capability_warnings
from agent.engine import PolledSource
from tests.unit.test_devlink import SNAPSHOT, FakeIO, _links, _source

ROOT = Path(__file__).resolve().parents[2]
NET_ADMIN = 1 << caps.CAP_NET_ADMIN
DEVLINK_ON = "sources: {devlink: {enabled: true}}\n"


def test_the_effective_set_is_read_from_proc_status(tmp_path):
    status = tmp_path / "status"
    status.write_text("Name:\tx\nCapInh:\t0000000000000000\nCapEff:\t0000000000001000\nCapBnd:\t000001ffffffffff\n")
    assert caps.effective(str(status)) == NET_ADMIN
    assert caps.effective(str(tmp_path / "none")) is None
    assert isinstance(caps.effective(), int)  # this process's, whatever it holds
    assert caps.missing([caps.CAP_NET_ADMIN], 0) == ["CAP_NET_ADMIN"]
    assert caps.missing([caps.CAP_NET_ADMIN], NET_ADMIN | 1) == []


def test_an_unreadable_set_raises_no_false_alarm(monkeypatch):
    monkeypatch.setattr(caps, "reader", lambda: None)
    assert caps.missing([caps.CAP_NET_ADMIN]) == []


def _units(tmp_path: Path, dropins: dict[str, str] | None = None) -> tuple[str, ...]:
    """An /etc/systemd/system with {drop-in directory: packaged drop-in} copied in as
    devlink-caps.conf, as docs/devlink.md says."""
    base = tmp_path / "system"
    base.mkdir(parents=True)
    for d, name in (dropins or {}).items():
        (base / d).mkdir()
        shutil.copy(ROOT / "systemd" / name, base / d / "devlink-caps.conf")
    return (str(base),)


def test_the_packaged_dropins_grant_cap_net_admin_to_their_units(tmp_path):
    assert caps.unit_grants(caps.CAP_NET_ADMIN, _units(tmp_path)) == {}
    got = caps.unit_grants(caps.CAP_NET_ADMIN, _units(tmp_path / "a", {"swtel.service.d": "devlink-caps.conf"}))
    assert list(got) == ["swtel.service"]
    got = caps.unit_grants(caps.CAP_NET_ADMIN, _units(tmp_path / "b", {"swtel@.service.d": "devlink-caps@.conf"}))
    assert list(got) == ["swtel@.service"]
    # swtel.service's drop-in in the VRF unit does not reach its agent (setpriv clears the set)
    got = caps.unit_grants(caps.CAP_NET_ADMIN, _units(tmp_path / "c", {"swtel@.service.d": "devlink-caps.conf"}))
    assert got == {}
    # the packaged files say what the docs and the hint say: CAP_NET_ADMIN and nothing else
    for name in ("devlink-caps.conf", "devlink-caps@.conf"):
        text = (ROOT / "systemd" / name).read_text()
        assert "CapabilityBoundingSet=CAP_NET_ADMIN\n" in text and "AmbientCapabilities=CAP_NET_ADMIN\n" in text
        assert name in caps.ENABLE_HINT
        assert f"/usr/share/swtel/systemd/{name}" in (ROOT / "debian" / "rules").read_text()
    vrf = (ROOT / "systemd" / "devlink-caps@.conf").read_text()
    unit = (ROOT / "systemd" / "swtel@.service").read_text()
    start = next(line for line in unit.splitlines() if line.startswith("ExecStart="))
    # the same command as the unit's, but setpriv keeps CAP_NET_ADMIN in the agent's ambient set
    assert start.replace("--inh-caps=-all", "--inh-caps=-all,+net_admin --ambient-caps=-all,+net_admin") in vrf


def test_validate_warns_when_this_process_lacks_it():
    cfg = config.parse(DEVLINK_ON)
    got = capability_warnings(cfg, have=0, euid=1000)
    assert len(got) == 1 and got[0].startswith("sources.devlink: needs CAP_NET_ADMIN, which this process does not have")
    assert caps.DROPIN in got[0]
    assert capability_warnings(cfg, have=NET_ADMIN, euid=1000) == []  # ExecStartPre with the drop-in on
    assert capability_warnings(config.parse(""), have=0, euid=1000) == []  # devlink off: nothing needed
    # devlink_trap's dumps need nothing
    assert capability_warnings(config.parse("sources: {devlink_trap: {enabled: true}}\n"), have=0, euid=1000) == []


def test_validate_as_root_speaks_for_the_units(tmp_path):
    cfg = config.parse(DEVLINK_ON)
    got = capability_warnings(cfg, have=~0, euid=0, unit_dirs=_units(tmp_path))
    assert len(got) == 1 and "root has it, but swtel.service and swtel@.service run the agent as user swtel" in got[0]
    enabled = _units(tmp_path / "on", {"swtel.service.d": "devlink-caps.conf"})
    assert capability_warnings(cfg, have=~0, euid=0, unit_dirs=enabled) == []


def test_the_source_says_it_lacks_the_capability_instead_of_counting_errors(monkeypatch):
    monkeypatch.setattr(caps, "reader", lambda: 0)
    io = FakeIO()
    source = _source(io=io)
    source.setup(_links("swp1", "swp2"))
    assert source.state == "needs CAP_NET_ADMIN" and source.info()["missing_capabilities"] == ["CAP_NET_ADMIN"]
    assert source.fault.startswith("needs CAP_NET_ADMIN") and caps.DROPIN in source.fault
    assert len(source.table) == 0  # nothing published: no values it could not read
    for _ in range(3):
        source.read()
    assert not any(a[0] == "exec" for a in io.asked) and source.errors == 0  # no EPERM per poll
    # status, as `swtel status` judges it: unhealthy, and why, on one line
    status = {"uptime_s": 0, "sources": {"devlink": PolledSource(source, 0.1).status()}}
    assert health_problems(status) == [f"source devlink: {source.fault}"]
    # the capability given (the drop-in enabled, the agent restarted): read, fault gone
    monkeypatch.setattr(caps, "reader", lambda: NET_ADMIN)
    source.setup(_links("swp1", "swp2"))
    assert source.state == "ok" and source.fault is None and source.info()["missing_capabilities"] == []
    assert source.read() == 8 and ("exec", SNAPSHOT, source._handles) in io.asked


def test_a_host_with_nothing_to_read_needs_nothing(monkeypatch):
    """No shared buffer: the state says so, status lists the missing capability, health stays green."""
    monkeypatch.setattr(caps, "reader", lambda: 0)
    io = FakeIO()
    io.family_error = 2  # ENOENT: no devlink in this kernel
    source = _source(io=io)
    source.setup(_links("swp1"))
    assert source.fault is None and source.info()["missing_capabilities"] == ["CAP_NET_ADMIN"]


@pytest.mark.parametrize("what", ["devlink"])
def test_the_docs_say_how_to_enable_it(what):
    docs = (ROOT / "docs" / f"{what}.md").read_text() + (ROOT / "docs" / "packaging.md").read_text()
    assert caps.DROPIN in docs and caps.DROPIN_VRF in docs
    assert "no capability is needed" not in docs.lower()
    snippet = (ROOT / "packaging" / "nvue-snippet.yaml").read_text()
    assert caps.DROPIN_VRF in snippet
    # its commented second snippet, uncommented, writes the packaged drop-in's settings
    block = snippet[snippet.index("#          swtel-devlink-caps:"):]
    text = "\n".join(line[1:] for line in block.splitlines())
    entry = yaml.safe_load(text)["swtel-devlink-caps"]
    assert entry["file"] == "/etc/systemd/system/swtel@.service.d/devlink-caps.conf"
    assert entry["services"]["swtel"]["service"] == "swtel@mgmt"

    def settings(conf: str) -> list[str]:
        return [line for line in conf.splitlines() if line and not line.startswith("#")]

    assert settings(entry["content"]) == settings((ROOT / "systemd" / "devlink-caps@.conf").read_text())
