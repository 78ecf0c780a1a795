"""Human-readable tables for the terminal (rich)."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

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


def vfs_rows(summary: dict) -> list[tuple[str, str, str]]:
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


def summary_table(summary: dict) -> Table:
    cfg = summary["config"]
    title = (
        f"{cfg['scenario']} · journal={cfg['journal']} · sync={cfg['sync']} · fs={cfg['fs']}"
        f" · {summary['commits']} commits · SQLite {cfg['sqlite_version']}"
    )
    table = Table(title=title, title_justify="left", caption="per commit: mean over measured commits; amortized = all block bytes from the first measured commit to the end (writeback included) / commits")
    table.add_column("per commit", style="bold")
    table.add_column("count", justify="right")
    table.add_column("bytes", justify="right")
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
    lat = summary["latency_ms"]
    table.add_section()
    table.add_row("latency p50 / p90 / p99 / max", "", " / ".join(f"{lat[k]:.3f}" for k in ("p50", "p90", "p99", "max")) + " ms")
    return table


def print_summary(summary: dict, console: Console | None = None) -> None:
    console = console or Console()
    console.print(summary_table(summary))
    levels = ", ".join(LEVEL_NOTES.get(level, level) for level in summary["levels"])
    console.print(f"measured levels: {levels}")
    trace = summary.get("trace")
    if trace:
        console.print(f"trace: {trace['events']:,} events, {trace['lost_events']:,} lost")
    if "block" not in summary["levels"] and not trace:
        console.print(
            "[dim]block and syscall levels were not measured: they need a lab filesystem "
            "(--fs ext4 …), root and tracefs.[/dim]"
        )
