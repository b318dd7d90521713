"""Worked examples of base-controlled systems (Cabrera, *Base-controlled mechanical systems and geometric phases*, §5 and the works it builds on).

Each constructor returns a :class:`~geomjax.reconstruction.BaseControlledSystem`; its physical
parameters are array leaves (``jax.tree_util.Partial`` arguments), so ``jax.grad`` can
differentiate through them.  Pair it with any base curve in a
:class:`~geomjax.reconstruction.Reconstruction`.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax.tree_util import Partial

from ..lie import SO3, PowerGroup, Rn, Tn
from .core import BaseControlledSystem

__all__ = [
    "ball_in_ball",
    "ball_on_turntable",
    "deforming_body",
    "free_rigid_body",
    "gyrostat",
    "linked_bodies",
    "magnetic_deforming_body",
    "vertical_disk",
]


def __dir__():
    """The worked systems only (not the modules and names this module imports)."""
    return sorted(__all__)


def _f(x):
    return jnp.asarray(x, jnp.result_type(float))


def _vee(A):
    return jnp.stack([A[2, 1], A[0, 2], A[1, 0]])


def _spatial_omega(R, Rdot):
    """``ω`` with ``Ṙ = ω̂ R`` (antisymmetric part: exact on the tangent space)."""
    W = Rdot @ R.T
    return _vee(0.5 * (W - W.T))


def _body_omega(R, Rdot):
    """``Ω`` with ``Ṙ = R Ω̂``."""
    W = R.T @ Rdot
    return _vee(0.5 * (W - W.T))


# --- §5.1 vertical rolling disk ------------------------------------------------------------
def _disk_kinetic(m, I, J, R, q, qd):
    return 0.5 * m * (qd[0] ** 2 + qd[1] ** 2) + 0.5 * I * qd[2] ** 2 + 0.5 * J * qd[3] ** 2


def _disk_constraint(m, I, J, R, q, qd):
    phi = q[3]
    return jnp.stack([qd[0] - R * qd[2] * jnp.cos(phi), qd[1] - R * qd[2] * jnp.sin(phi)])


def _disk_action(g, q):
    return q + jnp.concatenate([g, jnp.zeros((1,), g.dtype)])


def _disk_section(b):
    z = jnp.zeros((3,), b.dtype)
    return jnp.concatenate([z, b])


def vertical_disk(mass=1.0, inertia=0.5, heading_inertia=0.25, radius=1.0):
    """Vertical rolling disk with prescribed heading (Cabrera §5.1; §3.3 abelian case).

    ``Q = R² × S¹ × S¹ ∋ q = (x, y, θ, φ)`` (contact point, rolling angle, heading);
    ``G = R³ ∋ (x, y, θ)`` acting by translation; base ``b = (φ,)``.
    ``L = m/2 (ẋ² + ẏ²) + I/2 θ̇² + J/2 φ̇²``; rolling: ``ẋ = R θ̇ cos φ``, ``ẏ = R θ̇ sin φ``.
    ``g^q = span{(R cos φ, R sin φ, 1)}``; ``(mR² + I) θ̇`` is conserved and (corrected §5.1)
    ``g(t) = (R θ̇ ∫cos φ, R θ̇ ∫sin φ, θ̇ (t − t₁))``.
    """
    p = tuple(_f(v) for v in (mass, inertia, heading_inertia, radius))
    return BaseControlledSystem(
        group=Rn(3),
        kinetic=Partial(_disk_kinetic, *p),
        action=_disk_action,
        section=_disk_section,
        base_dim=1,
        constraint=Partial(_disk_constraint, *p),
        name="vertical_disk",
    )


# --- §5.2 ball on a rotating turntable -----------------------------------------------------
def _ball_kinetic(m, k2, a, Om, q, qd):
    w = _spatial_omega(q[1], qd[1])
    return 0.5 * m * jnp.sum(qd[0] ** 2) + 0.5 * m * k2 * jnp.sum(w**2)


def _ball_constraint(m, k2, a, Om, q, qd):
    (x, y), w = q[0], _spatial_omega(q[1], qd[1])
    return jnp.stack([qd[0][0] - a * w[1] + Om * y, qd[0][1] + a * w[0] - Om * x])


def _right_action(g, q):
    return (q[0], q[1] @ g.T)


def _ball_section(b):
    return (b, jnp.eye(3, dtype=b.dtype))


def ball_on_turntable(rate=1.0, radius=1.0, mass=1.0, gyration2=None):
    """Homogeneous ball rolling without sliding on a turntable spinning at ``rate`` Ω (Cabrera
    §5.2; affine constraints, §3.2), its contact point moved along a prescribed path.

    ``Q = R² × SO(3) ∋ ((x, y), h)`` with ``h`` the ball's attitude; ``G = SO(3)`` acts by
    ``g·(x, y, h) = (x, y, h g⁻¹)`` (so the attitude along ``c = g·d₀`` with the trivial gauge
    is ``h = g⁻¹``); base ``b = (x, y)``, the contact point.  ``L = m/2 |ẋ|² + m k²/2 |ω|²``
    (isotropic, ``k² = gyration2``, default ``2a²/5``); constraints, ``ω`` spatial:
    ``ẋ − a ω_y = −Ω y``, ``ẏ + a ω_x = Ω x``.  ``g^q = span{Ad_{g⁻¹} e_z}``: the vertical spin
    ``ω_z`` is conserved.
    """
    a = _f(radius)
    k2 = 0.4 * a**2 if gyration2 is None else _f(gyration2)
    p = (_f(mass), k2, a, _f(rate))
    return BaseControlledSystem(
        group=SO3,
        kinetic=Partial(_ball_kinetic, *p),
        action=_right_action,
        section=_ball_section,
        base_dim=2,
        constraint=Partial(_ball_constraint, *p),
        name="ball_on_turntable",
    )


# --- free rigid body (Montgomery's phase) ---------------------------------------------------
def _rb_kinetic(Ib, R, Rd):
    w = _body_omega(R, Rd)
    return 0.5 * w @ Ib @ w


def _left_action(g, R):
    return g @ R


def _rb_section(b):
    return jnp.eye(3, dtype=b.dtype) + 0.0 * jnp.sum(b)


def free_rigid_body(inertia=(1.0, 2.0, 3.0)):
    """Free rigid body as a base-controlled system with a point base (``Q = G = SO(3)``,
    ``base_dim = 0``): the reconstruction of ``R(t)`` from the conserved spatial momentum, whose
    phase is Montgomery's ``Δθ = 2ET/|μ| − Ω`` (see :func:`so3_phases`).  ``inertia``: principal
    moments ``(3,)`` or a ``(3, 3)`` SPD matrix; the body frame is ``R``'s columns."""
    Ib = _f(inertia)
    Ib = jnp.diag(Ib) if Ib.ndim == 1 else Ib
    return BaseControlledSystem(
        group=SO3,
        kinetic=Partial(_rb_kinetic, Ib),
        action=_left_action,
        section=_rb_section,
        base_dim=0,
        name="free_rigid_body",
    )


