"""Ideal holonomic constraints (Modugno–Vitolo, *The geometry of Newton's law and rigid systems*, §2.2): closed forms, agreement of the embedding, level-set
(Lagrange multiplier) and Euler–Lagrange routes in non-orthogonal charts with a non-diagonal mass
metric, eq. (2.3) in an adapted chart, zero power, unit covariance, gradients, float32.

Closed forms (derived by hand, Euclidean ambient metric m·1, gravity g = −g e_z):

* sphere of radius a, outward normal n = x/a: R = −m(|v|²/a + g·n) n;
* conical pendulum of length ℓ at angle θ from the downward vertical: steady for
  ω² = g/(ℓ cos θ), with tension |R| = m g / cos θ towards the pivot;
* cone x = s(sin α cos φ, sin α sin φ, cos α) (vertex down), unit normal
  n̂ = cos α ρ̂ − sin α ẑ: generators are straight and principal, so
  R = −m(cos α v_φ²/(s sin α) + g sin α) n̂ (v_φ the azimuthal speed); a horizontal circle at
  distance s is steady for ω² = g cos α/(s sin²α), with |R| = m g/ sin α.
"""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from geomjax.riemann import (
    Embedding,
    LevelSetConstraint,
    christoffel_first_kind,
    euler_lagrange_acceleration,
    newton_acceleration,
)

from . import check_jit

GRAV = 9.81


def sphere(a):
    return lambda q: (
        a * jnp.stack([jnp.sin(q[0]) * jnp.cos(q[1]), jnp.sin(q[0]) * jnp.sin(q[1]), jnp.cos(q[0])])
    )


def cone(alpha):
    return lambda q: (
        q[0]
        * jnp.stack(
            [
                jnp.sin(alpha) * jnp.cos(q[1]),
                jnp.sin(alpha) * jnp.sin(q[1]),
                jnp.cos(alpha) + 0 * q[1],
            ]
        )
    )


@check_jit
def _sphere_and_cone(a, m, alpha, qs, qds, qc, qdc):
    F = jnp.array([0.0, 0.0, -m * GRAV])
    S = Embedding(sphere(a), m)
    Cn = Embedding(cone(alpha), m)
    one_s = lambda q, qd: (S.reaction_force(q, qd, F), S.position(q), S.velocity(q, qd))  # noqa: E731
    one_c = lambda q, qd: (Cn.reaction_force(q, qd, F), Cn.position(q), Cn.acceleration(q, qd, F))  # noqa: E731
    return jax.vmap(one_s)(qs, qds), jax.vmap(one_c)(qc, qdc)


_pendulum_acc = jax.jit(lambda a, m, q, qd, F: Embedding(sphere(a), m).acceleration(q, qd, F))


def test_sphere_and_cone_reactions_closed_form():
    rng = np.random.default_rng(0)
    a, m, alpha = 1.3, 0.7, 0.5
    qs = np.stack([rng.uniform(0.2, 2.9, 32), rng.uniform(-3, 3, 32)], -1)
    qds = rng.standard_normal((32, 2))
    qc = np.stack([rng.uniform(0.5, 2.0, 32), rng.uniform(-3, 3, 32)], -1)
    qdc = rng.standard_normal((32, 2))
    (R, x, v), (Rc, _, _) = _sphere_and_cone(a, m, alpha, qs, qds, qc, qdc)
    g = np.array([0.0, 0.0, -GRAV])
    n = np.asarray(x) / a
    v2 = np.sum(np.asarray(v) ** 2, -1)
    ref = -m * (v2 / a + n @ g)[:, None] * n
    np.testing.assert_allclose(R, ref, atol=1e-12)
    s, phi = qc[:, 0], qc[:, 1]
    rho_hat = np.stack([np.cos(phi), np.sin(phi), 0 * phi], -1)
    n_hat = np.cos(alpha) * rho_hat - np.sin(alpha) * np.array([0, 0, 1.0])
    v_phi = s * np.sin(alpha) * qdc[:, 1]
    ref_c = (
        -m
        * (np.cos(alpha) * v_phi**2 / (s * np.sin(alpha)) + GRAV * np.sin(alpha))[:, None]
        * n_hat
    )
    np.testing.assert_allclose(Rc, ref_c, atol=1e-12)


