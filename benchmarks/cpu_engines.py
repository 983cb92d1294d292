"""Benchmark (issue 10, items 5 and 6): CPU cost of a profile's batch, and how often a
wrong-dtype run differs from the profile's dtype.

``time`` mode: load the profile's engine (optionally with another model or
``cpu_threads``), then time ``--batches`` batches of B generated prompts; prints load
seconds and, per batch, process CPU seconds (all threads of this process) and wall
seconds. On a shared machine the CPU seconds are the comparable figure.

``dtype`` mode: answer ``--batches`` batches with the profile's dtype and with
``--cheat-dtype`` (default bfloat16), then print, per row, the first output position
where they differ (None = identical) and the number of differing rows at output lengths
up to ``max_new_tokens``. Greedy decoding makes a row's first n tokens the same whatever
the output length, so one run at the longest length answers every shorter one.

Run from the repository root with ``PYTHONPATH=.``:

    .venv/bin/python benchmarks/cpu_engines.py time --profile cpu-tiny-vllm
    .venv/bin/python benchmarks/cpu_engines.py time --profile cpu-tiny-vllm --threads 0
    .venv/bin/python benchmarks/cpu_engines.py dtype --profile cpu-smollm2 --batches 2
"""

from __future__ import annotations

import argparse
import time
from typing import Any

from netcheck.config import Profile, load_profile
from netcheck.engines import load_engine
from netcheck.workloads import PromptGenerator


def _profile(args: argparse.Namespace) -> Profile:
    update: dict[str, Any] = {}
    if args.model:
        update["model"] = args.model
    if args.threads is not None:
        update["cpu_threads"] = args.threads or None  # 0 = the engine's default
    return load_profile(args.profile).model_copy(update=update)


def time_batches(args: argparse.Namespace) -> None:
    """Print load time and per-batch CPU/wall seconds."""
    profile = _profile(args)
    gen = PromptGenerator(b"cpu-engines-bench")
    t = time.perf_counter()
    engine = load_engine(profile)
    print(f"{profile.name} model={profile.model} threads={profile.cpu_threads}")
    print(f"load {time.perf_counter() - t:.1f} s; fingerprint {engine.fingerprint}")
    for i in range(args.batches):
        batch = gen.prompts(profile.batch_size)
        cpu, wall = time.process_time(), time.perf_counter()
        engine.generate(batch)
        print(
            f"batch {i + 1}: {time.process_time() - cpu:.2f} CPU-s, "
            f"{time.perf_counter() - wall:.2f} s wall"
        )
    engine.close()


def dtype_divergence(args: argparse.Namespace) -> None:
    """Print first-divergence positions and differing-row counts per output length."""
    profile = _profile(args)
    gen = PromptGenerator(b"div-test")
    batches = [gen.prompts(profile.batch_size) for _ in range(args.batches)]
    outputs: dict[str, list[list[list[int]]]] = {}
    for dtype in (profile.dtype, args.cheat_dtype):
        with load_engine(profile, dtype=dtype) as engine:
            outputs[dtype] = []
            for batch in batches:
                cpu = time.process_time()
                outputs[dtype].append(engine.generate(batch))
                print(f"{dtype}: batch in {time.process_time() - cpu:.1f} CPU-s", flush=True)
    first: list[int | None] = []
    for honest, cheat in zip(outputs[profile.dtype], outputs[args.cheat_dtype], strict=True):
        for a, b in zip(honest, cheat, strict=True):
            first.append(
                next((i for i, (x, y) in enumerate(zip(a, b, strict=True)) if x != y), None)
            )
    print("first differing position per row:", first)
    for n in (8, 16, 24, 32, 48, 64, 96, 128, 256):
        if n <= profile.max_new_tokens:
            count = sum(1 for d in first if d is not None and d < n)
            print(f"{n:4d} tokens: {count}/{len(first)} rows differ")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("mode", choices=("time", "dtype"))
    parser.add_argument("--profile", default="cpu-tiny-vllm")
    parser.add_argument("--model", help="another model reference (e.g. package:smollm2-135m)")
    parser.add_argument("--threads", type=int, help="cpu_threads override; 0 = engine default")
    parser.add_argument("--batches", type=int, default=4)
    parser.add_argument("--cheat-dtype", default="bfloat16")
    args = parser.parse_args()
    (time_batches if args.mode == "time" else dtype_divergence)(args)


if __name__ == "__main__":
    main()
