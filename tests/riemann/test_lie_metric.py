"""Left-invariant metrics: Arnold's connection in the left-invariant frame, the coordinate
Christoffel symbols in exponential coordinates, and the Euler–Poincaré equation must describe the
same geodesics.

References: the Koszul identities (torsion-free, metric compatible), forward-mode derivatives of
``exp`` (no Jacobian formulas), and a tight SciPy DOP853 integration of Euler–Poincaré with the
reconstruction ``ġ = g ξ`` (the geodesic flow of a left-invariant metric).
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from scipy.integrate import solve_ivp

import geomjax as gj
from geomjax.riemann import LeftInvariantMetric

from . import check_jit

GROUPS = [gj.SO3, gj.SE3]


def random_inertia(dim, seed):
    A = np.random.default_rng(seed).standard_normal((dim, dim))
    return A @ A.T + dim * np.eye(dim)


def random_point(G, rng, max_angle=2.5):
    q = rng.standard_normal(G.dim)
    k = 3 if G.name in ("SO3", "SE3") else 1
    n = np.linalg.norm(q[:k])
    q[:k] *= min(1.0, max_angle / n)
    return q


@check_jit
def _frame_and_coordinates(G, I, q, a, b, c):
    L = LeftInvariantMetric(G, I)
    E = jnp.linalg.inv(G.jac_right(q))  # columns: left-invariant fields e_j in exp coordinates
    dE = jax.jacfwd(lambda x: jnp.linalg.inv(G.jac_right(x)))(q)  # dE[m, j, l] = ∂_l E^m_j
    Gam = L.exp_coords_christoffel(q)
    C = L.frame_christoffel()
    # ∇_{E_i} E_j in coordinates: (∂E_j) E_i + Γ(E_i, E_j); and Σ_k C^k_ij E_k
    nabla_coord = jnp.einsum("mjl,li->mij", dE, E) + jnp.einsum("mab,ai,bj->mij", Gam, E, E)
    nabla_frame = jnp.einsum("mk,kij->mij", E, C)
    # kinetic energy from forward-mode derivatives of exp (independent of jac_right)
    g = G.to_matrix(G.exp(q))
    gdot = jax.jvp(lambda x: G.to_matrix(G.exp(x)), (q,), (a,))[1]
    xi = G.vee(jnp.linalg.inv(g) @ gdot)
    return {
        "nabla_coord": nabla_coord,
        "nabla_frame": nabla_frame,
        "C": C,
        "ad": jax.vmap(G.ad)(jnp.eye(G.dim)),  # ad[i] = ad(e_i)
        "K_coord": 0.5 * a @ L.exp_coords_metric(q) @ a,
        "K_exp": 0.5 * xi @ I @ xi,
        "compat": L.inner(L.connection(c, a), b) + L.inner(a, L.connection(c, b)),
        "conn_aa": L.connection(a, a),
        "ep": L.euler_poincare(a),
    }


@pytest.mark.parametrize("G", GROUPS, ids=lambda G: G.name)
@given(seed=st.integers(0, 2**30))
def test_frame_connection_and_exp_coordinates_agree(G, seed):
    rng = np.random.default_rng(seed)
    I = random_inertia(G.dim, seed)
    q = random_point(G, rng)
    a, b, c = (rng.standard_normal(G.dim) for _ in range(3))
    o = jax.tree.map(np.asarray, _frame_and_coordinates(G, I, q, a, b, c))
    # the coordinate Levi-Civita connection reproduces Arnold's frame connection at any q
    np.testing.assert_allclose(o["nabla_coord"], o["nabla_frame"], atol=1e-10)
    # Arnold's connection is torsion-free (C^k_ij − C^k_ji = [e_i, e_j]^k) and metric compatible
    np.testing.assert_allclose(
        o["C"] - o["C"].transpose(0, 2, 1), o["ad"].transpose(1, 0, 2), atol=1e-12
    )
    assert abs(o["compat"]) < 1e-11
    # geodesic equation in the frame is Euler–Poincaré: ξ̇ = −∇_ξ ξ = I⁻¹ coad(ξ, Iξ)
    np.testing.assert_allclose(-o["conn_aa"], o["ep"], atol=1e-12)
    np.testing.assert_allclose(
        o["ep"], np.linalg.solve(I, np.asarray(G.coad(a, I @ a))), atol=1e-12
    )
    # the metric in exponential coordinates is the kinetic energy of ξ = g⁻¹ġ
    np.testing.assert_allclose(o["K_coord"], o["K_exp"], rtol=1e-12)


def test_euler_rigid_body_equations():
    """On SO(3) with principal moments the frame geodesic equation is Euler's: I₁ω̇₁ = (I₂ − I₃)ω₂ω₃."""
    Ip = np.array([1.0, 2.0, 3.5])
    w = np.array([0.3, -1.1, 0.7])
    out = LeftInvariantMetric(gj.SO3, Ip).euler_poincare(w)
    ref = (
        np.array(
            [
                (Ip[1] - Ip[2]) * w[1] * w[2],
                (Ip[2] - Ip[0]) * w[2] * w[0],
                (Ip[0] - Ip[1]) * w[0] * w[1],
            ]
        )
        / Ip
    )
    np.testing.assert_allclose(out, ref, atol=1e-14)


@jax.jit
def _ep_rhs(G, I, y):
    m = G.matrix_dim
    g, xi = y[: m * m].reshape(m, m), y[m * m :]
    return jnp.concatenate([(g @ G.hat(xi)).ravel(), LeftInvariantMetric(G, I).euler_poincare(xi)])


