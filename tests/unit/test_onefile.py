"""A source or a detector is one file (issue 37, docs/DEVELOPING.md "What a newcomer touches").

A copy of agent/ gets two new files and nothing else: a source that declares a semantic no
other file knows, and a detector that reads it. Both are picked up (registries, config), the
source's counters are classified by its declaration, and the detector raises its event from
the source's data. Run in a subprocess: the registries and classify's tables stay as they were
for the other tests."""

from __future__ import annotations

import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

from agent.insights import classify

ROOT = Path(__file__).resolve().parents[2]

SOURCE = '''
"""widgets source: one throwaway counter per port, read by the widget_storm detector."""

from __future__ import annotations

from array import array
from dataclasses import dataclass

from agent.counters import COUNTER, OPENCONFIG, Container, CounterSpec, CounterTable
from agent.pathgrammar import interface_path
from agent.sources.base import Source, SourceConfig, register

PORTS = ("swp1", "swp2")


@dataclass
class WidgetsConfig(SourceConfig):
    """``sources.widgets``."""


@register
class WidgetsSource(Source):
    name = "widgets"
    config_class = WidgetsConfig
    doc = "widgets per port"
    semantics = {("state/counters", "in-widgets"): ("widgets", "")}
    levels = {"widgets": False}

    def setup(self, links) -> None:
        self.table = CounterTable(self.name, [
            CounterSpec(Container(OPENCONFIG, interface_path(p) + "/state/counters"), "in-widgets", 64, COUNTER, p)
            for p in PORTS])
        self.values = array("Q", bytes(8 * len(PORTS)))

    def read(self) -> int:
        return len(PORTS)
'''

DETECTOR = '''
"""widget_storm: too many widgets within a window."""

from __future__ import annotations

from dataclasses import dataclass

from agent.config import Duration, setting
from agent.insights.base import WARNING, WindowCount, register


@dataclass
class WidgetStormConfig:
    enabled: bool = setting(True)
    threshold: int = setting(10)
    window: Duration = setting(Duration(10.0))
    clear_after: Duration = setting(Duration(60.0))


@register
class WidgetStorm(WindowCount):
    name = "widget_storm"
    config_class = WidgetStormConfig
    doc = "widgets on a port"
    reads = ("widgets",)
    types = ("widget-storm",)
    sems = frozenset({"widgets"})
    pro_rata = False

    def counts(self, acc, owned):
        return (acc.get(("widgets", ""), 0) if "widgets" in owned else 0,)

    def report(self, port, ts, totals):
        self.ctx.hit(self, "widget-storm", port, ts, WARNING, totals[0], "widgets", f"{port}: widgets", [port])
'''

DRIVE = '''
from array import array

import agent.plugins
from agent import config, registry
from agent.counters import F_CHANGED, F_NEW, Batch
from agent.insights import REGISTRY as DETECTORS, InsightsPipeline, classify
from agent.sources import REGISTRY as SOURCES

assert "widgets" in SOURCES and "widgets" in registry.SOURCES
assert "widget_storm" in DETECTORS and "widget_storm" in registry.DETECTORS
cfg = config.parse("sources: {widgets: {interval: 1s}}\\ninsights: {widget_storm: {threshold: 10}}")
assert cfg.sources.widgets.enabled and cfg.insights.widget_storm.threshold == 10
assert "widgets" in classify.ALL and DETECTORS["widget_storm"].sem_bits == classify.BITS["widgets"]

src = SOURCES["widgets"](cfg)
src.setup({})
assert [classify.classify(s) for s in src.table.specs] == [("swp1", "widgets", ""), ("swp2", "widgets", "")]
runner = InsightsPipeline(cfg.insights)
n, ns = len(src.table.specs), 1_000_000_000
values = array("Q", bytes(8 * n))
runner.on_batch(Batch("widgets", ns, src.table, list(range(n)), values, [0] * n, bytes([F_CHANGED | F_NEW]) * n))
runner.end_pass(ns)
for k in range(2, 8):
    values[0] += 3  # swp1: 3 widgets a second, swp2 none
    runner.on_batch(Batch("widgets", k * ns, src.table, [0], array("Q", values), [3], bytes([F_CHANGED])))
    runner.end_pass(k * ns)
print(sorted((e["type"], e["interfaces"][0]) for e in runner.status()["open"]))
'''


def test_a_new_source_and_detector_are_one_file_each(tmp_path):
    tree = tmp_path / "tree"
    shutil.copytree(ROOT / "agent", tree / "agent", ignore=shutil.ignore_patterns("__pycache__"))
    (tree / "agent" / "sources" / "widgets.py").write_text(textwrap.dedent(SOURCE))
    (tree / "agent" / "insights" / "widget_storm.py").write_text(textwrap.dedent(DETECTOR))
    run = subprocess.run([sys.executable, "-c", DRIVE], cwd=tree, capture_output=True, text=True, timeout=300,
                         env=_env(tree))
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip().splitlines()[-1] == "[('widget-storm', 'swp1')]"  # swp2 had none


def test_a_module_that_registers_nothing_must_say_it_is_machinery(tmp_path):
    """A plugin whose @register was forgotten fails at import, not silently; a helper module
    says MACHINERY = True in itself, listed nowhere else."""
    tree = tmp_path / "tree"
    shutil.copytree(ROOT / "agent", tree / "agent", ignore=shutil.ignore_patterns("__pycache__"))
    helper = tree / "agent" / "sources" / "widget_helpers.py"
    helper.write_text("MACHINERY = True  # shared by widget sources\n")
    script = "import agent.plugins"
    assert subprocess.run([sys.executable, "-c", script], cwd=tree, env=_env(tree),
                          capture_output=True, text=True, timeout=300).returncode == 0
    helper.write_text("X = 1\n")
    run = subprocess.run([sys.executable, "-c", script], cwd=tree, env=_env(tree), capture_output=True, text=True,
                         timeout=300)
    assert run.returncode != 0 and "agent.sources.widget_helpers: registers no plugin" in run.stderr


def test_the_40th_semantic_has_a_bit_that_is_not_spill():
    """Semantics past the mask's width share its last semantic bit (a superset: a lazy detector
    may be called when another of them moved), never SPILL; the first ones keep their own bits."""
    script = textwrap.dedent("""
        from agent.insights import classify as c
        before = dict(c.BITS)
        new = [c.declare(f"sem-{k}", level=False) for k in range(40 - len(c.ALL))]
        assert len(c.ALL) == 40 and all(c.BITS[s] == b for s, b in before.items())
        assert all(c.BITS[s] and not c.BITS[s] & c.SPILL for s in c.ALL)
        assert c.mask({new[-1]}) & c.mask({new[-2]}) and not c.mask({new[-1]}) & c.mask(set(before) - set(c.ALL[30:]))
        assert all(c.BITS[s] < 1 << 31 for s in c.ALL)  # fits the feeds' u32 per counter
        print("ok")
    """)
    run = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0 and run.stdout.strip() == "ok", run.stderr


def test_the_built_in_semantics_keep_their_bits():
    assert classify.ALL[:3] == ["rx-octets", "tx-octets", "rx-bits"] and classify.SPILL == 1 << 31
    assert [classify.BITS[s] for s in classify.ALL[:20]] == [1 << k for k in range(20)]


def _env(tree: Path) -> dict[str, str]:
    import os

    return {**os.environ, "PYTHONPATH": str(tree)}
