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

from netcheck.errors import ConfigError, KeyFileError, KeyFileMissing

log = logging.getLogger("netcheck.keys")

TEXT_PREFIX = "ed25519:"
# Curve25519 field prime and Edwards constant d (RFC 8032 §5.1).
_P = 2**255 - 19
_D = (-121665 * pow(121666, _P - 2, _P)) % _P
_SQRT_M1 = pow(2, (_P - 1) // 4, _P)
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
        KeyFileMissing: no file at ``path`` (a :class:`KeyFileError`).
        KeyFileError: if the file is unreadable, is readable or writable by group or
            others (mode & 0o077), or does not hold an Ed25519 PEM key.
    """
    path = Path(path)
    try:
        st = path.stat()
    except FileNotFoundError:
        raise KeyFileMissing(path) from None
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


def weak_key_reason(raw: bytes) -> str | None:
    """Why the 32-byte Ed25519 public key ``raw`` must be refused, or None if it is fine.

    Refused (docs/protocol.md §1.2): a wrong length; a non-canonical encoding (y >= p,
    or x = 0 with the sign bit set, RFC 8032 §5.1.3); a point not on the curve; and
    any point of small order (the 8 torsion points: [8]A is the identity), with which
    the signature R = identity, S = 0 verifies over every message. The small-order
    test multiplies by the cofactor, as libsodium's ``ge25519_has_small_order`` does by
    table; ``cryptography`` (OpenSSL) accepts all of these keys itself.
    """
    if not isinstance(raw, (bytes, bytearray)) or len(raw) != 32:
        return "not 32 bytes"
    value = int.from_bytes(raw, "little")
    sign = value >> 255
    y = value & ((1 << 255) - 1)
    if y >= _P:
        return "non-canonical encoding (y >= p)"
    # RFC 8032 §5.1.3 point decoding: x^2 = (y^2 - 1) / (d y^2 + 1).
    u = (y * y - 1) % _P
    v = (_D * y * y + 1) % _P
    x = (u * pow(v, 3, _P) * pow(u * pow(v, 7, _P), (_P - 5) // 8, _P)) % _P
    if (v * x * x - u) % _P != 0:
        x = (x * _SQRT_M1) % _P
        if (v * x * x - u) % _P != 0:
            return "not a point on the Ed25519 curve"
    if x == 0 and sign:
        return "non-canonical encoding (x = 0 with the sign bit set)"
    # [8]A by three doublings in extended coordinates (RFC 8032 §5.1.4); small order
    # iff the result is the identity (X = 0, Y = Z).
    px, py, pz = x, y, 1
    for _ in range(3):
        a, b = px * px % _P, py * py % _P
        c = 2 * pz * pz % _P
        h = (a + b) % _P
        e = (h - (px + py) * (px + py)) % _P
        g = (a - b) % _P
        f = (c + g) % _P
        px, py, pz = e * f % _P, g * h % _P, f * g % _P
    if px == 0 and (py - pz) % _P == 0:
        return "small-order point (signatures over any message would verify)"
    return None


def load_public_bytes(raw: bytes, what: str = "public key") -> Ed25519PublicKey:
    """An Ed25519 public key from its raw 32 bytes, refusing weak keys.

    Raises:
        KeyFileError: naming the key (base64url) and the reason from ``weak_key_reason``.
    """
    reason = weak_key_reason(raw)
    if reason is None:
        try:
            return Ed25519PublicKey.from_public_bytes(bytes(raw))
        except ValueError:  # pragma: no cover - decoding above already refuses these
            reason = "not a valid Ed25519 key"
    shown = base64.urlsafe_b64encode(bytes(raw)[:64]).rstrip(b"=").decode()
    raise KeyFileError(f"{what} {TEXT_PREFIX}{shown} refused: {reason}")


def parse_public_key(text: str) -> Ed25519PublicKey:
    """Parse the text form written by ``public_key_text``; surrounding whitespace is
    ignored, anything else must be exact (canonical base64url, 43 characters).

    Raises:
        KeyFileError: on a wrong prefix, bad characters or length, non-canonical text,
            or a weak key (small order, non-canonical point; see ``weak_key_reason``).
    """
    if not isinstance(text, str):
        raise KeyFileError("public key text must be a string")
    text = text.strip()
    if not text.startswith(TEXT_PREFIX) or not _TEXT_BODY.fullmatch(text[len(TEXT_PREFIX) :]):
        raise KeyFileError(
            f"not a public key of the form ed25519:<43 base64url chars>: {text[:80]!r}"
        )
    raw = base64.urlsafe_b64decode(text[len(TEXT_PREFIX) :] + "=")
    if public_key_text(Ed25519PublicKey.from_public_bytes(raw)) != text:
        raise KeyFileError(f"non-canonical public key text: {text[:80]!r}")
    return load_public_bytes(raw)


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


def unwritable_folder(folder: Path) -> Path | None:
    """The nearest existing folder at or above ``folder`` when this user cannot create
    files in it (so nothing can be created in ``folder``), else None."""
    existing = Path(folder)
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    return None if os.access(existing, os.W_OK | os.X_OK) else existing


def check_secret(path: Path, what: str, min_bytes: int) -> str:
    """What :func:`load_or_create_secret` would find at ``path``, found without creating
    anything (``netcheck coordinator check``); returns a one-line detail.

    Raises:
        ConfigError: unreadable, shorter than ``min_bytes``, readable or writable by
            group or others (a start only warns; the fix is named), or missing where it
            could not be created.
    """
    path = Path(path)
    if not path.exists():
        blocked = unwritable_folder(path.parent)
        if blocked is not None:
            raise ConfigError(
                f"{path}: {what} missing and cannot be created: {blocked} is not a writable folder"
            )
        return f"{path}: missing; the first start creates it (32 random bytes, mode 0600)"
    try:
        size = len(path.read_bytes())
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read {what}: {exc.strerror or exc}") from None
    if size < min_bytes:
        raise ConfigError(f"{path}: {what} must be at least {min_bytes} bytes, has {size}")
    mode = stat.S_IMODE(path.stat().st_mode)
    if os.name == "posix" and mode & 0o077:
        raise ConfigError(
            f"{path}: permissions {mode:04o} allow group/other access; run chmod 600 {path}"
        )
    return f"{path}: {size} bytes, mode {mode:04o}"
