"""Encrypted transport frames after the handshake (docs/protocol.md §3).

Frame = ``type (1 byte) || counter (8 bytes, big-endian) ||
ChaCha20-Poly1305(key_dir).encrypt(nonce = 4 zero bytes || counter,
plaintext = encode_message(msg), aad = session_id || direction || counter || type)``
(RFC 8439). Counters start at 0 per direction, run on across key updates and must
arrive exactly in order; any failure makes the transport permanently unusable (the
session must close with the error's code).

Key update (§3.5), after TLS 1.3 KeyUpdate (RFC 8446 §4.6.3, §7.2) but with no extra
frame and no round trip: the sender marks the last frame it seals under a key with
type ``0x02``; right after that frame, sender and receiver both replace that
direction's key by ``HKDF-Expand(key, "netcheck/1 key update", 32)`` (RFC 5869 §2.3).
The sender decides when: after ``rekey_frames`` frames under one key, or once
``rekey_after_s`` seconds of the injected ``clock`` have passed since the key was
installed, or when ``request_key_update()`` was called.
"""

from __future__ import annotations

import math
import struct
import time
from collections.abc import Callable
from dataclasses import dataclass

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import ChaCha20Poly1305
from cryptography.hazmat.primitives.kdf.hkdf import HKDFExpand

from netcheck.errors import (
    CloseCode,
    FrameError,
    LocalProtocolError,
    MessageError,
    ProtocolError,
)
from netcheck.protocol.codec import DEFAULT_LIMITS, Limits, decode_message, encode_message
from netcheck.protocol.messages import FRAME_TYPES, Message
from netcheck.protocol.states import Role, sends

FRAME_DATA = 0x01  # docs/protocol.md §3.1
FRAME_KEY_UPDATE = 0x02  # data frame after which the sender's key is ratcheted (§3.5)
FRAME_TYPES_KNOWN = frozenset({FRAME_DATA, FRAME_KEY_UPDATE})
HEADER_BYTES = 9  # type + counter
TAG_BYTES = 16
DEFAULT_MAX_COUNTER = 2**32  # frames per direction; reconnect before (§3.3)
DEFAULT_REKEY_FRAMES = 2**20  # frames sealed under one key before a key update (§3.5)
DEFAULT_REKEY_AFTER_S = 3600.0  # seconds a key may be used for sealing (§3.5)
KEY_UPDATE_INFO = b"netcheck/1 key update"  # HKDF-Expand info (§3.5)
DIRECTION = {Role.NODE: 0, Role.COORDINATOR: 1}  # byte naming the sender (§3.2)
_COUNTER = struct.Struct(">Q")

Clock = Callable[[], float]


def _aad(session_id: bytes, sender: Role, counter_bytes: bytes, frame_type: int) -> bytes:
    """``session_id || direction || u64(counter) || type`` (26 bytes, §3.2)."""
    return session_id + bytes([DIRECTION[sender]]) + counter_bytes + bytes([frame_type])


def next_key(key: bytes) -> bytes:
    """The next traffic key of one direction: ``HKDF-Expand(PRK = key, info =
    "netcheck/1 key update", L = 32)`` with SHA-256 (RFC 5869 §2.3; the update rule of
    RFC 8446 §7.2). One-way: a later key does not reveal an earlier one.

    Args:
        key: the current 32-byte key.

    Returns:
        32 bytes.
    """
    return HKDFExpand(hashes.SHA256(), length=32, info=KEY_UPDATE_INFO).derive(key)


@dataclass(frozen=True)
class AdmittedFrame:
    """A received frame whose place in the sequence was checked and taken by
    :meth:`Transport.admit`, with everything :func:`open_admitted` needs (plain data:
    picklable, so opening may run in a worker process).

    Attributes:
        frame: the whole frame (type, counter, ciphertext and tag).
        key: the 32-byte receive key in force for this frame (§3.5).
        session_id: 16 bytes, bound into the AAD.
        sender: the peer's role (the AAD's direction byte).
        limits: decoder limits in force when the frame was admitted.
        allowed: message types the sender may send in a frame (§6.1).
    """

    frame: bytes
    key: bytes
    session_id: bytes
    sender: Role
    limits: Limits
    allowed: frozenset[str]


