"""Calibrate a profile on this machine: selftest, batch-time distribution, deadline.

Loads the profile's engine once, then (each step optional):

1. ``run_selftest`` (netcheck.engines.selftest) on that engine: tables + JSON;
2. ``--batches`` timed batches of B fresh prompts (one untimed warm-up first):
   ``t_ref_s`` = median batch seconds, ``p99_s`` = 99th percentile (nearest rank),
   and the recommended deadline ``Profile.deadline_s(rtt)`` for rtt 0 and 50 ms;
3. the engine-overhead benchmark (benchmarks/engine_overhead.py) on the same engine.

Writes ``<out>/<profile>.json`` (everything, with the command line) and
``<out>/<profile>.md`` (tables), and prints a calibrated profile TOML fragment.

Run: ``python benchmarks/calibrate_profile.py --profile h200-torch-bf16 --out DIR
[--dtype float32 --name h200-torch-fp32] [--batches 30] [--overhead-runs 5]``.
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import sys
import time
import traceback
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from netcheck.config import DeadlineParams, load_profile  # noqa: E402
from netcheck.engines import load_engine  # noqa: E402
from netcheck.engines.selftest import render_text, run_selftest  # noqa: E402
from netcheck.workloads import get_workload  # noqa: E402


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile ``q`` (0 < q <= 100) of a non-empty list."""
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[rank - 1]


def _gpu_info() -> dict[str, Any]:
    try:
        import torch

        if not torch.cuda.is_available():
            return {"cuda": False, "torch": torch.__version__}
        return {
            "cuda": True,
            "torch": torch.__version__,
            "device": torch.cuda.get_device_name(0),
            "max_memory_allocated_gib": torch.cuda.max_memory_allocated() / 2**30,
        }
    except Exception as exc:  # informational only
        return {"error": repr(exc)}


def main(argv: list[str] | None = None) -> int:
    """CLI entry point; returns 1 when the selftest failed, else 0."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--profile", required=True)
    ap.add_argument("--name", help="name of the calibrated profile (default: the profile's)")
    ap.add_argument("--dtype")
    ap.add_argument("--batch-size", type=int)
    ap.add_argument("--batches", type=int, default=30)
    ap.add_argument("--no-selftest", action="store_true")
    ap.add_argument("--quick", action="store_true", help="short selftest")
    ap.add_argument("--overhead-runs", type=int, default=0, help="0 skips the overhead benchmark")
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args(argv)
    command = " ".join(["python", "benchmarks/calibrate_profile.py", *(argv or sys.argv[1:])])
    given = {"dtype": args.dtype, "batch_size": args.batch_size, "name": args.name}
    profile = load_profile(args.profile).model_copy(update={k: v for k, v in given.items() if v})
    args.out.mkdir(parents=True, exist_ok=True)
    result: dict[str, Any] = {
        "command": command,
        "profile": profile.model_dump(mode="json"),
        "host": platform.node(),
        "python": platform.python_version(),
    }
    md: list[str] = [f"# Calibration: {profile.name}", "", f"Command: `{command}`", ""]

    def save() -> None:
        result["gpu"] = _gpu_info()
        (args.out / f"{profile.name}.json").write_text(json.dumps(result, indent=2) + "\n")
        (args.out / f"{profile.name}.md").write_text("\n".join(md) + "\n")

    t0 = time.perf_counter()
    engine = load_engine(profile)
    result["load_s"] = time.perf_counter() - t0
    result["fingerprint"] = engine.fingerprint
    result["fingerprint_id"] = engine.fingerprint_id
    md += [
        f"Fingerprint `{engine.fingerprint_id}`:",
        "",
        "```",
        json.dumps(engine.fingerprint, indent=2),
        "```",
        "",
    ]
    print(f"loaded {profile.name} in {result['load_s']:.1f} s: {engine.fingerprint}", flush=True)
    status = 0
    if not args.no_selftest:
        try:
            kw: dict[str, Any] = {"repeats": 2, "mixes": 2, "timing_runs": 1} if args.quick else {}
            report = run_selftest(
                profile, engine=engine, progress=lambda s: print("selftest:", s, flush=True), **kw
            )
            text = render_text(report)
            print(text, flush=True)
            result["selftest"] = report.to_dict()
            md += ["## Selftest", "", "```", text.rstrip(), "```", ""]
            status = 0 if report.passed else 1
        except Exception:
            result["selftest_error"] = traceback.format_exc()
            print(result["selftest_error"], flush=True)
            status = 1
        save()
    if args.batches > 0:
        try:
            gen = get_workload(profile).generator(2718)
            b = profile.batch_size
            engine.generate(gen.prompts(b))
            times: list[float] = []
            for _ in range(args.batches):
                prompts = gen.prompts(b)
                t = time.perf_counter()
                engine.generate(prompts)
                times.append(time.perf_counter() - t)
            t_ref = sorted(times)[len(times) // 2]
            p99 = percentile(times, 99)
            calibrated = profile.model_copy(
                update={"deadline": DeadlineParams(t_ref_s=round(t_ref, 4), p99_s=round(p99, 4))}
            )
            cal = {
                "batches": args.batches,
                "times_s": times,
                "t_ref_s": t_ref,
                "median_s": t_ref,
                "mean_s": sum(times) / len(times),
                "min_s": min(times),
                "max_s": max(times),
                "p99_s": p99,
                "tokens_per_s": b * profile.max_new_tokens / t_ref,
                "deadline_s_rtt0": calibrated.deadline_s(0.0),
                "deadline_s_rtt50ms": calibrated.deadline_s(0.05),
            }
            result["calibration"] = cal
            lines = [
                f"batches: {args.batches} x B={b}, {profile.max_new_tokens} new tokens",
                f"t_ref_s (median): {t_ref:.4f}  mean {cal['mean_s']:.4f}  min {cal['min_s']:.4f}"
                f"  max {cal['max_s']:.4f}  p99 {p99:.4f}",
                f"tokens/s at B: {cal['tokens_per_s']:,.0f}",
                f"deadline (a={calibrated.deadline.a}, b={calibrated.deadline.b}, slack="
                f"{calibrated.deadline.slack_s}): rtt 0 -> {cal['deadline_s_rtt0']:.3f} s, "
                f"rtt 50 ms -> {cal['deadline_s_rtt50ms']:.3f} s",
            ]
            print("\n".join(lines), flush=True)
            md += ["## Batch times", "", "```", *lines, "```", ""]
        except Exception:
            result["calibration_error"] = traceback.format_exc()
            print(result["calibration_error"], flush=True)
        save()
    if args.overhead_runs > 0:
        try:
            from engine_overhead import measure, report_line

            ov = measure(engine, args.overhead_runs)
            result["overhead"] = ov
            print(report_line(ov), flush=True)
            md += ["## Engine overhead", "", "```", report_line(ov), "```", ""]
        except Exception:
            result["overhead_error"] = traceback.format_exc()
            print(result["overhead_error"], flush=True)
        save()
    engine.close()
    save()
    return status


if __name__ == "__main__":
    sys.exit(main())
