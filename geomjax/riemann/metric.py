"""Geometry of a Riemannian metric by automatic differentiation.

A metric is any function ``metric(q) -> (n, n)`` (symmetric positive definite) of a point
``q`` of shape ``(n,)``: the kinetic-energy metric of a mechanical system in generalized
coordinates, the metric induced on a surface, ``J_r(q)^T I J_r(q)`` on a Lie group in
exponential coordinates.  Every function here works at a single point; batch with ``jax.vmap``
(e.g. ``jax.vmap(christoffel, (None, 0))(metric, qs)``) and compose freely with ``jit`` and
``grad``.

Index conventions (all arrays are indexed in the order the symbols are written):

* ``christoffel_first_kind(metric, q)[k, i, j] = Γ_{k,ij}
  = ½ (∂_j g_{ki} + ∂_i g_{kj} − ∂_k g_{ij})``;
* ``christoffel(metric, q)[k, i, j] = Γ^k_{ij} = g^{kl} Γ_{l,ij}``;
* ``riemann_curvature(metric, q)[l, k, i, j] = R^l_{kij}`` with
  ``R(∂_i, ∂_j) ∂_k = R^l_{kij} ∂_l`` and ``R(X, Y) = ∇_X ∇_Y − ∇_Y ∇_X − ∇_{[X, Y]}``, so that a
  round sphere of radius ``a`` has sectional curvature ``+1/a²``.

Newton's law (Modugno–Vitolo, *The geometry of Newton's law and rigid systems*, §2.1, eq. 2.1): ``m g♭(∇ds) = F``, i.e.
``m g_{ij} (q̈^j + Γ^j_{hk} q̇^h q̇^k) = F_i`` with the force a *covector*.  In coordinates this is
the Euler–Lagrange operator of the kinetic energy ``K = ½ m g(q̇, q̇)`` (the "Lagrange formula" of
§2.1.3), which is how :func:`geodesic_acceleration` evaluates ``Γ(v, v)`` without forming the
``n³`` tensor.  Modugno–Vitolo writes ``L = K + U`` with ``F = dU`` in §2; geomjax uses ``L = K − V`` and
``F = −dV`` throughout (as §4.8 of the same paper does).
"""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp

from ..lie._math import as_float
from ._checks import Checker, cho_solve, eager_program

__all__ = [
    "christoffel",
    "christoffel_contract",
    "christoffel_first_kind",
    "covariant_derivative",
    "covariant_derivative_along",
    "euler_lagrange_acceleration",
    "gaussian_curvature",
    "geodesic_acceleration",
    "newton_acceleration",
    "ricci_tensor",
    "riemann_curvature",
    "scalar_curvature",
    "sectional_curvature",
]

Metric = Callable[[jax.Array], jax.Array]


def _metric_value(metric: Metric, q, where: str):
    g = as_float(metric(q))
    n = q.shape[0]
    if tuple(g.shape) != (n, n):
        raise ValueError(
            f"{where}: argument 'metric' must return an ({n}, {n}) matrix for a point q of shape "
            f"({n},), got shape {tuple(g.shape)}"
        )
    return g


def _metric_and_jacobian(metric: Metric, q, where: str):
    """``g(q)`` and ``dg[i, j, k] = ∂_k g_ij`` in one forward-mode pass."""

    def both(x):
        g = _metric_value(metric, x, where)
        return g, g

    dg, g = jax.jacfwd(both, has_aux=True)(q)
    return g, dg


def _first_kind_from_dg(dg):
    # dg[a, b, c] = ∂_c g_ab;  ∂_j g_ki = dg[k, i, j], ∂_i g_kj = dg[k, j, i], ∂_k g_ij = dg[i, j, k]
    return 0.5 * (dg + jnp.swapaxes(dg, 1, 2) - jnp.transpose(dg, (2, 0, 1)))


@eager_program
def christoffel_first_kind(metric: Metric, q) -> jax.Array:
    """Christoffel symbols of the first kind ``Γ_{k,ij}``, shape ``(n, n, n)`` indexed ``[k, i, j]``.

    ``Γ_{k,ij} = ½ (∂_j g_{ki} + ∂_i g_{kj} − ∂_k g_{ij})`` with the derivatives of
    ``metric(q) -> (n, n)`` taken by forward-mode autodiff (``n`` JVPs).
    """
    chk = Checker("christoffel_first_kind")
    q = chk.vector(q, "q")
    _, dg = _metric_and_jacobian(metric, q, chk.where)
    return chk.done(_first_kind_from_dg(dg))


