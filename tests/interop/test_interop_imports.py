"""The interop node is independent code: tests/interop imports nothing from netcheck but
the launcher that starts the coordinator (netcheck.lab.testing)."""

from __future__ import annotations

import ast
from pathlib import Path

HERE = Path(__file__).resolve().parent
#: the one netcheck module the interop tests may use: it starts a real coordinator
LAUNCHER = "netcheck.lab.testing"


def netcheck_imports(path: Path) -> set[str]:
    """Every ``netcheck`` module ``path`` imports anywhere (functions included), and
    ``__import__``/``importlib`` calls, which could hide one."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found |= {
                a.name for a in node.names if a.name.split(".")[0] in {"netcheck", "importlib"}
            }
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                found.add("." * node.level + (node.module or ""))
            elif node.module and node.module.split(".")[0] in {"netcheck", "importlib"}:
                found.add(node.module)
        elif isinstance(node, ast.Call) and getattr(node.func, "id", "") == "__import__":
            found.add("__import__")
    return found


def test_interop_files_found() -> None:
    """The check sees the foreign node and its test."""
    assert {p.name for p in HERE.glob("*.py")} >= {"foreign_node.py", "test_interop.py"}


def test_foreign_node_imports_nothing_from_netcheck() -> None:
    """foreign_node.py is written from docs/protocol.md alone."""
    assert netcheck_imports(HERE / "foreign_node.py") == set()


def test_interop_tests_import_only_the_launcher() -> None:
    """Every other file here imports at most the launcher."""
    for path in sorted(HERE.glob("*.py")):
        assert netcheck_imports(path) <= {LAUNCHER}, path.name


def test_check_catches_a_protocol_import(tmp_path: Path) -> None:
    """The check is not vacuous: each way of importing the protocol package is seen."""
    for line in (
        "import netcheck.protocol.codec",
        "from netcheck.protocol import codec",
        "from netcheck import protocol",
        "def f():\n    from netcheck.node.client import NodeClient",
        "x = __import__('netcheck.protocol')",
    ):
        path = tmp_path / "m.py"
        path.write_text(line + "\n")
        assert netcheck_imports(path) - {LAUNCHER}, line
