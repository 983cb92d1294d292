"""The capacity gate of POST /admin/screening (netcheck.coordinator.capacity_gate)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from netcheck.config import CapacityRecord, DeadlineParams
from netcheck.coordinator.capacity_gate import capacity_context
from netcheck.lab.adversary import MadeUpWorker
from netcheck.lab.testing import canary_store, running_coordinator, small_profile
from netcheck.storage.flags import FlagStore

UNSAFE = small_profile("unsafe")
SAFE = small_profile(
    "safe",
    deadline=DeadlineParams(t_ref_s=1.0, a=1.1, b=1.0, slack_s=0.0, max_rtt_s=0.0),
    capacity=CapacityRecord(t_s=[1.0, 2.0], margin=1.8, card="t", date="2026-11-30"),
)
COORD: Any = SimpleNamespace(profiles={"unsafe": UNSAFE, "safe": SAFE})


def test_safe_profile_runs_without_context() -> None:
    """A measured profile with margin >= 1.2 needs no override and records nothing."""
    assert capacity_context(COORD, "safe", {"check_capacity": True}) is None


def test_unsafe_profile_refused_when_checked() -> None:
    """check_capacity without an override: 409 naming the override option."""
    with pytest.raises(web.HTTPConflict) as err:
        capacity_context(COORD, "unsafe", {"check_capacity": True})
    assert "--override-capacity" in str(err.value.text)
    assert "cannot tell two identities on one card apart" in str(err.value.text)


@pytest.mark.parametrize("margin", [None, 0.5])
def test_refusal_names_no_command_line_of_the_client(margin: float | None) -> None:
    """The 409 goes to an HTTP client whose way of calling netcheck the coordinator does
    not know (``.venv/bin/netcheck``, ``python -m netcheck``, a script): it spells no
    command with a program name (it said a bare `netcheck engine calibrate` before, as
    the capacity status does by default), names the override both as the CLI option and
    as the request's JSON field, and says how to measure the capacity (calibrate, pool)
    whether the profile is unmeasured or measured below the margin."""
    profile = UNSAFE if margin is None else UNSAFE.model_copy(
        update={"capacity": CapacityRecord(t_s=[1.0, 1.01], margin=margin, card="t",
                                           date="2026-11-30")}
    )  # fmt: skip
    coord: Any = SimpleNamespace(profiles={profile.name: profile})
    with pytest.raises(web.HTTPConflict) as err:
        capacity_context(coord, profile.name, {"check_capacity": True})
    text = str(err.value.text)
    assert "`netcheck " not in text and "netcheck engine" not in text, text
    assert "`screen run --override-capacity REASON`" in text
    assert "`capacity_override`" in text
    assert f"`engine calibrate --profile {profile.name}`" in text and "`engine pool`" in text
    assert ("capacity not measured" if margin is None else "capacity margin 0.") in text


def test_override_is_recorded() -> None:
    """With a reason the run goes ahead; status and reason go into the rounds' context."""
    ctx = capacity_context(
        COORD, "unsafe", {"check_capacity": True, "capacity_override": " lab test "}
    )
    assert ctx is not None and ctx["capacity"]["override"] == "lab test"
    assert ctx["capacity"]["safe"] is False and ctx["capacity"]["margin"] is None


@pytest.mark.parametrize(
    "body", [{"check_capacity": "yes"}, {"capacity_override": ""}, {"capacity_override": 3}]
)
def test_malformed_fields_are_bad_requests(body: dict[str, object]) -> None:
    """Wrong types and an empty reason are 400."""
    with pytest.raises(web.HTTPBadRequest):
        capacity_context(COORD, "unsafe", body)


async def test_live_refusal_and_recorded_override(tmp_path: Path) -> None:
    """Over HTTP: refused without override; with it every round stores the override."""
    fp: dict[str, str | int] = {"engine": "fake", "weight_hash": "00" * 32}
    store = canary_store(tmp_path / "netcheck.db", UNSAFE, fp, 50, answer=(1,) * 4)
    async with running_coordinator(tmp_path, [UNSAFE], store=store) as rc:
        rc.start_named({f"n{i}": MadeUpWorker(fp, 4) for i in range(2)}, UNSAFE.name)
        await rc.wait_connected(2)
        headers = {"Authorization": f"Bearer {rc.coord.config.admin_token}"}
        url = f"http://127.0.0.1:{rc.port}/admin/screening"
        async with aiohttp.ClientSession(headers=headers) as http:
            async with http.post(url, json={"rounds": 1, "check_capacity": True}) as resp:
                assert resp.status == 409
            body = {"rounds": 2, "check_capacity": True, "capacity_override": "bench"}
            async with http.post(url, json=body) as resp:
                assert resp.status == 200, await resp.text()
                rounds = (await resp.json())["rounds"]
        flags = FlagStore(store)
        for r in rounds:
            sched = flags.schedule(r["round_id"])
            assert sched is not None and sched["context"]["capacity"]["override"] == "bench"
