"""Every notebook in notebooks/ is stored without outputs (every run) and runs top to bottom in its
default mode (the sizes a reader gets), and no implicit solve in it fails to converge (the long
tier, ``make test-full``: minutes of compilation in all).

The notebooks call ``Solution.check()`` on the solutions they show (a ``ConvergenceError``
fails the execution); as a second guard, after the last cell the test runs one more cell in
the notebook's kernel that calls ``check()`` on every :class:`geomjax.Solution` the notebook
left in its namespace (bound to a name, or an item of a list, tuple or dict bound to a name);
and no output may carry the warning that ``Solution.__repr__`` prints for a non-converged run,
or a NaN in a printed check.
"""

import hashlib
import os
import re
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
# executed copies for the documentation's gallery (make docs reuses them; see docs/_generate.py)
EXECUTED = ROOT / "build" / "notebooks"
REPO = str(ROOT)


def test_there_are_notebooks():
    assert NOTEBOOKS, "notebooks/ is empty"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_is_stored_clean(path):
    nb = nbformat.read(path, as_version=4)
    for cell in nb.cells:
        if cell.cell_type == "code":
            assert not cell.outputs, f"{path.name}: clear outputs before committing"
            assert cell.execution_count is None, f"{path.name}: clear execution counts"


def _texts(nb):
    for cell in nb.cells:
        for out in cell.get("outputs", []):
            if out.get("output_type") == "stream":
                yield out.get("text", "")
            elif "data" in out and "text/plain" in out["data"]:
                yield out["data"]["text/plain"]


# run in the notebook's kernel after its last cell (not kept in the executed copy): every
# Solution left in the namespace passes Solution.check() (max_residual within the default
# tolerance, no NaN), whether or not the notebook checked it itself
AUDIT = """
def _geomjax_audit():
    from geomjax import Solution
    from geomjax.integrators.simulate import ConvergenceError

    found, bad = [], []
    for name, value in list(globals().items()):
        if name.startswith("_"):
            continue
        items = [(name, value)]
        if isinstance(value, (list, tuple)):
            items += [(f"{name}[{i}]", v) for i, v in enumerate(value)]
        elif isinstance(value, dict):
            items += [(f"{name}[{k!r}]", v) for k, v in value.items()]
        for label, obj in items:
            if isinstance(obj, Solution):
                found.append(label)
                try:
                    obj.check()
                except ConvergenceError as err:
                    bad.append(f"{label}: {err}")
    print("geomjax audit: solutions checked:", ", ".join(found) or "none")
    assert not bad, "not converged: " + "; ".join(bad)


_geomjax_audit()
"""


# minutes of compilation in all (18-105 s of CPU each): the long tier, `make test-full`, runs
# them (CI does, after `make test`, and `make docs` then reuses the executed copies)
@pytest.mark.long
@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_runs_in_default_mode(path, tmp_path, monkeypatch):
    nb = nbformat.read(path, as_version=4)
    monkeypatch.delenv("GEOMJAX_FAST", raising=False)
    # the inline backend: headless, and the figures land in the outputs (the docs gallery shows them)
    monkeypatch.setenv("MPLBACKEND", "module://matplotlib_inline.backend_inline")
    monkeypatch.setenv("JAX_PLATFORMS", os.environ.get("JAX_PLATFORMS", "cpu"))
    pythonpath = os.environ.get("PYTHONPATH")
    monkeypatch.setenv("PYTHONPATH", REPO + (os.pathsep + pythonpath if pythonpath else ""))
    client = NotebookClient(
        nb, timeout=900, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}
    )
    nb.cells.append(nbformat.v4.new_code_cell(AUDIT))
    client.execute()  # raises on any error, ConvergenceError from Solution.check() included
    audit = nb.cells.pop()
    assert "geomjax audit: solutions checked:" in "".join(
        out.get("text", "") for out in audit.outputs
    ), f"{path.name}: the audit of the solutions did not run"
    for text in _texts(nb):
        assert "not converged" not in text, f"{path.name}: a non-converged solve is shown:\n{text}"
        assert not re.search(r"\bnan\b", text, re.I), f"{path.name}: a NaN is printed:\n{text}"
    nb.metadata["geomjax_source_sha256"] = hashlib.sha256(path.read_bytes()).hexdigest()
    EXECUTED.mkdir(parents=True, exist_ok=True)
    tmp = EXECUTED / f".{path.name}.{os.getpid()}"  # atomic: xdist workers may race
    nbformat.write(nb, tmp)
    tmp.replace(EXECUTED / path.name)
