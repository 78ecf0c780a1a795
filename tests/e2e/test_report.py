"""``sqlwa report``: one self-contained HTML file, loaded in headless Chromium: no console
errors, every chart rendered as SVG, a screenshot kept as a test artifact.

Console errors are caught without the DevTools protocol: the test loads a copy of the
report with a small collector script first in <head> (console.error / console.warn,
window.onerror, unhandled rejections), which writes what it caught into the DOM that
``--dump-dom`` prints; Chromium's own stderr log (``--enable-logging=stderr``) is also
searched for uncaught errors. A deliberately broken page proves the detection works.
"""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import statistics
import subprocess
import tempfile
from pathlib import Path

import polars as pl
import pytest
from plotly.offline import get_plotlyjs_version

import helpers
from helpers import REPO, sqlwa
from sqlwa.results import store
from trace_truth import tally_block_per_commit, write_bytes_since_commit

ROOT = REPO
ARTIFACTS = Path(os.environ.get("SQLWA_TEST_ARTIFACTS", ROOT / "target" / "test-artifacts"))
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
needs_chromium = pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium is not installed (.ci/run installs it)")

COLLECTOR = """<script>
(function () {
  var caught = [];
  function keep(kind, text) { caught.push(kind + ": " + text); }
  var error = console.error, warn = console.warn;
  console.error = function () { keep("console.error", Array.from(arguments).join(" ")); error.apply(console, arguments); };
  console.warn = function () { keep("console.warn", Array.from(arguments).join(" ")); warn.apply(console, arguments); };
  window.addEventListener("error", function (e) { keep("uncaught", e.message); });
  window.addEventListener("unhandledrejection", function (e) { keep("unhandled rejection", String(e.reason)); });
  window.addEventListener("load", function () {
    setTimeout(function () {
      var out = document.createElement("pre");
      out.id = "sqlwa-caught";
      out.textContent = JSON.stringify(caught);
      document.body.appendChild(out);
    }, 1500);
  });
})();
</script>"""

PLOT_IDS = (
    "plot-fsync-heatmap",
    "plot-flush-heatmap",
    "plot-kib-heatmap",
    "plot-categories",
    "plot-per-commit",
    "plot-timeline",
    "plot-latency",
)


