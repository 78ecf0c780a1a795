"""The Python API (sqlwa.load / sqlwa.parse) against the committed sample runs and traces,
a VFS-only matrix made here, and (as root) a fresh lab run.

Commit drill-down is checked against an independent reading of ``trace.txt``: a regex
over the raw text cuts the window from the txn_begin / txn_end marker lines and tallies
every line inside it by layer, without the Rust parser or Polars.
"""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

import plotly.graph_objects as go
import polars as pl
import pytest

import sqlwa
from helpers import REPO
from helpers import sqlwa as sqlwa_cli
from sqlwa.errors import SqlwaError, TraceParseError, UsageError

ROOT = REPO
SAMPLES = ROOT / "traces" / "samples"
RUNS = SAMPLES / "sqlwa-runs"
DELETE_RUN = RUNS / "ext4-delete"
WAL_RUN = RUNS / "ext4-wal"
KEKS = SAMPLES / "blktrace-keks" / "keks"
NVME = SAMPLES / "blkparse-nvme-dmcrypt" / "nvme0n1.blktrace.txt"

# ------------------------------------------------------------------ independent truth

FTRACE_LINE = re.compile(r"^\s*.+?-\d+\s+(?:\(\s*[\d-]+\)\s+)?\[\d+\]\s+(?:\S{4,5}\s+)?(\d+)\.(\d+):\s+(\w+)")


def text_layer(event: str) -> str:
    if event == "tracing_mark_write":
        return "marker"  # transaction markers and VFS-call markers alike
    if event.startswith("sys_"):
        return "syscall"
    if event.startswith("block_"):
        return "block"
    return "other"


def text_events(trace: Path) -> list[tuple[int, str, str]]:
    """(time ns, layer, line) of every event line of an ftrace text file, file order."""
    rows = []
    for line in trace.read_text().splitlines():
        m = FTRACE_LINE.match(line)
        if m:
            rows.append((int(m[1]) * 10**9 + int(m[2].ljust(9, "0")), text_layer(m[3]), line))
    return rows


def text_window(rows: list[tuple[int, str, str]], index: int) -> tuple[int, int]:
    """The transaction's window from its own marker lines."""
    begin = next(t for t, _, line in rows if re.search(rf"sqlwa txn_begin i={index}\b", line))
    end = next(t for t, _, line in rows if re.search(rf"sqlwa txn_end i={index}\b", line))
    return begin, end


def check_commit_against_text(run: sqlwa.Run, trace: Path, index: int) -> pl.DataFrame:
    rows = text_events(trace)
    begin, end = text_window(rows, index)
    inside = sorted(((t, layer) for t, layer, _ in rows if begin <= t <= end), key=lambda r: r[0])
    events = run.commit(index)
    api_layers = events["layer"].replace({"vfs": "marker"}).to_list()
    assert events["time_ns"].to_list() == [t for t, _ in inside]
    assert Counter(api_layers) == Counter(layer for _, layer in inside)
    assert events["time_ns"].is_sorted()
    assert events["time_ns"].min() == begin and events["time_ns"].max() == end
    return events


# ------------------------------------------------------------------ a run


@pytest.fixture(scope="module")
def delete_run() -> sqlwa.Run:
    return sqlwa.load(DELETE_RUN)


def test_load_run(delete_run):
    run = delete_run
    assert isinstance(run, sqlwa.Run)
    assert run.summary["config"]["journal"] == "delete"
    assert run.levels == ["vfs", "syscall", "block"]
    assert isinstance(run.commits, pl.DataFrame)
    assert run.commits.height == run.summary["commits"] + run.summary["warmup_commits"]
    assert run.events.height > 0 and set(run.events["kind"].cast(pl.String).unique()) >= {"marker", "block"}
    assert run.device == (7, 1)
    assert "ext4-delete" in repr(run)


