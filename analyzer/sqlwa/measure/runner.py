"""One measurement run, from request to the files in the output directory.

Where the run happens is its target (:mod:`sqlwa.measure.targets`): a run without
``--fs`` measures the VFS level only, in a scratch directory of this host that is removed
afterwards (:mod:`~sqlwa.measure.targets.host_dir`); a run with ``--fs`` makes a fresh lab
filesystem, traces block requests, the SQL thread's syscalls and the engine's markers in
one tracefs instance, and cuts the trace into commit windows
(:mod:`~sqlwa.measure.targets.host_lab`); a ``--vm`` run does the same in a qemu guest,
analysed on this host (:mod:`~sqlwa.measure.targets.vm_lab`). The runner chooses the
target and hands the run over.
"""

from __future__ import annotations

from sqlwa.measure import targets
from sqlwa.measure.request import RunOutcome, RunRequest
from sqlwa.measure.targets import ProgressFn, host_dir, host_lab, vm_lab
from sqlwa.measure.targets.vm_lab import booted_guest, guest_kernel
from sqlwa.vm import machine

# The public face of a run: a matrix boots its VM lab guest with these, too.
__all__ = ["ProgressFn", "RunOutcome", "RunRequest", "booted_guest", "execute", "guest_kernel", "target_for"]


def execute(request: RunRequest, progress: ProgressFn | None = None, guest: machine.Guest | None = None) -> RunOutcome:
    """Run the request's workload and write summary.json and commits.parquet. SIGTERM
    ends it with :class:`~sqlwa.errors.Interrupted` in every phase, as Ctrl-C does with
    KeyboardInterrupt, so the caller can say what was left unfinished. A ``--vm`` run
    uses ``guest`` when given (a matrix boots one for all its cells), else boots its own."""
    target = target_for(request, guest)  # chosen once: the run is the target's from here on
    return targets.run(target, progress)


def target_for(request: RunRequest, guest: machine.Guest | None = None) -> targets.Target:
    """Where the request's run happens: in the VM lab's guest, in a lab filesystem on
    this host, or in a directory of this host (the VFS level only)."""
    if request.stack.machine.vm:
        return vm_lab.VmLab(request, guest)
    if request.stack.volume.fs:
        return host_lab.HostLab(request)
    return host_dir.HostDir(request)
