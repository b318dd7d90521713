"""The generic machinery: SE(3) rigid bodies (Newton–Euler and Kirchhoff inertia), SE(2), R^n and
the torus — one integrator for every group."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import geomjax as gj
from geomjax.systems import SE3Gravity

from .helpers import fitted_order as _order
from .helpers import terminal_error
from .reference import reference

E3 = jnp.array([0.0, 0.0, 1.0])
G0 = gj.SE3.exp(jnp.array([0.2, -0.5, 0.3, 1.0, 0.5, -2.0]))
MU0 = jnp.array([0.4, -0.9, 0.6, 1.5, -0.2, 0.8])
BODY = gj.RigidBodySE3(mass=2.0, inertia=[0.5, 0.8, 1.1], com=[0.1, -0.05, 0.2])
KIRCHHOFF = gj.RigidBodySE3(
    inertia6=jnp.array(
        [
            [1.0, 0.1, 0.0, 0.0, 0.2, 0.0],
            [0.1, 1.5, 0.0, -0.1, 0.0, 0.0],
            [0.0, 0.0, 2.0, 0.0, 0.0, 0.1],
            [0.0, -0.1, 0.0, 3.0, 0.0, 0.0],
            [0.2, 0.0, 0.0, 0.0, 2.5, 0.0],
            [0.0, 0.0, 0.1, 0.0, 0.0, 4.0],
        ]
    )
)


def test_vector_field_is_kirchhoff():
    """coad on se(3)* in (omega, v) order reproduces Kirchhoff's equations written out by hand."""
    s = gj.LieGroupState(G0, MU0)
    xi, dmu = KIRCHHOFF.vector_field(0.0, s)
    w, v = xi[:3], xi[3:]
    pi, p = MU0[:3], MU0[3:]
    # cross products of O(1) vectors: rounding ≤ 2 eps|a||b| per term; 1e-13 is ≥ 10× that
    np.testing.assert_allclose(dmu[:3], jnp.cross(pi, w) + jnp.cross(p, v), atol=1e-13)
    np.testing.assert_allclose(dmu[3:], jnp.cross(p, w), atol=1e-13)


@pytest.mark.parametrize("system", [BODY, KIRCHHOFF], ids=["newton-euler", "kirchhoff"])
def test_free_se3_body_conserves_momenta(system):
    s0 = gj.LieGroupState(G0, MU0)
    sol = gj.simulate(system, gj.LGVI(), s0, 0.01, 20_000, save_every=100)
    d = gj.diagnostics(system, sol)
    m = np.asarray(d["spatial_momentum"])  # (angular about the spatial origin, linear)
    assert np.max(np.abs(m - m[0])) / np.linalg.norm(m[0]) <= 1e-11
    for k in ("casimir_p_dot_p", "casimir_pi_dot_p"):
        c = np.asarray(d[k])
        assert np.max(np.abs(c - c[0])) <= 1e-11 * max(1.0, abs(c[0]))
    E = np.asarray(d["energy"])
    err = np.abs(E - E[0]) / E[0]
    assert err.max() < 1e-3 and err.max() < 1.5 * err[:21].max()
    assert float(jnp.max(d["group_defect"])) < 1e-12


def test_se3_body_under_gravity_closed_forms():
    """Gravity on an offset centre of mass couples rotation and translation. Closed forms: the
    spatial linear momentum falls as P(t) = P(0) − m g t e3 and the vertical spatial angular
    momentum is conserved (the torque about the origin is horizontal)."""
    m, g = 2.0, 9.81
    system = gj.RigidBodySE3(
        mass=m,
        inertia=[0.5, 0.8, 1.1],
        com=[0.1, -0.05, 0.2],
        potential=SE3Gravity(m, g, [0.1, -0.05, 0.2]),
    )
    sol = gj.simulate(system, gj.LGVI(), gj.LieGroupState(G0, MU0), 0.01, 2000, save_every=10)
    mom = np.asarray(jax.vmap(system.spatial_momentum)(sol.states))
    t = np.asarray(sol.times)
    P_expected = mom[0, 3:] - m * g * t[:, None] * np.array([0.0, 0.0, 1.0])
    np.testing.assert_allclose(mom[:, 3:], P_expected, atol=1e-10)
    np.testing.assert_allclose(mom[:, 2], mom[0, 2], atol=1e-10)
    E = np.asarray(jax.vmap(system.energy)(sol.states))
    K = np.asarray(jax.vmap(system.kinetic_energy)(sol.states))
    assert np.max(np.abs(E - E[0])) / K.max() < 1e-4  # relative to the energy scale reached


@pytest.mark.long
@pytest.mark.parametrize(
    "name,system,state0,method,order,dts",
    [
        ("SE3-LGVI", BODY, gj.LieGroupState(G0, MU0), gj.LGVI(), 2, (0.1, 0.05, 0.025)),
        (
            "SE3-LGVI-exp",
            KIRCHHOFF,
            gj.LieGroupState(G0, MU0),
            gj.LGVI(retraction="exp"),
            2,
            (0.1, 0.05, 0.025),
        ),
        ("SE3-RKMK4", BODY, gj.LieGroupState(G0, MU0), gj.RKMK4(), 4, (0.2, 0.1, 0.05)),
        (
            "SE2-LGVI",
            gj.EulerPoincareSystem(
                gj.SE2, jnp.array([[2.0, 0.3, 0.0], [0.3, 1.0, 0.0], [0.0, 0.0, 1.5]])
            ),
            gj.LieGroupState(gj.SE2.exp(jnp.array([0.3, 1.0, -0.5])), jnp.array([1.2, -0.7, 0.4])),
            gj.LGVI(),
            2,
            (0.1, 0.05, 0.025),
        ),
    ],
    ids=lambda x: x if isinstance(x, str) else "",
)
def test_convergence_order_against_dop853(name, system, state0, method, order, dts):
    T = 2.0
    _, gs, mus = reference(system, state0, T, t_eval=[T])
    errs = [terminal_error(system, method, state0, T, dt, gs[-1], mus[-1]) for dt in dts]
    assert abs(_order(dts, errs) - order) < 0.2, errs


