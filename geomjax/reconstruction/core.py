"""Base-controlled mechanical systems (Cabrera, *Base-controlled mechanical systems and geometric phases*, §2–§3).

A mechanical system on a principal bundle ``Q → Q/G = B`` whose base (shape) variables follow a
prescribed curve ``c̃(t)``; the group variables ``g(t)`` are induced through conserved momentum,
linear nonholonomic or affine constraints.  Everything the reduced equations need is obtained by
automatic differentiation of what a user knows:

* ``kinetic(q, qdot)``: the kinetic energy ``½ k_q(q̇, q̇)`` (quadratic in ``qdot``, G-invariant);
* ``action(g, q)``: a *left* action of G on Q;
* ``section(b)``: a local section ``B → Q`` (a point of Q over the base point ``b``);
* ``constraint(q, qdot)``: ``(m,)`` values of the constraints, affine in ``qdot``; the distribution
  is ``D_q = {v : constraint(q, v) = 0}`` (None: ``D = TQ``, momentum conservation, §3.1).

``q`` may be any pytree of arrays (e.g. a tuple ``(x, R)`` with ``R`` a 3×3 rotation matrix): the
infinitesimal generator is ``X_Q(q) = d/ds action(exp(s X), q)|₀`` (a JVP), the locked inertia
``I(q)`` is the Hessian of ``X ↦ kinetic(q, X_Q(q))`` and the momentum map
``⟨J(q, v), X⟩ = d/dX kinetic(q, v + X_Q(q))|₀``.

Along a gauge ``d₀(t) = section(c̃(t))`` (optionally moved by a gauge transformation), the physical
motion is ``c(t) = g(t)·d₀(t)`` and, with ``ξ = g⁻¹ġ`` (left trivialization),

    L_{d₀}(ξ, t) = ½⟨I₀(t)ξ, ξ⟩ + ⟨J₀(t), ξ⟩ + K_int(t),   Π := I₀ξ + J₀     (paper §2.3)
    C(t) ξ = r(t)                                     (constraint (7)/(27) in the gauge d₀)
    dΠ/dt = (ad_ξ)ᵀ Π + C(t)ᵀ λ                       (eq. 11: i*_{d₀}[Π̇ + ad*_ξ Π] = 0)

with ``I₀ = I(d₀)``, ``J₀ = J(ḋ₀)``, ``C = ∂_ξ constraint(d₀, ḋ₀ + ξ_Q(d₀))`` and
``r = −constraint(d₀, ḋ₀)``.  ``g^{d₀} = ker C`` is the paper's ``g^q``.  The paper writes
``ad*_ξ := −(ad_ξ)ᵀ``; geomjax's ``coad(ξ, Π) = (ad_ξ)ᵀΠ``, so both read ``Π̇ = coad(ξ, Π)`` on the
constrained directions (on SO(3): ``Π̇ = Π × ξ``).  Hypothesis (H1) ``D + Ver = TQ`` is
``rank C = m`` and is checked.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar

import equinox as eqx
import jax
import jax.numpy as jnp

from .._internal.tracing import any_traced
from ..lie.base import LieGroup
from ..systems.base import LieGroupState, check_finite

__all__ = [
    "BaseControlledSystem",
    "Coefficients",
    "Reconstruction",
    "saddle_solve",
]


def _eval_shape_or_raise(f, args, where, name, expected, verb="calling"):
    """``jax.eval_shape(f, *args)``, or a ``ValueError`` naming argument ``name`` and what was
    expected (the eager input checks of :class:`BaseControlledSystem` and :class:`Reconstruction`)."""
    try:
        return jax.eval_shape(f, *args)
    except Exception as e:
        raise ValueError(
            f"{where}: argument '{name}' must be {expected}; "
            f"{verb} it failed with {type(e).__name__}: {e}"
        ) from e


def _tree_add(a, b):
    return jax.tree_util.tree_map(lambda x, y: x + y, a, b)


def _tree_zeros(a):
    return jax.tree_util.tree_map(jnp.zeros_like, a)


def saddle_solve(I, C, a, b):
    """Solve ``[[I, Cᵀ], [C, 0]] [x; y] = [a; b]`` (``I``: ``(n, n)``, ``C``: ``(m, n)``).

    The Lagrange–d'Alembert saddle-point system: ``x`` the velocity, ``y`` the multipliers.
    Returns ``(x, y)`` with shapes ``(n,)``, ``(m,)``.
    """
    n, m = I.shape[0], C.shape[0]
    if m == 0:
        return jnp.linalg.solve(I, a), jnp.zeros((0,), a.dtype)
    K = jnp.block([[I, C.T], [C, jnp.zeros((m, m), I.dtype)]])
    z = jnp.linalg.solve(K, jnp.concatenate([a, b]))
    return z[:n], z[n:]


class Coefficients(eqx.Module):
    """The gauge quantities along ``d₀(t)`` (paper §2.3, §3.1): ``I0`` ``(n, n)`` locked inertia,
    ``J0`` ``(n,)`` momentum ``J(ḋ₀)``, ``C`` ``(m, n)``, ``r`` ``(m,)`` (constraint ``C ξ = r``)
    and ``K_int`` the kinetic energy of the gauge curve ``½ k(ḋ₀, ḋ₀)``."""

    I0: jax.Array
    J0: jax.Array
    C: jax.Array
    r: jax.Array
    K_int: jax.Array


class BaseControlledSystem(eqx.Module):
    """A G-invariant mechanical system on ``Q`` with controlled base variables (Cabrera, §2.1).

    Arguments:
        group: the structure group G (a :class:`geomjax.lie.LieGroup`).
        kinetic: ``(q, qdot) -> scalar``, the kinetic energy ``½ k_q(q̇, q̇)``, G-invariant.
        action: ``(g, q) -> q``, a left action of G on Q (``g`` as stored by ``group``).
        section: ``(b) -> q`` with ``b`` of shape ``(base_dim,)``: a local section of
            ``Q → Q/G`` (the trivial gauge ``d₀(t) = section(c̃(t))``).
        base_dim: dimension of the base (shape space) B; 0 for ``Q = G``.
        constraint: ``(q, qdot) -> (m,)``, affine in ``qdot``, G-invariant; ``D = {constraint = 0}``.
            None: no constraint (``D = TQ``, conserved momentum).
        potential: ``(q) -> scalar``, a G-invariant potential; it only enters the energy (it is
            constant along the group orbits, so the induced fibre motion does not see it).
        spatial_torque: ``(t, mu) -> (n,)``, an external torque in the *spatial* frame as a
            function of the spatial momentum ``mu`` (e.g. a magnetic dipole, §5.4); None for none.
        name: label used in messages.

    Model functions may be :class:`jax.tree_util.Partial` or :class:`equinox.Module` callables:
    their array leaves are then parameters that ``jax.grad`` differentiates.
    """

    group: LieGroup
    kinetic: Callable
    action: Callable
    section: Callable
    base_dim: int = eqx.field(static=True)
    constraint: Callable | None = None
    potential: Callable | None = None
    spatial_torque: Callable | None = None
    name: str = eqx.field(static=True, default="BaseControlledSystem")

    def __check_init__(self):
        where = "BaseControlledSystem"
        if not isinstance(self.group, LieGroup):
            raise ValueError(f"{where}: argument 'group' must be a geomjax LieGroup")
        for nm in ("kinetic", "action", "section"):
            if not callable(getattr(self, nm)):
                raise ValueError(f"{where}: argument '{nm}' must be callable")
        for nm in ("constraint", "potential", "spatial_torque"):
            f = getattr(self, nm)
            if f is not None and not callable(f):
                raise ValueError(f"{where}: argument '{nm}' must be callable or None")
        if not (isinstance(self.base_dim, int) and self.base_dim >= 0):
            raise ValueError(f"{where}: argument 'base_dim' must be an int >= 0")
        b = jax.ShapeDtypeStruct((self.base_dim,), jnp.result_type(float))
        q = _eval_shape_or_raise(
            self.section,
            (b,),
            where,
            "section",
            f"a map of a base point of shape ({self.base_dim},) to a point of Q",
        )
        k = _eval_shape_or_raise(
            self.kinetic, (q, q), where, "kinetic", "a function (q, qdot) -> scalar"
        )
        if getattr(k, "shape", None) != ():
            raise ValueError(f"{where}: argument 'kinetic' must return a scalar, got {k}")
        g = jax.ShapeDtypeStruct(self.group.element_shape, jnp.result_type(float))
        q2 = _eval_shape_or_raise(self.action, (g, q), where, "action", "a function (g, q) -> q")
        if jax.tree_util.tree_structure(q2) != jax.tree_util.tree_structure(q) or any(
            a.shape != c.shape
            for a, c in zip(jax.tree_util.tree_leaves(q2), jax.tree_util.tree_leaves(q))
        ):
            raise ValueError(f"{where}: argument 'action' must return a point shaped like q")
        if self.constraint is not None:
            c = _eval_shape_or_raise(
                self.constraint, (q, q), where, "constraint", "a function (q, qdot) -> (m,)"
            )
            if len(getattr(c, "shape", (0, 0))) != 1 or c.shape[0] > self.group.dim:
                raise ValueError(
                    f"{where}: argument 'constraint' must return shape (m,) with "
                    f"m <= dim G = {self.group.dim}, got {getattr(c, 'shape', c)}"
                )

    # --- kinematics by autodiff ------------------------------------------------------------
    @property
    def dim(self) -> int:
        return self.group.dim

    @property
    def n_constraints(self) -> int:
        if self.constraint is None:
            return 0
        b = jax.ShapeDtypeStruct((self.base_dim,), jnp.result_type(float))
        q = jax.eval_shape(self.section, b)
        return jax.eval_shape(self.constraint, q, q).shape[0]

    def generator(self, q, xi):
        """Infinitesimal generator ``ξ_Q(q) = d/ds action(exp(s ξ), q)|₀`` (a tangent at ``q``).

        For groups stored as matrices the tangent of ``exp(sξ)`` at ``s = 0`` is ``hat(ξ)``, so
        the JVP is taken at the identity without differentiating ``exp``."""
        G = self.group
        xi = jnp.asarray(xi)
        if tuple(G.element_shape) == (G.matrix_dim, G.matrix_dim):
            e = G.identity(dtype=xi.dtype)
            return jax.jvp(lambda g: self.action(g, q), (e,), (G.hat(xi),))[1]
        zero = jnp.zeros_like(xi)
        return jax.jvp(lambda x: self.action(G.exp(x), q), (zero,), (xi,))[1]

    def generators(self, q):
        """The generators of the basis of g, stacked on a leading axis of length ``n``."""
        dt = jnp.result_type(*jax.tree_util.tree_leaves(q))
        return jax.vmap(lambda x: self.generator(q, x))(jnp.eye(self.dim, dtype=dt))

    # The kinetic energy is a quadratic form in the velocity, so its polar form
    # B(u, w) = K(u + w) − K(u) − K(w) is exact: locked inertia and momentum map need kinetic
    # energy evaluations only (no second-order autodiff, hence small programs to compile).
    def _polar(self, q, u, w):
        return self.kinetic(q, _tree_add(u, w)) - self.kinetic(q, u) - self.kinetic(q, w)

    def locked_inertia(self, q) -> jax.Array:
        """Locked inertia ``I(q)``: ``⟨I(q)X, Y⟩ = k_q(X_Q, Y_Q)``, ``(n, n)``."""
        X = self.generators(q)
        row = lambda u: jax.vmap(lambda w: self._polar(q, u, w))(X)  # noqa: E731
        I = jax.vmap(row)(X)
        return 0.5 * (I + I.T)

    def momentum_map(self, q, v) -> jax.Array:
        """Momentum map ``J(q, v) ∈ g*`` (left-invariant form at ``q``):
        ``⟨J, X⟩ = k_q(v, X_Q(q))``, ``(n,)``.  Along ``c = g·d₀`` the spatial momentum is
        ``Ad_{g⁻¹}ᵀ J(d₀, ḋ₀ + ξ_Q(d₀))``."""
        return jax.vmap(lambda w: self._polar(q, v, w))(self.generators(q))

    def constraint_terms(self, q, v):
        """``(C, r)`` at ``(q, v)``: ``constraint(q, v + ξ_Q(q)) = 0 ⇔ C ξ = r``;
        ``C`` ``(m, n)``, ``r`` ``(m,)`` (exact differences: the constraint is affine in v)."""
        dt = jnp.result_type(*jax.tree_util.tree_leaves(q))
        if self.constraint is None:
            return jnp.zeros((0, self.dim), dt), jnp.zeros((0,), dt)
        c0 = self.constraint(q, v)
        cz = self.constraint(q, _tree_zeros(q))
        C = jax.vmap(lambda w: self.constraint(q, w) - cz)(self.generators(q)).T
        return C, -c0

    def h1_singular_values(self, q) -> jax.Array:
        """Singular values ``(m,)`` of ``C(q)``, the constraints restricted to the vertical
        directions; (H1) ``D + Ver = TQ`` holds iff the smallest is nonzero."""
        C, _ = self.constraint_terms(q, _tree_zeros(q))
        if C.shape[0] == 0:
            return jnp.ones((0,), C.dtype)
        return jnp.linalg.svd(C, compute_uv=False)

    def check_h1(self, q, name: str = "constraint"):
        """Hypothesis (H1) ``D + Ver = TQ`` at ``q``: ``ValueError`` (eager) if it fails."""
        s = eqx.filter_jit(self.h1_singular_values)(q)
        if not any_traced(s):
            self._raise_h1(s, name)

    def _raise_h1(self, s, name, tol: float = 1e-9):
        if s.shape[0] == 0:
            return
        if not bool(jnp.all(jnp.isfinite(s))) or float(s[-1]) <= tol * max(float(s[0]), 1e-300):
            raise ValueError(
                f"{self.name}: argument '{name}' violates hypothesis (H1) D + Ver = TQ: the "
                f"{s.shape[0]} constraints restricted to the group directions have singular "
                f"values {s} (rank deficient), so they also constrain the base variables"
            )

    def connection(self, q, v) -> jax.Array:
        """The principal connection ``𝒜_q(v) ∈ g`` defined by D and the metric (the
        nonholonomic connection of Bloch–Krishnaprasad–Marsden–Murray; the mechanical connection
        ``I⁻¹J`` when ``D = TQ``; the kinematic one when ``g^q = 0``).

        Horizontal space ``H_q = {w ∈ D_q^lin : ⟨J(w), X⟩ = 0 ∀X ∈ g^q}``; ``𝒜(X_Q) = X``;
        ``v − 𝒜(v)_Q ∈ H_q``.  Only the linear part of an affine constraint enters.
        """
        I = self.locked_inertia(q)
        C, r0 = self.constraint_terms(q, _tree_zeros(q))
        _, rv = self.constraint_terms(q, v)
        xi, _ = saddle_solve(I, C, -self.momentum_map(q, v), rv - r0)
        return -xi

    def local_connection(self, b) -> jax.Array:
        """Local form ``A(b) = 𝒜(d section(b))`` of the connection on the base: ``(n, base_dim)``."""
        return _compiled_local_connection(self, jnp.asarray(b))

    def curvature(self, b) -> jax.Array:
        """Local curvature ``F_ij = ∂_i A_j − ∂_j A_i − [A_i, A_j]`` of :meth:`connection` at the
        base point ``b``, ``(n, base_dim, base_dim)``.

        Sign convention (Bloch, *Nonholonomic Mechanics and Control*, ``B = dA − [A, A]``): the
        horizontal lift ``ġ = −g A(ḃ)`` of a small loop enclosing the oriented area ``a`` in the
        ``(i, j)`` coordinate plane has holonomy ``exp(−F_ij a) + O(a^{3/2})`` (tested).
        """
        return _compiled_curvature(self, jnp.asarray(b))

    def energy(self, q, v) -> jax.Array:
        """Total energy ``K + V`` at ``(q, v)`` (not conserved: the controls do work)."""
        V = 0.0 if self.potential is None else self.potential(q)
        return self.kinetic(q, v) + V


def _local_connection(system, b):
    def col(e):
        q, dq = jax.jvp(system.section, (b,), (e,))
        return system.connection(q, dq)

    return jax.vmap(col, out_axes=1)(jnp.eye(system.base_dim, dtype=b.dtype))


def _curvature(system, b):
    # through the method (a subclass may override it; the compiled call is inlined here)
    A = system.local_connection(b)
    dA = jax.jacfwd(system.local_connection)(b)  # (n, i, j) = ∂_j A_i
    G = system.group
    br = jax.vmap(jax.vmap(lambda x, y: G.ad(x) @ y, (None, 1)), (1, None))(A, A)  # (i,j,n)
    curl = jnp.swapaxes(dA, 1, 2) - dA  # ∂_i A_j − ∂_j A_i
    return curl - jnp.moveaxis(br, 2, 0)


# One compiled program each (cached per system structure; inlined when called under a trace):
# evaluated op by op, a process's first call compiled ~100 one-op programs (deforming_body:
# local_connection 3.8 s, curvature 7.9 s; compiled 0.85 s).
_compiled_local_connection = eqx.filter_jit(_local_connection)
_compiled_curvature = eqx.filter_jit(_curvature)


def _curve_index_checked(curve, params, t):
    """``curve(params, t)`` with out-of-bounds indexing reported (``(checkify error, point)``):
    JAX clamps indices, so a ``params`` array too short for the curve would silently repeat its
    last entry."""
    from jax.experimental import checkify

    t = jnp.asarray(t, jnp.result_type(float))
    return checkify.checkify(
        lambda p: jnp.asarray(_call_curve(curve, p, t)), errors=checkify.index_checks
    )(params)


@eqx.filter_jit
def _check_indices(curve, params, t):
    return _curve_index_checked(curve, params, t)[0]


def _is_concrete_dtype_tree(x) -> bool:
    return all(hasattr(leaf, "dtype") for leaf in jax.tree_util.tree_leaves(x))


@eqx.filter_jit
def _check_values(recon):
    """The base point (indexing into ``params`` checked, :func:`_curve_index_checked`) and the
    constraint's singular values at ``t_check``."""
    t = jnp.asarray(recon.t_check, jnp.result_type(float))
    index_error, b = _curve_index_checked(recon.base_curve, recon.params, t)
    return b, recon.system.h1_singular_values(recon.gauge_point(t)), index_error


