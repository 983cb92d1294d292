"""EMULATION sizing, measured: how long a batch takes when the demo's honest nodes compute
at once on this host.

``netcheck demo`` emulates GPU service time, which holds only while the honest nodes'
*real* compute fits inside the emulated time (:mod:`netcheck.lab.demo_sizing`). Timing one
batch alone and scaling it by ``honest / cores`` misjudges a busy host: other work takes
its share of the cores, and Linux's autogroup scheduler gives a terminal session (the demo
and all its processes) one share against each other session, so three honest processes
split that share, not the cores (measured on two cores beside four busy sessions: one
batch alone 1.03 s, the honest nodes' batches 2.65-3.18 s, not the 1.55 s modelled).

So before the nodes start, :class:`Probes` runs ``n`` probe processes (``python
-m netcheck.lab.demo_probe PROFILE BATCHES``), each loading the profile's engine the way a
node does (:func:`netcheck.node.app.engine_worker`) and then, released together, answering
``BATCHES`` batches of fresh prompts (:func:`netcheck.node.warmup.warm_up`, a node's own
warm-up). Each reports its process id, its monotonic start and end (system-wide on Linux,
so the windows show the batches overlapped) and its batch times. The demo sizes its
emulated GPU from the slowest probe's last batch (the first carries one-time costs).

Non-goals: this is not calibration (``netcheck engine calibrate`` measures a real card),
and a load that starts after the measurement is not foreseen (the demo's overrun report
says so).
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

MARK = "NETCHECK-PROBE "
"""Prefix of a probe's report lines on stdout (an engine may print lines of its own)."""

PROBE_BATCHES = 2
"""Batches each probe answers once released: the first carries one-time costs."""


@dataclass(frozen=True)
class ProbeResult:
    """One probe process's report: ``pid``; ``start_s``/``end_s``, ``time.monotonic()``
    when it began and finished its batches (seconds, comparable across processes on
    Linux); ``batch_s``, each batch's wall time in seconds."""

    pid: int
    start_s: float
    end_s: float
    batch_s: tuple[float, ...]


def concurrent_batch_time(results: Sequence[ProbeResult]) -> float:
    """Seconds of the slowest probe's last batch: what one honest node's batch takes while
    the others compute too.

    Raises:
        ValueError: no result, or a result without batches.
    """
    if not results or any(not r.batch_s for r in results):
        raise ValueError("need at least one probe result with at least one batch")
    return max(r.batch_s[-1] for r in results)


def overlapped(results: Sequence[ProbeResult]) -> bool:
    """True when every probe's batches ran inside one common window (the last start is
    before the first end): the processes computed at once."""
    return bool(results) and max(r.start_s for r in results) < min(r.end_s for r in results)


def _read_mark(proc: subprocess.Popen[str], log: Path) -> dict[str, object]:
    assert proc.stdout is not None
    for line in proc.stdout:
        if line.startswith(MARK):
            try:
                report = json.loads(line[len(MARK) :])
            except ValueError:
                report = None
            if not isinstance(report, dict):
                raise RuntimeError(f"demo probe {proc.pid} sent a bad report: {line[:200]!r}")
            return report
    proc.wait()
    tail = log.read_text(errors="replace")[-2000:] if log.exists() else ""
    raise RuntimeError(f"demo probe {proc.pid} exited with status {proc.returncode}:\n{tail}")


class Probes:
    """``n`` probe processes for profile ``profile_arg`` (a name or a ``.toml`` path),
    started on construction so that they load their engines while the caller does other
    work; :meth:`run` releases them together once all have loaded. Their stderr goes to
    ``<logs>/probe-<i>.log``.

    Raises:
        ValueError: ``n`` or ``batches`` < 1.
    """

    def __init__(self, profile_arg: str, n: int, logs: Path, batches: int = PROBE_BATCHES) -> None:
        if n < 1 or batches < 1:
            raise ValueError("need n >= 1 and batches >= 1")
        logs.mkdir(parents=True, exist_ok=True)
        cmd = [sys.executable, "-m", "netcheck.lab.demo_probe", profile_arg, str(batches)]
        self.paths = [logs / f"probe-{i}.log" for i in range(n)]
        self.procs: list[subprocess.Popen[str]] = []
        for path in self.paths:
            with path.open("w") as err:
                self.procs.append(
                    subprocess.Popen(
                        cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err, text=True
                    )
                )

    def run(self, timeout_s: float = 600.0) -> list[ProbeResult]:
        """Wait until every probe has loaded its engine, release them together, return
        their reports; the processes are gone afterwards.

        Raises:
            RuntimeError: a probe exited without reporting (its log's tail is in the
                message), or the probes took longer than ``timeout_s`` in all (killed).
        """
        expired = threading.Event()

        def expire() -> None:
            expired.set()  # before the kill: a read that fails then sees it
            self.stop()

        timer = threading.Timer(timeout_s, expire)
        timer.start()
        try:
            for p, path in zip(self.procs, self.paths, strict=True):
                _read_mark(p, path)  # {"ready": pid}: engine loaded
            for p in self.procs:
                assert p.stdin is not None
                p.stdin.write("go\n")
                p.stdin.flush()
            results = []
            for p, path in zip(self.procs, self.paths, strict=True):
                r = _read_mark(p, path)
                try:
                    batch_s = r["batch_s"]
                    assert isinstance(batch_s, list)
                    results.append(
                        ProbeResult(
                            pid=int(str(r["pid"])),
                            start_s=float(str(r["start_s"])),
                            end_s=float(str(r["end_s"])),
                            batch_s=tuple(float(x) for x in batch_s),
                        )
                    )
                except (KeyError, ValueError, TypeError, AssertionError) as exc:
                    raise RuntimeError(f"demo probe {p.pid} sent a bad report {r}: {exc}") from exc
            return results
        except (RuntimeError, OSError) as exc:  # OSError: a probe gone before "go"
            if not expired.is_set() and isinstance(exc, OSError):
                raise RuntimeError(f"a demo probe exited before it was released: {exc}") from exc
            if not expired.is_set():
                raise
            raise RuntimeError(
                f"demo probes took longer than {timeout_s:.0f} s (loading the engine or "
                f"answering; killed); their logs: {self.paths[0].parent}"
            ) from exc
        finally:
            timer.cancel()
            self.stop()

    def stop(self) -> None:
        """Kill the probes still running and reap them all."""
        for p in self.procs:
            if p.poll() is None:
                p.kill()
            p.wait()


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m netcheck.lab.demo_probe PROFILE [BATCHES]``: load the engine, report
    ready, wait for ``go`` on stdin, answer the batches, report (lines prefixed
    :data:`MARK`)."""
    from netcheck.config import load_profile
    from netcheck.node.app import engine_worker
    from netcheck.node.warmup import warm_up

    args = list(sys.argv[1:] if argv is None else argv)
    profile = load_profile(args[0])
    batches = int(args[1]) if len(args) > 1 else PROBE_BATCHES
    worker = asyncio.run(engine_worker(profile))
    print(MARK + json.dumps({"ready": os.getpid()}), flush=True)
    if sys.stdin.readline().strip() != "go":
        return 1
    start = time.monotonic()
    times = asyncio.run(warm_up(worker, profile, batches))
    end = time.monotonic()
    report = {"pid": os.getpid(), "start_s": start, "end_s": end, "batch_s": list(times)}
    print(MARK + json.dumps(report), flush=True)
    close = getattr(getattr(worker, "engine", None), "close", None)
    if close is not None:
        close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
