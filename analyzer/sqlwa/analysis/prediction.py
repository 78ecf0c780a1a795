"""What a commit would cost on another device: its recorded block requests replayed with
service times drawn from that device's profile (seeded Monte Carlo).

The model, per commit (docs/guide/predicting-a-phone.md, "The model"):

* **What the commit waited for.** The requests that completed inside one of the SQL
  thread's sync syscalls (fsync, fdatasync, sync_file_range) — issued inside it, or
  already in flight when it began (a jbd2 commit it had to wait for) — and the reads
  issued in the commit window outside any sync (a read blocks its caller). Requests
  that completed after the sync returned, and background writeback, were not waited for
  and are left out.
* **Order.** The syncs of a commit run one after another (one SQL thread). Inside one
  sync the requests keep their recorded order and dependencies: a request issued after
  another had completed waits for it (the kernel waited: file data before the journal,
  the journal before its commit block); a flush or a FUA write waits for every request
  issued before it; requests without such an edge may overlap, at most the profile's
  queue depth at a time.
* **Time.** Each request's service time is drawn from the profile; a sync's time is the
  longest path through its requests. The commit's predicted latency is its *base* time
  plus its syncs' times. The base is either what the commit measurably spent not waiting
  for the device — its latency minus the time it had a request outstanding at the lab
  device (the union of its waited-for requests' issue-to-completion spans) — or, where
  the run measured it, the SQL thread's CPU time (``cpu_ns``).

Nothing here loops over events; the replay loops over the requests of each distinct
sync *shape* (kinds, sizes, dependencies) once, with NumPy across every commit of that
shape and every draw.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal, Protocol

import numpy as np
import polars as pl

from sqlwa.analysis import windows
from sqlwa.catalogue import DEFAULT_DRAWS, DEFAULT_SEED

#: The kinds of request a profile prices, in the order of the shares reported.
REQUEST_KINDS = ("write", "flush", "fua_write", "read", "discard")
KIND_INDEX = {kind: i for i, kind in enumerate(REQUEST_KINDS)}
#: A flush or a FUA write waits for everything issued before it.
BARRIER_KINDS = frozenset({"flush", "fua_write"})
#: Where a commit's base time comes from: the measured latency minus the recorded device
#: path, or the SQL thread's measured CPU time; ``none`` where the run's clock cannot be
#: used (an emulated CPU's, :mod:`sqlwa.results.emulated`): the device time alone.
BaseSource = Literal["non_io", "cpu", "none"]
BASE_SOURCES: tuple[BaseSource, ...] = ("non_io", "cpu", "none")
CPU_COLUMN = "cpu_ns"


class ServiceModel(Protocol):
    """A device's service times (a profile at one fill level)."""

    #: Requests served at once, at most (1: one after another).
    queue_depth: int

    def service_ms(self, kind: str, nbytes: int, size: int, rng: np.random.Generator) -> np.ndarray:
        """``size`` draws of the time one request of ``kind`` and ``nbytes`` takes, ms."""
        ...


# ------------------------------------------------------------------ the requests


def _kind() -> pl.Expr:
    op = pl.col("operation").cast(pl.String)
    return (
        pl.when(op == "flush")
        .then(pl.lit("flush"))
        .when(op.is_in(["write", "write_zeroes"]) & pl.col("fua"))
        .then(pl.lit("fua_write"))
        .when(op.is_in(["write", "write_zeroes"]))
        .then(pl.lit("write"))
        .when(op == "read")
        .then(pl.lit("read"))
        .when(op.is_in(["discard", "secure_erase"]))
        .then(pl.lit("discard"))
        .otherwise(None)
    )


def device_requests(events: pl.DataFrame, dev: tuple[int, int]) -> pl.DataFrame:
    """Every request issued to ``dev`` with its completion: ``issue_ns``, ``complete_ns``,
    ``kind``, ``bytes``, ``preflush``. A completion is the first of the same operation
    and sector after the issue; the zero-byte completions the kernel's flush machinery
    adds for a preflush or FUA write are not requests. A request whose completion is
    not in the trace (it ended first) is left out."""
    major, minor = dev
    block = events.filter(
        (pl.col("kind") == "block") & (pl.col("dev_major") == major) & (pl.col("dev_minor") == minor)
    ).with_columns(
        pl.col("operation").cast(pl.String).alias("op"),
        # a flush has no sector: its issue says 0, its completion -1
        pl.when(pl.col("operation").cast(pl.String) == "flush").then(0).otherwise(pl.col("sector")).alias("key"),
    )
    issued = block.filter(pl.col("action") == "D").select(
        pl.col("time_ns").cast(pl.Int64).alias("issue_ns"), "op", "key", "bytes", "preflush", "fua", "operation"
    )
    done = block.filter((pl.col("action") == "C") & ((pl.col("op") == "flush") | (pl.col("bytes") > 0))).select(
        pl.col("time_ns").cast(pl.Int64).alias("complete_ns"), "op", "key"
    )
    paired = issued.sort("issue_ns").join_asof(
        done.sort("complete_ns"),
        left_on="issue_ns",
        right_on="complete_ns",
        by=["op", "key"],
        strategy="forward",
        check_sortedness=False,  # both sides are sorted by time above
    )
    return (
        paired.with_columns(_kind().alias("kind"))
        .filter(pl.col("complete_ns").is_not_null() & pl.col("kind").is_not_null())
        .select("issue_ns", "complete_ns", "kind", pl.col("bytes").cast(pl.Int64), "preflush")
    )


