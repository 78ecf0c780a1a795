"""Where a run happens: a target, one module for each place.

- :mod:`.host_dir`: a scratch directory on this host, the VFS level only (no ``--fs``);
- :mod:`.host_lab`: a fresh lab filesystem on this host, traced with tracefs (``--fs``, root);
- :mod:`.vm_lab`: the same lab in a qemu guest, analysed on the host (``--vm``).

Every target does the same steps, which :func:`run` takes it through: it says what it
lacks for the request before anything is made (:meth:`Target.preflight`); makes what
must exist before the output directory does, so that a refused option leaves nothing
behind, and takes it down afterwards (:meth:`Target.prepared`); then, in the output
directory, runs the engine with its markers and its captures, collects what they took,
tears down what it set up for that, and writes the run's files
(:meth:`Target.measure`). Each describes where the run happened for summary.json's
config (its ``describe``: :func:`sqlwa.measure.report.run_config`'s ``place``); a target
that captures a trace hands the capture to :func:`sqlwa.measure.report.analyse_capture`.

:func:`sqlwa.measure.runner.execute` chooses the target of a request and hands it to
:func:`run`; nothing comes back to the runner but the outcome.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from pathlib import Path
from typing import Protocol, TypeVar

from sqlwa import _system
from sqlwa.errors import UsageError
from sqlwa.measure import engine
from sqlwa.measure.request import RunOutcome, RunRequest, check_out_dir, output_dir

ProgressFn = engine.ProgressFn
KEPT_IMAGE_FILE = "lab.img"  # --keep-image: the lab's disk as the run left it

#: What a target makes before the output directory exists, for its measurement.
Made = TypeVar("Made")


class Target(Protocol[Made]):
    """One place a run can happen, for one request."""

    request: RunRequest

    def preflight(self) -> None:
        """Refuse what the request asks of this place that it lacks, before anything is
        made (a usage error, saying how to mend it)."""
        ...

    def prepared(self) -> AbstractContextManager[Made]:
        """What the run needs made before its output directory (refused there, before
        that exists), taken down again on the way out."""
        ...

    def measure(self, scenario: engine.Scenario, made: Made, out_dir: Path, progress: ProgressFn | None) -> RunOutcome:
        """The run itself, in ``out_dir``: the engine with its markers and this place's
        captures, what they took collected and analysed, summary.json written last."""
        ...


def run(target: Target[Made], progress: ProgressFn | None = None) -> RunOutcome:
    """The request's run at ``target``: its settings, its SQL log and its output
    directory checked before anything is made, then the target's steps. SIGTERM ends
    it with :class:`~sqlwa.errors.Interrupted` in every step, as Ctrl-C does with
    KeyboardInterrupt, so the caller can say what was left unfinished."""
    request = target.request
    engine.check_settings(request.settings)  # refused before any directory or lab is made
    refuse_duration_of_replay(request)
    check_out_dir(request)  # and where it writes, before anything is measured
    guard = _system.signals.SignalGuard()  # the lab and capture install their own inside this one
    guard.install()
    try:
        target.preflight()
        scenario = engine.load_scenario(request.scenario)  # a bad scenario is refused here
        with target.prepared() as made, output_dir(request) as out_dir:
            return target.measure(scenario, made, out_dir, progress)
    finally:
        guard.restore()


def refuse_duration_of_replay(request: RunRequest) -> None:
    """A replayed SQL log runs to its end (or -n): --duration is refused before anything
    is made, as the engine would refuse it once the run had begun."""
    scenario = Path(request.scenario)
    if (
        request.settings.length.duration_s is not None
        and engine.looks_like_path(request.scenario)
        and scenario.is_file()
        and engine.has_log_header(scenario)
    ):
        raise UsageError(
            f"--duration bounds a scenario's run, and {scenario} is a SQL log, replayed to its end",
            "give -n to stop the replay after that many transactions, or leave --duration out",
        )
