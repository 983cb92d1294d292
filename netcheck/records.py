"""Typed records shared by the layers (bottom layer: stdlib only).

Data that crosses a layer boundary is defined here once, so that no lower layer imports
its types from a higher one:

- a round's plan (:class:`RoundPlan` of :class:`Assignment`), made by the pure planner
  (:mod:`netcheck.coordinator.planner`) and persisted by :mod:`netcheck.storage`;
- what each node did (:class:`NodeTiming`, :class:`NodeRecord`) and what it means
  (:class:`Verdict`, :class:`NodeOutcome`, from :mod:`netcheck.analysis.verdicts`);
- what a round produced (:class:`RoundReport`) for the admin API, metrics and detection;
- the stored rounds the detectors read back (:class:`StoredRounds`);
- a stored finding against nodes (:class:`Flag`), as storage reads it back;
- the kinds and statuses of rounds and flags (:class:`RoundKind`, :class:`RoundStatus`,
  :class:`FlagKind`, :class:`FlagStatus`). They are ``StrEnum``: each member equals its
  text, which is what the database and the JSON documents hold.

Bytes stay bytes here (session ids, commitments, signatures); storage writes them as hex
at the database boundary, the JSON documents as hex through their encoders.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any


class RoundKind(StrEnum):
    """Why a round ran: every node loaded (``full``), the secret load schedule
    (``screening``) or a suspect group or one member (``confirmation``)."""

    FULL = "full"
    SCREENING = "screening"
    CONFIRMATION = "confirmation"


class RoundStatus(StrEnum):
    """A stored round's state: ``planned`` until finished, then ``complete`` or
    ``aborted`` (shutdown, crash), or ``recorded-late`` (complete, but its results
    waited in the spool for the database, docs/spool.md). ``spooled`` is never stored:
    it is how a ``planned`` round whose results wait in the spool is shown."""

    PLANNED = "planned"
    COMPLETE = "complete"
    ABORTED = "aborted"
    RECORDED_LATE = "recorded-late"
    SPOOLED = "spooled"


class FlagKind(StrEnum):
    """A finding against nodes (docs/detection.md)."""

    SHARED_BACKEND = "shared-backend"
    CAPACITY = "capacity"
    RESULT_SHARING = "result-sharing"
    RELAY = "relay"
    ANSWER_FAILURE = "answer-failure"
    DECLARED_HOST = "declared-host"
    SLOW = "slow"


class FlagStatus(StrEnum):
    """A flag's state: ``confirmed``, ``cleared`` (a suspect group that confirmation
    did not confirm) or ``pending`` (evidence incomplete, e.g. probes unanswered)."""

    CONFIRMED = "confirmed"
    CLEARED = "cleared"
    PENDING = "pending"


class Verdict(StrEnum):
    """Outcome of one node in one round."""

    PASS = "pass"
    WRONG_ANSWER = "wrong-answer"
    LATE = "late"
    MALFORMED = "malformed"
    MISSING = "missing"
    PROFILE_MISMATCH = "profile-mismatch"
    DISCONNECTED = "disconnected"
    UNCHECKED = "unchecked"
    """The coordinator had no canary for the node's (known) fingerprint: its reference
    pool is missing or used up. Not the node's fault; the operator must build more."""
    COORDINATOR_ERROR = "coordinator-error"
    """The coordinator itself failed to serve the node (e.g. could not seal or write its
    job or release for a local reason). Not the node's fault: never a capacity strike."""


@dataclass(frozen=True)
class NodeOutcome:
    """A node's verdict in one round, with a human-readable reason.

    ``elapsed_s``: arrival minus release on the coordinator clock, seconds (``None`` if
    unknown). ``canaries_checked``/``canaries_matched``: canary outputs compared/equal.
    """

    node_key: str
    verdict: Verdict
    reason: str
    elapsed_s: float | None
    canaries_checked: int
    canaries_matched: int

    def to_json(self) -> dict[str, Any]:
        """The verdict as a JSON-ready dict (the verdict as its text): the form of the
        ``verdicts`` table row, the spool entry and the round report."""
        return {
            "node_key": self.node_key,
            "verdict": str(self.verdict),
            "reason": self.reason,
            "elapsed_s": self.elapsed_s,
            "canaries_checked": self.canaries_checked,
            "canaries_matched": self.canaries_matched,
        }


