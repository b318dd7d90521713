"""n-particle and rigid systems (Modugno–Vitolo, *The geometry of Newton's law and rigid systems*, §3–4).

References: the definitions evaluated directly in NumPy (centre of mass, Σ m r × v, inertia), hand
closed forms (dumbbell tension μ|v_rel|²/L with μ = m₁m₂/(m₁+m₂), perpendicular-axis theorem,
square and collinear inertia), and two independent constrained-dynamics routes for the reaction
at every particle: Lagrange multipliers of the pairwise-distance constraints (generic bodies only:
their Jacobian is rank deficient for collinear n ≥ 3 and coplanar n ≥ 4) and an
:class:`Embedding` of the rigid configuration space by an explicit parametrization
(exponential coordinates of SO(3) for C ≥ 2; spherical angles of S² for collinear bodies).
"""

import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import geomjax as gj
from geomjax.riemann import Embedding, LevelSetConstraint, ParticleSystem, RigidSystem

from . import check_jit

BODIES = {
    "dumbbell": (np.array([1.0, 3.0]), np.array([[0.0, 0.0, 0.0], [0.3, -0.4, 1.2]])),
    "collinear3": (np.array([1.0, 2.0, 0.5]), np.outer([0.0, 1.0, 2.5], [0.6, 0.0, 0.8]) + 1.0),
    "triangle": (
        np.array([1.0, 2.0, 3.0]),
        np.array([[0.0, 0.0, 0.0], [1.0, 0.0, 0.2], [0.2, 1.3, -0.1]]),
    ),
    "planar5": (
        np.array([1.0, 0.5, 2.0, 1.5, 0.7]),
        np.array([[0, 0, 0], [1.0, 0, 0], [0, 1.0, 0], [1.0, 1.3, 0], [0.4, -0.6, 0]])
        @ np.asarray(gj.SO3.exp(np.array([0.3, -0.5, 0.2]))).T,
    ),
    "tetra": (
        np.array([1.0, 2.0, 3.0, 1.5]),
        np.array([[0, 0, 0], [1.0, 0, 0], [0, 1.2, 0], [0.3, 0.2, 0.9]]),
    ),
    "generic6": (
        np.array([1.0, 2.0, 0.3, 1.1, 0.8, 2.2]),
        np.random.default_rng(5).standard_normal((6, 3)),
    ),
}
EXPECTED_C = {
    "dumbbell": 1,
    "collinear3": 1,
    "triangle": 2,
    "planar5": 2,
    "tetra": 3,
    "generic6": 3,
}


def body(name):
    m, ref = BODIES[name]
    return RigidSystem(m, ref)


@pytest.mark.parametrize("name", list(BODIES))
def test_characteristic_and_inertia(name):
    m, ref = BODIES[name]
    b = RigidSystem(m, ref)
    assert b.characteristic == EXPECTED_C[name]
    r = ref - (m @ ref) / m.sum()
    I_ref = sum(mi * (ri @ ri * np.eye(3) - np.outer(ri, ri)) for mi, ri in zip(m, r))
    np.testing.assert_allclose(b.inertia_tensor, I_ref, atol=1e-12)
    np.testing.assert_allclose(b.mass, m.sum())
    np.testing.assert_allclose(b.center_of_mass, (m @ ref) / m.sum(), atol=1e-14)
    lam = np.sort(np.linalg.eigvalsh(I_ref))
    np.testing.assert_allclose(b.principal_moments, lam, atol=1e-12)
    if EXPECTED_C[name] == 1:  # (0, λ, λ), λ = Σ m_i |r_i|²
        lam_ax = np.sum(m * np.sum(r * r, 1))
        np.testing.assert_allclose(lam, [0.0, lam_ax, lam_ax], atol=1e-12)
    if EXPECTED_C[name] == 2:  # perpendicular-axis theorem: I_normal = sum of the two in-plane
        np.testing.assert_allclose(lam[2], lam[0] + lam[1], rtol=1e-12)


def test_square_inertia_closed_form():
    d, m = 0.7, 1.3
    sq = RigidSystem(np.full(4, m), np.array([[d, d, 0], [-d, d, 0], [-d, -d, 0], [d, -d, 0.0]]))
    np.testing.assert_allclose(
        sq.inertia_tensor, np.diag([4 * m * d**2, 4 * m * d**2, 8 * m * d**2]), atol=1e-14
    )


