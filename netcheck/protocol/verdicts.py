"""Signed verdict notices (docs/protocol.md §5.11), sans-I/O.

After each round the coordinator tells every node that had a job its verdict, signed
with the coordinator's identity key, so a node operator sees why a round failed and can
keep the notice as proof. The signed bytes are::

    b"netcheck/1 verdict\\x00" || pack_value([session_id, node_key, round_id, verdict,
                                            reason, elapsed_s, deadline_s])

with :func:`netcheck.protocol.codec.pack_value` (canonical msgpack; ``None`` as nil).
``node_key`` is the node's raw 32-byte Ed25519 key, so a notice names whom it judges.

What a notice may say is limited to what cannot help cheat later rounds: the verdict,
a fixed public reason per verdict (:func:`public_reason`), elapsed time and deadline
(the deadline is already in the job). Never the canary count, positions or which
outputs differed.
"""

from __future__ import annotations

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from netcheck.protocol.codec import pack_value
from netcheck.protocol.messages import VerdictNotice

DOMAIN = b"netcheck/1 verdict\x00"

#: The public reason sent for each verdict. Keys are verdict names; ``late`` and
#: ``profile-mismatch`` add their numbers / fields (see :func:`public_reason`).
PUBLIC_REASONS = {
    "pass": "all checked outputs matched, on time",
    "late": "the result arrived after the deadline",
    "wrong-answer": "outputs differ from the answers of trusted hardware for this profile",
    "malformed": "the result was malformed (shape, length or token ids)",
    "missing": "no result (or no acknowledgement) before the timeout, or the session "
    "closed after the job was delivered, without a result",
    "disconnected": "the session closed before the job was delivered",
    "profile-mismatch": "the engine fingerprint differs from the profile's references",
    "unchecked": "not checked: the coordinator has no unused reference answer for this "
    "fingerprint (the operator's side, not a failure)",
}


def public_reason(verdict: str, detail: str = "") -> str:
    """The reason a node is told: the fixed text for ``verdict`` plus ``detail`` only for
    ``profile-mismatch`` (which fingerprint fields differ; the node's own config)."""
    text = PUBLIC_REASONS.get(verdict, verdict)
    if verdict == "profile-mismatch" and detail:
        return f"{text}: {detail}"[:1024]
    return text


def verdict_bytes(
    session_id: bytes,
    node_key: bytes,
    round_id: str,
    verdict: str,
    reason: str,
    elapsed_s: float | None,
    deadline_s: float | None,
) -> bytes:
    """The bytes a verdict notice's signature covers (module docstring)."""
    return DOMAIN + pack_value(
        [session_id, node_key, round_id, verdict, reason, elapsed_s, deadline_s]
    )


def sign_verdict(
    identity: Ed25519PrivateKey,
    session_id: bytes,
    node_key: bytes,
    round_id: str,
    verdict: str,
    reason: str,
    elapsed_s: float | None,
    deadline_s: float | None,
) -> VerdictNotice:
    """A signed :class:`VerdictNotice` (raises MessageError for bad field values)."""
    elapsed = None if elapsed_s is None else float(elapsed_s)
    deadline = None if deadline_s is None else float(deadline_s)
    sig = identity.sign(
        verdict_bytes(session_id, node_key, round_id, verdict, reason, elapsed, deadline)
    )
    return VerdictNotice(round_id, verdict, reason, elapsed, deadline, sig)


def verify_verdict(
    coordinator_key: Ed25519PublicKey, session_id: bytes, node_key: bytes, notice: VerdictNotice
) -> bool:
    """True if ``notice`` carries the coordinator's signature for this node and session."""
    data = verdict_bytes(
        session_id, node_key, notice.round_id, notice.verdict, notice.reason,
        notice.elapsed_s, notice.deadline_s,
    )  # fmt: skip
    try:
        coordinator_key.verify(notice.signature, data)
    except InvalidSignature:
        return False
    return True