@dataclass(frozen=True)
class Assignment:
    """One node's mixed batch.

    ``prompts`` has exactly B entries; canary ``canary_ids[i]`` sits at
    ``prompts[canary_positions[i]]`` (positions ascending) and its reference answer is
    ``canary_answers[i]`` (``max_new_tokens`` token ids). ``job_key`` is 32 bytes,
    ``job_nonce`` 12 bytes.
    """

    node_key: str
    prompts: tuple[str, ...]
    canary_positions: tuple[int, ...]
    canary_ids: tuple[str, ...]
    canary_answers: tuple[tuple[int, ...], ...]
    job_key: bytes
    job_nonce: bytes


@dataclass(frozen=True)
class RoundPlan:
    """A planned round: one assignment per served node; ``skipped`` = (node_key, reason)
    for nodes that get no job (verdict ``profile-mismatch``)."""

    round_id: str
    profile: str
    batch_size: int
    max_new_tokens: int
    assignments: tuple[Assignment, ...]
    skipped: tuple[tuple[str, str], ...]


@dataclass
class NodeTiming:
    """Raw timestamps for one node in one round (``time.monotonic_ns`` values)."""

    rtt_s: float | None = None
    deadline_s: float | None = None
    job_sent_ns: int | None = None
    #: When its job frame was handed to the connection (its head, which gives the
    #: frame's length, could reach the node from then, even if the rest of the write
    #: then blocked; None: it never reached the socket, the node was gone before
    #: dispatch or stalled behind an earlier write); a close after it is ``missing``,
    #: not ``disconnected`` (netcheck.analysis.verdicts.verify).
    job_written_ns: int | None = None
    acked_ns: int | None = None
    release_start_ns: int | None = None
    release_end_ns: int | None = None
    arrived_ns: int | None = None
    #: When the result was opened, checked and handed to the round (after ``arrived_ns``).
    processed_ns: int | None = None
    #: This node's place in the round's (freshly shuffled) release order, from 0.
    release_index: int | None = None
    #: Where ``arrived_ns`` came from (netcheck.coordinator.arrivals): ``"kernel"`` (the
    #: kernel's receive stamp of the read that completed the result), ``"read"`` (the
    #: monotonic clock in the socket read callback) or ``"reader"`` (in the reader task).
    arrival_stamp: str | None = None
    # Relay test evidence (docs/detection.md "Relay test"), raw: every echo and every
    # correct probe round trip (seconds), the fastest probe, unanswered and wrong probes.
    echo_samples_s: list[float] = field(default_factory=list)
    probe_samples_s: list[float] = field(default_factory=list)
    probe_rtt_s: float | None = None
    probe_missed: int = 0
    probe_wrong: int = 0
    #: Seconds from the start of the sample set these RTTs come from to the round's plan
    #: (sets are taken between rounds: netcheck.coordinator.rtt); None: no set.
    rtt_age_s: float | None = None

    def as_dict(self) -> dict[str, Any]:
        return {k: list(v) if isinstance(v, list) else v for k, v in self.__dict__.items()}

    def budget(self, first_release_ns: int | None) -> dict[str, float | int | str | None]:
        """This node's timing budget (docs/protocol.md, "Timing"): seconds.

        ``release_offset_s``: its release write started this long after the round's
        first one (its own stamp is used for its latency, so the offset costs it
        nothing; it shows the order was fair); ``release_write_s``: its release write
        took this long; ``processing_delay_s``: its result waited this long between
        arrival (stamp) and being opened, checked and handed to the round (the
        coordinator's own queueing, not in its latency); ``release_index``: its place
        in the round's shuffled release order; ``arrival_stamp``: the source of its
        arrival stamp (``kernel``, ``read`` or ``reader``; see ``arrival_stamp``).
        """

        def span(a: int | None, b: int | None) -> float | None:
            return (b - a) / 1e9 if a is not None and b is not None else None

        return {
            "release_index": self.release_index,
            "release_offset_s": span(first_release_ns, self.release_start_ns),
            "release_write_s": span(self.release_start_ns, self.release_end_ns),
            "processing_delay_s": span(self.arrived_ns, self.processed_ns),
            "arrival_stamp": self.arrival_stamp,
        }


