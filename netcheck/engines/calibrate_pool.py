"""``netcheck engine pool``: one profile deadline from the calibrations of several cards.

``netcheck engine calibrate`` measures one trusted card, so cards of the class that are
slower or noisier than it are not in the deadline it derives (docs/detection.md,
"Calibrating on one card"). Calibrate each card of the class, then pool the records
with :func:`pool_calibrations`. Pure: no engine, no torch, no I/O (the CLI reads the
files).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from typing import Any

from netcheck.analysis.alone import AloneConfig
from netcheck.analysis.slowness import SlownessConfig
from netcheck.capacity import capacity_margin, derive_deadline
from netcheck.config import CapacityRecord, Profile

BATCH_FIELDS = (
    "engine",
    "model",
    "dtype",
    "batch_size",
    "prompt_len",
    "prompt_chars",
    "max_new_tokens",
    "workload",
)
"""Profile fields that determine what one batch computes, so its time: pooled records
must agree on each of them (the profile *name* and the deadline may differ)."""
MAX_CARD_GAP = 0.10
"""Default largest relative distance of one card's median batch time from the median of
the card medians (10%: real H200s of one model differ by about 1%)."""

SLOWNESS_COUPLING = AloneConfig.coupling
"""The benign co-hosting slowdown the persistent-slowness floor must cover (0.2, goal G4
of docs/detection.md; ``AloneConfig.coupling``): :func:`slowness_check` takes the larger
of it and the pooled deadline's ``coupling``."""