@pytest.mark.parametrize("index", [0, 2, 17, 31])
def test_commit_holds_every_event_of_its_window_in_order(delete_run, index):
    events = check_commit_against_text(delete_run, DELETE_RUN / "trace.txt", index)
    assert set(events["layer"]) == {"marker", "vfs", "syscall", "block"}
    assert events.filter(pl.col("layer") == "marker")["name"].cast(pl.String).to_list() == ["txn_begin", "txn_end"]
    assert events["since_start_us"].min() == 0  # events of the same microsecond may precede txn_begin


def test_commit_categories_add_up_to_the_commit_table(delete_run):
    assert delete_run.attribution_note is None
    for index in (3, 20):
        events = delete_run.commit(index)
        writes = events.filter(pl.col("category").is_not_null())
        by_cat = dict(writes.group_by("category").agg(pl.col("bytes").sum()).iter_rows())
        row = delete_run.commits.filter(pl.col("index") == index).row(0, named=True)
        for column in (c for c in row if c.startswith("bytes_")):
            assert by_cat.get(column.removeprefix("bytes_"), 0) == row[column], column
        assert writes.height == row["write_requests"]


def test_a_flush_has_no_sector_in_the_drill_down(delete_run):
    """#33 item 11: the kernel prints a completing flush's sector as (u64)-1, and the
    notebook's drill-down showed 18446744073709551615. Truth: the raw trace's FF lines."""
    raw_flushes = [line for line in (DELETE_RUN / "trace.txt").read_text().splitlines() if ": 7,1 FF " in line]
    assert any("18446744073709551615" in line for line in raw_flushes)  # the sentinel is in the trace
    flushes = delete_run.events.filter((pl.col("kind") == "block") & (pl.col("rwbs") == "FF"))
    assert flushes.height == len(raw_flushes) and flushes["sector"].null_count() == flushes.height
    assert delete_run.events["sector"].drop_nulls().max() < 2**32  # a 64 MiB image: no sentinel left
    drilled = delete_run.commit(12).filter(pl.col("layer") == "block")
    in_window = drilled.filter(pl.col("operation") == "flush")
    assert in_window.height and in_window["sector"].is_null().all()
    assert drilled.filter(pl.col("operation") == "write")["sector"].is_not_null().all()


def test_wal_commit_matches_text_and_has_one_fsync():
    run = sqlwa.load(WAL_RUN)
    events = check_commit_against_text(run, WAL_RUN / "trace.txt", 10)
    syncs = events.filter(
        (pl.col("kind") == "syscall_enter") & pl.col("name").cast(pl.String).is_in(["fsync", "fdatasync"])
    )
    assert syncs.height == run.commits.filter(pl.col("index") == 10)["fsync_calls"][0] == 1


def figure_points(fig: go.Figure) -> int:
    return sum(len(trace.x if trace.x is not None else trace.z or []) for trace in fig.data)


def test_run_figures_have_data(delete_run):
    timeline = delete_run.timeline()
    assert isinstance(timeline, go.Figure) and figure_points(timeline) > 0
    assert {"journal", "cache flush"} <= {t.name for t in timeline.data}  # coloured by category, flushes marked
    assert len(timeline.layout.shapes) == 12  # the commit windows
    for fig in (
        delete_run.stacked_categories(),
        delete_run.latency_cdf(),
        delete_run.size_histogram(),
        delete_run.sector_heatmap(),
    ):
        assert isinstance(fig, go.Figure) and figure_points(fig) > 0
    assert len(delete_run.timeline(first=5, count=None).layout.shapes) == 27


def test_requests_and_mix(delete_run):
    reqs = delete_run.requests()
    assert (
        reqs.height
        == delete_run.events.filter(
            (pl.col("kind") == "block") & (pl.col("action") == "D") & (pl.col("dev_minor") == 1)
        ).height
    )
    mix = dict(delete_run.request_mix().select("kind", "requests").iter_rows())
    assert mix["write"] == reqs.filter(pl.col("operation") == "write").height
    assert delete_run.by_process()["requests"].sum() == reqs.height


