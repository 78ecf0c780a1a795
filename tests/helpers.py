"""Shared test helpers: running the CLI as a user would."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path


def sqlwa(*args: str, check: bool = True, timeout: float = 600, **kw) -> subprocess.CompletedProcess:
    """Run ``python -m sqlwa ARGS`` and return the completed process (text mode)."""
    proc = subprocess.run(
        [sys.executable, "-m", "sqlwa", *args], capture_output=True, text=True, timeout=timeout, **kw
    )
    if check and proc.returncode != 0:
        raise AssertionError(f"sqlwa {' '.join(args)} exited {proc.returncode}\n{proc.stdout}\n{proc.stderr}")
    return proc


def run_summary(out: Path, *args: str) -> dict:
    """``sqlwa run ARGS --out OUT`` and its summary.json."""
    sqlwa("run", *args, "--out", str(out))
    return json.loads((out / "summary.json").read_text())
