"""A small slice of scripts/fuzz_protocol.py, so CI exercises the fuzzer and the parsers."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "fuzz_protocol.py"


@pytest.fixture(scope="module")
def fuzz():
    """The fuzz script imported as a module."""
    spec = importlib.util.spec_from_file_location("fuzz_protocol", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["fuzz_protocol"] = module
    spec.loader.exec_module(module)
    return module


def test_fuzz_3000_inputs(fuzz):
    """3,000 mutated inputs over every target raise nothing but ProtocolError, in time."""
    summary = fuzz.run(3000, seed=20260101, max_input_ms=5000.0, trace_memory=False)
    assert summary.failures == []
    assert set(summary.per_target) == set(fuzz.TARGETS)
    assert summary.outcomes.get("accepted", 0) < summary.iterations


def test_fuzz_is_deterministic(fuzz):
    """The same seed gives the same mutators, targets and outcomes."""
    one = fuzz.run(300, seed=7, trace_memory=False)
    two = fuzz.run(300, seed=7, trace_memory=False)
    assert (one.per_target, one.per_mutator, one.outcomes) == (
        two.per_target,
        two.per_mutator,
        two.outcomes,
    )
