"""The classic nonholonomic systems, each with its invariants and closed forms.

* :class:`ChaplyginSleigh` — SE(2), a knife edge; energy conserved; tanh/sech body velocities.
* :class:`VerticalRollingDisk` — ``(R² × S¹) × S¹``; Cabrera, *Base-controlled mechanical systems and geometric phases*, §5.1 (printed g(t) corrected).
* :class:`BallOnTurntable` — ``SO(3) × R²``, affine (optionally time-dependent) constraints;
  vertical spin conserved, the centre moves on circles (closed form derived below).
* :class:`ChaplyginSphere` — ``SO(3) × R²``, an unbalanced-inertia ball rolling on a fixed plane;
  energy and the angular momentum about the contact point conserved.
* :class:`RollingDisk` — the tilting (Routh) disk, ``SE(2) × R²`` (tilt and spin angles as shape);
  energy conserved, steady circular motions.
* :class:`SuslovProblem` — Euler–Poincaré–Suslov rigid body on SO(3), ``<a, Omega> = 0``.

Conventions as in :mod:`geomjax.systems.nonholonomic`: ``v = (xi, xdot)`` with ``xi = g^{-1} dg/dt``
(body velocities; se(2) ordered ``(omega, vx, vy)``), ``coad(xi, mu) = ad(xi)^T mu``.
"""

from __future__ import annotations

from typing import ClassVar

import jax
import jax.numpy as jnp
import numpy as np

from .._internal.eager import quick_compiled
from .._internal.tracing import is_traced
from ..lie import SE2, SO3, LieGroup, Rn
from ..lie._math import mv
from .base import check_finite, check_spd
from .nonholonomic import AbstractNonholonomicSystem, NonholonomicState

__all__ = [
    "BallOnTurntable",
    "ChaplyginSleigh",
    "ChaplyginSphere",
    "PlanarCoordinates",
    "RollingDisk",
    "SleighCoordinates",
    "SuslovProblem",
    "VerticalRollingDisk",
]


def _scalar(value, name, where, positive=True):
    """A float scalar parameter; ``ValueError`` naming it if it is not (eager checks only)."""
    a = jnp.asarray(value)
    if not jnp.issubdtype(a.dtype, jnp.inexact):
        a = a.astype(jnp.result_type(float))
    if a.shape != ():
        raise ValueError(f"{where}: argument '{name}' must be a scalar, got shape {a.shape}")
    a = check_finite(a, name, where)
    if positive and not is_traced(a) and not bool(np.asarray(a) > 0):
        raise ValueError(f"{where}: argument '{name}' must be positive, got {float(a)}")
    return a


def _quad(M, v):
    """``½ vᵀ M v`` written elementwise: XLA on CPU compiles each tiny ``dot`` (and its
    forward/reverse derivatives) to a separate kernel, which dominates the cost of an implicit
    step at batch 1; elementwise products and sums fuse."""
    return 0.5 * jnp.sum(v * mv(M, v))


def _J2(u):
    """Rotation by +90° in the plane: ``(x, y) -> (−y, x)`` (``e3 × u`` for horizontal ``u``)."""
    return jnp.stack([-u[..., 1], u[..., 0]], -1)


# --- initial states from named coordinates --------------------------------------------------------
# The arithmetic of the ``state`` helpers is one compiled function each (cached per structure):
# evaluated op by op, a process's first state cost ~20 one-op XLA compilations (0.3 s).
@quick_compiled  # one-shot: the eager tier (geomjax._internal.eager)
def _sleigh_arrays(x, y, theta, omega, v):
    g = SE2.from_xytheta(x, y, theta)
    xi = jnp.stack([omega, v, jnp.zeros_like(v)])
    return g, xi.astype(jnp.result_type(g, xi))


@quick_compiled  # one-shot: the eager tier (geomjax._internal.eager)
def _vertical_disk_arrays(radius, x, y, theta, phi, theta_dot, phi_dot):
    g = jnp.stack([x, y, theta])
    v = jnp.stack(
        [radius * jnp.cos(phi) * theta_dot, radius * jnp.sin(phi) * theta_dot, theta_dot, phi_dot]
    )
    return g, phi[None], v


@quick_compiled  # one-shot: the eager tier (geomjax._internal.eager)
def _ball_velocity(system, R, x, omega, t):
    xd = system.rate(t) * _J2(x) - system.radius * _J2(omega[:2])
    return jnp.concatenate([R.T @ omega, xd])


