"""``geomjax.configure``: the opt-in process settings (none is applied by ``import geomjax``)."""

from __future__ import annotations

import gc

from . import compile_cache, gc_freeze, xla_flags

__all__ = ["configure"]


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
        xla_small_loops: ``True``: raise XLA:CPU's small-loop threshold to 16 MiB in
            ``XLA_FLAGS`` (:mod:`geomjax._internal.xla_flags`), so that time loops and Newton
            solves compile into single kernels.  Effective only before JAX's first computation
            of the process (XLA reads its flags once): call it right after ``import geomjax``.
            Later it warns (``RuntimeWarning``) and changes nothing in this process.  ``False``
            is accepted only while the setting is not in effect (it cannot be undone).
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
        ``{"xla_small_loops": bool, "gc_freeze": bool, "compilation_cache": str | None}``:
        whether the small-loop setting is in effect in this process, whether objects are frozen
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
        xla_flags.enable_small_loops()
    elif xla_small_loops is False and xla_flags.small_loops_in_effect():
        raise ValueError(
            "configure: argument 'xla_small_loops=False': the small-loop setting is already in "
            "effect in this process (XLA reads XLA_FLAGS once, when its backend starts) and "
            "cannot be undone; start Python without it in XLA_FLAGS"
        )
    if compilation_cache is not None:
        compile_cache.enable(compilation_cache)
    if gc_freeze is True:
        _gc_freeze_now()
    elif gc_freeze is False:
        gc.unfreeze()
    return {
        "xla_small_loops": xla_flags.small_loops_in_effect(),
        "gc_freeze": gc.get_freeze_count() > 0,
        "compilation_cache": compile_cache.directory(),
    }


def _gc_freeze_now() -> None:
    gc_freeze.freeze_now()
