"""EMULATION (lab only): nodes that answer after a KNOWN service time and record, on the
machine's shared monotonic clock, when their result was written. Ground truth for the
timing-accuracy benchmark (``scripts/bench_timing.py``) and its test.

Each node is a real session (:class:`netcheck.lab.load.LoadClient`: handshake, encrypted
frames, signed receipts) whose engine is :class:`netcheck.lab.load.HashWorker` (outputs are
a hash of the prompt; ``vocab`` 128,256 gives results as large as a real H200 profile's).
On ``release`` it waits ``COMPUTE_AFTER_S`` (so its CPU work does not compete with the
coordinator's release loop), decrypts the job, computes, commits, signs and seals the
result, then holds the sealed frame until its send time and writes it:

- ``--mode instant``: every node of this host sends at ``anchor + service_s`` where the
  anchor is the first release this host read in the round: all of them *answer at the
  same instant* (the burst that used to bias arrival stamps);
- ``--mode own``: each node sends at its own release read + its service time.

Node ``i`` (global index) has service time ``service_s + spread_s * i / (total - 1)``.
After each round, one JSON line per node goes to ``--stamps``: ``node_key``,
``round_id``, ``service_s`` (designed), ``release_read_ns``, ``target_ns`` (when it
meant to send), ``send_start_ns`` and ``written_ns`` (before and after the websocket
write), ``tx_sched_ns``/``tx_snd_ns`` (the kernel's transmit stamps of the frame's last
byte, :mod:`netcheck.lab.txstamps`; None where unavailable), all on the monotonic clock. On Linux ``CLOCK_MONOTONIC`` is one clock for all
processes of a machine, so these compare directly with the coordinator's stamps.

    python -m netcheck.lab.timed_nodes --url ws://... --coordinator-key ed25519:... \\
        --profile load-tiny --max-new-tokens 32 --vocab 128256 --count 500 \\
        --service 0.05 --spread 0 --mode instant --stamps stamps.jsonl --report ready.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import signal
import socket
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import aiohttp
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from netcheck.keys import parse_public_key, public_key_text
from netcheck.lab.load import HashWorker, LoadClient, raise_fd_limit, source_address
from netcheck.lab.txstamps import TxStamps
from netcheck.node.serving import OpenSession
from netcheck.protocol.jobs import commitment, open_job, sign_receipt
from netcheck.protocol.messages import Job, Message, Release, Result

log = logging.getLogger("netcheck.lab.timed_nodes")

#: Seconds after reading its release before a node starts computing its result.
COMPUTE_AFTER_S = 0.3
#: SO_SNDBUF of each timed node's socket (bytes): room for a whole H200-sized result.
SNDBUF_BYTES = 1 << 20
#: ``TCP_CONGESTION`` (Linux, netinet/tcp.h); Python 3.11 defines it on Linux.
TCP_CONGESTION = getattr(socket, "TCP_CONGESTION", 13)


class Clock:
    """Per-host round anchors and the stamp log shared by this host's nodes."""

    def __init__(self, mode: str, out: Path | None, congestion: str | None = None) -> None:
        self.mode = mode
        self.out = out
        #: TCP congestion control of this host's node sockets (None: the system's).
        self.congestion = congestion
        self.anchors: dict[str, int] = {}
        self.rows: list[dict[str, Any]] = []
        self.cpu = asyncio.Lock()  # one node's result computed at a time

    def anchor(self, round_id: str, read_ns: int) -> int:
        return self.anchors.setdefault(round_id, read_ns)

    def record(self, row: dict[str, Any]) -> None:
        self.rows.append(row)
        if self.out is not None:
            with self.out.open("a") as f:
                f.write(json.dumps(row) + "\n")