def sync_calls(events: pl.DataFrame, tid: int | None) -> pl.DataFrame:
    """The SQL thread's sync syscalls: ``enter_ns``, ``exit_ns`` (null if it never returned
    in the trace)."""
    sync = (pl.col("pid") == tid) & pl.col("name").cast(pl.String).is_in(windows.SYNC_SYSCALLS)
    enters = events.filter((pl.col("kind") == "syscall_enter") & sync).select(
        pl.col("time_ns").cast(pl.Int64).alias("enter_ns"), pl.col("name").cast(pl.String)
    )
    exits = events.filter((pl.col("kind") == "syscall_exit") & sync).select(
        pl.col("time_ns").cast(pl.Int64).alias("exit_ns"), pl.col("name").cast(pl.String)
    )
    return (
        enters.sort("enter_ns")
        .join_asof(
            exits.sort("exit_ns"),
            left_on="enter_ns",
            right_on="exit_ns",
            by="name",
            strategy="forward",
            check_sortedness=False,  # sorted above
        )
        .select("enter_ns", "exit_ns")
    )


def waited_requests(events: pl.DataFrame, commit_windows: pl.DataFrame, dev: tuple[int, int], tid: int | None):
    """The requests each commit waited for (module docstring), one row each: ``commit``,
    ``group`` (one sync, or one read, run-wide), ``group_start_ns``, ``issue_ns``,
    ``complete_ns``, ``kind``, ``bytes``, ``preflush``; ordered by group, then issue."""
    requests = device_requests(events, dev)
    syncs = sync_calls(events, tid).drop_nulls().with_row_index("sync")
    in_sync = (
        requests.sort("complete_ns")
        .join_asof(syncs.sort("enter_ns"), left_on="complete_ns", right_on="enter_ns", strategy="backward")
        .filter(pl.col("exit_ns").is_not_null() & (pl.col("complete_ns") <= pl.col("exit_ns")))
    )
    # which commit a sync belongs to: the window it began in
    sync_commit = windows.assign_windows(
        syncs.select(pl.col("enter_ns").alias("time_ns"), "sync"), commit_windows
    ).select("sync", "commit")
    synced = in_sync.join(sync_commit, on="sync", how="inner").select(
        "commit",
        (pl.col("sync").cast(pl.Int64) * 2).alias("group"),
        pl.col("enter_ns").alias("group_start_ns"),
        "issue_ns",
        "complete_ns",
        "kind",
        "bytes",
        "preflush",
    )
    reads = _reads_outside_syncs(requests, syncs, commit_windows)
    return (
        pl.concat([synced, reads])
        .filter(pl.col("commit").is_not_null())
        .with_columns(pl.col("issue_ns").clip(lower_bound=pl.col("group_start_ns")))
        .sort("group", "issue_ns", "complete_ns")
    )


def _reads_outside_syncs(requests: pl.DataFrame, syncs: pl.DataFrame, commit_windows: pl.DataFrame) -> pl.DataFrame:
    """Reads issued in a commit window outside every sync: each its own group (odd ids)."""
    reads = requests.filter(pl.col("kind") == "read").with_row_index("read")
    if syncs.height:
        after = reads.sort("issue_ns").join_asof(
            syncs.sort("enter_ns"), left_on="issue_ns", right_on="enter_ns", strategy="backward"
        )
        reads = after.filter(pl.col("exit_ns").is_null() | (pl.col("issue_ns") > pl.col("exit_ns"))).drop(
            "sync", "enter_ns", "exit_ns"
        )
    placed = windows.assign_windows(reads.with_columns(pl.col("issue_ns").alias("time_ns")), commit_windows)
    return placed.select(
        "commit",
        (pl.col("read").cast(pl.Int64) * 2 + 1).alias("group"),
        pl.col("issue_ns").alias("group_start_ns"),
        "issue_ns",
        "complete_ns",
        "kind",
        "bytes",
        "preflush",
    )


