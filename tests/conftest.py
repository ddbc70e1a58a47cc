"""Shared test setup: report which backend runs, keep root-only tests out of unit/, and gate
them when not root."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

import agent.plugins  # noqa: F401  (fills the config registries: every test may read a config)

HERE = Path(__file__).resolve().parent

try:
    from hypothesis import settings
except ImportError:  # the suites that use it need it anyway
    pass
else:
    # No per-example deadline: it times each example, and a loaded machine fails it although
    # the code is right (docs/DEVELOPING.md, "Tests that load cannot break").
    settings.register_profile("swtel", deadline=None)
    settings.load_profile("swtel")


def pytest_report_header(config):
    from agent import _backend

    return f"swtel reader backend: {_backend.NAME} (fallback reason: {_backend.FALLBACK_REASON})"


def pytest_collection_modifyitems(config, items):
    # tests/ is split by what a test needs: unit/ runs as any user, netns/ needs root
    # (namespaces, veth, files of other users), interop/ runs third-party peers
    misplaced = [item.nodeid for item in items
                 if "root" in item.keywords and "unit" in Path(item.path).relative_to(HERE).parts[:1]]
    if misplaced:
        raise pytest.UsageError("tests that need root belong in tests/netns/, not tests/unit/: "
                                + ", ".join(misplaced))
    if os.geteuid() == 0:
        return
    skip = pytest.mark.skip(reason="needs root: network namespaces and veth pairs")
    for item in items:
        if "root" in item.keywords:
            item.add_marker(skip)