def test_conical_pendulum_and_circular_orbit_in_a_cone():
    ell, m, theta = 0.8, 1.7, 0.6  # θ from the downward vertical → polar angle π − θ
    w = np.sqrt(GRAV / (ell * np.cos(theta)))
    q = np.array([[np.pi - theta, 0.4]])
    alpha, s = 0.45, 1.2
    wc = np.sqrt(GRAV * np.cos(alpha) / (s * np.sin(alpha) ** 2))
    qc = np.array([[s, -1.0]])
    (R, x, _), (Rc, _, acc_c) = _sphere_and_cone(
        ell, m, alpha, q, np.array([[0.0, w]]), qc, np.array([[0.0, wc]])
    )
    # steady: the pendulum's tension is m g / cos θ towards the pivot (and q̈ = 0, below)
    np.testing.assert_allclose(R[0], -(m * GRAV / np.cos(theta)) * x[0] / ell, atol=1e-12)
    np.testing.assert_allclose(acc_c[0], 0.0, atol=1e-12)
    np.testing.assert_allclose(np.linalg.norm(Rc[0]), m * GRAV / np.sin(alpha), rtol=1e-13)
    F = jnp.array([0, 0, -m * GRAV])
    np.testing.assert_allclose(_pendulum_acc(ell, m, q[0], np.array([0.0, w]), F), 0.0, atol=1e-12)


# --------------------------------------------------------------------------------------------
# a generic surface in a sheared (non-orthogonal) chart, full SPD mass metric


M_FULL = np.array([[2.0, 0.3, -0.2], [0.3, 1.5, 0.4], [-0.2, 0.4, 1.2]])


def height(x1, x2):
    return 0.3 * jnp.sin(x1) * jnp.cos(1.3 * x2) + 0.1 * x1 * x2


def surface(q):
    x1 = q[0] + 0.5 * q[1]  # sheared, non-orthogonal chart
    x2 = q[1] + 0.3 * q[0] ** 2
    return jnp.stack([x1, x2, height(x1, x2)])


def surface_level(x):
    return x[2] - height(x[0], x[1])


def potential(x):
    return 0.5 * jnp.sum(jnp.array([1.0, 2.0, 0.5]) * x * x) + GRAV * x[2]


def curve(q):
    t = q[0]
    return jnp.stack([jnp.cos(t), jnp.sin(t), 0.3 * jnp.sin(2 * t)])


def curve_level(x):
    return jnp.stack([x[0] ** 2 + x[1] ** 2 - 1.0, x[2] - 0.6 * x[0] * x[1]])


@check_jit
def _routes(M, q, qd, qc, qdc, drag, u):
    out = {}
    for name, phi, c, q_, qd_ in (
        ("surface", surface, surface_level, q, qd),
        ("curve", curve, curve_level, qc, qdc),
    ):
        E = Embedding(phi, M)
        L = LevelSetConstraint(c, M)
        x, v = E.position(q_), E.velocity(q_, qd_)
        F = -jax.grad(potential)(x) - drag * v  # conservative + velocity dependent
        J = E.tangent_basis(q_)
        lag = E.lagrangian(potential)
        out[name] = {
            "c": L.value(x),
            "Av": L.constraint_jacobian(x) @ v,
            "acc": E.acceleration(q_, qd_, F),
            "acc_newton": newton_acceleration(E.induced_metric, q_, qd_, J.T @ F),
            "acc_lagrange": euler_lagrange_acceleration(lag, q_, qd_, -drag * J.T @ v),
            "amb": E.ambient_acceleration(q_, qd_, F),
            "amb_ls": L.acceleration(x, v, F),
            "R": E.reaction_force(q_, qd_, F),
            "R_ls": L.reaction_force(x, v, F),
            "J": J,
            "v": v,
            "F": F,
            "II": E.second_fundamental_form(q_, qd_),
            "II_ls": L.second_fundamental_form(x, v),
            "Pt": E.tangent_projection(q_, u),
            "Pt_ls": L.tangent_projection(x, u),
            "Fn": E.normal_force(q_, u),
        }
    return out


