"""Echo and compute-probe RTT samples per session, taken *between* rounds by a
background prober; a round only reads them (docs/rtt-sampling.md).

A **sample set** is what one round needs of one node: ``ECHO_SAMPLES`` application
echoes (docs/protocol.md §5.6) interleaved with ``PROBE_SAMPLES`` compute probes
(§5.9): echo, probe, echo, probe, echo, probe. A probe follows only an answered echo,
and after the first unanswered probe the set sends no more, so a silent node costs no
probe timeout and a node that ignores probes one. The node's RTT for the round is the
minimum echo (docs/detection.md §2); its probe RTT the minimum correct probe.

:class:`RttProber` keeps, per live session, at most one *unused* set no older than
``max_age_s``. It takes a fresh set at a random time after the node's previous one was
used by a round (within ``refresh_s / 4`` of that round's end) or aged past
``refresh_s`` (±25 %), a few sessions per tick, and checks the probe answers of a whole
batch in one numpy call in a thread. A round (:meth:`RttProber.for_round`) *uses up*
each node's set, so no two rounds share samples (the relay test counts rounds as
independent evidence); sessions without a usable set (just connected, set too old, every
echo unanswered) are sampled at that moment, all concurrently, no message of that step
starting after one deadline (:data:`INLINE_DEADLINE_S`). While a round holds the prober (:meth:`RttProber.holding`)
no new set is started, so no sample is taken while the node runs a job or while the
coordinator releases and collects.

The wire protocol is unchanged; only *when* echoes and probes are sent is (between
rounds, at times a node cannot tie to the next round's start).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import random
import secrets
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field

from netcheck.coordinator.session import NodeSession
from netcheck.engines import probe as probe_mod
from netcheck.records import NodeTiming

log = logging.getLogger("netcheck.round")

#: Echo samples per set; the minimum is the node's RTT for the round (detection.md §2).
ECHO_SAMPLES = 3
ECHO_TIMEOUT_S = 2.0
#: Compute probes (docs/protocol.md §5.9) per set, interleaved with the echoes.
#: Timeout: the smaller of PROBE_TIMEOUT_S and ECHO_TIMEOUT_S.
PROBE_SAMPLES = 3
PROBE_TIMEOUT_S = 1.0
#: A round samples the nodes that have no usable set all at once; no echo or probe of
#: that step starts later than this many seconds after it began, so it ends within this
#: plus one echo timeout (a silent node used to cost 3 echo timeouts on its own).
INLINE_DEADLINE_S = 3.0
#: The background prober looks for due sessions this often (seconds).
TICK_S = 0.25
#: A set older than ``MAX_AGE_FACTOR * refresh_s`` is not used: the node is re-sampled.
MAX_AGE_FACTOR = 3.0
#: Sets completing within this many seconds of each other are checked in one batch.
COALESCE_S = 0.02


@dataclass(frozen=True)
class RttSet:
    """One node's sample set (module docstring), probe answers already checked.

    Attributes:
        started_ns: ``time.monotonic_ns()`` just before the set's first echo.
        echo_samples_s: every answered echo's round trip, seconds, in order.
        probe_samples_s: every *correct* probe's round trip, seconds.
        probe_missed: probes not answered within their timeout (0 or 1).
        probe_wrong: probes answered with a wrong answer (discarded, counted).
        inline: taken by a round because no usable background set existed.
    """

    started_ns: int
    echo_samples_s: tuple[float, ...]
    probe_samples_s: tuple[float, ...]
    probe_missed: int
    probe_wrong: int
    inline: bool = False

    @property
    def rtt_s(self) -> float | None:
        """The minimum echo round trip (seconds), or None when no echo was answered."""
        return min(self.echo_samples_s) if self.echo_samples_s else None

    @property
    def probe_rtt_s(self) -> float | None:
        """The minimum correct probe round trip (seconds), or None."""
        return min(self.probe_samples_s) if self.probe_samples_s else None

    def fill(self, t: NodeTiming, now_ns: int) -> None:
        """Copy the set into a round's :class:`NodeTiming` (raw samples and minima;
        ``rtt_age_s`` = seconds from the set's start to ``now_ns``)."""
        t.rtt_s = self.rtt_s
        t.echo_samples_s = list(self.echo_samples_s)
        t.probe_samples_s = list(self.probe_samples_s)
        t.probe_rtt_s = self.probe_rtt_s
        t.probe_missed = self.probe_missed
        t.probe_wrong = self.probe_wrong
        t.rtt_age_s = (now_ns - self.started_ns) / 1e9


