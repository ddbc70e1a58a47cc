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
    from agent import _fallback

    names = {"netdev_read", "ethtool_drvinfo", "ethtool_strings", "ethtool_read", "sysfs_read", "diff",
             "feed_add"}
    assert names <= set(dir(_fallback))
    if _backend.NAME == "C":
        assert names <= set(dir(_backend.reader))
        assert _backend.reader.version == _fallback.version


def test_fallback_offers_every_name_of_the_extension_with_the_same_constants():
    """agent/_fallback mirrors agent/_ext: every function and constant of the extension exists
    in the fallback, constants equal; the change flags are agent.counters' (defined once)."""
    from agent import _fallback, counters

    for flag in ("F_CHANGED", "F_WRAP", "F_RESET", "F_NEW", "F_JUMP"):
        assert getattr(_fallback, flag) == getattr(counters, flag)
    if _backend.NAME != "C":
        pytest.skip("the C extension is not loaded")
    c = _backend.reader
    public = {n for n in dir(c) if not n.startswith("_")}
    assert public <= set(dir(_fallback)), public - set(dir(_fallback))
    for name in public:
        value = getattr(c, name)
        if isinstance(value, int | str):
            assert getattr(_fallback, name) == value, name


def test_the_version_lives_in_one_place():
    from pathlib import Path

    from agent import __version__

    root = Path(__file__).resolve().parents[2]
    assert "version = " not in (root / "pyproject.toml").read_text().split("[project]")[1].split("[")[0]
    assert __version__ not in (root / "agent" / "_ext" / "swtel.h").read_text()
    if _backend.NAME == "C":
        assert _backend.reader.version == __version__