def christoffel_checked(metric: Metric, q, chk: Checker):
    g, dg = _metric_and_jacobian(metric, q, chk.where)
    # g⁻¹ once and an einsum: much faster under vmap than a solve with n² right-hand sides
    return jnp.einsum("kl,lij->kij", chk.inverse(g, "metric(q)"), _first_kind_from_dg(dg))


@eager_program
def christoffel(metric: Metric, q) -> jax.Array:
    """Christoffel symbols of the second kind ``Γ^k_{ij}``, shape ``(n, n, n)`` indexed ``[k, i, j]``.

    ``Γ^k_{ij} = g^{kl} Γ_{l,ij}`` (Levi-Civita connection, symmetric in ``i, j``), from
    ``metric(q) -> (n, n)`` by forward-mode autodiff (``jax.jacfwd``).  The geodesic equation reads
    ``q̈^k + Γ^k_{ij} q̇^i q̇^j = 0``.  Forms the full ``n³`` tensor with ``n`` JVPs of the metric;
    for the contraction ``Γ(v, v)`` alone use :func:`geodesic_acceleration`.

    Raises ``ValueError`` naming ``q`` for a wrong shape or non-finite values, naming ``metric``
    if it returns the wrong shape or a matrix that is not positive definite (under ``jit``: an
    ``EquinoxRuntimeError`` with the same message).
    """
    chk = Checker("christoffel")
    q = chk.vector(q, "q")
    return chk.done(christoffel_checked(metric, q, chk))


def first_kind_contract(metric: Metric, q, u, w, where: str):
    """``g(q)`` and ``b_k = Γ_{k,ij} u^i w^j`` without the ``n³`` tensor.

    ``Γ_{k,ij} u^i w^j = ½ ((∂_w g) u + (∂_u g) w − ∇_q (uᵀ g w))_k``: one linearization of the
    metric, one or two JVPs and one transposed JVP (a VJP).
    """
    g, lin = jax.linearize(lambda x: _metric_value(metric, x, where), q)
    dg_w = lin(w)
    dg_u = dg_w if u is w else lin(u)
    (grad_uw,) = jax.linear_transpose(lin, q)(jnp.outer(u, w).astype(g.dtype))
    return g, 0.5 * (dg_w @ u + dg_u @ w - grad_uw)


@eager_program
def christoffel_contract(metric: Metric, q, u, w) -> jax.Array:
    """``Γ^k_{ij}(q) u^i w^j``, shape ``(n,)``, without forming the ``n³`` tensor.

    Symmetric in ``u, w``.  Uses JVPs/VJPs of the metric (see :func:`geodesic_acceleration`).
    """
    chk = Checker("christoffel_contract")
    q = chk.vector(q, "q")
    n = q.shape[0]
    u = chk.vector(u, "u", n)
    w = chk.vector(w, "w", n)
    g, b = first_kind_contract(metric, q, u, w, chk.where)
    return chk.done(chk.solve(g, b, "metric(q)"))


@eager_program
def geodesic_acceleration(metric: Metric, q, v) -> jax.Array:
    """Geodesic acceleration ``q̈ = −Γ^k_{ij}(q) v^i v^j``, shape ``(n,)``, without the n³ tensor.

    Euler–Lagrange form of ``K = ½ vᵀ g(q) v``: ``g a = −(∂_v g) v + ½ ∇_q (vᵀ g v)`` — one JVP and
    one VJP of ``metric`` and a Cholesky solve, so the cost is a small multiple of one metric
    evaluation (``christoffel`` needs ``n`` JVPs and ``n³`` memory).
    """
    chk = Checker("geodesic_acceleration")
    q = chk.vector(q, "q")
    v = chk.vector(v, "v", q.shape[0])
    g, b = first_kind_contract(metric, q, v, v, chk.where)
    return chk.done(-chk.solve(g, b, "metric(q)"))


