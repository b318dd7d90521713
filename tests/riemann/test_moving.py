"""Time-dependent constraints (Mangiarotti, *Mechanical systems and holonomic constraints*) and moving frames (Chevallier, *On the foundations of ordinary and generalized rigid body dynamics and the principle of objectivity*): closed forms for a bead on
a rotating hoop, the Lagrangian route, the identities of Mangiarotti's eqs. (1), (10)–(21), and
objectivity — motions (free or constrained) computed in a rotating, accelerating frame and
transformed back equal the inertial ones.

Bead on a hoop of radius a spinning at ω about its vertical diameter, θ from the bottom
(derived by hand; cylindrical components ρ = a sin θ, φ = ωt, z = −a cos θ):
θ̈ = sin θ (ω² cos θ − g/a); equilibrium cos θ* = g/(ω² a); reaction
R = m[(ρ̈ − ρω²) ρ̂ + 2ρ̇ω φ̂ + (z̈ + g) ẑ]; Jacobi integral ½ m a²θ̇² − ½ m ω²a² sin²θ − m g a cos θ.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from scipy.integrate import quad, solve_ivp

import geomjax as gj
from geomjax.riemann import (
    Embedding,
    MovingEmbedding,
    MovingFrame,
    christoffel_first_kind,
    euler_lagrange_acceleration,
)

from . import check_jit

GRAV = 9.81


def hoop(a, w):
    return lambda t, q: (
        a
        * jnp.stack(
            [jnp.sin(q[0]) * jnp.cos(w * t), jnp.sin(q[0]) * jnp.sin(w * t), -jnp.cos(q[0])]
        )
    )


@check_jit
def _hoop(a, w, m, t, th, thd):
    E = MovingEmbedding(hoop(a, w), m)
    F = jnp.array([0.0, 0.0, -m * GRAV])
    q, qd = th[None], thd[None]
    return {
        "acc": E.acceleration(t, q, qd, F)[0],
        "R": E.reaction_force(t, q, qd, F),
        "J": E.tangent_basis(t, q)[:, 0],
        "xd": E.velocity(t, q, qd),
        "dphidt": E.velocity(t, q, 0 * qd),
        "acc_lag": euler_lagrange_acceleration(E.lagrangian(lambda x: m * GRAV * x[2]), q, qd, t=t)[
            0
        ],
    }


@given(seed=st.integers(0, 2**30))
def test_bead_on_rotating_hoop_closed_forms(seed):
    rng = np.random.default_rng(seed)
    a, w, m = rng.uniform(0.3, 2), rng.uniform(0.5, 6), rng.uniform(0.1, 3)
    t, th, thd = rng.uniform(-3, 3), rng.uniform(-3, 3), rng.standard_normal()
    o = jax.tree.map(np.asarray, _hoop(a, w, m, t, th, thd))
    thdd = np.sin(th) * (w**2 * np.cos(th) - GRAV / a)
    np.testing.assert_allclose(o["acc"], thdd, rtol=1e-11, atol=1e-11)
    np.testing.assert_allclose(o["acc_lag"], thdd, rtol=1e-11, atol=1e-11)
    rho, rhod = a * np.sin(th), a * np.cos(th) * thd
    rhodd = a * (np.cos(th) * thdd - np.sin(th) * thd**2)
    zdd = a * (np.sin(th) * thdd + np.cos(th) * thd**2)
    e_rho = np.array([np.cos(w * t), np.sin(w * t), 0.0])
    e_phi = np.array([-np.sin(w * t), np.cos(w * t), 0.0])
    R = m * (
        (rhodd - rho * w**2) * e_rho + 2 * rhod * w * e_phi + (zdd + GRAV) * np.array([0, 0, 1.0])
    )
    np.testing.assert_allclose(o["R"], R, atol=1e-10 * (1 + np.abs(R).max()))
    # ideal (no virtual work) but the moving hoop does work: R·ẋ = R·∂_tφ = 2 m ω² ρ ρ̇
    assert abs(o["R"] @ o["J"]) < 1e-10 * (1 + np.abs(R).max())
    np.testing.assert_allclose(o["R"] @ o["xd"], 2 * m * w**2 * rho * rhod, atol=1e-9)
    np.testing.assert_allclose(o["R"] @ o["dphidt"], 2 * m * w**2 * rho * rhod, atol=1e-9)


def test_hoop_equilibrium():
    a, w, m = 0.5, 6.0, 1.3
    th = np.arccos(GRAV / (w**2 * a))
    o = _hoop(a, w, m, 0.0, th, 0.0)
    assert abs(float(o["acc"])) < 1e-12
    R = m * (-(w**2) * a * np.sin(th) * np.array([1.0, 0, 0]) + GRAV * np.array([0, 0, 1.0]))
    np.testing.assert_allclose(o["R"], R, atol=1e-12)
    # below the critical speed ω² a < g the only equilibria are θ = 0, π
    assert abs(float(_hoop(a, 3.0, m, 0.0, 0.7, 0.0)["acc"])) > 0.1


_hoop_rhs = jax.jit(
    lambda t, y, a, w: jnp.stack(
        [
            y[1],
            MovingEmbedding(hoop(a, w)).acceleration(t, y[:1], y[1:], jnp.array([0, 0, -GRAV]))[0],
        ]
    )
)
_hoop_power = jax.jit(
    lambda t, y, a, w: (
        lambda E: (
            E.reaction_force(t, y[:1], y[1:], jnp.array([0, 0, -GRAV]))
            @ E.velocity(t, y[:1], y[1:])
        )
    )(MovingEmbedding(hoop(a, w)))
)


def test_hoop_motion_conserves_jacobi_integral_and_work_balances():
    a, w = 0.7, 4.5
    sol = solve_ivp(
        lambda t, y: np.asarray(_hoop_rhs(t, y, a, w)), (0, 3.0), [0.3, 0.5], "DOP853",
        rtol=1e-12, atol=1e-12, dense_output=True,
    )  # fmt: skip
    th, thd = sol.y
    jac = 0.5 * a**2 * thd**2 - 0.5 * w**2 * a**2 * np.sin(th) ** 2 - GRAV * a * np.cos(th)
    assert np.ptp(jac) < 1e-9
    assert np.ptp(th) > 0.5  # it really moved

    def energy(t):  # inertial kinetic + potential energy per unit mass
        th, thd = sol.sol(t)
        return 0.5 * a**2 * (thd**2 + w**2 * np.sin(th) ** 2) - GRAV * a * np.cos(th)

    work, _ = quad(
        lambda t: float(_hoop_power(t, sol.sol(t), a, w)), 0, 3.0, epsabs=1e-11, limit=200
    )
    np.testing.assert_allclose(energy(3.0) - energy(0.0), work, atol=1e-7)


# --------------------------------------------------------------------------------------------
# a generic moving surface: identities of the canonical connection, Lagrangian route, Thm 2

M_FULL = np.array([[1.5, 0.2, -0.1], [0.2, 1.0, 0.3], [-0.1, 0.3, 2.0]])


def breathing_surface(t, q):
    """An ellipsoid-like surface that breathes, rotates, shears and translates (sheared chart)."""
    u, v = q[0] + 0.3 * q[1], q[1]
    s = 1.0 + 0.2 * jnp.sin(1.3 * t)
    base = jnp.stack(
        [s * jnp.sin(u) * jnp.cos(v), 1.3 * jnp.sin(u) * jnp.sin(v), 0.8 * jnp.cos(u) / s]
    )
    c, s_ = jnp.cos(0.4 * t + 0.1 * t**2), jnp.sin(0.4 * t + 0.1 * t**2)
    x, y, z = base[0], base[1], base[2]  # rotated about z, then sheared
    return jnp.stack([c * x - s_ * y, s_ * x + c * y, z + 0.3 * x]) + jnp.stack(
        [0.1 * t**2, jnp.sin(t), -0.3 * t]
    )


def potential(x):
    return GRAV * x[2] + 0.5 * x @ x


@check_jit
def _moving_identities(t, q, qd, drag):
    E = MovingEmbedding(breathing_surface, M_FULL)
    xd = E.velocity(t, q, qd)
    F = -jax.grad(potential)(E.position(t, q)) - drag * xd
    J = E.tangent_basis(t, q)
    G = E.connection(t, q)  # [k, α, β], α = 0 is time
    G1 = E.connection_first_kind(t, q)
    e = jnp.concatenate([jnp.ones(1), qd])
    h = E.induced_metric(t, q)
    lag = euler_lagrange_acceleration(E.lagrangian(potential), q, qd, -drag * J.T @ xd, t=t)
    return {
        "acc": E.acceleration(t, q, qd, F),
        "acc_tensor": -jnp.einsum("kab,a,b->k", G, e, e) + jnp.linalg.solve(h, J.T @ F),
        "acc_lag": lag,
        "amb": E.ambient_acceleration(t, q, qd, F),
        "f_plus_rf": jnp.linalg.solve(M_FULL, F) + E.force_of_constraint(t, q, qd, F),
        "R": E.reaction_force(t, q, qd, F),
        "M_rf": M_FULL @ E.force_of_constraint(t, q, qd, F),
        "Mr_normal": J.T @ M_FULL @ E.canonical_force(t, q, qd),
        "JtR": J.T @ E.reaction_force(t, q, qd, F),
        "dh_dt": jax.jvp(lambda s: E.induced_metric(s, q), (t,), (1.0,))[1],
        "G1": G1,
        "G1_spatial_from_h": christoffel_first_kind(lambda y: E.induced_metric(t, y), q),
        "F": F,
    }


@pytest.mark.long
@given(seed=st.integers(0, 2**30))
def test_canonical_connection_identities_and_routes(seed):
    rng = np.random.default_rng(seed)
    t, q, qd = rng.uniform(-2, 2), rng.uniform(0.4, 1.2, 2), rng.standard_normal(2)
    o = jax.tree.map(np.asarray, _moving_identities(t, q, qd, 0.4))
    # intrinsic motion: contraction = full coefficients (eq. 13/14) = Euler–Lagrange of L(t, q, q̇)
    np.testing.assert_allclose(o["acc_tensor"], o["acc"], atol=1e-10)
    np.testing.assert_allclose(o["acc_lag"], o["acc"], atol=1e-10)
    # Theorem 2: a_c = f + r_f, and the reaction covector is M r_f = M a_c − F, ideal (Jᵀ R = 0)
    np.testing.assert_allclose(o["f_plus_rf"], o["amb"], atol=1e-10)
    np.testing.assert_allclose(o["M_rf"], o["R"], atol=1e-10)
    np.testing.assert_allclose(M_FULL @ o["amb"], o["F"] + o["R"], atol=1e-10)
    np.testing.assert_allclose(o["JtR"], 0.0, atol=1e-10)
    np.testing.assert_allclose(o["Mr_normal"], 0.0, atol=1e-10)  # r is normal (eq. 16–17)
    # eq. (1): the spatial Γ_{k,ij} are the Christoffel symbols of h(t, ·) and
    # ∂_0 h_ij = Γ_{i,0j} + Γ_{j,0i}
    np.testing.assert_allclose(o["G1"][:, 1:, 1:], o["G1_spatial_from_h"], atol=1e-10)
    G10 = o["G1"][:, 0, 1:]
    np.testing.assert_allclose(G10 + G10.T, o["dh_dt"], atol=1e-10)
    assert np.abs(G10 - G10.T).max() > 1e-3  # the antisymmetric part (rotation) is extra data


@check_jit
def _static_vs_moving(q, qd, F):
    phi = lambda q: breathing_surface(0.5, q)  # noqa: E731
    E, Em = Embedding(phi, M_FULL), MovingEmbedding(lambda t, q: phi(q), M_FULL)
    return (
        (Em.acceleration(2.0, q, qd, F), E.acceleration(q, qd, F)),
        (Em.reaction_force(2.0, q, qd, F), E.reaction_force(q, qd, F)),
        (Em.canonical_force(2.0, q, qd), E.second_fundamental_form(q, qd)),
        (Em.connection(2.0, q)[:, 1:, 1:], E.christoffel(q)),
        (Em.connection(2.0, q)[:, 0, :], jnp.zeros((2, 3))),  # no Γ_00, Γ_0j
    )


def test_time_independent_constraint_reduces_to_embedding():
    q, qd, F = jnp.array([0.7, 0.4]), jnp.array([0.3, -1.1]), jnp.array([0.1, 0.2, -1.0])
    for a, b in _static_vs_moving(q, qd, F):
        np.testing.assert_allclose(a, b, atol=1e-12)


# --------------------------------------------------------------------------------------------
# moving frames


def frame_rotation(t):
    return gj.SO3.exp(jnp.stack([0.7 * t, -0.3 * t**2, 0.5 * jnp.sin(2 * t)]))


def frame_origin(t):
    return jnp.stack([0.5 * t**2, jnp.sin(1.5 * t), 0.2 * t**3])


@check_jit
def _frame_terms(t, y, yd, m):
    fr = MovingFrame(frame_rotation, frame_origin)
    f = fr.inertial_forces(t, y, yd, m)
    G = fr.as_embedding(m).connection(t, y)
    G1 = fr.as_embedding(m).connection_first_kind(t, y)
    w, wd = fr.angular_velocity(t), fr.angular_acceleration(t)
    R = frame_rotation(t)
    Rd = jax.jacfwd(frame_rotation)(t)
    bdd = jax.jacfwd(jax.jacfwd(frame_origin))(t)
    return f, G, G1, w, wd, R, Rd, bdd


def test_inertial_forces_are_the_connection_of_the_moving_chart():
    """The frame as a full-dimensional moving chart: −m(Γ_00 + 2Γ_0j ẏ^j) is the sum of the four
    inertial forces, Γ_ij = 0, m Γ_{k,0j} = m hat(ω) (antisymmetric: rotation) and
    Γ_{k,00} = m (Rᵀb̈ + ω̇ × y + ω × (ω × y)) (acceleration of the frame)."""
    y, yd, m, t = np.array([0.3, -1.2, 0.8]), np.array([0.5, 0.1, -0.7]), 1.7, 0.9
    f, G, G1, w, wd, R, Rd, bdd = jax.tree.map(np.asarray, _frame_terms(t, y, yd, m))
    np.testing.assert_allclose(np.asarray(R.T @ Rd), np.asarray(gj.SO3.hat(w)), atol=1e-13)
    np.testing.assert_allclose(-m * (G[:, 0, 0] + 2 * G[:, 0, 1:] @ yd), f.total, atol=1e-12)
    np.testing.assert_allclose(G[:, 1:, 1:], 0.0, atol=1e-13)
    np.testing.assert_allclose(G1[:, 0, 1:], m * np.asarray(gj.SO3.hat(w)), atol=1e-12)
    np.testing.assert_allclose(
        G1[:, 0, 0], m * (R.T @ bdd + np.cross(wd, y) + np.cross(w, np.cross(w, y))), atol=1e-12
    )
    np.testing.assert_allclose(f.coriolis, -2 * m * np.cross(w, yd), atol=1e-13)
    np.testing.assert_allclose(f.translation, -m * R.T @ bdd, atol=1e-12)


def inertial_force(X, Xd, m):
    """Gravity, a spring to the inertial origin and linear drag (in inertial components)."""
    return m * jnp.array([0.0, 0.0, -GRAV]) - 3.0 * X - 0.4 * Xd


M_P = 0.8


@jax.jit
def _inertial_rhs(t, Y):
    return jnp.concatenate([Y[3:], inertial_force(Y[:3], Y[3:], M_P) / M_P])


@check_jit
def _frame_rhs(t, Y):
    fr = MovingFrame(frame_rotation, frame_origin)
    y, yd = Y[:3], Y[3:]
    X, Xd = fr.to_inertial(t, y, yd)
    F_frame = frame_rotation(t).T @ inertial_force(X, Xd, M_P)
    return jnp.concatenate([yd, fr.acceleration(t, y, yd, F_frame, M_P)])


_to_inertial = jax.jit(
    lambda t, y, yd: MovingFrame(frame_rotation, frame_origin).to_inertial(t, y, yd)
)
_from_inertial = jax.jit(
    lambda t, X, Xd: MovingFrame(frame_rotation, frame_origin).from_inertial(t, X, Xd)
)


def test_objectivity_free_particle():
    """A particle under gravity, a spring and drag: integrated in the inertial frame and in a
    rotating, accelerating frame (with all four inertial forces), then transformed back."""
    X0, Xd0 = np.array([1.0, 0.2, -0.5]), np.array([0.3, -0.8, 1.1])
    t0, T = 0.2, 2.5
    y0, yd0 = (np.asarray(a) for a in _from_inertial(t0, X0, Xd0))
    kw = dict(method="DOP853", rtol=1e-12, atol=1e-12)
    a = solve_ivp(
        lambda t, Y: np.asarray(_inertial_rhs(t, Y)), (t0, T), np.concatenate([X0, Xd0]), **kw
    )
    b = solve_ivp(
        lambda t, Y: np.asarray(_frame_rhs(t, Y)), (t0, T), np.concatenate([y0, yd0]), **kw
    )
    X, Xd = _to_inertial(T, b.y[:3, -1], b.y[3:, -1])
    np.testing.assert_allclose(X, a.y[:3, -1], atol=1e-8)
    np.testing.assert_allclose(Xd, a.y[3:, -1], atol=1e-8)
    y_end = np.asarray(_from_inertial(T, a.y[:3, -1], a.y[3:, -1])[0])
    assert np.linalg.norm(y_end - y0) > 0.5  # the frame motion matters


@check_jit
def _hoop_in_both_frames(a, w, m, t, th, thd):
    """Inertial: moving constraint.  Rotating frame R(t) = exp(ωt ẑ): a fixed hoop (Embedding) with
    gravity and the inertial forces (Coriolis and centrifugal) as applied forces."""
    F = jnp.array([0.0, 0.0, -m * GRAV])
    q, qd = th[None], thd[None]
    Rot = lambda s: gj.SO3.exp(jnp.stack([0.0, 0.0, w * s]))  # noqa: E731
    fr = MovingFrame(Rot)
    Ef = Embedding(lambda q: a * jnp.stack([jnp.sin(q[0]), 0.0 * q[0], -jnp.cos(q[0])]), m)
    y, yd = Ef.position(q), Ef.velocity(q, qd)
    F_frame = Rot(t).T @ F + fr.inertial_forces(t, y, yd, m).total
    Em = MovingEmbedding(hoop(a, w), m)
    return {
        "acc_frame": Ef.acceleration(q, qd, F_frame),
        "acc_inertial": Em.acceleration(t, q, qd, F),
        "R_frame": Ef.reaction_force(q, qd, F_frame),
        "R_inertial_in_frame": Rot(t).T @ Em.reaction_force(t, q, qd, F),
    }


@given(seed=st.integers(0, 2**30))
def test_objectivity_of_a_constrained_motion_and_its_reaction(seed):
    rng = np.random.default_rng(seed)
    a, w, m = rng.uniform(0.3, 2), rng.uniform(0.5, 6), rng.uniform(0.1, 3)
    t, th, thd = rng.uniform(-3, 3), rng.uniform(-3, 3), rng.standard_normal()
    o = jax.tree.map(np.asarray, _hoop_in_both_frames(a, w, m, t, th, thd))
    np.testing.assert_allclose(o["acc_frame"], o["acc_inertial"], rtol=1e-11, atol=1e-11)
    scale = 1 + np.abs(o["R_frame"]).max()
    np.testing.assert_allclose(o["R_frame"], o["R_inertial_in_frame"], atol=1e-11 * scale)


def test_unit_covariance_and_gradient_of_moving_reaction():
    t, th, thd = 0.4, 0.9, 0.7
    R = lambda a, w, m, g_: _hoop_scaled(a, w, m, g_, t, th, thd)  # noqa: E731
    base = R(0.6, 4.0, 1.2, GRAV)
    for L, T, M in ((3.0, 1.0, 1.0), (1.0, 0.2, 1.0), (1.0, 1.0, 7.0)):
        scaled = _hoop_scaled(0.6 * L, 4.0 / T, 1.2 * M, GRAV * L / T**2, t * T, th, thd / T)
        np.testing.assert_allclose(scaled, base * M * L / T**2, rtol=1e-11)
    f = lambda w: R(0.6, w, 1.2, GRAV)  # noqa: E731
    d_ad = jax.jacfwd(f)(4.0)
    h = 1e-6
    np.testing.assert_allclose(d_ad, (f(4.0 + h) - f(4.0 - h)) / (2 * h), rtol=1e-7, atol=1e-7)


@check_jit
def _hoop_scaled(a, w, m, grav, t, th, thd):
    E = MovingEmbedding(hoop(a, w), m)
    return E.reaction_force(t, th[None], thd[None], jnp.stack([0.0, 0.0, -m * grav]))


def test_errors():
    with pytest.raises(ValueError, match="'phi' must be callable"):
        MovingEmbedding(None)
    with pytest.raises(ValueError, match="'rotation' must be callable"):
        MovingFrame(np.eye(3))
    E = MovingEmbedding(hoop(1.0, 2.0))
    with pytest.raises(ValueError, match="'t' must be a scalar"):
        E.acceleration(np.ones(2), np.ones(1), np.ones(1))
    with pytest.raises(ValueError, match="'qdot' must have shape \\(1,\\)"):
        E.acceleration(0.0, np.ones(1), np.ones(2))
    fr = MovingFrame(lambda t: jnp.eye(2))
    with pytest.raises(ValueError, match="'rotation' must return a \\(3, 3\\) matrix"):
        fr.angular_velocity(0.0)
    with pytest.raises(ValueError, match="'mass' must be strictly positive"):
        MovingFrame(frame_rotation).inertial_forces(0.0, np.ones(3), np.ones(3), mass=-1.0)
