"""Where a lab filesystem keeps its own journal and metadata, read from the device with
the filesystem's own tools while it is still mounted (the run's output keeps it as
``layout.json`` so a trace can be re-attributed later).

All ranges are ``[start_sector, sectors]`` in 512-byte sectors of the loop device (the lab
images have no partition table, so filesystem byte offsets are device offsets).

* ext4: the journal inode's extents (``debugfs stat <journal inode>``) and the static
  metadata of every block group (superblock copies, group descriptors, bitmaps, inode
  tables, from ``dumpe2fs``).
* xfs: the internal log (``xfs_db``: sb logstart/logblocks, an AG-encoded block number).
* f2fs: no journal. Its own writes are the checkpoint, SIT, NAT and SSA areas before the
  main area, and in the main area the node segments (inodes and direct/indirect nodes,
  which an fsync writes for roll-forward recovery instead of journaling) and the hot data
  segments (directory entries; a file's own blocks there are matched by its extents
  first): all fs_metadata, from ``dump.f2fs`` (superblock and the SIT's segment types).
* btrfs: the chunk map (``btrfs inspect-internal dump-tree -t chunk``). FIEMAP on btrfs
  reports btrfs *logical* addresses; a chunk maps a logical range onto one (single) or
  two (DUP) device ranges. Data chunks of a fresh single-device filesystem often map 1:1,
  but metadata (DUP) never does, and later data chunks need not: extents are translated
  through this map before they are compared with block requests.
"""

from __future__ import annotations

import re
import tempfile

from sqlwa._system.tools import run_tool
from sqlwa.errors import ToolError

SECTOR = 512


def _run(argv: list[str], cwd: str | None = None) -> str:
    return run_tool(argv, f"reading the layout with {argv[0]}", timeout=60, cwd=cwd).stdout


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


# ------------------------------------------------------------------------------ f2fs

F2FS_BLOCK = 4096
# SIT segment types (dump.f2fs: 0:HD 1:WD 2:CD 3:HN 4:WN 5:CN)
F2FS_NODE_SEGMENTS = {3, 4, 5}
F2FS_HOT_DATA = 0  # also what a free segment's zeroed SIT entry says: counted only if in use


def f2fs_layout(device: str) -> dict:
    text = _run(["dump.f2fs", "-d", "1", device])
    sb = dict(re.findall(r"^(\w+(?:\[\d\])?)\s+\[0x\s*[0-9a-f]+ : (\d+)\]", text, re.M))
    blocks_per_segment = 1 << int(sb["log_blocks_per_seg"])
    main = int(sb["main_blkaddr"])
    # dump.f2fs -s writes its SIT dump to ./dump_sit: in a directory of our own
    with tempfile.TemporaryDirectory(prefix="sqlwa-f2fs-sit-") as scratch:
        _run(["dump.f2fs", "-s", "0~-1", device], cwd=scratch)
        with open(f"{scratch}/dump_sit") as sit:
            entries = re.findall(r"^segno:\s+(\d+)\s+vblocks:\s+(\d+)\s+seg_type:(\d)", sit.read(), re.M)
    current_hot_data = int(sb["cur_data_segno[0]"])
    segments = [
        int(segno)
        for segno, valid, kind in entries
        if int(kind) in F2FS_NODE_SEGMENTS
        or (int(kind) == F2FS_HOT_DATA and (int(valid) > 0 or int(segno) == current_hot_data))
    ]
    regions = [(0, main)] + [(main + segno * blocks_per_segment, blocks_per_segment) for segno in segments]
    return {
        "fs_journal": [],
        "fs_metadata": _blocks_to_sectors(_merged(regions), F2FS_BLOCK),
        "chunks": [],
        "source": "dump.f2fs: superblock areas, SIT node and hot-data segments",
    }


def _merged(ranges: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """(start, count) ranges with touching neighbours joined."""
    merged: list[tuple[int, int]] = []
    for start, count in sorted(ranges):
        if merged and merged[-1][0] + merged[-1][1] >= start:
            last_start, last_count = merged[-1]
            merged[-1] = (last_start, max(last_count, start + count - last_start))
        else:
            merged.append((start, count))
    return merged


PROBES = {"ext4": ext4_layout, "xfs": xfs_layout, "btrfs": btrfs_layout, "f2fs": f2fs_layout}


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