# --- gyrostat: rigid body with prescribed rotors --------------------------------------------
def _gyro_kinetic(Ib, axes, j, q, qd):
    w = _body_omega(q[0], qd[0])
    s = axes @ w + qd[1]
    return 0.5 * w @ Ib @ w + 0.5 * jnp.sum(j * s**2)


def _gyro_action(g, q):
    return (g @ q[0], q[1])


def _gyro_section(b):
    return (jnp.eye(3, dtype=b.dtype), b)


def gyrostat(inertia=(1.0, 2.0, 3.0), rotor_axes=((1.0, 0.0, 0.0),), rotor_inertias=(0.1,)):
    """Rigid body carrying symmetric rotors whose angles ``α(t)`` are prescribed (the base).

    ``Q = SO(3) × T^r ∋ (R, α)``, ``G = SO(3)`` acting on ``R``; ``Ω = (RᵀṘ)^∨`` and
    ``K = ½ Ωᵀ I Ω + ½ Σ_i j_i (a_i·Ω + α̇_i)²`` (``inertia``: the body with the rotors' transverse
    inertia, ``(3,)`` or ``(3, 3)``; ``rotor_axes`` ``(r, 3)`` unit body axes; ``rotor_inertias``
    ``(r,)`` axial inertias).  Locked inertia ``I + Σ j_i a_i a_iᵀ``; ``J₀ = Σ j_i α̇_i a_i`` (the
    rotors' gyroscopic momentum); the spatial angular momentum is conserved.
    """
    Ib = _f(inertia)
    Ib = jnp.diag(Ib) if Ib.ndim == 1 else Ib
    axes = _f(rotor_axes).reshape(-1, 3)
    j = _f(rotor_inertias).reshape(-1)
    if j.shape[0] != axes.shape[0]:
        raise ValueError(
            "gyrostat: arguments 'rotor_axes' (r, 3) and 'rotor_inertias' (r,) disagree on r"
        )
    return BaseControlledSystem(
        group=SO3,
        kinetic=Partial(_gyro_kinetic, Ib, axes, j),
        action=_gyro_action,
        section=_gyro_section,
        base_dim=axes.shape[0],
        name="gyrostat",
    )


