#!/usr/bin/env python3
"""Time the dashboard pages over a database of synthetic rounds; optionally screenshot them.

Fills a fresh SQLite database with ``--rounds`` synthetic rounds through the Store API
(:func:`netcheck.lab.sample.fill_synthetic`: honest nodes, a proxy pair, a made-up node,
a flaky node, screening schedules and two flags), serves it with a coordinator on
loopback, and fetches every page ``--repeat`` times with the admin token:

- ``server`` — wall time of one HTTP GET over loopback (query + render + transfer);
- ``chromium`` (with ``--browser``) — the page's load event in headless Debian Chromium
  (``performance.timing.loadEventEnd - navigationStart``), i.e. what an analyst waits.

``--screenshots DIR`` writes full-page PNGs of the nodes, round, node, flags and flag
pages (needs Debian's chromium + chromium-driver and selenium; scripts/setup).

Usage: ``.venv/bin/python scripts/bench_dashboard.py [--rounds 100] [--browser]
[--screenshots docs/images]``
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import secrets
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any
from urllib.parse import quote

import aiohttp
from aiohttp import web
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from netcheck.config import CoordinatorConfig, load_profile
from netcheck.coordinator.assembly import make_app
from netcheck.coordinator.server import Coordinator
from netcheck.lab.sample import fill_synthetic
from netcheck.storage import ReferenceRow, Store
from netcheck.web import plots

CHROME_FLAGS = (
    "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
    "--disable-dev-shm-usage", "--hide-scrollbars",
)  # fmt: skip


def chrome(width: int = 1280, height: int = 900) -> Any:
    """Headless Debian Chromium through chromedriver (no download)."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    opts = webdriver.ChromeOptions()
    opts.binary_location = "/usr/bin/chromium"
    for flag in (*CHROME_FLAGS, f"--window-size={width},{height}"):
        opts.add_argument(flag)
    opts.add_argument(f"--user-data-dir={tempfile.mkdtemp(prefix='netcheck-chrome-')}")
    return webdriver.Chrome(options=opts, service=Service("/usr/bin/chromedriver"))


def browser_pass(
    base: str, token: str, pages: dict[str, str], repeat: int, shots: Path | None
) -> dict[str, list[float]]:
    """Load every page ``repeat`` times in Chromium; optionally save full-page PNGs."""
    driver = chrome()
    times: dict[str, list[float]] = {name: [] for name in pages}
    try:
        driver.get(f"{base}/dashboard/nodes?token={quote(token)}")  # sets the cookie
        for _ in range(repeat):
            for name, path in pages.items():
                driver.get(base + path)
                ms = driver.execute_script(
                    "const t = performance.timing; return t.loadEventEnd - t.navigationStart;"
                )
                times[name].append(float(ms) / 1e3)
        if shots is not None:
            shots.mkdir(parents=True, exist_ok=True)
            for name, path in pages.items():
                if name not in ("nodes", "round", "node", "flags", "flag"):
                    continue
                driver.get(base + path)
                size = driver.execute_cdp_cmd("Page.getLayoutMetrics", {})["cssContentSize"]
                # some Chromium builds report 0 here right after a load: ask the page
                height = size["height"] or driver.execute_script(
                    "return document.documentElement.scrollHeight;"
                )
                clip = {"x": 0, "y": 0, "width": 1280, "height": min(height, 2400 if name == "flag" else 1700),
                        "scale": 1}  # fmt: skip
                shot = driver.execute_cdp_cmd(
                    "Page.captureScreenshot",
                    {"format": "png", "captureBeyondViewport": True, "clip": clip},
                )
                out = shots / f"dashboard-{name}.png"
                out.write_bytes(base64.b64decode(shot["data"]))
                print(f"screenshot {out}", file=sys.stderr)
    finally:
        driver.quit()
    return times


