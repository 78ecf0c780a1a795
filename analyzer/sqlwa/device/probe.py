"""``sqlwa device probe DIR``: measure the storage under DIR with fio into a profile.

Everything it writes is in a fresh directory ``DIR/sqlwa-probe-<pid>-<token>/`` (fio's
data file and, with ``--fill``, the filler files), removed afterwards — also after an
error, Ctrl-C or SIGTERM. Its owner holds an flock on it while it lives, so after a
SIGKILL ``sqlwa lab cleanup --workdir DIR`` removes it (and nothing of a live probe).
"""

from __future__ import annotations

import datetime
import os
import platform
import shutil
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from sqlwa import _system
from sqlwa.device import fio
from sqlwa.device.profile import Level, Profile, Provenance
from sqlwa.errors import ToolError, UsageError, interruption
from sqlwa.lab.fill import fill_filesystem
from sqlwa.lab.scratch import PROBE_PREFIX, make_owned_dir

JOB_FILE = "sqlwa-probe.fio"
DEFAULT_SECONDS = 5.0
DEFAULT_SIZE_MIB = 64
MAX_FILL_PCT = 99.0
# Room the probe leaves free beyond its data file, so the filesystem never runs full.
MARGIN_BYTES = 64 << 20

Progress = Callable[[str], None]


@dataclass(frozen=True)
class ProbeOptions:
    directory: Path
    fills: tuple[float, ...] = ()
    seconds: float = DEFAULT_SECONDS
    size_mib: int = DEFAULT_SIZE_MIB
    name: str | None = None


def check_options(options: ProbeOptions) -> str:
    """fio's path, once everything asked for is possible here; before anything is made."""
    found = _system.tools.find_tool("fio")
    if found is None:
        raise UsageError("fio is not installed: sqlwa device probe measures with it", "apt-get install fio")
    where = options.directory
    if not where.is_dir():
        raise UsageError(f"{where} is not an existing directory", "give a directory on the storage to measure")
    interface = _system.mounts.kernel_interface_at(where)
    if interface is not None:
        raise UsageError(f"{where} is on {interface}, a kernel interface, not storage", "give a directory on a disk")
    if not os.access(where, os.W_OK | os.X_OK):
        raise UsageError(f"{where} is not writable", "give a directory this user may write in")
    bad = [pct for pct in options.fills if not 0 <= pct <= MAX_FILL_PCT]
    if bad:
        raise UsageError(f"--fill {bad[0]:g} is not between 0 and {MAX_FILL_PCT:g}", "e.g. --fill 50 --fill 85")
    if not 0.5 <= options.seconds <= 600:
        raise UsageError(f"--seconds {options.seconds:g} is not between 0.5 and 600", "e.g. --seconds 5")
    free, _total = _system.mounts.free_space(str(where))
    if free < (options.size_mib << 20) + MARGIN_BYTES:
        raise UsageError(
            f"{where} has {free >> 20} MiB free; the probe needs its {options.size_mib} MiB data file and "
            f"{MARGIN_BYTES >> 20} MiB to spare",
            "give a smaller --size or a directory with more room",
        )
    return found


@contextmanager
def probe_dir(parent: Path) -> Iterator[Path]:
    """A fresh directory for fio's data and the filler files, removed afterwards however
    the probe ends (SIGTERM and Ctrl-C unwind through here)."""
    guard = _system.signals.SignalGuard()
    guard.install()
    with guard.critical():  # made and locked as one step
        path, ownership = make_owned_dir(PROBE_PREFIX, parent)
    try:
        yield path
    finally:
        guard.tearing_down = True  # a second Ctrl-C must not cut the removal short
        shutil.rmtree(path, ignore_errors=True)
        _system.ownership.release_ownership(ownership)
        guard.restore()
        pending = guard.take_pending()
        if pending is not None:
            raise interruption(pending)


def run_fio(fio_path: str, work: Path, args: list[str], what: str) -> dict:
    """fio on the job file in ``work``, its JSON read; a failing fio is one error with
    fio's own reason."""
    argv = [fio_path, "--output-format=json", *args, JOB_FILE]
    try:
        done = _system.tools.run_tool(argv, what, cwd=work, die_with_caller=True)
    except ToolError as exc:
        reason = " ".join(line.strip() for line in exc.stderr.splitlines() if line.strip()) or str(exc)
        raise UsageError(
            f"{what} failed in {work.parent}: {reason}",
            "the filesystem must take O_DIRECT writes (tmpfs before Linux 6.6 does not); see `sqlwa device jobfile`",
        ) from None
    return fio.read_json(done.stdout, what)


def measure_level(fio_path: str, work: Path, options: ProbeOptions, fua: bool | None, progress: Progress) -> Level:
    """Run every job once; the level's fill is what df says after them."""
    jobs: dict[str, dict] = {}
    for number, job in enumerate(fio.MEASURED_JOBS, start=1):
        progress(f"  job {number}/{len(fio.MEASURED_JOBS)} {job.name} ({options.seconds:g} s): {job.what}")
        data = run_fio(fio_path, work, [f"--section={job.name}"], f"fio job {job.name}")
        jobs.update(fio.jobs_by_name(data, f"fio job {job.name}"))
    return fio.level_from_jobs(jobs, fua, round(100 * _system.mounts.used_fraction(str(work)), 2))


def probe(options: ProbeOptions, progress: Progress) -> Profile:
    """Measure the device under ``options.directory`` at each fill level asked for (in
    rising order; none: as full as it is)."""
    fio_path = check_options(options)
    facts = _system.loops.block_device_facts(options.directory)
    fua = facts.get("fua")
    has_fua = fua if isinstance(fua, bool) else None
    levels = []
    with probe_dir(options.directory) as work:
        (work / JOB_FILE).write_text(fio.job_file(options.seconds, options.size_mib))
        progress(f"writing fio's {options.size_mib} MiB data file in {work}")
        run_fio(fio_path, work, ["--section=layout"], "fio job layout")
        fills: list[float | None] = [*sorted(options.fills)] or [None]
        for pct in fills:
            if pct is not None:
                progress(f"filling {options.directory}'s filesystem to {pct:g}% (files in {work.name}/)")
                report = fill_filesystem(str(work), pct)
                progress(f"  filled to {report['achieved_pct']:g}% ({report['bytes'] >> 20} MiB written)")
            levels.append(measure_level(fio_path, work, options, has_fua, progress))
    return Profile(
        name=options.name or f"probe-{facts.get('block_device') or facts.get('filesystem') or 'device'}",
        kind="measured",
        provenance=Provenance(
            description=describe(facts, options.directory),
            source=f"sqlwa device probe, {datetime.date.today().isoformat()}, "
            f"{_system.tools.tool_version(fio_path) or 'fio'}",
            notes=[f"fio jobs of {options.seconds:g} s each on a {options.size_mib} MiB file (sqlwa device jobfile)"],
        ),
        device={
            "directory": str(options.directory.resolve()),
            **facts,
            "kernel": platform.release(),
            "fio_version": _system.tools.tool_version(fio_path),
        },
        levels=levels,
    )


def describe(facts: dict, directory: Path) -> str:
    """One line: which storage, as the probe found it."""
    parts = [f"{directory.resolve()}: {facts.get('filesystem', 'filesystem unknown')}"]
    if facts.get("block_device"):
        parts.append(f"on {facts['block_device']}" + (f" ({facts['model']})" if facts.get("model") else ""))
    if facts.get("loop_backing_file"):
        parts.append(f"backed by {facts['loop_backing_file']}")
    return " ".join(parts)
