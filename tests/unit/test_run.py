"""``swtel run`` and ``swtel --version`` as an operator meets them."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.namespaces import ROOT


def swtel(*args: str, timeout: float = 30) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "agent", *args], capture_output=True, text=True,
                          timeout=timeout, env=env, cwd=ROOT)


def test_version_names_the_backend():
    from agent import _backend

    out = swtel("--version")
    assert out.returncode == 0
    assert out.stdout.strip() == f"swtel 0.1.0 (reader: {_backend.NAME})"


@pytest.mark.parametrize(
    "text,fragment",
    [
        ("bogus: 1\n", "bogus: unknown key"),
        ("interval: -1s\n", "interval: must not be negative"),
        ("interval: 5ms\n", "interval: must be at least 10ms"),
        ("sources: {netdev: {interval: 1ms}}\n", "sources.netdev.interval: must be at least 10ms"),
        ("sources: {netdev: {interfaces: swp1}}\n", "sources.netdev.interfaces: expected a list"),
        ("sources: {ethtool: {enabled: maybe}}\n", "sources.ethtool.enabled: expected a boolean"),
        ("exporters: {jsonl: {path: [1]}}\n", "exporters.jsonl.path: expected a string"),
    ],
)
def test_bad_config_names_the_key_and_exits_nonzero(tmp_path, text, fragment):
    cfg = tmp_path / "bad.yaml"
    cfg.write_text(text)
    out = swtel("run", "-c", str(cfg))
    assert out.returncode != 0
    assert fragment in out.stderr, out.stderr


def test_missing_config_file_is_a_clear_error(tmp_path):
    out = swtel("run", "-c", str(tmp_path / "nope.yaml"))
    assert out.returncode != 0
    assert "nope.yaml" in out.stderr and "No such file" in out.stderr


def test_run_for_a_bounded_time_flushes_jsonl(tmp_path):
    out_file = tmp_path / "out.jsonl"
    cfg = tmp_path / "ok.yaml"
    cfg.write_text(
        "interval: 50ms\nsources: {netdev: {interfaces: [lo], exclude: []}, ethtool: {enabled: false},"
        " system: {interval: 100ms}}\n"
        f"exporters: {{jsonl: {{path: {out_file}}}}}\ncontrol: {{socket: {tmp_path}/s.sock, group: null}}\n"
    )
    res = swtel("run", "-c", str(cfg), "--duration", "1")
    assert res.returncode == 0, res.stderr + res.stdout
    lines = out_file.read_text().splitlines()
    assert any('"/interfaces/interface[name=lo]/state/counters/in-pkts"' in line for line in lines)
    assert any('"swtel:/agent/state/rss-bytes"' in line for line in lines)


# ---------------------------------------------------------------- command line (issue 14)


@pytest.mark.parametrize("value,fragment", [("nan", "expected a duration"), ("-5", "must not be negative"),
                                            ("inf", "expected a duration"), ("100000h", "must be at most 24h")])
def test_run_duration_refuses_bad_values(value, fragment):
    r = swtel("run", "--duration", value)
    assert r.returncode == 2 and f"argument --duration: {fragment}" in r.stderr, r.stderr


def test_run_duration_takes_the_configs_syntax(tmp_path):
    cfg = tmp_path / "c.yaml"
    cfg.write_text(f"sources: {{netdev: {{interfaces: [lo], exclude: []}}, ethtool: {{enabled: false}}}}\n"
                   f"control: {{socket: {tmp_path}/s.sock, group: null}}\n")
    r = swtel("run", "-c", str(cfg), "--duration", "500ms")
    assert r.returncode == 0, r.stderr


def test_version_only_before_a_verb():
    assert swtel("-V").returncode == 0
    r = swtel("run", "--version")
    assert r.returncode == 2 and "unrecognized arguments: --version" in r.stderr
    r = swtel("validate", "--version")
    assert r.returncode == 2


def test_every_argument_has_help_text():
    import argparse

    from agent.cli import _parser

    parser = _parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    missing = [f"{verb} {a.option_strings or a.dest}" for verb, p in sub.choices.items()
               for a in p._actions if not isinstance(a, argparse._HelpAction) and not a.help]
    assert not missing, missing


def test_the_daemon_loads_neither_rich_nor_pyroute2():
    """`swtel run` keeps rich (structlog.dev would import its traceback machinery) and, with
    the C backend, pyroute2 out of the daemon: together about 14 MiB of RSS."""
    import subprocess
    import sys

    from agent import _backend

    code = (
        "import sys, types\n"
        "def run_main(args):\n"
        "    import agent.engine, agent.logs, agent.exporters.jsonl  # what the real run_main loads\n"
        "    heavy = [m for m in ('rich', 'pyroute2') if sys.modules.get(m) is not None]\n"
        "    print('loaded:', *heavy)\n"
        "    return 0\n"
        "sys.modules['agent.runner'] = types.SimpleNamespace(run_main=run_main)\n"
        "from agent.cli import main\n"
        "sys.exit(main(['run']))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={**os.environ, "PYTHONPATH": str(ROOT)}, cwd=ROOT)
    loaded = out.stdout.split()[1:]
    assert "rich" not in loaded, out.stdout
    if _backend.NAME == "C":
        assert loaded == [], out.stdout


def test_freezing_the_long_lived_state_sets_the_collector_as_the_agent_runs():
    """After ready (and each reload) the agent freezes what lives as long as the config and
    raises the collector's first threshold (agent/runner.py GC_GEN0): a tick's short-lived
    samples and gauge updates are freed by their counts before it is reached. Cyclic garbage
    made after the freeze is still collected."""
    import gc
    import weakref

    from agent import runner

    before = gc.get_threshold()
    try:
        runner.freeze_long_lived()
        assert gc.get_threshold()[0] == runner.GC_GEN0 > before[0]
        assert gc.get_freeze_count() > 0

        class Node:
            pass

        a, b = Node(), Node()
        a.other, b.other = b, a  # a cycle, made after the freeze
        gone = weakref.ref(a)
        del a, b
        gc.collect()
        assert gone() is None
    finally:
        gc.unfreeze()
        gc.set_threshold(*before)
