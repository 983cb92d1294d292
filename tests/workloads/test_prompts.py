"""Tests for netcheck.workloads.prompts."""

from __future__ import annotations

import re

import pytest

from netcheck.workloads import PromptGenerator


def test_deterministic_per_seed() -> None:
    """The same seed gives the same prompts, call by call."""
    assert PromptGenerator(42).prompts(50) == PromptGenerator(42).prompts(50)
    assert PromptGenerator(b"k").prompts(5) == PromptGenerator(b"k").prompts(5)


def test_known_first_prompt() -> None:
    """The stream is pinned: changing templates or seeding must be deliberate."""
    assert PromptGenerator(0).prompt() == PINNED_SEED0


def test_different_seeds_differ() -> None:
    """Different seeds (and int vs bytes of the same digits) give different prompts."""
    a = PromptGenerator(1).prompts(20)
    assert a != PromptGenerator(2).prompts(20)
    assert PromptGenerator(b"1").prompts(20) != a


def test_lengths_within_default_bounds() -> None:
    """Every prompt has 24..120 characters by default, with varied lengths."""
    prompts = PromptGenerator(3).prompts(1000)
    lengths = [len(p) for p in prompts]
    assert min(lengths) >= 24 and max(lengths) <= 120
    assert len(set(lengths)) > 50


@pytest.mark.parametrize(("lo", "hi"), [(1, 34), (40, 60), (100, 100), (200, 400)])
def test_lengths_within_custom_bounds(lo: int, hi: int) -> None:
    """Custom bounds hold, including a zero-width range."""
    for p in PromptGenerator(5, min_chars=lo, max_chars=hi).prompts(300):
        assert lo <= len(p) <= hi, p


def test_mostly_unique() -> None:
    """At least 95% of 1000 prompts are distinct."""
    prompts = PromptGenerator(11).prompts(1000)
    assert len(set(prompts)) >= 950


def test_looks_like_english() -> None:
    """Prompts are a reference, then printable ASCII words starting with a capital."""
    for p in PromptGenerator(13).prompts(200):
        assert p.isascii() and p.isprintable()
        ref, text = p.split(": ", 1)
        assert re.fullmatch(r"Ref [0-9a-hjkmnp-tv-z]{12}", ref), ref
        assert text[0].isupper()
        assert p == p.strip() and "  " not in p


def test_no_answer_table_covers_fresh_prompts() -> None:
    """A table of every prompt one stream made (a node's precomputed answers) covers
    none of another stream's prompts (v1: a 315,000-prompt table covered 44% of fresh
    decoys and canaries, and 50,000 covered 29%), while the text after the reference
    still repeats: the 60-bit reference is what makes every prompt new."""
    table = set(PromptGenerator(b"node-table").prompts(50_000))
    fresh = PromptGenerator(b"coordinator").prompts(5_000)
    assert not any(p in table for p in fresh)
    texts = {p.split(": ", 1)[1] for p in table}
    assert sum(p.split(": ", 1)[1] in texts for p in fresh) > 500


def test_references_are_distinct_and_spread() -> None:
    """References of 10,000 prompts are distinct and use the whole alphabet at every
    position."""
    refs = [p[4:16] for p in PromptGenerator(17).prompts(10_000)]
    assert len(set(refs)) == len(refs)
    for i in range(12):
        assert len({r[i] for r in refs}) == 32


def test_bad_arguments() -> None:
    """Bad bounds, seeds and counts raise."""
    with pytest.raises(ValueError):
        PromptGenerator(1, min_chars=50, max_chars=40)
    with pytest.raises(ValueError):
        PromptGenerator(1, min_chars=0)
    with pytest.raises(ValueError, match="max_chars >= 34"):
        PromptGenerator(1, min_chars=1, max_chars=33)
    with pytest.raises(TypeError):
        PromptGenerator("seed")  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        PromptGenerator(1).prompts(-1)


PINNED_SEED0 = "Ref txsybvzgqff9: Plan a day trip to the city park for a busy manager."
