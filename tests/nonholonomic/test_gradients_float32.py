"""Gradients through the discrete Lagrange–d'Alembert integrator (implicit-function-theorem
derivatives of both Newton solves) against central finite differences, a float32 run and
controls."""

import jax
import jax.numpy as jnp
import numpy as np

import geomjax as gj
from geomjax.integrators.simulate import cast_floating
from geomjax.systems import ChaplyginSleigh

from .helpers import fitted_order, run
from .reference import sleigh_rhs, solve

VI = gj.NonholonomicVI()


def _loss(theta, steps=40, dt=0.05):
    """A loss of the final pose, velocity and multiplier; theta = (omega0, v0, heading0, m, I_c,
    a): initial conditions and all three parameters of the sleigh."""
    om0, v0, th0, m, Ic, a = theta
    system = ChaplyginSleigh(m, Ic, a)
    # lam only seeds the first Newton solve (zero derivative): a plain state, no make_state
    g0 = gj.SE2.from_xytheta(0.1, -0.2, th0)
    s0 = gj.NonholonomicState(g0, jnp.zeros(0), jnp.stack([om0, v0, 0.0]), jnp.zeros(1))
    sol = gj.simulate(system, VI, s0, dt, steps, save_every=steps, check_inputs=False)
    s = sol.final_state
    return (
        jnp.sum(s.g[:2, 2] * jnp.array([0.7, -1.3]))
        + jnp.sin(2.0 * jnp.arctan2(s.g[1, 0], s.g[0, 0]))
        + s.v[0] ** 2
        + 0.5 * s.v[1]
        + 0.1 * s.lam[0]
    )


def test_gradients_match_central_differences():
    theta = jnp.array([1.5, -0.4, 0.3, 2.0, 0.5, 0.7])
    vg = jax.jit(jax.value_and_grad(_loss))
    _, grad = vg(theta)
    assert np.all(np.abs(np.asarray(grad)) > 1e-3)  # every input matters
    eps = 1e-5  # truncation ~eps² ~ 1e-10, round-off ~1e-16/eps ~ 1e-11 (relative)
    for i in range(theta.size):
        e = jnp.zeros_like(theta).at[i].set(eps)
        fd = (vg(theta + e)[0] - vg(theta - e)[0]) / (2 * eps)
        np.testing.assert_allclose(grad[i], fd, rtol=1e-6)


def test_float32_run():
    """2e4 steps in float32: constraint at float32 round-off, energy error at the O(h²) level
    (no round-off blow-up), and the velocities and multiplier within float32 round-off of the
    float64 run of the same discretization (the closed form alone cannot see that: the float64
    run itself misses it by 8.2e-5, its O(h²) error)."""
    sleigh = ChaplyginSleigh(2.0, 0.5, 0.7)
    s0 = sleigh.state(0.1, -0.2, 0.3, omega=1.5, v=-0.4)
    s32 = jax.tree_util.tree_map(lambda a: a.astype(jnp.float32), s0)
    out = run(cast_floating(sleigh, jnp.float32), VI, s32, 200.0, 0.01)
    s, d = out["states"], out["diag"]
    assert s.v.dtype == jnp.float32 and s.lam.dtype == jnp.float32 and s.g.dtype == jnp.float32
    assert np.all(np.isfinite(np.asarray(s.v)))
    assert float(jnp.max(d["constraint_violation"])) < 1e-6
    assert float(jnp.max(d["group_defect"])) < 1e-6  # renormalized every step in float32
    E = np.asarray(d["energy"], np.float64)
    assert np.abs(E - E[0]).max() / E[0] < 1e-3
    om, v, _ = sleigh.closed_form(out["ts"].astype(jnp.float64), 1.5, -0.4)
    np.testing.assert_allclose(s.v[:, 0], om, atol=1e-4)
    np.testing.assert_allclose(s.v[:, 1], v, atol=1e-4)
    # The reduced dynamics relaxes (ω → 0 exponentially, v → const), so round-off does not
    # accumulate: the float32 run stays within a fixed multiple of eps32·|v| of the float64 one
    # (measured 2.6e-6 = 16 eps32·max|v| for v, 3e-7 for ω and λ); asserted 64 eps32·max|v|
    # ≈ 1.1e-5 (the pose is not compared: its heading drifts neutrally, x grows linearly).
    s64 = run(sleigh, VI, s0, 200.0, 0.01)["states"]
    tol = 64 * np.finfo(np.float32).eps * float(np.abs(np.asarray(s64.v)).max())
    np.testing.assert_allclose(np.asarray(s.v, np.float64), np.asarray(s64.v), rtol=0, atol=tol)
    np.testing.assert_allclose(np.asarray(s.lam, np.float64), np.asarray(s64.lam), atol=tol)


def test_controls_converge_at_second_order():
    """A constant body torque and a force along the blade (generalized force (tau, f, 0) in
    se(2)*, trapezoidal impulses) against DOP853 on the forced reduced equations."""
    m, Ic, a, tau, f = 2.0, 0.5, 0.7, 0.8, -0.3
    sleigh = ChaplyginSleigh(m, Ic, a)
    s0 = sleigh.state(0.1, -0.2, 0.3, omega=1.5, v=-0.4)
    T = 2.0
    ts = np.linspace(0.0, T, 101)
    _, ys = solve(sleigh_rhs(m, Ic, a, tau, f), [0.1, -0.2, 0.3, 1.5, -0.4], T, t_eval=ts)
    u = jnp.array([tau, f, 0.0])
    dts, errs = (0.02, 0.01, 0.005), []
    for dt in dts:
        out = run(sleigh, VI, s0, T, dt, control=u)
        s = out["states"]
        xyt = np.asarray(gj.SE2.to_xytheta(s.g))
        errs.append(
            max(
                np.abs(xyt - ys[:, :3]).max(),
                np.abs(np.asarray(s.v[:, :2]) - ys[:, 3:]).max(),
            )
        )
        assert float(jnp.max(out["diag"]["constraint_violation"])) < 1e-14
        # the node multiplier includes the control: lam = m (a w' + w v) with w' from the torque
        om, v = np.asarray(s.v[:, 0]), np.asarray(s.v[:, 1])
        J = Ic + m * a * a
        lam = m * a * (-m * a * v * om + tau) / J + m * om * v
        # (the initial state was built without the control)
        np.testing.assert_allclose(s.lam[1:, 0], lam[1:], atol=1e-12)
    assert abs(fitted_order(dts, errs) - 2) < 0.2 and errs[-1] < 1e-4, errs