@dataclass
class RoundReport:
    """What a round produced: verdicts per node and the phase timings (seconds)."""

    round_id: str
    profile: str
    status: str
    outcomes: list[NodeOutcome] = field(default_factory=list)
    phases: dict[str, float] = field(default_factory=dict)
    kind: str = RoundKind.FULL
    schedule: dict[str, bool] = field(default_factory=dict)
    flags: list[int] = field(default_factory=list)
    #: Per node: its raw stamps (``release_start_ns``, ``arrived_ns``, ``processed_ns``,
    #: coordinator monotonic ns) and its timing budget (:meth:`NodeTiming.budget`).
    timings: dict[str, dict[str, Any]] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {
            "round_id": self.round_id,
            "profile": self.profile,
            "status": self.status,
            "kind": self.kind,
            "schedule": self.schedule,
            "flags": self.flags,
            "phases": self.phases,
            "verdicts": [
                {**o.to_json(), "timing": self.timings.get(o.node_key)} for o in self.outcomes
            ],
        }


#: The keys of a record's evidence mapping besides its free ``extra`` keys.
_EVIDENCE_KEYS = ("timing", "budget", "session_id", "outputs", "commitment", "signature", "error")
_TIMING_FIELDS = frozenset(NodeTiming.__dataclass_fields__)


def _raw(value: object, key: str) -> bytes | None:
    """Bytes from an evidence value: bytes kept, hex text decoded, None kept.

    Raises:
        ValueError: the value is neither (the key is named).
    """
    if value is None or isinstance(value, bytes):
        return value
    if isinstance(value, bytearray):
        return bytes(value)
    if isinstance(value, str):
        try:
            return bytes.fromhex(value)
        except ValueError:
            raise ValueError(f"evidence {key!r} is not hex: {value[:40]!r}") from None
    raise ValueError(f"evidence {key!r} is not bytes or hex: {type(value).__name__}")


@dataclass
class NodeRecord:
    """Everything the coordinator keeps of one node in one round besides its verdict:
    the raw timing, and the result as received (``None`` where there was none).

    ``timing``: ``None`` where the coordinator never timed the node (e.g. the nodes of
    a gateway lost mid-round); ``session_id``: the 16-byte session id the receipt binds;
    ``outputs``: B lists of token ids; ``commitment`` (32 bytes) and ``signature`` (64
    bytes): the signed receipt; ``error``: the node's own error text (already made
    printable); ``extra``: free JSON-able facts stored with the record (in the
    ``results.extra`` column beside the timing fields), e.g. ``{"gateway": id}``.
    """

    timing: NodeTiming | None = None
    session_id: bytes | None = None
    outputs: list[list[int]] | None = None
    commitment: bytes | None = None
    signature: bytes | None = None
    error: str | None = None
    #: The node's timing budget (:meth:`NodeTiming.budget`), stored in ``extra``.
    budget: dict[str, Any] | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    #: The timing fields an evidence mapping held (:meth:`from_evidence` of an entry
    #: written before a field was added); only these are stored. None: every field.
    timing_keys: tuple[str, ...] | None = None

    def __post_init__(self) -> None:
        clash = sorted(set(self.extra) & {*_EVIDENCE_KEYS, *_TIMING_FIELDS})
        if clash:
            raise ValueError(f"NodeRecord.extra may not hold record fields: {clash}")

    def evidence(self) -> dict[str, Any]:
        """The record as one evidence mapping (``timing`` nested, absent where None;
        ``budget`` absent where None; the ``extra`` keys at the top level; bytes kept):
        what the spool stores as JSON (docs/spool.md), read back by
        :meth:`from_evidence`."""
        return {
            **self.extra,
            **({"timing": self.timing_dict()} if self.timing is not None else {}),
            **({"budget": self.budget} if self.budget is not None else {}),
            "session_id": self.session_id,
            "outputs": self.outputs,
            "commitment": self.commitment,
            "signature": self.signature,
            "error": self.error,
        }

    def timing_dict(self) -> dict[str, Any]:
        """The timing's fields (only :attr:`timing_keys` where set); empty without timing."""
        if self.timing is None:
            return {}
        t = self.timing.as_dict()
        return t if self.timing_keys is None else {k: t[k] for k in self.timing_keys}

    @classmethod
    def from_evidence(cls, evidence: Mapping[str, Any]) -> NodeRecord:
        """A record from an evidence mapping: :meth:`evidence`, also after a JSON round
        trip (bytes as hex), as spool entries hold it.

        Read as the store read the evidence mappings it took before records were typed,
        so an old spool entry is stored as the same row: the nested ``timing`` dict is
        flattened into the top level (the top level wins); the keys of
        :class:`NodeTiming` form the timing (``released_ns`` stands for
        ``release_start_ns`` where that is missing; no timing key at all means no
        timing), and only the fields the entry holds are stored (:attr:`timing_keys`); ``session_id``,
        ``commitment`` and ``signature`` may be bytes or hex; every other key goes to
        ``extra``.

        Raises:
            ValueError: a field has the wrong type (bad hex, a ``timing`` or ``budget``
                that is not a mapping).
        """
        nested = evidence.get("timing")
        if nested is not None and not isinstance(nested, Mapping):
            raise ValueError(f"evidence 'timing' is not a mapping: {type(nested).__name__}")
        flat = {**(nested or {}), **{k: v for k, v in evidence.items() if k != "timing"}}
        released = flat.pop("released_ns", None)
        if flat.get("release_start_ns") is None and released is not None:
            flat["release_start_ns"] = released
        timed = nested is not None or any(k in _TIMING_FIELDS for k in flat)
        timing = NodeTiming(**{k: v for k, v in flat.items() if k in _TIMING_FIELDS})
        budget = flat.get("budget")
        if budget is not None and not isinstance(budget, Mapping):
            raise ValueError(f"evidence 'budget' is not a mapping: {type(budget).__name__}")
        outputs = flat.get("outputs")
        present = tuple(k for k in NodeTiming.__dataclass_fields__ if k in flat)
        return cls(
            timing_keys=None if not timed or len(present) == len(_TIMING_FIELDS) else present,
            timing=timing if timed else None,
            session_id=_raw(flat.get("session_id"), "session_id"),
            outputs=None if outputs is None else [list(o) for o in outputs],
            commitment=_raw(flat.get("commitment"), "commitment"),
            signature=_raw(flat.get("signature"), "signature"),
            error=flat.get("error"),
            budget=None if budget is None else dict(budget),
            extra={
                str(k): v
                for k, v in flat.items()
                if k not in _TIMING_FIELDS and k not in _EVIDENCE_KEYS
            },
        )