# ------------------------------------------------------------------ sync shapes


@dataclass(frozen=True)
class Shape:
    """One sync's requests as the replay needs them: kinds, sizes, and for each request
    the earlier ones it waits for."""

    kinds: tuple[str, ...]
    sizes: tuple[int, ...]
    preflush: tuple[bool, ...]
    deps: tuple[tuple[int, ...], ...]


def shape_of(issue: Sequence[int], complete: Sequence[int], kinds, sizes, preflush) -> Shape:
    """The dependencies of one sync's requests (ordered by issue): a request waits for
    each earlier one that had completed when it was issued, and a flush or FUA write for
    every earlier one."""
    deps = []
    for j, kind in enumerate(kinds):
        if kind in BARRIER_KINDS:
            deps.append(tuple(range(j)))
        else:
            deps.append(tuple(i for i in range(j) if complete[i] <= issue[j]))
    return Shape(tuple(kinds), tuple(int(s) for s in sizes), tuple(bool(p) for p in preflush), tuple(deps))


@dataclass
class Groups:
    """Every waited-for sync (or read) of a run, by shape: for each shape, the commit row
    of each instance."""

    shapes: list[Shape] = field(default_factory=list)
    commit_rows: list[np.ndarray] = field(default_factory=list)


def group_shapes(requests: pl.DataFrame, commit_index: np.ndarray) -> Groups:
    """Cut ``requests`` (:func:`waited_requests`) into groups and collect them by shape.
    ``commit_index`` is the commits' ``index`` column: a group's commit row is its
    position there."""
    row_of = {int(index): row for row, index in enumerate(commit_index)}
    by_shape: dict[Shape, list[int]] = {}
    parts = requests.filter(pl.col("commit").is_in(list(row_of))).partition_by("group", maintain_order=True)
    for part in parts:
        issue = part["issue_ns"].to_list()
        complete = part["complete_ns"].to_list()
        shape = shape_of(issue, complete, part["kind"].to_list(), part["bytes"].to_list(), part["preflush"].to_list())
        by_shape.setdefault(shape, []).append(row_of[int(part["commit"][0])])
    groups = Groups()
    for shape, rows in by_shape.items():
        groups.shapes.append(shape)
        groups.commit_rows.append(np.asarray(rows, dtype=np.int64))
    return groups


def recorded_device_ms(requests: pl.DataFrame, commit_index: np.ndarray) -> np.ndarray:
    """How long each commit had a request it waited for outstanding at the lab device
    (ms): the union of its requests' issue-to-completion spans, so requests served one
    after another add up and requests in flight together count once. This is the part
    of the measured latency the profile replaces; a request's own span cannot stand for
    its service time, as it includes its wait behind the others."""
    ordered = requests.sort("group", "issue_ns")
    covered_until = pl.col("complete_ns").cum_max().shift(1).over("group")
    start = pl.max_horizontal(pl.col("issue_ns"), covered_until.fill_null(pl.col("issue_ns")))
    new_time = (pl.col("complete_ns") - start).clip(lower_bound=0)
    per_commit = ordered.group_by("commit").agg((new_time.sum().cast(pl.Float64) / 1e6).alias("ms"))
    found = dict(zip(per_commit["commit"].to_list(), per_commit["ms"].to_list()))
    return np.array([found.get(int(index), 0.0) for index in commit_index])


# ------------------------------------------------------------------ the replay


@dataclass
class Replay:
    """Each instance's longest path (ms) and how its time splits by request kind."""

    makespan: np.ndarray  # (samples,)
    by_kind: np.ndarray  # (kinds, samples)


