"""Several VM lab runs in one booted guest, each given as the command line a user types
(``sqlwa run --vm …``, ``sqlwa crash --vm …``) and parsed by that command itself into the
run it asks for; the runs are then executed as ``sqlwa matrix --vm`` executes its cells:
one after another in the same guest, each on a fresh lab filesystem of its own (loop
device, mkfs, mount, trace; a crash run's write log and states too), analysed on the host.

Why: a TCG guest's boot and its Python's start cost 20–50 s on CI's two cores, and a test
module's runs prove nothing a boot of their own would add. What a boot of its own does
prove is tested where it is the point: the commands as subprocesses with their guest and
printing (tests/vm/test_vm_lab.py: a relative --out, a user without root, the matrix;
tests/vm/test_crash_first_loss.py; the phase limits, signals and teardown modules).
"""

from __future__ import annotations

import os
import shutil
import sys
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any
from unittest import mock

from sqlwa.errors import GuestHung
from sqlwa.lab import filesystem
from sqlwa.measure import runner
from sqlwa.measure.targets import vm_lab
from sqlwa.vm import machine


def request_of(command: str, args: list[str]) -> runner.RunRequest:
    """The run ``sqlwa COMMAND ARGS`` asks for, as the command's own parsing makes it."""
    from sqlwa.cli import crash as crash_cli
    from sqlwa.cli import run as run_cli
    from sqlwa.cli._stack import with_stack

    def run_request(frame_rate: str | None, frame_budget_ms: float, as_json: bool, **options: Any) -> runner.RunRequest:
        return run_cli.run_request(frame_budget_ms=run_cli.frame_budget_of(frame_budget_ms, frame_rate), **options)

    click_command: Any = {"run": run_cli.run, "crash": crash_cli.crash_command}[command]
    context = click_command.make_context(command, list(args))
    with context:  # what the command reads of its context (a profile's defaults) is there
        if command == "crash":
            params = dict(context.params)
            params.pop("as_json")
            return with_stack(run_cli.with_settings(crash_cli.crash_request))(**params)
        return with_stack(run_cli.with_settings(run_request))(**context.params)


def guest_bytes(request: runner.RunRequest) -> int:
    """The room a run needs in the guest's RAM, as its own guest would have it."""
    room = vm_lab.CRASH_IMAGE_ROOM if request.crash else 1
    return filesystem.parse_size(request.stack.volume.image_size) * room


# A run phase's limit here: these runs take a minute at most on a loaded host, and a hung
# guest otherwise holds a worker for the lab's own limit (675 s for the crash runs).
RUN_LIMIT_S = "300"


def hang_limit() -> AbstractContextManager[Any]:
    """The run phase's limit at RUN_LIMIT_S while the guest runs (the VM lab's test hook),
    unless the environment sets one."""
    name = machine.PHASE_WAIT_ENV.format("RUN")
    return mock.patch.dict(os.environ, {name: os.environ.get(name, RUN_LIMIT_S)})


def vm_runs(share: Path, runs: dict[Any, tuple[str, list[str]]]) -> dict[Any, Path]:
    """Boot one guest sharing ``share`` and run each of ``runs`` (name → the command and
    its arguments, ``--vm`` among them, ``--out`` not: a run writes ``share/<name>``) in
    it, in order; their output directories. The guest has the room the largest run
    needs, and is powered off after (killed at once if a run failed)."""
    requests = {}
    for name, (command, args) in runs.items():
        out = share / ("-".join(map(str, name)) if isinstance(name, tuple) else str(name))
        requests[name] = request_of(command, [*args, "--out", str(out)])
        assert requests[name].stack.machine.vm, f"{name}: a run of the VM lab needs --vm"
    [kernel] = {request.stack.machine.kernel for request in requests.values()}
    room = max(guest_bytes(request) for request in requests.values())
    guest_kernel = vm_lab.guest_kernel(kernel)
    done: dict[Any, Path] = {}

    def run_those_not_done() -> None:
        with hang_limit(), vm_lab.booted_guest(guest_kernel, share, str(room)) as guest:
            for name, request in requests.items():
                if name not in done:
                    done[name] = runner.execute(request, guest=guest).out_dir

    try:
        run_those_not_done()
    except GuestHung as error:
        # A TCG guest on a loaded 2-core host has hung now and then (twice in about six
        # whole runs of the suite: once after "stage ready", once after the workload),
        # never twice in a row; the error's own advice is to re-run. Once, in a fresh
        # guest, from the run it lost; a second hang, or any other error, fails.
        lost = next(name for name in requests if name not in done)
        print(f"\nvm_runs: {error}; re-running {lost} and those after it in a fresh guest", file=sys.stderr)
        shutil.rmtree(Path(requests[lost].output.out_dir), ignore_errors=True)
        run_those_not_done()
    return done