def test_nearly_collinear_bodies_warn_and_exact_ones_do_not():
    m = np.ones(3)
    with pytest.warns(UserWarning, match="nearly collinear"):
        b = RigidSystem(m, np.array([[0, 0, 0], [1.0, 0, 0], [2.0, 1e-5, 0]]))
    assert b.characteristic == 2
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert RigidSystem(m, np.array([[0, 0, 0], [1.0, 0, 0], [2.0, 0, 0]])).characteristic == 1
        assert RigidSystem(m, np.array([[0, 0, 0], [1.0, 0, 0], [2.0, 0.1, 0]])).characteristic == 2
    # a larger tolerance treats it as collinear
    assert (
        RigidSystem(m, np.array([[0, 0, 0], [1.0, 0, 0], [2.0, 1e-12, 0]]), tol=1e-9).characteristic
        == 1
    )


def random_rigid_state(b, seed):
    rng = np.random.default_rng(seed)
    R = np.asarray(gj.SO3.exp(rng.standard_normal(3)))
    c = rng.standard_normal(3)
    x = np.asarray(b.configuration(R, c))
    W, v0 = rng.standard_normal(3), rng.standard_normal(3)
    r = x - (np.asarray(b.masses) @ x) / float(b.mass)
    v = v0 + np.cross(W, r)
    F = rng.standard_normal((b.n, 3))
    u = rng.standard_normal((b.n, 3))  # an arbitrary multi-vector
    return x, v, F, u, W, v0, r


def _rigid_quantities(b, x, v, F, u):
    sv = b.split_velocity(x, u)
    sf = b.split_force(x, F)
    return {
        "Omega": b.angular_velocity(x, v),
        "split_u": sv,
        "split_F": sf,
        "K": b.kinetic_energy(u),
        "K_split": b.kinetic_energy_split(x, u),
        "P": b.momenta(x, v),
        "a": b.rigid_acceleration(x, v, F),
        "R": b.reaction_force(x, v, F),
        "N": b.second_fundamental_form(x, v),
        "F_perp": b.split_force(x, F).orthogonal,
        "split_v": b.split_velocity(x, v),
    }


def check_kinematics_and_splits(b, x, v, F, u, W, v0, r, o):
    m = np.asarray(b.masses)
    C = b.characteristic
    # angular velocity (Thm 4.22 / 4.27): exactly Ω for C ≥ 2, its part ⊥ axis for collinear bodies
    if C >= 2:
        np.testing.assert_allclose(o["Omega"], W, atol=1e-11)
    else:
        axis = r[np.argmax(np.linalg.norm(r, axis=1))]
        axis = axis / np.linalg.norm(axis)
        np.testing.assert_allclose(o["Omega"], W - axis * (axis @ W), atol=1e-11)
    np.testing.assert_allclose(o["split_v"].rotational, v - v0, atol=1e-11)
    np.testing.assert_allclose(o["split_v"].orthogonal, 0.0, atol=1e-11)
    # three-way split of an arbitrary multi-vector: sums back, mass-orthogonal parts
    s = o["split_u"]
    np.testing.assert_allclose(s.center + s.rotational + s.orthogonal, u, atol=1e-12)
    G = lambda a, c: np.sum(m[:, None] * a * c)  # noqa: E731
    for p, q_ in ((s.center, s.rotational), (s.center, s.orthogonal), (s.rotational, s.orthogonal)):
        assert abs(G(p, q_)) < 1e-11
    np.testing.assert_allclose(m @ s.orthogonal, 0.0, atol=1e-11)
    np.testing.assert_allclose(np.sum(m[:, None] * np.cross(r, s.orthogonal), 0), 0.0, atol=1e-11)
    np.testing.assert_allclose(sum(o["K_split"]), o["K"], rtol=1e-12)
    np.testing.assert_allclose(o["K_split"][1], 0.5 * G(s.rotational, s.rotational), rtol=1e-11)
    # momenta: m0 v0 and Σ m r × v
    np.testing.assert_allclose(o["P"][0], m @ v, atol=1e-12)
    np.testing.assert_allclose(o["P"][1], np.sum(m[:, None] * np.cross(r, v), 0), atol=1e-11)
    # force split (Thm 4.28): sums back; centre has the total force, rotational the torque,
    # the orthogonal part neither, and it annihilates every rigid (tangent) velocity
    f = o["split_F"]
    np.testing.assert_allclose(f.center + f.rotational + f.orthogonal, F, atol=1e-12)
    np.testing.assert_allclose(f.total_force, F.sum(0), atol=1e-12)
    np.testing.assert_allclose(f.total_torque, np.cross(r, F).sum(0), atol=1e-12)
    np.testing.assert_allclose(f.rotational.sum(0), 0.0, atol=1e-11)
    np.testing.assert_allclose(np.cross(r, f.rotational).sum(0), f.total_torque, atol=1e-11)
    np.testing.assert_allclose(f.orthogonal.sum(0), 0.0, atol=1e-11)
    np.testing.assert_allclose(np.cross(r, f.orthogonal).sum(0), 0.0, atol=1e-11)
    assert abs(np.sum(f.orthogonal * v)) < 1e-10
    # reaction: zero total force and torque, = m N − F_⊥ (eq. 4.29 with 4.27), Newton–Euler
    R = o["R"]
    np.testing.assert_allclose(R.sum(0), 0.0, atol=1e-10)
    np.testing.assert_allclose(np.cross(r, R).sum(0), 0.0, atol=1e-10)
    np.testing.assert_allclose(R, m[:, None] * o["N"] - o["F_perp"], atol=1e-10)
    np.testing.assert_allclose(m[:, None] * o["a"], F + R, atol=1e-10)
    assert abs(np.sum(R * v)) < 1e-10  # no work on the rigid motion


