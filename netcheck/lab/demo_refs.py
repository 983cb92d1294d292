"""The demo's reference set: built on this machine (the trusted side), in two steps.

:meth:`DemoReferences.first_batch` answers one batch alone and times it: the demo sizes
its emulated GPU from that figure (:mod:`netcheck.lab.demo_sizing`) before any node
starts. :meth:`DemoReferences.rest` then answers the remaining prompts while the node
processes load their engines; with the torch engine on the CPU it runs one builder thread
per core on the one loaded engine (each ``generate`` runs on the profile's
``cpu_threads``, so the answers are the same as from one thread), because a real model's
reference set is minutes of CPU time (``cpu-smollm2``: ~19 CPU-seconds per batch).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from netcheck.config import CoordinatorConfig, Profile
from netcheck.references.build import build_references
from netcheck.storage import Store


class DemoReferences:
    """The demo's reference builder: one engine, loaded on construction.

    Args:
        cfg: the demo coordinator's config (its database gets the references).
        profile: the profile to answer with.

    Raises:
        EngineError: the engine failed to load.
    """

    def __init__(self, cfg: CoordinatorConfig, profile: Profile) -> None:
        from netcheck.engines import load_engine

        self.database = cfg.database
        self.profile = profile
        self.engine: Any = load_engine(profile)
        self.stored = 0

    def threads(self, cores: int) -> int:
        """Builder threads for :meth:`rest`: one per core (at most 4) for the torch engine
        on the CPU, else 1 (vLLM's ``generate`` is not for concurrent callers)."""
        from netcheck.engines.torch_engine import TorchEngine

        if isinstance(self.engine, TorchEngine) and self.profile.device == "cpu":
            return max(1, min(cores, 4))
        return 1

    def _build(self, count: int, progress: Callable[[int, int], None] | None) -> int:
        store = Store(self.database)
        try:
            return build_references(self.profile, self.engine, store, count, progress=progress)
        finally:
            store.close()

    def first_batch(self) -> float:
        """Answer and store one batch of B prompts; returns its wall time in seconds."""
        t0 = time.perf_counter()
        self.stored += self._build(self.profile.batch_size, None)
        return time.perf_counter() - t0

    def rest(self, count: int, threads: int, progress: Callable[[int], None]) -> int:
        """Answer up to ``count`` prompts in total (what :meth:`first_batch` stored
        counts), split over ``threads`` builder threads (``>= 1``), each with its own
        database connection; ``progress(stored_so_far)`` after every batch. Returns the
        number stored by this call.

        Raises:
            EngineError, StorageError: from a builder thread (the first one raised).
        """
        b = self.profile.batch_size
        batches = max(0, -(-(count - self.stored) // b))
        shares = [batches // threads + (i < batches % threads) for i in range(threads)]
        lock = threading.Lock()
        done = [0] * threads
        errors: list[BaseException] = []

        def one(i: int) -> None:
            def tick(n: int, _total: int) -> None:
                with lock:
                    done[i] = n
                    progress(self.stored + sum(done))

            try:
                self._build(shares[i] * b, tick)
            except BaseException as exc:  # re-raised in the caller below
                errors.append(exc)

        workers = [threading.Thread(target=one, args=(i,)) for i, n in enumerate(shares) if n]
        for w in workers:
            w.start()
        for w in workers:
            w.join()
        if errors:
            raise errors[0]
        added = sum(done)
        self.stored += added
        return added

    def close(self) -> None:
        """Release the engine."""
        self.engine.close()
