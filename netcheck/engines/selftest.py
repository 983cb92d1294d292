"""Engine self-test: is this machine's engine deterministic at the profile's batch shape?

``run_selftest(profile)`` checks, on the local hardware:

(a) **repeat determinism**: the same batch of B prompts ``repeats`` times gives identical
    tokens every time;
(b) **batch-composition invariance** at B: a few probe prompts placed at several
    positions (first, last, middle, random) among *different* other prompts give the
    same tokens as in the baseline batch;
(c) **sensitivity to other batch sizes** (B/2, B-1, 1, 2B by default): the fraction of
    prompts whose tokens differ from the B-batch baseline when run at another batch
    size. Reported only; a non-zero fraction is why profiles fix B;
(d) **throughput** in generated tokens per second (``size * max_new_tokens /
    median batch seconds``) at batch sizes around B, so an operator can see the plateau.

Only (a) and (b) decide :attr:`SelftestReport.passed`. Canary checks rely on exactly
these two properties (architecture.md, "Measured facts").

Engines at other batch sizes (c, d) are made by ``resize(engine, size)``; the default,
:func:`reshaped_engine`, shallow-copies the loaded engine with another batch size, so
the model is loaded once and shared (right for the torch and factoring engines, whose
``generate`` takes the batch size from the instance; a vLLM engine keeps its
``max_num_seqs`` and schedules larger batches in several steps).
"""

from __future__ import annotations

import copy
import random
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from netcheck.engines.base import Engine
from netcheck.engines.fingerprint import fingerprint_id
from netcheck.errors import EngineError

if TYPE_CHECKING:
    from netcheck.config import Profile

SELFTEST_SCHEME = "netcheck-selftest-v1"


@dataclass(frozen=True)
class CheckResult:
    """One pass/fail check: ``batches`` batches of B run, ``compared`` outputs compared,
    ``mismatched`` of them differed; ``detail`` is a human-readable summary."""

    name: str
    passed: bool
    batches: int
    compared: int
    mismatched: int
    detail: str


@dataclass(frozen=True)
class SizeSensitivity:
    """Outputs at ``batch_size`` against the B baseline: ``changed`` of ``compared``
    prompts differ (``fraction`` = changed / compared, 0..1)."""

    batch_size: int
    compared: int
    changed: int
    fraction: float


@dataclass(frozen=True)
class ThroughputPoint:
    """Batch time at ``batch_size``: median and min of ``runs`` timed batches (seconds,
    ``time.perf_counter`` around ``generate``) and generated tokens per second
    (``batch_size * max_new_tokens / median_s``)."""

    batch_size: int
    runs: int
    median_s: float
    min_s: float
    tokens_per_s: float


@dataclass
class SelftestReport:
    """Everything :func:`run_selftest` measured; :meth:`to_dict` is the JSON form."""

    profile: str
    fingerprint: dict[str, str | int]
    fingerprint_id: str
    batch_size: int
    max_new_tokens: int
    repeat: CheckResult
    invariance: CheckResult
    sensitivity: list[SizeSensitivity] = field(default_factory=list)
    throughput: list[ThroughputPoint] = field(default_factory=list)
    wall_s: float = 0.0

    @property
    def passed(self) -> bool:
        """True iff (a) repeat determinism and (b) batch-composition invariance passed."""
        return self.repeat.passed and self.invariance.passed

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict (scheme ``netcheck-selftest-v1``) including ``passed``."""
        out = asdict(self)
        out["scheme"] = SELFTEST_SCHEME
        out["passed"] = self.passed
        return out


def reshaped_engine(engine: Engine, batch_size: int) -> Engine:
    """A shallow copy of ``engine`` answering batches of ``batch_size`` (model shared).

    The copy's fingerprint records the new batch size. Do not ``close()`` the copy: it
    would release the shared model.

    Raises:
        EngineError: ``batch_size`` < 1.
    """
    if batch_size < 1:
        raise EngineError(f"batch size must be >= 1, got {batch_size}")
    if batch_size == engine.batch_size:
        return engine
    clone = copy.copy(engine)
    clone._batch_size = batch_size
    clone._fingerprint = {**engine._fingerprint, "batch_size": batch_size}
    return clone


class _Inputs:
    """Distinct inputs of the profile's workload, drawn from one seeded stream."""

    def __init__(self, profile: Profile, seed: int) -> None:
        from netcheck.workloads import get_workload

        self._gen = get_workload(profile).generator(seed)
        self._seen: set[str] = set()

    def take(self, n: int) -> list[str]:
        out: list[str] = []
        for _ in range(16):
            for p in self._gen.prompts(n - len(out)):
                if p not in self._seen:
                    self._seen.add(p)
                    out.append(p)
            if len(out) == n:
                return out
        raise EngineError(f"workload generator gave fewer than {n} distinct inputs")