def pairwise_constraint(ref):
    n = ref.shape[0]
    pairs = [(i, j) for i in range(n) for j in range(i + 1, n)]
    L2 = jnp.stack([jnp.sum((ref[i] - ref[j]) ** 2) for i, j in pairs])

    def c(xf):
        x = xf.reshape(n, 3)
        return jnp.stack([jnp.sum((x[i] - x[j]) ** 2) for i, j in pairs]) - L2

    return c


def exp_coords_embedding(b):
    r = b.body_positions

    def phi(q):
        return (q[:3] + r @ gj.SO3.exp(q[3:]).T).ravel()

    return phi


def axis_embedding(s):
    def phi(q):
        u = jnp.stack([jnp.sin(q[3]) * jnp.cos(q[4]), jnp.sin(q[3]) * jnp.sin(q[4]), jnp.cos(q[3])])
        return (q[:3] + s[:, None] * u).ravel()

    return phi


def _three_routes(b, q, qd, F, s_axis):
    """Reaction and accelerations by RigidSystem (Newton–Euler), by an Embedding of P_rig and (for
    bodies where they are independent) by multipliers of the distance constraints."""
    M = jnp.repeat(b.masses, 3)
    phi = exp_coords_embedding(b) if b.characteristic >= 2 else axis_embedding(s_axis)
    E = Embedding(phi, M)
    n = b.n
    x = E.position(q).reshape(n, 3)
    v = E.velocity(q, qd).reshape(n, 3)
    out = {
        "R": b.reaction_force(x, v, F),
        "a": b.rigid_acceleration(x, v, F),
        "R_emb": E.reaction_force(q, qd, F.ravel()).reshape(n, 3),
        "a_emb": E.ambient_acceleration(q, qd, F.ravel()).reshape(n, 3),
        "II_emb": E.second_fundamental_form(q, qd).reshape(n, 3),
        "N": b.second_fundamental_form(x, v),
    }
    if (b.characteristic == 2 and n == 3) or (b.characteristic == 3 and n == 4):
        L = LevelSetConstraint(pairwise_constraint(b.reference_positions), M)
        out["R_mult"] = L.reaction_force(x.ravel(), v.ravel(), F.ravel()).reshape(n, 3)
    return out


def _axis_coordinates(name):
    m, ref = BODIES[name]
    r = ref - (m @ ref) / m.sum()
    d = r[np.argmax(np.linalg.norm(r, axis=1))]
    return r @ (d / np.linalg.norm(d))


@check_jit
def _all_rigid(b, state, routes_in):
    return _rigid_quantities(b, *state), _three_routes(b, *routes_in)


