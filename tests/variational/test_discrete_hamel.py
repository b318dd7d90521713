"""DiscreteHamel: the discrete Hamel / Lagrange–d'Alembert integrator of systems in a mobile
frame, against independent references — DiscreteEulerLagrange in coordinates, the Euler–Poisson
equations by SciPy DOP853 (rtol = atol = 1e-12), the closed form of the vertical rolling disk —
and its structure: order, symmetry (composition, reversal), conservation laws, exact constraints."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import geomjax as gj

from .hamel_helpers import (
    DISK,
    euler_frame,
    euler_poisson_rhs,
    gamma,
    heavy_top,
    rolling_disk,
    run,
)
from .helpers import dop853, double_pendulum, fitted_order
from .helpers import run as run_del

TOP = heavy_top()  # one system object: one compilation of each method for all tests
Q0 = jnp.array([0.1, 1.0, 0.4])
W0 = jnp.array([0.5, -0.3, 1.2])
METHOD = gj.DiscreteHamel()


def top_reference(T, damping=0.0):
    y0 = np.concatenate([np.asarray(W0), np.asarray(gamma(Q0))])
    return dop853(euler_poisson_rhs(damping), y0, T)[-1]


def top_error(final, ref):
    return max(
        float(jnp.max(jnp.abs(final.v - ref[:3]))),
        float(jnp.max(jnp.abs(gamma(final.q) - ref[3:]))),
    )


def test_coordinate_frame_reduces_to_discrete_euler_lagrange():
    """A = I: the discrete Lagrangian is DEL's midpoint one, so the trajectories coincide (to
    round-off over 200 steps of the chaotic double pendulum)."""
    lag = double_pendulum()
    ham = gj.HamelSystem(lag.lagrangian, frame=lambda q: jnp.eye(2, dtype=q.dtype), dim=2)
    q0, v0 = jnp.array([1.2, -0.4]), jnp.array([0.3, 0.5])
    f_h, res_h, _ = run(ham, METHOD, ham.make_state(q0, v=v0), 0.01, 200)
    f_d, res_d = run_del(lag, gj.DiscreteEulerLagrange(), lag.make_state(q0, qdot=v0), 0.01, 200)
    assert float(res_h) < 1e-13 and float(res_d) < 1e-13
    np.testing.assert_allclose(f_h.q, f_d.q, rtol=0, atol=1e-11)
    np.testing.assert_allclose(f_h.v, lag.velocity(f_d.q, f_d.p), rtol=0, atol=1e-10)


def test_engineering_frame_is_del_of_the_coordinate_lagrangian():
    """Kepler in the unit polar frame ``v = (ṙ, r θ̇)`` (torsion ≠ 0): the map equals DEL on
    ``L(q, q̇) = ℓ(q, A q̇)`` (the same discrete Lagrangian on Q × Q), and the angular momentum
    ``r v_θ``, the momentum of the θ-translation symmetry of ``ℓ_d``, is conserved to round-off
    (discrete Noether)."""
    A = lambda q: jnp.diag(jnp.stack([jnp.ones_like(q[0]), q[0]]))  # noqa: E731
    polar = gj.HamelSystem(metric=jnp.eye(2), potential=lambda q: -1.0 / q[0], frame=A)
    st = polar.make_state(jnp.array([1.0, 0.0]), v=jnp.array([0.0, np.sqrt(1.5)]))
    f, res, de = run(polar, METHOD, st, 0.01, 400)
    lag = polar.as_lagrangian_system()
    # scalarized (the default): this diag(stack(...)) frame is handled (unstack of a vector)
    del_ = gj.DiscreteEulerLagrange()
    f2, _ = run_del(lag, del_, lag.make_state(st.q, qdot=jnp.array([0.0, np.sqrt(1.5)])), 0.01, 400)
    assert float(res) < 1e-13
    np.testing.assert_allclose(f.q, f2.q, rtol=0, atol=1e-11)
    L0, L1 = st.q[0] * st.v[1], f.q[0] * f.v[1]
    assert abs(float(L1 - L0)) < 1e-13
    # energy error of a second-order symplectic map: ~h² × O(1) on this orbit (a ≈ 2, e = 0.5)
    assert float(de) < 1e-3


def test_rigid_body_in_euler_angles_second_order_vs_euler_poisson():
    """The heavy top in Euler angles, body angular velocity as quasi-velocities, against the
    Euler–Poisson equations: fitted order 2 ± 0.1 of the error in (Ω, Γ) at T = 1, the largest
    error below 1e-3, and the energy error also O(h²) (successive ratios ≈ 4)."""
    ref = top_reference(1.0)
    st = TOP.make_state(Q0, v=W0)
    hs, errs, des = [], [], []
    for n in (50, 100, 200):
        f, res, de = run(TOP, METHOD, st, 1.0 / n, n)
        assert float(res) < 1e-12
        hs.append(1.0 / n)
        errs.append(top_error(f, ref))
        des.append(float(de))
    assert abs(fitted_order(hs, errs) - 2.0) < 0.1, errs
    assert errs[0] < 1e-3, errs
    assert abs(fitted_order(hs, des) - 2.0) < 0.2, des


def test_energy_error_bounded_without_drift():
    """A fast top (spin 3 about the figure axis, θ between 0.7 and 2.4: away from gimbal lock),
    dt = 0.02 over [0, 50] and [50, 100]: the energy error of the second half is no larger than
    1.5× that of the first (a drift would grow it ~2×; measured 4.58e-3 and 4.57e-3), and it is
    an O((h ω)²) relative error, below 1e-3 of |E| ≈ 13.8 (h ω = 0.06)."""
    st = TOP.make_state(jnp.array([0.1, 1.2, 0.4]), v=jnp.array([0.2, -0.1, 3.0]))
    e0 = TOP.energy(st)
    mid, _, de1 = run(TOP, METHOD, st, 0.02, 2500)
    _, res, de2 = run(TOP, METHOD, mid, 0.02, 2500, e_ref=e0)
    assert float(res) < 1e-12
    assert float(de1) < 1e-3 * float(e0) and float(de2) < 1.5 * float(de1), (de1, de2)


def test_composition_is_fourth_order():
    """DiscreteHamel is symmetric (also with forces and constraints): Yoshida's triple jump of it
    has fitted order 4 ± 0.2 against DOP853 on the heavy top."""
    ref = top_reference(1.0)
    st = TOP.make_state(Q0, v=W0)
    method = gj.Composition(METHOD, "yoshida4")
    hs, errs = [], []
    for n in (20, 40, 80):
        f, _, _ = run(TOP, method, st, 1.0 / n, n)
        hs.append(1.0 / n)
        errs.append(top_error(f, ref))
    assert abs(fitted_order(hs, errs) - 4.0) < 0.2, errs


@pytest.mark.long
def test_rolling_disk_in_a_constraint_adapted_frame():
    """The vertical rolling disk with the slip velocities as constrained quasi-velocities: the
    constraints hold exactly, ``θ̇`` and ``φ̇`` (hence the energy and the nonholonomic momentum
    ``(mR² + I) θ̇``) are conserved to round-off, the path converges to VerticalRollingDisk's
    closed form at order 2 (ratio of errors 4 ± 0.3 when dt halves), and the multipliers equal
    VerticalRollingDisk's at the final state."""
    ham = rolling_disk()
    vd = gj.VerticalRollingDisk(**DISK)
    s_vd = vd.state(x=0.1, y=-0.2, theta=0.3, phi=0.4, theta_dot=1.3, phi_dot=0.8)
    st = ham.make_state(jnp.array([0.1, -0.2, 0.3, 0.4]), v=jnp.array([1.3, 0.8, 0.0, 0.0]))
    g, ph = vd.closed_form(2.0, s_vd)
    ref = jnp.concatenate([g, ph[None]])
    errs = []
    for n in (50, 100):
        f, res, de = run(ham, METHOD, st, 2.0 / n, n)
        assert float(res) < 1e-13
        assert np.all(np.asarray(f.v[2:]) == 0.0)
        np.testing.assert_allclose(f.v[:2], st.v[:2], rtol=1e-14)
        assert float(de) < 1e-14
        errs.append(float(jnp.max(jnp.abs(f.q - ref))))
    assert abs(errs[0] / errs[1] - 4.0) < 0.3, errs
    # symmetric with constraints: n steps of −dt from the end come back to the start
    back, _, _ = run(ham, METHOD, f, -2.0 / 100, 100)
    np.testing.assert_allclose(back.q, st.q, rtol=0, atol=1e-12)
    np.testing.assert_allclose(back.v, st.v, rtol=0, atol=1e-12)
    s_f = vd.state(*np.asarray(f.q), theta_dot=f.v[0], phi_dot=f.v[1])
    _, lam_ref = vd.acceleration(2.0, s_f.g, s_f.x, s_f.v)
    np.testing.assert_allclose(f.lam, lam_ref, rtol=1e-12)


