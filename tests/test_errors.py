"""netcheck.errors: the close codes as they come off the wire."""

from __future__ import annotations

from netcheck.errors import CloseCode


def test_close_code_from_wire() -> None:
    """A code netcheck defines maps to its CloseCode; none or a foreign code maps to None."""
    assert CloseCode.from_wire(4017) is CloseCode.PROFILE_MISMATCH
    assert CloseCode.from_wire(1000) is CloseCode.NORMAL
    assert CloseCode.from_wire(None) is None
    assert CloseCode.from_wire(1006) is None and CloseCode.from_wire(4999) is None
