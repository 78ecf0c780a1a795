"""Filling a lab filesystem to a given level before the workload, as a phone that is
80 % full is not a fresh one."""

from __future__ import annotations

import errno
import os
import random

from sqlwa._system.mounts import syncfs, used_fraction

FILL_DIR = "sqlwa-fill"


def fill_filesystem(mountpoint: str, pct: float, seed: int = 0) -> dict:
    """Fill ``mountpoint`` to ``pct`` percent used (as df counts it) with files of mixed
    sizes (4 KiB .. 16 MiB, log-uniform) in ``sqlwa-fill/``, then sync. Stops early on
    ENOSPC. Returns the target, the achieved percentage (after sync) and what was written.

    Some filesystems (btrfs) account written data in statvfs only after writeback, so the
    level is estimated as max(statvfs, level at the last sync + bytes written since) and
    the filesystem is synced every 32 MiB; that keeps the fill from overshooting.
    """
    fill_dir = os.path.join(mountpoint, FILL_DIR)
    os.makedirs(fill_dir, exist_ok=True)
    rng = random.Random(seed)
    chunk = os.urandom(1 << 20)  # incompressible, so btrfs compression cannot shrink it
    files = written = 0
    target = pct / 100
    for _round in range(64):
        syncfs(mountpoint)
        level = _FillLevel(mountpoint)
        if level.fraction() >= target:
            break
        while level.fraction() < target and level.pending < 32 << 20:
            size = _fill_file_size(rng, level.missing_bytes(target))
            try:
                _write_file(os.path.join(fill_dir, f"f{files:06d}"), size, chunk)
            except OSError as exc:
                if exc.errno != errno.ENOSPC:
                    raise
                syncfs(mountpoint)
                return _fill_report(mountpoint, pct, files, written)
            files += 1
            written += size
            level.pending += size
    syncfs(mountpoint)
    return _fill_report(mountpoint, pct, files, written)


def _fill_report(mountpoint: str, pct: float, files: int, written: int) -> dict:
    return {
        "target_pct": pct,
        "achieved_pct": round(100 * used_fraction(mountpoint), 2),
        "files": files,
        "bytes": written,
    }


class _FillLevel:
    """How full the filesystem is, counting data written since the last sync."""

    def __init__(self, mountpoint: str) -> None:
        self.mountpoint = mountpoint
        st = os.statvfs(mountpoint)
        self.block = st.f_frsize
        self.capacity = (st.f_blocks - st.f_bfree + st.f_bavail) * st.f_frsize
        self.synced_used = (st.f_blocks - st.f_bfree) * st.f_frsize
        self.pending = 0

    def used(self) -> int:
        st = os.statvfs(self.mountpoint)
        return max((st.f_blocks - st.f_bfree) * st.f_frsize, self.synced_used + self.pending)

    def fraction(self) -> float:
        return self.used() / max(1, self.capacity)

    def missing_bytes(self, target: float) -> int:
        return int(target * self.capacity) - self.used()


def _fill_file_size(rng: random.Random, missing: int) -> int:
    size = int(2 ** rng.uniform(12, 24))  # 4 KiB .. 16 MiB
    size = max(4096, min(size, missing))
    return (size + 4095) // 4096 * 4096


def _write_file(path: str, size: int, chunk: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        left = size
        while left:
            n = os.write(fd, chunk[: min(left, len(chunk))])
            left -= n
    finally:
        os.close(fd)