@pytest.mark.parametrize("name", ["collinear3", "triangle", "generic6"])
@given(seed=st.integers(0, 2**30))
def test_rigid_kinematics_splits_and_reactions(name, seed):
    """One compiled helper per body: Thm 4.22/4.27/4.28 splits and momenta against their
    definitions, and the reaction by three routes (Newton–Euler, Embedding, multipliers)."""
    b = body(name)
    x, v, F, u, W, v0, r = random_rigid_state(b, seed)
    o_kin, o = _all_rigid(b, (x, v, F, u), routes_inputs(b, name, seed))
    check_kinematics_and_splits(b, x, v, F, u, W, v0, r, jax.tree.map(np.asarray, o_kin))
    check_routes(jax.tree.map(np.asarray, o))


def routes_inputs(b, name, seed):
    rng = np.random.default_rng(seed + 1)
    C = b.characteristic
    if C >= 2:
        q = np.concatenate([rng.standard_normal(3), rng.uniform(-1.5, 1.5, 3)])
        qd = rng.standard_normal(6)
        s = np.zeros(b.n)
    else:
        q = np.concatenate([rng.standard_normal(3), [rng.uniform(0.3, 2.8), rng.uniform(-3, 3)]])
        qd = rng.standard_normal(5)
        s = _axis_coordinates(name)
    return q, qd, rng.standard_normal((b.n, 3)), s


def check_routes(o):
    np.testing.assert_allclose(o["R"], o["R_emb"], atol=1e-10)
    np.testing.assert_allclose(o["a"], o["a_emb"], atol=1e-10)
    # the second fundamental form (4.27) is the normal acceleration of the embedding
    np.testing.assert_allclose(o["N"], o["II_emb"], atol=1e-10)
    if "R_mult" in o:
        np.testing.assert_allclose(o["R"], o["R_mult"], atol=1e-10)


@check_jit
def _tetra_multipliers(b, x, v, F):
    L = LevelSetConstraint(pairwise_constraint(b.reference_positions), jnp.repeat(b.masses, 3))
    R_mult = L.reaction_force(x.ravel(), v.ravel(), F.ravel()).reshape(b.n, 3)
    return b.reaction_force(x, v, F), R_mult


def test_tetrahedron_reaction_matches_multipliers():
    """C = 3 with independent distance constraints (n = 4): Newton–Euler = multipliers."""
    b = body("tetra")
    for seed in range(5):
        x, v, F, *_ = random_rigid_state(b, seed)
        R, R_mult = _tetra_multipliers(b, x, v, F)
        np.testing.assert_allclose(R, R_mult, atol=1e-10)
        assert np.abs(np.asarray(R)).max() > 0.1


def test_distance_constraints_are_dependent_for_collinear_bodies():
    """Why RigidSystem does not use pairwise distances: 3 collinear particles, 3 constraints of
    rank 2 (the configuration space R³ × S² has dimension 5 = 9 − 4, not 9 − 3)."""
    m, ref = BODIES["collinear3"]
    L = LevelSetConstraint(pairwise_constraint(ref), np.repeat(m, 3))
    A = np.asarray(L.constraint_jacobian(ref.ravel()))
    assert np.linalg.matrix_rank(A) == 2
    with pytest.raises(ValueError, match="constraints must be independent"):
        L.multipliers(ref.ravel(), np.zeros(9))


def test_dumbbell_tension_closed_form():
    m1, m2, L = 1.3, 0.4, 0.9
    b = RigidSystem(np.array([m1, m2]), np.array([[0.0, 0, 0], [0, 0, L]]))
    u = np.array([0.6, 0.0, 0.8])  # the bar's direction
    x = np.stack([np.zeros(3), L * u]) + np.array([0.3, -0.2, 1.0])
    w = np.array([0.8, 1.5, -0.6])  # Ω ⊥ u
    v_rel = np.cross(w, L * u)
    com = (m1 * x[0] + m2 * x[1]) / (m1 + m2)
    v = np.array([0.2, 0.1, -0.3]) + np.cross(w, x - com)
    R = np.asarray(b.reaction_force(x, v))
    T = m1 * m2 / (m1 + m2) * (v_rel @ v_rel) / L
    np.testing.assert_allclose(R[0], T * u, atol=1e-12)  # particle 1 is pulled towards particle 2
    np.testing.assert_allclose(R[1], -T * u, atol=1e-12)
    # a spin about the bar does nothing (isotropy) and Ω is returned ⊥ to the axis
    v_spin = v + np.cross(2.0 * u, x - com)
    np.testing.assert_allclose(b.angular_velocity(x, v_spin), w, atol=1e-12)


