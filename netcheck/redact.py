"""URLs made safe to log and print: credentials and token-like parameters hidden.

A URL in a config can carry secrets: ``wss://user:password@host/v1/ws`` (basic auth
through a proxy), ``...?token=...`` or a database URL with ``?password=``. Every URL that
the node, coordinator, gateways, admin client or CLI logs or prints passes through
:func:`redact_url` (or, for text that may quote one, such as an aiohttp error whose
message ends ``url='ws://user:pw@...'``, through :func:`redact_urls`). The URL that
is *dialled* keeps its secrets; only the shown copy loses them. Parsing is yarl's.
"""

from __future__ import annotations

import re

from yarl import URL

REDACTED = "***"
"""What replaces a hidden userinfo, query value or fragment."""

UNPARSEABLE = "<URL not shown: it does not parse>"
"""What :func:`redact_url` returns for text that yarl cannot parse (it may hold secrets)."""

#: A query parameter (or fragment) whose name contains one of these words (case and
#: ``-``/``_`` ignored) is hidden: ``token``, ``access_token``, ``api-key``,
#: ``password``, ``X-Amz-Signature``, ``client_secret``, ``sessionid``...
SECRET_WORDS = (
    "token", "password", "passwd", "pwd", "secret", "key", "auth", "signature",
    "session", "credential", "cookie",
)  # fmt: skip

_URL_IN_TEXT = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]*://[^\s'\"<>]+")


def is_secret_name(name: str) -> bool:
    """True if a query parameter called ``name`` is hidden by :func:`redact_url`."""
    folded = name.lower().replace("-", "").replace("_", "")
    return any(word in folded for word in SECRET_WORDS)


def redact_url(url: str | URL) -> str:
    """``url`` as text to log or print: a userinfo (``user:password@``, ``token@``) becomes
    ``***@``, the value of each token-like query parameter (:func:`is_secret_name`)
    becomes ``***``, and a fragment that names one is replaced by ``***``. Everything
    else (scheme, host, port, path, other parameters) is kept.

    Returns :data:`UNPARSEABLE` for text that is not a URL yarl accepts (an invalid
    port or IPv6 host), or that is not absolute yet holds an ``@`` (``u:pw@host``,
    ``postgresql//u:pw@h/x``: a mistyped URL whose userinfo yarl cannot find); never
    raises.
    """
    try:
        parsed = original = url if isinstance(url, URL) else URL(url)
        if not parsed.is_absolute() and "@" in str(url):
            return UNPARSEABLE
        if parsed.raw_user is not None or parsed.raw_password is not None:
            parsed = parsed.with_user(None).with_user(REDACTED)
        if any(is_secret_name(k) for k in parsed.query):
            parsed = parsed.with_query(
                [(k, REDACTED if is_secret_name(k) else v) for k, v in parsed.query.items()]
            )
        if parsed.fragment and is_secret_name(parsed.fragment):
            parsed = parsed.with_fragment(REDACTED)
    except (ValueError, TypeError):
        return UNPARSEABLE
    if parsed is original:  # nothing hidden: the text as given (yarl would write
        return str(url)  # ``sqlite:///a.db`` as ``sqlite:/a.db``, a space as %20)
    return str(parsed)


def redact_urls(text: str) -> str:
    """``text`` with every ``scheme://...`` in it replaced by its :func:`redact_url`
    (for messages that quote a URL, such as aiohttp's ``ClientResponseError``)."""
    return _URL_IN_TEXT.sub(lambda m: redact_url(m.group(0)), text)
