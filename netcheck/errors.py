"""The one exception tree of netcheck, and the websocket close codes.

Hierarchy::

    NetcheckError
    ├── ConfigError          bad or missing configuration; message names the field
    ├── KeyFileError         identity key file missing, unreadable or malformed
    │   └── KeyFileMissing   no file at the path (``netcheck keygen`` makes one)
    ├── ProtocolError        the *peer* broke the wire protocol (carries a CloseCode)
    │   ├── HandshakeError   handshake failed (bad signature, unknown key, version ...)
    │   ├── FrameError       transport frame rejected (auth tag, counter, size)
    │   └── MessageError     frame decrypted but message malformed / unexpected
    ├── LocalProtocolError   *we* tried to break the protocol (a bug on our side)
    ├── EngineError          inference engine failed to load or run
    ├── StorageError         database failure (locked, disk full, integrity)
    │   ├── StorageUnavailable  locked or unreachable: the same write may succeed later
    │   └── DatabaseURLError    the configured URL cannot be used (a config error)
    ├── RoundError           a round could not be planned or run
    └── NodeFatalError       the coordinator refused this node for good (no retry helps)

Errors caused by the peer ("remote") are split from errors we caused ("local"), as in
h11. Internal details never reach the peer: only the close code and a short fixed
reason string are sent (docs/protocol.md, "Close codes").
"""

from __future__ import annotations

from enum import IntEnum


class CloseCode(IntEnum):
    """Websocket close codes used by netcheck (docs/protocol.md, "Close codes").

    1000 is the normal websocket close; netcheck's own codes live in 4000-4999.
    """

    NORMAL = 1000
    TRY_AGAIN_LATER = 1013  # RFC 6455 registry: server overloaded / transient failure
    PROTOCOL_ERROR = 4000
    BAD_HANDSHAKE = 4001
    UNKNOWN_NODE_KEY = 4002
    WRONG_COORDINATOR_KEY = 4003
    BAD_SIGNATURE = 4004
    VERSION_MISMATCH = 4005
    DECRYPT_FAILED = 4006
    COUNTER_MISMATCH = 4007
    MESSAGE_TOO_LARGE = 4008
    MALFORMED_MESSAGE = 4009
    UNEXPECTED_MESSAGE = 4010
    HANDSHAKE_TIMEOUT = 4011
    IDLE_TIMEOUT = 4012
    COUNTER_EXHAUSTED = 4013
    RATE_LIMITED = 4014
    SUPERSEDED = 4015
    SHUTDOWN = 4016
    PROFILE_MISMATCH = 4017

    @classmethod
    def from_wire(cls, code: int | None) -> CloseCode | None:
        """The close code a peer sent as a :class:`CloseCode`; None when there was none or
        it is not one netcheck defines (the one place an incoming code is mapped)."""
        return cls(code) if code is not None and code in cls._value2member_map_ else None


class NetcheckError(Exception):
    """Base class of every error netcheck raises on purpose."""


class ConfigError(NetcheckError):
    """Configuration is invalid. The message names the file and the bad field."""


class KeyFileError(NetcheckError):
    """An identity key file is missing, unreadable, too permissive or malformed."""


class KeyFileMissing(KeyFileError):
    """No identity key file at ``path``: the command line adds the ``netcheck keygen``
    line that creates it (:func:`netcheck.admin_client.keygen_fix`).

    Args:
        path: the key file's path, as the config resolved it.
    """

    def __init__(self, path: object) -> None:
        super().__init__(f"{path}: key file not found")
        self.path = path


class ProtocolError(NetcheckError):
    """The peer violated the protocol; the session must close with ``code``.

    Args:
        code: close code to send to the peer.
        reason: log-only detail; never sent to the peer.
    """

    def __init__(self, code: CloseCode, reason: str) -> None:
        super().__init__(f"{code.name} ({int(code)}): {reason}")
        self.code = code
        self.reason = reason

    def __reduce__(self) -> tuple[type[ProtocolError], tuple[CloseCode, str]]:
        # picklable with its own arguments (frames are opened in worker processes)
        return (type(self), (self.code, self.reason))


class HandshakeError(ProtocolError):
    """The handshake failed (signature, identity, version, size, order)."""


class FrameError(ProtocolError):
    """A transport frame was rejected (authentication tag, counter, size, type)."""


class MessageError(ProtocolError):
    """A decrypted message was malformed or not allowed in the current state."""


class LocalProtocolError(NetcheckError):
    """We attempted something the protocol forbids (a bug on our side)."""


class EngineError(NetcheckError):
    """The inference engine failed to load or to run a batch."""


class StorageError(NetcheckError):
    """The database failed (locked, disk full, constraint violated)."""


class StorageUnavailable(StorageError):
    """The database is locked by another writer or cannot be reached (connection
    refused or lost, server restarting): the same write may succeed later."""


class DatabaseURLError(StorageError):
    """The database URL cannot be used at all: not a URL (a port that is no number), an
    unsupported backend, or a driver that is not installed. A config error (exit 3),
    unlike a database that is down or broken (exit 10, netcheck.exitcodes)."""


class RoundError(NetcheckError):
    """A validation round could not be planned or completed."""


class NodeFatalError(NetcheckError):
    """The coordinator refused this node for a reason a retry cannot fix."""