# --- planar linked bodies (falling-cat type, abelian) ---------------------------------------
def _links_centers(lengths, th):
    e = jnp.stack([jnp.cos(th), jnp.sin(th)], -1)
    joints = jnp.concatenate([jnp.zeros((1, 2), th.dtype), jnp.cumsum(lengths[:, None] * e, 0)])
    return joints[:-1] + 0.5 * lengths[:, None] * e


def _links_kinetic(masses, lengths, q, qd):
    def angles(q):
        return q[0] + jnp.concatenate([jnp.zeros((1,), q.dtype), jnp.cumsum(q[1:])])

    th, thd = jax.jvp(angles, (q,), (qd,))
    _, v = jax.jvp(lambda s: _links_centers(lengths, s), (th,), (thd,))
    vcom = jnp.sum(masses[:, None] * v, 0) / jnp.sum(masses)
    rot = masses * lengths**2 / 12.0
    return 0.5 * jnp.sum(masses[:, None] * (v - vcom) ** 2) + 0.5 * jnp.sum(rot * thd**2)


def _links_action(g, q):
    return q.at[0].add(g[0])


def _links_section(b):
    return jnp.concatenate([jnp.zeros((1,), b.dtype), b])


def linked_bodies(masses=(1.0, 1.0, 1.0), lengths=(1.0, 1.0, 1.0)):
    """Planar chain of uniform rods joined by pins, floating freely with zero linear momentum
    (centre of mass at rest): the falling-cat / astronaut reorientation problem in the plane.

    ``q = (θ, φ_1, …, φ_{n−1})``: absolute angle of the first rod and the joint angles (the
    base, ``base_dim = n − 1``); ``G = T¹`` rotates the chain.  With zero angular momentum the
    orientation is the horizontal lift of the mechanical connection and a closed shape loop
    gives ``θ(T) − θ(0) = −∬ F dφ₁dφ₂`` exactly (abelian Stokes).
    """
    m, l = _f(masses).reshape(-1), _f(lengths).reshape(-1)
    if m.shape != l.shape or m.shape[0] < 2:
        raise ValueError("linked_bodies: 'masses' and 'lengths' must have the same length >= 2")
    return BaseControlledSystem(
        group=Tn(1),
        kinetic=Partial(_links_kinetic, m, l),
        action=_links_action,
        section=_links_section,
        base_dim=m.shape[0] - 1,
        name="linked_bodies",
    )


# --- 3D deforming body (point masses moved in the body frame) ------------------------------
def _def_kinetic(Ib, masses, q, qd):
    R, r = q
    Rd, rd = qd
    w = _body_omega(R, Rd)
    r, rd = r.reshape(-1, 3), rd.reshape(-1, 3)
    v = jnp.cross(w, r) + rd
    return 0.5 * w @ Ib @ w + 0.5 * jnp.sum(masses[:, None] * v**2)


def _def_shape(base_map, b):
    return (jnp.eye(3, dtype=b.dtype), base_map(b).reshape(-1))