@quick_compiled  # one-shot: the eager tier (geomjax._internal.eager)
def _rolling_disk_arrays(radius, x, y, phi, theta, psi, phi_dot, theta_dot, psi_dot):
    g = SE2.from_xytheta(x, y, phi)
    v = jnp.stack([phi_dot, radius * psi_dot, jnp.zeros_like(psi_dot), theta_dot, psi_dot])
    return g, jnp.stack([theta, psi]), v


# ================================================================================================
class ChaplyginSleigh(AbstractNonholonomicSystem):
    """The Chaplygin sleigh: a rigid body in the plane on a knife edge that cannot slide sideways.

    Arguments:
        mass: ``m > 0``.
        inertia: ``I_c > 0``, moment of inertia about the centre of mass.
        a: distance from the contact point to the centre of mass along the blade (body x axis).

    Configuration ``g ∈ SE(2)``: the body frame at the contact point, x axis along the blade;
    velocity ``v = xi = (omega, vx, vy)`` (body frame, at the contact point).  The centre of mass
    moves with body velocity ``(vx, vy + a omega)``, so ``L = ½ xi^T I xi`` with

        I = [[I_c + m a², 0, m a], [0, m, 0], [m a, 0, m]],

    and the knife edge imposes ``vy = 0`` (one linear, left-invariant constraint: an
    Euler–Poincaré–Suslov system).  On the constraint ``(J = I_c + m a²)``:

        J omega' = −m a v omega,    v' = a omega²,    lam = m (a omega' + omega v)

    (``lam``: lateral force of the blade).  Energy ``E = ½ (J omega² + m v²)`` is conserved and,
    with ``V = sqrt(2E/m)``, ``c = m a/J``, ``s0 = artanh(v0/V)`` (Bloch, *Nonholonomic Mechanics and
    Control*, 2003, ch. 1; Neimark & Fufaev 1972):

        v(t) = V tanh(c V t + s0),    omega(t) = omega0 cosh(s0) / cosh(c V t + s0),
        theta(t) = theta0 + omega0 cosh(s0) (gd(c V t + s0) − gd(s0)) / (c V)

    (``gd`` the Gudermannian).  For ``a > 0`` every motion tends to straight-line motion along the
    blade with ``v → V``.
    """

    mass: jax.Array
    inertia: jax.Array
    a: jax.Array
    n_constraints: ClassVar[int] = 1

    def __init__(self, mass=1.0, inertia=1.0, a=1.0):
        where = "ChaplyginSleigh"
        self.mass = _scalar(mass, "mass", where)
        self.inertia = _scalar(inertia, "inertia", where)
        self.a = _scalar(a, "a", where, positive=False)

    @property
    def group(self) -> LieGroup:
        return SE2

    def inertia_matrix(self) -> jax.Array:
        """``(3, 3)`` SPD inertia in ``(omega, vx, vy)`` about the contact point."""
        m, Ic, a = self.mass, self.inertia, self.a
        z = jnp.zeros_like(m)
        return jnp.stack(
            [
                jnp.stack([Ic + m * a * a, z, m * a]),
                jnp.stack([z, m, z]),
                jnp.stack([m * a, z, m]),
            ]
        )

    def lagrangian(self, g, x, v):
        # elementwise contractions: tiny dots are separate kernels on CPU (see _quad)
        return _quad(self.inertia_matrix(), v)

    def constraint(self, g, x, v, t):
        return v[2:3]

    def state(self, x=0.0, y=0.0, theta=0.0, omega=0.0, v=0.0) -> NonholonomicState:
        """Consistent state at contact point ``(x, y)``, heading ``theta``, angular velocity
        ``omega`` and forward speed ``v``."""
        g, xi = _sleigh_arrays(*(jnp.asarray(a) for a in (x, y, theta, omega, v)))
        return self.make_state(g, None, xi)

    def closed_form(self, t, omega0, v0, theta0=0.0):
        """``(omega(t), v(t), theta(t))`` from the formulas above (``t`` any shape; ``omega0 ≠ 0``
        — for ``omega0 = 0`` the sleigh moves uniformly on a straight line)."""
        m, J, a = self.mass, self.inertia + self.mass * self.a**2, self.a
        V = jnp.sqrt((J * omega0**2 + m * v0**2) / m)
        c = m * a / J
        s0 = jnp.arctanh(v0 / V)
        s = c * V * t + s0
        gd = lambda u: 2.0 * jnp.arctan(jnp.tanh(0.5 * u))  # noqa: E731
        v = V * jnp.tanh(s)
        omega = omega0 * jnp.cosh(s0) / jnp.cosh(s)
        theta = theta0 + omega0 * jnp.cosh(s0) * (gd(s) - gd(s0)) / (c * V)
        return omega, v, theta

    def invariants(self, state, t=0.0):
        # not invariants: the body velocities with closed forms (``closed_form``)
        xi = state.v
        return {"omega": xi[0], "forward_speed": xi[1]}

    def coordinate_system(self) -> SleighCoordinates:
        """The same sleigh in plain coordinates ``q = (x, y, theta)`` on ``R^3`` (contact point
        and heading), with the constraint written in the plane, ``−sin θ ẋ + cos θ ẏ = 0``."""
        return SleighCoordinates(self.mass, self.inertia, self.a)

    def to_coordinates(self, state) -> NonholonomicState:
        """Map an SE(2) state to the coordinate formulation (same physical state)."""
        x, y, th = SE2.to_xytheta(state.g)
        om, vx, vy = state.v
        c, s = jnp.cos(th), jnp.sin(th)
        q = jnp.stack([x, y, th])
        qd = jnp.stack([c * vx - s * vy, s * vx + c * vy, om])
        return NonholonomicState(q, jnp.zeros((0,), q.dtype), qd, state.lam)


