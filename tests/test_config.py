"""Config schema: good files, a table of bad ones (each error names its YAML path), `swtel validate`."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from dataclasses import fields, is_dataclass
from pathlib import Path
from typing import get_args, get_origin, get_type_hints

import pytest
import yaml

from agent import config
from agent.config import ConfigError, Duration, FileMode, HostPort

REPO = Path(__file__).resolve().parent.parent
PACKAGED = REPO / "packaging" / "swtel.yaml"
DOCS = REPO / "docs" / "config.md"


def problems_of(text: str) -> list[str]:
    with pytest.raises(ConfigError) as info:
        config.parse(textwrap.dedent(text))
    return info.value.problems


# ---------------------------------------------------------------- bad configs

BAD = [
    # (yaml, expected fragment naming the path)
    ("exporters:\n  dialout:\n    - address: foo\n",
     "exporters.dialout[0].address: expected host:port, got 'foo'"),
    ("exporters:\n  dialout:\n    - {address: 'h:1', insecure: true}\n    - {address: 'h:99999', insecure: true}\n",
     "exporters.dialout[1].address: expected host:port, got 'h:99999'"),
    ("interval: fast\n", "interval: expected a duration like 100ms or 2s, got 'fast'"),
    ("interval: 1ms\n", "interval: must be at least 10ms"),
    ("interval: -5s\n", "interval: must not be negative"),
    ("sources:\n  netdev:\n    interval: 5ms\n", "sources.netdev.interval: must be at least 10ms"),
    ("bogus: 1\n", "bogus: unknown key"),
    ("sources:\n  netdev:\n    interfaces: [swp1]\n    colour: red\n", "sources.netdev.colour: unknown key"),
    ("sources:\n  netdev:\n    interfaces: swp*\n", "sources.netdev.interfaces: expected a list, got 'swp*'"),
    ("sources:\n  ethtool:\n    per_queue: yes please\n", "sources.ethtool.per_queue: expected a boolean"),
    ("sources:\n  asic:\n    plugin: libfoo.so\n", "sources.asic.plugin: expected sim or an absolute path"),
    ("sources:\n  asic:\n    plugin: ''\n", "sources.asic.plugin: expected sim or an absolute path"),
    ("sources:\n  asic:\n    config: [a]\n", "sources.asic.config: expected a string"),
    ("sources:\n  rdma:\n    root: sys\n", "sources.rdma.root: expected an absolute path"),
    ("exporters:\n  dialout:\n    - {address: 'h:1', protocol: cisco, insecure: true}\n",
     "exporters.dialout[0].protocol: expected one of nokia, sonic, got 'cisco'"),
    ("exporters:\n  dialout:\n    - {address: 'h:1', tls: {ca: /nonexistent/ca.pem}}\n",
     "exporters.dialout[0].tls.ca: no such file '/nonexistent/ca.pem'"),
    ("exporters:\n  dialout:\n    - {name: a, address: 'h:1', insecure: true}\n    - {name: a, address: 'h:2', insecure: true}\n",
     "exporters.dialout[1].name: duplicate destination name 'a'"),
    ("exporters:\n  dialout:\n    - {address: 'h:1', insecure: true, queue: 0}\n",
     "exporters.dialout[0].queue: must be at least 1"),
    ("exporters:\n  dialout:\n    - {address: 'h:1', insecure: true, heartbeat: 10ms}\n",
     "exporters.dialout[0].heartbeat: must be at least 1s"),
    ("exporters:\n  dialout:\n    - {address: 'h:1', insecure: true, password_file: /etc/hostname}\n",
     "exporters.dialout[0].password_file: needs username"),
    ("exporters:\n  dialout: {address: 'h:1'}\n", "exporters.dialout: expected a list"),
    ("exporters:\n  server:\n    listen: 127.0.0.1:9339\n    insecure: true\n",
     "exporters.server.listen: port 9339 belongs to Cumulus"),
    ("exporters:\n  server:\n    listen: 127.0.0.1:50051\n",
     "exporters.server.tls: cert and key are required unless insecure: true"),
    ("exporters:\n  jsonl:\n    file: out.jsonl\n", "exporters.jsonl.file: unknown key"),
    ("control:\n  mode: rw-rw----\n", "control.mode: expected an octal mode like \"0660\", got 'rw-rw----'"),
    ("control:\n  socket: relative.sock\n", "control.socket: expected an absolute path"),
    ("control:\n  socket: /" + "x" * 120 + "\n", "control.socket: longer than 107 bytes"),
    ("control:\n  health_grace: soon\n", "control.health_grace: expected a duration"),
    ("log:\n  level: verbose\n", "log.level: expected one of debug, info, warning, error, got 'verbose'"),
    ("log:\n  format: xml\n", "log.format: expected one of kv, json, got 'xml'"),
    ("target: ''\n", "target: must not be empty"),
    ("insights:\n  error_burst:\n    threshold: 0\n", "insights.error_burst.threshold: must be at least 1"),
    ("insights:\n  link_flap:\n    window: never\n", "insights.link_flap.window: expected a duration"),
    ("insights:\n  pfc_storm:\n    paused_share: 1.5\n", "insights.pfc_storm.paused_share: expected 0 < x <= 1"),
    ("insights:\n  drop_burst:\n    sensitivity: high\n", "insights.drop_burst.sensitivity: unknown key"),
    ("insights:\n  imbalance:\n    groups: {spines: swp1}\n", "insights.imbalance.groups.spines: expected a list"),
    ("insights:\n  imbalance:\n    groups: {spines: [swp1]}\n",
     "insights.imbalance.groups.spines: needs at least 2 ports"),
    ("insights:\n  imbalance:\n    max_over_mean: 0.9\n", "insights.imbalance.max_over_mean: must be greater than 1"),
    ("insights:\n  imbalance:\n    windows: 0\n", "insights.imbalance.windows: must be at least 1"),
    ("insights:\n  throughput_dip:\n    dip_ratio: 2\n", "insights.throughput_dip.dip_ratio: expected 0 < x <= 1"),
    ("insights:\n  roce_retrans:\n    counters: []\n", "insights.roce_retrans.counters: must not be empty"),
    ("insights:\n  unknown_detector: {}\n", "insights.unknown_detector: unknown key"),
    ("insights: [error_burst]\n", "insights: expected a mapping"),
    ("- just\n- a list\n", "(top level): expected a mapping"),
    ("interval: 100ms\ninterval: 200ms\n", "line 2, column 1: duplicate key 'interval'"),
    ("sources: {netdev: [\n", "line "),
    ("sources:\n  netdev:\n    enabled: null\n", "sources.netdev.enabled: expected a boolean, got null"),
]


def test_bad_table_is_large_enough():
    assert len(BAD) >= 15


@pytest.mark.parametrize("text,fragment", BAD, ids=[f"bad{i}" for i in range(len(BAD))])
def test_bad_config_names_its_path(text, fragment):
    problems = problems_of(text)
    assert any(fragment in p for p in problems), problems


def test_every_problem_is_reported_not_just_the_first():
    problems = problems_of("""
        interval: soon
        log: {level: loud}
        sources: {netdev: {colour: red}}
    """)
    assert len(problems) == 3, problems
    assert {p.split(":")[0] for p in problems} == {"interval", "log.level", "sources.netdev.colour"}


def test_unknown_key_lists_the_known_ones():
    (problem,) = problems_of("control: {sockt: /run/x.sock}\n")
    assert problem.startswith("control.sockt: unknown key (known: ")
    assert "socket" in problem and "health_grace" in problem


# ---------------------------------------------------------------- good configs


def test_empty_file_is_valid_with_defaults():
    for text in ("", "\n", "# only a comment\n", "{}\n"):
        cfg = config.parse(text)
        assert cfg.interval == 0.1
        assert cfg.control.socket == "/run/swtel/swtel.sock"
        assert cfg.control.mode == 0o660
        assert cfg.control.health_grace == 60.0
        assert cfg.exporters.dialout == [] and cfg.exporters.jsonl is None
        assert cfg.insights.imbalance.groups == {}
        assert cfg.interval_of("system") == 5.0 and cfg.interval_of("netdev") == 0.1


def test_design_config_shape_parses(tmp_path):
    ca = tmp_path / "ca.pem"
    ca.write_text("x")
    cfg = config.parse(textwrap.dedent(f"""
        target: leaf01
        interval: 100ms
        sources:
          netdev:  {{interfaces: ["swp*"], exclude: []}}
          ethtool: {{interfaces: ["swp*"], counters: {{exclude: ["*_tc_*"]}}}}
          rdma:    {{enabled: false, root: /sys}}
          system:  {{interval: 5s}}
          asic:    {{enabled: false, plugin: sim, config: "role=spine seed=1 scenario=symbol-errors@5s-25s:swp11s1"}}
        exporters:
          jsonl:   {{path: "-"}}
          dialout:
            - name: collector1
              address: 192.0.2.10:57400
              protocol: nokia
              insecure: false
              tls: {{ca: {ca}, server_name: collector1}}
              heartbeat: 60s
              queue: 10000
            - address: "[2001:db8::1]:57400"
              protocol: sonic
              insecure: true
          server:  {{listen: "127.0.0.1:50051", insecure: true}}
        control: {{socket: /run/swtel/swtel.sock, mode: "0660", group: swtel, health_grace: 2m}}
        log:     {{level: info, format: kv}}
        insights:
          error_burst: {{threshold: 5, window: 10s, clear_after: 1m}}
          imbalance:
            groups: {{spines: [swp1, swp2, swp3, swp4], fabric: ["swp5*"]}}
            max_over_mean: 1.3
            cv: 0.2
            windows: 5
    """))
    assert cfg.target == "leaf01"
    assert cfg.sources.netdev.interfaces == ["swp*"] and cfg.sources.netdev.exclude == []
    assert cfg.sources.ethtool.counters.exclude == ["*_tc_*"]
    d0, d1 = cfg.exporters.dialout
    assert (d0.name, d0.address.host, d0.address.port, d0.tls.ca) == ("collector1", "192.0.2.10", 57400, str(ca))
    assert (d1.name, d1.address.host, d1.protocol) == ("dialout1", "2001:db8::1", "sonic")
    assert cfg.exporters.server.listen.port == 50051
    assert cfg.exporters.jsonl.path == "-"
    assert cfg.control.health_grace == 120.0 and cfg.control.group == "swtel"
    assert cfg.insights.error_burst.threshold == 5 and cfg.insights.error_burst.clear_after == 60.0
    assert cfg.insights.imbalance.groups["spines"] == ["swp1", "swp2", "swp3", "swp4"]
    assert cfg.insights.imbalance.windows == 5


def test_optional_sections_turn_on_by_presence():
    cfg = config.parse("exporters:\n  jsonl:\n  server:\n    insecure: true\n")
    assert cfg.exporters.jsonl is not None and cfg.exporters.jsonl.path == "-"
    assert cfg.exporters.server is not None and cfg.exporters.server.enabled


@pytest.mark.parametrize("text,mode", [("0660", 0o660), ("'0640'", 0o640), ("600", 0o600), ("'0444'", 0o444), ("444", 0o444)])
def test_file_mode_as_yaml_writes_it(text, mode):
    # YAML 1.1 would read a bare 0660 as the octal integer 432; the loader keeps the digits.
    assert config.parse(f"control: {{mode: {text}}}\n").control.mode == mode


def test_nullable_keys():
    cfg = config.parse("control: {group: null}\nsources: {netdev: {interval: null}}\n")
    assert cfg.control.group is None and cfg.sources.netdev.interval is None


def test_dash_and_underscore_keys():
    cfg = config.parse("control: {health-grace: 5s}\nsources: {ethtool: {per-queue: true}}\n")
    assert cfg.control.health_grace == 5.0 and cfg.sources.ethtool.per_queue is True


@pytest.mark.parametrize("text,seconds", [("100ms", 0.1), ("2s", 2.0), ("1m", 60.0), ("1h", 3600.0),
                                          ("250us", 0.00025), (3, 3.0), (0.5, 0.5), ("1.5s", 1.5)])
def test_durations(text, seconds):
    assert Duration.parse(text) == pytest.approx(seconds)


@pytest.mark.parametrize("bad", ["", "1d", "fast", True, None, [1], "1 s s"])
def test_bad_durations(bad):
    with pytest.raises(ValueError):
        Duration.parse(bad)


@pytest.mark.parametrize("good,host,port", [("a:1", "a", 1), ("[::1]:50051", "::1", 50051),
                                             ("192.0.2.1:65535", "192.0.2.1", 65535)])
def test_host_port(good, host, port):
    hp = HostPort.parse(good)
    assert (hp.host, hp.port) == (host, port)


@pytest.mark.parametrize("bad", ["a", ":1", "a:0", "a:65536", "::1:80", "[::1:80", 80, "a:b"])
def test_bad_host_port(bad):
    with pytest.raises(ValueError):
        HostPort.parse(bad)


def test_file_mode_rejects_non_octal():
    for bad in ("0990", "rw", True, "12345"):
        with pytest.raises(ValueError):
            FileMode.parse(bad)


def test_load_reports_missing_file_and_keeps_path(tmp_path):
    with pytest.raises(ConfigError) as info:
        config.load(str(tmp_path / "nope.yaml"))
    assert "nope.yaml" in info.value.problems[0]
    good = tmp_path / "ok.yaml"
    good.write_text("interval: 200ms\n")
    assert config.load(str(good)).path == str(good)


def test_configs_compare_equal_for_reload_decisions():
    # The runner keeps a source's state across reload when its section is unchanged.
    a = config.parse("sources: {netdev: {interfaces: [swp1]}}\ninterval: 1s\n")
    b = config.parse("sources: {netdev: {interfaces: [swp1]}}\ninterval: 1s\nlog: {level: debug}\n")
    assert a.sources == b.sources and a.log != b.log


# ---------------------------------------------------------------- packaging and docs


def test_packaged_default_config_is_valid_and_safe_for_the_service():
    cfg = config.load(str(PACKAGED))
    assert cfg.exporters.jsonl is None, "the installed service must not print changes to stdout"
    assert cfg.exporters.dialout == [], "no dial-out to a host that does not exist"
    assert cfg.control.socket == "/run/swtel/swtel.sock"


def test_packaged_comments_show_the_real_defaults():
    """Uncommenting every commented key of packaging/swtel.yaml must change nothing
    (except the examples' own names, addresses and TLS files)."""
    key_line = re.compile(r"^(\s*)#(\s*(- )?[a-z_]+:(\s|$).*)$")
    lines = [m.group(1) + m.group(2) if (m := key_line.match(line)) else line
             for line in PACKAGED.read_text().splitlines()]
    text = "\n".join(line for line in lines if not line.lstrip().startswith("target:"))
    problems: list[str] = []
    data = yaml.load(text, Loader=config._Loader)
    uncommented = config._build(config.Config, data, "", problems)
    assert problems == []
    assert uncommented.exporters.jsonl is not None and len(uncommented.exporters.dialout) == 1
    assert uncommented.exporters.server is not None
    defaults = config.Config()
    for section in ("interval", "sources", "control", "log", "insights"):
        assert getattr(uncommented, section) == getattr(defaults, section), section
    d, default_d = uncommented.exporters.dialout[0], config.DialoutExporter()
    for key in ("protocol", "insecure", "heartbeat", "queue", "subscription_name", "username"):
        assert getattr(d, key) == getattr(default_d, key), key
    srv, default_srv = uncommented.exporters.server, config.ServerExporter()
    for key in ("enabled", "listen", "insecure", "username", "password_file"):
        assert getattr(srv, key) == getattr(default_srv, key), key


def test_nvue_snippet_appended_to_the_packaged_file_is_valid():
    """NVUE appends its snippet to the existing /etc/swtel/swtel.yaml."""
    snippet = yaml.safe_load((REPO / "packaging" / "nvue-snippet.yaml").read_text())
    content = snippet[0]["set"]["system"]["config"]["snippet"]["swtel-config"]["content"]
    with pytest.raises(ConfigError) as info:
        config.parse(PACKAGED.read_text() + content)
    # Only the example's TLS files are missing on this machine.
    assert info.value.problems and all("no such file '/etc/swtel/" in p for p in info.value.problems)


def _keys(cls, prefix=""):
    """Every YAML key as a dotted path; list items as ``name[].key``."""
    hints = get_type_hints(cls)
    for f in fields(cls):
        if (cls.__name__, f.name) in config._NOT_KEYS:
            continue
        name = f"{prefix}{f.name}"
        yield name
        tp = config._optional_inner(hints[f.name]) or hints[f.name]
        if get_origin(tp) is list:
            tp, name = get_args(tp)[0], name + "[]"
        if is_dataclass(tp):
            yield from _keys(tp, name + ".")


def test_docs_mention_every_key():
    text = DOCS.read_text()
    missing = [k for k in _keys(config.Config) if f"`{k}`" not in text]
    assert not missing, f"docs/config.md lacks: {missing}"


# ---------------------------------------------------------------- swtel validate


def run_validate(*args):
    env = dict(os.environ, PYTHONPATH=str(REPO))
    return subprocess.run([sys.executable, "-m", "agent", "validate", *args],
                          capture_output=True, text=True, env=env, timeout=60, cwd=REPO)


def test_validate_ok(tmp_path):
    f = tmp_path / "ok.yaml"
    f.write_text("interval: 250ms\nsources: {netdev: {interfaces: [\"swp*\"]}}\n")
    r = run_validate(str(f))
    assert (r.returncode, r.stdout.strip()) == (0, "OK"), r.stderr


def test_validate_packaged_file():
    r = run_validate(str(PACKAGED))
    assert r.returncode == 0, r.stderr


def test_validate_bad_file_lists_every_problem(tmp_path):
    f = tmp_path / "bad.yaml"
    f.write_text("exporters:\n  dialout:\n    - address: foo\nlog: {format: xml}\n")
    r = run_validate(str(f))
    assert r.returncode == 1
    assert "exporters.dialout[0].address: expected host:port, got 'foo'" in r.stderr
    assert "log.format: expected one of kv, json" in r.stderr
    assert "OK" not in r.stdout


def test_validate_missing_file(tmp_path):
    r = run_validate(str(tmp_path / "absent.yaml"))
    assert r.returncode == 1 and "absent.yaml" in r.stderr