def deforming_body(inertia=(1.0, 1.0, 1.0), masses=(1.0, 1.0), shape=None, base_dim=None):
    """A rigid core carrying point masses that move in the core's frame (a self-deforming body,
    Shapere–Wilczek / Montgomery; the §4.2 conserved-momentum case on SO(3)).

    ``Q = SO(3) × R^{3p} ∋ (R, r)``, ``G = SO(3)`` acting on ``R``;
    ``K = ½ Ωᵀ I Ω + Σ ½ m_i |Ω × r_i + ṙ_i|²`` (body frame).  ``shape``: a function
    ``b -> (p, 3)`` giving the mass positions from ``base_dim`` shape coordinates (default: two
    masses at ``(1, b₀, 0)`` and ``(0, 1, b₁)``, ``base_dim = 2``).  ``shape`` may be a
    ``Partial`` with parameter leaves.  With zero angular momentum the motion is the horizontal lift
    of the mechanical connection (geometric reorientation, Prop. 4.12).
    """
    m = _f(masses).reshape(-1)
    Ib = _f(inertia)
    Ib = jnp.diag(Ib) if Ib.ndim == 1 else Ib
    if shape is None:
        if m.shape[0] != 2:
            raise ValueError("deforming_body: the default shape needs exactly two masses")
        shape, base_dim = Partial(_default_shape), 2
    if base_dim is None:
        raise ValueError("deforming_body: give 'base_dim' with a custom 'shape'")
    return BaseControlledSystem(
        group=SO3,
        kinetic=Partial(_def_kinetic, Ib, m),
        action=_gyro_action,
        section=Partial(_def_shape, shape),
        base_dim=int(base_dim),
        name="deforming_body",
    )


def _default_shape(b):
    z = jnp.zeros((), b.dtype)
    o = jnp.ones((), b.dtype)
    return jnp.stack([jnp.stack([o, b[0], z]), jnp.stack([z, o, b[1]])])


def _larmor_torque(omega_l, t, mu):
    return jnp.cross(omega_l, mu)


def magnetic_deforming_body(
    inertia=(1.0, 1.0, 1.0),
    masses=(1.0, 1.0),
    shape=None,
    base_dim=None,
    gyromagnetic=1.0,
    field=(0.0, 0.0, 1.0),
):
    """Deforming body with magnetic moment ``M = γ J`` in a constant field ``B`` (Cabrera
    §5.4): the torque ``M × B`` makes the spatial angular momentum precess,
    ``dJ/dt = ω_l × J`` with the Larmor vector ``ω_l = −γB``.  The paper writes this as the
    affine constraint ``𝒜(ċ) = I⁻¹ h_M(t) L₀`` (61); here it is the equivalent spatial torque
    ``ω_l × μ`` of :attr:`BaseControlledSystem.spatial_torque`, so ``μ(t) = exp(t ω̂_l) μ(0)``
    (tested).  Other arguments as :func:`deforming_body`."""
    base = deforming_body(inertia, masses, shape, base_dim)
    wl = -_f(gyromagnetic) * _f(field)
    return BaseControlledSystem(
        group=base.group,
        kinetic=base.kinetic,
        action=base.action,
        section=base.section,
        base_dim=base.base_dim,
        spatial_torque=Partial(_larmor_torque, wl),
        name="magnetic_deforming_body",
    )


# --- §5.3 small ball rolling inside a free big ball ------------------------------------------
def _tangent_frame(n):
    """Orthonormal tangent frame ``(2, 3)`` of the unit sphere at ``n``, smooth off ``n = −e_z``."""
    x, y, z = n[0], n[1], n[2]
    c = 1.0 / (1.0 + z)
    t1 = jnp.stack([1.0 - x * x * c, -x * y * c, -x])
    t2 = jnp.stack([-x * y * c, 1.0 - y * y * c, -y])
    return jnp.stack([t1, t2])


def _two_chart_frame(n):
    """Orthonormal tangent frame ``(2, 3)`` of the unit sphere at ``n`` defined everywhere:
    :func:`_tangent_frame` on ``n_z ≥ 0`` and the frame built at the antipode (the same tangent
    plane; singular only at ``n = +e_z``) on ``n_z < 0``.  The frame jumps on the equator, the
    constrained plane does not: the reconstruction depends only on the distribution ``D``
    (the constraint ``C ξ = r`` and ``P C ξ = P r`` give the same motion for any invertible ``P(t)``),
    so the jump is harmless.  Both branches see safe inputs (double ``where``: finite
    derivatives)."""
    north = n[2] >= 0
    ez = jnp.zeros_like(n).at[2].set(1.0)
    return jnp.where(
        north, _tangent_frame(jnp.where(north, n, ez)), _tangent_frame(jnp.where(north, ez, -n))
    )


def _bib_kinetic(I1, mu, I3, r, a, q, qd):
    w1 = _spatial_omega(q[0], qd[0])
    w3 = _spatial_omega(q[2], qd[2])
    return 0.5 * I1 * jnp.sum(w1**2) + 0.5 * mu * jnp.sum(qd[1] ** 2) + 0.5 * I3 * jnp.sum(w3**2)