def test_on_a_vector_space_lgvi_is_velocity_verlet():
    """R^n with V(q) = ½ q^T K q: the LGVI reduces to Störmer–Verlet (written out here), and the
    energy error of a harmonic oscillator is bounded."""
    K = jnp.array([[2.0, 0.5], [0.5, 1.0]])
    M = jnp.array([[1.0, 0.2], [0.2, 3.0]])
    system = gj.EulerPoincareSystem(gj.Rn(2), M, potential=lambda q: 0.5 * q @ K @ q)
    q0, p0, h, n = jnp.array([1.0, -0.5]), jnp.array([0.3, 0.8]), 0.05, 400
    sol = gj.simulate(system, gj.LGVI(), gj.LieGroupState(q0, p0), h, n)
    q, p = np.asarray(q0), np.asarray(p0)
    Mi, Kn = np.linalg.inv(np.asarray(M)), np.asarray(K)
    for _ in range(n):
        p_half = p - 0.5 * h * Kn @ q
        q = q + h * Mi @ p_half
        p = p_half - 0.5 * h * Kn @ q
    np.testing.assert_allclose(sol.final_state.g, q, atol=1e-12)
    np.testing.assert_allclose(sol.final_state.mu, p, atol=1e-12)


def test_pendulum_on_the_circle():
    """T^1 with V = −cos θ: angles stay wrapped in (−π, π], and the motion equals the R^1 run."""
    V = lambda th: -jnp.cos(th[0])  # noqa: E731
    torus = gj.EulerPoincareSystem(gj.Tn(1), jnp.eye(1), potential=V)
    line = gj.EulerPoincareSystem(gj.Rn(1), jnp.eye(1), potential=V)
    s0 = gj.LieGroupState(jnp.array([3.0]), jnp.array([1.5]))  # rotating (energy above separatrix)
    a = gj.simulate(torus, gj.LGVI(), s0, 0.01, 3000)
    b = gj.simulate(line, gj.LGVI(), s0, 0.01, 3000)
    assert float(jnp.max(jnp.abs(a.states.g))) <= np.pi
    wrapped = (b.states.g + np.pi) % (2 * np.pi) - np.pi
    np.testing.assert_allclose(a.states.g, wrapped, atol=1e-9)
    np.testing.assert_allclose(a.states.mu, b.states.mu, atol=1e-9)


@pytest.mark.long
def test_se3_gradients_match_finite_differences():
    """Generic-group path (forward-mode Jacobian in the Newton solve, implicit-function-theorem
    derivatives) differentiated w.r.t. the initial momentum and the mass."""

    def loss(mu0, mass):
        system = gj.RigidBodySE3(
            mass=mass,
            inertia=[0.5, 0.8, 1.1],
            com=[0.1, -0.05, 0.2],
            potential=SE3Gravity(mass, 9.81, [0.1, -0.05, 0.2]),
        )
        sol = gj.simulate(system, gj.LGVI(), gj.LieGroupState(G0, mu0), 0.05, 20, save_every=20)
        return jnp.sum(sol.final_state.g * jnp.arange(16.0).reshape(4, 4)) + jnp.sum(
            sol.final_state.mu**2
        )

    f = jax.jit(loss)
    g_mu, g_m = jax.jit(jax.grad(loss, argnums=(0, 1)))(MU0, jnp.array(2.0))
    eps = 1e-6
    v = jnp.asarray(np.random.default_rng(3).standard_normal(6))
    fd = (f(MU0 + eps * v, 2.0) - f(MU0 - eps * v, 2.0)) / (2 * eps)
    assert abs(float(g_mu @ v - fd)) <= 1e-6 * max(1.0, abs(float(fd)))
    fd_m = (f(MU0, 2.0 + eps) - f(MU0, 2.0 - eps)) / (2 * eps)
    assert abs(float(g_m - fd_m)) <= 1e-6 * max(1.0, abs(float(fd_m)))


def test_se3_float32_is_stable():
    s0 = jax.tree_util.tree_map(lambda x: x.astype(jnp.float32), gj.LieGroupState(G0, MU0))
    system = gj.RigidBodySE3(mass=jnp.float32(2.0), inertia=jnp.array([0.5, 0.8, 1.1], jnp.float32))
    sol = gj.simulate(system, gj.LGVI(), s0, 0.01, 5000, save_every=50)
    assert sol.states.g.dtype == jnp.float32
    E = np.asarray(jax.vmap(system.energy)(sol.states), dtype=np.float64)
    assert np.all(np.isfinite(E)) and np.max(np.abs(E - E[0])) / E[0] < 1e-3
    # float32 renormalizes the rotation block every step (LGVI(reorthonormalize=None)):
    # the defect stays at round-off instead of random-walking
    assert float(jnp.max(gj.SE3.defect(sol.states.g))) < 1e-6
