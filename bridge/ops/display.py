"""Caller input shown on a terminal, safely."""

from __future__ import annotations

import unicodedata


def escape(text: str | bytes | None) -> str:
    """Caller input made safe for one terminal line.

    Bytes that are not UTF-8, control characters (C0, DEL, C1), format
    characters (bidi overrides, zero-width) and line/paragraph separators are
    shown as ``\\xNN`` / ``\\uNNNN`` / ``\\UNNNNNNNN``; a backslash as ``\\\\``, so the result is
    unambiguous. Everything else (any script, emoji) is shown as it is.
    """
    if text is None:
        return ""
    raw = isinstance(text, bytes)
    s = text.decode("utf-8", "surrogateescape") if isinstance(text, bytes) else text
    out: list[str] = []
    for ch in s:
        code = ord(ch)
        if raw and 0xDC80 <= code <= 0xDCFF:  # a byte that was not UTF-8
            out.append(f"\\x{code - 0xDC00:02x}")
        elif ch == "\\":
            out.append("\\\\")
        elif unicodedata.category(ch) in ("Cc", "Cf", "Cs", "Zl", "Zp"):
            out.append(f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}")
        else:
            out.append(ch)
    return "".join(out)
