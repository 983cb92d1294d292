"""What a node does in an open session (docs/protocol.md §5): one handler per message
type the coordinator may send (:data:`FROM_COORDINATOR`), the batch and probe work they
start, and the verdict notices they log. :class:`~netcheck.node.client.NodeClient` (the
connection's lifecycle: connect, handshake, reconnect, refusals) inherits them.

Per round: ``job`` → store it and ``ack`` (the prompts stay encrypted); ``release`` →
decrypt with the job key, run the batch on the worker, reply ``result`` with the
commitment and a signed receipt. ``echo`` is answered at once from the reader loop, so
it measures the path to this process, not to a relay. ``probe`` (§5.9) is answered from
a task that runs the known-answer computation on the worker's device
(:func:`netcheck.node.workers.run_probe`), so its round trip covers the path to the
device; the reader keeps reading meanwhile. Whether a message may come now at all
(a release before its job, a second job for a round) is decided before these handlers,
by the session's state table (:class:`netcheck.protocol.session.Session`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import cast

import aiohttp
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from netcheck.errors import CloseCode, EngineError, LocalProtocolError, ProtocolError
from netcheck.node.verdicts import append as append_verdict
from netcheck.node.workers import Worker, run_probe
from netcheck.protocol.codec import Limits
from netcheck.protocol.jobs import commitment, open_job, sign_receipt
from netcheck.protocol.messages import (
    Ack,
    Auth,
    Bye,
    Echo,
    EchoReply,
    Error,
    Hello,
    Job,
    Message,
    Probe,
    ProbeReply,
    Release,
    Result,
    VerdictNotice,
    Welcome,
)
from netcheck.protocol.session import Session
from netcheck.protocol.states import Role
from netcheck.protocol.transport import Transport
from netcheck.protocol.verdicts import verify_verdict
from netcheck.text import untrusted

log = logging.getLogger("netcheck.node")

#: Jobs a node holds at once (acknowledged or released, result not yet sent). An honest
#: coordinator runs one round at a time (its round lock; a late ack or result closes the
#: session), so a node holds one job; 4 leaves room. A job beyond this is answered with
#: ``error`` ("node busy") and not stored, so a coordinator cannot make the node hold or
#: queue unbounded payloads.
MAX_JOBS_IN_FLIGHT = 4
#: Probes a node computes at once (§5.9). An honest coordinator waits for each reply (at
#: most one in flight per node); a probe beyond this gets no reply (the coordinator
#: times it out), so a probe flood cannot pile up tasks in the node.
MAX_PROBES_IN_FLIGHT = 16


class OpenSession:
    """One live session: the websocket, the sans-I/O session (``protocol``: every
    message sent or received walks the state table there), the send lock and the held
    job payloads."""

    def __init__(self, ws: aiohttp.ClientWebSocketResponse, transport: Transport) -> None:
        self.ws = ws
        self.transport = transport
        self.protocol = Session(Role.NODE, transport)
        self.lock = asyncio.Lock()
        self.jobs: dict[str, Job] = {}
        self.tasks: set[asyncio.Task[None]] = set()
        self.probes: set[asyncio.Task[None]] = set()  # probe tasks running (also in tasks)
        self.probes_dropped = 0  # probes beyond MAX_PROBES_IN_FLIGHT, left unanswered
        self.bye_reason = ""  # the reason of the coordinator's sealed bye, if one came

    def seal(self, msg: Message) -> bytes:
        """Seal ``msg`` through the state table; the caller holds ``lock`` and writes
        the frame before releasing it. Raises LocalProtocolError if not allowed now."""
        return self.protocol.send(msg)

    async def send(self, msg: Message) -> None:
        async with self.lock:
            await self.ws.send_bytes(self.protocol.send(msg))


class RoundServing:
    """The message handlers of a node (a mixin of :class:`~netcheck.node.client.NodeClient`,
    which sets the attributes below)."""

    label: str
    identity: Ed25519PrivateKey
    coordinator_key: Ed25519PublicKey
    worker: Worker
    payload_limits: Limits
    rounds_served: int
    verdict_log: Path | None
    verdicts: list[VerdictNotice]

    async def _handle(self, session: OpenSession, msg: Message) -> None:
        """Route one message from the coordinator to its handler in
        :data:`FROM_COORDINATOR`; :data:`IGNORED_FROM_COORDINATOR` types are dropped.

        Raises:
            ProtocolError: UNEXPECTED_MESSAGE for a type the coordinator may not send
                (:data:`REFUSED_FROM_COORDINATOR`) or a job/release out of order.
        """
        handler = FROM_COORDINATOR.get(type(msg))
        if handler is not None:
            await handler(self, session, msg)
        elif type(msg) not in IGNORED_FROM_COORDINATOR:
            raise ProtocolError(
                CloseCode.UNEXPECTED_MESSAGE, f"{type(msg).__name__} from coordinator"
            )

    async def _on_job(self, session: OpenSession, msg: Message) -> None:
        job = cast(Job, msg)  # a second job for a round in flight: refused by the table
        held = len(session.protocol.jobs()) - 1  # jobs in flight besides this one
        if held >= MAX_JOBS_IN_FLIGHT:
            reason = f"node busy: {held} jobs in flight, at most {MAX_JOBS_IN_FLIGHT}"
            log.warning("%s: round %s refused: %s", self.label, job.round_id, reason)
            await session.send(Error(round_id=job.round_id, reason=reason))
            return
        session.jobs[job.round_id] = job
        await session.send(Ack(round_id=job.round_id))

    async def _on_release(self, session: OpenSession, msg: Message) -> None:
        release = cast(Release, msg)
        job = session.jobs.pop(release.round_id, None)
        if job is None:
            raise ProtocolError(
                CloseCode.UNEXPECTED_MESSAGE, f"release for unknown {release.round_id}"
            )
        prompts = open_job(
            job.ciphertext, release.job_key, job.round_id, job.nonce, self.payload_limits
        )
        task = asyncio.get_running_loop().create_task(self._run_job(session, job, prompts))
        session.tasks.add(task)
        task.add_done_callback(session.tasks.discard)

    async def _on_echo(self, session: OpenSession, msg: Message) -> None:
        await session.send(EchoReply(nonce=cast(Echo, msg).nonce))

    async def _on_probe(self, session: OpenSession, msg: Message) -> None:
        if len(session.probes) >= MAX_PROBES_IN_FLIGHT:
            session.probes_dropped += 1
            if session.probes_dropped == 1:  # once per session: a flood is one event
                log.warning(
                    "%s: coordinator sent more than %d probes at once; the excess gets no "
                    "reply", self.label, MAX_PROBES_IN_FLIGHT,
                )  # fmt: skip
            return
        task = asyncio.get_running_loop().create_task(self._answer_probe(session, cast(Probe, msg)))
        for held in (session.tasks, session.probes):
            held.add(task)
            task.add_done_callback(held.discard)

    async def _on_verdict(self, session: OpenSession, msg: Message) -> None:
        self._note_verdict(session, cast(VerdictNotice, msg))

    async def _on_bye(self, session: OpenSession, msg: Message) -> None:
        session.bye_reason = untrusted(cast(Bye, msg).reason)
        await session.ws.close()

    def _note_verdict(self, session: OpenSession, notice: VerdictNotice) -> None:
        """Check the coordinator's signature, log the verdict, append it to the log.

        Raises:
            ProtocolError: BAD_SIGNATURE if the notice is not signed by the pinned key.
        """
        sid = session.transport.session_id
        node_key = self.identity.public_key().public_bytes_raw()
        if not verify_verdict(self.coordinator_key, sid, node_key, notice):
            session.protocol.refuse(CloseCode.BAD_SIGNATURE, "verdict notice: bad signature")
        self.verdicts.append(notice)
        del self.verdicts[:-100]
        secs = "-" if notice.elapsed_s is None else f"{notice.elapsed_s:.3f} s"
        limit = "-" if notice.deadline_s is None else f"{notice.deadline_s:.3f} s"
        level = logging.INFO if notice.verdict in ("pass", "unchecked") else logging.WARNING
        log.log(
            level, "%s: round %s verdict %s (elapsed %s, deadline %s): %s", self.label,
            notice.round_id, notice.verdict, secs, limit, untrusted(notice.reason),
        )  # fmt: skip
        if self.verdict_log is not None:
            try:
                append_verdict(self.verdict_log, notice, sid, node_key)
            except OSError as exc:
                log.warning("%s: verdict log %s not written: %s", self.label, self.verdict_log, exc)

    async def _answer_probe(self, session: OpenSession, probe: Probe) -> None:
        """Run the compute probe on the worker's device and reply; a failed probe gets
        no reply (the coordinator times it out and records a missing sample)."""
        try:
            answer = await run_probe(self.worker, probe.challenge)
            await session.send(ProbeReply(nonce=probe.nonce, answer=answer))
        except EngineError as exc:
            log.error("%s: probe failed: %s", self.label, exc)
        except (ConnectionError, LocalProtocolError):  # session gone or exhausted
            log.debug("%s: session gone before a probe reply was sent", self.label)

    async def _run_job(self, session: OpenSession, job: Job, prompts: list[str]) -> None:
        """Run a released batch and send its ``result`` (or ``error``). A session that
        ended meanwhile (closed, failed, or ``bye`` received: the send is then a
        ConnectionError or LocalProtocolError) only logs that the answer was not sent."""
        try:
            outputs = await self.worker.run(prompts)
            packed = tuple(tuple(int(t) for t in o) for o in outputs)
            digest = commitment(packed)  # LocalProtocolError: an id outside [0, 2**31)
        except (EngineError, LocalProtocolError) as exc:
            log.error("%s: round %s failed: %s", self.label, job.round_id, exc)
            try:
                await session.send(Error(round_id=job.round_id, reason="engine error"))
            except (ConnectionError, LocalProtocolError):
                log.warning("%s: session gone before the error of %s was sent", self.label,
                            job.round_id)  # fmt: skip
            return
        signature = sign_receipt(self.identity, session.transport.session_id, job.round_id, digest)
        try:
            await session.send(
                Result(
                    round_id=job.round_id, outputs=packed, commitment=digest, signature=signature
                )
            )
        except (ConnectionError, LocalProtocolError):  # closed, failed, or after bye
            log.warning(
                "%s: session gone before the result of %s was sent", self.label, job.round_id
            )
            return
        self.rounds_served += 1
        log.info("%s: round %s answered (%d outputs)", self.label, job.round_id, len(packed))


#: What the coordinator may send after the handshake, by message type: the
#: :class:`RoundServing` method that handles it. A new message type is one entry here,
#: in :data:`IGNORED_FROM_COORDINATOR` or in :data:`REFUSED_FROM_COORDINATOR`
#: (tests/node/test_client_dispatch.py checks that every type is in exactly one).
FROM_COORDINATOR: dict[
    type[Message], Callable[[RoundServing, OpenSession, Message], Awaitable[None]]
] = {
    Job: RoundServing._on_job,
    Release: RoundServing._on_release,
    Echo: RoundServing._on_echo,
    Probe: RoundServing._on_probe,
    VerdictNotice: RoundServing._on_verdict,
    Bye: RoundServing._on_bye,
}
#: Accepted and dropped (replies to nothing the node asked; kept as before).
IGNORED_FROM_COORDINATOR: frozenset[type[Message]] = frozenset({EchoReply, ProbeReply})
#: Never valid from the coordinator after the handshake: closed with UNEXPECTED_MESSAGE.
REFUSED_FROM_COORDINATOR: frozenset[type[Message]] = frozenset(
    {Hello, Welcome, Auth, Ack, Result, Error}
)
