"""The package reads as one design: its modules form a layered import graph (no cycle, lazy
function-level imports included) and it names nothing outside the repository."""

import ast
import importlib
import json
import types
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "geomjax"


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph() -> dict[str, set[str]]:
    """module -> the geomjax modules it imports anywhere in its source (module level or lazily
    inside a function); ``from . import sub`` counts as an import of ``sub`` only."""
    mods = {module_name(p): p for p in PACKAGE.rglob("*.py")}
    graph: dict[str, set[str]] = {m: set() for m in mods}
    for name, path in mods.items():
        package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package.split(".")[: len(package.split(".")) - node.level + 1]
                    target = ".".join(base + ([node.module] if node.module else []))
                else:
                    target = node.module or ""
                subs = [f"{target}.{a.name}" for a in node.names if f"{target}.{a.name}" in mods]
                targets = subs if len(subs) == len(node.names) else [target, *subs]
            elif isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            else:
                continue
            graph[name] |= {t for t in targets if t in mods and t != name}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_import_graph_has_no_cycle():
    graph = import_graph()
    assert "geomjax.integrators.simulate" in graph["geomjax.integrators.adjoint"]  # sees lazy ones
    assert cycles(graph) == []


def test_cycle_detection_finds_a_planted_cycle():
    graph = import_graph()
    graph["geomjax.lie.so3"] = graph["geomjax.lie.so3"] | {"geomjax.integrators.lgvi"}
    assert any("geomjax.lie.so3" in c for c in cycles(graph))


# --- one vocabulary: tracing, and JAX's internals kept in ``_internal`` ----------------------------
INTERNAL = PACKAGE / "_internal"
TRACING = INTERNAL / "tracing.py"
#: names of tracing predicates: defined once, in ``geomjax/_internal/tracing.py``
TRACING_PREDICATES = {"is_traced", "_is_traced", "any_traced", "_traced", "_has_tracer"}


def sources(exclude: Path | None = None) -> dict[str, ast.Module]:
    """The package's modules (relative path -> syntax tree), those under ``exclude`` left out."""
    return {
        str(p.relative_to(ROOT)): ast.parse(p.read_text())
        for p in sorted(PACKAGE.rglob("*.py"))
        if exclude is None or not p.is_relative_to(exclude)
    }


def jax_internals_uses(tree: ast.Module) -> list[int]:
    """Lines importing or naming ``jax._src`` (``import jax._src...``, ``from jax._src...``,
    ``jax._src.x`` as an attribute)."""
    lines = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and not node.level:
            hit = (node.module or "").split(".")[:2] == ["jax", "_src"]
        elif isinstance(node, ast.Import):
            hit = any(a.name.split(".")[:2] == ["jax", "_src"] for a in node.names)
        elif isinstance(node, ast.Attribute):
            hit = (
                node.attr == "_src" and isinstance(node.value, ast.Name) and node.value.id == "jax"
            )
        else:
            hit = False
        if hit:
            lines.append(node.lineno)
    return lines


def tracing_definitions(tree: ast.Module) -> list[int]:
    """Lines defining a tracing predicate or naming ``jax.core.Tracer`` (a predicate of one's own)."""
    lines = []
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
            hit = getattr(node, "name", None) in TRACING_PREDICATES
        elif isinstance(node, ast.Attribute) and node.attr == "Tracer":
            hit = isinstance(node.value, ast.Attribute) and node.value.attr == "core"
        elif isinstance(node, ast.ImportFrom):
            hit = (node.module or "").endswith("core") and any(
                a.name == "Tracer" for a in node.names
            )
        else:
            hit = False
        if hit:
            lines.append(node.lineno)
    return lines


def test_jax_internals_only_in_internal():
    found = {
        f: ls for f, tree in sources(exclude=INTERNAL).items() if (ls := jax_internals_uses(tree))
    }
    assert found == {}
    assert jax_internals_uses(ast.parse(TRACING.read_text()))  # the rule sees a real use


def test_one_tracing_predicate():
    found = {f: ls for f, tree in sources().items() if (ls := tracing_definitions(tree))}
    assert set(found) == {str(TRACING.relative_to(ROOT))}


def test_layout_rules_find_planted_violations():
    planted = ast.parse(
        "import jax\n"
        "from jax._src.interpreters import batching\n"
        "def _is_traced(x):\n"
        "    return isinstance(x, jax.core.Tracer)\n"
        "y = jax._src.core\n"
    )
    assert jax_internals_uses(planted) == [2, 5]
    assert tracing_definitions(planted) == [3, 4]


