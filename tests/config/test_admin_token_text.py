"""admin_token is sent as an HTTP header (``Authorization: Bearer <token>``): a token
that cannot travel there is refused when the config loads, naming the field. Before: a
newline or tab in it made every admin command (``nodes``, ``round run``, ...) end in
aiohttp's ValueError traceback ("Forbidden control character detected in headers"), and
a space at either end started a coordinator whose every admin request was 401 (the
header is stripped)."""

from __future__ import annotations

from pathlib import Path

import pytest

from netcheck.config import load_coordinator_config
from netcheck.errors import ConfigError

BASE = 'identity_key = "c.pem"\nopen_enrollment = true\nprofiles = ["cpu-tiny"]\n'


def config(tmp_path: Path, token: str) -> Path:
    path = tmp_path / "coordinator.toml"
    path.write_text(BASE + f"admin_token = {token}\n")
    return path


@pytest.mark.parametrize(
    ("token", "says"),
    [
        (r'"0123456789abcdef\n0123"', "control character"),
        (r'"0123456789abcdef\t0123"', "control character"),
        (r'"0123456789abcdef\u00000123"', "control character"),
        ('" 0123456789abcdef0123"', "starts or ends with a space"),
        ('"0123456789abcdef0123 "', "starts or ends with a space"),
    ],
    ids=["newline", "tab", "nul", "leading-space", "trailing-space"],
)
def test_token_that_cannot_be_sent_in_a_header_is_refused(
    tmp_path: Path, token: str, says: str
) -> None:
    path = config(tmp_path, token)
    with pytest.raises(ConfigError, match=f"admin_token: .*{says}") as err:
        load_coordinator_config(path)
    assert str(path) in str(err.value)


@pytest.mark.parametrize(
    "token", ['"0123456789abcdef0123"', '"0123 4567 89ab cdef"', '"Ünïcödé-tøken-0123"']
)
def test_printable_tokens_still_load(tmp_path: Path, token: str) -> None:
    assert load_coordinator_config(config(tmp_path, token)).admin_token == token.strip('"')