@pytest.mark.long
@given(seed=st.integers(0, 2**30))
def test_embedding_multiplier_and_lagrange_routes_agree(seed):
    rng = np.random.default_rng(seed)
    q, qd = rng.uniform(-1.5, 1.5, 2), rng.standard_normal(2)
    qc, qdc = rng.uniform(-3, 3, 1), rng.standard_normal(1)
    u = rng.standard_normal(3)
    o = jax.tree.map(np.asarray, _routes(M_FULL, q, qd, qc, qdc, 0.3, u))
    for name, r in o.items():
        np.testing.assert_allclose(r["c"], 0.0, atol=1e-13, err_msg=name)  # on the constraint
        np.testing.assert_allclose(r["Av"], 0.0, atol=1e-13, err_msg=name)
        np.testing.assert_allclose(r["acc_newton"], r["acc"], atol=1e-11, err_msg=name)
        np.testing.assert_allclose(r["acc_lagrange"], r["acc"], atol=1e-11, err_msg=name)
        np.testing.assert_allclose(r["amb_ls"], r["amb"], atol=1e-11, err_msg=name)
        np.testing.assert_allclose(r["R_ls"], r["R"], atol=1e-11, err_msg=name)
        # Newton's law in the ambient space with the mass metric: M ẍ = F + R
        np.testing.assert_allclose(M_FULL @ r["amb"], r["F"] + r["R"], atol=1e-11, err_msg=name)
        # ideal: the reaction annihilates every tangent vector (zero power)
        np.testing.assert_allclose(r["J"].T @ r["R"], 0.0, atol=1e-11, err_msg=name)
        assert abs(r["R"] @ r["v"]) < 1e-11
        np.testing.assert_allclose(r["II_ls"], r["II"], atol=1e-11, err_msg=name)
        np.testing.assert_allclose(r["Pt_ls"], r["Pt"], atol=1e-12, err_msg=name)
        # projections are M-orthogonal, not Euclidean: ⟨P u, M (u − P u)⟩ = 0
        assert abs(r["Pt"] @ M_FULL @ (u - r["Pt"])) < 1e-12
        np.testing.assert_allclose(r["J"].T @ r["Fn"], 0.0, atol=1e-12, err_msg=name)
    # ... and the M-orthogonal projector differs from the Euclidean one for this metric
    Jn = o["surface"]["J"]
    P_M = Jn @ np.linalg.solve(Jn.T @ M_FULL @ Jn, Jn.T @ M_FULL)
    np.testing.assert_allclose(P_M @ u, o["surface"]["Pt"], atol=1e-12)
    assert np.linalg.norm(P_M - Jn @ np.linalg.solve(Jn.T @ Jn, Jn.T)) > 1e-2


@check_jit
def _adapted_chart(M, y, yd, F):
    """Eq. (2.3) in the adapted chart X(y, s) = φ(y) + s ν(y) (ν transversal, not normal)."""

    def X(z):
        y_, s = z[:2], z[2]
        nu = jnp.array([0.2, -0.1, 1.0]) + 0.3 * jnp.stack([jnp.sin(y_[0]), jnp.cos(y_[1]), 0.0])
        return surface(y_) + s * nu

    def Ghat(z):
        JX = jax.jacfwd(X)(z)
        return JX.T @ M @ JX

    z = jnp.concatenate([y, jnp.zeros(1)])
    G1 = christoffel_first_kind(Ghat, z)  # [k, i, j] = Γ_{k,ij}
    Gh = Ghat(z)
    JX = jax.jacfwd(X)(z)
    Fh = JX.T @ F
    gcon = Gh[:2, :2]
    Ginv = jnp.linalg.inv(gcon)
    # R_r = (Γ_{r,ab} − g_rc g_con^{cd} Γ_{d,ab}) ẏ^a ẏ^b − F_r + g_con^{ba} F_a g_br   (r = 2)
    Rr = (
        (G1[2, :2, :2] - jnp.einsum("c,cd,dab->ab", Gh[2, :2], Ginv, G1[:2, :2, :2])) @ yd @ yd
        - Fh[2]
        + Fh[:2] @ Ginv @ Gh[:2, 2]
    )
    R_chart = jnp.stack([0.0, 0.0, Rr])
    return jnp.linalg.solve(JX.T, R_chart), Embedding(surface, M).reaction_force(y, yd, F)


@given(seed=st.integers(0, 2**30))
def test_reaction_equals_eq_2_3_in_an_adapted_non_orthogonal_chart(seed):
    rng = np.random.default_rng(seed)
    y, yd, F = rng.uniform(-1, 1, 2), rng.standard_normal(2), rng.standard_normal(3)
    R_23, R = _adapted_chart(M_FULL, y, yd, F)
    np.testing.assert_allclose(R_23, R, atol=1e-11)


# --------------------------------------------------------------------------------------------
# units, gradients, float32, errors


@check_jit
def _sphere_reaction(a, m, q, qd, grav):
    F = m * jnp.stack([0.0, 0.0, -grav])
    return Embedding(sphere(a), m).reaction_force(q, qd, F)


