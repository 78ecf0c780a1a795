"""Where sqlwa may write: the one place every output path is checked and written.

A file output (``report -o``, ``parse -o``/``--commits``, ``check --junit``, ``export -o``,
``device probe -o``/``import -o``) must name a regular file or nothing yet, after its
symlinks are followed; a device node, FIFO, socket or directory is refused, as is a file
in a system directory (/etc, /usr …) unless ``--allow-system-dir`` is given, and one in
/dev, /proc or /sys always (a tmpfs mounted there, /dev/shm, aside). It is
written to a temporary file in the same directory and renamed onto the checked target,
so a failed or full write leaves the old file as it was and a rename never replaces a
node the check did not see. Nor may it be one of the files the command reads, or lie
anywhere inside a run directory or a matrix's store directory (:func:`refuse_own_results`):
a report named ``m/results.sqlite`` would replace the sweep it reports.

A directory output (``run --out``, ``matrix --out``, ``demo``, ``crash``, ``merge``) must
be new, empty, or hold sqlwa's own mark of the same kind (a run's, a matrix's): sqlwa
never writes its files among a user's own; nor inside another run's or matrix's
directory (a matrix's cells aside, in their matrix).

Both are checked before any work starts (:func:`check_file`, :func:`check_dir`).
"""

from __future__ import annotations

import os
import re
import secrets
import stat
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO

from sqlwa import _system, inputs
from sqlwa.errors import UsageError, writing

#: Directories of the system, never a place for sqlwa's outputs unless asked explicitly.
SYSTEM_DIRS = ("/etc", "/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/boot", "/var/lib")
#: Kernel interfaces: refused however sqlwa is asked, but for a tmpfs mounted below one
#: (/dev/shm): that is memory, and its device nodes are refused as anywhere else.
KERNEL_DIRS = ("/dev", "/proc", "/sys")
ALLOW_SYSTEM_FLAG = "--allow-system-dir"
#: Files sqlwa keeps in a directory it writes into that do not make it anyone else's.
OWN_HOUSEKEEPING = frozenset({_system.locks.LOCK_FILE})


def allow_system_option(command: Callable) -> Callable:
    """The ``--allow-system-dir`` flag of a command that writes (its ``allow_system_dir``)."""
    import click

    return click.option(
        ALLOW_SYSTEM_FLAG,
        "allow_system_dir",
        is_flag=True,
        help="Allow writing the output into a system directory (/etc, /usr, /var/lib …); never /dev (a tmpfs there aside), /proc, /sys.",
    )(command)


def _under(path: str, roots: tuple[str, ...]) -> str | None:
    return next((root for root in roots if path == root or path.startswith(root + "/")), None)


def _kind_of(mode: int) -> str | None:
    """What a node that is no regular file is, in a word; None for a regular file."""
    for test, name in (
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISDIR, "a directory"),
    ):
        if test(mode):
            return name
    return None if stat.S_ISREG(mode) else "not a regular file"


def refuse_system_dir(target: str, option: str, allow_system: bool, shown: str | os.PathLike | None = None) -> None:
    """A path (``target``, symlinks resolved; ``shown`` as the user gave it) on a kernel
    interface is refused always, one in a system directory unless ``allow_system``."""
    shown = target if shown is None else shown
    interface = _system.mounts.kernel_interface_at(target)
    if interface is not None:
        raise UsageError(
            f"{option} {shown} is on {interface}, a kernel interface, not storage",
            "write the output to a directory on a disk filesystem",
        )
    kernel = _under(target, KERNEL_DIRS)
    if kernel is not None and _system.mounts.memory_filesystem_below(target, kernel) is None:
        raise UsageError(f"{option} {shown} is in {kernel}: sqlwa never writes there", f"choose another {option}")
    system = _under(target, SYSTEM_DIRS)
    if system is not None and not allow_system:
        raise UsageError(
            f"{option} {target} is in the system directory {system}",
            f"choose another path, or add {ALLOW_SYSTEM_FLAG} if that is really meant",
        )


