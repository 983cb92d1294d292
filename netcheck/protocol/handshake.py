"""The netcheck/1 handshake: SIGMA-style signed X25519 (docs/protocol.md §2).

Three plain (unencrypted) msgpack messages: ``hello`` N->C, ``welcome`` C->N,
``auth`` N->C. Each party signs the running transcript hash with its Ed25519 identity
under its own domain label, so the signatures bind the offered versions (downgrade),
both identity keys (unknown-key-share), both ephemerals and nonces (replay) and the
node's profile claim. Traffic keys come from HKDF-SHA256 over the X25519 secret,
salted with the final transcript hash (§2.6). Construction after SIGMA (Krawczyk,
CRYPTO 2003) as used by TLS 1.3 (RFC 8446 §4.4) and libp2p-noise.

Both classes are sans-I/O: bytes in, bytes out. Any failure raises ``HandshakeError``
carrying the close code; the object is then dead (later calls raise
``LocalProtocolError``).
"""

from __future__ import annotations

import hashlib
import os
import struct
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from netcheck.errors import (
    CloseCode,
    HandshakeError,
    KeyFileError,
    LocalProtocolError,
    MessageError,
)
from netcheck.keys import load_public_bytes, public_key_bytes
from netcheck.protocol.codec import DEFAULT_LIMITS, Limits, decode_message, encode_message
from netcheck.protocol.messages import Auth, Hello, Message, ProfileClaim, Welcome
from netcheck.protocol.states import Role, State, next_state
from netcheck.protocol.transport import (
    DEFAULT_MAX_COUNTER,
    DEFAULT_REKEY_AFTER_S,
    DEFAULT_REKEY_FRAMES,
    Clock,
    Transport,
)

VERSION = "netcheck/1"
SUITE = "x25519-ed25519-chacha20poly1305-sha256"
SUPPORTED_VERSIONS: tuple[str, ...] = (VERSION,)
SUPPORTED_SUITES: tuple[str, ...] = (SUITE,)
ENDPOINT = "/v1/ws"
"""The endpoint name in the transcript prologue h0 (docs/protocol.md §2.1): a constant of
netcheck/1, not the URL path the node dialled (a reverse proxy may rewrite it)."""
MAX_HANDSHAKE_BYTES = 2048  # docs/protocol.md §2.1
# docs/protocol.md §2.5 and §7 — domain labels; none is a prefix of another.
PROLOGUE_LABEL = b"netcheck/1"
COORDINATOR_LABEL = b"netcheck/1 coordinator\0"
NODE_LABEL = b"netcheck/1 node\0"
TRAFFIC_INFO = b"netcheck/1 traffic"
HANDSHAKE_LIMITS = Limits(
    max_message_bytes=MAX_HANDSHAKE_BYTES,
    max_array_len=16,
    max_map_len=40,
    max_str_len=1024,
    max_bin_len=64,
    max_depth=3,
    max_objects=128,  # a profile claim holds up to 32 fingerprint entries
)

RandomBytes = Callable[[int], bytes]
M = TypeVar("M", Hello, Welcome, Auth)


def _lp(data: bytes) -> bytes:
    """Length prefix: 4-byte big-endian length, then the bytes (§2.1)."""
    return struct.pack(">I", len(data)) + data


class Transcript:
    """Running transcript hash (docs/protocol.md §2.1).

    ``h0 = SHA-256(lp("netcheck/1") || lp(path) || lp(coordinator_key))`` and each
    ``mix(data)`` sets ``h = SHA-256(h || lp(data))`` and returns the new ``h``."""

    def __init__(self, path: str, coordinator_key: bytes) -> None:
        prologue = _lp(PROLOGUE_LABEL) + _lp(path.encode()) + _lp(coordinator_key)
        self.hash = hashlib.sha256(prologue).digest()

    def mix(self, data: bytes) -> bytes:
        self.hash = hashlib.sha256(self.hash + _lp(data)).digest()
        return self.hash


def derive_keys(shared: bytes, th_final: bytes) -> tuple[bytes, bytes, bytes]:
    """HKDF-SHA256(salt=th_final, ikm=shared, info="netcheck/1 traffic", 80 bytes)
    split into (key node->coordinator 32, key coordinator->node 32, session id 16)."""
    okm = HKDF(hashes.SHA256(), length=80, salt=th_final, info=TRAFFIC_INFO).derive(shared)
    return okm[:32], okm[32:64], okm[64:]


def _fail(code: CloseCode, reason: str) -> HandshakeError:
    return HandshakeError(code, reason)


