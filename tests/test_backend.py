"""The backend CI asked for is the one that loaded: a fallback is never silent."""

from __future__ import annotations

import os

import pytest

from agent import _backend


def test_expected_backend_loaded():
    expected = os.environ.get("SWTEL_EXPECT_BACKEND")
    if not expected:
        pytest.skip("SWTEL_EXPECT_BACKEND not set (CI sets it for each pass)")
    assert _backend.NAME == expected, _backend.FALLBACK_REASON
    if expected == "C":
        assert _backend.reader.__name__ == "agent._swtel"
        assert _backend.FALLBACK_REASON is None


def test_both_backends_offer_the_same_functions():
    from agent import _pyreader

    names = {"netdev_read", "ethtool_drvinfo", "ethtool_strings", "ethtool_read", "sysfs_read", "diff"}
    assert names <= set(dir(_pyreader))
    if _backend.NAME == "C":
        assert names <= set(dir(_backend.reader))
        assert _backend.reader.version == _pyreader.version
