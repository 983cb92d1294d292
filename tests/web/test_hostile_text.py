"""Pages, plots and exports with hostile text in every field that is not a number: names,
fingerprints, error texts, reasons, review notes."""

from __future__ import annotations

from pathlib import Path

import aiohttp
import pytest
from sqlalchemy import select
from web_support import web_coordinator

from netcheck.config import Profile, load_profile
from netcheck.lab.sample import fill_synthetic
from netcheck.storage import tables
from netcheck.storage.reviews import ReviewStore

#: A name matplotlib parsed as mathtext (``$...$``): a ValueError, the page a 500.
MATH = r"gpu $\frac{$ 5"
MARKUP = '"><svg onload=alert(1)><script>alert(2)</script>'


@pytest.fixture
def profile() -> Profile:
    return load_profile("cpu-tiny")


async def test_pages_with_hostile_names_render_escaped(tmp_path: Path, profile: Profile) -> None:
    """A display name holding ``$...$`` drew every plot naming the node as mathtext (a
    parse error: the node, round and flag pages were 500s); markup in names, reasons,
    errors, fingerprints and review notes stays text on every page."""
    async with web_coordinator(tmp_path, [profile]) as rc:
        store = rc.coord.store
        fill_synthetic(store, n_rounds=6, n_honest=2, seed=3)
        with store._engine.begin() as conn:
            keys = [k for (k,) in conn.execute(select(tables.nodes.c.node_key))]
            for key, name in zip(keys, (MATH, MARKUP, MATH + MARKUP), strict=False):
                conn.execute(
                    tables.nodes.update()
                    .where(tables.nodes.c.node_key == key)
                    .values(name=name, fingerprint={"engine": MARKUP, MARKUP: MATH})
                )
            conn.execute(tables.results.update().values(error=MARKUP))
            conn.execute(tables.verdicts.update().values(reason=MARKUP))
            rounds = [r for (r,) in conn.execute(select(tables.rounds.c.round_id))]
            flag_ids = [f for (f,) in conn.execute(select(tables.flags.c.flag_id))]
        ReviewStore(store).review(flag_ids[0], "acknowledged", MARKUP, MARKUP)
        paths = ["/dashboard/nodes", "/dashboard/rounds", "/dashboard/flags"]
        paths += [f"/dashboard/nodes/{k}" for k in keys]
        paths += [f"/dashboard/rounds/{r}" for r in rounds[:2]]
        paths += [f"/dashboard/flags/{f}" for f in flag_ids]
        headers = {"Authorization": f"Bearer {rc.coord.config.admin_token}"}
        async with aiohttp.ClientSession(headers=headers) as http:
            for path in paths:
                async with http.get(f"http://127.0.0.1:{rc.port}{path}") as resp:
                    html = await resp.text()
                    assert resp.status == 200, (path, html[-400:])
                    assert "<script>" not in html and "<svg onload" not in html, path
            async with http.get(f"http://127.0.0.1:{rc.port}/dashboard/flags/{flag_ids[0]}") as r:
                html = await r.text()
        assert "&lt;script&gt;alert(2)&lt;/script&gt;" in html  # the review's note and by
        assert r"gpu $\frac{$ 5" in html  # the name, drawn as it is in the plots' text