class SleighCoordinates(AbstractNonholonomicSystem):
    """The Chaplygin sleigh on ``R^3`` with coordinates ``q = (x, y, theta)`` (see
    :meth:`ChaplyginSleigh.coordinate_system`): the centre of mass is at
    ``(x + a cos θ, y + a sin θ)``, ``L = ½ m |d/dt c.o.m.|² + ½ I_c θ'²`` (a configuration-dependent
    mass matrix) and ``C = −sin θ ẋ + cos θ ẏ``.  Same multiplier as the SE(2) form (the lateral
    force)."""

    mass: jax.Array
    inertia: jax.Array
    a: jax.Array
    n_constraints: ClassVar[int] = 1

    def __init__(self, mass=1.0, inertia=1.0, a=1.0):
        where = "SleighCoordinates"
        self.mass = _scalar(mass, "mass", where)
        self.inertia = _scalar(inertia, "inertia", where)
        self.a = _scalar(a, "a", where, positive=False)

    @property
    def group(self) -> LieGroup:
        return Rn(3)

    def lagrangian(self, g, x, v):
        th = g[2]
        xd, yd, thd = v
        vx = xd - self.a * jnp.sin(th) * thd
        vy = yd + self.a * jnp.cos(th) * thd
        return 0.5 * self.mass * (vx * vx + vy * vy) + 0.5 * self.inertia * thd * thd

    def constraint(self, g, x, v, t):
        th = g[2]
        return jnp.stack([-jnp.sin(th) * v[0] + jnp.cos(th) * v[1]])


