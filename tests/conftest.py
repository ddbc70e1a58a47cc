"""Shared test setup: report which backend runs, and gate root-only tests."""

from __future__ import annotations

import os

import pytest

import agent.plugins  # noqa: F401  (fills the config registries: every test may read a config)


def pytest_report_header(config):
    from agent import _backend

    return f"swtel reader backend: {_backend.NAME} (fallback reason: {_backend.FALLBACK_REASON})"


def pytest_collection_modifyitems(config, items):
    if os.geteuid() == 0:
        return
    skip = pytest.mark.skip(reason="needs root: network namespaces and veth pairs")
    for item in items:
        if "root" in item.keywords:
            item.add_marker(skip)
