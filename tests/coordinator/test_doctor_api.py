"""``POST /v1/doctor`` (docs/protocol.md §5.12) on a real loopback coordinator: anyone
can reach it without a session, so a hostile body is a 400 or 403, never a 500, and a
query's time must be a finite number within the skew bound."""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from netcheck.keys import public_key_text
from netcheck.lab.load import FAKE_FINGERPRINT
from netcheck.lab.testing import running_coordinator, small_profile
from netcheck.protocol.doctor import PATH, sign_doctor

PROFILE = small_profile("doc")
IDENTITY = Ed25519PrivateKey.generate()


def query(at: float | None = None, **fields: Any) -> dict[str, Any]:
    """A doctor query signed by :data:`IDENTITY` (``fields`` replace signed-over values
    after signing, so a replaced field no longer matches the signature)."""
    at = time.time() if at is None else at
    fp = dict(FAKE_FINGERPRINT)
    body = {
        "node_key": public_key_text(IDENTITY), "profile": PROFILE.name, "fingerprint": fp,
        "time": at, "signature": sign_doctor(IDENTITY, PROFILE.name, fp, at).hex(),
    }  # fmt: skip
    return {**body, **fields}


BAD_BODIES: dict[str, tuple[bytes, str]] = {
    "deep-array": (b"[" * 100_000 + b"]" * 100_000, "application/json"),
    "unknown-charset": (b"{}", "application/json; charset=bogus"),
    "time-beyond-float": (json.dumps(query(time=10**400)).encode(), "application/json"),
    "fingerprint-int-over-int64": (
        json.dumps(query(fingerprint={"engine": 2**64})).encode(), "application/json"
    ),
    "fingerprint-int-huge": (
        json.dumps(query(fingerprint={"engine": 10**30})).encode(), "application/json"
    ),
}  # fmt: skip


async def test_hostile_bodies_are_400_and_the_endpoint_keeps_answering(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Nested JSON, an unknown charset, numbers no float or int64 holds: 400, no error
    logged (aiohttp logs a 500 at ERROR with its traceback); a good query still works."""
    async with running_coordinator(tmp_path, [PROFILE]) as rc:
        url = f"http://127.0.0.1:{rc.port}{PATH}"
        async with aiohttp.ClientSession() as http:
            for name, (body, ctype) in BAD_BODIES.items():
                async with http.post(url, data=body, headers={"Content-Type": ctype}) as r:
                    text = await r.text()
                    assert r.status == 400, (name, r.status, text)
                    if name.startswith("fingerprint"):  # the field, not the protocol's code
                        assert text.startswith("fingerprint: ") and "4009" not in text, text
            async with http.post(url, json=query()) as r:
                assert r.status == 200, await r.text()
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert not errors, errors


@pytest.mark.parametrize("at", [float("nan"), float("inf"), float("-inf")])
async def test_time_must_be_finite_even_when_signed(tmp_path: Path, at: float) -> None:
    """A key holder's query signed over time NaN passed ``abs(now - T) <= 120`` (every
    comparison with NaN is false) and could be replayed for ever: refused now."""
    async with running_coordinator(tmp_path, [PROFILE]) as rc:
        url = f"http://127.0.0.1:{rc.port}{PATH}"
        async with aiohttp.ClientSession() as http, http.post(url, data=json.dumps(query(at))) as r:
            assert r.status in (400, 403), (r.status, await r.text())


async def test_database_down_is_a_503_that_does_not_repeat_the_database(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The coordinator's database fails under it (PostgreSQL stopped): a node's doctor
    query gets a 503 saying to try later, without the database's own words (the node is
    a peer; the coordinator's log has them), and no traceback (before: a 500 "Server got
    itself in trouble" and an ERROR with its traceback per query)."""
    from sqlalchemy.exc import OperationalError

    from netcheck.coordinator.doctor_api import DOCTOR_UNAVAILABLE

    async with running_coordinator(tmp_path, [PROFILE]) as rc:

        def refused(*args: object, **kwargs: object) -> object:
            raise OperationalError("connect", {}, ConnectionRefusedError("port 5432 refused"))

        monkeypatch.setattr(rc.coord.store._engine, "connect", refused)
        url = f"http://127.0.0.1:{rc.port}{PATH}"
        async with aiohttp.ClientSession() as http, http.post(url, json=query()) as r:
            text = await r.text()
            assert (r.status, text) == (503, DOCTOR_UNAVAILABLE)
    assert "5432" not in text and "5432" in caplog.text  # said to the operator only
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert not errors, errors
