"""Co-location runs for ``netcheck engine calibrate``: k identities sharing one card.

Two packings a farm could use (issue 10):

* **processes** (:func:`run_processes`): k separate OS processes, each with its own
  engine, as k ``netcheck node run`` identities on one card would be. Each is a child
  ``python -m netcheck.engines.colocate`` that loads the engine, answers one warm-up
  batch, then waits on stdin for ``go`` and answers the next batch; the parent sends
  ``go`` to all k children together, as a full-load round releases all batches at once.
* **streams** (:func:`run_streams`): one process, one engine, k threads each on its own
  CUDA stream (CUDA only).

Per trial the **makespan** is ``max(end) - min(start)`` over the k batches
(``time.monotonic``, one clock for all processes on Linux); t(k) is the median
makespan. Every batch's outputs are hashed so the caller can check that the packing
kept the profile's exact outputs.

The child speaks one JSON object per line on stdout, prefixed ``COLOC``.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from netcheck.config import Profile
from netcheck.errors import EngineError

PREFIX = "COLOC "
READY_TIMEOUT_S = 900.0
"""Longest wait for a child to load its engine (synth:8b took 44 s on an H200)."""


def outputs_digest(outputs: Sequence[Sequence[int]]) -> str:
    """SHA-256 hex of a batch's output token ids (JSON, no spaces)."""
    return hashlib.sha256(json.dumps(outputs, separators=(",", ":")).encode()).hexdigest()


