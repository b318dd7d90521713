"""Base-controlled systems (Cabrera, *Base-controlled mechanical systems and geometric phases*): closed forms, conservation to round-off, gauge
independence, convergence orders and bad inputs.

Compiles are the cost here (every system is autodiffed to third order), so each test compiles
one program and varies traced arguments (step count in a dynamic ``fori_loop``, loop parameters).
"""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.tree_util import Partial
from scipy.integrate import quad, solve_ivp

import geomjax as gj
from geomjax.reconstruction import (
    BaseControlledSystem,
    HorizontalLift,
    MomentumLGVI,
    Reconstruction,
    ReconstructionRKMK4,
    ball_on_turntable,
    free_rigid_body,
    gyrostat,
    holonomy,
    reconstruct,
    vertical_disk,
)


def _run_final(method, recon, state0, T, n):
    """Final state after ``n`` steps of ``T/n`` (``n`` traced: one compile for all ``n``)."""

    @jax.jit
    def go(state0, n):
        dt = T / n

        def body(k, s):
            return method.step(recon, s, dt, None, k * dt)[0]

        return jax.lax.fori_loop(0, n, body, state0)

    return go


def fitted_order(hs, errs):
    return float(np.polyfit(np.log(hs), np.log(errs), 1)[0])


# --------------------------------------------------------------------------------------------
# §5.1 vertical disk: abelian, nonholonomic; corrected closed form of the paper


def test_vertical_disk_closed_form_and_order():
    R = 0.7
    S = vertical_disk(mass=1.3, inertia=0.5, heading_inertia=0.2, radius=R)
    phi = lambda t: 0.3 * np.sin(2 * t) + 0.5 * t  # noqa: E731
    rec = Reconstruction(S, lambda t: jnp.stack([0.3 * jnp.sin(2 * t) + 0.5 * t]))
    s0 = rec.state(momentum=jnp.array([0.0, 0.0, 2.0]))
    thd = float(rec.velocity(s0.mu, 0.0)[2])  # θ̇ is constant (the momentum along g^q)
    T = 2.0
    exact = np.array(
        [
            R * thd * quad(lambda t: np.cos(phi(t)), 0, T, epsabs=1e-14)[0],
            R * thd * quad(lambda t: np.sin(phi(t)), 0, T, epsabs=1e-14)[0],
            thd * T,
        ]
    )
    go = _run_final(MomentumLGVI(), rec, s0, T, 0)
    ns = [20, 40, 80]
    errs = [float(jnp.max(jnp.abs(go(s0, n).g - exact))) for n in ns]
    assert fitted_order(1 / np.array(ns), errs) == pytest.approx(2.0, abs=0.15)
    assert errs[-1] < 1e-3  # observed 1.2e-4 (h = 1/40)


# --------------------------------------------------------------------------------------------
# gyrostat (D = TQ): spatial momentum to round-off, orders 2 and 4, float32


GYRO_AXES, GYRO_J = np.array([[1.0, 0.0, 0.0], [0.0, 0.6, 0.8]]), np.array([0.3, 0.2])
GYRO = gyrostat(inertia=(1.0, 1.6, 2.2), rotor_axes=GYRO_AXES, rotor_inertias=GYRO_J)


def _rotors(t):
    return jnp.stack([1.5 * jnp.sin(t) + t, 0.8 * jnp.cos(1.3 * t)])


