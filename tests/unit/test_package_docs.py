"""The package installs every doc the installed files point to (issue 38 item 9): the
conffile, the NVUE snippet, the README and the installed docs themselves name docs/*.md,
and each must be in /usr/share/doc/swtel (debian/swtel.docs)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
INSTALLED = [line.strip() for line in (REPO / "debian" / "swtel.docs").read_text().splitlines() if line.strip()]
POINTERS = sorted({"packaging/swtel.yaml", "packaging/nvue-snippet.yaml", *INSTALLED})
SOURCE_ONLY = {"DEVELOPING.md"}  # how to work on swtel: read in the source tree, not on a switch

pytestmark = pytest.mark.once


def named_docs(text: str) -> set[str]:
    """docs/*.md files a text names (``docs/x.md``, ``(x.md)`` links, ``/usr/share/doc/swtel/x.md``)."""
    names = set(re.findall(r"(?:docs/|/usr/share/doc/swtel/|\]\()([A-Za-z_-]+\.md)", text))
    names |= set(re.findall(r"\b([a-z_-]+\.md)\b", text))
    return {n for n in names if (REPO / "docs" / n).is_file() and n not in SOURCE_ONLY}


@pytest.mark.parametrize("pointer", POINTERS)
def test_every_doc_an_installed_file_names_is_installed(pointer):
    missing = sorted(f"docs/{n}" for n in named_docs((REPO / pointer).read_text()) if f"docs/{n}" not in INSTALLED)
    assert not missing, f"{pointer} names {missing}, which debian/swtel.docs does not install"
