"""The showcase behind ``geomjax demo``: one section per capability, each printing the checks it
makes (against closed forms or conservation laws) and writing its plots."""

from __future__ import annotations

import time as _time
from pathlib import Path

from . import lie, nonholonomic, riemann, rigid_body

#: section name -> module with ``run(out: Path, fast: bool) -> list[Check]``
SECTIONS = {
    "lie": lie,
    "rigid-body": rigid_body,
    "riemann": riemann,
    "nonholonomic": nonholonomic,
}
from . import reconstruction as _reconstruction  # noqa: E402  (Cabrera, *Base-controlled mechanical systems and geometric phases* section)

SECTIONS["base-controlled"] = _reconstruction

# variational integrators in coordinates
from . import variational as _variational  # noqa: E402

SECTIONS["variational"] = _variational


def run_demo(out: Path, fast: bool = False, sections: list[str] | None = None) -> int:
    import jax

    jax.config.update("jax_enable_x64", True)
    import matplotlib

    matplotlib.use("Agg")

    out.mkdir(parents=True, exist_ok=True)
    names = sections or list(SECTIONS)
    failed = 0
    for name in names:
        if name not in SECTIONS:
            raise SystemExit(
                f"geomjax demo: unknown section {name!r}; choose from {list(SECTIONS)}"
            )
        t0 = _time.perf_counter()
        print(f"\n=== {name} " + "=" * (70 - len(name)))
        checks = SECTIONS[name].run(out, fast)
        for c in checks:
            print(c.line())
            failed += not c.ok
        print(f"--- {name}: {_time.perf_counter() - t0:.1f} s")
    print(f"\nplots written to {out.resolve()}")
    if failed:
        print(f"{failed} check(s) FAILED")
        return 1
    print("all checks passed")
    return 0


# trajectory optimization
from . import control as _control  # noqa: E402

SECTIONS["control"] = _control

# higher order by composition and the reversible adjoint
from . import higher_order as _higher_order  # noqa: E402

SECTIONS["higher-order"] = _higher_order

# identification of physical parameters through the simulator
from . import learn as _learn  # noqa: E402

SECTIONS["learn"] = _learn
