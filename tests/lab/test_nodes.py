"""netcheck.lab.nodes: the made-up adversary copies the farm backend's fingerprint."""

from __future__ import annotations

from collections.abc import Sequence

from aiohttp.test_utils import TestServer

from netcheck.config import load_profile
from netcheck.lab.backend import make_backend_app
from netcheck.lab.nodes import build_worker


class FakeBackendWorker:
    """What the farm's backend would serve; its fingerprint names no loadable model."""

    fingerprint: dict[str, str | int] = {"engine": "fake", "model_id": "nothing-loadable"}

    async def run(self, prompts: Sequence[str]) -> list[list[int]]:
        return [[0] for _ in prompts]


async def test_made_up_with_backend_claims_its_fingerprint_without_an_engine() -> None:
    """With a backend URL, made-up claims what the backend serves and loads no engine
    (the fake backend's fingerprint names no real model, so an engine could not make it)."""
    backend = FakeBackendWorker()
    async with TestServer(make_backend_app(backend)) as server:
        url = str(server.make_url("")).rstrip("/")
        worker = await build_worker(load_profile("cpu-tiny"), None, "made-up", url)
    assert worker.fingerprint == backend.fingerprint
    out = await worker.run(["a", "b"])
    assert len(out) == 2 and all(len(row) == load_profile("cpu-tiny").max_new_tokens for row in out)
