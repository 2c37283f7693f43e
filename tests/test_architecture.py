"""The package layout's rules (docs/architecture.md "Layers"), checked over every import in the tree.

Every ``import`` and ``from … import`` counts, at module level or inside a function, under
``TYPE_CHECKING`` or not: a lazy import does not hide an edge.

- Imports point down the layers of :data:`LAYERS` (same package, or a strictly lower layer).
- Methods never import the engine, a run, a door or a surface.
- The read side (spec, store, live, compare, figures) imports no torch, directly or through
  anything it imports; checked on the import graph and by importing it in a fresh interpreter.
- No import cycle between modules.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from collections.abc import Iterator
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# Bottom (0) to top: a package may import packages of a strictly lower layer, and its own modules.
LAYERS: dict[str, int] = {
    "errors": 0, "events_base": 0,
    "events": 1, "spec": 1,
    "runtime": 2, "store": 2, "methods": 2,
    "live": 3, "models": 3,
    "compare": 4, "data": 4,
    "figures": 5, "evaluation": 5,
    "engine": 6,
    "run": 7,
    "api": 8,
    "sweep": 9,
    "cli": 10, "notebook": 10, "teach": 10,
    "widgets": 11, "__main__": 11, "app": 11,
}
READ_SIDE = ("spec", "store", "live", "compare", "figures")
SURFACES = ("cli", "notebook", "teach", "widgets", "__main__", "app")
# ``import toolkit`` re-exports ``load_model`` lazily (the one upward edge, for the public path).
ALLOWED = {("toolkit", "toolkit.models.load")}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


@cache
def modules() -> dict[str, Path]:
    """Every module of ``toolkit`` and ``app`` by dotted name."""
    return {module_name(p): p for folder in ("toolkit", "app") for p in sorted((ROOT / folder).rglob("*.py"))}


def imports(path: Path) -> Iterator[str]:
    """Every name ``path`` imports, absolute; ``from a import b`` yields ``a.b`` where that is a module, else ``a``."""
    known = modules()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            subs = [f"{node.module}.{a.name}" for a in node.names if f"{node.module}.{a.name}" in known]
            yield from subs
            if len(subs) < len(node.names):
                yield node.module


@cache
def graph() -> dict[str, frozenset[str]]:
    """Module → the project modules and third-party top-level packages it imports."""
    known = modules()
    edges = {}
    for name, path in known.items():
        targets = set()
        for target in imports(path):
            targets.add(target if target in known else target.split(".")[0])
        targets.discard(name)
        edges[name] = frozenset(targets)
    return edges


def package(module: str) -> str:
    """``toolkit.engine.block.driver`` → ``engine``; ``toolkit.api`` → ``api``; ``app.run_tab`` → ``app``."""
    parts = module.split(".")
    if parts[0] == "app":
        return "app"
    return parts[1] if len(parts) > 1 else "toolkit"


def project_edges() -> Iterator[tuple[str, str]]:
    for source, targets in graph().items():
        for target in targets:
            if target in modules():
                yield source, target


def test_every_package_has_a_layer_and_a_docstring() -> None:
    packages = {package(m) for m in modules()} - {"toolkit"}
    assert packages <= set(LAYERS), f"packages without a layer in LAYERS: {sorted(packages - set(LAYERS))}"
    for folder in sorted(p.parent for p in (ROOT / "toolkit").rglob("__init__.py")):
        tree = ast.parse((folder / "__init__.py").read_text(encoding="utf-8"))
        doc = ast.get_docstring(tree) or ""
        assert len(doc.split()) >= 12, f"{folder.relative_to(ROOT)}/__init__.py: say what the package owns and imports"


def test_imports_point_down_the_layers() -> None:
    upward = sorted(f"{a} → {b}" for a, b in project_edges()
                    if (pa := package(a)) != (pb := package(b)) and (a, b) not in ALLOWED
                    and (pa == "toolkit" or pb == "toolkit" or LAYERS[pb] >= LAYERS[pa]))
    assert not upward, "imports that do not point down the layers:\n" + "\n".join(upward)


def test_methods_never_import_the_engine_a_run_or_a_surface() -> None:
    banned = {"engine", "run", "api", "sweep", "models", "data", "evaluation", *SURFACES}
    bad = sorted(f"{a} → {b}" for a, b in project_edges() if package(a) == "methods" and package(b) in banned)
    assert not bad, "\n".join(bad)


def reachable(start: str) -> set[str]:
    seen, todo = {start}, [start]
    while todo:
        for target in graph().get(todo.pop(), ()):
            if target not in seen:
                seen.add(target)
                todo.append(target)
    return seen


@pytest.mark.parametrize("side", READ_SIDE)
def test_the_read_side_never_reaches_torch(side: str) -> None:
    offenders = {m: sorted(t for t in reachable(m) if t in {"torch", "transformers"})
                 for m in modules() if package(m) == side}
    assert not {m: t for m, t in offenders.items() if t}, offenders


def test_the_read_side_imports_without_torch() -> None:
    names = sorted(m for m in modules() if package(m) in READ_SIDE)
    code = (f"import sys\nfor n in {names!r}: __import__(n)\n"
            "print(sorted(k for k in ('torch', 'transformers') if k in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout + out.stderr


def test_no_import_cycles() -> None:
    """Tarjan's strongly connected components over the module graph: every one is a single module."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    cycles: list[list[str]] = []
    edges = {m: [t for t in graph()[m] if t in modules()] for m in modules()}

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for target in edges[node]:
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for module in edges:
        if module not in index:
            visit(module)
    assert not cycles, f"import cycles: {cycles}"


def test_the_public_paths_keep_working() -> None:
    code = ("import toolkit, toolkit.api, toolkit.widgets, toolkit.methods\n"
            "from toolkit.models import load_model\n"
            "from toolkit.api import RunConfig, CancelToken, prune_model, run, list_methods, list_runs, open_run\n"
            "from toolkit.widgets import Dashboard, MaskComparison, compare_masks, sweep_plot\n"
            "from toolkit.methods import METHODS, get_method\n"
            "assert toolkit.load_model is load_model and 'wanda' in METHODS\n"
            "print('ok')")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert out.stdout.strip() == "ok", out.stderr


def test_nothing_edits_the_import_path() -> None:
    needle = "sys" + ".path"  # spelled apart so this file does not match itself
    folders = ("toolkit", "app", "tests", "benchmarks", "notebooks")
    sources = [p for folder in folders for p in (ROOT / folder).rglob("*") if p.suffix in {".py", ".ipynb"}]
    editing = [str(p.relative_to(ROOT)) for p in sources if needle in p.read_text(encoding="utf-8")]
    assert not editing, f"files that edit the import path (the project is installed: pip install -e .): {editing}"