@jax.jit
def _coord_rhs(G, I, y):
    d = G.dim
    q, qd = y[:d], y[d:]
    return jnp.concatenate([qd, LeftInvariantMetric(G, I).exp_coords_geodesic_acceleration(q, qd)])


@pytest.mark.parametrize("G", [gj.SO3], ids=lambda G: G.name)
def test_geodesics_match_euler_poincare_reconstruction(G):
    """Integrate (i) Euler–Poincaré + ġ = gξ and (ii) the coordinate geodesic equation in
    exponential coordinates (both DOP853, rtol 1e-12); then exp(q(t)) = g(t) and J_r(q)q̇ = ξ(t).
    (SE(3) geodesics are checked against the LGVI below, and the SE(3) frame and coordinate
    connections against each other at random points above.)"""
    rng = np.random.default_rng(11)
    if G.name == "SO3":
        I = random_inertia(3, 3)
    else:  # Newton–Euler inertia in (ω, v) order: mass m, centre of mass c, inertia I_c (Chevallier, *On the foundations of ordinary and generalized rigid body dynamics and the principle of objectivity*)
        m, c = 2.0, np.array([0.1, -0.2, 0.15])
        chat = np.asarray(gj.SO3.hat(c))
        Ic = random_inertia(3, 4)
        I = np.block(
            [
                [Ic + m * (c @ c) * np.eye(3) - m * np.outer(c, c), m * chat],
                [m * chat.T, m * np.eye(3)],
            ]
        )
    q0 = 0.3 * rng.standard_normal(G.dim)
    qd0 = 0.6 * rng.standard_normal(G.dim)
    g0 = np.asarray(G.exp(q0))
    xi0 = np.asarray(G.jac_right(q0) @ qd0)
    T = 1.5
    kw = dict(method="DOP853", rtol=1e-12, atol=1e-12, dense_output=True)
    ep = solve_ivp(
        lambda t, y: np.asarray(_ep_rhs(G, I, y)), (0, T), np.concatenate([g0.ravel(), xi0]), **kw
    )
    co = solve_ivp(
        lambda t, y: np.asarray(_coord_rhs(G, I, y)), (0, T), np.concatenate([q0, qd0]), **kw
    )
    m_ = G.matrix_dim
    for t in np.linspace(0.25, T, 6):
        q, qd = co.sol(t)[: G.dim], co.sol(t)[G.dim :]
        assert np.linalg.norm(q[:3]) < np.pi - 0.3  # stayed inside the principal ball
        np.testing.assert_allclose(
            np.asarray(G.exp(q)), ep.sol(t)[: m_ * m_].reshape(m_, m_), atol=1e-9
        )
        np.testing.assert_allclose(np.asarray(G.jac_right(q) @ qd), ep.sol(t)[m_ * m_ :], atol=1e-9)
    # the geodesic flow conserves the kinetic energy ½ ξᵀ I ξ
    xiT = ep.sol(T)[m_ * m_ :]
    assert abs(xiT @ I @ xiT - xi0 @ I @ xi0) < 1e-10


def test_errors():
    with pytest.raises(ValueError, match="'inertia' must have shape \\(3,\\) or \\(3, 3\\)"):
        LeftInvariantMetric(gj.SO3, np.ones(6))
    with pytest.raises(ValueError, match="'inertia' must be symmetric positive definite"):
        LeftInvariantMetric(gj.SO3, np.array([1.0, -2.0, 3.0]))
    with pytest.raises(ValueError, match="'group' must be a geomjax LieGroup"):
        LeftInvariantMetric("SO3", np.ones(3))
    L = LeftInvariantMetric(gj.SE3, np.ones(6))
    with pytest.raises(ValueError, match="'xi' must have shape \\(6,\\)"):
        L.euler_poincare(np.ones(3))


@pytest.mark.long  # ~6-8 s of compilation: the long tier (make test-full)
def test_coordinate_geodesic_matches_the_lgvi():
    """The LGVI (a discrete Euler–Poincaré flow with its own code path, second order) lands on the
    geodesic computed here from the coordinate Christoffel symbols, to its O(dt²) error."""
    G = gj.SE3  # the generic Euler–Poincaré path, full 6×6 inertia
    I = random_inertia(G.dim, 7)
    rng = np.random.default_rng(13)
    q0 = 0.2 * rng.standard_normal(G.dim)
    qd0 = 0.5 * rng.standard_normal(G.dim)
    T = 1.0
    co = solve_ivp(
        lambda t, y: np.asarray(_coord_rhs(G, I, y)), (0, T), np.concatenate([q0, qd0]),
        method="DOP853", rtol=1e-12, atol=1e-12,
    )  # fmt: skip
    g_ref = np.asarray(G.exp(co.y[: G.dim, -1]))
    system = gj.EulerPoincareSystem(G, I)
    s0 = gj.LieGroupState(G.exp(q0), jnp.asarray(I @ np.asarray(G.jac_right(q0) @ qd0)))
    steps = 200
    sol = gj.simulate(system, gj.LGVI(), s0, T / steps, steps, save_every=steps)
    err = np.abs(np.asarray(sol.final_state.g) - g_ref).max()
    assert err < 1e-5 * np.abs(g_ref).max()  # O(dt²) with dt² = 2.5e-5 (measured 5.8e-6)
