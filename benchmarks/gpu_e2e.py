"""Real-GPU end-to-end record of capacity and numerics checks (issue 10, item 4).

Modes (run from the repository root; every node is its own OS process pinned to one
card with ``CUDA_VISIBLE_DEVICES``, joined over a real loopback websocket session):

* ``build``: ``--count`` references of ``--profile`` on the first visible card into the
  SQLite file ``--db`` (the same ``build_references`` as ``netcheck reference build``).
* ``rounds``: a coordinator (in this process) on that database; then phases of
  ``--rounds`` full-load rounds (every node gets a batch, all released together):

  - ``a``: one honest identity per card (cards 0 and 1): expected ``pass`` every round;
  - ``b``: two honest identities sharing card 0, one honest on card 1: the shared
    pair is expected ``late`` in every round;
  - ``c``: a node running float16 while claiming bfloat16 (card 0) and a node that
    answers B as two halves of B/2 (card 1), both claiming the honest fingerprint:
    expected ``wrong-answer`` every round;
  - ``x``: like ``a``, for the cross-machine check (references built on another
    machine, verified here); ``y``: the same with one honest identity on card 0;
  - ``s`` (session 9): the nodes of ``b`` through the coordinator's own detection loop
    instead of full rounds: ``--screen-rounds`` screening rounds (HMAC schedule, every
    4th a full round) in blocks of 16, each block followed by the analysis and
    confirmation exactly as ``POST /admin/screening`` runs them, until the shared pair is
    flagged. Expected: a ``shared-backend`` flag naming exactly the two identities on
    card 0 (real co-location, no emulation), no flag on the honest card-1 node. The
    ``capacity`` flags that full rounds raise on the shared pair are reported apart;
    ``s1``: the same with the shared pair only (a one-card machine); ``s1j`` (session
    15): the pair of ``s1`` as a *jittering* farm (each identity holds every answer back
    by its compute time times ``exp(0.3 |z|) - 1``, :class:`netcheck.lab.adversary.JitterWorker`,
    the simulator's ``jitter`` adversary), expected found (``shared-backend``) all the same;
    ``s1p`` (session 16): the pair of ``s1`` as a *padding* farm (each identity holds every
    answer to just before the deadline its job names, short of it by 5% or 100 ms, the larger,
    :class:`netcheck.lab.adversary.PaddingWorker` through
    :class:`~netcheck.lab.adversary.JobDeadlineClient`): alone never late, co-loaded the
    compute alone is past the deadline; ``s1s`` (session 16): a *selective* farm, both
    identities in one process over one engine
    (:class:`~netcheck.lab.adversary.SharedBackend`): A answers every batch, B gives its
    batch up (an engine error: ``missing``) whenever A is busy and answers honestly
    alone (:class:`~netcheck.lab.adversary.SelectiveWorker`). ``s1p`` and ``s1s`` stop at
    the *first flag of any kind* naming a farm identity (a capacity flag is raised after
    a round: the block is cancelled there, before its analysis) or after
    ``--screen-rounds``; every screening phase's summary records each flag with the
    screening rounds run when it was first seen, and the per-round verdicts and times.

  Writes ``--json`` with every verdict, the nodes' GPU UUIDs and the phase summary.
* ``node``: one node process (internal; started by ``rounds``).

Nodes answer one untimed warm-up batch before they connect, as an operator would.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

PHASES: dict[str, list[tuple[str, str, str]]] = {
    # phase: [(label, kind, card)]
    "a": [("honest-card0", "honest", "0"), ("honest-card1", "honest", "1")],
    "b": [("shared-A-card0", "honest", "0"), ("shared-B-card0", "honest", "0"),
          ("honest-card1", "honest", "1")],
    "c": [("fp16-claims-bf16-card0", "fp16", "0"), ("split-batch-card1", "split", "1")],
    "x": [("honest-card0", "honest", "0"), ("honest-card1", "honest", "1")],
    "y": [("honest-card0", "honest", "0")],
    "s": [("shared-A-card0", "honest", "0"), ("shared-B-card0", "honest", "0"),
          ("honest-card1", "honest", "1")],
    "s1": [("shared-A-card0", "honest", "0"), ("shared-B-card0", "honest", "0")],
    "s1j": [("shared-A-card0", "jitter", "0"), ("shared-B-card0", "jitter", "0")],
    "s1p": [("shared-A-card0", "padding", "0"), ("shared-B-card0", "padding", "0")],
    "s1s": [("shared-A-card0", "selective", "0"), ("shared-B-card0", "selective", "0")],
}  # fmt: skip
SCREENING_PHASES = ("s", "s1", "s1j", "s1p", "s1s")
#: Screening phases that stop at the first flag of any kind naming a farm identity (the
#: others stop at a shared-backend flag, as in sessions 9-15).
FIRST_FLAG_PHASES = ("s1p", "s1s")
#: Node kinds whose identities on one card share one process (one engine): the
#: first is the backend's plain identity, the others are selective.
SHARED_PROCESS_KINDS = ("selective",)
EXPECTED = {"honest": "pass", "fp16": "wrong-answer", "split": "wrong-answer"}


def node_processes(specs: Sequence[tuple[str, str, str]]) -> list[list[int]]:
    """Which identities of a phase run in which node process: indices into ``specs``,
    one list per process, in order. One identity per process, except those of a kind in
    :data:`SHARED_PROCESS_KINDS`, which share one process per (kind, card)."""
    groups: list[list[int]] = []
    shared: dict[tuple[str, str], list[int]] = {}
    for i, (_label, kind, card) in enumerate(specs):
        if kind not in SHARED_PROCESS_KINDS:
            groups.append([i])
        elif (kind, card) in shared:
            shared[(kind, card)].append(i)
        else:
            shared[(kind, card)] = [i]
            groups.append(shared[(kind, card)])
    return groups


def gpu_uuids() -> list[str]:
    """``nvidia-smi -L`` lines (empty on a machine without it)."""
    try:
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=30)
        return [line for line in out.stdout.splitlines() if line.strip()]
    except (OSError, subprocess.SubprocessError):
        return []


# -- node process ---------------------------------------------------------------------------


class SplitWorker:
    """DEMO ADVERSARY: answers a batch of B as two batches of B/2 (as a smaller card
    would) and claims the honest B-sized fingerprint."""

    def __init__(self, profile: Any) -> None:
        from netcheck.engines import load_engine

        half = profile.batch_size // 2
        self.engine = load_engine(profile.model_copy(update={"batch_size": half}))
        self.half = half
        self._fp = dict(self.engine.fingerprint, batch_size=profile.batch_size)

    @property
    def fingerprint(self) -> dict[str, str | int]:
        return dict(self._fp)

    def _run(self, prompts: Sequence[str]) -> list[list[int]]:
        return self.engine.generate(prompts[: self.half]) + self.engine.generate(
            prompts[self.half :]
        )

    async def run(self, prompts: Sequence[str]) -> list[list[int]]:
        return await asyncio.to_thread(self._run, prompts)


async def node_main(args: argparse.Namespace) -> None:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    from netcheck.config import load_profile
    from netcheck.engines import load_engine
    from netcheck.keys import parse_public_key, public_key_text
    from netcheck.lab import adversary
    from netcheck.node.client import NodeClient
    from netcheck.node.workers import EngineWorker
    from netcheck.workloads import get_workload

    profile = load_profile(args.profile)
    if args.kind in SHARED_PROCESS_KINDS:
        await shared_node_main(args, profile)
        return
    worker: Any
    client_cls: Any = NodeClient
    if args.kind == "honest":
        worker = EngineWorker(load_engine(profile))
    elif args.kind == "fp16":
        worker = adversary.wrong_dtype_worker(profile, "float16")
    elif args.kind == "jitter":
        worker = adversary.JitterWorker(EngineWorker(load_engine(profile)), log_sd=0.3)
    elif args.kind == "padding":
        # the job's own deadline (JobDeadlineClient); the profile's at RTT 0 outside a job
        worker = adversary.PaddingWorker(
            EngineWorker(load_engine(profile)), deadline_s=profile.deadline_s(0.0)
        )
        client_cls = adversary.JobDeadlineClient
    else:
        worker = SplitWorker(profile)
    await worker.run(get_workload(profile).generator(99).prompts(profile.batch_size))
    identity = Ed25519PrivateKey.generate()
    print("NODE " + json.dumps({"key": public_key_text(identity), "gpu": _gpu_name(),
                                "label": args.label}), flush=True)  # fmt: skip
    client = client_cls(
        args.url, identity, parse_public_key(args.coord_key), profile.name, worker,
        label=args.label,
    )  # fmt: skip
    await client.run_forever()


def _gpu_name() -> str:
    """The visible card's name and UUID ("" without torch or CUDA)."""
    try:
        import torch

        if torch.cuda.is_available():
            props = torch.cuda.get_device_properties(0)
            return f"{props.name} GPU-{getattr(props, 'uuid', '?')}"
    except ImportError:
        pass
    return ""


