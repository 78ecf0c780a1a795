"""``results.compare.verdict``: what a change is, as compare's table colours it and its
--json names it."""

from __future__ import annotations

import pytest

from sqlwa.catalogue import METRICS
from sqlwa.results.compare import verdict

FSYNCS = METRICS["fsync_calls_per_commit"]  # a cost: more is worse
PAYLOAD = METRICS["logical_bytes_per_commit"]  # what the app asked to store: neither


@pytest.mark.parametrize(
    ("metric", "delta", "durability_lost", "expected"),
    [
        (FSYNCS, 1.0, False, "worse"),
        (FSYNCS, -1.0, False, "better"),
        (FSYNCS, 0.0, False, "unchanged"),
        (FSYNCS, -1.0, True, "durability_lost"),  # a saving bought with durability is no gain
        (FSYNCS, 1.0, True, "worse"),
        (PAYLOAD, 100.0, False, "undirected"),
        (PAYLOAD, 0.0, False, "unchanged"),
        (FSYNCS, None, False, None),  # a side did not measure it
    ],
)
def test_verdict(metric, delta, durability_lost, expected):
    assert verdict(metric, delta, durability_lost) == expected
