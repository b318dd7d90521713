"""Generalized rigid bodies: Euler–Poincaré systems on SO(3), SE(3) and any group of geomjax.lie.

References: Chevallier, *On the foundations of ordinary and generalized rigid body dynamics and the principle of objectivity* (Chevallier) for the generalized rigid body on a Lie group and the
objective SE(3) inertia; Lee, Leok & McClamroch (2005) for the SO(3) rigid body with potentials.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import ClassVar

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from .._internal.tracing import is_traced
from .._internal.warn import warn
from .._linalg import spd_inverse
from ..lie import SE3, SO3, LieGroup
from ..lie.so3 import hat3
from .base import AbstractLieGroupSystem, LieGroupState, check_finite, check_potential, check_spd

__all__ = [
    "EulerPoincareSystem",
    "RigidBody",
    "RigidBodySE3",
    "RigidBodyState",
    "newton_euler_inertia",
]


def _defined_in(cls, name):
    """The class of ``cls``'s MRO that defines the attribute ``name``."""
    return next(k for k in cls.__mro__ if name in k.__dict__)


class EulerPoincareSystem(AbstractLieGroupSystem):
    """Generalized rigid body on any group: ``L = ½ <xi, I xi> − V(g)``.

    Arguments:
        group: a :class:`geomjax.LieGroup` (``SO3``, ``SE3``, ``SO2``, ``SE2``, ``Rn(n)``, ...).
        inertia: ``(dim, dim)`` SPD inertia operator g → g*.
        potential: optional ``V(g) -> scalar`` (a function or a callable ``eqx.Module`` whose array
            fields can be differentiated).
        force: optional external body force ``F(t, g, mu) -> (dim,)`` in g* (a torque on SO(3), a
            wrench ``(torque, force)`` in body coordinates on SE(3)); non-conservative, enters the
            integrators through the (discrete) Lagrange–d'Alembert principle.

    New groups need no new integrator code: every method of geomjax works with this class.
    """

    _group: LieGroup
    inertia: jax.Array
    potential: Callable | None = None
    force: Callable | None = None
    # ``inertia⁻¹``, set only by :meth:`prepared` inside a solver's program (never by a user: a
    # later change of ``inertia`` would not update it)
    inertia_inverse: jax.Array | None = None

    def __init__(
        self,
        group: LieGroup,
        inertia,
        potential: Callable | None = None,
        force: Callable | None = None,
    ):
        where = type(self).__name__
        if not isinstance(group, LieGroup):
            raise ValueError(f"{where}: argument 'group' must be a geomjax LieGroup, got {group!r}")
        self._group = group
        self.inertia = check_spd(inertia, "inertia", where, group.dim)
        # traced, not run: the shape of the identity is enough (nothing compiled)
        example = jax.ShapeDtypeStruct(tuple(group.element_shape), self.inertia.dtype)
        self.potential = check_potential(potential, example, "potential", where)
        if force is not None and not callable(force):
            raise ValueError(
                f"{where}: argument 'force' must be callable (t, g, mu) -> (dim,), got {type(force)}"
            )
        self.force = force
        self.inertia_inverse = None

    def prepared(self):
        """This system with ``inertia⁻¹`` computed once (see :meth:`AbstractSystem.prepared`)."""
        if self.inertia_inverse is not None:
            return self
        inverse = spd_inverse(self.inertia)
        return eqx.tree_at(lambda s: s.inertia_inverse, self, inverse, is_leaf=lambda x: x is None)

    @property
    def group(self) -> LieGroup:
        return self._group

    @property
    def has_potential(self) -> bool:
        return self.potential is not None

    def inertia_matrix(self):
        return self.inertia

    def potential_energy(self, g):
        if self.potential is None:
            return jnp.zeros((), dtype=jnp.result_type(g))
        return self.potential(g)

    def closed_form_potential_force(self):
        # the potential's own -dV (geomjax.systems.potentials), unless a subclass computes its
        # potential energy otherwise, or the potential's class overrides __call__ below the
        # class that gives the closed form (which then belongs to another potential)
        if type(self).potential_energy is not EulerPoincareSystem.potential_energy:
            return None
        closed = getattr(self.potential, "potential_force", None)
        if closed is None or not callable(closed):
            return None
        cls = type(self.potential)
        if not issubclass(_defined_in(cls, "potential_force"), _defined_in(cls, "__call__")):
            return None
        return closed


