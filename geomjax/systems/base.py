"""Abstract mechanical systems and the small state pytrees integrators carry.

A *system* is an :class:`equinox.Module` holding the physical parameters (arrays, so they can be
differentiated) and the model functions (potentials, forces).  An integrator (*method*) is a
separate module; :func:`geomjax.simulate` combines the two.  A system never integrates itself.
"""

from __future__ import annotations

import abc
from typing import ClassVar

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from .._internal.eager import known_value
from .._internal.tracing import is_traced
from .._linalg import (
    degeneracy_tol,
    describe_degeneracy,
    is_degenerate,
    pivot_ratio_numpy,
    spd_inverse,
)
from ..lie.base import LieGroup, check_shape

__all__ = [
    "AbstractLieGroupSystem",
    "AbstractSystem",
    "LieGroupState",
    "check_finite",
    "check_potential",
    "check_spd",
]


def check_finite(x, name: str, where: str):
    """Raise ``ValueError`` (eager) / ``EquinoxRuntimeError`` (jit) if ``x`` has NaN or inf."""
    if not is_traced(x) and not isinstance(x, jax.Array):
        x = jax.device_put(np.asarray(x))  # jnp.asarray would compile a conversion per shape
    x = jnp.asarray(x)
    msg = f"{where}: argument '{name}' must be finite (found NaN or inf)"
    x_known = known_value(x)  # also the primal value under an eager grad/jvp
    if x_known is None:
        return eqx.error_if(x, ~jnp.all(jnp.isfinite(x)), msg)
    if not np.all(np.isfinite(np.asarray(x_known))):  # eagerly in NumPy: no compile per shape
        raise ValueError(msg)
    return x


def check_spd(M, name: str, where: str, n: int | None = None):
    """Validate a symmetric positive definite ``(n, n)`` matrix.

    Eagerly: ``ValueError`` naming the argument for a wrong shape, asymmetry, non-finite entries
    or degeneracy: the pivot ratio ``ρ = min L_ii²/M_ii`` of the Cholesky factor not above
    ``100·n·eps`` (the same decision on every machine, and
    scale invariant: an inertia × 1e-12 is as good as the inertia).  Traced (e.g. when a system is built inside a jitted loss): the
    same conditions compiled with :func:`equinox.error_if`.
    """
    M_known = known_value(M)  # also the primal value under an eager grad/jvp
    if M_known is not None:  # concrete: in NumPy, compiling nothing (first call of a process)
        A = np.asarray(M_known)
        if not np.issubdtype(A.dtype, np.inexact):
            A = A.astype(jnp.result_type(float))
        _check_square(A, name, where, n)
        with np.errstate(invalid="ignore"):
            asym = np.max(np.abs(A - A.T)) > 1e-10 * np.max(np.abs(A))
            finite = bool(np.all(np.isfinite(A)))
            rho = pivot_ratio_numpy(0.5 * (A + A.T)) if finite else float("nan")
        if asym or not finite or not rho > degeneracy_tol(A.shape[-1], A.dtype):
            msg = f"{where}: argument '{name}' must be symmetric positive definite and finite"
            what = describe_degeneracy(0.5 * (A + A.T))
            raise ValueError(f"{msg}; {what}; asymmetry {float(np.max(np.abs(A - A.T))):.2e}")
        if not is_traced(M):
            return jax.device_put(A)  # (jnp.asarray would compile a conversion per shape)
        M = jnp.asarray(M)  # a differentiated tracer stays one
        return M if jnp.issubdtype(M.dtype, jnp.inexact) else M.astype(A.dtype)
    M = jnp.asarray(M)
    if not jnp.issubdtype(M.dtype, jnp.inexact):
        M = M.astype(jnp.result_type(float))
    _check_square(M, name, where, n)
    scale = jnp.max(jnp.abs(M))
    asym = jnp.max(jnp.abs(M - M.T)) > 1e-10 * scale
    not_pd = is_degenerate(0.5 * (M + M.T))
    bad = asym | not_pd | ~jnp.all(jnp.isfinite(M))
    msg = f"{where}: argument '{name}' must be symmetric positive definite and finite"
    if is_traced(bad):
        return eqx.error_if(M, bad, msg)
    if bool(bad):
        what = describe_degeneracy(0.5 * (M + M.T))
        raise ValueError(f"{msg}; {what}; asymmetry {float(jnp.max(jnp.abs(M - M.T))):.2e}")
    return M


def _check_square(M, name, where, n):
    if M.ndim != 2 or M.shape[0] != M.shape[1] or (n is not None and M.shape[0] != n):
        want = f"({n}, {n})" if n is not None else "(n, n)"
        raise ValueError(
            f"{where}: argument '{name}' must be a {want} SPD matrix, got shape {M.shape}"
        )