def test_events_parquet_is_read_instead_of_the_trace(tmp_path, delete_run):
    import shutil

    from sqlwa.results import rundir

    copy = tmp_path / "run"
    shutil.copytree(DELETE_RUN, copy)
    rundir.events(copy).write_parquet(copy / rundir.EVENTS_FILE)  # what a lab run writes beside its trace
    (copy / "trace.txt").unlink()
    run = sqlwa.load(copy)
    assert run.has_trace
    assert run.commit(7).equals(delete_run.commit(7))
    assert figure_points(run.timeline(count=3)) > 0


# ------------------------------------------------------------------ external traces


def blkparse_tally(text: Path) -> Counter:
    """Issued (D) requests of a blkparse text file by RWBS, by regex."""
    line = re.compile(r"^\s*\d+,\d+\s+\d+\s+\d+\s+[\d.]+\s+\d+\s+D\s+(\S+)")
    return Counter(m[1] for m in map(line.match, text.read_text().splitlines()) if m)


def test_parse_external_blkparse_trace():
    trace = sqlwa.parse(NVME)
    assert isinstance(trace, sqlwa.Trace) and trace.device == (259, 0)
    tally = blkparse_tally(NVME)
    mix = dict(trace.request_mix().select("kind", "requests").iter_rows())
    assert mix["write"] == sum(n for rwbs, n in tally.items() if "W" in rwbs)
    assert mix["flush"] == sum(n for rwbs, n in tally.items() if rwbs.startswith("F"))
    assert mix["FUA write"] == sum(n for rwbs, n in tally.items() if "W" in rwbs and "F" in rwbs[1:])
    for fig in (trace.timeline(), trace.size_histogram(), trace.sector_heatmap()):
        assert isinstance(fig, go.Figure) and figure_points(fig) > 0


BLKPARSE_EVENT = re.compile(
    r"^\s*\d+,\d+\s+\d+\s+\d+\s+[\d.]+\s+\d+\s+(?P<action>\S+)\s+(?P<rwbs>\S+)\s+(?:\d+ \+ (?P<sectors>\d+))?"
)


def test_a_trace_of_completions_only_is_counted_at_completion(tmp_path):
    # What blkparse prints for `blktrace -a complete`: its own output of keks, C lines
    # only. Truth: those lines tallied by regex (writes and their sectors x 512, flushes).
    lines = (SAMPLES / "blktrace-keks" / "keks.blkparse-q.txt").read_text().splitlines()
    completions = [(line, m) for line in lines if (m := BLKPARSE_EVENT.match(line)) and m["action"] == "C"]
    writes = [m for _, m in completions if "W" in m["rwbs"]]
    text = tmp_path / "complete.txt"
    text.write_text("".join(line + "\n" for line, _ in completions))
    trace = sqlwa.parse(text)
    assert trace.request_action() == "C" and trace.requests().height == len(completions) == 1206
    mix = trace.request_mix()
    rows = {row["kind"]: row for row in mix.iter_rows(named=True)}
    assert (rows["write"]["requests"], rows["write"]["bytes"]) == (
        len(writes),
        sum(int(m["sectors"] or 0) * 512 for m in writes),
    )
    assert rows["flush"]["requests"] == sum(m["rwbs"].startswith("F") for _, m in completions) > 0
    assert mix["action"].unique().to_list() == ["C"]
    assert trace.timeline().layout.title.text.endswith("(requests at completion, C)")
    assert sqlwa.parse(KEKS).request_mix()["action"].unique().to_list() == ["D"]


def test_parse_blktrace_binary():
    trace = sqlwa.parse(KEKS)
    assert trace.device == (8, 52) and trace.events.height == 2398 == trace.report["events"]
    assert trace.by_process()["requests"].sum() == trace.report["per_action"]["D"]


# ------------------------------------------------------------------ errors


