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
from agent.exporters.dialout import DialoutConfig
from agent.exporters.server import ServerConfig

REPO = Path(__file__).resolve().parents[2]
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
    ("exporters:\n  dialout:\n    - {name: a, address: 'h:1', insecure: true}\n"
     "    - {name: a, address: 'h:2', insecure: true}\n",
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
    ca.write_text("-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n")
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
              insecure_remote: true
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


@pytest.mark.parametrize("text,mode", [("0660", 0o660), ("'0640'", 0o640), ("600", 0o600), ("'0444'", 0o444),
                                       ("444", 0o444)])
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
    d, default_d = uncommented.exporters.dialout[0], DialoutConfig()
    for key in ("protocol", "insecure", "heartbeat", "queue", "subscription_name", "username"):
        assert getattr(d, key) == getattr(default_d, key), key
    srv, default_srv = uncommented.exporters.server, ServerConfig()
    for key in ("enabled", "listen", "insecure", "username", "password_file"):
        assert getattr(srv, key) == getattr(default_srv, key), key


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


# ---------------------------------------------------------------- hostile and odd input (issue 14)

MEM_LIMIT = 512 * 1024 * 1024  # address space for a `swtel validate` fed a hostile file


CPU_LIMIT_S = 15  # of CPU time: what the check costs, whatever else the machine runs


def run_validate_limited(*args, timeout=120):
    """`swtel validate` under a memory limit (RLIMIT_AS) and a CPU-time limit (RLIMIT_CPU:
    SIGXCPU past it); ``timeout`` (wall clock) only bounds a hang."""
    # The limit is set by the child itself: a preexec_fn runs between fork and exec, where
    # grpc's fork handlers (grpc is loaded in this pytest process) can abort the child.
    limited = ("import resource, runpy, sys; "
               f"resource.setrlimit(resource.RLIMIT_AS, ({MEM_LIMIT}, {MEM_LIMIT})); "
               f"resource.setrlimit(resource.RLIMIT_CPU, ({CPU_LIMIT_S}, {CPU_LIMIT_S})); "
               "sys.argv = ['swtel', *sys.argv[1:]]; runpy.run_module('agent', run_name='__main__')")
    env = dict(os.environ, PYTHONPATH=str(REPO))
    return subprocess.run([sys.executable, "-c", limited, "validate", *args], capture_output=True,
                          text=True, env=env, timeout=timeout, cwd=REPO)


BILLION_LAUGHS = "".join(
    f"{n}: &{n} [{', '.join([f'*{p}'] * 9)}]\n" for p, n in zip("abcdefgh", "bcdefghi", strict=True)
)
BILLION_LAUGHS = 'a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]\n' + BILLION_LAUGHS


def test_alias_expansion_is_bounded(tmp_path):
    text = BILLION_LAUGHS + "sources: {netdev: {interfaces: *i}}\n"
    with pytest.raises(ConfigError) as info:
        config.parse(text)
    (problem,) = info.value.problems
    assert re.match(r"line \d+, column \d+: too many values: more than 50000 after expanding aliases", problem)
    f = tmp_path / "lol.yaml"
    f.write_text(text)
    r = run_validate_limited(str(f))  # within its CPU and memory limits
    assert r.returncode == 1 and "too many values" in r.stderr, r.stderr
    assert len(r.stderr) < 500
    # Aliases within the bound still work (a list written once, used twice).
    cfg = config.parse("sources:\n  netdev: {interfaces: &p [swp1, swp2]}\n  ethtool: {interfaces: *p}\n")
    assert cfg.sources.ethtool.interfaces == ["swp1", "swp2"]


def test_nesting_depth_is_bounded(tmp_path):
    deep = "target: " + "{a: " * 30000 + "1" + "}" * 30000 + "\n"
    with pytest.raises(ConfigError) as info:
        config.parse(deep)
    assert re.match(r"line 1, column \d+: nesting too deep", info.value.problems[0]), info.value.problems
    with pytest.raises(ConfigError, match="nesting too deep"):
        config.parse("target:" + "".join(f"\n{'  ' * (i + 1)}- " for i in range(40)) + "x\n")
    f = tmp_path / "deep.yaml"
    f.write_text(deep)
    r = run_validate_limited(str(f))
    assert r.returncode == 1 and "nesting too deep" in r.stderr and "Traceback" not in r.stderr, r.stderr
    # The issue's example, 50,000 levels.
    f.write_text("target: " + "{a: " * 50000 + "1" + "}" * 50000 + "\n")
    r = run_validate_limited(str(f))
    assert r.returncode == 1 and "line 1, column 130: nesting too deep" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr


def _number_keys():
    """(dotted key, kind) of every duration and float key of the schema; list items as name[]."""
    def walk(cls, prefix):
        hints = get_type_hints(cls)
        for f in fields(cls):
            if (cls.__name__, f.name) in config._NOT_KEYS:
                continue
            tp = config._optional_inner(hints[f.name]) or hints[f.name]
            name = f"{prefix}{f.name}"
            if get_origin(tp) is list and is_dataclass(get_args(tp)[0]):
                yield from walk(get_args(tp)[0], name + "[].")
            elif is_dataclass(tp):
                yield from walk(tp, name + ".")
            elif tp in (Duration, float):
                yield name, tp
    return list(walk(config.Config, ""))


_LIST_ITEM = {"dialout": {"address": "h:1", "insecure": True},
              "tunnel": {"address": "h", "port": 1, "insecure": True},
              "remote_write": {"url": "http://127.0.0.1:9/api/v1/write"}}


def _doc_setting(key: str, value) -> str:
    """A YAML document setting one dotted key (``x[].y`` in the list's only item)."""
    doc: dict = {}
    node = doc
    parts = key.split(".")
    for part in parts[:-1]:
        if part.endswith("[]"):
            item = dict(_LIST_ITEM[part[:-2]])
            node[part[:-2]] = [item]
            node = item
        else:
            node = node.setdefault(part, {})
    node[parts[-1]] = value
    return yaml.safe_dump(doc)


def test_schema_has_the_number_keys_the_issue_names():
    keys = dict(_number_keys())
    for key in ("interval", "exporters.dialout[].heartbeat", "log.rate_limit", "control.health_grace",
                "insights.error_burst.symbol_ber", "insights.imbalance.min_mean_bps"):
        assert key in keys


@pytest.mark.parametrize("key,kind", _number_keys(), ids=[k for k, _ in _number_keys()])
@pytest.mark.parametrize("bad", [float("nan"), float("inf"), float("-inf")], ids=["nan", "inf", "-inf"])
def test_every_number_and_duration_key_refuses_non_finite_values(key, kind, bad):
    problems = problems_of(_doc_setting(key, bad))
    where = key.replace("[]", "[0]")
    assert any(p.startswith(f"{where}: ") and ("finite" in p or "negative" in p) for p in problems), problems


@pytest.mark.parametrize("key,kind", _number_keys(), ids=[k for k, _ in _number_keys()])
def test_every_number_and_duration_key_refuses_absurd_values(key, kind):
    bad = "100000h" if kind is Duration else 1e300
    problems = problems_of(_doc_setting(key, bad))
    where = key.replace("[]", "[0]")
    assert any(p.startswith(f"{where}: ") for p in problems), problems


@pytest.mark.parametrize("text,fragment", [
    ("interval: 100000h\n", "interval: must be at most 24h"),
    ("interval: 2h\n", "interval: must be at most 1h"),
    ("sources: {netdev: {interval: 90m}}\n", "sources.netdev.interval: must be at most 1h"),
    ("interval: " + "9" * 400 + "s\n", "interval: expected a duration"),
    ("exporters: {dialout: [{address: 'h:1', insecure: true, queue: 100000000000000000000000000}]}\n",
     "exporters.dialout[0].queue: out of range"),
    ("exporters: {dialout: [{address: 'h:1', insecure: true, queue: 1000001}]}\n",
     "exporters.dialout[0].queue: must be at most 1000000"),
    ("insights: {history: 10001}\n", "insights.history: must be at least 1 and at most 10000"),
    ("insights: {pfc_storm: {windows: 1001}}\n", "insights.pfc_storm.windows: must be at least 1 and at most 1000"),
    ("insights: {drop_burst: {threshold: 1000000001}}\n", "insights.drop_burst.threshold: must be at most"),
    ("target: " + "x" * 256 + "\n", "target: at most 255 characters, got 256"),
    ("sources: {asic: {plugin: /" + "x" * 5000 + "}}\n", "sources.asic.plugin: at most 4096 characters"),
    ("sources: {netdev: {interfaces: [" + ", ".join(["a"] * 1025) + "]}}\n",
     "sources.netdev.interfaces: at most 1024 entries, got 1025"),
    ("insights: {error_burst: {symbol_ber: 1e400}}\n", "insights.error_burst.symbol_ber: must be a finite number"),
    ("insights: {error_burst: {symbol_ber: 1e-x}}\n", "insights.error_burst.symbol_ber: expected a number"),
])
def test_absurd_values_are_refused(text, fragment):
    problems = problems_of(text)
    assert any(fragment in p for p in problems), problems
    assert all(len(p) < 300 for p in problems), "no problem echoes a huge value"


def test_floats_written_without_a_dot_are_numbers():
    # YAML 1.1 reads 1e-12 (no dot) as a string: float keys accept it as the number it is.
    cfg = config.parse("insights:\n  error_burst: {symbol_ber: 1e-12, pre_fec_ber_warning: '5E-7'}\n"
                       "  imbalance: {min_mean_bps: 1e9}\n")
    assert cfg.insights.error_burst.symbol_ber == 1e-12
    assert cfg.insights.error_burst.pre_fec_ber_warning == 5e-7
    assert cfg.insights.imbalance.min_mean_bps == 1e9


def test_every_problem_of_a_file_is_reported_at_once():
    problems = problems_of("target: ''\ninterval: abc\ncontrol: {socket: rel.sock}\n")
    assert len(problems) == 3, problems
    assert any(p.startswith("target: must not be empty") for p in problems)
    assert any(p.startswith("interval: expected a duration") for p in problems)
    assert any(p.startswith("control.socket: expected an absolute path") for p in problems)


def test_only_regular_files_of_bounded_size_are_read(tmp_path):
    fifo = tmp_path / "fifo.yaml"
    os.mkfifo(fifo)
    big = tmp_path / "big.yaml"
    with open(big, "wb") as fh:
        fh.truncate(50 * 1024 * 1024)  # sparse: 50 MB of NULs
    for path, fragment in [("/dev/zero", "not a regular file"), (str(fifo), "not a regular file"),
                           (str(tmp_path), "not a regular file"), (str(big), "larger than 256 KiB")]:
        r = run_validate_limited(path)  # within its CPU and memory limits: never reads /dev/zero on
        assert r.returncode == 1 and f"{path}: {fragment}" in r.stderr, (path, r.stderr)
        with pytest.raises(ConfigError, match=fragment):
            config.load(path)
    exact = tmp_path / "exact.yaml"
    exact.write_text("#" * (config.MAX_FILE_BYTES - 1) + "\n")
    assert config.load(str(exact)).path == str(exact)
    with pytest.raises(ConfigError, match="larger than 256 KiB"):
        config.parse("#" * (config.MAX_FILE_BYTES + 1))


@pytest.mark.parametrize("key", ["ca", "cert", "key"])
def test_tls_files_must_be_readable_pem_of_the_right_kind(tmp_path, key):
    cert = tmp_path / "cert.pem"
    cert.write_text("-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n")
    pkey = tmp_path / "key.pem"
    pkey.write_text("-----BEGIN EC PRIVATE KEY-----\nMHc\n-----END EC PRIVATE KEY-----\n")
    pkey.chmod(0o600)
    good = {"ca": cert, "cert": cert, "key": pkey}
    kind = "private key" if key == "key" else "certificate"
    for bad, fragment in [(tmp_path, "is not a regular file"), ("/etc/passwd", f"holds no PEM {kind}"),
                          (pkey if key != "key" else cert, f"holds no PEM {kind}"),
                          ("/dev/zero", "is not a regular file")]:
        tls = {**{k: str(v) for k, v in good.items()}, key: str(bad)}
        for section in (f"exporters: {{server: {{listen: '127.0.0.1:50051', tls: {tls}}}}}\n",
                        f"exporters: {{dialout: [{{address: 'h:1', tls: {tls}}}]}}\n"):
            problems = problems_of(section)
            assert any(f"tls.{key}: " in p and fragment in p for p in problems), (bad, problems)
    # well-formed PEM that is no certificate and key pair is refused as a pair; a real pair passes
    problems = problems_of(f"exporters: {{server: {{listen: '127.0.0.1:50051', tls: "
                           f"{{ca: {cert}, cert: {cert}, key: {pkey}}}}}}}\n")
    assert any("tls.key: certificate and key cannot be loaded together" in p for p in problems), problems
    from tests.gnmi_helpers import make_pki

    pki = make_pki(tmp_path / "pki")
    assert config.parse(f"exporters: {{server: {{listen: '127.0.0.1:50051', tls: "
                        f"{{ca: {pki.ca}, cert: {pki.server_cert}, key: {pki.server_key}}}}}}}\n"
                        ).exporters.server.tls.key == str(pki.server_key)


def test_password_file_must_be_a_readable_regular_file(tmp_path):
    problems = problems_of(f"exporters: {{server: {{insecure: true, username: u, password_file: {tmp_path}}}}}\n")
    assert any("exporters.server.password_file: " in p and "not a regular file" in p for p in problems), problems


@pytest.mark.parametrize("listen", ["not a host:50051", "a b:1", ":50051", "host:", "[::1:1", "[zz]:1",
                                    "-h:1", "h..x:1", "h:0"])
def test_listen_addresses_must_parse(listen):
    problems = problems_of(f"exporters: {{server: {{listen: '{listen}', insecure: true}}}}\n")
    assert any(p.startswith("exporters.server.listen: expected") for p in problems), problems


def test_man_page_lists_every_key():
    man = (REPO / "debian" / "swtel.1").read_text().replace("\\-", "-")
    section = man.split(".SH CONFIGURATION KEYS", 1)[1]
    missing = [k for k in _keys(config.Config) if f"\n{k}: " not in section]
    assert not missing, f"debian/swtel.1 CONFIGURATION KEYS lacks: {missing}"


def test_docs_stand_on_their_own():
    for doc in [*(REPO / "docs").glob("*.md"), REPO / "README.md", REPO / "debian" / "swtel.1"]:
        for ref in re.findall(r"\b([A-Za-z0-9_-]+\.md)\b", doc.read_text()):
            assert (REPO / ref).exists() or (REPO / "docs" / ref).exists(), f"{doc.name} points to missing {ref}"


# ---------------------------------------------------------------- configs that can never work (issue 24, item 12)


def test_an_imbalance_group_naming_a_port_twice_is_refused():
    problems = problems_of("insights: {imbalance: {groups: {up: [swp51, swp52, swp51]}}}\n")
    assert problems == ["insights.imbalance.groups.up: names 'swp51' more than once (a member counts once: "
                        "list each port once)"]
    # twice the same one port is a one-member group as well
    problems = problems_of("insights: {imbalance: {groups: {up: [swp51, swp51]}}}\n")
    assert any(p.startswith("insights.imbalance.groups.up: needs at least 2 ports") for p in problems), problems
    problems = problems_of("insights: {imbalance: {groups: {up: [swp1, swp1, swp1, swp1, swp1]}}}\n")
    assert "insights.imbalance.groups.up: needs at least 2 ports, got a list of 5 items" in problems, problems


def test_one_groups_type_error_does_not_hide_the_other_groups_problems():
    problems = problems_of("""\
        insights:
          imbalance:
            groups:
              a: 5
              b: [swp1]
              c: [swp1, swp2, swp1]
              d: [swp1, {x: 1}]
              e: [swp3, '']
        """)
    assert problems[0] == "insights.imbalance.groups.a: expected a list, got 5"
    assert "insights.imbalance.groups.d[1]: expected a string, got a mapping of 1 keys" in problems
    assert "insights.imbalance.groups.b: needs at least 2 ports, got ['swp1']" in problems
    assert any(p.startswith("insights.imbalance.groups.c: names 'swp1' more than once") for p in problems)
    assert "insights.imbalance.groups.e[1]: must not be empty" in problems
    assert len(problems) == 5, problems


@pytest.mark.parametrize("sim,problem", [
    ("role=spine bogus=1", "sim: unknown key 'bogus' (known: "),
    ("role=leaf scenario=imbalance@3s:swp99", "sim: scenario 'imbalance@3s:swp99': no port 'swp99'"),
    ("role=spine scenario=imbalance@3s:swp62", "sim: scenario 'imbalance@3s:swp62': needs role=leaf"),
    ("role=host ports=8", "sim: ports: not with role=host"),
    ("role=spine scenario=symbol-errors@5s-2s:swp1", "sim: scenario 'symbol-errors@5s-2s:swp1': end must be "
                                                     "after start"),
])
def test_sim_config_strings_are_judged_by_the_sims_own_parser(sim, problem):
    """What the sim's open() refuses, validate refuses, in the sim's words, under the YAML path."""
    problems = problems_of(f"sources: {{asic: {{enabled: true, plugin: sim, config: '{sim}'}}}}\n")
    assert [p for p in problems if p.startswith("sources.asic.config: ")] == problems, problems
    assert problems[0].startswith(f"sources.asic.config: {problem}"), problems
    # the same string is refused by the loader the agent uses, with the same words
    from agent import _backend
    from agent.asic import builtin_path

    with pytest.raises(OSError, match=re.escape(problem)):
        _backend.reader.asic_open(builtin_path("sim"), sim)


def test_a_good_sim_config_is_accepted():
    cfg = config.parse("sources: {asic: {enabled: true, config: 'role=leaf seed=3 scenario=imbalance@3s:swp62'}}\n")
    assert cfg.sources.asic.config.startswith("role=leaf")


def test_validate_warns_about_group_members_this_host_does_not_have(tmp_path):
    f = tmp_path / "groups.yaml"
    f.write_text("sources: {netdev: {enabled: false}, ethtool: {enabled: false},\n"
                 "          asic: {enabled: true, plugin: sim, config: role=leaf}}\n"
                 "insights: {imbalance: {groups: {uplinks: [swp61, swp62, swp99, 'up*']}}}\n")
    r = run_validate(str(f))
    assert (r.returncode, r.stdout.strip()) == (0, "OK"), r.stderr
    warnings = [line for line in r.stderr.splitlines() if line.startswith("warning: ")]
    assert warnings == [
        "warning: insights.imbalance.groups.uplinks: 'swp99': no such port in the sim's layout now; the group "
        "is judged without it (the agent logs it once if it never appears)",
        "warning: insights.imbalance.groups.uplinks: 'up*': no port matches it in the sim's layout now; the "
        "group is judged without it (the agent logs it once if it never appears)",
    ], r.stderr


def test_validate_looks_ports_up_among_this_hosts_interfaces(tmp_path):
    from agent.control.validate import warnings

    net = tmp_path / "net"
    for name in ("eth0", "swp1", "swp2"):
        (net / name).mkdir(parents=True)
    cfg = config.parse("insights: {imbalance: {groups: {a: [swp1, swp2], b: [swp1, swp7], c: ['eth*', 'x*']}}}\n")
    assert [w.split(":")[0] + ":" + w.split(":")[1] for w in warnings(cfg, str(net))] == [
        "insights.imbalance.groups.b: 'swp7'", "insights.imbalance.groups.c: 'x*'"]
    # a vendor plugin's ports cannot be known before it runs: no guesses
    cfg = config.parse("insights: {imbalance: {groups: {b: [swp1, swp7]}}}\n")
    cfg.sources.asic.enabled, cfg.sources.asic.plugin = True, "/opt/vendor/plugin.so"
    assert warnings(cfg, str(net)) == []


# ------------------------------------------------------- issue 33, item 7: what the YAML loader raises, the socket mode


@pytest.mark.parametrize("text,problem", [
    ("interval: " + "9" * 5000 + "\n", "line 1, column 11: integer too large (5000 characters)"),
    ("sources:\n  netdev:\n    interval: 0x" + "f" * 5000 + "\n",
     "line 3, column 15: integer too large (5002 characters)"),
    ("exporters:\n  dialout: [{queue: 0x" + "f" * 900 + "}]\n", "line 2, column 21: integer too large (3600 bits)"),
    ("exporters:\n  dialout: [{address: 'h:1', insecure: true, insecure_remote: true, "
     "queue: 99999999999999999999999}]\n",
     "exporters.dialout[0].queue: out of range, got 99999999999999999999999"),
    ("target: 2024-02-30\n", "line 1, column 9: cannot read this value: day is out of range for month"),
])
def test_values_the_yaml_loader_cannot_make_are_config_errors_naming_the_line(text, problem):
    assert problems_of(text) == [problem]


def test_validate_and_run_report_a_5000_digit_integer_without_a_traceback(tmp_path):
    f = tmp_path / "swtel.yaml"
    f.write_text("interval: " + "1" * 5000 + "\n")
    for verb in ("validate", "run"):
        args = [str(f)] if verb == "validate" else ["-c", str(f), "--duration", "1"]
        r = subprocess.run([sys.executable, "-m", "agent", verb, *args], capture_output=True, text=True,
                           cwd=REPO, timeout=60)
        out = r.stdout + r.stderr
        assert r.returncode != 0 and "Traceback" not in out, out
        assert "line 1, column 11: integer too large" in out, out


@pytest.mark.parametrize("mode,ok", [("0660", True), ("0600", True), ("0664", True), ("0666", False),
                                     ("0662", False), ("0777", False)])
def test_control_socket_mode_writable_by_others_is_refused(mode, ok):
    text = f"control: {{mode: '{mode}'}}\n"
    if ok:
        config.parse(text)
    else:
        assert problems_of(text) == [f"control.mode: writable by others ({mode}): any local user could command "
                                     "the agent; use 0660 (group swtel) or 0600"]
