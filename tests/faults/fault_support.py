"""Helpers of the fault tests: a light profile, raw hand-driven sessions, node processes."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path
from typing import Any

import aiohttp
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from netcheck.config import DeadlineParams, Profile
from netcheck.keys import generate_key, load_private_key, public_key_text
from netcheck.lab.load import FAKE_FINGERPRINT, hash_answer
from netcheck.lab.testing import RunningCoordinator, raw_session, small_profile
from netcheck.protocol.jobs import commitment, open_job, sign_receipt
from netcheck.protocol.messages import Ack, Echo, EchoReply, Job, ProfileClaim, Release, Result
from netcheck.protocol.transport import Transport


def light_profile(**overrides: Any) -> Profile:
    """A small profile for emulated nodes; fields in ``overrides`` replace the defaults."""
    values: dict[str, Any] = {
        "canaries_max": 2,
        "deadline": DeadlineParams(t_ref_s=1.0, slack_s=2.0),
        "dispatch_timeout_s": 2.0,
        "result_timeout_s": 5.0,
    }
    values.update(overrides)
    return small_profile(str(values.pop("name", "faults")), **values)


class RawNode:
    """A node driven by hand over a real websocket (to cut, stall or replay on purpose)."""

    def __init__(
        self,
        http: aiohttp.ClientSession,
        ws: aiohttp.ClientWebSocketResponse,
        transport: Transport,
        identity: Ed25519PrivateKey,
    ) -> None:
        self.http, self.ws, self.transport, self.identity = http, ws, transport, identity
        self.stalled = False

    @classmethod
    async def connect(
        cls, rc: RunningCoordinator, profile: Profile, identity: Ed25519PrivateKey
    ) -> RawNode:
        claim = ProfileClaim(profile=profile.name, fingerprint=FAKE_FINGERPRINT, software="t")
        http, ws, transport = await raw_session(rc, identity, claim)
        return cls(http, ws, transport, identity)

    @property
    def key(self) -> str:
        return public_key_text(self.identity)

    async def until_release(self) -> tuple[Job, Release]:
        """Answer echoes and ack the job like an honest node; return at the release."""
        job = None
        while True:
            msg = self.transport.open((await self.ws.receive(timeout=10.0)).data)
            if isinstance(msg, Echo):
                await self.ws.send_bytes(self.transport.seal(EchoReply(msg.nonce)))
            elif isinstance(msg, Job):
                job = msg
                await self.ws.send_bytes(self.transport.seal(Ack(msg.round_id)))
                return job, await self._next_release()

    async def _next_release(self) -> Release:
        while True:
            msg = self.transport.open((await self.ws.receive(timeout=10.0)).data)
            if isinstance(msg, Release):
                return msg

    async def until_job(self, timeout_s: float = 10.0) -> Job:
        """Answer echoes until the job arrives; ack it and return it.

        Raises:
            TimeoutError: no frame for ``timeout_s`` seconds.
        """
        while True:
            msg = self.transport.open((await self.ws.receive(timeout=timeout_s)).data)
            if isinstance(msg, Echo):
                await self.ws.send_bytes(self.transport.seal(EchoReply(msg.nonce)))
            elif isinstance(msg, Job):
                await self.ws.send_bytes(self.transport.seal(Ack(msg.round_id)))
                return msg

    def honest_result(self, job: Job, release: Release, max_new_tokens: int) -> bytes:
        """The sealed, signed result frame an honest node would send."""
        prompts = open_job(job.ciphertext, release.job_key, job.round_id, job.nonce)
        outputs = tuple(hash_answer(p, max_new_tokens) for p in prompts)
        digest = commitment(outputs)
        sig = sign_receipt(self.identity, self.transport.session_id, job.round_id, digest)
        return self.transport.seal(Result(job.round_id, outputs, digest, sig))

    def stop_reading(self) -> None:
        """Stop reading the socket, as a stalled process would (kernel buffers fill)."""
        self.ws._writer.transport.pause_reading()  # type: ignore[union-attr]
        self.stalled = True

    async def close(self) -> None:
        if self.stalled:  # a close handshake would wait for a peer that does not read
            self.ws._writer.transport.abort()  # type: ignore[union-attr]
        else:
            await self.ws.close()
        await self.http.close()


def node_process(
    rc: RunningCoordinator,
    profile: Profile,
    key_file: Path,
    *,
    delay_s: float,
    log: Path,
) -> subprocess.Popen[bytes]:
    """An emulated node as its own OS process (``python -m netcheck.lab.load nodes``)."""
    if not key_file.exists():
        generate_key(key_file)
    args = [
        sys.executable, "-m", "netcheck.lab.load", "nodes", "--url", rc.url,
        "--coordinator-key", public_key_text(rc.identity), "--profile", profile.name,
        "--max-new-tokens", str(profile.max_new_tokens), "--count", "1",
        "--delay", str(delay_s), "--key-file", str(key_file), "--log-level", "INFO",
    ]  # fmt: skip
    return subprocess.Popen(args, stdout=log.open("ab"), stderr=subprocess.STDOUT)


def key_of(key_file: Path) -> str:
    """Public key text of a node key file."""
    return public_key_text(load_private_key(key_file))


async def wait_for(predicate: Any, timeout_s: float, step_s: float = 0.02) -> None:
    """Poll ``predicate()`` until true (bounded)."""
    async with asyncio.timeout(timeout_s):
        while not predicate():
            await asyncio.sleep(step_s)