def test_errors_are_sqlwa_errors(tmp_path):
    with pytest.raises(UsageError, match="does not exist"):
        sqlwa.load(tmp_path / "missing")
    with pytest.raises(UsageError, match="not a sqlwa run or matrix"):
        sqlwa.load(tmp_path)
    (tmp_path / "file.txt").write_text("x")
    with pytest.raises(UsageError, match="is a file"):
        sqlwa.load(tmp_path / "file.txt")
    with pytest.raises(UsageError, match="unknown trace format"):
        sqlwa.parse(NVME, format="pcap")
    with pytest.raises(UsageError, match="no commit 999"):
        sqlwa.load(DELETE_RUN).commit(999)
    assert issubclass(UsageError, sqlwa.SqlwaError)


def test_rust_parse_errors_arrive_as_trace_parse_error(tmp_path):
    garbage = tmp_path / "garbage.bin"
    garbage.write_bytes(b"\x00\xffnot a trace\n" * 64)
    with pytest.raises(TraceParseError) as err:
        sqlwa.parse(garbage)
    assert isinstance(err.value, SqlwaError) and isinstance(err.value, sqlwa.SqlwaError)
    assert "unrecognised trace format" in str(err.value)
    with pytest.raises(sqlwa.TraceParseError):
        sqlwa.parse(tmp_path / "no-such-trace")


def test_to_pandas(delete_run):
    pd = pytest.importorskip("pandas")
    frame = delete_run.to_pandas()
    assert isinstance(frame, pd.DataFrame) and len(frame) == delete_run.commits.height
    assert len(sqlwa.parse(NVME).to_pandas()) == 1364
    assert len(sqlwa.load(RUNS).to_pandas()) == 2


def test_to_pandas_without_pandas_says_what_is_missing(delete_run, monkeypatch):
    def missing(self):
        raise ModuleNotFoundError("No module named 'pandas'", name="pandas")

    monkeypatch.setattr(pl.DataFrame, "to_pandas", missing)
    with pytest.raises(UsageError, match="needs pandas"):
        delete_run.to_pandas()


# ------------------------------------------------------------------ a matrix


def test_sample_runs_load_as_a_matrix_without_a_store():
    matrix = sqlwa.load(RUNS)
    assert isinstance(matrix, sqlwa.Matrix)
    assert sorted(matrix.summary["journal"].to_list()) == ["delete", "wal"]
    assert matrix.run(journal="wal").dir.resolve() == WAL_RUN.resolve()
    assert not (DELETE_RUN / "events.parquet").exists()  # reading writes nothing into the run dirs


