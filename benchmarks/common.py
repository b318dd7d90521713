"""Shared helpers for the benchmarks: timing with compile time reported separately, tables, JSON.

Every benchmark compares implementations side by side in one run and reports ratios.
"""

from __future__ import annotations

import json
import os
import platform
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import jax

RESULTS = Path(__file__).resolve().parent / "results"


def machine_info() -> dict:
    """Where and how a benchmark ran: backend, devices, precision, versions, host.

    Every benchmark JSON carries this (``write_json`` adds it), so results from different
    machines and backends can be told apart.  The keys of the first version are kept."""
    dev = jax.devices()[0]
    info = {
        "platform": dev.platform,
        "device": getattr(dev, "device_kind", str(dev)),
        "cpu_count": os.cpu_count(),
        "machine": platform.machine(),
        "python": platform.python_version(),
        "jax": jax.__version__,
        # XLA:CPU's small-loop threshold is here when opted in (geomjax._internal.xla_flags)
        "xla_flags": os.environ.get("XLA_FLAGS", ""),
    }
    info.update(_backend_info(dev))
    return info


def _backend_info(dev) -> dict:
    import jaxlib
    import numpy as np

    info = {
        "backend": jax.default_backend(),
        "device_count": jax.device_count(),
        "local_device_count": jax.local_device_count(),
        "process_count": jax.process_count(),
        "devices": sorted({getattr(d, "device_kind", str(d)) for d in jax.devices()}),
        "jaxlib": getattr(jaxlib, "__version__", None),
        "numpy": np.__version__,
        # the default floating dtype of jnp arrays (rows record the dtype they ran in)
        "jax_enable_x64": bool(jax.config.jax_enable_x64),
        "default_float": jnp_default_float(),
        "xla_flags": os.environ.get("XLA_FLAGS", ""),
        "newton_unroll": os.environ.get("GEOMJAX_NEWTON_UNROLL", "auto"),
        "cpu_model": _cpu_model(),
        "host_memory_GB": _host_memory_gb(),
        "utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    try:  # accelerators report their memory; CPU devices may not
        stats = dev.memory_stats() or {}
        if "bytes_limit" in stats:
            info["device_memory_GB"] = stats["bytes_limit"] / 1e9
    except Exception:  # optional information, never fatal
        pass
    return info


def jnp_default_float() -> str:
    import jax.numpy as jnp

    return jnp.zeros(()).dtype.name


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _host_memory_gb() -> float | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) * 1024 / 1e9
    except OSError:
        pass
    return None


#: Peak DRAM bandwidth (GB/s, vendor figures) by ``device_kind`` substring; the first match wins.
PEAK_BANDWIDTH_GBS = {
    "H200": 4800.0,
    "H100 PCIe": 2000.0,
    "H100 NVL": 3900.0,
    "H100": 3350.0,  # SXM5
    "GH200": 4000.0,
    "A100-SXM4-80GB": 2039.0,
    "A100 80GB PCIe": 1935.0,
    "A100": 1555.0,
    "L40S": 864.0,
    "L4": 300.0,
    "A10G": 600.0,
    "V100": 900.0,
    "T4": 320.0,
    "TPU v4": 1200.0,
    "TPU v5 lite": 819.0,
    "TPU v5e": 819.0,
    "TPU v5p": 2765.0,
}


def peak_bandwidth_gbs(device=None) -> float | None:
    """Vendor peak memory bandwidth of ``device`` (GB/s) from :data:`PEAK_BANDWIDTH_GBS`, or None."""
    kind = getattr(device or jax.devices()[0], "device_kind", "")
    for key, value in PEAK_BANDWIDTH_GBS.items():
        if key.lower() in kind.lower():
            return value
    return None


