"""Per-direction key update (docs/protocol.md §3.5): triggers, ratchet, sync, limits."""

from __future__ import annotations

import hashlib
import hmac
import math
import random

import pytest

from netcheck.errors import CloseCode, FrameError, LocalProtocolError
from netcheck.protocol import Ack, Echo, EchoReply, Role, Transport
from netcheck.protocol.transport import (
    FRAME_DATA,
    FRAME_KEY_UPDATE,
    KEY_UPDATE_INFO,
    next_key,
)

K_NC, K_CN, SID = bytes(range(32)), bytes(range(32, 64)), bytes(range(16))


class FakeClock:
    """A clock the test moves by hand (seconds)."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def make(**kwargs) -> tuple[Transport, Transport]:
    """A node and a coordinator transport sharing fixed keys and options."""
    node = Transport(Role.NODE, K_NC, K_CN, SID, **kwargs)
    coordinator = Transport(Role.COORDINATOR, K_CN, K_NC, SID, **kwargs)
    return node, coordinator


def test_next_key_is_rfc5869_expand():
    """next_key is HKDF-Expand-SHA256(key, "netcheck/1 key update", 32): T(1) of RFC 5869."""
    expected = hmac.new(K_NC, KEY_UPDATE_INFO + b"\x01", hashlib.sha256).digest()
    assert next_key(K_NC) == expected
    assert next_key(next_key(K_NC)) != next_key(K_NC)


def test_update_at_frame_threshold():
    """With rekey_frames=4, every 4th frame is a key update and the key changes after it."""
    node, coord = make(rekey_frames=4)
    frames = [node.seal(Ack(f"r{i}")) for i in range(9)]
    types = [f[0] for f in frames]
    u, d = FRAME_KEY_UPDATE, FRAME_DATA
    assert types == [d, d, d, u, d, d, d, u, d]
    assert [coord.open(f) for f in frames] == [Ack(f"r{i}") for i in range(9)]
    assert node.statistics()["key_updates_sent"] == 2
    assert coord.statistics()["key_updates_received"] == 2


def test_update_after_time():
    """Once rekey_after_s of the injected clock pass, the next frame is a key update."""
    clock = FakeClock()
    node, coord = make(clock=clock, rekey_after_s=60.0)
    assert node.seal(Ack("a"))[0] == FRAME_DATA
    clock.now = 59.9
    assert node.seal(Ack("b"))[0] == FRAME_DATA
    clock.now = 60.0
    assert node.seal(Ack("c"))[0] == FRAME_KEY_UPDATE
    assert node.seal(Ack("d"))[0] == FRAME_DATA  # the timer restarted with the new key
    clock.now = 120.0
    assert node.seal(Ack("e"))[0] == FRAME_KEY_UPDATE
    assert node.statistics()["key_updates_sent"] == 2


def test_time_trigger_off_with_inf():
    """rekey_after_s=math.inf never triggers on time."""
    clock = FakeClock()
    node, _ = make(clock=clock, rekey_after_s=math.inf)
    clock.now = 1e12
    assert node.seal(Ack("a"))[0] == FRAME_DATA


def test_requested_update():
    """request_key_update() makes exactly the next frame a key update."""
    node, coord = make()
    node.request_key_update()
    frames = [node.seal(Ack("a")), node.seal(Ack("b"))]
    assert [f[0] for f in frames] == [FRAME_KEY_UPDATE, FRAME_DATA]
    assert [coord.open(f) for f in frames] == [Ack("a"), Ack("b")]


def test_directions_update_independently():
    """A node key update changes only node->coordinator; the other direction keeps its key."""
    node, coord = make(rekey_frames=2)
    for i in range(4):
        coord.open(node.seal(EchoReply(i)))
    assert node.open(coord.seal(Echo(0))) == Echo(0)
    assert coord.statistics()["key_updates_sent"] == 0
    assert node.statistics()["key_updates_received"] == 0


def test_counters_continue_across_updates():
    """Counters are not reset by a key update: frame n carries counter n."""
    node, _ = make(rekey_frames=2)
    frames = [node.seal(Ack("r")) for _ in range(5)]
    assert [int.from_bytes(f[1:9], "big") for f in frames] == list(range(5))


def test_max_counter_spans_all_keys():
    """max_counter counts frames of the whole session, whatever the key updates."""
    node, coord = make(rekey_frames=2, max_counter=5)
    for i in range(5):
        coord.open(node.seal(Ack(f"r{i}")))
    with pytest.raises(LocalProtocolError):
        node.seal(Ack("r5"))


@pytest.mark.parametrize("rekey_frames", [1, 3, 64])
def test_both_sides_stay_in_sync(connect, rekey_frames):
    """Over 3,000 randomly interleaved frames each way, both directions keep decrypting."""
    pair = connect(rekey_frames=rekey_frames)
    node, coord = pair.node_transport, pair.coordinator_transport
    rng = random.Random(rekey_frames)
    to_node: list[bytes] = []
    to_coord: list[bytes] = []
    sent = {"n": 0, "c": 0}
    while sent["n"] < 3000 or sent["c"] < 3000 or to_node or to_coord:
        choice = rng.randrange(4)
        if choice == 0 and sent["c"] < 3000:
            to_node.append(coord.seal(Echo(sent["c"])))
            sent["c"] += 1
        elif choice == 1 and sent["n"] < 3000:
            to_coord.append(node.seal(EchoReply(sent["n"])))
            sent["n"] += 1
        elif choice == 2 and to_node:
            node.open(to_node.pop(0))
        elif choice == 3 and to_coord:
            coord.open(to_coord.pop(0))
    assert node.statistics()["frames_received"] == coord.statistics()["frames_sent"] == 3000
    assert coord.statistics()["key_updates_received"] == 3000 // rekey_frames
    assert node.statistics()["key_updates_received"] == 3000 // rekey_frames


def test_replayed_key_update_frame():
    """A key-update frame delivered twice is COUNTER_MISMATCH, not a second ratchet."""
    node, coord = make()
    node.request_key_update()
    frame = node.seal(Ack("r"))
    coord.open(frame)
    with pytest.raises(FrameError) as err:
        coord.open(frame)
    assert err.value.code is CloseCode.COUNTER_MISMATCH


@pytest.mark.parametrize(
    "kwargs",
    [{"rekey_frames": 0}, {"rekey_frames": 1.5}, {"rekey_after_s": 0.0}, {"rekey_after_s": -1}],
)
def test_constructor_checks_rekey_limits(kwargs):
    """rekey_frames must be an int >= 1 and rekey_after_s > 0."""
    with pytest.raises(LocalProtocolError):
        Transport(Role.NODE, K_NC, K_CN, SID, **kwargs)


def test_constructor_refuses_nan_interval():
    """rekey_after_s=nan is refused (it would never compare as due)."""
    with pytest.raises(LocalProtocolError):
        Transport(Role.NODE, K_NC, K_CN, SID, rekey_after_s=math.nan)


def test_handshake_passes_rekey_options(connect):
    """Options given to the handshakes reach both transports."""
    clock = FakeClock()
    pair = connect(rekey_frames=10**6, rekey_after_s=5.0, clock=clock)
    clock.now = 5.0
    frame = pair.coordinator_transport.seal(Echo(1))
    assert frame[0] == FRAME_KEY_UPDATE
    assert pair.node_transport.open(frame) == Echo(1)
    assert pair.node_transport.seal(EchoReply(1))[0] == FRAME_KEY_UPDATE