@dataclass(frozen=True)
class StoredRounds:
    """Rounds read back for analysis, oldest first.

    ``round_ids``: the rounds; ``kinds``/``schedules``: per round; ``results``: the raw
    ``results`` rows of those rounds (dicts with ``round_id``, ``node_key``,
    ``released_ns``, ``arrived_ns``, ``rtt_s``, ``session_id``, ``commitment``,
    ``signature``, ``error``); ``contexts``: see the field.
    """

    round_ids: tuple[str, ...]
    kinds: dict[str, str]
    schedules: dict[str, dict[str, bool]]
    results: tuple[dict[str, Any], ...]
    contexts: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Per round, the JSON context stored with its schedule (e.g. the confirmation run's
    group, phase and the set it tested); missing or ``{}`` where none was stored."""


@dataclass(frozen=True)
class Flag:
    """One stored flag (a finding against nodes, docs/detection.md), as
    :class:`~netcheck.storage.flags.FlagStore` and the dashboard's reader return it.

    ``node_keys``: the named nodes, sorted; ``created_at``: Unix seconds;
    ``statistic``/``threshold``: the detector's figures (None where not finite);
    ``evidence``: the stored JSON document, ``None`` where it was not read (flag lists).
    """

    flag_id: int
    kind: FlagKind
    status: FlagStatus
    profile: str
    node_keys: tuple[str, ...]
    created_at: float
    statistic: float | None = None
    threshold: float | None = None
    evidence: dict[str, Any] | None = None

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> Flag:
        """A flag from a ``flags`` row mapping (``evidence`` optional).

        Raises:
            ValueError: the row's ``kind`` or ``status`` is not a known one.
        """
        evidence = row.get("evidence")
        return cls(
            flag_id=int(row["flag_id"]),
            kind=FlagKind(row["kind"]),
            status=FlagStatus(row["status"]),
            profile=str(row["profile"]),
            node_keys=tuple(row["node_keys"]),
            created_at=float(row["created_at"]),
            statistic=row.get("statistic"),
            threshold=row.get("threshold"),
            evidence=None if evidence is None else dict(evidence),
        )

    def as_dict(self) -> dict[str, Any]:
        """The flag as the JSON documents (admin API, exports) show it: the ``flags``
        row's columns, ``node_keys`` a list, no ``evidence`` key where it was not read."""
        out: dict[str, Any] = {
            "flag_id": self.flag_id,
            "kind": str(self.kind),
            "status": str(self.status),
            "profile": self.profile,
            "node_keys": list(self.node_keys),
            "created_at": self.created_at,
            "statistic": self.statistic,
            "threshold": self.threshold,
        }
        if self.evidence is not None:
            out["evidence"] = self.evidence
        return out