async def shared_node_main(args: argparse.Namespace, profile: Any) -> None:
    """Several identities (``--label`` A,B,...) in one process over one engine
    (:class:`netcheck.lab.adversary.SharedBackend`): A answers every batch; every later
    identity is a :class:`~netcheck.lab.adversary.SelectiveWorker` (gives its batch up
    while another identity is busy). One ``NODE`` line per identity, in label order."""
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    from netcheck.engines import load_engine
    from netcheck.keys import parse_public_key, public_key_text
    from netcheck.lab import adversary
    from netcheck.node.client import NodeClient
    from netcheck.node.workers import EngineWorker
    from netcheck.workloads import get_workload

    labels = args.label.split(",")
    backend = adversary.SharedBackend(EngineWorker(load_engine(profile)))
    workers: list[Any] = [backend.identity(labels[0])]
    workers += [adversary.SelectiveWorker(backend, label) for label in labels[1:]]
    await backend.inner.run(get_workload(profile).generator(99).prompts(profile.batch_size))
    clients = []
    for label, worker in zip(labels, workers, strict=True):
        identity = Ed25519PrivateKey.generate()
        print("NODE " + json.dumps({"key": public_key_text(identity), "gpu": _gpu_name(),
                                    "label": label}), flush=True)  # fmt: skip
        clients.append(NodeClient(
            args.url, identity, parse_public_key(args.coord_key), profile.name, worker,
            label=label,
        ))  # fmt: skip
    await asyncio.gather(*(c.run_forever() for c in clients))