def test_gyrostat_momentum_roundoff_group_and_orders():
    rec = Reconstruction(GYRO, _rotors)
    mu_s = jnp.array([0.4, -0.7, 1.1])
    g0 = gj.SO3.exp(jnp.array([0.2, -0.1, 0.3]))
    s0 = rec.state(g0, mu_s, spatial=True)
    np.testing.assert_allclose(rec.spatial_momentum(s0), mu_s, rtol=1e-14, atol=1e-14)
    T = 2.0
    lg = _run_final(MomentumLGVI(), rec, s0, T, 0)
    s1 = lg(s0, 400)
    # discrete Noether: μ_{k+1} = Ad_Fᵀ μ_k exactly, so the drift is round-off (400 steps)
    assert float(jnp.max(jnp.abs(rec.spatial_momentum(s1) - mu_s))) < 1e-13
    assert float(gj.SO3.defect(s1.g)) < 1e-13
    # fitted orders against SciPy DOP853 (1e-13) on the reconstruction equation written out from
    # the docstring's Lagrangian: Π = I_lock Ω + Σ j_i α̇_i a_i and μ_s = R Π conserved, so
    # Ṙ = R hat(I_lock⁻¹ (Rᵀ μ_s − Σ j_i α̇_i a_i))
    I_lock = np.diag([1.0, 1.6, 2.2]) + (GYRO_AXES.T * GYRO_J) @ GYRO_AXES

    def rhs(t, y):
        R = y.reshape(3, 3)
        alpha_dot = np.array([1.5 * np.cos(t) + 1.0, -0.8 * 1.3 * np.sin(1.3 * t)])  # of _rotors
        w = np.linalg.solve(I_lock, R.T @ np.asarray(mu_s) - GYRO_AXES.T @ (GYRO_J * alpha_dot))
        return (R @ np.array([[0, -w[2], w[1]], [w[2], 0, -w[0]], [-w[1], w[0], 0]])).ravel()

    ref = solve_ivp(rhs, (0.0, T), np.asarray(g0).ravel(), method="DOP853", rtol=1e-13, atol=1e-13)
    R_ref = ref.y[:, -1].reshape(3, 3)
    rk = _run_final(ReconstructionRKMK4(), rec, s0, T, 0)
    ns = np.array([25, 50, 100])

    def err(s):
        return float(np.max(np.abs(np.asarray(s.g) - R_ref)))

    e_lg = [err(lg(s0, int(n))) for n in ns]
    e_rk = [err(rk(s0, int(n))) for n in ns]
    assert fitted_order(1 / ns, e_lg) == pytest.approx(2.0, abs=0.2)
    assert fitted_order(1 / ns, e_rk) == pytest.approx(4.0, abs=0.3)
    # measured 4.9e-6 and 1.9e-10 at 100 steps (RKMK4 at 800 steps: 4e-14 from DOP853)
    assert e_lg[-1] < 5e-5 and e_rk[-1] < 2e-9


def test_float32_free_body():
    """float32 end to end (the smallest system, to keep the compile cheap): spatial momentum and
    group defect at float32 round-off over 100 LGVI steps."""
    rec = Reconstruction(free_rigid_body((1.0, 1.6, 2.2)), lambda t: jnp.zeros((0,), t.dtype))
    mu_s = jnp.array([0.4, -0.7, 1.1], jnp.float32)
    s0 = gj.LieGroupState(jnp.eye(3, dtype=jnp.float32), mu_s)  # D = TQ: Π = μ at g = e
    sol, d = eqx.filter_jit(
        lambda s: (lambda sol: (sol, gj.diagnostics(rec, sol)))(
            gj.simulate(rec, MomentumLGVI(), s, 0.02, 100)
        )
    )(s0)
    assert sol.states.g.dtype == jnp.float32
    assert float(jnp.max(jnp.abs(d["spatial_momentum"] - mu_s))) < 1e-5
    assert float(jnp.max(d["group_defect"])) < 1e-5


# --------------------------------------------------------------------------------------------
# §5.2 ball on a turntable (affine): gauge independence, conserved spin


