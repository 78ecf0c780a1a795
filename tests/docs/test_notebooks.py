"""The notebooks in notebooks/: stored without outputs, and each one runs top to bottom
against the bundled sample data (nbclient, a kernel of this very interpreter) without an
error, every figure keeping a static PNG beside plotly's JSON (blank in nbconvert's HTML
and on code-hosting sites without it). A copy run away from the repository says where
the sample data is expected. ``pytest --nbmake notebooks`` runs them the same way."""

from __future__ import annotations

import importlib.util
import os
import shutil
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError

from helpers import REPO
from sqlwa.views.notebook import SAMPLES_ENV

NOTEBOOKS = REPO / "notebooks"
ALL = sorted(NOTEBOOKS.glob("*.ipynb"))
PLOTLY_JSON = "application/vnd.plotly.v1+json"


def test_the_notebooks_are_there():
    assert {p.name for p in ALL} >= {"explore_run.ipynb", "device_trace.ipynb"}


@pytest.mark.parametrize("path", ALL, ids=[p.stem for p in ALL])
def test_notebook_is_stored_without_outputs(path):
    nb = nbformat.read(path, as_version=4)
    nbformat.validate(nb)
    dirty = [
        n
        for n, cell in enumerate(nb.cells)
        if cell.cell_type == "code" and (cell.outputs or cell.execution_count is not None)
    ]
    assert not dirty, f"{path.name}: cells {dirty} carry outputs; clear them (Kernel → Restart & Clear Output)"


def client(path: Path, cwd: Path) -> tuple[NotebookClient, nbformat.NotebookNode]:
    """A client that runs the notebook at ``path`` in ``cwd``. "python3" resolves to this
    interpreter (jupyter_client swaps in sys.executable)."""
    nb = nbformat.read(path, as_version=4)
    return NotebookClient(nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(cwd)}}), nb


def static_images_possible() -> bool:
    """kaleido is installed and there is a Chrome or Chromium for it to draw with."""
    browser = os.environ.get("BROWSER_PATH") or shutil.which("chromium") or shutil.which("google-chrome")
    return importlib.util.find_spec("kaleido") is not None and bool(browser)


def outputs(nb: nbformat.NotebookNode) -> list[dict]:
    return [o for cell in nb.cells if cell.cell_type == "code" for o in cell.outputs]


@pytest.mark.parametrize("path", ALL, ids=[p.stem for p in ALL])
def test_notebook_runs_without_error(path, monkeypatch):
    monkeypatch.delenv(SAMPLES_ENV, raising=False)  # found from the notebook's directory
    runner, nb = client(path, NOTEBOOKS)
    runner.execute()  # raises CellExecutionError on the first failing cell
    assert not [o for o in outputs(nb) if o.output_type == "error"]
    figures = [o for o in outputs(nb) if PLOTLY_JSON in o.get("data", {})]
    assert figures, "no figure was drawn"
    if static_images_possible():
        assert all("image/png" in o["data"] for o in figures), "a figure has no static image"
    else:  # said once, in the first cell, instead of figures silently blank outside Jupyter
        said = "".join(o.get("text", "") for o in outputs(nb) if o.output_type == "stream")
        assert "figures get no static image" in said


@pytest.mark.parametrize("path", ALL, ids=[p.stem for p in ALL])
def test_notebook_copied_out_of_the_repository_says_where_the_samples_are(path, tmp_path, monkeypatch):
    monkeypatch.delenv(SAMPLES_ENV, raising=False)
    copy = tmp_path / path.name
    shutil.copy(path, copy)
    runner, _ = client(copy, tmp_path)
    with pytest.raises(CellExecutionError) as failed:
        runner.execute()
    assert failed.value.ename == "UsageError", failed.value.ename  # it was a bare StopIteration
    assert "traces/samples/" in failed.value.evalue and SAMPLES_ENV in failed.value.evalue
