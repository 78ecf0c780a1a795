"""The Rust↔Python contract of ``sqlwa._native``, without root: the settings, the value
lists and the errors as Python sees them, and ``_native.pyi`` against the built module.

The settings are defined once, by ``RunSettings`` in ``workloads/src/settings.rs``; the
module exports its names, defaults and enum values, and these tests hold the Python side
and the engine to them. Damaged traces are made here from the committed samples, with
the expected line or byte offset worked out independently of the parser.
"""

from __future__ import annotations

import ast
import errno
import importlib.metadata
import json
import os
import pickle
import struct
from pathlib import Path

import pytest

from helpers import REPO
from sqlwa import _native, catalogue
from sqlwa.measure import engine

SAMPLES = REPO / "traces" / "samples"
NVME_TEXT = SAMPLES / "blkparse-nvme-dmcrypt" / "nvme0n1.blktrace.txt"
KEKS_CPU0 = SAMPLES / "blktrace-keks" / "keks.blktrace.0"

ENUM_SETTINGS = {
    "journal": _native.JOURNAL_MODES,
    "sync": _native.SYNC_MODES,
    "locking_mode": _native.LOCKING_MODES,
}


def run_tiny(tmp_path: Path, **settings) -> dict:
    """Five measured kv-prefs transactions with ``settings`` (a dict as engine.py sends)."""
    given = {"txns": 5, "warmup": 0, **settings}
    return _native.run_workload(_native.builtin_scenario("kv-prefs"), given, str(tmp_path))


# ----------------------------------------------------------------- settings


def test_python_run_settings_are_the_rust_settings():
    # Names, then defaults: what engine.RunSettings sends is exactly what Rust reads.
    assert {name for name, _ in engine.setting_fields()} == set(_native.default_settings())
    assert engine.RunSettings().as_dict() == _native.default_settings()


def test_python_value_lists_are_the_rust_ones():
    assert engine.JOURNAL_MODES == _native.JOURNAL_MODES
    assert engine.SYNC_MODES == _native.SYNC_MODES
    assert engine.LOCKING_MODES == _native.LOCKING_MODES
    assert catalogue.FILE_KINDS == _native.FILE_KINDS


@pytest.mark.parametrize("setting,value", [(name, value) for name, values in ENUM_SETTINGS.items() for value in values])
def test_every_listed_value_is_accepted_and_reaches_sqlite(tmp_path, setting, value):
    info = run_tiny(tmp_path, **{setting: value})["info"]
    pragma = {"journal": "journal_mode", "sync": "synchronous", "locking_mode": "locking_mode"}[setting]
    # SQLite reports synchronous as its level: off, normal, full, extra = 0..3.
    expected = str(_native.SYNC_MODES.index(value)) if setting == "sync" else value
    assert info["pragmas"][pragma] == expected


@pytest.mark.parametrize("setting", list(ENUM_SETTINGS))
def test_unknown_enum_value_is_a_config_error_naming_the_setting(tmp_path, setting):
    with pytest.raises(_native.ConfigError) as err:
        run_tiny(tmp_path, **{setting: "bogus"})
    message, hint = err.value.args
    assert message.startswith(f"setting {setting}: invalid value 'bogus'")
    assert ", ".join(ENUM_SETTINGS[setting]) in message
    assert setting in hint
    assert not any(tmp_path.iterdir())  # refused before the engine made anything


@pytest.mark.parametrize(
    "settings,named",
    [
        ({"jounral": "wal"}, "setting jounral: unknown field"),
        ({"txns": "5"}, "setting txns: invalid type: string"),
        ({"page_size": 2**40}, "setting page_size: invalid value"),
        ({"extra_pragmas": ["optimize", 3]}, "setting extra_pragmas[1]: invalid type"),
        ({"think_time_ms": float("nan")}, "setting think_time_ms: "),
        ({"seed": b"7"}, "setting seed: "),
    ],
)
def test_bad_settings_are_config_errors_naming_the_setting(tmp_path, settings, named):
    with pytest.raises(_native.ConfigError) as err:
        run_tiny(tmp_path, **settings)
    assert err.value.args[0].startswith(named), err.value.args
    assert isinstance(err.value, _native.SqlwaError) and err.value.args[1]


def test_none_keeps_every_default(tmp_path):
    all_none = {name: None for name in _native.default_settings()}
    out = run_tiny(tmp_path, **{**all_none, "txns": 5, "warmup": 0})
    assert out["info"]["pragmas"]["journal_mode"] == _native.default_settings()["journal"]
    assert out["info"]["pragmas"]["synchronous"] == "2"  # full
    assert out["info"]["vfs_counting"] is True