class PlanarCoordinates(AbstractNonholonomicSystem):
    """Any nonholonomic system on ``SE(2) × R^n`` rewritten in plain coordinates: group part
    ``(x, y, phi) ∈ R^3`` (with ``g = [[R(phi), (x, y)], [0, 1]]``), the same shape coordinates,
    and velocities ``(x', y', phi', shape rates)``; the body velocity is
    ``xi = (phi', R(phi)^T (x', y'))``.  Same Lagrangian and constraint values, hence the same
    motions and multipliers; used for Euclidean baselines (ODE solvers in coordinates) and to
    compare the two formulations.

    Arguments:
        system: an :class:`AbstractNonholonomicSystem` whose group is ``SE2``.
    """

    system: AbstractNonholonomicSystem

    def __init__(self, system):
        if not (isinstance(system, AbstractNonholonomicSystem) and system.group == SE2):
            raise ValueError(
                "PlanarCoordinates: argument 'system' must be a nonholonomic system on SE(2)"
            )
        self.system = system

    @property
    def group(self) -> LieGroup:
        return Rn(3)

    @property
    def shape_dim(self) -> int:
        return self.system.shape_dim

    @property
    def n_constraints(self) -> int:
        return self.system.n_constraints

    def _to_body(self, g, v):
        phi = g[2]
        c, s = jnp.cos(phi), jnp.sin(phi)
        xi = jnp.stack([v[2], c * v[0] + s * v[1], -s * v[0] + c * v[1]])
        return SE2.from_xytheta(g[0], g[1], phi), jnp.concatenate([xi, v[3:]])

    def lagrangian(self, g, x, v):
        G, V = self._to_body(g, v)
        return self.system.lagrangian(G, x, V)

    def constraint(self, g, x, v, t):
        G, V = self._to_body(g, v)
        return self.system.constraint(G, x, V, t)

    def from_se2(self, state) -> NonholonomicState:
        """The coordinate state of an SE(2) state (heading unwrapped to (−π, π])."""
        q = SE2.to_xytheta(state.g)
        xi = state.v[:3]
        c, s = jnp.cos(q[2]), jnp.sin(q[2])
        qd = jnp.stack([c * xi[1] - s * xi[2], s * xi[1] + c * xi[2], xi[0]])
        return NonholonomicState(q, state.x, jnp.concatenate([qd, state.v[3:]]), state.lam)

    def invariants(self, state, t=0.0):
        G, V = self._to_body(state.g, state.v)
        return self.system.invariants(NonholonomicState(G, state.x, V, state.lam), t)


# ================================================================================================
class VerticalRollingDisk(AbstractNonholonomicSystem):
    """A disk rolling upright on the plane (Cabrera §5.1; Bloch 2003, ch. 1).

    Arguments:
        mass: ``m``; radius: ``R``; inertia: ``I`` about the rolling (symmetry) axis;
        inertia_vertical: ``J`` about the vertical diameter.

    ``Q = (R² × S¹) × S¹``: group part ``g = (x, y, theta) ∈ R^3`` (contact point and rolling
    angle, an abelian group acting on itself) and shape ``phi`` (heading).  ``v = (x', y',
    theta', phi')``,

        L = ½ m (x'² + y'²) + ½ I theta'² + ½ J phi'²,
        x' = R cos(phi) theta',   y' = R sin(phi) theta'     (rolling without slipping).

    ``zeta(phi) = (R cos phi, R sin phi, 1)`` spans ``g^q``; the nonholonomic momentum
    ``J = <p, zeta> = (m R² + I) theta'`` is conserved (Cabrera: ``λ'(mR² + I) = 0``), and
    ``phi' `` is constant.  Closed form (Cabrera eq. after (33), **corrected**: the printed formula
    carries stray factors ``m`` and ``I`` and ``cos`` in the y-component):

        phi(t) = phi0 + w t,   theta(t) = theta0 + theta' t,
        x(t) = x0 + R theta' ∫_0^t cos phi,   y(t) = y0 + R theta' ∫_0^t sin phi.
    """

    mass: jax.Array
    radius: jax.Array
    inertia: jax.Array
    inertia_vertical: jax.Array
    n_constraints: ClassVar[int] = 2

    def __init__(self, mass=1.0, radius=1.0, inertia=0.5, inertia_vertical=0.25):
        where = "VerticalRollingDisk"
        self.mass = _scalar(mass, "mass", where)
        self.radius = _scalar(radius, "radius", where)
        self.inertia = _scalar(inertia, "inertia", where)
        self.inertia_vertical = _scalar(inertia_vertical, "inertia_vertical", where)

    @property
    def group(self) -> LieGroup:
        return Rn(3)

    @property
    def shape_dim(self) -> int:
        return 1

    def lagrangian(self, g, x, v):
        return 0.5 * (
            self.mass * (v[0] ** 2 + v[1] ** 2)
            + self.inertia * v[2] ** 2
            + self.inertia_vertical * v[3] ** 2
        )

    def constraint(self, g, x, v, t):
        phi, R = x[0], self.radius
        return jnp.stack([v[0] - R * jnp.cos(phi) * v[2], v[1] - R * jnp.sin(phi) * v[2]])

    def zeta(self, g, x):
        """The section ``(R cos phi, R sin phi, 1)`` of ``g^q``."""
        phi = x[0]
        return jnp.stack(
            [self.radius * jnp.cos(phi), self.radius * jnp.sin(phi), jnp.ones_like(phi)]
        )

    def state(self, x=0.0, y=0.0, theta=0.0, phi=0.0, theta_dot=1.0, phi_dot=0.0):
        args = (jnp.asarray(a, float) for a in (x, y, theta, phi, theta_dot, phi_dot))
        g, sh, v = _vertical_disk_arrays(self.radius, *args)
        return self.make_state(g, sh, v)

    def closed_form(self, t, state0):
        """``(g(t), phi(t))``: ``g = (x, y, theta)`` ``(..., 3)`` and the heading ``(...,)``."""
        x0, y0, th0 = state0.g
        phi0 = state0.x[0]
        td, w = state0.v[2], state0.v[3]
        R = self.radius
        phi = phi0 + w * t
        # ∫_0^t cos(phi0 + w s) ds with the w -> 0 limit handled (double where)
        small = jnp.abs(w) < 1e-12
        ws = jnp.where(small, 1.0, w)
        ic = jnp.where(small, jnp.cos(phi0) * t, (jnp.sin(phi) - jnp.sin(phi0)) / ws)
        is_ = jnp.where(small, jnp.sin(phi0) * t, (jnp.cos(phi0) - jnp.cos(phi)) / ws)
        g = jnp.stack([x0 + R * td * ic, y0 + R * td * is_, th0 + td * t], -1)
        return g, phi

    def invariants(self, state, t=0.0):
        return {
            "nonholonomic_momentum": self.nonholonomic_momentum(state, self.zeta),
            "heading_rate": state.v[3],
        }


