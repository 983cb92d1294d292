"""Build a reference set on trusted hardware: prompts plus the engine's exact answers.

Prompts come from the same generator as decoys (the profile's workload), so canaries
and decoys look alike. For a workload whose answers are known from generation
(``factoring``: the factors of each semiprime) no engine runs at all.
Every batch has exactly B prompts (the fixed batch shape is what makes answers
reproducible inside any mixed batch: architecture.md, "Measured facts").
"""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Callable, Sequence
from typing import Protocol

from netcheck.config import Profile
from netcheck.engines.fingerprint import Fingerprint, fingerprint_id
from netcheck.errors import EngineError
from netcheck.storage import ReferenceRow, Store
from netcheck.workloads import InputStream, WorkItem, get_workload

_MAX_DRAWS = 8  # redraw rounds before giving up on distinct prompts


class BatchEngine(Protocol):
    """The part of ``netcheck.engines.Engine`` that building references needs."""

    @property
    def batch_size(self) -> int: ...

    @property
    def fingerprint(self) -> Fingerprint: ...

    def generate(self, prompts: Sequence[str]) -> list[list[int]]: ...


def _fresh_items(gen: InputStream, n: int, seen: set[str]) -> list[WorkItem]:
    out: list[WorkItem] = []
    for _ in range(_MAX_DRAWS):
        for item in gen.items(n - len(out)):
            if item.prompt not in seen:
                seen.add(item.prompt)
                out.append(item)
        if len(out) == n:
            return out
    raise EngineError(f"input generator gave fewer than {n} distinct inputs")


def build_references(
    profile: Profile,
    engine: BatchEngine,
    store: Store,
    count: int,
    *,
    seed: int | bytes | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> int:
    """Run ``count`` prompts (rounded up to a multiple of B) through ``engine``; store them.

    Inputs come from ``get_workload(profile)``; when the workload knows every answer
    from generation (factoring), those answers are stored and ``engine`` is only
    used for its fingerprint.

    Each batch of exactly B distinct prompts is answered by ``engine.generate`` and
    stored (one transaction per batch) as :class:`ReferenceRow` s with a fresh
    ``uuid4`` hex id, the profile's name and ``fingerprint_id(engine.fingerprint)``.

    Args:
        count: prompts wanted (> 0); the stored number is ``ceil(count / B) * B``.
        seed: prompt generator seed; ``None`` (production) draws 16 bytes from
            ``os.urandom`` so the prompts are unpredictable.
        progress: called as ``progress(done, total)`` after each stored batch.

    Returns:
        The number of references stored.

    Raises:
        ValueError: ``count`` < 1.
        EngineError: the engine's batch size or fingerprint disagrees with the profile,
            or it returned the wrong number or length of outputs.
        StorageError: the store failed (batches stored before stay stored).
    """
    if count < 1:
        raise ValueError(f"count must be >= 1, got {count}")
    b = profile.batch_size
    fp = engine.fingerprint
    if engine.batch_size != b:
        raise EngineError(f"engine batch size {engine.batch_size} != profile batch size {b}")
    for field in ("batch_size", "max_new_tokens", "prompt_len"):
        if field in fp and fp[field] != getattr(profile, field):
            raise EngineError(
                f"engine fingerprint {field}={fp[field]} != profile {field}="
                f"{getattr(profile, field)}"
            )
    fp_id = fingerprint_id(fp)
    store.add_reference_set(profile.name, fp_id, fp)
    total = -(-count // b) * b
    workload = get_workload(profile)
    gen = workload.generator(os.urandom(16) if seed is None else seed)
    seen: set[str] = set()
    done = 0
    while done < total:
        items = _fresh_items(gen, b, seen)
        prompts = [it.prompt for it in items]
        known = [it.answer for it in items]
        answers: Sequence[Sequence[int]]
        if all(a is not None for a in known):
            answers = [a for a in known if a is not None]  # known from generation
        else:
            answers = engine.generate(prompts)
        if len(answers) != b:
            raise EngineError(f"engine returned {len(answers)} outputs for {b} prompts")
        bad = [i for i, a in enumerate(answers) if len(a) != profile.max_new_tokens]
        if bad:
            raise EngineError(
                f"engine outputs at positions {bad[:10]} are not "
                f"{profile.max_new_tokens} tokens long"
            )
        now = time.time()
        rows = [
            ReferenceRow(
                ref_id=uuid.uuid4().hex,
                profile=profile.name,
                fingerprint_id=fp_id,
                prompt=p,
                answer=tuple(int(t) for t in a),
                created_at=now,
            )
            for p, a in zip(prompts, answers, strict=True)
        ]
        done += store.add_references(rows)
        if progress is not None:
            progress(done, total)
    return done
