"""Tests of geomjax.riemann.

``check_jit``: ``jax.jit`` for the tests' one-shot check programs (a dictionary of quantities
computed once per hypothesis example and compared in NumPy), compiled with the eager tier's XLA
options (optimization level 0, legacy emitters): their compile time is most of their cost, and
the options change it ~3x while their values stay within round-off of the default compilation.
Not for programs whose compiled form is under test (time loops, bitwise comparisons) or that a
reference solver calls many times (right-hand sides of SciPy's integrators).
"""

import functools

import jax
import jax.numpy as jnp

from geomjax._internal.eager import EAGER_COMPILER_OPTIONS, top_level_options


def check_jit(fn):
    # equinox.filter_jit with the options at top level, plainly compiled under a transformation
    # (JAX accepts compiler options only on a top-level program); Python numbers are traced, as
    # by jax.jit (filter_jit would make them static: one compilation per hypothesis example)
    compiled = top_level_options(fn, EAGER_COMPILER_OPTIONS)

    @functools.wraps(fn)
    def call(*args, **kwargs):
        as_array = lambda x: jnp.asarray(x) if isinstance(x, bool | int | float) else x  # noqa: E731
        return compiled(*jax.tree.map(as_array, args), **jax.tree.map(as_array, kwargs))

    return call
