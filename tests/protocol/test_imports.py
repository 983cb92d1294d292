"""netcheck/protocol stays sans-I/O: checked by parsing its imports with ast."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "netcheck" / "protocol"
FORBIDDEN = {"asyncio", "aiohttp", "torch", "vllm", "socket", "websockets", "trio"}
FILES = sorted(PACKAGE.glob("*.py"))


def imported_modules(path: Path) -> set[str]:
    """Top-level module names imported anywhere in ``path`` (also inside functions)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module.split(".")[0])
        elif isinstance(node, ast.Call) and getattr(node.func, "id", "") == "__import__":
            names.add("__import__")
    return names


def test_package_files_found():
    """The check sees every module of the protocol package."""
    assert {p.name for p in FILES} >= {
        "__init__.py",
        "messages.py",
        "codec.py",
        "handshake.py",
        "transport.py",
        "jobs.py",
        "states.py",
    }


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_no_io_or_heavy_imports(path):
    """No protocol module imports asyncio, aiohttp, torch, vllm or sockets."""
    assert not imported_modules(path) & (FORBIDDEN | {"__import__"})


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_only_codec_imports_msgpack(path):
    """msgpack is imported by codec.py alone."""
    assert ("msgpack" in imported_modules(path)) == (path.name == "codec.py")
