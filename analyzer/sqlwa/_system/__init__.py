"""The operating system, in one place, one module per concern: running tools
(:mod:`.tools`), processes and the lab's daemons (:mod:`.processes`), ownership of what a
run makes (:mod:`.ownership`), the output-directory lock (:mod:`.locks`), signals
(:mod:`.signals`), the mount table, syncfs and free space (:mod:`.mounts`), loop devices
(:mod:`.loops`), device-mapper (:mod:`.dm`), fscrypt's ioctls (:mod:`.fscrypt`), kernel
keyrings (:mod:`.keyrings`), tracefs (:mod:`.tracefs`), sparse files (:mod:`.files`) and
whether a directory takes writes (:mod:`.writable`) and the C library's freed memory
(:mod:`.memory`), other runs measuring beside this one (:mod:`.sharing`), and the bounded wait for what the kernel releases asynchronously
(:mod:`.settle`).

Every other module asks these when it needs the OS beyond plain file I/O, so there is
one way to run a subprocess (:func:`.tools.run_tool`, raising
:class:`~sqlwa.errors.ToolError` with the command, exit code and stderr), one mount-table
parser (mountinfo, with the kernel's octal escapes undone) and one signal guard. Callers
write ``from sqlwa import _system`` and ``_system.mounts.mount_at(...)``: each submodule
is imported here.
"""

from sqlwa._system import (
    dm,
    files,
    fscrypt,
    keyrings,
    locks,
    loops,
    memory,
    mounts,
    ownership,
    processes,
    settle,
    sharing,
    signals,
    tools,
    tracefs,
    writable,
)

__all__ = [
    "dm",
    "files",
    "fscrypt",
    "keyrings",
    "locks",
    "loops",
    "memory",
    "mounts",
    "ownership",
    "processes",
    "settle",
    "sharing",
    "signals",
    "tools",
    "tracefs",
    "writable",
]