# -- references -----------------------------------------------------------------------------


def build_main(args: argparse.Namespace) -> None:
    from netcheck.config import load_profile
    from netcheck.engines import load_engine
    from netcheck.references.build import build_references
    from netcheck.storage import Store

    profile = load_profile(args.profile)
    engine = load_engine(profile)
    store = Store(f"sqlite:///{args.db}")
    t = time.perf_counter()
    n = build_references(profile, engine, store, args.count)
    info = {"references": n, "seconds": time.perf_counter() - t, "gpus": gpu_uuids(),
            "fingerprint": engine.fingerprint, "fingerprint_id": engine.fingerprint_id}  # fmt: skip
    print("BUILD " + json.dumps(info), flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(info, indent=2) + "\n")


# -- rounds ---------------------------------------------------------------------------------


def _start_node(url: str, coord_key: str, profile: str, label: str, kind: str, card: str,
                cards: int) -> subprocess.Popen[str]:  # fmt: skip
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    if cards > 0:
        env["CUDA_VISIBLE_DEVICES"] = str(int(card) % cards)
    cmd = [sys.executable, __file__, "node", "--url", url, "--coord-key", coord_key,
           "--profile", profile, "--label", label, "--kind", kind]  # fmt: skip
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, env=env)


async def _read_node_lines(
    proc: subprocess.Popen[str], n: int, timeout_s: float
) -> list[dict[str, Any]]:
    """The first ``n`` ``NODE`` lines of a node process (one per identity it serves)."""
    assert proc.stdout is not None
    stdout = proc.stdout

    def read() -> list[dict[str, Any]]:
        infos: list[dict[str, Any]] = []
        for line in stdout:
            if line.startswith("NODE "):
                infos.append(json.loads(line[5:]))
                if len(infos) == n:
                    return infos
        raise RuntimeError(f"node process exited with {proc.wait()}")

    return await asyncio.wait_for(asyncio.to_thread(read), timeout_s)


