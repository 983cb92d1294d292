"""A database file that the code under test can read but not write, as on an analyst's
read-only mount: :func:`read_only_folder` gives a folder (mode 0555, its files 0444)
and :func:`as_reader` runs a function where those modes hold. Root ignores file modes,
so as root the function runs in a forked child that first gives up the capabilities
that override them (``CAP_DAC_OVERRIDE``, ``CAP_DAC_READ_SEARCH``, ``CAP_FOWNER``): it
stays uid 0, the files' owner, so it still reads everything root owns (the interpreter
under /root included) but writes only where the owner's mode bits allow."""

from __future__ import annotations

import ctypes
import os
import pickle
import shutil
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

_CAP_VERSION_3 = 0x20080522
_MODE_OVERRIDES = (1, 2, 3)  # CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH, CAP_FOWNER


def _drop_mode_overrides() -> None:
    """Remove the capabilities that ignore file modes from this process (Linux capset)."""

    class Header(ctypes.Structure):
        _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]

    class Data(ctypes.Structure):
        _fields_ = [(n, ctypes.c_uint32) for n in ("effective", "permitted", "inheritable")]

    libc = ctypes.CDLL(None, use_errno=True)
    header, data = Header(_CAP_VERSION_3, 0), (Data * 2)()
    if libc.capget(ctypes.byref(header), data) != 0:
        raise OSError(ctypes.get_errno(), "capget")
    mask = ~sum(1 << cap for cap in _MODE_OVERRIDES) & 0xFFFFFFFF
    for word in data[:1]:  # capabilities 0..31
        word.effective &= mask
        word.permitted &= mask
        word.inheritable &= mask
    if libc.capset(ctypes.byref(header), data) != 0:
        raise OSError(ctypes.get_errno(), "capset")


@contextmanager
def read_only_folder(fill: Callable[[Path], None]) -> Iterator[Path]:
    """A fresh folder under the system temp folder (not pytest's, which only its owner
    may enter), filled by ``fill(folder)`` and then made read-only; removed afterwards."""
    folder = Path(tempfile.mkdtemp(prefix="netcheck-ro-"))
    try:
        fill(folder)
        for f in folder.iterdir():
            f.chmod(0o444)
        folder.chmod(0o555)
        yield folder
    finally:
        folder.chmod(0o755)
        shutil.rmtree(folder, ignore_errors=True)


def as_reader(fn: Callable[..., Any], *args: Any) -> Any:
    """``fn(*args)`` run by a user who cannot write :func:`read_only_folder`'s files:
    this process, or as root a forked child without the mode-overriding capabilities
    (module docstring). Returns its result
    (pickled across), or raises ``AssertionError`` with the child's exception text."""
    if os.geteuid() != 0:
        return fn(*args)
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # child
        os.close(read)
        try:
            _drop_mode_overrides()
            out: tuple[bool, Any] = (True, fn(*args))
        except BaseException as exc:  # noqa: BLE001 - sent to the parent
            out = (False, f"{type(exc).__name__}: {exc}")
        with os.fdopen(write, "wb") as pipe:
            pipe.write(pickle.dumps(out))
        os._exit(0)
    os.close(write)
    with os.fdopen(read, "rb") as pipe:
        data = pipe.read()
    os.waitpid(pid, 0)
    ok, value = pickle.loads(data)
    if not ok:
        raise AssertionError(value)
    return value
