"""The local spool: an append-only, fsynced, checksummed file of round results that
could not be written to the database (docs/spool.md). No SQL here.

Format: one entry per line, ``<crc32 of the JSON, 8 lowercase hex> <JSON>\\n`` (UTF-8,
JSON with sorted keys). An entry is a JSON object with a ``type``: ``round`` (a
round's records, with a unique ``id``), ``replayed`` (the ``id`` of a round entry
that reached the database) or ``checked`` (the ``id`` of a replayed round entry marked
``checks``, whose after-round checks then ran); a round entry whose id appeared earlier
in the file is ignored. Entries are never rewritten; the file
is removed once every round entry is replayed and every ``checks`` entry checked (or
kept as ``<name>.bad-<unix>`` if it had bad lines).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import threading
import time
import zlib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from netcheck.errors import StorageError

log = logging.getLogger("netcheck.spool")


def encode_line(entry: Mapping[str, Any]) -> bytes:
    """One spool line for ``entry`` (a JSON-able mapping): checksum, space, JSON, newline.

    Raises:
        StorageError: ``entry`` is not JSON-able.
    """
    try:
        body = json.dumps(entry, sort_keys=True, separators=(",", ":")).encode()
    except (TypeError, ValueError) as exc:
        raise StorageError(f"spool entry is not JSON-able: {exc}") from exc
    return b"%08x %s\n" % (zlib.crc32(body), body)


def decode_line(line: bytes) -> dict[str, Any]:
    """The entry of one spool line (without its newline).

    Raises:
        ValueError: the line is torn or corrupt (bad shape, checksum or JSON); the
            message says which.
    """
    head, sep, body = line.partition(b" ")
    if not sep or len(head) != 8:
        raise ValueError("no checksum field")
    try:
        want = int(head, 16)
    except ValueError:
        raise ValueError("checksum is not hex") from None
    if zlib.crc32(body) != want:
        raise ValueError(f"checksum mismatch (torn or corrupt line, {len(body)} bytes)")
    try:
        entry = json.loads(body)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"bad JSON: {exc}") from None
    if not isinstance(entry, dict) or not isinstance(entry.get("type"), str):
        raise ValueError("entry is not an object with a type")
    return entry


@dataclass
class SpoolContents:
    """What a read of the spool found.

    ``pending``: round entries not yet replayed, in file order; ``replayed``: ids of
    replayed entries; ``unchecked``: replayed round entries marked ``checks`` whose
    after-round checks have not been marked run (``checked``), in file order;
    ``checks``: every round entry marked ``checks`` and not ``checked``, replayed or not,
    in file order (the order the rounds ended: their checks run in it); ``bad``:
    ``(line number, reason)`` of lines that could not be read (1-based; a torn last
    line shows up here).
    """

    pending: list[dict[str, Any]] = field(default_factory=list)
    replayed: set[str] = field(default_factory=set)
    unchecked: list[dict[str, Any]] = field(default_factory=list)
    checks: list[dict[str, Any]] = field(default_factory=list)
    bad: list[tuple[int, str]] = field(default_factory=list)


#: Fields of a round entry that the replay reads, and their JSON types.
ROUND_FIELDS: dict[str, tuple[type, ...]] = {
    "round_id": (str,), "outcomes": (list,), "timings": (dict,), "canary_ids": (list,),
    "status": (str, type(None)), "summary": (dict,), "finished_at": (int, float),
    "spooled_at": (int, float), "reason": (str,),
}  # fmt: skip


def round_problem(entry: Mapping[str, Any]) -> str | None:
    """What is wrong with a round entry's fields for the replay (None: nothing): an entry
    with a good checksum but another shape (hand-edited, another version) fails its
    replay with this reason, never a KeyError (:class:`~netcheck.storage.durable.Recorder`)."""
    for name, types in ROUND_FIELDS.items():
        if name not in entry:
            return f"field {name} missing"
        if not isinstance(entry[name], types) or isinstance(entry[name], bool):
            return f"field {name} has type {type(entry[name]).__name__}"
    return None


class Spool:
    """An append-only spool file at ``path`` (created on the first append).

    Thread-safe within one process (a lock around each append); one process owns a
    spool file (the coordinator holds its port, a gateway its own file). Appends and
    the retirement also hold an exclusive ``flock`` on the file, so a second process on
    the same file by mistake (a copied ``spool_file``, an old coordinator still
    stopping while the new one starts) cannot have its entry removed with the file.
    """

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self._lock = threading.Lock()

    def append(self, entry: Mapping[str, Any]) -> None:
        """Append ``entry`` and fsync it before returning (durable on return).

        A file whose last line is torn (no trailing newline) first gets a newline, so
        the fragment stays one bad line and cannot swallow this entry.

        Raises:
            StorageError: the file cannot be written or synced (the entry is not durable).
        """
        data = encode_line(entry)
        with self._lock:
            try:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                with self._flocked(os.O_WRONLY | os.O_CREAT | os.O_APPEND) as (fd, created):
                    size = os.fstat(fd).st_size
                    if size and not self._ends_with_newline(size):
                        data = b"\n" + data
                    view = memoryview(data)
                    while view:
                        view = view[os.write(fd, view) :]
                    os.fsync(fd)
                    if created:
                        self._sync_dir()
            except OSError as exc:
                raise StorageError(f"cannot write the spool {self.path}: {exc}") from exc

    @contextlib.contextmanager
    def _flocked(self, flags: int) -> Iterator[tuple[int, bool]]:
        """The file opened with ``flags`` under an exclusive ``flock``, and whether this
        open created it; reopened if another process removed or replaced the file while
        this one waited for the lock. Raises FileNotFoundError without ``O_CREAT``."""
        while True:
            created = not self.path.exists()
            fd = os.open(self.path, flags, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)
                try:
                    same = os.stat(self.path).st_ino == os.fstat(fd).st_ino
                except FileNotFoundError:
                    same = False
                if same:
                    yield fd, created
                    return
            finally:
                os.close(fd)  # releases the lock

    def _ends_with_newline(self, size: int) -> bool:
        with open(self.path, "rb") as f:
            f.seek(size - 1)
            return f.read(1) == b"\n"

    def _sync_dir(self) -> None:
        fd = os.open(self.path.parent, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def read(self) -> SpoolContents:
        """Every entry of the file (empty if there is none); bad lines are reported in
        :attr:`SpoolContents.bad`, never raised.

        Raises:
            StorageError: the file exists but cannot be read.
        """
        out = SpoolContents()
        try:
            raw = self.path.read_bytes()
        except FileNotFoundError:
            return out
        except OSError as exc:
            raise StorageError(f"cannot read the spool {self.path}: {exc}") from exc
        rounds: list[dict[str, Any]] = []
        checked: set[str] = set()
        seen: set[str] = set()
        lines = raw.split(b"\n")
        for number, line in enumerate(lines, 1):
            if not line:
                continue
            try:
                entry = decode_line(line)
            except ValueError as exc:
                torn = number == len(lines) and not raw.endswith(b"\n")
                out.bad.append((number, f"{'torn last line: ' if torn else ''}{exc}"))
                continue
            if entry["type"] == "replayed":
                out.replayed.add(str(entry.get("id")))
            elif entry["type"] == "checked":
                checked.add(str(entry.get("id")))
            elif entry["type"] == "round" and isinstance(entry.get("id"), str):
                if entry["id"] in seen:  # appended twice (a retried write): one round
                    continue
                seen.add(entry["id"])
                rounds.append(entry)
            else:
                out.bad.append((number, f"unknown entry type {entry['type']!r}"))
        out.pending = [e for e in rounds if e["id"] not in out.replayed]
        out.checks = [e for e in rounds if e.get("checks") is True and e["id"] not in checked]
        out.unchecked = [e for e in out.checks if e["id"] in out.replayed]
        return out

    def mark_replayed(self, entry_id: str) -> None:
        """Record that the round entry ``entry_id`` reached the database (durably)."""
        self.append({"type": "replayed", "id": entry_id, "at": time.time()})

    def mark_checked(self, entry_id: str) -> None:
        """Record that the after-round checks of the replayed round entry ``entry_id``
        ran (durably)."""
        self.append({"type": "checked", "id": entry_id, "at": time.time()})

    def retire_if_done(self) -> tuple[bool, SpoolContents]:
        """Remove the file if no round entry is pending or unchecked (under the append lock,
        so an entry appended meanwhile is never lost). A file with bad lines is kept as
        ``<name>.bad-<unix time>`` for the operator instead of being removed.

        Returns (whether the file was retired, what it held).
        """
        with self._lock, contextlib.ExitStack() as held:
            try:
                held.enter_context(self._flocked(os.O_RDONLY))
            except FileNotFoundError:
                return False, SpoolContents()
            except OSError as exc:
                raise StorageError(f"cannot lock the spool {self.path}: {exc}") from exc
            contents = self.read()
            if contents.pending or contents.unchecked or not self.path.exists():
                return False, contents
            try:
                if contents.bad:
                    kept = self.path.with_name(f"{self.path.name}.bad-{int(time.time())}")
                    os.replace(self.path, kept)
                    log.error(
                        "spool %s had %d unreadable line(s) %s; kept as %s",
                        self.path, len(contents.bad), contents.bad, kept,
                    )  # fmt: skip
                else:
                    self.path.unlink()
                self._sync_dir()
            except OSError as exc:
                raise StorageError(f"cannot retire the spool {self.path}: {exc}") from exc
            return True, contents