async def run_phase(
    rc: Any, profile: Any, source: str, phase: str, rounds: int, cards: int
) -> dict[str, Any]:
    from netcheck.coordinator.rounds import run_round
    from netcheck.keys import public_key_text

    coord_key = public_key_text(rc.identity)
    specs = PHASES[phase]
    groups = node_processes(specs)
    procs = [_start_node(rc.url, coord_key, source, ",".join(specs[i][0] for i in g),
                         specs[g[0]][1], specs[g[0]][2], cards) for g in groups]  # fmt: skip
    try:
        infos: list[dict[str, Any]] = [{} for _ in specs]
        for g, p in zip(groups, procs, strict=True):
            for i, info in zip(g, await _read_node_lines(p, len(g), 900), strict=True):
                infos[i] = info
        labels = {info["key"]: spec[0] for info, spec in zip(infos, specs, strict=True)}
        kinds = {spec[0]: spec[1] for spec in specs}
        await rc.wait_connected(len(specs), timeout_s=120)
        if phase in SCREENING_PHASES:
            return await run_screening_phase(rc, profile, specs, infos, labels, rounds, phase)
        out_rounds = []
        for _ in range(rounds):
            report = (await run_round(rc.coord, profile.name, kind="full")).as_dict()
            verdicts = {labels.get(v["node_key"], v["node_key"]): v for v in report["verdicts"]}
            out_rounds.append({"round_id": report["round_id"], "phases": report["phases"],
                               "verdicts": verdicts})  # fmt: skip
            print(phase, report["round_id"], {k: (v["verdict"], v["elapsed_s"] and
                  round(v["elapsed_s"], 3)) for k, v in verdicts.items()}, flush=True)  # fmt: skip
        summary = {label: dict(Counter(r["verdicts"][label]["verdict"] for r in out_rounds
                                       if label in r["verdicts"])) for label, _, _ in specs}  # fmt: skip
        return {"phase": phase, "nodes": {spec[0]: {"kind": spec[1], "card": spec[2],
                "gpu": info["gpu"], "key": info["key"]} for spec, info in zip(specs, infos,
                strict=True)}, "rounds": out_rounds, "summary": summary, "kinds": kinds}  # fmt: skip
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()
        t = time.monotonic()
        while rc.coord.sessions and time.monotonic() - t < 30:
            await asyncio.sleep(0.1)