@dataclass(frozen=True)
class _Raw:
    """A set as taken, probe answers not yet checked: (rtt_s, answer, challenge)."""

    started_ns: int
    echoes: tuple[float, ...]
    replies: tuple[tuple[float, bytes, bytes], ...]
    missed: int


async def _take(s: NodeSession, deadline: float) -> _Raw:
    """Take one set from ``s``; no echo or probe is *started* after ``deadline``
    (event-loop time), each one in flight ends by its own timeout."""
    loop = asyncio.get_running_loop()
    started = time.monotonic_ns()
    echoes: list[float] = []
    replies: list[tuple[float, bytes, bytes]] = []
    missed = 0
    probing = True
    for i in range(max(ECHO_SAMPLES, PROBE_SAMPLES)):
        rtt = None
        if i < ECHO_SAMPLES:
            if loop.time() >= deadline:
                break
            rtt = await s.measure_rtt(secrets.randbits(62), ECHO_TIMEOUT_S)
            if rtt is not None:
                echoes.append(rtt)
        if probing and i < PROBE_SAMPLES and (rtt is not None or i >= ECHO_SAMPLES):
            if loop.time() >= deadline:
                break
            challenge = secrets.token_bytes(probe_mod.CHALLENGE_BYTES)
            got = await s.probe_rtt(
                secrets.randbits(62), challenge, min(PROBE_TIMEOUT_S, ECHO_TIMEOUT_S)
            )
            if got is None:
                missed += 1
                probing = False
            else:
                replies.append((got[0], got[1], challenge))
    return _Raw(started, tuple(echoes), tuple(replies), missed)


def check_sets(raws: Sequence[_Raw], inline: bool = False) -> list[RttSet]:
    """Check every probe answer of ``raws`` against the CPU recomputation, all in one
    batched call (:func:`netcheck.engines.probe.answers`). Blocking: run it in a
    thread."""
    challenges = [c for r in raws for _, _, c in r.replies]
    expected = dict(zip(challenges, probe_mod.answers(challenges), strict=True))
    out = []
    for r in raws:
        good = tuple(rtt for rtt, answer, c in r.replies if answer == expected[c])
        out.append(
            RttSet(r.started_ns, r.echoes, good, r.missed, len(r.replies) - len(good), inline)
        )
    return out


@dataclass
class ProberStats:
    """Counters of an :class:`RttProber` (for benchmarks and logs)."""

    background_sets: int = 0
    inline_sets: int = 0
    used_sets: int = 0
    discarded_sets: int = 0