def measure_copy_bandwidth(nbytes: int = 1 << 28, dtype="float32") -> float:
    """Measured streaming bandwidth (GB/s): ``y = x + 1`` over ``nbytes`` (read + write).

    A practical ceiling for bandwidth-bound kernels on the current default device (on a CPU,
    what one XLA fusion reaches; vendor peaks are rarely reached)."""
    import jax.numpy as jnp

    n = nbytes // jnp.dtype(dtype).itemsize
    x = jnp.zeros((n,), dtype)
    # best of two medians: a bandwidth is a ceiling, so the faster measurement is the estimate
    # (on a shared machine a whole measurement can be slowed down)
    run_s = min(time_jitted(lambda x: x + 1, x, repeats=5, min_time=0.2)[1] for _ in range(2))
    return 2 * n * jnp.dtype(dtype).itemsize / run_s / 1e9


def compiled_memory(fn, *args) -> dict:
    """XLA's memory analysis of ``jax.jit(fn)`` for ``args`` (MB): temporaries, arguments, outputs.

    ``temp_MB`` is the scratch the program needs at its peak (e.g. the residuals stored for a
    reverse pass); it does not depend on the backend's allocator, so CPU and GPU are comparable."""
    mem = jax.jit(fn).lower(*args).compile().memory_analysis()
    if mem is None:
        return {}
    get = lambda k: getattr(mem, k, float("nan")) / 1e6  # noqa: E731
    return {
        "temp_MB": get("temp_size_in_bytes"),
        "argument_MB": get("argument_size_in_bytes"),
        "output_MB": get("output_size_in_bytes"),
    }


def time_jitted(fn, *args, repeats: int = 10, min_time: float = 0.2, jit=None):
    """Compile ``fn`` for ``args`` and time it (``jit``: the wrapper, default ``jax.jit``; e.g.
    ``geomjax.jit``, which has ``.lower`` as well).

    Returns ``(compile_seconds, run_seconds)``: compile time is lowering + XLA compilation
    (:func:`compile_timed`), run time :func:`measure`'s median over ``repeats`` blocks of calls
    (each block at least ``min_time``/repeats).
    """
    compiled, compile_s = compile_timed(fn, *args, jit=jit)
    return compile_s, measure(compiled, *args, repeats=repeats, min_time=min_time).run_s


# --------------------------------------------------------------------------------------------
# The timing harness: every benchmark times through these (``time.perf_counter`` is read here
# only).  One estimator for repeated runs: the median.  On a shared machine a single slow
# stretch (another process, a page-in) inflates a few samples; the median ignores them, unlike
# the mean, and unlike the minimum it does not reward the one lucky sample, so repeated runs of
# a benchmark agree with each other.  A file that keeps the minimum says why where it does.
# --------------------------------------------------------------------------------------------


#: The clocks a benchmark may offer (``--clock=cpu``: the process's CPU time, steadier when other
#: processes compete for the cores; it counts every thread's time, though).
CLOCKS = {"wall": time.perf_counter, "cpu": time.process_time}


@dataclass(frozen=True)
class Timing:
    """What :func:`measure` saw.

    ``first_s``: the first call (tracing + compilation + one run for a jitted function);
    ``run_s``: seconds per call, the median of ``samples`` (each sample: one block of
    ``calls`` calls, divided by ``calls``); ``compile_s``: ``first_s - run_s`` (at least 0),
    the estimate of what the first call spent on more than running; ``out``: the result of the
    last call (so that a benchmark need not call again to check it)."""

    first_s: float
    run_s: float
    samples: tuple[float, ...]
    calls: int = 1
    out: object = field(default=None, repr=False, compare=False)

    @property
    def compile_s(self) -> float:
        return max(self.first_s - self.run_s, 0.0)

    @property
    def run_ms(self) -> float:
        return 1e3 * self.run_s


def _call(fn, args, block: bool):
    out = fn(*args)
    return jax.block_until_ready(out) if block else out


