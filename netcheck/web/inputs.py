"""Checks of untrusted HTTP input, shared by the admin API and the dashboard.

Whatever a caller sends, these either return a value of the documented type and range
or raise :class:`aiohttp.web.HTTPBadRequest` (400) with a message naming the field.
No foreign exception (``RecursionError`` from deeply nested JSON, ``OverflowError``
from a huge integer reaching the database, a broken multipart body) gets through to
aiohttp's 500 handler.
"""

from __future__ import annotations

import hmac
import json
import re
from collections.abc import Awaitable, Callable, Collection, Mapping
from typing import Any

from aiohttp import web

#: Largest row offset a page accepts (larger ones are clamped to it).
MAX_OFFSET = 10**9

_INT = re.compile(r"([+-]?)0*([0-9]+)")
_SATURATE_DIGITS = 30


def parse_int(text: str) -> int | None:
    """``text`` as a decimal integer, or None unless it is an optional sign and ASCII digits.

    Stricter than :func:`int`: no whitespace, underscores or non-ASCII digits. Values
    of more than 30 digits come back as ``±10**30`` (outside every range used here)
    instead of being converted, so a long string costs nothing and raises nothing.
    """
    m = _INT.fullmatch(text)
    if m is None:
        return None
    sign, digits = m.groups()
    value = int(digits) if len(digits) <= _SATURATE_DIGITS else 10**_SATURATE_DIGITS
    return -value if sign == "-" else value


def query_int(
    query: Mapping[str, str], name: str, *, default: int, lo: int, hi: int, clamp: bool = False
) -> int:
    """The integer query parameter ``name`` (``default`` when absent), within ``lo..hi``.

    Out of range values are clamped into ``lo..hi`` when ``clamp`` is true, else refused.

    Raises:
        web.HTTPBadRequest: the value is not a decimal integer, or is out of range and
            ``clamp`` is false.
    """
    text = query.get(name)
    if text is None:
        return default
    value = parse_int(text)
    if value is None:
        raise web.HTTPBadRequest(text=f"{name} must be an integer")
    if lo <= value <= hi:
        return value
    if clamp:
        return min(max(value, lo), hi)
    raise web.HTTPBadRequest(text=f"{name} must be in {lo}..{hi}")


async def json_object(
    request: web.Request, fields: Collection[str] | None = None
) -> dict[str, Any]:
    """The request body as a JSON object; an empty body is ``{}``. With ``fields``, a
    key not among them is refused, named (a misspelt ``"profle"`` or ``"round"`` would
    otherwise run the default profile or number of rounds without a word).

    Raises:
        web.HTTPBadRequest: the body is not JSON (bad syntax or encoding, nesting too
            deep for the parser), not an object, holds a key not in ``fields``, or a
            string with a lone surrogate (``"\\ud800"``: valid JSON, but not text that
            UTF-8, the database or a log can hold; a review's ``by`` was a 500).
    """
    body: Any = {}
    if request.body_exists:  # not can_read_body: the body middleware has read it already
        try:
            body = await request.json()
        except (ValueError, LookupError, RecursionError):  # LookupError: unknown charset
            raise web.HTTPBadRequest(
                text="body must be JSON (UTF-8, not too deeply nested)"
            ) from None
    if not isinstance(body, dict):
        raise web.HTTPBadRequest(text="body must be a JSON object")
    unknown = sorted(k for k in body if k not in fields) if fields is not None else []
    if unknown:
        shown = ", ".join(repr(k[:40]) for k in unknown[:5])
        raise web.HTTPBadRequest(
            text=f"unknown field(s) {shown}; expected: {', '.join(sorted(fields or ()))}"
        )
    for key, value in body.items():
        try:
            text = key + json.dumps(value, ensure_ascii=False)
        except RecursionError:
            raise web.HTTPBadRequest(text=f"{ascii(key)[1:-1][:40]} is nested too deeply") from None
        if not is_utf8_text(text):
            raise web.HTTPBadRequest(
                text=f"{ascii(key)[1:-1][:40]} holds a lone surrogate (e.g. \\ud800): not text"
            )
    return body


def is_utf8_text(text: str) -> bool:
    """False when ``text`` holds a lone surrogate (U+D800..U+DFFF), which JSON's ``\\uXXXX``
    escapes can spell but UTF-8 cannot encode."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def optional_name(body: Mapping[str, Any], field: str) -> str | None:
    """``body[field]`` when it is a non-empty string; None when absent or ``null``.

    Raises:
        web.HTTPBadRequest: the field holds anything else (``0``, ``false``, ``""``, a
            number, a list, an object).
    """
    value = body.get(field)
    if value is None:
        return None
    if not isinstance(value, str) or not value:
        raise web.HTTPBadRequest(text=f"{field} must be a non-empty string")
    return value


def has_control_chars(text: str) -> bool:
    """True when ``text`` holds a C0 or C1 control character or DEL (e.g. CR, LF, NUL)."""
    return any(ord(c) < 0x20 or 0x7F <= ord(c) <= 0x9F for c in text)


@web.middleware
async def refuse_control_chars(
    request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
) -> web.StreamResponse:
    """400 for a request whose decoded path or query holds a control character.

    No netcheck identifier (round id, node key, flag kind, profile name) contains one,
    and some would reach the database: PostgreSQL refuses NUL in text (``%00`` in a
    round id made a 500), and CR/LF would end up in headers and logs.
    """
    if has_control_chars(request.path) or any(
        has_control_chars(k) or has_control_chars(v) for k, v in request.query.items()
    ):
        raise web.HTTPBadRequest(text="control characters in the URL")
    return await handler(request)


#: The 401 text for a missing or wrong admin token (admin API, exports, metrics): how to
#: send it. ``?token=`` is only a one-time login link for a dashboard page
#: (docs/dashboard.md, "Tokens in URLs").
TOKEN_REFUSED = (
    "missing or wrong admin token: send it as the header Authorization: Bearer <token> "
    "(admin_token in coordinator.toml); ?token= works only as a login link to a "
    "/dashboard page"
)
#: The 401 text for a ``?token=`` in the URL of anything but a dashboard page GET
#: (/export/, /metrics, /admin/, any POST), given even with a right token or a valid
#: header beside it: a token in a URL stays in logs and histories (docs/dashboard.md).
TOKEN_IN_URL_REFUSED = (
    "the admin token is not accepted in a URL here (it would stay in logs and "
    "histories): send it as the header Authorization: Bearer TOKEN"
)


def bearer_token(header: str) -> str | None:
    """The token of an ``Authorization: Bearer <token>`` header, or None. The scheme
    name matches case-insensitively (RFC 7235 §2.1, RFC 6750 §2.1): ``bearer x`` and
    ``BEARER x`` work like ``Bearer x``."""
    scheme, _, token = header.strip().partition(" ")
    if scheme.lower() != "bearer":
        return None
    return token.strip() or None


def token_matches(candidate: str, token: str) -> bool:
    """True if ``candidate`` (from a header, cookie, form or query) is ``token``, in
    constant time.

    aiohttp decodes header bytes that are not UTF-8 into lone surrogates
    (``surrogateescape``), which plain ``str.encode()`` refuses with UnicodeEncodeError
    (a 500); encoded with ``surrogateescape`` they are the bytes that were sent, and a
    well-formed string encodes as plain UTF-8 would.
    """
    return hmac.compare_digest(
        candidate.encode("utf-8", "surrogateescape"), token.encode("utf-8", "surrogateescape")
    )
