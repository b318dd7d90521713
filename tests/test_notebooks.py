"""Every notebook in notebooks/ is stored without outputs and runs top to bottom in fast mode."""

import hashlib
import os
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
# executed copies for the documentation's gallery (make docs reuses them; see docs/_generate.py)
EXECUTED = ROOT / "build" / "notebooks"


def test_there_are_notebooks():
    assert NOTEBOOKS, "notebooks/ is empty"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_is_stored_clean(path):
    nb = nbformat.read(path, as_version=4)
    for cell in nb.cells:
        if cell.cell_type == "code":
            assert not cell.outputs, f"{path.name}: clear outputs before committing"
            assert cell.execution_count is None, f"{path.name}: clear execution counts"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_runs_in_fast_mode(path, tmp_path, monkeypatch):
    nb = nbformat.read(path, as_version=4)
    monkeypatch.setenv("GEOMJAX_FAST", "1")
    monkeypatch.setenv("MPLBACKEND", "Agg")
    monkeypatch.setenv("JAX_PLATFORMS", os.environ.get("JAX_PLATFORMS", "cpu"))
    client = NotebookClient(
        nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}
    )
    client.execute()
    nb.metadata["geomjax_source_sha256"] = hashlib.sha256(path.read_bytes()).hexdigest()
    EXECUTED.mkdir(parents=True, exist_ok=True)
    tmp = EXECUTED / f".{path.name}.{os.getpid()}"  # atomic: xdist workers may race
    nbformat.write(nb, tmp)
    tmp.replace(EXECUTED / path.name)
