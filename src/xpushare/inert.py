"""Strings that came from clients, made inert before they reach a log line or a terminal.

A client names its GPU, its job, its pod and its command line; any local user may send them. In a
log line a newline would start a forged line; on root's terminal an escape sequence would clear the
screen, retitle the window or blink. So every character that is not printable (controls, line and
paragraph separators, format characters) is written as its escape (`\\x1b`, `\\u2028`); printable
text is left as it is. (nvsharectl's consoles interpret no markup or emoji codes either:
ctl_render.make_console.)
"""

from __future__ import annotations


def _escape(ch: str) -> str:
    o = ord(ch)
    return f"\\x{o:02x}" if o < 0x100 else f"\\u{o:04x}" if o < 0x10000 else f"\\U{o:08x}"


def inert(text: str) -> str:
    """`text` with every character that is not printable written as its escape."""
    if text.isprintable():
        return text
    return "".join(ch if ch.isprintable() else _escape(ch) for ch in text)


def inert_tree(value):
    """A copy of a JSON-like value (dicts, lists, strings) with every string made inert."""
    if isinstance(value, str):
        return inert(value)
    if isinstance(value, dict):
        return {k: inert_tree(v) for k, v in value.items()}
    if isinstance(value, list):
        return [inert_tree(v) for v in value]
    return value
