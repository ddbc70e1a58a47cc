"""The tables of docs/config.md that list the plugins' keys, rendered from the registries.

Each plugin's section dataclass (agent/sources/*.py, agent/exporters/*.py,
agent/insights/*.py) documents its keys in the fields' metadata (``config.setting``);
this renders one row per key: its dotted YAML path, type, default and meaning. The
prose of docs/config.md stays hand-written: only what lies between a
``<!-- configdoc: KIND -->`` line and the next ``<!-- /configdoc -->`` is generated,
and tests/unit/test_configdoc.py holds the file to it.

    python -m agent.configdoc --write docs/config.md   # after changing a section dataclass
"""

from __future__ import annotations

import json
import re
import sys
from dataclasses import MISSING, Field, fields, is_dataclass
from typing import Any, get_args, get_origin, get_type_hints

import agent.plugins  # noqa: F401  (fills the registries)
from agent import config, registry
from agent.config import Duration, HostPort

HEADER = ["| key | type | default | meaning |", "|---|---|---|---|"]
_BLOCK = re.compile(r"(<!-- configdoc: (\w+) -->\n)(.*?)(<!-- /configdoc -->)", re.S)


def _row(*cells: str) -> str:
    return "|" + "|".join(f" {c} " if c else " " for c in cells) + "|"


def _plain(tp: Any) -> Any:
    return config._optional_inner(tp) or tp


def _type(key: str, meta: Any, tp: Any) -> str:
    if "type" in meta:
        return meta["type"]
    tp = _plain(tp)
    if is_dataclass(tp):
        return "mapping"
    if tp is bool:
        return "bool"
    if tp is HostPort:
        return "host:port"
    raise ValueError(f"{key}: its type cannot be told from {tp}: give it config.setting(type=...)")


def _shown(f: Field, meta: Any, tp: Any) -> str:
    if "shown" in meta:
        return meta["shown"]
    if is_dataclass(_plain(tp)):
        return ""
    value = f.default if f.default is not MISSING else f.default_factory()  # type: ignore[misc]
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    if value is None:
        return "`null`"
    if isinstance(value, Duration | HostPort | int):
        return f"`{value}`"
    if isinstance(value, float):
        return f"`{value:g}`"
    if isinstance(value, str):
        return f"`{value}`" if value else '`""`'
    return f"`{json.dumps(value)}`"


def rows(cls: type, prefix: str, overrides: dict[str, dict[str, str]] | None = None) -> list[str]:
    """One row per key of ``cls`` (a section dataclass), and of its nested mappings."""
    out: list[str] = []
    hints = get_type_hints(cls)
    for f in fields(cls):
        meta = {**f.metadata, **(overrides or {}).get(f.name, {})}
        key = f"{prefix}{f.name}"
        tp = hints[f.name]
        out.append(_row(f"`{key}`", _type(key, meta, tp), _shown(f, meta, tp), meta.get("doc", "")))
        inner = _plain(tp)
        if get_origin(inner) is list and is_dataclass(get_args(inner)[0]):
            out += rows(get_args(inner)[0], f"{key}[].", meta.get("sub"))
        elif is_dataclass(inner):
            out += rows(inner, f"{key}.", meta.get("sub"))
    return out


def _sections(reg: registry.Registry) -> list[str]:
    out: list[str] = []
    for sec in reg:
        key = f"{reg.kind}.{sec.name}"
        out.append(_row(f"`{key}`", sec.doc_type, sec.doc_default, sec.doc))
        out += rows(sec.config, f"{key}[]." if sec.many else f"{key}.")
    return out


def table(kind: str) -> str:
    """The table of ``sources``, ``exporters`` or ``insights``."""
    if kind == "insights":
        insights = config.Insights
        own = [f for f in fields(insights) if f.name not in registry.DETECTORS]
        hints = get_type_hints(insights)
        lines = [_row(f"`insights.{f.name}`", _type(f.name, f.metadata, hints[f.name]),
                      _shown(f, f.metadata, hints[f.name]), f.metadata.get("doc", "")) for f in own]
        lines += _sections(registry.DETECTORS)
    else:
        lines = _sections({"sources": registry.SOURCES, "exporters": registry.EXPORTERS}[kind])
    return "\n".join(HEADER + lines) + "\n"


def render(text: str) -> str:
    """``text`` (docs/config.md) with every generated table brought up to date."""
    return _BLOCK.sub(lambda m: m.group(1) + table(m.group(2)) + m.group(4), text)


def main(argv: list[str]) -> int:
    write = "--write" in argv
    paths = [a for a in argv if a != "--write"] or ["docs/config.md"]
    for path in paths:
        with open(path, encoding="utf-8") as f:
            text = render(f.read())
        if write:
            with open(path, "w", encoding="utf-8") as f:
                f.write(text)
        else:
            sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