def _bib_constraint(I1, mu, I3, r, a, q, qd, frame=_tangent_frame):
    n = q[1] / jnp.linalg.norm(q[1])
    w1 = _spatial_omega(q[0], qd[0])
    w3 = _spatial_omega(q[2], qd[2])
    slip = qd[1] + a * jnp.cross(w3, n) - (r + a) * jnp.cross(w1, n)
    return frame(n) @ slip


def _bib_constraint_global(I1, mu, I3, r, a, q, qd):
    return _bib_constraint(I1, mu, I3, r, a, q, qd, frame=_two_chart_frame)


def _bib_action(g, q):
    R, g3 = g[0], g[1]
    return (R @ q[0], R @ q[1], R @ q[2] @ g3.T)


def _bib_section(r, b):
    th, ph = b[0], b[1]
    n = jnp.stack([jnp.sin(th) * jnp.cos(ph), jnp.sin(th) * jnp.sin(ph), jnp.cos(th)])
    e = jnp.eye(3, dtype=b.dtype)
    return (e, r * n, e)


def _bib_section_direction(r, b):
    e = jnp.eye(3, dtype=b.dtype)
    return (e, r * b / jnp.linalg.norm(b), e)


def ball_in_ball(
    mass_big=10.0,
    mass_small=1.0,
    radius_big=1.0,
    radius_small=0.2,
    inertia_big=None,
    base="polar",
):
    """A small ball rolling without slipping inside a free big ball (Cabrera §5.3: a robot
    inside a spacecraft), no external forces, the path of the small ball prescribed as seen
    from the big ball.

    ``Q = SO(3) × S²_r × SO(3) ∋ (R₁, r₂, R₃)``: big-ball attitude, centre of the small ball
    relative to the big one's (``|r₂| = r = radius_big − radius_small``), small-ball attitude.
    Corrected Lagrangian (the paper's r² is spurious, see the conventions notes):
    ``K = ½ I₁|ω₁|² + ½ μ|ṙ₂|² + ½ I₃|ω₃|²`` with ``μ = m₁m₂/(m₁+m₂)`` (centre of mass at rest),
    ``I₁ = inertia_big`` (default ``2/5 m₁ R²``), ``I₃ = 2/5 m₂ a²``.  Rolling at the contact
    point ``r₂ + a n`` (``n = r₂/r``, ``ω`` spatial): ``ṙ₂ + a ω₃ × n − (r + a) ω₁ × n = 0``
    (its two tangential components, in a frame singular only at ``n = −e_z``).
    ``G = SO(3) × SO(3) ∋ (R, g₃)`` (:class:`geomjax.lie.PowerGroup`) acts by
    ``(R R₁, R r₂, R R₃ g₃⁻¹)``; base ``b = (θ, φ)``: polar angles of ``R₁⁻¹ r₂`` (the path seen
    from the big ball), section ``(e, r n(θ, φ), e)``.  ``g^q = h ⊕ span{…}``: the total angular
    momentum (the ``h``-part) is conserved.

    ``base="direction"``: chart-free, for paths through ``n = −e_z`` (or anywhere): the base
    point is the direction ``b ≠ 0`` in R³ of the small ball's centre seen from the big ball
    (a unit vector on S², normalized by the section ``(e, r b/|b|, e)``; ``base_dim = 3``), i.e.
    the path given in the big ball's frame, ``r₂ = r b/|b|``; the rolling constraint then uses a
    tangent frame defined on the whole sphere (two charts; the constrained plane is the same).
    """
    if base not in ("polar", "direction"):
        raise ValueError(
            f"ball_in_ball: argument 'base' must be 'polar' or 'direction', got {base!r}"
        )
    m1, m2, Rb, a = (_f(v) for v in (mass_big, mass_small, radius_big, radius_small))
    r = Rb - a
    I1 = 0.4 * m1 * Rb**2 if inertia_big is None else _f(inertia_big)
    p = (I1, m1 * m2 / (m1 + m2), 0.4 * m2 * a**2, r, a)
    return BaseControlledSystem(
        group=PowerGroup(SO3, 2),
        kinetic=Partial(_bib_kinetic, *p),
        action=_bib_action,
        section=Partial(_bib_section if base == "polar" else _bib_section_direction, r),
        base_dim=2 if base == "polar" else 3,
        constraint=Partial(_bib_constraint if base == "polar" else _bib_constraint_global, *p),
        name="ball_in_ball",
    )