@pytest.mark.long
def test_forces_are_frame_covectors_and_derivatives_match_fd():
    """A damping torque ``F = −c Ω`` given in the body frame: second order against the damped
    Euler–Poisson equations (ratio 4 ± 0.3), energy decreasing; and the forward derivative of
    the final ``Γ_z`` with respect to the initial ``Ω`` equals a central finite difference
    (step 1e-5: truncation ~1e-10, round-off ~1e-11)."""
    c = 0.3
    damped = heavy_top(force=lambda t, q, v, u: -c * v)
    st = damped.make_state(Q0, v=W0)
    ref = top_reference(1.0, damping=c)
    errs = []
    for n in (50, 100):
        f, res, _ = run(damped, METHOD, st, 1.0 / n, n)
        assert float(res) < 1e-12
        errs.append(top_error(f, ref))
    assert abs(errs[0] / errs[1] - 4.0) < 0.3, errs
    assert float(damped.energy(f)) < float(damped.energy(st))
    # symmetric with a (velocity-dependent) force: −dt steps retrace the run
    back, _, _ = run(damped, METHOD, f, -1.0 / 100, 100)
    np.testing.assert_allclose(back.q, st.q, rtol=0, atol=1e-11)
    np.testing.assert_allclose(back.v, st.v, rtol=0, atol=1e-11)

    def final_gz(W):
        s = gj.HamelState(Q0, W, st.lam)
        return gamma(run(damped, METHOD, s, 0.02, 50)[0].q)[2]

    d = jnp.array([0.3, -0.5, 0.8])
    _, jvp = jax.jvp(final_gz, (W0,), (d,))
    eps = 1e-5
    fd = (final_gz(W0 + eps * d) - final_gz(W0 - eps * d)) / (2 * eps)
    np.testing.assert_allclose(jvp, fd, rtol=1e-7, atol=1e-9)