def check_potential(potential, example, name: str, where: str):
    """Check that ``potential(example)`` traces and returns a scalar (without running it)."""
    if potential is None:
        return None
    if not callable(potential):
        raise ValueError(
            f"{where}: argument '{name}' must be callable (g -> scalar), got {type(potential)}"
        )
    try:
        out = jax.eval_shape(potential, example)
    except Exception as e:
        raise ValueError(
            f"{where}: argument '{name}' must be a function of one group element of shape "
            f"{tuple(example.shape)} returning a scalar; calling it failed with {type(e).__name__}: {e}"
        ) from e
    if not (hasattr(out, "shape") and out.shape == ()):
        shape = getattr(out, "shape", type(out))
        raise ValueError(f"{where}: argument '{name}' must return a scalar, got {shape}")
    return potential


class LieGroupState(eqx.Module):
    """State of a system on a Lie group: configuration ``g`` and *body* momentum ``mu``.

    ``g``: ``group.element_shape`` (e.g. ``(4, 4)`` on SE(3)); ``mu``: ``(dim,)`` in the dual of the
    Lie algebra, left-trivialized (``mu = I xi`` with ``xi = g^{-1} dg/dt``).  On SE(3) ``mu = (pi, p)``:
    body angular momentum about the body origin, then body linear momentum.
    """

    g: jax.Array
    mu: jax.Array


class AbstractSystem(eqx.Module):
    """A mechanical system: parameters and model functions, no integration logic."""

    @abc.abstractmethod
    def energy(self, state) -> jax.Array:
        """Total energy of ``state`` (conserved by the continuous flow when there are no forces)."""

    def prepared(self) -> AbstractSystem:
        """This system with its state-independent quantities computed once (e.g. the inverse of
        the inertia), for a program that evaluates the model many times.

        The solvers call it at the top of their traced program: otherwise each traced copy of a
        step, a cost or a linearization would carry its own copy of that algebra (for the
        quadrotor's iLQR, the 6×6 inverse inertia was a third of the program).  The result is
        equal in every method; only inside that program, never stored: a later change of a
        parameter (``equinox.tree_at``) must start from the unprepared system.  Default: the
        system itself."""
        return self


def prepare_systems(tree):
    """``tree`` (any pytree: a problem, a cost, a system) with every :class:`AbstractSystem` in it
    replaced by its :meth:`~AbstractSystem.prepared` form."""

    def prepare(x):
        return x.prepared() if isinstance(x, AbstractSystem) else x

    return jax.tree_util.tree_map(prepare, tree, is_leaf=lambda x: isinstance(x, AbstractSystem))


