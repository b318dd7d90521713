"""XLA:CPU compiles small loops into single kernels: geomjax raises the size limit of that pass.

XLA's CPU runtime executes a compiled program as a sequence of "thunks", one per fused kernel,
and a ``while`` loop (every ``lax.scan`` over time steps, every fixed-iteration Newton solve)
re-dispatches each kernel of its body on every iteration: ~0.1–0.4 µs apiece, whatever the
kernel computes.  A step of a variational integrator is a few dozen small kernels, so at small
batch sizes the dispatches, not the arithmetic, set the time.  XLA has a pass that compiles a
loop into one kernel when the bytes its body touches stay under
``xla_cpu_small_while_loop_byte_threshold`` — 1 kB by default, which the Newton loop of a step
can meet while the time loop around it never does.

At ``import geomjax`` we set that threshold to 16 MiB through ``XLA_FLAGS`` (see
:data:`XLA_FLAG`): the same operations, far fewer dispatches.  Results agree to round-off, not
bitwise (LLVM compiles one kernel instead of several: 5e-15 after 300 steps of the ball on a
turntable; the test suite runs with the flag).  For the same reason a continued run equals
the uninterrupted one bitwise only when both are compiled with the same loop nest (the same
``save_every`` and at least two saved blocks each, see :func:`geomjax.simulate`): XLA:CPU lets
LLVM contract multiply-adds into FMAs wherever it finds them in one kernel.  Measured with
``benchmarks/bench_xla_loops.py`` (2-core x86-64 CPU, float64, ns per body-step, XLA's default
→ 16 MiB, two child processes alternated):

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
per-``jit`` ``compiler_options`` (which rejects this map-valued option) applies it afterwards
(checked: the loop below stays a loop of separately dispatched kernels; the free body's 1e5-step
``simulate`` ran 2.7–3.4x slower).  So when the backend has already started, ``import geomjax``
warns (:data:`LATE_IMPORT_WARNING`, attributed to the importing line) with the fix: import
geomjax before you compute anything with JAX, or put
``XLA_FLAGS=--xla_backend_extra_options=xla_cpu_small_while_loop_byte_threshold=16777216``
in the environment before Python starts.  Nothing is changed if ``XLA_FLAGS`` already sets
``xla_backend_extra_options`` (yours win), or with ``GEOMJAX_XLA_FLAGS=0`` in the environment.
The option belongs to the CPU backend (not tried on an accelerator: none was available).

Without the setting (:func:`small_loops_in_effect` is false), the SO(3) kernel's Newton
iterations of an unbatched step are unrolled rather than a rolled loop
(:func:`geomjax.integrators.newton._unroll_scalar_iterations`): a step then has no loop inside
and XLA's default threshold is met by ``simulate``'s inner loop of saved blocks.  Measured with
``benchmarks/bench_import_order.py`` (free body, LGVI, 1e5 steps, batch 1, float64, 2-core CPU
under load; late import relative to early import): saved every 100th step 3.05x -> 1.38x,
saved every step 16.8x -> 6.9x (that loop's body, which also writes the saved state, stays over
the 1 kB estimate).
"""

from __future__ import annotations

import os
import sys

__all__ = [
    "LATE_IMPORT_WARNING",
    "SMALL_LOOP_BYTES",
    "XLA_FLAG",
    "configure_xla_flags",
    "small_loops_in_effect",
]

#: The threshold geomjax sets (bytes touched by one iteration of a loop's body).
SMALL_LOOP_BYTES = 1 << 24

#: The ``XLA_FLAGS`` entry (the option is a backend option, passed through
#: ``xla_backend_extra_options``; a per-``jit`` ``compiler_options`` cannot set it).
XLA_FLAG = f"--xla_backend_extra_options=xla_cpu_small_while_loop_byte_threshold={SMALL_LOOP_BYTES}"


#: Warned at ``import geomjax`` when JAX's backend started before (the setting cannot apply).
LATE_IMPORT_WARNING = (
    "geomjax was imported after JAX's first computation, so XLA:CPU's small-loop setting "
    "(geomjax._internal.xla_flags) cannot apply in this process: XLA reads XLA_FLAGS once, when its backend "
    "starts. Time loops (simulate, Newton solves) run up to 3-10x slower at small batch sizes. "
    "Fix: import geomjax before computing anything with JAX (e.g. first in the notebook), or "
    "start Python with XLA_FLAGS=" + XLA_FLAG + " (GEOMJAX_XLA_FLAGS=0 silences this warning)."
)


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
    """Add :data:`XLA_FLAG` to ``XLA_FLAGS`` (module docstring); returns whether it did.

    Leaves ``XLA_FLAGS`` alone when it already sets ``xla_backend_extra_options`` or when
    ``GEOMJAX_XLA_FLAGS=0``.  Takes effect only before JAX's CPU backend exists."""
    env = os.environ if environ is None else environ
    if env.get("GEOMJAX_XLA_FLAGS", "1").strip().lower() in ("0", "false", "no", "off"):
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
    told: the setting is in ``XLA_FLAGS`` and was there when JAX's backend started, or was set
    by ``import geomjax`` before it started).  The SO(3) kernel's Newton iterations read it when
    a program is traced (:func:`geomjax.integrators._so3_soa.cayley_solve_scalar`): without the
    setting, a rolled loop is a loop of separately dispatched kernels, so they are unrolled."""
    return _IN_EFFECT


_before = os.environ.get("XLA_FLAGS", "")
_started = _backend_started()
_added = configure_xla_flags()
# set before the process started (or before JAX's first computation: assumed), or set now and
# the backend not yet started
_IN_EFFECT = _threshold_in(_before) or (_added and not _started)

if _added and _started:
    from .warn import warn

    warn(LATE_IMPORT_WARNING, RuntimeWarning)
