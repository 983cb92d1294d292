"""Benchmark (issue 4, item 5): engine overhead against the plain library call.

For the same loaded model and the same B prompts, in the same process, alternately
times (``time.perf_counter``, after one untimed warm-up of each):

* torch: ``TorchEngine.generate(prompts)`` (tokenize, left-pad to ``prompt_len``,
  ``model.generate``, ``tolist``) against a plain transformers call:
  ``tokenizer(prompts, padding="max_length", max_length=prompt_len, truncation=True,
  return_tensors="pt")`` + ``model.generate(..., do_sample=False, max_new_tokens=n,
  min_new_tokens=n)`` + ``.tolist()`` on the same model object;
* vllm: ``VllmEngine.generate(prompts)`` against a plain ``LLM.generate(prompts,
  SamplingParams(temperature=0, max_tokens=n, min_tokens=n, ignore_eos=True))`` on the
  same ``LLM`` object.

Prints the median of N for each, the ratio engine/plain (target < 1.05) and whether
both gave the same tokens. Prompts are at most ``prompt_len - 1`` bytes, so both paths
see identical input ids.

Run: ``.venv/bin/python benchmarks/engine_overhead.py --profile cpu-tiny [--engine vllm]
[--runs 7] [--json PATH]``; on a GPU: ``--profile h200-torch-bf16``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from netcheck.config import Profile, load_profile  # noqa: E402
from netcheck.engines import Engine, load_engine  # noqa: E402
from netcheck.workloads import PromptGenerator  # noqa: E402


def fitting_prompts(n: int, max_bytes: int, seed: int = 11) -> list[str]:
    """``n`` distinct generated prompts of at most ``max_bytes`` UTF-8 bytes."""
    gen = PromptGenerator(seed, max_chars=max(16, min(120, max_bytes)))
    out: list[str] = []
    while len(out) < n:
        for p in gen.prompts(n):
            if len(p.encode()) <= max_bytes and p not in out and len(out) < n:
                out.append(p)
    return out


def _plain_torch(engine: Any) -> Callable[[list[str]], list[list[int]]]:
    torch = engine._torch
    model, tok = engine._model, engine._tokenizer
    n, width, device = engine.max_new_tokens, engine.prompt_len, engine._device
    tok.padding_side = "left"

    def run(prompts: list[str]) -> list[list[int]]:
        enc = tok(
            prompts,
            padding="max_length",
            max_length=width,
            truncation=True,
            return_tensors="pt",
        ).to(device)
        with torch.inference_mode():
            out = model.generate(
                **enc,
                do_sample=False,
                max_new_tokens=n,
                min_new_tokens=n,
                pad_token_id=engine._pad_id,
            )
        return [list(r) for r in out[:, width:].tolist()]

    return run


def _plain_vllm(engine: Any) -> Callable[[list[str]], list[list[int]]]:
    from vllm import SamplingParams

    n = engine.max_new_tokens
    params = SamplingParams(
        temperature=0.0, max_tokens=n, min_tokens=n, ignore_eos=True, detokenize=False
    )
    llm = engine._llm

    def run(prompts: list[str]) -> list[list[int]]:
        outs = llm.generate(prompts, params, use_tqdm=False)
        return [list(o.outputs[0].token_ids) for o in outs]

    return run


def measure(engine: Engine, runs: int = 7) -> dict[str, Any]:
    """Alternate engine and plain calls ``runs`` times each (after one warm-up each).

    Returns a dict: engine, batch_size, max_new_tokens, runs, engine_s and plain_s
    (lists, seconds), engine_median_s, plain_median_s, ratio (engine/plain medians),
    same_tokens (both paths gave identical outputs).

    Raises ValueError for an engine other than torch or vllm, or ``runs < 1``.
    """
    if runs < 1:
        raise ValueError(f"runs must be >= 1, got {runs}")
    if engine.name == "torch":
        plain = _plain_torch(engine)
    elif engine.name == "vllm":
        plain = _plain_vllm(engine)
    else:
        raise ValueError(f"no plain baseline for engine {engine.name!r}")
    prompts = fitting_prompts(engine.batch_size, engine.prompt_len - 1)
    ours = engine.generate(prompts)
    theirs = plain(prompts)
    e_times: list[float] = []
    p_times: list[float] = []
    for i in range(runs):
        order = [(engine.generate, e_times), (plain, p_times)]
        for fn, sink in order if i % 2 == 0 else order[::-1]:
            t0 = time.perf_counter()
            fn(prompts)
            sink.append(time.perf_counter() - t0)
    em, pm = statistics.median(e_times), statistics.median(p_times)
    return {
        "engine": engine.name,
        "fingerprint": engine.fingerprint,
        "batch_size": engine.batch_size,
        "prompt_len": engine.prompt_len,
        "max_new_tokens": engine.max_new_tokens,
        "runs": runs,
        "engine_s": e_times,
        "plain_s": p_times,
        "engine_median_s": em,
        "plain_median_s": pm,
        "ratio": em / pm,
        "same_tokens": ours == theirs,
    }


def report_line(r: dict[str, Any]) -> str:
    """One human-readable line for a :func:`measure` result."""
    return (
        f"{r['engine']:6s} B={r['batch_size']:<4d} new={r['max_new_tokens']:<3d} "
        f"device={r['fingerprint'].get('device')} dtype={r['fingerprint'].get('dtype')}: "
        f"engine {r['engine_median_s'] * 1e3:9.1f} ms, plain {r['plain_median_s'] * 1e3:9.1f} ms "
        f"(median of {r['runs']}), ratio {r['ratio']:.3f} "
        f"({(r['ratio'] - 1) * 100:+.1f}%), same tokens: {r['same_tokens']}"
    )


def main(argv: list[str] | None = None) -> int:
    """CLI entry point; returns 0, or 1 when the ratio is 1.05 or more."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--profile", default="cpu-tiny", help="profile name or TOML path")
    ap.add_argument("--engine", choices=["torch", "vllm"], help="override the profile's engine")
    ap.add_argument("--dtype", help="override the profile's dtype")
    ap.add_argument("--batch-size", type=int, help="override B")
    ap.add_argument("--runs", type=int, default=7)
    ap.add_argument("--json", type=Path, help="write the result here")
    args = ap.parse_args(argv)
    given = {"engine": args.engine, "dtype": args.dtype, "batch_size": args.batch_size}
    profile: Profile = load_profile(args.profile).model_copy(
        update={k: v for k, v in given.items() if v}
    )
    engine = load_engine(profile)
    try:
        result = measure(engine, args.runs)
    finally:
        engine.close()
    result["profile"] = profile.name
    result["command"] = " ".join(["benchmarks/engine_overhead.py", *(argv or sys.argv[1:])])
    print(report_line(result))
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    return 0 if result["ratio"] < 1.05 else 1


if __name__ == "__main__":
    sys.exit(main())
