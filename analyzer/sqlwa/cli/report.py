"""``sqlwa report``: one self-contained HTML page for a matrix or a run."""

from __future__ import annotations

from pathlib import Path

import click

from sqlwa.outputs import allow_system_option


@click.command("report")
@click.argument("results", type=click.Path(path_type=Path))
@click.option(
    "-o",
    "--out",
    "out_path",
    type=click.Path(path_type=Path, dir_okay=False),
    default=Path("report.html"),
    show_default=True,
    help="The HTML file to write.",
)
@click.option(
    "-d",
    "--device",
    "device_specs",
    multiple=True,
    metavar="PROFILE",
    help="Also show the commits' latency predicted on this device (a profile file or a shipped profile's name, "
    "see sqlwa device list) beside the measured; repeatable.",
)
@click.option(
    "--use-emulated-timings",
    is_flag=True,
    help="Draw the latencies of runs whose clock is an emulated CPU's (a --vm run under TCG), marked, and add "
    "their base time to predictions; without it they are left out of the timing charts and marked in tables.",
)
@allow_system_option
def report_command(results, out_path, device_specs, use_emulated_timings, allow_system_dir):
    """Write one HTML page with charts and every number for a matrix (or one run).

    \b
    Examples:
      sqlwa report m1 -o report.html
      sqlwa report sqlwa-out/mobibench-insert-wal-full-20260101-120000 -o run.html
      sqlwa report m1 -d pixel-2016 -d moto-z-2016        # with predicted latency

    The page is self-contained (plotly.js inline, no network): heatmaps of fsyncs, cache
    flushes and KiB per commit across the matrix, bytes per commit by category (a panel
    per filesystem), the block timeline of one run with its commit windows,
    commit-latency CDFs with the 16.67 ms frame budget, and a sortable table of every
    figure. Layers that were not measured are shown as absent. With --device, a section
    sets the latency predicted on each device (sqlwa predict) beside the measured.
    """
    from sqlwa import device as devices
    from sqlwa.views import report as reporting

    profiles = [devices.resolve(spec) for spec in device_specs]
    written = reporting.write_report(
        results, out_path, profiles, allow_system=allow_system_dir, use_emulated_timings=use_emulated_timings
    )
    from sqlwa.results import store

    store.say_if_partial(results)
    click.echo(f"wrote {written} ({written.stat().st_size / 1e6:.1f} MB, works offline)")
