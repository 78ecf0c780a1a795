"""The command line's own SIGINT/SIGTERM handlers (sqlwa.cli._signals): a signal whose
exception CPython drops (raised inside a callback whose errors are ignored, as an import's
module-lock weakref callback is) is raised again once the command is loaded."""

from __future__ import annotations

import gc
import os
import signal
import subprocess
import sys
import weakref

import pytest

from sqlwa.cli import _signals
from sqlwa.errors import Interrupted


@pytest.fixture
def cli_handlers():
    saved = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    _signals._received.clear()
    _signals.obey_signals()
    yield
    for signum, handler in saved.items():
        signal.signal(signum, handler)
    _signals._received.clear()


class Thing:
    pass


@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")  # the drop itself
@pytest.mark.parametrize("signum, raised", [(signal.SIGINT, KeyboardInterrupt), (signal.SIGTERM, Interrupted)])
def test_a_signal_dropped_by_an_ignored_callback_is_raised_again(cli_handlers, signum, raised):
    thing = Thing()
    # The handler runs inside the callback; CPython prints "Exception ignored" and goes on.
    ref = weakref.ref(thing, lambda _ref: os.kill(os.getpid(), signum))
    del thing
    gc.collect()
    assert ref() is None
    with pytest.raises(raised):
        _signals.raise_if_signalled()


def test_without_a_signal_nothing_is_raised(cli_handlers):
    _signals.raise_if_signalled()


def test_a_signal_ignored_by_the_parent_stays_ignored():
    """``nohup`` and ``cmd &`` in a script start sqlwa with SIGINT ignored: it stays so."""
    code = (
        "import signal; from sqlwa.cli import _signals; _signals.obey_signals(); "
        "print(signal.getsignal(signal.SIGINT) is signal.SIG_IGN)"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN),
    )
    assert proc.stdout.strip() == "True"


@pytest.mark.parametrize(("signum", "raised"), [(signal.SIGINT, KeyboardInterrupt), (signal.SIGTERM, Interrupted)])
def test_a_signal_during_the_import_of_sqlwa_errors_interrupts(cli_handlers, monkeypatch, signum, raised):
    """A signal that lands while ``sqlwa.errors`` is being imported (the module half-made in
    sys.modules, as CPython leaves it during its import) interrupts: no ImportError, which
    the user would see as a traceback."""
    half_made = type(sys)("sqlwa.errors")
    monkeypatch.setitem(sys.modules, "sqlwa.errors", half_made)
    with pytest.raises(raised):
        signal.raise_signal(signum)


def test_each_call_of_main_leaves_its_handlers_registered_once(capsys):
    """sqlwa.cli.main registers its first-received signal with _system.signals on every
    call (a notebook or a test calls it many times in one process): once is enough."""
    from sqlwa import cli
    from sqlwa._system import signals

    for _ in range(3):
        cli.main(["--version"])
    assert capsys.readouterr().out.count("sqlwa") == 3
    assert signals._also_received.count(_signals.first_received) == 1
