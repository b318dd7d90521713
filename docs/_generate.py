"""Generates the parts of the documentation site that come from other files.

* The notebook gallery: ``docs/gallery/<name>.ipynb`` (executed, with their plots) and
  ``docs/gallery/index.md``.
* The measured benchmark tables: ``docs/results/index.md`` from the benchmarks' JSON files
  (``benchmarks/results/*.json`` of a local run, else the snapshots kept in
  ``docs/benchmark-data/``), with their plots.

A notebook already executed by the test suite (``tests/test_notebooks.py`` writes executed copies to
``build/notebooks/``, tagged with the SHA-256 of the stored source) is reused; any other is executed
here.  Run by ``make docs`` before ``mkdocs build``."""

import hashlib
import json
import os
import shutil
import sys
from pathlib import Path

import nbformat

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _hooks import provenance, table, tables

ROOT = Path(__file__).resolve().parents[1]
SOURCE = ROOT / "notebooks"
EXECUTED = ROOT / "build" / "notebooks"
GALLERY = ROOT / "docs" / "gallery"
RESULTS_PAGE = ROOT / "docs" / "results"
BENCH_SOURCES = [ROOT / "benchmarks" / "results", ROOT / "docs" / "benchmark-data"]
HASH_KEY = "geomjax_source_sha256"


def source_hash(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def execute(path: Path):
    import tempfile

    from nbclient import NotebookClient

    nb = nbformat.read(path, as_version=4)
    os.environ.update(
        MPLBACKEND="module://matplotlib_inline.backend_inline",  # figures in the outputs
        JAX_PLATFORMS=os.environ.get("JAX_PLATFORMS", "cpu"),
        # the kernel imports this checkout's geomjax
        PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
    )
    with tempfile.TemporaryDirectory() as cwd:  # files a notebook writes go nowhere
        client = NotebookClient(
            nb, timeout=1200, kernel_name="python3", resources={"metadata": {"path": cwd}}
        )
        client.execute()
    return nb


def title(nb) -> str:
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            for line in cell.source.splitlines():
                if line.startswith("#"):
                    return line.lstrip("#").strip()
    return ""


def benchmark_results() -> None:
    """One section per benchmark JSON: where it ran, then every list of rows as a table."""
    RESULTS_PAGE.mkdir(parents=True, exist_ok=True)
    for old in RESULTS_PAGE.glob("*.png"):
        old.unlink()
    found: dict[str, Path] = {}
    for source in BENCH_SOURCES:  # a local run wins over the kept snapshot
        for path in sorted(source.glob("*.json")) if source.exists() else []:
            found.setdefault(path.stem, path)
    lines = [
        "# Measured results",
        "",
        "Generated from the benchmarks' JSON files when the site is built (a local run of",
        "`geomjax bench NAME` writes `benchmarks/results/`; otherwise the snapshots kept with the",
        "docs are shown). Each section says where it ran; compare ratios, not absolute times,",
        "across machines.",
        "",
    ]
    if not found:
        lines.append("No benchmark results yet: run `geomjax bench all`.")
    for name, path in sorted(found.items()):
        data = json.loads(path.read_text())
        lines += [f"## {name}", "", provenance(data, name), ""]
        for key, rows in tables(data):
            lines += [f"**{key}**", "", *table(rows), ""]
        for png in sorted(path.parent.glob(f"{name}*.png")):
            shutil.copyfile(png, RESULTS_PAGE / png.name)
            lines += [f"![{png.stem}]({png.name})", ""]
    (RESULTS_PAGE / "index.md").write_text("\n".join(lines) + "\n")


def main() -> int:
    benchmark_results()
    GALLERY.mkdir(parents=True, exist_ok=True)
    for old in GALLERY.glob("*.ipynb"):
        old.unlink()
    rows = []
    for path in sorted(SOURCE.glob("*.ipynb")):
        digest, cached = source_hash(path), EXECUTED / path.name
        if cached.exists() and nbformat.read(cached, 4).metadata.get(HASH_KEY) == digest:
            shutil.copyfile(cached, GALLERY / path.name)
            print(f"gallery: {path.name} (executed by the tests)")
        else:
            print(f"gallery: executing {path.name} ...", flush=True)
            nb = execute(path)
            nb.metadata[HASH_KEY] = digest
            nbformat.write(nb, GALLERY / path.name)
        rows.append((path, title(nbformat.read(GALLERY / path.name, 4))))
    lines = [
        "# Gallery",
        "",
        "One notebook per capability, executed (each is stored in `notebooks/` without outputs and run",
        "by the test suite). Open one to see its code, plots and printed checks.",
        "",
    ]
    lines += [f"- [{t or p.stem}]({p.name}) — `notebooks/{p.name}`" for p, t in rows]
    (GALLERY / "index.md").write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