# ================================================================================================
def _spatial_omega(R, Omega):
    return mv(R, Omega)


class BallOnTurntable(AbstractNonholonomicSystem):
    """A ball rolling without slipping on a turntable rotating about the vertical through the
    origin with rate ``Omega(t) = table_rate + table_acceleration · t`` (Cabrera §5.2; Bloch 2003,
    ch. 1; Neimark & Fufaev 1972).

    Arguments:
        mass: ``m``; radius: ``a``; inertia: moment of inertia ``I`` about any diameter (an
            isotropic ball; default ``2/5 m a²``, homogeneous);
        table_rate: ``Omega_0``; table_acceleration: ``alpha`` (default 0).

    ``Q = SO(3) × R²``: attitude ``R`` (body → space) and the centre's horizontal position ``x``
    (shape).  ``v = (Omega_body, x')`` ``(5,)``, spatial angular velocity ``omega = R Omega_body``;
    ``L = ½ m |x'|² + ½ I |Omega|²``.  Rolling: the material point at the contact ``x − a e3``
    moves with the table, ``x' + omega × (−a e3) = Omega(t) e3 × x``, i.e. (``J`` = rotation by 90°)

        x' + a J omega_h = Omega(t) J x            (2 affine constraints, A depends on R),

    which is Cabrera's ``−x' + a omega_y = Omega y``, ``y' + a omega_x = Omega x``.
    Newton–Euler with the contact force ``F``: ``m x'' = F``, ``I omega' = −a e3 × F``; so the
    vertical spin ``omega_z`` is conserved and, with ``kappa = I / (I + m a²)`` (2/7 for a
    homogeneous ball), differentiating the constraint gives ``x'' = kappa d/dt(Omega J x)``:

        x' − kappa Omega(t) J x = const        (first integral, also for alpha ≠ 0).

    For constant ``Omega`` the centre moves on a circle with angular velocity ``kappa Omega``:
    ``x'(t) = exp(kappa Omega t J) x'(0)``, centre ``x_c = x(0) + J x'(0)/(kappa Omega)``, radius
    ``|x'(0)|/(kappa Omega)``.  Energy is not conserved (the table does work).
    """

    mass: jax.Array
    radius: jax.Array
    inertia: jax.Array
    table_rate: jax.Array
    table_acceleration: jax.Array
    n_constraints: ClassVar[int] = 2

    def __init__(self, mass=1.0, radius=1.0, inertia=None, table_rate=1.0, table_acceleration=0.0):
        where = type(self).__name__
        self.mass = _scalar(mass, "mass", where)
        self.radius = _scalar(radius, "radius", where)
        if inertia is None:
            inertia = 0.4 * self.mass * self.radius**2
        self.inertia = self._check_inertia(inertia, where)
        self.table_rate = _scalar(table_rate, "table_rate", where, positive=False)
        self.table_acceleration = _scalar(
            table_acceleration, "table_acceleration", where, positive=False
        )

    def _check_inertia(self, inertia, where):
        return _scalar(inertia, "inertia", where)

    @property
    def group(self) -> LieGroup:
        return SO3

    @property
    def shape_dim(self) -> int:
        return 2

    def inertia_tensor(self) -> jax.Array:
        return self.inertia * jnp.eye(3, dtype=self.inertia.dtype)

    def lagrangian(self, g, x, v):
        Om, xd = v[:3], v[3:]
        return 0.5 * self.mass * jnp.sum(xd * xd) + _quad(self.inertia_tensor(), Om)

    def rate(self, t):
        """Table angular velocity ``Omega(t)``."""
        return self.table_rate + self.table_acceleration * t

    def constraint(self, g, x, v, t):
        omega = _spatial_omega(g, v[:3])
        return v[3:] + self.radius * _J2(omega[:2]) - self.rate(t) * _J2(x)

    def state(self, R=None, x=(1.0, 0.0), omega=(0.0, 0.0, 0.0), t=0.0):
        """Consistent state from the attitude, centre position and *spatial* angular velocity;
        the centre velocity follows from the rolling constraint."""
        R = np.eye(3) if R is None else R
        R, x, omega = (jnp.asarray(a, float) for a in (R, x, omega))
        return self.make_state(R, x, _ball_velocity(self, R, x, omega, jnp.asarray(t)), t=t)

    @property
    def kappa(self):
        return self.inertia / (self.inertia + self.mass * self.radius**2)

    def closed_form(self, t, state0):
        """For constant table rate: ``(x(t), x'(t))`` ``(..., 2)`` on the circle above."""
        k = self.kappa * self.table_rate
        x0, xd0 = state0.x, state0.v[3:]
        c, s = jnp.cos(k * t)[..., None], jnp.sin(k * t)[..., None]
        xd = c * xd0 + s * _J2(xd0)
        # x(t) = x0 + J^{-1}(exp(k t J) − 1) xd0 / k,  J^{-1} u = −J u
        x = x0 - _J2((c - 1.0) * xd0 + s * _J2(xd0)) / k
        return x, xd

    def invariants(self, state, t=0.0):
        omega = _spatial_omega(state.g, state.v[:3])
        first = state.v[3:] - self.kappa * self.rate(t) * _J2(state.x)
        return {"vertical_spin": omega[2], "first_integral": first}


