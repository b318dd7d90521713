"""Levenberg–Marquardt with its step by conjugate gradients (``fit_model(..., solver="lm-cg")``,
the Jacobian never formed): the matrix-free solve against the dense solve of the same damped
normal equations, and the fit's stopping test and status."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from geomjax.learn import FitError, fit_model, fitting_loss, neural_leaves
from geomjax.learn.identify import POWER_STEPS, _gradient_scale_step, normal_cg
from geomjax.results import Status

from .test_fit_model import KW, own_records, student, teacher


def _network_residuals(seed):
    """The residuals of a 3-8-1 tanh network fitted to ``sin(x·a)`` at 80 random points, and a
    random start of its 40 weights."""
    rng = np.random.default_rng(seed)
    X = jnp.asarray(rng.standard_normal((80, 3)))
    target = jnp.sin(X @ jnp.asarray([1.0, -0.5, 0.3]))
    y0 = jnp.asarray(0.5 * rng.standard_normal(40))

    def fn(y):
        W1, b1, w2 = y[:24].reshape(3, 8), y[24:32], y[32:]
        return jnp.tanh(X @ W1 + b1) @ w2 - target

    return fn, y0


def test_cg_step_equals_the_dense_solve():
    """The residuals of a small two-layer tanh network on 80 inputs (40 unknowns): the step
    ``(JᵀJ + μ I)⁻¹ b`` from products with the linearization only (``jax.linearize`` and its
    transpose) equals the dense solve with the Jacobian by ``jax.jacfwd``, to round-off, at a
    damping of 10⁻³ and 10⁻⁶ of the largest eigenvalue of ``JᵀJ``; a cap on the iterations is
    honoured."""
    fn, y0 = _network_residuals(0)

    @jax.jit
    def cg_step(y, mu, cap):
        r, jvp = jax.linearize(fn, y)
        vjp = jax.linear_transpose(jvp, y)
        return normal_cg(jvp, lambda u: vjp(u)[0], -vjp(r)[0], mu, cap, 1e-13)

    J = jax.jacfwd(fn)(y0)
    JtJ = J.T @ J
    b = -(J.T @ fn(y0))
    s1 = float(jnp.linalg.eigvalsh(JtJ)[-1])
    for rel in (1e-3, 1e-6):
        dense = jnp.linalg.solve(JtJ + rel * s1 * jnp.eye(40), b)
        step, it = cg_step(y0, rel * s1, 2000)
        assert 0 < int(it) < 2000
        np.testing.assert_allclose(step, dense, rtol=0, atol=1e-9 * float(jnp.abs(dense).max()))
    _, it = cg_step(y0, 1e-6 * s1, 3)
    assert int(it) == 3


def test_one_loop_gradient_scale_and_step():
    """The matrix-free solver's iteration in one loop (the gradient, the damping's scale by
    power iteration, the step by conjugate gradients, every pass one product with the
    linearization): the gradient is ``Jᵀr`` of the dense Jacobian, the scale the largest
    eigenvalue of ``JᵀJ`` by the power iterations written out as their own loop, the step
    :func:`normal_cg`'s at that damping, to round-off; without ``first`` the scale passed in is
    kept, and the cap on the iterations is honoured."""
    fn, y0 = _network_residuals(1)

    def products(y):
        r, jvp = jax.linearize(fn, y)
        vjp = jax.linear_transpose(jvp, y)
        return r, jvp, lambda u: vjp(u)[0]

    @jax.jit
    def one_loop(y, lam, scale, first, cap):
        r, jvp, vjp = products(y)
        return _gradient_scale_step(jvp, vjp, r, lam, scale, first, cap)

    @jax.jit
    def apart(y, lam, cap):
        r, jvp, vjp = products(y)
        g = vjp(r)
        v = jax.random.normal(jax.random.PRNGKey(1), (40,), y.dtype)
        v = v / jnp.linalg.norm(v)
        for _ in range(POWER_STEPS):
            w = vjp(jvp(v))
            v = w / jnp.linalg.norm(w)
        scale = v @ vjp(jvp(v))
        d, i = normal_cg(jvp, vjp, -g, lam * scale, cap)
        return g, scale, d, i

    J = jax.jacfwd(fn)(y0)
    s1 = float(jnp.linalg.eigvalsh(J.T @ J)[-1])
    for lam in (1e-2, 1e-4):
        g, scale, d, i = one_loop(y0, lam, 1.0, True, 200)
        g_a, scale_a, d_a, i_a = apart(y0, lam, 200)
        np.testing.assert_allclose(g, J.T @ fn(y0), rtol=1e-12, atol=1e-14)
        np.testing.assert_allclose(g, g_a, rtol=1e-13, atol=1e-15)
        np.testing.assert_allclose(float(scale), s1, rtol=1e-4)  # 20 power iterations
        np.testing.assert_allclose(float(scale), float(scale_a), rtol=1e-13)
        # round-off, amplified by the conjugate gradients up to the damped system's condition
        # number (1/λ)
        np.testing.assert_allclose(d, d_a, rtol=0, atol=1e-12 / lam * float(jnp.abs(d_a).max()))
        assert int(i) == int(i_a) and 0 < int(i) < 200
    g, scale, d, i = one_loop(y0, 1e-4, 7.5, False, 3)
    np.testing.assert_allclose(float(scale), 7.5, rtol=0)
    assert int(i) == 3
    np.testing.assert_allclose(d, normal_cg(*products(y0)[1:], -g, 1e-4 * 7.5, 3)[0], rtol=1e-12)


@pytest.mark.long  # compiles the matrix-free program on the integrator (~40 s)
def test_lm_cg_fit_stops_and_says_why():
    """The records are the model's own motion: the matrix-free solver drives the loss to ~0
    (the generating weights fit exactly), meets its stopping test (``CONVERGED``) and says so;
    the loss it reports is the loss of its unknowns; with a cap of 2 iterations it says it ran
    out, its first costs those of the uncapped run."""
    data = own_records(teacher())
    cg = fit_model(
        student(), data, solver="lm-cg", max_iters=60, cg_steps=200, rtol=1e-8, atol=1e-6, **KW
    )
    loss, _, _ = fitting_loss(
        cg.system, data, neural_leaves, kinds="free", continuity_weight=1.0, **KW
    )
    assert cg.solver == "lm-cg" and cg.losses.size == cg.iterations
    assert np.all(np.diff(cg.losses) <= 0)  # only descent steps are accepted
    assert cg.converged and cg.status == Status.CONVERGED and cg.message == "converged"
    assert cg.check() is cg and cg.iterations < 60
    assert cg.losses[-1] < 1e-6 * cg.losses[0]
    assert abs(float(loss(cg.unknowns)) - cg.losses[-1]) <= 1e-9 * cg.losses[0]
    short = fit_model(student(), data, solver="lm-cg", max_iters=2, cg_steps=200, **KW)
    assert short.iterations == 2 and short.status == Status.MAX_ITERS
    assert "max_iters=2 reached" in short.message
    np.testing.assert_allclose(short.losses, cg.losses[:2], rtol=1e-12)
    with pytest.raises(FitError, match="did not converge"):
        short.check()
    with pytest.raises(ValueError, match="'cg_steps'"):
        fit_model(student(), data, solver="lm-cg", cg_steps=0, **KW)
