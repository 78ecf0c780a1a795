"""From nothing to the demo's table, the ways in (#36): the wheel installed into a fresh
virtualenv by `pip install`, by `uv pip install` and by `uv tool install` (uv itself from
PyPI), beside the from-source set-up (`./scripts/setup` in a fresh clone with a fresh
CARGO_TARGET_DIR). Each is timed to the end of `sqlwa demo`, whose table is its last
output; as root the demo measures the block level. Target: under 1 minute from `pip
install` to the table (the from-source set-up took 7 minutes); PASS or FAIL is printed.

    python bench/install.py                       # the wheel of target/wheels/ (./scripts/setup)
    python bench/install.py --wheel dist/sqlwa-0.1.0-cp311-abi3-manylinux_2_28_x86_64.whl
    python bench/install.py --breakdown           # and where pip's time goes: download, install, per package
    python bench/install.py --source              # and the from-source set-up (many minutes)

Every installer starts with an empty cache of its own (pip --no-cache-dir, a new
UV_CACHE_DIR), so the dependencies are downloaded as on a fresh machine. The demo runs
once, from pip's virtualenv (the same program whichever installer put it there); a way
in's total is its install time plus that demo time. The from-source set-up keeps this
machine's cargo registry and uv cache (a fresh machine would also download the crates and
the dev dependencies: that time is left out, in its favour). The machine may be shared:
the load average is printed beside each figure.
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
DEMO = ["demo"]  # as a new user runs it: its default commits per cell
TARGET_S = 60.0  # #36: under 1 minute from `pip install` to the demo's table
USER_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"  # no cargo


def load() -> str:
    return "/".join(f"{x:.1f}" for x in os.getloadavg())


def timed(argv: list[str], **kw) -> float:
    start = time.monotonic()
    subprocess.run(argv, check=True, **kw)
    return time.monotonic() - start


def default_wheel() -> Path | None:
    target = Path(os.environ.get("CARGO_TARGET_DIR") or REPO / "target")
    found = sorted([*(target / "wheels").glob("sqlwa-*.whl"), *(REPO / "dist").glob("sqlwa-*.whl")])
    return max(found, key=lambda p: p.stat().st_mtime) if found else None


def user_env(work: Path) -> dict[str, str]:
    """A user who has only the wheel: no PYTHONPATH, no virtualenv, no cargo on PATH, a
    HOME (and so caches) of its own."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "CARGO_TARGET_DIR")}
    env |= {"PATH": USER_PATH, "HOME": str(work), "UV_CACHE_DIR": str(work / "uv-cache")}
    env.pop("PIP_FIND_LINKS", None)  # from the index, as a fresh machine has it
    return env


def venv(path: Path, env: dict[str, str], pip: bool = True) -> Path:
    subprocess.run(
        [sys._base_executable, "-m", "venv", *([] if pip else ["--without-pip"]), str(path)], check=True, env=env
    )
    return path


PIP = ["install", "-q", "--no-cache-dir", "--disable-pip-version-check"]


def by_pip(wheel: Path, work: Path) -> float:
    env = user_env(work)
    start = time.monotonic()
    v = venv(work / "venv", env)
    subprocess.run([str(v / "bin/pip"), *PIP, str(wheel)], check=True, env=env)
    return time.monotonic() - start


def uv_from_pypi(work: Path) -> tuple[Path, float]:
    """uv as a new user gets it: `pip install uv` into a virtualenv of its own."""
    env = user_env(work)
    start = time.monotonic()
    v = venv(work / "uv-venv", env)
    subprocess.run([str(v / "bin/pip"), *PIP, "uv"], check=True, env=env)
    return v / "bin/uv", time.monotonic() - start


def by_uv_pip(uv: Path, wheel: Path, work: Path) -> float:
    env = user_env(work)
    start = time.monotonic()
    v = venv(work / "venv-uv", env, pip=False)
    subprocess.run(
        [str(uv), "pip", "install", "-q", "--python", str(v / "bin/python"), str(wheel)], check=True, env=env
    )
    return time.monotonic() - start


def by_uv_tool(uv: Path, wheel: Path, work: Path) -> float:
    env = user_env(work) | {"UV_TOOL_DIR": str(work / "tools"), "UV_TOOL_BIN_DIR": str(work / "bin")}
    env["UV_CACHE_DIR"] = str(work / "uv-tool-cache")  # empty: not the one `uv pip install` just filled
    start = time.monotonic()
    subprocess.run(
        [str(uv), "tool", "install", "-q", "--python", sys._base_executable, str(wheel)], check=True, env=env
    )
    took = time.monotonic() - start
    subprocess.run([str(work / "bin/sqlwa"), "--version"], check=True, env=env, stdout=subprocess.DEVNULL)
    return took


