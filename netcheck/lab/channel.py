"""An in-memory frame channel between the two protocol objects (test support, as in
``trio.testing``; docs/session-core.md).

:class:`FrameChannel` runs the real handshake in memory and joins a node
:class:`~netcheck.protocol.session.Session` to a coordinator one: what one side sends is
queued, byte for byte, for the other, and delivered when the test says so. No sockets,
no event loop, no sleeps: a test decides the exact interleaving (a result before its
release, a frame replayed, a bye mid-round) and reads the close code the receiving side
raises.
"""

from __future__ import annotations

import collections
import random
import time
from collections.abc import Callable

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from netcheck.protocol.handshake import CoordinatorHandshake, NodeHandshake
from netcheck.protocol.messages import Message, ProfileClaim
from netcheck.protocol.session import Session
from netcheck.protocol.states import Role

CLAIM = ProfileClaim(
    profile="channel",
    fingerprint={"engine": "fake", "batch_size": 4, "prompt_len": 16},
    software="netcheck/channel",
)


class FrameChannel:
    """A node session and a coordinator session joined by two in-memory queues.

    Args:
        node, coordinator: the two sessions (see :meth:`open`).

    Attributes:
        sessions: the session of each role.
    """

    def __init__(self, node: Session, coordinator: Session) -> None:
        if node.session_id != coordinator.session_id:
            raise ValueError("the two sessions belong to different handshakes")
        self.sessions = {Role.NODE: node, Role.COORDINATOR: coordinator}
        self._queues: dict[Role, collections.deque[bytes]] = {
            Role.NODE: collections.deque(),
            Role.COORDINATOR: collections.deque(),
        }

    @classmethod
    def open(
        cls,
        *,
        node_identity: Ed25519PrivateKey | None = None,
        coordinator_identity: Ed25519PrivateKey | None = None,
        claim: ProfileClaim = CLAIM,
        clock: Callable[[], float] = time.monotonic,
        seed: int = 0,
        **transport_options: object,
    ) -> FrameChannel:
        """Run a real handshake in memory and return the joined sessions.

        Args:
            node_identity, coordinator_identity: Ed25519 keys (fresh ones by default).
            claim: the node's profile claim.
            clock: the clock of both sessions and transports (seconds).
            seed: seeds the handshakes' random bytes (deterministic session keys).
            transport_options: ``limits``, ``max_counter``, ``rekey_frames``,
                ``rekey_after_s`` for both transports.
        """
        node_id = node_identity or Ed25519PrivateKey.generate()
        coord_id = coordinator_identity or Ed25519PrivateKey.generate()
        rng = random.Random(seed)
        opts: dict = {"clock": clock, **transport_options}  # type: ignore[type-arg]
        node_hs = NodeHandshake(
            node_id, coord_id.public_key(), claim, random_bytes=rng.randbytes, **opts
        )
        coord_hs = CoordinatorHandshake(
            coord_id, lambda key: True, random_bytes=rng.randbytes, **opts
        )
        auth = node_hs.receive_welcome(coord_hs.receive_hello(node_hs.start()))
        accepted = coord_hs.receive_auth(auth)
        return cls(
            Session(Role.NODE, node_hs.transport(), clock=clock),
            Session(Role.COORDINATOR, accepted.transport, clock=clock),
        )

    @property
    def node(self) -> Session:
        """The node's session."""
        return self.sessions[Role.NODE]

    @property
    def coordinator(self) -> Session:
        """The coordinator's session."""
        return self.sessions[Role.COORDINATOR]

    def send(self, sender: Role, msg: Message) -> bytes:
        """``sender``'s session sends ``msg``; the frame is queued for the peer and
        returned.

        Raises:
            LocalProtocolError: as :meth:`Session.send` (nothing is queued).
        """
        frame = self.sessions[sender].send(msg)
        self._queues[_peer(sender)].append(frame)
        return frame

    def pending(self, receiver: Role) -> int:
        """Frames queued for ``receiver``."""
        return len(self._queues[receiver])

    def take(self, receiver: Role) -> bytes:
        """Remove and return the next frame queued for ``receiver`` without delivering
        it (to replay, reorder or tamper with it).

        Raises:
            IndexError: nothing queued.
        """
        return self._queues[receiver].popleft()

    def put(self, receiver: Role, frame: bytes) -> None:
        """Queue raw ``frame`` for ``receiver`` (after the frames already queued)."""
        self._queues[receiver].append(frame)

    def deliver(self, receiver: Role) -> list[Message]:
        """Deliver every frame queued for ``receiver``, in order; returns the messages.

        Raises:
            ProtocolError: from the first frame the receiver refuses (its close code);
                the frames after it stay queued.
        """
        out = []
        queue = self._queues[receiver]
        while queue:
            out.append(self.sessions[receiver].receive_frame(queue.popleft()))
        return out


def _peer(role: Role) -> Role:
    return Role.COORDINATOR if role is Role.NODE else Role.NODE
