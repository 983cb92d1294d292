"""Identity key files, the public-key text form and the schedule secret file (netcheck/keys.py)."""

from __future__ import annotations

import base64
import os
import stat
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey

from netcheck.errors import ConfigError, KeyFileError
from netcheck.keys import (
    generate_key,
    load_or_create_secret,
    load_private_key,
    load_public_bytes,
    parse_public_key,
    public_key_bytes,
    public_key_text,
    weak_key_reason,
)


def test_generate_writes_pem_with_mode_0600(tmp_path):
    """generate_key writes an unencrypted PKCS#8 PEM file with mode 0600."""
    path = tmp_path / "node.key"
    key = generate_key(path)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert path.read_bytes().startswith(b"-----BEGIN PRIVATE KEY-----")
    assert public_key_bytes(load_private_key(path)) == public_key_bytes(key)


def test_generate_ignores_permissive_umask(tmp_path):
    """The key file is 0600 even under a permissive umask."""
    old = os.umask(0)
    try:
        path = generate_key(tmp_path / "k") and tmp_path / "k"
    finally:
        os.umask(old)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


def test_generate_creates_parent_directories(tmp_path):
    """Missing parent directories are created."""
    path = tmp_path / "a" / "b" / "id.key"
    generate_key(path)
    assert path.exists()


def test_generate_refuses_overwrite(tmp_path):
    """An existing key file is never overwritten."""
    path = tmp_path / "node.key"
    generate_key(path)
    before = path.read_bytes()
    with pytest.raises(KeyFileError, match="exists"):
        generate_key(path)
    assert path.read_bytes() == before


def test_generate_reports_unwritable_location(tmp_path):
    """A path whose parent is a file gives KeyFileError."""
    (tmp_path / "file").write_text("x")
    with pytest.raises(KeyFileError):
        generate_key(tmp_path / "file" / "k")


@pytest.mark.parametrize("mode", [0o644, 0o640, 0o604, 0o660])
def test_load_refuses_group_or_world_access(tmp_path, mode):
    """A key readable or writable by group or others is refused, naming chmod."""
    path = tmp_path / "node.key"
    generate_key(path)
    path.chmod(mode)
    with pytest.raises(KeyFileError, match="chmod 600"):
        load_private_key(path)


def test_load_missing_file(tmp_path):
    """A missing key file gives KeyFileError."""
    with pytest.raises(KeyFileError, match="not found"):
        load_private_key(tmp_path / "absent.key")


def test_load_directory(tmp_path):
    """A directory is not a key file."""
    with pytest.raises(KeyFileError):
        load_private_key(tmp_path)


def _write(path, data: bytes):
    path.write_bytes(data)
    path.chmod(0o600)
    return path


def test_load_malformed_file(tmp_path):
    """A file that is not PEM gives KeyFileError."""
    with pytest.raises(KeyFileError, match="PEM"):
        load_private_key(_write(tmp_path / "k", b"not a key"))


def test_load_oversized_file(tmp_path):
    """A huge file is refused before parsing."""
    with pytest.raises(KeyFileError, match="too large"):
        load_private_key(_write(tmp_path / "k", b"x" * 20000))


def test_load_refuses_other_key_types(tmp_path):
    """A PEM key of another algorithm (X25519) gives KeyFileError."""
    pem = X25519PrivateKey.generate().private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    with pytest.raises(KeyFileError, match="Ed25519"):
        load_private_key(_write(tmp_path / "k", pem))


def test_load_refuses_encrypted_key(tmp_path):
    """A passphrase-protected key gives KeyFileError (netcheck keys are unencrypted)."""
    pem = Ed25519PrivateKey.generate().private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.BestAvailableEncryption(b"pw"),
    )
    with pytest.raises(KeyFileError):
        load_private_key(_write(tmp_path / "k", pem))


def test_text_form_round_trip():
    """public_key_text and parse_public_key round-trip; private keys give the public text."""
    key = Ed25519PrivateKey.generate()
    text = public_key_text(key)
    assert text.startswith("ed25519:") and len(text) == 51 and "=" not in text
    assert text == public_key_text(key.public_key())
    assert public_key_bytes(parse_public_key(text)) == public_key_bytes(key)
    assert public_key_bytes(parse_public_key(f"  {text}\n")) == public_key_bytes(key)


def test_text_form_is_base64url_of_raw_key():
    """The text body is base64url of the raw 32 bytes without padding."""
    key = Ed25519PrivateKey.generate()
    body = public_key_text(key).removeprefix("ed25519:")
    assert base64.urlsafe_b64decode(body + "=") == public_key_bytes(key)


