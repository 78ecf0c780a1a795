"""No file of the repository names a path outside it: a clone has neither the notes that
sat beside the repository where it was written (its ``shared`` folder) nor the directories of
the machine it was written on. The files are the repository's own list (git), so a new
file is checked before it is committed."""

from __future__ import annotations

import re
import subprocess

import pytest

from helpers import REPO

OUTSIDE = re.compile(
    "|".join(
        [
            r"\.\./" + "shared",  # the notes beside the repository
            "/" + r"work/",  # the machine's work tree
            "/" + r"home/[A-Za-z0-9_.-]+/",  # someone's home directory
            "/" + r"Users/[A-Za-z0-9_.-]+/",
            "/" + r"root/",  # root's home
        ]
    )
)


def repository_files() -> list[str]:
    """Tracked files and new ones not ignored, as git lists them."""
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.splitlines()
    return [name for name in listed if (REPO / name).is_file()]


def outside_paths(text: str) -> list[str]:
    return [m[0] for m in OUTSIDE.finditer(text)]


def test_no_file_names_a_path_outside_the_repository():
    files = repository_files()
    assert len(files) > 200 and "README.md" in files
    found = []
    for name in files:
        data = (REPO / name).read_bytes()
        if b"\0" in data[:8192]:
            continue  # binary: a sample trace, a compiled module
        for number, line in enumerate(data.decode("utf-8", "replace").splitlines(), 1):
            found += [f"{name}:{number}: {hit}" for hit in outside_paths(line)]
    assert found == []


@pytest.mark.parametrize(
    "line",
    [
        # put together here, so that this file itself names no path outside the repository
        "Architecture: [DESIGN](" + "../" + "shared/DESIGN.md)",
        "source of truth: ../" + "../" + "shared/reference/sqlite.md",
        "captured on /" + "home/alice/traces/keks",
        "see /" + "work/main/README.md",
        "cache in /" + "root/.cache/sqlwa",
    ],
)
def test_the_check_sees_each_kind_of_outside_path(line):
    assert outside_paths(line)


def test_paths_of_the_repository_and_the_system_pass():
    assert outside_paths("docs/reference/sqlite-commit-syncs.md, /tmp/lab1, ~/.cache/sqlwa, /dev/loop0") == []
