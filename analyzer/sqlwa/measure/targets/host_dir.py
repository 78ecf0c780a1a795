"""A run in a scratch directory of this host (no ``--fs``): the VFS level only, in a fresh
temporary directory, or one made inside ``--dir``, that is removed afterwards (kept with
``--keep-db``). No trace: the engine's counting VFS is the measurement."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from sqlwa import _system
from sqlwa.analysis.schema import Summary
from sqlwa.catalogue import NO_LAB_FS
from sqlwa.errors import UsageError, writing
from sqlwa.lab.scratch import check_scratch_parent, scratch_dir
from sqlwa.measure import commit_stream, engine, environment, lab_capture, report
from sqlwa.measure.request import RunOutcome, RunRequest
from sqlwa.measure.targets import ProgressFn
from sqlwa.results import rundir


@dataclass
class HostDir:
    """The VFS level of a run, in a directory of this host."""

    request: RunRequest

    def preflight(self) -> None:
        refuse_lab_options_without_lab(self.request)
        check_scratch_parent(self.request.output.dir, self.request.output.allow_system_dir)

    @contextmanager
    def prepared(self) -> Iterator[None]:
        yield  # the scratch directory is made in the output directory's time

    def measure(self, scenario: engine.Scenario, made: None, out_dir: Path, progress: ProgressFn | None) -> RunOutcome:
        request = self.request
        with scratch_dir(request.output.dir, request.output.keep_db) as work_dir:
            lab_capture.watch(progress, work_dir)
            # The records leave the engine in chunks, written as they come (bounded memory)
            # to a file in the scratch directory, which only a finished run moves to out_dir.
            journal = request.settings.journal
            with commit_stream.CommitWriter(work_dir, journal, request.frame_budget_ms) as writer:
                with _system.sharing.measuring() as shared:
                    info = engine.run_workload_chunked(
                        scenario,
                        request.settings,
                        work_dir,
                        writer.add,
                        engine.chunk_commits(),
                        progress=progress,
                        keep_measured=request.capture.keep_measured,
                    )
                    sharing = shared()
                engine.raise_if_nothing_measured(info, writer.measured)
                if info["pragmas"]["journal_mode"] != journal:  # the phases were given for `journal`
                    raise AssertionError(f"SQLite ran journal_mode {info['pragmas']['journal_mode']}, not {journal}")
                with writing(out_dir, "the run's results into"):
                    writer.finish(out_dir / rundir.COMMITS_FILE)
            summary = self.summary(writer, {**dict(info), "host_sharing": sharing}, work_dir)
            with writing(out_dir, "the run's results into"):
                rundir.finish(out_dir, summary)
        kept = work_dir if request.output.keep_db else None
        partial = summary["stopped"].get("partial")
        return RunOutcome(summary=summary, frame=None, out_dir=out_dir, kept_database=kept, partial=partial)

    def summary(self, writer: commit_stream.CommitWriter, info: dict, work_dir: Path) -> Summary:
        """summary.json of the run, from the running sums of the table ``writer`` wrote."""
        place = self.describe(work_dir)
        return writer.summary(
            report.run_config(self.request, info, writer.measured, place),
            levels=["vfs"],
            device_not_measured=device_not_measured(place["dir_fs"]),
            stopped=report.stop_section(info, self.request.settings, writer.measured, writer.measured_span_ns),
            **report.engine_sections(info),
        )

    def describe(self, work_dir: Path) -> dict:
        """Where the run happened: no lab, an existing filesystem's directory."""
        fs = environment.filesystem_of(work_dir)
        return {
            "fs": NO_LAB_FS,
            "dir_fs": fs["type"],
            "fs_source": f"existing {fs['type']} directory (no lab filesystem)",
            "mount_options": fs["options"],
        }


def device_not_measured(dir_fs: str) -> str:
    """The one line a run without a lab filesystem carries beside its latency and frame
    misses: they include a device whose writes and flushes were not counted (or, on tmpfs,
    no device at all), and the way to measure one."""
    timed = (
        "are of memory (tmpfs), no device"
        if dir_fs == "tmpfs"
        else f"include the {dir_fs} directory's device, whose writes were not counted"
    )
    return f"device not measured: latency and frame misses {timed}; to measure a device, run as root with --fs ext4"


def refuse_lab_options_without_lab(request: RunRequest) -> None:
    """--fill, --mkfs-opts, --mount-opts, --encrypt, --fuse, --crypt and --device-delay shape
    a lab filesystem; without --fs there is none, and ignoring them would measure something
    else than was asked."""
    given = [*request.stack.lab_options_given, *(["--keep-image"] if request.debug.keep_image else [])]
    if given:
        raise UsageError(
            f"{', '.join(given)} shape{'s' if len(given) == 1 else ''} a lab filesystem, and this run has none",
            "add --fs ext4 (or another lab filesystem), or leave them out",
        )
