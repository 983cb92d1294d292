"""Codec and message validation: round trips, limits, bad input, canonical values."""

from __future__ import annotations

import contextlib
import dataclasses

import msgpack
import pytest
from hypothesis import given
from hypothesis import strategies as st

from netcheck.errors import CloseCode, LocalProtocolError, MessageError
from netcheck.protocol import (
    Ack,
    Auth,
    Bye,
    Echo,
    EchoReply,
    Error,
    Hello,
    Job,
    Limits,
    ProfileClaim,
    Release,
    Result,
    Welcome,
    decode_message,
    encode_message,
    pack_value,
    unpack_value,
)
from netcheck.protocol.messages import MESSAGE_TYPES, Probe, ProbeReply, VerdictNotice


def b(n: int) -> st.SearchStrategy[bytes]:
    return st.binary(min_size=n, max_size=n)


#: Printable text (``str.isprintable``): what a claim's fingerprint and software allow.
printable = st.characters(
    exclude_categories=("Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp", "Zs"), include_characters=" "
)
names = st.text(printable, min_size=1, max_size=64)
round_ids = st.from_regex(r"[A-Za-z0-9._:-]{1,64}", fullmatch=True)
reasons = st.text(max_size=1024)
claims = st.builds(
    ProfileClaim,
    profile=st.text(min_size=1, max_size=256),
    fingerprint=st.dictionaries(
        names, st.text(printable, max_size=256) | st.integers(-(2**63), 2**63 - 1), max_size=32
    ),
    software=st.text(printable, max_size=256),
)
tokens = st.integers(0, 2**31 - 1)

MESSAGES = {
    "hello": st.builds(
        Hello,
        versions=st.lists(names, min_size=1, max_size=8).map(tuple),
        suites=st.lists(names, min_size=1, max_size=8).map(tuple),
        ephemeral=b(32),
        nonce=b(32),
        node_key=b(32),
        coordinator_key=b(32),
    ),
    "welcome": st.builds(
        Welcome,
        version=names,
        suite=names,
        ephemeral=b(32),
        nonce=b(32),
        coordinator_key=b(32),
        signature=b(64),
    ),
    "auth": st.builds(Auth, signature=b(64), claim=claims),
    "job": st.builds(
        Job,
        round_id=round_ids,
        nonce=b(12),
        ciphertext=st.binary(min_size=16, max_size=512),
        batch_size=st.integers(1, 65536),
        max_new_tokens=st.integers(1, 65536),
        deadline_s=st.floats(min_value=1e-6, max_value=86400.0),
    ),
    "ack": st.builds(Ack, round_id=round_ids),
    "release": st.builds(Release, round_id=round_ids, job_key=b(32)),
    "result": st.builds(
        Result,
        round_id=round_ids,
        outputs=st.lists(st.lists(tokens, max_size=16).map(tuple), max_size=8).map(tuple),
        commitment=b(32),
        signature=b(64),
    ),
    "echo": st.builds(Echo, nonce=st.integers(0, 2**63 - 1)),
    "echo_reply": st.builds(EchoReply, nonce=st.integers(0, 2**63 - 1)),
    "probe": st.builds(Probe, nonce=st.integers(0, 2**63 - 1), challenge=b(32)),
    "probe_reply": st.builds(ProbeReply, nonce=st.integers(0, 2**63 - 1), answer=b(32)),
    "error": st.builds(Error, round_id=round_ids, reason=reasons),
    "bye": st.builds(Bye, reason=reasons),
    "verdict": st.builds(
        VerdictNotice,
        round_id=round_ids,
        verdict=st.from_regex(r"[a-z][a-z-]{0,31}", fullmatch=True),
        reason=reasons,
        elapsed_s=st.none() | st.floats(0.0, 1e6),
        deadline_s=st.none() | st.floats(0.0, 1e6),
        signature=b(64),
    ),
}
any_message = st.one_of(*MESSAGES.values())


def test_strategies_cover_every_message_type():
    """The round-trip strategies cover every message type of the protocol."""
    assert set(MESSAGES) == set(MESSAGE_TYPES)


@pytest.mark.parametrize("type_name", sorted(MESSAGES))
def test_round_trip(type_name):
    """decode(encode(m)) == m and encoding is deterministic, for every type."""

    @given(MESSAGES[type_name])
    def check(msg):
        data = encode_message(msg)
        assert decode_message(data) == msg
        assert encode_message(decode_message(data)) == data

    check()