def breakdown(wheel: Path, work: Path) -> None:
    """pip's work in two steps: download (resolve and fetch everything) and install from
    those files (unpack, compile bytecode); and what each package weighs."""
    env = user_env(work)
    v = venv(work / "venv-split", env)
    files = work / "downloaded"
    fetch = timed([str(v / "bin/pip"), "download", "-q", "--no-cache-dir", "-d", str(files), str(wheel)], env=env)
    install = timed([str(v / "bin/pip"), *PIP, "--no-index", "--find-links", str(files), str(wheel)], env=env)
    print(f"pip, split in two: download {fetch:.1f} s, install {install:.1f} s (unpack, bytecode); load {load()}")
    sizes = sorted(((p.stat().st_size, p.name) for p in files.glob("*.whl")), reverse=True)
    total = sum(size for size, _ in sizes)
    for size, name in sizes:
        print(f"  {size / 1e6:7.1f} MB  {100 * size / total:4.0f}%  {name}")
    print(f"  {total / 1e6:7.1f} MB  downloaded")


def from_source(work: Path) -> tuple[float, float, str]:
    """(set-up s, demo s, commit) for ./scripts/setup in a fresh clone of HEAD, fresh target dir."""
    clone = work / "clone"
    subprocess.run(["git", "clone", "-q", "--no-hardlinks", str(REPO), str(clone)], check=True)
    commit = subprocess.run(
        ["git", "-C", str(clone), "log", "-1", "--format=%h %s"], capture_output=True, text=True, check=True
    ).stdout.strip()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["CARGO_TARGET_DIR"] = str(work / "target")
    env["PYTHON"] = sys._base_executable
    setup = timed([str(clone / "scripts/setup")], env=env, cwd=clone)
    demo = timed([str(clone / ".venv/bin/sqlwa"), *DEMO, "--out", str(work / "demo")], env=env, cwd=clone)
    return setup, demo, commit


def verdict(total: float) -> str:
    return f"{total / TARGET_S:4.2f}× target  {'PASS' if total <= TARGET_S else 'FAIL'}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--wheel", type=Path, default=None, help="the wheel (default: the newest one built)")
    parser.add_argument("--breakdown", action="store_true", help="also pip's download and install apart, per package")
    parser.add_argument("--source", action="store_true", help="also time the from-source set-up (many minutes)")
    args = parser.parse_args()
    wheel = args.wheel or default_wheel()
    if wheel is None:
        print(
            "install.py: no wheel: run ./scripts/setup (target/wheels/) or ./scripts/release (dist/)", file=sys.stderr
        )
        sys.exit(2)
    rows: list[tuple[str, float, str]] = []
    with tempfile.TemporaryDirectory(prefix="sqlwa-bench-install-") as tmp:
        work = Path(tmp)
        rows.append(("pip install", by_pip(wheel, work / "pip"), load()))
        demo_load = load()
        demo = timed(
            [str(work / "pip/venv/bin/sqlwa"), *DEMO, "--out", str(work / "demo")], env=user_env(work / "pip"), cwd=work
        )
        demo_load += f" → {load()}"
        uv, uv_took = uv_from_pypi(work / "uv")
        rows.append(("uv pip install", by_uv_pip(uv, wheel, work / "uv"), load()))
        rows.append(("uv tool install", by_uv_tool(uv, wheel, work / "uv"), load()))
        if args.breakdown:
            breakdown(wheel, work / "split")
        source = from_source(work / "source") if args.source else None
        source_load = load()
    print(f"wheel: {wheel.name}, {wheel.stat().st_size / 1e6:.1f} MB")
    print(f"demo: {demo:.1f} s (`sqlwa {' '.join(DEMO)}` from pip's virtualenv; load {demo_load})")
    print(f"uv itself from PyPI (pip install uv): {uv_took:.1f} s, not counted below")
    print(f"{'way in':<22} {'install s':>10} {'demo s':>8} {'total s':>8}   vs {TARGET_S:.0f} s      load (1/5/15 min)")
    for name, install, loads in rows:
        print(f"{name:<22} {install:>10.1f} {demo:>8.1f} {install + demo:>8.1f}   {verdict(install + demo)}   {loads}")
    if source is not None:
        setup, source_demo, commit = source
        total = setup + source_demo
        ratio = total / (rows[0][1] + demo)
        print(
            f"{'./scripts/setup':<22} {setup:>10.1f} {source_demo:>8.1f} {total:>8.1f}   {verdict(total)}   {source_load}"
        )
        print(f"the wheel by pip: {ratio:.1f}× faster than the from-source set-up (a clone of {commit})")
    root = "root" if os.geteuid() == 0 else "a user (VFS level only)"
    print(f"{os.cpu_count()} cores; as {root}; target: `pip install` to the demo's table under {TARGET_S:.0f} s")
    print("PASS" if rows[0][1] + demo <= TARGET_S else "FAIL", "(pip install + demo)")


if __name__ == "__main__":
    main()
