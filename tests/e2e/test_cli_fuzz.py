"""A bounded fuzz of the command line's option values (#15): sizes, numbers, paths and
option strings, drawn by hypothesis and given to the real ``sqlwa`` process.

Whatever the values, sqlwa exits 0, 1, 2 or 130 (interrupted at the time limit), never
with a traceback or a Rust panic; an exit 2 says what was wrong in one line; and it
leaves nothing behind: no scratch directory in the temp dir, no file outside the
example's own directory, and a refused ``run`` makes no output directory.

Each example runs in a fresh directory (the working directory, the temp dir and every
file the example names are in it). Runs that are accepted are kept short (-n 2 unless
the example says otherwise) and are interrupted with SIGINT at the time limit. As root,
some examples run as nobody (setpriv), for whom read-only directories exist.

The number of examples per command is ``SQLWA_FUZZ_EXAMPLES`` (default: a CI-sized
few). They are the same ones every run (conftest.py's profile "ci"); ``--hypothesis-profile
explore`` draws new ones. Counts per test: ``pytest --hypothesis-show-statistics``.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from helpers import REPO, leftovers_after_release
from sqlwa import _native, _system

EXAMPLES = int(os.environ.get("SQLWA_FUZZ_EXAMPLES", "8"))
TIME_LIMIT = float(os.environ.get("SQLWA_FUZZ_TIME_LIMIT", "20"))
FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=None,
    phases=[Phase.explicit, Phase.reuse, Phase.generate, Phase.shrink],  # explaining costs minutes
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow, HealthCheck.data_too_large],
)

SAMPLE_RUN = REPO / "traces" / "samples" / "sqlwa-runs" / "ext4-wal"
OTHER_RUN = REPO / "traces" / "samples" / "sqlwa-runs" / "ext4-delete"
SAMPLE_TRACE = REPO / "traces" / "samples" / "ftrace-loop-ext4" / "trace.txt"
KEKS = REPO / "traces" / "samples" / "blktrace-keks" / "keks"
POLICY = REPO / "examples" / "policy.toml"
KV_PREFS = REPO / "workloads" / "scenarios" / "kv-prefs.toml"
NOBODY = 65534

# ------------------------------------------------------------------ values

NUMBER_WORDS = [
    *["0", "1", "2", "-1", "-0", "1.5", "3.0", "1e3", "1e300", "-1e300", "1e-300", "nan", "-nan", "inf", "-inf"],
    *["Infinity", "9223372036854775807", "9223372036854775808", "-9223372036854775809", "18446744073709551616"],
    *["99999999999999999999", "4294967296", "2147483648", "65536", "0x10", "1_000", " 3 ", "", "٣", "１", "17T"],
]
SIZE_WORDS = [
    *["0", "1", "17T", "99999999999999999999T", "1G", "-1G", "1.5G", "1e300G", "nanG", "infG", "64M", "1K", "G"],
    *["", " 1G", "1g", "1GiB", "1TB", "0x10M", "١G", "18446744073709551616", "1E"],
]
CHOICE_WORDS = ["delete", "WAL", "wal", "full", "normal", "off", "extra", "exclusive", "Normal", "", "-", "wal\n", "ß"]
PRAGMA_WORDS = [
    *["temp_store=memory", "cache_size=-2000", "x;y", "a=b c", "", "=", "journal_mode=off", "query_only=1"],
    *["page_size=1e300", "synchronous", "foreign_keys=on", "mmap_size=-1", "user_version=99999999999999999999"],
    *["locking_mode=exclusive", "wal_autocheckpoint=0", "max_page_count=1", "écrire=1", "a.b=c", "journal_mode=wal"],
]
SCENARIO_WORDS = ["mobibench-insert", "messenger", "", "nonexistent", "-", "../x", "MOBIBENCH-INSERT", "x.toml"]
FORMAT_WORDS = ["auto", "blktrace", "blkparse", "ftrace", "binary", "", "AUTO", "xml"]


def argv_safe(value: str | bytes) -> bool:
    """argv holds no NUL: the kernel's strings end at one."""
    return (b"\0" if isinstance(value, bytes) else "\0") not in value


