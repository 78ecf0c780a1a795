"""sqlwa's vocabulary, in one place: the file kinds SQLite's VFS calls are counted by.

Store, report, check, compare and the Python API read names from here rather than
spelling them again.
"""

from __future__ import annotations

#: The kinds of file the engine's counting VFS tells apart, in its column order
#: (``vfs_<kind>_<counter>`` in commits.parquet).
FILE_KINDS = ("db", "journal", "wal", "shm", "temp", "other")
