"""netcheck.web.inputs: integer parameters, JSON object bodies, names, control characters."""

from __future__ import annotations

import pytest
from aiohttp import web

from netcheck.web.access import safe_next as _safe_next
from netcheck.web.inputs import MAX_OFFSET, has_control_chars, optional_name, parse_int, query_int


@pytest.mark.parametrize(
    ("text", "want"),
    [("0", 0), ("-0", 0), ("+5", 5), ("007", 7), ("-12", -12), ("9" * 30, int("9" * 30)),
     ("9" * 31, 10**30), ("-" + "9" * 5000, -(10**30)), ("0" * 100 + "3", 3),
     ("", None), ("-", None), ("1e3", None), (" 1", None), ("1 ", None), ("1_000", None),
     ("١", None), ("0x10", None), ("1.0", None)],
)  # fmt: skip
def test_parse_int_takes_only_ascii_decimals_and_saturates(text: str, want: int | None) -> None:
    """Sign and ASCII digits only; more than 30 digits saturate at +-10**30 without converting."""
    assert parse_int(text) == want


def test_query_int_defaults_clamps_and_refuses() -> None:
    """Absent: default; out of range: clamped or 400; not an integer: 400 naming the field."""
    assert query_int({}, "offset", default=3, lo=0, hi=10) == 3
    assert query_int({"offset": "-5"}, "offset", default=0, lo=0, hi=10, clamp=True) == 0
    big = {"offset": "9" * 20}
    assert query_int(big, "offset", default=0, lo=0, hi=MAX_OFFSET, clamp=True) == MAX_OFFSET
    with pytest.raises(web.HTTPBadRequest) as exc:
        query_int({"limit": "11"}, "limit", default=1, lo=1, hi=10)
    assert exc.value.text == "limit must be in 1..10"
    with pytest.raises(web.HTTPBadRequest) as exc:
        query_int({"offset": "1e9"}, "offset", default=0, lo=0, hi=10, clamp=True)
    assert exc.value.text == "offset must be an integer"


def test_optional_name() -> None:
    """Absent or null: None; a non-empty string: itself; anything else: 400 naming the field."""
    assert optional_name({}, "profile") is None
    assert optional_name({"profile": None}, "profile") is None
    assert optional_name({"profile": "p"}, "profile") == "p"
    for bad in (0, False, "", 1, [], ["p"], {}):
        with pytest.raises(web.HTTPBadRequest) as exc:
            optional_name({"profile": bad}, "profile")
        assert exc.value.text == "profile must be a non-empty string"


def test_control_characters_and_safe_next() -> None:
    """CR, LF, NUL, DEL and C1 controls count; a next target holding one falls back."""
    for c in ("\r", "\n", "\x00", "\t", "\x7f", "\x85"):
        assert has_control_chars(f"/dashboard{c}x")
    assert not has_control_chars("/dashboard/nodes/ed25519:abc?x=é")
    assert _safe_next("/dashboard/rounds?offset=100") == "/dashboard/rounds?offset=100"
    for bad in ("/dashboard\r\nX-Evil: 1", "/dashboard\nx", "/dashboard\\evil", "//evil.com",
                "/dashboard//evil.com", "https://evil.com/dashboard", "/admin/status", "", None):  # fmt: skip
        assert _safe_next(bad) == "/dashboard/nodes", bad