def measure(
    fn,
    *args,
    repeats: int = 5,
    min_time: float = 0.0,
    warmup: bool = True,
    block: bool = True,
    clock=time.perf_counter,
) -> Timing:
    """Time ``fn(*args)``: a first call, then ``repeats`` samples; :class:`Timing`.

    ``block``: wait for the result (``jax.block_until_ready``) before reading the clock (leave it
    on for JAX; it is harmless for other results).  ``warmup``: the first call is timed apart as
    ``first_s`` and is not a sample; with ``warmup=False`` it is the first sample (functions
    whose every call is a cold call, e.g. an eager solve).  ``min_time`` > 0: each sample is a
    block of calls lasting about ``min_time / repeats`` (the number of calls per block set from
    one more timed call), for functions too fast to time one call at a time.  ``clock``: the
    clock read (``time.process_time`` for CPU time).  The estimate is the median (see above)."""
    t0 = clock()
    out = _call(fn, args, block)
    first_s = clock() - t0
    samples = [] if warmup else [first_s]
    calls = 1
    if min_time > 0:
        t0 = clock()
        _call(fn, args, block)
        calls = max(1, int(min_time / max(repeats, 1) / max(clock() - t0, 1e-7)))
    while len(samples) < repeats:
        t0 = clock()
        for _ in range(calls):
            out = fn(*args)
        if block:
            jax.block_until_ready(out)
        samples.append((clock() - t0) / calls)
    return Timing(first_s, statistics.median(samples), tuple(samples), calls, out)


def measure_side_by_side(
    fns: dict,
    *args,
    rounds: int = 5,
    min_time: float = 0.0,
    warmup: bool = True,
    block: bool = True,
    clock=time.perf_counter,
) -> dict:
    """``{name: Timing}`` for functions of the same ``args``, timed in interleaved rounds (each
    round takes one sample of every function), so that the ratios of one table see the same
    machine load.  Each function's first call is its ``first_s``; ``warmup=False``: the first
    calls are the first round (long runs, already compiled); ``min_time`` as in
    :func:`measure` (per function and round: each sample lasts about ``min_time / rounds``).
    Functions of different arguments: pass closures (``lambda: f(x)``) and no ``args``."""
    first, calls, samples, outs = {}, {}, {name: [] for name in fns}, {}
    for name, fn in fns.items():
        t0 = clock()
        outs[name] = _call(fn, args, block)
        first[name] = clock() - t0
        if not warmup:
            samples[name].append(first[name])
        calls[name] = 1
        if min_time > 0:
            t0 = clock()
            _call(fn, args, block)
            calls[name] = max(1, int(min_time / max(rounds, 1) / max(clock() - t0, 1e-7)))
    for _ in range(rounds - (0 if warmup else 1)):
        for name, fn in fns.items():
            t0 = clock()
            for _ in range(calls[name]):
                outs[name] = fn(*args)
            if block:
                jax.block_until_ready(outs[name])
            samples[name].append((clock() - t0) / calls[name])
    return {
        name: Timing(first[name], statistics.median(s), tuple(s), calls[name], outs[name])
        for name, s in samples.items()
    }


def compile_timed(fn, *args, jit=None, clock=time.perf_counter):
    """``(compiled, seconds)``: ``jit(fn).lower(*args).compile()`` (``jit`` default
    ``jax.jit``) and the time it took (tracing, lowering and XLA compilation, no run)."""
    with timer(clock) as t:
        compiled = (jax.jit if jit is None else jit)(fn).lower(*args).compile()
    return compiled, t.s


class Timer:
    """A stopwatch for code that is not one call (a Python loop of solves, a training loop, a
    whole script): ``with timer() as t: ...`` then ``t.s``; or ``t = timer()`` at the start and
    ``t.elapsed`` whenever; ``t.lap()`` the time since the previous lap (or the start).  Block on
    JAX results inside the timed code (``jax.block_until_ready``)."""

    def __init__(self, clock=time.perf_counter):
        self.clock = clock
        self.start = self._lap = clock()
        self.s = None

    def __enter__(self):
        self.start = self._lap = self.clock()
        self.s = None
        return self

    def __exit__(self, *exc):
        self.s = self.clock() - self.start
        return False

    @property
    def elapsed(self) -> float:
        """Seconds since the start (frozen at the end of a ``with`` block)."""
        return self.clock() - self.start if self.s is None else self.s

    def lap(self) -> float:
        now = self.clock()
        out, self._lap = now - self._lap, now
        return out


