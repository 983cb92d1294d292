"""Encrypted transport frames after the handshake (docs/protocol.md §3).

Frame = ``type (1 byte, 0x01) || counter (8 bytes, big-endian) ||
ChaCha20-Poly1305(key_dir).encrypt(nonce = 4 zero bytes || counter,
plaintext = encode_message(msg), aad = session_id || direction || counter)``.
Counters start at 0 per direction and must arrive exactly in order; any failure makes
the transport permanently unusable (the session must close with the error's code).
"""

from __future__ import annotations

import struct

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import ChaCha20Poly1305

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
HEADER_BYTES = 9  # type + counter
TAG_BYTES = 16
DEFAULT_MAX_COUNTER = 2**32  # frames per direction; reconnect before (§3.3)
DIRECTION = {Role.NODE: 0, Role.COORDINATOR: 1}  # byte naming the sender (§3.2)
_COUNTER = struct.Struct(">Q")


def _aad(session_id: bytes, sender: Role, counter_bytes: bytes) -> bytes:
    return session_id + bytes([DIRECTION[sender]]) + counter_bytes


class Transport:
    """One side's encrypted channel (sans-I/O): ``seal`` messages to bytes, ``open`` bytes
    to messages. Built by the handshake (``NodeHandshake.transport()``, ``Accepted``).

    Args:
        role: our role; decides which key seals and which opens.
        send_key, recv_key: 32-byte ChaCha20-Poly1305 keys (§2.6).
        session_id: 16 bytes, bound into every frame's AAD.
        limits: decoder limits; frames longer than ``limits.max_message_bytes`` plus the
            25 bytes of header and tag are rejected before decryption.
        max_counter: frames allowed per direction (default 2**32; tests use small ones).
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
    ) -> None:
        if len(send_key) != 32 or len(recv_key) != 32 or len(session_id) != 16:
            raise LocalProtocolError("transport keys must be 32 bytes, session id 16")
        if not 0 < max_counter <= 2**64:
            raise LocalProtocolError("max_counter must be in (0, 2**64]")
        self.role = role
        self.peer = Role.COORDINATOR if role is Role.NODE else Role.NODE
        self.session_id = session_id
        self._seal_aead = ChaCha20Poly1305(send_key)
        self._open_aead = ChaCha20Poly1305(recv_key)
        self._limits = limits
        self._max_counter = max_counter
        self._send_counter = 0
        self._recv_counter = 0
        self._bytes_sent = 0
        self._bytes_received = 0
        self._failed: ProtocolError | None = None

    def seal(self, msg: Message) -> bytes:
        """Encrypt ``msg`` into one frame (one websocket binary message).

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
        counter = _COUNTER.pack(self._send_counter)
        nonce = bytes(4) + counter
        sealed = self._seal_aead.encrypt(
            nonce, plaintext, _aad(self.session_id, self.role, counter)
        )
        self._send_counter += 1
        frame = bytes([FRAME_DATA]) + counter + sealed
        self._bytes_sent += len(frame)
        return frame

    def open(self, frame: bytes) -> Message:
        """Authenticate, decrypt and decode one received frame (docs/protocol.md §3.4).

        Raises:
            FrameError: MESSAGE_TOO_LARGE, PROTOCOL_ERROR (unknown frame type),
                COUNTER_EXHAUSTED, COUNTER_MISMATCH (checked before decryption),
                DECRYPT_FAILED (bad tag, truncated frame, wrong key or direction).
            MessageError: MALFORMED_MESSAGE, or UNEXPECTED_MESSAGE for a handshake type
                or a type the peer may not send.
            After any failure every later call raises the same class and code.
        """
        if self._failed is not None:
            raise type(self._failed)(self._failed.code, "transport failed earlier")
        try:
            return self._open(frame)
        except ProtocolError as exc:
            self._failed = exc
            raise

    def _open(self, frame: bytes) -> Message:
        if len(frame) > self._limits.max_message_bytes + HEADER_BYTES + TAG_BYTES:
            raise FrameError(CloseCode.MESSAGE_TOO_LARGE, f"frame of {len(frame)} bytes")
        if len(frame) < HEADER_BYTES + TAG_BYTES:
            raise FrameError(CloseCode.DECRYPT_FAILED, f"truncated frame ({len(frame)} bytes)")
        if frame[0] != FRAME_DATA:
            raise FrameError(CloseCode.PROTOCOL_ERROR, f"unknown frame type {frame[0]:#04x}")
        if self._recv_counter >= self._max_counter:
            raise FrameError(CloseCode.COUNTER_EXHAUSTED, "receive counter exhausted")
        counter_bytes = frame[1:HEADER_BYTES]
        (counter,) = _COUNTER.unpack(counter_bytes)
        if counter != self._recv_counter:
            raise FrameError(
                CloseCode.COUNTER_MISMATCH, f"counter {counter}, expected {self._recv_counter}"
            )
        try:
            plaintext = self._open_aead.decrypt(
                bytes(4) + counter_bytes,
                frame[HEADER_BYTES:],
                _aad(self.session_id, self.peer, counter_bytes),
            )
        except InvalidTag:
            raise FrameError(CloseCode.DECRYPT_FAILED, "authentication tag mismatch") from None
        self._recv_counter += 1
        self._bytes_received += len(frame)
        msg = decode_message(plaintext, limits=self._limits)
        if msg.TYPE not in FRAME_TYPES or not sends(self.peer, msg.TYPE):
            raise MessageError(
                CloseCode.UNEXPECTED_MESSAGE, f"{self.peer} may not send {msg.TYPE!r} in a frame"
            )
        return msg

    @property
    def failed(self) -> bool:
        """True once a received frame was rejected; the session must close."""
        return self._failed is not None

    def statistics(self) -> dict[str, int]:
        """Counters: frames_sent, frames_received, bytes_sent, bytes_received (whole
        frames, bytes), and frames_left_to_send (before the counter limit)."""
        return {
            "frames_sent": self._send_counter,
            "frames_received": self._recv_counter,
            "bytes_sent": self._bytes_sent,
            "bytes_received": self._bytes_received,
            "frames_left_to_send": self._max_counter - self._send_counter,
        }
