"""The SO(3) Cayley LGVI's discrete Legendre transform through one scalar equation
(``LGVI(legendre_solve="scalar")``, the default; ``_so3_soa.cayley_solve_scalar``).

References, all independent of the scalar reduction: the vector Newton iteration on
``I x + h/2 x × I x + h²/4 (x·I x) x = b`` run to convergence (Cramer's rule on the closed-form
Jacobian), the residual of that vector equation, the former solver (``legendre_solve="newton"``)
on whole runs and gradients, and central finite differences.  Round-off margins: a relative
error of ``x`` of ``1e-13`` is ~450 ulps (the vector Newton's own last update is ~1e-16
relative); whole runs drift apart at most by the round-off of each step times the steps
(free body, 200 steps of 1e-2: seen 4e-16, bound 1e-12).
"""

import os
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import geomjax as gj
from geomjax.integrators import _so3_soa as soa
from geomjax.systems import HeavyTop

from .helpers import integrate

FULL = os.environ.get("GEOMJAX_FULL", "0") == "1"
R0 = gj.SO3.exp(jnp.array([0.3, -0.2, 0.5]))
PI0 = jnp.array([0.8, -0.3, 1.1])


def _vector_newton(I, b, h, iters=12):
    x = soa.cayley_predictor(I, b, h)
    for _ in range(iters):
        r = soa.cayley_residual(x, (I, b, h))
        dx = soa.cayley_jac_solve(x, (I, b, h), r)
        x = tuple(x[i] - dx[i] for i in range(3))
    return x


def _cases(n, full, seed):
    """Random inertias (moments in [0.5, 3], rotated for ``full``) and momenta, with ``h``
    chosen so that ``h |I^-1 b|`` spans the stage steps of the compositions and beyond."""
    rng = np.random.default_rng(seed)
    Is, bs, hs = [], [], []
    for k in range(n):
        m = rng.uniform(0.5, 3.0, 3)
        if full:
            Q, _ = np.linalg.qr(rng.standard_normal((3, 3)))
            Is.append((Q @ np.diag(m) @ Q.T).reshape(9))
        else:
            Is.append(m)
        b = rng.standard_normal(3)
        b *= rng.uniform(0.5, 3.0) / np.linalg.norm(b)
        Im = np.diag(Is[-1]) if not full else Is[-1].reshape(3, 3)
        hx = (0.01, 0.1, 0.3, 0.6)[k % 4]  # h |x0|
        hs.append(hx / np.linalg.norm(np.linalg.solve(Im, b)))
        bs.append(b)
    return np.array(Is), np.array(bs), np.array(hs)


def _compare(I, b, h, iters):
    """Per case: relative error of the scalar solve (``iters`` iterations) against the
    converged vector Newton, its relative residual, and the error of the factor
    ``1/(1 + h²|x|²/4)`` it returns.  The kernels are plain arithmetic on scalars: they run on
    NumPy arrays of cases here (nothing to compile)."""
    It, bt = tuple(I.T), tuple(b.T)
    x, fac = soa.cayley_solve_scalar(It, bt, h, iters)
    xr = np.array(_vector_newton(It, bt, h))
    x = np.array(x)
    err = np.max(np.abs(x - xr), 0) / np.max(np.abs(xr), 0)
    res = np.max(np.abs(np.array(soa.cayley_residual(tuple(x), (It, bt, h)))), 0)
    w = h * x
    return err, res / np.max(np.abs(b), 1), np.abs(fac - 4.0 / (4.0 + np.sum(w * w, 0)))


@pytest.mark.parametrize("full", [False, True], ids=["principal", "full-inertia"])
def test_scalar_solve_equals_converged_vector_newton(full):
    I, b, h = _cases(64, full, seed=3 + full)
    hx = np.array([(0.01, 0.1, 0.3, 0.6)[k % 4] for k in range(len(h))])
    (e2, r2, _), (e3, r3, f3), (e4, r4, _) = (_compare(I, b, h, k) for k in (2, 3, 4))
    # x equals the vector Newton's root to round-off and the residual of the vector equation
    # is at round-off: with three scalar iterations (the default) up to h|x| = 0.3 (as the
    # vector Newton's three; seen 3e-16), with four up to 0.6; the returned Cayley factor too
    ok3 = hx <= 0.3
    assert np.max(e3[ok3]) < 1e-13 and np.max(r3[ok3]) < 1e-14, (np.max(e3), np.max(r3))
    assert np.max(e4) < 1e-13 and np.max(r4) < 1e-14
    assert np.max(f3[ok3]) < 1e-15
    # two suffice at the stage steps of the compositions (h|x| <= 0.1 here; seen 2e-16), not
    # at 0.6 (seen 1e-4): the count matters, and the residual shows it
    assert np.max(e2[hx <= 0.1]) < 1e-13
    assert np.min(r2[hx == 0.6]) > 1e-10


SYSTEMS = {
    "free": lambda d: gj.RigidBody(jnp.array([1.0, 2.0, 3.0], d)),
    "heavy-top": lambda d: gj.RigidBody(
        jnp.array([1.0, 2.0, 3.0], d), HeavyTop(1.0, 9.81, [0.0, 0.1, 0.4])
    ),
    "full-inertia": lambda d: gj.RigidBody(jnp.diag(jnp.array([1.0, 2.0, 3.0], d))),
}
# the other systems and dtypes: in the full run only (GEOMJAX_FULL=1, make test-full)
_full = [pytest.mark.slow, pytest.mark.skipif(not FULL, reason="GEOMJAX_FULL=1 only")]


