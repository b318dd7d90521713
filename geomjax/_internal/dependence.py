"""Which inputs a function's output actually depends on, read from its jaxpr at trace time.

The nonholonomic integrator evaluates the Lagrangian and the constraints at two configurations per
step and differentiates them in the configuration; for the common G-invariant systems (the
Chaplygin sleigh, a ball rolling on a table, Suslov's problem) the Lagrangian does not depend on
the configuration at all, or a constraint not on time, and those derivatives are exact zeros that
autodiff still computes (a reverse pass through the group's retraction at every Newton
iteration).  :func:`depends_on` finds such independence *structurally*: it traces the function on
abstract values (no data, no compilation) and runs a backward liveness pass over the jaxpr
(:func:`geomjax._internal.jaxpr_eval.live_vars`).  The answer is conservative — an input used by an
equation whose output is live counts as used — so a ``False`` is a proof that the output does
not depend on that input, and skipping the computation changes no result (a dependence that
cancels numerically is still reported as ``True``).
"""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp

from .jaxpr_eval import live_vars
from .program_cache import ProgramCache

__all__ = ["depends_on", "method_depends_on"]


def _abstract(x):
    return jax.ShapeDtypeStruct(jnp.shape(x), jnp.result_type(x))


def depends_on(fun, *args) -> tuple[bool, ...]:
    """For ``fun(*args)``: a tuple with, for each positional argument (a pytree), whether any
    output of ``fun`` depends on any leaf of it (conservative: ``False`` is exact).

    Only shapes and dtypes of ``args`` are used (tracers are fine); arrays ``fun`` closes over are
    constants of the trace.  Costs one trace of ``fun``, no compilation."""
    shapes = jax.tree_util.tree_map(_abstract, args)
    closed = jax.make_jaxpr(fun)(*shapes)
    jaxpr = closed.jaxpr
    live = live_vars(jaxpr.eqns, jaxpr.outvars)
    out, i = [], 0
    for a in shapes:
        n = len(jax.tree_util.tree_leaves(a))
        out.append(any(v in live for v in jaxpr.invars[i : i + n]))
        i += n
    return tuple(out)


def _method_dependence(static, name, abstract):
    params, args = abstract

    def fun(p, *a):
        return getattr(eqx.combine(p, static), name)(*a)

    return depends_on(fun, params, *args)[1:]


# one trace per (static part, method, shapes); the least recently used of 512 is dropped
_DEPENDENCE = ProgramCache("method dependence", maxsize=512, evict="lru")


def method_depends_on(module: eqx.Module, name: str, *args) -> tuple[bool, ...]:
    """:func:`depends_on` for the method ``module.name`` (its arrays are passed as an argument,
    so no tracer is closed over); cached on the module's static part, the name and the shapes
    (one trace per system structure, not one per call)."""
    params, static = eqx.partition(module, eqx.is_array)
    abstract = jax.tree_util.tree_map(_abstract, (params, args))
    try:
        hash((static, abstract))
    except TypeError:  # an unhashable static field: trace every time
        return _method_dependence(static, name, abstract)
    key = (static, name, abstract)
    found = _DEPENDENCE.get(key)
    if found is None:
        found = _DEPENDENCE.put(key, _method_dependence(static, name, abstract))
    return found