def test_particle_system_centre_of_mass_splitting():
    """Thm 3.1/3.3: the splittings are orthogonal for the weighted metric, the covector split pairs
    to zero across, and Newton's law splits into the centre-of-mass and relative equations."""
    rng = np.random.default_rng(2)
    m = np.array([1.0, 2.5, 0.3, 1.7])
    P = ParticleSystem(m)
    x, v, F = (rng.standard_normal((4, 3)) for _ in range(3))
    p0, r = P.split_positions(x)
    # sums of 4 terms m_i x_i with |x| ≲ 3: rounding ≲ 4 eps Σ|m_i x_i| ≈ 1e-14; bound 1e-13
    np.testing.assert_allclose(p0, m @ x / m.sum(), atol=1e-13)
    np.testing.assert_allclose(P.center_of_mass_at(x), p0, atol=1e-13)
    np.testing.assert_allclose(m @ np.asarray(r), 0.0, atol=1e-13)
    v0, vr = P.split_velocities(v)
    F0, Fr = P.split_forces(F)
    vdia = np.broadcast_to(np.asarray(v0), (4, 3))
    assert abs(float(P.weighted_metric(vdia, vr))) < 1e-13
    np.testing.assert_allclose(
        P.kinetic_energy(v), P.kinetic_energy(vdia) + P.kinetic_energy(vr), rtol=1e-13
    )
    Fdia = (m / m.sum())[:, None] * np.asarray(F0)
    assert abs(np.sum(Fdia * np.asarray(vr))) < 1e-13 and abs(np.sum(np.asarray(Fr) * vdia)) < 1e-13
    a = np.asarray(P.acceleration(F))
    a0, ar = P.split_velocities(a)
    np.testing.assert_allclose(m.sum() * np.asarray(a0), F0, atol=1e-13)  # m_0 a_0 = F_0
    np.testing.assert_allclose(m[:, None] * np.asarray(ar), Fr, atol=1e-13)  # relative equation


@check_jit
def _reaction_of(masses, ref, x, v, F):
    return RigidSystem(masses, ref, characteristic=3).reaction_force(x, v, F)


def test_unit_covariance_and_gradient_wrt_masses():
    b = body("tetra")
    x, v, F, *_ = random_rigid_state(b, 3)
    m, ref = BODIES["tetra"]
    R = _reaction_of(m, ref, x, v, F)
    for L, T, M in ((2.0, 1.0, 1.0), (1.0, 0.3, 1.0), (1.0, 1.0, 4.0), (0.01, 50.0, 1e4)):
        Rs = _reaction_of(m * M, ref * L, x * L, v * L / T, F * M * L / T**2)
        np.testing.assert_allclose(Rs, R * M * L / T**2, rtol=1e-10, atol=1e-12 * M * L / T**2)
    bs = RigidSystem(m * 4.0, ref * 2.0)
    np.testing.assert_allclose(bs.inertia_tensor, 16.0 * np.asarray(b.inertia_tensor), rtol=1e-13)
    # d R / d masses: forward mode against central differences
    f = lambda mm: _reaction_of(mm, ref, x, v, F)  # noqa: E731
    Jf = jax.jacfwd(f)(jnp.asarray(m))
    h = 1e-6
    Jfd = np.stack([(f(m + h * e) - f(m - h * e)) / (2 * h) for e in np.eye(4)], -1)
    np.testing.assert_allclose(Jf, Jfd, rtol=1e-6, atol=1e-7)


def test_float32():
    m, ref = BODIES["tetra"]
    b32 = RigidSystem(m.astype(np.float32), ref.astype(np.float32))
    x, v, F, *_ = random_rigid_state(body("tetra"), 4)
    R32 = _reaction_of(
        b32.masses, b32.reference_positions, *(a.astype(np.float32) for a in (x, v, F))
    )
    assert R32.dtype == jnp.float32
    # against the float64 computation: the reaction is a solve with the inertia tensor
    # (condition number κ = 2.9) of O(|R|) data, so its float32 error is a few eps32·κ·|R|
    # (inputs rounded to float32 included); asserted 8·eps32·κ·max|R| ≈ 1.3e-5, 8× the measured
    # 1.6e-6 (3.4e-7 relative)
    R64 = np.asarray(_reaction_of(m, ref, x, v, F))
    kappa = np.linalg.cond(np.asarray(body("tetra").inertia_tensor))
    tol = 8 * np.finfo(np.float32).eps * kappa * np.abs(R64).max()
    np.testing.assert_allclose(np.asarray(R32, np.float64), R64, rtol=0, atol=tol)


