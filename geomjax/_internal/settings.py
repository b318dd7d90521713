"""``geomjax.configure``: the opt-in process settings (none is applied by ``import geomjax``);
``geomjax.jit``: a program compiled with geomjax's per-program XLA options."""

from __future__ import annotations

import functools
import gc

from . import compile_cache, gc_freeze, xla_flags

__all__ = ["configure", "jit"]


def jit(fun=None, /, *, library_fusions: bool = True):
    """:func:`equinox.filter_jit` whose top-level program compiles its loops fast on CPU.

    ``geomjax.jit(f)`` is ``equinox.filter_jit(f)`` (arrays traced, everything else static),
    compiled with XLA:CPU's small-loop threshold raised for this program alone
    (:mod:`geomjax._internal.xla_flags`): the time loops of :func:`geomjax.simulate`, its
    gradients (plain reverse mode or ``ReversibleAdjoint``) and the solvers' loops then run as
    single kernels instead of re-dispatching every kernel of the loop's body on each iteration.
    ``geomjax``'s own entry points do this when called eagerly; wrap *your* program in
    ``geomjax.jit`` where you would write ``jax.jit``/``equinox.filter_jit`` around them, e.g.
    ``geomjax.jit(jax.grad(loss))``.  Nothing else of the process changes: other programs keep
    XLA's defaults whatever the import order.

    Results agree with ``jax.jit``'s to round-off (not bitwise: LLVM compiles one kernel instead
    of several).  Inside another ``jit``/``vmap``/``grad`` trace it is inlined like
    ``equinox.filter_jit`` (JAX takes compiler options only on a top-level program).  Switched
    off by ``configure(xla_small_loops=False)`` or ``GEOMJAX_XLA_FLAGS=0``; redundant (and
    skipped) where the setting is in effect for the whole process
    (``configure(xla_small_loops=True)`` before JAX's first computation).  On other backends
    the option is not added.

    ``library_fusions=False``: also without XLA:CPU's library fusions (the matrix products, and
    the elementwise and reduction groups around them, handed to a kernel library), for programs
    of many small products repeated in a loop: batched trajectory optimization
    (``jax.vmap`` of :func:`geomjax.control.solve_ocp`'s solve), model predictive control.  Each
    library call is a kernel of its own inside a loop that is otherwise one kernel, and costs
    more than its arithmetic on 6×9 matrices.  Not the default: compilation takes longer
    (1.4–2.2× for ``solve_ocp``), and programs of larger products lose (a width-64 network's
    gradient over a batch of 256 ran 1.6× slower without the library).  ``solve_ocp``'s own
    ``fast_iterations=True`` and ``run_mpc`` apply it to their programs; the documentation's
    Architecture page (*Small products in the solver's kernels*) has the measurements.

    Usable as a decorator (``@geomjax.jit`` or ``@geomjax.jit(library_fusions=False)``)."""
    from .eager import top_level_options

    if not isinstance(library_fusions, bool):
        raise TypeError(
            "geomjax.jit: argument 'library_fusions' must be True or False, got "
            f"{library_fusions!r}"
        )
    if fun is None:
        return functools.partial(jit, library_fusions=library_fusions)
    if not callable(fun):
        raise TypeError(f"geomjax.jit: argument 'fun' must be callable, got {type(fun).__name__}")
    return top_level_options(fun, small_loops=True, library_fusions=library_fusions)


def configure(
    *,
    xla_small_loops: bool | None = None,
    gc_freeze: bool | None = None,
    compilation_cache=None,
) -> dict:
    """Opt in to geomjax's process settings; returns the settings in effect.

    ``import geomjax`` changes no global state: these are applied only when asked for, here or
    through the environment variables read at import (``GEOMJAX_XLA_FLAGS=1``,
    ``GEOMJAX_GC_FREEZE=1``).  The documentation's Architecture page (*Process settings*) lists
    their measured effects.

    Arguments:
        xla_small_loops: XLA:CPU's small-loop threshold (:mod:`geomjax._internal.xla_flags`),
            under which time loops and Newton solves compile into single kernels.  By default
            geomjax raises it to 16 MiB *per program*, for its own top-level programs (an eager
            :func:`geomjax.simulate`, ``solve_ocp``, ...) and those of :func:`geomjax.jit`
            only; your other programs keep XLA's defaults.  ``True``: for the whole process
            as well, in ``XLA_FLAGS``, so that your own ``jax.jit`` programs get it too.
            Effective only before JAX's first computation of the process (XLA reads its flags
            once): call it right after ``import geomjax``; later it warns
            (``RuntimeWarning``) and changes nothing in this process.  ``False``: not even per
            program (XLA's defaults everywhere; the same as ``GEOMJAX_XLA_FLAGS=0``); refused
            while the process-wide setting is in effect (it cannot be undone).
        gc_freeze: ``True``: :func:`gc.freeze` now (:mod:`geomjax._internal.gc_freeze`): the
            objects that exist (modules, functions, classes of jax, equinox, geomjax and yours)
            are no longer walked by the full collections that run while programs are traced.
            ``False``: :func:`gc.unfreeze`.
        compilation_cache: a directory (``str`` or ``os.PathLike``, created if missing): JAX's
            persistent compilation cache there (:mod:`geomjax._internal.compile_cache`), every
            program written whatever its compile time, so that a later process loads the
            compiled programs (e.g. the solve of an optimal control problem) instead of
            compiling them again.  It may be given at any time, but JAX opens its cache once
            per process: another directory after that warns (``RuntimeWarning``) and changes
            nothing.  The same as ``GEOMJAX_COMPILATION_CACHE=DIR`` at import.

    ``None`` (the default of all) leaves a setting as it is.

    Returns:
        ``{"xla_small_loops": bool | "per program", "gc_freeze": bool, "compilation_cache":
        str | None}``: whether the small-loop setting is in effect in this process (``True``),
        for geomjax's programs only (``"per program"``) or nowhere (``False``), whether objects
        are frozen
        (``gc.get_freeze_count() > 0``), and JAX's persistent cache directory in effect.
    """
    if xla_small_loops not in (None, True, False):
        raise ValueError(
            f"configure: argument 'xla_small_loops' must be True, False or None, got "
            f"{xla_small_loops!r}"
        )
    if gc_freeze not in (None, True, False):
        raise ValueError(
            f"configure: argument 'gc_freeze' must be True, False or None, got {gc_freeze!r}"
        )
    if xla_small_loops is True:
        xla_flags.set_per_program(True)
        xla_flags.enable_small_loops()
    elif xla_small_loops is False:
        if xla_flags.small_loops_in_effect():
            raise ValueError(
                "configure: argument 'xla_small_loops=False': the small-loop setting is already "
                "in effect in this process (XLA reads XLA_FLAGS once, when its backend starts) "
                "and cannot be undone; start Python without it in XLA_FLAGS"
            )
        xla_flags.set_per_program(False)
    if compilation_cache is not None:
        compile_cache.enable(compilation_cache)
    if gc_freeze is True:
        _gc_freeze_now()
    elif gc_freeze is False:
        gc.unfreeze()
    return {
        "xla_small_loops": _small_loops_state(),
        "gc_freeze": gc.get_freeze_count() > 0,
        "compilation_cache": compile_cache.directory(),
    }


def _gc_freeze_now() -> None:
    gc_freeze.freeze_now()


def _small_loops_state():
    if xla_flags.small_loops_in_effect():
        return True
    return "per program" if xla_flags.small_loop_options() else False