# --- private names stay in their module ------------------------------------------------------------
#: at most this many imports of a private name across modules (a helper used by several modules is
#: public within the package: no leading underscore, not necessarily in ``__all__``)
MAX_PRIVATE_IMPORTS = 10


def private_imports(name: str, path: Path, tree: ast.Module) -> list[tuple[str, str]]:
    """``(module, name)`` of each private name (one leading underscore, not a dunder) that
    module ``name`` imports from another geomjax module: ``from .x import _y``,
    ``from ..a.b import _c``, ``from . import _private_module`` (anywhere in its source)."""
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.ImportFrom):
            continue
        if node.level:
            parts = package.split(".")[: len(package.split(".")) - node.level + 1]
            target = ".".join(parts + ([node.module] if node.module else []))
        else:
            target = node.module or ""
        if target.split(".")[0] != "geomjax" or target == name:
            continue
        found += [
            (target, a.name)
            for a in node.names
            if a.name.startswith("_") and not a.name.startswith("__")
        ]
    return found


def all_private_imports() -> list[tuple[str, str, str]]:
    out = []
    for path in sorted(PACKAGE.rglob("*.py")):
        name = module_name(path)
        out += [(name, *imp) for imp in private_imports(name, path, ast.parse(path.read_text()))]
    return out


def test_few_private_names_cross_modules():
    found = all_private_imports()
    assert ("geomjax.integrators.lgvi", "geomjax.integrators", "_so3_soa") in found  # sees them
    assert len(found) <= MAX_PRIVATE_IMPORTS, "\n".join(map(str, found))


def test_private_import_count_sees_each_form():
    planted = ast.parse(
        "from .so3 import SO3, _hat3\n"
        "from ..integrators.newton import _any_member as any_member\n"
        "from . import _checks, __version__\n"
        "from jax._src import core\n"
        "def f():\n"
        "    from geomjax.lie.so3 import _vee3\n"
    )
    found = private_imports("geomjax.lie.se3", PACKAGE / "lie" / "se3.py", planted)
    assert found == [
        ("geomjax.lie.so3", "_hat3"),
        ("geomjax.integrators.newton", "_any_member"),
        ("geomjax.lie", "_checks"),
        ("geomjax.lie.so3", "_vee3"),
    ]


# --- what a public module lists ----------------------------------------------------------------
#: modules of worked problems: their ``dir()`` lists exactly their ``__all__``
WORKED_PROBLEMS = (
    "geomjax.control.examples",
    "geomjax.reconstruction.examples",
    "geomjax.learn.problems",
)


def public_modules() -> list[str]:
    """The public packages (no private part in their name) and the modules of worked problems:
    the namespaces a user lists with ``dir()``."""
    packages = [
        module_name(p)
        for p in sorted(PACKAGE.rglob("__init__.py"))
        if not any(part.startswith("_") for part in module_name(p).split("."))
    ]
    return [*packages, *WORKED_PROBLEMS, "geomjax.control.status"]


def imported_modules(module) -> list[str]:
    """Public names in ``dir(module)`` bound to a module other than the module's own submodules
    (e.g. ``jnp`` for ``jax.numpy``; a private alias such as ``_time`` is not listed as public)."""
    return [
        name
        for name in dir(module)
        if not name.startswith("_")
        and isinstance(value := getattr(module, name, None), types.ModuleType)
        and not value.__name__.startswith(module.__name__ + ".")
    ]


def test_public_modules_list_no_imported_modules():
    names = public_modules()
    assert {"geomjax", "geomjax.control", "geomjax.lie", "geomjax.control.examples"} <= set(names)
    found = {n: bad for n in names if (bad := imported_modules(importlib.import_module(n)))}
    assert found == {}


def test_worked_problem_modules_list_their_problems_only():
    for name in WORKED_PROBLEMS:
        module = importlib.import_module(name)
        assert dir(module) == sorted(module.__all__), name
        assert all(hasattr(module, n) for n in module.__all__), name


def test_imported_module_check_sees_one():
    fake = types.ModuleType("geomjax.fake")
    fake.json, fake._json, fake.value = json, json, 1.0
    fake.sub = types.ModuleType("geomjax.fake.sub")
    assert imported_modules(fake) == ["json"]