@given(any_message, st.data())
def test_truncated_input_rejected(msg, data):
    """Every strict prefix of an encoded message is MALFORMED_MESSAGE."""
    encoded = encode_message(msg)
    cut = data.draw(st.integers(0, len(encoded) - 1))
    with pytest.raises(MessageError) as err:
        decode_message(encoded[:cut])
    assert err.value.code is CloseCode.MALFORMED_MESSAGE


@given(any_message, st.binary(min_size=1, max_size=16))
def test_trailing_junk_rejected(msg, junk):
    """Bytes after the message are MALFORMED_MESSAGE."""
    with pytest.raises(MessageError) as err:
        decode_message(encode_message(msg) + junk)
    assert err.value.code is CloseCode.MALFORMED_MESSAGE


def test_every_prefix_of_a_job_rejected():
    """A job message cut at every byte position is rejected (byte-by-byte, as h11)."""
    data = encode_message(Job("r1", bytes(12), bytes(40), 4, 8, 2.5))
    for cut in range(len(data)):
        with pytest.raises(MessageError):
            decode_message(data[:cut])


@given(st.binary(max_size=64))
def test_random_bytes_never_crash(data):
    """Arbitrary bytes decode to a message or raise MessageError, nothing else."""
    with contextlib.suppress(MessageError):
        decode_message(data)


def _raw(obj: object) -> bytes:
    return msgpack.packb(obj, use_bin_type=True)


@pytest.mark.parametrize(
    "obj",
    [
        [1, 2],  # not a map
        {"round_id": "r"},  # no type
        {"t": "nope"},  # unknown type
        {"t": 1},  # type not a str
        {"t": "ack"},  # missing field
        {"t": "ack", "round_id": "r", "extra": 1},  # unexpected field
        {"t": "ack", "round_id": b"r"},  # wrong type
        {"t": "echo", "nonce": True},  # bool is not an int
        {"t": "echo", "nonce": -1},
        {"t": "echo", "nonce": 2**63},
        {"t": "release", "round_id": "r", "job_key": bytes(31)},
        {"t": "ack", "round_id": "bad id!"},
        {"t": "ack", "round_id": ""},
        {"t": "auth", "signature": bytes(64), "claim": "x"},
        {"t": "auth", "signature": bytes(64), "claim": {"profile": "p"}},
    ],
)
def test_schema_violations(obj):
    """Well-formed msgpack that breaks the schema is MALFORMED_MESSAGE."""
    with pytest.raises(MessageError) as err:
        decode_message(_raw(obj))
    assert err.value.code is CloseCode.MALFORMED_MESSAGE


@pytest.mark.parametrize(
    "data",
    [
        b"\x81\x01\xa1x",  # int map key
        b"\xd4\x01\x00",  # ext type
        b"\xd6\xff\x00\x00\x00\x00",  # timestamp ext
        b"\x81\xa1t\xa2\xc3\x28",  # invalid UTF-8
        b"\xc1",  # reserved byte
        b"",
    ],
)
def test_bad_msgpack(data):
    """Non-str keys, ext types, bad UTF-8 and reserved bytes are MALFORMED_MESSAGE."""
    with pytest.raises(MessageError) as err:
        decode_message(data)
    assert err.value.code is CloseCode.MALFORMED_MESSAGE


def test_message_size_limit():
    """Input longer than max_message_bytes is MESSAGE_TOO_LARGE."""
    data = encode_message(Bye("x" * 200))
    with pytest.raises(MessageError) as err:
        decode_message(data, limits=Limits(max_message_bytes=100))
    assert err.value.code is CloseCode.MESSAGE_TOO_LARGE


@pytest.mark.parametrize(
    ("limits", "obj"),
    [
        (Limits(max_array_len=3), [1, 2, 3, 4]),
        (Limits(max_map_len=1), {"a": 1, "b": 2}),
        (Limits(max_str_len=3), "abcd"),
        (Limits(max_bin_len=3), b"abcd"),
        (Limits(max_depth=2), [[[1]]]),
        (Limits(max_objects=10), [[1, 2, 3, 4, 5], [6, 7, 8, 9, 10]]),
        (Limits(max_objects=5), [{} for _ in range(10)]),
    ],
)
def test_each_limit_applies(limits, obj):
    """Each decoder limit is enforced (MALFORMED_MESSAGE)."""
    with pytest.raises(MessageError):
        unpack_value(_raw(obj), limits)
    assert unpack_value(_raw(obj)) == obj


def test_depth_counts_maps_and_arrays():
    """Depth counts nested maps and arrays alike; max_depth itself is allowed."""
    assert unpack_value(_raw({"a": [{"b": [1]}]}), Limits(max_depth=4)) == {"a": [{"b": [1]}]}
    with pytest.raises(MessageError):
        unpack_value(_raw({"a": [{"b": [1]}]}), Limits(max_depth=3))


