"""Eager group operations are evaluated on the host for their first calls and then compile one
program per method and shape (not one per primitive), and give what the same function gives
under ``jit``; under a transformation they trace as before."""

import jax
import jax.monitoring
import jax.numpy as jnp
import numpy as np
import pytest

from geomjax._internal.eager import HOST_CALLS
from geomjax.lie import SE3, SO3, Rn
from geomjax.lie.base import EAGER_JIT_METHODS
from tests.jax_events import count_events


@pytest.mark.parametrize(
    "group, method, n_args", [(SO3, "exp", 1), (SE3, "log", 1), (SO3, "compose", 2)]
)
def test_eager_calls_run_on_the_host_then_compile_one_program(group, method, n_args):
    # a batch shape no other test uses (one per case: the host calls are counted per method and
    # shape for the whole process), inputs made by a jitted exp (not by the eager tier): op by
    # op, each primitive would compile for it (~30)
    rng = np.random.default_rng(0)
    xi = rng.normal(size=({"exp": 37, "log": 41, "compose": 43}[method], group.dim))
    exp = jax.jit(group.exp)
    args = [xi] if method == "exp" else [np.asarray(exp(x)) for x in (xi, 0.5 * xi)]
    args = args[:n_args]
    call = lambda: getattr(group, method)(*args)  # noqa: E731
    # the first calls of a signature are evaluated by NumPy from the jaxpr: nothing compiles
    host = [count_events(call) for _ in range(HOST_CALLS)]
    assert [n for _, n in host] == [0] * HOST_CALLS
    compiled, n = count_events(call)  # then one program for this method and shape
    assert n == 1, n
    # the same numbers as the function traced into a caller's jit: the compiled program to
    # round-off, the host's libm to a few ulp of the O(1) entries
    ref = jax.jit(lambda *a: getattr(group, method)(*a) + 0.0)(*args)
    np.testing.assert_allclose(compiled, ref, rtol=0, atol=1e-14)
    for out, _ in host:
        assert out.dtype == ref.dtype and out.shape == ref.shape
        np.testing.assert_allclose(out, ref, rtol=0, atol=1e-14)
    _, again = count_events(call)
    assert again == 0


def test_traced_calls_are_unchanged_and_errors_name_the_argument():
    # under a transformation the method is traced inline: no extra nested program in the jaxpr
    jaxpr = jax.make_jaxpr(SO3.exp)(jnp.ones(3))
    assert not any(e.params.get("name") == "exp" for e in jaxpr.eqns)
    g = jax.grad(lambda w: SO3.exp(w)[0, 1])(jnp.array([0.1, 0.2, 0.3]))
    eps = 1e-6
    e1 = jnp.array([eps, 0.0, 0.0])
    w = jnp.array([0.1, 0.2, 0.3])
    fd = (SO3.exp(w + e1)[0, 1] - SO3.exp(w - e1)[0, 1]) / (2 * eps)
    np.testing.assert_allclose(g[0], fd, rtol=1e-8)  # central differences, error O(eps²)
    with pytest.raises(ValueError, match="SO3.exp: argument 'xi' must have shape"):
        SO3.exp(jnp.ones(4))
    # parametrized groups are static arguments of the compiled method
    np.testing.assert_array_equal(Rn(4).exp(np.arange(4.0)), np.arange(4.0))
    assert {"exp", "log", "compose", "coad"} <= EAGER_JIT_METHODS
