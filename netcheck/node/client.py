"""The node: a websocket client that joins a coordinator and runs released batches.

One :class:`NodeClient` keeps one session at a time and reconnects with exponential
backoff and jitter. Close codes and HTTP answers are not authenticated (anyone on the
path can forge them, docs/protocol.md §8.1), so a refusal (unknown node key, wrong
pinned coordinator key, unknown profile, or a URL that is not a node endpoint) is
logged as an error naming what to fix and retried with a slower backoff
(:data:`REFUSAL_BACKOFF_S`); the node stops with :class:`NodeFatalError` only when the
coordinator refused it inside the authenticated session (a sealed ``bye`` whose reason
starts with ``profile_mismatch``, then close 4017).

After the handshake every frame goes through the session's sans-I/O core
(:class:`netcheck.protocol.session.Session`: the state table decides whether a message
may come now) and then to its handler (:mod:`netcheck.node.serving`, per round:
``job`` → ``ack``, ``release`` → run → ``result``; ``echo``, ``probe``, ``verdict``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
from pathlib import Path

import aiohttp
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from netcheck import __version__
from netcheck.engines.fingerprint import fingerprint_id
from netcheck.errors import (
    CloseCode,
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
    superseded_message,
    wrong_endpoint_message,
)
from netcheck.node.serving import (
    FROM_COORDINATOR,
    IGNORED_FROM_COORDINATOR,
    REFUSED_FROM_COORDINATOR,
    OpenSession,
    RoundServing,
)
from netcheck.node.workers import Worker
from netcheck.protocol.codec import DEFAULT_LIMITS, Limits
from netcheck.protocol.handshake import MAX_HANDSHAKE_BYTES, NodeHandshake
from netcheck.protocol.limits import job_payload_limits, node_receive_limits
from netcheck.protocol.messages import (
    ProfileClaim,
    VerdictNotice,
)
from netcheck.protocol.session import close_code_for, close_reason
from netcheck.protocol.transport import HEADER_BYTES, TAG_BYTES
from netcheck.redact import redact_url, redact_urls
from netcheck.text import untrusted

log = logging.getLogger("netcheck.node")

__all__ = [
    "FROM_COORDINATOR",
    "IGNORED_FROM_COORDINATOR",
    "REFUSED_FROM_COORDINATOR",
    "NodeClient",
    "NodeFatalError",
    "OpenSession",
    "not_an_endpoint",
    "refusal_message",
    "ws_max_msg_size",
]

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


class NodeClient(RoundServing):
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
                    log.warning(
                        "%s: coordinator at %s: %s",
                        self.label, redact_url(self.url), redact_urls(str(exc)),
                    )  # fmt: skip
            except (aiohttp.ClientError, ConnectionError, TimeoutError) as exc:
                log.warning(
                    "%s: cannot reach coordinator at %s: %s",
                    self.label, redact_url(self.url), redact_urls(str(exc)),
                )  # fmt: skip
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
            TimeoutError: no websocket upgrade answer, or no completed handshake, within
                ``HANDSHAKE_TIMEOUT_S`` each (the message says which).
        """
        connector = aiohttp.TCPConnector(local_addr=self.local_addr) if self.local_addr else None
        async with aiohttp.ClientSession(connector=connector) as http:
            dial = http.ws_connect(
                self.url,
                compress=0,
                heartbeat=HEARTBEAT_S,
                max_msg_size=ws_max_msg_size(self.limits.max_message_bytes),
                timeout=aiohttp.ClientWSTimeout(ws_receive=IDLE_TIMEOUT_S),
            )
            try:  # aiohttp's own bound is 300 s: a silent server would hold the node
                ws = await asyncio.wait_for(dial, HANDSHAKE_TIMEOUT_S)
            except TimeoutError:
                raise TimeoutError(
                    f"no websocket upgrade answer within {HANDSHAKE_TIMEOUT_S:g} s"
                ) from None
            async with ws:
                return await self._run_open(ws)

    async def _run_open(self, ws: aiohttp.ClientWebSocketResponse) -> CloseCode:
        """:meth:`run_session` after the websocket upgrade."""
        try:
            session = await asyncio.wait_for(self._handshake(ws), HANDSHAKE_TIMEOUT_S)
        except TimeoutError:
            raise TimeoutError(
                f"handshake not completed within {HANDSHAKE_TIMEOUT_S:g} s"
            ) from None
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
        try:
            return await self._serve(session)
        finally:  # however the session ended: its jobs and probes stop with it
            for task in session.tasks:
                task.cancel()

    async def _handshake(self, ws: aiohttp.ClientWebSocketResponse) -> OpenSession:
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
        return OpenSession(ws, transport)

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

    async def _serve(self, session: OpenSession) -> CloseCode:
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
        except ConnectionError as exc:  # a reply written after the connection dropped
            # Like a close without a close frame (1006, below): not "cannot reach".
            log.warning("%s: connection to the coordinator lost: %s", self.label, exc)
            return CloseCode.NORMAL
        code = ws.close_code or CloseCode.NORMAL
        cc = CloseCode.from_wire(code)
        name = cc.name if cc is not None else str(code)
        log.info("%s: session closed by coordinator: %s (%d) %s", self.label, name, code, reason)
        if cc is CloseCode.SUPERSEDED:
            log.warning(
                "%s: %s", self.label, superseded_message(self.url, public_key_text(self.identity))
            )
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