def test_commit_columns_are_file_kinds_times_vfs_counters(tmp_path):
    commits = run_tiny(tmp_path)["commits"]
    vfs = {f"vfs_{kind}_{counter}" for kind in _native.FILE_KINDS for counter in _native.VFS_COUNTERS}
    timing = {"start_ns", "end_ns", "cpu_user_ns", "cpu_sys_ns"}
    assert set(commits) == {"index", "warmup", "logical_bytes", "statements"} | timing | vfs


# ----------------------------------------------------------------- trace errors


def test_damaged_text_trace_error_carries_the_line(tmp_path):
    lines = NVME_TEXT.read_text().splitlines(keepends=True)
    damaged = tmp_path / "damaged.txt"
    damaged.write_text("".join(lines[:100] + ["259,0 this is not an event\n"] + lines[100:]))
    with pytest.raises(_native.TraceParseError) as err:
        _native.parse_trace([str(damaged)], "blkparse")
    e = err.value
    assert (e.path, e.line, e.byte_offset) == (str(damaged), 101, None)
    assert e.args[0].startswith(f"{damaged} line 101: ")
    assert not isinstance(e, OSError)


def test_damaged_binary_trace_error_carries_the_byte_offset(tmp_path):
    data = bytearray(KEKS_CPU0.read_bytes())
    # blk_io_trace: 48 bytes, pdu_len (u16) last, then pdu_len bytes. Walk 5 records and
    # zero the sixth's magic.
    offset = 0
    for _ in range(5):
        offset += 48 + struct.unpack_from("<H", data, offset + 46)[0]
    data[offset : offset + 4] = bytes(4)
    damaged = tmp_path / "damaged.blktrace.0"
    damaged.write_bytes(data)
    with pytest.raises(_native.TraceParseError) as err:
        _native.parse_trace([str(damaged)], "blktrace")
    e = err.value
    assert (e.path, e.line, e.byte_offset) == (str(damaged), None, offset)
    assert e.args[0].startswith(f"{damaged} at byte offset {offset}: ")


def test_missing_trace_is_a_sqlwa_error_and_file_not_found(tmp_path):
    missing = tmp_path / "no-such-trace"
    with pytest.raises(FileNotFoundError) as err:
        _native.parse_trace([str(missing)])
    e = err.value
    assert isinstance(e, _native.SqlwaError) and isinstance(e, _native.TraceParseError)
    assert type(e) is _native.TraceFileNotFoundError
    assert (e.filename, e.errno, e.path) == (str(missing), errno.ENOENT, str(missing))
    assert e.args[0].startswith(f"{missing}: ")  # the CLI prints args[0]


def test_unreadable_trace_keeps_the_os_errno(tmp_path):
    # A per-CPU "file" that is a directory: opening works, reading fails with EISDIR.
    (tmp_path / "t.blktrace.0").mkdir()
    with pytest.raises(IsADirectoryError) as err:
        _native.parse_trace([str(tmp_path / "t")])
    e = err.value
    assert type(e) is _native.TraceIsADirectoryError and isinstance(e, _native.SqlwaError)
    assert (e.errno, e.strerror) == (errno.EISDIR, os.strerror(errno.EISDIR))
    assert e.filename == str(tmp_path / "t.blktrace.0")


def test_a_directory_given_as_the_trace_is_an_is_a_directory_error(tmp_path):
    # It was "no such file, and no NAME.blktrace.N files for it", as for a device or a
    # path this user may not look at: now each says what it is.
    with pytest.raises(IsADirectoryError) as err:
        _native.parse_trace([str(tmp_path)])
    assert type(err.value) is _native.TraceIsADirectoryError
    assert err.value.args[0] == f"{tmp_path}: a directory, not a trace file"


def test_trace_os_error_classes():
    for name, base in [
        ("TraceFileNotFoundError", FileNotFoundError),
        ("TracePermissionError", PermissionError),
        ("TraceIsADirectoryError", IsADirectoryError),
        ("TraceOSError", OSError),
    ]:
        cls = getattr(_native, name)
        assert issubclass(cls, _native.TraceParseError) and issubclass(cls, base), name
        assert cls.__module__ == "sqlwa._native"


def test_usage_errors_stay_trace_parse_errors():
    with pytest.raises(_native.TraceParseError, match="unknown trace format") as err:
        _native.parse_trace([str(NVME_TEXT)], "xml")
    assert (err.value.path, err.value.line, err.value.byte_offset) == (None, None, None)
    # Raised by Python code, a TraceParseError still reads its location attributes.
    assert _native.TraceParseError("x").path is None


