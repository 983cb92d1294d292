"""Fixtures for the sans-I/O protocol tests: identities and a handshake factory."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from protocol_support import Pair, make_pair


@pytest.fixture
def node_id() -> Ed25519PrivateKey:
    """The node's identity key."""
    return Ed25519PrivateKey.generate()


@pytest.fixture
def coord_id() -> Ed25519PrivateKey:
    """The coordinator's identity key."""
    return Ed25519PrivateKey.generate()


@pytest.fixture
def connect(node_id: Ed25519PrivateKey, coord_id: Ed25519PrivateKey) -> Callable[..., Pair]:
    """Factory: each call runs a fresh handshake between the same two identities."""
    seeds = itertools.count()

    def run(**kwargs: Any) -> Pair:
        return make_pair(node_id, coord_id, next(seeds), **kwargs)

    return run
