"""Text for a person's terminal: what an agent reports (port names from a driver or an ASIC
plugin, event messages quoting them, error strings) is data, never terminal control.

:func:`printable` escapes every character a terminal would act on instead of showing:
the C0 controls (ESC, BEL, BS, CR, LF, ...), DEL, the C1 controls (U+0080-U+009F, 8-bit
CSI and OSC among them), the line and paragraph separators and the bidirectional
overrides and isolates that reorder what is shown (U+202A-U+202E, U+2066-U+2069, U+200E,
U+200F, U+061C). They are written as Python would (``\\x1b``, ``\\n``, ``\\u202e``), so a name
that holds them stays recognisable and nothing is lost. A backslash is written as is.
"""

from __future__ import annotations

import re
from typing import Any

_UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069]")
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escape(m: re.Match[str]) -> str:
    char = m.group()
    code = ord(char)
    return _NAMED.get(char) or (f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}")


def printable(value: Any) -> str:
    """``str(value)`` with every control character escaped (see the module's doc)."""
    text = value if isinstance(value, str) else str(value)
    return _UNSAFE.sub(_escape, text) if _UNSAFE.search(text) else text


def printable_lines(text: str) -> str:
    """A multi-line text: each line made printable, the line breaks kept."""
    return "\n".join(printable(line) for line in text.split("\n"))


def far_end(event: Any) -> str:
    """How status and top show an event's far end (``  neighbor: leaf-3 swp61``), or "" when it
    has none (or comes from an agent before events named it)."""
    name = event.get("neighbor") if isinstance(event, dict) else None
    return f"  neighbor: {name}" if name else ""