def _receive(data: bytes, expected: type[M]) -> M:
    """Decode a handshake message of type ``expected``; it must be canonically encoded,
    so the transcript re-encoding of its unsigned body is exactly what the peer hashed."""
    if len(data) > MAX_HANDSHAKE_BYTES:
        raise _fail(CloseCode.MESSAGE_TOO_LARGE, f"handshake message of {len(data)} bytes")
    try:
        msg: Message = decode_message(data, limits=HANDSHAKE_LIMITS, allowed=(expected.TYPE,))
    except MessageError as exc:
        reason = exc.reason
        if exc.code is CloseCode.UNEXPECTED_MESSAGE:
            reason = f"expected {expected.TYPE}, got {reason.split(' ', 1)[0]}"
        raise _fail(exc.code, reason) from None
    assert isinstance(msg, expected)
    if encode_message(msg) != data:
        raise _fail(CloseCode.MALFORMED_MESSAGE, f"{msg.TYPE} is not canonically encoded")
    return msg


def _exchange(private: X25519PrivateKey, peer_public: bytes) -> bytes:
    """X25519; all-zero results (low-order peer points, RFC 7748 §6.1) are refused."""
    try:
        return private.exchange(X25519PublicKey.from_public_bytes(peer_public))
    except ValueError:
        raise _fail(CloseCode.BAD_HANDSHAKE, "X25519 shared secret is all-zero") from None


def _verify(key: Ed25519PublicKey, signature: bytes, data: bytes) -> None:
    try:
        key.verify(signature, data)
    except InvalidSignature:
        raise _fail(CloseCode.BAD_SIGNATURE, "transcript signature invalid") from None


class _Machine:
    """Shared life cycle, walked along the session table of :mod:`netcheck.protocol.states`
    (docs/protocol.md §6): each step handles handshake messages in order (sent or
    received), and the state after it is :func:`next_state` of the role's table. A step
    called in a state where the table has no such message is a local error (the caller
    used the object out of order); after the first failure the handshake is dead
    (``CLOSED``)."""

    def __init__(self, role: Role) -> None:
        self._role = role
        self._state = State.AWAIT_HELLO
        self._busy = False

    @property
    def state(self) -> State:
        """The handshake's state in the session table (``OPEN`` once complete)."""
        return self._state

    def _run(self, messages: tuple[str, ...], fn: Callable[[], object]) -> object:
        """Run ``fn``, the step that handles ``messages`` (in order), then move to the
        state the table gives after them.

        Raises:
            LocalProtocolError: the table allows no such step now, or one is running.
        """
        target = self._state
        try:
            if self._busy:
                raise MessageError(CloseCode.UNEXPECTED_MESSAGE, "a step is running")
            for msg_type in messages:
                target = next_state(self._role, target, msg_type)
        except MessageError as exc:
            raise LocalProtocolError(f"handshake ({self._role}): {exc}") from None
        self._busy = True
        try:
            out = fn()
        except BaseException:
            self._state = State.CLOSED
            raise
        finally:
            self._busy = False
        self._state = target
        return out


