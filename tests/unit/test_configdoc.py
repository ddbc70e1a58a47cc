"""docs/config.md's tables of the plugins' keys are generated from the registries (each
section dataclass documents its keys) and must stay in step with them."""

from pathlib import Path

import pytest

from agent import config, configdoc, registry

# a check of the tree itself: the same whichever backend or libraries run it
pytestmark = pytest.mark.once

DOC = Path(__file__).resolve().parents[2] / "docs" / "config.md"


def test_config_doc_tables_are_current():
    text = DOC.read_text()
    assert text == configdoc.render(text), "run: python -m agent.configdoc --write docs/config.md"


def test_every_plugin_table_is_generated():
    text = DOC.read_text()
    for kind in ("sources", "exporters", "insights"):
        assert f"<!-- configdoc: {kind} -->" in text, kind


def _known_first(names: list[str], known: list[str]) -> None:
    """``known`` in this order, then every other section by name."""
    assert names[:len(known)] == known
    assert names[len(known):] == sorted(names[len(known):])


def test_sections_keep_their_order():
    """The order of the sections is the registries' (the runner's min_interval, the engine and
    the docs loop over them): the known ones first, in this order, then new ones by name."""
    from dataclasses import fields

    cfg = config.Config()
    _known_first([f.name for f in fields(cfg.sources)], ["netdev", "ethtool", "rdma", "system", "asic"])
    _known_first([f.name for f in fields(cfg.exporters)], ["jsonl", "dialout", "server", "tunnel", "otlp"])
    _known_first([f.name for f in fields(cfg.insights)], [
        "enabled", "history", "error_burst", "link_flap", "pfc_storm", "drop_burst", "imbalance",
        "throughput_dip", "roce_retrans"])
    assert {"devlink", "devlink_trap", "ethnl"} <= {f.name for f in fields(cfg.sources)}
    assert {"remote_write"} <= {f.name for f in fields(cfg.exporters)}
    assert {"congestion", "drop_reason", "link_degrading"} <= {f.name for f in fields(cfg.insights)}


def test_a_new_plugin_is_one_registration(monkeypatch):
    """A section registered by a plugin module appears in the config, its keys are parsed and
    checked, and the docs table lists it, with nothing else to edit."""
    from dataclasses import dataclass

    @dataclass
    class ToyConfig:
        enabled: bool = config.setting(False)
        interval: config.Duration | None = config.setting(None, type="duration or null")
        depth: int = config.setting(3, type="integer", doc="how deep")

    def check(section, where, problems, cfg):
        if section.depth < 1:
            problems.append(f"{where}.depth: must be at least 1, got {section.depth}")

    before = config.Config
    monkeypatch.setattr(registry.SOURCES, "_sections", dict(registry.SOURCES._sections))
    registry.SOURCES.add(registry.Section("toy", ToyConfig, check=check, doc="a toy source"))
    cfg = config.parse("sources: {toy: {enabled: true, depth: 5}}\n")
    assert cfg.sources.toy == ToyConfig(enabled=True, depth=5)
    assert list(config.Config().sources.__dataclass_fields__)[-1] == "toy"
    with pytest.raises(config.ConfigError) as info:
        config.parse("sources: {toy: {depth: 0}}\n")
    assert info.value.problems == ["sources.toy.depth: must be at least 1, got 0"]
    assert "| `sources.toy.depth` | integer | `3` | how deep |" in configdoc.table("sources")
    monkeypatch.undo()
    assert config.Config is before  # the same classes again: configs read before compare equal


def test_parse_refuses_empty_registries(monkeypatch):
    monkeypatch.setattr(registry.EXPORTERS, "_sections", {})
    with pytest.raises(RuntimeError, match="import agent.plugins"):
        config.parse("")
    with pytest.raises(RuntimeError, match="import agent.plugins"):
        config.Config  # noqa: B018
