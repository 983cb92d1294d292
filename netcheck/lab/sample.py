"""Synthetic rounds written through the Store API, for dashboard benchmarks and screenshots.

:func:`fill_synthetic` writes ``n_rounds`` complete rounds over a small population whose
behaviour is fixed by a seed: honest nodes, a proxy pair sharing one GPU (slow and late
when both are loaded), a node returning made-up tokens, and a flaky node that sometimes
drops out. Rounds alternate screening (half the nodes loaded, by a seeded coin) and full
load. Nothing here is a measurement: it exists so pages can be timed and shown with a
realistic amount of data. Schedules and flags go through
:class:`netcheck.storage.flags.FlagStore` when that module is present.
"""

from __future__ import annotations

import importlib
import random
import secrets
from dataclasses import dataclass
from typing import Any

from netcheck.records import Assignment, NodeOutcome, NodeRecord, NodeTiming, RoundPlan, Verdict
from netcheck.storage import Store


@dataclass(frozen=True)
class SyntheticNode:
    """One synthetic node: key, display name and behaviour."""

    key: str
    name: str
    behaviour: str  # honest | proxy | made-up | flaky


def _key(rng: random.Random) -> str:
    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
    return "ed25519:" + "".join(rng.choice(alphabet) for _ in range(43))


def population(n_honest: int, rng: random.Random) -> list[SyntheticNode]:
    """``n_honest`` honest nodes plus proxy-a, proxy-b, made-up and flaky."""
    out = [SyntheticNode(_key(rng), f"honest-{i + 1}", "honest") for i in range(n_honest)]
    out += [
        SyntheticNode(_key(rng), "proxy-a", "proxy"),
        SyntheticNode(_key(rng), "proxy-b", "proxy"),
        SyntheticNode(_key(rng), "made-up", "made-up"),
        SyntheticNode(_key(rng), "flaky", "flaky"),
    ]
    return out


def fill_synthetic(
    store: Store,
    n_rounds: int = 100,
    n_honest: int = 8,
    *,
    seed: int = 7,
    profile: str = "cpu-tiny",
    t_ref_s: float = 2.0,
    start_at: float = 1_790_000_000.0,
) -> list[SyntheticNode]:
    """Write ``n_rounds`` synthetic rounds (and flags, if the flags store exists).

    Returns the node population. Deterministic for a given ``seed``.
    """
    rng = random.Random(seed)
    nodes = population(n_honest, rng)
    flag_store: Any = None
    try:
        flags_module = importlib.import_module("netcheck.storage.flags")
        flag_store = flags_module.FlagStore(store)
    except ImportError:
        pass
    for n in nodes:
        store.upsert_node(n.key, n.name, profile, "f" * 64, {"engine": "torch"}, start_at)
    deadline = 1.5 * t_ref_s + 0.5
    clock_ns = 10**12
    round_ids: list[str] = []
    schedules: dict[str, dict[str, bool]] = {}
    for i in range(n_rounds):
        rid = f"r{i:04d}-synthetic"
        started = start_at + 60.0 * i
        screening = i % 4 != 3
        loaded = {n.key: (rng.random() < 0.5) if screening else True for n in nodes}
        if not any(loaded.values()):
            loaded[nodes[0].key] = True
        schedules[rid] = loaded
        on = [n for n in nodes if loaded[n.key]]
        plan = RoundPlan(
            rid, profile, 16, 64,
            tuple(
                Assignment(n.key, ("p",) * 16, (), (), (), secrets.token_bytes(32),
                           secrets.token_bytes(12))
                for n in on
            ),
            (),
        )  # fmt: skip
        store.record_plan(plan, started)
        if flag_store is not None:
            flag_store.record_schedule(
                rid, profile, "screening" if screening else "full", "synthetic", loaded,
                recorded_at=started,
            )  # fmt: skip
        proxies_on = sum(1 for n in on if n.behaviour == "proxy")
        clock_ns += 60 * 10**9
        outcomes: list[NodeOutcome] = []
        records: dict[str, NodeRecord] = {}
        release = clock_ns
        for n in on:
            release += rng.randint(20_000, 60_000)  # ~40 µs between release writes
            rtt = rng.uniform(0.0004, 0.002)
            service = t_ref_s * rng.lognormvariate(0.0, 0.04)
            if n.behaviour == "proxy" and proxies_on == 2:
                service *= 2.0
            arrived: int | None = release + int((service + rtt) * 1e9)
            elapsed: float | None = (service + rtt) if arrived else None
            verdict, reason, matched = Verdict.PASS, "all canaries matched in time", 3
            if n.behaviour == "made-up":
                verdict, reason, matched = Verdict.WRONG_ANSWER, "canaries at 2, 9 differ", 0
            elif n.behaviour == "flaky" and rng.random() < 0.15:
                verdict, reason, arrived, elapsed = Verdict.MISSING, "no result", None, None
            elif elapsed is not None and elapsed > deadline:
                verdict, reason = Verdict.LATE, f"{elapsed:.3f} s > deadline {deadline:.3f} s"
            outcomes.append(NodeOutcome(n.key, verdict, reason, elapsed, 3, matched))
            records[n.key] = NodeRecord(
                NodeTiming(
                    rtt_s=rtt,
                    deadline_s=deadline,
                    release_start_ns=release,
                    release_end_ns=release + 15_000,
                    arrived_ns=arrived,
                ),
                session_id=secrets.token_bytes(16),
                outputs=[[rng.randrange(258) for _ in range(4)] for _ in range(2)],
                commitment=secrets.token_bytes(32) if arrived else None,
                signature=secrets.token_bytes(64) if arrived else None,
            )
        store.record_outcome(rid, outcomes, records)
        skew = (release + 15_000 - clock_ns) / 1e9
        elapsed_all = [o.elapsed_s for o in outcomes if o.elapsed_s is not None]
        store.finish_round(
            rid,
            "complete",
            {"plan_s": 0.01, "dispatch_s": 0.05, "release_skew_s": skew,
             "total_s": 0.2 + max(elapsed_all, default=deadline)},
            finished_at=started + 5.0,
        )  # fmt: skip
        round_ids.append(rid)
    if flag_store is not None:
        _synthetic_flags(flag_store, nodes, round_ids, schedules, profile, start_at + 60 * n_rounds)
    return nodes