async def run(args: argparse.Namespace) -> dict[str, Any]:
    tmp = Path(tempfile.mkdtemp(prefix="netcheck-bench-"))
    db = f"sqlite:///{tmp / 'netcheck.db'}"
    store = Store(db)
    t0 = time.perf_counter()
    nodes = fill_synthetic(store, args.rounds, args.honest, seed=args.seed)
    fill_s = time.perf_counter() - t0
    profile = load_profile("cpu-tiny")
    # A small canary pool for the synthetic nodes' fingerprint, so the banner shows.
    store.add_references(
        [ReferenceRow(f"bench{i}", profile.name, "f" * 64, f"q{i}", (1,), time.time())
         for i in range(5 * profile.canaries_max)]
    )  # fmt: skip
    cfg = CoordinatorConfig(
        host="127.0.0.1", port=0, identity_key=tmp / "coordinator.pem", open_enrollment=True,
        database=db, admin_token=secrets.token_urlsafe(24), profiles=[profile.name],
    )  # fmt: skip
    # two honest identities declared on one host, so the host column shows (the synthetic
    # keys are not real key text, so they are set without the config's key check)
    hosts = dict.fromkeys([n.key for n in nodes if n.behaviour == "honest"][:2], "rack7")
    cfg = cfg.model_copy(update={"node_hosts": hosts})
    coord = Coordinator(cfg, Ed25519PrivateKey.generate(), {profile.name: profile}, store)
    app = make_app(coord)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    base = f"http://127.0.0.1:{port}"
    by_name = {n.name: n.key for n in nodes}
    headers = {"Authorization": f"Bearer {cfg.admin_token}"}
    last_round = f"r{args.rounds - 1:04d}-synthetic"
    pages = {
        "nodes": "/dashboard/nodes",
        "rounds": "/dashboard/rounds",
        "round": f"/dashboard/rounds/{last_round}",
        "node": "/dashboard/nodes/" + quote(by_name["proxy-a"], safe=""),
        "flags": "/dashboard/flags",
        "flag": "/dashboard/flags/1",
        "rounds.csv": "/export/rounds.csv",
        "verdicts.csv": "/export/verdicts.csv",
        "timings.json": "/export/timings.json",
        "metrics": "/metrics",
    }
    server: dict[str, list[float]] = {name: [] for name in pages}
    sizes: dict[str, int] = {}
    try:
        async with aiohttp.ClientSession(headers=headers) as http:
            for _ in range(args.repeat):
                for name, path in pages.items():
                    t = time.perf_counter()
                    async with http.get(base + path) as resp:
                        body = await resp.read()
                        if resp.status != 200:
                            raise SystemExit(f"{path}: HTTP {resp.status}: {body[:300]!r}")
                    server[name].append(time.perf_counter() - t)
                    sizes[name] = len(body)
        browser: dict[str, list[float]] = {}
        if args.browser or args.screenshots:
            plots._CACHE.clear()  # the browser's first loads draw the plots again (cold)
            browser = await asyncio.to_thread(
                browser_pass, base, cfg.admin_token,
                {k: v for k, v in pages.items() if k.isalpha()},
                args.repeat if args.browser else 1, args.screenshots,
            )  # fmt: skip
    finally:
        await runner.cleanup()
        store.close()

    def stats(xs: list[float]) -> dict[str, float]:
        # The first load draws the plots; later loads of unchanged data hit the SVG cache.
        warm = xs[1:] or xs
        return {"first_ms": xs[0] * 1e3, "warm_median_ms": statistics.median(warm) * 1e3}

    return {
        "rounds": args.rounds,
        "nodes": len(nodes),
        "fill_s": fill_s,
        "repeat": args.repeat,
        "pages": {
            name: {
                "bytes": sizes[name],
                "server": stats(server[name]),
                **({"chromium": stats(browser[name])} if args.browser and name in browser else {}),
            }
            for name in pages
        },
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=100)
    ap.add_argument("--honest", type=int, default=8, help="honest nodes besides the 4 others")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--browser", action="store_true", help="also time loads in Chromium")
    ap.add_argument("--screenshots", type=Path, default=None, help="write PNGs to this folder")
    ap.add_argument("--json", action="store_true", help="print the raw JSON result")
    args = ap.parse_args()
    result = asyncio.run(run(args))
    if args.json:
        print(json.dumps(result, indent=2))
        return
    print(
        f"{result['rounds']} rounds x {result['nodes']} nodes (filled in {result['fill_s']:.1f} s),"
        f" first and warm loads of {result['repeat']}:"
    )
    print("(first load draws the plots; warm = median of the later loads, SVG cache hit)")
    print(f"{'page':<14}{'bytes':>9}{'server first/warm ms':>24}{'chromium first/warm ms':>26}")
    for name, p in result["pages"].items():
        s = p["server"]
        c = p.get("chromium")
        cs = f"{c['first_ms']:8.1f} / {c['warm_median_ms']:6.1f}" if c else ""
        ss = f"{s['first_ms']:8.1f} / {s['warm_median_ms']:6.1f}"
        print(f"{name:<14}{p['bytes']:>9}{ss:>24}{cs:>26}")


if __name__ == "__main__":
    main()