class RigidBodyState(eqx.Module):
    """State of a rigid body on SO(3): attitude ``R`` ``(3, 3)`` (body → space) and body angular
    momentum ``Pi`` ``(3,)``; body angular velocity ``Omega = I^{-1} Pi``, ``dR/dt = R hat(Omega)``."""

    R: jax.Array
    Pi: jax.Array

    @property
    def g(self):
        return self.R

    @property
    def mu(self):
        return self.Pi


def _inertia3(inertia, where):
    I = jnp.asarray(inertia) if is_traced(inertia) else np.asarray(inertia)
    if not jnp.issubdtype(I.dtype, jnp.inexact):
        I = I.astype(jnp.result_type(float))
    if I.shape == (3,):
        check_finite(I, "inertia", where)
        if not is_traced(I) and bool(np.any(np.asarray(I) <= 0)):
            raise ValueError(
                f"{where}: argument 'inertia' (principal moments) must be positive, got {I}"
            )
        I = np.diag(np.asarray(I)) if not is_traced(I) else jnp.diag(I)
    elif I.shape != (3, 3):
        raise ValueError(
            f"{where}: argument 'inertia' must be principal moments (3,) or an SPD (3, 3) matrix, got shape {I.shape}"
        )
    return check_spd(I, "inertia", where, 3)


class RigidBody(EulerPoincareSystem):
    """A rigid body on SO(3) with an optional potential (heavy top, 3D pendulum, gravity gradient).

    Arguments:
        inertia: principal moments ``(3,)`` or an SPD ``(3, 3)`` body inertia tensor.
        potential: optional ``V(R) -> scalar``; its torque ``-dV`` comes from autodiff (see
            :mod:`geomjax.systems.potentials`).
        generalized: ``False`` (default) warns (``UserWarning``) when the principal moments
            violate the triangle inequality ``I_i + I_j ≥ I_k``, which every body of non-negative
            mass density satisfies (equality: a planar lamina; checked to ``1e3 · eps``
            relative) — usually a typo.  Pass ``True`` for a *generalized* rigid body (any SPD
            inertia, e.g. a model reduction) to silence it.

    State: :class:`RigidBodyState` ``(R, Pi)``.  Equations (Euler):
    ``dR/dt = R hat(Omega)``, ``dPi/dt = Pi × Omega + M(R) + u``.
    """

    state_type: ClassVar[type] = RigidBodyState
    principal_axes: bool = eqx.field(static=True, default=False)

    def __init__(
        self,
        inertia,
        potential: Callable | None = None,
        force: Callable | None = None,
        *,
        generalized: bool = False,
    ):
        # principal moments given: the body frame is the principal frame (static fast paths)
        self.principal_axes = np.shape(inertia) == (3,)
        I = _inertia3(inertia, "RigidBody")
        if not generalized and not is_traced(I):
            _warn_triangle(np.asarray(I))
        super().__init__(SO3, I, potential, force)

    def casimirs(self, state):
        return {"norm_Pi_sq": jnp.sum(state.Pi**2)}

    def angular_velocity(self, state):
        return self.velocity(state.Pi)


