"""Handshake limiter cost per attempt vs the number of distinct sources (#12 item 2).

Prints attempts/s of :class:`netcheck.coordinator.limits.HandshakeLimiter` with few
sources and with 50,000 distinct sources churning through its 16,384-entry tables,
against the limiter it replaced (a dict of per-source deques that scanned the whole
table on each attempt past 10,000 sources), reimplemented here as the baseline and
measured in the same run. Run: ``PYTHONPATH=$PWD .venv/bin/python benchmarks/handshake_limits.py``.
"""

from __future__ import annotations

import time
from collections import defaultdict, deque

from netcheck.coordinator.limits import HandshakeLimiter

ATTEMPTS = 20_000


def old_limiter(peers: list[str]) -> float:
    """The pre-#12 algorithm (server.py at 8a9deaa), attempts/s."""
    attempts: dict[str, deque[float]] = defaultdict(deque)

    def limited(peer: str, now: float) -> bool:
        window = attempts[peer]
        while window and now - window[0] > 60.0:
            window.popleft()
        if len(window) >= 120:
            return True
        window.append(now)
        if len(attempts) > 10_000:
            for key in [k for k, w in attempts.items() if now - w[-1] > 60.0]:
                del attempts[key]
        return False

    start = time.perf_counter()
    for i, peer in enumerate(peers):
        limited(peer, i * 1e-3)
    return len(peers) / (time.perf_counter() - start)


def new_limiter(peers: list[str]) -> float:
    """HandshakeLimiter.failed per attempt, attempts/s."""
    limiter = HandshakeLimiter.default()
    start = time.perf_counter()
    for i, peer in enumerate(peers):
        limiter.failed(peer, i * 1e-3)
    return len(peers) / (time.perf_counter() - start)


def main() -> None:
    few = [f"10.0.0.{i % 100}" for i in range(ATTEMPTS)]
    many = [f"10.{i >> 16}.{(i >> 8) & 255}.{i & 255}" for i in range(50_000)]
    print(f"{'case':<40} {'old /s':>12} {'new /s':>12} {'new/old':>8}")
    for name, peers in (("100 sources", few), ("50,000 distinct sources", many)):
        old, new = old_limiter(peers), new_limiter(peers)
        print(f"{name:<40} {old:>12,.0f} {new:>12,.0f} {new / old:>8.1f}")


if __name__ == "__main__":
    main()
