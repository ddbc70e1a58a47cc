"""exporters.base.lazy_imports: an exporter's heavy libraries are imported when it is built
(its ``_load``), not when a config is parsed (tests/unit/test_layers.py holds that part)."""

from __future__ import annotations

import json

import pytest

from agent.exporters.base import lazy_imports

pytestmark = pytest.mark.once  # no backend and no library version decides it


def test_names_are_imported_on_the_first_call_and_then_kept():
    namespace: dict = {"codec": None, "dumps": None, "made": None}
    built = []

    def then() -> dict:
        built.append(True)
        return {"made": namespace["dumps"]({"a": 1})}  # built from what was imported

    load = lazy_imports(namespace, then, codec="json", dumps="json:dumps")
    assert namespace == {"codec": None, "dumps": None, "made": None}  # nothing before the build
    load()
    assert namespace["codec"] is json and namespace["dumps"] is json.dumps
    assert namespace["made"] == '{"a": 1}'
    load()
    assert built == [True]  # later calls do nothing


def test_a_missing_library_fails_each_build_until_it_is_there():
    namespace: dict = {"lib": None}
    load = lazy_imports(namespace, lib="swtel_test_no_such_module")
    for _attempt in range(2):  # not remembered as loaded after a failure
        with pytest.raises(ImportError):
            load()
    assert namespace["lib"] is None


def test_an_attribute_the_module_lacks_fails_the_build():
    load = lazy_imports({"x": None}, x="json:no_such_attribute")
    with pytest.raises(AttributeError):
        load()