class AbstractLieGroupSystem(AbstractSystem):
    """A left-invariant mechanical system on a Lie group G (a *generalized rigid body*, Chevallier, *On the foundations of ordinary and generalized rigid body dynamics and the principle of objectivity*).

    ``L(g, xi) = ½ <xi, I xi> − V(g)`` with ``xi = g^{-1} dg/dt``.  Its equations of motion are the
    forced Euler–Poincaré equations (left trivialization):

        dg/dt = g xi,   xi = I^{-1} mu,   dmu/dt = coad(xi, mu) − dV(g) + u,

    where ``dV(g)`` is the *left-trivialized* differential ``<dV, eta> = d/dε V(g exp(ε eta))`` and
    ``u`` a body force (torque / wrench) in g*.  Concrete systems fix the group, the inertia
    operator and the potential.
    """

    state_type: ClassVar[type] = LieGroupState

    @property
    @abc.abstractmethod
    def group(self) -> LieGroup: ...

    @abc.abstractmethod
    def inertia_matrix(self) -> jax.Array:
        """The inertia operator ``I: g -> g*`` as a ``(dim, dim)`` SPD matrix."""

    @abc.abstractmethod
    def potential_energy(self, g) -> jax.Array:
        """``V(g)`` (scalar for one element)."""

    @property
    def has_potential(self) -> bool:
        """Static: False when V ≡ 0 (integrators skip its gradient)."""
        return True

    # --- state helpers --------------------------------------------------------------------
    def make_state(self, g, mu):
        """Build this system's state from a configuration and a body momentum."""
        return self.state_type(g, mu)

    def split(self, state) -> tuple[jax.Array, jax.Array]:
        """``(g, mu)`` of a state."""
        return state.g, state.mu

    def state_from_velocity(self, g, xi):
        """State with body velocity ``xi`` (``mu = I xi``)."""
        xi = jnp.asarray(xi)
        return self.make_state(g, self.inertia_matrix() @ xi)

    def check_state(self, state, name: str = "state0"):
        """Validate shapes, finiteness and group membership of a state (eager or under jit)."""
        g, mu = self.split(state)
        G = self.group
        g_name, mu_name = _state_field_names(state)  # the user's names (R, Pi for a rigid body)
        g = G.check(g, name=f"{name}.{g_name}")
        mu = check_shape(mu, (G.dim,), f"{name}.{mu_name}", type(self).__name__)
        mu = check_finite(mu, f"{name}.{mu_name}", type(self).__name__)
        if g.shape[: g.ndim - len(G.element_shape)] or mu.shape[:-1]:
            raise ValueError(
                f"{type(self).__name__}: '{name}' must be a single state (batch with jax.vmap), "
                f"got {g_name}{tuple(g.shape)} and {mu_name}{tuple(mu.shape)}"
            )
        return self.make_state(g, mu)

    # --- mechanics --------------------------------------------------------------------------
    def velocity(self, mu) -> jax.Array:
        """Body velocity ``xi = I^{-1} mu``.

        Written as ``inv(I) @ mu``: the inverse of the (unbatched, well-conditioned SPD) inertia is
        then shared by a vmapped batch instead of one small LU factorization per batch member
        (the one computed by :meth:`prepared` when there is one)."""
        inverse = getattr(self, "inertia_inverse", None)
        if inverse is None:
            inverse = spd_inverse(self.inertia_matrix())
        return inverse @ mu

    def potential_force(self, g) -> jax.Array:
        """``-dV(g)`` in g*, the left-trivialized force of the potential (torque on SO(3)).

        ``<dV(g), eta> = d/dε V(g exp(ε eta))``, computed from the Euclidean gradient of ``V``
        (:meth:`LieGroup.left_gradient`) — no differentiation through ``exp`` — or in closed form
        where the potential gives one (:meth:`closed_form_potential_force`)."""
        G = self.group
        if not self.has_potential:
            return jnp.zeros((G.dim,), dtype=jnp.result_type(g))
        closed = self.closed_form_potential_force()
        if closed is not None:  # in g's dtype, as the gradient of V with respect to g would be
            return jnp.asarray(closed(g), jnp.result_type(g))
        return -G.left_gradient(g, jax.grad(self.potential_energy)(g))

    def closed_form_potential_force(self):
        """``g -> −dV(g)`` in closed form (left-trivialized), or ``None`` (the default: autodiff,
        :meth:`potential_force`).  Systems whose potential defines ``potential_force`` return it
        (:mod:`geomjax.systems.potentials`)."""
        return None

    def kinetic_energy(self, state) -> jax.Array:
        _, mu = self.split(state)
        return 0.5 * jnp.dot(mu, self.velocity(mu))

    def energy(self, state) -> jax.Array:
        g, _ = self.split(state)
        V = self.potential_energy(g) if self.has_potential else 0.0
        return self.kinetic_energy(state) + V

    def external_force(self, t, g, mu) -> jax.Array | None:
        """Non-conservative body force ``F(t, g, mu)`` in g*, or None (static)."""
        force = getattr(self, "force", None)
        return None if force is None else force(t, g, mu)

    def vector_field(self, t, state, u=None):
        """Right-hand side ``(xi, dmu/dt)`` of the forced Euler–Poincaré equations."""
        g, mu = self.split(state)
        xi = self.velocity(mu)
        dmu = self.group.coad(xi, mu) + self.potential_force(g)
        F = self.external_force(t, g, mu)
        if F is not None:
            dmu = dmu + F
        if u is not None:
            dmu = dmu + u
        return xi, dmu

    def spatial_momentum(self, state) -> jax.Array:
        """Momentum map of the left action, ``Ad_{g^{-1}}^T mu`` (on SO(3): ``R Pi``); conserved
        when the potential and forces are invariant."""
        g, mu = self.split(state)
        G = self.group
        return jnp.swapaxes(G.Ad(G.inverse(g)), -1, -2) @ mu

    def casimirs(self, state) -> dict[str, jax.Array]:
        """Casimir functions of the Lie–Poisson bracket on g* (conserved by the free flow)."""
        return {}

    def diagnostics(self, state) -> dict[str, jax.Array]:
        """Energy, momenta, Casimirs and group defect of one state (``jax.vmap`` for a trajectory)."""
        g, mu = self.split(state)
        out = {
            "energy": self.energy(state),
            "body_momentum": mu,
            "spatial_momentum": self.spatial_momentum(state),
            "group_defect": self.group.defect(g),
        }
        out.update({f"casimir_{k}": v for k, v in self.casimirs(state).items()})
        return out


def _state_field_names(state) -> tuple[str, str]:
    """The names under which ``state`` holds its configuration and momentum, for messages:
    ``("g", "mu")``, or a state's own first two fields (``RigidBodyState``: ``("R", "Pi")``)."""
    fields = list(getattr(type(state), "__dataclass_fields__", {}))
    if ("g" in fields and "mu" in fields) or len(fields) < 2:
        return "g", "mu"
    return fields[0], fields[1]
