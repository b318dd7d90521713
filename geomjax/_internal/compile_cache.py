"""Opt-in: JAX's persistent compilation cache, so that a later process loads the compiled
programs of an earlier one instead of compiling them again.

``geomjax.configure(compilation_cache=DIR)`` (or ``GEOMJAX_COMPILATION_CACHE=DIR``, read by
``import geomjax``) sets JAX's ``jax_compilation_cache_dir`` and lowers
``jax_persistent_cache_min_compile_time_secs`` from JAX's default 1 s to 0, so that the small
programs (eager group operations, input checks, a solve that compiles in under a second) are
written too.  Nothing else changes: the cache key is the lowered program with its compiler
options, the JAX/jaxlib version and the device, so a changed problem, solver or version is a
new entry, never a stale one.  JAX treats the directory as trusted (an entry is machine code):
do not share it with users you do not trust.

A process still traces and lowers its programs (the key is the lowered program): only XLA's
compilation is replaced by a load.  JAX writes no entry for a program that calls back to
Python (``jax.debug.callback``, ``io_callback``): the address of the Python function is part
of the compiled code.  An eager :func:`~geomjax.control.trajopt.solve_ocp` therefore compiles
without its per-iteration progress callback while this cache is on (unless ``progress=True``
is asked for), see :func:`in_effect`.

JAX opens its cache directory once per process, at the first compilation that looks for it: a
different directory given after that warns and changes nothing.

Measured (2-core x86-64 CPU, float64, ``benchmarks/bench_compile_cache.py``): see the control
guide's *Compile once* section.
"""

from __future__ import annotations

import os
import warnings

import jax

__all__ = ["ENV", "directory", "enable", "from_environment", "in_effect"]

#: environment variable read by ``import geomjax``: a directory opts in
ENV = "GEOMJAX_COMPILATION_CACHE"


def directory() -> str | None:
    """JAX's persistent cache directory in effect in this process (None: none)."""
    if not bool(jax.config.jax_enable_compilation_cache):
        return None
    path = jax.config.jax_compilation_cache_dir
    return str(path) if path else None


def in_effect() -> bool:
    """Whether JAX's persistent compilation cache is on in this process (set by
    :func:`enable` or directly through JAX's configuration)."""
    return directory() is not None


def _opened_elsewhere(path: str) -> str | None:
    """The directory JAX's cache already opened in this process, if it is not ``path``."""
    try:
        from jax._src import compilation_cache as cc  # no public query of the opened cache
    except ImportError:  # JAX internals moved: nothing known
        return None
    if not getattr(cc, "_cache_initialized", False):
        return None
    current = jax.config.jax_compilation_cache_dir
    if current and os.path.abspath(str(current)) != os.path.abspath(path):
        return str(current)
    return None


def enable(path) -> str:
    """Turn JAX's persistent compilation cache on at ``path`` (created if missing), every
    program cached whatever its compile time; returns the directory in effect."""
    if not isinstance(path, str | os.PathLike):
        raise ValueError(
            "configure: argument 'compilation_cache' must be a directory (str or os.PathLike) "
            f"or None, got {type(path).__name__}"
        )
    path = os.fspath(path)
    if not path:
        raise ValueError("configure: argument 'compilation_cache' must be a non-empty path")
    if os.path.exists(path) and not os.path.isdir(path):
        raise ValueError(
            f"configure: argument 'compilation_cache' must be a directory, {path!r} is a file"
        )
    other = _opened_elsewhere(path)
    if other is not None:
        warnings.warn(
            f"geomjax.configure(compilation_cache={path!r}): JAX's persistent cache is already "
            f"open at {other!r} in this process and cannot be moved; it stays there",
            RuntimeWarning,
            stacklevel=3,
        )
        return other
    os.makedirs(path, exist_ok=True)
    jax.config.update("jax_compilation_cache_dir", path)
    jax.config.update("jax_enable_compilation_cache", True)
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    return path


def from_environment(environ=None) -> str | None:
    """At the end of ``import geomjax``: :func:`enable` the directory named by
    ``GEOMJAX_COMPILATION_CACHE`` if set (an empty value: nothing)."""
    environ = os.environ if environ is None else environ
    path = environ.get(ENV, "")
    return enable(path) if path else None