def test_lists_normalised_to_tuples():
    """Sequence fields given as lists are stored as tuples."""
    result = Result("r", [[1, 2], [3]], bytes(32), bytes(64))
    assert result.outputs == ((1, 2), (3,))
    hello = Hello(["v"], ["s"], bytes(32), bytes(32), bytes(32), bytes(32))
    assert hello.versions == ("v",)


@pytest.mark.parametrize(
    "build",
    [
        lambda: Hello((), ("s",), bytes(32), bytes(32), bytes(32), bytes(32)),
        lambda: Hello(("v",) * 9, ("s",), bytes(32), bytes(32), bytes(32), bytes(32)),
        lambda: Hello("v", ("s",), bytes(32), bytes(32), bytes(32), bytes(32)),
        lambda: Hello(("v",), ("s",), bytes(31), bytes(32), bytes(32), bytes(32)),
        lambda: Hello(("v",), ("s",), bytearray(32), bytes(32), bytes(32), bytes(32)),
        lambda: Welcome("v", "s", bytes(32), bytes(32), bytes(32), bytes(63)),
        lambda: Auth(bytes(64), {"profile": "p"}),
        lambda: Job("r", bytes(12), bytes(15), 1, 1, 1.0),
        lambda: Job("r", bytes(12), bytes(16), 0, 1, 1.0),
        lambda: Job("r", bytes(12), bytes(16), 1, 65537, 1.0),
        lambda: Job("r", bytes(12), bytes(16), 1, 1, float("nan")),
        lambda: Job("r", bytes(12), bytes(16), 1, 1, 0.0),
        lambda: Job("r", bytes(12), bytes(16), 1, 1, "1"),
        lambda: Result("r", ((2**31,),), bytes(32), bytes(64)),
        lambda: Result("r", ((-1,),), bytes(32), bytes(64)),
        lambda: Result("r", ((True,),), bytes(32), bytes(64)),
        lambda: Result("r", (5,), bytes(32), bytes(64)),
        lambda: Result("r", 5, bytes(32), bytes(64)),
        lambda: Error("r" * 65, "x"),
        lambda: Bye("x" * 1025),
        lambda: ProfileClaim("", {}, "s"),
        lambda: ProfileClaim("p", [], "s"),
        lambda: ProfileClaim("p", {"k": 1.5}, "s"),
        lambda: ProfileClaim("p", {"k": 2**63}, "s"),
        lambda: ProfileClaim("p", {f"k{i}": 1 for i in range(33)}, "s"),
    ],
)
def test_invalid_messages_cannot_exist(build):
    """Constructing a message with a bad field raises MessageError(MALFORMED_MESSAGE)."""
    with pytest.raises(MessageError) as err:
        build()
    assert err.value.code is CloseCode.MALFORMED_MESSAGE


def test_job_deadline_int_becomes_float():
    """An integer deadline is stored as a float, so the encoding is one float64 form."""
    job = Job("r", bytes(12), bytes(16), 1, 1, 2)
    assert job.deadline_s == 2.0 and type(job.deadline_s) is float


def test_messages_are_frozen():
    """Messages are immutable."""
    with pytest.raises(dataclasses.FrozenInstanceError):
        Ack("r").round_id = "s"


def test_encoding_is_a_typed_map():
    """A message is a msgpack map with "t" first and bytes as bin."""
    raw = msgpack.unpackb(encode_message(Release("r1", bytes(32))), raw=False)
    assert raw == {"t": "release", "round_id": "r1", "job_key": bytes(32)}
    assert list(raw) == ["t", "round_id", "job_key"]


def test_pack_value_is_canonical():
    """pack_value sorts map keys and writes tuples as arrays."""
    assert pack_value({"b": 1, "a": (1, 2)}) == pack_value({"a": [1, 2], "b": 1})
    assert unpack_value(pack_value({"b": 1, "a": (1, 2)})) == {"a": [1, 2], "b": 1}
    assert pack_value(["x", None, True, 1.5, b"\x00"]) == _raw(["x", None, True, 1.5, b"\x00"])


@pytest.mark.parametrize("value", [{1: "x"}, {1, 2}, object(), bytearray(b"x")])
def test_pack_value_rejects_other_types(value):
    """pack_value refuses non-str keys and types outside the plain set."""
    with pytest.raises(LocalProtocolError):
        pack_value(value)


def test_unpack_value_rejects_trailing_bytes():
    """unpack_value also refuses trailing bytes."""
    with pytest.raises(MessageError):
        unpack_value(pack_value(["a"]) + b"\x00")
