"""Eager calls: values that Python knows now, and programs that compile quickly.

**Known values.**
An input check (finite values, group membership) on a concrete array runs eagerly in NumPy or as
one cached program and raises ``ValueError``; on a tracer it is compiled into the caller's program
with :func:`equinox.error_if`.  Under an *eager* ``jax.grad``/``jax.jvp`` the arguments are
tracers too, but their primal values are concrete: checked as tracers, every small operation of
the check was dispatched and compiled on its own (the README's gradient example compiled four
one-operation programs for the finiteness check of its initial momentum).  :func:`known_value`
returns those primal values, so such checks take the eager path.

**Quick compiles.**  A group operation, an input check or a slice called eagerly is compiled as one
small program (:func:`eager_jit`) whose run time is the dispatch of a few microseconds either way,
so XLA's backend optimizations only cost compile time: measured on a 2-core x86-64 CPU (CPU time
of the compile, float64), ``SO3.log`` 0.31 → 0.20 s, ``SE3.jac_right`` 0.44 → 0.23 s, ``SO3.exp``
0.17 → 0.11 s, with ``xla_backend_optimization_level=0``.  Only such one-shot programs use it: the
time loops and solvers keep XLA's full optimization.  Under an outer ``jit`` the function is
inlined and the option does not apply."""

from __future__ import annotations

import functools

import equinox as eqx
import jax
import numpy as np
from jax._src import core as jax_core  # trace_state_clean: no public equivalent

#: XLA options of the small eager programs (see the module docstring)
EAGER_COMPILER_OPTIONS = {"xla_backend_optimization_level": 0, "xla_cpu_use_fusion_emitters": False}


def _at_top_level() -> bool:
    """Whether no transformation is being traced now (JAX accepts compiler options only on a
    top-level program; a group operation on constant arrays inside a ``jit`` is not one)."""
    clean = getattr(jax_core, "trace_state_clean", None)
    return bool(clean()) if clean is not None else False  # unknown: the plain program


def _under_eager_autodiff_only() -> bool:
    """Whether the transformations being traced now are eager ``jax.grad``/``jax.jvp`` (forward-
    and reverse-mode traces) over eager evaluation, with no ``jit`` or ``vmap`` around them:
    a function of concrete arrays called there runs as a program of its own."""
    try:
        from jax._src.interpreters.ad import JVPTrace, LinearizeTrace

        ctx = jax_core.trace_ctx
        if ctx.axis_env is not jax_core.top_axis_env:
            return False
        t = ctx.trace
        while isinstance(t, JVPTrace | LinearizeTrace):
            t = t.parent_trace
        return t is jax_core.eval_trace
    except Exception:  # JAX internals moved: the plain program
        return False


def _two_programs(quick, plain):
    def call(*args, **kwargs):
        leaves = jax.tree_util.tree_leaves((args, kwargs))
        if not any(isinstance(x, jax.core.Tracer) for x in leaves):
            if _at_top_level():
                return quick(*args, **kwargs)
            if _under_eager_autodiff_only():
                # concrete arguments under an eager grad/jvp (e.g. the group check of a state
                # whose primal is known, geomjax._eager.known_value): no tangent to carry, so
                # the quick program, run outside the autodiff traces (JAX takes compiler
                # options only there); the README's gradient example: 0.3 s less compile
                with jax_core.eval_context():
                    return quick(*args, **kwargs)
        return plain(*args, **kwargs)

    return call


def eager_jit(fn, **jit_kwargs):
    """``jax.jit(fn, **jit_kwargs)``, compiled without XLA's backend optimizations when called
    at top level (eagerly): for small programs whose run time is their dispatch.  Under a
    transformation it is the plain ``jax.jit`` (inlined in an outer ``jit``)."""
    quick = jax.jit(fn, compiler_options=EAGER_COMPILER_OPTIONS, **jit_kwargs)
    return functools.wraps(fn)(_two_programs(quick, jax.jit(fn, **jit_kwargs)))


def quick_compiled(fn):
    """``fn`` compiled by :func:`equinox.filter_jit`, without XLA's backend optimizations when
    called at top level with no tracer argument (eagerly); compiled normally otherwise (e.g. under
    an eager ``grad``), inlined in an outer ``jit``."""
    quick = eqx.filter_jit(fn, compiler_options=EAGER_COMPILER_OPTIONS)
    return functools.wraps(fn)(_two_programs(quick, eqx.filter_jit(fn)))


def known_value(x):
    """``x`` as a concrete array if its value is known at Python time, else None.

    Known: NumPy and JAX arrays, Python numbers, and the tracers of eager forward- and
    reverse-mode differentiation (``JVPTracer``/``LinearizeTracer``, whose primal is concrete).
    Unknown (None): tracers of ``jit``, ``vmap``, ``scan`` and the like."""
    if isinstance(x, jax.core.Tracer):
        to_concrete = getattr(x, "to_concrete_value", None)  # JAX's own concreteness query
        return None if to_concrete is None else to_concrete()
    if isinstance(x, jax.Array | np.ndarray | float | int | np.number):
        return x
    return None
