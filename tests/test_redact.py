"""URLs are logged and printed with their credentials and token-like parameters hidden."""

from __future__ import annotations

import pytest
from yarl import URL

from netcheck.redact import UNPARSEABLE, is_secret_name, redact_url, redact_urls


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("wss://bob:s3cret@h.example:8470/v1/ws", "wss://***@h.example:8470/v1/ws"),
        ("ws://:s3cret@h/v1/ws", "ws://***@h/v1/ws"),
        ("ws://s3cret@h/v1/ws", "ws://***@h/v1/ws"),
        ("ws://h/v1/ws?token=s3cret&x=1", "ws://h/v1/ws?token=***&x=1"),
        ("http://h/p?Access_Token=s3cret", "http://h/p?Access_Token=***"),
        ("http://h/p?api-key=s3cret&b=2&b=3", "http://h/p?api-key=***&b=2&b=3"),
        ("http://h/p#access_token=s3cret", "http://h/p#***"),
        (
            "postgresql+psycopg://u:s3cret@db:5432/n?password=s3cret&sslmode=require",
            "postgresql+psycopg://***@db:5432/n?password=***&sslmode=require",
        ),
        ("ws://127.0.0.1:8470/v1/ws", "ws://127.0.0.1:8470/v1/ws"),
        ("sqlite:///rel.db", "sqlite:///rel.db"),  # unchanged text, not yarl's sqlite:/rel.db
    ],
)
def test_redact_url(url: str, shown: str) -> None:
    """Userinfo and secret parameters become ***; the rest is kept."""
    assert redact_url(url) == shown
    assert "s3cret" not in redact_url(URL(url))


def test_unparseable_url_is_not_echoed() -> None:
    """A URL yarl refuses (bad port), or a mistyped one whose userinfo yarl cannot find
    (no scheme, a missing colon), may still hold a password: it is not shown."""
    assert redact_url("ws://u:s3cret@h:99999/") == UNPARSEABLE
    assert redact_url("u:s3cret@h/x") == UNPARSEABLE
    assert redact_url("postgresql//u:s3cret@h/x") == UNPARSEABLE
    assert redact_url("no url at all") == "no url at all"


def test_redact_urls_in_an_aiohttp_message() -> None:
    """aiohttp's ClientResponseError text quotes the URL dialled, credentials and all."""
    text = "503, message='Invalid response status', url='wss://u:s3cret@h/v1/ws?token=t0k'"
    assert redact_urls(text) == (
        "503, message='Invalid response status', url='wss://***@h/v1/ws?token=***'"
    )


def test_secret_names() -> None:
    """Token-like parameter names are secret; ordinary ones are not."""
    assert all(map(is_secret_name, ["token", "X-Amz-Signature", "client_secret", "apikey"]))
    assert not any(map(is_secret_name, ["limit", "node", "sslmode", "offset"]))
