"""Capacity of a profile (netcheck.capacity) and the [capacity] table (issue 10)."""

from __future__ import annotations

from pathlib import Path

import pytest

from netcheck.capacity import (
    MIN_MARGIN,
    UNSAFE_TEXT,
    capacity_margin,
    capacity_status,
    co_load_beta,
    derive_deadline,
    percentile,
    unsafe_profiles,
)
from netcheck.config import (
    DEFAULT_PROFILES_DIR,
    CapacityRecord,
    DeadlineParams,
    Profile,
    load_profile,
)
from netcheck.errors import ConfigError
from netcheck.lab.testing import small_profile
from netcheck.workloads import get_workload


def _cap(t_s: list[float], **kw: object) -> CapacityRecord:
    fields: dict[str, object] = {"t_s": t_s, "margin": 1.0, "card": "test", "date": "2026-11-30"}
    fields.update(kw)
    return CapacityRecord(**fields)  # type: ignore[arg-type]


def test_unmeasured_profile_is_unsafe_and_says_so() -> None:
    """No [capacity] table: unsafe, no margin, the plain sentence in the message."""
    status = capacity_status(small_profile())
    assert not status.safe and status.margin is None
    assert UNSAFE_TEXT in status.message and "netcheck engine calibrate" in status.message


def test_calibrate_hint_uses_the_callers_command_and_names_the_pool() -> None:
    """The hint calls netcheck the way the CLI was called (``prog``), mentions ``engine
    pool`` for a class of several cards, and says "machine" for a CPU profile."""
    cpu = small_profile()
    assert cpu.device == "cpu"
    message = capacity_status(cpu, ".venv/bin/netcheck").message
    assert f"`.venv/bin/netcheck engine calibrate --profile {cpu.name}` on the trusted machine" in (
        message
    )
    assert "pool the records with `.venv/bin/netcheck engine pool`" in message
    assert "card" not in message.split(":")[0] and UNSAFE_TEXT in message
    gpu = cpu.model_copy(update={"device": "cuda"})
    message = capacity_status(gpu).message
    assert "`netcheck engine calibrate" in message and "on the trusted card;" in message
    assert "a class of several cards" in message


def test_margin_is_recomputed_against_the_current_deadline() -> None:
    """t(2) / D(max_rtt): an edited, looser deadline lowers the margin below 1.2."""
    deadline = DeadlineParams(t_ref_s=1.0, a=1.1, b=1.0, slack_s=0.0, max_rtt_s=0.05)
    prof = small_profile(deadline=deadline, capacity=_cap([1.0, 1.9], margin=9.9))
    status = capacity_status(prof)
    assert status.safe and status.margin == pytest.approx(1.9 / 1.2)
    loose = prof.model_copy(update={"deadline": deadline.model_copy(update={"a": 1.8})})
    assert capacity_margin(1.9, loose) == pytest.approx(1.9 / 1.9)
    bad = capacity_status(loose)
    assert not bad.safe and bad.margin is not None and bad.margin < MIN_MARGIN
    assert UNSAFE_TEXT in bad.message
    assert [s.profile for s in unsafe_profiles([prof, loose])] == [loose.name]


def test_only_t1_measured_is_unmeasured() -> None:
    """A table with t(1) alone cannot judge two identities."""
    assert capacity_status(small_profile(capacity=_cap([1.0]))).margin is None


def test_beta() -> None:
    """beta(k) = (t(k)/t(1) - 1)/(k - 1); 0 when co-location is free, 1 when saturated."""
    assert co_load_beta([1.0, 2.0, 3.0]) == [1.0, 1.0]
    assert co_load_beta([2.0, 2.0]) == [0.0]
    assert co_load_beta([1.447, 2.673])[0] == pytest.approx(0.847, abs=1e-3)
    with pytest.raises(ValueError):
        co_load_beta([])
    with pytest.raises(ValueError):
        co_load_beta([1.0, 0.0])


def test_derive_deadline_from_spread() -> None:
    """a = 1 + 2h, b = 1 + h with h the honest spread (p99 over median), slack 2 x jitter."""
    times = [1.0] * 9 + [1.2]  # median 1.0, p99 1.2: h = 0.2
    d = derive_deadline(times, rtt_jitter_s=0.01, max_rtt_s=0.05)
    assert (d.t_ref_s, d.p99_s, d.a, d.b, d.slack_s, d.max_rtt_s) == (
        1.0, 1.2, 1.4, 1.2, 0.02, 0.05,
    )  # fmt: skip
    tight = derive_deadline([1.0, 1.001, 1.002], rtt_jitter_s=0.0, max_rtt_s=0.0)
    assert (tight.a, tight.b) == (1.1, 1.05)  # the 5% floor
    for bad in ([], [0.0, 1.0]):
        with pytest.raises(ValueError):
            derive_deadline(bad, rtt_jitter_s=0.0, max_rtt_s=0.0)
    with pytest.raises(ValueError):
        derive_deadline([1.0], rtt_jitter_s=-1.0, max_rtt_s=0.0)
    assert d.coupling == 0.0


