"""Admin API input checks on a real loopback coordinator: bad bodies are 400, never 500."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from netcheck.coordinator.admin import DEFAULT_SCREENING_ROUNDS
from netcheck.coordinator.rounds import run_round
from netcheck.lab.load import HashWorker, add_hash_references
from netcheck.lab.testing import RunningCoordinator, running_coordinator, small_profile
from netcheck.storage import Store
from netcheck.storage.flags import FlagStore

PROFILE = small_profile("adm", dispatch_timeout_s=2.0, result_timeout_s=3.0)


@asynccontextmanager
async def admin(
    tmp_path: Path, store: Store | None = None
) -> AsyncIterator[tuple[RunningCoordinator, Any]]:
    """A coordinator and a ``post(path, data=..., json=...) -> (status, text)`` helper."""
    async with running_coordinator(tmp_path, [PROFILE], store=store) as rc:
        base = f"http://127.0.0.1:{rc.port}"
        auth = {"Authorization": f"Bearer {rc.coord.config.admin_token}"}
        async with aiohttp.ClientSession(headers=auth) as http:

            async def call(method: str, path: str, **kw: Any) -> tuple[int, str]:
                async with http.request(method, base + path, **kw) as r:
                    return r.status, await r.text()

            yield rc, call


def _no_server_errors(caplog: pytest.LogCaptureFixture) -> None:
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert not errors, [r.getMessage() for r in errors]


@pytest.mark.parametrize(
    "body",
    [b"[" * 100_000, b'{"a":' * 100_000 + b"1" + b"}" * 100_000, b"{bad", b"\xff\xfe{}"],
    ids=["deep-array", "deep-object", "syntax", "not-utf8"],
)
async def test_undecodable_bodies_are_400(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, body: bytes
) -> None:
    """Deeply nested JSON (RecursionError in the parser) and bad JSON are 400, logged quietly."""
    async with admin(tmp_path) as (_, call):
        for path in ("/admin/rounds", "/admin/screening"):
            status, text = await call("POST", path, data=body)
            assert status == 400, (path, text)
            assert "body must be JSON" in text
    _no_server_errors(caplog)


async def test_json_with_an_unknown_charset_is_400(tmp_path: Path) -> None:
    """A Content-Type charset Python does not know is a 400, not a LookupError."""
    async with admin(tmp_path) as (_, call):
        headers = {"Content-Type": "application/json; charset=bogus"}
        status, _ = await call("POST", "/admin/rounds", data=b"{}", headers=headers)
        assert status == 400


@pytest.mark.parametrize("value", [0, False, "", 123, ["adm"], {"name": "adm"}, 1.5])
async def test_profile_that_is_not_a_non_empty_string_is_400(tmp_path: Path, value: Any) -> None:
    """{"profile": 0 / false / ""} no longer falls back to the default profile."""
    async with admin(tmp_path) as (_, call):
        for path, extra in (("/admin/rounds", {}), ("/admin/screening", {"rounds": 0})):
            status, text = await call("POST", path, json={"profile": value, **extra})
            assert (status, text) == (400, "profile must be a non-empty string"), path


async def test_profile_null_or_absent_means_the_default(tmp_path: Path) -> None:
    """`netcheck round run` sends {"profile": null}: that still means the first profile."""
    async with admin(tmp_path) as (_, call):
        for body in ({}, {"profile": None}, {"profile": PROFILE.name}):
            status, text = await call("POST", "/admin/rounds", json=body)
            assert status == 409, text  # reached the round runner: no node connected
        status, text = await call("POST", "/admin/rounds", json={"profile": "nope"})
        assert (status, text) == (409, "unknown profile 'nope'")
        status, _ = await call("POST", "/admin/screening", json={"profile": None, "rounds": 0})
        assert status == 200


async def test_screening_rounds_must_be_an_integer_in_range(tmp_path: Path) -> None:
    """rounds: booleans, floats, strings, NaN and huge numbers are 400."""
    assert DEFAULT_SCREENING_ROUNDS > 0
    async with admin(tmp_path) as (_, call):
        for raw in (b"true", b"1.0", b'"2"', b"NaN", b"-1", b"1025", b"1" + b"0" * 5000):
            status, text = await call("POST", "/admin/screening", data=b'{"rounds": ' + raw + b"}")
            assert status == 400, (raw[:20], text)


async def test_unknown_round_is_404_known_round_is_200(tmp_path: Path) -> None:
    """GET /admin/rounds/ID answers 404 for a round that never ran, not an empty 200."""
    store = Store(f"sqlite:///{tmp_path / 'netcheck.db'}")
    add_hash_references(store, PROFILE, 16)
    async with admin(tmp_path, store) as (rc, call):
        rc.start(rc.node(HashWorker(PROFILE.max_new_tokens), PROFILE.name, label="n0"))
        await rc.wait_connected(1)
        report = await run_round(rc.coord, PROFILE.name)
        status, text = await call("GET", f"/admin/rounds/{report.round_id}")
        assert status == 200 and report.round_id in text and '"verdict": "pass"' in text
        for rid in ("doesnotexist", "%2e%2e%2f%2e%2e%2fetc"):
            status, _ = await call("GET", f"/admin/rounds/{rid}")
            assert status == 404, rid


async def test_flag_limits_and_ids(tmp_path: Path) -> None:
    """/admin/flags?limit= and /admin/flags/ID: 400 for non-integers, limit range enforced."""
    async with admin(tmp_path) as (_, call):
        for limit in ("abc", "1e3", " 5", "1_0", "0", "-1", "10001", "9" * 20, "9" * 5000):
            status, _ = await call("GET", f"/admin/flags?limit={limit}")
            assert status == 400, limit[:20]
        for limit in ("1", "10000", "%2B7", "007"):
            status, _ = await call("GET", f"/admin/flags?limit={limit}")
            assert status == 200, limit
        for fid, want in (("x", 400), ("1.0", 400), ("-1", 404), ("1", 404), ("9" * 40, 404)):
            status, _ = await call("GET", f"/admin/flags/{fid}")
            assert status == want, fid


@pytest.mark.parametrize(
    "path",
    ["/admin/rounds/%00", "/admin/flags?kind=%00", "/admin/flags?node=a%0d%0ab",
     "/dashboard/rounds/%00", "/dashboard/nodes/%00", "/export/rounds.csv?node=%00",
     "/dashboard/login?next=%00"],
)  # fmt: skip
async def test_control_characters_in_the_url_are_400_on_every_backend(
    tmp_path: Path, db_url: str, path: str, caplog: pytest.LogCaptureFixture
) -> None:
    """NUL reached PostgreSQL (which refuses it in text) and made a 500; now 400 first."""
    async with admin(tmp_path, Store(db_url)) as (_rc, call):
        status, text = await call("GET", path, allow_redirects=False)
    assert (status, text) == (400, "control characters in the URL")
    _no_server_errors(caplog)


async def _raw_get(port: int, path: str, authorization: bytes) -> bytes:
    """The status line of a GET whose Authorization header holds ``authorization`` as
    raw bytes (aiohttp's client only sends str headers)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(
        b"GET " + path.encode() + b" HTTP/1.1\r\nHost: x\r\nAuthorization: " + authorization
        + b"\r\nConnection: close\r\n\r\n"
    )  # fmt: skip
    await writer.drain()
    status = await asyncio.wait_for(reader.readline(), 10)
    writer.close()
    return status


