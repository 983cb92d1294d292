"""Helpers shared by the protocol tests (a plain module: conftest is not importable)."""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from netcheck.protocol import (
    Accepted,
    CoordinatorHandshake,
    NodeHandshake,
    ProfileClaim,
    Transport,
)

CLAIM = ProfileClaim(
    profile="tiny-cpu",
    fingerprint={"engine": "torch", "model_id": "synth:tiny", "batch_size": 8},
    software="netcheck 0.1.0",
)


@dataclass
class Pair:
    """A completed handshake: both state machines, both transports, the messages sent."""

    node: NodeHandshake
    coordinator: CoordinatorHandshake
    node_transport: Transport
    accepted: Accepted
    hello: bytes
    welcome: bytes
    auth: bytes

    @property
    def coordinator_transport(self) -> Transport:
        return self.accepted.transport


def seeded(seed: int) -> Callable[[int], bytes]:
    """A deterministic ``random_bytes`` for handshakes."""
    return random.Random(seed).randbytes


def make_pair(
    node_id: Ed25519PrivateKey, coord_id: Ed25519PrivateKey, seed: int = 0, **kwargs: Any
) -> Pair:
    """Run a full in-memory handshake; keyword args go to both machines."""
    node = NodeHandshake(
        node_id, coord_id.public_key(), CLAIM, random_bytes=seeded(2 * seed), **kwargs
    )
    coordinator = CoordinatorHandshake(
        coord_id, lambda key: True, random_bytes=seeded(2 * seed + 1), **kwargs
    )
    hello = node.start()
    welcome = coordinator.receive_hello(hello)
    auth = node.receive_welcome(welcome)
    accepted = coordinator.receive_auth(auth)
    return Pair(node, coordinator, node.transport(), accepted, hello, welcome, auth)