def _warn_triangle(I: np.ndarray) -> None:
    """``UserWarning`` if the principal moments violate ``I_1 + I_2 ≥ I_3`` (sorted)."""
    m = np.sort(np.linalg.eigvalsh(0.5 * (I + I.T)))
    if m[0] + m[1] < m[2] * (1.0 - 1e3 * np.finfo(I.dtype).eps):
        warn(
            f"RigidBody: argument 'inertia' has principal moments {np.array2string(m, precision=4)}"
            f" violating the triangle inequality I_1 + I_2 ≥ I_3 ({m[0] + m[1]:.4g} < "
            f"{m[2]:.4g}): no body of non-negative mass density has them.  Pass "
            "generalized=True for a generalized rigid body to silence this warning.",
        )


def newton_euler_inertia(mass, inertia_com, com=None):
    """The objective 6×6 SE(3) inertia in ``(omega, v)`` order (Chevallier):

        H = [[I_c + m(|c|² 1 − c c^T), m hat(c)], [m hat(c)^T, m 1]]

    for mass ``m``, inertia ``I_c`` about the centre of mass and centre of mass ``c`` in the body
    frame (the body origin need not be the centre of mass)."""
    m = jnp.asarray(mass, dtype=jnp.result_type(float))
    Ic = _inertia3(inertia_com, "newton_euler_inertia")
    c = jnp.zeros(3, Ic.dtype) if com is None else jnp.asarray(com, Ic.dtype)
    C = hat3(c)
    top = jnp.concatenate([Ic + m * (jnp.dot(c, c) * jnp.eye(3) - jnp.outer(c, c)), m * C], 1)
    bottom = jnp.concatenate([m * C.T, m * jnp.eye(3)], 1)
    return jnp.concatenate([top, bottom], 0)


class RigidBodySE3(EulerPoincareSystem):
    """A full rigid body on SE(3): pose ``g = [[R, x], [0, 1]]`` and body twist ``(omega, v)``.

    Build it either from Newton–Euler data (``mass``, ``inertia`` about the centre of mass,
    optional ``com`` offset in the body frame) or from a general 6×6 SPD generalized inertia
    ``inertia6`` (Kirchhoff's equations for a body in an ideal fluid with added mass — valid in the
    frame where the fluid is at rest).  ``potential(g)`` couples rotation and translation, e.g.
    gravity on an offset centre of mass or buoyancy.

    State: :class:`geomjax.systems.LieGroupState` ``(g, mu)`` with ``g`` ``(4, 4)`` and
    ``mu = (pi, p)`` ``(6,)``: body angular momentum about the body origin and body linear
    momentum.  Equations (Kirchhoff): ``pi' = pi × omega + p × v + tau``, ``p' = p × omega + f``.
    """

    state_type: ClassVar[type] = LieGroupState

    def __init__(
        self, mass=None, inertia=None, com=None, *, inertia6=None, potential=None, force=None
    ):
        if inertia6 is not None:
            if mass is not None or inertia is not None or com is not None:
                raise ValueError(
                    "RigidBodySE3: give either 'inertia6' or ('mass', 'inertia', 'com'), not both"
                )
            H = inertia6
        else:
            if mass is None or inertia is None:
                raise ValueError(
                    "RigidBodySE3: arguments 'mass' and 'inertia' are required without 'inertia6'"
                )
            m = jnp.asarray(mass, dtype=jnp.result_type(float))
            if m.shape != ():
                raise ValueError(
                    f"RigidBodySE3: argument 'mass' must be a scalar, got shape {m.shape}"
                )
            if not is_traced(m) and not bool(np.asarray(m) > 0):
                raise ValueError(f"RigidBodySE3: argument 'mass' must be positive, got {float(m)}")
            H = newton_euler_inertia(m, inertia, com)
        super().__init__(SE3, check_spd(H, "inertia6", "RigidBodySE3", 6), potential, force)

    def casimirs(self, state):
        pi, p = state.mu[:3], state.mu[3:]
        return {"p_dot_p": jnp.dot(p, p), "pi_dot_p": jnp.dot(pi, p)}

    def position(self, state):
        return state.g[..., :3, 3]

    def attitude(self, state):
        return state.g[..., :3, :3]
