"""Giving the C library's and Arrow's freed memory back to the system (:func:`release_freed`)."""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import sys


@functools.cache
def _malloc_trim() -> ctypes._CFuncPtr | None:  # type: ignore[name-defined]
    """glibc's ``malloc_trim``, or None where the C library has none (musl, not Linux)."""
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    try:
        trim = ctypes.CDLL(name).malloc_trim
    except (OSError, AttributeError):
        return None
    trim.argtypes, trim.restype = [ctypes.c_size_t], ctypes.c_int
    return trim


def release_freed() -> None:
    """Return the pages glibc's malloc (in every arena) and pyarrow's pool hold free to
    the system.

    The trace parser (the native module, glibc's malloc) builds a row group's columns in
    many growing buffers and frees them; glibc keeps most of that free memory in its
    arenas (their middle is returned only by ``malloc_trim``), measured at some 100 MB
    after a capture segment's parse, resident through the rest of the run and its
    analysis. Called after each such parse and after the parts' join; glibc's half is a
    no-op without glibc, pyarrow's without pyarrow loaded."""
    trim = _malloc_trim()
    if trim is not None:
        trim(0)
    # pyarrow's pool (mimalloc) keeps what it freed too: after the capture's parts were
    # joined, some 60 MB (10^5 commits) to 85 MB (10^6) through the whole analysis
    arrow = sys.modules.get("pyarrow")
    if arrow is not None:
        arrow.default_memory_pool().release_unused()