def test_to_rigid_body_rejects_collinear_bodies():
    with pytest.raises(ValueError, match="collinear body"):
        body("dumbbell").to_rigid_body()


@check_jit
def _particle_rhs(b, y):
    x, v = y[: 3 * b.n].reshape(b.n, 3), y[3 * b.n :].reshape(b.n, 3)
    return jnp.concatenate([v.ravel(), b.rigid_acceleration(x, v).ravel()])


def test_to_rigid_body_simulates_the_same_motion():
    """A free body of particles: its particles integrated with the Newton–Euler accelerations of
    RigidSystem (SciPy DOP853) and the RigidBody handed to the LGVI (dt = 2.5e-3) agree, with
    x_i(t) = c(t) + R(t) r_i."""
    from scipy.integrate import solve_ivp

    b = body("tetra")
    rb = b.to_rigid_body()
    assert isinstance(rb, gj.RigidBody)
    np.testing.assert_allclose(rb.inertia, b.inertia_tensor, atol=1e-15)
    W_body = np.array([0.7, -1.3, 2.1])  # R(0) = 1: body and spatial frames coincide
    v_c = np.array([0.3, -0.1, 0.2])
    r = np.asarray(b.body_positions)
    x0 = np.asarray(b.reference_positions)
    v0 = v_c + np.cross(W_body, r)
    T, steps = 1.0, 400
    ref = solve_ivp(
        lambda t, y: np.asarray(_particle_rhs(b, y)), (0, T), np.concatenate([x0.ravel(), v0.ravel()]),
        method="DOP853", rtol=1e-12, atol=1e-12,
    )  # fmt: skip
    x_ref = ref.y[: 3 * b.n, -1].reshape(b.n, 3)
    s0 = gj.RigidBodyState(jnp.eye(3), jnp.asarray(np.asarray(b.inertia_tensor) @ W_body))
    sol = gj.simulate(rb, gj.LGVI(), s0, T / steps, steps, save_every=steps)
    x_lgvi = np.asarray(b.configuration(sol.final_state.R, b.center_of_mass + v_c * T))
    assert np.abs(x_lgvi - x_ref).max() < 1e-4  # the LGVI's O(dt²) error (measured 2.8e-5)
    assert np.abs(x_ref - x0 - v_c * T).max() > 0.5  # it rotated


def test_errors():
    ref = np.eye(3)
    with pytest.raises(ValueError, match="'masses' must be strictly positive"):
        RigidSystem(np.array([1.0, -1.0, 2.0]), ref)
    with pytest.raises(ValueError, match="'masses' must be finite"):
        RigidSystem(np.array([1.0, np.nan, 2.0]), ref)
    with pytest.raises(ValueError, match="'reference_positions' must have shape \\(2, 3\\)"):
        RigidSystem(np.ones(2), ref)
    with pytest.raises(ValueError, match="n ≥ 2"):
        RigidSystem(np.ones(1), ref[:1])
    with pytest.raises(ValueError, match="distinct points"):
        RigidSystem(np.ones(3), np.array([[0, 0, 0], [1.0, 0, 0], [1.0, 0, 0]]))
    with pytest.raises(ValueError, match="'characteristic' must be 1, 2 or 3"):
        RigidSystem(np.ones(3), ref, characteristic=4)
    with pytest.raises(ValueError, match="'characteristic' must be given"):
        jax.jit(lambda p: RigidSystem(np.ones(3), p).inertia_tensor)(ref)
    b = RigidSystem(np.ones(3), ref)
    with pytest.raises(ValueError, match="'v' must have shape \\(3, 3\\)"):
        b.reaction_force(ref, np.ones((4, 3)))
    with pytest.raises(ValueError, match="characteristic 1"):
        b.configuration_from_axis(np.zeros(3), np.ones(3))
    with pytest.raises(ValueError, match="'masses' must have shape \\(n,\\)"):
        ParticleSystem(np.ones((2, 2)))
