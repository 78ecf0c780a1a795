"""``sqlwa predict``: what the measured commits would cost on another device."""

from __future__ import annotations

import shutil
import sys
from collections.abc import Callable
from pathlib import Path

import click

from sqlwa.catalogue import DEFAULT_DRAWS, DEFAULT_FRAME_BUDGET_MS, DEFAULT_SEED


@click.command("predict")
@click.argument("results", type=click.Path(path_type=Path))
@click.option(
    "-d",
    "--device",
    "device_specs",
    multiple=True,
    required=True,
    metavar="PROFILE",
    help="A profile file (sqlwa device probe / import) or a shipped profile's name (sqlwa device list); repeat "
    "to compare devices.",
)
@click.option("--fill", type=click.FloatRange(0, 100), help="Use the profile's level nearest this fill %.")
@click.option(
    "--draws",
    type=click.IntRange(1, 10_000),
    default=DEFAULT_DRAWS,
    show_default=True,
    help="Monte Carlo draws per commit.",
)
@click.option("--seed", type=int, default=DEFAULT_SEED, show_default=True, help="Seed of the draws.")
@click.option(
    "--budget-ms", type=click.FloatRange(0, min_open=True), default=DEFAULT_FRAME_BUDGET_MS, show_default=True,
    help="The frame budget a commit must fit in (16.67 ms: one frame at 60 Hz).",
)  # fmt: skip
@click.option(
    "--base",
    type=click.Choice(["auto", "non-io", "cpu"]),
    default="auto",
    show_default=True,
    help="What a commit costs besides the device: its measured CPU time (cpu: needs runs with cpu_ns), or its "
    "latency minus the recorded device path (non-io); auto takes cpu where the run has it.",
)
@click.option(
    "--use-emulated-timings",
    is_flag=True,
    help="Add the base time of runs whose clock is an emulated CPU's (a --vm run under TCG). Without it such "
    "a run gives its requests only: the prediction is their device time, and its measured latencies are not "
    "shown.",
)
@click.option(
    "--json",
    "as_json",
    is_flag=True,
    help="Print the predictions as JSON instead of the table (docs/guide/predicting-a-phone.md).",
)
def predict_command(
    results: Path, device_specs, fill, draws, seed, budget_ms, base, use_emulated_timings: bool, as_json: bool
):
    """Predict the commit latency of measured runs on another device.

    RESULTS is a lab run (sqlwa run --fs ...) or a matrix. For every measured commit its
    recorded block requests are replayed in their order with their dependencies — a
    request issued after another completed waits for it (ext4: the file's data, then
    the journal, then its commit block), a cache flush or FUA write waits for
    everything issued before it, the syncs of one commit follow each other — overlapping
    at most the profile's queue depth, each taking a time drawn from the profile (seeded
    Monte Carlo). Plus the commit's base time: its measured CPU time where the run has it,
    else its latency minus the recorded device path; a run under TCG (an emulated CPU)
    has no base unless --use-emulated-timings. Per configuration (repeats pooled):
    predicted p50 and p99 beside the measured ones, the commits that miss the frame
    budget, and the share of the predicted latency each request kind took.

    What the model leaves out (docs/guide/predicting-a-phone.md): the device's garbage collection and other
    correlated slowdowns (draws are independent), how full its cache is when it flushes,
    and work the run did not wait for. A published profile with one figure has no spread.

    \b
    Examples:
      sqlwa predict --device pixel-2016 sqlwa-out/mobibench-insert-wal-full-...
      sqlwa predict -d pixel-2016 -d moto-z-2016 m1           # two phones, a whole matrix
      sqlwa predict -d sd.toml --fill 85 m1 --json
    """
    from sqlwa import device as devices
    from sqlwa.device import predict as predicting
    from sqlwa.results import store
    from sqlwa.views import device as view
    from sqlwa.views import json_output
    from sqlwa.views.terminal import wide_console

    profiles = [devices.resolve(spec) for spec in device_specs]
    store.say_if_partial(results)
    base_choice = base.replace("-", "_")
    say = None if as_json else progress_line()
    outcomes = [
        predicting.predict_results(
            results, profile, fill, draws, seed, base_choice, budget_ms, say, use_emulated_timings
        )
        for profile in profiles
    ]
    if say is not None:
        say("")  # the progress line is gone before the tables
    if as_json:
        click.echo(json_output.dumps(view.prediction_document(str(results), outcomes, budget_ms, draws, seed)))
        return
    console = wide_console()
    for outcome in outcomes:
        console.print(view.prediction_table(outcome, budget_ms))
        for note in view.prediction_notes(outcome):
            click.echo(f"note: {note}")


def progress_line() -> Callable[[str], None] | None:
    """Where each predicted run is said: one line on a terminal's stderr, rewritten in
    place ("" clears it); nothing when stderr is a pipe or file, where a line per run of
    a matrix would bury the table in a log."""
    if not sys.stderr.isatty():
        return None

    def say(text: str) -> None:
        width = shutil.get_terminal_size().columns - 1  # a wrapped line would not be rewritten
        sys.stderr.write(f"\r\033[K{text[:width]}")
        sys.stderr.flush()

    return say
