"""``netcheck engine calibrate``: measure a profile's speed *and* capacity on this card.

Steps (issue 10; each reported through ``progress``):

1. load the profile's engine; optionally run the quick selftest on it;
2. the card's bf16 matmul peak (:func:`matmul_peak`);
3. ``batches`` timed single-identity batches (one untimed warm-up first): t(1) =
   median, p99, and the deadline derived from their spread (:func:`derive_deadline`);
4. streams packing, k = 2..max_k (CUDA only; :func:`colocate.run_streams`);
5. close the engine, then processes packing, k = 2..max_k, a fresh pool of k
   processes per k (:class:`colocate.ProcessPool`);
6. t(k) = the smallest median makespan over the packings that kept exact outputs,
   beta(k), achieved FLOP/s (:func:`batch_flops` / t(1)) as a fraction of the peak,
   capacity margin = t(2) / D(max_rtt_s); a t(k) below t(k - 1) (timing noise) is a
   warning in ``warnings`` and sets ``t_k_suspect`` (:func:`t_k_warnings`).

The result is a JSON-ready dict; :mod:`netcheck.engines.calibrate_report` renders it
as markdown and as the profile's ``[deadline]`` and ``[capacity]`` tables.
On a CPU every figure is a CPU figure, and the result says so (``"cpu": true``).
"""

from __future__ import annotations

import datetime
import gc
import json
import platform
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from netcheck.capacity import capacity_margin, check_network, co_load_beta, derive_deadline
from netcheck.config import CapacityRecord, Profile
from netcheck.engines import load_engine, resolve_model_dir
from netcheck.engines.colocate import KRun, ProcessPool, outputs_digest, run_streams
from netcheck.errors import EngineError
from netcheck.workloads import get_workload

Progress = Callable[[str, float], None]
"""``progress(step description, fraction done 0..1)``."""


def model_shape(model_dir: Path) -> dict[str, int]:
    """Llama-style shape from ``config.json``: hidden, layers, intermediate, heads,
    kv_heads, vocab. Raises EngineError when the file or a field is missing."""
    try:
        cfg = json.loads((Path(model_dir) / "config.json").read_text(encoding="utf-8"))
        heads = int(cfg["num_attention_heads"])
        return {
            "hidden": int(cfg["hidden_size"]),
            "layers": int(cfg["num_hidden_layers"]),
            "intermediate": int(cfg["intermediate_size"]),
            "heads": heads,
            "kv_heads": int(cfg.get("num_key_value_heads") or heads),
            "vocab": int(cfg["vocab_size"]),
        }
    except (OSError, ValueError, KeyError) as exc:
        raise EngineError(f"cannot read the model shape from {model_dir}: {exc}") from exc


def batch_flops(shape: dict[str, int], batch: int, prompt_len: int, new_tokens: int) -> float:
    """Matmul FLOPs of one batch of a Llama-style decoder under HF ``generate``.

    Counted for the shapes executed (padding included): per token and layer the
    projections ``2 * (h*(h + 2*kv*d) + h*h + 3*h*I)``; causal attention in prefill
    ``2 * B * S^2 * h`` per layer (QK^T and AV, half the square), in each of the
    ``new_tokens - 1`` decode steps ``4 * B * c * h`` per layer (c = context length);
    the LM head once per generated token per row (``2 * V * h``, last position only).
    Norms, rotary and activations are not counted. Units: FLOP.
    """
    h, n_layers, inter = shape["hidden"], shape["layers"], shape["intermediate"]
    d = h // shape["heads"]
    proj = 2 * (h * (h + 2 * shape["kv_heads"] * d) + h * h + 3 * h * inter)
    head = 2 * shape["vocab"] * h
    b, s = batch, prompt_len
    flops = b * s * n_layers * proj + n_layers * 2 * b * s * s * h + b * head
    for t in range(1, new_tokens):
        flops += b * n_layers * proj + n_layers * 4 * b * (s + t) * h + b * head
    return float(flops)


def matmul_peak(torch: Any, device: Any, *, n: int, reps: int) -> float:
    """Measured bf16 matmul rate of an ``n x n x n`` product on ``device``, FLOP/s
    (mean of ``reps`` timed products after 3 warm-ups, random data)."""
    a = torch.randn(n, n, device=device, dtype=torch.bfloat16)
    b = torch.randn(n, n, device=device, dtype=torch.bfloat16)
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    for _ in range(3):
        a @ b
    sync()
    t = time.perf_counter()
    for _ in range(reps):
        a @ b
    sync()
    return 2.0 * n**3 * reps / (time.perf_counter() - t)


