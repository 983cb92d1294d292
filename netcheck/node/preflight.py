"""A node's quick check of its coordinator settings before the engine loads.

Loading an engine takes seconds on a CPU and minutes for an 8B model on a GPU; a wrong
``coordinator_url`` or ``coordinator_key`` must not be found only after that.
:func:`probe_coordinator` dials the coordinator and runs the first two handshake
messages (docs/protocol.md §2: ``hello`` -> ``welcome``). The coordinator signs
``welcome`` only after it admitted the node's key, so a verified ``welcome`` proves the
URL is a node endpoint, the server holds the pinned coordinator key and this node's key
is admitted. The probe then closes without sending ``auth``: it never opens a session,
so it never replaces a running node's session. ``netcheck doctor`` and ``netcheck node
run`` both use it.

Outcomes:

- returns the coordinator key text: all three proven;
- raises :class:`CoordinatorRefused` for what looks like a config error (a URL that is
  no node endpoint, the wrong coordinator key, a key the coordinator does not admit),
  with the message the running node would print. Such an answer is not authenticated
  (docs/protocol.md §8.1: anyone on the path can forge it), so ``node run`` logs it as an
  error *before* the engine loads, then loads and keeps retrying as the client does;
  ``doctor`` reports it and fails;
- raises :class:`CoordinatorUnreachable` for what may pass (connection refused, time
  out, a proxy's 503).
"""

from __future__ import annotations

import aiohttp

from netcheck import __version__
from netcheck.config import NodeConfig
from netcheck.errors import CloseCode, HandshakeError, NetcheckError
from netcheck.keys import load_private_key, parse_public_key, public_key_text
from netcheck.node.refusals import (
    REFUSAL_CODES,
    not_an_endpoint,
    presented_coordinator_key,
    refusal_message,
    wrong_endpoint_message,
)
from netcheck.protocol.handshake import NodeHandshake
from netcheck.protocol.messages import ProfileClaim
from netcheck.redact import redact_url, redact_urls

HANDSHAKE_TIMEOUT_S = 10.0


class CoordinatorRefused(NetcheckError):
    """The coordinator (or something answering in its place) refused this node's
    configuration; the message names what to fix. Not authenticated."""


class CoordinatorUnreachable(NetcheckError):
    """The coordinator could not be asked now (refused, timed out, overloaded); a
    retry may succeed."""


async def probe_coordinator(cfg: NodeConfig, timeout_s: float = HANDSHAKE_TIMEOUT_S) -> str:
    """Dial ``cfg.coordinator_url`` and run ``hello``/``welcome``; returns the coordinator
    key text. Opens no session.

    Raises:
        CoordinatorRefused: the URL is no node endpoint, the server does not hold the
            pinned ``coordinator_key``, or the coordinator does not admit this node's key.
        CoordinatorUnreachable: no answer now (connection refused, timeout, 5xx/429).
        KeyFileError: the identity key cannot be loaded.
    """
    identity = load_private_key(cfg.identity_key)
    pinned = parse_public_key(cfg.coordinator_key)
    claim = ProfileClaim(
        profile=cfg.profile, fingerprint={"doctor": "1"}, software=f"netcheck/{__version__}"
    )
    hs = NodeHandshake(identity, pinned, claim)  # binds the endpoint name, not the URL path

    def refusal(code: CloseCode, presented_key: str | None = None) -> str:
        return refusal_message(
            code,
            url=cfg.coordinator_url,
            pinned_key=cfg.coordinator_key,
            node_key=public_key_text(identity),
            profile=cfg.profile,
            presented_key=presented_key,
        )

    welcome = b""
    try:
        async with (
            aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=timeout_s)) as http,
            http.ws_connect(cfg.coordinator_url, compress=0) as ws,
        ):
            await ws.send_bytes(hs.start())
            msg = await ws.receive(timeout=timeout_s)
            if msg.type is aiohttp.WSMsgType.TEXT:  # not closed: some other websocket service
                raise CoordinatorUnreachable(
                    f"{redact_url(cfg.coordinator_url)} answered hello with a text frame, not a binary "
                    "welcome: is it a netcheck coordinator's node endpoint?"
                )
            if msg.type != aiohttp.WSMsgType.BINARY:
                code = ws.close_code
                cc = CloseCode.from_wire(code)
                name = cc.name if cc is not None else str(code)
                if cc is not None and cc in REFUSAL_CODES:
                    raise CoordinatorRefused(refusal(cc))
                raise CoordinatorUnreachable(f"coordinator closed the handshake: {name}")
            welcome = bytes(msg.data)
            hs.receive_welcome(welcome)  # verifies the pinned key's signature
            await ws.close(code=CloseCode.NORMAL, message=b"doctor")
    except HandshakeError as exc:
        if exc.code in REFUSAL_CODES:
            presented = presented_coordinator_key(welcome)
            raise CoordinatorRefused(refusal(exc.code, presented)) from None
        raise CoordinatorUnreachable(f"handshake failed: {exc.code.name}") from None
    except aiohttp.WSServerHandshakeError as exc:
        if not_an_endpoint(exc.status):
            raise CoordinatorRefused(
                wrong_endpoint_message(cfg.coordinator_url, exc.status)
            ) from None
        raise CoordinatorUnreachable(
            f"cannot reach {redact_url(cfg.coordinator_url)}: {redact_urls(str(exc))}"
        ) from None
    except (aiohttp.ClientError, OSError, TimeoutError) as exc:
        reason = str(exc) or type(exc).__name__
        raise CoordinatorUnreachable(
            f"cannot reach {redact_url(cfg.coordinator_url)}: {redact_urls(reason)}"
        ) from None
    return public_key_text(pinned)
