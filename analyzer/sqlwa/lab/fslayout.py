"""Where a lab filesystem keeps its own journal and metadata, read from the device with
the filesystem's own tools while it is still mounted (the run's output keeps it as
``layout.json`` so a trace can be re-attributed later).

All ranges are ``[start_sector, sectors]`` in 512-byte sectors of the loop device (the lab
images have no partition table, so filesystem byte offsets are device offsets).

* ext4: the journal inode's extents (``debugfs stat <journal inode>``) and the static
  metadata of every block group (superblock copies, group descriptors, bitmaps, inode
  tables, from ``dumpe2fs``).
* xfs: the internal log (``xfs_db``: sb logstart/logblocks, an AG-encoded block number).
* btrfs: the chunk map (``btrfs inspect-internal dump-tree -t chunk``). FIEMAP on btrfs
  reports btrfs *logical* addresses; a chunk maps a logical range onto one (single) or
  two (DUP) device ranges. Data chunks of a fresh single-device filesystem often map 1:1,
  but metadata (DUP) never does, and later data chunks need not: extents are translated
  through this map before they are compared with block requests.
"""

from __future__ import annotations

import re

from sqlwa._system import run_tool
from sqlwa.errors import ToolError

SECTOR = 512


def _run(argv: list[str]) -> str:
    return run_tool(argv, f"reading the layout with {argv[0]}", timeout=60).stdout


def _field(pattern: str, text: str) -> str:
    """The first group of ``pattern`` in a tool's output; KeyError if the tool printed no such line."""
    match = re.search(pattern, text, re.M)
    if match is None:
        raise KeyError(f"no line matching {pattern!r}")
    return match.group(1)


def _blocks_to_sectors(ranges: list[tuple[int, int]], block_size: int) -> list[list[int]]:
    per = block_size // SECTOR
    return [[start * per, count * per] for start, count in ranges]


# ------------------------------------------------------------------------------ ext4


def ext4_layout(device: str) -> dict:
    header = _run(["dumpe2fs", "-h", device])
    block_size = int(_field(r"^Block size:\s+(\d+)", header))
    journal_inode = int(_field(r"^Journal inode:\s+(\d+)", header))
    stat = _run(["debugfs", "-R", f"stat <{journal_inode}>", device])
    extents = [
        (int(m.group(3)), int(m.group(4) or m.group(3)) - int(m.group(3)) + 1)
        for m in re.finditer(r"\((\d+)(?:-(\d+))?\):(\d+)(?:-(\d+))?", stat.split("EXTENTS:", 1)[-1])
    ]
    groups = _run(["dumpe2fs", device])
    metadata = [
        (int(m.group(1)), int(m.group(2) or m.group(1)) - int(m.group(1)) + 1)
        for m in re.finditer(
            r"(?:[Ss]uperblock|Group descriptors|Reserved GDT blocks|bitmap|Inode table) at (\d+)(?:-(\d+))?", groups
        )
    ]
    return {
        "fs_journal": _blocks_to_sectors(extents, block_size),
        "fs_metadata": _blocks_to_sectors(metadata, block_size),
        "chunks": [],
        "source": f"dumpe2fs + debugfs stat <{journal_inode}>",
    }


# ------------------------------------------------------------------------------- xfs


def xfs_layout(device: str) -> dict:
    fields = ("logstart", "logblocks", "agblocks", "agblklog", "blocksize")
    argv = ["xfs_db", "-r", "-c", "sb 0", *(a for f in fields for a in ("-c", f"p {f}")), device]
    values = dict(re.findall(r"^(\w+) = (\d+)$", _run(argv), re.M))
    v = {f: int(values[f]) for f in fields}
    if v["logstart"] == 0:
        return {"fs_journal": [], "fs_metadata": [], "chunks": [], "source": "xfs_db: external log (not traced)"}
    agno, agbno = v["logstart"] >> v["agblklog"], v["logstart"] & ((1 << v["agblklog"]) - 1)
    start_block = agno * v["agblocks"] + agbno
    return {
        "fs_journal": _blocks_to_sectors([(start_block, v["logblocks"])], v["blocksize"]),
        "fs_metadata": [],
        "chunks": [],
        "source": "xfs_db sb 0: logstart/logblocks",
    }


# ----------------------------------------------------------------------------- btrfs

_CHUNK_RE = re.compile(r"CHUNK_ITEM (\d+)\).*?length (\d+) .*?type (\S+)(.*?)(?=\titem |\Z)", re.S)
_STRIPE_RE = re.compile(r"stripe \d+ devid \d+ offset (\d+)")


def btrfs_layout(device: str) -> dict:
    """Chunks as [logical_sector, sectors, type, [physical_sector, ...]]; metadata and
    system chunk stripes are the metadata region."""
    text = _run(["btrfs", "inspect-internal", "dump-tree", "-t", "chunk", device])
    chunks, metadata = [], []
    for m in _CHUNK_RE.finditer(text):
        logical, length, kind = int(m.group(1)), int(m.group(2)), m.group(3)
        stripes = [int(s) // SECTOR for s in _STRIPE_RE.findall(m.group(4))]
        chunks.append([logical // SECTOR, length // SECTOR, kind, stripes])
        if not kind.startswith("DATA"):
            metadata += [[s, length // SECTOR] for s in stripes]
    # the superblock and its first mirror sit outside every chunk
    metadata += [[65536 // SECTOR, 4096 // SECTOR], [(64 << 20) // SECTOR, 4096 // SECTOR]]
    return {"fs_journal": [], "fs_metadata": metadata, "chunks": chunks, "source": "btrfs dump-tree -t chunk"}


PROBES = {"ext4": ext4_layout, "xfs": xfs_layout, "btrfs": btrfs_layout}


def probe(kernel_type: str, device: str | None) -> dict:
    """The layout of a lab filesystem; ``error`` says why a part is missing (the
    attribution then falls back on the other evidence and reports more unattributed)."""
    empty: dict[str, list] = {"fs_journal": [], "fs_metadata": [], "chunks": []}
    if device is None or kernel_type not in PROBES:
        return {**empty, "source": f"no layout probe for {kernel_type}"}
    try:
        return PROBES[kernel_type](device)
    except (ToolError, OSError, AttributeError, KeyError) as exc:
        return {**empty, "source": "probe failed", "error": str(exc)}