class NodeHandshake(_Machine):
    """The node (initiator) side (docs/protocol.md §2.2-§2.4).

    Args:
        identity: the node's Ed25519 identity key.
        coordinator_key: the pinned coordinator public key.
        claim: profile claim sent (and signed) in ``auth``.
        path: the endpoint name bound into the prologue; netcheck/1 peers use
            :data:`ENDPOINT` whatever URL path the node dialled, so a reverse proxy may
            rewrite host and path (§2.1). Both sides must use the same.
        random_bytes: entropy source (ephemeral key and nonce); injectable for tests.
        limits, max_counter, rekey_frames, rekey_after_s, clock: passed to the
            resulting ``Transport`` (frame limits, key update policy, §3.3, §3.5).

    Raises:
        LocalProtocolError: if ``claim`` makes ``auth`` larger than 2 KiB.
    """

    def __init__(
        self,
        identity: Ed25519PrivateKey,
        coordinator_key: Ed25519PublicKey,
        claim: ProfileClaim,
        *,
        path: str = ENDPOINT,
        random_bytes: RandomBytes = os.urandom,
        limits: Limits = DEFAULT_LIMITS,
        max_counter: int = DEFAULT_MAX_COUNTER,
        rekey_frames: int = DEFAULT_REKEY_FRAMES,
        rekey_after_s: float = DEFAULT_REKEY_AFTER_S,
        clock: Clock = time.monotonic,
    ) -> None:
        super().__init__(Role.NODE)
        if len(encode_message(Auth(bytes(64), claim))) > MAX_HANDSHAKE_BYTES:
            raise LocalProtocolError("profile claim too large for a 2 KiB auth message")
        self._identity = identity
        self._coordinator = coordinator_key
        self._coordinator_raw = public_key_bytes(coordinator_key)
        self._claim = claim
        self._random = random_bytes
        self._limits = limits
        self._max_counter = max_counter
        self._rekey = (rekey_frames, rekey_after_s, clock)
        self._transcript = Transcript(path, self._coordinator_raw)
        self._ephemeral: X25519PrivateKey | None = None
        self._hello: Hello | None = None
        self._transport: Transport | None = None

    def start(self) -> bytes:
        """Return the ``hello`` bytes to send (§2.2)."""
        out = self._run(("hello",), self._start)
        assert isinstance(out, bytes)
        return out

    def _start(self) -> bytes:
        self._ephemeral = X25519PrivateKey.from_private_bytes(self._random(32))
        self._hello = Hello(
            versions=SUPPORTED_VERSIONS,
            suites=SUPPORTED_SUITES,
            ephemeral=self._ephemeral.public_key().public_bytes_raw(),
            nonce=self._random(32),
            node_key=public_key_bytes(self._identity),
            coordinator_key=self._coordinator_raw,
        )
        data = encode_message(self._hello)
        self._transcript.mix(data)
        return data

    def receive_welcome(self, data: bytes) -> bytes:
        """Check ``welcome`` and return the ``auth`` bytes to send (§2.3, §2.4).

        Raises:
            HandshakeError: MESSAGE_TOO_LARGE, MALFORMED_MESSAGE, UNEXPECTED_MESSAGE,
                VERSION_MISMATCH (version/suite not offered), WRONG_COORDINATOR_KEY
                (not the pinned key), BAD_SIGNATURE, BAD_HANDSHAKE (low-order point).
        """
        out = self._run(("welcome", "auth"), lambda: self._welcome(data))
        assert isinstance(out, bytes)
        return out

    def _welcome(self, data: bytes) -> bytes:
        assert self._hello is not None and self._ephemeral is not None
        welcome = _receive(data, Welcome)
        if welcome.version not in self._hello.versions or welcome.suite not in self._hello.suites:
            raise _fail(CloseCode.VERSION_MISMATCH, "coordinator chose what was not offered")
        if welcome.coordinator_key != self._coordinator_raw:
            raise _fail(CloseCode.WRONG_COORDINATOR_KEY, "welcome is from another identity")
        th2 = self._transcript.mix(encode_message(welcome, omit=("signature",)))
        _verify(self._coordinator, welcome.signature, COORDINATOR_LABEL + th2)
        self._transcript.mix(welcome.signature)
        shared = _exchange(self._ephemeral, welcome.ephemeral)
        th3 = self._transcript.mix(
            encode_message(Auth(bytes(64), self._claim), omit=("signature",))
        )
        auth = Auth(signature=self._identity.sign(NODE_LABEL + th3), claim=self._claim)
        th_final = self._transcript.mix(auth.signature)
        to_coordinator, to_node, session_id = derive_keys(shared, th_final)
        self._transport = Transport(
            Role.NODE,
            to_coordinator,
            to_node,
            session_id,
            limits=self._limits,
            max_counter=self._max_counter,
            rekey_frames=self._rekey[0],
            rekey_after_s=self._rekey[1],
            clock=self._rekey[2],
        )
        return encode_message(auth)

    def transport(self) -> Transport:
        """The session transport, after ``receive_welcome`` succeeded.

        Raises:
            LocalProtocolError: if the handshake has not completed.
        """
        if self._state is not State.OPEN or self._transport is None:
            raise LocalProtocolError("handshake not complete")
        return self._transport


@dataclass(frozen=True)
class Accepted:
    """A completed handshake on the coordinator: the transport, the node's raw 32-byte
    Ed25519 key (proven by its signature), its signed profile claim and the 16-byte
    session id."""

    transport: Transport
    node_key: bytes
    claim: ProfileClaim
    session_id: bytes


