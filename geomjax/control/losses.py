"""Composable loss terms for trajectory optimization.

Every term is a pure function of arrays; :class:`Loss` wraps a function of the parameters with a
name and a weight, and terms add up (``loss = 1e3 * Loss(reach) + Loss(effort)``) into a
:class:`Loss` whose :meth:`Loss.parts` returns every term separately (for logging).
"""

from __future__ import annotations

from collections.abc import Callable

import equinox as eqx
import jax
import jax.numpy as jnp

from ..lie import LieGroup

__all__ = [
    "Loss",
    "bound_penalty",
    "constraint_penalty",
    "control_effort",
    "group_distance",
    "group_error",
    "loop_closure",
    "path_energy",
    "path_length",
]


def group_error(group: LieGroup, g, g_target) -> jax.Array:
    """``log(g_target⁻¹ g)`` ``(..., dim)``: the left-trivialized error of ``g`` (on SE(3) in the
    ``(omega, v)`` order of :mod:`geomjax.lie`)."""
    if not isinstance(group, LieGroup):
        raise ValueError(f"group_error: argument 'group' must be a LieGroup, got {group!r}")
    return group.log(group.compose(group.inverse(g_target), g))


def group_distance(group: LieGroup, g, g_target, weights=None, squared: bool = True) -> jax.Array:
    """``‖log(g_target⁻¹ g)‖²_W`` (``squared=True``, smooth at the target — use it in losses) or
    ``‖·‖_W`` (the distance: radians on SO(3); for SE(3) the rotation and translation parts mix
    unless ``weights`` ``(dim,)`` separates them)."""
    e = group_error(group, g, g_target)
    if weights is not None:
        e = e * jnp.sqrt(jnp.asarray(weights, e.dtype))
    sq = jnp.sum(e**2, -1)
    return sq if squared else jnp.sqrt(sq)


def control_effort(controls, dt) -> jax.Array:
    """``½ Σ_k |u_k|² dt`` for zero-order-hold controls ``(steps, m)`` (any pytree of such)."""
    leaves = jax.tree_util.tree_leaves(controls)
    return 0.5 * dt * sum(jnp.sum(u**2) for u in leaves)


def path_energy(velocities, dt) -> jax.Array:
    """Base effort ``½ ∫ |ẋ|² dt`` from velocity samples ``(m, n)`` at the midpoints of intervals
    of length ``dt`` (midpoint rule)."""
    return 0.5 * dt * jnp.sum(velocities**2)


def path_length(points, closed: bool = False) -> jax.Array:
    """Polygonal length ``Σ |x_{k+1} − x_k|`` of samples ``(m, n)`` (``closed`` adds the last
    segment back to the first point).  Smoothed at zero-length segments so the gradient is finite."""
    if closed:
        points = jnp.concatenate([points, points[:1]], 0)
    d = jnp.diff(points, axis=0)
    tiny = jnp.finfo(d.dtype).eps
    return jnp.sum(jnp.sqrt(jnp.sum(d**2, -1) + tiny**2))


def loop_closure(points) -> jax.Array:
    """``|x_last − x_first|²`` for samples ``(m, n)`` of a curve meant to be closed."""
    return jnp.sum((points[-1] - points[0]) ** 2)


def bound_penalty(x, lower=None, upper=None) -> jax.Array:
    """``Σ max(0, x − upper)² + max(0, lower − x)²`` (quadratic exterior penalty)."""
    x = jnp.asarray(x)
    p = jnp.zeros((), x.dtype)
    if upper is not None:
        p = p + jnp.sum(jax.nn.relu(x - upper) ** 2)
    if lower is not None:
        p = p + jnp.sum(jax.nn.relu(lower - x) ** 2)
    return p


def constraint_penalty(c) -> jax.Array:
    """``Σ c²`` for equality-constraint residuals ``c`` (any pytree)."""
    return sum(jnp.sum(jnp.asarray(x) ** 2) for x in jax.tree_util.tree_leaves(c))


class Loss(eqx.Module):
    """A weighted sum of named terms, each a function of the same arguments.

    ``Loss(fn, name="reach")`` is one term; ``a * L1 + L2`` combines them.  Calling the loss gives
    the total (a scalar to differentiate); :meth:`parts` gives ``{name: weighted value}``.
    """

    terms: tuple = eqx.field(static=True)
    weights: tuple

    def __init__(self, fn: Callable | tuple, name: str | None = None, weight=1.0):
        if isinstance(fn, tuple):  # internal: (terms, weights)
            self.terms, self.weights = fn
            return
        if not callable(fn):
            raise ValueError(f"Loss: argument 'fn' must be callable, got {type(fn)}")
        self.terms = ((name or getattr(fn, "__name__", "term"), fn),)
        self.weights = (weight,)

    def __add__(self, other):
        if not isinstance(other, Loss):
            return NotImplemented
        return Loss((self.terms + other.terms, self.weights + other.weights))

    def __mul__(self, w):
        return Loss((self.terms, tuple(w * x for x in self.weights)))

    __rmul__ = __mul__

    def parts(self, *args, **kwargs) -> dict:
        return {n: w * f(*args, **kwargs) for (n, f), w in zip(self.terms, self.weights)}

    def __call__(self, *args, **kwargs):
        return sum(self.parts(*args, **kwargs).values())