class ChaplyginSphere(BallOnTurntable):
    """Chaplygin's sphere: a ball of radius ``a`` whose centre of mass is its geometric centre but
    whose inertia tensor is arbitrary, rolling without slipping on a fixed plane (Chaplygin 1903;
    Borisov & Mamaev 2002).  Same configuration space, velocity layout and constraint as
    :class:`BallOnTurntable` with the table at rest (linear constraints).

    Arguments:
        mass, radius: ``m``, ``a``;
        inertia: principal moments ``(3,)`` or an SPD ``(3, 3)`` body inertia tensor about the
            centre.

    Invariants: the energy ``½ m |x'|² + ½ Omega^T I Omega`` and the angular momentum about the
    contact point, ``M = R I Omega + m a² e3 × (omega × e3)`` (``omega = R Omega``), constant in
    space: the contact force has no moment about the contact point, gravity acts along the
    vertical through it, and the point moves parallel to the linear momentum.  Its vertical
    component ``M_z = (R I Omega)_z`` is the momentum of a horizontal symmetry (rotations about
    the vertical, ``zeta = e3`` in ``g^q``), conserved by :class:`~geomjax.NonholonomicVI` to
    round-off; the horizontal components are observed to be conserved to round-off as well
    (``tests/nonholonomic``).
    """

    def __init__(self, mass=1.0, radius=1.0, inertia=(0.3, 0.4, 0.5)):
        super().__init__(mass, radius, inertia, table_rate=0.0, table_acceleration=0.0)

    def _check_inertia(self, inertia, where):
        I = jnp.asarray(inertia)
        if not jnp.issubdtype(I.dtype, jnp.inexact):
            I = I.astype(jnp.result_type(float))
        if I.shape == (3,):
            I = jnp.diag(I)
        return check_spd(I, "inertia", where, 3)

    def inertia_tensor(self) -> jax.Array:
        return self.inertia

    def invariants(self, state, t=0.0):
        R, Om = state.g, state.v[:3]
        omega = R @ Om
        e3 = jnp.array([0.0, 0.0, 1.0], omega.dtype)
        M = R @ (self.inertia @ Om) + self.mass * self.radius**2 * (omega - omega[2] * e3)
        return {"contact_angular_momentum": M}