async def run_screening_phase(
    rc: Any, profile: Any, specs: list[tuple[str, str, str]], infos: list[dict[str, Any]],
    labels: dict[str, str], max_rounds: int, phase: str = "s",
) -> dict[str, Any]:  # fmt: skip
    """Screening phases (``s``, ``s1``, ``s1j``, ``s1p``, ``s1s``): screening blocks of 16
    rounds + analysis + confirmation (the coordinator's ``Screening.run``) until a
    ``shared-backend`` flag (phases in :data:`FIRST_FLAG_PHASES`: the first flag of any
    kind naming a farm identity, checked after every round: the block is cancelled
    there) or ``max_rounds``. ``screening_rounds`` (of the summary and of each flag in
    ``flag_timeline``: the rounds run when it was first seen) counts the rounds of the
    screening loop, every 4th of which is a full round (``screening_full_every``), not
    the confirmation rounds."""
    flags_db = rc.coord.screening.flags
    shared = sorted(label for label, _, _ in specs if "shared" in label)
    farm_keys = {k for k, lab in labels.items() if lab in shared}
    first_flag_rule = phase in FIRST_FLAG_PHASES
    before = max((f.flag_id for f in flags_db.list_flags(profile=profile.name, limit=1)),
                 default=0)  # fmt: skip
    named = lambda keys: sorted(labels.get(k, k) for k in keys)  # noqa: E731
    blocks: list[dict[str, Any]] = []
    flags: dict[int, dict[str, Any]] = {}
    seen: dict[int, dict[str, Any]] = {}  # flag id -> when it was first seen
    done, t0 = 0, time.monotonic()

    def note(new: list[Any], rounds_run: int, stage: str) -> None:
        for f in new:
            if f.flag_id > before and f.flag_id not in seen:
                seen[f.flag_id] = {"flag_id": f.flag_id, "kind": str(f.kind),
                                   "nodes": named(f.node_keys), "screening_rounds": rounds_run,
                                   "stage": stage}  # fmt: skip

    while done < max_rounds:
        n = min(16, max_rounds - done)
        cancel = asyncio.Event()

        def progress(k: int, _total: int, base: int = done, cancel: asyncio.Event = cancel) -> None:
            note(flags_db.list_flags(profile=profile.name, limit=50), base + k, "round")
            newest = flags_db.recent_rounds(profile.name, ("screening", "full"), 1).round_ids
            line = {}
            for key, lab in labels.items():
                last = flags_db.recent_verdicts(key, 1)
                if last and newest and last[0]["round_id"] == newest[-1]:
                    el = last[0]["elapsed_s"]
                    line[lab] = f"{last[0]['verdict']} {'-' if el is None else f'{el:.3f}'}"
            print(f"{phase} round {base + k}: {line}", flush=True)
            if first_flag_rule and farm_flag_seen(seen.values(), shared):
                cancel.set()

        rep = await rc.coord.screening.run(profile.name, n, progress=progress, cancel=cancel)
        done += len(rep["rounds"])
        for f in rep["flags"]:
            flags[f["flag_id"]] = f
        stored_flags = (flags_db.get_flag(fid) for fid in sorted(flags) if fid not in seen)
        note([f for f in stored_flags if f is not None], done, "analysis")
        conf = [{"group": named(c["group"]), "verdict": c["verdict"],
                 "attempt": c.get("attempt"), "flags": [named(f) for f in c.get("flags", [])]}
                for c in rep.get("confirmations", [])]  # fmt: skip
        an = rep.get("analysis") or {}
        blocks.append({"screening_rounds_total": done, "elapsed_s": round(time.monotonic() - t0, 1),
                       "cancelled_at_flag": bool(rep.get("cancelled")),
                       "rounds": [{"kind": r["kind"], "loaded": named(r["loaded"]),
                                   "counts": r["counts"]} for r in rep["rounds"]],
                       "suspect_groups": [named(g) for g in an.get("groups", [])],
                       "confirmations": conf,
                       "flags": [{"kind": f.get("kind"), "nodes": named(f.get("node_keys", []))}
                                 for f in rep["flags"]]})  # fmt: skip
        print(
            f"{phase}: {done} screening rounds, {time.monotonic() - t0:.0f} s, suspect groups "
            f"{blocks[-1]['suspect_groups']}, flags {blocks[-1]['flags']}",
            flush=True,
        )
        if first_flag_rule and farm_flag_seen(seen.values(), shared):
            break
        if any(f.get("kind") == "shared-backend" for f in flags.values()):
            break
        if not rep["rounds"]:  # nothing ran (cannot happen): do not spin
            break
    by_kind: dict[str, list[list[str]]] = {}
    for f in flags.values():
        by_kind.setdefault(str(f.get("kind")), []).append(
            sorted(labels.get(k, k) for k in f.get("node_keys", []))
        )
    honest_flagged = sorted({n for fl in by_kind.values() for nodes in fl for n in nodes
                             if n not in shared})  # fmt: skip
    timeline = [seen[fid] for fid in sorted(seen)]
    first = next((f for f in timeline if set(f["nodes"]) & set(shared)), None)
    stored = flags_db.recent_rounds(
        profile.name, ("screening", "full", "confirmation"), 100_000, node_keys=list(labels)
    )
    verdicts = {k: flags_db.recent_verdicts(k, 100_000) for k in labels}
    table, counts = round_table(stored.round_ids, stored.kinds, stored.schedules, verdicts,
                                labels, farm_keys)  # fmt: skip
    summary = {
        "shared_backend_flags": by_kind.get("shared-backend", []),
        "flags_by_kind": by_kind,
        "honest_flagged": honest_flagged,
        "screening_rounds": done,
        "pair_flagged_shared_backend": shared in by_kind.get("shared-backend", []),
        "stop_rule": "first flag on a farm identity" if first_flag_rule else "shared-backend",
        "first_farm_flag": first,
        "farm_flagged": first is not None,
        "flag_timeline": timeline,
        "verdict_counts": counts,
    }
    evidence = {fid: flags_db.get_flag(fid).as_dict() for fid in flags}
    summary["service_times"] = _service_times(rc, profile, labels, shared)
    return {"phase": phase, "flags": evidence, "nodes": {spec[0]: {"kind": spec[1], "card": spec[2], "gpu": info["gpu"],
            "key": info["key"]} for spec, info in zip(specs, infos, strict=True)},
            "blocks": blocks, "rounds_table": table, "summary": summary, "kinds": {}}  # fmt: skip


