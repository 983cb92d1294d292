"""Handshake admission limits (docs/protocol.md §3.3b): who is charged for an attempt.

Pure and sans-I/O: the caller passes the clock reading. Design (issue #12 item 2):

- A per-**source** budget is charged only for attempts that do not prove an admitted
  node key: failed handshakes (bare upgrades, timeouts, malformed or refused messages)
  and, under open enrollment, the first handshake of a key not yet known. Nothing is
  refused at the upgrade: a source over its budget has its *failing* attempts closed
  with ``RATE_LIMITED``, so traffic without an admitted key cannot lock out a node
  that has one (it shares the address but not the key).
- A handshake that proves an admitted key (``allowed_nodes``, or a key already known
  under open enrollment) is charged to that **key's** budget instead, which only the
  key's holder can drain.
- Both tables are token buckets in an :class:`collections.OrderedDict` used as an LRU
  with a size cap: each attempt does O(1) work (one lookup, one ``move_to_end``, at
  most one eviction), whatever the table holds. There is no scan.
- :class:`SessionSlots` caps concurrent websocket sessions (handshaking or connected),
  in total and per source, so that one host cannot make the coordinator hold hundreds
  of receive buffers (docs/protocol.md §3.3c).
- :func:`client_address` takes the forwarded client address from ``X-Forwarded-For``
  only when the TCP peer is a configured trusted proxy (rightmost untrusted hop).
"""

from __future__ import annotations

import ipaddress
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

#: Failed (unauthenticated) handshake attempts a source may make per minute; also the burst.
SOURCE_FAILURES_PER_MINUTE = 120
#: Handshakes one admitted node key may complete per minute; also the burst.
KEY_HANDSHAKES_PER_MINUTE = 30
#: Most sources and most keys each table remembers; the least recently used is dropped.
MAX_TRACKED = 16_384

Network = ipaddress.IPv4Network | ipaddress.IPv6Network


class TokenBuckets:
    """Token buckets by name, bounded as an LRU (O(1) per call).

    Args:
        per_minute: refill rate, tokens per minute; also the capacity (burst).
        max_names: table size cap; inserting past it drops the least recently used
            name, whose bucket then starts full again if it comes back.

    Source: the classic token bucket (Turner 1986; RFC 2697 uses the same meter).
    """

    def __init__(self, per_minute: int, max_names: int = MAX_TRACKED) -> None:
        if per_minute < 1 or max_names < 1:
            raise ValueError("per_minute and max_names must be at least 1")
        self.capacity = float(per_minute)
        self.rate_per_s = per_minute / 60.0
        self.max_names = max_names
        self._table: OrderedDict[str, tuple[float, float]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._table)

    def __contains__(self, name: str) -> bool:
        return name in self._table

    def _tokens(self, name: str, now: float) -> float:
        entry = self._table.get(name)
        if entry is None:
            return self.capacity
        tokens, stamp = entry
        return min(self.capacity, tokens + max(0.0, now - stamp) * self.rate_per_s)

    def empty(self, name: str, now: float) -> bool:
        """True if ``name`` has less than one token at ``now`` (seconds, monotonic)."""
        return self._tokens(name, now) < 1.0

    def take(self, name: str, now: float) -> bool:
        """Spend one token of ``name``; False (nothing spent) if it has none.

        A refused call is not charged, so a bucket refills while its owner keeps
        retrying above the rate.
        """
        tokens = self._tokens(name, now)
        if tokens < 1.0:
            return False
        self.remember(name, now, tokens - 1.0)
        return True

    def remember(self, name: str, now: float, tokens: float | None = None) -> None:
        """Store ``name`` (full bucket unless ``tokens``) as most recently used."""
        self._table[name] = (self.capacity if tokens is None else tokens, now)
        self._table.move_to_end(name)
        if len(self._table) > self.max_names:
            self._table.popitem(last=False)


@dataclass
class HandshakeLimiter:
    """Charges each handshake outcome to its source or to its proven node key.

    ``sources`` counts attempts without an admitted key; ``keys`` counts handshakes of
    admitted keys. See the module docstring and docs/protocol.md §3.3b.
    """

    sources: TokenBuckets
    keys: TokenBuckets

    @classmethod
    def default(cls, known_keys: Iterable[str] = ()) -> HandshakeLimiter:
        """Default budgets; ``known_keys`` (e.g. from the database) count as known."""
        limiter = cls(
            TokenBuckets(SOURCE_FAILURES_PER_MINUTE), TokenBuckets(KEY_HANDSHAKES_PER_MINUTE)
        )
        for key in known_keys:
            limiter.keys.remember(key, 0.0)
        return limiter

    def failed(self, source: str, now: float) -> bool:
        """Charge a failed attempt to ``source``; False if the source is over budget
        (the caller then closes with ``RATE_LIMITED``)."""
        return self.sources.take(source, now)

    def succeeded(self, source: str, key: str, *, listed: bool, now: float) -> bool:
        """Charge a handshake that proved ``key``; False means refuse (``RATE_LIMITED``).

        Args:
            source: client address (see :func:`client_address`).
            key: the proven node key (text form).
            listed: the key is in ``allowed_nodes``. Otherwise (open enrollment) the key
                counts as admitted only once known; its first handshake is charged to
                ``source``, like a failure, so fresh keys cannot bypass the source budget.
            now: monotonic seconds.
        """
        if listed or key in self.keys:
            return self.keys.take(key, now)
        if not self.sources.take(source, now):
            return False
        self.keys.take(key, now)  # known from now on
        return True


