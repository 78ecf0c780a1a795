"""Device profiles and predictions as the terminal shows them, and as ``--json`` prints
them (shapes in docs/reference/outputs.md, "Machine-readable output")."""

from __future__ import annotations

from rich.table import Table

from sqlwa.analysis.prediction import REQUEST_KINDS
from sqlwa.device.predict import BASE_TEXT, DevicePrediction
from sqlwa.device.profile import MEASURES, Distribution, Level, Profile, pricing_notes, to_dict
from sqlwa.results.emulated import EMULATED_MARK

SCHEMA_VERSION = 1


def _ms(value: float | None, digits: int = 3) -> str:
    return "—" if value is None else f"{value:.{digits}g}"


def _measured(value: float | None, timings_emulated: bool, form: str, unit: str = "") -> str:
    """A measured figure beside a prediction: marked where it is an emulated CPU's, and
    only the mark where it was kept out."""
    if value is None:
        return f"[yellow]{EMULATED_MARK}[/yellow]" if timings_emulated else "—"
    shown = format(value, form) + unit
    return f"{shown} [yellow]({EMULATED_MARK})[/yellow]" if timings_emulated else shown


def _quantile(dist: Distribution | None, q: float) -> str:
    if dist is None:
        return "—"
    value = dist.quantile(q)
    if value is None and dist.single_figure and dist.mean_ms is not None:
        return f"{dist.mean_ms:.3g} (mean)"
    return _ms(value)


def profile_table(profile: Profile) -> Table:
    """One row per fill level and measure: p50, p90, p99, p99.9 (ms) and samples."""
    table = Table(title=f"{profile.name} ({profile.kind}): {profile.provenance.description}", title_justify="left")
    for column in ("fill %", "measure", "p50 ms", "p90 ms", "p99 ms", "p99.9 ms", "samples"):
        table.add_column(column, justify="left" if column == "measure" else "right")
    for level in profile.levels:
        fill = "—" if level.fill_pct is None else f"{level.fill_pct:g}"
        for name in MEASURES:
            dist = level.measures.get(name)
            if dist is None or (name == "fua_write" and dist is level.measures.get("durable_write")):
                continue
            quantiles = [_quantile(dist, q) for q in (0.5, 0.9, 0.99, 0.999)]
            table.add_row(fill, name, *quantiles, "—" if dist.samples is None else f"{dist.samples:,}")
            fill = ""
        table.add_row("", "queue depth · seq. write", _level_extras(level), "", "", "", "")
        table.add_section()
    return table


def _level_extras(level: Level) -> str:
    depth = "—" if level.queue_depth is None else str(level.queue_depth)
    bandwidth = "—" if level.seq_write_mib_s is None else f"{level.seq_write_mib_s:,.0f} MiB/s"
    return f"{depth} · {bandwidth}"


def profile_lines(profile: Profile) -> list[str]:
    """What a reader must know beside the table: source, device, notes, pricing."""
    lines = [f"source: {profile.provenance.source}"] if profile.provenance.source else []
    if profile.device:
        lines.append("device: " + ", ".join(f"{k} {v}" for k, v in profile.device.items() if v is not None))
    lines += [f"note: {note}" for note in profile.provenance.notes]
    lines += [f"pricing: {note}" for note in pricing_notes(profile.level())]
    return lines


def prediction_table(result: DevicePrediction, budget_ms: float) -> Table:
    """Per configuration: measured beside predicted (p50, p99, frame-budget misses) and
    the share of the predicted latency each part took."""
    fill = "" if result.fill_pct is None else f" at {result.fill_pct:g}% full"
    table = Table(
        title=f"predicted on {result.profile.name} ({result.profile.kind}{fill}) beside measured here",
        title_justify="left",
    )
    table.add_column("configuration")
    table.add_column("commits", justify="right")
    for column in ("p50 ms", "p99 ms", f"> {budget_ms:g} ms"):
        table.add_column(f"{column}\nmeasured", justify="right")
        table.add_column(f"{column}\npredicted", justify="right")
    table.add_column("share of predicted:\nbase · write · flush · FUA · read", justify="right")
    for conf in result.configurations:
        s = conf.summary
        predicted, measured = s.predicted, s.measured
        shares = " · ".join(f"{100 * predicted.shares[k]:.0f}%" for k in ("base", *REQUEST_KINDS[:4]))
        table.add_row(
            conf.label,
            f"{s.commits:,}",
            _measured(measured.p50_ms, s.timings_emulated, ".2f"),
            f"[bold]{predicted.p50_ms:.2f}[/bold]",
            _measured(measured.p99_ms, s.timings_emulated, ".2f"),
            f"[bold]{predicted.p99_ms:.2f}[/bold]",
            _measured(measured.frame_budget_miss_pct, s.timings_emulated, ".1f", "%"),
            f"[bold]{predicted.frame_budget_miss_pct:.1f}%[/bold]",
            shares,
        )
    return table


def prediction_notes(result: DevicePrediction) -> list[str]:
    notes = [f"{s}" for s in result.notes]
    sources = {conf.summary.base_source for conf in result.configurations}
    notes += [f"base time ({source}): {BASE_TEXT[source]}" for source in sorted(sources)]
    for conf in result.configurations:
        notes += [f"{conf.label}: {note}" for note in conf.notes if not note.startswith("base time")]
    notes += [f"skipped {line}" for line in result.skipped]
    return notes


def prediction_document(results: str, predictions: list[DevicePrediction], budget_ms: float, draws: int, seed: int):
    """``sqlwa predict --json``."""
    return {
        "schema_version": SCHEMA_VERSION,
        "results": results,
        "budget_ms": budget_ms,
        "draws": draws,
        "seed": seed,
        "devices": [device_entry(p) for p in predictions],
    }


def device_entry(result: DevicePrediction) -> dict:
    profile = result.profile
    return {
        "device": {
            "name": profile.name,
            "kind": profile.kind,
            "source": profile.provenance.source,
            "path": profile.provenance.path,
            "sync_stated": profile.provenance.sync_stated,
        },
        "fill_pct": result.fill_pct,
        "notes": result.notes,
        "skipped": result.skipped,
        "configurations": [
            {
                "label": conf.label,
                **{key: conf.config[key] for key in conf.config},
                "runs": conf.runs,
                "commits": conf.summary.commits,
                "measured": {
                    "p50_ms": conf.summary.measured.p50_ms,
                    "p99_ms": conf.summary.measured.p99_ms,
                    "frame_budget_miss_pct": conf.summary.measured.frame_budget_miss_pct,
                },
                "predicted": {
                    "p50_ms": conf.summary.predicted.p50_ms,
                    "p90_ms": conf.summary.predicted.p90_ms,
                    "p99_ms": conf.summary.predicted.p99_ms,
                    "frame_budget_miss_pct": conf.summary.predicted.frame_budget_miss_pct,
                },
                "shares": conf.summary.predicted.shares,
                "requests_per_commit": conf.summary.requests_per_commit,
                "base_source": conf.summary.base_source,
                # the measured figures (null where kept out) and the base are an emulated CPU's
                "timings_emulated": conf.summary.timings_emulated,
                "notes": conf.notes,
            }
            for conf in result.configurations
        ],
    }


def profile_document(profile: Profile) -> dict:
    """``sqlwa device show --json``: the profile as its TOML has it."""
    return {**to_dict(profile), "path": profile.provenance.path}