@dataclass
class KRun:
    """One co-location measurement.

    Attributes:
        k: identities sharing the card.
        packing: ``processes`` or ``streams``.
        makespans_s: per trial, seconds from the first start to the last end.
        digests: per trial, per identity, the outputs' SHA-256.
        error: why the run could not complete (e.g. out of memory), else None.
    """

    k: int
    packing: str
    makespans_s: list[float] = field(default_factory=list)
    digests: list[list[str]] = field(default_factory=list)
    error: str | None = None

    @property
    def t_s(self) -> float | None:
        """Median makespan, seconds (None without a completed trial)."""
        if not self.makespans_s:
            return None
        return sorted(self.makespans_s)[len(self.makespans_s) // 2]

    def exact(self, expected: Sequence[str]) -> bool:
        """Every identity's outputs in trial i hash to ``expected[i]``."""
        return bool(self.digests) and all(
            d == expected[i] for i, row in enumerate(self.digests) for d in row
        )

    def as_dict(self, expected: Sequence[str] | None = None) -> dict[str, Any]:
        out: dict[str, Any] = {
            "k": self.k,
            "packing": self.packing,
            "t_s": self.t_s,
            "makespans_s": self.makespans_s,
            "error": self.error,
        }
        if expected is not None:
            out["exact_outputs"] = self.exact(expected)
        return out


# -- streams (in-process) -----------------------------------------------------------------


def run_streams(engine: Any, torch: Any, k: int, batches: Sequence[Sequence[str]]) -> KRun:
    """k threads on k CUDA streams of one engine, each answering ``batches[i]`` in trial i.

    Raises nothing: an engine failure (e.g. CUDA out of memory) ends the run with
    ``error`` set.
    """
    run = KRun(k, "streams")
    streams = [torch.cuda.Stream() for _ in range(k)]
    barrier = threading.Barrier(k)
    for prompts in batches:
        spans: list[tuple[float, float, str] | None] = [None] * k
        errors: list[str] = []

        def one(
            i: int,
            prompts: Sequence[str] = prompts,
            spans: list[Any] = spans,
            errors: list[str] = errors,
        ) -> None:
            try:
                barrier.wait(timeout=600)
                start = time.monotonic()
                with torch.cuda.stream(streams[i]):
                    out = engine.generate(prompts)
                    streams[i].synchronize()
                spans[i] = (start, time.monotonic(), outputs_digest(out))
            except (EngineError, threading.BrokenBarrierError, RuntimeError) as exc:
                errors.append(f"{type(exc).__name__}: {exc}"[:300])
                barrier.abort()

        threads = [threading.Thread(target=one, args=(i,)) for i in range(k)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if errors or any(s is None for s in spans):
            run.error = errors[0] if errors else "a stream did not finish"
            barrier.reset()
            torch.cuda.empty_cache()
            return run
        done = [s for s in spans if s is not None]
        run.makespans_s.append(max(s[1] for s in done) - min(s[0] for s in done))
        run.digests.append([s[2] for s in done])
    return run


# -- processes ------------------------------------------------------------------------------


class ProcessPool:
    """``n`` child processes, each holding an engine of ``profile`` (see module doc).

    Args:
        profile: the profile each child loads (passed as JSON).
        n: number of children.
        batches: the prompt batches of the trials (trial i answers ``batches[i]``).
        ready_timeout_s: longest wait for every child to load and warm up.

    Use as a context manager; children are killed on exit.
    """

    def __init__(
        self,
        profile: Profile,
        n: int,
        batches: Sequence[Sequence[str]],
        ready_timeout_s: float = READY_TIMEOUT_S,
    ) -> None:
        spec = json.dumps({"profile": profile.model_dump(mode="json"), "batches": batches})
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        self.children = [
            subprocess.Popen(
                [sys.executable, "-m", "netcheck.engines.colocate"],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
                env=env,
            )
            for _ in range(n)
        ]
        self.alive: list[bool] = []
        for child in self.children:
            assert child.stdin is not None
            child.stdin.write(spec + "\n")
            child.stdin.flush()
        deadline = time.monotonic() + ready_timeout_s
        for child in self.children:
            msg = self._read(child, deadline)
            self.alive.append(msg is not None and msg.get("ready") is True)
        self.errors = [
            "" if ok else "child failed to load or warm up (out of memory?)" for ok in self.alive
        ]

    def _read(self, child: subprocess.Popen[str], deadline: float) -> dict[str, Any] | None:
        assert child.stdout is not None
        while time.monotonic() < deadline:
            line = child.stdout.readline()
            if not line:
                return None  # child exited
            if line.startswith(PREFIX):
                msg: dict[str, Any] = json.loads(line[len(PREFIX) :])
                return msg
        return None

    def run(self, k: int, trials: int) -> KRun:
        """Release trial batches to the first ``k`` children together, ``trials`` times."""
        run = KRun(k, "processes")
        group = [c for c, ok in zip(self.children, self.alive, strict=True) if ok][:k]
        if len(group) < k:
            run.error = f"only {len(group)} of {k} identities could load on the card"
            return run
        for trial in range(trials):
            for child in group:
                assert child.stdin is not None
                child.stdin.write(f"go {trial}\n")
                child.stdin.flush()
            deadline = time.monotonic() + READY_TIMEOUT_S
            msgs = [self._read(child, deadline) for child in group]
            if any(m is None or "error" in m for m in msgs):
                bad = next((m for m in msgs if m is not None and "error" in m), None)
                run.error = str(bad["error"]) if bad else "a child stopped"
                for i, child in enumerate(self.children):
                    if child in group:
                        self.alive[i] = False
                return run
            done = [m for m in msgs if m is not None]
            run.makespans_s.append(max(m["end"] for m in done) - min(m["start"] for m in done))
            run.digests.append([str(m["digest"]) for m in done])
        return run

    def __enter__(self) -> ProcessPool:
        return self

    def __exit__(self, *exc: object) -> None:
        for child in self.children:
            if child.stdin is not None:
                with contextlib.suppress(OSError):
                    child.stdin.close()
        for child in self.children:
            try:
                child.wait(timeout=30)
            except subprocess.TimeoutExpired:
                child.kill()
                child.wait()


def _child_main(emit: Callable[[dict[str, Any]], None] | None = None) -> int:
    """Child side: read the spec line, load, warm up, then answer one batch per ``go``."""
    from netcheck.engines import load_engine

    def send(msg: dict[str, Any]) -> None:
        print(PREFIX + json.dumps(msg), flush=True)

    emit = emit or send
    spec = json.loads(sys.stdin.readline())
    profile = Profile.model_validate(spec["profile"])
    batches: list[list[str]] = spec["batches"]
    try:
        engine = load_engine(profile)
        engine.generate(batches[0])  # warm-up, untimed
    except (EngineError, RuntimeError) as exc:
        emit({"ready": False, "error": f"{type(exc).__name__}: {exc}"[:300]})
        return 1
    emit({"ready": True})
    for line in sys.stdin:
        if not line.startswith("go"):
            continue
        prompts = batches[int(line.split()[1]) % len(batches)]
        start = time.monotonic()
        try:
            out = engine.generate(prompts)
        except EngineError as exc:
            emit({"error": str(exc)[:300]})
            return 1
        emit({"start": start, "end": time.monotonic(), "digest": outputs_digest(out)})
    engine.close()
    return 0


if __name__ == "__main__":
    sys.exit(_child_main())
