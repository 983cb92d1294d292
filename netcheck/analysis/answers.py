"""Answer-level proof of result sharing (pure).

detection.md §4: every node gets a distinct batch (fresh decoys, never-reused canaries),
so two nodes can never legitimately return the same commitment, nor the same output
row for different prompts. Such a match is direct proof that one computation served
several identities (or that one node copied another's answers): a ``result-sharing``
finding, raised immediately, no statistics needed.

Short rows can coincide by chance (e.g. a 3-token answer), so per-row matches count
only from ``min_row_tokens`` tokens on; whole-batch commitments always count.

"Different prompts" means different *engine inputs*. An LLM engine cuts a prompt longer
than ``prompt_len`` tokens from the left (``<s>`` and its last ``prompt_len - 1`` tokens,
or its last ``prompt_len`` without ``<s>``: :func:`netcheck.engines.base.encode_prompts`;
no chat template), so two different prompts with the same tail can be the same input and
honestly give the same row. Without a tokenizer: a cut prompt's kept tokens are its last
``prompt_len - 1`` (or more) tokens, each covering at least one character of an ASCII
text, so two different ASCII prompts give the same input only if they share a suffix of
at least ``prompt_len - 1`` characters (:func:`may_share_input`); a prompt with non-ASCII
text (a tokenizer may normalise it) is never told apart from another.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

RESULT_SHARING = "result-sharing"


@dataclass(frozen=True)
class NodeResult:
    """One node's result in one round: its commitment and its output token rows."""

    commitment: bytes | None
    outputs: Sequence[Sequence[int]] | None


@dataclass(frozen=True)
class SharingFinding:
    """Evidence that nodes ``a`` and ``b`` shared results in ``round_id``.

    ``evidence``: ``"commitment"`` (identical commitments for different batches) or
    ``"outputs"`` (identical rows for different prompts). ``positions``: for outputs,
    the ``(position in a's batch, position in b's batch)`` pairs that match.
    ``commitment_hex``: the shared commitment, for ``"commitment"``.
    """

    kind: str
    round_id: str
    a: str
    b: str
    evidence: str
    positions: tuple[tuple[int, int], ...]
    commitment_hex: str


def find_result_sharing(
    round_id: str,
    results: Mapping[str, NodeResult],
    prompts: Mapping[str, Sequence[str]],
    min_row_tokens: int = 8,
    prompt_len: int | None = None,
) -> list[SharingFinding]:
    """Find pairs of nodes whose results in one round prove sharing.

    Args:
        results: node key -> :class:`NodeResult`.
        prompts: node key -> the prompts assigned to it, in batch order.
        min_row_tokens: shortest output row that counts in a per-row match.
        prompt_len: the engine's prompt length in tokens when it cuts longer prompts
            from the left (the profile's ``prompt_len``, LLM workloads); None = inputs
            are never cut (two different prompts are two different inputs).
    Returns:
        Findings sorted by ``(a, b, evidence)`` with ``a < b``; a pair with a shared
        commitment is not reported again for its (then necessarily equal) rows.
    """
    findings: list[SharingFinding] = []
    by_commit: dict[bytes, list[str]] = {}
    for node, res in results.items():
        if res.commitment is not None:
            by_commit.setdefault(res.commitment, []).append(node)
    commit_pairs: set[tuple[str, str]] = set()
    for commit, nodes in by_commit.items():
        nodes = sorted(nodes)
        for x, a in enumerate(nodes):
            for b in nodes[x + 1 :]:
                if not _same_inputs(prompts.get(a, ()), prompts.get(b, ()), prompt_len):
                    commit_pairs.add((a, b))
                    findings.append(
                        SharingFinding(
                            RESULT_SHARING, round_id, a, b, "commitment", (), commit.hex()
                        )  # fmt: skip
                    )
    rows: dict[tuple[int, ...], list[tuple[str, int]]] = {}
    for node, res in results.items():
        for pos, row in enumerate(res.outputs or ()):
            if len(row) >= min_row_tokens:
                rows.setdefault(tuple(row), []).append((node, pos))
    matches: dict[tuple[str, str], list[tuple[int, int]]] = {}
    for holders in rows.values():
        for x, (na, pa) in enumerate(holders):
            for nb, pb in holders[x + 1 :]:
                if na == nb:
                    continue
                prompt_a = _prompt(prompts, na, pa)
                prompt_b = _prompt(prompts, nb, pb)
                if (
                    prompt_a is not None
                    and prompt_b is not None
                    and may_share_input(prompt_a, prompt_b, prompt_len)
                ):
                    continue  # the same input may legitimately give the same answer
                (a, ia), (b, ib) = sorted(((na, pa), (nb, pb)))
                matches.setdefault((a, b), []).append((ia, ib))
    for (a, b), where in matches.items():
        if (a, b) not in commit_pairs:
            findings.append(
                SharingFinding(RESULT_SHARING, round_id, a, b, "outputs", tuple(sorted(where)), "")
            )
    return sorted(findings, key=lambda f: (f.a, f.b, f.evidence))


def _prompt(prompts: Mapping[str, Sequence[str]], node: str, pos: int) -> str | None:
    batch = prompts.get(node)
    return batch[pos] if batch is not None and 0 <= pos < len(batch) else None


def may_share_input(a: str, b: str, prompt_len: int | None) -> bool:
    """Whether prompts ``a`` and ``b`` may be the same engine input (module docstring):
    equal, or (with ``prompt_len``) a common suffix of at least ``prompt_len - 1``
    characters, or either not ASCII."""
    if a == b:
        return True
    if prompt_len is None:
        return False
    if not (a.isascii() and b.isascii()):
        return True
    need = prompt_len - 1  # at prompt_len 1 an engine that adds <s> keeps only <s>
    return need <= 0 or (len(a) >= need and len(b) >= need and a[-need:] == b[-need:])


def _same_inputs(a: Sequence[str], b: Sequence[str], prompt_len: int | None) -> bool:
    """Whether two batches may be the same engine inputs, position by position."""
    return len(a) == len(b) and all(
        may_share_input(x, y, prompt_len) for x, y in zip(a, b, strict=True)
    )
