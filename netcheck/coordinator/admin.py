"""Operator API of the coordinator (JSON over HTTP, bearer token, loopback only).

Routes:

- ``GET  /admin/status``          — connected nodes per profile, the canary pool, rounds
  whose after-round checks raised a bug (:func:`~netcheck.coordinator.late_checks.check_bugs`).
- ``GET  /admin/references``      — the canary pool per profile and fingerprint.
- ``GET  /admin/nodes``           — connected sessions and every known node (with
  ``connected`` and ``last_seen_at``: now while connected, else when its session ended).
- ``POST /admin/rounds``          — run a round now; body ``{"profile": NAME}`` (optional).
- ``GET  /admin/rounds``          — rounds, newest first; ``limit`` (1..10000, default
  50) and ``offset`` page them; the reply carries ``total``.
- ``GET  /admin/rounds/{round_id}`` — verdicts of one round (404 for an unknown round).
- ``POST /admin/screening/jobs``  — the same as a background job (202, ``job_id``);
  ``GET /admin/screening/jobs/{job_id}`` its progress (rounds done, ETA, the report when
  done), ``DELETE`` the same path cancels it after the round in flight
  (:mod:`netcheck.coordinator.jobs`).
- ``POST /admin/screening``       — run screening rounds, the analysis and confirmation;
  body ``{"rounds": N, "profile": NAME}`` (both optional; N defaults to 32). Returns
  the rounds, the detector summary, the confirmations and the flags raised.
- ``GET  /admin/flags``           — flags, newest first, without evidence; query
  parameters ``kind``, ``status``, ``node``, ``limit`` (1..10000, default 200) filter them.
- ``GET  /admin/flags/{flag_id}`` — one flag with its evidence and review history, its
  rule in plain words and links to its evidence rounds (:func:`flag_links`).
- ``POST /admin/flags/{flag_id}/review`` — body ``{"state", "by", "note"}``: move the
  flag's review state (open -> acknowledged -> resolved / false-positive; reopen);
  409 for a transition not allowed (:mod:`netcheck.storage.reviews`); an unknown
  state, an empty or too long ``by`` or a too long ``note`` is a 400.

Every request needs ``Authorization: Bearer <admin_token>`` from the coordinator config,
and must come from a loopback address (the server also binds to loopback by default).

Bodies and query parameters are checked by :mod:`netcheck.web.inputs`: a body that is
not a JSON object, a ``profile`` that is neither absent, ``null`` (the first profile)
nor a non-empty string, or a non-integer or out-of-range number is a 400 naming the
field. An unknown profile, or no node to validate, is a 409. A database that fails
(PostgreSQL down, SQLite disk full, locked past the retry budget) is a 503 whose text
starts ``database unavailable:`` (:func:`netcheck.web.unavailable.storage_errors`; the
CLI exits 10), not a 500.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from aiohttp import web

from netcheck.coordinator.capacity_gate import capacity_context
from netcheck.coordinator.jobs import ConfirmProgress, ScreeningJobs
from netcheck.coordinator.late_checks import check_bugs
from netcheck.coordinator.pool import live_pool
from netcheck.errors import NetcheckError, StorageError
from netcheck.storage.durable import spooled_status
from netcheck.storage.flags import FLAG_STATUSES, MAX_FLAG_ID, jsonable
from netcheck.storage.reader import Reader
from netcheck.storage.reviews import MAX_NOTE_CHARS, REVIEW_STATES, ReviewError, ReviewStore
from netcheck.storage.tables import MAX_BY_CHARS
from netcheck.web.flagview import flag_view
from netcheck.web.inputs import (
    MAX_OFFSET,
    TOKEN_IN_URL_REFUSED,
    TOKEN_REFUSED,
    bearer_token,
    has_control_chars,
    json_object,
    optional_name,
    parse_int,
    query_int,
    token_matches,
)
from netcheck.web.unavailable import storage_errors

if TYPE_CHECKING:
    from netcheck.coordinator.server import Coordinator

log = logging.getLogger("netcheck.admin")

#: Flag kinds a filter may name (docs/detection.md; docs/admin-api.md).
FLAG_KINDS = (
    "shared-backend", "declared-host", "capacity", "result-sharing", "relay", "answer-failure",
    "slow",
)  # fmt: skip

#: Control characters a review note may hold (deleted before the control-character check).
NOTE_WHITESPACE = str.maketrans("", "", "\r\n\t")

#: 32 rounds = 24 screening rounds: all but 1 in 500,000 node pairs comparable by the
#: mutual test (schedule.pair_coverage at the default load probability 2/3, one round per
#: arm, one testable direction enough; 99.9% at 1/2)
DEFAULT_SCREENING_ROUNDS = 32
MAX_SCREENING_ROUNDS = 1024
#: What a screening body may hold (``netcheck screen run`` sends all four; the capacity
#: gate reads the last two, :func:`~netcheck.coordinator.capacity_gate.capacity_context`).
SCREENING_FIELDS = ("profile", "rounds", "check_capacity", "capacity_override")


def flag_links(flag: Mapping[str, Any]) -> dict[str, Any]:
    """What ``GET /admin/flags/{id}`` adds to the stored row: ``rule`` (plain words,
    :mod:`netcheck.analysis.rules`), ``evidence_rounds`` (each round the evidence names,
    with its ``/admin/rounds/{id}`` and ``/dashboard/rounds/{id}`` paths) and ``links``
    (the flag's dashboard page and its receipts download)."""
    from urllib.parse import quote

    view = flag_view(flag)
    fid = quote(str(flag["flag_id"]), safe="")
    return {
        "rule": view.rule,
        "evidence_rounds": [
            {
                "round_id": r,
                "admin": f"/admin/rounds/{quote(r, safe='')}",
                "dashboard": f"/dashboard/rounds/{quote(r, safe='')}",
            }
            for r in view.round_ids or ()
        ],  # fmt: skip
        "links": {
            "dashboard": f"/dashboard/flags/{fid}",
            "receipts": f"/dashboard/flags/{fid}/receipts.json",
        },  # fmt: skip
    }


def _is_loopback(remote: str | None) -> bool:
    if not remote:
        return False
    try:
        return ipaddress.ip_address(remote).is_loopback
    except ValueError:
        return False


#: Where :func:`admin_app` is mounted (``app.add_subapp(ADMIN_PREFIX, admin_app(coord))``).
ADMIN_PREFIX = "/admin"


def admin_app(coord: Coordinator) -> web.Application:
    """The admin API as an aiohttp sub-application (routes relative to
    :data:`ADMIN_PREFIX`) with its authentication middleware."""
    app = web.Application()
    reader = Reader(coord.store)

    @web.middleware
    async def auth(request: web.Request, handler: Any) -> web.StreamResponse:
        if not request.path.startswith("/admin/"):
            return await handler(request)
        if not _is_loopback(request.remote):
            log.warning("admin request from non-loopback address %s refused", request.remote)
            raise web.HTTPForbidden(text="admin API is loopback-only")
        if "token" in request.query:  # a token in a URL leaks into logs: refused always
            raise web.HTTPUnauthorized(text=TOKEN_IN_URL_REFUSED)
        token = bearer_token(request.headers.get("Authorization", ""))
        if token is None or not token_matches(token, coord.config.admin_token):
            raise web.HTTPUnauthorized(text=TOKEN_REFUSED)
        return await handler(request)

    async def status(request: web.Request) -> web.Response:
        per_profile: dict[str, int] = {}
        for s in coord.sessions.values():
            per_profile[s.claim.profile] = per_profile.get(s.claim.profile, 0) + 1
        pool = [
            e.as_dict()
            for e in await asyncio.to_thread(live_pool, coord.store, coord.profiles, coord.sessions)
        ]
        return web.json_response(
            {"connected": len(coord.sessions), "per_profile": per_profile,
             "profiles": sorted(coord.profiles), "handshake_failures": coord.handshake_failures,
             "sessions_open": coord.slots.total, "sessions_refused": coord.slots.refused,
             "references": pool,
             "after_round_check_bugs": [b.as_dict() for b in check_bugs(coord)]}
        )  # fmt: skip

    async def references(request: web.Request) -> web.Response:
        pool = await asyncio.to_thread(live_pool, coord.store, coord.profiles, coord.sessions)
        return web.json_response({"references": [e.as_dict() for e in pool]})

    async def nodes(request: web.Request) -> web.Response:
        connected = [
            {"node_key": s.node_key, "name": coord.config.node_names.get(s.node_key, ""),
             "profile": s.claim.profile, "peer": s.peer,
             "fingerprint_id": s.fingerprint_id, "rtt_s": s.rtt_s,
             "software": s.claim.software, "connected_at": s.connected_at}
            for s in coord.sessions.values()
        ]  # fmt: skip
        now = time.time()
        known = await asyncio.to_thread(coord.store.list_nodes)
        for n in known:  # every node ever seen, connected or not
            n["connected"] = n["node_key"] in coord.sessions
            n["display_name"] = coord.config.node_names.get(n["node_key"], "")
            if n["connected"]:
                n["last_seen_at"] = now
        body: dict[str, Any] = {"connected": connected, "known": known}
        held = await coord.held_by()
        if held is not None:  # several gateways: which gateway holds each node
            for c in connected:
                c["gateway"] = held.get(str(c["node_key"]), {}).get("gateway_id")
            body["cluster"] = list(held.values())
        return web.json_response(jsonable(body))

    def default_profile() -> str:
        return next(iter(coord.profiles), coord.config.profiles[0])

    async def start_round(request: web.Request) -> web.Response:
        body = await json_object(request, ("profile",))
        profile = optional_name(body, "profile") or default_profile()
        try:
            report = await coord.start_round(profile)
        except StorageError:
            raise  # a 503 (web.unavailable.storage_errors), not a refusal
        except NetcheckError as exc:
            raise web.HTTPConflict(text=str(exc)) from None
        body = report.as_dict()
        for v in body["verdicts"]:  # operator-chosen display names (config: node_names)
            v["name"] = coord.config.node_names.get(v["node_key"], "")
        return web.json_response(body)

    async def list_rounds(request: web.Request) -> web.Response:
        limit = query_int(request.query, "limit", default=50, lo=1, hi=10_000)
        offset = query_int(request.query, "offset", default=0, lo=0, hi=MAX_OFFSET)

        def read() -> dict[str, Any]:
            rows = spooled_status(reader.rounds(limit, offset), coord.recorder.pending())
            return {"rounds": rows, "total": reader.count_rounds(), "limit": limit,
                    "offset": offset}  # fmt: skip

        return web.json_response(jsonable(await asyncio.to_thread(read)))

    async def round_detail(request: web.Request) -> web.Response:
        rid = request.match_info["round_id"]

        def read() -> dict[str, Any] | None:
            row = reader.round(rid)
            if row is None:
                return None
            verdicts = coord.store.round_verdicts(rid)
            waiting = coord.recorder.pending().get(rid)
            if waiting is not None:  # its results wait in the spool (docs/spool.md)
                (row,) = spooled_status([row], {rid: waiting})
                known = {v["node_key"] for v in verdicts}
                verdicts += [
                    {**o, "round_id": rid, "spooled": True}
                    for o in waiting["outcomes"] if o["node_key"] not in known
                ]  # fmt: skip
            for v in verdicts:
                v["name"] = coord.config.node_names.get(v["node_key"], "")
            return {**row, "round_id": rid, "verdicts": verdicts}

        body = await asyncio.to_thread(read)
        if body is None:
            raise web.HTTPNotFound(text=f"no round {rid!r}")
        return web.json_response(jsonable(body))

    async def screening_args(request: web.Request) -> tuple[str, int, Any]:
        body = await json_object(request, SCREENING_FIELDS)
        profile = optional_name(body, "profile") or default_profile()
        n = body.get("rounds", DEFAULT_SCREENING_ROUNDS)
        if not isinstance(n, int) or isinstance(n, bool) or not 0 <= n <= MAX_SCREENING_ROUNDS:
            raise web.HTTPBadRequest(text=f"rounds must be an integer in 0..{MAX_SCREENING_ROUNDS}")
        context = capacity_context(coord, profile, body)  # issue 10; HTTPConflict if refused
        return profile, n, context

    async def run_screening(
        profile: str, n: int, progress: Any, cancel: asyncio.Event, confirming: ConfirmProgress
    ) -> dict[str, Any]:
        return await coord.screening.run(
            profile, n, progress=progress, cancel=cancel, confirming=confirming
        )

    jobs = ScreeningJobs(run_screening)

    async def start_job(request: web.Request) -> web.Response:
        profile, n, context = await screening_args(request)
        if profile not in coord.profiles:
            raise web.HTTPConflict(text=f"unknown profile {profile!r}")
        if not coord.connected(profile):
            raise web.HTTPConflict(text=f"no node connected with profile {profile!r}")

        async def runner(
            profile: str, n: int, progress: Any, cancel: asyncio.Event, confirming: ConfirmProgress
        ) -> dict[str, Any]:
            return await coord.screening.run(
                profile, n, progress=progress, cancel=cancel, context=context, confirming=confirming
            )

        job = jobs.start(profile, n, runner)
        return web.json_response(jsonable(jobs.view(job)), status=202)

    def find_job(request: web.Request) -> Any:
        job = jobs.jobs.get(request.match_info["job_id"])
        if job is None:
            raise web.HTTPNotFound(text=f"no screening job {request.match_info['job_id']!r}")
        return job

    async def job_status(request: web.Request) -> web.Response:
        return web.json_response(jsonable(jobs.view(find_job(request))))

    async def cancel_job(request: web.Request) -> web.Response:
        job = jobs.cancel(find_job(request).job_id)
        return web.json_response(jsonable(jobs.view(job) if job else {}))

    async def close_jobs(app: web.Application) -> None:
        await jobs.close()

    async def screening(request: web.Request) -> web.Response:
        profile, n, context = await screening_args(request)
        try:
            report = await coord.screening.run(profile, n, context=context)
        except StorageError:
            raise  # a 503 (web.unavailable.storage_errors), not a refusal
        except NetcheckError as exc:
            raise web.HTTPConflict(text=str(exc)) from None
        return web.json_response(report)

    async def list_flags(request: web.Request) -> web.Response:
        q = request.query
        limit = query_int(q, "limit", default=200, lo=1, hi=10_000)
        for name, allowed in (("kind", FLAG_KINDS), ("status", FLAG_STATUSES)):
            if q.get(name) is not None and q[name] not in allowed:
                raise web.HTTPBadRequest(
                    text=f"unknown {name} {q[name]!r}; one of: {', '.join(allowed)}"
                )
        review = q.get("review")
        if review is not None and review not in REVIEW_STATES:
            raise web.HTTPBadRequest(
                text=f"unknown review {review!r}; one of: {', '.join(REVIEW_STATES)}"
            )

        def read() -> list[dict[str, Any]]:
            found = coord.screening.flags.list_flags(
                kind=q.get("kind"), status=q.get("status"), node_key=q.get("node"),
                limit=10_000 if review else limit,
            )  # fmt: skip
            states = reviews().current(f.flag_id for f in found)
            histories = reviews().histories(f.flag_id for f in found)
            names = coord.config.node_names
            rows = [
                {**f.as_dict(), "review": states[f.flag_id], "reviews": histories[f.flag_id],
                 "node_names": [names.get(k) for k in f.node_keys]}
                for f in found
            ]  # fmt: skip
            if review is not None:
                rows = [r for r in rows if r["review"]["state"] == review][:limit]
            return rows

        return web.json_response(jsonable({"flags": await asyncio.to_thread(read)}))

    review_store: list[ReviewStore] = []

    def reviews() -> ReviewStore:
        if not review_store:  # created on first use: creates its table if missing
            review_store.append(ReviewStore(coord.store))
        return review_store[0]

    def flag_id_of(request: web.Request) -> int:
        flag_id = parse_int(request.match_info["flag_id"])
        if flag_id is None:
            raise web.HTTPBadRequest(text="flag id must be an integer")
        if not 0 <= flag_id <= MAX_FLAG_ID:  # beyond the column: no such flag
            raise web.HTTPNotFound(text=f"no flag {flag_id}")
        return flag_id

    async def review_flag(request: web.Request) -> web.Response:
        flag_id = flag_id_of(request)
        body = await json_object(request, ("state", "by", "note"))
        fields = {}
        for name in ("state", "by", "note"):
            value = body.get(name, "" if name == "note" else None)
            if not isinstance(value, str):
                raise web.HTTPBadRequest(text=f"{name} must be a string")
            # PostgreSQL refuses NUL in text (a 500); a name with CR/LF forges log lines.
            # A note keeps its line breaks and tabs.
            checked = value.translate(NOTE_WHITESPACE) if name == "note" else value
            if has_control_chars(checked):
                raise web.HTTPBadRequest(text=f"{name} must not hold control characters")
            fields[name] = value
        # What the store would refuse whatever the flag's state: a bad request (400
        # naming the field), not a conflict (409 is for a move the state does not allow).
        if fields["state"] not in REVIEW_STATES:
            raise web.HTTPBadRequest(
                text=f"unknown state {fields['state'][:40]!r}; one of: {', '.join(REVIEW_STATES)}"
            )
        if not fields["by"].strip() or len(fields["by"]) > MAX_BY_CHARS:
            raise web.HTTPBadRequest(
                text=f"by must name who reviews (1..{MAX_BY_CHARS} characters)"
            )
        if len(fields["note"]) > MAX_NOTE_CHARS:
            raise web.HTTPBadRequest(text=f"note is longer than {MAX_NOTE_CHARS} characters")
        if coord.screening.flags.get_flag(flag_id) is None:
            raise web.HTTPNotFound(text=f"no flag {flag_id}")
        try:
            row = await asyncio.to_thread(
                reviews().review, flag_id, fields["state"], fields["by"], fields["note"]
            )
        except ReviewError as exc:
            raise web.HTTPConflict(text=str(exc)) from None
        log.info("flag %d review: %s by %s", flag_id, row["state"], row["by"])
        return web.json_response(jsonable(row))

    async def flag_detail(request: web.Request) -> web.Response:
        flag_id = parse_int(request.match_info["flag_id"])
        if flag_id is None:
            raise web.HTTPBadRequest(text="flag id must be an integer")
        if not 0 <= flag_id <= MAX_FLAG_ID:  # beyond the column: no such flag
            raise web.HTTPNotFound(text=f"no flag {flag_id}")
        flag = coord.screening.flags.get_flag(flag_id)
        if flag is None:
            raise web.HTTPNotFound(text=f"no flag {flag_id}")
        history = await asyncio.to_thread(reviews().history, flag_id)
        doc = flag.as_dict()
        doc["reviews"] = history
        doc["review"] = history[-1] if history else {"state": "open"}
        names = [coord.config.node_names.get(k) for k in flag.node_keys]
        return web.json_response(jsonable({**doc, **flag_links(doc), "node_names": names}))

    app.middlewares.append(auth)
    app.middlewares.append(storage_errors(("/admin/",)))  # inside auth: admins only
    app.router.add_get("/status", status)
    app.router.add_get("/references", references)
    app.router.add_get("/nodes", nodes)
    app.router.add_post("/rounds", start_round)
    app.router.add_get("/rounds", list_rounds)
    app.router.add_get("/rounds/{round_id}", round_detail)
    app.router.add_post("/screening", screening)
    app.router.add_post("/screening/jobs", start_job)
    app.router.add_get("/screening/jobs/{job_id}", job_status)
    app.router.add_delete("/screening/jobs/{job_id}", cancel_job)
    app.on_cleanup.append(close_jobs)
    app.router.add_get("/flags", list_flags)
    app.router.add_get("/flags/{flag_id}", flag_detail)
    app.router.add_post("/flags/{flag_id}/review", review_flag)
    return app