# ================================================================================================
class RollingDisk(AbstractNonholonomicSystem):
    """A thin disk rolling without slipping on a horizontal plane and free to tilt (the rolling
    penny / Routh's disk; Neimark & Fufaev 1972 ch. II; O'Reilly 1996, Nonlinear Dyn. 10).

    Arguments:
        mass: ``m``; radius: ``r``; inertia_diameter: ``A`` (about a diameter, default m r²/4);
        inertia_axis: ``C`` (about the symmetry axis, default m r²/2); gravity: ``g0``.

    Configuration: ``g = (x, y, phi) ∈ SE(2)`` — contact point and heading (the horizontal tangent
    of the rim at the contact) — and shape ``(theta, psi)``: tilt from the vertical and rolling
    angle; attitude ``Rz(phi) Rx(theta) Ry(psi)`` with the symmetry axis along body y.  Velocity
    ``v = (phi', u1, u2, theta', psi')`` with ``(u1, u2)`` the contact-point velocity in the
    heading frame.  With ``s, c = sin theta, cos theta`` (centre ``(x, y, 0) + r Rz(phi)(0, −s, c)``):

        L = m/2 [(u1 + r phi' s)² + (u2 − r theta' c)² + r² theta'² s²]
            + ½ [A theta'² + C (psi' + phi' s)² + A phi'² c²] − m g0 r c,

    rolling: ``u1 = r psi'``, ``u2 = 0`` (linear, SE(2)-invariant).  Energy is conserved.
    Steady motions (``theta, phi', psi'`` constant) satisfy (Euler–Lagrange in ``theta``)

        (m r² + C) phi' c (psi' + phi' s) − A phi'² s c + m g0 r s = 0,

    e.g. the upright disk rolling straight (``theta = 0, phi' = 0``) or spinning about its vertical
    diameter, and circular rolling at constant tilt.
    """

    mass: jax.Array
    radius: jax.Array
    inertia_diameter: jax.Array
    inertia_axis: jax.Array
    gravity: jax.Array
    n_constraints: ClassVar[int] = 2

    def __init__(
        self, mass=1.0, radius=1.0, inertia_diameter=None, inertia_axis=None, gravity=9.81
    ):
        where = "RollingDisk"
        self.mass = _scalar(mass, "mass", where)
        self.radius = _scalar(radius, "radius", where)
        mr2 = self.mass * self.radius**2
        self.inertia_diameter = _scalar(
            0.25 * mr2 if inertia_diameter is None else inertia_diameter, "inertia_diameter", where
        )
        self.inertia_axis = _scalar(
            0.5 * mr2 if inertia_axis is None else inertia_axis, "inertia_axis", where
        )
        self.gravity = _scalar(gravity, "gravity", where, positive=False)

    @property
    def group(self) -> LieGroup:
        return SE2

    @property
    def shape_dim(self) -> int:
        return 2

    def lagrangian(self, g, x, v):
        m, r, A, C = self.mass, self.radius, self.inertia_diameter, self.inertia_axis
        th = x[0]
        s, c = jnp.sin(th), jnp.cos(th)
        phid, u1, u2, thd, psid = v
        T = 0.5 * m * ((u1 + r * phid * s) ** 2 + (u2 - r * thd * c) ** 2 + (r * thd * s) ** 2)
        T = T + 0.5 * (A * thd**2 + C * (psid + phid * s) ** 2 + A * (phid * c) ** 2)
        return T - m * self.gravity * r * c

    def constraint(self, g, x, v, t):
        return jnp.stack([v[1] - self.radius * v[4], v[2]])

    def state(
        self, x=0.0, y=0.0, phi=0.0, theta=0.0, psi=0.0, phi_dot=0.0, theta_dot=0.0, psi_dot=0.0
    ):
        args = (jnp.asarray(a, float) for a in (x, y, phi, theta, psi, phi_dot, theta_dot, psi_dot))
        g, sh, v = _rolling_disk_arrays(self.radius, *args)
        return self.make_state(g, sh, v)

    def steady_psi_dot(self, theta, phi_dot):
        """``psi'`` of the steady motion with tilt ``theta`` and heading rate ``phi_dot ≠ 0``."""
        m, r, A, C, g0 = (
            self.mass,
            self.radius,
            self.inertia_diameter,
            self.inertia_axis,
            self.gravity,
        )
        s, c = jnp.sin(theta), jnp.cos(theta)
        # (m r² + C) w c (psi' + w s) = A w² s c − m g0 r s
        return (A * phi_dot**2 * s * c - m * g0 * r * s) / (
            (m * r * r + C) * phi_dot * c
        ) - phi_dot * s

    def attitude(self, state):
        """``Rz(phi) Rx(theta) Ry(psi)`` ``(3, 3)``."""
        phi = jnp.arctan2(state.g[1, 0], state.g[0, 0])
        th, psi = state.x
        return _rz(phi) @ _rx(th) @ _ry(psi)

    def centre(self, state):
        """Position of the centre of the disk ``(3,)``."""
        phi = jnp.arctan2(state.g[1, 0], state.g[0, 0])
        th = state.x[0]
        c3 = _rz(phi) @ jnp.stack([jnp.zeros_like(th), -jnp.sin(th), jnp.cos(th)])
        return jnp.stack([state.g[0, 2], state.g[1, 2], jnp.zeros_like(th)]) + self.radius * c3