def check_file(
    path: Path,
    option: str,
    *,
    allow_system: bool = False,
    make_parents: bool = False,
    reads: Iterable[str | os.PathLike] = (),
    what_read: str = "it",
) -> Path:
    """The regular file ``path`` names once its symlinks are followed (existing or not), if
    sqlwa may write it; else one :class:`UsageError` naming ``option``. With
    ``make_parents`` its missing parent directories are allowed (the writer makes them).
    ``reads``: the files the command reads, none of which it may be (``what_read``: what
    the refusal says would be replaced); nor may it lie in a run's or a matrix's directory."""
    target = Path(os.path.realpath(path))
    refuse_system_dir(str(target), option, allow_system, shown=path)
    refuse_own_results(target, option, path, reads, what_read)
    try:
        mode = os.stat(target).st_mode
    except FileNotFoundError:
        mode = None
    except OSError as exc:
        raise UsageError(f"{option} {path} cannot be looked at: {exc.strerror}", f"choose another {option}") from None
    kind = None if mode is None else _kind_of(mode)
    if kind is not None:
        named = path if str(target) == str(path) else f"{path} (-> {target})"
        raise UsageError(f"{option} {named} is {kind}: sqlwa writes only regular files", f"give {option} a file name")
    parent = target.parent
    if not parent.is_dir() and not make_parents:
        raise UsageError(f"{option} {path}: the directory {parent} does not exist", "create it, or choose another path")
    if parent.is_dir() and not os.access(parent, os.W_OK | os.X_OK):
        raise UsageError(f"cannot write {option} {path}: {parent} is not writable", f"choose another {option}")
    return target


def refuse_own_results(
    target: Path, option: str, shown: str | os.PathLike, reads: Iterable[str | os.PathLike] = (), what: str = "it"
) -> None:
    """A UsageError when ``target`` (symlinks resolved) is one of ``reads`` (the same file,
    by name or by inode) or inside one that is a directory (or is to be made), or lies in
    a directory that holds a sqlwa run or a matrix's store, at any depth: sqlwa's own
    results are never an output's place."""
    for source in reads:
        if same_file(source, target):
            raise UsageError(
                f"{option} {shown} is {os.fsdecode(source)}, which this command reads: writing there would "
                f"replace {what}",
                f"give {option} another file",
            )
        if (os.path.isdir(source) or not os.path.lexists(source)) and _inside(target, source):
            raise UsageError(
                f"{option} {shown} is inside {os.fsdecode(source)}, which this command reads",
                f"write {option} outside {os.fsdecode(source)}",
            )
    holder = results_directory_of(target)
    if holder is not None:
        kind, directory = holder
        named = shown if str(target) == os.fsdecode(shown) else f"{os.fsdecode(shown)} (-> {target})"
        raise UsageError(
            f"{option} {named} is inside {directory}, which holds a sqlwa {kind}: sqlwa never writes among its results",
            f"write {option} outside {directory}",
        )


def same_file(source: str | os.PathLike, target: Path) -> bool:
    """Whether ``source`` is the file ``target`` (resolved) names, by name or by inode."""
    if os.path.realpath(source) == str(target):
        return True
    try:
        return os.path.samefile(source, target)
    except OSError:  # either does not exist (yet): not the same file
        return False


def _inside(target: Path, directory: str | os.PathLike) -> bool:
    return Path(os.path.realpath(directory)) in target.parents


def results_directory_of(target: Path) -> tuple[str, Path] | None:
    """The nearest directory above ``target`` (a resolved path) that holds a sqlwa run
    (its RUNNING mark, or a finished run's summary.json) or a matrix's store, with which."""
    for directory in target.parents:
        if not directory.is_dir():
            continue  # a parent the writer is to make (make_parents)
        try:
            if holds_a_matrix(directory):
                return "matrix", directory
        except OSError:  # a store this user may not read: not one to judge, the writer's open says so
            pass
        if holds_a_run(directory):
            return "run", directory
    return None


class Staged:
    """An output being written: a temporary file beside its checked ``target``, which the
    writer creates at ``part``, :meth:`sync` syncs and :meth:`put_in_place` renames onto
    ``target``; :func:`staged` removes it otherwise."""

    def __init__(self, target: Path, what: str) -> None:
        self.target, self.what = target, what
        # Named, not made: a writer that makes its file without a name until it is whole
        # (the Rust parser's O_TMPFILE) leaves nothing if it is killed part-way.
        self.part = target.parent / f".{target.name}.{secrets.token_hex(6)}.part"

    def sync(self) -> None:
        """The written ``part`` on disk, with the permissions of the file it replaces."""
        with writing(self.target, self.what), open(self.part, "rb+") as written:
            os.fchmod(written.fileno(), _mode_for(self.target))
            os.fsync(written.fileno())

    def put_in_place(self) -> None:
        """``part``, synced by :meth:`sync`, renamed onto ``target``."""
        with writing(self.target, self.what):
            _refuse_swapped(self.target)
            os.replace(self.part, self.target)


