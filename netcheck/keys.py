"""Ed25519 identity keys: generate, save, load, and the public-key text form; and the
coordinator's other secret file, the screening schedule secret (:func:`load_or_create_secret`).

Private keys are PEM PKCS#8 files, unencrypted, mode 0600, never overwritten. Public
keys travel in configs as ``"ed25519:<base64url of the raw 32 bytes, no padding>"``
(docs/protocol.md §1.2).
"""

from __future__ import annotations

import base64
import logging
import os
import re
import secrets
import stat
from pathlib import Path

from cryptography.exceptions import UnsupportedAlgorithm
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from netcheck.errors import ConfigError, KeyFileError

log = logging.getLogger("netcheck.keys")

TEXT_PREFIX = "ed25519:"
_TEXT_BODY = re.compile(r"[A-Za-z0-9_-]{43}")
MAX_KEY_FILE_BYTES = 16 * 1024


def generate_key(path: Path) -> Ed25519PrivateKey:
    """Generate a new identity key and write it to ``path`` (PEM PKCS#8, mode 0600).

    Missing parent directories are created with mode 0700.

    Raises:
        KeyFileError: if ``path`` already exists (never overwritten) or cannot be written.
    """
    path = Path(path)
    key = Ed25519PrivateKey.generate()
    pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    try:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        raise KeyFileError(f"{path}: already exists; refusing to overwrite") from None
    except OSError as exc:
        raise KeyFileError(f"{path}: cannot create key file: {exc.strerror}") from None
    try:
        os.fchmod(fd, 0o600)  # regardless of umask
        with os.fdopen(fd, "wb") as fh:
            fh.write(pem)
    except OSError as exc:
        raise KeyFileError(f"{path}: cannot write key file: {exc.strerror}") from None
    return key


def load_private_key(path: Path) -> Ed25519PrivateKey:
    """Load an identity key written by ``generate_key``.

    Raises:
        KeyFileError: if the file is missing or unreadable, is readable or writable by
            group or others (mode & 0o077), or does not hold an Ed25519 PEM key.
    """
    path = Path(path)
    try:
        st = path.stat()
    except FileNotFoundError:
        raise KeyFileError(f"{path}: key file not found") from None
    except OSError as exc:
        raise KeyFileError(f"{path}: cannot stat key file: {exc.strerror}") from None
    if not stat.S_ISREG(st.st_mode):
        raise KeyFileError(f"{path}: not a regular file")
    if os.name == "posix" and st.st_mode & 0o077:
        raise KeyFileError(
            f"{path}: permissions {stat.S_IMODE(st.st_mode):04o} allow group/other access; "
            f"run chmod 600 {path}"
        )
    if st.st_size > MAX_KEY_FILE_BYTES:
        raise KeyFileError(f"{path}: too large for a key file")
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise KeyFileError(f"{path}: cannot read key file: {exc.strerror}") from None
    try:
        key = serialization.load_pem_private_key(data, password=None)
    except (ValueError, TypeError, UnsupportedAlgorithm):
        raise KeyFileError(f"{path}: not an unencrypted PEM private key") from None
    if not isinstance(key, Ed25519PrivateKey):
        raise KeyFileError(f"{path}: not an Ed25519 key")
    return key


def public_key_bytes(key: Ed25519PublicKey | Ed25519PrivateKey) -> bytes:
    """The raw 32-byte public key of ``key`` (private keys give their public half)."""
    if isinstance(key, Ed25519PrivateKey):
        key = key.public_key()
    return key.public_bytes_raw()


def public_key_text(key: Ed25519PublicKey | Ed25519PrivateKey) -> str:
    """``"ed25519:" + base64url(raw 32 bytes)`` without padding (51 characters)."""
    body = base64.urlsafe_b64encode(public_key_bytes(key)).rstrip(b"=").decode()
    return TEXT_PREFIX + body


def parse_public_key(text: str) -> Ed25519PublicKey:
    """Parse the text form written by ``public_key_text``; surrounding whitespace is
    ignored, anything else must be exact (canonical base64url, 43 characters).

    Raises:
        KeyFileError: on a wrong prefix, bad characters or length, or non-canonical text.
    """
    if not isinstance(text, str):
        raise KeyFileError("public key text must be a string")
    text = text.strip()
    if not text.startswith(TEXT_PREFIX) or not _TEXT_BODY.fullmatch(text[len(TEXT_PREFIX) :]):
        raise KeyFileError(
            f"not a public key of the form ed25519:<43 base64url chars>: {text[:80]!r}"
        )
    raw = base64.urlsafe_b64decode(text[len(TEXT_PREFIX) :] + "=")
    try:
        key = Ed25519PublicKey.from_public_bytes(raw)
    except ValueError:
        raise KeyFileError(f"not a valid Ed25519 public key: {text[:80]!r}") from None
    if public_key_text(key) != text:
        raise KeyFileError(f"non-canonical public key text: {text[:80]!r}")
    return key


def load_or_create_secret(path: Path, what: str, min_bytes: int, nbytes: int = 32) -> bytes:
    """Read the random secret at ``path``; create it (``nbytes`` random bytes, mode 0600,
    parent directories as needed) if it does not exist. ``what`` names it in messages.

    Raises:
        ConfigError: unreadable, or shorter than ``min_bytes``.
    """
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        path.parent.mkdir(parents=True, exist_ok=True)
        data = secrets.token_bytes(nbytes)
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:  # created concurrently: use that one
            return load_or_create_secret(path, what, min_bytes, nbytes)
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        log.info("created %s %s (mode 0600)", what, path)
        return data
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read {what}: {exc.strerror or exc}") from None
    if len(data) < min_bytes:
        raise ConfigError(f"{path}: {what} must be at least {min_bytes} bytes")
    if os.name == "posix" and path.stat().st_mode & 0o077:
        log.warning("%s %s is readable by group/others; chmod 600 it", what, path)
    return data