def test_derive_deadline_records_the_coupling_and_the_margin_uses_it() -> None:
    """coupling is recorded as given (a, b unchanged); the margin is t(2) over the D it
    gives, max(a t_ref, b p99) (1 + coupling) + 2 max_rtt + slack; outside [0, 1) refused."""
    times = [1.0] * 9 + [1.2]
    plain = derive_deadline(times, rtt_jitter_s=0.01, max_rtt_s=0.05)
    d = derive_deadline(times, rtt_jitter_s=0.01, max_rtt_s=0.05, coupling=0.2)
    assert d.coupling == 0.2 and d.model_dump(exclude={"coupling"}) == plain.model_dump(
        exclude={"coupling"}
    )
    prof = small_profile(deadline=d, capacity=_cap([1.0, 2.2]))
    assert prof.deadline_s(0.05) == pytest.approx(1.2 * 1.2 * 1.2 + 0.1 + 0.02)  # b p99 > a t_ref
    assert capacity_status(prof).margin == pytest.approx(2.2 / 1.848)
    for bad in (-0.1, 1.0):
        with pytest.raises(ValueError, match="coupling"):
            derive_deadline(times, rtt_jitter_s=0.01, max_rtt_s=0.05, coupling=bad)


def test_percentile_nearest_rank() -> None:
    """Nearest rank: the 99th of 10 values is the largest."""
    assert percentile(list(range(1, 11)), 99) == 10
    assert percentile([3.0], 50) == 3.0
    with pytest.raises(ValueError):
        percentile([], 50)


def test_capacity_record_validation(tmp_path: Path) -> None:
    """Bad [capacity] tables are refused with the file and field named."""
    base = (DEFAULT_PROFILES_DIR / "cpu-tiny.toml").read_text()
    cases = {
        "t_s = [1.0, -2.0]\nmargin = 1.0\ncard = 'x'\ndate = 'd'": "t(k) must be > 0",
        "t_s = [1.0, 2.0]\nbeta = [1.0, 1.0]\nmargin = 1.0\ncard = 'x'\ndate = 'd'": "beta has",
        "t_s = [1.0]\nmargin = 1.0\ndate = 'd'": "capacity.card",
        "t_s = [1.0]\nmargin = 1.0\ncard = 'x'\ndate = 'd'\nspeed = 3": "capacity.speed",
    }
    for body, needle in cases.items():
        path = tmp_path / "cpu-tiny.toml"
        path.write_text(base + "\n[capacity]\n" + body + "\n")
        with pytest.raises(ConfigError, match=needle.replace("(", r"\(").replace(")", r"\)")):
            load_profile(path)


def test_shipped_h200_profiles_meet_the_capacity_target() -> None:
    """Every shipped H200 profile is measured and safe (margin >= 1.2) with the 20%
    co-hosting allowance in its deadline (it was >= 1.5 without it, issue 10), and
    records that margin; bf16 ones record their FLOP/s fraction."""
    for path in sorted(DEFAULT_PROFILES_DIR.glob("h200-*.toml")):
        prof = load_profile(path)
        status = capacity_status(prof)
        assert prof.deadline.coupling == 0.2, path
        assert status.safe and status.margin is not None and status.margin >= MIN_MARGIN, path
        assert prof.capacity is not None
        assert prof.capacity.margin == pytest.approx(status.margin, abs=5e-4), path
        if prof.dtype == "bfloat16":
            assert prof.capacity.flops_fraction is not None, path
            assert prof.prompt_chars == prof.prompt_len - 1, path


def test_prompt_chars_fixes_the_prompt_length() -> None:
    """prompt_chars gives prompts of exactly that length (canaries and decoys alike)."""
    prof = small_profile(prompt_len=256, prompt_chars=255)
    prompts = get_workload(prof).generator(7).prompts(50)
    assert {len(p) for p in prompts} == {255}
    assert max(len(p) for p in get_workload(small_profile()).generator(7).prompts(50)) <= 120


def _without_coupling(prof: Profile) -> Profile:
    """``prof`` with the deadline it had before the co-hosting allowance (coupling 0)."""
    return prof.model_copy(update={"deadline": prof.deadline.model_copy(update={"coupling": 0.0})})


def test_an_honest_node_slowed_by_a_loaded_neighbour_is_in_time_at_the_shipped_deadline() -> None:
    """EMULATED times (not measured): an honest node at 1.02 t_ref alone and 1.2 x that
    when its co-hosted neighbour is loaded too (benign coupling up to 20%, the bound the
    detectors allow, goal G4) passes every round at each shipped GPU profile's deadline;
    without the allowance it was late in every coupled round (bf16: 2.71 s + rtt
    against 2.46 s + 2 rtt)."""
    for path in sorted(DEFAULT_PROFILES_DIR.glob("h200-*.toml")):
        prof = load_profile(path)
        before = _without_coupling(prof)
        alone = 1.02 * prof.deadline.t_ref_s
        coupled = 1.2 * alone
        for rtt in (0.0, 0.02, prof.deadline.max_rtt_s):
            assert alone + rtt <= before.deadline_s(rtt), path
            assert coupled + rtt > before.deadline_s(rtt), path
            assert coupled + rtt <= prof.deadline_s(rtt), path


def test_a_beta_09_farm_pair_is_still_late_in_every_co_loaded_round() -> None:
    """EMULATED times: two identities on one card with co-load slowdown beta 0.9 (the
    shipped shapes measure 0.90-0.91) take 1.9 t_ref when both are loaded: late at every
    shipped GPU profile's deadline with the co-hosting allowance, whatever RTT they
    claim (the credit is capped at max_rtt_s)."""
    for path in sorted(DEFAULT_PROFILES_DIR.glob("h200-*.toml")):
        prof = load_profile(path)
        farm = 1.9 * prof.deadline.t_ref_s
        for rtt in (0.0, 0.02, prof.deadline.max_rtt_s, 0.5):
            assert farm + rtt > prof.deadline_s(rtt), path
