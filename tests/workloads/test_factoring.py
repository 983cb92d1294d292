"""Tests for the factoring workload: primes, semiprime streams, and a verified round."""

from __future__ import annotations

import random

import pytest

from netcheck.analysis.verdicts import Observation, Verdict, profile_mismatch, verify
from netcheck.config import load_profile
from netcheck.coordinator.planner import PlanNode, plan_round
from netcheck.engines import load_engine
from netcheck.engines.factoring_engine import FactoringEngine
from netcheck.storage import ReferenceRow
from netcheck.workloads import LlmWorkload, get_workload
from netcheck.workloads.factoring import (
    FactoringWorkload,
    SemiprimeGenerator,
    is_probable_prime,
    random_prime,
)


def _naive_prime(n: int) -> bool:
    return n >= 2 and all(n % d for d in range(2, int(n**0.5) + 1))


def test_miller_rabin_matches_trial_division() -> None:
    """is_probable_prime agrees with trial division below 5000 and rejects Carmichaels."""
    assert [n for n in range(5000) if is_probable_prime(n)] == [
        n for n in range(5000) if _naive_prime(n)
    ]
    for carmichael in (561, 1105, 1729, 2465, 41041, 3215031751, 3825123056546413051):
        assert not is_probable_prime(carmichael)
    assert is_probable_prime(2**61 - 1) and not is_probable_prime(2**62 - 1)


def test_random_prime_has_exact_bits() -> None:
    """random_prime gives primes with exactly the requested bit length."""
    rng = random.Random(3)
    for bits in (3, 8, 30, 31):
        p = random_prime(rng, bits)
        assert p.bit_length() == bits and is_probable_prime(p)
    with pytest.raises(ValueError):
        random_prime(rng, 2)


def test_semiprime_stream_is_seeded_and_correct() -> None:
    """Items are a pure function of the seed; n = p * q, p < q, 30-bit primes."""
    a = SemiprimeGenerator(b"s").items(20)
    assert a == SemiprimeGenerator(b"s").items(20)
    assert a != SemiprimeGenerator(b"t").items(20)
    for item in a:
        assert item.answer is not None
        p, q = item.answer
        assert p < q < 2**30 and p.bit_length() == q.bit_length() == 30
        assert p * q == int(item.prompt) and is_probable_prime(p) and is_probable_prime(q)
    with pytest.raises(ValueError):
        SemiprimeGenerator(1, bits=64)
    with pytest.raises(TypeError):
        SemiprimeGenerator(1.5)  # type: ignore[arg-type]


def test_get_workload() -> None:
    """Profiles pick their workload; the LLM stream equals PromptGenerator's."""
    assert isinstance(get_workload(load_profile("cpu-factoring")), FactoringWorkload)
    llm = get_workload(load_profile("cpu-tiny"))
    assert isinstance(llm, LlmWorkload) and not llm.answers_known
    assert llm.generator(5).items(2)[0].answer is None
    with pytest.raises(ValueError, match="unknown workload"):
        get_workload("sorting")


def test_profile_pairs_workload_and_engine() -> None:
    """A factoring workload needs the factoring engine and vice versa."""
    from netcheck.config import Profile

    base = load_profile("cpu-factoring").model_dump()
    with pytest.raises(ValueError, match="workload"):
        Profile.model_validate({**base, "engine": "torch"})
    with pytest.raises(ValueError, match="workload"):
        Profile.model_validate({**base, "workload": "llm"})


def _refs(profile_name: str, fp_id: str, n: int) -> list[ReferenceRow]:
    items = SemiprimeGenerator(b"references").items(n)
    return [
        ReferenceRow(f"r{i}", profile_name, fp_id, it.prompt, tuple(it.answer or ()), 0.0)
        for i, it in enumerate(items)
    ]


def _observe(outputs: list[list[int]]) -> Observation:
    return Observation(
        released_ns=0,
        arrived_ns=10**8,
        outputs=outputs,
        commitment=b"c",
        signature_ok=True,
        disconnected=False,
        error=None,
        commitment_ok=True,
    )


def test_factoring_round_verifies_and_catches_wrong_factors() -> None:
    """Honest factors pass; wrong factors at a canary are wrong-answer; an unknown
    fingerprint gets profile-mismatch."""
    profile = load_profile("cpu-factoring").model_copy(update={"batch_size": 8})
    engine = load_engine(profile)
    assert isinstance(engine, FactoringEngine)
    fp = engine.fingerprint_id
    nodes = [PlanNode("honest", fp), PlanNode("cheat", fp), PlanNode("other", "f" * 64)]
    plan = plan_round("R1", nodes, {fp: _refs(profile.name, fp, 12)}, profile, random.Random(7))
    assert [a.node_key for a in plan.assignments] == ["honest", "cheat"]
    ((skipped_key, reason),) = plan.skipped
    assert skipped_key == "other" and profile_mismatch(skipped_key, reason).verdict == (
        Verdict.PROFILE_MISMATCH
    )
    deadline = profile.deadline_s(0.0)
    for a in plan.assignments:
        assert all(p.isdigit() for p in a.prompts) and len(set(a.prompts)) == 8
        outputs = engine.generate(a.prompts)
        for pos, answer in zip(a.canary_positions, a.canary_answers, strict=True):
            assert tuple(outputs[pos]) == answer
        if a.node_key == "cheat":  # a plausible but wrong pair at one canary
            pos = a.canary_positions[0]
            outputs[pos] = [outputs[pos][0] + 2, outputs[pos][1]]
            out = verify(a, _observe(outputs), max_new_tokens=2, deadline_s=deadline)
            assert out.verdict == Verdict.WRONG_ANSWER
        else:
            out = verify(a, _observe(outputs), max_new_tokens=2, deadline_s=deadline)
            assert out.verdict == Verdict.PASS and out.canaries_matched == len(a.canary_ids)


def test_references_use_generated_answers() -> None:
    """build_references stores the generated factors without running the engine."""
    from netcheck.references.build import build_references

    class _Store:
        def __init__(self) -> None:
            self.rows: list[ReferenceRow] = []
            self.sets: list[tuple[str, str]] = []

        def add_reference_set(self, profile: str, fingerprint_id: str, fingerprint: object) -> None:
            self.sets.append((profile, fingerprint_id))

        def add_references(self, rows: list[ReferenceRow]) -> int:
            self.rows += rows
            return len(rows)

    class _NoRun(FactoringEngine):
        def generate(self, prompts):  # type: ignore[no-untyped-def]
            raise AssertionError("engine must not run for known answers")

    profile = load_profile("cpu-factoring")
    store = _Store()
    engine = _NoRun(batch_size=16, prompt_len=24)
    assert build_references(profile, engine, store, 20, seed=1) == 32  # type: ignore[arg-type]
    for row in store.rows:
        p, q = row.answer
        assert p * q == int(row.prompt) and row.fingerprint_id == engine.fingerprint_id
    assert store.sets == [("cpu-factoring", engine.fingerprint_id)]