@eager_program
def newton_acceleration(metric: Metric, q, v, force=None, mass=1.0) -> jax.Array:
    """Acceleration from Newton's law ``m g♭(∇ds) = F`` (Modugno–Vitolo, eq. 2.1).

    ``q̈ = −Γ(v, v) + g^{-1} F / m`` with ``force`` a covector ``F_i`` of shape ``(n,)`` (``None``:
    free motion, a geodesic) and ``mass`` a positive scalar.  Contraction only (no n³ tensor).
    """
    chk = Checker("newton_acceleration")
    q = chk.vector(q, "q")
    n = q.shape[0]
    v = chk.vector(v, "v", n)
    mass = chk.positive(chk.scalar(mass, "mass"), "mass")
    g, b = first_kind_contract(metric, q, v, v, chk.where)
    rhs = -b if force is None else chk.vector(force, "force", n) / mass - b
    return chk.done(chk.solve(g, rhs, "metric(q)"))


@eager_program
def euler_lagrange_acceleration(lagrangian: Callable, q, v, force=None, t=None) -> jax.Array:
    """``q̈`` solving the forced Euler–Lagrange equations of ``lagrangian`` by autodiff.

    ``d/dt ∂L/∂q̇ − ∂L/∂q = F``:  ``(∂²L/∂q̇²) q̈ = F + ∂L/∂q − (∂²L/∂q̇∂q) q̇ − ∂²L/∂q̇∂t``.

    ``lagrangian(q, v)`` (or ``lagrangian(t, q, v)`` when ``t`` is given, for time-dependent
    systems such as moving constraints) returns a scalar; ``force`` is a covector ``(n,)`` of
    non-conservative generalized forces.  The velocity Hessian must be positive definite
    (mechanical Lagrangians ``K − V``), otherwise a ``ValueError`` naming ``lagrangian`` is raised.
    """
    chk = Checker("euler_lagrange_acceleration")
    q = chk.vector(q, "q")
    n = q.shape[0]
    v = chk.vector(v, "v", n)
    if t is None:
        L = lagrangian
    else:
        t = chk.scalar(t, "t")
        L = lambda q_, v_: lagrangian(t, q_, v_)  # noqa: E731
    p = jax.grad(L, argnums=1)  # momentum ∂L/∂q̇
    H = jax.jacfwd(p, argnums=1)(q, v)
    dLdq = jax.grad(L, argnums=0)(q, v)
    _, mixed = jax.jvp(lambda x: p(x, v), (q,), (v,))
    rhs = dLdq - mixed
    if t is not None:
        _, dpdt = jax.jvp(
            lambda s: jax.grad(lambda v_: lagrangian(s, q, v_))(v), (t,), (jnp.ones_like(t),)
        )
        rhs = rhs - dpdt
    if force is not None:
        rhs = rhs + chk.vector(force, "force", n)
    return chk.done(chk.solve(H, rhs, "lagrangian's velocity Hessian ∂²L/∂q̇²"))


@eager_program
def covariant_derivative(metric: Metric, q, qdot, V, Vdot) -> jax.Array:
    """Covariant derivative ``DV/dt = V̇ + Γ(q̇, V)`` of a vector field ``V(t)`` along ``q(t)``.

    All arguments at one instant, shape ``(n,)``.  ``DV/dt = 0`` is parallel transport; with
    ``V = q̇`` it is the acceleration of Newton's law.
    """
    chk = Checker("covariant_derivative")
    q = chk.vector(q, "q")
    n = q.shape[0]
    qdot = chk.vector(qdot, "qdot", n)
    V = chk.vector(V, "V", n)
    Vdot = chk.vector(Vdot, "Vdot", n)
    g, b = first_kind_contract(metric, q, qdot, V, chk.where)
    return chk.done(Vdot + chk.solve(g, b, "metric(q)"))


def covariant_derivative_along(metric: Metric, curve: Callable, field: Callable, t) -> jax.Array:
    """``DV/dt`` at time ``t`` for a curve ``curve(t) -> (n,)`` and a field ``field(t) -> (n,)``.

    Time derivatives by forward-mode autodiff (one JVP each).
    """
    t = as_float(t)
    one = jnp.ones_like(t)
    q, qdot = jax.jvp(curve, (t,), (one,))
    V, Vdot = jax.jvp(field, (t,), (one,))
    return covariant_derivative(metric, q, qdot, V, Vdot)