@contextmanager
def staged(target: Path, what: str) -> Iterator[Staged]:
    """A :class:`Staged` output for ``target`` (a path :func:`check_file` returned), its
    temporary file removed when the block ends unless put in place: ``target`` is then the
    whole new file or what it was before. For a command that puts its outputs in place
    only when all its work is done (``sqlwa parse``)."""
    with writing(target, what):
        target.parent.mkdir(parents=True, exist_ok=True)
    output = Staged(target, what)
    try:
        yield output
    finally:
        if os.path.lexists(output.part):
            os.unlink(output.part)


@contextmanager
def replacing_path(target: Path, what: str) -> Iterator[Path]:
    """The path of a temporary file beside ``target`` (a path :func:`check_file` returned)
    for a writer to create and fill; when the block ends without error it is synced and
    renamed onto ``target``, else removed: ``target`` is then the whole new file or what it
    was before."""
    with staged(target, what) as output:
        with writing(target, what):
            yield output.part
        output.sync()
        output.put_in_place()


@contextmanager
def replacing(target: Path, what: str) -> Iterator[IO[bytes]]:
    """:func:`replacing_path`, opened for writing bytes."""
    with replacing_path(target, what) as part, open(part, "xb") as f:
        yield f


def _mode_for(target: Path) -> int:
    """The replaced file's permissions, or a new file's (0666 less the umask): mkstemp's
    0600 would hide a report from the users it is meant for."""
    try:
        return stat.S_IMODE(os.stat(target).st_mode)
    except FileNotFoundError:
        umask = os.umask(0)
        os.umask(umask)
        return 0o666 & ~umask


def _refuse_swapped(target: Path) -> None:
    """The target still is no device or FIFO now, at the rename (a check's answer may be old)."""
    try:
        mode = os.lstat(target).st_mode
    except FileNotFoundError:
        return
    kind = _kind_of(mode)
    if kind is not None and not stat.S_ISLNK(mode):
        raise UsageError(f"{target} became {kind} while sqlwa wrote it; it was left alone", "choose another path")


def write_file(target: Path, content: str | bytes, what: str) -> None:
    """Write ``content`` whole to ``target`` (checked with :func:`check_file`), or not at all."""
    data = content.encode() if isinstance(content, str) else content
    with replacing(target, what) as f:
        f.write(data)


def check_dir(
    path: Path,
    option: str,
    owns: Callable[[Path], bool],
    kind: str,
    *,
    allow_system: bool = False,
    create: bool = True,
    part_of: Path | None = None,
) -> Path:
    """``path`` as a directory sqlwa may write its ``kind`` into: new (made now when
    ``create``), empty, or ``owns`` (it holds sqlwa's own mark of that kind); never a
    file, device or other node, a kernel interface, (unless ``allow_system``) a system
    directory, or inside another run's or matrix's directory (but ``part_of``: the
    matrix whose cell it is)."""
    refuse_system_dir(os.path.realpath(path), option, allow_system, shown=path)
    holder = results_directory_of(Path(os.path.realpath(path)))
    if holder is not None and (part_of is None or str(holder[1]) != os.path.realpath(part_of)):
        raise UsageError(
            f"{option} {path} is inside {holder[1]}, which holds a sqlwa {holder[0]}: sqlwa never writes among "
            "its results",
            f"choose an {option} outside {holder[1]}",
        )
    if os.path.lexists(path) and not os.path.isdir(path):
        what = (_kind_of(os.stat(path).st_mode) or "a regular file") if os.path.exists(path) else "a dangling symlink"
        raise UsageError(f"{option} {path} is {what}, not a directory", f"give {option} a new or empty directory")
    if os.path.isdir(path):
        try:
            foreign = [name for name in os.listdir(path) if name not in OWN_HOUSEKEEPING]
        except OSError as exc:
            raise UsageError(f"{option} {path} cannot be read: {exc.strerror}", f"choose a writable {option}") from None
        if foreign and not owns(Path(path)):
            raise UsageError(
                f"{option} {path} holds {sorted(foreign)[0]} and no sqlwa {kind}: sqlwa writes only into "
                f"a new or empty directory, or one holding its own {kind}",
                f"choose a new or empty {option}",
            )
    if not create:
        return Path(path)
    try:
        Path(path).mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"{option} {path} cannot be created: {exc.strerror}", f"choose a writable {option}") from None
    if not os.access(path, os.W_OK | os.X_OK):
        raise UsageError(f"{option} {path} is not a writable directory", f"choose a writable {option}")
    return Path(path)


