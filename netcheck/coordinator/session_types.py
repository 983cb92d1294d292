"""What a node session hands the round runner, and what it accepts from a node.

Values of :class:`~netcheck.coordinator.session.NodeSession`'s waiters (:class:`Arrival`,
:class:`ProbeSample`), the exceptions they fail with, and the receive limits sized to a
profile (docs/protocol.md §4.2). Re-exported by :mod:`netcheck.coordinator.session`.
"""

from __future__ import annotations

from dataclasses import dataclass

from aiohttp import WebSocketError, WSCloseCode

from netcheck.config import Profile
from netcheck.protocol.codec import DEFAULT_LIMITS, Limits
from netcheck.protocol.messages import Result


def receive_limits(profile: Profile, cap: Limits = DEFAULT_LIMITS) -> Limits:
    """Decoder limits for what a node of ``profile`` may send (docs/protocol.md §4.2).

    The largest legitimate node message is a result: B outputs of ``max_new_tokens``
    token ids (msgpack uint32: at most 5 bytes each), a 32-byte commitment, a 64-byte
    signature and a round id. Anything bigger is refused by its length before
    decryption, and the object budget stops decoding work early (adversarial review #4).
    """
    b, n = profile.batch_size, profile.max_new_tokens
    return Limits(
        max_message_bytes=min(cap.max_message_bytes, result_bytes_bound(profile)),
        max_array_len=min(cap.max_array_len, max(b, n, 16)),
        max_map_len=min(cap.max_map_len, 16),
        max_str_len=min(cap.max_str_len, 4096),
        max_bin_len=min(cap.max_bin_len, 1024),
        max_depth=min(cap.max_depth, 4),
        max_objects=min(cap.max_objects, b * n + 2 * b + 256),
    )


def result_bytes_bound(profile: Profile) -> int:
    """Bytes of the largest result a node of ``profile`` may send (:func:`receive_limits`):
    B rows of ``max_new_tokens`` msgpack uint32 (5 bytes each, 5 per row header), plus
    4 KiB for the commitment, signature, round id and keys."""
    b, n = profile.batch_size, profile.max_new_tokens
    return 5 * b * n + 5 * b + 4096


def message_cap_problem(max_message_bytes: int, profile: Profile) -> str | None:
    """Why the coordinator's ``max_message_bytes`` cannot serve ``profile`` (below
    :func:`result_bytes_bound`: a larger honest result would be refused and its node
    judged ``missing``), or None."""
    need = result_bytes_bound(profile)
    if max_message_bytes >= need:
        return None
    return (f"max_message_bytes: {max_message_bytes} is below the largest result a node of "
            f"profile {profile.name} may send ({need} bytes: {profile.batch_size} x "
            f"{profile.max_new_tokens} token ids); a larger honest result would be refused "
            f"and its node judged missing. Set it to at least {need}")  # fmt: skip


def is_too_big(exc: BaseException | None) -> bool:
    """True if aiohttp rejected a websocket message for exceeding ``max_msg_size``."""
    return isinstance(exc, WebSocketError) and exc.code == WSCloseCode.MESSAGE_TOO_BIG


@dataclass(frozen=True)
class ProbeSample:
    """One compute probe (docs/protocol.md §5.9).

    Attributes:
        rtt_s: seconds from just before the ``probe`` write to the arrival of the reply.
        correct: the answer equals the coordinator's CPU recomputation.
    """

    rtt_s: float
    correct: bool


class NodeDisconnected(Exception):
    """The node's session ended while a round was waiting for it."""


class NodeReportedError(Exception):
    """The node answered a job with ``error`` instead of ``ack`` (its reason)."""


@dataclass(frozen=True)
class Arrival:
    """A result (or a node-reported error) with its arrival time.

    Attributes:
        arrived_ns: when the bytes completing the frame arrived (``time.monotonic_ns()``
            clock): the kernel's receive stamp where available, else when they were read
            off the socket (before decryption; :mod:`netcheck.coordinator.arrivals`).
        result: the decoded result, or None when the node reported an error.
        error: the node's error reason, if any.
        processed_ns: ``time.monotonic_ns()`` when the frame was opened and checked and
            handed to the round (``processed_ns - arrived_ns`` is the coordinator's own
            delay for this frame, shown in the node's timing budget).
        commitment_ok, signature_ok: the result's checks, done in the worker pool (None
            for an error or when not checked).
        stamp_source: where ``arrived_ns`` came from: ``"kernel"`` (kernel receive
            stamp), ``"read"`` (socket read callback) or ``"reader"`` (reader task).
    """

    arrived_ns: int
    result: Result | None
    error: str | None = None
    processed_ns: int | None = None
    commitment_ok: bool | None = None
    signature_ok: bool | None = None
    stamp_source: str = "reader"