class TimedClient(LoadClient):
    """EMULATION: a load node that answers ``service_s`` after release (see module doc)."""

    def __init__(self, *args: Any, service_s: float, clock: Clock, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.service_s = service_s
        self.clock = clock
        self.tx: dict[int, TxStamps] = {}  # per session (id), when the kernel allows

    async def _handshake(self, ws: aiohttp.ClientWebSocketResponse) -> OpenSession:
        session = await super()._handshake(ws)
        # A send buffer large enough for a whole result: the frame leaves in the one
        # send() call right after ``send_start_ns`` instead of partly waiting in user
        # space for this (busy) process's loop to flush it (which would be the
        # emulator's delay, not the coordinator's).
        sock = _transport(ws).get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, SNDBUF_BYTES)
            try:  # kernel transmit stamps: split the stamp error into sender and path
                self.tx[id(session)] = TxStamps(sock)
            except OSError as exc:
                log.debug("no transmit timestamps: %s", exc)
            if self.clock.congestion:
                # e.g. "reno": no internal pacing. With BBR (and no fq qdisc) the kernel
                # paces each socket with an hrtimer whose work runs in softirq context;
                # on a host loaded by 1,000 emulated nodes that work can wait for
                # ksoftirqd, delaying the frame in *this* host's stack after send()
                # returned: the emulator's delay, not the coordinator's.
                sock.setsockopt(socket.IPPROTO_TCP, TCP_CONGESTION, self.clock.congestion.encode())
        return session

    async def _handle(self, session: OpenSession, msg: Message) -> None:
        if not isinstance(msg, Release) or msg.round_id not in session.jobs:
            await super()._handle(session, msg)
            return
        read_ns = time.monotonic_ns()
        job = session.jobs.pop(msg.round_id)
        task = asyncio.get_running_loop().create_task(self._answer(session, job, msg, read_ns))
        session.tasks.add(task)
        task.add_done_callback(session.tasks.discard)

    async def _answer(self, session: OpenSession, job: Job, release: Release, read_ns: int) -> None:
        # Compute only after the coordinator's release loop is over, so this host's CPU
        # work does not compete with it (the benchmark compares that loop with a floor
        # measured against clients that only read).
        await asyncio.sleep(COMPUTE_AFTER_S)
        # One node computes at a time, yielding between nodes: otherwise a thousand
        # ready tasks of ~3 ms each run in one loop iteration and this host answers
        # no websocket ping for seconds (the coordinator then drops its sessions).
        async with self.clock.cpu:
            prompts = open_job(job.ciphertext, release.job_key, job.round_id, job.nonce)
            outputs = await self.worker.run(prompts)
            packed = tuple(tuple(o) for o in outputs)
            digest = commitment(packed)
            sig = sign_receipt(self.identity, session.transport.session_id, job.round_id, digest)
            result = Result(round_id=job.round_id, outputs=packed, commitment=digest, signature=sig)
            await asyncio.sleep(0)
        base = self.clock.anchor(job.round_id, read_ns) if self.clock.mode == "instant" else read_ns
        target_ns = base + int(self.service_s * 1e9)
        async with session.lock:
            frame = session.seal(result)
            wait = (target_ns - time.monotonic_ns()) / 1e9
            if wait > 0:
                await asyncio.sleep(wait)
            tx = self.tx.get(id(session))
            if tx is not None:
                tx.drain()  # older stamps (pongs, acks of the job) are not this frame's
            start = time.monotonic_ns()
            try:
                await session.ws.send_bytes(frame)
            except ConnectionError:
                return
            written = time.monotonic_ns()
            left = _transport(session.ws).get_write_buffer_size()
            sent = await _tx_stamps(tx, left)
        self.rounds_served += 1
        self.clock.record(
            {
                "node_key": public_key_text(self.identity),
                "round_id": job.round_id,
                "service_s": self.service_s,
                "release_read_ns": read_ns,
                "target_ns": target_ns,
                "send_start_ns": start,
                "written_ns": written,
                "frame_bytes": len(frame),
                "left_in_buffer": left,  # bytes not yet handed to the kernel (0 wanted)
                **sent,  # tx_sched_ns / tx_snd_ns: kernel transmit stamps, or None
            }
        )


async def _tx_stamps(tx: TxStamps | None, left: int) -> dict[str, int | None]:
    """The frame's kernel transmit stamps (monotonic ns), waiting up to 1 s for its
    last byte to leave this host's stack; None values when they cannot be had."""
    none: dict[str, int | None] = {"tx_sched_ns": None, "tx_snd_ns": None}
    if tx is None or left:
        return none
    for _ in range(1000):
        if not tx.unsent():
            return tx.last_sent(0)
        await asyncio.sleep(0.001)
    tx.drain()
    return none


