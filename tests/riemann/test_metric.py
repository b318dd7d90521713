"""Geometry of a metric by autodiff, against closed forms, finite differences and identities that
characterize the Levi-Civita connection (torsion-free and metric compatible).

Surfaces used (coordinates → metric → closed forms derived by hand):

* round sphere of radius a, (θ, φ): g = diag(a², a² sin²θ); Γ^θ_φφ = −sin θ cos θ,
  Γ^φ_θφ = cot θ; K = 1/a²; parallel transport once around the latitude θ₀ rotates a vector by
  2π(1 − cos θ₀) (the enclosed solid angle); geodesics are great circles;
* torus (R, r), (u, v): g = diag((R + r cos v)², r²); Γ^u_uv = −r sin v/(R + r cos v),
  Γ^v_uu = (R + r cos v) sin v / r; K = cos v / (r (R + r cos v));
* hyperbolic half-plane g = 1/y²: K = −1; the Euclidean plane in polar coordinates: K = 0.
"""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from scipy.integrate import solve_ivp

from geomjax.riemann import (
    christoffel,
    christoffel_contract,
    christoffel_first_kind,
    covariant_derivative,
    covariant_derivative_along,
    euler_lagrange_acceleration,
    gaussian_curvature,
    geodesic_acceleration,
    newton_acceleration,
    ricci_tensor,
    scalar_curvature,
    sectional_curvature,
)

from . import check_jit

A_SPHERE = 1.7
R_TORUS, r_TORUS = 2.0, 0.6


def sphere_metric(q, a=A_SPHERE):
    return jnp.diag(jnp.stack([a**2 + 0 * q[0], a**2 * jnp.sin(q[0]) ** 2]))


def torus_metric(q):
    return jnp.diag(jnp.stack([(R_TORUS + r_TORUS * jnp.cos(q[1])) ** 2, r_TORUS**2 + 0 * q[0]]))


def hyperbolic_metric(q):
    return jnp.eye(2, dtype=q.dtype) / q[1] ** 2


def polar_metric(q):
    return jnp.diag(jnp.stack([1.0 + 0 * q[0], q[0] ** 2]))


@check_jit
def _surface_geometry(qs, qt, qh, qp):
    def one(metric, q):
        G = christoffel(metric, q)
        return {
            "G": G,
            "K": gaussian_curvature(metric, q),
            "S": scalar_curvature(metric, q),
            "Ric": ricci_tensor(metric, q),
            "g": metric(q),
            "sec": sectional_curvature(metric, q, jnp.array([1.0, 0.3]), jnp.array([-0.2, 0.9])),
        }

    return {
        name: jax.vmap(lambda q, m=m: one(m, q))(x)
        for name, m, x in (
            ("sphere", sphere_metric, qs),
            ("torus", torus_metric, qt),
            ("hyper", hyperbolic_metric, qh),
            ("polar", polar_metric, qp),
        )
    }


