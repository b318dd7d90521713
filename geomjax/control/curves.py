"""Base-curve parametrizations: paths ``s ∈ [0, 1] → x(s)`` and time laws ``t → s``, as equinox
Modules (pytrees of parameters that :func:`geomjax.control.optimize` can optimize).

A path says *where* the base point goes (a closed loop in Rⁿ or on S², an open curve with fixed end
points); a :class:`TimeLaw` says *when* (``s(t)`` monotone from 0 to 1).  :class:`Trajectory`
combines the two over a horizon ``T``.  Keeping them apart lets one optimize the shape of a loop
with a fixed rest-to-rest time law, or the timing of a fixed path.

All paths are evaluated pointwise and are jittable, vmappable and differentiable in their
parameters and in ``s``; velocities come from forward-mode autodiff.
"""

from __future__ import annotations

import abc
import math

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from .._internal.tracing import is_traced

__all__ = [
    "AbstractPath",
    "AbstractTimeLaw",
    "FourierLoop",
    "LinearTimeLaw",
    "OpenCurve",
    "PeriodicSpline",
    "PiecewiseLinearTimeLaw",
    "SmoothStepTimeLaw",
    "SphereLoop",
    "Trajectory",
]


def _as_float(x):
    x = jnp.asarray(x)
    if not jnp.issubdtype(x.dtype, jnp.inexact):
        x = x.astype(jnp.result_type(float))
    return x


class AbstractPath(eqx.Module):
    """A path ``x(s)``, ``s ∈ [0, 1]``, in Rⁿ (or on a submanifold of it).

    Subclasses implement ``__call__(s) -> (n,)`` for a scalar ``s``."""

    @abc.abstractmethod
    def __call__(self, s) -> jax.Array:
        """Point at parameter ``s`` (scalar) → ``(n,)``."""

    def tangent(self, s) -> jax.Array:
        """``dx/ds`` at ``s`` (forward-mode autodiff) → ``(n,)``."""
        s = jnp.asarray(s, self._dtype())
        return jax.jvp(self, (s,), (jnp.ones_like(s),))[1]

    def sample(self, n: int) -> jax.Array:
        """``n`` points at ``s = k/n`` (closed loops) or ``k/(n-1)`` (open curves) → ``(n, dim)``."""
        return jax.vmap(self)(self._grid(n))

    def _grid(self, n):
        return jnp.linspace(0.0, 1.0, n, endpoint=not self.closed, dtype=self._dtype())

    def _dtype(self):
        leaves = [x for x in jax.tree_util.tree_leaves(self) if eqx.is_inexact_array(x)]
        return jnp.result_type(*leaves) if leaves else jnp.result_type(float)

    closed: bool = eqx.field(static=True, default=False, kw_only=True)


class FourierLoop(AbstractPath):
    """Closed loop in Rⁿ: ``x(s) = c + Σ_{k=1..K} a_k cos(2πks) + b_k sin(2πks)``.

    Arguments:
        center: ``(n,)``.
        cos, sin: ``(K, n)`` coefficients.
    """

    center: jax.Array
    cos: jax.Array
    sin: jax.Array

    def __init__(self, center, cos, sin):
        center, cos, sin = _as_float(center), _as_float(cos), _as_float(sin)
        if center.ndim != 1:
            raise ValueError(f"FourierLoop: argument 'center' must be (n,), got {center.shape}")
        n = center.shape[0]
        if cos.ndim != 2 or cos.shape[1] != n or sin.shape != cos.shape:
            raise ValueError(
                f"FourierLoop: arguments 'cos' and 'sin' must both be (K, {n}), got {cos.shape} and {sin.shape}"
            )
        self.center, self.cos, self.sin = center, cos, sin
        self.closed = True

    @classmethod
    def circle(cls, center, radius, modes: int = 1, plane=(0, 1)):
        """A circle of ``radius`` in the coordinate ``plane`` around ``center``, padded with zero
        higher modes up to ``modes``."""
        center = _as_float(center)
        n = center.shape[0]
        cos = jnp.zeros((modes, n), center.dtype).at[0, plane[0]].set(radius)
        sin = jnp.zeros((modes, n), center.dtype).at[0, plane[1]].set(radius)
        return cls(center, cos, sin)

    @classmethod
    def random(cls, key, dim: int, modes: int, scale=1.0, center=None, dtype=None):
        """Random coefficients ``~ N(0, scale²/k²)`` (smooth loops)."""
        dtype = dtype or jnp.result_type(float)
        k1, k2 = jax.random.split(key)
        decay = (1.0 / jnp.arange(1, modes + 1, dtype=dtype))[:, None]
        c = jnp.zeros(dim, dtype) if center is None else _as_float(center).astype(dtype)
        return cls(
            c,
            scale * decay * jax.random.normal(k1, (modes, dim), dtype),
            scale * decay * jax.random.normal(k2, (modes, dim), dtype),
        )

    @property
    def modes(self) -> int:
        return self.cos.shape[0]

    def __call__(self, s):
        k = jnp.arange(1, self.modes + 1, dtype=self.cos.dtype)
        ang = 2 * math.pi * k * s
        return self.center + jnp.cos(ang) @ self.cos + jnp.sin(ang) @ self.sin


