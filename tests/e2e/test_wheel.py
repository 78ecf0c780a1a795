"""The wheel as a new user gets it (#36): installed into a fresh virtualenv, made by an
interpreter whose PATH has no cargo, and run from there, away from the checkout: no
PYTHONPATH, no .venv, no Rust. The wheel is the one ./scripts/setup built
(target/wheels/; ./scripts/release copies it to dist/), so CI builds it once.

The truths: git for the commit the wheel says it was built from, the bundled SQLite's own
header (sqlite3.h of the libsqlite3-sys crate in Cargo.lock) for its version, the mount
table of a private mount namespace for the tracefs the demo mounted, the results' block
level for what that bought, and PATH searched by hand for the FUSE daemon the run used.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from helpers import REPO
from sqlwa import _system
from sqlwa.results import store

pytestmark = [pytest.mark.root, pytest.mark.slow]

# The user's PATH: the system's directories, none with cargo or rustc (checked below).
# Where the machine has a system Rust (Debian's rustc-web, which scripts/build-engine
# needs), the user's PATH is one directory of links to the system's programs but those.
SYSTEM_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
USER_PATH = SYSTEM_PATH
RUST_TOOLS = re.compile(r"^(cargo|rustc|rustdoc|rust-gdb|rust-lldb|rustfmt|rust-analyzer|clippy-driver)(-.*)?$")


def path_without_rust(bin_dir: Path) -> str:
    """A PATH of one directory: links to every program of the system's directories (the
    first of each name, as PATH finds it) but Rust's tools."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    for directory in SYSTEM_PATH.split(":"):
        if not os.path.isdir(directory):
            continue
        for name in sorted(os.listdir(directory)):
            link = bin_dir / name
            if RUST_TOOLS.match(name) or link.exists() or link.is_symlink():
                continue
            link.symlink_to(os.path.join(directory, name))
    return str(bin_dir)


def built_wheel() -> Path | None:
    target = Path(os.environ.get("CARGO_TARGET_DIR") or REPO / "target")
    found = sorted((target / "wheels").glob("sqlwa-*.whl"), key=lambda p: p.stat().st_mtime)
    found = found or sorted((REPO / "dist").glob("sqlwa-*.whl"), key=lambda p: p.stat().st_mtime)
    return found[-1] if found else None


@pytest.fixture(scope="module")
def venv(tmp_path_factory) -> Path:
    """A fresh virtualenv with the wheel installed; its dependencies pinned by
    requirements.lock (uv takes them from its cache, as the set-up left it)."""
    wheel = built_wheel()
    if wheel is None:
        pytest.skip("no wheel: ./scripts/setup builds it into target/wheels/")
    global USER_PATH
    home = tmp_path_factory.mktemp("sqlwa-test-wheel-")
    if any(shutil.which(tool, path=SYSTEM_PATH) for tool in ("cargo", "rustc")):
        USER_PATH = path_without_rust(home / "system-bin")
    for tool in ("cargo", "rustc"):
        assert shutil.which(tool, path=USER_PATH) is None, f"{tool} on the user's PATH: the test proves nothing"
    env = user_env(home)
    subprocess.run([sys._base_executable, "-m", "venv", str(home / "venv")], check=True, env=env)
    uv = Path(sys.executable).with_name("uv")
    subprocess.run(
        [str(uv), "pip", "install", "-q", "--python", str(home / "venv/bin/python"), str(wheel)]
        + ["--constraint", str(REPO / "requirements.lock")],
        check=True,
        env=env | {"UV_CACHE_DIR": os.environ.get("UV_CACHE_DIR", str(Path.home() / ".cache/uv"))},
        capture_output=True,
        timeout=600,
    )
    return home / "venv"


def user_env(home: Path) -> dict[str, str]:
    """The environment of a user who has only the wheel: no PYTHONPATH, no virtualenv of
    the checkout's, a PATH without cargo, run from a directory outside the checkout."""
    keep = {
        k: v
        for k, v in os.environ.items()
        if k in ("LANG", "LC_ALL", "TERM", "TMPDIR", "USER", "LOGNAME")
        or re.search(r"PROXY|SSL|CERT|CA_BUNDLE|^PIP_|^UV_", k, re.I)  # how this machine reaches the index
    }
    return keep | {"PATH": USER_PATH, "HOME": str(home), "COLUMNS": "200"}


