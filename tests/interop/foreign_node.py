"""A minimal netcheck node written from docs/protocol.md alone (the interop check).

Independent of netcheck's own code on purpose: it imports nothing from ``netcheck``
(``tests/interop/test_interop_imports.py`` checks that), only aiohttp (as a websocket
client), msgpack, cryptography and numpy. Every constant and layout below cites the
section of docs/protocol.md it comes from; where the spec was silent or wrong while this
was written, the spec was fixed (the list is in docs/protocol.md §11).

It runs one session: handshake (§2), key updates (§3.5: its own first frame is one,
and it ratchets on the coordinator's), then answers ``echo`` (§5.6), ``probe`` (§5.9),
``job``/``release`` (§5.2-§5.5, §7) and checks ``verdict`` notices (§5.11) until the
coordinator closes or :meth:`ForeignNode.stop` is called. What it saw is kept in
:class:`Session` for the test to inspect.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import struct
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import msgpack
import numpy as np
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey
from cryptography.hazmat.primitives.ciphers.aead import ChaCha20Poly1305
from cryptography.hazmat.primitives.kdf.hkdf import HKDF, HKDFExpand

VERSION = "netcheck/1"  # §10
SUITE = "x25519-ed25519-chacha20poly1305-sha256"  # §2.2
ENDPOINT = "/v1/ws"  # §2.1: the endpoint name in h0
DATA, KEY_UPDATE = 0x01, 0x02  # §3.1
TO_COORDINATOR, TO_NODE = b"\x00", b"\x01"  # §3.2


class SpecViolation(Exception):
    """The coordinator sent something the spec does not allow (the close code to use)."""

    def __init__(self, code: int, what: str) -> None:
        super().__init__(f"{code}: {what}")
        self.code = code


# --- §1.3 notation and §4 encoding --------------------------------------------------


def H(data: bytes) -> bytes:
    return hashlib.sha256(data).digest()


def lp(data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + data


def u64(n: int) -> bytes:
    return struct.pack(">Q", n)


def raw_key(key: Ed25519PublicKey) -> bytes:
    return key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)


def enc(message: dict[str, Any]) -> bytes:
    """§4.1: one map, fields in table order (dict order here: schema maps such as the
    claim of §2.4 are built in table order), smallest forms, floats as float64."""
    return msgpack.packb(message, use_bin_type=True)


def _sorted_nested(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _sorted_nested(v) for k, v in sorted(value.items())}
    if isinstance(value, list | tuple):
        return [_sorted_nested(v) for v in value]
    return value


def pack_value(value: Any) -> bytes:
    """§4.3: plain values, maps with str keys in sorted order, smallest forms."""
    return msgpack.packb(_sorted_nested(value), use_bin_type=True)


def dec(data: bytes, *, max_bytes: int) -> dict[str, Any]:
    """Decode one message with the limits of §2.1/§4.2 (the small handshake ones
    are enough for everything a coordinator sends a node of the test profile)."""
    if len(data) > max_bytes:
        raise SpecViolation(4008, f"message of {len(data)} bytes")
    try:
        value = msgpack.unpackb(
            data,
            raw=False,
            strict_map_key=True,
            max_array_len=65_536,
            max_map_len=64,
            max_str_len=1 << 20,
            max_bin_len=8 << 20,
            max_ext_len=0,
        )
    except Exception as exc:  # msgpack raises several types
        raise SpecViolation(4009, f"bad msgpack: {exc}") from exc
    if not isinstance(value, dict) or not isinstance(value.get("t"), str):
        raise SpecViolation(4009, "not a message map")
    return value


def expect_fields(msg: dict[str, Any], *names: str) -> None:
    """§4.1: unknown or missing fields are MALFORMED_MESSAGE, in table order."""
    if list(msg) != ["t", *names]:
        raise SpecViolation(4009, f"{msg['t']} fields {list(msg)}, spec {['t', *names]}")


# --- §5.9 probe ------------------------------------------------------------------------


def probe_answer(challenge: bytes, n: int = 64) -> bytes:
    """§5.9, computed with numpy int64 (exact; the spec allows any device)."""
    stream = hashlib.shake_256(b"netcheck/1 probe\0" + challenge).digest(3 * n * n)
    m = (np.frombuffer(stream, dtype=np.uint8).astype(np.int64) % 3) - 1
    x, w1, w2 = (m[i * n * n : (i + 1) * n * n].reshape(n, n) for i in range(3))
    h = np.clip(w1 @ x, -1, 1)
    y = w2 @ h
    return H(b"netcheck/1 probe answer\0" + y.astype("<i2").tobytes())


def receive_cap(fingerprint: dict[str, Any]) -> int:
    """§3.3: the largest frame a node of shape (B, prompt_len) accepts, in bytes: the
    largest job payload 5 + B * (5 + max(1024, 32 * prompt_len)) plus the 16-byte tag,
    or 4 * 1024 (a bye reason), plus the 512-byte envelope, plus the 25-byte frame
    overhead."""
    b, n = int(fingerprint["batch_size"]), int(fingerprint["prompt_len"])
    payload = 5 + b * (5 + max(1024, 32 * n)) + 16
    return max(payload, 4 * 1024) + 512 + 25


# --- §3 frames ---------------------------------------------------------------------------


class Frames:
    """§3: per-direction ChaCha20-Poly1305 with exact counters and key updates."""

    def __init__(self, key_nc: bytes, key_cn: bytes, session_id: bytes) -> None:
        self.send_key, self.recv_key = key_nc, key_cn
        self.session_id = session_id
        self.send_counter = 0
        self.recv_counter = 0
        self.updates_received = 0
        self.updates_sent = 0

    @staticmethod
    def ratchet(key: bytes) -> bytes:
        """§3.5: key' = HKDF-Expand(PRK = key, info = "netcheck/1 key update", L = 32)."""
        return HKDFExpand(hashes.SHA256(), 32, b"netcheck/1 key update").derive(key)

    def _nonce_aad(self, direction: bytes, counter: int, ftype: int) -> tuple[bytes, bytes]:
        nonce = b"\0\0\0\0" + u64(counter)  # §3.2
        aad = self.session_id + direction + u64(counter) + bytes([ftype])
        return nonce, aad

    def seal(self, message: dict[str, Any], *, key_update: bool = False) -> bytes:
        ftype = KEY_UPDATE if key_update else DATA
        nonce, aad = self._nonce_aad(TO_COORDINATOR, self.send_counter, ftype)
        ct = ChaCha20Poly1305(self.send_key).encrypt(nonce, enc(message), aad)
        frame = bytes([ftype]) + u64(self.send_counter) + ct
        self.send_counter += 1
        if key_update:
            self.send_key = self.ratchet(self.send_key)
            self.updates_sent += 1
        return frame

    def open(self, frame: bytes) -> dict[str, Any]:
        """§3.4, in its order."""
        if len(frame) < 25:
            raise SpecViolation(4006, "short frame")
        ftype, counter = frame[0], int.from_bytes(frame[1:9], "big")
        if ftype not in (DATA, KEY_UPDATE):
            raise SpecViolation(4000, f"frame type {ftype}")
        if counter != self.recv_counter:
            raise SpecViolation(4007, f"counter {counter}, expected {self.recv_counter}")
        nonce, aad = self._nonce_aad(TO_NODE, counter, ftype)
        try:
            plain = ChaCha20Poly1305(self.recv_key).decrypt(nonce, frame[9:], aad)
        except Exception as exc:
            raise SpecViolation(4006, "frame does not decrypt") from exc
        self.recv_counter += 1
        if ftype == KEY_UPDATE:
            self.recv_key = self.ratchet(self.recv_key)
            self.updates_received += 1
        return dec(plain, max_bytes=8 << 20)


