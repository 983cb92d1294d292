"""Send each loaded node its signed verdict after a round (docs/protocol.md §5.11)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from netcheck.analysis.verdicts import NodeOutcome
from netcheck.errors import NetcheckError
from netcheck.protocol.verdicts import public_reason, sign_verdict

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    from netcheck.coordinator.session import NodeSession

log = logging.getLogger("netcheck.round")

#: A notice that cannot be written within this time is dropped (the round is over).
SEND_TIMEOUT_S = 2.0


async def send_verdicts(
    identity: Ed25519PrivateKey,
    round_id: str,
    outcomes: Sequence[NodeOutcome],
    sessions: Mapping[str, NodeSession],
    deadlines: Mapping[str, float | None],
    details: Mapping[str, str],
) -> int:
    """Send every node in ``sessions`` that has an outcome its signed verdict notice.

    Args:
        identity: the coordinator's identity key (signs the notices).
        outcomes: the round's verdicts.
        sessions: node key -> its session (closed ones are skipped).
        deadlines: node key -> the deadline its job carried, seconds.
        details: node key -> public detail of a ``profile-mismatch`` (differing fields).

    Returns:
        The number of notices written. Failures (session gone) are logged, never raised.
    """

    async def one(o: NodeOutcome) -> bool:
        s = sessions.get(o.node_key)
        if s is None or s.closed.is_set():
            return False
        verdict = str(o.verdict)
        try:
            notice = sign_verdict(
                identity, s.session_id, s.node_key_raw, round_id, verdict,
                public_reason(verdict, details.get(o.node_key, "")),
                o.elapsed_s, deadlines.get(o.node_key),
            )  # fmt: skip
            await asyncio.wait_for(s.send(notice), SEND_TIMEOUT_S)
        except (NetcheckError, ConnectionError, TimeoutError) as exc:
            log.debug("round %s: verdict notice to %s not sent: %s", round_id, s.label, exc)
            return False
        return True

    sent = await asyncio.gather(*(one(o) for o in outcomes))
    return sum(sent)


_PENDING: set[asyncio.Task[int]] = set()


def send_in_background(
    identity: Ed25519PrivateKey,
    round_id: str,
    outcomes: Sequence[NodeOutcome],
    sessions: Mapping[str, NodeSession],
    deadlines: Mapping[str, float | None],
    details: Mapping[str, str],
) -> asyncio.Task[int]:
    """:func:`send_verdicts` as a task, so a node that does not read cannot hold up the
    end of the round (its notice waits at most :data:`SEND_TIMEOUT_S`)."""
    task = asyncio.get_running_loop().create_task(
        send_verdicts(identity, round_id, outcomes, sessions, deadlines, details)
    )
    _PENDING.add(task)
    task.add_done_callback(_PENDING.discard)
    return task
