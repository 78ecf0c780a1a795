"""sqlwa.views.notebook, the notebooks' first cell: where the sample data is, and what
happens where no static image can be drawn (tests/docs/test_notebooks.py runs the
notebooks themselves)."""

from __future__ import annotations

import sys

import plotly.io as pio
import pytest

from helpers import REPO
from sqlwa import UsageError
from sqlwa.views import notebook


@pytest.fixture(autouse=True)
def no_samples_variable(monkeypatch):
    monkeypatch.delenv(notebook.SAMPLES_ENV, raising=False)


def test_samples_are_found_from_inside_the_repository():
    assert notebook.samples_dir(REPO / "notebooks") == REPO / "traces" / "samples"


def test_samples_variable_points_anywhere(monkeypatch, tmp_path):
    monkeypatch.setenv(notebook.SAMPLES_ENV, str(tmp_path))
    assert notebook.samples_dir(REPO / "notebooks") == tmp_path


def test_samples_variable_naming_no_directory_is_one_clear_error(monkeypatch, tmp_path):
    monkeypatch.setenv(notebook.SAMPLES_ENV, str(tmp_path / "nowhere"))
    with pytest.raises(UsageError, match=r"SQLWA_SAMPLES=.*nowhere is not a directory.*traces/samples/"):
        notebook.samples_dir()


def test_samples_outside_the_repository_say_where_they_are_expected(tmp_path):
    with pytest.raises(UsageError) as error:
        notebook.samples_dir(tmp_path)
    assert "traces/samples/" in str(error.value) and "SQLWA_SAMPLES=" in str(error.value)
    assert str(tmp_path) in str(error.value)


def test_without_kaleido_figures_stay_interactive_and_it_is_said(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "kaleido", None)  # import kaleido raises ImportError
    before = pio.renderers.default
    assert notebook.static_images() is False
    assert pio.renderers.default == before
    said = capsys.readouterr().err
    assert "no static image" in said and "kaleido is not installed" in said


def test_without_a_browser_figures_stay_interactive_and_it_is_said(monkeypatch, capsys):
    pytest.importorskip("kaleido")
    from choreographer.browsers.chromium import Chromium

    monkeypatch.setattr(Chromium, "find_browser", classmethod(lambda cls, **_: None))
    before = pio.renderers.default
    assert notebook.static_images() is False
    assert pio.renderers.default == before
    assert "found no Chrome or Chromium" in capsys.readouterr().err