def replay(shape: Shape, service: np.ndarray, queue_depth: int | None) -> Replay:
    """List-schedule one shape's requests in order, vectorised over ``service``'s columns
    (samples): a request starts when the requests it waits for are done and a queue slot
    is free (``queue_depth`` None: no limit). The time of the path that ends last is the
    makespan; ``by_kind`` follows that path back (through the request it waited for, or
    the one whose slot it took) to say which kinds of request it spent its time on."""
    n, samples = service.shape
    depth = n if queue_depth is None else max(1, min(queue_depth, n))
    cols = np.arange(samples)
    kinds = len(REQUEST_KINDS)
    finish = np.zeros((n, samples))
    path = np.zeros((n, kinds, samples))
    slot_free = np.zeros((depth, samples))
    slot_path = np.zeros((depth, kinds, samples))
    for r in range(n):
        ready, ready_path = _ready(shape.deps[r], finish, path, cols, samples, kinds)
        slot = slot_free.argmin(axis=0)
        free_at = slot_free[slot, cols]
        waits_for_slot = free_at > ready
        start = np.where(waits_for_slot, free_at, ready)
        before = np.where(waits_for_slot, slot_path[slot, :, cols].T, ready_path)
        finish[r] = start + service[r]
        path[r] = before
        path[r, KIND_INDEX[shape.kinds[r]]] += service[r]
        slot_free[slot, cols] = finish[r]
        slot_path[slot, :, cols] = path[r].T
    last = finish.argmax(axis=0)
    return Replay(finish[last, cols], path[last, :, cols].T)


def _ready(deps: tuple[int, ...], finish, path, cols, samples: int, kinds: int):
    """When a request's dependencies are all done, and the path that ends there."""
    if not deps:
        return np.zeros(samples), np.zeros((kinds, samples))
    dep_finish = finish[list(deps)]
    latest = dep_finish.argmax(axis=0)
    chosen = np.asarray(deps)[latest]
    return dep_finish[latest, cols], path[chosen, :, cols].T


def draw_services(shape: Shape, model: ServiceModel, size: int, rng: np.random.Generator) -> np.ndarray:
    """(requests, size) service times for one shape; a write with the preflush flag (a
    trace from a device the kernel sends flush+write to as one request) pays a flush too."""
    rows = []
    for kind, nbytes, preflush in zip(shape.kinds, shape.sizes, shape.preflush):
        time = model.service_ms(kind, nbytes, size, rng)
        if preflush and kind != "flush":
            time = time + model.service_ms("flush", 0, size, rng)
        rows.append(time)
    return np.stack(rows) if rows else np.zeros((0, size))


# ------------------------------------------------------------------ per commit


@dataclass
class PerCommit:
    """A run's measured commits, an array each with one row per commit (in the order of
    ``index``): they are sliced, pooled and tabled (:meth:`frame`) together, apart from
    the facts of the whole run (:class:`Prediction`)."""

    index: np.ndarray  # the commits' index
    measured_ms: np.ndarray  # (commits,)
    base_ms: np.ndarray  # (commits,): the part not priced by the device
    recorded_device_ms: np.ndarray  # (commits,): time with a waited-for request outstanding at the lab device
    samples_ms: np.ndarray  # (commits, draws)
    requests: np.ndarray  # (commits,): requests replayed per commit

    @property
    def draws(self) -> int:
        return self.samples_ms.shape[1]

    def frame(self) -> pl.DataFrame:
        """One row per commit: measured, base, recorded device path, and the predicted
        latency's mean, p50 and p99 over the draws (ms)."""
        return pl.DataFrame(
            {
                "index": self.index,
                "measured_ms": self.measured_ms,
                "base_ms": self.base_ms,
                "recorded_device_ms": self.recorded_device_ms,
                "requests": self.requests,
                "predicted_mean_ms": self.samples_ms.mean(axis=1),
                "predicted_p50_ms": np.quantile(self.samples_ms, 0.5, axis=1),
                "predicted_p99_ms": np.quantile(self.samples_ms, 0.99, axis=1),
            }
        )


@dataclass
class Prediction:
    """Predicted latencies of a run's measured commits on one device: the commits' own
    figures, and what holds for the run as a whole."""

    per_commit: PerCommit
    by_kind_ms: np.ndarray  # (kinds,): predicted device time by kind, summed over every sample
    base_source: BaseSource
    clamped: int = 0  # commits whose base came out below 0 (set to 0)
    timings_emulated: bool = False  # per_commit.measured_ms is an emulated CPU's (sqlwa.results.emulated)

    @property
    def draws(self) -> int:
        return self.per_commit.draws