def _canonical() -> str:
    return public_key_text(Ed25519PrivateKey.generate())


@pytest.mark.parametrize(
    "text",
    [
        "",
        "ed25519:",
        "ssh-ed25519 AAAA",
        "x25519:" + "A" * 43,
        "ed25519:" + "A" * 42,
        "ed25519:" + "A" * 44,
        "ed25519:" + "A" * 42 + "=",
        "ed25519:" + "A" * 42 + "+",
        "ed25519:" + "A" * 42 + "B",  # non-zero unused bits: not canonical
        "ed25519:" + "A" * 21 + " " + "A" * 21,
    ],
)
def test_parse_rejects_bad_text(text):
    """Wrong prefix, length, padding, alphabet or non-canonical text is KeyFileError."""
    with pytest.raises(KeyFileError):
        parse_public_key(text)


def test_parse_rejects_non_string():
    """Non-string input is KeyFileError."""
    with pytest.raises(KeyFileError):
        parse_public_key(b"ed25519:AAAA")


def test_secret_created_0600_then_reused(tmp_path: Path) -> None:
    """The schedule secret is created once with mode 0600 and read back afterwards."""
    path = tmp_path / "sub" / "schedule.secret"
    first = load_or_create_secret(path, "schedule secret", 16)
    assert len(first) == 32
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert load_or_create_secret(path, "schedule secret", 16) == first


def test_short_secret_refused(tmp_path: Path) -> None:
    """A secret shorter than 16 bytes is a configuration error."""
    path = tmp_path / "s"
    path.write_bytes(b"short")
    with pytest.raises(ConfigError):
        load_or_create_secret(path, "schedule secret", 16)


# The eight small-order Ed25519 encodings (the torsion subgroup, as listed by libsodium
# and in "Taming the many EdDSAs", Chalkias et al. 2020) and non-canonical encodings.
SMALL_ORDER = [
    "0100000000000000000000000000000000000000000000000000000000000000",  # identity
    "ecffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f",  # order 2
    "0000000000000000000000000000000000000000000000000000000000000000",  # order 4
    "0000000000000000000000000000000000000000000000000000000000000080",  # order 4
    "26e8958fc2b227b045c3f489f2ef98f0d5dfac05d3c63339b13802886d53fc05",  # order 8
    "26e8958fc2b227b045c3f489f2ef98f0d5dfac05d3c63339b13802886d53fc85",  # order 8
    "c7176a703d4dd84fba3c0b760d10670f2a2053fa2c39ccc64ec7fd7792ac037a",  # order 8
    "c7176a703d4dd84fba3c0b760d10670f2a2053fa2c39ccc64ec7fd7792ac03fa",  # order 8
]
NON_CANONICAL = [
    "0100000000000000000000000000000000000000000000000000000000000080",  # x=0, sign 1
    "ecffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff",  # x=0, sign 1
    "edffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f",  # y = p
    "eeffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f",  # y = p + 1
]


def _text(hex_key: str) -> str:
    raw = bytes.fromhex(hex_key)
    return "ed25519:" + base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


@pytest.mark.parametrize("hex_key", SMALL_ORDER + NON_CANONICAL)
def test_weak_public_keys_refused_naming_the_key(hex_key: str) -> None:
    """Small-order and non-canonical keys are refused by parse_public_key, naming the key."""
    assert weak_key_reason(bytes.fromhex(hex_key)) is not None
    with pytest.raises(KeyFileError) as err:
        parse_public_key(_text(hex_key))
    assert _text(hex_key) in str(err.value)


def test_identity_key_forgery_verifies_in_cryptography_but_is_refused() -> None:
    """R = identity, S = 0 verifies under the identity key in `cryptography`; we refuse it."""
    identity = bytes.fromhex(SMALL_ORDER[0])
    forged = identity + bytes(32)
    Ed25519PublicKey.from_public_bytes(identity).verify(forged, b"any message")  # no raise
    with pytest.raises(KeyFileError, match="small-order"):
        load_public_bytes(identity)


def test_real_keys_pass_weak_check() -> None:
    """Generated keys are never refused (200 random keys)."""
    for _ in range(200):
        raw = public_key_bytes(Ed25519PrivateKey.generate())
        assert weak_key_reason(raw) is None
        assert public_key_bytes(load_public_bytes(raw)) == raw
