"""``sqlwa merge``: the shards of one sweep brought into one matrix directory."""

from __future__ import annotations

from pathlib import Path

import click

from sqlwa import outputs


@click.command("merge")
@click.argument("out", type=click.Path(path_type=Path, file_okay=False))
@click.argument("shards", nargs=-1, required=True, type=click.Path(path_type=Path, file_okay=False))
@outputs.allow_system_option
def merge_command(out: Path, shards: tuple[Path, ...], allow_system_dir: bool) -> None:
    """Bring the shards of one sweep (`sqlwa matrix --shard K/N`) into one new matrix directory.

    \b
    Examples:
      sqlwa matrix -j delete,wal --shard 1/2 --out s1      # on one machine
      sqlwa matrix -j delete,wal --shard 2/2 --out s2      # on another
      sqlwa merge m s1 s2                                  # then report, check, compare m

    OUT must be new or empty. Every shard must hold a matrix store of this sqlwa's schema
    version and be part of the same sweep (the same options, --shard aside). A cell found
    in two shards is taken once if both hold the same result (status and every count;
    timings always differ), and refused otherwise. Each run keeps its row as measured:
    host, kernel, sqlwa version, timings and per-commit figures; its directory is copied
    to OUT/runs/. A merge that lacks a shard is a partial matrix (readers say so, `check`
    fails it unless --allow-partial). Each refusal is one line, exit 2; nothing is
    written then.
    """
    from sqlwa.measure import merge
    from sqlwa.results import store

    merged = merge.merge(out, list(shards), allow_system=allow_system_dir)
    click.echo(merge.describe(merged), err=True)
    partial = store.partial_of(out)
    if partial is not None:
        click.echo(
            f"note: {out} is a {partial}: a shard is missing or unfinished (finish it, then merge again)", err=True
        )
