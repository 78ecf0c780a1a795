"""Human-readable tables for the terminal (rich)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Column, Table
from rich.text import Text

from sqlwa.analysis.schema import Durability, FrameBudgetMisses, Summary
from sqlwa.catalogue import FRAME_RATES, layers_of, stack_label
from sqlwa.views import replayed

LEVEL_NOTES = {
    "vfs": "VFS (SQLite's own file calls, counted by the shim)",
    "syscall": "syscalls of the workload thread (tracefs)",
    "block": "block requests on the lab device (tracefs)",
}


def fmt_num(value: float) -> str:
    if value == int(value):
        return f"{int(value):,}"
    return f"{value:,.2f}"


def fmt_bytes(value: float) -> str:
    if value >= 1024:
        return f"{value / 1024:,.1f} KiB"
    return f"{value:,.0f} B"


def vfs_rows(summary: Summary) -> list[tuple[str, str, str]]:
    rows = []
    for kind, figures in summary["vfs_by_file"].items():
        if not any(figures.values()):
            continue
        rows.append((f"  {kind}: writes", fmt_num(figures["write_calls"]), fmt_bytes(figures["write_bytes"])))
        rows.append((f"  {kind}: xSync", fmt_num(figures["sync_calls"]), ""))
        if figures["truncate_calls"]:
            rows.append((f"  {kind}: xTruncate", fmt_num(figures["truncate_calls"]), ""))
        if figures["delete_calls"]:
            rows.append((f"  {kind}: xDelete", fmt_num(figures["delete_calls"]), ""))
    return rows


def fs_text(cfg: Mapping[str, Any]) -> str:
    """The lab filesystem, or for a run without one the filesystem its directory was on."""
    if cfg.get("dir_fs"):
        return f"{cfg['fs']} ({cfg['dir_fs']} directory)"
    stack = stack_label({"fs": cfg["fs"], **layers_of(cfg)})
    delay = cfg.get("device_delay_ms")
    return stack if delay is None else f"{stack} on dm-delay {delay} ms"


def summary_title(summary: Summary) -> str:
    cfg = summary["config"]
    return (
        f"{cfg['scenario']} · journal={cfg['journal']} · sync={cfg['sync']} · fs={fs_text(cfg)}"
        f" · {summary['commits']} commits · {sqlite_text(cfg)}"
    )


def sqlite_text(cfg: Mapping[str, Any]) -> str:
    """The SQLite that ran; for a replay, with the one that recorded the log."""
    replay = cfg.get("replay")
    if replay is None:
        return f"SQLite {cfg['sqlite_version']}"
    return f"SQLite {cfg['sqlite_version']} (recorded with {replayed.recorded_sqlite(replay)})"


def replay_lines(replay: dict) -> list[str]:
    """A replayed log's lines under its table: the SQLite note, failures, app functions
    (rich markup: the log's own text escaped)."""
    lines = []
    note = replay.get("sqlite_note")
    if note:
        lines.append(f"[yellow]SQLite: {escape(note)}[/yellow]")
    for text in (replayed.failed_text(replay), replayed.missing_functions_text(replay)):
        if text:
            lines.append(escape(text))
    return lines


def summary_caption(summary: Summary) -> str:
    caption = "per commit: mean over measured commits"
    if "block" in summary["levels"]:
        caption += (
            "; amortized = all block bytes from the first measured commit to the end (writeback included) / commits"
        )
    return caption


def vm_line(vm: dict, kernel: str) -> str:
    """Where a --vm run measured, and whether its times mean anything."""
    line = f"VM lab: kernel {kernel} ({vm['kernel']['source']}), {vm['accelerator'].upper()}"
    if not vm["timings_comparable"]:
        line += (
            " [yellow]: counts and bytes exact; latencies and CPU times are an emulated CPU's, not comparable[/yellow]"
        )
    return line


def summary_table(summary: Summary) -> Table:
    table = Table()
    table.add_column("per commit", style="bold")
    table.add_column("count", justify="right")
    table.add_column("bytes", justify="right", no_wrap=True)  # a narrow table wraps the labels, not the figures
    pc = summary["per_commit"]
    table.add_row("logical payload", "", fmt_bytes(pc["logical_bytes"]))
    table.add_row("VFS writes (all files)", fmt_num(pc["vfs_write_calls"]), fmt_bytes(pc["vfs_write_bytes"]))
    table.add_row("VFS xSync (all files)", fmt_num(pc["vfs_sync_calls"]), "")
    for row in vfs_rows(summary):
        table.add_row(*row)
    if "syscall" in summary["levels"]:
        table.add_section()
        table.add_row("fsync/fdatasync syscalls", fmt_num(pc["fsync_calls"]), "")
        table.add_row("pwrite64 syscalls", fmt_num(pc["pwrite_calls"]), fmt_bytes(pc["pwrite_bytes"]))
    if "block" in summary["levels"]:
        table.add_section()
        table.add_row("block writes", fmt_num(pc["write_requests"]), fmt_bytes(pc["write_bytes"]))
        table.add_row("block cache flushes", fmt_num(pc["flush_requests"]), "")
        table.add_row("block FUA writes", fmt_num(pc["fua_writes"]), "")
        table.add_row("block written, amortized", "", fmt_bytes(pc["amortized_write_bytes"]))
    fuse_rows(table, summary)
    category_rows(table, summary)
    waf_rows(table, summary)
    lat = summary["latency_ms"]
    table.add_section()
    keys = [k for k in ("p50", "p90", "p99", "p99.9", "max") if k in lat]
    table.add_row(f"latency {' / '.join(keys)}", "", " / ".join(f"{lat[k]:.3f}" for k in keys) + " ms")
    cpu_rows(table, summary)
    device_time_rows(table, summary)
    miss = summary.get("frame_budget_misses")
    if miss:
        table.add_row(
            f"commits over {miss['budget_ms']:g} ms (frame budget)", fmt_num(miss["commits"]), f"{miss['share']:.1%}"
        )
        dropped_frames_row(table, miss)
    return table


#: The per-phase columns the terminal shows: figure → (heading, digits).
PHASE_COLUMNS = {
    "fsync_calls_per_commit": ("fsyncs", 2),
    "flushes_per_commit": ("flushes", 2),
    "block_write_kib_per_commit": ("block KiB", 1),
    "vfs_write_kib_per_commit": ("VFS KiB", 1),
}


def phase_table(summary: Mapping[str, Any]) -> Table | None:
    """Per-phase means (warm-up, WAL growth, checkpoint commits, steady state): a run's
    overall mean depends on how long it ran in each; None when only one phase was
    measured (the overall means are then that phase's)."""
    entries = (summary.get("phases") or {}).get("phases", [])
    if sum(1 for e in entries if e["phase"] != "warmup") < 2:
        return None
    shown = [name for name in PHASE_COLUMNS if any(name in e for e in entries)]
    table = Table(title="per commit, by phase (inside commit windows)", title_justify="left")
    table.add_column("phase", style="bold")
    table.add_column("commits", justify="right")
    table.add_column("index", justify="right")
    for name in shown:
        table.add_column(PHASE_COLUMNS[name][0], justify="right")
    for e in entries:
        cells = [f"{e[name]:,.{PHASE_COLUMNS[name][1]}f}" if name in e else "—" for name in shown]
        table.add_row(e["label"], f"{e['commits']:,}", f"{e['first_index']}–{e['last_index']}", *cells)
    return table


def dropped_frames_row(table: Table, miss: FrameBudgetMisses) -> None:
    """Frames the commits drop, per 1,000 commits (runs since sqlwa counts them)."""
    if "dropped_frames" not in miss:
        return
    rates = [rate for rate, ms in FRAME_RATES.items() if ms == miss["budget_ms"]]
    at = f"at {rates[0]} Hz" if rates else f"of {miss['budget_ms']:g} ms"
    table.add_row(
        f"  frames dropped {at} (a commit of L ms: ceil(L / frame) - 1)",
        fmt_num(miss["dropped_frames"]),
        f"{miss['dropped_frames_per_1000_commits']:,.1f} per 1,000 commits",
    )


def device_time_rows(table: Table, summary: Mapping[str, Any]) -> None:
    """btt's split of the requests issued in the commits (queued → dispatched,
    dispatched → completed) and the device's share of the commits' latency."""
    device = summary.get("device_time")
    if not device:
        return

    def quantiles(figures: dict) -> str:
        if figures["p50"] is None:
            return "—"
        return f"{figures['p50']:.3f} / {figures['p99']:.3f} / {figures['max']:.3f}"

    for name, phase in (("Q2D", "q2d_ms"), ("D2C", "d2c_ms")):
        parts = [f"{op} {quantiles(figures[phase])}" for op, figures in device["by_operation"].items()]
        what = "queued → dispatched" if name == "Q2D" else "dispatched → completed"
        shown = " · ".join(parts) + " ms" if parts else "no request issued in the commits"
        table.add_row(f"device {name} ({what}) p50 / p99 / max", "", shown)
    share = device["device_share"]
    if share["of_all_commits"] is not None:
        table.add_row(
            "  device busy (a request in flight) / commit latency",
            "",
            f"{share['of_all_commits']:.0%} overall · per commit p50 {share['p50']:.0%}, max {share['max']:.0%}",
        )


def cpu_rows(table: Table, summary: Summary) -> None:
    """The SQL thread's CPU time per commit beside the latency (runs since it is measured)."""
    cpu = summary.get("cpu_ms")
    if not cpu:
        return
    keys = [k for k in ("p50", "p90", "p99", "max") if k in cpu]
    table.add_row(
        f"CPU of the SQL thread (user + sys) {' / '.join(keys)}", "", " / ".join(f"{cpu[k]:.3f}" for k in keys) + " ms"
    )
    table.add_row(
        "  CPU user / sys, mean",
        "",
        f"{cpu['user_mean']:.3f} / {cpu['sys_mean']:.3f} ms · {cpu['share_of_latency']:.0%} of the latency",
    )


def fuse_rows(table: Table, summary: Summary) -> None:
    """The FUSE daemon's calls per commit, and what the layer changed, in words."""
    layer = summary.get("fuse")
    if not layer:
        return
    table.add_section()
    cpu = layer.get("daemon_cpu")
    if cpu:
        table.add_row(
            f"FUSE daemon ({layer['layer']}): CPU over the run, user / sys",
            "",
            f"{cpu['user_ms']:,.0f} / {cpu['sys_ms']:,.0f} ms · {cpu['per_transaction_ms']:.3f} ms per transaction",
        )
    if "daemon_calls_per_commit" not in layer:  # the syscall level was not captured
        return
    daemon = layer["daemon_calls_per_commit"]
    syncs = daemon["fsync"] + daemon["fdatasync"] + daemon["sync_file_range"]
    table.add_row(
        f"FUSE daemon ({layer['layer']}): fsync / fdatasync",
        f"{fmt_num(daemon['fsync'])} / {fmt_num(daemon['fdatasync'])}",
        "",
    )
    table.add_row("FUSE daemon: pwrite64", fmt_num(daemon["pwrite64"]), fmt_bytes(daemon["pwrite64_bytes"]))
    if not syncs and not daemon["pwrite64"]:
        table.add_row("  (the daemon made no sync or write inside a commit)", "", "")
    for change in layer["changes"]:
        table.add_row(f"  {change}", "", "")


def category_rows(table: Table, summary: Summary) -> None:
    """Block bytes per commit by cause (in-window), and the amortized share unattributed."""
    cats = summary.get("bytes_by_category")
    if not cats:
        return
    table.add_section()
    for name, value in cats["per_commit"].items():
        amortized = cats["amortized_per_commit"][name]
        if value or amortized:
            table.add_row(f"  block bytes: {name}", "", f"{fmt_bytes(value)} · amortized {fmt_bytes(amortized)}")
    table.add_row("  unattributed share (amortized)", "", f"{cats['unattributed_share']:.1%}")


def waf_rows(table: Table, summary: Summary) -> None:
    waf = summary.get("waf") or {}
    parts = [
        (k, waf[k]) for k in ("vfs_over_logical", "block_over_vfs", "block_over_logical") if waf.get(k) is not None
    ]
    if parts:
        table.add_section()
        # which block bytes the block ratios divide: the amortized ones the table reports
        bytes_used = {"amortized": " (amortized block bytes)", "in_window": " (in-window block bytes)"}
        label = "write amplification" + bytes_used.get(waf.get("block_bytes", ""), "")
        table.add_row(label, "", " · ".join(f"{k} {v:.1f}" for k, v in parts))


# Piped to a file or a CI log, tables are drawn this wide (or $COLUMNS wide), as a terminal
# would show them; a sentence outside a table is never broken, so a grep for it finds it.
PIPED_WIDTH = 100
UNBOUNDED_WIDTH = 10_000
LABEL_HEADER = "configuration"  # the first column whose labels a piped table keeps whole


def piped_width() -> int:
    """The width piped output's tables fit: $COLUMNS when it is a number, else 100."""
    columns = os.environ.get("COLUMNS", "")
    return int(columns) if columns.isdigit() and int(columns) > 0 else PIPED_WIDTH


class PipedConsole(Console):
    """A console for a pipe or a file: a table fits its width without a word cut to "…"
    or split, and a configuration's label (the first cell of matrix, compare and predict
    rows: "mobibench-insert ext4 wal/full") is never broken, so a grep for it finds it (:func:`fit_table`); a table whose labels
    and longest words cannot fit is drawn as narrow as they allow, the one case wider
    than the console. Lines of text are not broken either (soft wrap)."""

    def print(self, *objects: Any, **kwargs: Any) -> None:
        width = self.width
        for table in objects:
            if isinstance(table, Table):
                width = max(width, fit_table(self, table))
        saved, self.width = self.width, width
        try:  # print's own width= can only narrow
            super().print(*objects, **kwargs)
        finally:
            self.width = saved


def fit_table(console: Console, table: Table) -> int:
    """Fix each column's width so that ``table`` fits ``console.width`` with every word
    whole: each column gets its longest word, and what room is left goes to the columns
    in proportion to how much wider their content would be. Returns the width the table
    needs (more than the console's only when its longest words alone do not fit).
    rich's own squeezing shrinks the widest columns first, down to a part of a word."""
    unbounded = console.options.update(max_width=UNBOUNDED_WIDTH)  # rich caps a measure at the width
    ranges = [table._measure_column(console, unbounded, column) for column in table.columns]
    paddings = [table._get_padding_width(column._index) for column in table.columns]
    most = [r.maximum for r in ranges]
    least = [high if column.no_wrap else r.minimum for r, high, column in zip(ranges, most, table.columns)]
    if table.columns[0].header == LABEL_HEADER:
        least[0] = max(least[0], whole_labels_width(table.columns[0]) + paddings[0])
    borders = table._extra_width
    if sum(most) + borders <= console.width:
        return console.width  # fits as it is
    spare = max(0, console.width - borders - sum(least))
    slack = [high - low for low, high in zip(least, most)]
    for column, low, room, padding in zip(table.columns, least, slack, paddings):
        column.width = low + (spare * room // sum(slack) if sum(slack) else 0) - padding
    return max(console.width, sum(least) + borders)


def whole_labels_width(column: Column) -> int:
    """The width that keeps each row label of ``column`` on one line: its longest label,
    a comparison's two ("A → B") counted apart."""
    labels = (str(cell.plain if isinstance(cell, Text) else cell) for cell in column._cells)
    return max((len(part) for label in labels for line in label.splitlines() for part in line.split(" → ")), default=0)


def wide_console(stderr: bool = False) -> Console:
    """The terminal's console; where output goes to a pipe or a file, a
    :class:`PipedConsole` of :func:`piped_width` (rich would squeeze everything to 80
    columns, and a table without a width ran to hundreds)."""
    console = Console(stderr=stderr)
    return console if console.is_terminal else PipedConsole(stderr=stderr, width=piped_width(), soft_wrap=True)


def outside_commits_table(summary: Mapping[str, Any]) -> Table | None:
    """Totals of what the run did that is no commit (:mod:`sqlwa.analysis.closing`): the
    transactions that wrote nothing and the close checkpoint; None when it did neither
    (or was analysed before they were reported)."""
    empty, close = summary.get("wrote_nothing") or {}, summary.get("close") or {}
    rows = []
    if empty.get("transactions"):
        rows.append(("transactions that wrote nothing", empty["transactions"], empty))
    if close.get("connections"):
        rows.append(("close checkpoint (connections closed)", close["connections"], close))
    if not rows:
        return None
    table = Table(title="outside the commits (totals, in no per-commit figure)", title_justify="left")
    for heading in ("", "count", "VFS xSync", "VFS written"):
        table.add_column(heading, style="bold" if not heading else None, justify="left" if not heading else "right")
    traced = [level for level in ("syscall", "block") if level in summary["levels"]]
    if "syscall" in traced:
        table.add_column("fsync/fdatasync", justify="right")
    if "block" in traced:
        table.add_column("block writes", justify="right")
        table.add_column("cache flushes", justify="right")
    for label, count, figures in rows:
        cells = [
            label,
            f"{count:,}",
            f"{figures.get('vfs_sync_calls', 0):,}",
            fmt_bytes(figures.get("vfs_write_bytes", 0)),
        ]
        syscalls, block = figures.get("syscalls"), figures.get("block")
        if "syscall" in traced:
            cells.append(f"{syscalls['fsync_calls']:,}" if syscalls else "—")
        if "block" in traced:
            cells.append(f"{block['write_requests']:,} ({fmt_bytes(block['write_bytes'])})" if block else "—")
            cells.append(f"{block['flush_requests']:,}" if block else "—")
        table.add_row(*cells)
    return table


def wrote_nothing_line(summary: Mapping[str, Any]) -> str | None:
    """What the transactions that wrote nothing were, by the first of them."""
    empty = summary.get("wrote_nothing") or {}
    if not empty.get("transactions"):
        return None
    first = (empty.get("first") or [{}])[0]
    where = f"at line {first['line']}: " if first.get("line") else ""
    n = empty["transactions"]
    return (
        f"{n:,} transaction{'s' if n != 1 else ''} changed no database file ({empty['statements']:,} statements, "
        f"the first {where}{first.get('statement', '')}): not commits, so every per-commit figure is of the "
        f"{summary['commits'] + summary.get('warmup_commits', 0):,} that wrote"
    )


def print_summary(summary: Summary, console: Console | None = None) -> None:
    console = console or wide_console()
    console.print(summary_title(summary), style="italic", highlight=False)  # not the table's
    console.print(summary_table(summary))  # title: that would wrap at the table's width
    unmeasured = summary.get("device_not_measured")
    if unmeasured:  # beside the latency and frame misses it qualifies
        console.print(f"[yellow]{unmeasured}[/yellow]", highlight=False)
    shared = shared_host_text(summary["config"].get("host_sharing"))
    if shared:
        console.print(f"[yellow]{shared}[/yellow]", highlight=False)
    console.print(summary_caption(summary), style="dim", highlight=False)
    phases = phase_table(summary)
    if phases is not None:
        console.print(phases)
    outside = outside_commits_table(summary)
    if outside is not None:
        console.print(outside)
    empty = wrote_nothing_line(summary)
    if empty is not None:
        console.print(empty, style="dim", highlight=False)
    levels = ", ".join(LEVEL_NOTES.get(level, level) for level in summary["levels"])
    console.print(f"measured levels: {levels}")
    vm = summary["config"].get("vm")
    if vm:
        console.print(vm_line(vm, summary["config"]["kernel"]), highlight=False)
    for line in replay_lines(summary["config"].get("replay") or {}):
        console.print(line, highlight=False)
    trace = summary.get("trace")
    if trace:
        console.print(f"trace: {trace['events']:,} events, {trace['lost_events']:,} lost")
    for finding in summary.get("findings", []):
        console.print(f"[yellow]finding[/yellow] {finding['check']}: {finding['commits']} commits — {finding['what']}")
    if "block" not in summary["levels"] and not trace:
        console.print(
            "[dim]block and syscall levels were not measured: they need a lab filesystem "
            "(--fs ext4 …), root and tracefs.[/dim]"
        )


def shared_host_text(sharing: Mapping[str, Any] | None) -> str:
    """A line when other sqlwa runs measured on the host during this one; else ''."""
    others = (sharing or {}).get("other_runs") or []
    if not others:
        return ""
    pids = ", ".join(str(pid) for pid in others[:5]) + (" …" if len(others) > 5 else "")
    return (
        f"shared host: {len(others)} other sqlwa run(s) measured on this host meanwhile (pid {pids}): "
        "the latencies are a shared machine's, not this run's alone"
    )


def phases_text(phases: dict[str, int]) -> str:
    """'the schema's, 10 warm-up, 30 measured': what a number of commits was made of."""
    parts = ["the schema's"] if phases.get("schema") else []
    parts += [
        f"{phases[name]} {name.replace('warmup', 'warm-up')}" for name in ("warmup", "measured") if phases.get(name)
    ]
    return ", ".join(parts)


def held_text(first: dict) -> str:
    """What a crash state kept of what SQLite had acknowledged, in the user's terms."""
    acked, held, lost = first["acknowledged_commits"], first["held"], first["lost"]
    of = f"the {acked} acknowledged commit{'s' if acked != 1 else ''} ({phases_text(first['acknowledged'])})"
    if held is None:
        return f"the database could not be read: {of} are all lost"
    if held == 0:
        return f"the database held none of {of}"
    kept = f"the database held {held} of {of}"
    return kept if not lost else f"{kept}, lost the last {lost} ({phases_text(first['lost_of'])})"


def missing_text(first: dict) -> str:
    """The writes of the state's flush interval that had not reached the disk."""
    missing = first.get("writes_missing") or []
    if not missing:
        return ""
    size = sum(w["bytes"] for w in missing)
    shown = "" if len(missing) < 8 else " (the first 8)"
    return f"; {len(missing)} writes{shown} ({fmt_bytes(size)}) since the last flush had not reached the disk"


def durability_verdict(durability: Durability) -> str:
    """One line: did any crash state lose what SQLite had acknowledged, or break the database."""
    lost, states = durability["lost_commits"], durability["states"]
    broken = durability["corrupt_states"] + durability["unmountable_states"]
    acked = durability.get("acknowledged")
    of = f" of the {acked['commits']} acknowledged: {phases_text(acked)}" if acked else ""
    if not lost["states_losing"] and not broken:
        return f"[green]no crash state of {states} lost an acknowledged commit or the database[/green]"
    parts = []
    if lost["states_losing"]:
        parts.append(
            f"{lost['states_losing']} of {states} crash states lost acknowledged commits (up to {lost['max']}{of})"
        )
    if broken:
        parts.append(f"{broken} of {states} left no readable database")
    return "[red]not durable: " + "; ".join(parts) + "[/red]"


def no_checkpoint_text(reach: dict) -> str:
    """What a WAL crash run none of whose commits ran a checkpoint could not show, and
    how long a run would (``durability.wal_checkpoint``)."""
    limit = reach["wal_autocheckpoint"]
    if limit <= 0:
        said = "no commit ran a WAL checkpoint: wal_autocheckpoint is off, so SQLite never runs one on its own"
    else:
        said = (
            f"no commit ran a WAL checkpoint: SQLite runs the first once the WAL holds {limit:,} pages "
            f"(wal_autocheckpoint), and the run's commits left {reach['wal_pages']:,.0f}"
        )
    at_close = " (here only at close)" if reach.get("outside_commits") else ""
    if reach.get("sync") == "normal":
        said += f"; under synchronous=NORMAL SQLite syncs the WAL only at a checkpoint{at_close}"
        said += ", so every commit before it was at risk"
    elif reach.get("sync") == "off":
        said += "; under synchronous=OFF SQLite syncs nothing, so every commit was at risk"
    else:
        said += "; no crash state had a checkpoint's writes in flight"
    if "txns_to_first" in reach:
        said += f"; at {reach['pages_per_commit']:.1f} pages a commit, about -n {reach['txns_to_first']:,} reaches one"
    return said


def print_durability(durability: Durability, console: Console | None = None) -> None:
    """``sqlwa crash``'s verdict: states tried, and what the worst of them lost."""
    console = console or wide_console()
    outcomes = durability["outcomes"]
    lost = durability["lost_commits"]
    table = Table("crash states", "count", title="durability (what a power cut would leave)")
    table.add_row("tried", str(durability["states"]))
    for name, count in outcomes.items():
        table.add_row(f"  {name.replace('_', ' ')}", str(count))
    table.add_row("acknowledged commits lost (max)", str(lost["max"]))
    acked = durability.get("acknowledged")
    if acked:
        table.add_row(f"acknowledged by the end ({phases_text(acked)})", str(acked["commits"]))
    console.print(table)
    rate = durability.get("states_per_minute")
    log = durability["log"]
    console.print(
        f"write log: {log['writes']} writes, {log['flushes']} flushes, {log['fua_writes']} FUA; "
        f"{durability['images_mounted']} images mounted" + (f", {rate:.0f} states/min" if rate else ""),
        style="dim",
        highlight=False,
    )
    console.print(durability_verdict(durability), highlight=False)
    reach = durability.get("wal_checkpoint")
    if reach and not reach["reached"]:
        console.print(no_checkpoint_text(reach), style="yellow", highlight=False)
    for outcome, first in durability["first"].items():
        console.print(
            f"first {outcome.replace('_', ' ')}: {first['kind']} state before log entry {first['before_entry']}: "
            + held_text(first)
            + (f"; {first['detail']}" if first["detail"] else "")
            + missing_text(first),
            highlight=False,
        )
