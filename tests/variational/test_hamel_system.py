"""HamelSystem: structure coefficients / torsion of frames and the law of dynamics in a mobile
frame (Romano, Barretta & Diaco, Prop. 5.3 with the corrected torsion sign), each against an
independent reference: closed forms, Lie brackets of the frame vectors by forward-mode
derivatives, the coordinate Euler–Lagrange equations, the Euler–Poisson equations and
VerticalRollingDisk."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import geomjax as gj

from .hamel_helpers import (
    disk_frame_vectors,
    euler_frame,
    euler_poisson_rhs,
    gamma,
    heavy_top,
    rolling_disk,
)
from .helpers import double_pendulum

EPS = np.finfo(np.float64).eps


def brackets(E, q):
    """``C[d, a, b]`` from the Lie brackets of the frame vectors themselves,
    ``[e_a, e_b] = De_b·e_a − De_a·e_b``, expressed in the frame (``A = E⁻¹``): the vector-field
    definition, not the Maurer–Cartan form the library uses."""
    Eq = E(q)
    dE = jax.jacfwd(E)(q)  # [i, a, j] = ∂_j E_ia
    De = jnp.einsum("iaj->aij", dE)  # De[a] = ∂e_a/∂q (n, n)
    n = Eq.shape[0]
    br = jnp.stack(
        [jnp.stack([De[b] @ Eq[:, a] - De[a] @ Eq[:, b] for b in range(n)], -1) for a in range(n)],
        -2,
    )  # [i, a, b]
    return jnp.einsum("di,iab->dab", jnp.linalg.inv(Eq), br)


def levi_civita():
    eps = np.zeros((3, 3, 3))
    for a, b, c in [(0, 1, 2), (1, 2, 0), (2, 0, 1)]:
        eps[a, b, c], eps[b, a, c] = 1.0, -1.0
    return eps


def test_coordinate_frame_is_torsion_free_and_gives_lagrange():
    """A = I: zero structure coefficients (exactly), and Hamel's equations are the
    Euler–Lagrange equations of LagrangianSystem (the same numbers to round-off)."""
    lag = double_pendulum()
    ham = gj.HamelSystem(lag.lagrangian, frame=lambda q: jnp.eye(2, dtype=q.dtype), dim=2)
    q, v = jnp.array([0.7, -0.3]), jnp.array([0.4, 1.1])
    assert np.all(np.asarray(ham.torsion(q)) == 0.0)
    vdot, lam = ham.acceleration(0.0, q, v)
    assert lam.shape == (0,)
    np.testing.assert_allclose(vdot, lag.acceleration(0.0, q, v), rtol=1e-13, atol=1e-13)


def test_holonomic_frame_has_zero_torsion(rng):
    """Quasi-velocities that are the velocities of other coordinates, ``v = Dφ(q) q̇`` (a
    nonlinear diffeomorphism of R³ and the polar → Cartesian map): the torsion vanishes to
    round-off (second derivatives of φ commute), while the structure coefficients of the same
    frame computed from Lie brackets agree."""

    def phi(q):
        x, y, z = q
        return jnp.stack([x + 0.3 * jnp.sin(y * z), y + 0.2 * x**2, z + 0.1 * jnp.exp(x) * y])

    frames = [
        (3, jax.jacfwd(phi)),
        (2, jax.jacfwd(lambda q: q[0] * jnp.stack([jnp.cos(q[1]), jnp.sin(q[1])]))),
    ]
    for n, A in frames:
        sys = gj.HamelSystem(lambda q, v: 0.5 * v @ v, frame=A, dim=n)
        for _ in range(5):
            q = jnp.asarray(rng.uniform(0.5, 1.5, n))
            T = np.asarray(sys.torsion(q))
            # entries ~ |∂A| |E|² ~ 1: 100 eps absorbs the round-off of the two contractions
            assert np.max(np.abs(T)) < 100 * EPS, T
            C = brackets(lambda x, A=A: jnp.linalg.inv(A(x)), q)
            assert np.max(np.abs(C)) < 1e3 * EPS


def test_body_frame_gives_so3_structure_constants(rng):
    """Euler angles with the body angular velocity: the frame matrix is ``vee(Rᵀ ∂R/∂q_i)``
    (checked against geomjax's SO(3) exponential), and ``[e_a, e_b] = ε_abd e_d``: the structure
    constants of so(3); torsion ``−ε``.  Both the Maurer–Cartan form and the Lie brackets of the
    frame vectors give it, at random angles away from gimbal lock."""
    SO3 = gj.SO3
    ez, ex = jnp.array([0.0, 0.0, 1.0]), jnp.array([1.0, 0.0, 0.0])

    def R(q):
        return SO3.exp(q[0] * ez) @ SO3.exp(q[1] * ex) @ SO3.exp(q[2] * ez)

    sys = gj.HamelSystem(metric=jnp.eye(3), frame=euler_frame)
    eps = levi_civita()
    for _ in range(5):
        q = jnp.asarray(rng.uniform([-3, 0.3, -3], [3, 2.8, 3]))
        dR = jax.jacfwd(R)(q)  # (3, 3, 3): [:, :, i] = ∂R/∂q_i
        A_ref = jnp.stack([SO3.vee(R(q).T @ dR[:, :, i]) for i in range(3)], -1)
        np.testing.assert_allclose(euler_frame(q), A_ref, atol=1e-14)
        np.testing.assert_allclose(sys.structure_coefficients(q), eps, atol=1e-13)
        np.testing.assert_allclose(sys.torsion(q), -eps, atol=1e-13)
        np.testing.assert_allclose(
            brackets(lambda x: jnp.linalg.inv(euler_frame(x)), q), eps, atol=1e-12
        )


def test_polar_engineering_frame_closed_form():
    """Unit-length polar frame ``v = (ṙ, r θ̇)``: ``[e_r, e_θ/r] = −(1/r) e_θ/r``, so
    ``c^θ_{rθ} = −1/r`` and every other coefficient is zero; given as ``frame`` or as
    ``frame_vectors``, the same."""
    A = lambda q: jnp.diag(jnp.stack([jnp.ones_like(q[0]), q[0]]))  # noqa: E731
    E = lambda q: jnp.diag(jnp.stack([jnp.ones_like(q[0]), 1.0 / q[0]]))  # noqa: E731
    for kw in (dict(frame=A), dict(frame_vectors=E)):
        sys = gj.HamelSystem(metric=jnp.eye(2), **kw)
        for r in (0.5, 2.0, 7.0):
            C = np.asarray(sys.structure_coefficients(jnp.array([r, 0.3])))
            ref = np.zeros((2, 2, 2))
            ref[1, 0, 1], ref[1, 1, 0] = -1.0 / r, 1.0 / r
            np.testing.assert_allclose(C, ref, atol=1e-15)


def test_law_in_body_frame_is_euler_poisson_and_lagrange():
    """The heavy top in Euler angles: Hamel's acceleration equals (i) the Euler–Poisson
    right-hand side ``I⁻¹(IΩ × Ω + Γ × mgχ)`` written by hand and (ii) the coordinate
    Euler–Lagrange acceleration of ``L(q, q̇) = ℓ(q, A q̇)`` carried to the frame,
    ``Ω̇ = A q̈ + (DA·q̇) q̇``.  With the torsion sign as printed in Prop. 5.3 the bracket term
    would flip to ``Ω × IΩ`` and (i) fails by ~|IΩ × Ω|."""
    top = heavy_top()
    lag = top.as_lagrangian_system()
    rng = np.random.default_rng(1)
    for _ in range(4):
        q = jnp.asarray(rng.uniform([-3, 0.4, -3], [3, 2.7, 3]))
        W = jnp.asarray(rng.normal(size=3))
        vdot, _ = top.acceleration(0.0, q, W)
        y = np.concatenate([np.asarray(W), np.asarray(gamma(q))])
        np.testing.assert_allclose(vdot, euler_poisson_rhs()(0.0, y)[:3], rtol=1e-12, atol=1e-12)
        qdot = jnp.linalg.solve(euler_frame(q), W)
        qdd = lag.acceleration(0.0, q, qdot)
        _, dA = jax.jvp(euler_frame, (q,), (qdot,))
        np.testing.assert_allclose(vdot, euler_frame(q) @ qdd + dA @ qdot, rtol=1e-11, atol=1e-11)
    # the bracket term alone is p × Ω
    p = top.momentum(q, W)
    np.testing.assert_allclose(top.bracket_term(q, W, p), jnp.cross(p, W), atol=1e-14)


def test_constrained_frame_matches_vertical_rolling_disk():
    """The rolling disk in a frame adapted to the constraints (slip velocities constrained):
    at random states the acceleration and the multipliers (the reaction's frame components
    ``⟨R, ∂_x⟩``, ``⟨R, ∂_y⟩`` = VerticalRollingDisk's λ, whose constraint rows are
    ``ẋ − R cos φ θ̇`` and ``ẏ − R sin φ θ̇``) agree with VerticalRollingDisk's saddle solve."""
    from .hamel_helpers import DISK

    ham = rolling_disk()
    vd = gj.VerticalRollingDisk(**DISK)
    rng = np.random.default_rng(2)
    for _ in range(4):
        x, y, th, ph, thd, phd = rng.normal(size=6)
        s = vd.state(x=x, y=y, theta=th, phi=ph, theta_dot=thd, phi_dot=phd)
        q = jnp.array([x, y, th, ph])
        st = ham.make_state(q, v=jnp.array([thd, phd, 0.0, 0.0]))
        qd_ref, lam_ref = vd.acceleration(0.0, s.g, s.x, s.v)
        np.testing.assert_allclose(st.lam, lam_ref, rtol=1e-12, atol=1e-12)
        vdot, lam = ham.acceleration(0.0, st.q, st.v)
        np.testing.assert_array_equal(lam, st.lam)
        np.testing.assert_array_equal(vdot[2:], 0.0)
        # the coordinate acceleration from the frame one: q̈ = E v̇ + (DE·q̇) v
        qdot = disk_frame_vectors(q) @ st.v
        _, dE = jax.jvp(disk_frame_vectors, (q,), (qdot,))
        np.testing.assert_allclose(
            disk_frame_vectors(q) @ vdot + dE @ st.v, qd_ref, rtol=1e-12, atol=1e-12
        )
        # a state given by its coordinate velocity
        st2 = ham.make_state(q, qdot=s.v)
        np.testing.assert_allclose(st2.v, st.v, atol=1e-14)


# --- bad input --------------------------------------------------------------------------------
def _frame(q):
    return jnp.eye(q.shape[0], dtype=q.dtype)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (
            dict(constrained=(4,)),
            r"'constrained' names quasi-velocity index 4, which does not exist",
        ),
        (dict(constrained=(-1,)), r"'constrained' names quasi-velocity index -1"),
        (dict(constrained=(1, 1)), r"'constrained' repeats"),
        (dict(constrained=(0, 1, 2, 3)), r"'constrained' fixes all 4"),
        (dict(constrained=("a",)), r"'constrained' must be a sequence of quasi-velocity indices"),
        (dict(dim=None), r"'dim'"),
        (dict(frame_vectors=_frame), r"exactly one of argument 'frame'"),
        (dict(frame=lambda q: jnp.eye(3)), r"'frame' must return an \(4, 4\) matrix"),
        (dict(force=lambda t, q, v, u: v[:2]), r"'force' must return shape \(4,\)"),
    ],
)
def test_bad_construction(kwargs, match):
    args = dict(frame=_frame, dim=4) | kwargs
    with pytest.raises(ValueError, match=match):
        gj.HamelSystem(lambda q, v: 0.5 * v @ v, **args)


def test_bad_states():
    ham = rolling_disk()
    q = jnp.array([0.0, 0.0, 0.0, 0.3])
    with pytest.raises(ValueError, match=r"argument 'v' violates the constraints v_c = 0"):
        ham.make_state(q, v=jnp.array([1.0, 0.0, 0.1, 0.0]))
    with pytest.raises(ValueError, match=r"argument 'qdot' violates"):
        ham.make_state(q, qdot=jnp.array([1.0, 0.0, 0.0, 0.0]))  # slides along x
    with pytest.raises(ValueError, match=r"argument 'q' must have shape \(4,\)"):
        ham.make_state(q[:3], v=jnp.zeros(4))
    top = heavy_top()
    with pytest.raises(ValueError, match=r"argument 'frame' is singular at 'q'"):
        top.make_state(jnp.array([0.1, 0.0, 0.2]), v=jnp.ones(3))  # θ = 0: gimbal lock
    with pytest.raises(ValueError, match=r"as_lagrangian_system"):
        ham.as_lagrangian_system()
