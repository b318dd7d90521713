"""After ``mkdocs build``: every public name of geomjax and its subpackages is in the site's API
reference (the object inventory ``site/objects.inv``) and has a docstring.  Exit status 1 lists
what is missing.  Run by ``make docs``."""

import importlib
import inspect
import sys
import zlib
from pathlib import Path

SUBPACKAGES = [
    "lie",
    "systems",
    "integrators",
    "riemann",
    "variational",
    "reconstruction",
    "control",
    "learn",
]


def inventory_names(path: Path) -> set[str]:
    data = path.read_bytes()
    body = data.split(b"\n", 4)[4]  # four header lines, then the zlib stream
    lines = zlib.decompress(body).decode().splitlines()
    return {line.split(" ", 1)[0] for line in lines}


def main(site: Path) -> int:
    names = inventory_names(site / "objects.inv")
    missing, undocumented = [], []
    import geomjax

    modules = {"geomjax": geomjax} | {
        f"geomjax.{s}": importlib.import_module(f"geomjax.{s}") for s in SUBPACKAGES
    }
    for modname, mod in modules.items():
        for name in mod.__all__:
            obj = getattr(mod, name)
            if name.startswith("__") or inspect.ismodule(obj):
                continue
            # a function re-exported from a module of the same name (integrators.simulate) is
            # documented under the module's path
            documented = (
                f"{modname}.{name}" in names or f"{modname}.{name}.{name}" in names
                if modname != "geomjax"
                else any(n.endswith("." + name) for n in names)
            )
            if not documented:
                missing.append(f"{modname}.{name}")
            doc = getattr(obj, "__doc__", None)
            if (inspect.isclass(obj) or callable(obj)) and not (doc and doc.strip()):
                undocumented.append(f"{modname}.{name}")
    for label, items in (("not in the API reference", missing), ("no docstring", undocumented)):
        if items:
            print(f"{len(items)} public names {label}:", *sorted(set(items)), sep="\n  ")
    if missing or undocumented:
        return 1
    print(f"API reference: all public names of {len(modules)} modules documented")
    return 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1] if len(sys.argv) > 1 else "site")))