def _median(times: Sequence[float]) -> float:
    return sorted(times)[len(times) // 2]  # the rule derive_deadline uses for t_ref


def _agreed(values: Sequence[Any], field: str, sources: Sequence[str], hint: str = "") -> Any:
    """The common value of ``field`` across records; ValueError naming the field, the first
    two differing values and their files otherwise."""
    for value, source in zip(values[1:], sources[1:], strict=True):
        if value != values[0]:
            raise ValueError(
                f"{field} differs: {values[0]!r} in {sources[0]}, {value!r} in {source}{hint}"
            )
    return values[0]


def _get(record: dict[str, Any], field: str, source: str) -> Any:
    value: Any = record
    for part in field.split("."):
        if not isinstance(value, dict) or part not in value:
            raise ValueError(f"{source}: field {field} missing (not a calibration record?)")
        value = value[part]
    return value


def _numbers(
    record: dict[str, Any], field: str, source: str, *, positive: bool = True,
    required: bool = True,
) -> list[float]:  # fmt: skip
    """``record[field]`` as a list of finite numbers (``> 0`` when ``positive``); an
    absent or null field is ``[]`` unless ``required``. ValueError naming the file and
    the field otherwise (NaN, infinity, a bool, a string, not a list)."""
    value = _get(record, field, source) if required else record.get(field)
    if value is None and not required:
        return []
    want = "positive seconds" if positive else "finite numbers"
    if not isinstance(value, list) or (required and not value):
        raise ValueError(f"{source}: field {field} must be a non-empty list of {want}")
    for i, x in enumerate(value):
        bad = isinstance(x, bool) or not isinstance(x, int | float) or not math.isfinite(x)
        if bad or (positive and x <= 0):
            raise ValueError(f"{source}: field {field}[{i}] is {x!r}, not one of {want}")
    return [float(x) for x in value]


def _number(record: dict[str, Any], field: str, source: str, default: float | None = None) -> float:
    """The finite number at the dotted ``field`` (``default`` when absent and given);
    ValueError naming the file and the field otherwise."""
    parent, _, last = field.rpartition(".")
    holder = _get(record, parent, source) if parent else record
    if not isinstance(holder, dict):
        raise ValueError(f"{source}: field {parent} must be a JSON object")
    if last not in holder and default is not None:
        return default
    x = _get(record, field, source)
    if isinstance(x, bool) or not isinstance(x, int | float) or not math.isfinite(x):
        raise ValueError(f"{source}: field {field} is {x!r}, not a finite number")
    return float(x)


def _check_record(record: dict[str, Any], source: str) -> None:
    """Refuse a record whose figures pooling reads are of the wrong type or not finite
    (ValueError naming the file and the field)."""
    _numbers(record, "times_s", source)
    t_k = _numbers(record, "t_k_s", source, required=False)
    if len(t_k) >= 2 and t_k[1] < t_k[0]:
        raise ValueError(f"{source}: field t_k_s: t(2) = {t_k[1]} s is below t(1) = "
                         f"{t_k[0]} s (two batches cannot take less than one)")  # fmt: skip
    _numbers(record, "beta", source, positive=False, required=False)
    for field in ("card", "capacity", "deadline"):
        value = record.get(field)
        if field == "card" and not isinstance(value, str):
            raise ValueError(f"{source}: field card must be a string (the GPU name and UUID)")
        if field != "card" and value is not None and not isinstance(value, dict):
            raise ValueError(f"{source}: field {field} must be a JSON object")


def slowness_check(
    medians: Sequence[float], t_ref_s: float, floor: float, coupling: float
) -> dict[str, Any]:
    """The pooled cards' spread against the persistent-slowness floor
    (:mod:`netcheck.analysis.slowness`; the coordinator's ``slowness_floor``).

    Rule: an honest node on the slowest card has its median batch time at ``r =
    max(medians) / t_ref_s`` (``t_ref_s``: the pooled median, the class reference of the
    slowness test) and, in the screening rounds where a co-hosted neighbour is loaded
    too, ``r * (1 + c)`` with ``c = max(coupling, SLOWNESS_COUPLING)``. The test's null
    (median at most ``floor * t_ref``, and at load probability ``q`` above the floor in
    at most ``max(1/2, q)`` of the rounds) covers such a node only while ``r * (1 + c)
    <= floor``: above, its coupled rounds are all above the floor and any noise in the
    others pushes it past the null rate, so it is rejected in time and sent to the alone
    stage (no flag while alone it stays under the alone floor, but alone rounds spent).
    So the floor leaves the cards' spread the share ``floor / (1 + c) - 1`` of its
    headroom (4.2% at 1.25 and 0.2; the rest is the coupling), and ``warn`` is set when
    the slowest card uses more. A warning on the median is the least it can say: a
    noisy card needs more room still.

    Returns:
        ``floor``, ``coupling`` (``c``), ``slowest_ratio`` (``r``), ``coupled_ratio``
        (``r * (1 + c)``), ``max_card_ratio`` (``floor / (1 + c)``, the slowest card the
        floor covers), ``min_floor`` (``r * (1 + c)`` rounded up to 0.01: the
        ``slowness_floor`` that covers this card) and ``warn``; ratios rounded to 4
        digits.

    Raises:
        ValueError: no medians, ``t_ref_s <= 0``, ``floor <= 1`` or not finite, or
            ``coupling < 0``.
    """
    if not medians or not t_ref_s > 0:
        raise ValueError("need card medians and a positive t_ref_s")
    if not 1.0 < floor < math.inf:  # as the coordinator config: finite (JSON has no inf)
        raise ValueError(f"slowness_floor must be a finite number > 1, got {floor}")
    if not coupling >= 0:
        raise ValueError(f"coupling must be >= 0, got {coupling}")
    c = max(coupling, SLOWNESS_COUPLING)
    ratio = max(medians) / t_ref_s
    coupled = ratio * (1.0 + c)
    return {
        "floor": floor,
        "coupling": c,
        "slowest_ratio": round(ratio, 4),
        "coupled_ratio": round(coupled, 4),
        "max_card_ratio": round(floor / (1.0 + c), 4),
        "min_floor": math.ceil(round(coupled * 100, 6)) / 100,
        "warn": coupled > floor,
    }


def pool_calibrations(
    records: Sequence[dict[str, Any]],
    *,
    sources: Sequence[str] | None = None,
    coupling: float | None = None,
    rtt_jitter_s: float | None = None,
    max_rtt_s: float | None = None,
    max_card_gap: float = MAX_CARD_GAP,
    allow_same_card: bool = False,
    slowness_floor: float = SlownessConfig.floor,
) -> dict[str, Any]:
    """Pool calibration records of several cards of one class into one deadline.

    Rules, and why:

    - **Same batch.** Every record describes the same work: the :data:`BATCH_FIELDS` of
      its ``profile`` agree (the profile *name* may differ: a renamed copy of a profile
      computes the same batch; the names are listed in the result), and none mixes CPU
      with GPU figures (``cpu``). Otherwise the times measure different things.
    - **Distinct cards.** The ``card`` string carries the GPU UUID; the same card twice
      would count one card's spread as the class's, so it is refused unless
      ``allow_same_card`` (the result then says ``same_card_allowed``).
    - **One class.** A card whose median batch time is more than ``max_card_gap`` from
      the median of the card medians is refused: a different class or a faulty card
      would widen the deadline for everyone (a farm could hide in the room it buys).
    - **Sound figures.** ``times_s`` is a non-empty list of finite positive seconds (no
      NaN, infinity, bool or string), ``t_k_s`` and ``beta`` lists of finite numbers with
      t(2) >= t(1), ``card`` a string, ``deadline`` and ``capacity`` objects: a record
      that is not is refused naming its file and field, never pooled into a deadline.
    - **Deadline.** :func:`~netcheck.capacity.derive_deadline` over all the cards' batch
      times concatenated: each card weighted by its own batches. Not resampled to equal
      weight: that adds randomness or drops measurements, and the tail does not need it
      (with up to 100 batches in all, the nearest-rank p99 is the slowest batch of any
      card, so the slowest card's tail is in; calibrate each card with a similar
      ``--batches`` so the median is not one card's). ``coupling``, ``rtt_jitter_s`` and
      ``max_rtt_s`` default to the records' own (``deadline.coupling``, ``slack_s / 2``,
      ``deadline.max_rtt_s``); when the records disagree the value must be given.
    - **Capacity.** A farm puts its identities on the fastest card it has, and the pooled
      deadline is set by the slowest honest card, so the worst case for the gate is the
      card with the smallest ``t(2) / D_pooled(max_rtt)``: its figures become the
      ``[capacity]`` table (its t(2), t(3), beta, margin at the pooled deadline), except
      t(1): the pooled median, since ``Profile.reference_t_s`` (t(1) of ``[capacity]``)
      is the one-batch time of the *class* the slowness tests compare every node with;
      the fastest card's would make the slower honest cards look slow. beta stays the
      card's own (measured against its own t(1), ``capacity_card_t1_s``). Records without
      co-location figures (``t_k_s`` shorter than 2) contribute times only.
    - **Slowness floor.** The slowest card's median over the pooled t(1), slowed by the
      co-hosting allowance, is compared with ``slowness_floor`` (:func:`slowness_check`):
      a report line, and a warning naming the coordinator's ``slowness_floor`` when the
      floor does not cover it. Not a refusal: the deadline is still right.

    Args:
        records: calibration result dicts as ``netcheck engine calibrate`` writes them
            (``<profile>.json``); at least two.
        sources: a name per record for error messages and ``pooled_from`` (file names);
            default ``record 1``, ``record 2``, ...
        coupling, rtt_jitter_s, max_rtt_s: override the records' figures (seconds).
        max_card_gap: largest relative gap of a card median from the median of medians.
        allow_same_card: accept the same ``card`` more than once.
        slowness_floor: the coordinator's ``slowness_floor`` to compare the cards with
            (default 1.25, its default).

    Returns:
        A dict shaped like a calibrate result (``profile`` of the first record,
        ``times_s`` pooled, ``t_ref_s``, ``p99_s``, ``deadline``, ``deadline_s_rtt0``,
        ``deadline_s_max_rtt``, ``t_k_s``, ``beta``, and ``margin`` / ``capacity`` /
        ``capacity_card`` / ``capacity_card_t1_s`` when a card measured t(2)), plus
        ``pooled_from``: per card ``file``, ``card``, ``host``,
        ``date``, ``n_batches``, ``t_ref_s``, ``p99_s``, ``gap`` (relative to the median
        of the card medians), ``t2_s``, ``margin_at_pooled_deadline`` and, for
        comparison, ``deadline_s_max_rtt_alone`` / ``margin_alone`` (the same rule and
        network figures on that card's times only); ``slowness``: :func:`slowness_check`
        with ``slowest_card`` and ``slowest_file``.

    Raises:
        ValueError: fewer than two records, a missing field, a batch field or ``cpu``
            that differs, the same card twice, a card past ``max_card_gap``, network
            figures or coupling that differ without an override, ``slowness_floor <=
            1``, or bad values.
    """
    if len(records) < 2:
        raise ValueError(
            f"need at least two calibration records to pool, got {len(records)} (with one "
            "card, `netcheck engine calibrate --update-profile` writes its tables)"
        )
    names = list(sources) if sources is not None else []
    if len(names) != len(records):
        names = [f"record {i + 1}" for i in range(len(records))]
    if not max_card_gap > 0:
        raise ValueError(f"max_card_gap must be > 0, got {max_card_gap}")
    if not 1.0 < slowness_floor < math.inf:
        raise ValueError(f"slowness_floor must be a finite number > 1, got {slowness_floor}")
    profiles = [_get(r, "profile", s) for r, s in zip(records, names, strict=True)]
    for prof, s in zip(profiles, names, strict=True):
        if not isinstance(prof, dict):
            raise ValueError(f"{s}: field profile must be a JSON object (a profile dump)")
    for r, s in zip(records, names, strict=True):
        _check_record(r, s)
    for field in BATCH_FIELDS:
        _agreed([prof.get(field) for prof in profiles], f"profile.{field}", names)
    cpus = [bool(r.get("cpu", str(_get(r, "card", s)).startswith("cpu")))
            for r, s in zip(records, names, strict=True)]  # fmt: skip
    cpu = _agreed(cpus, "cpu (CPU and GPU figures mixed)", names)
    cards = [str(_get(r, "card", s)) for r, s in zip(records, names, strict=True)]
    for i, card in enumerate(cards):
        if card in cards[:i] and not allow_same_card:
            first = names[cards.index(card)]
            raise ValueError(
                f"card {card} appears twice ({first} and {names[i]}): pool distinct cards, "
                "or pass --allow-same-card"
            )
    times: list[list[float]] = []
    for r, s in zip(records, names, strict=True):
        times.append(_numbers(r, "times_s", s))
    medians = [_median(t) for t in times]
    mid = statistics.median(medians)
    gaps = [(m - mid) / mid for m in medians]
    for card, gap, s in zip(cards, gaps, names, strict=True):
        if abs(gap) > max_card_gap:
            raise ValueError(
                f"card {card} ({s}): median batch time {100 * gap:+.1f}% from the median of "
                f"the card medians ({mid:.4f} s), past max_card_gap {100 * max_card_gap:g}%: "
                "a different class or a faulty card; drop it or raise --max-card-gap"
            )
    hint = ": pass the value to use (--{})"
    if coupling is None:
        values = [_number(r, "deadline.coupling", s, default=0.0)
                  for r, s in zip(records, names, strict=True)]  # fmt: skip
        coupling = _agreed(values, "deadline.coupling", names, hint.format("coupling"))
    if rtt_jitter_s is None:
        values = [
            _number(r, "deadline.slack_s", s) / 2 for r, s in zip(records, names, strict=True)
        ]
        rtt_jitter_s = _agreed(
            values, "deadline.slack_s (2 x RTT jitter)", names, hint.format("rtt-jitter-s")
        )
    if max_rtt_s is None:
        values = [_number(r, "deadline.max_rtt_s", s) for r, s in zip(records, names, strict=True)]
        max_rtt_s = _agreed(values, "deadline.max_rtt_s", names, hint.format("max-rtt-s"))
    assert coupling is not None and rtt_jitter_s is not None and max_rtt_s is not None
    net = {"rtt_jitter_s": rtt_jitter_s, "max_rtt_s": max_rtt_s, "coupling": coupling}
    pooled_times = [x for t in times for x in t]
    deadline = derive_deadline(pooled_times, **net)
    base = dict(records[0]["profile"])
    try:
        profile = Profile.model_validate({**base, "deadline": deadline, "capacity": None})
    except ValueError as exc:
        raise ValueError(f"{names[0]}: field profile is not a valid profile: {exc}") from exc
    pooled_from: list[dict[str, Any]] = []
    worst: tuple[float, int] | None = None
    for i, (r, t, s) in enumerate(zip(records, times, names, strict=True)):
        alone = profile.model_copy(update={"deadline": derive_deadline(t, **net)})
        t_k = [float(x) for x in r.get("t_k_s") or []]
        entry: dict[str, Any] = {
            "file": s, "card": cards[i], "host": r.get("host"), "date": r.get("date"),
            "software": r.get("software"), "profile_name": _profile_name(r),
            "n_batches": len(t), "t_ref_s": round(medians[i], 4),
            "p99_s": alone.deadline.p99_s, "gap": round(gaps[i], 4),
            "deadline_s_max_rtt_alone": round(alone.deadline_s(max_rtt_s), 4),
            "t2_s": None, "margin_at_pooled_deadline": None, "margin_alone": None,
        }  # fmt: skip
        if len(t_k) >= 2:
            margin = capacity_margin(t_k[1], profile)
            entry.update(
                t2_s=round(t_k[1], 4),
                margin_at_pooled_deadline=round(margin, 3),
                margin_alone=round(capacity_margin(t_k[1], alone), 3),
            )
            if worst is None or margin < worst[0]:
                worst = (margin, i)
        pooled_from.append(entry)
    result: dict[str, Any] = {
        "profile": {**base, "deadline": deadline.model_dump(mode="json"), "capacity": None},
        "cpu": cpu,
        "card": f"{len(records)} cards (" + ", ".join(cards) + ")",
        "software": ", ".join(sorted({str(r.get("software", "")) for r in records})),
        "date": max(str(r.get("date", "")) for r in records),
        "host": ", ".join(sorted({str(r.get("host", "")) for r in records})),
        "times_s": pooled_times,
        "t_ref_s": deadline.t_ref_s,
        "p99_s": deadline.p99_s,
        "deadline": deadline.model_dump(mode="json"),
        "deadline_s_rtt0": profile.deadline_s(0.0),
        "deadline_s_max_rtt": profile.deadline_s(max_rtt_s),
        "t_k_s": [deadline.t_ref_s],
        "beta": [],
        "max_card_gap": max_card_gap,
        "same_card_allowed": allow_same_card and len(set(cards)) < len(cards),
        "profile_names": sorted({_profile_name(r) for r in records}),
        "pooled_from": pooled_from,
    }
    slowest = max(range(len(medians)), key=lambda i: medians[i])
    result["slowness"] = {
        **slowness_check(medians, deadline.t_ref_s, slowness_floor, coupling),
        "slowest_card": cards[slowest],
        "slowest_file": names[slowest],
    }
    if worst is not None:
        margin, i = worst
        r = records[i]
        own = [float(x) for x in r["t_k_s"]]
        t_k = [deadline.t_ref_s, *own[1:]]
        beta = [float(x) for x in r.get("beta") or []][: len(t_k) - 1]
        cap = dict(r.get("capacity") or {})
        record = CapacityRecord(
            t_s=[round(x, 4) for x in t_k],
            beta=[round(x, 3) for x in beta],
            margin=round(margin, 3),
            flops_fraction=cap.get("flops_fraction"),
            peak_tflops=cap.get("peak_tflops"),
            packing=str(cap.get("packing") or r.get("packing") or "processes"),
            card=cards[i],
            date=str(r.get("date") or cap.get("date") or "unknown"),
            software=str(r.get("software", "")),
        )
        result.update(
            t_k_s=t_k, beta=beta, margin=margin, capacity=record.model_dump(mode="json"),
            capacity_card=cards[i], capacity_card_t1_s=own[0], packing=record.packing,
        )  # fmt: skip
        result["profile"]["capacity"] = result["capacity"]
    return result


def _profile_name(record: dict[str, Any]) -> str:
    return str(record.get("profile", {}).get("name", ""))