# Free text, and bytes that are not UTF-8 (Python reads argv with surrogateescape).
words = st.one_of(st.text(max_size=24), st.binary(min_size=1, max_size=12)).filter(argv_safe)
numbers = st.one_of(
    st.sampled_from(NUMBER_WORDS), st.integers().map(str), st.floats().map(str), st.floats().map(repr), words
)
counts = st.one_of(st.sampled_from(["0", "-1", "nan", "1e300", "18446744073709551616", "2.5"]), words)
sizes = st.one_of(st.sampled_from(SIZE_WORDS), words)
choices = st.one_of(st.sampled_from(CHOICE_WORDS), words)
pragmas = st.one_of(st.sampled_from(PRAGMA_WORDS), words)
file_bytes = st.one_of(
    st.binary(max_size=300),
    st.text(max_size=300).map(str.encode),
    st.sampled_from([b"", b"\0" * 64, b"\xff\xfe\x00garbage", "ü".encode("latin-1")]),
)

# ------------------------------------------------------------------ the example's world

# Places outside the example's directory that an example may name. Outputs go only
# where nothing can be made, even by root: procfs, sysfs (not its cgroup tree), the
# character devices /dev/null and /dev/full; inputs may also be anywhere readable.
UNWRITABLE = [
    "/proc",
    "/proc/version",
    "/proc/self/status",
    "/proc/sqlwa-fuzz/x",
    "/sys",
    "/sys/kernel/sqlwa-fuzz",
    "/dev/null",
    "/dev/full",
    "/dev/null/x",
]
READABLE = ["/", "/etc", "/etc/hostname", "/nonexistent-sqlwa-fuzz/x", str(SAMPLE_RUN), str(OTHER_RUN), str(KEKS)]
LOCAL = [
    *["out", "new/deep/dir", "afile", "adir", "ro", "ro/sub", "afile/sub", "loop", "dangling", "fifo", "."],
    *["..", "", "-", "--", "~", "a" * 300, "new\nline", "ü/ß", "trace.bin", "policy.toml", "results"],
]
NOT_UTF8 = [b"o\x94", b"\xff\xfe/x", "ü".encode("latin-1"), b"d\x94", b"r\x94"]  # names a user's files may have


def inside(word: str | bytes) -> bool:
    """A free word as an output path stays in the world: not absolute, no way up out of it."""
    text = os.fsdecode(word)
    return not text.startswith("/") and ".." not in text


output_paths = st.one_of(st.sampled_from(LOCAL + NOT_UTF8), st.sampled_from(UNWRITABLE), words.filter(inside))
input_paths = st.one_of(st.sampled_from(LOCAL + NOT_UTF8), st.sampled_from(UNWRITABLE + READABLE), words)


@dataclass
class World:
    """One example's directory: the working directory of the sqlwa process, its temp dir,
    and the files the local path names above point at."""

    root: Path
    user: str  # "self" or "nobody"

    @property
    def cwd(self) -> Path:
        return self.root / "cwd"

    @property
    def tmp(self) -> Path:
        return self.root / "tmp"

    def build(self, files: dict[str, bytes]) -> None:
        self.cwd.mkdir()
        self.tmp.mkdir()
        (self.cwd / "afile").write_text("not a directory\n")
        (self.cwd / "adir").mkdir()
        (self.cwd / "adir" / "summary.json").write_text("{}")
        (self.cwd / "ro").mkdir()
        (self.cwd / "scratch").mkdir()
        (self.cwd / "loop").symlink_to("loop")
        (self.cwd / "dangling").symlink_to("nowhere/at/all")
        os.mkfifo(self.cwd / "fifo")
        shutil.copytree(SAMPLE_RUN, self.cwd / "results")
        shutil.copytree(SAMPLE_RUN, self.cwd / os.fsdecode(b"r\x94"))  # names that are not UTF-8
        (self.cwd / os.fsdecode(b"d\x94")).mkdir()
        for name, content in files.items():
            (self.cwd / name).write_bytes(content)
        if self.user == "nobody":
            for path in (
                self.root,
                self.cwd,
                self.tmp,
                self.cwd / "adir",
                self.cwd / "scratch",
                self.cwd / os.fsdecode(b"d\x94"),
            ):
                os.chmod(path, 0o777)
        os.chmod(self.cwd / "ro", 0o555)