def chromium(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    profile = tempfile.mkdtemp(prefix="sqlwa-chromium-")
    try:
        return subprocess.run(
            [
                CHROMIUM,
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--no-first-run",
                f"--user-data-dir={profile}",
                "--enable-logging=stderr",
                "--v=0",
                *args,
            ],
            capture_output=True,
            text=True,
            timeout=timeout,
        )
    finally:
        shutil.rmtree(profile, ignore_errors=True)


def load(page: Path) -> tuple[str, list[str], str]:
    """(DOM after load, errors the collector caught, Chromium's stderr) for ``page``."""
    html = page.read_text(encoding="utf-8")
    probe = page.with_name(page.stem + "-probe.html")
    probe.write_text(html.replace("<head>", "<head>" + COLLECTOR, 1), encoding="utf-8")
    # a proxy that refuses every connection: the page must not need the network
    proc = chromium("--virtual-time-budget=15000", "--proxy-server=http://127.0.0.1:9", "--dump-dom", probe.as_uri())
    caught = re.search(r'<pre id="sqlwa-caught">(.*?)</pre>', proc.stdout, re.S)
    assert caught, f"the collector did not report; chromium said:\n{proc.stderr[-2000:]}"
    import html as html_module

    return proc.stdout, json.loads(html_module.unescape(caught.group(1))), proc.stderr


def uncaught_in_log(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if "CONSOLE" in line and "Uncaught" in line]


@needs_chromium
def test_error_detection_catches_a_broken_page(tmp_path):
    page = tmp_path / "broken.html"
    page.write_text('<html><head></head><body><script>console.error("bad thing");null.nope;</script></body></html>')
    _, caught, stderr = load(page)
    assert any("bad thing" in c for c in caught) and any(c.startswith("uncaught") for c in caught)
    assert uncaught_in_log(stderr)


def rendered_plots(dom: str) -> dict[str, bool]:
    """plot id → whether plotly drew SVG into it."""
    result = {}
    for plot_id in PLOT_IDS:
        start = dom.find(f'id="{plot_id}"')
        if start < 0:
            continue
        end = min(
            [dom.find(f'id="{other}"', start + 1) for other in PLOT_IDS if dom.find(f'id="{other}"', start + 1) > 0]
            or [len(dom)]
        )
        result[plot_id] = 'class="main-svg"' in dom[start:end]
    return result


@pytest.fixture(scope="module")
def lab_matrix(tmp_path_factory) -> Path:
    return helpers.lab_matrix(tmp_path_factory, "report", "-j", "delete,wal", "--sync", "normal,full", "-n", "30")


@pytest.fixture(scope="module")
def vfs_matrix(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("report-vfs") / "m"
    sqlwa("matrix", "--vfs-only", "-j", "delete,wal", "--sync", "full", "-n", "20", "--out", str(out))
    return out


def written_report(matrix: Path, tmp_path_factory, name: str) -> Path:
    out = tmp_path_factory.mktemp(name) / "report.html"
    sqlwa("report", str(matrix), "-o", str(out))
    return out


@pytest.fixture(scope="module")
def lab_report(lab_matrix, tmp_path_factory) -> Path:
    """The lab matrix's report, written once for the tests that read it."""
    return written_report(lab_matrix, tmp_path_factory, "lab-report")


@pytest.fixture(scope="module")
def vfs_report(vfs_matrix, tmp_path_factory) -> Path:
    """The VFS-only matrix's report, written once for the tests that read it."""
    return written_report(vfs_matrix, tmp_path_factory, "vfs-report")


def test_report_is_self_contained(vfs_matrix, tmp_path):
    out = tmp_path / "report.html"
    proc = sqlwa("report", str(vfs_matrix), "-o", str(out))
    assert "works offline" in proc.stdout
    html = out.read_text()
    # no external script or stylesheet (plotly.js mentions a CDN only as its geo-map default)
    assert not re.search(r"<script[^>]+src=", html) and not re.search(r"<link[^>]+href=", html)
    assert html.count("https://cdn.plot.ly") == 1 and "topojsonURL" in html
    assert "Measured at the VFS level only" in html and "absent here, not zero" in html
    assert "no timeline" in html  # no block level, so no block timeline — said, not faked


@pytest.mark.root
@needs_chromium
def test_lab_report_loads_cleanly_and_every_chart_renders(lab_report):
    out = lab_report
    dom, caught, stderr = load(out)
    assert caught == [] and uncaught_in_log(stderr) == []
    assert rendered_plots(dom) == {plot_id: True for plot_id in PLOT_IDS}
    assert "frame budget 16.67 ms" in dom and "cache flush" in dom
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    shot = ARTIFACTS / "report-lab.png"
    proc = chromium(
        "--virtual-time-budget=15000",
        "--window-size=1300,3400",
        "--hide-scrollbars",
        f"--screenshot={shot}",
        out.as_uri(),
    )
    assert proc.returncode == 0 and shot.stat().st_size > 50_000, proc.stderr[-2000:]


@needs_chromium
def test_vfs_report_loads_cleanly(vfs_report):
    dom, caught, stderr = load(vfs_report)
    assert caught == [] and uncaught_in_log(stderr) == []
    plots = rendered_plots(dom)
    # no block level: no timeline and no cache flushes (said, not drawn as zeros)
    assert plots == {p: True for p in PLOT_IDS if p not in ("plot-timeline", "plot-flush-heatmap")}


def figure_json(page: Path, plot_id: str) -> tuple[list[dict], dict]:
    """The traces and the layout of the figure drawn into ``plot_id``: what the page hands
    to Plotly.newPlot, not what the report code meant to draw."""
    html = page.read_text()
    call = re.search(r'Plotly\.newPlot\(\s*"' + re.escape(plot_id) + r'",\s*', html)
    assert call, f"no figure for {plot_id}"
    decoder = json.JSONDecoder()
    data, end = decoder.raw_decode(html, call.end())
    layout, _ = decoder.raw_decode(html, html.index("{", end))
    return data, layout


def figure_data(page: Path, plot_id: str) -> list[dict]:
    return figure_json(page, plot_id)[0]


def heatmap_cells(page: Path, plot_id: str) -> dict[tuple[str, str], float]:
    """(row label, column label) → value of the heatmap drawn into ``plot_id``."""
    (heatmap,) = [trace for trace in figure_data(page, plot_id) if trace["type"] == "heatmap"]
    return {(y, x): z for y, row in zip(heatmap["y"], heatmap["z"]) for x, z in zip(heatmap["x"], row)}


# Syncs per commit from SQLite's documented commit sequence (docs/reference/
# sqlite-commit-syncs.md): at the VFS level the directory sync is inside the journal's
# first xSync; the syscall level counts it.
VFS_XSYNCS = {"delete/full": 3, "wal/full": 1}
SYSCALL_SYNCS = {"delete/normal": 3, "delete/full": 4, "wal/normal": 0, "wal/full": 1}


def test_vfs_report_heatmap_shows_sqlites_xsyncs(vfs_report):
    cells = heatmap_cells(vfs_report, "plot-fsync-heatmap")
    assert {x: z for (_, x), z in cells.items()} == VFS_XSYNCS


@pytest.mark.root
def test_lab_report_heatmap_shows_the_documented_fsyncs(lab_report):
    cells = heatmap_cells(lab_report, "plot-fsync-heatmap")
    assert {x: z for (_, x), z in cells.items()} == pytest.approx(SYSCALL_SYNCS)


@pytest.mark.root
def test_lab_report_kib_heatmap_equals_the_raw_traces_block_writes(lab_matrix, lab_report):
    # Each run's amortized KiB per commit, tallied from its own trace.txt: write requests
    # issued on the lab device from the first measured commit's txn_begin to the end.
    cells = heatmap_cells(lab_report, "plot-kib-heatmap")
    truth = {}
    for run in sorted((lab_matrix / "runs").iterdir()):
        config = json.loads((run / "summary.json").read_text())["config"]
        measured = pl.read_parquet(run / "commits.parquet").filter(~pl.col("warmup"))
        dev = config["lab"]["dev"].replace(":", ",")
        written = write_bytes_since_commit(run / "trace.txt", dev, measured["index"].min())
        truth[(f"{config['scenario']} · {config['fs']}", f"{config['journal']}/{config['sync']}")] = (
            written / measured.height / 1024
        )
    assert len(truth) == 4 and all(kib > 0 for kib in truth.values())
    assert cells == pytest.approx(truth)


def test_latency_cdf_is_the_runs_commit_latencies(vfs_matrix, vfs_report):
    # Each configuration's curve: from its fastest measured commit to its slowest, through
    # the median at 50 %, by the runs' own commits.parquet (statistics.median, not polars).
    curves = {trace["name"]: trace for trace in figure_data(vfs_report, "plot-latency") if trace["type"] == "scatter"}
    for run in sorted((vfs_matrix / "runs").iterdir()):
        config = json.loads((run / "summary.json").read_text())["config"]
        commits = pl.read_parquet(run / "commits.parquet").filter(~pl.col("warmup"))
        ms = sorted(v / 1e6 for v in commits["latency_ns"].to_list())
        (curve,) = [c for name, c in curves.items() if name.endswith(f"{config['journal']}/{config['sync']}")]
        assert curve["x"][0] == pytest.approx(ms[0]) and curve["x"][-1] == pytest.approx(ms[-1])
        # a step function: half the commits took at most the lower median, the first to reach 50 %
        half = next(x for x, y in zip(curve["x"], curve["y"]) if y >= 0.5)
        assert half == pytest.approx(statistics.median_low(ms))
        assert curve["y"][0] == 0 and curve["y"][-1] == 1 and curve["x"] == sorted(curve["x"])


def test_report_of_nothing_is_a_usage_error(tmp_path):
    proc = sqlwa("report", str(tmp_path), "-o", str(tmp_path / "r.html"), check=False)
    assert proc.returncode == 2 and "neither" in proc.stderr and "Traceback" not in proc.stderr


# ------------------------------------------------------------------ report figures (#16, point 17)

SAMPLE_RUNS = REPO / "traces" / "samples" / "sqlwa-runs"
# The sample matrix's filesystems, each with the factor its copies' category bytes are
# scaled by: btrfs writes many times what ext4 and xfs write, as in a real sweep.
SCALE = {"ext4": 1, "xfs": 2, "btrfs": 20}
# What plotly.js's cartesian bundle registers (its package's README).
CARTESIAN_TRACES = set(
    "bar box contour heatmap histogram histogram2d histogram2dcontour image pie scatter scatterternary violin".split()
)


@pytest.fixture(scope="module")
def sample_matrix(tmp_path_factory) -> Path:
    """A 12-configuration matrix without root: ext4/xfs/btrfs × DELETE/WAL × NORMAL/FULL,
    each cell a copy of the sample lab run of its journal mode, its category bytes scaled
    by its filesystem's factor, in a results store."""
    out = tmp_path_factory.mktemp("sample-matrix") / "m"
    for fs, scale in SCALE.items():
        for journal in ("delete", "wal"):
            for sync in ("normal", "full"):
                run = out / "runs" / f"{fs}-{journal}-{sync}"
                shutil.copytree(SAMPLE_RUNS / f"ext4-{journal}", run)
                summary = json.loads((run / "summary.json").read_text())
                summary["config"].update(fs=fs, sync=sync)
                amortized = summary["bytes_by_category"]["amortized_per_commit"]
                amortized.update({cat: kib * scale for cat, kib in amortized.items()})
                (run / "summary.json").write_text(json.dumps(summary))
                store.save_run_dir(out / store.STORE_FILE, run)
    return out


@pytest.fixture(scope="module")
def sample_matrix_report(sample_matrix, tmp_path_factory) -> Path:
    return written_report(sample_matrix, tmp_path_factory, "sample-matrix-report")


@pytest.fixture(scope="module")
def sample_run_report(tmp_path_factory) -> Path:
    """The report of one sample lab run (with its trace: a timeline without root)."""
    return written_report(SAMPLE_RUNS / "ext4-delete", tmp_path_factory, "sample-run-report")


def page_figures(page: Path) -> dict[str, list[dict]]:
    """plot id → traces, for every figure on the page."""
    ids = re.findall(r'Plotly\.newPlot\(\s*"([^"]+)"', page.read_text())
    return {plot_id: figure_data(page, plot_id) for plot_id in ids}


def test_report_inlines_plotlys_cartesian_bundle(sample_run_report):
    html = sample_run_report.read_text()
    version = get_plotlyjs_version()
    assert f"plotly.js (cartesian - minified) v{version}" in html, "the bundle is stale: run scripts/vendor-plotly-js"
    assert "* plotly.js v" not in html  # not plotly's full bundle as well
    assert sample_run_report.stat().st_size < 2_000_000  # 4.9 MB with the full bundle
    types = {trace["type"] for traces in page_figures(sample_run_report).values() for trace in traces}
    assert "scatter" in types and types <= CARTESIAN_TRACES


@needs_chromium
def test_one_run_report_renders_every_chart(sample_run_report):
    dom, caught, stderr = load(sample_run_report)
    assert caught == [] and uncaught_in_log(stderr) == []
    assert rendered_plots(dom) == dict.fromkeys(
        ("plot-categories", "plot-per-commit", "plot-timeline", "plot-latency"), True
    )


def test_one_configuration_draws_no_one_cell_heatmap(sample_run_report):
    html = sample_run_report.read_text()
    assert not [p for p in page_figures(sample_run_report) if p.endswith("-heatmap")]
    assert "would be a single cell each, so none is drawn" in html


def test_flush_heatmap_shows_each_configurations_flushes_per_commit(sample_matrix, sample_matrix_report):
    # Each cell against its run's raw trace: flushes issued on the lab device inside the
    # measured commits' windows, per commit.
    truth = {}
    for run in sorted((sample_matrix / "runs").iterdir()):
        config = json.loads((run / "summary.json").read_text())["config"]
        measured = pl.read_parquet(run / "commits.parquet").filter(~pl.col("warmup"))["index"].to_list()
        tally = tally_block_per_commit(run / "trace.txt", config["lab"]["dev"].replace(":", ","))
        flushes = sum(tally[i]["flush"] for i in measured) / len(measured)
        truth[(f"{config['scenario']} · {config['fs']}", f"{config['journal']}/{config['sync']}")] = flushes
    assert len(truth) == 12 and all(flushes > 0 for (_, js), flushes in truth.items() if js.startswith("delete"))
    assert heatmap_cells(sample_matrix_report, "plot-flush-heatmap") == pytest.approx(truth)


def test_category_bars_have_a_panel_and_a_scale_per_filesystem(sample_matrix, sample_matrix_report):
    data, layout = figure_json(sample_matrix_report, "plot-categories")
    titles = {a["text"].removeprefix("fs: "): a["x"] for a in layout["annotations"] if a["text"].startswith("fs: ")}
    assert set(titles) == set(SCALE)
    # a trace's "x2" is the layout's "xaxis2"; a subplot's title sits over its x axis
    domains = {
        "x" + name.removeprefix("xaxis"): axis["domain"] for name, axis in layout.items() if name.startswith("xaxis")
    }
    panels = {fs: next(ref for ref, (lo, hi) in domains.items() if lo <= x <= hi) for fs, x in titles.items()}
    assert len(set(panels.values())) == 3
    assert not [name for name, axis in layout.items() if name.startswith("yaxis") and axis.get("matches")]
    for fs, ref in panels.items():  # each panel stacks its own filesystem's amortized KiB per commit
        bars = [t for t in data if t["type"] == "bar" and t.get("xaxis", "x") == ref]
        summaries = [json.loads((run / "summary.json").read_text()) for run in (sample_matrix / "runs").glob(f"{fs}-*")]
        kib = sum(sum(s["bytes_by_category"]["amortized_per_commit"].values()) for s in summaries) / 1024
        assert sum(sum(t["y"]) for t in bars) == pytest.approx(kib)
        assert {x for t in bars for x in t["x"]} == {"delete/normal", "delete/full", "wal/normal", "wal/full"}


def test_latency_cdf_draws_twelve_distinct_labelled_step_curves(sample_matrix_report):
    data, layout = figure_json(sample_matrix_report, "plot-latency")
    curves = [t for t in data if t["type"] == "scatter"]
    assert len(curves) == 12 and all(t.get("line", {}).get("shape") == "hv" for t in curves)
    colourway = layout["template"]["layout"]["colorway"]  # what plotly cycles where a curve sets no colour
    styles = {
        (t.get("line", {}).get("color", colourway[n % len(colourway)]), t.get("line", {}).get("dash", "solid"))
        for n, t in enumerate(curves)
    }
    assert len(styles) == 12, "two configurations share a line style"
    (label,) = [a for a in layout["annotations"] if a["text"] == "frame budget 16.67 ms"]
    low, high = layout["xaxis"]["range"]  # a log axis: its range and annotations are in log10 units
    assert layout["xaxis"]["type"] == "log" and low <= label["x"] <= high
    assert label["x"] == pytest.approx(math.log10(16.67))


def table_heads(page: Path) -> list[str]:
    """The visible text of the every-number table's column heads."""
    table = re.search(r'<table class="sortable" id="every-number"><thead>(.*?)</thead>', page.read_text(), re.S)
    assert table, "no sortable every-number table"
    return [" ".join(re.sub(r"<[^>]+>", " ", th).split()) for th in re.findall(r"<th[^>]*>(.*?)</th>", table[1])]


def test_every_number_table_speaks_the_catalogues_labels_and_units(sample_matrix_report):
    from sqlwa.catalogue import METRICS

    heads = table_heads(sample_matrix_report)
    assert {"fsync calls", "flushes", "block KiB", "p99 ms", "frame misses commits", "block/logical ×"} <= set(heads)
    assert not [h for h in heads if h in METRICS or "_" in h]  # no snake_case names as heads


SORT_PROBE = """<script>
(function () {
  var table = document.getElementById("every-number");
  var head = Array.from(table.tHead.rows[0].cells).find(function (h) { return h.firstChild.textContent === HEAD; });
  for (var i = 0; i < CLICKS; i++) head.click();
  var out = document.createElement("pre");
  out.id = "sqlwa-sorted";
  out.textContent = JSON.stringify(Array.from(table.tBodies[0].rows).map(function (r) { return r.cells[0].textContent; }));
  document.body.appendChild(out);
})();
</script>"""


def rows_after_clicking(page: Path, head: str, clicks: int) -> list[str]:
    """The every-number table's configurations, top to bottom, after ``clicks`` clicks on
    the column head ``head`` in Chromium."""
    probe = page.with_name(f"{page.stem}-sort-{clicks}.html")
    script = SORT_PROBE.replace("HEAD", json.dumps(head)).replace("CLICKS", str(clicks))
    probe.write_text(page.read_text().replace("</body>", script + "</body>"), encoding="utf-8")
    proc = chromium("--virtual-time-budget=5000", "--proxy-server=http://127.0.0.1:9", "--dump-dom", probe.as_uri())
    found = re.search(r'<pre id="sqlwa-sorted">(.*?)</pre>', proc.stdout, re.S)
    assert found, f"the sort probe did not report; chromium said:\n{proc.stderr[-2000:]}"
    import html as html_module

    return json.loads(html_module.unescape(found.group(1)))


@needs_chromium
def test_every_number_table_sorts_by_a_clicked_column(vfs_report):
    by_xsyncs = sorted(VFS_XSYNCS, key=VFS_XSYNCS.get)  # wal/full (1) before delete/full (3)
    ascending = rows_after_clicking(vfs_report, "VFS xSync", 1)
    assert [row.rsplit(" ", 1)[1] for row in ascending] == by_xsyncs
    descending = rows_after_clicking(vfs_report, "VFS xSync", 2)
    assert [row.rsplit(" ", 1)[1] for row in descending] == by_xsyncs[::-1]