def _riemann(metric: Metric, q, chk: Checker):
    where = chk.where

    def gam(x):  # unchecked inside the derivative; g(q) is checked once below
        g, dg = _metric_and_jacobian(metric, x, where)
        ginv = cho_solve(g, jnp.eye(x.shape[0], dtype=g.dtype))
        G = jnp.einsum("kl,lij->kij", ginv, _first_kind_from_dg(dg))
        return G, (G, g)

    dG, (G, g) = jax.jacfwd(gam, has_aux=True)(q)  # dG[l, j, k, i] = ∂_i Γ^l_jk
    chk.solve(g, g[:, 0], "metric(q)")  # positive definiteness of g(q)
    R = (
        jnp.einsum("ljki->lkij", dG)
        - jnp.einsum("likj->lkij", dG)
        + jnp.einsum("lim,mjk->lkij", G, G)
        - jnp.einsum("ljm,mik->lkij", G, G)
    )
    return R, g


@eager_program
def riemann_curvature(metric: Metric, q) -> jax.Array:
    """Riemann tensor ``R^l_{kij}``, shape ``(n, n, n, n)`` indexed ``[l, k, i, j]``.

    ``R^l_{kij} = ∂_i Γ^l_{jk} − ∂_j Γ^l_{ik} + Γ^l_{im} Γ^m_{jk} − Γ^l_{jm} Γ^m_{ik}``, i.e.
    ``R(∂_i, ∂_j)∂_k`` with ``R(X, Y) = ∇_X∇_Y − ∇_Y∇_X − ∇_{[X,Y]}``.  Second derivatives of the
    metric by nested forward mode (``n²`` JVPs); meant for small ``n``.
    """
    chk = Checker("riemann_curvature")
    q = chk.vector(q, "q")
    return chk.done(_riemann(metric, q, chk)[0])


@eager_program
def ricci_tensor(metric: Metric, q) -> jax.Array:
    """Ricci tensor ``Ric_{kj} = R^i_{kij}``, shape ``(n, n)`` (symmetric)."""
    chk = Checker("ricci_tensor")
    q = chk.vector(q, "q")
    return chk.done(jnp.einsum("ikij->kj", _riemann(metric, q, chk)[0]))


@eager_program
def scalar_curvature(metric: Metric, q) -> jax.Array:
    """Scalar curvature ``g^{kj} Ric_{kj}`` (``2/a²`` on a round 2-sphere of radius ``a``)."""
    chk = Checker("scalar_curvature")
    q = chk.vector(q, "q")
    R, g = _riemann(metric, q, chk)
    Ric = jnp.einsum("ikij->kj", R)
    return chk.done(jnp.trace(chk.solve(g, Ric, "metric(q)")))


@eager_program
def sectional_curvature(metric: Metric, q, u, w) -> jax.Array:
    """Sectional curvature ``⟨R(u, w)w, u⟩ / (|u|²|w|² − ⟨u, w⟩²)`` of the plane spanned by u, w."""
    chk = Checker("sectional_curvature")
    q = chk.vector(q, "q")
    n = q.shape[0]
    u = chk.vector(u, "u", n)
    w = chk.vector(w, "w", n)
    R, g = _riemann(metric, q, chk)
    Ruww = jnp.einsum("lkij,k,i,j->l", R, w, u, w)
    area2 = (u @ g @ u) * (w @ g @ w) - (u @ g @ w) ** 2
    return chk.done((u @ g @ Ruww) / area2)


@eager_program
def gaussian_curvature(metric: Metric, q) -> jax.Array:
    """Gaussian curvature of a 2-dimensional metric: ``R_{1212} / det g`` (= scalar curvature / 2)."""
    chk = Checker("gaussian_curvature")
    q = chk.vector(q, "q", 2)
    R, g = _riemann(metric, q, chk)
    R_low = jnp.einsum("lm,mkij->lkij", g, R)  # R_{lkij} = g_lm R^m_kij
    return chk.done(R_low[0, 1, 0, 1] / jnp.linalg.det(g))
