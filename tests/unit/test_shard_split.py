"""The split of a sweep into shards (#37): a cell's id comes from its settings, so the
same sweep given with its axes in another order has the same ids and the same shards;
the shards of any N partition the cells, balanced to within one; K counts from 1, or
from 0 with --shard-base 0, and anything else is one line naming the fix."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from helpers import sqlwa_in_process
from sqlwa.errors import UsageError, hint_of
from sqlwa.measure import shard
from sqlwa.measure.matrix import Axes, MatrixPlan, Runs

AXES = {"scenarios": ("mobibench-insert", "messenger"), "journals": ("delete", "wal", "truncate")}
AXES |= {"syncs": ("full", "normal")}


def plan(repeat: int = 2, **axes) -> MatrixPlan:
    return MatrixPlan(out_dir=Path("m"), axes=Axes(**{**AXES, **axes}), runs=Runs(repeat=repeat), lab=False)


def test_ids_and_shards_survive_reordering_the_axes():
    given = plan()
    reordered = plan(
        scenarios=("messenger", "mobibench-insert"), journals=("truncate", "delete", "wal"), syncs=("normal", "full")
    )
    assert [c.key for c in given.all_cells()] != [c.key for c in reordered.all_cells()]  # another order
    ids = {shard.cell_id(c): c.key for c in given.all_cells()}
    assert ids == {shard.cell_id(c): c.key for c in reordered.all_cells()}
    assert len(ids) == len(given.all_cells()) == 24  # one id per cell
    for count in (1, 3, 5, 24, 30):
        for index in range(1, count + 1):
            part = shard.Shard(index, count)
            mine = {c.key for c in shard.part(given.all_cells(), part)}
            assert mine == {c.key for c in shard.part(reordered.all_cells(), part)}


@pytest.mark.parametrize("count", [1, 2, 4, 7, 24, 30])
def test_the_shards_partition_the_cells_evenly(count):
    cells = plan().all_cells()
    parts = [shard.part(cells, shard.Shard(k, count)) for k in range(1, count + 1)]
    keys = [c.key for part in parts for c in part]
    assert sorted(keys) == sorted(c.key for c in cells)  # each cell in exactly one shard
    sizes = [len(part) for part in parts]
    assert max(sizes) - min(sizes) <= 1
    for part in parts:  # in the sweep's own order
        assert [c.key for c in part] == [c.key for c in cells if c in part]


def test_an_id_depends_on_the_cell_settings_only():
    cell = plan().all_cells()[0]
    assert shard.cell_id(cell) == shard.cell_id(plan(repeat=5).all_cells()[0])
    other = plan(journals=("persist",)).all_cells()[0]
    assert shard.cell_id(cell) != shard.cell_id(other)


@pytest.mark.parametrize(
    ("text", "base", "expected"),
    [("1/4", 1, (1, 4)), ("4/4", 1, (4, 4)), ("0/4", 0, (1, 4)), ("3/4", 0, (4, 4)), (" 2 / 3 ", 1, (2, 3))],
)
def test_k_counts_from_the_base(text, base, expected):
    assert (lambda s: (s.index, s.count))(shard.parse(text, base)) == expected


@pytest.mark.parametrize(
    ("text", "base", "says"),
    [
        ("0/4", 1, "add --shard-base 0"),
        ("4/4", 0, "leave --shard-base out"),
        ("5/4", 1, "1 to 4"),
        ("2", 1, "not K/N"),
        ("1/0", 1, "N must be"),
        ("-1/4", 1, "not K/N"),
    ],
)
def test_a_wrong_shard_is_refused_with_its_fix(text, base, says):
    with pytest.raises(UsageError) as refused:
        shard.parse(text, base)
    assert says in f"{refused.value} {hint_of(refused.value)}"


def test_plan_prints_every_cell_once_and_runs_nothing(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    sweep = ("matrix", "--vfs-only", "-j", "delete,wal", "--sync", "full,normal", "--repeat", "2", "--plan")
    whole = sqlwa_in_process(*sweep)
    assert whole.returncode == 0, whole.stderr
    document = json.loads(whole.stdout)
    assert document["cells_in_matrix"] == 8 and document["shard"] is None
    assert len({cell["id"] for cell in document["cells"]}) == 8
    shards = [json.loads(sqlwa_in_process(*sweep, "--shard", f"{k}/3").stdout) for k in range(1, 4)]
    assert sorted(cell["id"] for doc in shards for cell in doc["cells"]) == sorted(c["id"] for c in document["cells"])
    assert all(cell["shard"] == k for k, doc in enumerate(shards, start=1) for cell in doc["cells"])
    zero_based = json.loads(sqlwa_in_process(*sweep, "--shard", "0/3", "--shard-base", "0").stdout)
    assert zero_based["cells"] == shards[0]["cells"]
    assert list(tmp_path.iterdir()) == []  # nothing written
