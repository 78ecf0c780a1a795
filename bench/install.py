"""From nothing to the demo's table, two ways in (#36): `pip install` of the wheel into a
fresh virtualenv, beside the from-source set-up (`./scripts/setup` in a fresh clone with a
fresh CARGO_TARGET_DIR). Each is timed to the end of `sqlwa demo`, whose table is its last
output; as root the demo measures the block level (the target: under 1 minute vs 7).

    python bench/install.py                       # the wheel of target/wheels/ (./scripts/setup)
    python bench/install.py --wheel dist/sqlwa-0.1.0-cp311-abi3-manylinux_2_28_x86_64.whl
    python bench/install.py --source              # and the from-source set-up (many minutes)

pip gets an empty cache of its own (--no-cache-dir), so the dependencies are downloaded
as on a fresh machine. The from-source set-up keeps this machine's cargo registry and uv
cache (a fresh machine would also download the crates and the dev dependencies: that
time is left out, in its favour). The machine may be shared: the load average is printed
beside each figure.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DEMO = ["demo", "-n", "500"]  # the demo as a new user runs it (500 commits per cell is its default)


def timed(argv: list[str], **kw) -> float:
    start = time.monotonic()
    subprocess.run(argv, check=True, **kw)
    return time.monotonic() - start


def load() -> str:
    return "/".join(f"{x:.1f}" for x in os.getloadavg())


def default_wheel() -> Path | None:
    target = Path(os.environ.get("CARGO_TARGET_DIR") or REPO / "target")
    found = sorted([*(target / "wheels").glob("sqlwa-*.whl"), *(REPO / "dist").glob("sqlwa-*.whl")])
    return max(found, key=lambda p: p.stat().st_mtime) if found else None


def by_wheel(wheel: Path, work: Path) -> tuple[float, float, str]:
    """(install s, demo s, load) for pip install of the wheel into a fresh venv."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "CARGO_TARGET_DIR")}
    env["PATH"] = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"  # no cargo
    before = load()
    start = time.monotonic()
    subprocess.run([sys._base_executable, "-m", "venv", str(work / "venv")], check=True, env=env)
    pip = [str(work / "venv/bin/pip"), "install", "-q", "--no-cache-dir", "--disable-pip-version-check"]
    subprocess.run([*pip, str(wheel)], check=True, env=env)
    install = time.monotonic() - start
    demo = timed([str(work / "venv/bin/sqlwa"), *DEMO, "--out", str(work / "demo")], env=env, cwd=work)
    return install, demo, f"{before} → {load()}"


def from_source(work: Path) -> tuple[float, float, str]:
    """(set-up s, demo s, load) for ./scripts/setup in a fresh clone of HEAD, fresh target dir."""
    clone = work / "clone"
    subprocess.run(["git", "clone", "-q", "--no-hardlinks", str(REPO), str(clone)], check=True)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["CARGO_TARGET_DIR"] = str(work / "target")
    env["PYTHON"] = sys._base_executable
    before = load()
    setup = timed([str(clone / "scripts/setup")], env=env, cwd=clone)
    demo = timed([str(clone / ".venv/bin/sqlwa"), *DEMO, "--out", str(work / "demo")], env=env, cwd=clone)
    return setup, demo, f"{before} → {load()}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--wheel", type=Path, default=None, help="the wheel (default: the newest one built)")
    parser.add_argument("--source", action="store_true", help="also time the from-source set-up (many minutes)")
    args = parser.parse_args()
    wheel = args.wheel or default_wheel()
    if wheel is None:
        sys.exit("no wheel: run ./scripts/setup (target/wheels/) or ./scripts/release (dist/)")
    rows = []
    with tempfile.TemporaryDirectory(prefix="sqlwa-bench-install-") as tmp:
        rows.append(("pip install wheel", *by_wheel(wheel, Path(tmp) / "wheel")))
        if args.source:
            rows.append(("./scripts/setup", *from_source(Path(tmp) / "source")))
    print(f"{'way in':<20} {'install s':>10} {'demo s':>8} {'total s':>8}   load (1/5/15 min) before → after")
    for name, install, demo, loads in rows:
        print(f"{name:<20} {install:>10.1f} {demo:>8.1f} {install + demo:>8.1f}   {loads}")
    print(f"{os.cpu_count()} cores; as {'root' if os.geteuid() == 0 else 'a user (VFS level only)'}; {wheel.name}")


if __name__ == "__main__":
    main()