def test_unit_covariance():
    """Lengths ×L, times ×T, masses ×M: angles are unchanged, q̇ → q̇/T, g → gL/T², and the
    reaction (a force) scales by M L / T²."""
    q, qd = jnp.array([0.9, -0.4]), jnp.array([0.6, 1.4])
    a, m = 1.3, 0.7
    R = _sphere_reaction(a, m, q, qd, GRAV)
    for L, T, M in ((2.0, 1.0, 1.0), (1.0, 3.0, 1.0), (1.0, 1.0, 5.0), (0.1, 7.0, 1e3)):
        R_s = _sphere_reaction(a * L, m * M, q, qd / T, GRAV * L / T**2)
        np.testing.assert_allclose(R_s, R * M * L / T**2, rtol=1e-12)


def test_gradient_of_reaction_against_finite_differences():
    q, qd = jnp.array([0.9, -0.4]), jnp.array([0.6, 1.4])
    a, m = 1.3, 0.7
    f = lambda p: _sphere_reaction(p[0], p[1], q, qd, p[2])  # noqa: E731
    p = jnp.array([a, m, GRAV])
    Jad = jax.jacfwd(f)(p)
    Jrev = jax.jacrev(f)(p)
    h = 1e-6
    Jfd = jnp.stack([(f(p + h * e) - f(p - h * e)) / (2 * h) for e in jnp.eye(3)], -1)
    np.testing.assert_allclose(Jad, Jfd, rtol=1e-7, atol=1e-8)
    np.testing.assert_allclose(Jrev, Jad, atol=1e-12)
    # and the closed form dR/da = −m(θ̇² + sin²θ φ̇²) n
    n = sphere(1.0)(q)
    dRda = -m * (qd[0] ** 2 + jnp.sin(q[0]) ** 2 * qd[1] ** 2) * n
    np.testing.assert_allclose(Jad[:, 0], dRda, atol=1e-12)


def test_float32_reaction():
    q = jnp.array([0.9, -0.4], jnp.float32)
    qd = jnp.array([0.6, 1.4], jnp.float32)
    R = _sphere_reaction(jnp.float32(1.3), jnp.float32(0.7), q, qd, jnp.float32(GRAV))
    assert R.dtype == jnp.float32
    R64 = _sphere_reaction(1.3, 0.7, q.astype(jnp.float64), qd.astype(jnp.float64), GRAV)
    np.testing.assert_allclose(R, R64, rtol=1e-5, atol=1e-5)


def test_errors_name_the_argument():
    with pytest.raises(ValueError, match="'phi' must be callable"):
        Embedding(3.0)
    with pytest.raises(ValueError, match="'ambient_metric' must be strictly positive"):
        Embedding(sphere(1.0), -1.0)
    with pytest.raises(ValueError, match="'ambient_metric' must be symmetric positive definite"):
        Embedding(sphere(1.0), np.array([[1.0, 2.0], [2.0, 1.0]]))
    with pytest.raises(ValueError, match="'ambient_metric' must be finite"):
        LevelSetConstraint(surface_level, np.array([1.0, np.nan, 1.0]))
    E = Embedding(sphere(1.0), np.ones(4))
    with pytest.raises(ValueError, match="'ambient_metric' has shape \\(4,\\).*dimension 3"):
        E.position(jnp.array([0.3, 0.2]))
    E = Embedding(sphere(1.0))
    with pytest.raises(ValueError, match="'q' must have shape"):
        E.reaction_force(jnp.ones((2, 2)), jnp.ones(2))
    with pytest.raises(ValueError, match="'force' must have shape \\(3,\\)"):
        E.reaction_force(jnp.array([0.3, 0.2]), jnp.ones(2), jnp.ones(2))
    with pytest.raises(ValueError, match="'qdot' must be finite"):
        E.acceleration(jnp.array([0.3, 0.2]), jnp.array([jnp.nan, 1.0]))
    with pytest.raises(ValueError, match="'phi' must map q"):
        Embedding(lambda q: jnp.outer(q, q)).position(jnp.ones(2))
    with pytest.raises(ValueError, match="induced metric.*not positive definite"):
        E.acceleration(jnp.array([0.0, 0.2]), jnp.ones(2))  # pole: chart degenerate
    L = LevelSetConstraint(lambda x: jnp.stack([x[2], 2 * x[2]]))  # dependent constraints
    with pytest.raises(ValueError, match="constraints must be independent"):
        L.multipliers(jnp.zeros(3), jnp.array([1.0, 0.0, 0.0]))
    f = eqx.filter_jit(lambda q: Embedding(sphere(1.0)).acceleration(q, jnp.ones(2)))
    with pytest.raises(eqx.EquinoxRuntimeError, match="not positive definite"):
        jax.block_until_ready(f(jnp.array([0.0, 0.2])))
