"""`netcheck node setup` writes option values as TOML strings, escaped: a quote and a
newline in --profile (or the URL or key) cannot add settings to the written configs.
Before: --profile 'cpu-tiny"<newline>warmup_batches = 0<newline>#' wrote a config with
profile = "cpu-tiny" and an extra warmup_batches = 0, which loaded and was kept."""

from __future__ import annotations

from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from netcheck.errors import ConfigError
from netcheck.keys import public_key_text
from netcheck.node.setup import setup_cards

KEY = public_key_text(Ed25519PrivateKey.generate())
URL = "ws://127.0.0.1:8470/v1/ws"


@pytest.mark.parametrize(
    ("url", "profile"),
    [
        (URL, 'cpu-tiny"\nwarmup_batches = 0\n#'),
        (URL + '"\nwarmup_batches = 0\n#', "cpu-tiny"),
    ],
    ids=["profile", "url"],
)
def test_a_quote_in_an_option_cannot_add_settings(tmp_path: Path, url: str, profile: str) -> None:
    with pytest.raises(ConfigError):
        setup_cards(tmp_path, "h", 1, coordinator_url=url, coordinator_key=KEY, profile=profile)
    assert not list(tmp_path.rglob("*.toml")) and not list(tmp_path.rglob("*.pem"))


def test_plain_options_are_written_as_before(tmp_path: Path) -> None:
    (node,) = setup_cards(
        tmp_path, "h", 1, coordinator_url=URL, coordinator_key=KEY, profile="cpu-tiny"
    )
    text = node.config_path.read_text()
    assert f'coordinator_url = "{URL}"' in text and 'profile = "cpu-tiny"' in text
    assert f'coordinator_key = "{KEY}"' in text
