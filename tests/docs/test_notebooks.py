"""The notebooks in notebooks/: stored without outputs, and each one runs top to bottom
against the bundled sample data (nbclient, a kernel of this very interpreter) without an
error. ``pytest --nbmake notebooks`` runs them the same way."""

from __future__ import annotations

import nbformat
import pytest
from nbclient import NotebookClient

from helpers import REPO

NOTEBOOKS = REPO / "notebooks"
ALL = sorted(NOTEBOOKS.glob("*.ipynb"))


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


@pytest.mark.parametrize("path", ALL, ids=[p.stem for p in ALL])
def test_notebook_runs_without_error(path):
    nb = nbformat.read(path, as_version=4)
    # "python3" resolves to this interpreter (jupyter_client swaps in sys.executable)
    client = NotebookClient(nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(NOTEBOOKS)}})
    client.execute()  # raises CellExecutionError on the first failing cell
    errors = [o for cell in nb.cells if cell.cell_type == "code" for o in cell.outputs if o.output_type == "error"]
    assert not errors
    assert any(
        "application/vnd.plotly.v1+json" in o.get("data", {})
        for cell in nb.cells
        if cell.cell_type == "code"
        for o in cell.outputs
    ), "no figure was drawn"
