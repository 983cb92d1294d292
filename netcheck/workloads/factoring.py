"""Semiprime factoring: a second workload that is cheap to pose and costly to answer.

An input is the decimal text of ``n = p * q`` with ``p`` and ``q`` distinct primes of
exactly ``bits // 2`` bits each (top bit set); the answer is ``[p, q]`` ascending
(``max_new_tokens = 2``). Canaries and decoys come from the same seeded stream, so they
look alike; a canary's answer is known from generation, so reference sets need no
trusted compute at all, while a node must factor every input (Pollard's rho,
``netcheck.engines.factoring_engine``).

Primes are drawn from ``random.Random`` seeded with SHA-256 of a domain-separated seed
(scheme ``netcheck-semiprimes-v1``) and tested with the Miller-Rabin test (Miller 1976,
Rabin 1980) using the first twelve prime bases, which is deterministic (never wrong)
for every ``n < 3.3 * 10**24`` (Sorenson and Webster 2015), far above the sizes used.
The default 60-bit semiprimes keep every factor below ``2**30``, inside the protocol's
token limit ``2**31``.
"""

from __future__ import annotations

import random

from netcheck.workloads.base import InputStream, WorkItem, Workload
from netcheck.workloads.seeding import seed_int

SCHEME = b"netcheck-semiprimes-v1"
DEFAULT_BITS = 60
MAX_BITS = 62
"""Largest semiprime size: factors of 31 bits stay below 2**31 (protocol token limit)."""
_MR_BASES = (2, 3, 5, 7, 11, 13, 17, 19, 23, 29, 31, 37)
_MR_LIMIT = 3_317_044_064_679_887_385_961_981  # bases above are deterministic below this


def is_probable_prime(n: int) -> bool:
    """Miller-Rabin with the first twelve prime bases; exact for ``n < 3.3e24``.

    Above that bound a True answer is probabilistic (error < 4**-12 for a random
    composite). Raises TypeError for a non-int.
    """
    if not isinstance(n, int) or isinstance(n, bool):
        raise TypeError(f"n must be int, not {type(n).__name__}")
    if n < 2:
        return False
    for p in _MR_BASES:
        if n % p == 0:
            return n == p
    d, s = n - 1, 0
    while d % 2 == 0:
        d //= 2
        s += 1
    for a in _MR_BASES:
        x = pow(a, d, n)
        if x in (1, n - 1):
            continue
        for _ in range(s - 1):
            x = x * x % n
            if x == n - 1:
                break
        else:
            return False
    return True


def random_prime(rng: random.Random, bits: int) -> int:
    """A uniformly drawn prime with exactly ``bits`` bits (top bit set), ``bits >= 3``.

    Raises ValueError for ``bits < 3``.
    """
    if bits < 3:
        raise ValueError(f"bits must be >= 3, got {bits}")
    while True:
        c = rng.getrandbits(bits) | (1 << (bits - 1)) | 1
        if is_probable_prime(c):
            return c


class SemiprimeGenerator:
    """Deterministic stream of semiprimes ``p * q`` with known factors.

    Args:
        seed: any int or bytes; the stream is a pure function of (seed, bits).
        bits: semiprime size; each factor has ``bits // 2`` bits. Even, 8..62.

    Raises:
        ValueError: bad ``bits``. TypeError: seed neither int nor bytes.
    """

    def __init__(self, seed: int | bytes, *, bits: int = DEFAULT_BITS) -> None:
        if bits % 2 or not 8 <= bits <= MAX_BITS:
            raise ValueError(f"bits must be even and in 8..{MAX_BITS}, got {bits}")
        self._rng = random.Random(seed_int(SCHEME, seed))
        self.bits = bits

    def item(self) -> WorkItem:
        """One semiprime (decimal text) with its answer ``(p, q)``, ``p < q``."""
        half = self.bits // 2
        p = random_prime(self._rng, half)
        q = random_prime(self._rng, half)
        while q == p:
            q = random_prime(self._rng, half)
        p, q = min(p, q), max(p, q)
        return WorkItem(str(p * q), (p, q))

    def items(self, n: int) -> list[WorkItem]:
        """The next ``n`` semiprimes with their factors (``n >= 0``; else ValueError)."""
        if n < 0:
            raise ValueError(f"n must be >= 0, got {n}")
        return [self.item() for _ in range(n)]

    def prompts(self, n: int) -> list[str]:
        """The next ``n`` semiprimes as decimal text."""
        return [it.prompt for it in self.items(n)]


class FactoringWorkload(Workload):
    """Semiprime factoring; answers ``[p, q]`` ascending, known from generation."""

    name = "factoring"
    answers_known = True
    answer_doc = "the two prime factors [p, q] of the input, ascending (max_new_tokens = 2)"

    def __init__(self, bits: int = DEFAULT_BITS) -> None:
        self.bits = bits

    def generator(self, seed: int | bytes) -> InputStream:
        """A :class:`SemiprimeGenerator` of ``self.bits``-bit semiprimes."""
        return SemiprimeGenerator(seed, bits=self.bits)
