"""Profile-sized decoder limits for what a node receives (docs/protocol.md §4.2).

The node knows its profile's shape (batch size B, prompt length, output length) before
it dials, so it can refuse anything larger than the largest legitimate coordinator
message instead of decoding up to the 8 MiB defaults of ``codec.Limits`` (a 3 KB frame
could otherwise make it build ~66 MiB of objects). The coordinator's own side is
``coordinator.session.receive_limits``. Pure arithmetic: no I/O.
"""

from __future__ import annotations

from netcheck.protocol.codec import DEFAULT_LIMITS, Limits
from netcheck.protocol.messages import MAX_REASON_CHARS

PROMPT_BYTES_PER_TOKEN = 32
"""UTF-8 bytes allowed per prompt token: a prompt string may be at most
``max(MIN_PROMPT_BYTES, PROMPT_BYTES_PER_TOKEN * prompt_len)`` bytes (generated prompts
are at most 120 characters, semiprimes at most 19 digits)."""
MIN_PROMPT_BYTES = 1024
AEAD_TAG_BYTES = 16
ENVELOPE_BYTES = 512
"""Room for a message's map, field names, round id and scalars (a ``job`` without its
ciphertext is under 200 bytes)."""


def max_prompt_bytes(prompt_len: int) -> int:
    """Largest prompt string (UTF-8 bytes) a node accepts for ``prompt_len`` tokens."""
    return max(MIN_PROMPT_BYTES, PROMPT_BYTES_PER_TOKEN * prompt_len)


def job_payload_limits(batch_size: int, prompt_len: int) -> Limits:
    """Limits for decoding a job payload (§7.1): an array of ``batch_size`` str, each
    at most :func:`max_prompt_bytes` bytes (msgpack str header: 5 bytes at most)."""
    prompt = max_prompt_bytes(prompt_len)
    return Limits(
        max_message_bytes=5 + batch_size * (5 + prompt),
        max_array_len=batch_size,
        max_map_len=0,
        max_str_len=prompt,
        max_bin_len=0,
        max_depth=1,
        max_objects=batch_size + 1,
    )


def node_receive_limits(batch_size: int, prompt_len: int, cap: Limits = DEFAULT_LIMITS) -> Limits:
    """Decoder limits for the frames a node of this shape receives (§4.2).

    The largest coordinator message is a ``job``: the sealed payload (see
    :func:`job_payload_limits`, plus the 16-byte AEAD tag) and a small envelope;
    ``bye`` carries a reason of at most 1024 characters. Never looser than ``cap``.

    Returns:
        Limits; for B = 240, prompt_len = 128: ``max message bytes`` 984 773 (vs 8 MiB).
    """
    payload = job_payload_limits(batch_size, prompt_len).max_message_bytes + AEAD_TAG_BYTES
    largest = max(payload, 4 * MAX_REASON_CHARS) + ENVELOPE_BYTES
    return Limits(
        max_message_bytes=min(cap.max_message_bytes, largest),
        max_array_len=min(cap.max_array_len, 16),
        max_map_len=min(cap.max_map_len, 16),
        max_str_len=min(cap.max_str_len, 4 * MAX_REASON_CHARS),
        max_bin_len=min(cap.max_bin_len, payload),
        max_depth=min(cap.max_depth, 2),
        max_objects=min(cap.max_objects, 64),
    )