def predict(
    requests: pl.DataFrame,
    commits: pl.DataFrame,
    model: ServiceModel,
    draws: int = DEFAULT_DRAWS,
    seed: int = DEFAULT_SEED,
    base: BaseSource = "non_io",
) -> Prediction:
    """Predict every commit of ``commits`` (the measured ones: ``index``, ``latency_ns``,
    and ``cpu_ns`` for ``base="cpu"``) from its ``requests`` (:func:`waited_requests`)."""
    measured = commits.sort("index")
    index = measured["index"].to_numpy()
    latency = measured["latency_ns"].cast(pl.Float64).to_numpy() / 1e6
    groups = group_shapes(requests, index)
    rng = np.random.default_rng(seed)
    recorded = recorded_device_ms(requests, index)
    predicted = np.zeros((len(index), draws))
    by_kind = np.zeros(len(REQUEST_KINDS))
    counts = np.zeros(len(index), dtype=np.int64)
    for shape, rows in zip(groups.shapes, groups.commit_rows):
        np.add.at(counts, rows, len(shape.kinds))
        service = draw_services(shape, model, len(rows) * draws, rng)
        result = replay(shape, service, model.queue_depth)
        np.add.at(predicted, rows, result.makespan.reshape(len(rows), draws))
        by_kind += result.by_kind.sum(axis=1)
    base_ms, clamped = base_times(measured, latency, recorded, base)
    return Prediction(
        per_commit=PerCommit(
            index=index,
            measured_ms=latency,
            base_ms=base_ms,
            recorded_device_ms=recorded,
            samples_ms=predicted + base_ms[:, None],
            requests=counts,
        ),
        by_kind_ms=by_kind,
        base_source=base,
        clamped=clamped,
    )


def base_times(commits: pl.DataFrame, latency: np.ndarray, recorded: np.ndarray, base: BaseSource):
    """Each commit's base time (ms) and how many came out negative and were set to 0 (the
    trace's microsecond timestamps against the engine's nanosecond latency)."""
    if base == "cpu":
        return commits[CPU_COLUMN].cast(pl.Float64).to_numpy() / 1e6, 0
    if base == "none":
        return np.zeros(len(latency)), 0
    non_io = latency - recorded
    return np.maximum(non_io, 0.0), int((non_io < 0).sum())


# ------------------------------------------------------------------ summaries


@dataclass(frozen=True)
class Predicted:
    """The predicted latency over the pooled samples: its quantiles, frame-budget misses
    and the share of it each part took; what a table puts beside :class:`Measured`."""

    p50_ms: float
    p90_ms: float
    p99_ms: float
    frame_budget_miss_pct: float
    shares: dict[str, float]  # of the predicted latency: "base" and each request kind


@dataclass(frozen=True)
class Measured:
    """The measured figures the predicted ones stand beside. They are None together where
    they are an emulated CPU's and were kept out (the base is then "none")."""

    p50_ms: float | None = None
    p99_ms: float | None = None
    frame_budget_miss_pct: float | None = None

    @property
    def kept_out(self) -> bool:
        """The figures were kept out (all of them are None)."""
        return self.p50_ms is None


@dataclass(frozen=True)
class Summary:
    """A prediction's headline figures over the pooled samples of one or more runs."""

    commits: int
    draws: int
    predicted: Predicted
    measured: Measured
    base_source: BaseSource
    requests_per_commit: float
    clamped: int
    timings_emulated: bool = False  # some run's measured timings are an emulated CPU's


def summarise(predictions: Sequence[Prediction], budget_ms: float) -> Summary:
    """Quantiles and frame-budget misses over every sample of ``predictions`` pooled (the
    repeats of one configuration), beside the measured ones, and each part's share."""
    samples = np.concatenate([p.per_commit.samples_ms.ravel() for p in predictions])
    measured = np.concatenate([p.per_commit.measured_ms for p in predictions])
    total = float(samples.sum()) or 1.0
    base = float(sum(p.per_commit.base_ms.sum() * p.draws for p in predictions))
    by_kind = np.sum([p.by_kind_ms for p in predictions], axis=0)
    shares = {"base": base / total, **{kind: float(by_kind[i]) / total for i, kind in enumerate(REQUEST_KINDS)}}
    emulated = any(p.timings_emulated for p in predictions)
    shown = not any(p.timings_emulated and p.base_source == "none" for p in predictions)
    return Summary(
        commits=len(measured),
        draws=predictions[0].draws,
        predicted=Predicted(
            p50_ms=float(np.quantile(samples, 0.5)),
            p90_ms=float(np.quantile(samples, 0.9)),
            p99_ms=float(np.quantile(samples, 0.99)),
            frame_budget_miss_pct=100.0 * float((samples > budget_ms).mean()),
            shares=shares,
        ),
        measured=Measured(
            p50_ms=float(np.quantile(measured, 0.5)),
            p99_ms=float(np.quantile(measured, 0.99)),
            frame_budget_miss_pct=100.0 * float((measured > budget_ms).mean()),
        )
        if shown
        else Measured(),
        base_source=predictions[0].base_source,
        requests_per_commit=float(np.mean(np.concatenate([p.per_commit.requests for p in predictions]))),
        clamped=sum(p.clamped for p in predictions),
        timings_emulated=emulated,
    )
