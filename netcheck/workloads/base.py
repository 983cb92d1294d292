"""The workload interface: what nodes compute, how inputs are drawn, what an answer is.

A :class:`Workload` makes inputs (canaries and decoys alike) from a seed. Every input is
a string (the ``prompts`` of a job) and every answer is a list of ``max_new_tokens``
non-negative integers below ``2**31`` (the protocol's token limit,
``netcheck/protocol/messages.py``). Two implementations:

* ``"llm"`` (:class:`LlmWorkload`): natural-language prompts from
  :class:`~netcheck.workloads.prompts.PromptGenerator`; the answer is the engine's
  greedy token ids, known only by running a trusted engine.
* ``"factoring"`` (:class:`~netcheck.workloads.factoring.FactoringWorkload`): decimal
  semiprimes ``n = p * q``; the answer is ``[p, q]`` ascending, known from generation.

Workloads are pure Python (stdlib only) so the planner stays free of engines.
"""

from __future__ import annotations

import abc
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar, Protocol

from netcheck.workloads.prompts import PromptGenerator

if TYPE_CHECKING:
    pass


@dataclass(frozen=True)
class WorkItem:
    """One input and, when the workload knows it from generation, its answer
    (``max_new_tokens`` integers); ``answer`` is None for LLM prompts."""

    prompt: str
    answer: tuple[int, ...] | None


class InputStream(Protocol):
    """A seeded stream of inputs: each call continues where the last one stopped."""

    def prompts(self, n: int) -> list[str]:
        """The next ``n`` inputs (``n >= 0``; ValueError otherwise)."""
        ...

    def items(self, n: int) -> list[WorkItem]:
        """The next ``n`` inputs with their known answers, if any."""
        ...


class Workload(abc.ABC):
    """A kind of job that is cheap to pose and costly to answer.

    Attributes:
        name: the profile's ``workload`` value.
        answers_known: True when :meth:`InputStream.items` carries every answer, so
            reference sets need no trusted engine run.
        answer_doc: what one answer (one output row) means.
    """

    name: ClassVar[str]
    answers_known: ClassVar[bool]
    answer_doc: ClassVar[str]

    @abc.abstractmethod
    def generator(self, seed: int | bytes) -> InputStream:
        """A deterministic input stream: a pure function of ``seed`` (int or bytes).

        Raises:
            TypeError: seed neither int nor bytes.
        """


class _PromptStream:
    """:class:`PromptGenerator` as an :class:`InputStream` (answers unknown)."""

    def __init__(self, seed: int | bytes, chars: int | None = None) -> None:
        bounds = {} if chars is None else {"min_chars": chars, "max_chars": chars}
        self._gen = PromptGenerator(seed=seed, **bounds)

    def prompts(self, n: int) -> list[str]:
        return self._gen.prompts(n)

    def items(self, n: int) -> list[WorkItem]:
        return [WorkItem(p, None) for p in self._gen.prompts(n)]


class LlmWorkload(Workload):
    """Natural-language prompts; the answer is a trusted engine's greedy token ids."""

    name = "llm"
    answers_known = False
    answer_doc = "max_new_tokens greedy token ids of the profile's engine, model and dtype"

    def __init__(self, prompt_chars: int | None = None) -> None:
        self.prompt_chars = prompt_chars

    def generator(self, seed: int | bytes) -> InputStream:
        """``PromptGenerator(seed)`` (the same stream as before workloads existed), or
        with ``min_chars = max_chars = prompt_chars`` when the profile sets it."""
        return _PromptStream(seed, self.prompt_chars)