def _card(torch: Any, device: Any) -> str:
    if device.type != "cuda":
        return f"cpu ({platform.processor() or platform.machine()})"
    props = torch.cuda.get_device_properties(device)
    uuid = getattr(props, "uuid", None)
    return f"{props.name} GPU-{uuid}" if uuid else str(props.name)


def t_k_warnings(t_k: Sequence[float], *, cpu: bool) -> list[str]:
    """Warnings on measured t(k) (seconds, k = 1, 2, ...) that cannot be right: t(k)
    below t(k - 1), i.e. beta(k) < 0. k identities sharing the card cannot all finish
    sooner than k - 1 did, so such figures are timing noise (``cpu``: CPU figures, where
    other work on the host's cores is the usual cause). Empty when t(k) never falls.
    ``netcheck engine pool`` refuses a record whose t(2) is below t(1)."""
    out = []
    for k in range(2, len(t_k) + 1):
        lo, hi = t_k[k - 1], t_k[k - 2]
        if lo < hi:
            beta = (lo / t_k[0] - 1) / (k - 1)
            cause = (
                "a noisy host: other work on its CPU cores during the run (CPU figures)"
                if cpu
                else "other work on this card or host during the run"
            )
            out.append(
                f"t({k}) = {lo:.4f} s is below t({k - 1}) = {hi:.4f} s (beta({k}) = "
                f"{beta:.2f}): {k} identities sharing the card cannot finish sooner than "
                f"{k - 1}, so these timings are noise, likely {cause}. Re-run on an idle "
                "host with more --trials (and --batches) before using this record"
                + ("; `netcheck engine pool` refuses it." if k == 2 else ".")
            )
    return out


def _best(runs: Sequence[KRun], k: int, expected: Sequence[str]) -> KRun | None:
    fits = [r for r in runs if r.k == k and r.t_s is not None and r.exact(expected)]
    return min(fits, key=lambda r: r.t_s or 0.0) if fits else None


