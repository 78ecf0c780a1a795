"""Reading a phone's facts from what its shell prints: the SQLite version found in a real
library's bytes, /data's room from df."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

import sqlwa
from sqlwa import _native
from sqlwa.phone import describe
from sqlwa.phone.adb import Completed

DEBIAN_LIBSQLITE = Path("/usr/lib/x86_64-linux-gnu/libsqlite3.so.0")


@pytest.mark.skipif(
    not DEBIAN_LIBSQLITE.exists() or shutil.which("sqlite3") is None, reason="Debian's libsqlite3 and sqlite3 shell"
)
def test_the_version_read_from_debians_library_is_the_one_its_shell_prints():
    shell = subprocess.run(["sqlite3", "--version"], capture_output=True, text=True, check=True).stdout.split()[0]
    assert describe.sqlite_version_in(DEBIAN_LIBSQLITE.read_bytes()) == shell


def test_the_version_read_from_the_engines_own_build_is_the_one_it_reports():
    library = Path(sqlwa.__file__).parent / "_native.abi3.so"
    assert describe.sqlite_version_in(library.read_bytes()) == _native.__sqlite_version__


def test_a_file_without_sqlite_has_no_version():
    assert describe.sqlite_version_in(b"\x00libc 2.36\x00 3.x\x00") is None


@pytest.mark.parametrize(
    ("printed", "room"),
    [
        # toybox df (Android): Filesystem 1K-blocks Used Available Use% Mounted on
        (
            "Filesystem      1K-blocks     Used Available Use% Mounted on\n"
            "/dev/block/dm-45 115148320 60349040  54668208  53% /data\n",
            (115148320 * 1024, 54668208 * 1024),
        ),
        # a device name too long for its column: coreutils and toybox wrap nothing, one line
        (
            "Filesystem 1K-blocks Used Available Use% Mounted on\n/dev/block/bootdevice/by-name/userdata 10 4 6 40% /data\n",
            (10240, 6144),
        ),
        ("df: /data: Permission denied\n", (None, None)),
    ],
)
def test_room_is_read_from_df(printed, room):
    assert describe.room(Completed(0 if "denied" not in printed else 1, printed, "")) == room
