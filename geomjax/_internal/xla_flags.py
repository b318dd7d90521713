"""XLA:CPU compiles small loops into single kernels: an opt-in setting raises the size limit of
that pass.

XLA's CPU runtime executes a compiled program as a sequence of "thunks", one per fused kernel,
and a ``while`` loop (every ``lax.scan`` over time steps, every fixed-iteration Newton solve)
re-dispatches each kernel of its body on every iteration: ~0.1–0.4 µs apiece, whatever the
kernel computes.  A step of a variational integrator is a few dozen small kernels, so at small
batch sizes the dispatches, not the arithmetic, set the time.  XLA has a pass that compiles a
loop into one kernel when the bytes its body touches (XLA's cost estimate of one iteration)
stay under ``xla_cpu_small_while_loop_byte_threshold``: 1 kB by default.

**Off by default**: ``import geomjax`` changes no process state.  Opt in with
``geomjax.configure(xla_small_loops=True)`` before JAX's first computation, or with
``GEOMJAX_XLA_FLAGS=1`` in the environment (read at ``import geomjax``): either adds
:data:`XLA_FLAG` (threshold 16 MiB) to ``XLA_FLAGS``.  Setting
``XLA_FLAGS=--xla_backend_extra_options=xla_cpu_small_while_loop_byte_threshold=16777216``
yourself before Python starts does the same.  Nothing is changed if ``XLA_FLAGS`` already
sets ``xla_backend_extra_options`` (yours win), or with ``GEOMJAX_XLA_FLAGS=0``.

What geomjax does without the setting (the default): the SO(3) kernel's Newton iterations of
an unbatched step are unrolled (:func:`geomjax.integrators.newton._unroll_scalar_iterations`):
a step then has no loop inside, and a loop of steps that saves nothing in between (the inner
loop of ``simulate(..., save_every > 1)``) meets XLA's default threshold and is one kernel.
A loop that saves every step does not: XLA's estimate of one iteration of the free body's
LGVI step is ~940 bytes (measured by the largest extra output that still fits: 4 doubles), and
the saved state adds ~200.  Tried without success (free body, 1e5 steps, ``save_every=1``):
grouping the saved steps in an inner loop of ~100 that writes one packed block (the same
dispatches per step, times within noise), ``lax.scan(..., unroll=4 or 16)`` (5–8× slower),
steps reading and writing their state in a preallocated block (not under the threshold),
and a select chain on ``iota`` instead of constant masks in the carry's stack (more bytes).
The measured cost of the default, case by case, is in the documentation's Architecture page
(*Process settings*), from ``benchmarks/bench_import_order.py``.

Results with and without the setting agree to round-off, not bitwise (LLVM compiles one kernel
instead of several: 5e-15 after 300 steps of the ball on a turntable).  Earlier measurements
with ``benchmarks/bench_xla_loops.py`` (2-core x86-64 CPU, float64, ns per body-step, XLA's
default → 16 MiB, two child processes alternated):

* ``NonholonomicVI``, Chaplygin sleigh: batch 1: 430 → 134; batch 1024: 83 → 51;
* ``NonholonomicVI``, ball on a turntable: batch 1: 5340 → 464; batch 1024: 573 → 368;
* the reduced-ODE RK4 in a bare ``lax.scan``: ball, batch 1: 366 → 81 (the other loops of the
  process are affected too, geomjax's or not);
* ``LGVI`` free body (SO(3) kernel): batch 1: 265 → 113; batch 1024: 46 → 32; its
  ``ReversibleAdjoint`` gradient, batch 1: 1990 → 328.

Why not unlimited: a loop whose iterations touch more memory than the caches hold gains
nothing from one kernel and loses the runtime's parallel dispatch (batch 16384: sleigh 56 → 76
ns with an unlimited threshold, 65 with 16 MiB; ball 301 → 366 / 302).

When it applies: only if the flag is in ``XLA_FLAGS`` before JAX creates its CPU backend (the
first computation of the process).  XLA parses its flags once per process: neither a later
``XLA_FLAGS`` nor re-creating the backends (``jax.extend.backend.clear_backends()``) nor a
per-``jit`` ``compiler_options`` (which rejects this map-valued option) applies it afterwards.
So an opt-in that comes after JAX's first computation changes nothing and warns
(:data:`LATE_IMPORT_WARNING`, attributed to the user's line) with the fix.  The option belongs
to the CPU backend (not tried on an accelerator: none was available).
"""

from __future__ import annotations

import os
import sys

__all__ = [
    "LATE_IMPORT_WARNING",
    "SMALL_LOOP_BYTES",
    "XLA_FLAG",
    "configure_xla_flags",
    "enable_small_loops",
    "opted_in",
    "small_loops_in_effect",
]

#: The threshold geomjax sets (bytes touched by one iteration of a loop's body).
SMALL_LOOP_BYTES = 1 << 24

