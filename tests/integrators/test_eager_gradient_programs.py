"""An eager ``jax.grad`` through ``simulate``: the forward and backward passes run as two
top-level programs compiled with geomjax's per-program loop option (``_EagerVJP`` in
``geomjax._internal.eager``), joined to the caller's derivative by a ``custom_vjp``.  The
gradients must be JAX's own (the same ``jax.vjp``, to round-off) and central differences, with
potentials, controls, the reversible adjoint, feedback laws that close over the differentiated
value, ``jax.jacrev``; ``jax.linearize`` and forward mode keep the plain route."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import geomjax as gj
from geomjax._internal import eager as _eager
from geomjax._internal import xla_flags as _xla


@pytest.fixture
def per_program(monkeypatch):
    """The per-program setting as in a user's process (the suite opts in process-wide, which
    makes it redundant: here it is asked for anyway), and a count of the routes taken."""
    monkeypatch.setattr(_xla, "_IN_EFFECT", False)
    monkeypatch.setitem(_xla._PER_PROGRAM, "on", True)
    calls = {"eager_vjp": 0}
    original = _eager._EagerVJP.__call__

    def counted(self, options, args, kwargs):
        out = original(self, options, args, kwargs)
        calls["eager_vjp"] += out is not None
        return out

    monkeypatch.setattr(_eager._EagerVJP, "__call__", counted)
    return calls


R0 = gj.SO3.exp(jnp.array([0.3, -0.2, 0.5]))
PI0 = jnp.array([0.8, -0.3, 1.1])


def _central(f, x, h=1e-6):
    x = np.asarray(x, dtype=float)
    out = []
    for i in range(x.size):
        e = np.zeros_like(x)
        e.flat[i] = h
        out.append((float(f(x + e)) - float(f(x - e))) / (2 * h))
    return np.array(out).reshape(x.shape)


# the reference compiled by jax.jit with the per-program setting as in a user's process: geomjax
# warns (once) that its loop runs with XLA's defaults there, which is what is compared against
@pytest.mark.filterwarnings("ignore:geomjax. a time loop:RuntimeWarning")
@pytest.mark.parametrize("case", ["free", "top", "controls", "reversible"])
def test_eager_gradient_equals_jits_and_central_differences(per_program, case):
    top = gj.RigidBody(jnp.array([0.9, 1.0, 0.4]), gj.HeavyTop(1.0, 9.81, [0.3, 0.2, 0.4]))
    body = top if case == "top" else gj.RigidBody(jnp.array([1.0, 2.0, 3.0]))
    us = 0.1 * jnp.sin(jnp.arange(150.0)).reshape(50, 3) if case == "controls" else None
    kw = {"adjoint": gj.ReversibleAdjoint()} if case == "reversible" else {}

    def loss(pi):
        sol = gj.simulate(body, gj.LGVI(), gj.RigidBodyState(R0, pi), 0.02, 50, us, **kw)
        s = sol.final_state
        return jnp.sum(s.R[0] * jnp.array([0.3, -0.2, 0.1])) + jnp.sum(s.Pi**2)

    g = jax.grad(loss)(PI0)
    # the two-program route; the reversible adjoint's own custom_vjp already runs its forward
    # and backward passes at top level (each one compiled program)
    assert per_program["eager_vjp"] == (0 if case == "reversible" else 1)
    np.testing.assert_allclose(g, jax.jit(jax.grad(loss))(PI0), rtol=1e-11, atol=1e-13)
    np.testing.assert_allclose(g, _central(loss, PI0), rtol=1e-6, atol=1e-8)
    value, g2 = jax.value_and_grad(loss)(PI0)
    np.testing.assert_allclose(value, loss(PI0), rtol=1e-13)
    np.testing.assert_allclose(g2, g, rtol=1e-13)


def test_feedback_closing_over_the_differentiated_value(per_program):
    """A feedback law that closes over the gain being differentiated cannot run in a program
    of its own: the plain route is taken (directly for a closure cell, through JAX's
    UnexpectedTracerError for a deeper one), with the same gradient."""
    body = gj.RigidBody(jnp.array([1.0, 2.0, 3.0]))

    def loss_cell(k):
        sol = gj.simulate(
            body, gj.LGVI(), gj.RigidBodyState(R0, PI0), 0.02, 50, lambda t, s: -k * s.Pi
        )
        return jnp.sum(sol.final_state.Pi**2)

    def loss_deep(k):
        p = {"k": k}

        def law(t, s):
            return -p["k"] * s.Pi

        sol = gj.simulate(
            body, gj.LGVI(), gj.RigidBodyState(R0, PI0), 0.02, 50, lambda t, s: law(t, s)
        )
        return jnp.sum(sol.final_state.Pi**2)

    class Law(eqx.Module):
        k: jax.Array

        def __call__(self, t, s):
            return -self.k * s.Pi

    def loss_module(k):  # the gain a leaf of the law: differentiable through the route
        sol = gj.simulate(body, gj.LGVI(), gj.RigidBodyState(R0, PI0), 0.02, 50, Law(k))
        return jnp.sum(sol.final_state.Pi**2)

    k = jnp.array(0.5)
    # the differences of one compiled loss (eagerly, each call traces a new feedback closure and
    # compiles the simulation again)
    ref = _central(jax.jit(loss_cell), k)
    for loss in (loss_cell, loss_deep, loss_module):
        g = jax.grad(loss)(k)  # eager: the route under test
        np.testing.assert_allclose(g, ref, rtol=1e-6)
        np.testing.assert_allclose(g, jax.jit(jax.grad(loss))(k), rtol=1e-11)
    assert per_program["eager_vjp"] == 1  # loss_module; the closures took the plain route


def test_jacrev_linearize_and_forward_mode(per_program):
    body = gj.RigidBody(jnp.array([1.0, 2.0, 3.0]))

    def final(pi):
        return gj.simulate(body, gj.LGVI(), gj.RigidBodyState(R0, pi), 0.02, 50).final_state.Pi

    J = jax.jacfwd(final)(PI0)  # forward mode: the plain route
    np.testing.assert_allclose(jax.jacrev(final)(PI0), J, rtol=1e-11, atol=1e-13)
    y, f_jvp = jax.linearize(final, PI0)  # evaluates the tangent map: the plain route
    np.testing.assert_allclose(f_jvp(jnp.array([1.0, 0.0, 0.0])), J[:, 0], rtol=1e-11, atol=1e-13)
    np.testing.assert_allclose(y, final(PI0), rtol=1e-13)
    assert per_program["eager_vjp"] == 1  # jacrev only