# --- the session ---------------------------------------------------------------------------


@dataclass
class Receipt:
    """What the node signed for one round (§7.3)."""

    round_id: str
    session_id: bytes
    outputs: list[list[int]]
    commitment: bytes
    signature: bytes


@dataclass
class Session:
    """What one session saw; filled in as messages arrive."""

    session_id: bytes = b""
    echoes: int = 0
    probes: int = 0
    jobs: list[str] = field(default_factory=list)
    receipts: list[Receipt] = field(default_factory=list)
    verdicts: list[dict[str, Any]] = field(default_factory=list)
    close_code: int | None = None
    key_updates: tuple[int, int] = (0, 0)  # (sent, received), §3.5
    opened: asyncio.Event = field(default_factory=asyncio.Event)
    changed: asyncio.Event = field(default_factory=asyncio.Event)


Engine = Callable[[Sequence[str], int], list[list[int]]]


class ForeignNode:
    """One node identity speaking netcheck/1 to one pinned coordinator.

    Args:
        url: ``ws://host:port/path`` of the coordinator endpoint (§1.1).
        coordinator_key: the pinned coordinator key, raw 32 bytes (§1.2).
        identity: the node's Ed25519 key.
        claim: the profile claim of §2.4 (``profile``, ``fingerprint``, ``software``).
        engine: ``(prompts, max_new_tokens) -> outputs`` for a job.
    """

    def __init__(
        self,
        url: str,
        coordinator_key: bytes,
        identity: Ed25519PrivateKey,
        claim: dict[str, Any],
        engine: Engine,
    ) -> None:
        self.url, self.coordinator_key, self.identity = url, coordinator_key, identity
        self.node_key = raw_key(identity.public_key())
        # §2.4: the claim in table order; the fingerprint, a free map, in sorted key order.
        self.claim = {
            "profile": claim["profile"],
            "fingerprint": dict(sorted(claim["fingerprint"].items())),
            "software": claim["software"],
        }
        self.engine = engine
        self.session = Session()
        self._ws: aiohttp.ClientWebSocketResponse | None = None

    # §2 -----------------------------------------------------------------------------

    async def _handshake(self, ws: aiohttp.ClientWebSocketResponse) -> Frames:
        # §2.1: the endpoint name "/v1/ws", whatever path a proxy serves it under.
        h = H(lp(VERSION.encode()) + lp(ENDPOINT.encode()) + lp(self.coordinator_key))

        def mix(h: bytes, x: bytes) -> bytes:
            return H(h + lp(x))

        eph = X25519PrivateKey.generate()
        eph_pub = eph.public_key().public_bytes(
            serialization.Encoding.Raw, serialization.PublicFormat.Raw
        )
        hello = {
            "t": "hello",
            "versions": [VERSION],
            "suites": [SUITE],
            "ephemeral": eph_pub,
            "nonce": os.urandom(32),
            "node_key": self.node_key,
            "coordinator_key": self.coordinator_key,
        }
        hello_bytes = enc(hello)
        await ws.send_bytes(hello_bytes)
        th1 = mix(h, hello_bytes)

        msg = await ws.receive(timeout=10.0)  # §3.3a: N's handshake bound
        if msg.type != aiohttp.WSMsgType.BINARY:
            raise SpecViolation(4009, f"welcome arrived as {msg.type!r} ({msg.extra!r})")
        data: bytes = msg.data
        welcome = dec(data, max_bytes=2048)
        if enc(welcome) != data:  # §2.1 canonical encoding
            raise SpecViolation(4009, "welcome is not canonically encoded")
        if welcome["t"] != "welcome":
            raise SpecViolation(4010, f"expected welcome, got {welcome['t']}")
        expect_fields(
            welcome, "version", "suite", "ephemeral", "nonce", "coordinator_key", "signature"
        )
        if welcome["version"] != VERSION or welcome["suite"] != SUITE:
            raise SpecViolation(4005, "choice not offered")
        if welcome["coordinator_key"] != self.coordinator_key:
            raise SpecViolation(4003, "welcome from another key")
        unsigned = {k: v for k, v in welcome.items() if k != "signature"}
        th2 = mix(th1, enc(unsigned))
        try:
            Ed25519PublicKey.from_public_bytes(self.coordinator_key).verify(
                welcome["signature"], b"netcheck/1 coordinator\0" + th2
            )
        except InvalidSignature as exc:
            raise SpecViolation(4004, "welcome signature") from exc
        shared = eph.exchange(X25519PublicKey.from_public_bytes(welcome["ephemeral"]))
        if shared == bytes(32):
            raise SpecViolation(4001, "all-zero X25519 result")
        thw = mix(th2, welcome["signature"])

        auth_unsigned = {"t": "auth", "claim": self.claim}
        th3 = mix(thw, enc(auth_unsigned))
        signature = self.identity.sign(b"netcheck/1 node\0" + th3)
        # §2.4 table order: t, signature, claim.
        await ws.send_bytes(enc({"t": "auth", "signature": signature, "claim": self.claim}))
        thf = mix(th3, signature)

        okm = HKDF(hashes.SHA256(), 80, salt=thf, info=b"netcheck/1 traffic").derive(shared)
        self.session.session_id = okm[64:80]
        return Frames(okm[0:32], okm[32:64], okm[64:80])

    # §5 ---------------------------------------------------------------------------------

    async def run(self) -> Session:
        """Run one session until the coordinator closes it (or :meth:`stop`)."""
        cap = receive_cap(self.claim["fingerprint"])
        async with (
            aiohttp.ClientSession() as http,
            http.ws_connect(self.url, max_msg_size=cap + 1) as ws,
        ):
            self._ws = ws
            frames = await self._handshake(ws)
            self.session.opened.set()
            jobs: dict[str, dict[str, Any]] = {}
            try:
                async for msg in ws:
                    if msg.type != aiohttp.WSMsgType.BINARY:
                        break
                    reply = self._handle(frames.open(msg.data), jobs)
                    for out in reply:
                        # §3.5: our first frame is a key update (the sender decides).
                        update = frames.send_counter == 0
                        await ws.send_bytes(frames.seal(out, key_update=update))
                    self.session.key_updates = (frames.updates_sent, frames.updates_received)
                    self.session.changed.set()
            except SpecViolation as exc:
                await ws.close(code=exc.code, message=b"")
                raise
            self.session.close_code = ws.close_code
            self.session.changed.set()
        return self.session

    async def stop(self) -> None:
        """Close the websocket (as a node that goes away)."""
        if self._ws is not None:
            await self._ws.close()

    def _handle(self, msg: dict[str, Any], jobs: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
        t = msg["t"]
        s = self.session
        if t == "echo":
            expect_fields(msg, "nonce")
            s.echoes += 1
            return [{"t": "echo_reply", "nonce": msg["nonce"]}]
        if t == "probe":
            expect_fields(msg, "nonce", "challenge")
            s.probes += 1
            answer = probe_answer(msg["challenge"])
            return [{"t": "probe_reply", "nonce": msg["nonce"], "answer": answer}]
        if t == "job":
            expect_fields(
                msg, "round_id", "nonce", "ciphertext", "batch_size", "max_new_tokens", "deadline_s"
            )
            jobs[msg["round_id"]] = msg
            s.jobs.append(msg["round_id"])
            return [{"t": "ack", "round_id": msg["round_id"]}]
        if t == "release":
            expect_fields(msg, "round_id", "job_key")
            job = jobs.pop(msg["round_id"], None)
            if job is None:
                raise SpecViolation(4010, "release of an unknown job")
            return [self._result(job, msg["job_key"])]
        if t == "verdict":
            expect_fields(
                msg, "round_id", "verdict", "reason", "elapsed_s", "deadline_s", "signature"
            )
            signed = pack_value(
                [
                    s.session_id,
                    self.node_key,
                    msg["round_id"],
                    msg["verdict"],
                    msg["reason"],
                    msg["elapsed_s"],
                    msg["deadline_s"],
                ]
            )
            try:
                Ed25519PublicKey.from_public_bytes(self.coordinator_key).verify(
                    msg["signature"], b"netcheck/1 verdict\0" + signed
                )
            except InvalidSignature as exc:
                raise SpecViolation(4004, "verdict notice signature") from exc
            s.verdicts.append(msg)
            return []
        if t == "bye":
            return []
        raise SpecViolation(4010, f"{t} from the coordinator")

    def _result(self, job: dict[str, Any], job_key: bytes) -> dict[str, Any]:
        """§7.1 payload, the engine, §7.2 commitment, §7.3 receipt, §5.5 result."""
        round_id: str = job["round_id"]
        aad = b"netcheck/1 job\0" + round_id.encode()
        try:
            plain = ChaCha20Poly1305(job_key).decrypt(job["nonce"], job["ciphertext"], aad)
        except Exception as exc:
            raise SpecViolation(4006, "job payload does not decrypt") from exc
        prompts = msgpack.unpackb(plain, raw=False)
        if not isinstance(prompts, list) or len(prompts) != job["batch_size"]:
            raise SpecViolation(4009, "payload is not batch_size strings")
        outputs = self.engine(prompts, job["max_new_tokens"])
        commitment = H(b"netcheck/1 commitment\0" + pack_value(outputs))
        receipt = (
            b"netcheck/1 receipt\0"
            + lp(self.session.session_id)
            + lp(round_id.encode())
            + lp(self.node_key)
            + lp(commitment)
        )
        signature = self.identity.sign(receipt)
        self.session.receipts.append(
            Receipt(round_id, self.session.session_id, outputs, commitment, signature)
        )
        return {
            "t": "result",
            "round_id": round_id,
            "outputs": outputs,
            "commitment": commitment,
            "signature": signature,
        }
