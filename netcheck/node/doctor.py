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
5b. the coordinator accepts the profile and has unspent references for this engine
   fingerprint: a signed HTTP query (``POST /v1/doctor``, docs/protocol.md §5.12) that
   opens no session, so a running node is never replaced; a fingerprint without
   references names the fields that differ from the profile's reference sets;
(after 3, ``host load``: a warning when the host runs more processes than it has cores:
:func:`host_load_check`;)
6. a quick selftest passes (repeat determinism and batch-composition invariance at the
   profile's batch shape; :mod:`netcheck.engines.selftest`).
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
from yarl import URL

from netcheck.admin_client import invoked_as, keygen_fix
from netcheck.capacity import capacity_status
from netcheck.config import NodeConfig, Profile, load_node_config
from netcheck.errors import NetcheckError
from netcheck.keys import load_private_key, public_key_text
from netcheck.node.preflight import HANDSHAKE_TIMEOUT_S, probe_coordinator
from netcheck.redact import redact_url, redact_urls
from netcheck.text import untrusted

__all__ = ["HANDSHAKE_TIMEOUT_S", "Check", "ask_coordinator", "probe_coordinator", "run_checks"]


#: Largest doctor reply read (the coordinator's is under 1 KB); more is refused unread.
MAX_DOCTOR_REPLY_BYTES = 64 * 1024
#: Fields of the doctor reply (docs/protocol.md §5.12) and their JSON types; the second
#: set only when the profile is accepted.
_REPLY_FIELDS: dict[str, type | tuple[type, ...]] = {"profile_accepted": bool, "profiles": list}
_ACCEPTED_FIELDS: dict[str, type | tuple[type, ...]] = {
    "fingerprint_id": str, "references": int, "unspent": int, "profile_references": int,
    "mismatch": str,
}  # fmt: skip


def _reply_problem(answer: object) -> str | None:
    """What is wrong with a doctor reply (a field missing or of the wrong type), or None."""
    if not isinstance(answer, dict):
        return "not a JSON object"
    fields = dict(_REPLY_FIELDS)
    if answer.get("profile_accepted") is True:
        fields.update(_ACCEPTED_FIELDS)
    for name, kind in fields.items():
        value = answer.get(name)
        if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
            return f"field {name!r} missing or not {getattr(kind, '__name__', kind)}"
    if not all(isinstance(p, str) for p in answer["profiles"]):
        return "field 'profiles' is not a list of strings"
    return None


async def _read_bounded(resp: aiohttp.ClientResponse, target: str) -> bytes:
    """The body of ``resp``, refused past :data:`MAX_DOCTOR_REPLY_BYTES`."""
    body = bytearray()
    async for chunk in resp.content.iter_chunked(16 * 1024):
        body += chunk
        if len(body) > MAX_DOCTOR_REPLY_BYTES:
            raise NetcheckError(f"{target}: reply larger than {MAX_DOCTOR_REPLY_BYTES} bytes")
    return bytes(body)


@dataclass(frozen=True)
class Check:
    """One doctor check: name, outcome and a one-line detail or hint."""

    name: str
    ok: bool
    detail: str
    warning: bool = False
    """Passed, but the operator should read the detail (shown as ``warn``)."""


async def ask_coordinator(
    cfg: NodeConfig, profile: str, fingerprint: dict[str, str | int], timeout_s: float = 10.0
) -> dict[str, Any]:
    """The coordinator's answer to a signed doctor query (docs/protocol.md §5.12): is the
    profile accepted, are there references for this fingerprint. Opens no session.

    Raises:
        NetcheckError: unreachable, refused (the coordinator's reason), or a bad reply
            (not JSON, larger than :data:`MAX_DOCTOR_REPLY_BYTES`, a field missing or of
            the wrong type: the reply is not authenticated, so it is checked).
    """
    import time as _time

    from netcheck.protocol.doctor import PATH, sign_doctor

    identity = load_private_key(cfg.identity_key)
    at = _time.time()
    body = {
        "node_key": public_key_text(identity), "profile": profile, "fingerprint": fingerprint,
        "time": at, "signature": sign_doctor(identity, profile, fingerprint, at).hex(),
    }  # fmt: skip
    url = URL(cfg.coordinator_url)
    # The userinfo is kept for the request (a proxy may want it), never shown.
    target_url = url.with_scheme("https" if url.scheme == "wss" else "http").with_path(PATH)
    target_url = target_url.with_query(None).with_fragment(None)
    target = redact_url(target_url)
    try:
        async with (
            aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=timeout_s)) as http,
            http.post(target_url, json=body) as resp,
        ):
            if resp.status == 404:
                raise NetcheckError(
                    f"{target}: the coordinator does not answer doctor queries (older version)"
                )
            raw = await _read_bounded(resp, target)
            if resp.status != 200:
                text = raw[:300].decode("utf-8", errors="replace")
                raise NetcheckError(f"{target}: HTTP {resp.status}: {untrusted(text)}")
    except (aiohttp.ClientError, TimeoutError) as exc:
        raise NetcheckError(f"cannot reach {target}: {redact_urls(str(exc))}") from exc
    try:
        answer = json.loads(raw)
    except (ValueError, RecursionError):  # RecursionError: nested too deeply
        raise NetcheckError(f"{target}: unexpected reply: not JSON") from None
    problem = _reply_problem(answer)
    if problem is not None:
        raise NetcheckError(f"{target}: unexpected reply: {problem}")
    return dict(answer)


