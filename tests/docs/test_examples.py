"""Every shell and Python example of the docs (README, CONTRIBUTING, tests/README and
docs/) runs here, as printed, or says why it cannot and which test covers it instead, in
a comment on the line before its fence:

    <!-- example: needs root; covered by tests/lab/test_run_lab.py -->

What a covering comment names must exist in the repository. Examples run in a fresh
directory holding the repository's samples (`traces/`, `examples/`), with `.venv/bin/`
(and a bare `sqlwa`) being this interpreter's sqlwa, and `./my-app.toml`, the scenario the
docs call "your own", a copy of a built-in one."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from helpers import REPO

PAGES = [
    REPO / "README.md",
    REPO / "CONTRIBUTING.md",
    REPO / "tests" / "README.md",
    *sorted((REPO / "docs").rglob("*.md")),
]
BLOCK = re.compile(r"^(?P<indent> *)```(?P<lang>sh|bash|python)\n(?P<body>.*?)^(?P=indent)```", re.S | re.M)
MARK = re.compile(r"<!-- example: (?P<why>.+?) -->")
WHY = re.compile(r"^(needs .+; covered by|run by) (?P<what>.+)$")
REPO_PATH = re.compile(r"(?:tests|scripts|bench|\.ci)/[\w./-]+")


@dataclass
class Example:
    page: Path
    line: int
    lang: str
    body: str
    mark: str | None  # why it does not run here, and what covers it

    @property
    def name(self) -> str:
        return f"{self.page.relative_to(REPO)}:{self.line}"


def examples() -> list[Example]:
    found = []
    for page in PAGES:
        text = page.read_text()
        for block in BLOCK.finditer(text):
            before = text[: block.start()].rstrip("\n").rsplit("\n", 1)[-1]
            mark = MARK.search(before)
            body = "\n".join(line.removeprefix(block["indent"]) for line in block["body"].splitlines())
            line = text.count("\n", 0, block.start()) + 1
            found.append(Example(page, line, block["lang"], body, mark["why"] if mark else None))
    return found


EXAMPLES = examples()


def test_the_docs_have_examples_of_both_kinds():
    assert sum(e.mark is None for e in EXAMPLES) >= 4 and sum(e.mark is not None for e in EXAMPLES) >= 10


@pytest.mark.parametrize("example", [e for e in EXAMPLES if e.mark], ids=lambda e: e.name)
def test_an_example_that_does_not_run_here_names_what_covers_it(example):
    why = WHY.match(example.mark)
    assert why, f"{example.name}: say 'needs …; covered by PATH' or 'run by PATH': {example.mark}"
    paths = REPO_PATH.findall(why["what"])
    assert paths, f"{example.name}: name the test that covers it: {example.mark}"
    for path in paths:
        assert (REPO / path).exists(), f"{example.name}: {path} does not exist"
    if why[0].startswith("run by"):
        runner = (REPO / paths[0]).read_text()
        assert example.page.name in runner, f"{paths[0]} does not read {example.page.name}"


@pytest.fixture
def workplace(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    """A directory as the docs assume one: the repository's samples, .venv/bin/sqlwa."""
    for sample in ("traces", "examples"):
        (tmp_path / sample).symlink_to(REPO / sample)
    shutil.copy(REPO / "workloads" / "scenarios" / "kv-prefs.toml", tmp_path / "my-app.toml")
    bin_dir = tmp_path / ".venv" / "bin"
    bin_dir.mkdir(parents=True)
    (bin_dir / "sqlwa").write_text(f'#!/bin/sh\nexec "{sys.executable}" -m sqlwa "$@"\n')
    (bin_dir / "sqlwa").chmod(0o755)
    (bin_dir / "python").symlink_to(sys.executable)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "COLUMNS": "100"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO / "analyzer"), os.environ.get("PYTHONPATH")]))
    return tmp_path, env


@pytest.mark.parametrize("example", [e for e in EXAMPLES if not e.mark], ids=lambda e: e.name)
def test_an_example_runs_as_printed(example, workplace):
    cwd, env = workplace
    argv = (
        ["bash", "-euo", "pipefail", "-c", example.body]
        if example.lang != "python"
        else [sys.executable, "-c", example.body]
    )
    proc = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, f"{example.name} failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}"


def test_a_failing_example_fails(workplace):
    """The runner above can fail: a command that exits non-zero halfway through a block."""
    cwd, env = workplace
    proc = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", "sqlwa scenarios\nsqlwa parse no-such-trace\nsqlwa scenarios"],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2 and proc.stdout.count("┏") == 1  # the first listing only