class SphereLoop(AbstractPath):
    """Closed loop on the sphere of radius ``radius``: the radial projection of a closed loop in R³,
    ``x(s) = radius · y(s)/|y(s)|`` (contact points, directions).  ``y`` must avoid the origin.

    Arguments:
        loop: a closed :class:`AbstractPath` in R³ (e.g. :class:`FourierLoop`).
        radius: sphere radius (default 1).
    """

    loop: AbstractPath
    radius: jax.Array

    def __init__(self, loop: AbstractPath, radius=1.0):
        if not isinstance(loop, AbstractPath) or not loop.closed:
            raise ValueError("SphereLoop: argument 'loop' must be a closed path (e.g. FourierLoop)")
        self.loop = loop
        self.radius = _as_float(radius)
        self.closed = True

    @classmethod
    def small_circle(cls, pole, angle, modes: int = 1, radius=1.0):
        """The circle at polar ``angle`` around the unit vector ``pole``."""
        p = _as_float(pole)
        p = p / jnp.linalg.norm(p)
        # two unit vectors orthogonal to the pole
        a = jnp.where(jnp.abs(p[0]) < 0.9, jnp.array([1.0, 0, 0]), jnp.array([0, 1.0, 0]))
        e1 = a - jnp.dot(a, p) * p
        e1 = e1 / jnp.linalg.norm(e1)
        e2 = jnp.cross(p, e1)
        r = math.sin(angle)
        cos = jnp.zeros((modes, 3), p.dtype).at[0].set(r * e1)
        sin = jnp.zeros((modes, 3), p.dtype).at[0].set(r * e2)
        return cls(FourierLoop(math.cos(angle) * p, cos, sin), radius)

    def __call__(self, s):
        y = self.loop(s)
        return self.radius * y / jnp.linalg.norm(y)


class PeriodicSpline(AbstractPath):
    """Closed C² interpolating cubic spline through ``knots`` ``(M, n)`` at ``s = k/M``.

    The second derivatives solve the cyclic system ``m_{k-1} + 4 m_k + m_{k+1} = 6 M² (y_{k-1} −
    2 y_k + y_{k+1})`` (uniform knots); it is a small dense solve, differentiable in the knots.
    """

    knots: jax.Array

    def __init__(self, knots):
        knots = _as_float(knots)
        if knots.ndim != 2 or knots.shape[0] < 3:
            raise ValueError(
                f"PeriodicSpline: argument 'knots' must be (M, n) with M >= 3, got {knots.shape}"
            )
        self.knots = knots
        self.closed = True

    def _second_derivatives(self):
        y = self.knots
        M = y.shape[0]
        eye = jnp.eye(M, dtype=y.dtype)
        A = 4 * eye + jnp.roll(eye, 1, 1) + jnp.roll(eye, -1, 1)
        rhs = 6.0 * M**2 * (jnp.roll(y, 1, 0) - 2 * y + jnp.roll(y, -1, 0))
        return jnp.linalg.solve(A, rhs)

    def __call__(self, s):
        y = self.knots
        M = y.shape[0]
        m = self._second_derivatives()
        u = jnp.mod(s, 1.0) * M
        k = jnp.clip(jnp.floor(u).astype(jnp.int32), 0, M - 1)
        tau = u - k  # local coordinate in [0, 1)
        k1 = jnp.mod(k + 1, M)
        h2 = 1.0 / M**2
        a, b = 1.0 - tau, tau
        return a * y[k] + b * y[k1] + h2 / 6.0 * ((a**3 - a) * m[k] + (b**3 - b) * m[k1])