def test_surfaces_closed_forms():
    rng = np.random.default_rng(0)
    qs = np.stack([rng.uniform(0.2, 2.9, 16), rng.uniform(-3, 3, 16)], -1)
    qt = rng.uniform(-3, 3, (16, 2))
    qh = np.stack([rng.uniform(-2, 2, 16), rng.uniform(0.3, 3, 16)], -1)
    qp = np.stack([rng.uniform(0.3, 3, 16), rng.uniform(-3, 3, 16)], -1)
    out = jax.tree.map(np.asarray, _surface_geometry(qs, qt, qh, qp))

    th = qs[:, 0]
    G = np.zeros((16, 2, 2, 2))
    G[:, 0, 1, 1] = -np.sin(th) * np.cos(th)
    G[:, 1, 0, 1] = G[:, 1, 1, 0] = np.cos(th) / np.sin(th)
    np.testing.assert_allclose(out["sphere"]["G"], G, atol=1e-12)
    np.testing.assert_allclose(out["sphere"]["K"], 1 / A_SPHERE**2, rtol=1e-10)
    np.testing.assert_allclose(out["sphere"]["S"], 2 / A_SPHERE**2, rtol=1e-10)
    np.testing.assert_allclose(out["sphere"]["sec"], 1 / A_SPHERE**2, rtol=1e-10)

    v = qt[:, 1]
    w = R_TORUS + r_TORUS * np.cos(v)
    G = np.zeros((16, 2, 2, 2))
    G[:, 0, 0, 1] = G[:, 0, 1, 0] = -r_TORUS * np.sin(v) / w
    G[:, 1, 0, 0] = w * np.sin(v) / r_TORUS
    np.testing.assert_allclose(out["torus"]["G"], G, atol=1e-12)
    K = np.cos(v) / (r_TORUS * w)
    np.testing.assert_allclose(out["torus"]["K"], K, atol=1e-12)
    np.testing.assert_allclose(out["torus"]["sec"], K, atol=1e-12)
    # in two dimensions Ric = K g and the scalar curvature is 2K
    for name in ("sphere", "torus", "hyper", "polar"):
        o = out[name]
        np.testing.assert_allclose(o["Ric"], o["K"][:, None, None] * o["g"], atol=1e-10)
        np.testing.assert_allclose(o["S"], 2 * o["K"], atol=1e-10)
    np.testing.assert_allclose(out["hyper"]["K"], -1.0, rtol=1e-10)
    np.testing.assert_allclose(out["polar"]["K"], 0.0, atol=1e-12)


# --------------------------------------------------------------------------------------------
# random dense metrics: every route against the others and against finite differences

N_RAND = 4


def random_metric_params(seed, n=N_RAND):
    rng = np.random.default_rng(seed)
    return {
        "W": rng.standard_normal((n, n)) / np.sqrt(n),
        "P": rng.standard_normal((n, n)),
        "Phi": rng.uniform(-np.pi, np.pi, (n, n)),
    }


def make_metric(p):
    """g(q) = 1 + B Bᵀ with B_ij = W_ij cos(Σ_k P_ik q_k ... ): dense, SPD, every entry depends on q."""

    def metric(q):
        B = p["W"] * jnp.cos(p["P"] * q[None, :] + p["Phi"] + 0.3 * jnp.sum(q))
        return jnp.eye(q.shape[0], dtype=q.dtype) + B @ B.T

    return metric


@check_jit
def _routes(p, q, u, w, F):
    metric = make_metric(p)
    G = christoffel(metric, q)
    G1 = christoffel_first_kind(metric, q)
    L = lambda q, v: 0.5 * v @ metric(q) @ v  # noqa: E731
    return {
        "G": G,
        "G1": G1,
        "g": metric(q),
        "geo": geodesic_acceleration(metric, q, u),
        "contract": christoffel_contract(metric, q, u, w),
        "newton": newton_acceleration(metric, q, u, F, 2.5),
        "el": euler_lagrange_acceleration(lambda q, v: 2.5 * L(q, v), q, u, F),
    }


@given(seed=st.integers(0, 2**30))
def test_contraction_newton_and_lagrange_routes_agree(seed):
    rng = np.random.default_rng(seed)
    p = random_metric_params(seed)
    q, u, w, F = (rng.standard_normal(N_RAND) for _ in range(4))
    o = jax.tree.map(np.asarray, _routes(p, q, u, w, F))
    G = o["G"]
    np.testing.assert_allclose(G, np.swapaxes(G, 1, 2), atol=1e-13)  # torsion-free
    np.testing.assert_allclose(np.einsum("kl,lij->kij", o["g"], G), o["G1"], atol=1e-12)
    np.testing.assert_allclose(o["geo"], -np.einsum("kij,i,j->k", G, u, u), atol=1e-11)
    np.testing.assert_allclose(o["contract"], np.einsum("kij,i,j->k", G, u, w), atol=1e-11)
    # Newton's law m g (q̈ + Γ(q̇, q̇)) = F and the Euler–Lagrange equations of L = ½ m q̇ᵀ g q̇
    newton_ref = -np.einsum("kij,i,j->k", G, u, u) + np.linalg.solve(o["g"], F) / 2.5
    np.testing.assert_allclose(o["newton"], newton_ref, atol=1e-11)
    np.testing.assert_allclose(o["el"], o["newton"], atol=1e-11)


