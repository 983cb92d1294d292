"""``POST /v1/doctor``: answer a node's signed doctor query (docs/protocol.md §5.12).

Tells an admitted node, without a session, whether its profile is accepted and whether
references exist for its engine fingerprint (and if not, which fingerprint fields differ
from the profile's reference sets). Bad JSON or fields: 400; bad signature, stale time
or a key that is not admitted: 403. The time must be finite (NaN would pass the skew
test, so a signed query would never expire). A database that fails under the
coordinator: 503 with :data:`DOCTOR_UNAVAILABLE` (the node is not told the database's
own words; the coordinator logs them), not a 500 and a traceback.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from typing import TYPE_CHECKING, Any

from aiohttp import web

from netcheck.engines.fingerprint import fingerprint_id
from netcheck.errors import KeyFileError, MessageError, StorageError
from netcheck.keys import parse_public_key
from netcheck.logs import node_label as who
from netcheck.protocol.doctor import MAX_SKEW_S, verify_doctor
from netcheck.protocol.messages import ProfileClaim
from netcheck.references.mismatch import explain_mismatch
from netcheck.web.inputs import json_object

if TYPE_CHECKING:
    from netcheck.coordinator.server import Coordinator

log = logging.getLogger("netcheck.coordinator")

#: The text of the 503 a node's doctor query gets while the database fails.
DOCTOR_UNAVAILABLE = (
    "the coordinator cannot read its reference sets now (its database is unavailable); "
    "try again later"
)


def _fields(body: Any) -> tuple[str, str, dict[str, str | int], float, bytes]:
    if not isinstance(body, dict):
        raise web.HTTPBadRequest(text="body must be a JSON object")
    key, profile, fp, at, sig = (
        body.get(k) for k in ("node_key", "profile", "fingerprint", "time", "signature")
    )
    if not isinstance(key, str) or not isinstance(profile, str) or not isinstance(sig, str):
        raise web.HTTPBadRequest(text="node_key, profile and signature must be strings")
    if (
        not isinstance(fp, dict)
        or len(fp) > 64
        or not all(
            isinstance(k, str) and isinstance(v, str | int) and not isinstance(v, bool)
            for k, v in fp.items()
        )
    ):
        raise web.HTTPBadRequest(text="fingerprint must be an object of strings and integers")
    try:  # the claim's rules (§2.4): what pack_value can sign, ints in int64
        ProfileClaim(profile=profile, fingerprint=fp, software="")
    except MessageError as exc:
        raise web.HTTPBadRequest(text=exc.reason.removeprefix("profile_claim.")) from None
    if not isinstance(at, int | float) or isinstance(at, bool):
        raise web.HTTPBadRequest(text="time must be a number")
    try:
        at = float(at)
    except OverflowError:  # an int beyond float: JSON numbers are unbounded
        raise web.HTTPBadRequest(text="time must be a finite number of seconds") from None
    if not math.isfinite(at):  # NaN passes every skew test: abs(now - NaN) > x is False
        raise web.HTTPBadRequest(text="time must be a finite number of seconds")
    try:
        signature = bytes.fromhex(sig)
    except ValueError:
        raise web.HTTPBadRequest(text="signature must be hex") from None
    return key, profile, fp, at, signature


def add_doctor_route(app: web.Application, coord: Coordinator) -> None:
    """Register ``POST /v1/doctor`` on the coordinator's root application."""

    async def doctor(request: web.Request) -> web.Response:
        body = await json_object(request)  # 400 for bad, deep or oddly encoded JSON
        key_text, profile, fp, at, signature = _fields(body)
        try:
            key = parse_public_key(key_text)
        except KeyFileError as exc:
            raise web.HTTPBadRequest(text=str(exc)) from None
        if abs(time.time() - at) > MAX_SKEW_S:
            raise web.HTTPForbidden(
                text=f"time is more than {MAX_SKEW_S:.0f} s off: check the clock"
            )
        if not verify_doctor(key, profile, fp, at, signature):
            raise web.HTTPForbidden(text="bad signature")
        if not coord.admit(key.public_bytes_raw()):
            raise web.HTTPForbidden(text="this node key is not admitted")
        accepted = profile in coord.profiles
        out: dict[str, Any] = {"profile": profile, "profile_accepted": accepted,
                               "profiles": sorted(coord.profiles)}  # fmt: skip
        if accepted:
            fp_id = fingerprint_id(fp)

            def read() -> dict[str, Any]:
                unspent = coord.store.count_references(fp_id, unspent_only=True)
                total = coord.store.count_references(fp_id)
                mismatch = (
                    ""
                    if total
                    else explain_mismatch(fp, coord.store.reference_fingerprints(profile))
                )
                return {"fingerprint_id": fp_id, "references": total, "unspent": unspent,
                        "profile_references": coord.store.count_references(profile=profile),
                        "mismatch": mismatch}  # fmt: skip

            try:
                out.update(await asyncio.to_thread(read))
            except StorageError as exc:  # the node learns that, not the database's words
                log.warning("doctor query of node %s: %s", who(key_text), exc)
                raise web.HTTPServiceUnavailable(text=DOCTOR_UNAVAILABLE) from None
        return web.json_response(out)

    app.router.add_post("/v1/doctor", doctor)
