"""The ``factoring`` engine: exact semiprime factoring for the factoring workload.

Each input is the decimal text of an integer ``n >= 4``; each output row is
``[p, n // p]`` where ``p`` is the smallest prime factor of ``n`` (for a semiprime
``p * q``: ``[p, q]`` ascending), so ``max_new_tokens`` must be 2. A prime ``n`` gives
``[1, n]``. Factoring is trial division by the primes below 1000, then Pollard's rho
method (Pollard 1975, "A Monte Carlo method for factorization", BIT 15) in Brent's
cycle-finding variant with batched gcds (Brent 1980, BIT 20), with primality decided by
the Miller-Rabin test (:func:`netcheck.workloads.factoring.is_probable_prime`).

The result is a pure function of ``n`` (the rho constants are fixed and the smallest
prime factor is reported), so the engine is deterministic at every batch size. Cost
grows like ``n ** (1/4)``: a 60-bit semiprime takes tens of milliseconds in CPython.
"""

from __future__ import annotations

import math
import platform
from collections.abc import Sequence

from netcheck.engines.base import Engine
from netcheck.engines.fingerprint import make_fingerprint
from netcheck.errors import EngineError
from netcheck.workloads.factoring import is_probable_prime

ENGINE_VERSION = "netcheck-factoring-1"
MODEL_ID = "pollard-rho-brent"
_SMALL_PRIMES = [p for p in range(2, 1000) if all(p % d for d in range(2, math.isqrt(p) + 1))]
_BLOCK = 128  # rho steps per batched gcd
TOKEN_ID_LIMIT = 2**31
"""Answers are sent as token ids, which must be below this (docs/protocol.md §5.5;
``netcheck.protocol.messages.TOKEN_ID_LIMIT``): every factor of the workload's
semiprimes is (``netcheck.workloads.factoring.MAX_BITS``)."""


def _rho(n: int, c: int) -> int | None:
    """A non-trivial factor of odd composite ``n`` by Brent's rho with ``x -> x*x + c``,
    or None when this ``c`` fails (the cycle closes on ``n`` itself)."""
    y, r, q, g = 2, 1, 1, 1
    x = ys = y
    while g == 1:
        x = y
        for _ in range(r):
            y = (y * y + c) % n
        k = 0
        while k < r and g == 1:
            ys = y
            for _ in range(min(_BLOCK, r - k)):
                y = (y * y + c) % n
                q = q * abs(x - y) % n
            g = math.gcd(q, n)
            k += _BLOCK
        r *= 2
    if g == n:  # back up one step at a time inside the last block
        g = 1
        while g == 1:
            ys = (ys * ys + c) % n
            g = math.gcd(abs(x - ys), n)
    return None if g == n else g


def prime_factors(n: int) -> list[int]:
    """All prime factors of ``n >= 2`` with multiplicity, ascending.

    Raises:
        ValueError: ``n < 2``.
        EngineError: rho failed for every constant tried (not seen in practice).
    """
    if n < 2:
        raise ValueError(f"n must be >= 2, got {n}")
    out: list[int] = []
    for p in _SMALL_PRIMES:
        while n % p == 0:
            out.append(p)
            n //= p
    stack = [n] if n > 1 else []
    while stack:
        m = stack.pop()
        if is_probable_prime(m):
            out.append(m)
            continue
        root = math.isqrt(m)
        if root * root == m:
            stack += [root, root]
            continue
        for c in range(1, 64):
            d = _rho(m, c)
            if d is not None:
                stack += [d, m // d]
                break
        else:
            raise EngineError(f"Pollard rho found no factor of {m}")
    return sorted(out)


def factor_pair(n: int) -> list[int]:
    """``[p, n // p]`` with ``p`` the smallest prime factor of ``n`` (``[1, n]`` if prime).

    Raises ValueError for ``n < 2``.
    """
    if is_probable_prime(n):
        return [1, n]
    p = prime_factors(n)[0]
    return [p, n // p]


class FactoringEngine(Engine):
    """Answers batches of decimal integers with their factor pairs (module docstring).

    Args:
        batch_size: B, inputs per batch.
        prompt_len: longest input in characters.
        max_new_tokens: must be 2 (the pair).

    Raises:
        EngineError: bad shape, or ``max_new_tokens != 2``.
    """

    name = "factoring"

    def __init__(self, *, batch_size: int, prompt_len: int, max_new_tokens: int = 2) -> None:
        super().__init__(
            batch_size=batch_size, prompt_len=prompt_len, max_new_tokens=max_new_tokens
        )
        if max_new_tokens != 2:
            raise EngineError(f"factoring answers are 2 numbers, max_new_tokens={max_new_tokens}")
        self._fingerprint = make_fingerprint(
            engine=self.name,
            engine_version=ENGINE_VERSION,
            model_id=MODEL_ID,
            weight_hash="none",
            dtype="int",
            device=f"cpu-{platform.python_implementation().lower()}",
            batch_size=batch_size,
            prompt_len=prompt_len,
            max_new_tokens=max_new_tokens,
        )

    def generate(self, prompts: Sequence[str]) -> list[list[int]]:
        """Factor each input: ``B`` rows of ``[p, q]`` (shape ``[B][2]``, ints).

        Raises:
            EngineError: wrong batch, an input that is not a decimal integer >= 4 of at
                most ``prompt_len`` characters, or one whose larger factor (the number
                itself, for a prime) is not below :data:`TOKEN_ID_LIMIT`.
        """
        out: list[list[int]] = []
        for i, text in enumerate(self._check_prompts(prompts)):
            if len(text) > self._prompt_len or not text.isdigit() or not text.isascii():
                raise EngineError(
                    f"input {i} is not a decimal integer of <= {self._prompt_len} chars"
                )
            n = int(text)
            if n < 4:
                raise EngineError(f"input {i} is {n}; need n >= 4")
            pair = factor_pair(n)
            if pair[1] >= TOKEN_ID_LIMIT:  # a prime, or a factor the workload never makes
                raise EngineError(
                    f"input {i}: factor {pair[1]} does not fit a token id (< 2**31): not a "
                    "semiprime of the workload"
                )
            out.append(pair)
        return out