@dataclass(frozen=True)
class SlotRefusal:
    """Why :meth:`SessionSlots.acquire` refused a connection.

    Attributes:
        scope: ``"total"`` (``max_sessions``) or ``"source"`` (``max_sessions_per_source``).
        limit: the limit that was reached, sessions.
        first: the first refusal of this scope (and source) since it was last below the
            limit: the caller logs a WARNING only then, so a flood logs one line.
    """

    scope: str
    limit: int
    first: bool


class SessionSlots:
    """Concurrent session slots, in total and per source (docs/protocol.md §3.3c).

    Pure: no I/O, no clock. A slot is taken when the websocket upgrade arrives, before
    any handshake work, and given back when the connection's handler ends, whatever
    the outcome. The per-source table holds only sources with a slot, so it never
    holds more than ``max_total`` names.

    Args:
        max_total: most sessions at once, all sources together (``max_sessions``).
        max_per_source: most sessions at once from one source address
            (``max_sessions_per_source``).

    Raises:
        ValueError: a limit below 1.
    """

    def __init__(self, max_total: int, max_per_source: int) -> None:
        if max_total < 1 or max_per_source < 1:
            raise ValueError("max_total and max_per_source must be at least 1")
        self.max_total = max_total
        self.max_per_source = max_per_source
        self.total = 0
        #: Connections refused for a full slot table since start (status, metrics).
        self.refused = 0
        self._held: dict[str, int] = {}
        self._warned: set[str] = set()  # sources refused since last below their limit
        self._warned_total = False

    def held(self, source: str) -> int:
        """Slots ``source`` holds now."""
        return self._held.get(source, 0)

    def acquire(self, source: str) -> SlotRefusal | None:
        """Take a slot for ``source``; None if taken, else why not (nothing taken)."""
        held = self._held.get(source, 0)
        if held >= self.max_per_source:
            self.refused += 1
            first = source not in self._warned
            self._warned.add(source)
            return SlotRefusal("source", self.max_per_source, first)
        if self.total >= self.max_total:
            self.refused += 1
            first, self._warned_total = not self._warned_total, True
            return SlotRefusal("total", self.max_total, first)
        self._held[source] = held + 1
        self.total += 1
        return None

    def release(self, source: str) -> None:
        """Give back a slot :meth:`acquire` gave ``source``.

        Raises:
            ValueError: ``source`` holds no slot (a bug in the caller).
        """
        held = self._held.get(source, 0)
        if held < 1:
            raise ValueError(f"source {source!r} holds no session slot")
        if held == 1:
            del self._held[source]
        else:
            self._held[source] = held - 1
        self.total -= 1
        self._warned.discard(source)  # below its limit again: a new refusal is logged
        self._warned_total = False


def parse_networks(texts: Sequence[str]) -> list[Network]:
    """CIDR texts (``10.0.0.0/8``, ``::1/128``, or a bare address) -> networks.

    Raises:
        ValueError: naming the entry that is not an address or network.
    """
    nets = []
    for i, text in enumerate(texts):
        try:
            nets.append(ipaddress.ip_network(text.strip(), strict=False))
        except ValueError:
            raise ValueError(f"entry {i}: {text!r} is not an IP address or CIDR network") from None
    return nets


def _in(addr: str, nets: Sequence[Network]) -> bool:
    try:
        ip = ipaddress.ip_address(addr)
    except ValueError:
        return False
    return any(ip in net for net in nets)


def client_address(
    remote: str | None, forwarded_for: Sequence[str], trusted: Sequence[Network]
) -> str:
    """The address a handshake is charged to.

    Args:
        remote: the TCP peer address (``request.remote``).
        forwarded_for: every ``X-Forwarded-For`` header value, in order.
        trusted: ``trusted_proxies`` networks.

    Returns:
        ``remote`` unless it is a trusted proxy; then the rightmost hop of
        ``X-Forwarded-For`` that is not a trusted proxy (hops left of it could be
        forged by the client). A missing or malformed hop leaves the last trusted hop.
    """
    peer = remote or "?"
    if not trusted or not _in(peer, trusted):
        return peer
    hops = [h.strip() for value in forwarded_for for h in value.split(",")]
    for hop in reversed(hops):
        try:
            ipaddress.ip_address(hop)
        except ValueError:
            return peer  # a malformed hop: charge the last hop we can trust
        if not _in(hop, trusted):
            return hop
        peer = hop
    return peer