@eqx.filter_jit
def _state(recon, g0, momentum, t, spatial):
    G = recon.group
    co = recon.coefficients(t)
    g0 = G.identity(dtype=co.I0.dtype) if g0 is None else jnp.asarray(g0, co.I0.dtype)
    if momentum is None:
        xi = recon.lift_velocity(t, co)
    else:
        m = jnp.asarray(momentum, co.I0.dtype)
        if spatial:
            m = jnp.swapaxes(G.Ad(g0), -1, -2) @ m
        xi = recon.velocity(m, t, co)
    return LieGroupState(g0, co.I0 @ xi + co.J0)


def _time(t):
    t = jnp.asarray(t)
    return t if jnp.issubdtype(t.dtype, jnp.inexact) else t.astype(jnp.result_type(float))


def _check_curve_arity(curve, params, where, name):
    """A curve ``(params, t) -> b`` given without ``params``: say to pass ``params=`` (tracing
    would fail with "missing argument 't'")."""
    import inspect

    try:
        sig = inspect.signature(curve)
    except (TypeError, ValueError):  # builtins, some callables: leave it to tracing
        return
    kinds = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    ps = list(sig.parameters.values())
    if any(p.kind is inspect.Parameter.VAR_POSITIONAL for p in ps):
        return
    required = sum(p.kind in kinds and p.default is inspect.Parameter.empty for p in ps)
    if params is None and required >= 2:
        raise ValueError(
            f"{where}: argument '{name}' takes (params, t); pass its parameters with params=..."
        )