def _default_sizes(b: int) -> list[int]:
    return sorted({s for s in (b // 2, b - 1, 1, 2 * b) if s >= 1 and s != b})


def _default_throughput_sizes(b: int) -> list[int]:
    return sorted({s for s in (b // 2, (3 * b) // 4, b, (5 * b) // 4, (3 * b) // 2, 2 * b) if s})


def _probe_positions(b: int, mixes: int, n_probes: int, rng: random.Random) -> list[list[int]]:
    """Per mixed batch, distinct positions for the probes: first/last/middle, then random."""
    anchors = [0, b - 1, b // 2, b // 3]
    out: list[list[int]] = []
    for m in range(mixes):
        first = anchors[m] if m < len(anchors) else rng.randrange(b)
        rest = [p for p in rng.sample(range(b), min(b, n_probes + 1)) if p != first]
        out.append([first, *rest][:n_probes])
    return out


def run_selftest(
    profile: Profile,
    *,
    engine: Engine | None = None,
    sizes: Sequence[int] | None = None,
    throughput_sizes: Sequence[int] | None = None,
    repeats: int = 3,
    mixes: int = 4,
    probes: int = 3,
    timing_runs: int = 2,
    seed: int = 4,
    resize: Callable[[Engine, int], Engine] = reshaped_engine,
    progress: Callable[[str], None] | None = None,
) -> SelftestReport:
    """Run checks (a)-(d) (module docstring) for ``profile`` on the local hardware.

    Args:
        profile: gives B, max_new_tokens and, when ``engine`` is None, the engine to load.
        engine: a loaded engine to test (its batch size must be ``profile.batch_size``);
            default ``load_engine(profile)``, closed again at the end.
        sizes: batch sizes for (c); default B/2, B-1, 1, 2B. Empty skips (c).
        throughput_sizes: batch sizes for (d); default B/2, 3B/4, B, 5B/4, 3B/2, 2B.
            Empty skips (d).
        repeats: batches in (a), >= 2. Their times also give (d)'s point at B.
        mixes: mixed batches in (b), >= 1.
        probes: probe prompts per mixed batch, 1..B-1.
        timing_runs: timed batches per size in (d) after one untimed warm-up, >= 1.
        seed: seed of the input stream (the profile's workload generator).
        resize: ``resize(engine, size)`` gives an engine for another batch size.
        progress: called with a short label before each stage.

    Returns:
        The report; ``report.passed`` is (a) and (b).

    Raises:
        ValueError: bad counts. EngineError: the engine failed, or its batch size is not B.
    """
    b = profile.batch_size
    if repeats < 2 or mixes < 1 or timing_runs < 1 or not 1 <= probes < b:
        raise ValueError(
            f"need repeats >= 2, mixes >= 1, timing_runs >= 1, 1 <= probes < B; got "
            f"repeats={repeats}, mixes={mixes}, timing_runs={timing_runs}, probes={probes}"
        )
    say = progress or (lambda _label: None)
    started = time.perf_counter()
    own = engine is None
    if engine is None:
        from netcheck.engines import load_engine

        say("loading engine")
        engine = load_engine(profile)
    try:
        if engine.batch_size != b:
            raise EngineError(f"engine batch size {engine.batch_size} != profile B {b}")
        return _run(
            profile,
            engine,
            sizes=_default_sizes(b) if sizes is None else list(sizes),
            throughput_sizes=(
                _default_throughput_sizes(b) if throughput_sizes is None else list(throughput_sizes)
            ),
            repeats=repeats,
            mixes=mixes,
            probes=probes,
            timing_runs=timing_runs,
            seed=seed,
            resize=resize,
            say=say,
            started=started,
        )
    finally:
        if own:
            engine.close()


def _timed(engine: Engine, prompts: Sequence[str]) -> tuple[list[list[int]], float]:
    t0 = time.perf_counter()
    out = engine.generate(prompts)
    return out, time.perf_counter() - t0


def _point(size: int, new_tokens: int, times: Sequence[float]) -> ThroughputPoint:
    med = statistics.median(times)
    return ThroughputPoint(size, len(times), med, min(times), size * new_tokens / med)


def _run(
    profile: Profile,
    engine: Engine,
    *,
    sizes: list[int],
    throughput_sizes: list[int],
    repeats: int,
    mixes: int,
    probes: int,
    timing_runs: int,
    seed: int,
    resize: Callable[[Engine, int], Engine],
    say: Callable[[str], None],
    started: float,
) -> SelftestReport:
    b, n_new = profile.batch_size, engine.max_new_tokens
    rng = random.Random(seed)
    inputs = _Inputs(profile, seed)
    base = inputs.take(b)

    # (a) repeat determinism; the first batch is also the warm-up.
    say(f"(a) repeat determinism: {repeats} batches of {b}")
    baseline, _ = _timed(engine, base)
    times: list[float] = []
    repeat_bad = 0
    for _ in range(repeats - 1):
        out, dt = _timed(engine, base)
        times.append(dt)
        repeat_bad += sum(1 for x, y in zip(out, baseline, strict=True) if x != y)
    compared = b * (repeats - 1)
    repeat = CheckResult(
        "repeat determinism",
        repeat_bad == 0,
        repeats,
        compared,
        repeat_bad,
        f"{repeat_bad}/{compared} outputs differed from the first of {repeats} identical batches",
    )

    # (b) batch-composition invariance at B.
    say(f"(b) batch-composition invariance: {mixes} mixed batches of {b}")
    mix_bad = 0
    where: list[int] = []
    for positions in _probe_positions(b, mixes, probes, rng):
        others = iter(inputs.take(b - len(positions)))
        slots = {pos: i for i, pos in enumerate(positions)}
        batch = [base[slots[i]] if i in slots else next(others) for i in range(b)]
        out = engine.generate(batch)
        for pos, i in slots.items():
            if out[pos] != baseline[i]:
                mix_bad += 1
                where.append(pos)
    compared = mixes * probes
    invariance = CheckResult(
        "batch-composition invariance",
        mix_bad == 0,
        mixes,
        compared,
        mix_bad,
        f"{mix_bad}/{compared} probe outputs changed when mixed with other prompts"
        + (f" (at positions {sorted(set(where))[:10]})" if where else ""),
    )

    # (c) sensitivity to other batch sizes; (d) throughput. One warm-up per size.
    timings: dict[int, list[float]] = {b: times}
    sensitivity: list[SizeSensitivity] = []
    for size in sorted(set(sizes) | set(throughput_sizes)):
        if size == b:
            continue
        say(f"(c/d) batch size {size}")
        eng = resize(engine, size)
        keep = min(size, b)
        batch = base[:keep] + (inputs.take(size - b) if size > b else [])
        out, dt = _timed(eng, batch)
        if size in sizes:
            changed = sum(1 for x, y in zip(out[:keep], baseline[:keep], strict=True) if x != y)
            sensitivity.append(SizeSensitivity(size, keep, changed, changed / keep))
        if size in throughput_sizes:
            timings[size] = [_timed(eng, batch)[1] for _ in range(timing_runs)]
    if b in throughput_sizes and len(times) < timing_runs:
        times.extend(_timed(engine, base)[1] for _ in range(timing_runs - len(times)))
    throughput = [_point(s, n_new, timings[s]) for s in sorted(throughput_sizes) if s in timings]
    fp = engine.fingerprint
    return SelftestReport(
        profile=profile.name,
        fingerprint=fp,
        fingerprint_id=fingerprint_id(fp),
        batch_size=b,
        max_new_tokens=n_new,
        repeat=repeat,
        invariance=invariance,
        sensitivity=sensitivity,
        throughput=throughput,
        wall_s=time.perf_counter() - started,
    )


def render_report(report: SelftestReport) -> list[Any]:
    """The report as rich renderables: a checks table, a sensitivity table and a
    throughput table (tokens/s = generated tokens only)."""
    from rich.table import Table

    checks = Table(title=f"engine selftest: {report.profile} (B={report.batch_size})")
    checks.add_column("check")
    checks.add_column("result")
    checks.add_column("batches", justify="right")
    checks.add_column("mismatched / compared", justify="right")
    checks.add_column("detail")
    for c in (report.repeat, report.invariance):
        mark = "[green]PASS[/green]" if c.passed else "[red]FAIL[/red]"
        checks.add_row(c.name, mark, str(c.batches), f"{c.mismatched}/{c.compared}", c.detail)
    sens = Table(title="sensitivity to other batch sizes (reported, not a failure)")
    sens.add_column("batch size", justify="right")
    sens.add_column("changed / compared", justify="right")
    sens.add_column("fraction changed", justify="right")
    for s in report.sensitivity:
        sens.add_row(str(s.batch_size), f"{s.changed}/{s.compared}", f"{s.fraction:.1%}")
    thr = Table(title=f"throughput ({report.max_new_tokens} new tokens per prompt)")
    thr.add_column("batch size", justify="right")
    thr.add_column("runs", justify="right")
    thr.add_column("median s", justify="right")
    thr.add_column("min s", justify="right")
    thr.add_column("tokens/s", justify="right")
    for t in report.throughput:
        marker = " (B)" if t.batch_size == report.batch_size else ""
        thr.add_row(
            f"{t.batch_size}{marker}",
            str(t.runs),
            f"{t.median_s:.3f}",
            f"{t.min_s:.3f}",
            f"{t.tokens_per_s:,.0f}",
        )
    return [checks, sens, thr]


def render_text(report: SelftestReport, width: int = 120) -> str:
    """The tables of :func:`render_report` as plain text (for logs and docs)."""
    import io

    from rich.console import Console

    console = Console(width=width, record=True, file=io.StringIO(), color_system=None)
    for item in render_report(report):
        console.print(item)
    return console.export_text()
