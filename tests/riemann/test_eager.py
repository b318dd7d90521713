"""Eager calls of the metric functions are evaluated on the host for their first calls and then
compile one program (not one per primitive), give what the same function gives traced into a
caller's ``jit``, and keep their eager errors."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import geomjax as gj
from geomjax import riemann
from geomjax._internal.eager import HOST_CALLS
from tests.jax_events import count_events


def _torus(q):
    # the torus of radii (2, 0.6): g = diag((2 + 0.6 cos q1)², 0.36)
    return jnp.diag(jnp.stack([(2 + 0.6 * jnp.cos(q[1])) ** 2, 0.36 + 0 * q[0]]))


@pytest.mark.parametrize(
    "name, extra",
    [("christoffel", 0), ("geodesic_acceleration", 1), ("gaussian_curvature", 0)],
)
def test_eager_calls_run_on_the_host_then_compile_one_program(name, extra):
    fn = getattr(riemann, name)
    q = np.array([0.3, 1.1])
    args = (q,) + (np.array([0.5, -0.2]),) * extra
    ref = jax.jit(lambda *a: fn(_torus, *a))(*args)
    # a metric function of its own: the host calls are counted per function and shapes for the
    # whole process, and other tests call these functions with `_torus` eagerly
    metric = lambda q: _torus(q)  # noqa: E731
    # the first calls are evaluated by NumPy from the jaxpr (the metric's checks pass, so
    # equinox's error callback is never reached): nothing compiles
    for _ in range(HOST_CALLS):
        out, n = count_events(lambda: fn(metric, *args))
        assert n == 0, n
        np.testing.assert_allclose(out, ref, rtol=0, atol=1e-14)  # libm against XLA: a few ulp
    out, n = count_events(lambda: fn(metric, *args))
    # then one program, plus at most one for equinox's runtime-check callback (op by op: ~48)
    assert 1 <= n <= 2, n
    np.testing.assert_allclose(out, ref, rtol=0, atol=1e-14)
    _, again = count_events(lambda: fn(metric, *args))
    assert again == 0


def test_gaussian_curvature_of_the_torus_eagerly():
    # closed form: K = cos q1 / (0.6 (2 + 0.6 cos q1))
    q = np.array([0.3, 1.1])
    K = riemann.gaussian_curvature(_torus, q)
    np.testing.assert_allclose(K, np.cos(1.1) / (0.6 * (2 + 0.6 * np.cos(1.1))), rtol=1e-12)


def test_eager_errors_keep_their_eager_form():
    with pytest.raises(ValueError, match="argument 'q' must have shape"):
        gj.christoffel(_torus, np.ones((2, 2)))
    with pytest.raises(ValueError, match="must be finite"):
        gj.christoffel(_torus, np.array([np.nan, 0.0]))
    # a degenerate metric fails when the compiled program runs; the call is then repeated op by
    # op, which raises the eager ValueError with the measured pivot ratio
    singular = lambda q: jnp.diag(jnp.stack([q[0] ** 2, 1.0 + 0 * q[1]]))  # noqa: E731
    with pytest.raises(ValueError, match="degenerate.*ρ"):
        gj.christoffel(singular, np.array([0.0, 1.0]))