def timer(clock=time.perf_counter) -> Timer:
    """A started :class:`Timer` (``clock``: ``time.perf_counter`` or ``time.process_time``)."""
    return Timer(clock)


def median(values) -> float:
    """The harness's estimator over repeated measurements (see the note above :class:`Timing`)."""
    return float(statistics.median(values))


def fresh_process(target=None, args=(), *, code=None, env=None, timeout=None, cwd=None) -> dict:
    """Run a Python child in a fresh process and return the JSON object its last output line
    prints (benchmarks that measure a cold start, or compare process-wide settings such as
    XLA's flags, one process each).

    ``target``: a script path (``.py``) or a module name (run with ``-m``); or ``code``: a
    program run with ``-c``.  ``args``: its arguments.  ``env``: changes to this process's
    environment (a value of None removes the variable).  A child that fails raises
    ``RuntimeError`` with the end of its standard error."""
    import subprocess

    if (target is None) == (code is None):
        raise ValueError("pass a script or module, or code")
    if code is not None:
        cmd = [sys.executable, "-c", code]
    elif str(target).endswith(".py"):
        cmd = [sys.executable, str(target)]
    else:
        cmd = [sys.executable, "-m", str(target)]
    full_env = dict(os.environ)
    for key, value in (env or {}).items():
        if value is None:
            full_env.pop(key, None)
        else:
            full_env[key] = str(value)
    proc = subprocess.run(
        cmd + [str(a) for a in args],
        env=full_env,
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=cwd,
    )
    lines = [line for line in proc.stdout.splitlines() if line.strip()]
    if proc.returncode != 0 or not lines:
        raise RuntimeError(
            f"child {cmd[1:3]} exited with {proc.returncode}:\n{proc.stderr[-3000:]}"
        )
    return json.loads(lines[-1])


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
    payload.setdefault("argv", sys.argv[1:])
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
    argv = sys.argv[1:] if argv is None else argv
    return "--fast" in argv or os.environ.get("GEOMJAX_FAST", "0") == "1"


def double_pendulum_lagrangian(q, v, g=9.81):
    """The planar double pendulum in joint angles (unit masses and lengths, angles from the
    downward vertical): ``L = ȧ² + ½ḃ² + ȧḃ cos(a − b) + 2g cos a + g cos b``."""
    import jax.numpy as jnp

    a, b = q[0], q[1]
    da, db = v[0], v[1]
    return da**2 + 0.5 * db**2 + da * db * jnp.cos(a - b) + 2 * g * jnp.cos(a) + g * jnp.cos(b)


def child_or_parent(argv, child):
    """The entry of a benchmark that compares process-wide settings, one child process each:
    ``(fast, None)`` after running ``child(fast)`` when ``--child`` is in ``argv`` (this process
    is a child), else ``(fast, rounds)``: ``--rounds N`` (default 3, 1 with ``--fast``)."""
    fast = fast_mode(argv)
    if "--child" in argv:
        child(fast)
        return fast, None
    rounds = int(argv[argv.index("--rounds") + 1]) if "--rounds" in argv else (1 if fast else 3)
    return fast, rounds


def run_child_json(script, fast: bool, drop=(), extra=None) -> dict:
    """Run ``script --child [--fast]`` in a fresh Python process whose environment lacks the
    variables ``drop`` and adds ``extra``; returns the JSON object its last output line prints
    (:func:`fresh_process`)."""
    env = {**dict.fromkeys(drop), **(extra or {})}
    return fresh_process(script, ["--child"] + (["--fast"] if fast else []), env=env)
