"""sqlwa's mobibench-* scenarios against MobiBench itself, built from its source.

MobiBench's shell benchmark (ESOS-Lab/Mobibench f56ea5e, shell/mobibench.c) is compiled
here against the SQLite amalgamation sqlwa's engine bundles with the -D flags of
MobiBench's own shell/Makefile (auto_vacuum FULL among them) and of the engine's build
(HAVE_FDATASYNC): the same SQLite built the same way, so only the workload differs. It runs with its defaults (journal TRUNCATE, synchronous FULL) on a fresh
lab ext4, traced by a capture of the loop device to which the test adds mobibench's
fsync and ftruncate calls (filtered by its command name). sqlwa runs the scenario with
the same settings on another fresh ext4. Both raw traces are tallied alike by
tests/trace_truth.py (regular expressions, no sqlwa code, no markers): a transaction
ends where SQLite truncates the journal to 0 bytes. Per transaction, MobiBench and the
scenario must make the same fsyncs, block write requests, bytes and flushes.

Needs root, tracefs, gcc, MobiBench's source and the amalgamation: SQLWA_MOBIBENCH_SRC
names a checkout of github.com/ESOS-Lab/Mobibench whose shell/mobibench.c is commit
f56ea5e's (checked by its hash); the amalgamation is libsqlite3-sys's in cargo's registry.
Skipped with the reason otherwise.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections import Counter
from pathlib import Path

import pytest

from sqlwa import _system
from sqlwa.capture import tracing
from sqlwa.lab import filesystem
from sqlwa.lab.stack import StackSpec
from sqlwa.measure import engine, runner
from sqlwa.measure.request import Output
from trace_truth import tally_per_transaction

pytestmark = pytest.mark.root

REPO = Path(__file__).resolve().parents[2]
MOBIBENCH_C_SHA256 = "e8acc59c1261143e6abd7dfaed03c6c247dc70f0aa8fb845643f9bb406c2e63d"  # f56ea5e
ROWS = 1010  # the update and delete scenarios' tables: what `-n 1010` makes MobiBench fill
MOBIBENCH_SYSCALLS = ("fsync", "fdatasync", "ftruncate")


def mobibench_source() -> Path:
    """The checkout's shell/ directory, or skip saying what is missing."""
    checkout = os.environ.get("SQLWA_MOBIBENCH_SRC")
    if not checkout:
        pytest.skip("needs MobiBench's source: SQLWA_MOBIBENCH_SRC=<checkout of ESOS-Lab/Mobibench at f56ea5e>")
    shell = Path(checkout) / "shell"
    source = shell / "mobibench.c"
    if not source.is_file():
        pytest.fail(f"SQLWA_MOBIBENCH_SRC={checkout} has no shell/mobibench.c")
    digest = subprocess.run(["sha256sum", str(source)], capture_output=True, text=True, check=True).stdout
    assert digest.split()[0] == MOBIBENCH_C_SHA256, f"{source} is not f56ea5e's shell/mobibench.c"
    return shell


def amalgamation() -> Path:
    """libsqlite3-sys's bundled sqlite3.c: the SQLite of sqlwa's engine (Cargo.lock's version)."""
    lock = (REPO / "Cargo.lock").read_text()
    version = re.search(r'name = "libsqlite3-sys"\nversion = "([^"]+)"', lock)[1]
    registry = Path(os.environ.get("CARGO_HOME", Path.home() / ".cargo")) / "registry" / "src"
    found = sorted(registry.glob(f"*/libsqlite3-sys-{version}/sqlite3/sqlite3.c"))
    if not found:
        pytest.skip(f"needs libsqlite3-sys {version}'s sources in {registry} (cargo fetch)")
    return found[0]


@pytest.fixture(scope="module")
def mobibench(tmp_path_factory) -> Path:
    """mobibench compiled with its Makefile's -D flags against the engine's SQLite."""
    if shutil.which("gcc") is None:
        pytest.skip("needs gcc to build MobiBench")
    shell, sqlite_c = mobibench_source(), amalgamation()
    build = tmp_path_factory.mktemp("mobibench")
    # its own copy of sqlite3.h is 3.7.5's: build beside the amalgamation's header instead
    for source in (shell / "mobibench.c", sqlite_c, sqlite_c.with_name("sqlite3.h")):
        shutil.copy(source, build)
    makefile = [line.split("#")[0] for line in (shell / "Makefile").read_text().splitlines()]
    flags = re.findall(r"-D\S+", "\n".join(makefile))
    assert "-DSQLITE_DEFAULT_AUTOVACUUM=1" in flags, flags
    # and the engine's own SQLite build flags: HAVE_FDATASYNC (.cargo/config.toml), which
    # MobiBench's Makefile lacks, so its own build syncs with fsync(); with it both sync
    # alike and only the workload differs. -O0: the compiler's effort changes no I/O.
    engine_flags = re.search(r'LIBSQLITE3_FLAGS = "([^"]*)"', (REPO / ".cargo" / "config.toml").read_text())[1]
    cmd = ["gcc", "-O0", "-w", "-o", "mobibench", "mobibench.c", "sqlite3.c", *flags, *engine_flags.split()]
    cmd += ["-lpthread", "-ldl", "-lm"]
    subprocess.run(cmd, cwd=build, check=True, capture_output=True, timeout=1800)
    return build / "mobibench"


