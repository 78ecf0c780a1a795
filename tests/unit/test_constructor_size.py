"""No constructor in the package takes more than eight parameters (an explicit
``__init__``'s, or a dataclass's or NamedTuple's fields): values that travel together
travel as one object of their own, and a class that needs more holds such objects.

The summary.json TypedDicts (``sqlwa.analysis.schema``) are left out: they are not
constructed but describe the file's keys, which stay as readers know them.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parents[2] / "analyzer" / "sqlwa"
LIMIT = 8


def constructor_parameters(node: ast.ClassDef) -> int | None:
    """The parameters of the class's constructor, or None if it defines none itself."""
    init = next((n for n in node.body if isinstance(n, ast.FunctionDef) and n.name == "__init__"), None)
    if init is not None:
        args = init.args
        return len(args.posonlyargs) + len(args.args) - 1 + len(args.kwonlyargs)
    decorators = {ast.unparse(d).split("(")[0] for d in node.decorator_list}
    bases = {ast.unparse(b) for b in node.bases}
    if not (decorators & {"dataclass", "dataclasses.dataclass"} or "NamedTuple" in bases):
        return None
    return sum(1 for statement in node.body if is_field(statement))


def is_field(statement: ast.stmt) -> bool:
    if not isinstance(statement, ast.AnnAssign) or not isinstance(statement.target, ast.Name):
        return False
    if "ClassVar" in ast.unparse(statement.annotation):
        return False
    return statement.value is None or "init=False" not in ast.unparse(statement.value)


def wide_constructors(root: Path) -> list[str]:
    found = []
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if not isinstance(node, ast.ClassDef) or any("TypedDict" in ast.unparse(b) for b in node.bases):
                continue
            count = constructor_parameters(node)
            if count is not None and count > LIMIT:
                found.append(f"{path.relative_to(root)}:{node.lineno} {node.name}: {count}")
    return found


def test_no_constructor_takes_more_than_eight_parameters():
    assert wide_constructors(PACKAGE_DIR) == []


def test_the_scan_counts_fields_and_init_parameters(tmp_path):
    (tmp_path / "wide.py").write_text(
        "from dataclasses import dataclass, field\n"
        "from typing import ClassVar, NamedTuple\n"
        "@dataclass\nclass Fields:\n" + "".join(f"    f{i}: int = 0\n" for i in range(9)) + "    k: ClassVar[int] = 1\n"
        "    derived: int = field(init=False, default=0)\n"
        "class Init:\n    def __init__(self, " + ", ".join(f"a{i}" for i in range(8)) + ", *, b=1): ...\n"
        "class Row(NamedTuple):\n" + "".join(f"    c{i}: int\n" for i in range(8)) + "\n"
    )
    assert wide_constructors(tmp_path) == ["wide.py:4 Fields: 9", "wide.py:16 Init: 9"]
