"""Exact quantiles by counting (sqlwa.analysis.quantiles) against numpy's sorted column
and Polars' own figures, with buckets made tiny so that every path is taken: a bucket
read whole, one counted again more finely, one of a single value, ties everywhere."""

from __future__ import annotations

import math

import numpy as np
import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sqlwa.analysis import quantiles

QUANTILES = {"p50": 0.5, "p90": 0.9, "p99": 0.99}

columns = st.one_of(
    st.lists(st.integers(0, 10**7), min_size=1, max_size=2000),
    st.lists(st.integers(-3, 3), min_size=1, max_size=2000),  # ties only
    st.lists(st.sampled_from([0, 5, 10**12]), min_size=1, max_size=2000),  # a wide, empty middle
    st.lists(st.one_of(st.none(), st.integers(0, 10**9)), min_size=1, max_size=500),
)


@pytest.fixture(autouse=True)
def tiny_buckets(monkeypatch):
    monkeypatch.setattr(quantiles, "BUCKETS", 8)
    monkeypatch.setattr(quantiles, "READ_AT_ONCE", 20)


@settings(max_examples=150, deadline=None)
@given(values=columns, data=st.data())
def test_order_statistics_are_the_sorted_columns(values, data):
    present = np.sort(np.array([v for v in values if v is not None], dtype=np.int64))
    if present.size == 0:
        return
    frame = pl.LazyFrame({"x": values}, schema={"x": pl.Int64})
    rank = data.draw(st.integers(0, present.size - 1))
    got = quantiles.order_statistic(frame, "x", rank, int(present[0]), int(present[-1]))
    assert got == present[rank]


@settings(max_examples=150, deadline=None)
@given(values=columns)
def test_figures_are_polars_figures_of_the_whole_column(values):
    frame = pl.DataFrame({"x": values}, schema={"x": pl.Int64})
    got = quantiles.ns_figures_ms(frame.lazy(), "x", QUANTILES)
    ms = frame["x"].drop_nulls().cast(pl.Float64) / 1e6
    if ms.len() == 0:
        assert got == {"mean": None, "p50": None, "p90": None, "p99": None, "max": None}
        return
    want = {
        "mean": ms.mean(),
        **{name: ms.quantile(q, interpolation="linear") for name, q in QUANTILES.items()},
        "max": ms.max(),
    }
    for name, value in want.items():
        assert math.isclose(got[name], value, rel_tol=1e-12, abs_tol=1e-15), name