def test_christoffel_against_finite_differences():
    """Γ_{k,ij} from central differences of the metric (NumPy, step 1e-5), no autodiff."""
    p = random_metric_params(7)
    metric = make_metric(p)
    q = np.random.default_rng(8).standard_normal(N_RAND)
    h = 1e-5
    dg = np.stack(
        [
            (np.asarray(metric(q + h * e)) - np.asarray(metric(q - h * e))) / (2 * h)
            for e in np.eye(N_RAND)
        ],
        -1,
    )  # dg[i, j, k] = ∂_k g_ij
    G1_fd = 0.5 * (dg + dg.transpose(0, 2, 1) - dg.transpose(2, 0, 1))
    G_fd = np.linalg.solve(np.asarray(metric(q)), G1_fd.reshape(N_RAND, -1)).reshape(G1_fd.shape)
    o = _routes(p, q, q, q, q)
    np.testing.assert_allclose(o["G1"], G1_fd, atol=1e-9)
    np.testing.assert_allclose(o["G"], G_fd, atol=1e-9)


@check_jit
def _compatibility(p, c):
    """d/dt g(V, W) along a curve, by autodiff of the scalar, and g(DV, W) + g(V, DW)."""
    metric = make_metric(p)
    curve = lambda t: c[0] + c[1] * t + c[2] * jnp.sin(t)  # noqa: E731
    V = lambda t: c[3] * jnp.cos(2 * t) + c[4] * t**2  # noqa: E731
    W = lambda t: c[5] + c[6] * jnp.exp(0.3 * t)  # noqa: E731
    t0 = 0.37
    lhs = jax.jvp(lambda t: V(t) @ metric(curve(t)) @ W(t), (t0,), (1.0,))[1]
    g = metric(curve(t0))
    DV = covariant_derivative_along(metric, curve, V, t0)
    DW = covariant_derivative_along(metric, curve, W, t0)
    return lhs, DV @ g @ W(t0) + V(t0) @ g @ DW


@given(seed=st.integers(0, 2**30))
def test_covariant_derivative_is_metric_compatible(seed):
    c = np.random.default_rng(seed).standard_normal((7, N_RAND))
    lhs, rhs = _compatibility(random_metric_params(seed), c)
    np.testing.assert_allclose(lhs, rhs, rtol=1e-11, atol=1e-11)


_transport_rhs = jax.jit(
    lambda t, y, th0: (
        -covariant_derivative(
            sphere_metric, jnp.stack([th0, t]), jnp.array([0.0, 1.0]), y, jnp.zeros(2)
        )
    )
)


@pytest.mark.parametrize("theta0", [0.4, 1.0, np.pi / 2])
def test_parallel_transport_holonomy_on_the_sphere(theta0):
    """Around the latitude θ₀ (travelled eastwards, the polar cap on the left) a transported vector
    turns counterclockwise by the enclosed solid angle ∫K dA = 2π(1 − cos θ₀), mod 2π, measured in
    the positively oriented orthonormal frame (e_θ, e_φ/(a sin θ₀)) (Gauss–Bonnet)."""
    sol = solve_ivp(
        lambda t, y: np.asarray(_transport_rhs(t, y, theta0)),
        (0.0, 2 * np.pi),
        np.array([1.0, 0.0]),
        method="DOP853",
        rtol=1e-12,
        atol=1e-12,
    )
    V = sol.y[:, -1]
    angle = np.arctan2(V[1] * np.sin(theta0), V[0])
    expected = 2 * np.pi * (1 - np.cos(theta0))
    assert abs(np.angle(np.exp(1j * (angle - expected)))) < 1e-9
    assert abs(np.hypot(V[0], V[1] * np.sin(theta0)) - 1) < 1e-10  # |V| preserved


_geo_rhs = jax.jit(
    lambda y: jnp.concatenate([y[2:], geodesic_acceleration(sphere_metric, y[:2], y[2:])])
)


def _embed(q, a=A_SPHERE):
    return a * np.array([np.sin(q[0]) * np.cos(q[1]), np.sin(q[0]) * np.sin(q[1]), np.cos(q[0])])


