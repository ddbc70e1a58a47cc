"""README's configuration table and "How it works" name every source and exporter the
registries hold (docs/config.md is generated from them; README is written by hand, so a
new plugin must add its row, and a removed one lose it)."""

from __future__ import annotations

import re
from dataclasses import fields
from pathlib import Path

import pytest

import agent.plugins  # noqa: F401  (fills the registries)
from agent import config

pytestmark = pytest.mark.once  # a check of the tree: the same on every backend

README = (Path(__file__).resolve().parents[2] / "README.md").read_text()


def _section(title: str) -> str:
    start = README.index(f"\n## {title}\n")
    end = README.find("\n## ", start + 1)
    return README[start:end if end > 0 else None]


def _table_keys() -> set[str]:
    return {m[1] for m in re.finditer(r"^\| `([a-z_.]+)(?:\[\])?` \|", _section("Configuration"), re.M)}


def _registered() -> dict[str, set[str]]:
    cfg = config.Config()
    return {kind: {f.name for f in fields(getattr(cfg, kind))} for kind in ("sources", "exporters")}


def test_the_config_table_has_a_row_for_every_source_and_exporter():
    keys = _table_keys()
    for kind, names in _registered().items():
        rows = {k.split(".", 1)[1] for k in keys if k.startswith(f"{kind}.")}
        assert rows == names, (kind, "missing:", names - rows, "not registered:", rows - names)


def test_the_config_table_names_the_top_level_sections():
    assert {"target", "interval", "control", "log", "insights"} <= _table_keys()


def test_how_it_works_names_every_exporter_file():
    text = _section("How it works")
    for name in _registered()["exporters"]:
        assert f"`{name}.py`" in text, name
