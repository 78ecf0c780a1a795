"""An external sort: rows are held and sorted in memory up to a limit, then written to a
file as one sorted run; reading merges the runs with the rows still held. Any number of
rows is put in order in the memory of about ``held_rows`` of them, plus one batch of
each run while they are merged.

Rows are tuples compared as tuples; a caller that wants a stable order makes each row
unique in its leading fields (a sequence number after the key), so that no comparison
reaches a field that cannot be compared.
"""

from __future__ import annotations

import heapq
import pickle
from collections.abc import Iterator
from typing import IO


class SpillSort:
    """Rows sorted with runs spilled to ``spill`` (a file open for reading and writing,
    the caller's to remove), each run in pickled batches of ``batch_rows``."""

    def __init__(self, spill: IO[bytes], held_rows: int, batch_rows: int) -> None:
        self.spill = spill
        self.held_rows = held_rows
        self.batch_rows = batch_rows
        self.held: list[tuple] = []
        self.runs: list[int] = []  # each run's first byte in the spill file
        self.spilled = 0

    def append(self, row: tuple) -> None:
        self.held.append(row)
        if len(self.held) >= self.held_rows:
            self._spill()

    def __len__(self) -> int:
        return self.spilled + len(self.held)

    def _spill(self) -> None:
        self.held.sort()
        self.runs.append(self.spill.tell())
        for start in range(0, len(self.held), self.batch_rows):
            pickle.dump(self.held[start : start + self.batch_rows], self.spill, pickle.HIGHEST_PROTOCOL)
        pickle.dump([], self.spill)  # the run's end
        self.spilled += len(self.held)
        self.held = []

    def __iter__(self) -> Iterator[tuple]:
        """Every row in order (read once: the held rows are sorted in place)."""
        self.held.sort()
        if not self.runs:
            return iter(self.held)
        return heapq.merge(*(self._run(start) for start in self.runs), self.held)

    def _run(self, start: int) -> Iterator[tuple]:
        position = start
        while True:
            self.spill.seek(position)  # the runs share the file: each reads from where it was
            batch = pickle.load(self.spill)
            position = self.spill.tell()
            if not batch:
                return
            yield from batch