def test_geodesics_of_the_sphere_are_great_circles():
    q0, v0 = np.array([1.0, 0.3]), np.array([0.4, -0.7])
    T = 2.0
    sol = solve_ivp(
        lambda t, y: np.asarray(_geo_rhs(y)), (0, T), np.concatenate([q0, v0]), "DOP853",
        rtol=1e-12, atol=1e-12, dense_output=True,
    )  # fmt: skip
    x0 = _embed(q0)
    J = np.stack([(_embed(q0 + 1e-7 * e) - _embed(q0 - 1e-7 * e)) / 2e-7 for e in np.eye(2)], -1)
    xd0 = J @ v0
    speed = np.linalg.norm(xd0)
    w = speed / A_SPHERE  # angular speed along the great circle
    for t in np.linspace(0.3, T, 5):
        ref = np.cos(w * t) * x0 + np.sin(w * t) * xd0 / w
        np.testing.assert_allclose(_embed(sol.sol(t)[:2]), ref, atol=1e-8)


# --------------------------------------------------------------------------------------------
# batching, float32, errors


_torus_G_and_acc = jax.jit(
    lambda q, v: (christoffel(torus_metric, q), geodesic_acceleration(torus_metric, q, v))
)


def test_vmap_and_jit_match_single_calls():
    rng = np.random.default_rng(3)
    qs = np.stack([rng.uniform(0.3, 2.8, 6), rng.uniform(-3, 3, 6)], -1)
    vs = rng.standard_normal((6, 2))
    batched = jax.jit(jax.vmap(geodesic_acceleration, (None, 0, 0)), static_argnums=0)
    out = batched(torus_metric, qs, vs)
    for i in range(6):
        np.testing.assert_allclose(
            out[i], geodesic_acceleration(torus_metric, qs[i], vs[i]), atol=1e-13
        )


def test_float32():
    q = jnp.array([0.8, -0.4], jnp.float32)
    v = jnp.array([0.5, 1.2], jnp.float32)
    G, a = _torus_G_and_acc(q, v)
    assert G.dtype == jnp.float32 and a.dtype == jnp.float32
    G64, _ = _torus_G_and_acc(q.astype(jnp.float64), v.astype(jnp.float64))
    np.testing.assert_allclose(G, G64, rtol=2e-6, atol=2e-6)
    np.testing.assert_allclose(a, -jnp.einsum("kij,i,j->k", G64, v, v), rtol=2e-6, atol=2e-6)


def test_errors_name_the_argument():
    q = jnp.array([0.8, 0.2])
    with pytest.raises(ValueError, match="'q' must have shape"):
        christoffel(sphere_metric, jnp.ones((2, 2)))
    with pytest.raises(ValueError, match="'q' must be finite"):
        geodesic_acceleration(sphere_metric, jnp.array([jnp.nan, 0.1]), q)
    with pytest.raises(ValueError, match=r"'v' must have shape \(2,\)"):
        geodesic_acceleration(sphere_metric, q, jnp.ones(3))
    with pytest.raises(ValueError, match="'metric' must return an \\(2, 2\\) matrix"):
        christoffel(lambda x: jnp.eye(3), q)
    with pytest.raises(ValueError, match="metric\\(q\\).*not positive definite"):
        christoffel(lambda x: -sphere_metric(x), q)
    with pytest.raises(ValueError, match="'mass' must be strictly positive"):
        newton_acceleration(sphere_metric, q, q, q, mass=0.0)
    with pytest.raises(ValueError, match="velocity Hessian"):
        euler_lagrange_acceleration(lambda q, v: -v @ v, q, q)
    # under jit the value checks are compiled with equinox.error_if
    f = eqx.filter_jit(lambda x: geodesic_acceleration(sphere_metric, x, x))
    with pytest.raises(eqx.EquinoxRuntimeError, match="'q' must be finite"):
        jax.block_until_ready(f(jnp.array([jnp.inf, 0.3])))
    with pytest.raises(eqx.EquinoxRuntimeError, match="not positive definite"):
        jax.block_until_ready(f(jnp.array([0.0, 0.3])))  # sin θ = 0: the chart degenerates