def _transport(ws: aiohttp.ClientWebSocketResponse) -> Any:
    return ws._writer.transport  # aiohttp's socket transport of this websocket


def service_time(index: int, total: int, service_s: float, spread_s: float) -> float:
    """Designed service time of node ``index`` of ``total`` (seconds)."""
    return service_s + spread_s * index / max(total - 1, 1)


async def run_timed_nodes(
    url: str,
    coordinator_key: str,
    profile: str,
    max_new_tokens: int,
    count: int,
    *,
    vocab: int,
    service_s: float,
    spread_s: float,
    mode: str,
    first_index: int = 0,
    total: int | None = None,
    stamps: Path | None = None,
    report: Path | None = None,
    stop: asyncio.Event | None = None,
    congestion: str | None = None,
) -> list[TimedClient]:
    """Run ``count`` timed nodes (global indexes from ``first_index`` of ``total``) until
    ``stop`` is set; write ``{"connected": n}`` to ``report`` when all are connected."""
    stop = stop or asyncio.Event()
    clock = Clock(mode, stamps, congestion)
    total = total or count
    key = parse_public_key(coordinator_key)
    clients = [
        TimedClient(
            url,
            Ed25519PrivateKey.generate(),
            key,
            profile,
            HashWorker(max_new_tokens, vocab=vocab),
            label=f"timed-{first_index + i}",
            local_addr=source_address(first_index + i),
            service_s=service_time(first_index + i, total, service_s, spread_s),
            clock=clock,
        )
        for i in range(count)
    ]
    tasks = [asyncio.create_task(c.run_forever(stop)) for c in clients]
    if report is not None:
        while not stop.is_set():
            if all(c.handshake_done_at is not None for c in clients):
                report.write_text(json.dumps({"connected": count}) + "\n")
                break
            await asyncio.sleep(0.05)
    await stop.wait()
    for t in tasks:
        t.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    return clients


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m netcheck.lab.timed_nodes``: a client host of timed nodes."""
    ap = argparse.ArgumentParser(prog="python -m netcheck.lab.timed_nodes", description=__doc__)
    ap.add_argument("--url", required=True)
    ap.add_argument("--coordinator-key", required=True)
    ap.add_argument("--profile", required=True)
    ap.add_argument("--max-new-tokens", type=int, required=True)
    ap.add_argument("--vocab", type=int, default=258)
    ap.add_argument("--count", type=int, default=1)
    ap.add_argument("--first-index", type=int, default=0)
    ap.add_argument("--total", type=int, help="nodes over all hosts (for the spread)")
    ap.add_argument("--service", type=float, default=0.05, help="EMULATED service time (s)")
    ap.add_argument("--spread", type=float, default=0.0, help="service times spread (s)")
    ap.add_argument("--mode", choices=("instant", "own"), default="instant")
    ap.add_argument("--stamps", type=Path)
    ap.add_argument("--report", type=Path)
    ap.add_argument(
        "--congestion", help="TCP congestion control of the node sockets (default: system's)"
    )
    ap.add_argument("--log-level", default="WARNING")
    args = ap.parse_args(argv)
    logging.basicConfig(level=args.log_level, stream=sys.stderr)
    raise_fd_limit()

    async def go() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        await run_timed_nodes(
            args.url, args.coordinator_key, args.profile, args.max_new_tokens, args.count,
            vocab=args.vocab, service_s=args.service, spread_s=args.spread, mode=args.mode,
            first_index=args.first_index, total=args.total, stamps=args.stamps,
            report=args.report, stop=stop, congestion=args.congestion,
        )  # fmt: skip

    asyncio.run(go())
    return 0


if __name__ == "__main__":
    sys.exit(main())


#: Stamp error bounds (ms) that ``tests/coordinator/test_timing_accuracy.py`` holds for
#: 200 nodes answering at once (best of 3 rounds). They are loose because that test
#: must pass on the shared 2-core development machine at load averages of 10-20, where
#: the OS alone delays a runnable process by tens of ms; they still fail the old
#: stamp-in-the-reader code (p50 330-370 ms measured there). ``scripts/bench_timing.py``
#: measures what a given machine holds (docs/scaling.md, "Timing accuracy").
STAMP_P50_BOUND_MS = 10.0
STAMP_P99_BOUND_MS = 50.0