@dataclass
class RttProber:
    """Keeps a fresh, unused :class:`RttSet` per live session (module docstring).

    Args:
        sessions: returns the live sessions (the coordinator's registry).
        refresh_s: a set older than this (±25 %) is replaced in the background; a used
            one within ``refresh_s / 4`` after the round that used it. 0 disables the
            background prober: every round samples every node itself, as before.
        rng: jitter of the schedule (default: the OS's randomness).
    """

    sessions: Callable[[], Iterable[NodeSession]]
    refresh_s: float = 10.0
    rng: random.Random = field(default_factory=random.SystemRandom)
    stats: ProberStats = field(default_factory=ProberStats)
    _latest: dict[bytes, RttSet] = field(default_factory=dict)
    #: session id -> monotonic ns at which a new set is due; None: after the round.
    _due: dict[bytes, int | None] = field(default_factory=dict)
    _pending: dict[bytes, asyncio.Future[None]] = field(default_factory=dict)
    _batches: set[asyncio.Task[None]] = field(default_factory=set)
    #: sessions whose set in flight must not be stored (it overlaps a round)
    _discard: set[bytes] = field(default_factory=set)
    _holds: int = 0

    @property
    def max_age_s(self) -> float:
        """A set older than this (seconds) is not used by a round."""
        return MAX_AGE_FACTOR * self.refresh_s

    # -- rounds ----------------------------------------------------------------------

    @contextlib.contextmanager
    def holding(self) -> Iterator[None]:
        """While held (by a round), the prober starts no new set; sets already in flight
        finish. After the last release, every set used meanwhile is replaced at a random
        moment within ``refresh_s / 4``."""
        self._holds += 1
        try:
            yield
        finally:
            self._holds -= 1

    async def for_round(
        self,
        sessions: Sequence[NodeSession],
        timing: dict[str, NodeTiming],
        others: Sequence[NodeSession] = (),
    ) -> int:
        """Fill each session's :class:`NodeTiming` (and ``rtt_s``) from its unused set,
        and use the set up. Sessions without a usable set wait for a set in flight or are
        sampled now, all concurrently, starting no message after :data:`INLINE_DEADLINE_S`.
        A node that answered no echo gets no RTT (``rtt_s`` stays as it was).

        ``others``: the connected sessions the round does not load. Those without a usable
        set or one in flight are sampled now too, on the same rule (not waited for), and
        their sets are kept for a later round: the echoes at a round's start must not tell a node it is
        loaded (one that leaves the prober's echoes unanswered would otherwise get them
        in exactly its loaded rounds, seconds before its job, and could leave then).

        Returns the number of sets taken inline by this call for ``sessions``.
        """
        loop = asyncio.get_running_loop()
        deadline = loop.time() + INLINE_DEADLINE_S
        now = time.monotonic_ns()
        waits: list[asyncio.Future[None]] = []
        need: list[NodeSession] = []
        for s in sessions:
            sid = s.session_id
            pending = self._pending.get(sid)
            if self._usable(self._latest.get(sid), now):
                if pending is not None:  # a refresh in flight would overlap the job
                    self._discard.add(sid)
            elif pending is not None:
                waits.append(pending)
            else:
                need.append(s)
        idle = [s for s in others  # not loaded: the same echoes a loaded node would get
                if not self._usable(self._latest.get(s.session_id), now)
                and s.session_id not in self._pending]  # fmt: skip
        if need or idle:
            started = self._start([*need, *idle], deadline, inline=True)
            waits += started[: len(need)]  # the round waits for its loaded nodes' sets only
        if waits:  # sets in flight (background or now) end by their own timeouts
            await asyncio.wait(waits, timeout=INLINE_DEADLINE_S + ECHO_TIMEOUT_S + 1.0)
        now = time.monotonic_ns()
        for s in sessions:
            sid = s.session_id
            if sid in self._pending:  # past the deadline: too late for this round, and
                self._discard.add(sid)  # the rest of it would overlap the job
            st = self._latest.pop(sid, None)
            self._due[sid] = None  # sampled again after this round
            if st is None or not st.echo_samples_s:
                continue
            self.stats.used_sets += 1
            st.fill(timing[s.node_key], now)
            s.rtt_s = st.rtt_s
        return len(need)

    def unused_set(self, s: NodeSession) -> RttSet | None:
        """The set a round would use for ``s`` now, if any (usable: answered echoes,
        not older than :attr:`max_age_s`)."""
        st = self._latest.get(s.session_id)
        return st if self._usable(st, time.monotonic_ns()) else None

    def _usable(self, st: RttSet | None, now_ns: int) -> bool:
        return (
            st is not None
            and bool(st.echo_samples_s)
            and (now_ns - st.started_ns) / 1e9 <= self.max_age_s
        )

    # -- sampling ----------------------------------------------------------------------

    def _jitter_ns(self, low: float, high: float) -> int:
        return int(self.refresh_s * self.rng.uniform(low, high) * 1e9)

    def _start(
        self, sessions: Sequence[NodeSession], deadline: float, inline: bool
    ) -> list[asyncio.Future[None]]:
        """Take a set from each session in one task; returns their completion futures."""
        loop = asyncio.get_running_loop()
        futs = []
        for s in sessions:
            fut: asyncio.Future[None] = loop.create_future()
            self._pending[s.session_id] = fut
            futs.append(fut)
        task = loop.create_task(self._batch(list(sessions), deadline, inline))
        self._batches.add(task)
        task.add_done_callback(self._batches.discard)
        return futs

    async def _batch(self, sessions: list[NodeSession], deadline: float, inline: bool) -> None:
        """Take a set from every session; sets are checked and stored as they complete
        (those completing within :data:`COALESCE_S` of each other in one batched
        check), so a silent node holds up nobody else's set."""
        tasks: dict[asyncio.Future[_Raw], NodeSession] = {
            asyncio.ensure_future(_take(s, deadline)): s for s in sessions
        }
        try:
            left: set[asyncio.Future[_Raw]] = set(tasks)
            while left:
                done, left = await asyncio.wait(left, return_when=asyncio.FIRST_COMPLETED)
                if left:
                    more, left = await asyncio.wait(left, timeout=COALESCE_S)
                    done |= more
                await self._store([(tasks[t], t) for t in done], inline)
        finally:
            for t in tasks:
                t.cancel()  # only waits are cancelled: writes run in session-owned tasks
            for s in sessions:
                self._finished(s)

    async def _store(
        self, done: list[tuple[NodeSession, asyncio.Future[_Raw]]], inline: bool
    ) -> None:
        ok: list[tuple[NodeSession, _Raw]] = []
        for s, t in done:
            if t.exception() is not None:
                log.warning("node %s: RTT sample failed: %r", s.label, t.exception())
                self._finished(s)
            else:
                ok.append((s, t.result()))
        sets = await asyncio.to_thread(check_sets, [r for _, r in ok], inline)
        now = time.monotonic_ns()
        for (s, _), st in zip(ok, sets, strict=True):
            if s.session_id in self._discard or s.closed.is_set():
                self.stats.discarded_sets += 1
            else:
                if inline:
                    self.stats.inline_sets += 1
                else:
                    self.stats.background_sets += 1
                self._latest[s.session_id] = st
                self._due[s.session_id] = now + self._jitter_ns(0.75, 1.25)
            self._finished(s)

    def _finished(self, s: NodeSession) -> None:
        """``s``'s set is stored, dropped or failed: wake whoever waits for it."""
        fut = self._pending.pop(s.session_id, None)
        if fut is not None:
            self._discard.discard(s.session_id)
            if not fut.done():
                fut.set_result(None)

    def tick(self) -> int:
        """Start sets for the sessions that are due (at most a batch); forget sessions
        that left. Returns the number started. Called by :meth:`run`."""
        live = {s.session_id: s for s in self.sessions() if not s.closed.is_set()}
        for gone in [sid for sid in self._due if sid not in live]:
            self._due.pop(gone, None)
            if self._latest.pop(gone, None) is not None:
                self.stats.discarded_sets += 1
        if self._holds or self.refresh_s <= 0 or not live:
            return 0
        now = time.monotonic_ns()
        due: list[tuple[int, NodeSession]] = []
        for sid, s in live.items():
            if self._due.get(sid) is None:  # new, or its set was used by a round:
                self._due[sid] = now + self._jitter_ns(0.0, 0.25)  # soon, at random
            at = self._due[sid]
            if at is not None and at <= now and sid not in self._pending:
                due.append((at, s))
        if not due:
            return 0
        due.sort(key=lambda x: x[0])
        # Spread a burst (start-up, or every set used by one round) over ~refresh_s / 4.
        cap = max(16, math.ceil(len(live) * TICK_S / (0.25 * self.refresh_s)))
        batch = [s for _, s in due[:cap]]
        loop = asyncio.get_running_loop()
        # Background sets: each wait has its own timeout; the deadline only bounds a set.
        self._start(batch, loop.time() + 3 * ECHO_TIMEOUT_S, inline=False)
        return len(batch)

    async def run(self, stop: asyncio.Event) -> None:
        """The background prober: :meth:`tick` every :data:`TICK_S` until ``stop``."""
        if self.refresh_s <= 0:
            return
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), TICK_S)
            if not stop.is_set():
                self.tick()
        for task in list(self._batches):
            task.cancel()
        await asyncio.gather(*self._batches, return_exceptions=True)
