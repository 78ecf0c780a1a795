"""Runs whose timings are an emulated CPU's: a ``--vm`` run under TCG (qemu without KVM).

Such a run's counts and bytes are exact — the guest's kernel issued every syscall and
block request the trace shows — but its latencies and CPU times are those of a CPU
emulated instruction by instruction, tens of times slower than the host's and in no
fixed ratio to a real device's. The guest's facts record it (``config.vm``:
``accelerator`` and ``timings_comparable``, :class:`sqlwa.vm.machine.VmFacts`).

Every reader of timings asks here: a prediction leaves such a run's base time out, a
timing rule is not checked, a timing chart leaves the run out, and every place that
shows its timings marks them — unless the user asks for them (``--use-emulated-timings``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import polars as pl

from sqlwa.catalogue import config_key

#: What a reader of an emulated timing must know, in one phrase.
EMULATED_TEXT = "emulated CPU (TCG): latencies and CPU times are not a device's, not comparable"
#: The mark beside an emulated timing in tables.
EMULATED_MARK = "emulated"
#: The option that lets emulated timings through where they are otherwise kept out.
USE_FLAG = "--use-emulated-timings"


def timings_emulated(config: Mapping[str, Any]) -> bool:
    """A run's config (summary.json's ``config``) says its timings are an emulated CPU's."""
    vm = config.get("vm")
    return isinstance(vm, dict) and vm.get("timings_comparable") is False


def run_emulated(row: dict) -> bool:
    """A runs-frame row (:func:`sqlwa.results.store.load_results`) is such a run."""
    text = row.get("config_json")
    if not text:
        return False
    try:
        config = json.loads(text)
    except ValueError:
        return False
    return isinstance(config, dict) and timings_emulated(config)


def emulated_configs(runs: pl.DataFrame) -> set[tuple]:
    """The configuration keys (:func:`sqlwa.catalogue.config_key`) with at least one
    successful run whose timings are emulated."""
    if runs.height == 0 or "config_json" not in runs.columns:
        return set()
    ok = runs.filter(pl.col("status") == "ok")
    return {config_key(row) for row in ok.iter_rows(named=True) if run_emulated(row)}


def emulated_run_dirs(runs: pl.DataFrame) -> set[str]:
    """The run directories of the successful runs whose timings are emulated."""
    if runs.height == 0 or "config_json" not in runs.columns:
        return set()
    ok = runs.filter(pl.col("status") == "ok")
    return {str(row["run_dir"]) for row in ok.iter_rows(named=True) if run_emulated(row)}
