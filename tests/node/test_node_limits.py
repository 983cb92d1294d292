"""The node decodes coordinator frames under limits sized to its profile (#12 item 8)."""

from __future__ import annotations

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from netcheck.errors import CloseCode, FrameError, MessageError
from netcheck.lab.adversary import MadeUpWorker
from netcheck.node.client import NodeClient, ws_max_msg_size
from netcheck.protocol.handshake import CoordinatorHandshake, NodeHandshake
from netcheck.protocol.jobs import open_job, seal_job
from netcheck.protocol.messages import Job, ProfileClaim
from netcheck.protocol.transport import Transport

FP: dict[str, str | int] = {"engine": "fake", "batch_size": 16, "prompt_len": 64}
KEY, NONCE = bytes(range(32)), bytes(12)


def client() -> NodeClient:
    coord = Ed25519PrivateKey.generate()
    return NodeClient(
        "ws://127.0.0.1:1/v1/ws",
        Ed25519PrivateKey.generate(),
        coord.public_key(),
        "p",
        MadeUpWorker(FP, 4),
    )


def transports(node: NodeClient) -> tuple[Transport, Transport]:
    """(coordinator side, node side) after a real handshake, with the node's limits."""
    coord_id = Ed25519PrivateKey.generate()
    claim = ProfileClaim(profile="p", fingerprint=FP, software="test")
    hs = NodeHandshake(node.identity, coord_id.public_key(), claim)
    ch = CoordinatorHandshake(coord_id, lambda key: True)
    accepted = ch.receive_auth(hs.receive_welcome(ch.receive_hello(hs.start())))
    node_side = hs.transport()
    node_side.limit_receive(node.limits)
    return accepted.transport, node_side


def job(ciphertext: bytes) -> Job:
    return Job("r1", NONCE, ciphertext, 16, 4, 5.0)


def test_node_limits_are_profile_sized_not_8_mib() -> None:
    """A node of B = 16, prompt_len = 64 accepts at most ~34 KB messages, not 8 MiB."""
    node = client()
    assert node.limits.max_message_bytes < 64 * 1024
    assert node.limits.max_objects <= 64
    assert ws_max_msg_size(node.limits.max_message_bytes) < 64 * 1024


def test_node_refuses_job_larger_than_its_profile() -> None:
    """A 200 KB job frame is refused before decryption; the largest legal job passes."""
    node = client()
    coord, node_side = transports(node)
    biggest = seal_job(["x" * 2048] * 16, KEY, "r1", NONCE)
    assert isinstance(node_side.open(coord.seal(job(biggest))), Job)
    with pytest.raises(FrameError) as err:
        node_side.open(coord.seal(job(bytes(200_000))))
    assert err.value.code is CloseCode.MESSAGE_TOO_LARGE


def test_job_payload_decoded_with_profile_limits() -> None:
    """A payload of more prompts than B, or a prompt over the bound, is MALFORMED."""
    node = client()
    for prompts in (["a"] * 17, ["a" * 5000]):
        sealed = seal_job(prompts, KEY, "r1", NONCE)
        with pytest.raises(MessageError) as err:
            open_job(sealed, KEY, "r1", NONCE, node.payload_limits)
        assert err.value.code is CloseCode.MALFORMED_MESSAGE
    assert open_job(seal_job(["a"] * 16, KEY, "r1", NONCE), KEY, "r1", NONCE, node.payload_limits)
