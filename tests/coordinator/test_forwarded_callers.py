"""Loopback-only surfaces behind a trusted reverse proxy on the same host.

The README's deployment puts a TLS proxy in front of the coordinator, and the example
config trusts it (``trusted_proxies = ["127.0.0.1/32", ...]``). Every request it forwards
then arrives from 127.0.0.1, so the admin API, the dashboard, exports and ``/metrics``,
which refuse non-loopback callers even with the token, took any internet client through
the proxy for a local one. The caller is now the client the trusted proxy names in
``X-Forwarded-For`` (the rightmost hop that is not a trusted proxy, as for handshakes).
"""

from __future__ import annotations

from pathlib import Path

import aiohttp
import pytest

from netcheck.coordinator.limits import parse_networks
from netcheck.lab.testing import running_coordinator, small_profile

PROFILE = small_profile("fwd")
PATHS = ["/admin/status", "/metrics", "/export/rounds.csv", "/dashboard/nodes"]


async def _status(port: int, token: str, path: str, forwarded: str | None) -> int:
    headers = {"Authorization": f"Bearer {token}"}
    if forwarded is not None:
        headers["X-Forwarded-For"] = forwarded
    async with (
        aiohttp.ClientSession() as http,
        http.get(f"http://127.0.0.1:{port}{path}", headers=headers, allow_redirects=False) as r,
    ):
        return r.status


@pytest.mark.parametrize("path", PATHS)
async def test_a_remote_client_through_a_trusted_proxy_is_refused(
    tmp_path: Path, path: str
) -> None:
    async with running_coordinator(tmp_path, [PROFILE]) as rc:
        rc.coord.trusted_proxies = parse_networks(["127.0.0.0/8"])
        token = rc.coord.config.admin_token
        # an internet client, also when it forges a loopback hop on the left
        assert await _status(rc.port, token, path, "203.0.113.5") == 403
        assert await _status(rc.port, token, path, "127.0.0.1, 203.0.113.5") == 403
        # a local client through the proxy, and a local tool talking to the port directly
        assert await _status(rc.port, token, path, "127.0.0.1") == 200
        assert await _status(rc.port, token, path, None) == 200


async def test_without_trusted_proxies_the_header_is_ignored(tmp_path: Path) -> None:
    """X-Forwarded-For from an untrusted peer can be forged: it changes nothing."""
    async with running_coordinator(tmp_path, [PROFILE]) as rc:
        token = rc.coord.config.admin_token
        for path in PATHS:
            assert await _status(rc.port, token, path, "203.0.113.5") == 200, path


async def test_bodies_still_read_behind_a_trusted_proxy(tmp_path: Path) -> None:
    """The caller is replaced before the body is read (aiohttp cannot clone after)."""
    async with running_coordinator(tmp_path, [PROFILE]) as rc:
        rc.coord.trusted_proxies = parse_networks(["127.0.0.1/32"])
        # a local client other than the proxy: the request is cloned with its address
        headers = {"Authorization": f"Bearer {rc.coord.config.admin_token}",
                   "X-Forwarded-For": "::1"}  # fmt: skip
        url = f"http://127.0.0.1:{rc.port}/admin/rounds"
        async with (
            aiohttp.ClientSession() as http,
            http.post(url, json={"profile": "nope"}, headers=headers) as r,
        ):
            assert r.status == 409 and "unknown profile 'nope'" in await r.text()