@pytest.fixture(scope="module")
def vfs_matrix(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("matrix")
    sqlwa_cli(
        "matrix",
        "--vfs-only",
        "-j",
        "delete,wal",
        "--sync",
        "full",
        "-n",
        "6",
        "--warmup",
        "1",
        "--out",
        str(out),
        timeout=300,
    )
    return out


def test_load_matrix(vfs_matrix):
    matrix = sqlwa.load(vfs_matrix)
    assert isinstance(matrix, sqlwa.Matrix) and sqlwa.load(vfs_matrix / "results.sqlite").dir == vfs_matrix
    assert isinstance(matrix.summary, pl.DataFrame) and matrix.summary.height == 2
    assert [type(r) for r in matrix.runs] == [sqlwa.Run, sqlwa.Run]
    wal = matrix.run(journal="wal", sync="full")
    assert wal.summary["config"]["journal"] == "wal" and wal.levels == ["vfs"]
    assert matrix.commits.height == 14
    assert set(matrix.commits["journal"]) == {"delete", "wal"}
    for fig in (matrix.stacked_categories(), matrix.latency_cdf()):
        assert isinstance(fig, go.Figure) and figure_points(fig) > 0
    with pytest.raises(UsageError, match="no run"):
        matrix.run(journal="truncate")
    with pytest.raises(UsageError, match="2 runs"):
        matrix.run(sync="full")
    with pytest.raises(UsageError, match="cannot select runs by colour"):
        matrix.run(colour="blue")


def test_vfs_only_run_says_the_trace_is_absent(vfs_matrix):
    run = sqlwa.load(vfs_matrix).run(journal="delete")
    assert not run.has_trace
    assert isinstance(run.stacked_categories(), go.Figure)  # VFS bytes by file kind
    assert figure_points(run.latency_cdf()) > 0
    for use in (lambda: run.events, lambda: run.commit(1), run.timeline):
        with pytest.raises(UsageError, match="VFS level only"):
            use()
    assert run.attribution_note == "the block level was not measured"


# ------------------------------------------------------------------ a fresh lab run


@pytest.mark.root
def test_fresh_lab_run_commit_matches_its_trace(tmp_path):
    out = tmp_path / "run"
    sqlwa_cli(
        "run",
        "--fs",
        "ext4",
        "-j",
        "truncate",
        "-n",
        "5",
        "--warmup",
        "1",
        "--image-size",
        "64M",
        "--out",
        str(out),
        timeout=300,
    )
    run = sqlwa.load(out)
    for index in range(6):
        check_commit_against_text(run, out / "trace.txt", index)
    assert figure_points(run.timeline()) > 0


# ------------------------------------------------------------------ the guide's example

API_PAGE = ROOT / "docs" / "guide" / "notebooks-and-api.md"


def readme_python_blocks(section: str) -> list[str]:
    """The fenced python blocks of one ``## `` section of the guide's API page."""
    text = API_PAGE.read_text()
    start = text.index(f"\n## {section}\n")
    end = text.find("\n## ", start + 1)
    body = text[start : end if end != -1 else None]
    return re.findall(r"```python\n(.*?)```", body, flags=re.S)


def test_readme_api_example_runs(monkeypatch, capsys):
    blocks = readme_python_blocks("Example")
    assert blocks, "the guide's API page lost its example"
    monkeypatch.chdir(ROOT)  # the example's paths are relative to the repository
    for block in blocks:
        exec(compile(block, str(API_PAGE), "exec"), {"__name__": "readme_example"})
    out = capsys.readouterr().out
    assert "UsageError" in out and "no-such-run does not exist" in out


def test_readme_scan_commits_example_counts_the_measured_commits_only(monkeypatch, capsys):
    """#33 item 11: the README's scan_commits() sum counted the warm-up commits too (32 fsyncs
    for a run whose summary says 30 commits × 1.0). Truth: the run's own summary.json."""
    monkeypatch.chdir(ROOT)
    block = next(b for b in readme_python_blocks("Example") if "scan_commits" in b)
    exec(compile(block, str(API_PAGE), "exec"), {"__name__": "readme_example"})
    last_table_row = [line for line in capsys.readouterr().out.splitlines() if line.startswith("│")][-1]
    fsyncs = int(last_table_row.strip("│ "))  # what the example's last print shows
    summary = sqlwa.load(WAL_RUN).summary
    assert summary["warmup_commits"] > 0  # else the check proves nothing
    assert fsyncs == summary["commits"] * summary["per_commit"]["fsync_calls"]


@pytest.mark.root
def test_fresh_lab_matrix(tmp_path):
    out = tmp_path / "matrix"
    sqlwa_cli(
        "matrix",
        "--fs",
        "ext4",
        "-j",
        "delete,wal",
        "--sync",
        "full",
        "-n",
        "3",
        "--warmup",
        "1",
        "--image-size",
        "64M",
        "--out",
        str(out),
        timeout=600,
    )
    matrix = sqlwa.load(out)
    assert sorted(matrix.summary["journal"].to_list()) == ["delete", "wal"]
    for journal in ("delete", "wal"):
        run = matrix.run(journal=journal)
        assert (run.dir / "events.parquet").is_file() and run.levels == ["vfs", "syscall", "block"]
        for index in range(4):
            check_commit_against_text(run, run.dir / "trace.txt", index)
    assert figure_points(matrix.stacked_categories()) > 0 and figure_points(matrix.latency_cdf()) > 0
