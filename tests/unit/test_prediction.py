"""The replay of a commit's requests on a device profile, on small hand-made traces whose
right answers are worked out here: which requests a commit waited for, their order and
overlap, the queue depth, the base time, and the shares by kind."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest

from sqlwa.analysis import prediction as P

DEV = (7, 0)
TID = 100
MS = 1_000_000


class Trace:
    """Builds an event table as the parser writes it (the columns prediction reads)."""

    def __init__(self) -> None:
        self.rows: list[dict] = []

    def add(self, t_ms: float, kind: str, **fields) -> Trace:
        row = {
            "kind": kind,
            "time_ns": int(t_ms * MS),
            "dev_major": DEV[0],
            "dev_minor": DEV[1],
            "pid": TID,
            "action": "",
            "operation": "none",
            "sector": 0,
            "bytes": 0,
            "preflush": False,
            "fua": False,
            "name": "",
            "text": "",
        }
        row.update(fields)
        self.rows.append(row)
        return self

    def commit(self, index: int, begin_ms: float, end_ms: float) -> Trace:
        self.add(begin_ms, "marker", name="txn_begin", text=f"sqlwa txn_begin i={index} warmup=0")
        return self.add(end_ms, "marker", name="txn_end", text=f"sqlwa txn_end i={index}")

    def sync(self, enter_ms: float, exit_ms: float, name: str = "fdatasync", pid: int = TID) -> Trace:
        self.add(enter_ms, "syscall_enter", name=name, pid=pid)
        return self.add(exit_ms, "syscall_exit", name=name, pid=pid)

    def request(self, issue_ms: float, done_ms: float, op: str = "write", sector: int = 8, nbytes: int = 4096, **kw):
        self.add(issue_ms, "block", action="D", operation=op, sector=sector, bytes=nbytes, pid=999, **kw)
        done_sector = (1 << 64) - 1 if op == "flush" else sector
        return self.add(done_ms, "block", action="C", operation=op, sector=done_sector, bytes=nbytes, pid=999)

    def frame(self) -> pl.DataFrame:
        schema = {"time_ns": pl.UInt64, "sector": pl.UInt64, "bytes": pl.UInt64, "pid": pl.UInt32}
        frame = pl.DataFrame(self.rows).with_columns(*[pl.col(c).cast(t) for c, t in schema.items()])
        return frame.sort("time_ns")


class Constant:
    """Every request of a kind takes the same time: the answers are sums."""

    def __init__(self, queue_depth: int = 1, **ms: float) -> None:
        self.queue_depth = queue_depth
        self.ms = {"write": 1.0, "flush": 3.0, "fua_write": 2.5, "read": 0.5, "discard": 0.0, **ms}

    def service_ms(self, kind: str, nbytes: int, size: int, rng: np.random.Generator) -> np.ndarray:
        return np.full(size, self.ms[kind])


def windows_of(events: pl.DataFrame) -> pl.DataFrame:
    from sqlwa.analysis import windows

    return windows.commit_windows(events)


def commits_of(events: pl.DataFrame, **columns) -> pl.DataFrame:
    w = windows_of(events)
    latency = (w["win_end_ns"].cast(pl.Int64) - w["win_start_ns"].cast(pl.Int64)).alias("latency_ns")
    return w.select("index").with_columns(latency, **{k: pl.Series(v) for k, v in columns.items()})


def predicted(trace: Trace, model, **kw) -> P.Prediction:
    events = trace.frame()
    requests = P.waited_requests(events, windows_of(events), DEV, TID)
    return P.predict(requests, commits_of(events, **kw.pop("columns", {})), model, draws=kw.pop("draws", 4), **kw)


def ext4_fdatasync(t: Trace, at: float) -> Trace:
    """One ext4 fdatasync as the lab records it: the file's data, then (after it
    completed) jbd2's journal blocks, a flush, the commit block, a flush; each request
    issued only once the one before it had completed. Recorded device path 4 ms."""
    t.sync(at, at + 5.0)
    t.request(at + 0.1, at + 0.6, sector=800, nbytes=8192)  # data
    t.request(at + 0.8, at + 1.3, sector=1600, nbytes=28672)  # journal blocks
    t.request(at + 1.4, at + 2.9, op="flush", sector=0, nbytes=0)
    t.request(at + 3.0, at + 3.5, sector=1700)  # commit block
    return t.request(at + 3.6, at + 4.6, op="flush", sector=0, nbytes=0)


def test_a_chain_of_requests_is_their_sum_plus_what_the_commit_spent_elsewhere() -> None:
    t = Trace().commit(1, 0.0, 12.0)
    ext4_fdatasync(t, 1.0)
    p = predicted(t, Constant())
    # recorded: 0.5 + 0.5 + 1.5 + 0.5 + 1.0 = 4.0 ms of device time on the path, so 8 ms
    # of the 12 ms commit were spent elsewhere; predicted: 8 + (1 + 1 + 3 + 1 + 3) = 17
    assert p.per_commit.recorded_device_ms.tolist() == pytest.approx([4.0])
    assert p.per_commit.base_ms.tolist() == pytest.approx([8.0])
    assert p.per_commit.samples_ms[0].tolist() == pytest.approx([17.0] * 4)
    assert p.per_commit.requests.tolist() == [5]


def test_syncs_of_a_commit_add_up_and_what_was_not_waited_for_is_left_out() -> None:
    t = Trace().commit(1, 0.0, 30.0)
    ext4_fdatasync(t, 1.0)  # 9 ms on the profile
    t.sync(10.0, 12.0).request(10.1, 10.5, sector=40).request(10.6, 11.0, op="flush", sector=0, nbytes=0)  # 4 ms
    t.request(13.0, 14.0, sector=4000)  # background writeback between syncs: nobody waited
    t.sync(20.0, 21.0).request(20.2, 22.0, sector=60)  # completed after its sync returned
    p = predicted(t, Constant())
    assert p.per_commit.requests.tolist() == [7]  # the background write and the late one are left out
    assert p.per_commit.recorded_device_ms.tolist() == pytest.approx([4.0 + 0.8])
    assert p.per_commit.samples_ms[0, 0] == pytest.approx(30.0 - 4.8 + 9.0 + 4.0)


def test_requests_in_flight_together_overlap_up_to_the_queue_depth() -> None:
    t = Trace().commit(1, 0.0, 5.0).sync(0.5, 4.0)
    t.request(1.0, 2.0, sector=8).request(1.1, 2.1, sector=80).request(1.2, 2.2, sector=160)  # all in flight
    t.request(2.3, 3.0, op="flush", sector=0, nbytes=0)
    one_at_a_time = predicted(t, Constant(queue_depth=1)).per_commit
    two = predicted(t, Constant(queue_depth=2)).per_commit
    unlimited = predicted(t, Constant(queue_depth=8)).per_commit
    # recorded: the three overlap (outstanding from 1.0 to 2.2: 1.2 ms once, not 3 ms), then the flush
    assert one_at_a_time.recorded_device_ms.tolist() == pytest.approx([1.2 + 0.7])
    assert one_at_a_time.base_ms.tolist() == pytest.approx([5.0 - 1.9])
    assert one_at_a_time.samples_ms[0, 0] - one_at_a_time.base_ms[0] == pytest.approx(3 * 1 + 3)
    assert two.samples_ms[0, 0] - two.base_ms[0] == pytest.approx(2 * 1 + 3)
    assert unlimited.samples_ms[0, 0] - unlimited.base_ms[0] == pytest.approx(1 + 3)


def test_a_flush_waits_for_what_was_issued_before_it_even_if_it_was_issued_first() -> None:
    # the flush is issued while the write is still in flight: on the device it must still
    # wait for it, so with room for both at once the two do not overlap
    t = Trace().commit(1, 0.0, 6.0).sync(0.5, 5.0)
    t.request(1.0, 2.0, sector=8).request(1.1, 3.0, op="flush", sector=0, nbytes=0)
    p = predicted(t, Constant(queue_depth=4))
    assert p.per_commit.samples_ms[0, 0] - p.per_commit.base_ms[0] == pytest.approx(1 + 3)


def test_a_fua_write_waits_for_earlier_requests_and_is_priced_as_one() -> None:
    t = Trace().commit(1, 0.0, 6.0).sync(0.5, 5.0)
    t.request(1.0, 2.0, sector=8).request(1.1, 2.5, sector=16, fua=True)
    p = predicted(t, Constant(queue_depth=4))
    assert p.per_commit.samples_ms[0, 0] - p.per_commit.base_ms[0] == pytest.approx(1 + 2.5)


def test_a_request_in_flight_when_the_sync_began_counts_from_the_syncs_start() -> None:
    # a jbd2 commit the fsync had to wait for, issued before it
    t = Trace().commit(1, 0.0, 6.0).request(0.5, 2.0, sector=1600).sync(1.0, 3.0)
    p = predicted(t, Constant())
    assert p.per_commit.requests.tolist() == [1]
    assert p.per_commit.recorded_device_ms.tolist() == pytest.approx([1.0])  # 1.0 .. 2.0, inside the sync


def test_a_read_outside_the_syncs_is_waited_for_and_priced() -> None:
    t = Trace().commit(1, 0.0, 4.0).request(0.5, 1.5, op="read", sector=8)
    p = predicted(t, Constant())
    assert p.per_commit.requests.tolist() == [1]
    assert p.per_commit.samples_ms[0, 0] == pytest.approx(4.0 - 1.0 + 0.5)


def test_another_threads_sync_is_not_the_commits() -> None:
    t = Trace().commit(1, 0.0, 4.0).sync(0.5, 3.0, pid=TID + 1).request(1.0, 2.0)
    assert predicted(t, Constant()).per_commit.requests.tolist() == [0]


def test_the_base_can_be_the_measured_cpu_time() -> None:
    t = Trace().commit(1, 0.0, 12.0)
    ext4_fdatasync(t, 1.0)
    p = predicted(t, Constant(), base="cpu", columns={"cpu_ns": [2 * MS]})
    assert p.per_commit.base_ms.tolist() == [2.0] and p.per_commit.samples_ms[0, 0] == pytest.approx(2 + 9)
    assert p.base_source == "cpu"


def test_shares_split_the_predicted_latency_by_kind() -> None:
    t = Trace().commit(1, 0.0, 12.0)
    ext4_fdatasync(t, 1.0)
    summary = P.summarise([predicted(t, Constant())], budget_ms=16.67)
    # 17 ms: base 8, writes 3 × 1, flushes 2 × 3
    assert summary.predicted.shares["base"] == pytest.approx(8 / 17)
    assert summary.predicted.shares["write"] == pytest.approx(3 / 17)
    assert summary.predicted.shares["flush"] == pytest.approx(6 / 17)
    assert sum(summary.predicted.shares.values()) == pytest.approx(1.0)
    assert summary.predicted.frame_budget_miss_pct == 100.0 and summary.measured.frame_budget_miss_pct == 0.0
    assert summary.predicted.p50_ms == pytest.approx(17.0) and summary.measured.p50_ms == pytest.approx(12.0)


def test_commits_of_one_shape_are_replayed_together_and_keep_their_own_base() -> None:
    t = Trace()
    for i, start in enumerate((0.0, 20.0, 40.0)):
        t.commit(i + 1, start, start + 10.0 + i)
        ext4_fdatasync(t, start + 1.0)
    p = predicted(t, Constant())
    assert p.per_commit.samples_ms[:, 0].tolist() == pytest.approx([6 + 9, 7 + 9, 8 + 9])


class Spread:
    """Draws vary: a uniform 1..2 ms write, a 3 ms flush."""

    queue_depth = 1

    def service_ms(self, kind: str, nbytes: int, size: int, rng: np.random.Generator) -> np.ndarray:
        return rng.uniform(1.0, 2.0, size) if kind == "write" else np.full(size, 3.0)


def test_draws_are_seeded() -> None:
    t = Trace().commit(1, 0.0, 12.0)
    ext4_fdatasync(t, 1.0)
    a, b = predicted(t, Spread(), seed=7, draws=50), predicted(t, Spread(), seed=7, draws=50)
    c = predicted(t, Spread(), seed=8, draws=50)
    a_ms, b_ms, c_ms = (x.per_commit.samples_ms for x in (a, b, c))
    assert np.array_equal(a_ms, b_ms) and not np.array_equal(a_ms, c_ms)
    device = a_ms - a.per_commit.base_ms[:, None]
    assert device.min() >= 3 * 1 + 6 and device.max() <= 3 * 2 + 6  # three writes, two flushes


def test_a_commit_waiting_for_a_slot_gets_the_slot_holders_path() -> None:
    # two writes at once with room for one: the second waits for the first's slot, so
    # the path that ends last holds both writes
    t = Trace().commit(1, 0.0, 5.0).sync(0.5, 4.0).request(1.0, 2.0, sector=8).request(1.1, 2.1, sector=80)
    summary = P.summarise([predicted(t, Constant(queue_depth=1))], budget_ms=16.67)
    total = summary.predicted.p50_ms
    assert summary.predicted.shares["write"] * total == pytest.approx(2.0)
