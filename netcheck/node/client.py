"""The node: a websocket client that joins a coordinator and runs released batches.

One :class:`NodeClient` keeps one session at a time and reconnects with exponential
backoff and jitter. Close codes and HTTP answers are not authenticated (anyone on the
path can forge them, docs/protocol.md §8.1), so a refusal (unknown node key, wrong
pinned coordinator key, unknown profile, or a URL that is not a node endpoint) is
logged as an error naming what to fix and retried with a slower backoff
(:data:`REFUSAL_BACKOFF_S`); the node stops with :class:`NodeFatalError` only when the
coordinator refused it inside the authenticated session (a sealed ``bye`` whose reason
starts with ``profile_mismatch``, then close 4017).

Per round (docs/protocol.md §5): ``job`` → store it and ``ack`` (the prompts stay
encrypted); ``release`` → decrypt with the job key, run the batch on the worker, reply
``result`` with the commitment and a signed receipt. ``echo`` is answered at once from
the reader loop, so it measures the path to this process, not to a relay. ``probe``
(§5.9) is answered from a task that runs the known-answer computation on the worker's
device (:func:`netcheck.node.workers.run_probe`), so its round trip covers the path to
the device; the reader keeps reading meanwhile.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import cast

import aiohttp
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from netcheck import __version__
from netcheck.engines.fingerprint import fingerprint_id
from netcheck.errors import (
    CloseCode,
    EngineError,
    LocalProtocolError,
    NodeFatalError,
    ProtocolError,
)
from netcheck.keys import public_key_text
from netcheck.node.refusals import (
    REFUSAL_BACKOFF_S,
    REFUSAL_CODES,
    not_an_endpoint,
    presented_coordinator_key,
    refusal_message,
    wrong_endpoint_message,
)
from netcheck.node.verdicts import append as append_verdict
from netcheck.node.workers import Worker, run_probe
from netcheck.protocol.codec import DEFAULT_LIMITS, Limits
from netcheck.protocol.handshake import MAX_HANDSHAKE_BYTES, NodeHandshake
from netcheck.protocol.jobs import commitment, open_job, sign_receipt
from netcheck.protocol.limits import job_payload_limits, node_receive_limits
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
    ProfileClaim,
    Release,
    Result,
    VerdictNotice,
    Welcome,
)
from netcheck.protocol.session import Session, close_code_for, close_reason
from netcheck.protocol.states import Role
from netcheck.protocol.transport import HEADER_BYTES, TAG_BYTES, Transport
from netcheck.protocol.verdicts import verify_verdict
from netcheck.text import untrusted

log = logging.getLogger("netcheck.node")

#: Reconnect backoff otherwise, seconds: (first wait, cap).
RECONNECT_BACKOFF_S = (0.5, 30.0)
#: Prefix of the reason of a sealed ``bye`` by which the coordinator refuses the claimed
#: profile of an authenticated node: the only refusal that stops the node for good.
AUTHENTICATED_REFUSAL = "profile_mismatch"
HANDSHAKE_TIMEOUT_S = 10.0
HEARTBEAT_S = 15.0
#: The coordinator echoes every 20 s (coordinator.server.KEEPALIVE_S); a coordinator
#: silent for this long is treated as gone and the node reconnects.
IDLE_TIMEOUT_S = 75.0


class _Refused(Exception):
    """A refusal seen during the handshake (not authenticated): code and message."""

    def __init__(self, code: CloseCode, message: str) -> None:
        super().__init__(message)
        self.code, self.message = code, message


class _Session:
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
        self.bye_reason = ""  # the reason of the coordinator's sealed bye, if one came

    def seal(self, msg: Message) -> bytes:
        """Seal ``msg`` through the state table; the caller holds ``lock`` and writes
        the frame before releasing it. Raises LocalProtocolError if not allowed now."""
        return self.protocol.send(msg)

    async def send(self, msg: Message) -> None:
        async with self.lock:
            await self.ws.send_bytes(self.protocol.send(msg))


def ws_max_msg_size(max_message_bytes: int) -> int:
    """aiohttp ``max_msg_size`` for frames carrying messages of up to
    ``max_message_bytes`` (never below a handshake message): the frame overhead (25
    bytes, §3.1) plus one, because aiohttp refuses a message whose length *equals*
    ``max_msg_size`` (docs/protocol.md §3.3)."""
    return max(max_message_bytes, MAX_HANDSHAKE_BYTES) + HEADER_BYTES + TAG_BYTES + 1


def _shape(fingerprint: object) -> tuple[int, int] | None:
    """(batch_size, prompt_len) from a fingerprint claim, if it has both as ints."""
    if not isinstance(fingerprint, dict):
        return None
    b, n = fingerprint.get("batch_size"), fingerprint.get("prompt_len")
    if type(b) is int and type(n) is int and b > 0 and n > 0:
        return b, n
    return None


class NodeClient:
    """Joins the coordinator at ``url`` and serves rounds with ``worker``.

    Args:
        url: coordinator websocket URL, e.g. ``ws://127.0.0.1:8470/v1/ws``.
        identity: this node's Ed25519 identity key.
        coordinator_key: the pinned coordinator public key.
        profile: profile name this node claims.
        worker: runs batches; its ``fingerprint`` is claimed in the handshake.
        max_message_bytes: upper bound of the receive cap (bytes of a message).
        limits: decoder limits for coordinator frames; None = sized from the worker's
            fingerprint (``batch_size``, ``prompt_len``: ``protocol.limits``), or the
            codec defaults if the fingerprint lacks them (test fakes). Job payloads are
            decoded with ``job_payload_limits`` of the same shape.
        local_addr: local (host, port) to connect from (load tests spread many nodes
            over several 127.x.y.z source addresses); None = the system's choice.
        verdict_log: JSON-lines file that receives every signed verdict notice
            (:mod:`netcheck.node.verdicts`); None = log lines only.
    """

    def __init__(
        self,
        url: str,
        identity: Ed25519PrivateKey,
        coordinator_key: Ed25519PublicKey,
        profile: str,
        worker: Worker,
        *,
        max_message_bytes: int = 8 * 1024 * 1024,
        limits: Limits | None = None,
        label: str = "node",
        local_addr: tuple[str, int] | None = None,
        verdict_log: Path | None = None,
    ) -> None:
        self.url = url
        self.local_addr = local_addr
        self.identity = identity
        self.coordinator_key = coordinator_key
        self.profile = profile
        self.worker = worker
        self.max_message_bytes = max_message_bytes
        cap = Limits(max_message_bytes=min(max_message_bytes, DEFAULT_LIMITS.max_message_bytes))
        shape = _shape(worker.fingerprint)
        if limits is None:
            limits = node_receive_limits(*shape, cap) if shape else cap
        self.limits = limits
        self.payload_limits = job_payload_limits(*shape) if shape else DEFAULT_LIMITS
        self.label = label
        self.rounds_served = 0
        self.verdict_log = verdict_log
        self.verdicts: list[VerdictNotice] = []  # the last 100 notices received
        #: The text of the last refusal (retried, not authenticated), for the operator.
        self.last_refusal: str | None = None

    async def run_forever(self, stop: asyncio.Event | None = None) -> None:
        """Keep a session open, reconnecting with backoff (``RECONNECT_BACKOFF_S``: 0.5 s
        doubling to 30 s; after a refusal ``REFUSAL_BACKOFF_S``: 30 s doubling to 300 s),
        jittered by ×[0.5, 1.5).

        Raises:
            NodeFatalError: the coordinator refused us inside the authenticated session.
        """
        delay = RECONNECT_BACKOFF_S[0]
        stop = stop or asyncio.Event()
        while not stop.is_set():
            refused = False
            try:
                code = await self.run_session()
                delay = RECONNECT_BACKOFF_S[0] if code == CloseCode.NORMAL else delay
                refused = code in REFUSAL_CODES
            except aiohttp.WSServerHandshakeError as exc:
                if not_an_endpoint(exc.status):
                    self._refused(wrong_endpoint_message(self.url, exc.status))
                    refused = True
                else:
                    log.warning("%s: coordinator at %s: %s", self.label, self.url, exc)
            except (aiohttp.ClientError, ConnectionError, TimeoutError) as exc:
                log.warning("%s: cannot reach coordinator at %s: %s", self.label, self.url, exc)
            if stop.is_set():
                break
            low, cap = REFUSAL_BACKOFF_S if refused else RECONNECT_BACKOFF_S
            delay = min(max(delay, low), cap)
            wait = delay * (0.5 + random.random())
            log.info("%s: reconnecting in %.1f s", self.label, wait)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), wait)
            delay = min(delay * 2, cap)

    def _refused(self, message: str) -> None:
        """Log a refusal that is not authenticated (so retried) and keep its text."""
        self.last_refusal = message
        log.error("%s: %s (not authenticated: retrying with backoff)", self.label, message)

    async def run_session(self) -> CloseCode:
        """Connect, handshake and serve until the session ends; returns its close code.

        Raises:
            NodeFatalError: refused inside the authenticated session (``AUTHENTICATED_REFUSAL``).
        """
        connector = aiohttp.TCPConnector(local_addr=self.local_addr) if self.local_addr else None
        async with (
            aiohttp.ClientSession(connector=connector) as http,
            http.ws_connect(
                self.url,
                compress=0,
                heartbeat=HEARTBEAT_S,
                max_msg_size=ws_max_msg_size(self.limits.max_message_bytes),
                timeout=aiohttp.ClientWSTimeout(ws_receive=IDLE_TIMEOUT_S),
            ) as ws,
        ):
            try:
                session = await asyncio.wait_for(self._handshake(ws), HANDSHAKE_TIMEOUT_S)
            except _Refused as exc:
                self._refused(exc.message)
                return exc.code
            except ProtocolError as exc:
                log.error("%s: handshake failed: %s", self.label, exc)
                await ws.close(code=exc.code, message=close_reason(exc.code))
                if exc.code in REFUSAL_CODES:
                    self._refused(self.refusal(exc.code))
                return exc.code
            log.info(
                "%s: session open with coordinator (profile %s, session %s)",
                self.label,
                self.profile,
                session.transport.session_id.hex()[:12],
            )
            code = await self._serve(session)
            for task in session.tasks:
                task.cancel()
            return code

    async def _handshake(self, ws: aiohttp.ClientWebSocketResponse) -> _Session:
        claim = ProfileClaim(
            profile=self.profile,
            fingerprint=dict(self.worker.fingerprint),
            software=f"netcheck/{__version__}",
        )
        # The transcript binds the protocol's endpoint name, not the dialled path: a proxy
        # may serve the endpoint under another path and host (docs/protocol.md §2.1).
        hs = NodeHandshake(self.identity, self.coordinator_key, claim)
        await ws.send_bytes(hs.start())
        welcome = await self._receive_binary(ws)
        try:
            auth = hs.receive_welcome(welcome)
        except ProtocolError as exc:
            if exc.code is not CloseCode.WRONG_COORDINATOR_KEY:
                raise
            log.error("%s: handshake failed: %s", self.label, exc)
            await ws.close(code=exc.code, message=close_reason(exc.code))
            presented = presented_coordinator_key(welcome)
            raise _Refused(exc.code, self.refusal(exc.code, presented)) from exc
        await ws.send_bytes(auth)
        transport = hs.transport()
        transport.limit_receive(self.limits)  # sends keep the codec's limits
        return _Session(ws, transport)

    def refusal(self, code: CloseCode, presented_key: str | None = None) -> str:
        """:func:`refusal_message` for this node's settings."""
        return refusal_message(
            code,
            url=self.url,
            pinned_key=public_key_text(self.coordinator_key),
            node_key=public_key_text(self.identity),
            profile=self.profile,
            fingerprint=fingerprint_id(self.worker.fingerprint),
            presented_key=presented_key,
        )

    async def _receive_binary(self, ws: aiohttp.ClientWebSocketResponse) -> bytes:
        msg = await ws.receive()
        if msg.type == aiohttp.WSMsgType.BINARY:
            return bytes(msg.data)
        if msg.type in (aiohttp.WSMsgType.TEXT, aiohttp.WSMsgType.PING, aiohttp.WSMsgType.PONG):
            # Every protocol message is binary (§1.1): PROTOCOL_ERROR, as after the handshake.
            raise ProtocolError(CloseCode.PROTOCOL_ERROR, f"{msg.type.name} frame during handshake")
        code = ws.close_code
        cc = CloseCode.from_wire(code)
        if cc is not None:
            log.error("%s: coordinator closed the handshake: %s (%d)", self.label, cc.name, code)
            if cc in REFUSAL_CODES:
                raise _Refused(cc, self.refusal(cc))
        raise ConnectionError(f"coordinator closed the connection (code {code})")

    async def _serve(self, session: _Session) -> CloseCode:
        ws = session.ws
        closing = (aiohttp.WSMsgType.CLOSE, aiohttp.WSMsgType.CLOSING, aiohttp.WSMsgType.CLOSED)
        reason = ""
        try:
            while True:
                wsmsg = await ws.receive()
                if wsmsg.type in closing:
                    # The close frame's reason: the coordinator's detail for a refusal.
                    reason = untrusted(str(wsmsg.extra or "")) if wsmsg.type is closing[0] else ""
                    break
                if wsmsg.type != aiohttp.WSMsgType.BINARY:
                    session.protocol.refuse(CloseCode.PROTOCOL_ERROR, f"{wsmsg.type.name} frame")
                msg = session.protocol.receive_frame(wsmsg.data)  # the state table's check
                await self._handle(session, msg)
        except ProtocolError as exc:
            log.error("%s: closing session: %s", self.label, exc)
            closing_code = close_code_for(exc)
            await ws.close(code=closing_code, message=close_reason(closing_code))
            return closing_code
        except TimeoutError:
            log.warning(
                "%s: coordinator silent for %.0f s, reconnecting", self.label, IDLE_TIMEOUT_S
            )
            await ws.close(code=CloseCode.IDLE_TIMEOUT, message=b"idle timeout")
            return CloseCode.IDLE_TIMEOUT
        code = ws.close_code or CloseCode.NORMAL
        cc = CloseCode.from_wire(code)
        name = cc.name if cc is not None else str(code)
        log.info("%s: session closed by coordinator: %s (%d) %s", self.label, name, code, reason)
        if session.bye_reason.startswith(AUTHENTICATED_REFUSAL):
            # Sealed under the session keys: only the pinned coordinator can say it.
            raise NodeFatalError(
                f"{self.refusal(CloseCode.PROFILE_MISMATCH)} (the coordinator said: "
                f"{session.bye_reason})"
            )
        if cc is not None and cc in REFUSAL_CODES:
            message = self.refusal(cc)
            if reason and reason != name.lower():
                message += f" (the coordinator said: {reason})"
            self._refused(message)
        return cc if cc is not None else CloseCode.NORMAL

    async def _handle(self, session: _Session, msg: Message) -> None:
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

    async def _on_job(self, session: _Session, msg: Message) -> None:
        job = cast(Job, msg)  # a second job for a round in flight: refused by the table
        session.jobs[job.round_id] = job
        await session.send(Ack(round_id=job.round_id))

    async def _on_release(self, session: _Session, msg: Message) -> None:
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

    async def _on_echo(self, session: _Session, msg: Message) -> None:
        await session.send(EchoReply(nonce=cast(Echo, msg).nonce))

    async def _on_probe(self, session: _Session, msg: Message) -> None:
        task = asyncio.get_running_loop().create_task(self._answer_probe(session, cast(Probe, msg)))
        session.tasks.add(task)
        task.add_done_callback(session.tasks.discard)

    async def _on_verdict(self, session: _Session, msg: Message) -> None:
        self._note_verdict(session, cast(VerdictNotice, msg))

    async def _on_bye(self, session: _Session, msg: Message) -> None:
        session.bye_reason = untrusted(cast(Bye, msg).reason)
        await session.ws.close()

    def _note_verdict(self, session: _Session, notice: VerdictNotice) -> None:
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

    async def _answer_probe(self, session: _Session, probe: Probe) -> None:
        """Run the compute probe on the worker's device and reply; a failed probe gets
        no reply (the coordinator times it out and records a missing sample)."""
        try:
            answer = await run_probe(self.worker, probe.challenge)
            await session.send(ProbeReply(nonce=probe.nonce, answer=answer))
        except EngineError as exc:
            log.error("%s: probe failed: %s", self.label, exc)
        except (ConnectionError, LocalProtocolError):  # session gone or exhausted
            log.debug("%s: session gone before a probe reply was sent", self.label)

    async def _run_job(self, session: _Session, job: Job, prompts: list[str]) -> None:
        try:
            outputs = await self.worker.run(prompts)
        except EngineError as exc:
            log.error("%s: round %s failed: %s", self.label, job.round_id, exc)
            await session.send(Error(round_id=job.round_id, reason="engine error"))
            return
        packed = tuple(tuple(int(t) for t in o) for o in outputs)
        digest = commitment(packed)
        signature = sign_receipt(self.identity, session.transport.session_id, job.round_id, digest)
        try:
            await session.send(
                Result(
                    round_id=job.round_id, outputs=packed, commitment=digest, signature=signature
                )
            )
        except ConnectionError:
            log.warning(
                "%s: session gone before the result of %s was sent", self.label, job.round_id
            )
            return
        self.rounds_served += 1
        log.info("%s: round %s answered (%d outputs)", self.label, job.round_id, len(packed))


#: What the coordinator may send after the handshake, by message type: the
#: :class:`NodeClient` method that handles it. A new message type is one entry here,
#: in :data:`IGNORED_FROM_COORDINATOR` or in :data:`REFUSED_FROM_COORDINATOR`
#: (tests/node/test_client_dispatch.py checks that every type is in exactly one).
FROM_COORDINATOR: dict[
    type[Message], Callable[[NodeClient, _Session, Message], Awaitable[None]]
] = {
    Job: NodeClient._on_job,
    Release: NodeClient._on_release,
    Echo: NodeClient._on_echo,
    Probe: NodeClient._on_probe,
    VerdictNotice: NodeClient._on_verdict,
    Bye: NodeClient._on_bye,
}
#: Accepted and dropped (replies to nothing the node asked; kept as before).
IGNORED_FROM_COORDINATOR: frozenset[type[Message]] = frozenset({EchoReply, ProbeReply})
#: Never valid from the coordinator after the handshake: closed with UNEXPECTED_MESSAGE.
REFUSED_FROM_COORDINATOR: frozenset[type[Message]] = frozenset(
    {Hello, Welcome, Auth, Ack, Result, Error}
)