# ----------------------------------------------------------------- sqlwa's results on disk
# What a run directory and a matrix's store directory look like, here at the bottom so that
# refuse_own_results can tell them (sqlwa.results.rundir and .store name them from here;
# whoever asks whether a directory holds a run or a matrix asks here too).

SUMMARY_FILE = "summary.json"
COMMITS_FILE = "commits.parquet"
TRACE_FILE = "trace.txt"
EVENTS_FILE = "events.parquet"
WRITES_FILE = "writes.parquet"
LAYOUT_FILE = "layout.json"
CONSOLE_FILE = "console.log"  # a --vm run's guest console (sqlwa.vm.machine writes it)
RUNNING_FILE = "RUNNING"  # a run is being written here, or was and did not finish
SUMMARY_PART = ".summary.json.part"  # summary.json before its atomic rename into place
#: Every file a run writes into its directory, summary.json first: what a new run into the
#: same directory removes before it starts (nothing else there is sqlwa's to touch).
RUN_FILES = (
    SUMMARY_FILE,
    SUMMARY_PART,
    COMMITS_FILE,
    TRACE_FILE,
    EVENTS_FILE,
    WRITES_FILE,
    LAYOUT_FILE,
    CONSOLE_FILE,
)


RUN_MARK_KIND = "run"
# The mark sqlwa wrote before it was JSON: still a run of sqlwa's.
_OLD_MARK_RE = re.compile(r"sqlwa run \(pid \d+\) started [\d: -]+ and has not finished\n")


def run_mark(run_dir: Path) -> dict | None:
    """The RUNNING mark in ``run_dir`` if sqlwa wrote it (its content says so), else None:
    a file of that name that is not sqlwa's marks nothing."""
    path = Path(run_dir) / RUNNING_FILE
    try:
        if not stat.S_ISREG(os.lstat(path).st_mode):
            return None
        with open(path, "rb") as f:
            text = f.read(MAX_MARK_BYTES + 1).decode()
    except (OSError, UnicodeDecodeError):
        return None
    if _OLD_MARK_RE.fullmatch(text):
        return {"sqlwa": RUN_MARK_KIND, "files": list(RUN_FILES)}
    try:  # parse_json: a mark nested past the parser's recursion limit is no mark either
        mark = inputs.parse_json(text.encode())
    except ValueError:
        return None
    if not isinstance(mark, dict) or mark.get("sqlwa") != RUN_MARK_KIND or not isinstance(mark.get("files"), list):
        return None  # JSON of another shape (a list, a number): a file of someone else's
    return mark


MAX_MARK_BYTES = 4096


def holds_a_run(run_dir: Path) -> bool:
    """Whether ``run_dir`` holds a sqlwa run, finished (a summary.json of sqlwa's shape) or
    not (a RUNNING mark sqlwa wrote)."""
    run_dir = Path(run_dir)
    if run_mark(run_dir) is not None:
        return True
    if not (run_dir / SUMMARY_FILE).is_file():  # not a FIFO, whose read would wait for ever
        return False
    try:
        summary = inputs.parse_json(inputs.read_input(run_dir / SUMMARY_FILE, "result file", inputs.SUMMARY_LIMIT))
    except (OSError, ValueError, UsageError):
        return False
    return isinstance(summary, dict) and "schema_version" in summary and "config" in summary


STORE_FILE = "results.sqlite"
SQLITE_MAGIC = b"SQLite format 3\x00"


def holds_a_matrix(directory: Path) -> bool:
    """Whether ``directory`` holds a matrix's store: a results.sqlite that is an SQLite
    database (or still empty, as sqlwa matrix creates it)."""
    path = Path(directory) / STORE_FILE
    if not path.is_file() or path.is_symlink():
        return False
    with open(path, "rb") as f:
        header = f.read(len(SQLITE_MAGIC))
    return header in (b"", SQLITE_MAGIC)