def run_calibration(
    profile: Profile,
    *,
    batches: int = 10,
    trials: int = 3,
    max_k: int = 3,
    selftest: bool = True,
    rtt_jitter_s: float = 0.01,
    max_rtt_s: float = 0.05,
    coupling: float = 0.0,
    seed: int = 2718,
    progress: Progress = lambda _s, _f: None,
) -> dict[str, Any]:
    """Run the calibration steps (module doc) on this machine; return the results.

    Args:
        batches: timed single-identity batches (>= 1).
        trials: co-location trials per k and packing (>= 1).
        max_k: largest number of identities sharing the card (>= 2).
        rtt_jitter_s, max_rtt_s: network figures for :func:`derive_deadline`.
        coupling: the benign co-hosting slowdown the deadline allows for
            (:func:`derive_deadline`; the margin is taken at that deadline).

    Raises:
        ValueError: bad counts or network figures (:func:`check_network`).
        EngineError: the engine failed to load or to answer a single-identity batch
        (co-location failures are recorded, not raised).
    """
    if batches < 1 or trials < 1 or max_k < 2:
        raise ValueError("need batches >= 1, trials >= 1 and max_k >= 2")
    if not 0 <= coupling < 1:
        raise ValueError(f"coupling must be in [0, 1), got {coupling}")
    check_network(rtt_jitter_s, max_rtt_s)  # now, not after minutes of measuring
    started = time.perf_counter()
    result: dict[str, Any] = {"profile": profile.model_dump(mode="json"), "host": platform.node()}
    ks = list(range(2, max_k + 1))
    steps = 5 + len(ks) * 2
    done = [0]

    def step(text: str) -> None:
        progress(text, done[0] / steps)
        done[0] += 1

    step("loading the engine")
    engine = load_engine(profile)
    torch = getattr(engine, "_torch", None)
    if torch is None:
        raise EngineError(f"calibrate needs the torch engine, not {profile.engine!r}")
    device = engine._device  # type: ignore[attr-defined]
    cuda = device.type == "cuda"
    result.update(
        cpu=not cuda,
        card=_card(torch, device),
        software=str(engine.fingerprint.get("engine_version", "")),
        fingerprint=engine.fingerprint,
        fingerprint_id=engine.fingerprint_id,
        date=datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d"),
    )
    if selftest:
        step("quick selftest")
        from netcheck.engines.selftest import run_selftest

        b = profile.batch_size
        report = run_selftest(
            profile, engine=engine, sizes=[max(1, b // 2)], throughput_sizes=[b],
            repeats=2, mixes=2, timing_runs=1,
        )  # fmt: skip
        result["selftest_passed"] = report.passed
    else:
        step("selftest skipped")
    step("bf16 matmul peak")
    peak = matmul_peak(torch, device, n=8192 if cuda else 512, reps=10 if cuda else 3)
    result["peak_bf16_flops"] = peak
    gen = get_workload(profile).generator(seed)
    b = profile.batch_size
    trial_batches = [gen.prompts(b) for _ in range(trials)]
    timed = [gen.prompts(b) for _ in range(batches)]
    step(f"t(1): {batches} batches (peak {peak / 1e12:.4g} TFLOP/s)")
    engine.generate(timed[0])  # warm-up
    times: list[float] = []
    for prompts in timed:
        t = time.perf_counter()
        engine.generate(prompts)
        times.append(time.perf_counter() - t)
    expected: list[str] = []
    single = KRun(1, "single")
    for prompts in trial_batches:
        t = time.monotonic()
        out = engine.generate(prompts)
        single.makespans_s.append(time.monotonic() - t)
        expected.append(outputs_digest(out))
    times += single.makespans_s
    runs: list[KRun] = []
    for k in ks:
        step(f"streams k={k} (t(1) median {sorted(times)[len(times) // 2]:.4f} s)")
        if cuda:
            runs.append(run_streams(engine, torch, k, trial_batches))
        else:
            runs.append(KRun(k, "streams", error="CUDA streams: not applicable on a CPU"))
    engine.close()
    del engine
    gc.collect()
    if cuda:
        torch.cuda.empty_cache()
    for k in ks:  # a fresh pool per k: k identities load (and warm up) on an idle card
        last = runs[-1]
        step(f"processes k={k} (last: {last.packing} k={last.k} t={last.t_s} {last.error})")
        with ProcessPool(profile, k, trial_batches) as pool:
            runs.append(pool.run(k, trials))
    deadline = derive_deadline(
        times, rtt_jitter_s=rtt_jitter_s, max_rtt_s=max_rtt_s, coupling=coupling
    )
    calibrated = profile.model_copy(update={"deadline": deadline})
    t_ref = deadline.t_ref_s
    t_k: list[float] = [t_ref]
    packings: list[str] = []
    for k in ks:
        best = _best(runs, k, expected)
        if best is None or best.t_s is None:
            break  # t(k) unmeasured: neither packing completed with exact outputs
        t_k.append(best.t_s)
        packings.append(best.packing)
    shape = model_shape(resolve_model_dir(profile.model))
    flops = batch_flops(shape, b, profile.prompt_len, profile.max_new_tokens)
    result.update(
        times_s=times,
        t_ref_s=t_ref,
        p99_s=deadline.p99_s,
        deadline=deadline.model_dump(mode="json"),
        deadline_s_rtt0=calibrated.deadline_s(0.0),
        deadline_s_max_rtt=calibrated.deadline_s(max_rtt_s),
        colocation=[r.as_dict(expected) for r in runs],
        t_k_s=t_k,
        beta=co_load_beta(t_k),
        packing=packings[0] if packings else None,
        batch_flops=flops,
        achieved_flops=flops / t_ref,
        flops_fraction=flops / t_ref / peak,
        wall_s=time.perf_counter() - started,
    )
    result["warnings"] = t_k_warnings(t_k, cpu=not cuda)
    result["t_k_suspect"] = bool(result["warnings"])  # t(k) fell with k: timing noise
    if len(t_k) >= 2:
        result["margin"] = capacity_margin(t_k[1], calibrated)
        result["capacity"] = CapacityRecord(
            t_s=[round(t, 4) for t in t_k],
            beta=[round(x, 3) for x in result["beta"]],
            margin=round(result["margin"], 3),
            flops_fraction=round(result["flops_fraction"], 3),
            peak_tflops=float(f"{peak / 1e12:.4g}"),
            packing=packings[0],
            card=result["card"],
            date=result["date"],
            software=result["software"],
        ).model_dump(mode="json")
    progress("done", 1.0)
    return result
