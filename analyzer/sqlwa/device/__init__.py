"""Device profiles: how long a storage device takes per request (measured with fio,
imported from a phone's fio run, or published), and which profiles ship with sqlwa."""

from __future__ import annotations

import os
from pathlib import Path

from sqlwa.device.profile import Profile, load
from sqlwa.errors import UsageError

PUBLISHED_DIR = Path(__file__).with_name("published")


def shipped() -> dict[str, Path]:
    """The profiles shipped with sqlwa (published figures), by name."""
    return {path.stem: path for path in sorted(PUBLISHED_DIR.glob("*.toml"))}


def resolve(spec: str) -> Profile:
    """``--device``: a profile file, or the name of a shipped profile."""
    if os.path.exists(spec):
        if os.path.isdir(spec):
            raise UsageError(f"--device {spec} is a directory, not a profile", "pass a profile TOML file or a name")
        return load(Path(spec))
    known = shipped()
    if spec in known:
        return load(known[spec])
    raise UsageError(
        f"--device {spec!r} is neither a profile file nor a shipped profile",
        f"shipped: {', '.join(known)}; or a file from `sqlwa device probe` / `sqlwa device import`",
    )