@pytest.mark.long
def test_ball_on_turntable_gauge_independence_and_spin():
    S = ball_on_turntable(rate=0.8, radius=0.5, mass=1.2)

    def path(t):
        return jnp.stack([0.6 * jnp.cos(t) + 0.1 * t, 0.4 * jnp.sin(2 * t)])

    def gauge(scale, t):  # scale = 0: the trivial gauge (a Partial leaf: one compile for both)
        return gj.SO3.exp(scale * jnp.stack([0.3 * jnp.sin(t), t**2 / 5, -0.2 * t]))

    mu_s = jnp.array([0.1, -0.2, 0.35])
    T, n = 2.0, 100

    @eqx.filter_jit
    def physical(rec):
        sol = reconstruct(rec, T, n, momentum=mu_s, spatial=True, method=ReconstructionRKMK4())
        att = jax.vmap(rec.configuration)(sol.states, sol.times)[1]
        res = jax.vmap(rec.diagnostics)(sol.states, sol.times)["constraint_residual"]
        J = jax.vmap(lambda s, t: rec.system.momentum_map(*_cdot(rec, s, t)))(sol.states, sol.times)
        # vertical spin of the ball (the momentum along g^q = Ad_{g⁻¹} e_z) is conserved
        spin_z = jnp.einsum("nij,nj->ni", att, J)[:, 2]
        return att, jnp.max(res), jnp.max(jnp.abs(spin_z - spin_z[0]))

    out = [
        physical(Reconstruction(S, path, gauge=Partial(gauge, jnp.asarray(a)))) for a in (0.0, 1.0)
    ]
    for _, res, spin in out:
        assert float(res) < 1e-12
        assert float(spin) < 1e-9  # RKMK4 error at h = 0.02 (observed ~1e-11)
    # the physical motion c(t) does not depend on the gauge (RKMK4 error ~1e-10 here)
    assert float(jnp.max(jnp.abs(out[0][0] - out[1][0]))) < 1e-7
    # LGVI: the spin is kept to round-off in the trivial gauge (g^{d₀} = e_z is constant)
    rec = Reconstruction(S, path)
    sol = reconstruct(rec, T, 100, momentum=mu_s, spatial=True)
    assert float(jnp.max(jnp.abs(sol.states.mu[:, 2] - sol.states.mu[0, 2]))) < 1e-13
    assert float(sol.max_residual) < 1e-12  # Newton converged in every step


def _cdot(rec, s, t):
    """Physical ``(c, ċ)`` from a state: ``c = g·d₀``, ``ċ = g·(ḋ₀ + ξ_Q(d₀))``."""
    q, v = rec.gauge_velocity(t)
    xi = rec.velocity(s.mu, t)
    w = jax.tree_util.tree_map(lambda a, b: a + b, v, rec.system.generator(q, xi))
    return jax.jvp(lambda qq: rec.system.action(s.g, qq), (q,), (w,))


# --------------------------------------------------------------------------------------------
# bad input


def test_bad_inputs():
    S = ball_on_turntable()

    def not_jittable(t):
        return jnp.zeros(2) if t > 0 else jnp.ones(2)

    with pytest.raises(ValueError, match="base_curve"):
        Reconstruction(S, not_jittable)
    with pytest.raises(ValueError, match="base_curve.*shape"):
        Reconstruction(S, lambda t: jnp.zeros(3))
    with pytest.raises(ValueError, match="base_curve.*non-finite"):
        Reconstruction(S, lambda t: jnp.array([jnp.nan, t]))
    with pytest.raises(ValueError, match="gauge"):
        Reconstruction(S, lambda t: jnp.zeros(2), gauge=lambda t: jnp.eye(2))
    # (H1) fails: a constraint on the base velocity only has no vertical part
    disk = vertical_disk()
    bad = BaseControlledSystem(
        group=gj.Rn(3),
        kinetic=disk.kinetic,
        action=disk.action,
        section=disk.section,
        base_dim=1,
        constraint=lambda q, qd: jnp.stack([qd[0] - qd[1], qd[3]]),
    )
    with pytest.raises(ValueError, match="H1"):
        Reconstruction(bad, lambda t: jnp.stack([t]))
    with pytest.raises(ValueError, match="kinetic"):
        BaseControlledSystem(gj.SO3, lambda q, v: v, S.action, S.section, 2)
    rec = Reconstruction(S, lambda t: jnp.stack([t, 0.0 * t]))
    with pytest.raises(ValueError, match="momentum"):
        rec.state(momentum=jnp.zeros(2))
    with pytest.raises(ValueError, match="loop"):
        holonomy(S, lambda t: jnp.stack([t, 0.0 * t]), 1.0, 4)
    with pytest.raises(ValueError, match="method"):
        gj.simulate(rec, gj.LGVI(), rec.state(), 0.1, 2)


def test_methods_reject_other_systems():
    assert not MomentumLGVI().supports(gj.RigidBody(jnp.ones(3)))
    assert HorizontalLift().supports(Reconstruction(gyrostat(), lambda t: jnp.stack([t])))
