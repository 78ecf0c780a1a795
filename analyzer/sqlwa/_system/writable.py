"""Whether a directory still takes writes, asked without ever waiting on the answer."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

#: A probe not back after this many seconds: the directory takes no writes. A metadata
#: write returns in milliseconds on any filesystem that takes writes, also a busy one.
PROBE_S = 2.0
#: A new probe at most this often while an action goes on.
PROBE_EVERY_S = 0.5
#: The fix an :class:`~sqlwa.errors.OutputStuck` the probe found carries.
STUCK_HINT = "thaw that filesystem (fsfreeze -u) or choose another --out, and re-run"


class WriteProbe:
    """Asks whether ``directory`` still takes writes, for a caller waiting on an action
    that writes there (:func:`sqlwa._system.signals.call_watched`), without ever waiting on
    the answer itself.

    :meth:`stuck` starts a probe when none is out and the last one began
    :data:`PROBE_EVERY_S` ago: ``utime`` on the directory, in a daemon thread, a metadata
    write that a frozen filesystem (or a dead hard mount) holds as it holds every write,
    and that leaves nothing behind. Once a probe has been out for ``within_s`` it says so.
    A probe that fails (a read-only filesystem, the directory removed) is not stuck: the
    action's own writes say what is wrong with the directory.
    """

    def __init__(self, directory: str | os.PathLike, within_s: float = PROBE_S) -> None:
        self.directory = Path(directory)
        self.within_s = within_s
        self._probe: threading.Thread | None = None
        self._started = 0.0

    def stuck(self) -> str | None:
        """Why the directory takes no writes, or None while it may."""
        now = time.monotonic()
        if self._probe is not None and self._probe.is_alive():
            if now - self._started < self.within_s:
                return None
            return f"{self.directory} does not take writes (a frozen or hung filesystem?)"
        if self._probe is None or now - self._started >= PROBE_EVERY_S:
            self._probe = threading.Thread(target=touch, args=(self.directory,), name="sqlwa: write probe", daemon=True)
            self._started = now
            self._probe.start()
        return None


def touch(directory: Path) -> None:
    """Set ``directory``'s times to now; an error is not this probe's to report."""
    try:
        os.utime(directory)
    except OSError:
        pass
