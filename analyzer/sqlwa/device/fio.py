"""The fio jobs that measure a device profile, and fio's JSON output read into a level.

One job file serves both ways in: ``sqlwa device probe`` runs it section by section in a
directory of its own, and a phone's owner runs it whole with their own fio
(``sqlwa device jobfile``) and imports the JSON (``sqlwa device import``). fio measures;
sqlwa only reads what fio reports (its ``lat_ns`` percentiles, ``iops``, ``bw_bytes``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from sqlwa.device.profile import Distribution, Level
from sqlwa.errors import UsageError

DATA_FILE = "sqlwa-probe.dat"
PERCENTILES = (1, 5, 10, 20, 30, 40, 50, 60, 70, 80, 90, 95, 98, 99, 99.5, 99.9, 99.99)
QUEUE_DEPTH_PROBED = 8


@dataclass(frozen=True)
class Job:
    name: str
    what: str
    options: tuple[str, ...]


#: The jobs, in the order they run; each waits for the one before (``stonewall``).
JOBS = (
    Job(
        "layout",
        "writes the data file once, sequentially: the jobs after it overwrite written blocks, so a sync has "
        "no allocation to commit and a read reads the device (not measured)",
        ("rw=write", "bs=1m", "time_based=0", "runtime=3600"),
    ),
    Job(
        "write_fdatasync",
        "4 KiB random writes, O_DIRECT, each followed by fdatasync: the writes give `write`, "
        "the fdatasyncs (a cache flush holding one 4 KiB write) give `flush`",
        ("rw=randwrite", "fdatasync=1"),
    ),
    Job(
        "write_dsync",
        "4 KiB random writes with O_DSYNC: write and flush in one call, or one FUA write where the device has "
        "FUA: `durable_write` (and `fua_write` on a FUA device)",
        ("rw=randwrite", "sync=dsync"),
    ),
    Job("read", "4 KiB random reads, O_DIRECT: `read`", ("rw=randread",)),
    Job("write_qd1", "4 KiB random writes, one at a time, no syncs: IOPS", ("rw=randwrite",)),
    Job(
        "write_qd8",
        f"the same with {QUEUE_DEPTH_PROBED} in flight (libaio): IOPS; their ratio to one at a time is the queue depth",
        ("rw=randwrite", "ioengine=libaio", f"iodepth={QUEUE_DEPTH_PROBED}"),
    ),
    Job("seq_write", "1 MiB sequential writes, O_DIRECT: bandwidth", ("rw=write", "bs=1m")),
)
JOB_NAMES = tuple(job.name for job in JOBS)
MEASURED_JOBS = JOBS[1:]


def job_file(seconds: float, size_mib: int) -> str:
    """The job file: every job for ``seconds`` on one data file of ``size_mib`` MiB in
    the directory fio runs in."""
    header = [
        "; sqlwa device probe: the fio jobs a device profile is made of (sqlwa device jobfile).",
        f"; Run in an empty directory on the storage to measure; writes only {DATA_FILE} there ({size_mib} MiB):",
        ";   fio --output-format=json --output=probe.json sqlwa-probe.fio",
        "; then: sqlwa device import probe.json -o phone.toml",
        "[global]",
        f"filename={DATA_FILE}",
        f"size={size_mib}m",
        "bs=4k",
        "direct=1",
        "ioengine=psync",
        "iodepth=1",
        # jobs as threads of one fio process, not forked children: when the probe stops
        # fio (or dies), nothing of it goes on writing
        "thread",
        "fallocate=none",
        "time_based=1",
        f"runtime={round(seconds * 1000)}ms",  # fio reads a bare number as whole seconds
        "lat_percentiles=1",
        f"percentile_list={':'.join(f'{p:g}' for p in PERCENTILES)}",
        "stonewall",
    ]
    body = []
    for job in JOBS:
        body += ["", f"; {job.what}", f"[{job.name}]", *job.options]
    return "\n".join(header + body) + "\n"


# ------------------------------------------------------------------ reading fio's JSON


def read_json(text: str, where: str) -> dict:
    """fio's JSON document; lines fio printed before it (notes, warnings) are skipped."""
    start = text.find("{")
    try:
        data = json.loads(text[start:]) if start >= 0 else None
    except json.JSONDecodeError as exc:
        raise UsageError(
            f"{where} is not fio's JSON output: {exc.msg} at character {start + exc.pos}",
            "run fio with --output-format=json",
        ) from None
    if not isinstance(data, dict) or not isinstance(data.get("jobs"), list) or "fio version" not in data:
        raise UsageError(
            f"{where} is not fio's JSON output (no 'fio version' and 'jobs')", "run fio --output-format=json"
        )
    return data