@pytest.mark.parametrize("token", [b"\xff\xfe", "é".encode("latin-1"), b"\xc3"])
async def test_a_token_that_is_not_utf8_is_401_not_500(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, token: bytes
) -> None:
    """aiohttp decodes header bytes that are not UTF-8 into surrogates; ``str.encode()``
    of those raised UnicodeEncodeError in the token check: a 500 with a traceback. Now
    a wrong token like any other, on the admin API, /metrics, exports and the dashboard."""
    async with admin(tmp_path) as (rc, _):
        good = rc.coord.config.admin_token.encode()
        for path, refused in (("/admin/status", b" 401 "), ("/metrics", b" 401 "),
                              ("/export/rounds.csv", b" 401 "), ("/dashboard/nodes", b" 302 ")):  # fmt: skip
            for auth in (b"Bearer " + token, b"Bearer " + good + token):
                status = await _raw_get(rc.port, path, auth)
                assert refused in status, (path, auth, status)
            assert b" 200 " in await _raw_get(rc.port, path, b"Bearer " + good), path
    _no_server_errors(caplog)


@pytest.mark.parametrize(
    "fields",
    [
        {"by": "a\x00b"},
        {"by": "ana\r\n2026-12-01 INFO forged line"},
        {"note": "n\x00te"},
        {"by": "\ud800"},
        {"note": "x\udfff"},
    ],
    ids=["nul-by", "crlf-by", "nul-note", "surrogate-by", "surrogate-note"],
)
async def test_review_with_control_characters_is_400_on_every_backend(
    tmp_path: Path, db_url: str, fields: dict[str, str], caplog: pytest.LogCaptureFixture
) -> None:
    """NUL in ``by`` or ``note`` reached PostgreSQL, which refuses it in text: a
    StorageError the handler did not catch (500). CR/LF in ``by`` (a name, written into
    the log line of the review) forged log lines. Now 400 first; a note keeps its
    newlines and tabs, and nothing is stored for a refused review. A lone surrogate
    (``"\\ud800"``, valid JSON) in ``by`` or ``note`` could not be encoded for the
    database: a 500, now a 400 too."""
    store = Store(db_url)
    fid = FlagStore(store).add_flag("slow", "confirmed", PROFILE.name, ["ed25519:x"], 1.0, 2.0, {})
    async with admin(tmp_path, store) as (_rc, call):
        body = {"state": "acknowledged", "by": "ana", **fields}
        status, text = await call("POST", f"/admin/flags/{fid}/review", json=body)
        assert status == 400, text
        status, text = await call("GET", f"/admin/flags/{fid}")
        assert status == 200 and '"state": "open"' in text, text
        ok = {"state": "acknowledged", "by": "ana", "note": "line 1\n\tline 2"}
        status, text = await call("POST", f"/admin/flags/{fid}/review", json=ok)
        assert status == 200, text
    _no_server_errors(caplog)


