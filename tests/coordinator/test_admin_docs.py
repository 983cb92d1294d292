"""docs/admin-api.md documents every admin route the coordinator serves."""

from __future__ import annotations

import re
from pathlib import Path

from netcheck.lab.testing import running_coordinator, small_profile

DOC = Path(__file__).resolve().parents[2] / "docs" / "admin-api.md"


async def test_every_admin_route_is_documented(tmp_path: Path) -> None:
    """Each method + path under /admin/ has a "### `METHOD PATH`" heading in the doc."""
    text = DOC.read_text()
    async with running_coordinator(tmp_path, [small_profile()]) as rc:
        app = rc.runner.app
        routes = {
            (r.method, r.resource.canonical)
            for r in app.router.routes()
            if r.resource is not None
            and r.resource.canonical.startswith("/admin/")
            and r.method != "HEAD"
        }
    assert routes
    headings = set(re.findall(r"^### `(\w+) (/admin/[^`?]*)", text, re.M))
    missing = sorted(routes - headings)
    assert not missing, f"undocumented admin routes: {missing}"