def test_float32_run():
    """A float32 state gives a float32 run (the system's arrays follow it): after 200 steps it
    stays within 1e-4 of the float64 run (float32 eps 1.2e-7 times the growth of round-off in
    a chaotic top over T = 2; measured 2.3e-6), every Newton solve converges to float32
    round-off, and the energy error is the float64 one to 1e-4."""
    st = TOP.make_state(Q0, v=W0)
    st32 = jax.tree_util.tree_map(lambda a: a.astype(jnp.float32), st)
    sol = gj.simulate(TOP, METHOD, st32, 0.01, 200)
    assert sol.states.q.dtype == jnp.float32
    assert float(sol.max_residual) < 1e3 * np.finfo(np.float32).eps
    f64, _, de64 = run(TOP, METHOD, st, 0.01, 200)
    np.testing.assert_allclose(np.asarray(sol.final_state.v, float), f64.v, atol=1e-4)
    E = jax.vmap(TOP.energy)(sol.states)
    assert abs(float(jnp.max(jnp.abs(E - E[0]))) - float(de64)) < 1e-4


@pytest.mark.long  # ~6-8 s of compilation: the long tier (make test-full)
def test_frame_singular_along_the_path():
    """A symmetric rotation about the body x axis from θ = 0.3 drives the Euler angles into
    gimbal lock (θ = 0.3 − t): the run stops at the node θ ≈ 0 with an error naming 'frame'
    (default frame_tol), and with frame_tol = 1e-3 as soon as a node has rcond < 1e-3 even when
    the nodes jump over θ = 0."""
    free = gj.HamelSystem(metric=jnp.eye(3), frame=euler_frame)
    s0 = free.make_state(jnp.array([0.0, 0.3, 0.0]), v=jnp.array([-1.0, 0.0, 0.0]))
    with pytest.raises(Exception, match=r"argument 'frame' of the system is singular"):
        jax.block_until_ready(gj.simulate(free, METHOD, s0, 0.01, 40))
    with pytest.raises(Exception, match=r"argument 'frame' of the system is singular"):
        jax.block_until_ready(gj.simulate(free, gj.DiscreteHamel(frame_tol=1e-3), s0, 0.007, 60))
    # the motion before the singular point is fine
    sol = gj.simulate(free, METHOD, s0, 0.01, 20)
    np.testing.assert_allclose(sol.final_state.q, [0.0, 0.1, 0.0], atol=1e-12)


def test_bad_initial_states_and_systems():
    free = gj.HamelSystem(metric=jnp.eye(3), frame=euler_frame)
    bad = gj.HamelState(jnp.array([0.1, 0.0, 0.2]), jnp.ones(3), jnp.zeros(0))
    with pytest.raises(ValueError, match=r"argument 'frame' is singular at 'state0.q'"):
        gj.simulate(free, METHOD, bad, 0.01, 10)
    ham = rolling_disk()
    s = gj.HamelState(
        jnp.array([0.0, 0.0, 0.0, 0.3]), jnp.array([1.0, 0.0, 0.2, 0.0]), jnp.zeros(2)
    )
    with pytest.raises(ValueError, match=r"argument 'state0.v' violates the constraints"):
        gj.simulate(ham, METHOD, s, 0.01, 10)
    with pytest.raises(ValueError, match=r"lam \(2,\)"):
        gj.simulate(ham, METHOD, gj.HamelState(s.q, s.v, jnp.zeros(3)), 0.01, 10)
    with pytest.raises(ValueError, match=r"'controls' must have shape \(10, 4\)"):
        good = ham.make_state(s.q, v=jnp.array([1.0, 0.0, 0.0, 0.0]))
        gj.simulate(ham, METHOD, good, 0.01, 10, controls=jnp.zeros((10, 3)))
    with pytest.raises(ValueError, match=r"does not support"):
        lag = double_pendulum()
        gj.simulate(lag, METHOD, lag.make_state(jnp.zeros(2), qdot=jnp.zeros(2)), 0.01, 10)
    for kw in (dict(newton_iters=0), dict(frame_tol=2.0), dict(on_failure="x")):
        with pytest.raises(ValueError, match=repr(next(iter(kw)))[1:-1]):
            gj.DiscreteHamel(**kw)