def farm_flag_seen(flags: Any, farm: Sequence[str]) -> bool:
    """Whether any of ``flags`` (dicts with ``nodes``: labels) names a farm identity."""
    return any(set(f["nodes"]) & set(farm) for f in flags)


def round_table(
    round_ids: Sequence[str], kinds: dict[str, str], schedules: dict[str, dict[str, bool]],
    verdicts: dict[str, list[dict[str, Any]]], labels: dict[str, str], farm_keys: set[str],
) -> tuple[list[dict[str, Any]], dict[str, dict[str, dict[str, int]]]]:  # fmt: skip
    """Per round (oldest first): its kind, the identities loaded, how many farm
    identities were loaded (``farm_loaded``) and, per loaded identity, its verdict and
    ``elapsed_s`` (release -> arrival, s; None when nothing arrived), with the verdict's
    ``reason`` when it is not ``pass``; and per identity the verdict counts by
    ``"<round kind> alone"`` / ``"<round kind> co-loaded"`` (alone: no other farm
    identity loaded). ``verdicts``: per node key, its stored verdicts (``round_id``,
    ``verdict``, ``elapsed_s``, ``reason``); ``labels``: node key -> label."""
    by_round = {k: {v["round_id"]: v for v in vs} for k, vs in verdicts.items()}
    table: list[dict[str, Any]] = []
    counts: dict[str, dict[str, dict[str, int]]] = {lab: {} for lab in labels.values()}
    for rid in round_ids:
        sched = schedules.get(rid, {})
        loaded = sorted(k for k in labels if sched.get(k))
        if not loaded:
            continue
        n_farm = sum(1 for k in farm_keys if sched.get(k))
        row: dict[str, Any] = {"round_id": rid, "kind": kinds.get(rid, "?"),
                               "loaded": sorted(labels[k] for k in loaded),
                               "farm_loaded": n_farm}  # fmt: skip
        for k in loaded:
            v = by_round.get(k, {}).get(rid)
            if v is None:
                continue
            el = v.get("elapsed_s")
            cell_v: dict[str, Any] = {"verdict": v["verdict"],
                                      "elapsed_s": None if el is None else round(float(el), 4)}  # fmt: skip
            if v["verdict"] != "pass" and v.get("reason"):
                cell_v["reason"] = v["reason"]  # e.g. "4.6 s after release, deadline 3.0 s"
            row[labels[k]] = cell_v
            co = "co-loaded" if k in farm_keys and n_farm >= 2 else "alone"
            cell = counts[labels[k]].setdefault(f"{row['kind']} {co}", {})
            cell[v["verdict"]] = cell.get(v["verdict"], 0) + 1
        table.append(row)
    return table, counts


def _service_times(
    rc: Any, profile: Any, labels: dict[str, str], shared: list[str]
) -> dict[str, Any]:
    """Per node and round kind: median, 10th and 90th percentile of released -> arrived
    (s, the coordinator's clock) in rounds where the node was loaded, split by how many
    of the shared pair were loaded in that round (1 = alone on card 0, 2 = co-loaded).
    The ground truth the contention test reads, measured on the real card."""
    import numpy as np

    kinds = ("screening", "full", "confirmation")
    stored = rc.coord.screening.flags.recent_rounds(profile.name, kinds, 100_000)
    on_card0 = {k for k, lab in labels.items() if lab in shared}
    samples: dict[tuple[str, str, int], list[float]] = {}
    for row in stored.results:
        if row["node_key"] not in labels:  # an earlier phase's node
            continue
        if row.get("error") or row.get("arrived_ns") is None or row.get("released_ns") is None:
            continue
        sched = stored.schedules.get(row["round_id"], {})
        co = sum(1 for k in on_card0 if sched.get(k))
        key = (labels.get(row["node_key"], row["node_key"]), stored.kinds[row["round_id"]], co)
        samples.setdefault(key, []).append((row["arrived_ns"] - row["released_ns"]) / 1e9)
    out: dict[str, Any] = {}
    for (label, kind, co), xs in sorted(samples.items()):
        q10, q50, q90 = np.percentile(xs, [10, 50, 90])
        out[f"{label} {kind} shared-loaded={co}"] = {
            "n": len(xs), "p10_s": round(float(q10), 4), "median_s": round(float(q50), 4),
            "p90_s": round(float(q90), 4),
        }  # fmt: skip
    return out


