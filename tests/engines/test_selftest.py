"""Tests for netcheck.engines.selftest and ``netcheck engine selftest``."""

from __future__ import annotations

import functools
import hashlib
import json
import random
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from netcheck.config import Profile
from netcheck.engines import Engine, load_engine
from netcheck.engines.commands import engine as engine_group
from netcheck.engines.selftest import render_text, run_selftest

SMALL: dict[str, Any] = {
    "sizes": [1, 4],
    "throughput_sizes": [8],
    "repeats": 2,
    "mixes": 2,
    "timing_runs": 1,
}


class HashEngine(Engine):
    """A pure-Python engine: tokens from a hash of the prompt (optionally disturbed)."""

    name = "hash"

    def __init__(self, *, batch_size: int = 8, noise: float = 0.0, mates: bool = False) -> None:
        super().__init__(batch_size=batch_size, prompt_len=64, max_new_tokens=4)
        self._fingerprint = {"engine": "hash", "batch_size": batch_size}
        self._rng = random.Random()  # unseeded on purpose: a non-deterministic engine
        self._noise, self._mates = noise, mates

    def generate(self, prompts: Sequence[str]) -> list[list[int]]:
        items = self._check_prompts(prompts)
        out = []
        for p in items:
            key = p + (items[0] if self._mates else "")  # mates: depends on the batch
            row = list(hashlib.sha256(key.encode()).digest()[:4])
            if self._rng.random() < self._noise:
                row[0] ^= 1
            out.append(row)
        return out


def _profile(make_profile: Callable[..., Profile], **kw: object) -> Profile:
    return make_profile("torch", max_new_tokens=4, **kw)


def test_deterministic_fake_passes(make_profile: Callable[..., Profile]) -> None:
    """A deterministic, batch-invariant engine passes (a) and (b) with zero sensitivity."""
    report = run_selftest(_profile(make_profile), engine=HashEngine(), **SMALL)
    assert report.passed
    assert [s.fraction for s in report.sensitivity] == [0.0, 0.0]
    assert [t.batch_size for t in report.throughput] == [8]
    assert json.loads(json.dumps(report.to_dict()))["passed"] is True
    assert "repeat determinism" in render_text(report)


def test_noisy_engine_fails_repeat(make_profile: Callable[..., Profile]) -> None:
    """An engine that flips output tokens at random fails repeat determinism."""
    report = run_selftest(_profile(make_profile), engine=HashEngine(noise=0.5), **SMALL)
    assert not report.passed and not report.repeat.passed and report.repeat.mismatched > 0


def test_batch_dependent_engine_fails_invariance(make_profile: Callable[..., Profile]) -> None:
    """An engine whose outputs depend on the other prompts fails (b) but passes (a)."""
    report = run_selftest(_profile(make_profile), engine=HashEngine(mates=True), **SMALL)
    assert report.repeat.passed and not report.invariance.passed and not report.passed


def test_bad_arguments(make_profile: Callable[..., Profile]) -> None:
    """repeats < 2 or probes >= B raise ValueError."""
    with pytest.raises(ValueError):
        run_selftest(_profile(make_profile), engine=HashEngine(), repeats=1)
    with pytest.raises(ValueError):
        run_selftest(_profile(make_profile), engine=HashEngine(), probes=8)


@pytest.mark.slow
def test_torch_engine_passes_and_perturbed_logits_fail(
    model_cache: Path, make_profile: Callable[..., Profile]
) -> None:
    """The real torch engine on tiny passes; with random noise on its logits it fails."""
    import torch
    from transformers import LogitsProcessor, LogitsProcessorList

    profile = _profile(make_profile, prompt_len=48)
    eng = load_engine(profile)
    try:
        report = run_selftest(profile, engine=eng, **SMALL)
        assert report.passed, render_text(report)

        class Noise(LogitsProcessor):
            def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
                return scores + 100.0 * torch.rand_like(scores)

        model = eng._model  # type: ignore[attr-defined]
        model.generate = functools.partial(
            model.generate, logits_processor=LogitsProcessorList([Noise()])
        )
        noisy = run_selftest(profile, engine=eng, **SMALL)
        assert not noisy.passed and not noisy.repeat.passed
    finally:
        eng.close()


def test_cli_exit_codes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`engine selftest` exits 0 and writes JSON on a pass, 1 on a failing engine."""
    runner = CliRunner()
    out = tmp_path / "st.json"
    args = ["selftest", "--profile", "cpu-factoring", "--quick", "--json", str(out)]
    result = runner.invoke(engine_group, args)
    assert result.exit_code == 0, result.output
    assert "PASS" in result.output and json.loads(out.read_text())["passed"] is True

    import netcheck.engines as engines

    monkeypatch.setattr(
        engines, "load_engine", lambda p: HashEngine(batch_size=p.batch_size, noise=0.5)
    )
    result = runner.invoke(engine_group, ["selftest", "--profile", "cpu-factoring", "--quick"])
    assert result.exit_code == 1, result.output
    assert "FAIL" in result.output