def jobs_by_name(data: dict, where: str) -> dict[str, dict]:
    """The jobs sqlwa knows, by name; a job fio reports an error for is refused."""
    found = {}
    for job in data["jobs"]:
        if not isinstance(job, dict) or job.get("jobname") not in JOB_NAMES:
            continue
        if job.get("error"):
            raise UsageError(
                f"{where}: fio's job {job['jobname']} failed with error {job['error']}",
                "see fio's messages; the job file's sections can be run one at a time with --section",
            )
        found[job["jobname"]] = job
    if not found:
        raise UsageError(
            f"{where} holds none of sqlwa's fio jobs ({', '.join(JOB_NAMES)})",
            "run the job file of `sqlwa device jobfile`",
        )
    return found


def distribution(side: Any, stat: str) -> Distribution | None:
    """A fio latency block in ms: ``lat_ns`` (submission to completion), or ``clat_ns``
    where fio gave percentiles for that only (a run without lat_percentiles=1; with psync
    the two differ by the submission, about a microsecond); None without samples."""
    if not isinstance(side, dict):
        return None
    stats = side.get(stat)
    if stat == "lat_ns" and not (stats or {}).get("percentile") and (side.get("clat_ns") or {}).get("percentile"):
        stats = side["clat_ns"]
    if not isinstance(stats, dict) or not stats.get("N"):
        return None
    percentiles = {round(float(p), 4): float(v) / 1e6 for p, v in (stats.get("percentile") or {}).items()}
    return Distribution(
        percentiles_ms=percentiles,
        mean_ms=float(stats["mean"]) / 1e6,
        min_ms=float(stats["min"]) / 1e6,
        max_ms=float(stats["max"]) / 1e6,
        samples=int(stats["N"]),
    )


def level_from_jobs(jobs: dict[str, dict], fua: bool | None, fill_pct: float | None) -> Level:
    """One profile level from the jobs fio ran (any subset of :data:`JOBS`)."""
    level = Level(fill_pct=fill_pct)
    measures = {
        "write": _side(jobs, "write_fdatasync", "write", "lat_ns"),
        "flush": _side(jobs, "write_fdatasync", "sync", "lat_ns"),
        "durable_write": _side(jobs, "write_dsync", "write", "lat_ns"),
        "read": _side(jobs, "read", "read", "lat_ns"),
    }
    level.measures = {name: dist for name, dist in measures.items() if dist is not None}
    if fua and "durable_write" in level.measures:
        level.measures["fua_write"] = level.measures["durable_write"]
    level.write_iops_qd1 = _number(jobs, "write_qd1", "iops")
    level.write_iops_qd8 = _number(jobs, "write_qd8", "iops")
    if level.write_iops_qd1 and level.write_iops_qd8:
        ratio = level.write_iops_qd8 / level.write_iops_qd1
        level.queue_depth = max(1, min(QUEUE_DEPTH_PROBED, round(ratio)))
    bandwidth = _number(jobs, "seq_write", "bw_bytes")
    level.seq_write_mib_s = bandwidth / (1 << 20) if bandwidth else None
    return level


def _side(jobs: dict[str, dict], job: str, side: str, stat: str) -> Distribution | None:
    return distribution(jobs.get(job, {}).get(side), stat)


def _number(jobs: dict[str, dict], job: str, key: str) -> float | None:
    value = (jobs.get(job, {}).get("write") or {}).get(key)
    return float(value) if isinstance(value, (int, float)) and value > 0 else None


def disk_names(data: dict) -> list[str]:
    """The block devices fio's ``disk_util`` saw busy (on a phone: which one /data is on)."""
    return [str(d["name"]) for d in data.get("disk_util", []) if isinstance(d, dict) and "name" in d]
