"""The package's import graph, read from the source with ``ast``: no cycles, and each
stage imports only the stages below it (the layout docs/architecture.md's tables show).

Every import counts, also one inside a function: a cycle "broken" by a late import is
still a cycle in the design.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE_DIR = Path(__file__).resolve().parents[2] / "analyzer" / "sqlwa"

# Stages from the bottom up; a module may import its own stage and the ones below it.
LAYERS: list[set[str]] = [
    {"sqlwa._native", "sqlwa.errors"},
    {"sqlwa._system", "sqlwa.catalogue", "sqlwa.inputs", "sqlwa.outputs"},
    {"sqlwa.analysis", "sqlwa.capture", "sqlwa.durability", "sqlwa.record"},
    {"sqlwa.lab", "sqlwa.results", "sqlwa.device", "sqlwa.phone"},
    {"sqlwa.measure", "sqlwa.views", "sqlwa.vm"},
    {"sqlwa.api", "sqlwa"},
    {"sqlwa.cli", "sqlwa.__main__"},
]


def module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def package_modules(root: Path) -> dict[str, Path | None]:
    """Every module of the package by name; the compiled ``sqlwa._native`` has no source."""
    return {"sqlwa._native": None, **{module_name(p, root): p for p in sorted(root.rglob("*.py"))}}


def imported_modules(path: Path | None, name: str, modules: dict[str, Path | None]) -> set[str]:
    """The package's modules that ``path`` imports: ``from a import b`` names the module
    ``a.b`` where that is one, else ``a``."""
    if path is None:
        return set()
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join([*anchor, *([base] if base else [])])
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                found.add(sub if sub in modules else base)
    return {m for m in found if m in modules and m != name}


def import_graph(root: Path) -> dict[str, set[str]]:
    modules = package_modules(root)
    return {name: imported_modules(path, name, modules) for name, path in modules.items()}


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle as a path that ends where it starts, or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return path[path.index(nxt) :] + [nxt]
            if nxt not in state and (cycle := visit(nxt)):
                return cycle
        path.pop()
        state[node] = 2
        return None

    for start in sorted(graph):
        if start not in state and (cycle := visit(start)):
            return cycle
    return None


def layer_of(module: str) -> int:
    for rank in range(len(LAYERS) - 1, -1, -1):
        if any(module == stage or module.startswith(stage + ".") for stage in LAYERS[rank] if stage != "sqlwa"):
            return rank
    if module == "sqlwa":
        return next(rank for rank, stages in enumerate(LAYERS) if "sqlwa" in stages)
    raise AssertionError(f"{module} belongs to no stage: add its folder to LAYERS")


def upward_imports(graph: dict[str, set[str]]) -> list[str]:
    return [
        f"{a} imports {b}" for a, targets in sorted(graph.items()) for b in sorted(targets) if layer_of(b) > layer_of(a)
    ]


def test_the_package_has_no_import_cycle():
    assert find_cycle(import_graph(PACKAGE_DIR)) is None


def test_each_stage_imports_only_the_stages_below_it():
    assert upward_imports(import_graph(PACKAGE_DIR)) == []


def test_every_module_belongs_to_a_stage():
    for module in import_graph(PACKAGE_DIR):
        layer_of(module)


def write_package(root: Path, files: dict[str, str]) -> Path:
    pkg = root / "sqlwa"
    for rel, text in files.items():
        (pkg / rel).parent.mkdir(parents=True, exist_ok=True)
        (pkg / rel).write_text(text)
    return pkg


@pytest.mark.parametrize(
    "files",
    [
        # the capture <-> lab cycle this layout removed, with the lab's late import
        {
            "__init__.py": "",
            "lab/__init__.py": "",
            "capture/__init__.py": "",
            "lab/filesystem.py": "def f():\n    from sqlwa.capture.tracing import g\n",
            "capture/tracing.py": "from sqlwa.lab import filesystem\n",
        },
        # a relative import closing a three-module loop
        {"__init__.py": "", "a.py": "from . import b\n", "b.py": "import sqlwa.c\n", "c.py": "from .a import x\n"},
    ],
)
def test_the_check_finds_a_cycle(tmp_path, files):
    cycle = find_cycle(import_graph(write_package(tmp_path, files)))
    assert cycle is not None and cycle[0] == cycle[-1]


def test_the_check_finds_an_upward_import(tmp_path):
    pkg = write_package(
        tmp_path,
        {
            "__init__.py": "",
            "analysis/__init__.py": "",
            "views/__init__.py": "",
            "views/figures.py": "",
            "analysis/windows.py": "from sqlwa.views import figures\n",
        },
    )
    assert upward_imports(import_graph(pkg)) == ["sqlwa.analysis.windows imports sqlwa.views.figures"]
