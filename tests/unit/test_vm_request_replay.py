"""What the host hands a VM lab guest for a replayed SQL log: the guest sees the host's
files at the same paths but not its working directory, so a log and its `--from`
snapshot given relative must reach it absolute, and load there from any directory (what
the guest is sent replays from another directory)."""

from __future__ import annotations

import json
import os
import sqlite3

from helpers import sqlwa_in_process
from sqlwa.lab.stack import StackSpec
from sqlwa.measure import engine, runner
from sqlwa.measure.request import Output
from sqlwa.measure.targets import vm_lab


def test_a_relative_log_and_snapshot_reach_the_guest_absolute(tmp_path, monkeypatch):
    app = tmp_path / "app"
    app.mkdir()
    header = {"sqlwa_sql_log": 1, "source": "record", "program": None, "sqlite_version": None}
    header |= {"started_unix_ns": None, "timed": False, "redacted": False}
    events = [
        {"ev": "open", "conn": 1, "db": "/data/app.db"},
        {"ev": "sql", "conn": 1, "sql": "INSERT INTO t VALUES (1)"},
    ]
    (app / "app.jsonl").write_text("\n".join(json.dumps(e) for e in [header, *events]) + "\n")
    conn = sqlite3.connect(app / "app.db")
    conn.execute("CREATE TABLE t (v)")
    conn.close()
    monkeypatch.chdir(app)
    request = runner.RunRequest(
        scenario="app.jsonl",
        settings=engine.RunSettings(replay=engine.Replay(from_db="app.db")),
        output=Output(out_dir=tmp_path / "o"),
        stack=StackSpec.from_flat(vm=True),
    )
    sent = vm_lab.guest_request(request, tmp_path / "o")
    assert sent["scenario"] == str(app / "app.jsonl")
    assert sent["settings"]["from_db"] == str(app / "app.db")
    # the guest's side, from another directory: what it was sent replays (at the VFS level here)
    elsewhere = tmp_path / "guest-cwd"
    elsewhere.mkdir()
    os.chdir(elsewhere)
    settings = sent["settings"]
    proc = sqlwa_in_process("run", "-s", sent["scenario"], "--from", settings["from_db"], "--json", "--out", "o")
    assert proc.returncode == 0, proc.stderr
    summary = json.loads(proc.stdout)
    assert summary["commits"] == 1 and summary["config"]["replay"]["failed"] == {}