def _call_curve(curve, params, t):
    return curve(t) if params is None else curve(params, t)


class Reconstruction(eqx.Module):
    """The reconstruction problem for ``g(t)`` given a base curve: a system for
    :func:`geomjax.simulate` with state :class:`geomjax.LieGroupState` ``(g, mu)`` on ``G × g*``,
    ``mu`` the body momentum ``Π = I₀ξ + J₀`` (paper eq. 21) and the physical motion
    ``c(t) = g(t)·d₀(t)``.

    Arguments:
        system: a :class:`BaseControlledSystem`.
        base_curve: the controlled base curve ``c̃``: ``t -> (base_dim,)`` or, when ``params`` is
            given, ``(params, t) -> (base_dim,)``.  Any jittable function: everything downstream
            is differentiable with respect to ``params``.
        params: pytree of curve parameters (or None).
        gauge: optional gauge transformation ``t -> group element``: the gauge curve is
            ``d₀(t) = gauge(t)·section(c̃(t))`` (the physical motion does not depend on it).
        t_check: time at which the base curve is evaluated for the eager checks.
    """

    system: BaseControlledSystem
    base_curve: Callable
    params: Any = None
    gauge: Callable | None = None
    t_check: float = eqx.field(static=True, default=0.0)

    time_aware: ClassVar[bool] = True
    state_type: ClassVar[type] = LieGroupState

    def __check_init__(self):
        where = "Reconstruction"
        if not isinstance(self.system, BaseControlledSystem):
            raise ValueError(f"{where}: argument 'system' must be a BaseControlledSystem")
        if not callable(self.base_curve):
            raise ValueError(f"{where}: argument 'base_curve' must be callable")
        nb = self.system.base_dim
        _check_curve_arity(self.base_curve, self.params, where, "base_curve")
        t = jax.ShapeDtypeStruct((), jnp.result_type(float))
        sig = "t" if self.params is None else "(params, t)"
        out = _eval_shape_or_raise(
            lambda p, s: _call_curve(self.base_curve, p, s),
            (self.params, t),
            where,
            "base_curve",
            f"a jittable function {sig} -> ({nb},) array",
            verb="tracing",
        )
        if getattr(out, "shape", None) != (nb,):
            raise ValueError(
                f"{where}: argument 'base_curve' must return shape ({nb},) (the base "
                f"dimension of {self.system.name}), got {getattr(out, 'shape', type(out))}"
            )
        if self.gauge is not None:
            gs = _eval_shape_or_raise(
                self.gauge,
                (t,),
                where,
                "gauge",
                "a jittable function t -> group element",
                "tracing",
            )
            if getattr(gs, "shape", None) != tuple(self.system.group.element_shape):
                raise ValueError(
                    f"{where}: argument 'gauge' must return a group element of shape "
                    f"{self.system.group.element_shape}, got {getattr(gs, 'shape', gs)}"
                )
        if any_traced(self.params) and _is_concrete_dtype_tree(self.params):
            # under jit/vmap: out-of-bounds indices do not depend on the values (static indices
            # into a params array too short): check the curve on zeros of the same shapes
            zeros = jax.tree_util.tree_map(lambda x: jnp.zeros(jnp.shape(x), x.dtype), self.params)
            index_error = _check_indices(self.base_curve, zeros, self.t_check)
            if index_error.get() is not None:
                raise ValueError(
                    f"{where}: argument 'base_curve' indexes out of bounds (is argument 'params' "
                    f"too short for it?): {index_error.get().strip()}"
                )
        if not any_traced(self.params):
            # one compiled evaluation (op-by-op autodiff would dominate the construction time)
            b, s, index_error = _check_values(self)
            if index_error.get() is not None:
                raise ValueError(
                    f"{where}: argument 'base_curve' indexes out of bounds at t={self.t_check}"
                    + (
                        " (is argument 'params' too short for it?)"
                        if self.params is not None
                        else ""
                    )
                    + f": {index_error.get().strip()}"
                )
            if not bool(jnp.all(jnp.isfinite(b))):
                raise ValueError(
                    f"{where}: argument 'base_curve' returned non-finite values at t={self.t_check}"
                )
            self.system._raise_h1(s, "constraint")

    # --- the gauge curve ---------------------------------------------------------------------
    @property
    def group(self) -> LieGroup:
        return self.system.group

    def base(self, t) -> jax.Array:
        """The base point ``c̃(t)``, ``(base_dim,)``."""
        return jnp.asarray(_call_curve(self.base_curve, self.params, t))

    def gauge_point(self, t):
        """``d₀(t)``: the gauge curve in Q."""
        q = self.system.section(self.base(t))
        if self.gauge is not None:
            q = self.system.action(self.gauge(t), q)
        return q

    def gauge_velocity(self, t):
        """``(d₀(t), ḋ₀(t))``."""
        t = _time(t)
        return jax.jvp(self.gauge_point, (t,), (jnp.ones_like(t),))

    def coefficients(self, t) -> Coefficients:
        """Gauge quantities ``I₀(t), J₀(t), C(t), r(t), K_int(t)`` (§2.3, §3.1; autodiff)."""
        S = self.system
        q, v = self.gauge_velocity(t)
        C, r = S.constraint_terms(q, v)
        return Coefficients(
            I0=S.locked_inertia(q), J0=S.momentum_map(q, v), C=C, r=r, K_int=S.kinetic(q, v)
        )

    def coefficient_rates(self, t):
        """``(coefficients(t), d/dt coefficients(t))``."""
        t = _time(t)
        return jax.jvp(self.coefficients, (t,), (jnp.ones_like(t),))

    # --- state -------------------------------------------------------------------------------
    def split(self, state):
        return state.g, state.mu

    def make_state(self, g, mu):
        return LieGroupState(g, mu)

    def velocity(self, mu, t, co: Coefficients | None = None) -> jax.Array:
        """Body velocity ``ξ`` from the body momentum: ``C ξ = r`` and
        ``I₀ξ + J₀ − Π ∈ range Cᵀ`` (only the ``g^{d₀}`` part of ``Π`` is free)."""
        co = self.coefficients(t) if co is None else co
        return saddle_solve(co.I0, co.C, mu - co.J0, co.r)[0]

    def lift_velocity(self, t, co: Coefficients | None = None) -> jax.Array:
        """Body velocity of the zero-momentum (horizontal) lift: ``C ξ = r`` and
        ``⟨I₀ξ + J₀, X⟩ = 0`` for ``X ∈ g^{d₀}`` (``ξ = −𝒜(ḋ₀)`` plus the affine part)."""
        co = self.coefficients(t) if co is None else co
        return saddle_solve(co.I0, co.C, -co.J0, co.r)[0]

    def state(self, g0=None, momentum=None, t=0.0, spatial: bool = False) -> LieGroupState:
        """A consistent initial state at time ``t``.

        ``momentum``: body momentum ``Π`` (or the spatial momentum ``μ = Ad_{g⁻¹}ᵀΠ`` with
        ``spatial=True``); only its ``g^{d₀}`` part is free, the rest is fixed by the
        constraints.  None: zero free momentum (the horizontal lift).  ``g0``: default identity.
        """
        G = self.group
        if momentum is not None and jnp.shape(momentum) != (G.dim,):
            raise ValueError(
                f"Reconstruction.state: argument 'momentum' must have shape ({G.dim},), "
                f"got {jnp.shape(momentum)}"
            )
        if g0 is not None:
            g0 = G.check(jnp.asarray(g0, jnp.result_type(float)), name="g0")
        return _state(self, g0, momentum, jnp.asarray(t, jnp.result_type(float)), bool(spatial))

    def check_state(self, state, name: str = "state0", t=0.0):
        g, mu = self.split(state)
        G = self.group
        g = G.check(g, name=f"{name}.g")
        mu = jnp.asarray(mu)
        if mu.shape != (G.dim,):
            raise ValueError(
                f"Reconstruction: argument '{name}.mu' must have shape ({G.dim},), got {mu.shape}"
            )
        mu = check_finite(mu, f"{name}.mu", "Reconstruction")
        b = check_finite(self.base(jnp.asarray(t, mu.dtype)), "base_curve", "Reconstruction")
        mu = mu + 0.0 * jnp.sum(b)  # ties the (possibly jitted) check to the state
        return LieGroupState(g, mu)

    # --- dynamics ----------------------------------------------------------------------------
    def body_torque(self, t, g, mu) -> jax.Array | None:
        """External torque in the body frame, ``Ad_gᵀ τ_s(t, Ad_{g⁻¹}ᵀΠ)``, or None."""
        if self.system.spatial_torque is None:
            return None
        G = self.group
        mu_s = jnp.swapaxes(G.Ad(G.inverse(g)), -1, -2) @ mu
        return jnp.swapaxes(G.Ad(g), -1, -2) @ self.system.spatial_torque(t, mu_s)

    def vector_field(self, t, state, u=None, rates=None):
        """``(ξ, dΠ/dt)``: ``Π̇ = (ad_ξ)ᵀΠ + τ + Cᵀλ`` with ``λ`` keeping ``Π = I₀ξ + J₀``
        and ``Cξ = r`` (the index-reduced form of eqs. 11 and 7).  ``rates``: precomputed
        :meth:`coefficient_rates` at ``t`` (they depend on the time only)."""
        xi, f, lam, co = self._forces(t, state, u, rates)
        if co.C.shape[0]:
            f = f + co.C.T @ lam
        return xi, f

    def _forces(self, t, state, u=None, rates=None):
        """``(ξ, coad(ξ, Π) + τ + u, λ, coefficients)`` at ``(t, state)`` (``rates``: precomputed
        :meth:`coefficient_rates` at ``t``)."""
        G = self.group
        g, mu = self.split(state)
        co, dco = self.coefficient_rates(t) if rates is None else rates
        xi = self.velocity(mu, t, co)
        f = G.coad(xi, mu)
        tau = self.body_torque(t, g, mu)
        if tau is not None:
            f = f + tau
        if u is not None:
            f = f + u
        lam = jnp.zeros((co.C.shape[0],), mu.dtype)
        if co.C.shape[0]:
            Ii = jnp.linalg.inv(co.I0)
            # d/dt(Cξ) = ṙ with ξ̇ = I₀⁻¹(Π̇ − J̇₀ − İ₀ξ)
            rhs = dco.r - dco.C @ xi - co.C @ Ii @ (f - dco.J0 - dco.I0 @ xi)
            lam = jnp.linalg.solve(co.C @ Ii @ co.C.T, rhs)
        return xi, f, lam, co

    def multiplier(self, t, state, u=None) -> jax.Array:
        """The constraint multipliers ``λ`` ``(m,)`` of ``Π̇ = (ad_ξ)ᵀΠ + τ + Cᵀλ``: ``Cᵀλ`` is
        the body-frame torque of the forces that implement the D-constraints (Cabrera §2.4.1,
        eq. 12: ``Γ_{d₀} ∈ ker i*_{d₀}``); its spatial form ``Ad_{g⁻¹}ᵀ Cᵀλ`` is ``dJ(ċ)/dt`` (less the
        external torque, if any)."""
        return self._forces(t, state, u)[2]

    def configuration(self, state, t):
        """The physical configuration ``c(t) = g·d₀(t)`` in Q."""
        return self.system.action(state.g, self.gauge_point(t))

    def spatial_momentum(self, state) -> jax.Array:
        G = self.group
        return jnp.swapaxes(G.Ad(G.inverse(state.g)), -1, -2) @ state.mu

    def kinetic_energy(self, state, t) -> jax.Array:
        """``K(ċ) = K_int + ½⟨I₀ξ, ξ⟩ + ⟨J₀, ξ⟩`` (App. 6)."""
        co = self.coefficients(t)
        xi = self.velocity(state.mu, t, co)
        return co.K_int + 0.5 * xi @ co.I0 @ xi + co.J0 @ xi

    def energy(self, state, t=0.0) -> jax.Array:
        V = 0.0
        if self.system.potential is not None:
            V = self.system.potential(self.gauge_point(t))
        return self.kinetic_energy(state, t) + V

    def diagnostics(self, state, t) -> dict[str, jax.Array]:
        """Energy, momenta, body velocity, constraint residual ``|Cξ − r|``, ``consistency``
        ``|I₀ξ + J₀ − Π|`` and group defect of one state.  ``consistency`` is 0 for states from
        :meth:`state`, :class:`ReconstructionRKMK4` (to its error) and unconstrained runs; the
        node momentum of :class:`MomentumLGVI` under constraints differs from ``I₀ξ + J₀`` by a
        multiplier term in ``range Cᵀ``, which does not affect ``ξ``."""
        co = self.coefficients(t)
        xi = self.velocity(state.mu, t, co)
        return {
            "energy": self.energy(state, t),
            "body_momentum": state.mu,
            "spatial_momentum": self.spatial_momentum(state),
            "body_velocity": xi,
            "constraint_residual": jnp.linalg.norm(co.C @ xi - co.r)
            if co.C.shape[0]
            else jnp.zeros((), xi.dtype),
            "consistency": jnp.linalg.norm(co.I0 @ xi + co.J0 - state.mu),
            "group_defect": self.group.defect(state.g),
        }