@pytest.mark.parametrize("fid", ["2147483648", "9" * 18, str(2**63 - 1), str(2**63), "9" * 30])
async def test_a_flag_id_of_no_flag_is_404_on_every_backend(
    tmp_path: Path, db_url: str, fid: str, caplog: pytest.LogCaptureFixture
) -> None:
    """An id with no flag is 404 (no such flag) from GET and from a review, never a 500:
    past the column's 64 bits before the database (PostgreSQL would refuse it: 'bigint
    out of range'), below that from the query. Session 12 bounded ids at 2^31 (int4)."""
    async with admin(tmp_path, Store(db_url)) as (_rc, call):
        status, text = await call("GET", f"/admin/flags/{fid}")
        assert (status, text) == (404, f"no flag {int(fid)}")
        body = {"state": "acknowledged", "by": "ana"}
        status, text = await call("POST", f"/admin/flags/{fid}/review", json=body)
        assert (status, text) == (404, f"no flag {int(fid)}")
    _no_server_errors(caplog)


async def test_a_flag_id_past_2_31_is_found_on_every_backend(
    tmp_path: Path, db_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Flag ids are 64-bit (session 13): a flag numbered past 2^31 is shown and reviewed
    (the session 12 guard answered 404 for every id from 2^31 up)."""
    from sqlalchemy import insert

    from netcheck.storage.tables import flags

    store = Store(db_url)
    fid = 2**31 + 7
    row = {"flag_id": fid, "kind": "slow", "status": "confirmed", "profile": PROFILE.name,
           "node_keys": ["ed25519:x"], "created_at": 1.0, "evidence": {}}  # fmt: skip
    with store._write("add a flag past 2^31") as conn:
        conn.execute(insert(flags).values(**row))
    async with admin(tmp_path, store) as (_rc, call):
        status, text = await call("GET", f"/admin/flags/{fid}")
        assert status == 200 and f'"flag_id": {fid}' in text, text
        body = {"state": "acknowledged", "by": "ana"}
        status, text = await call("POST", f"/admin/flags/{fid}/review", json=body)
        assert status == 200, text
    _no_server_errors(caplog)


@pytest.mark.parametrize(
    ("path", "body", "named"),
    [("/admin/rounds", {"profle": "adm"}, "'profle'"),
     ("/admin/rounds", {"rounds": 5}, "'rounds'"),
     ("/admin/screening", {"round": 0}, "'round'"),
     ("/admin/screening/jobs", {"rounds": 0, "profle": "adm"}, "'profle'"),
     ("/admin/flags/1/review", {"state": "ack", "by": "me", "notes": "x"}, "'notes'")],
)  # fmt: skip
async def test_a_misspelt_field_is_400_and_named(
    tmp_path: Path, path: str, body: dict[str, Any], named: str
) -> None:
    """A key the endpoint does not read is refused, named, before anything runs: a
    misspelt ``profle`` or ``round`` used to run the default profile or the default 32
    rounds without a word (review, session 13)."""
    async with admin(tmp_path) as (rc, call):
        status, text = await call("POST", path, json=body)
        assert status == 400, text
        assert text.startswith(f"unknown field(s) {named}; expected: "), text
        assert rc.coord.store.list_rounds() == []


@pytest.mark.parametrize(
    ("fields", "named"),
    [({"state": "nope"}, "unknown state 'nope'"), ({"by": ""}, "by must name"),
     ({"by": "   "}, "by must name"), ({"by": "x" * 201}, "by must name"),
     ({"note": "x" * 2001}, "note is longer than 2000")],
    ids=["state", "empty-by", "blank-by", "long-by", "long-note"],
)  # fmt: skip
async def test_a_review_the_store_would_refuse_is_400_naming_the_field(
    tmp_path: Path, fields: dict[str, str], named: str
) -> None:
    """An unknown state, an empty or too long ``by`` or a too long ``note`` was a 409
    (the code for a move the flag's state does not allow), though no state could make
    the request right: now a 400 naming the field, and nothing is stored."""
    store = Store(f"sqlite:///{tmp_path / 'r.db'}")
    fid = FlagStore(store).add_flag("slow", "confirmed", PROFILE.name, ["ed25519:x"], 1.0, 2.0, {})
    async with admin(tmp_path, store) as (_rc, call):
        body = {"state": "acknowledged", "by": "ana", **fields}
        status, text = await call("POST", f"/admin/flags/{fid}/review", json=body)
        assert (status, text.startswith(named)) == (400, True), text
        status, text = await call("GET", f"/admin/flags/{fid}")
        assert status == 200 and '"reviews": []' in text, text