def test_errors_pickle_as_themselves():
    err = pickle.loads(pickle.dumps(_native.ConfigError("message", "hint")))
    assert type(err) is _native.ConfigError and err.args == ("message", "hint")


# ----------------------------------------------------------------- the module itself


def test_version_is_the_package_version():
    assert _native.__version__ == importlib.metadata.version("sqlwa")


def test_package_is_typed():
    # that the stub matches the module, stubtest checks in scripts/test
    package = Path(_native.__file__).parent
    assert (package / "py.typed").is_file() and (package / "_native.pyi").is_file()


def stub_keys(typed_dict: str) -> set[str]:
    """The keys ``_native.pyi`` declares for one of its TypedDicts (they exist only there)."""
    stub = ast.parse((Path(_native.__file__).parent / "_native.pyi").read_text())
    (cls,) = [node for node in stub.body if isinstance(node, ast.ClassDef) and node.name == typed_dict]
    return {
        node.target.id for node in cls.body if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)
    }


def test_the_stubs_dicts_have_the_keys_the_module_returns(tmp_path):
    # mypy checks callers against the stub's TypedDicts: they must be the dicts the module builds
    _, report = _native.parse_trace([str(NVME_TEXT)])
    assert set(report) == stub_keys("ParseReport")
    assert {fmt for _, fmt in report["files"]} == {"blkparse"}
    assert set(_native.parse_trace_to_parquet([str(KEKS_CPU0)], str(tmp_path / "t.parquet"))) == stub_keys(
        "ParseReport"
    )
    run = run_tiny(tmp_path / "run")
    assert set(run) == stub_keys("WorkloadRun")
    # NotRequired: a replayed log's only, and a run a signal stopped (keep_measured)'s only
    assert set(run["info"]) == stub_keys("WorkloadInfo") - {"replay", "interruption"}


def test_the_stubs_settings_and_replay_dicts_have_the_keys_the_module_returns(tmp_path):
    settings = _native.default_settings()
    assert set(settings) == stub_keys("Settings") == stub_keys("SettingsInput")
    assert settings["journal"] in _native.JOURNAL_MODES and settings["sync"] in _native.SYNC_MODES
    log = tmp_path / "app.jsonl"
    events = [
        {"sqlwa_sql_log": 1, "source": "sql-file", "timed": False},
        {"ev": "open", "conn": 1, "db": "/data/app.db"},
        {"ev": "sql", "conn": 1, "sql": "PRAGMA cache_size=100"},
        {"ev": "sql", "conn": 1, "sql": "CREATE TABLE t (k INTEGER PRIMARY KEY)"},
        {"ev": "sql", "conn": 1, "sql": "INSERT INTO t VALUES (1)"},
        {"ev": "sql", "conn": 1, "sql": "INSERT INTO t VALUES (1)"},  # fails: a constraint
    ]
    log.write_text("".join(json.dumps(event) + "\n" for event in events))
    run = _native.run_workload(_native.scenario_from_file(str(log)), {}, str(tmp_path / "run"))
    summary = run["info"]["replay"]
    assert set(summary) == stub_keys("ReplaySummary")
    assert set(summary["reads"]) == stub_keys("ReadFigures")
    assert set(summary["reads"]["vfs"]) == stub_keys("VfsCounts") == set(_native.FILE_KINDS)
    assert set(summary["reads"]["vfs"]["db"]) == stub_keys("KindCounts") == set(_native.VFS_COUNTERS)
    assert set(summary["skipped"]) == stub_keys("Skipped")
    (failure,) = summary["first_failures"]
    assert set(failure) == stub_keys("Failure")
    (pragma,) = summary["pragmas"]
    assert set(pragma) == stub_keys("LoggedPragma") and pragma["action"] == "kept"
    (database,) = summary["databases"]
    assert set(database) == stub_keys("DatabaseFigures")
    assert set(database["close"]) == stub_keys("Closing") == set(run["info"]["close"])
    assert set(run["info"]["wrote_nothing"]) == stub_keys("WroteNothing")


def test_an_errors_text_is_its_message_not_the_message_and_hint(tmp_path):
    """str() of a native error and of a Python-side one is the message alone (#16, point 14);
    the hint stays in args and hint_of()."""
    from sqlwa.errors import UsageError, hint_of

    with pytest.raises(_native.ConfigError) as err:
        run_tiny(tmp_path, journal="bogus")
    assert str(err.value) == err.value.args[0] and hint_of(err.value) == err.value.args[1]
    assert str(UsageError("the message", "the fix")) == "the message"
    assert hint_of(UsageError("the message", "the fix")) == "the fix"