def _synthetic_flags(
    flag_store: Any,
    nodes: list[SyntheticNode],
    round_ids: list[str],
    schedules: dict[str, dict[str, bool]],
    profile: str,
    at: float,
) -> None:
    pair = [n.key for n in nodes if n.behaviour == "proxy"]
    screening = round_ids[-min(len(round_ids), 64) :]
    edges = [
        {"a": pair[0], "b": pair[1], "detector": "A", "statistic": 9.4, "df": 40.0,
         "p_value": 1.2e-9, "p_threshold": 3.8e-5, "effect": 0.62, "effect_floor": 0.223,
         "n_rounds": len(screening)},
    ]  # fmt: skip
    flag_store.add_flag(
        "shared-backend", "confirmed", profile, pair, 1.2e-9, 3.8e-5,
        {
            "rule": "synthetic example of a shared-backend flag",
            "group": pair,
            "confirmed_members": pair,
            "screening": {
                "rounds": screening,
                "schedule_bits": {k: [int(schedules[r][k]) for r in screening] for k in pair},
                "edges": edges,
            },
        },
        created_at=at,
    )  # fmt: skip
    flaky = next(n.key for n in nodes if n.behaviour == "flaky")
    flag_store.add_flag(
        "capacity", "confirmed", profile, [flaky], 3.0, 3.0,
        {"rule": "synthetic example of a capacity flag", "rounds": round_ids[-8:],
         "window": 8},
        created_at=at + 1,
    )  # fmt: skip
    made_up = next(n.key for n in nodes if n.behaviour == "made-up")
    flag_store.add_flag(
        "answer-failure", "confirmed", profile, [made_up], 8.0, 3.0,
        {"rule": "synthetic example of an answer-failure flag", "rounds": round_ids[-8:],
         "failure_rounds": round_ids[-8:], "window": 8, "strikes": 3},
        created_at=at + 2,
    )  # fmt: skip