def in_venv(venv: Path, *argv: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    env = user_env(venv.parent)
    env["PATH"] = f"{venv / 'bin'}:{env['PATH']}"  # as `activate` would
    return subprocess.run(argv, capture_output=True, text=True, env=env, cwd=venv.parent, timeout=timeout)


def bundled_sqlite_version() -> str | None:
    """SQLITE_VERSION of the sqlite3.h that libsqlite3-sys (the version Cargo.lock pins)
    bundles, from cargo's registry."""
    lock = (REPO / "Cargo.lock").read_text()
    version = re.search(r'name = "libsqlite3-sys"\nversion = "([^"]+)"', lock)
    cargo_home = Path(os.environ.get("CARGO_HOME") or Path.home() / ".cargo")
    if version is None:
        return None
    for header in (cargo_home / "registry" / "src").glob(f"*/libsqlite3-sys-{version[1]}/sqlite3/sqlite3.h"):
        found = re.search(r'#define SQLITE_VERSION\s+"([^"]+)"', header.read_text(errors="replace"))
        if found:
            return found[1]
    return None


def test_the_wheel_carries_the_daemon_and_the_preload_library_for_an_old_glibc():
    wheel = built_wheel()
    if wheel is None:
        pytest.skip("no wheel: ./scripts/setup builds it into target/wheels/")
    assert re.fullmatch(r"sqlwa-[\d.]+-cp3\d+-abi3-manylinux_2_(\d+)_x86_64\.whl", wheel.name), wheel.name
    check = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "check-wheel"), str(wheel)], capture_output=True, text=True
    )
    assert check.returncode == 0, check.stdout + check.stderr
    names = zipfile.ZipFile(wheel).namelist()
    assert "sqlwa/_bin/sqlwa-fuse" in names and "sqlwa/_bin/libsqlwa_record_preload.so" in names


def test_version_names_the_commit_and_the_bundled_sqlite(venv):
    proc = in_venv(venv, "sqlwa", "--version")
    assert proc.returncode == 0, proc.stderr
    found = re.fullmatch(r"sqlwa (\S+) \(commit ([0-9a-f]{40}), SQLite (\S+)\)\n", proc.stdout)
    assert found, proc.stdout
    version, commit, sqlite = found.groups()
    assert version == re.search(r'^version = "([^"]+)"', (REPO / "Cargo.toml").read_text(), re.M)[1]
    # a commit of this repository, HEAD or one before it
    git = subprocess.run(["git", "-C", str(REPO), "merge-base", "--is-ancestor", commit, "HEAD"], capture_output=True)
    assert git.returncode == 0, f"{commit} is not HEAD nor an ancestor of it"
    header = bundled_sqlite_version()
    if header is not None:
        assert sqlite == header


def test_the_notebooks_import_the_installed_package(venv):
    proc = in_venv(venv, str(venv / "bin" / "python"), "-c", "import sqlwa, sqlwa._native; print(sqlwa.__file__)")
    assert proc.returncode == 0, proc.stderr
    assert Path(proc.stdout.strip()).is_relative_to(venv), proc.stdout  # not the checkout's analyzer/


def test_demo_mounts_tracefs_and_a_fuse_run_uses_the_wheels_daemon(venv):
    """In a private mount namespace where tracefs (and debugfs, whose tracing/ directory
    would mount it on access) starts unmounted: the demo mounts tracefs itself, says so,
    and measures the block level; then a FUSE run finds sqlwa-fuse only in the wheel."""
    assert shutil.which("sqlwa-fuse", path=f"{venv / 'bin'}:{USER_PATH}") is None
    demo, run = venv.parent / "demo", venv.parent / "run"
    script = f"""
        umount /sys/kernel/debug/tracing 2>/dev/null; umount /sys/kernel/tracing 2>/dev/null
        umount /sys/kernel/debug 2>/dev/null
        if grep -qw tracefs /proc/self/mountinfo; then echo "tracefs still mounted"; exit 90; fi
        sqlwa demo -n 50 --warmup 1 --out {demo} --report {venv.parent}/report.html || exit 91
        grep -w tracefs /proc/self/mountinfo | cut -d' ' -f5 | sed 's/^/MOUNTED /'
        sqlwa run --fs ext4 --fuse passthrough -n 50 --out {run} || exit 92
    """
    host_tracefs = _system.tracefs.tracefs_root()
    proc = in_venv(venv, "unshare", "-m", "--propagation", "private", "sh", "-c", script, timeout=900)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stderr.count("mounted tracefs on /sys/kernel/tracing") == 1, proc.stderr
    assert "MOUNTED /sys/kernel/tracing" in proc.stdout
    # outside the namespace nothing changed: the host's tracefs, if any, is where it was
    assert _system.tracefs.tracefs_root() == host_tracefs

    runs = store.load_results(demo)
    assert runs.height == 8 and set(runs["status"]) == {"ok"}
    # the block level, measured in every cell (WAL with synchronous NORMAL may write nothing
    # within 50 commits); under synchronous FULL the device saw writes and a flush per commit
    assert runs["block_write_kib_per_commit"].null_count() == 0 and runs["flushes_per_commit"].null_count() == 0
    full = runs.filter(runs["sync"] == "full")
    assert full.height == 4 and (full["block_write_kib_per_commit"] > 0).all(), full
    assert (full["flushes_per_commit"] >= 1).all(), full

    summary = json.loads((run / "summary.json").read_text())
    assert summary["fuse"]["daemon"] == "sqlwa-fuse" and summary["fuse"]["granted"] is not None, summary["fuse"]
    assert "block" in summary["levels"], summary["levels"]
