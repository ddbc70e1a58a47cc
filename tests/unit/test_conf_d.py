"""conf.d fragments merged over the main file (issue 38 item 2): NVUE's snippet owns one
whole file there, so applying it any number of times leaves the same config."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from agent import config
from agent.config import ConfigError
from tests.gnmi_helpers import make_pki

REPO = Path(__file__).resolve().parents[2]
PACKAGED = REPO / "packaging" / "swtel.yaml"
SNIPPET = REPO / "packaging" / "nvue-snippet.yaml"


def layout(tmp_path: Path, main: str, **frags: str) -> Path:
    main_file = tmp_path / "swtel.yaml"
    main_file.write_text(main)
    (tmp_path / "conf.d").mkdir(exist_ok=True)
    for name, text in frags.items():
        (tmp_path / "conf.d" / f"{name}.yaml").write_text(text)
    return main_file


def test_fragments_merge_in_name_order(tmp_path):
    f = layout(tmp_path, "interval: 250ms\nsources:\n  netdev: {interfaces: [eth*], exclude: [lo]}\n",
               **{"10-a": "interval: 50ms\nsources:\n  netdev: {interfaces: [swp*]}\n",
                  "20-b": "interval: 200ms\n"})
    cfg = config.load(str(f))
    assert cfg.interval == 0.2  # the last file that sets a key wins
    assert cfg.sources.netdev.interfaces == ["swp*"]  # a list is replaced, not appended
    assert cfg.sources.netdev.exclude == ["lo"]  # a mapping merges: the main file's key stays


def test_only_yaml_files_count_and_an_empty_one_sets_nothing(tmp_path):
    f = layout(tmp_path, "interval: 250ms\n", a="# nothing yet\n")
    (tmp_path / "conf.d" / "b.yaml.dpkg-old").write_text("interval: nonsense\n")
    (tmp_path / "conf.d" / ".c.yaml.swp").write_text("interval: nonsense\n")
    assert config.load(str(f)).interval == 0.25


def test_a_problem_names_the_fragment_and_its_line(tmp_path):
    f = layout(tmp_path, "interval: 250ms\n",
               nvue="# managed by NVUE\nexporters:\n  dialout:\n    - name: c1\n      address: nowhere\n")
    with pytest.raises(ConfigError) as err:
        config.load(str(f))
    assert err.value.problems == [
        "conf.d/nvue.yaml, line 5: exporters.dialout[0].address: expected host:port, got 'nowhere'"]


def test_a_yaml_error_names_the_fragment(tmp_path):
    f = layout(tmp_path, "interval: 250ms\n", nvue="interval: 100ms\ninterval: 200ms\n")
    with pytest.raises(ConfigError) as err:
        config.load(str(f))
    assert err.value.problems[0].startswith("conf.d/nvue.yaml: line 2"), err.value.problems


def test_the_patch_file_copied_into_conf_d_says_what_it_is(tmp_path):
    f = layout(tmp_path, "interval: 250ms\n", nvue=SNIPPET.read_text())
    with pytest.raises(ConfigError) as err:
        config.load(str(f))
    assert "it is an NVUE patch file: `nv config patch` it" in err.value.problems[0]


def snippet_content(**changes: str) -> str:
    """The packaged snippet's content, its example paths made real for this machine."""
    doc = yaml.safe_load(SNIPPET.read_text())
    snippet = doc[0]["set"]["system"]["config"]["snippet"]["swtel-config"]
    assert snippet["file"] == "/etc/swtel/conf.d/nvue.yaml"
    text = snippet["content"]
    for old, new in changes.items():
        assert old in text, old
        text = text.replace(old, new)
    return text


def nvue_apply(tmp_path: Path, content: str) -> None:
    """What `nv config apply` does with a flexible snippet whose file it owns: write it whole."""
    (tmp_path / "conf.d" / "nvue.yaml").write_text(content)


def run_agent(main: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "agent", "run", "-c", str(main), "--duration", "0.3"],
                          cwd=REPO, capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PYTHONPATH": str(REPO)})


def test_the_snippet_applied_twice_and_changed_once_validates_and_runs(tmp_path):
    pki = make_pki(tmp_path / "pki")
    real = {"/etc/swtel/ca.pem": str(pki.ca), "/etc/swtel/client.pem": str(pki.client_cert),
            "/etc/swtel/client.key": str(pki.client_key), "192.0.2.10:57400": "127.0.0.1:9"}
    main = layout(tmp_path, PACKAGED.read_text(),
                  # this machine's own: a socket the test may make, no swtel group, no swp ports
                  **{"zz-test": f"control: {{socket: {tmp_path}/s.sock, group: null}}\n"
                                "sources: {netdev: {interfaces: [lo], exclude: []}, ethtool: {enabled: false}}\n"})
    first = snippet_content(**real)
    for content in (first, first, snippet_content(**real, **{"interval: 100ms": "interval: 200ms"})):
        nvue_apply(tmp_path, content)
        cfg = config.load(str(main))
        assert cfg.exporters.dialout[0].tls.ca == str(pki.ca)
        r = subprocess.run([sys.executable, "-m", "agent", "validate", str(main)], cwd=REPO,
                           capture_output=True, text=True, timeout=60, env={**os.environ, "PYTHONPATH": str(REPO)})
        assert r.returncode == 0 and r.stdout.strip() == "OK", r.stderr
        res = run_agent(main)
        assert res.returncode == 0, res.stderr + res.stdout
    assert cfg.interval == 0.2  # the changed snippet's value


def test_validate_on_the_patch_file_checks_what_it_writes(tmp_path):
    r = subprocess.run([sys.executable, "-m", "agent", "validate", str(SNIPPET)], cwd=REPO,
                       capture_output=True, text=True, timeout=60, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert "is an NVUE patch file (for `nv config patch`), not a swtel config" in r.stderr
    # the example's TLS files are the only problem on a machine that lacks them
    problems = [line for line in r.stderr.splitlines() if line.startswith("snippet swtel-config")]
    assert r.returncode == 1 and problems
    assert all("no such file '/etc/swtel/" in p for p in problems), problems
    fixed = tmp_path / "patch.yaml"
    fixed.write_text(SNIPPET.read_text().replace("                    tls:\n", "                    insecure: true\n"
                                                 "                    insecure_remote: true\n"
                                                 "                    tls:\n"))
    r = subprocess.run([sys.executable, "-m", "agent", "validate", str(fixed)], cwd=REPO,
                       capture_output=True, text=True, timeout=60, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert r.returncode == 0 and r.stdout.strip() == "OK", r.stderr