async def rounds_main(args: argparse.Namespace) -> int:
    from netcheck.capacity import capacity_status
    from netcheck.config import load_profile
    from netcheck.lab.testing import running_coordinator
    from netcheck.storage import Store

    profile = load_profile(args.profile)
    store = Store(f"sqlite:///{args.db}")
    result: dict[str, Any] = {"profile": profile.model_dump(mode="json"), "gpus": gpu_uuids(),
                              "deadline_s_rtt0": profile.deadline_s(0.0),
                              "capacity": capacity_status(profile).message,
                              "command": " ".join(sys.argv), "phases": []}  # fmt: skip
    ok = True
    with tempfile.TemporaryDirectory() as tmp:
        async with running_coordinator(Path(tmp), [profile], store=store) as rc:
            for phase in args.phases.split(","):
                n = args.screen_rounds if phase in SCREENING_PHASES else args.rounds
                res = await run_phase(rc, profile, args.profile, phase, n, args.cards)
                result["phases"].append(res)
                if phase in SCREENING_PHASES:
                    summ = res["summary"]
                    if phase in FIRST_FLAG_PHASES:
                        found, want = summ["farm_flagged"], "a flag on a farm identity"
                    else:
                        found = summ["pair_flagged_shared_backend"]
                        want = "the shared pair flagged shared-backend"
                    good = found and not summ["honest_flagged"]
                    ok &= good
                    print(
                        f"phase {phase}: {summ} (expected {want}, no honest node flagged: "
                        f"{'yes' if good else 'NO'})",
                        flush=True,
                    )
                    if args.json:
                        Path(args.json).write_text(json.dumps(result, indent=2) + "\n")
                    continue
                for label, counts in res["summary"].items():
                    kind = res["kinds"][label]
                    want = "late" if phase == "b" and "shared" in label else EXPECTED[kind]
                    good = counts.get(want, 0) == args.rounds
                    ok &= good
                    print(f"phase {phase} {label}: {counts} (expected {want} every round: "
                          f"{'yes' if good else 'NO'})", flush=True)  # fmt: skip
                if args.json:
                    Path(args.json).write_text(json.dumps(result, indent=2) + "\n")
    result["all_as_expected"] = ok
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2) + "\n")
    return 0 if ok else 1


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    sub = ap.add_subparsers(dest="mode", required=True)
    b = sub.add_parser("build")
    b.add_argument("--profile", required=True)
    b.add_argument("--db", required=True)
    b.add_argument("--count", type=int, default=384)
    b.add_argument("--json")
    r = sub.add_parser("rounds")
    r.add_argument("--profile", required=True)
    r.add_argument("--db", required=True)
    r.add_argument("--phases", default="a,b,c")
    r.add_argument("--rounds", type=int, default=5)
    r.add_argument(
        "--screen-rounds",
        type=int,
        default=64,
        help="screening phases (s, s1, s1j, s1p, s1s): at most this many screening rounds "
        "(blocks of 16)",
    )
    r.add_argument("--cards", type=int, default=2, help="cards to spread nodes on (0: CPU)")
    r.add_argument("--json")
    n = sub.add_parser("node")
    for opt in ("--url", "--coord-key", "--profile", "--label", "--kind"):
        n.add_argument(opt, required=True)
    args = ap.parse_args(argv)
    if args.mode == "build":
        build_main(args)
        return 0
    if args.mode == "node":
        asyncio.run(node_main(args))
        return 0
    return asyncio.run(rounds_main(args))


if __name__ == "__main__":
    sys.exit(main())
