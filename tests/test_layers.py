"""Imports point down the layers of docs/design.md, and no modules import in a circle."""

from __future__ import annotations

import ast
import re
from collections import defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PACKAGE = REPO / "netcheck"


def _layers() -> dict[str, int]:
    """``{group: line number}`` from the numbered list under "## Layers"."""
    text = (REPO / "docs" / "design.md").read_text()
    section = text.split("## Layers", 1)[1].split("\n## ", 1)[0]
    out: dict[str, int] = {}
    for line in section.splitlines():
        m = re.match(r"(\d+)\. (.*)", line)
        if m:
            for name in re.findall(r"`(netcheck[\w.]*)`", m.group(2)):
                out[name] = int(m.group(1))
    return out


def _modules() -> dict[str, Path]:
    mods = {}
    for path in PACKAGE.rglob("*.py"):
        parts = list(path.relative_to(REPO).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        mods[".".join(parts)] = path
    return mods


def _imports(mods: dict[str, Path]) -> dict[str, set[str]]:
    """Every netcheck module each module imports, at any depth of its code (functions,
    ``if TYPE_CHECKING:`` blocks included), resolved to a module of the package."""

    def resolve(name: str) -> str:
        while name not in mods and "." in name:
            name = name.rsplit(".", 1)[0]
        return name

    edges: dict[str, set[str]] = defaultdict(set)
    for mod, path in mods.items():
        package = mod if path.name == "__init__.py" else mod.rsplit(".", 1)[0]
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                edges[mod] |= {resolve(a.name) for a in node.names if a.name.startswith("netcheck")}
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join(anchor + ([node.module] if node.module else []))
                if base == "netcheck" or base.startswith("netcheck."):
                    for alias in node.names:
                        full = f"{base}.{alias.name}"
                        edges[mod].add(full if full in mods else resolve(base))
    for mod in edges:
        edges[mod].discard(mod)
    return edges


def _group(mod: str, layers: dict[str, int]) -> str:
    """The longest layer-list name that is ``mod`` or a package above it."""
    best = ""
    for name in layers:
        inside = name != "netcheck" and mod.startswith(name + ".")  # the face: itself only
        if (mod == name or inside) and len(name) > len(best):
            best = name
    return best


def test_every_module_has_a_layer() -> None:
    """Each module of netcheck/ belongs to a group of the layer list."""
    layers = _layers()
    assert layers, "docs/design.md has no layer list"
    missing = sorted(m for m in _modules() if not _group(m, layers))
    assert missing == []


def test_imports_point_down() -> None:
    """No import goes to the same line's other groups or up the list (no exceptions)."""
    layers = _layers()
    upward = []
    for mod, targets in _imports(_modules()).items():
        src = _group(mod, layers)
        for target in sorted(targets):
            dst = _group(target, layers)
            if src != dst and layers[dst] >= layers[src]:
                upward.append(f"{mod} (layer {layers[src]}) -> {target} (layer {layers[dst]})")
    assert upward == []


def test_no_import_cycles() -> None:
    """No set of modules imports itself in a circle (Tarjan's strongly connected
    components over every import, function-level and TYPE_CHECKING included)."""
    edges = _imports(_modules())
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in edges.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for v in sorted(_modules()):
        if v not in index:
            visit(v)
    assert cycles == []


def test_checker_sees_function_level_and_type_checking_imports(tmp_path: Path) -> None:
    """The import reader counts imports inside functions and ``if TYPE_CHECKING:``."""
    src = (
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from netcheck.coordinator.server import Coordinator\n"
        "def f():\n    from netcheck.lab import demo\n"
    )
    path = tmp_path / "m.py"
    path.write_text(src)
    mods = {
        "netcheck.x": path,
        "netcheck.coordinator.server": path,
        "netcheck.lab": path,
        "netcheck.lab.demo": path,
    }
    assert _imports({"netcheck.x": path, **mods})["netcheck.x"] >= {
        "netcheck.coordinator.server",
        "netcheck.lab.demo",
    }
