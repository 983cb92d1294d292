"""netcheck/1, the wire protocol, sans-I/O (spec: docs/protocol.md).

Message dataclasses (``messages``), the msgpack codec with limits (``codec``), the
handshake state machines (``handshake``), the encrypted frame transport
(``transport``), job payloads, commitments and receipts (``jobs``) and the session
state table (``states``). Nothing here does I/O or imports asyncio, aiohttp, torch or
vllm; callers feed bytes in and send the bytes they get back.
"""

from netcheck.protocol.codec import (
    DEFAULT_LIMITS,
    Limits,
    decode_message,
    encode_message,
    pack_value,
    unpack_value,
)
from netcheck.protocol.handshake import (
    MAX_HANDSHAKE_BYTES,
    SUITE,
    VERSION,
    Accepted,
    CoordinatorHandshake,
    NodeHandshake,
)
from netcheck.protocol.jobs import (
    commitment,
    open_job,
    receipt_bytes,
    seal_job,
    sign_receipt,
    verify_receipt,
)
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
    Welcome,
)
from netcheck.protocol.states import Role, State, next_state
from netcheck.protocol.transport import Transport

__all__ = [
    "DEFAULT_LIMITS",
    "MAX_HANDSHAKE_BYTES",
    "SUITE",
    "VERSION",
    "Accepted",
    "Ack",
    "Auth",
    "Bye",
    "CoordinatorHandshake",
    "Echo",
    "EchoReply",
    "Error",
    "Hello",
    "Job",
    "Limits",
    "Message",
    "NodeHandshake",
    "Probe",
    "ProbeReply",
    "ProfileClaim",
    "Release",
    "Result",
    "Role",
    "State",
    "Transport",
    "Welcome",
    "commitment",
    "decode_message",
    "encode_message",
    "next_state",
    "open_job",
    "pack_value",
    "receipt_bytes",
    "seal_job",
    "sign_receipt",
    "unpack_value",
    "verify_receipt",
]