#: The ``XLA_FLAGS`` entry (the option is a backend option, passed through
#: ``xla_backend_extra_options``; a per-``jit`` ``compiler_options`` cannot set it).
XLA_FLAG = f"--xla_backend_extra_options=xla_cpu_small_while_loop_byte_threshold={SMALL_LOOP_BYTES}"


#: Warned when the setting is asked for (``configure(xla_small_loops=True)``,
#: ``GEOMJAX_XLA_FLAGS=1``) after JAX's backend started (it cannot apply then).
LATE_IMPORT_WARNING = (
    "XLA:CPU's small-loop setting (geomjax.configure(xla_small_loops=True) or "
    "GEOMJAX_XLA_FLAGS=1) was asked for after JAX's first computation, so it cannot apply in "
    "this process: XLA reads XLA_FLAGS once, when its backend starts. Fix: import geomjax and "
    "call geomjax.configure(xla_small_loops=True) before computing anything with JAX (e.g. "
    "first in the notebook), or start Python with XLA_FLAGS=" + XLA_FLAG + ". Without it "
    "geomjax runs with XLA's defaults (results agree to round-off; simulate saving every step "
    "is slower at small batch sizes)."
)

_ON = ("1", "true", "yes", "on")
_OFF = ("0", "false", "no", "off")


def _backend_started() -> bool:
    """Whether JAX has created its backends (after that, ``XLA_FLAGS`` is not read again)."""
    if "jax" not in sys.modules:
        return False
    try:
        from jax._src import xla_bridge

        return bool(xla_bridge.backends_are_initialized())
    except Exception:  # a JAX without this private helper: assume the setting applies
        return False


def configure_xla_flags(environ=None) -> bool:
    """Add :data:`XLA_FLAG` to ``XLA_FLAGS`` of ``environ`` (default ``os.environ``); returns
    whether it did.

    Leaves ``XLA_FLAGS`` alone when it already sets ``xla_backend_extra_options`` or when
    ``GEOMJAX_XLA_FLAGS=0``.  Takes effect only before JAX's CPU backend exists.  Called only
    on request (:func:`enable_small_loops`), never by ``import geomjax`` alone."""
    env = os.environ if environ is None else environ
    if env.get("GEOMJAX_XLA_FLAGS", "").strip().lower() in _OFF:
        return False
    flags = env.get("XLA_FLAGS", "")
    if "xla_backend_extra_options" in flags:
        return False
    env["XLA_FLAGS"] = f"{flags} {XLA_FLAG}".strip()
    return True


def _threshold_in(flags: str) -> bool:
    """Whether ``flags`` raise the small-loop threshold (any value above XLA's default)."""
    for word in flags.replace(",", " ").split():
        key, _, value = word.rpartition("=")
        if key.endswith("xla_cpu_small_while_loop_byte_threshold"):
            try:
                return int(value) > 1024
            except ValueError:
                return False
    return False


def small_loops_in_effect() -> bool:
    """Whether this process's XLA:CPU runs with the raised small-loop threshold (as far as can be
    told: the setting was in ``XLA_FLAGS`` at ``import geomjax`` and the backend had not started
    before it was added, or :func:`enable_small_loops` added it before the backend started).
    The SO(3) kernel's Newton iterations read it when a program is traced
    (:func:`geomjax.integrators._so3_soa.cayley_solve_scalar`): without the setting, a rolled
    loop is a loop of separately dispatched kernels, so they are unrolled."""
    return _IN_EFFECT


def enable_small_loops() -> bool:
    """Opt in: add :data:`XLA_FLAG` to ``os.environ["XLA_FLAGS"]`` (:func:`configure_xla_flags`)
    and return whether the setting is in effect in this process.  After JAX's first computation
    it cannot apply: warns (:data:`LATE_IMPORT_WARNING`) and returns ``False`` (the flag is
    still added, for child processes)."""
    global _IN_EFFECT
    if _IN_EFFECT:
        return True
    started = _backend_started()
    added = configure_xla_flags()
    if started:
        from .warn import warn

        warn(LATE_IMPORT_WARNING, RuntimeWarning)
        return False
    _IN_EFFECT = added or _threshold_in(os.environ.get("XLA_FLAGS", ""))
    return _IN_EFFECT


def opted_in(environ=None) -> bool:
    """Whether ``GEOMJAX_XLA_FLAGS`` asks for the setting (``1``/``true``/``yes``/``on``)."""
    env = os.environ if environ is None else environ
    return env.get("GEOMJAX_XLA_FLAGS", "").strip().lower() in _ON


# a threshold the user put in XLA_FLAGS before the process started (or before JAX's first
# computation: assumed) is in effect; geomjax itself changes nothing unless asked to
_IN_EFFECT = _threshold_in(os.environ.get("XLA_FLAGS", ""))

# the opt-in through the environment, read at ``import geomjax`` (this module is imported first)
if opted_in():
    enable_small_loops()