def make_world(user: str, files: dict[str, bytes]) -> World:
    # As nobody, the world must be reachable by nobody: pytest's tmp_path is root's only.
    world = World(Path(tempfile.mkdtemp(prefix="sqlwa-fuzz-")), user)
    world.build(files)
    return world


def remove_world(world: World) -> None:
    for path in (world.cwd / "ro", world.cwd):
        if path.is_dir():
            os.chmod(path, 0o755)
    shutil.rmtree(world.root, ignore_errors=True)


users = (
    st.sampled_from(["self", "nobody"]) if _system.processes.is_root() and shutil.which("setpriv") else st.just("self")
)

# ------------------------------------------------------------------ one invocation


@dataclass
class Outcome:
    args: list
    returncode: int
    stdout: str
    stderr: str
    timed_out: bool
    pid: int


def invoke(world: World, args: list) -> Outcome:
    """``python -m sqlwa ARGS`` in the world; SIGINT at the time limit (as Ctrl-C would),
    SIGKILL if that is not heeded (which the checks then report)."""
    command = [sys.executable, "-m", "sqlwa", *args]
    if world.user == "nobody":
        command = ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", *command]
    # A UTF-8 locale's strict stdout (C.UTF-8 escapes what it cannot encode)
    env = {**os.environ, "TMPDIR": str(world.tmp), "COLUMNS": "100", "PYTHONIOENCODING": "utf-8:strict"}
    proc = subprocess.Popen(command, cwd=world.cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    timed_out = False
    try:
        out, err = proc.communicate(timeout=TIME_LIMIT)
    except subprocess.TimeoutExpired:
        timed_out = True
        proc.send_signal(signal.SIGINT)
        try:
            out, err = proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, err = proc.communicate()
    decode = lambda b: b.decode("utf-8", "backslashreplace")  # noqa: E731
    return Outcome(args, proc.returncode, decode(out), decode(err), timed_out, proc.pid)


ERROR_LINE = re.compile(r"^(sqlwa: error: |Error: )")
USAGE_LINES = re.compile(r"^(  fix: |Usage: |Try '|note: |$)")  # check's notes may come first


def check_exit(outcome: Outcome) -> None:
    """Exit 0, 1, 2 or 130 (130 only when interrupted at the time limit); no traceback,
    no panic; an exit 2 is one error line (with its fix, or click's usage lines)."""
    text = outcome.stdout + outcome.stderr
    assert "Traceback" not in text and "panicked at" not in text, text
    allowed = {0, 1, 2, 130} if outcome.timed_out else {0, 1, 2}
    assert outcome.returncode in allowed, f"exit {outcome.returncode}: {text}"
    if outcome.returncode == 2 and not multiline_value(outcome.args):
        lines = outcome.stderr.splitlines()
        errors = [line for line in lines if ERROR_LINE.match(line)]
        others = [line for line in lines if not ERROR_LINE.match(line) and not USAGE_LINES.match(line)]
        assert len(errors) == 1 and not others, outcome.stderr


def multiline_value(args: list) -> bool:
    """A value with a line break (any that str.splitlines knows, \\v and \\x1c among them)
    is echoed in the message, and so breaks its line."""
    texts = [a if isinstance(a, str) else a.decode("utf-8", "backslashreplace") for a in args]
    return any(len(f"{text}x".splitlines()) > 1 for text in texts)


# ------------------------------------------------------------------ nothing left behind


def outside_state() -> dict[str, set[str]]:
    """Entries of the places outside the world that an example could write to by mistake
    (loop devices come and go with other runs on the machine)."""
    places = ("/", "/dev", tempfile.gettempdir(), REPO, SAMPLE_RUN, OTHER_RUN, KEKS.parent)
    listing = {str(d): set(os.listdir(d)) - TOOLS_OWN for d in places}
    listing["/dev"] = {n for n in listing["/dev"] if not n.startswith("loop")}
    return listing


TOOLS_OWN = {".hypothesis", ".pytest_cache", "__pycache__"}  # the test tools' own, in the repository


def check_nothing_left(world: World, outcome: Outcome, before: dict[str, set[str]]) -> None:
    after = outside_state()
    tmp_dir = tempfile.gettempdir()
    for place, names in after.items():
        new = names - before[place]
        if place == tmp_dir:  # other tests run alongside: only what names this process
            new = {n for n in new if str(outcome.pid) in n}
        assert not new, f"{place} gained {sorted(new)}"
    kept = "--keep-db" in outcome.args
    scratch = [p.name for p in world.tmp.iterdir() if not (kept and (p / ".sqlwa-keep").exists())]
    assert not scratch, f"left in the temp dir: {scratch}"
    for path in UNWRITABLE + READABLE:
        assert path in EXISTING or not os.path.lexists(path), f"made {path}"
    assert leftovers_after_release(outcome.pid) == []


EXISTING = {p for p in UNWRITABLE + READABLE if os.path.lexists(p)}


def run_example(user: str, args: list, files: dict[str, bytes] | None = None, extra=None) -> Outcome:
    """Runs one example in a fresh world, checks it (and with ``extra(world, outcome)``),
    and removes the world."""
    world = make_world(user, files or {})
    try:
        before = outside_state()
        outcome = invoke(world, args)
        log(outcome)
        check_exit(outcome)
        check_nothing_left(world, outcome, before)
        if extra is not None:
            extra(world, outcome)
        return outcome
    finally:
        remove_world(world)


def log(outcome: Outcome) -> None:
    """With SQLWA_FUZZ_LOG=FILE, one JSON line per example: what ran and how it ended."""
    path = os.environ.get("SQLWA_FUZZ_LOG")
    if not path:
        return
    import json

    args = [a if isinstance(a, str) else a.decode("utf-8", "backslashreplace") for a in outcome.args]
    record = {
        "args": args,
        "exit": outcome.returncode,
        "timed_out": outcome.timed_out,
        "stderr": outcome.stderr[:1000] + outcome.stderr[-1000:],
    }
    with open(path, "a") as f:
        f.write(json.dumps(record) + "\n")


# ------------------------------------------------------------------ run


@st.composite
def few_fuzzed(draw, parts: dict[str, tuple[st.SearchStrategy, st.SearchStrategy]], most: int = 2) -> dict:
    """Each part's usual value, but a fuzzed one for at most ``most`` parts: a command
    reaches its later steps only where its earlier values were accepted."""
    fuzzed = draw(st.sets(st.sampled_from(list(parts)), max_size=most)) if parts else set()
    return {name: draw(fuzz if name in fuzzed else usual) for name, (usual, fuzz) in parts.items()}


def usual(*values: str) -> st.SearchStrategy:
    return st.sampled_from(values)


def flagged(flag: str, value: str | bytes | None) -> list:
    """``[flag, value]``, or nothing for None (the option left out)."""
    return [] if value is None else [flag, value]


maybe = st.one_of(st.none(), st.none(), st.just(True)).map(bool)

# sqlwa run's options: the values a user would give, and what the fuzz gives instead.
RUN_OPTIONS: dict[str, tuple[st.SearchStrategy, st.SearchStrategy]] = {
    "-s": (usual("x.toml", "mobibench-insert", "kv-prefs"), st.one_of(st.sampled_from(SCENARIO_WORDS), input_paths)),
    "-n": (usual("1", "2", "3"), counts),
    "--warmup": (usual("0", "1"), counts),
    "--seed": (usual("0", "7"), numbers),
    "--page-size": (usual("1024", "4096", "65536"), numbers),
    "--cache-size": (usual("-2000", "100"), numbers),
    "--wal-autocheckpoint": (usual("0", "1000"), numbers),
    "--journal-size-limit": (usual("-1", "0", "1048576"), numbers),
    "--mmap-size": (usual("0", "268435456"), numbers),
    "--think-time-ms": (usual("0", "0.5"), numbers),
    "--frame-budget-ms": (usual("16.67", "1"), numbers),
    "--buffer-kb": (usual("64", "16384"), numbers),
    "-j": (st.sampled_from(_native.JOURNAL_MODES), choices),
    "--sync": (st.sampled_from(_native.SYNC_MODES), choices),
    "--locking-mode": (st.sampled_from(_native.LOCKING_MODES), choices),
    "--pragma": (usual("temp_store=memory", "cache_size=-2000", "foreign_keys=on"), pragmas),
    "--image-size": (usual("1G"), sizes),  # lab options: without --fs refused, or ignored
    "--fill": (usual("0"), numbers),
    "--mkfs-opts": (usual(""), words),
    "--mount-opts": (usual(""), words),
    "--dir": (usual("scratch", os.fsdecode(b"d\x94")), output_paths),  # sqlwa makes its scratch there
    "-o": (usual("out", "new/deep/dir"), output_paths),
}


@st.composite
def run_args(draw) -> list:
    """Some of sqlwa run's options, one or two of them fuzzed; -n 2 --warmup 0 unless
    drawn, so that an accepted run is short."""
    chosen = draw(st.lists(st.sampled_from(list(RUN_OPTIONS)), max_size=6, unique=True))
    values = draw(few_fuzzed({flag: RUN_OPTIONS[flag] for flag in chosen}))
    args: list = [
        "run",
        *(["-n", "2"] if "-n" not in values else []),
        *(["--warmup", "0"] if "--warmup" not in values else []),
    ]
    for flag, value in values.items():
        args += [flag, value]
    return args + draw(st.lists(st.sampled_from(["--keep-db", "--json", "--allow-loss"]), max_size=2, unique=True))


toml_numbers = st.one_of(
    st.sampled_from(["0", "1", "-1", "1e300", "nan", "inf", "-inf", "99999999999999999999", '"x"', "1.5", "[]"]),
    st.integers().map(str),
    st.floats().map(repr),
)


SCENARIO_NUMBERS = ("txns", "warmup", "seed", "k_min", "k_max", "v_min", "v_max")


@st.composite
def scenario_files(draw) -> bytes:
    """A small scenario (kv-prefs' shape) with a fuzzed number or two, or garbage."""
    if draw(st.integers(0, 9)) == 9:
        return draw(file_bytes)
    parts = {name: (usual("1", "2"), toml_numbers) for name in SCENARIO_NUMBERS}
    parts |= {"think_time_ms": (usual("0"), toml_numbers), "page_size": (usual("4096"), toml_numbers)}
    v = draw(few_fuzzed(parts))
    return (
        f'name = "fuzz"\ntxns = {v["txns"]}\nwarmup = {v["warmup"]}\nseed = {v["seed"]}\n'
        f"think_time_ms = {v['think_time_ms']}\n[pragmas]\npage_size = {v['page_size']}\n"
        '[[table]]\nname = "kv"\ncolumns = ["k INTEGER PRIMARY KEY", "v TEXT"]\n'
        '[[txn]]\nop = "insert"\nor = "replace"\ntable = "kv"\n'
        f'values = {{ k = {{ kind = "int", min = {v["k_min"]}, max = {v["k_max"]} }}, '
        f'v = {{ kind = "text", min = {v["v_min"]}, max = {v["v_max"]} }} }}\n'
    ).encode()


@FUZZ
@given(user=users, args=run_args(), scenario=scenario_files())
def test_run_options(user, args, scenario):
    """sqlwa run without --fs, every option fuzzed; a run refused for its options makes
    no output directory."""
    run_example(user, args, {"x.toml": scenario}, made_nothing_if_refused)


def made_nothing_if_refused(world: World, outcome: Outcome) -> None:
    out = outcome.args[outcome.args.index("-o") + 1] if "-o" in outcome.args else None
    if outcome.returncode != 2 or out not in ("out", "new/deep/dir"):
        return
    if not WORKLOAD_FAILED.search(outcome.stderr):
        assert not (world.cwd / out).exists(), f"refused, yet made {out}: {outcome.stderr}"


# The run itself failed (SQLite refused a statement): its output directory says so.
WORKLOAD_FAILED = re.compile(r"^sqlwa: error: SQL failed: ", re.M)


# Values sqlwa run must refuse, each alone enough to refuse a run: the lab fuzz below
# draws one of them, so a lab run it starts is a run that should have been refused.
BAD_VALUES = {
    "--page-size": ["-5", "1e300", "x", "", "4294967296"],
    "--seed": ["-1", "nan", "18446744073709551616"],
    "-n": ["0", "-1", "1e300", "99999999999999999999"],
    "--warmup": ["-1", "nan"],
    "--cache-size": ["9223372036854775808", "1.5"],
    "--journal-size-limit": ["9223372036854775808"],
    "--pragma": ["x;y", "", "a b", "=", "x=1; DROP TABLE t"],
    "--think-time-ms": ["nan", "-1", "1e300", "inf", "3600001"],
    "--frame-budget-ms": ["0", "-1", "nan"],
    "--buffer-kb": ["1", "0", "1048577", "x"],
    "--fill": ["100", "nan", "-1"],
    "--image-size": ["0", "-1G", "99999999999999999999T", "x", "1K"],
    "--mkfs-opts": ["-O ^has_journal /dev/sda", "-d /etc", "--"],
    # (an option only mount(8) knows to refuse, x=1, is refused once the lab is made)
    "--mount-opts": ["dev=/dev/sda", "loop=/dev/loop0", "upperdir=/etc"],
    "--dir": ["scratch"],  # --dir and --fs exclude each other
    "-j": ["x", ""],
    "-s": ["nonexistent", "/nonexistent.toml"],
}


@st.composite
def bad_lab_run_args(draw) -> list:
    """sqlwa run --fs with usual options and one value from BAD_VALUES."""
    flag = draw(st.sampled_from(list(BAD_VALUES)))
    others = draw(st.lists(st.sampled_from([f for f in RUN_OPTIONS if f not in ("--dir", "-o", flag)]), max_size=3))
    args: list = ["run", "--fs", draw(st.sampled_from(["ext4", "xfs", "tmpfs"])), "-o", "out"]
    args += ["-n", "2"] if "-n" not in (flag, *others) else []
    for other in dict.fromkeys(others):
        args += [other, draw(RUN_OPTIONS[other][0])]
    return [*args, flag, draw(st.sampled_from(BAD_VALUES[flag]))]


@pytest.mark.root
@FUZZ
@given(args=bad_lab_run_args())
def test_a_lab_run_with_a_bad_option_makes_nothing(args):
    """As root: a lab run with one bad value is refused before it makes anything (no
    image, loop device, mount or tracefs instance of its pid; no output directory)."""
    outcome = run_example("self", args, {"x.toml": KV_PREFS.read_bytes()}, made_nothing_if_refused)
    assert outcome.returncode == 2, outcome.stdout + outcome.stderr


# ------------------------------------------------------------------ parse


def blktrace_record(sequence: int, time_ns: int, sector: int, nbytes: int, action: int, pdu: bytes) -> bytes:
    """A little-endian ``struct blk_io_trace`` (include/uapi/linux/blktrace_api.h)."""
    head = struct.pack(
        "<IIQQIIIIIHH", 0x65617407, sequence, time_ns, sector, nbytes, action, 1, 8 << 20, 0, 0, len(pdu)
    )
    return head + pdu


blktrace_files = st.lists(
    st.builds(
        blktrace_record,
        st.integers(0, 2**32 - 1),
        st.one_of(st.integers(0, 2**64 - 1), st.sampled_from([0, 2**63 - 1, 2**63, 2**64 - 1])),
        st.integers(0, 2**64 - 1),
        st.integers(0, 2**32 - 1),
        st.one_of(st.integers(0, 2**32 - 1), st.sampled_from([7 | 0x42 << 16, 1 << 26, 10 | 0x10 << 16])),
        st.binary(max_size=24),
    ),
    max_size=6,
).map(b"".join)
BLKPARSE_TRACE = REPO / "traces" / "samples" / "blkparse-nvme-dmcrypt" / "nvme0n1.blktrace.txt"


def mangled_lines(sample: Path) -> st.SearchStrategy:
    """Lines of a sample trace, a few characters of some replaced."""
    line = st.sampled_from(sample.read_text().splitlines()[:200]).flatmap(
        lambda line: st.tuples(st.just(line), st.integers(0, len(line)), st.text(max_size=4))
    )
    return st.lists(line, max_size=12).map(
        lambda picks: "".join(line[:at] + junk + line[at + len(junk) :] + "\n" for line, at, junk in picks).encode()
    )


trace_files = st.one_of(mangled_lines(SAMPLE_TRACE), mangled_lines(BLKPARSE_TRACE), blktrace_files, file_bytes)


@st.composite
def parse_args(draw) -> list:
    parts = few_fuzzed(
        {
            "traces": (st.just(["trace.bin"]), st.lists(st.one_of(st.just("trace.bin"), input_paths), max_size=3)),
            "format": (st.sampled_from([None, *FORMAT_WORDS[:4]]), words),
            "output": (st.sampled_from([None, "events.parquet"]), output_paths),
        }
    )
    p = draw(parts)
    lenient = ["--lenient"] if draw(maybe) else []
    return ["parse", *p["traces"], *flagged("--format", p["format"]), *flagged("-o", p["output"]), *lenient]


@FUZZ
@given(user=users, args=parse_args(), trace=trace_files)
def test_parse_options(user, args, trace):
    run_example(user, args, {"trace.bin": trace})


# ------------------------------------------------------------------ report, check, compare

RESULTS = (st.sampled_from(["results", str(SAMPLE_RUN), str(OTHER_RUN)]), input_paths)

CONFIG_SCOPES = ("journal", "scenario", "fs", "sync")
RULE_KEYS = [
    *["max_fsync_calls_per_commit", "max_write_kib_per_commit", "max_p99_ms", "max_frame_budget_misses"],
    *["max_frame_budget_miss_pct", "max_block_over_logical", "max_regression_pct", "metrics", "name", "journal"],
    *["scenario", "fs", "sync", "bogus", "device", "device_fill", "max_predicted_p99_ms"],
]
TOML_VALUES = [
    *["1", "0", "-1", "1e300", "nan", "inf", "-inf", "99999999999999999999", "1.5", '"x"', '"*"', "true", "[]"],
    *['["p99_ms"]', '["nope"]', "{}", '["wal", 1]', "1979-05-27", '"\\u0000"', "0x7fffffffffffffff"],
    *['"pixel-2016"', '"/etc/passwd"'],
]


LIMIT_KEYS = [key for key in RULE_KEYS if key.startswith("max_")]
RULE_VALUES = {
    **{key: st.one_of(usual("1", "5", "64", "1.5"), st.integers(0, 10**6).map(str)) for key in LIMIT_KEYS},
    "metrics": st.sampled_from(['["p99_ms"]', '["write_kib_per_commit", "p99_ms"]', "[]"]),
    "name": st.sampled_from(['"a rule"', '""', '"ü"']),
    **{key: st.sampled_from(['"*"', '"wal"', '["delete", "wal"]', '"ext4"', '"full"']) for key in CONFIG_SCOPES},
}


@st.composite
def policies(draw) -> bytes:
    """TOML of rule tables with keys and values from the lists above, or garbage."""
    if draw(st.integers(0, 9)) == 9:
        return draw(file_bytes)
    text = ""
    if draw(maybe):
        text += f"[options]\nallow_lossy_trace = {draw(st.sampled_from(['true', 'false', *TOML_VALUES]))}\n"
    for _ in range(draw(st.integers(1, 3))):
        keys = draw(st.lists(st.sampled_from(RULE_KEYS), min_size=1, max_size=4, unique=True))
        odd = st.one_of(toml_numbers, st.sampled_from(TOML_VALUES))
        parts = {key: (RULE_VALUES.get(key, odd), odd) for key in keys}
        text += "[[rule]]\n" + "".join(f"{key} = {value}\n" for key, value in draw(few_fuzzed(parts, 1)).items())
    return text.encode()


@st.composite
def check_args(draw) -> list:
    p = draw(
        few_fuzzed(
            {
                "policy": (st.just("policy.toml"), st.one_of(st.just(str(POLICY)), input_paths)),
                "results": RESULTS,
                "baseline": (st.sampled_from([None, "results", str(OTHER_RUN)]), input_paths),
                "junit": (st.sampled_from([None, "check.xml"]), output_paths),
            }
        )
    )
    verbose = ["-v"] if draw(maybe) else []
    as_json = ["--json"] if draw(maybe) else []
    return [
        "check",
        "-p",
        p["policy"],
        p["results"],
        *flagged("-b", p["baseline"]),
        *flagged("--junit", p["junit"]),
        *verbose,
        *as_json,
    ]


def json_or_nothing(world: World, outcome: Outcome) -> None:
    """With --json, stdout is one JSON document when the command ran (exit 0 or 1) and
    empty when it refused (exit 2)."""
    import json

    if "--json" not in outcome.args or outcome.timed_out:
        return
    if outcome.returncode == 2:
        assert outcome.stdout == "", outcome.stdout
    else:
        json.loads(outcome.stdout)


@FUZZ
@given(user=users, args=check_args(), policy=policies())
def test_check_options(user, args, policy):
    run_example(user, args, {"policy.toml": policy}, extra=json_or_nothing)


@FUZZ
@given(user=users, p=few_fuzzed({"results": RESULTS, "out": (st.sampled_from([None, "r.html"]), output_paths)}, 1))
def test_report_options(user, p):
    run_example(user, ["report", p["results"], *flagged("-o", p["out"])])


@FUZZ
@given(user=users, p=few_fuzzed({"a": RESULTS, "b": RESULTS}, 1), as_json=maybe)
def test_compare_options(user, p, as_json):
    run_example(user, ["compare", p["a"], p["b"], *(["--json"] if as_json else [])], extra=json_or_nothing)


@FUZZ
@given(
    args=st.one_of(
        st.lists(input_paths, max_size=2).map(lambda ws: ["lab", "cleanup", *sum([["--workdir", w] for w in ws], [])]),
        st.just(["lab", "check"]),
    )
)
def test_lab_options(args):
    # As nobody only where root could be: cleanup as root would remove other runs' leftovers.
    user = "nobody" if _system.processes.is_root() else "self"
    if user == "nobody" and not shutil.which("setpriv"):
        pytest.skip("setpriv is not installed (Debian package util-linux)")
    run_example(user, args)
