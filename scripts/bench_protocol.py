#!/usr/bin/env python3
"""Benchmarks of netcheck/1 for the issue's closing note (docs/protocol.md §2-§4).

Prints one table, each row with a baseline measured in the same run and the ratio:

- handshakes/s per core: the full 3-message handshake, both sides in one process
  (baseline: the raw primitives alone: 2 X25519 keygens + 2 exchanges, 2 Ed25519
  sign + verify, one HKDF);
- frames/s per core, seal + open, for a 64 KiB and a 100 B payload (a ``job`` whose
  ciphertext field holds the payload), also with a key update on every frame
  (baseline: raw ChaCha20-Poly1305 encrypt + decrypt of the same bytes, RFC 8439);
- the Python-object expansion the decoder limits allow (tracemalloc peak while
  decoding / wire bytes) for worst cases built within the limits, against plain
  ``msgpack.unpackb`` without netcheck's limits;
- the fuzz run's peak memory, read from ``scripts/fuzz_protocol.py --json FILE``.

One process, one thread: "per core" means one CPU core. Usage::

    .venv/bin/python scripts/bench_protocol.py [--seconds 1.0] [--fuzz-json FILE]
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import sys
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path

import msgpack
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey
from cryptography.hazmat.primitives.ciphers.aead import ChaCha20Poly1305
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from netcheck.errors import MessageError  # noqa: E402
from netcheck.protocol import (  # noqa: E402
    DEFAULT_LIMITS,
    CoordinatorHandshake,
    Job,
    NodeHandshake,
    ProfileClaim,
    Role,
    Transport,
)
from netcheck.protocol.codec import _unpack  # noqa: E402

CLAIM = ProfileClaim(
    profile="bench",
    fingerprint={"engine": "torch", "model_id": "synth:tiny", "batch_size": 8},
    software="netcheck bench",
)
K_NC, K_CN, SID = bytes(range(32)), bytes(range(32, 64)), bytes(range(16))
MIB = 1 << 20


def rate(fn: Callable[[], None], seconds: float) -> float:
    """Calls per second of ``fn`` over at least ``seconds`` (after one warm-up call)."""
    fn()
    n, started = 0, time.perf_counter()
    deadline = started + seconds
    while True:
        fn()
        n += 1
        now = time.perf_counter()
        if now >= deadline:
            return n / (now - started)


# --- handshakes ------------------------------------------------------------------------


def bench_handshake(seconds: float) -> tuple[float, float]:
    node_id, coord_id = Ed25519PrivateKey.generate(), Ed25519PrivateKey.generate()
    coord_pub = coord_id.public_key()

    def full() -> None:
        node = NodeHandshake(node_id, coord_pub, CLAIM)
        coord = CoordinatorHandshake(coord_id, lambda k: True)
        coord.receive_auth(node.receive_welcome(coord.receive_hello(node.start())))

    node_pub = node_id.public_key()

    def primitives() -> None:
        a, b = X25519PrivateKey.generate(), X25519PrivateKey.generate()
        shared = a.exchange(b.public_key())
        b.exchange(a.public_key())
        sig1 = coord_id.sign(b"x" * 55)
        coord_pub.verify(sig1, b"x" * 55)
        sig2 = node_id.sign(b"y" * 48)
        node_pub.verify(sig2, b"y" * 48)
        HKDF(hashes.SHA256(), 80, salt=bytes(32), info=b"i").derive(shared)

    return rate(full, seconds), rate(primitives, seconds)


# --- frames ----------------------------------------------------------------------------


def bench_frames(payload: int, seconds: float, rekey_frames: int = 2**20) -> tuple[float, float]:
    coord = Transport(
        Role.COORDINATOR, K_CN, K_NC, SID, max_counter=2**64, rekey_frames=rekey_frames
    )
    node = Transport(Role.NODE, K_NC, K_CN, SID, max_counter=2**64, rekey_frames=rekey_frames)
    job = Job("r1", bytes(12), bytes(payload), 1, 1, 1.0)

    def framed() -> None:
        node.open(coord.seal(job))

    aead = ChaCha20Poly1305(K_CN)
    plaintext = bytes(payload)
    counter = [0]

    def raw() -> None:
        nonce = bytes(4) + counter[0].to_bytes(8, "big")
        counter[0] += 1
        aead.decrypt(nonce, aead.encrypt(nonce, plaintext, SID), SID)

    return rate(framed, seconds), rate(raw, seconds)


# --- expansion -------------------------------------------------------------------------


def _arrays_of(unit: bytes, count: int) -> bytes:
    """msgpack: one array of arrays holding ``count`` copies of the encoded ``unit``."""
    per = 65535
    full, rest = divmod(count, per)
    inner = [b"\xdc\xff\xff" + unit * per] * full
    if rest:
        inner.append(b"\xdc" + rest.to_bytes(2, "big") + unit * rest)
    return b"\xdc" + len(inner).to_bytes(2, "big") + b"".join(inner)


def _distinct(fmt: Callable[[int], bytes], count: int) -> bytes:
    per = 65535
    chunks = []
    for start in range(0, count, per):
        n = min(per, count - start)
        chunks.append(b"\xdc" + n.to_bytes(2, "big") + b"".join(fmt(start + i) for i in range(n)))
    return b"\xdc" + len(chunks).to_bytes(2, "big") + b"".join(chunks)


def _str2(i: int) -> bytes:
    return b"\xa2" + bytes([48 + i % 64, 48 + (i // 64) % 64])


def worst_cases() -> dict[str, bytes]:
    """Inputs within the default limits (2,000,000 objects, depth 8, 8 MiB), built to
    maximise Python objects per wire byte, plus the same floods at the size cap."""
    budget = DEFAULT_LIMITS.max_objects
    # An array of n elements costs n + 1 budget units; an empty map or array 1.
    fit = budget // 2 - 64  # elements per case so that container + elements fit
    return {
        "empty maps (within budget)": _arrays_of(b"\x80", fit),
        "empty arrays (within budget)": _arrays_of(b"\x90", fit),
        "maps {'a': nil} (within budget)": _arrays_of(b"\x81\xa1a\xc0", budget // 3 - 64),
        "2-char str, distinct (within budget)": _distinct(_str2, budget - 64),
        "2-byte bin (within budget)": _arrays_of(b"\xc4\x02\x00\x00", budget - 64),
        "uint64 (within budget)": _arrays_of(b"\xcf" + (2**63).to_bytes(8, "big"), 900_000),
        "float32 (within budget)": _arrays_of(b"\xca\x3f\x80\x00\x01", (8 * MIB - 1024) // 5),
        "small ints, cached (within budget)": _arrays_of(b"\x01", budget - 64),
        "maps {'a': nil} + bin padding (size cap)": _padded(
            _arrays_of(b"\x81\xa1a\xc0", budget // 3 - 64), 8 * MIB
        ),
        "empty maps, 8 MiB (size cap)": _arrays_of(b"\x80", 8 * MIB - 1024),
    }


def _padded(body: bytes, total: int) -> bytes:
    """``[body, bin(padding)]`` encoded in exactly ``total`` bytes (a frame at the cap)."""
    pad = total - len(body) - 1 - 5
    return b"\x92" + body + b"\xc6" + pad.to_bytes(4, "big") + bytes(pad)


def measure_decode(data: bytes, decode: Callable[[bytes], object]) -> tuple[int, float, str]:
    """(tracemalloc peak bytes, seconds without tracing, outcome) of decoding ``data``."""
    gc.collect()
    started = time.perf_counter()
    with contextlib.suppress(MessageError):
        decode(data)
    elapsed = time.perf_counter() - started
    gc.collect()
    tracemalloc.start()
    try:
        obj = decode(data)
        outcome = "decoded"
    except MessageError as exc:
        obj, outcome = None, f"refused ({exc.code.name})"
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    del obj
    gc.collect()
    return peak, elapsed, outcome


def _plain(data: bytes) -> object:
    return msgpack.unpackb(data, raw=False, strict_map_key=False)


def _limited(data: bytes) -> object:
    return _unpack(data, DEFAULT_LIMITS)  # the decoder behind decode_message, §4.2


# --- report ----------------------------------------------------------------------------


def _row(name: str, ours: str, base: str, ratio: str) -> str:
    return f"| {name} | {ours} | {base} | {ratio} |"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=1.0, help="per throughput case")
    parser.add_argument("--fuzz-json", type=Path, help="summary from fuzz_protocol.py --json")
    parser.add_argument("--skip-baseline-expansion", action="store_true",
                        help="skip unlimited msgpack on 8 MiB (needs ~600 MiB RAM)")  # fmt: skip
    args = parser.parse_args(argv)
    rows = [
        "| metric (one core) | netcheck | baseline | netcheck / baseline |",
        "|---|---|---|---|",
    ]
    hs, prim = bench_handshake(args.seconds)
    rows.append(_row("handshakes/s (3 messages, both sides)", f"{hs:,.0f}",
                     f"{prim:,.0f} (raw X25519+Ed25519+HKDF)", f"{hs / prim:.2f}"))  # fmt: skip
    for label, size, rekey in [
        ("frames/s, 64 KiB payload, seal+open", 64 * 1024, 2**20),
        ("frames/s, 100 B payload, seal+open", 100, 2**20),
        ("frames/s, 64 KiB, key update every frame", 64 * 1024, 1),
        ("frames/s, 100 B, key update every frame", 100, 1),
    ]:
        ours, raw = bench_frames(size, args.seconds, rekey)
        mb = ours * size / MIB
        rows.append(_row(label, f"{ours:,.0f} ({mb:,.0f} MiB/s)",
                         f"{raw:,.0f} (raw ChaCha20-Poly1305)", f"{ours / raw:.2f}"))  # fmt: skip
    rows.append("")
    rows.append("| decoder input (wire bytes) | netcheck limits: peak, factor | "
                "plain msgpack.unpackb: peak, factor | peak ratio |")  # fmt: skip
    rows.append("|---|---|---|---|")
    worst = 0.0
    for name, data in worst_cases().items():
        peak, secs, outcome = measure_decode(data, _limited)
        factor = peak / len(data)
        if outcome == "decoded":
            worst = max(worst, factor)
        skip = args.skip_baseline_expansion and len(data) > 4 * MIB
        if skip:
            base_txt, ratio = "skipped", "-"
        else:
            bpeak, bsecs, _ = measure_decode(data, _plain)
            base_txt = f"{bpeak / MIB:,.1f} MiB, {bpeak / len(data):.1f}x, {bsecs:.2f} s"
            ratio = f"{peak / bpeak:.2f}"
        rows.append(_row(f"{name} ({len(data) / MIB:.2f} MiB)",
                         f"{peak / MIB:,.1f} MiB, {factor:.1f}x, {secs:.2f} s, {outcome}",
                         base_txt, ratio))  # fmt: skip
    rows.append("")
    rows.append(f"largest expansion factor allowed by the limits (decoded inputs): {worst:.1f}x")
    cap = 8 * MIB + 25
    rows.append(f"frame at the size cap ({cap:,} bytes): at most the object budget of "
                f"{DEFAULT_LIMITS.max_objects:,} objects decodes; see the 8 MiB rows")  # fmt: skip
    if args.fuzz_json and args.fuzz_json.exists():
        fz = json.loads(args.fuzz_json.read_text())
        rows.append(
            f"fuzz run ({fz['iterations']:,} inputs, seed {fz['seed']}): tracemalloc peak "
            f"{(fz['tracemalloc_peak_bytes'] or 0) / MIB:.1f} MiB, ru_maxrss "
            f"{fz['ru_maxrss_bytes'] / MIB:.1f} MiB, {fz['inputs_per_s']:,.0f} inputs/s, "
            f"{len(fz['failures'])} failures"
        )
    else:
        rows.append("fuzz peak memory: run scripts/fuzz_protocol.py --json FILE, pass --fuzz-json")
    print("\n".join(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
