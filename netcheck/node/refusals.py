"""Refusals a node can meet, and what its operator must read (docs/protocol.md §8.1).

Close codes and HTTP answers are not authenticated (anyone on the path can forge
them), so the node retries each refusal with a slower backoff; these helpers name the
cause and the fix. Used by the client (:mod:`netcheck.node.client`) and the preflight
check (:mod:`netcheck.node.preflight`).
"""

from __future__ import annotations

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from netcheck.errors import CloseCode, ProtocolError
from netcheck.keys import public_key_text
from netcheck.protocol.codec import decode_message
from netcheck.protocol.messages import Welcome
from netcheck.redact import redact_url

#: Close codes that say the coordinator refuses this node's configuration. They are not
#: authenticated (docs/protocol.md §8.1), so they are retried, with REFUSAL_BACKOFF_S.
REFUSAL_CODES = frozenset(
    {CloseCode.UNKNOWN_NODE_KEY, CloseCode.WRONG_COORDINATOR_KEY, CloseCode.PROFILE_MISMATCH}
)
#: Backoff after a refusal, seconds: (first wait, cap); doubled per refusal, jittered.
REFUSAL_BACKOFF_S = (30.0, 300.0)


#: Path of the coordinator's node endpoint (docs/protocol.md; coordinator.server.WS_PATH).
WS_PATH = "/v1/ws"

#: HTTP statuses of a failed websocket upgrade that a retry may fix (the server or a
#: proxy in front of it is overloaded, restarting or rate limiting).
RETRYABLE_UPGRADE_STATUSES = frozenset({408, 425, 429, 500, 502, 503, 504})


def not_an_endpoint(status: int) -> bool:
    """True if a websocket upgrade answered with HTTP ``status`` means the URL is not a
    netcheck node endpoint (a page, a redirect, 404, ...): retrying cannot fix it."""
    return status not in RETRYABLE_UPGRADE_STATUSES


def wrong_endpoint_message(url: str, status: int) -> str:
    """What to tell the node operator when ``url`` answered a websocket upgrade with an
    HTTP ``status`` instead of switching protocols. Credentials in ``url`` are not
    shown (:func:`netcheck.redact.redact_url`)."""
    from yarl import URL

    hint = ""
    try:
        parsed: URL | None = URL(url)
    except ValueError:
        parsed = None
    if parsed is not None and parsed.path.rstrip("/") != WS_PATH:
        fixed = redact_url(parsed.with_path(WS_PATH).with_query(None).with_fragment(None))
        hint = f'; the node endpoint\'s path is {WS_PATH}: set coordinator_url = "{fixed}"'
    return (
        f"coordinator_url {redact_url(url)} is not a netcheck node endpoint: the server answered "
        f"the websocket upgrade with HTTP {status}{hint}"
    )


def refusal_message(
    code: CloseCode,
    *,
    url: str,
    pinned_key: str,
    node_key: str,
    profile: str,
    fingerprint: str | None = None,
    presented_key: str | None = None,
) -> str:
    """What an operator of the node must read after a refusal (``REFUSAL_CODES``):
    the cause, the values involved and what to change. Starts with the code's name.

    Args:
        code: the close code, sent by the coordinator or raised by our handshake.
        url: the coordinator URL dialled (shown with credentials hidden).
        pinned_key: ``coordinator_key`` from the node config (key text).
        node_key: this node's public key text.
        profile: the profile claimed.
        fingerprint: engine fingerprint id claimed, if known.
        presented_key: the key the server proved in ``welcome``, if it sent one.
    """
    if code is CloseCode.WRONG_COORDINATOR_KEY:
        presented = (
            f"it presented {presented_key}"
            if presented_key
            else "it refused the pinned key without naming its own"
        )
        return (
            f"{code.name}: the server at {redact_url(url)} does not hold the coordinator key pinned as "
            f"coordinator_key in the node config ({pinned_key}); {presented}. Check "
            "coordinator_url, or set coordinator_key to the public key the coordinator's "
            "operator gives you (what `netcheck keygen` printed for its identity key)"
        )
    if code is CloseCode.UNKNOWN_NODE_KEY:
        return (
            f"{code.name}: the coordinator at {redact_url(url)} does not admit this node's key "
            f"{node_key}; ask the operator to add it to allowed_nodes"
        )
    if code is CloseCode.PROFILE_MISMATCH:
        fp = f" or this node's engine fingerprint {fingerprint[:12]}" if fingerprint else ""
        return (
            f"{code.name}: the coordinator at {redact_url(url)} does not accept the claimed profile "
            f"{profile!r}{fp}; set profile in the node config to one the coordinator lists "
            "in its profiles, running the engine that profile names"
        )
    return f"coordinator refused this node: {code.name}"


def superseded_message(url: str, node_key: str) -> str:
    """What a node operator must read when the coordinator closed the session with
    ``SUPERSEDED`` (4015): a newer session proved the same node key. This process's own
    reconnects never do it (its old connection is gone first), so the likely cause is a
    second process, here or on another host, that uses the same identity key: the two
    then take turns, each dropped when the other connects (docs/protocol.md §8)."""
    return (
        f"SUPERSEDED: the coordinator at {redact_url(url)} closed this session because another "
        f"connection proved this node's key {node_key}: probably another node process "
        "(on this host or another) uses the same identity_key, and the two will keep "
        "replacing each other. Run one node process per key: stop the other one, or give "
        "it its own key (`netcheck keygen`; `netcheck node setup --cards N` makes one per "
        "card) and add that key to the coordinator's allowed_nodes"
    )


def presented_coordinator_key(welcome: bytes) -> str | None:
    """The coordinator key text a ``welcome`` message names, or None if it does not
    decode (used only to explain a refusal)."""
    try:
        msg = decode_message(welcome)
    except ProtocolError:
        return None
    if not isinstance(msg, Welcome):
        return None
    try:
        return public_key_text(Ed25519PublicKey.from_public_bytes(msg.coordinator_key))
    except ValueError:
        return None
