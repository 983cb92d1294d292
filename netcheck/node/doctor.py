"""``netcheck doctor``: check a node's setup before (or instead of) joining for real.

Checks, in order (each later check needs the earlier ones):

1. the node config loads (errors name the file and field);
2. the identity key loads (present, PEM, mode 0600);
3. the profile loads;
4. the coordinator is reachable and is the pinned one: a websocket connection and the
   first two handshake messages (docs/protocol.md §2). The coordinator signs ``welcome``
   only after it admitted our key, so a verified ``welcome`` proves reachability, the
   pinned coordinator key and admission. The doctor then closes without sending
   ``auth``, so it never registers as a session;
5. the engine loads (prints its fingerprint id);
6. a quick selftest passes (repeat determinism and batch-composition invariance at the
   profile's batch shape; :mod:`netcheck.engines.selftest`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlparse

import aiohttp

from netcheck import __version__
from netcheck.capacity import capacity_status
from netcheck.config import NodeConfig, Profile, load_node_config, load_profile
from netcheck.errors import CloseCode, HandshakeError, NetcheckError
from netcheck.keys import load_private_key, parse_public_key, public_key_text
from netcheck.node.client import FATAL_CODES, presented_coordinator_key, refusal_message
from netcheck.protocol.handshake import NodeHandshake
from netcheck.protocol.messages import ProfileClaim

HANDSHAKE_TIMEOUT_S = 10.0


@dataclass(frozen=True)
class Check:
    """One doctor check: name, outcome and a one-line detail or hint."""

    name: str
    ok: bool
    detail: str


async def probe_coordinator(cfg: NodeConfig, timeout_s: float = HANDSHAKE_TIMEOUT_S) -> str:
    """Connect and run ``hello``/``welcome``; returns the coordinator key text.

    Raises:
        NetcheckError: unreachable, refused (with the close code's name), or a bad welcome.
    """
    identity = load_private_key(cfg.identity_key)
    pinned = parse_public_key(cfg.coordinator_key)
    claim = ProfileClaim(
        profile=cfg.profile, fingerprint={"doctor": "1"}, software=f"netcheck/{__version__}"
    )
    hs = NodeHandshake(identity, pinned, claim, path=urlparse(cfg.coordinator_url).path or "/")

    def refusal(code: CloseCode, presented_key: str | None = None) -> str:
        return refusal_message(
            code,
            url=cfg.coordinator_url,
            pinned_key=cfg.coordinator_key,
            node_key=public_key_text(identity),
            profile=cfg.profile,
            presented_key=presented_key,
        )

    welcome = b""
    try:
        async with (
            aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=timeout_s)) as http,
            http.ws_connect(cfg.coordinator_url, compress=0) as ws,
        ):
            await ws.send_bytes(hs.start())
            msg = await ws.receive(timeout=timeout_s)
            if msg.type != aiohttp.WSMsgType.BINARY:
                code = ws.close_code
                known = code is not None and code in CloseCode._value2member_map_
                name = CloseCode(code).name if known and code is not None else str(code)
                if known and code is not None and CloseCode(code) in FATAL_CODES:
                    raise NetcheckError(refusal(CloseCode(code)))
                raise NetcheckError(f"coordinator closed the handshake: {name}")
            welcome = bytes(msg.data)
            hs.receive_welcome(welcome)  # verifies the pinned key's signature
            await ws.close(code=CloseCode.NORMAL, message=b"doctor")
    except HandshakeError as exc:
        if exc.code is CloseCode.WRONG_COORDINATOR_KEY:
            raise NetcheckError(refusal(exc.code, presented_coordinator_key(welcome))) from None
        raise NetcheckError(f"handshake failed: {exc.code.name}") from None
    except (aiohttp.ClientError, OSError, TimeoutError) as exc:
        reason = str(exc) or type(exc).__name__
        raise NetcheckError(f"cannot reach {cfg.coordinator_url}: {reason}") from None
    return public_key_text(pinned)


def capacity_check(profile: Profile) -> Check:
    """The profile's capacity (netcheck.capacity), stated plainly. Informational: it is
    a property of the profile, not of this node, so it does not fail the doctor; the
    detail starts with ``WARNING`` when the margin is below 1.2 or unmeasured."""
    status = capacity_status(profile)
    return Check("capacity", True, status.message if status.safe else f"WARNING: {status.message}")


def run_checks(
    config_path: Path,
    *,
    selftest: bool = True,
    progress: Callable[[str], None] = lambda _: None,
) -> list[Check]:
    """Run the doctor's checks; stops at the first failure that blocks the rest."""
    checks: list[Check] = []

    def step(name: str, fn: Callable[[], str]) -> bool:
        progress(name)
        try:
            detail = fn()
        except NetcheckError as exc:
            checks.append(Check(name, False, str(exc)))
            return False
        checks.append(Check(name, True, detail))
        return True

    holder: dict[str, object] = {}

    def config() -> str:
        holder["cfg"] = load_node_config(config_path)
        return str(config_path)

    def key() -> str:
        cfg = holder["cfg"]
        assert isinstance(cfg, NodeConfig)
        return public_key_text(load_private_key(cfg.identity_key))

    def profile() -> str:
        cfg = holder["cfg"]
        assert isinstance(cfg, NodeConfig)
        prof = load_profile(cfg.profile)
        holder["profile"] = prof
        return f"{prof.name}: {prof.engine}, {prof.model}, {prof.dtype}, B={prof.batch_size}"

    def coordinator() -> str:
        cfg = holder["cfg"]
        assert isinstance(cfg, NodeConfig)
        key_text = asyncio.run(probe_coordinator(cfg))
        # The profile travels in `auth`, which would open a real session (and replace a
        # running node's): doctor stops at `welcome`, so it cannot check the profile.
        return (
            f"{cfg.coordinator_url} answered as {key_text[:20]}..., this node is admitted "
            f"(profile {cfg.profile!r} is checked when the node joins)"
        )

    def engine() -> str:
        from netcheck.engines import load_engine

        prof = holder["profile"]
        assert isinstance(prof, Profile)
        eng = load_engine(prof)
        holder["engine"] = eng
        return f"fingerprint {eng.fingerprint_id[:12]} on {eng.fingerprint.get('device')}"

    def quick_selftest() -> str:
        from netcheck.engines.selftest import run_selftest

        prof = holder["profile"]
        assert isinstance(prof, Profile)
        report = run_selftest(
            prof,
            engine=holder["engine"],  # type: ignore[arg-type]
            sizes=[],
            throughput_sizes=[],
            repeats=2,
            mixes=1,
            timing_runs=1,
        )
        if not report.passed:
            raise NetcheckError(
                f"not deterministic: {report.repeat.detail}; {report.invariance.detail}"
            )
        return f"{report.repeat.detail}; {report.invariance.detail}"

    for name, fn in (
        ("config", config),
        ("identity key", key),
        ("profile", profile),
        ("coordinator", coordinator),
        ("engine", engine),
    ):
        if not step(name, fn):
            return checks
        if name == "profile":
            checks.append(capacity_check(holder["profile"]))  # type: ignore[arg-type]
    if selftest:
        step("quick selftest", quick_selftest)
    return checks
