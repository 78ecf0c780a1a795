"""The external sort the Perfetto reader orders a trace of any length with: whatever the
rows and however small the runs, reading gives Python's own sort of them."""

from __future__ import annotations

import tempfile

from hypothesis import given, settings
from hypothesis import strategies as st

from sqlwa.analysis.spillsort import SpillSort

keys = st.lists(st.integers(min_value=-5, max_value=5), max_size=60)  # many ties


@settings(max_examples=200, deadline=None)
@given(keys=keys, held_rows=st.integers(1, 8), batch_rows=st.integers(1, 4))
def test_the_runs_merge_to_the_whole_sort(keys, held_rows, batch_rows):
    # Rows unique by (key, reading order), as the Perfetto reader's are; the payload is
    # never compared (a dict would raise if it were).
    rows = [(key, seq, {"payload": seq}) for seq, key in enumerate(keys)]
    with tempfile.TemporaryFile() as spill:
        sorter = SpillSort(spill, held_rows, batch_rows)
        for row in rows:
            sorter.append(row)
        assert len(sorter) == len(rows)
        assert list(sorter) == sorted(rows, key=lambda row: row[:2])
        assert len(sorter.runs) == len(rows) // held_rows
