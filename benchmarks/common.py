"""Shared helpers for the benchmarks: timing with compile time reported separately, tables, JSON.

Every benchmark compares implementations side by side in one run and reports ratios.
"""

from __future__ import annotations

import json
import os
import platform
import statistics
import time
from pathlib import Path

import jax

RESULTS = Path(__file__).resolve().parent / "results"


def machine_info() -> dict:
    dev = jax.devices()[0]
    return {
        "platform": dev.platform,
        "device": getattr(dev, "device_kind", str(dev)),
        "cpu_count": os.cpu_count(),
        "machine": platform.machine(),
        "python": platform.python_version(),
        "jax": jax.__version__,
    }


def time_jitted(fn, *args, repeats: int = 10, min_time: float = 0.2):
    """Compile ``fn`` for ``args`` and time it.

    Returns ``(compile_seconds, run_seconds)``: compile time is lowering + XLA compilation,
    run time the median over ``repeats`` blocks of calls (each block at least ``min_time``/repeats).
    """
    jitted = jax.jit(fn)
    t0 = time.perf_counter()
    compiled = jitted.lower(*args).compile()
    compile_s = time.perf_counter() - t0
    jax.block_until_ready(compiled(*args))  # warm-up
    # calls per block so that one block lasts long enough to be measured reliably
    t0 = time.perf_counter()
    jax.block_until_ready(compiled(*args))
    one = max(time.perf_counter() - t0, 1e-7)
    per_block = max(1, int(min_time / repeats / one))
    samples = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(per_block):
            out = compiled(*args)
        jax.block_until_ready(out)
        samples.append((time.perf_counter() - t0) / per_block)
    return compile_s, statistics.median(samples)


def print_table(rows: list[dict], columns: list[str], title: str = "") -> None:
    if title:
        print(f"\n{title}")
    widths = {c: max(len(c), *(len(_fmt(r.get(c))) for r in rows)) for c in columns}
    print("  ".join(c.ljust(widths[c]) for c in columns))
    print("  ".join("-" * widths[c] for c in columns))
    for r in rows:
        print("  ".join(_fmt(r.get(c)).ljust(widths[c]) for c in columns))


def _fmt(v) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.3g}"
    return str(v)


def write_json(name: str, payload: dict) -> Path:
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"{name}.json"
    payload = {"machine": machine_info(), **payload}
    path.write_text(json.dumps(payload, indent=2, default=float))
    print(f"\nwrote {path}")
    return path


def save_figure(fig, path, dpi: int = 110) -> Path:
    """Lay out, write and close a matplotlib figure; report where it went."""
    import matplotlib.pyplot as plt

    fig.tight_layout()
    fig.savefig(path, dpi=dpi)
    plt.close(fig)
    print(f"wrote {path}")
    return Path(path)


def fast_mode(argv=None) -> bool:
    import sys

    argv = sys.argv[1:] if argv is None else argv
    return "--fast" in argv or os.environ.get("GEOMJAX_FAST", "0") == "1"