class CoordinatorHandshake(_Machine):
    """The coordinator (responder) side (docs/protocol.md §2.2-§2.4).

    Args:
        identity: the coordinator's Ed25519 identity key.
        admit: ``admit(node_key_raw32) -> bool``, called on ``hello``. It must only
            decide, not record: the key is proven only when ``receive_auth`` returns.
        path, random_bytes, limits, max_counter, rekey_frames, rekey_after_s, clock: as
            for ``NodeHandshake``.
    """

    def __init__(
        self,
        identity: Ed25519PrivateKey,
        admit: Callable[[bytes], bool],
        *,
        path: str = ENDPOINT,
        random_bytes: RandomBytes = os.urandom,
        limits: Limits = DEFAULT_LIMITS,
        max_counter: int = DEFAULT_MAX_COUNTER,
        rekey_frames: int = DEFAULT_REKEY_FRAMES,
        rekey_after_s: float = DEFAULT_REKEY_AFTER_S,
        clock: Clock = time.monotonic,
    ) -> None:
        super().__init__(Role.COORDINATOR)
        self._identity = identity
        self._own_raw = public_key_bytes(identity)
        self._admit = admit
        self._random = random_bytes
        self._limits = limits
        self._max_counter = max_counter
        self._rekey = (rekey_frames, rekey_after_s, clock)
        self._transcript = Transcript(path, self._own_raw)
        self._node_key: Ed25519PublicKey | None = None
        self._hello: Hello | None = None
        self._shared = b""

    def receive_hello(self, data: bytes) -> bytes:
        """Check ``hello`` and return the ``welcome`` bytes to send (§2.2, §2.3).

        Raises:
            HandshakeError: MESSAGE_TOO_LARGE, MALFORMED_MESSAGE, UNEXPECTED_MESSAGE,
                VERSION_MISMATCH, WRONG_COORDINATOR_KEY (node expects another key),
                UNKNOWN_NODE_KEY (``admit`` said no), BAD_HANDSHAKE (bad key or
                low-order ephemeral).
        """
        out = self._run(("hello", "welcome"), lambda: self._on_hello(data))
        assert isinstance(out, bytes)
        return out

    def _on_hello(self, data: bytes) -> bytes:
        hello = _receive(data, Hello)
        version = next((v for v in SUPPORTED_VERSIONS if v in hello.versions), None)
        suite = next((s for s in SUPPORTED_SUITES if s in hello.suites), None)
        if version is None or suite is None:
            raise _fail(CloseCode.VERSION_MISMATCH, "no common version or suite")
        if hello.coordinator_key != self._own_raw:
            raise _fail(CloseCode.WRONG_COORDINATOR_KEY, "node expects another coordinator")
        if hello.node_key == self._own_raw:
            raise _fail(CloseCode.BAD_HANDSHAKE, "node key equals the coordinator key")
        try:
            self._node_key = load_public_bytes(hello.node_key, "node key")
        except KeyFileError as exc:
            raise _fail(CloseCode.BAD_HANDSHAKE, str(exc)) from None
        if not self._admit(hello.node_key):
            raise _fail(CloseCode.UNKNOWN_NODE_KEY, "node key not admitted")
        ephemeral = X25519PrivateKey.from_private_bytes(self._random(32))
        self._shared = _exchange(ephemeral, hello.ephemeral)
        self._hello = hello
        self._transcript.mix(data)
        unsigned = Welcome(
            version=version,
            suite=suite,
            ephemeral=ephemeral.public_key().public_bytes_raw(),
            nonce=self._random(32),
            coordinator_key=self._own_raw,
            signature=bytes(64),
        )
        th2 = self._transcript.mix(encode_message(unsigned, omit=("signature",)))
        signature = self._identity.sign(COORDINATOR_LABEL + th2)
        self._transcript.mix(signature)
        return encode_message(
            Welcome(
                version=version,
                suite=suite,
                ephemeral=unsigned.ephemeral,
                nonce=unsigned.nonce,
                coordinator_key=self._own_raw,
                signature=signature,
            )
        )

    def receive_auth(self, data: bytes) -> Accepted:
        """Check ``auth`` and return the accepted session (§2.4, §2.6).

        Raises:
            HandshakeError: MESSAGE_TOO_LARGE, MALFORMED_MESSAGE, UNEXPECTED_MESSAGE,
                BAD_SIGNATURE (not signed by the node key over this transcript).
        """
        out = self._run(("auth",), lambda: self._on_auth(data))
        assert isinstance(out, Accepted)
        return out

    def _on_auth(self, data: bytes) -> Accepted:
        assert self._node_key is not None and self._hello is not None
        auth = _receive(data, Auth)
        th3 = self._transcript.mix(encode_message(auth, omit=("signature",)))
        _verify(self._node_key, auth.signature, NODE_LABEL + th3)
        th_final = self._transcript.mix(auth.signature)
        to_coordinator, to_node, session_id = derive_keys(self._shared, th_final)
        transport = Transport(
            Role.COORDINATOR,
            to_node,
            to_coordinator,
            session_id,
            limits=self._limits,
            max_counter=self._max_counter,
            rekey_frames=self._rekey[0],
            rekey_after_s=self._rekey[1],
            clock=self._rekey[2],
        )
        return Accepted(transport, self._hello.node_key, auth.claim, session_id)
