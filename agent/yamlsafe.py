"""A YAML reader that bounds what a document may cost, whoever wrote it (the config file).

A SafeLoader that also keeps ``0660`` as text, rejects duplicate keys and refuses nesting
deeper than :data:`MAX_DEPTH` and more than :data:`MAX_VALUES` values after alias expansion
(docs/config.md, "Limits"). The typed loading of those values is agent/config.py's.
"""

from __future__ import annotations

import re
from typing import Any

import yaml

MAX_DEPTH = 32  # nesting of mappings and lists
MAX_VALUES = 50_000  # YAML values (scalars, lists, mappings), counted after alias expansion
# Python refuses int() of 4,300+ digits and str() of an int that long (a hex one parses): far
# below both, an integer is refused where it is read; smaller absurd ones meet the keys' ranges.
MAX_INT_CHARS = 1000
MAX_INT_BITS = 3000


class Loader(yaml.SafeLoader):
    """SafeLoader that keeps ``0660`` as text (YAML 1.1 would make it octal 432), rejects
    duplicate keys, which plain YAML silently resolves to the last one, and bounds what a
    file can cost: nesting deeper than :data:`MAX_DEPTH` and more than :data:`MAX_VALUES`
    values after alias expansion ("billion laughs") are errors, raised while composing,
    before anything is expanded."""

    def __init__(self, stream: Any) -> None:
        super().__init__(stream)
        self._depth = 0
        self._values = 0  # values composed so far, an alias counting as everything it stands for
        self._sizes: dict[int, int] = {}  # id(node) -> its expanded size (nodes are immutable here)

    def _size(self, node: yaml.Node) -> int:
        size = self._sizes.get(id(node))
        if size is None:
            size = 1
            if isinstance(node, yaml.SequenceNode):
                size += sum(self._size(n) for n in node.value)
            elif isinstance(node, yaml.MappingNode):
                size += sum(self._size(k) + self._size(v) for k, v in node.value)
            self._sizes[id(node)] = size
        return size

    def _count(self, n: int, mark: Any) -> None:
        self._values += n
        if self._values > MAX_VALUES:
            raise yaml.composer.ComposerError(
                None, None, f"too many values: more than {MAX_VALUES} after expanding aliases", mark)

    def compose_node(self, parent: Any, index: Any) -> Any:
        event = self.peek_event()
        if isinstance(event, yaml.AliasEvent):
            node = super().compose_node(parent, index)
            self._count(self._size(node), event.start_mark)
            return node
        self._count(1, event.start_mark)
        self._depth += 1
        try:
            if self._depth > MAX_DEPTH:
                raise yaml.composer.ComposerError(
                    None, None, f"nesting too deep (more than {MAX_DEPTH} levels)", event.start_mark)
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

    def construct_object(self, node: yaml.Node, deep: bool = False) -> Any:
        """Any value the constructors cannot make (a timestamp past the calendar, a number past
        Python's limits) becomes a YAML error at its node, so the config error names its line."""
        try:
            return super().construct_object(node, deep=deep)
        except yaml.YAMLError:
            raise
        except (ValueError, TypeError, OverflowError) as exc:
            reason = str(exc)
            raise yaml.constructor.ConstructorError(
                None, None, f"cannot read this value: {reason[:120]}", node.start_mark) from None

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=True)
            if isinstance(key, str | int | float | bool) and key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"duplicate key {key!r}", key_node.start_mark
                )
            if isinstance(key, str | int | float | bool):
                seen.add(key)
        return super().construct_mapping(node, deep=deep)


def _construct_int(loader: yaml.SafeLoader, node: yaml.ScalarNode) -> Any:
    text = loader.construct_scalar(node)
    if re.fullmatch(r"0[0-7]+", str(text)):
        return str(text)  # a file mode; int fields reject it with a clear message
    if len(str(text)) > MAX_INT_CHARS:  # before int()
        raise yaml.constructor.ConstructorError(
            None, None, f"integer too large ({len(str(text))} characters)", node.start_mark)
    value = yaml.SafeLoader.construct_yaml_int(loader, node)
    if value.bit_length() > MAX_INT_BITS:
        raise yaml.constructor.ConstructorError(
            None, None, f"integer too large ({value.bit_length()} bits)", node.start_mark)
    return value


Loader.add_constructor("tag:yaml.org,2002:int", _construct_int)
