"""Exports round-trip: CSV and JSON of rounds, verdicts, timings and flags equal the DB rows."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import aiohttp
import pytest
from sqlalchemy import select
from web_support import web_coordinator

from netcheck.config import Profile, load_profile
from netcheck.lab.sample import fill_synthetic
from netcheck.storage import tables
from netcheck.storage.flags import flags as flags_table
from netcheck.storage.reader import EXPORT_COLUMNS
from netcheck.web.exports import KINDS, parse_csv

TABLES = {"rounds": tables.rounds, "verdicts": tables.verdicts, "timings": tables.results}


def db_rows(store: Any, kind: str) -> list[dict[str, Any]]:
    """Rows read straight from the table, independently of netcheck.storage.reader."""
    if kind == "flags":
        query = select(flags_table).order_by(flags_table.c.flag_id.desc())
    else:
        t = TABLES[kind]
        cols = [t.c[c] for c in EXPORT_COLUMNS[kind]]
        order = [t.c.seq] if kind == "rounds" else [t.c.id]
        query = select(*cols).order_by(*order)
    with store._engine.connect() as conn:
        return [dict(r._mapping) for r in conn.execute(query)]


@pytest.fixture
def profile() -> Profile:
    return load_profile("cpu-tiny")


async def test_csv_and_json_exports_round_trip(tmp_path: Path, profile: Profile) -> None:
    """Every export, parsed back (CSV with the published types), equals the database rows."""
    async with web_coordinator(tmp_path, [profile]) as rc:
        fill_synthetic(rc.coord.store, n_rounds=6, n_honest=2, seed=3)
        headers = {"Authorization": f"Bearer {rc.coord.config.admin_token}"}
        base = f"http://127.0.0.1:{rc.port}/export"
        async with aiohttp.ClientSession(headers=headers) as http:
            for kind in KINDS:
                expected = db_rows(rc.coord.store, kind)
                assert expected, kind
                async with http.get(f"{base}/{kind}.json") as resp:
                    assert resp.status == 200
                    doc = await resp.json()
                assert doc["rows"] == expected, kind
                async with http.get(f"{base}/{kind}.csv") as resp:
                    assert resp.status == 200
                    assert resp.content_type == "text/csv"
                    text = await resp.text()
                columns, rows = parse_csv(text, doc["types"])
                assert columns == doc["columns"]
                assert rows == expected, kind


async def test_round_filter_and_unknown_export(tmp_path: Path, profile: Profile) -> None:
    """?round_id= limits an export to one round; an unknown export is a 404."""
    async with web_coordinator(tmp_path, [profile]) as rc:
        fill_synthetic(rc.coord.store, n_rounds=3, n_honest=2, seed=4)
        headers = {"Authorization": f"Bearer {rc.coord.config.admin_token}"}
        base = f"http://127.0.0.1:{rc.port}/export"
        async with aiohttp.ClientSession(headers=headers) as http:
            async with http.get(f"{base}/verdicts.json?round_id=r0001-synthetic") as resp:
                rows = (await resp.json())["rows"]
            assert rows and {r["round_id"] for r in rows} == {"r0001-synthetic"}
            async with http.get(f"{base}/secrets.csv") as resp:
                assert resp.status == 404