def open_admitted(admitted: AdmittedFrame) -> Message:
    """Decrypt (ChaCha20-Poly1305, RFC 8439) and decode an admitted frame: the pure
    second half of :meth:`Transport.open` (docs/protocol.md §3.4 after the counter
    check). Keeps no state; the caller reports a failure with :meth:`Transport.fail`.

    Raises:
        FrameError: DECRYPT_FAILED (bad tag, wrong key, direction or epoch, type changed).
        MessageError: MALFORMED_MESSAGE, MESSAGE_TOO_LARGE, or UNEXPECTED_MESSAGE for a
            handshake type or a type the sender may not send.
    """
    frame = admitted.frame
    frame_type, counter_bytes = frame[0], frame[1:HEADER_BYTES]
    try:
        plaintext = ChaCha20Poly1305(admitted.key).decrypt(
            bytes(4) + counter_bytes,
            frame[HEADER_BYTES:],
            _aad(admitted.session_id, admitted.sender, counter_bytes, frame_type),
        )
    except InvalidTag:
        raise FrameError(CloseCode.DECRYPT_FAILED, "authentication tag mismatch") from None
    try:
        return decode_message(plaintext, limits=admitted.limits, allowed=admitted.allowed)
    except MessageError as exc:
        if exc.code is CloseCode.UNEXPECTED_MESSAGE:
            raise MessageError(
                exc.code, f"{admitted.sender} may not send {exc.reason.split(' ', 1)[0]} in a frame"
            ) from None
        raise


