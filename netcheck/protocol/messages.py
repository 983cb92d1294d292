"""Message types of netcheck/1: one frozen dataclass per message (docs/protocol.md §5).

Every message validates its fields on construction and raises
``MessageError(CloseCode.MALFORMED_MESSAGE, ...)`` on a bad one, so an invalid message
cannot exist. Sequence fields accept lists and are stored as tuples. Byte fields have
exact lengths (keys and nonces) or caps; integers are range-checked and never ``bool``.
The wire encoding lives in ``codec.py``; the type names (``TYPE``) are the ``"t"`` key.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from itertools import chain
from typing import Any, ClassVar

from netcheck.errors import CloseCode, MessageError

# docs/protocol.md §5.1 — field limits
KEY_BYTES = 32  # X25519 and Ed25519 public keys, job keys
NONCE_BYTES = 32  # handshake nonces
JOB_NONCE_BYTES = 12  # ChaCha20-Poly1305 nonce of a job payload
SIGNATURE_BYTES = 64  # Ed25519
DIGEST_BYTES = 32  # SHA-256
CHALLENGE_BYTES = 32  # probe challenge (§5.9)
MAX_NAME_CHARS = 64  # versions, suites, fingerprint keys
MAX_LIST_ITEMS = 8  # versions and suites offered
MAX_ROUND_ID_CHARS = 64
MAX_TEXT_CHARS = 256  # profile, software, fingerprint string values
MAX_REASON_CHARS = 1024
MAX_FINGERPRINT_ITEMS = 32
MAX_BATCH = 65536  # batch_size, len(outputs)
MAX_TOKENS = 65536  # max_new_tokens, tokens per output row
MAX_CIPHERTEXT_BYTES = 8 * 1024 * 1024
MAX_DEADLINE_S = 86400.0
TOKEN_ID_LIMIT = 2**31  # 0 <= token id < 2**31
INT64_MAX = 2**63 - 1
ROUND_ID_RE = re.compile(r"[A-Za-z0-9._:-]+")


def valid_token_rows(rows: Iterable[Sequence[Any]]) -> bool:
    """True iff every element of every row is an ``int`` (not a bool) in
    ``[0, TOKEN_ID_LIMIT)``; no rows, or empty rows, are valid.

    One flattened pass with ``set``, ``min`` and ``max`` runs at C speed: over 10x
    faster than a Python loop over a result's B x max_new_tokens ids, which matters
    because every result is checked (docs/scaling.md, "Timing accuracy").
    """
    flat = list(chain.from_iterable(rows))
    if not flat:
        return True
    if set(map(type, flat)) != {int}:
        return False
    return min(flat) >= 0 and max(flat) < TOKEN_ID_LIMIT


def _bad(msg_type: str, field: str, why: str) -> MessageError:
    return MessageError(CloseCode.MALFORMED_MESSAGE, f"{msg_type}.{field}: {why}")


def _bytes(t: str, f: str, v: object, *, exact: int | None = None, max_len: int = 0) -> None:
    if type(v) is not bytes:
        raise _bad(t, f, "expected bytes")
    if exact is not None and len(v) != exact:
        raise _bad(t, f, f"expected {exact} bytes, got {len(v)}")
    if max_len and len(v) > max_len:
        raise _bad(t, f, f"longer than {max_len} bytes")


def _str(t: str, f: str, v: object, max_chars: int, *, min_chars: int = 0) -> None:
    if type(v) is not str:
        raise _bad(t, f, "expected str")
    if not min_chars <= len(v) <= max_chars:
        raise _bad(t, f, f"length {len(v)} outside [{min_chars}, {max_chars}]")


def _printable(t: str, f: str, v: str, what: str = "") -> None:
    """Refuse a stored and displayed string holding a character that is not printable:
    C0/C1 controls (a newline forges log lines, an escape recolours a terminal) and
    format characters such as the bidi overrides U+202A-202E and U+2066-2069 (they
    reorder what a table or log shows). ``str.isprintable``, as for node names."""
    if not v.isprintable():
        bad = next(c for c in v if not c.isprintable())
        why = f"has a control or format character (U+{ord(bad):04X}): remove it"
        raise _bad(t, f, f"{what} {why}" if what else why)


def _int(t: str, f: str, v: object, lo: int, hi: int) -> None:
    if type(v) is not int:
        raise _bad(t, f, "expected int")
    if not lo <= v <= hi:
        raise _bad(t, f, f"{v} outside [{lo}, {hi}]")


def _round_id(t: str, v: object) -> None:
    _str(t, "round_id", v, MAX_ROUND_ID_CHARS, min_chars=1)
    assert isinstance(v, str)
    if not ROUND_ID_RE.fullmatch(v):
        raise _bad(t, "round_id", "characters outside [A-Za-z0-9._:-]")


def _tuple(obj: object, field: str, t: str) -> tuple[Any, ...]:
    """Normalise a list/tuple field to a tuple stored on the frozen instance."""
    v = getattr(obj, field)
    if type(v) is list:
        v = tuple(v)
        object.__setattr__(obj, field, v)
    if type(v) is not tuple:
        raise _bad(t, field, "expected a sequence")
    return v


def _names(obj: object, field: str, t: str) -> None:
    items = _tuple(obj, field, t)
    if not 1 <= len(items) <= MAX_LIST_ITEMS:
        raise _bad(t, field, f"expected 1..{MAX_LIST_ITEMS} entries")
    for item in items:
        _str(t, field, item, MAX_NAME_CHARS, min_chars=1)


@dataclass(frozen=True)
class ProfileClaim:
    """What a node claims to run (docs/protocol.md §2.4): profile name, engine
    fingerprint (``engines.fingerprint``: str -> str | int, at most 32 entries, kept in
    sorted key order) and software version string. Signed inside the handshake
    transcript.

    Raises:
        MessageError: ``MALFORMED_MESSAGE`` naming the field (``profile_claim.software``,
            ``profile_claim.fingerprint`` and the key, ...): a wrong type, a length or count
            over its limit, or (software, fingerprint keys and string values) a control
            or format character such as a bidi override.
    """

    profile: str
    fingerprint: dict[str, str | int]
    software: str

    TYPE: ClassVar[str] = "profile_claim"

    def __post_init__(self) -> None:
        t = self.TYPE
        _str(t, "profile", self.profile, MAX_TEXT_CHARS, min_chars=1)
        _str(t, "software", self.software, MAX_TEXT_CHARS)
        _printable(t, "software", self.software)
        if type(self.fingerprint) is not dict:
            raise _bad(t, "fingerprint", "expected a map")
        if len(self.fingerprint) > MAX_FINGERPRINT_ITEMS:
            raise _bad(t, "fingerprint", f"more than {MAX_FINGERPRINT_ITEMS} entries")
        for key, value in self.fingerprint.items():
            _str(t, "fingerprint", key, MAX_NAME_CHARS, min_chars=1)
            _printable(t, "fingerprint", key, "a key")  # checked before it is named
            if type(value) is int:
                _int(t, "fingerprint", value, -INT64_MAX - 1, INT64_MAX)
            else:
                _str(t, "fingerprint", value, MAX_TEXT_CHARS)
                assert isinstance(value, str)
                _printable(t, "fingerprint", value, f"the value of {key!r}")
        # One encoding (docs/protocol.md §4.1): the fingerprint, a free map inside the
        # signed claim, is kept with its keys in sorted order, so a claim sent in any
        # other order fails the receiver's canonical re-encoding check (§2.1).
        object.__setattr__(self, "fingerprint", dict(sorted(self.fingerprint.items())))


@dataclass(frozen=True)
class Hello:
    """Handshake message 1, node -> coordinator (docs/protocol.md §2.2)."""

    versions: tuple[str, ...]
    suites: tuple[str, ...]
    ephemeral: bytes  # X25519 public key, 32 bytes
    nonce: bytes  # 32 random bytes
    node_key: bytes  # node's Ed25519 identity, raw 32 bytes
    coordinator_key: bytes  # the coordinator key the node expects (pinned), 32 bytes

    TYPE: ClassVar[str] = "hello"

    def __post_init__(self) -> None:
        t = self.TYPE
        _names(self, "versions", t)
        _names(self, "suites", t)
        _bytes(t, "ephemeral", self.ephemeral, exact=KEY_BYTES)
        _bytes(t, "nonce", self.nonce, exact=NONCE_BYTES)
        _bytes(t, "node_key", self.node_key, exact=KEY_BYTES)
        _bytes(t, "coordinator_key", self.coordinator_key, exact=KEY_BYTES)


@dataclass(frozen=True)
class Welcome:
    """Handshake message 2, coordinator -> node (docs/protocol.md §2.3).

    ``signature`` is the coordinator's Ed25519 signature over
    ``b"netcheck/1 coordinator\\0" || th2``."""

    version: str
    suite: str
    ephemeral: bytes
    nonce: bytes
    coordinator_key: bytes
    signature: bytes

    TYPE: ClassVar[str] = "welcome"

    def __post_init__(self) -> None:
        t = self.TYPE
        _str(t, "version", self.version, MAX_NAME_CHARS, min_chars=1)
        _str(t, "suite", self.suite, MAX_NAME_CHARS, min_chars=1)
        _bytes(t, "ephemeral", self.ephemeral, exact=KEY_BYTES)
        _bytes(t, "nonce", self.nonce, exact=NONCE_BYTES)
        _bytes(t, "coordinator_key", self.coordinator_key, exact=KEY_BYTES)
        _bytes(t, "signature", self.signature, exact=SIGNATURE_BYTES)


@dataclass(frozen=True)
class Auth:
    """Handshake message 3, node -> coordinator (docs/protocol.md §2.4).

    ``signature`` is the node's Ed25519 signature over ``b"netcheck/1 node\\0" || th3``;
    th3 covers ``claim``."""

    signature: bytes
    claim: ProfileClaim

    TYPE: ClassVar[str] = "auth"

    def __post_init__(self) -> None:
        _bytes(self.TYPE, "signature", self.signature, exact=SIGNATURE_BYTES)
        if not isinstance(self.claim, ProfileClaim):
            raise _bad(self.TYPE, "claim", "expected a profile claim")


@dataclass(frozen=True)
class Job:
    """A batch to run, coordinator -> node (docs/protocol.md §5.2). ``ciphertext`` is the
    prompt list sealed under a job key the node learns only from ``Release``."""

    round_id: str
    nonce: bytes  # 12 bytes, ChaCha20-Poly1305 nonce of the payload
    ciphertext: bytes
    batch_size: int
    max_new_tokens: int
    deadline_s: float  # hint: seconds from release to result the coordinator allows

    TYPE: ClassVar[str] = "job"

    def __post_init__(self) -> None:
        t = self.TYPE
        _round_id(t, self.round_id)
        _bytes(t, "nonce", self.nonce, exact=JOB_NONCE_BYTES)
        _bytes(t, "ciphertext", self.ciphertext, max_len=MAX_CIPHERTEXT_BYTES)
        if len(self.ciphertext) < 16:
            raise _bad(t, "ciphertext", "shorter than the 16-byte tag")
        _int(t, "batch_size", self.batch_size, 1, MAX_BATCH)
        _int(t, "max_new_tokens", self.max_new_tokens, 1, MAX_TOKENS)
        d = self.deadline_s
        if type(d) is int:
            object.__setattr__(self, "deadline_s", d := float(d))
        if type(d) is not float or not math.isfinite(d) or not 0.0 < d <= MAX_DEADLINE_S:
            raise _bad(t, "deadline_s", f"expected a float in (0, {MAX_DEADLINE_S}]")


@dataclass(frozen=True)
class Ack:
    """Node -> coordinator: job received and ready to run (docs/protocol.md §5.3)."""

    round_id: str

    TYPE: ClassVar[str] = "ack"

    def __post_init__(self) -> None:
        _round_id(self.TYPE, self.round_id)


@dataclass(frozen=True)
class Release:
    """Coordinator -> node: the 32-byte job key; the node starts now (§5.4)."""

    round_id: str
    job_key: bytes

    TYPE: ClassVar[str] = "release"

    def __post_init__(self) -> None:
        _round_id(self.TYPE, self.round_id)
        _bytes(self.TYPE, "job_key", self.job_key, exact=KEY_BYTES)


@dataclass(frozen=True)
class Result:
    """Node -> coordinator: token ids per prompt, commitment and receipt signature (§5.5).

    ``outputs``: batch_size rows of token ids, each ``0 <= id < 2**31``."""

    round_id: str
    outputs: tuple[tuple[int, ...], ...]
    commitment: bytes  # jobs.commitment(outputs), 32 bytes
    signature: bytes  # jobs.sign_receipt(...), 64 bytes

    TYPE: ClassVar[str] = "result"

    def __post_init__(self) -> None:
        t = self.TYPE
        _round_id(t, self.round_id)
        rows = _tuple(self, "outputs", t)
        if len(rows) > MAX_BATCH:
            raise _bad(t, "outputs", f"more than {MAX_BATCH} rows")
        normalised = tuple(tuple(row) if type(row) is list else row for row in rows)
        for row in normalised:
            if type(row) is not tuple or len(row) > MAX_TOKENS:
                raise _bad(t, "outputs", f"rows must be sequences of <= {MAX_TOKENS} ints")
        if not valid_token_rows(normalised):
            raise _bad(t, "outputs", "token ids must be ints in [0, 2**31)")
        object.__setattr__(self, "outputs", normalised)
        _bytes(t, "commitment", self.commitment, exact=DIGEST_BYTES)
        _bytes(t, "signature", self.signature, exact=SIGNATURE_BYTES)


@dataclass(frozen=True)
class Echo:
    """Coordinator -> node: application-level RTT probe (§5.6); 0 <= nonce < 2**63."""

    nonce: int

    TYPE: ClassVar[str] = "echo"

    def __post_init__(self) -> None:
        _int(self.TYPE, "nonce", self.nonce, 0, INT64_MAX)


@dataclass(frozen=True)
class EchoReply:
    """Node -> coordinator: answer to ``Echo`` carrying the same nonce (§5.6)."""

    nonce: int

    TYPE: ClassVar[str] = "echo_reply"

    def __post_init__(self) -> None:
        _int(self.TYPE, "nonce", self.nonce, 0, INT64_MAX)


@dataclass(frozen=True)
class Probe:
    """Coordinator -> node: known-answer compute probe (§5.9); 0 <= nonce < 2**63,
    ``challenge`` 32 random bytes. The node evaluates ``netcheck.engines.probe`` on
    its compute device and replies with :class:`ProbeReply`."""

    nonce: int
    challenge: bytes

    TYPE: ClassVar[str] = "probe"

    def __post_init__(self) -> None:
        _int(self.TYPE, "nonce", self.nonce, 0, INT64_MAX)
        _bytes(self.TYPE, "challenge", self.challenge, exact=CHALLENGE_BYTES)


@dataclass(frozen=True)
class ProbeReply:
    """Node -> coordinator: answer to ``Probe`` with the same nonce (§5.9); ``answer``
    is the 32-byte SHA-256 defined in ``netcheck.engines.probe``."""

    nonce: int
    answer: bytes

    TYPE: ClassVar[str] = "probe_reply"

    def __post_init__(self) -> None:
        _int(self.TYPE, "nonce", self.nonce, 0, INT64_MAX)
        _bytes(self.TYPE, "answer", self.answer, exact=DIGEST_BYTES)


@dataclass(frozen=True)
class Error:
    """Node -> coordinator: the node could not run the job of ``round_id`` (§5.7)."""

    round_id: str
    reason: str

    TYPE: ClassVar[str] = "error"

    def __post_init__(self) -> None:
        _round_id(self.TYPE, self.round_id)
        _str(self.TYPE, "reason", self.reason, MAX_REASON_CHARS)


VERDICT_NAME_RE = re.compile(r"[a-z][a-z-]{0,31}")
MAX_ELAPSED_S = 1e6


def _opt_seconds(t: str, f: str, v: object) -> None:
    if v is None:
        return
    if type(v) is not float or not math.isfinite(v) or not 0.0 <= v <= MAX_ELAPSED_S:
        raise _bad(t, f, f"expected null or a float in [0, {MAX_ELAPSED_S:g}]")


@dataclass(frozen=True)
class VerdictNotice:
    """Coordinator -> node: the node's verdict in a finished round (§5.11).

    ``verdict`` is a verdict name (``pass``, ``late``, ``wrong-answer``, ...);
    ``reason`` a public explanation that never names canaries or positions;
    ``elapsed_s``/``deadline_s`` seconds from release (null when not measured);
    ``signature`` the coordinator's Ed25519 signature over
    :func:`netcheck.protocol.verdicts.verdict_bytes`, so the node can keep it as proof.
    """

    round_id: str
    verdict: str
    reason: str
    elapsed_s: float | None
    deadline_s: float | None
    signature: bytes

    TYPE: ClassVar[str] = "verdict"

    def __post_init__(self) -> None:
        t = self.TYPE
        _round_id(t, self.round_id)
        _str(t, "verdict", self.verdict, 32, min_chars=1)
        if not VERDICT_NAME_RE.fullmatch(self.verdict):
            raise _bad(t, "verdict", "expected a lower-case verdict name")
        _str(t, "reason", self.reason, MAX_REASON_CHARS)
        _opt_seconds(t, "elapsed_s", self.elapsed_s)
        _opt_seconds(t, "deadline_s", self.deadline_s)
        _bytes(t, "signature", self.signature, exact=SIGNATURE_BYTES)


@dataclass(frozen=True)
class Bye:
    """Either side: orderly end of the session (§5.8)."""

    reason: str

    TYPE: ClassVar[str] = "bye"

    def __post_init__(self) -> None:
        _str(self.TYPE, "reason", self.reason, MAX_REASON_CHARS)


Message = (
    Hello
    | Welcome
    | Auth
    | Job
    | Ack
    | Release
    | Result
    | Echo
    | EchoReply
    | Probe
    | ProbeReply
    | Error
    | VerdictNotice
    | Bye
)

MESSAGE_TYPES: dict[str, type[Message]] = {
    cls.TYPE: cls
    for cls in (
        Hello, Welcome, Auth, Job, Ack, Release, Result, Echo, EchoReply, Probe, ProbeReply,
        Error, VerdictNotice, Bye,
    )
}  # fmt: skip
HANDSHAKE_TYPES = frozenset({"hello", "welcome", "auth"})
FRAME_TYPES = frozenset(MESSAGE_TYPES) - HANDSHAKE_TYPES
