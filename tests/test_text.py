"""netcheck.text.untrusted: node text made printable and bounded."""

from __future__ import annotations

from netcheck.text import UNTRUSTED_LIMIT, untrusted


def test_control_characters_are_escaped() -> None:
    assert untrusted("a\x00b\nc\x1b[31md\u2028") == "a\\x00b\\nc\\x1b[31md\\u2028"


def test_printable_unicode_and_markup_are_kept() -> None:
    assert untrusted("café [bold] ü") == "café [bold] ü"


def test_long_text_is_cut_to_the_limit() -> None:
    out = untrusted("x" * 1000)
    assert len(out) == UNTRUSTED_LIMIT and out.endswith("…")
    assert untrusted("\x00" * 100, limit=10) == "\\x00" * 2 + "\\…"