class OpenCurve(AbstractPath):
    """Open curve with fixed end points: ``x(s) = x₀ + (x₁ − x₀) s + Σ_k c_k sin(πks)``.

    ``start`` and ``end`` are held fixed: they enter through ``stop_gradient``, so an optimizer sees
    a zero gradient for them and leaves them unchanged.

    Arguments:
        start, end: ``(n,)`` end points.
        coeffs: ``(K, n)`` sine coefficients (the free parameters).
    """

    start: jax.Array
    end: jax.Array
    coeffs: jax.Array

    def __init__(self, start, end, coeffs):
        start, end, coeffs = _as_float(start), _as_float(end), _as_float(coeffs)
        if start.ndim != 1 or end.shape != start.shape:
            raise ValueError(
                f"OpenCurve: arguments 'start' and 'end' must be (n,) of equal shape, got {start.shape}, {end.shape}"
            )
        if coeffs.ndim != 2 or coeffs.shape[1] != start.shape[0]:
            raise ValueError(
                f"OpenCurve: argument 'coeffs' must be (K, {start.shape[0]}), got {coeffs.shape}"
            )
        self.start, self.end, self.coeffs = start, end, coeffs
        self.closed = False

    @classmethod
    def straight(cls, start, end, modes: int):
        start = _as_float(start)
        return cls(start, end, jnp.zeros((modes, start.shape[0]), start.dtype))

    def __call__(self, s):
        x0 = jax.lax.stop_gradient(self.start)
        x1 = jax.lax.stop_gradient(self.end)
        k = jnp.arange(1, self.coeffs.shape[0] + 1, dtype=self.coeffs.dtype)
        return x0 + (x1 - x0) * s + jnp.sin(math.pi * k * s) @ self.coeffs


# --- time laws -----------------------------------------------------------------------------------
class AbstractTimeLaw(eqx.Module):
    """A reparametrization ``s(τ)``, ``τ = t/T ∈ [0, 1]``, monotone with ``s(0) = 0``, ``s(1) = 1``."""

    @abc.abstractmethod
    def __call__(self, tau) -> jax.Array:
        """``s`` at normalized time ``tau`` (scalar)."""


class LinearTimeLaw(AbstractTimeLaw):
    """``s = τ`` (constant speed)."""

    def __call__(self, tau):
        return tau


class SmoothStepTimeLaw(AbstractTimeLaw):
    """``s = τ − sin(2πτ)/(2π)``: zero speed (and zero acceleration) at both ends — rest to rest."""

    def __call__(self, tau):
        return tau - jnp.sin(2 * math.pi * tau) / (2 * math.pi)


class PiecewiseLinearTimeLaw(AbstractTimeLaw):
    """Optimizable monotone time law: ``J`` equal time intervals, in interval ``j`` the path
    parameter advances by ``softmax(logits)_j`` (positive, summing to 1).

    Arguments:
        logits: ``(J,)`` (zeros: constant speed).
    """

    logits: jax.Array

    def __init__(self, logits):
        logits = _as_float(logits)
        if logits.ndim != 1 or logits.shape[0] < 1:
            raise ValueError(f"PiecewiseLinearTimeLaw: 'logits' must be (J,), got {logits.shape}")
        self.logits = logits

    def __call__(self, tau):
        w = jax.nn.softmax(self.logits)
        J = w.shape[0]
        cum = jnp.concatenate([jnp.zeros(1, w.dtype), jnp.cumsum(w)])
        u = jnp.clip(tau, 0.0, 1.0) * J
        j = jnp.clip(jnp.floor(u).astype(jnp.int32), 0, J - 1)
        return cum[j] + (u - j) * w[j]


class Trajectory(eqx.Module):
    """A path traversed in time: ``x(t) = path(time_law(t/T))`` for ``t ∈ [0, T]``.

    Arguments:
        path: an :class:`AbstractPath`.
        duration: ``T`` (a float; kept as an array so it can be optimized too).
        time_law: an :class:`AbstractTimeLaw` (default :class:`SmoothStepTimeLaw`, rest to rest).
    """

    path: AbstractPath
    duration: jax.Array
    time_law: AbstractTimeLaw

    def __init__(self, path: AbstractPath, duration, time_law: AbstractTimeLaw | None = None):
        if not isinstance(path, AbstractPath):
            raise ValueError(f"Trajectory: argument 'path' must be a path, got {type(path)}")
        duration = _as_float(duration)
        if duration.shape != () or (not is_traced(duration) and not bool(np.asarray(duration) > 0)):
            raise ValueError(
                f"Trajectory: argument 'duration' must be a positive scalar, got {duration}"
            )
        self.path = path
        self.duration = duration
        self.time_law = SmoothStepTimeLaw() if time_law is None else time_law

    def __call__(self, t):
        return self.path(self.time_law(t / self.duration))

    def velocity(self, t):
        """``dx/dt`` (forward-mode autodiff through the time law and the path)."""
        t = jnp.asarray(t, self.duration.dtype)
        return jax.jvp(self, (t,), (jnp.ones_like(t),))[1]

    def sample(self, ts):
        """Points and velocities at the times ``ts`` ``(m,)`` → ``((m, n), (m, n))``."""
        return jax.vmap(self)(ts), jax.vmap(self.velocity)(ts)
