#!/usr/bin/env python3
"""Fuzz the netcheck/1 parsers with random and mutated inputs (docs/protocol.md §2-§4).

Targets, each fed hostile bytes as a peer would send them:

- ``hello``: ``CoordinatorHandshake.receive_hello`` (fresh machine per input).
- ``welcome``: ``NodeHandshake.receive_welcome`` after a real ``start()``.
- ``auth``: ``CoordinatorHandshake.receive_auth`` after a real ``hello``; the machines
  are seeded so an unmutated input is the valid ``auth`` and mutations reach the
  signature check.
- ``frame``: ``Transport.open`` on mutated frames (header, tag, truncation, splices).
- ``peer_frame``: ``Transport.open`` on frames correctly sealed by a *malicious but
  authenticated* peer around mutated plaintexts, so decoding and schema checks run.
- ``decode``: ``codec.decode_message`` directly, with default and handshake limits.
- ``job``: ``jobs.open_job`` with correctly sealed mutated payloads.

Mutators: bit flips, interesting bytes (msgpack markers, 0x00/0xff), truncation,
trailing junk, splices of two inputs, chunk insert/delete/duplicate, random bytes,
random msgpack object trees, valid messages with fields replaced/dropped/added, length
headers that lie, and rare large inputs (megabytes of empty maps or small ints).

Only ``netcheck.errors.ProtocolError`` subclasses (HandshakeError, FrameError,
MessageError) may escape a parser; anything else, or an input that takes longer than
``--max-input-ms``, is a failure (exit status 1, inputs printed as hex). Reports
throughput, per-target counts and peak memory (tracemalloc and ru_maxrss).

Usage::

    .venv/bin/python scripts/fuzz_protocol.py --iterations 100000 --seed 1
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import random
import resource
import signal
import sys
import threading
import time
import traceback
import tracemalloc
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgpack
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.ciphers.aead import ChaCha20Poly1305

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from netcheck.errors import ProtocolError  # noqa: E402
from netcheck.protocol import (  # noqa: E402
    DEFAULT_LIMITS,
    Ack,
    Bye,
    CoordinatorHandshake,
    Echo,
    EchoReply,
    Error,
    Job,
    Message,
    NodeHandshake,
    Probe,
    ProbeReply,
    ProfileClaim,
    Release,
    Result,
    Role,
    Transport,
    decode_message,
    encode_message,
    open_job,
    seal_job,
)
from netcheck.protocol.codec import message_map  # noqa: E402
from netcheck.protocol.handshake import HANDSHAKE_LIMITS  # noqa: E402
from netcheck.protocol.transport import FRAME_KEY_UPDATE, _aad  # noqa: E402

CLAIM = ProfileClaim(
    profile="fuzz",
    fingerprint={"engine": "torch", "model_id": "synth:tiny", "batch_size": 8},
    software="netcheck fuzz",
)
K_NC, K_CN, SID = bytes(range(32)), bytes(range(32, 64)), bytes(range(16))
JOB_KEY, JOB_NONCE = bytes(range(100, 132)), bytes(12)
INTERESTING = [
    0x00, 0x01, 0x7F, 0x80, 0x8F, 0x90, 0x9F, 0xA0, 0xBF, 0xC0, 0xC1, 0xC2, 0xC3, 0xC4,
    0xC5, 0xC6, 0xC7, 0xCA, 0xCB, 0xCC, 0xCF, 0xD0, 0xD3, 0xD4, 0xD9, 0xDA, 0xDB, 0xDC,
    0xDD, 0xDE, 0xDF, 0xE0, 0xFF,
]  # fmt: skip
TARGETS = ("hello", "welcome", "auth", "frame", "peer_frame", "decode", "job")


class InputTimeout(Exception):
    """Raised by the watchdog when one input runs longer than the bound."""


def _seeded(seed: int) -> Callable[[int], bytes]:
    return random.Random(seed).randbytes


@dataclass
class Fixture:
    """Fixed identities and recorded valid inputs that the mutators start from."""

    node_id: Ed25519PrivateKey
    coord_id: Ed25519PrivateKey
    hello: bytes
    welcome: bytes
    auth: bytes
    frames: list[bytes]
    messages: list[bytes]
    job_plaintexts: list[bytes]

    @classmethod
    def build(cls, seed: int = 0) -> Fixture:
        keys = random.Random(seed ^ 0x5EED)
        node_id = Ed25519PrivateKey.from_private_bytes(keys.randbytes(32))
        coord_id = Ed25519PrivateKey.from_private_bytes(keys.randbytes(32))
        node = NodeHandshake(node_id, coord_id.public_key(), CLAIM, random_bytes=_seeded(1))
        coord = CoordinatorHandshake(coord_id, lambda k: True, random_bytes=_seeded(2))
        hello = node.start()
        welcome = coord.receive_hello(hello)
        auth = node.receive_welcome(welcome)
        coord.receive_auth(auth)
        to_coord: list[Message] = [
            Ack("r1"),
            Result("r1", ((1, 2, 3), (4, 5, 6)), bytes(32), bytes(64)),
            Error("r1", "engine error"),
            EchoReply(7),
            ProbeReply(7, bytes(32)),
            Bye("done"),
        ]
        to_node: list[Message] = [
            Job("r1", bytes(12), bytes(40), 2, 3, 1.5),
            Release("r1", bytes(32)),
            Echo(7),
            Probe(7, bytes(32)),
            Bye("done"),
        ]
        sender = Transport(Role.NODE, K_NC, K_CN, SID, rekey_frames=3)
        frames = [sender.seal(m) for m in to_coord]
        messages = [encode_message(m) for m in (*to_coord, *to_node)]
        messages += [hello, welcome, auth]
        job_plaintexts = [msgpack.packb(["a prompt", "another"]), msgpack.packb([])]
        return cls(node_id, coord_id, hello, welcome, auth, frames, messages, job_plaintexts)


# --- mutators --------------------------------------------------------------------------


def _random_obj(rng: random.Random, depth: int = 0) -> Any:
    kind = rng.randrange(12 if depth < 4 else 7)
    if kind == 0:
        return None
    if kind == 1:
        return rng.random() < 0.5
    if kind == 2:
        return rng.choice([0, 1, -1, 127, 128, 255, 2**31, 2**63 - 1, -(2**63), 2**64 - 1])
    if kind == 3:
        return rng.randrange(-(2**40), 2**40)
    if kind == 4:
        return rng.choice([0.0, -0.0, 1.5, float("inf"), float("nan"), 1e308])
    if kind == 5:
        return rng.choice(["", "t", "hello", "auth", "r1", "\udc80"[:0] + "é", "x" * 70])
    if kind == 6:
        return rng.randbytes(rng.choice([0, 1, 12, 16, 31, 32, 33, 64, 65]))
    if kind in (7, 8):
        return [_random_obj(rng, depth + 1) for _ in range(rng.randrange(6))]
    keys = ["t", "round_id", "nonce", "versions", "claim", "outputs", "reason", "x"]
    out: dict[Any, Any] = {}
    for _ in range(rng.randrange(6)):
        out[rng.choice(keys)] = _random_obj(rng, depth + 1)
    if rng.random() < 0.5:
        out["t"] = rng.choice(
            ["hello", "welcome", "auth", "job", "ack", "release", "result", "echo", "bye"]
        )
    return out


def _pack(obj: Any) -> bytes:
    try:
        return bytes(msgpack.packb(obj, use_bin_type=True))
    except (ValueError, TypeError, OverflowError):
        return b"\xc0"


def _field_edit(rng: random.Random, data: bytes) -> bytes:
    """Decode a valid message, replace/drop/add one field, re-encode (no limits)."""
    try:
        msg = decode_message(data)
    except ProtocolError:
        return data
    wire = message_map(msg)
    names = list(wire)
    op = rng.randrange(4)
    name = rng.choice(names)
    if op == 0:
        wire[name] = _random_obj(rng)
    elif op == 1:
        del wire[name]
    elif op == 2:
        wire[rng.choice(["extra", "t2", name + "_"])] = _random_obj(rng)
    else:
        value = wire[name]
        if isinstance(value, bytes) and value:
            wire[name] = value[:-1] if rng.random() < 0.5 else value + b"\x00"
        elif isinstance(value, str):
            wire[name] = value * rng.randrange(2, 80)
        elif isinstance(value, int) and not isinstance(value, bool):
            wire[name] = rng.choice([-1, 0, 2**31, 2**63 - 1, 2**64 - 1, True])
        else:
            wire[name] = [wire[name]] * rng.randrange(2, 20)
    return _pack(wire)


def _lying_header(rng: random.Random) -> bytes:
    head = rng.choice(
        [b"\xdd\xff\xff\xff\xff", b"\xdf\xff\xff\xff\xff", b"\xdb\xff\xff\xff\xff",
         b"\xc6\xff\xff\xff\xff", b"\xdc\xff\xff", b"\xde\xff\xff", b"\xc9\xff\xff\xff\xff\x01"]
    )  # fmt: skip
    return head + rng.randbytes(rng.randrange(0, 32))


def _large(rng: random.Random) -> bytes:
    """Megabytes of small objects: the amplifying inputs of §4.2 (rarely chosen)."""
    size = rng.choice([1 << 20, 4 << 20, 8 << 20])
    unit = rng.choice([b"\x80", b"\x90", b"\x00", b"\xc0"])
    inner = b"\xdc\xff\xff" + unit * 65535
    count = max(1, size // len(inner))
    return b"\xdc" + count.to_bytes(2, "big") + inner * count


def mutate(rng: random.Random, data: bytes, corpus: list[bytes]) -> tuple[str, bytes]:
    """One mutation of ``data``; returns (mutator name, new bytes)."""
    op = rng.randrange(100)
    buf = bytearray(data)
    if op < 20 and buf:
        for _ in range(rng.randrange(1, 9)):
            buf[rng.randrange(len(buf))] ^= 1 << rng.randrange(8)
        return "bitflip", bytes(buf)
    if op < 30 and buf:
        for _ in range(rng.randrange(1, 4)):
            buf[rng.randrange(len(buf))] = rng.choice(INTERESTING)
        return "interesting", bytes(buf)
    if op < 42:
        return "truncate", bytes(buf[: rng.randrange(len(buf) + 1)])
    if op < 48:
        return "append", bytes(buf) + rng.randbytes(rng.randrange(1, 64))
    if op < 58:
        other = rng.choice(corpus)
        return "splice", bytes(buf[: rng.randrange(len(buf) + 1)]) + other[
            rng.randrange(len(other) + 1) :
        ]
    if op < 64 and buf:
        i, j = sorted(rng.randrange(len(buf) + 1) for _ in range(2))
        kind = rng.randrange(3)
        if kind == 0:
            return "delete", bytes(buf[:i] + buf[j:])
        if kind == 1:
            return "duplicate", bytes(buf[:j] + buf[i:j] + buf[j:])
        return "insert", bytes(buf[:i] + rng.randbytes(rng.randrange(1, 16)) + buf[i:])
    if op < 70:
        return "random_bytes", rng.randbytes(rng.randrange(0, 300))
    if op < 80:
        return "random_msgpack", _pack(_random_obj(rng))
    if op < 95:
        return "field_edit", _field_edit(rng, data)
    if op < 99:
        return "lying_header", _lying_header(rng)
    if rng.random() < 0.02:  # ~1 in 5,000 inputs: each costs up to ~0.5 s (2.5 s traced)
        return "large", _large(rng)
    return "unchanged", data


# --- targets ---------------------------------------------------------------------------


def _seal_as_peer(plaintext: bytes, key_update: bool) -> bytes:
    """A frame sealed correctly by the node around any plaintext (a malicious peer)."""
    ftype = FRAME_KEY_UPDATE if key_update else 1
    ctr = bytes(8)
    sealed = ChaCha20Poly1305(K_NC).encrypt(
        bytes(4) + ctr, plaintext, _aad(SID, Role.NODE, ctr, ftype)
    )
    return bytes([ftype]) + ctr + sealed


class Fuzzer:
    """Runs inputs against the targets; collects counts, timings and failures."""

    def __init__(self, fixture: Fixture, seed: int) -> None:
        self.fx = fixture
        self.rng = random.Random(seed)
        self.corpus = [fixture.hello, fixture.welcome, fixture.auth, *fixture.frames]
        self.corpus += fixture.messages

    def _hello(self, data: bytes) -> None:
        CoordinatorHandshake(self.fx.coord_id, lambda k: True).receive_hello(data)

    def _welcome(self, data: bytes) -> None:
        node = NodeHandshake(
            self.fx.node_id, self.fx.coord_id.public_key(), CLAIM, random_bytes=_seeded(1)
        )
        node.start()
        node.receive_welcome(data)

    def _auth(self, data: bytes) -> None:
        coord = CoordinatorHandshake(self.fx.coord_id, lambda k: True, random_bytes=_seeded(2))
        coord.receive_hello(self.fx.hello)
        coord.receive_auth(data)

    def _frame(self, data: bytes) -> None:
        receiver = Transport(Role.COORDINATOR, K_CN, K_NC, SID)
        # The recorded frames carry counters 0..4; open the valid prefix first so that a
        # mutated frame i meets the receiver at counter i.
        counter = int.from_bytes(data[1:9], "big") if len(data) >= 9 else 0
        for frame in self.fx.frames[: min(counter, len(self.fx.frames))]:
            receiver.open(frame)
        receiver.open(data)

    def _peer_frame(self, data: bytes) -> None:
        receiver = Transport(Role.COORDINATOR, K_CN, K_NC, SID)
        receiver.open(_seal_as_peer(data, self.rng.random() < 0.2))

    def _decode(self, data: bytes) -> None:
        decode_message(data, limits=HANDSHAKE_LIMITS if self.rng.random() < 0.3 else DEFAULT_LIMITS)

    def _job(self, data: bytes) -> None:
        sealed = ChaCha20Poly1305(JOB_KEY).encrypt(JOB_NONCE, data, b"netcheck/1 job\0r1")
        open_job(sealed, JOB_KEY, "r1", JOB_NONCE)

    def pick(self) -> tuple[str, Callable[[bytes], None], bytes]:
        """Choose a target and the valid input its mutations start from."""
        target = self.rng.choice(TARGETS)
        fx = self.fx
        seeds: dict[str, list[bytes]] = {
            "hello": [fx.hello],
            "welcome": [fx.welcome],
            "auth": [fx.auth],
            "frame": fx.frames,
            "peer_frame": fx.messages,
            "decode": fx.messages,
            "job": [*fx.job_plaintexts, seal_job(["p"], JOB_KEY, "r1", JOB_NONCE)],
        }
        fn = getattr(self, "_" + target)
        return target, fn, self.rng.choice(seeds[target])


@dataclass
class Summary:
    """What a fuzz run found (times in seconds, memory in bytes)."""

    iterations: int
    seed: int
    elapsed_s: float
    per_target: dict[str, int] = field(default_factory=dict)
    per_mutator: dict[str, int] = field(default_factory=dict)
    outcomes: dict[str, int] = field(default_factory=dict)
    failures: list[dict[str, str]] = field(default_factory=list)
    slowest_s: float = 0.0
    slowest_target: str = ""
    tracemalloc_peak_bytes: int | None = None
    ru_maxrss_bytes: int = 0
    max_input_bytes: int = 0

    @property
    def inputs_per_s(self) -> float:
        return self.iterations / self.elapsed_s if self.elapsed_s else 0.0

    def as_dict(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        out["inputs_per_s"] = self.inputs_per_s
        return out


def _alarm(_signum: int, _frame: Any) -> None:
    raise InputTimeout


def run(
    iterations: int,
    seed: int = 0,
    *,
    max_input_ms: float = 5000.0,
    trace_memory: bool = True,
    progress: bool = False,
) -> Summary:
    """Fuzz ``iterations`` inputs with a deterministic ``seed``; never raises for a
    parser failure (they are collected in ``Summary.failures``)."""
    fuzzer = Fuzzer(Fixture.build(seed), seed)
    summary = Summary(iterations, seed, 0.0)
    targets: Counter[str] = Counter()
    mutators: Counter[str] = Counter()
    outcomes: Counter[str] = Counter()
    watchdog = threading.current_thread() is threading.main_thread() and hasattr(
        signal, "setitimer"
    )
    old_handler = signal.signal(signal.SIGALRM, _alarm) if watchdog else None
    if trace_memory:
        tracemalloc.start()
    started = time.perf_counter()
    try:
        for i in range(iterations):
            target, fn, base = fuzzer.pick()
            mutator, data = mutate(fuzzer.rng, base, fuzzer.corpus)
            targets[target] += 1
            mutators[mutator] += 1
            summary.max_input_bytes = max(summary.max_input_bytes, len(data))
            t0 = time.perf_counter()
            try:
                if watchdog:
                    signal.setitimer(signal.ITIMER_REAL, max_input_ms / 1000.0)
                try:
                    fn(data)
                finally:
                    if watchdog:
                        signal.setitimer(signal.ITIMER_REAL, 0)
                outcomes["accepted"] += 1
            except ProtocolError as exc:
                outcomes[exc.code.name] += 1
            except InputTimeout:
                summary.failures.append(
                    {"target": target, "mutator": mutator, "error": "timeout",
                     "input": data[:512].hex()}
                )  # fmt: skip
            except Exception as exc:  # noqa: BLE001 - any other exception is a finding
                summary.failures.append(
                    {"target": target, "mutator": mutator, "error": repr(exc)[:300],
                     "traceback": traceback.format_exc()[-2000:], "input": data[:512].hex()}
                )  # fmt: skip
            dt = time.perf_counter() - t0
            if dt > summary.slowest_s:
                summary.slowest_s, summary.slowest_target = dt, f"{target}/{mutator}"
            if dt * 1000.0 > max_input_ms and not any(
                f["input"] == data[:512].hex() for f in summary.failures[-1:]
            ):
                summary.failures.append(
                    {"target": target, "mutator": mutator, "error": f"slow: {dt:.3f} s",
                     "input": data[:512].hex()}
                )  # fmt: skip
            if progress and (i + 1) % 10000 == 0:
                rate = (i + 1) / (time.perf_counter() - started)
                print(f"  {i + 1} inputs, {rate:.0f}/s", file=sys.stderr)
    finally:
        summary.elapsed_s = time.perf_counter() - started
        if trace_memory:
            summary.tracemalloc_peak_bytes = tracemalloc.get_traced_memory()[1]
            tracemalloc.stop()
        if watchdog:
            signal.signal(signal.SIGALRM, old_handler)
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    summary.ru_maxrss_bytes = rss if sys.platform == "darwin" else rss * 1024
    summary.per_target = dict(sorted(targets.items()))
    summary.per_mutator = dict(sorted(mutators.items()))
    summary.outcomes = dict(sorted(outcomes.items(), key=lambda kv: -kv[1]))
    return summary


def _mib(n: int | None) -> str:
    return "n/a" if n is None else f"{n / (1 << 20):.1f} MiB"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--iterations", type=int, default=100_000)
    parser.add_argument("--seed", type=int, default=0, help="deterministic seed (default 0)")
    parser.add_argument(
        "--max-input-ms",
        type=float,
        default=5000.0,
        help="per-input time bound in ms (default 5000; tracemalloc slows decoding ~5x)",
    )
    parser.add_argument("--no-tracemalloc", action="store_true", help="faster, no peak")
    parser.add_argument("--json", type=Path, help="also write the summary as JSON here")
    args = parser.parse_args(argv)
    summary = run(
        args.iterations,
        args.seed,
        max_input_ms=args.max_input_ms,
        trace_memory=not args.no_tracemalloc,
        progress=True,
    )
    print(f"netcheck/1 fuzz: {summary.iterations} inputs, seed {summary.seed}")
    print(f"  elapsed            {summary.elapsed_s:.1f} s ({summary.inputs_per_s:.0f} inputs/s)")
    print(f"  slowest input      {summary.slowest_s * 1000:.1f} ms ({summary.slowest_target})")
    print(f"  largest input      {summary.max_input_bytes} bytes")
    print(f"  tracemalloc peak   {_mib(summary.tracemalloc_peak_bytes)}")
    print(f"  ru_maxrss          {_mib(summary.ru_maxrss_bytes)}")
    print(f"  per target         {summary.per_target}")
    print(f"  per mutator        {summary.per_mutator}")
    print(f"  outcomes           {summary.outcomes}")
    print(f"  failures           {len(summary.failures)}")
    for failure in summary.failures[:20]:
        print(json.dumps(failure, indent=2))
    if args.json:
        args.json.write_text(json.dumps(summary.as_dict(), indent=2))
    return 1 if summary.failures else 0


if __name__ == "__main__":
    raise SystemExit(main())