def capacity_check(profile: Profile, prog: str = "netcheck") -> Check:
    """The profile's capacity (netcheck.capacity), stated plainly. Informational: it is
    a property of the profile, not of this node, so it does not fail the doctor; the
    detail starts with ``WARNING`` when the margin is below 1.2 or unmeasured. ``prog``:
    how the hint calls netcheck (``invoked_as()``)."""
    status = capacity_status(profile, prog)
    return Check("capacity", True, status.message, warning=not status.safe)


def host_load_check(load1: float | None = None, cpus: int | None = None) -> Check:
    """The host's 1-minute load average against its cores (``os.getloadavg``,
    ``os.cpu_count`` unless given). Informational, like :func:`capacity_check`: a
    warning when the load is above the core count. Why: a busy host is the benign
    coupling the coordinator's deadline allows for only up to a point; on an H200 host
    (16 cores) 14 spinning processes slowed the ``h200-torch-bf16`` batch by 3.7%, 22
    processes of CPU and memory-bandwidth work by 11% (tails to 1.31x) and made 71% of
    the batches late at the profile's deadline (``benchmarks/host_coupling.py``,
    docs/calibration/s13/). A late answer is a capacity strike whatever made it late."""
    if load1 is None:
        try:
            load1 = os.getloadavg()[0]
        except OSError:  # not available on this platform
            return Check("host load", True, "load average not available here")
    cpus = cpus or os.cpu_count() or 1
    detail = f"load average {load1:.1f} on {cpus} cores"
    if load1 <= cpus:
        return Check("host load", True, detail)
    return Check(
        "host load",
        True,
        f"WARNING: {detail}: more runnable processes than cores slow this node's batches "
        "(22 processes on a 16-core H200 host made 71% of batches late); run fewer "
        "processes beside the node, or it will collect capacity strikes",
        warning=True,
    )


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
            checks.append(Check(name, False, f"{exc}{keygen_fix(exc)}"))
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
        prof = cfg.node_profile()
        holder["profile"] = prof
        return f"{prof.name}: {prof.engine}, {prof.model}, {prof.dtype}, B={prof.batch_size}"

    def coordinator() -> str:
        cfg = holder["cfg"]
        assert isinstance(cfg, NodeConfig)
        key_text = asyncio.run(probe_coordinator(cfg))
        # Stops at `welcome` (auth would open a session and replace a running node's);
        # profile and references are asked with a signed query after the engine loads.
        return f"{redact_url(cfg.coordinator_url)} answered as {key_text[:20]}..., this node is admitted"

    def engine() -> str:
        from netcheck.engines import load_engine

        prof = holder["profile"]
        assert isinstance(prof, Profile)
        eng = load_engine(prof)
        holder["engine"] = eng
        return f"fingerprint {eng.fingerprint_id[:12]} on {eng.fingerprint.get('device')}"

    def acceptance() -> str:
        cfg = holder["cfg"]
        assert isinstance(cfg, NodeConfig)
        eng = holder["engine"]
        prof = holder["profile"]
        assert isinstance(prof, Profile)
        answer = asyncio.run(ask_coordinator(cfg, prof.name, dict(eng.fingerprint)))  # type: ignore[attr-defined]
        if not answer["profile_accepted"]:
            raise NetcheckError(
                f"the coordinator does not accept profile {prof.name!r} (it accepts: "
                f"{', '.join(answer['profiles'])}): set `profile` in {config_path}"
            )
        fp = answer["fingerprint_id"][:12]
        if answer["references"] == 0:
            why = answer.get("mismatch") or (
                "the coordinator has no reference set for this profile yet"
                if answer["profile_references"] == 0
                else "no stored fingerprint to compare"
            )
            raise NetcheckError(f"no references for fingerprint {fp}: {why}")
        if answer["unspent"] == 0:
            raise NetcheckError(
                f"fingerprint {fp} matches the references, but none is left: rounds will be "
                "`unchecked` until the operator builds more (not this node's fault)"
            )
        return f"profile {prof.name} accepted; {answer['unspent']} unspent references for {fp}"

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
        ("coordinator accepts", acceptance),
    ):
        if not step(name, fn):
            return checks
        if name == "profile":
            checks.append(capacity_check(holder["profile"], invoked_as()))  # type: ignore[arg-type]
            checks.append(host_load_check())
    if selftest:
        step("quick selftest", quick_selftest)
    return checks