class Transport:
    """One side's encrypted channel (sans-I/O): ``seal`` messages to bytes, ``open`` bytes
    to messages. Built by the handshake (``NodeHandshake.transport()``, ``Accepted``).

    Args:
        role: our role; decides which key seals and which opens.
        send_key, recv_key: 32-byte ChaCha20-Poly1305 keys (§2.6).
        session_id: 16 bytes, bound into every frame's AAD.
        limits: decoder limits; frames longer than ``limits.max_message_bytes`` plus the
            25 bytes of header and tag are rejected before decryption.
        max_counter: frames allowed per direction over the whole session, all keys
            together (default 2**32; tests use small ones).
        rekey_frames: frames we seal under one key; the last of them is a key update
            (default 2**20, at least 1). Only our sending direction; the peer decides
            for its own (§3.5).
        rekey_after_s: seconds of ``clock`` after which our next frame is a key update
            (default 3600; ``math.inf`` turns the time trigger off).
        clock: monotonic clock in seconds, read once per ``seal`` and at each key
            installation (default ``time.monotonic``; inject a fake one in tests).

    Raises:
        LocalProtocolError: wrong key or session id sizes, or limits out of range.
    """

    def __init__(
        self,
        role: Role,
        send_key: bytes,
        recv_key: bytes,
        session_id: bytes,
        *,
        limits: Limits = DEFAULT_LIMITS,
        max_counter: int = DEFAULT_MAX_COUNTER,
        rekey_frames: int = DEFAULT_REKEY_FRAMES,
        rekey_after_s: float = DEFAULT_REKEY_AFTER_S,
        clock: Clock = time.monotonic,
    ) -> None:
        if len(send_key) != 32 or len(recv_key) != 32 or len(session_id) != 16:
            raise LocalProtocolError("transport keys must be 32 bytes, session id 16")
        if not 0 < max_counter <= 2**64:
            raise LocalProtocolError("max_counter must be in (0, 2**64]")
        if type(rekey_frames) is not int or rekey_frames < 1:
            raise LocalProtocolError("rekey_frames must be an int >= 1")
        if math.isnan(rekey_after_s) or rekey_after_s <= 0:
            raise LocalProtocolError("rekey_after_s must be > 0 (math.inf: no time trigger)")
        self.role = role
        self.peer = Role.COORDINATOR if role is Role.NODE else Role.NODE
        #: message types the peer may send in a frame (§6.1); others: UNEXPECTED_MESSAGE
        self._peer_types = frozenset(t for t in FRAME_TYPES if sends(self.peer, t))
        self.session_id = session_id
        self._send_key = send_key
        self._recv_key = recv_key
        self._seal_aead = ChaCha20Poly1305(send_key)
        self._limits = limits
        self._recv_limits = limits
        self._max_counter = max_counter
        self._rekey_frames = rekey_frames
        self._rekey_after_s = rekey_after_s
        self._clock = clock
        self._send_counter = 0
        self._recv_counter = 0
        self._bytes_sent = 0
        self._bytes_received = 0
        self._sealed_under_key = 0  # frames sealed under the current send key
        self._key_installed_s = clock()
        self._update_requested = False
        self._updates_sent = 0
        self._updates_received = 0
        self._failed: ProtocolError | None = None

    def request_key_update(self) -> None:
        """Make the next sealed frame a key update (§3.5), whatever the thresholds."""
        self._update_requested = True

    def _update_due(self) -> bool:
        return (
            self._update_requested
            or self._sealed_under_key + 1 >= self._rekey_frames
            or self._clock() - self._key_installed_s >= self._rekey_after_s
        )

    def seal(self, msg: Message) -> bytes:
        """Encrypt ``msg`` into one frame (one websocket binary message). The frame is a
        key update (type 0x02, §3.5) when one is due; our send key is then ratcheted
        after sealing it.

        Raises:
            LocalProtocolError: counter exhausted, message not sendable by our role or
                not a frame message, message too large, or the transport has failed.
        """
        if self._failed is not None:
            raise LocalProtocolError(f"transport failed earlier: {self._failed}")
        if msg.TYPE not in FRAME_TYPES or not sends(self.role, msg.TYPE):
            raise LocalProtocolError(f"{self.role} may not send {msg.TYPE!r} in a frame")
        if self._send_counter >= self._max_counter:
            raise LocalProtocolError("send counter exhausted; reconnect (§3.3)")
        plaintext = encode_message(msg)
        if len(plaintext) > self._limits.max_message_bytes:
            raise LocalProtocolError(f"message of {len(plaintext)} bytes exceeds the limit")
        update = self._update_due()
        frame_type = FRAME_KEY_UPDATE if update else FRAME_DATA
        counter = _COUNTER.pack(self._send_counter)
        sealed = self._seal_aead.encrypt(
            bytes(4) + counter, plaintext, _aad(self.session_id, self.role, counter, frame_type)
        )
        self._send_counter += 1
        self._sealed_under_key += 1
        if update:
            self._send_key = next_key(self._send_key)
            self._seal_aead = ChaCha20Poly1305(self._send_key)
            self._sealed_under_key = 0
            self._key_installed_s = self._clock()
            self._update_requested = False
            self._updates_sent += 1
        frame = bytes([frame_type]) + counter + sealed
        self._bytes_sent += len(frame)
        return frame

    def open(self, frame: bytes) -> Message:
        """Authenticate, decrypt and decode one received frame (docs/protocol.md §3.4):
        :meth:`admit` then :func:`open_admitted`. After an authentic key-update frame
        (type 0x02) the receive key is ratcheted (§3.5), so later frames under the old
        key fail with DECRYPT_FAILED.

        Raises:
            FrameError: MESSAGE_TOO_LARGE, PROTOCOL_ERROR (unknown frame type),
                COUNTER_EXHAUSTED, COUNTER_MISMATCH (checked before decryption),
                DECRYPT_FAILED (bad tag, truncated frame, wrong key, direction or
                epoch, frame type changed in flight).
            MessageError: MALFORMED_MESSAGE, or UNEXPECTED_MESSAGE for a handshake type
                or a type the peer may not send.
            After any failure every later call raises the same class and code.
        """
        admitted = self.admit(frame)
        try:
            return open_admitted(admitted)
        except ProtocolError as exc:
            self.fail(exc, admitted)
            raise

    def admit(self, frame: bytes) -> AdmittedFrame:
        """The ordering half of :meth:`open`: check size, frame type, counter limit and
        ``counter == expected`` (§3.4, all before decryption), then take the frame's
        place: advance the receive counter and, for a key-update frame, ratchet the
        receive key (§3.5). The AEAD and decoding half is :func:`open_admitted`, a pure
        function of the returned value (which may run in another thread or process).

        Frames must be admitted in arrival order; they may be opened later, in any
        order. A frame that then fails to open must be reported with :meth:`fail`
        (the session is over: §3.4 "any failure is permanent").

        Raises:
            FrameError: as :meth:`open`, for the checks above. After any failure every
                later call raises the same class and code.
        """
        if self._failed is not None:
            raise type(self._failed)(self._failed.code, "transport failed earlier")
        try:
            return self._admit(frame)
        except ProtocolError as exc:
            self._failed = exc
            raise

    def fail(self, exc: ProtocolError, admitted: AdmittedFrame | None = None) -> None:
        """Record that ``admitted`` (a frame :meth:`admit` returned) failed to open with
        ``exc``: the transport is then failed (the first failure is kept) and every
        later call raises it. The frame is taken out of :meth:`statistics`, which count
        frames that opened."""
        if self._failed is None:
            self._failed = exc
            if admitted is not None:
                self._recv_counter -= 1
                self._bytes_received -= len(admitted.frame)
                self._updates_received -= admitted.frame[0] == FRAME_KEY_UPDATE

    def _admit(self, frame: bytes) -> AdmittedFrame:
        if len(frame) > self._recv_limits.max_message_bytes + HEADER_BYTES + TAG_BYTES:
            raise FrameError(CloseCode.MESSAGE_TOO_LARGE, f"frame of {len(frame)} bytes")
        if len(frame) < HEADER_BYTES + TAG_BYTES:
            raise FrameError(CloseCode.DECRYPT_FAILED, f"truncated frame ({len(frame)} bytes)")
        frame_type = frame[0]
        if frame_type not in FRAME_TYPES_KNOWN:
            raise FrameError(CloseCode.PROTOCOL_ERROR, f"unknown frame type {frame_type:#04x}")
        if self._recv_counter >= self._max_counter:
            raise FrameError(CloseCode.COUNTER_EXHAUSTED, "receive counter exhausted")
        (counter,) = _COUNTER.unpack_from(frame, 1)
        if counter != self._recv_counter:
            raise FrameError(
                CloseCode.COUNTER_MISMATCH, f"counter {counter}, expected {self._recv_counter}"
            )
        admitted = AdmittedFrame(
            frame=frame,
            key=self._recv_key,
            session_id=self.session_id,
            sender=self.peer,
            limits=self._recv_limits,
            allowed=self._peer_types,
        )
        self._recv_counter += 1
        self._bytes_received += len(frame)
        if frame_type == FRAME_KEY_UPDATE:
            self._recv_key = next_key(self._recv_key)
            self._updates_received += 1
        return admitted

    @property
    def failed(self) -> bool:
        """True once a received frame was rejected; the session must close."""
        return self._failed is not None

    def limit_receive(self, limits: Limits) -> None:
        """Tighten what is accepted from the peer from now on (docs/protocol.md §4.2).

        The coordinator calls this after the handshake with limits sized to the node's
        profile (B outputs of ``max_new_tokens`` ids), so an oversized frame is refused
        by its length before decryption or decoding. Sending is unaffected.

        Raises:
            LocalProtocolError: ``limits`` is looser than the current ones in any field.
        """
        current = self._recv_limits
        for name in current.__dataclass_fields__:
            if getattr(limits, name) > getattr(current, name):
                raise LocalProtocolError(f"limit_receive may only tighten limits ({name})")
        self._recv_limits = limits

    def statistics(self) -> dict[str, int]:
        """Counters: frames_sent, frames_received, bytes_sent, bytes_received (whole
        frames, bytes), frames_left_to_send (before the counter limit), and
        key_updates_sent, key_updates_received (key updates per direction, §3.5)."""
        return {
            "frames_sent": self._send_counter,
            "frames_received": self._recv_counter,
            "bytes_sent": self._bytes_sent,
            "bytes_received": self._bytes_received,
            "frames_left_to_send": self._max_counter - self._send_counter,
            "key_updates_sent": self._updates_sent,
            "key_updates_received": self._updates_received,
        }
