"""Command line: ``geomjax demo``, ``geomjax bench NAME``, ``geomjax --version``."""

from __future__ import annotations

import argparse
import os
import runpy
import sys
from pathlib import Path

#: benchmark name -> script in the repository's benchmarks/ folder
BENCHMARKS = {
    "lie": "bench_lie.py",
    "rigid-body": "bench_rigid_body.py",
    "riemann": "bench_riemann.py",
    "nonholonomic": "bench_nonholonomic.py",
    "scale": "bench_scale.py",
    "work-precision": "bench_work_precision.py",
    "long-horizon": "bench_long_horizon.py",
    "mpc": "bench_mpc.py",
    "adjoint": "bench_adjoint.py",
    "gradient-cost": "bench_gradient_cost.py",
    "variational": "bench_variational.py",
    "reconstruction": "bench_reconstruction.py",
    "control": "bench_control.py",
    "trajopt": "bench_trajopt.py",
    "online-mpc": "bench_online_mpc.py",
    "casadi": "bench_casadi.py",
    "scalarize": "bench_scalarize.py",
    "xla-loops": "bench_xla_loops.py",
    "import-order": "bench_import_order.py",
    "eager-gradient": "bench_eager_gradient.py",
    "compile-cache": "bench_compile_cache.py",
    "float32": "bench_float32.py",
    "learn": "bench_learn.py",
    "learn-quadrotor": "bench_learn_quadrotor.py",
}
#: other names of a benchmark (not run twice by ``all``): ``geomjax bench gpu`` is the scale suite
#: (its batch sizes follow the backend: GPU-sized on an accelerator, scaled down on a CPU)
BENCHMARK_ALIASES = {"gpu": "scale"}


def _benchmarks_dir() -> Path:
    here = Path(__file__).resolve().parent.parent / "benchmarks"
    if not here.is_dir():
        raise SystemExit(
            "geomjax bench: the benchmarks/ folder was not found next to the package; the "
            "benchmarks ship with the source tree (install with `pip install -e .`)."
        )
    return here


def _run_bench(name: str, extra: list[str]) -> None:
    name = BENCHMARK_ALIASES.get(name, name)
    names = list(BENCHMARKS) if name == "all" else [name]
    for n in names:
        if n not in BENCHMARKS:
            raise SystemExit(
                f"geomjax bench: unknown benchmark {n!r}; choose from {[*BENCHMARKS, 'all']}"
            )
        script = _benchmarks_dir() / BENCHMARKS[n]
        sys.path.insert(0, str(script.parent))
        old_argv = sys.argv
        sys.argv = [str(script), *extra]
        try:
            runpy.run_path(str(script), run_name="__main__")
        finally:
            sys.argv = old_argv
            sys.path.remove(str(script.parent))


def main(argv: list[str] | None = None) -> int:
    from . import __version__

    parser = argparse.ArgumentParser(prog="geomjax", description=__doc__)
    parser.add_argument("--version", action="version", version=f"geomjax {__version__}")
    sub = parser.add_subparsers(dest="command")

    p_demo = sub.add_parser("demo", help="run the showcase: printed checks and plots")
    p_demo.add_argument("--fast", action="store_true", help="small sizes (also GEOMJAX_FAST=1)")
    p_demo.add_argument("--out", default="demo_output", help="folder for the plots")
    p_demo.add_argument("--section", action="append", help="run only these sections")

    p_bench = sub.add_parser("bench", help="run a benchmark from benchmarks/")
    p_bench.add_argument("name", help=f"one of {[*BENCHMARKS, *BENCHMARK_ALIASES, 'all']}")
    p_bench.add_argument("extra", nargs=argparse.REMAINDER, help="passed to the benchmark script")

    args = parser.parse_args(argv)
    if args.command == "demo":
        # an application, not a library: the showcase opts in to the process settings (XLA:CPU's
        # small-loop compilation, before anything computes; see geomjax.configure)
        from . import configure
        from .demo import run_demo

        configure(xla_small_loops=True)

        fast = args.fast or os.environ.get("GEOMJAX_FAST", "0") == "1"
        return run_demo(Path(args.out), fast=fast, sections=args.section)
    if args.command == "bench":
        _run_bench(args.name, args.extra)
        return 0
    parser.print_help()
    return 0


if __name__ == "__main__":
    sys.exit(main())
