"""MkDocs hooks.

* The docstrings use Sphinx roles (:func:`simulate`); mkdocstrings renders them literally, so
  they are turned into inline code here.
* MathJax is served by the site: after the build its browser files (``tex-mml-chtml.js`` and
  its fonts, from the ``django-static-mathjax`` wheel of the dev extras) are copied to
  ``site/javascripts/mathjax/``, so formulas typeset without network access.
* Measured figures come from the benchmarks' JSON files, never typed into a page: a line
  ``<!-- measured: NAME -->`` in a page becomes the summary table of benchmark ``NAME`` (the JSON
  ``benchmarks/results/NAME.json`` of a local run, else the snapshot kept in
  ``docs/benchmark-data/``), preceded by where, how and with what it ran."""

import importlib.util
import json
import re
import shutil
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BENCH_SOURCES = [ROOT / "benchmarks" / "results", ROOT / "docs" / "benchmark-data"]

_ROLE = re.compile(r":(?:func|class|mod|meth|attr|data|obj|exc):(<code>[^<]*</code>)")
_MEASURED = re.compile(r"^<!-- measured: ([\w-]+) -->$", flags=re.M)


def find_benchmark(name: str) -> Path | None:
    for source in BENCH_SOURCES:  # a local run wins over the kept snapshot
        path = source / f"{name}.json"
        if path.exists():
            return path
    return None


def provenance(data: dict, name: str) -> str:
    """One line: the command, the machine, the versions and the date of a benchmark's run."""
    m = data.get("machine", {})
    script = f"{name}.py" if name.startswith("bench_") else f"bench_{name}.py"
    command = " ".join(["python", f"benchmarks/{script}", *data.get("argv", [])])
    cpu = m.get("cpu_model") or m.get("device", "?")
    load = data.get("load_average")
    if isinstance(load, dict):  # some benchmarks record it at the start and at the end
        load = load.get("end") or next(iter(load.values()), None)
    if isinstance(load, list):  # (1, 5, 15) minutes
        load = load[0] if load else None
    loaded = (
        f", 1-minute load average {load:.1f} at the end" if isinstance(load, (int, float)) else ""
    )
    return (
        f"*Measured by `{command}` on {cpu} ({m.get('cpu_count', '?')} cores, "
        f"{m.get('backend', '?')} backend{loaded}), Python {m.get('python', '?')}, "
        f"JAX {m.get('jax', '?')}, jaxlib {m.get('jaxlib', '?')}, "
        f"{m.get('utc', 'date not recorded')}.*"
    )


def _cell(v) -> str:
    if v is None:
        return "–"
    if isinstance(v, float):
        return f"{v:.3g}"
    if isinstance(v, (list, dict)):
        return "…"
    return str(v).replace("|", "/")


def table(rows: list[dict], max_columns: int = 12) -> list[str]:
    cols: list[str] = []
    for row in rows:
        cols += [k for k in row if k not in cols]
    cols = cols[:max_columns]
    out = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    out += ["| " + " | ".join(_cell(r.get(c)) for c in cols) + " |" for r in rows]
    return out


def tables(data: dict) -> list[tuple[str, list[dict]]]:
    """Every list of rows in a benchmark's JSON, and the per-curve summaries (work–precision)."""
    out = []
    for key, value in data.items():
        if isinstance(value, list) and value and all(isinstance(r, dict) for r in value):
            out.append((key, value))
        elif (
            isinstance(value, dict)
            and value
            and all(
                isinstance(v, dict) and isinstance(v.get("summary"), dict) for v in value.values()
            )
        ):
            out.append((key, [v["summary"] for v in value.values()]))
    return out


def measured(name: str) -> str:
    path = find_benchmark(name)
    if path is None:
        return f"*No measurement of `{name}` is kept yet: run `geomjax bench` to produce one.*"
    data = json.loads(path.read_text())
    lines = [provenance(data, name), ""]
    for _key, rows in tables(data):
        lines += [*table(rows), ""]
    return "\n".join(lines)


def on_page_markdown(markdown, **kwargs):
    return _MEASURED.sub(lambda m: measured(m.group(1)), markdown)


def on_page_content(html, **kwargs):
    return _ROLE.sub(r"\1", html)


def mathjax_source() -> Path:
    spec = importlib.util.find_spec("mathjax")
    for location in (spec.submodule_search_locations or []) if spec else []:
        es5 = Path(location) / "static" / "mathjax" / "es5"
        if (es5 / "tex-mml-chtml.js").exists():
            return es5
    raise RuntimeError(
        "the docs need MathJax's browser files (package django-static-mathjax of the dev "
        "extras): pip install -e '.[dev]'"
    )


def on_post_build(config, **kwargs):
    es5 = mathjax_source()
    target = Path(config["site_dir"]) / "javascripts" / "mathjax"
    target.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(es5 / "tex-mml-chtml.js", target / "tex-mml-chtml.js")
    fonts = target / "output" / "chtml" / "fonts" / "woff-v2"
    shutil.copytree(es5 / "output" / "chtml" / "fonts" / "woff-v2", fonts, dirs_exist_ok=True)