def _rz(a):
    c, s = jnp.cos(a), jnp.sin(a)
    o, z = jnp.ones_like(a), jnp.zeros_like(a)
    return jnp.stack([jnp.stack([c, -s, z]), jnp.stack([s, c, z]), jnp.stack([z, z, o])])


def _rx(a):
    c, s = jnp.cos(a), jnp.sin(a)
    o, z = jnp.ones_like(a), jnp.zeros_like(a)
    return jnp.stack([jnp.stack([o, z, z]), jnp.stack([z, c, -s]), jnp.stack([z, s, c])])


def _ry(a):
    c, s = jnp.cos(a), jnp.sin(a)
    o, z = jnp.ones_like(a), jnp.zeros_like(a)
    return jnp.stack([jnp.stack([c, z, s]), jnp.stack([z, o, z]), jnp.stack([-s, z, c])])


# ================================================================================================
class SuslovProblem(AbstractNonholonomicSystem):
    """Suslov's problem: a rigid body about a fixed point whose body angular velocity is
    constrained to the plane ``<a, Omega> = 0`` (Suslov 1902; Fedorov & Zenkov 2005; Bloch 2003,
    ch. 1) — the prototype Euler–Poincaré–Suslov system on SO(3):

        I Omega' = I Omega × Omega + lam a,    <a, Omega> = 0.

    Arguments:
        inertia: principal moments ``(3,)`` or SPD ``(3, 3)``; a: constraint vector ``(3,)``
            (body frame, nonzero).

    Energy ``½ Omega^T I Omega`` is conserved (the constraint is linear and left-invariant).  If
    ``a`` is an eigenvector of ``I``, then ``I`` maps the plane ``a^⊥`` to itself, ``I Omega × Omega``
    is parallel to ``a`` and is cancelled by the constraint force: ``Omega`` is constant (uniform
    rotation about any admissible axis).  Otherwise the motions tend asymptotically to steady
    rotations, like the Chaplygin sleigh (Fedorov & Zenkov 2005 discuss the analogy).
    """

    inertia: jax.Array
    a: jax.Array
    n_constraints: ClassVar[int] = 1

    def __init__(self, inertia, a=(0.0, 0.0, 1.0)):
        where = "SuslovProblem"
        I = jnp.asarray(inertia)
        if not jnp.issubdtype(I.dtype, jnp.inexact):
            I = I.astype(jnp.result_type(float))
        if I.shape == (3,):
            I = jnp.diag(I)
        self.inertia = check_spd(I, "inertia", where, 3)
        a = jnp.asarray(a, self.inertia.dtype)
        if a.shape != (3,):
            raise ValueError(f"{where}: argument 'a' must have shape (3,), got {a.shape}")
        a = check_finite(a, "a", where)
        if not is_traced(a) and not bool(np.linalg.norm(np.asarray(a)) > 0):
            raise ValueError(f"{where}: argument 'a' must be nonzero")
        self.a = a

    @property
    def group(self) -> LieGroup:
        return SO3

    def lagrangian(self, g, x, v):
        return _quad(self.inertia, v)

    def constraint(self, g, x, v, t):
        return jnp.sum(self.a * v, keepdims=True)