def trace_mobibench(binary: Path, out: Path, *args: str) -> tuple[Path, str]:
    """Run ``mobibench -q ARGS`` on a fresh ext4 inside a capture; (trace, "major,minor")."""
    with filesystem.LabFilesystem("ext4", filesystem.LabOptions(image_size="1G")) as fs:
        cap = tracing.TraceCapture(out, dev=fs.dev)
        with cap:
            # the capture traces syscalls by thread id; mobibench's SQL thread is not
            # known before it runs, so its calls are taken by command name instead
            for call in MOBIBENCH_SYSCALLS:
                event = cap.instance_dir / "events" / "syscalls" / f"sys_enter_{call}"
                (event / "filter").write_text('comm == "mobibench"')
                (event / "enable").write_text("1")
            path = f"{fs.mountpoint}/mobibench"
            subprocess.run([str(binary), "-q", "-p", path, *args], cwd=out, check=True, capture_output=True)
            _system.mounts.syncfs(fs.mountpoint)
        return cap.trace_path, "{},{}".format(*fs.dev)


def trace_scenario(scenario: str, txns: int, out: Path) -> tuple[Path, str]:
    settings = engine.RunSettings(journal="truncate", sync="full", length=engine.Length(txns=txns, warmup=0))
    outcome = runner.execute(
        runner.RunRequest(
            scenario=scenario, settings=settings, output=Output(out_dir=out), stack=StackSpec.from_flat(fs="ext4")
        )
    )
    return out / "trace.txt", outcome.summary["config"]["lab"]["dev"].replace(":", ",")


def per_window(windows: list[Counter]) -> dict[str, float]:
    return {k: sum(w[k] for w in windows) / len(windows) for k in ("fsync", "writes", "bytes", "flush")}


def assert_same_cost(ours: list[Counter], theirs: list[Counter]) -> None:
    """The same fsyncs, and write requests, bytes and flushes within 5% per transaction
    (where the two runs' jbd2 commits happen to fall differs a little)."""
    mine, mobibench = per_window(ours), per_window(theirs)
    assert mine["fsync"] == pytest.approx(mobibench["fsync"], abs=0.02), (mine, mobibench)
    for key in ("writes", "bytes", "flush"):
        assert mine[key] == pytest.approx(mobibench[key], rel=0.05), (key, mine, mobibench)


# Transactions in a TRUNCATE-mode trace: MobiBench's table creation, its fill (update,
# delete: one per row), the measured ones, and for delete the three DROP TABLEs after;
# sqlwa's schema-and-setup transaction, then the measured ones. An update that finds
# every row already holding UPDATE_STR changes no page (SQLite skips an identical
# overwrite), writes no journal and so ends no window: its window merges with the next.
# How many do depends on the random ids (glibc's rand() there, SplitMix64 here), so the
# costs compared are per window: per transaction that wrote.
@pytest.mark.parametrize(
    ("scenario", "mode", "txns", "fill", "after"),
    [
        ("mobibench-insert", 0, 200, 0, 0),
        ("mobibench-update", 1, ROWS, ROWS, 0),
        ("mobibench-delete", 2, ROWS, ROWS, 3),
    ],
    ids=["insert", "update", "delete"],
)
def test_scenario_costs_what_mobibench_costs(mobibench, tmp_path, scenario, mode, txns, fill, after):
    (tmp_path / "mobibench").mkdir()
    trace, dev = trace_mobibench(mobibench, tmp_path / "mobibench", "-d", str(mode), "-n", str(txns))
    theirs = tally_per_transaction(trace, dev)[1 + fill :]
    theirs = theirs[: len(theirs) - after]
    trace, dev = trace_scenario(scenario, txns, tmp_path / "sqlwa")
    ours = tally_per_transaction(trace, dev)[1:]
    # every transaction ends a window, except updates that change nothing (about 9%)
    least = int(0.8 * txns) if scenario == "mobibench-update" else txns
    for windows in (ours, theirs):
        assert least <= len(windows) <= txns, len(windows)
    assert_same_cost(ours, theirs)
