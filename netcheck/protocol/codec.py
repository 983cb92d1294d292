"""msgpack encoding of netcheck/1 messages, with hard limits (docs/protocol.md §4).

The only module that imports msgpack. Decoding is defensive: explicit per-type
length caps, no ext types, str-only map keys, duplicate keys rejected, nesting depth
and a total container budget checked as the decoder builds objects (so a few MiB of
empty maps cannot expand into hundreds of MiB of Python objects), trailing bytes
rejected, and the result is validated against the message dataclasses.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

import msgpack

from netcheck.errors import CloseCode, LocalProtocolError, MessageError
from netcheck.protocol.messages import MESSAGE_TYPES, Auth, Message, ProfileClaim

MIB = 1024 * 1024


@dataclass(frozen=True)
class Limits:
    """Decoder limits (docs/protocol.md §4.2). Lengths count elements, chars or bytes.

    ``max_depth`` counts nested containers (a message map is depth 1); ``max_objects``
    caps the decoded objects of one message: every array and map plus each of their
    elements (map entries count once), so memory stays bounded (§4.2)."""

    max_message_bytes: int = 8 * MIB
    max_array_len: int = 65536
    max_map_len: int = 64
    max_str_len: int = 1 * MIB
    max_bin_len: int = 8 * MIB
    max_depth: int = 8
    max_objects: int = 2_000_000


DEFAULT_LIMITS = Limits()


_CONTAINERS = frozenset({list, dict})


class _Rejected(Exception):
    """Raised inside msgpack hooks to abort decoding."""


def _malformed(reason: str) -> MessageError:
    return MessageError(CloseCode.MALFORMED_MESSAGE, reason)


def _unpack(data: bytes, limits: Limits) -> object:
    """Decode one msgpack object under ``limits``; MessageError on any violation."""
    if len(data) > limits.max_message_bytes:
        raise MessageError(
            CloseCode.MESSAGE_TOO_LARGE, f"{len(data)} bytes > {limits.max_message_bytes}"
        )
    # Hooks run bottom-up as each container completes. ``budget`` counts every decoded
    # object (each container plus its elements), bounding memory to a small multiple of
    # ``max_objects`` whatever the input. depth[id(c)] is the nesting depth of a non-leaf
    # container c (leaves, i.e. containers without containers inside, have depth 1 and are
    # not recorded); recorded containers stay referenced by their parents until the decode
    # ends, so their ids are not reused while we look them up.
    depth: dict[int, int] = {}
    budget = limits.max_objects

    def account(obj: Any, children: Any, n: int) -> Any:
        nonlocal budget
        budget -= n + 1
        if budget < 0:
            raise _Rejected(f"more than {limits.max_objects} objects")
        if n and not _CONTAINERS.isdisjoint(map(type, children)):
            # Children depths: recorded ones, else 1. Set operations keep this at C speed.
            nested = depth.keys() & map(id, children)
            d = 1 + max((depth[i] for i in nested), default=1)
            if d > limits.max_depth:
                raise _Rejected(f"nesting deeper than {limits.max_depth}")
            depth[id(obj)] = d
        return obj

    def list_hook(items: list[Any]) -> list[Any]:
        return account(items, items, len(items))  # type: ignore[no-any-return]

    def pairs_hook(pairs: list[tuple[Any, Any]]) -> dict[Any, Any]:
        nonlocal budget
        if not pairs:  # fast path: a flood of empty maps is the classic amplifier
            budget -= 1
            if budget < 0:
                raise _Rejected(f"more than {limits.max_objects} objects")
            return {}
        mapping = dict(pairs)
        if len(mapping) != len(pairs):
            raise _Rejected("duplicate map key")
        return account(mapping, mapping.values(), len(pairs))  # type: ignore[no-any-return]

    try:
        return msgpack.unpackb(
            data,
            raw=False,
            strict_map_key=True,
            use_list=True,
            max_str_len=limits.max_str_len,
            max_bin_len=limits.max_bin_len,
            max_array_len=limits.max_array_len,
            max_map_len=limits.max_map_len,
            max_ext_len=0,
            list_hook=list_hook,
            object_pairs_hook=pairs_hook,
        )
    except _Rejected as exc:
        raise _malformed(str(exc)) from None
    except (ValueError, TypeError, OverflowError, msgpack.UnpackException) as exc:
        # ExtraData (trailing bytes), truncation, limits, bad UTF-8, non-str keys, ext.
        raise _malformed(f"msgpack: {type(exc).__name__}: {exc}"[:200]) from None


def _to_wire(value: object) -> object:
    if isinstance(value, ProfileClaim):
        return {f.name: _to_wire(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, tuple):
        if set(map(type, value)) <= _SCALARS:  # a row of token ids: no per-element call
            return list(value)
        return [_to_wire(v) for v in value]
    return value


_SCALARS = frozenset({int, str, bytes, float, bool, type(None)})


def message_map(msg: Message, *, omit: tuple[str, ...] = ()) -> dict[str, object]:
    """The wire map of ``msg``: ``{"t": TYPE, <field>: <value>, ...}`` in field order,
    leaving out the fields named in ``omit`` (used for signed handshake bodies, §2.1)."""
    out: dict[str, object] = {"t": msg.TYPE}
    for f in dataclasses.fields(msg):
        if f.name not in omit:
            out[f.name] = _to_wire(getattr(msg, f.name))
    return out


def _pack(obj: object) -> bytes:
    packed = msgpack.packb(obj, use_bin_type=True, strict_types=True)
    assert isinstance(packed, bytes)
    return packed


def encode_message(msg: Message, *, omit: tuple[str, ...] = ()) -> bytes:
    """Encode ``msg`` as one msgpack map (docs/protocol.md §4.1); deterministic: the same
    message always gives the same bytes. ``omit`` drops fields (signed bodies, §2.1)."""
    return _pack(message_map(msg, omit=omit))


def _fields(cls: type, mapping: dict[str, Any], what: str) -> dict[str, Any]:
    names = {f.name for f in dataclasses.fields(cls)}
    if set(mapping) != names:
        missing, extra = sorted(names - set(mapping)), sorted(set(mapping) - names)
        raise _malformed(f"{what}: missing {missing}, unexpected {extra}")
    return mapping


def _from_wire(obj: object, allowed: Collection[str] | None = None) -> Message:
    if type(obj) is not dict:
        raise _malformed("message is not a map")
    fields = dict(obj)
    type_name = fields.pop("t", None)
    cls = MESSAGE_TYPES.get(type_name) if type(type_name) is str else None
    if cls is None:
        raise _malformed(f"unknown message type {type_name!r}"[:100])
    if allowed is not None and cls.TYPE not in allowed:
        # Decided on the type alone, before its fields: the same misplaced type gets
        # the same code whether or not its fields are valid (docs/protocol.md §8.1).
        raise MessageError(CloseCode.UNEXPECTED_MESSAGE, f"{cls.TYPE!r} not allowed here")
    _fields(cls, fields, cls.TYPE)
    if cls is Auth:
        claim = fields["claim"]
        if type(claim) is not dict:
            raise _malformed("auth.claim is not a map")
        fields["claim"] = ProfileClaim(**_fields(ProfileClaim, claim, "auth.claim"))
    return cls(**fields)


def decode_message(
    data: bytes, *, limits: Limits = DEFAULT_LIMITS, allowed: Collection[str] | None = None
) -> Message:
    """Decode and validate one message (docs/protocol.md §4).

    Args:
        allowed: message type names the receiver accepts here (None: any). A known type
            outside it is refused before its fields are validated.

    Raises:
        MessageError: MESSAGE_TOO_LARGE if ``len(data) > limits.max_message_bytes``;
            MALFORMED_MESSAGE for bad msgpack, limits, trailing bytes, unknown type,
            missing/extra fields or field values the dataclass rejects;
            UNEXPECTED_MESSAGE for a known type not in ``allowed``.
    """
    return _from_wire(_unpack(data, limits), allowed)


def _canonical(obj: object) -> object:
    if obj is None or type(obj) in (bool, int, float, str, bytes):
        return obj
    if type(obj) in (list, tuple):
        return [_canonical(v) for v in obj]  # type: ignore[attr-defined]
    if type(obj) is dict:
        if not all(type(k) is str for k in obj):
            raise LocalProtocolError("pack_value: map keys must be str")
        return {k: _canonical(obj[k]) for k in sorted(obj)}
    raise LocalProtocolError(f"pack_value: unsupported type {type(obj).__name__}")


def pack_value(obj: object) -> bytes:
    """Canonical msgpack of a plain value (docs/protocol.md §4.3): None, bool, int, float,
    str, bytes (bin), lists/tuples (arrays) and str-keyed dicts (keys sorted).

    Raises:
        LocalProtocolError: for any other type.
    """
    return _pack(_canonical(obj))


def pack_int_rows(rows: list[list[int]]) -> bytes:
    """``pack_value(rows)`` for a list of lists of ints, without the per-element
    canonicalisation pass (such a value is already canonical, §4.3). The caller checks
    that every element is an ``int``; anything else raises ``TypeError`` from msgpack
    (``strict_types``) rather than being packed differently."""
    return _pack(rows)


def unpack_value(data: bytes, limits: Limits = DEFAULT_LIMITS) -> object:
    """Decode a value written by ``pack_value`` under ``limits`` (arrays become lists).

    Raises:
        MessageError: as ``decode_message`` for bytes that break the limits.
    """
    return _unpack(data, limits)