@pytest.mark.parametrize(
    "name, dtype",
    [
        ("heavy-top", jnp.float64),
        ("free", jnp.float32),
        pytest.param("free", jnp.float64, marks=_full),
        pytest.param("full-inertia", jnp.float64, marks=_full),
        pytest.param("heavy-top", jnp.float32, marks=_full),
        pytest.param("full-inertia", jnp.float32, marks=_full),
    ],
)
def test_same_runs_as_the_vector_newton(name, dtype):
    system = SYSTEMS[name](dtype)
    s0 = system.make_state(R0.astype(dtype), PI0.astype(dtype))
    dt = jnp.asarray(0.01, dtype)
    a, b = (integrate(system, gj.LGVI(legendre_solve=s), s0, dt, 200) for s in ("newton", "scalar"))
    # float64: 200 steps drift apart by round-off per step (seen <= 9e-16); float32: the
    # compensated float32 runs differ by a few ulps of |Pi| ~ 1 (seen 5e-7)
    tol = 1e-12 if dtype == jnp.float64 else 5e-6
    for x, y in ((a.R, b.R), (a.Pi, b.Pi)):
        np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=0, atol=tol)


def test_composition_same_run_and_residual_reported():
    # Kahan–Li order 8 on the free body at dt 0.2 (the step that reaches 1e-8 at T = 100): the
    # same run as with the vector Newton (seen 4e-14 after 100 steps, 1500 stages), and the
    # largest stage residual, reported by simulate, at round-off
    system = SYSTEMS["free"](jnp.float64)
    s0 = system.make_state(R0, PI0)
    a = integrate(
        system, gj.Composition(gj.LGVI(legendre_solve="newton"), "kahan_li8"), s0, 0.2, 100
    )
    b = gj.simulate(system, gj.Composition(gj.LGVI(), "kahan_li8"), s0, 0.2, 100)
    np.testing.assert_allclose(b.final_state.Pi, a.Pi, rtol=0, atol=1e-12)
    np.testing.assert_allclose(b.final_state.R, a.R, rtol=0, atol=1e-12)
    assert float(b.max_residual) < 4e-15


def test_no_vector_newton_iterations_in_the_step(monkeypatch):
    """The step runs no iteration of the vector Newton (no loop: newton_solve only evaluates
    the residual at the scalar root and differentiates) and at most ``newton_iters`` scalar
    ones; the former solver's step holds its early-exit loop of vector iterations.  With XLA's
    small-loop setting in effect (the rolled scalar loop; without it the scalar iterations are
    unrolled, tests/test_xla_flags.py)."""
    from geomjax._internal import xla_flags as _xla

    monkeypatch.setattr(_xla, "_IN_EFFECT", True)
    monkeypatch.delenv("GEOMJAX_NEWTON_UNROLL", raising=False)
    system = SYSTEMS["free"](jnp.float64)
    s0 = system.make_state(R0, PI0)

    def loops(method):
        jaxpr = str(jax.make_jaxpr(lambda s: method.step(system, s, 0.01))(s0))
        return re.findall(r"(while|scan)\[", jaxpr), sorted(re.findall(r"length=(\d+)", jaxpr))

    # early exit (default): at most newton_iters scalar iterations in a while loop
    assert loops(gj.LGVI()) == (["while"], [])
    assert loops(gj.LGVI(early_exit=False)) == (["scan"], ["3"])
    assert loops(gj.LGVI(early_exit=False, newton_iters=2)) == (["scan"], ["2"])
    assert loops(gj.LGVI(legendre_solve="newton")) == (["while"], [])


def test_gradients_equal_the_vector_newton_and_finite_differences():
    system = SYSTEMS["free"](jnp.float64)
    w = jnp.array([0.3, -1.0, 0.7])

    def loss(solve):
        @jax.jit
        def f(pi0):
            s0 = system.make_state(R0, pi0)
            s = integrate(system, gj.LGVI(legendre_solve=solve), s0, 0.05, 10)
            return jnp.sum(s.Pi * w) + jnp.sum(s.R[:, 2] ** 2)

        return f

    f_new = loss("scalar")
    g_new = jax.grad(f_new)(PI0)
    if FULL:
        g_old = jax.grad(loss("newton"))(PI0)
        np.testing.assert_allclose(g_new, g_old, rtol=1e-10, atol=1e-12)
    # central differences, step 1e-5: truncation ~1e-10 x third derivative, round-off
    # ~1e-16/1e-5; 1e-7 relative leaves a margin of ~100
    eps = 1e-5
    fd = np.array(
        [(f_new(PI0.at[i].add(eps)) - f_new(PI0.at[i].add(-eps))) / (2 * eps) for i in range(3)]
    )
    np.testing.assert_allclose(g_new, fd, rtol=1e-7, atol=1e-9)


def test_bad_legendre_solve_raises():
    with pytest.raises(ValueError, match="'legendre_solve'"):
        gj.LGVI(legendre_solve="bisection")
