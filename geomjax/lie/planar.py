"""SO(2) and SE(2): planar rotations ``(..., 2, 2)`` and rigid motions ``(..., 3, 3)``.

se(2) coordinates follow the angular-first convention of SE(3): ``xi = (omega, vx, vy)`` with
``hat(xi) = [[0, -omega, vx], [omega, 0, vy], [0, 0, 0]]``.
"""

from __future__ import annotations

from typing import ClassVar

import jax
import jax.numpy as jnp

from ._math import (
    half_cot_coeff,
    mm,
    mT,
    mv,
    one_minus_cos_over_sq,
    sinc,
    theta_minus_sin_over_cube,
)
from .base import LieGroup, check_shape

__all__ = ["SE2", "SO2", "SpecialEuclidean2", "SpecialOrthogonal2"]


def _rot2(c, s):
    return jnp.stack([jnp.stack([c, -s], -1), jnp.stack([s, c], -1)], -2)


def _angle(R):
    return jnp.arctan2(R[..., 1, 0], R[..., 0, 0])


def _so2_defect(R):
    E = mm(mT(R), R) - jnp.eye(2, dtype=R.dtype)
    det = R[..., 0, 0] * R[..., 1, 1] - R[..., 0, 1] * R[..., 1, 0]
    return jnp.max(jnp.abs(E), axis=(-2, -1)) + jnp.abs(det - 1.0)


def _so2_project(M):
    # nearest rotation: the angle of (M00 + M11, M10 - M01)
    a = jnp.arctan2(M[..., 1, 0] - M[..., 0, 1], M[..., 0, 0] + M[..., 1, 1])
    return _rot2(jnp.cos(a), jnp.sin(a))


def _cay2(th):
    d = 4.0 + th * th
    return _rot2((4.0 - th * th) / d, 4.0 * th / d)


class SpecialOrthogonal2(LieGroup):
    """Planar rotations. Algebra coordinate: the angle rate ``(..., 1)``; abelian, so
    ``Ad = 1``, ``ad = 0`` and all Jacobians are 1."""

    name: ClassVar[str] = "SO2"
    dim: ClassVar[int] = 1
    matrix_dim: ClassVar[int] = 2
    element_shape: ClassVar[tuple[int, ...]] = (2, 2)

    def compose(self, g, h):
        return mm(
            check_shape(g, (2, 2), "g", "SO2.compose"), check_shape(h, (2, 2), "h", "SO2.compose")
        )

    def inverse(self, g):
        return mT(check_shape(g, (2, 2), "g", "SO2.inverse"))

    def act(self, g, p):
        return mv(check_shape(g, (2, 2), "g", "SO2.act"), check_shape(p, (2,), "p", "SO2.act"))

    def hat(self, xi):
        th = check_shape(xi, (1,), "xi", "SO2.hat")[..., 0]
        z = jnp.zeros_like(th)
        return _rot2(z, th)

    def vee(self, X):
        X = check_shape(X, (2, 2), "X", "SO2.vee")
        return (0.5 * (X[..., 1, 0] - X[..., 0, 1]))[..., None]

    def exp(self, xi):
        th = check_shape(xi, (1,), "xi", "SO2.exp")[..., 0]
        return _rot2(jnp.cos(th), jnp.sin(th))

    def log(self, g):
        """Angle in (−π, π]."""
        return _angle(check_shape(g, (2, 2), "g", "SO2.log"))[..., None]

    def Ad(self, g):
        g = check_shape(g, (2, 2), "g", "SO2.Ad")
        return jnp.ones(g.shape[:-2] + (1, 1), g.dtype)

    def ad(self, xi):
        xi = check_shape(xi, (1,), "xi", "SO2.ad")
        return jnp.zeros(xi.shape[:-1] + (1, 1), xi.dtype)

    def jac_left(self, xi):
        xi = check_shape(xi, (1,), "xi", "SO2.jac_left")
        return jnp.ones(xi.shape[:-1] + (1, 1), xi.dtype)

    def jac_left_inv(self, xi):
        return self.jac_left(xi)

    def cay(self, xi):
        return _cay2(check_shape(xi, (1,), "xi", "SO2.cay")[..., 0])

    def cay_inv(self, g):
        g = check_shape(g, (2, 2), "g", "SO2.cay_inv")
        return (2.0 * g[..., 1, 0] / (1.0 + g[..., 0, 0]))[..., None]

    def cay_jac_left(self, xi):
        """``4/(4 + θ²)``: the Cayley image rotates by ``2 atan(θ/2)``."""
        th = check_shape(xi, (1,), "xi", "SO2.cay_jac_left")
        return (4.0 / (4.0 + th * th))[..., None]

    def cay_jac_left_inv(self, xi):
        th = check_shape(xi, (1,), "xi", "SO2.cay_jac_left_inv")
        return (1.0 + 0.25 * th * th)[..., None]

    def defect(self, g):
        return _so2_defect(check_shape(g, (2, 2), "g", "SO2.defect"))

    def project(self, g):
        return _so2_project(check_shape(g, (2, 2), "g", "SO2.project"))

    def random(self, key, shape=(), dtype=None):
        dtype = dtype or jnp.result_type(float)
        th = jax.random.uniform(key, tuple(shape), dtype=dtype, minval=-jnp.pi, maxval=jnp.pi)
        return _rot2(jnp.cos(th), jnp.sin(th))

    def from_angle(self, angle):
        th = jnp.asarray(angle)
        return self.exp(th[..., None])


def _se2_assemble(R, t):
    batch = jnp.broadcast_shapes(R.shape[:-2], t.shape[:-1])
    R = jnp.broadcast_to(R, batch + (2, 2))
    t = jnp.broadcast_to(t, batch + (2,))
    top = jnp.concatenate([R, t[..., :, None]], -1)
    bottom = jnp.broadcast_to(jnp.array([0.0, 0.0, 1.0], dtype=R.dtype), batch + (1, 3))
    return jnp.concatenate([top, bottom], -2)


def _V(th2, th, sign=1.0):
    """``V(θ) = [[A, -b], [b, A]]`` with ``A = sin θ/θ``, ``b = (1 − cos θ)/θ``; ``V(−θ) = V^T``."""
    A = sinc(th2)
    b = sign * th * one_minus_cos_over_sq(th2)
    return jnp.stack([jnp.stack([A, -b], -1), jnp.stack([b, A], -1)], -2)


def _V_inv(th2, th, sign=1.0):
    """``V(θ)^{-1} = [[a, h], [-h, a]]``, ``a = (θ/2) cot(θ/2)``, ``h = θ/2``."""
    a = 1.0 - th2 * half_cot_coeff(th2)
    h = sign * 0.5 * th
    return jnp.stack([jnp.stack([a, h], -1), jnp.stack([-h, a], -1)], -2)


def _se2_jac(xi, left: bool):
    """Jacobians of SE(2) in (omega, v) order: ``[[1, 0], [u, V(±θ)]]``."""
    th, r1, r2 = xi[..., 0], xi[..., 1], xi[..., 2]
    th2 = th * th
    B = one_minus_cos_over_sq(th2)
    tC = th * theta_minus_sin_over_cube(th2)
    if left:
        u = jnp.stack([r1 * tC + r2 * B, -r1 * B + r2 * tC], -1)
        Vb = _V(th2, th, 1.0)
    else:
        u = jnp.stack([r1 * tC - r2 * B, r1 * B + r2 * tC], -1)
        Vb = _V(th2, th, -1.0)
    return u, Vb


def _lower_block(u, Vb, corner=None):
    """``[[corner, 0], [u, Vb]]`` (``corner`` 1 by default), built by concatenation: a scatter
    (``.at[].set``) would cost the scalarized steps a trace-time XLA compile (geomjax._internal.scalarize)."""
    if corner is None:
        one = jnp.ones(u.shape[:-1] + (1, 1), u.dtype)
    else:
        one = jnp.broadcast_to(jnp.asarray(corner, u.dtype), u.shape[:-1])[..., None, None]
    zero = jnp.zeros(u.shape[:-1] + (1, 2), u.dtype)
    return jnp.concatenate(
        [jnp.concatenate([one, zero], -1), jnp.concatenate([u[..., :, None], Vb], -1)], -2
    )


class SpecialEuclidean2(LieGroup):
    """Planar rigid motions ``[[R, t], [0, 1]]``; twists ``(omega, vx, vy)``."""

    name: ClassVar[str] = "SE2"
    dim: ClassVar[int] = 3
    matrix_dim: ClassVar[int] = 3
    element_shape: ClassVar[tuple[int, ...]] = (3, 3)

    def from_xytheta(self, x, y, theta):
        """Element with translation ``(x, y)`` and heading ``theta``."""
        x, y, theta = jnp.asarray(x), jnp.asarray(y), jnp.asarray(theta)
        return _se2_assemble(_rot2(jnp.cos(theta), jnp.sin(theta)), jnp.stack([x, y], -1))

    def to_xytheta(self, g):
        g = check_shape(g, (3, 3), "g", "SE2.to_xytheta")
        return jnp.stack([g[..., 0, 2], g[..., 1, 2], _angle(g[..., :2, :2])], -1)

    def compose(self, g, h):
        g = check_shape(g, (3, 3), "g", "SE2.compose")
        h = check_shape(h, (3, 3), "h", "SE2.compose")
        R1, t1 = g[..., :2, :2], g[..., :2, 2]
        return _se2_assemble(mm(R1, h[..., :2, :2]), mv(R1, h[..., :2, 2]) + t1)

    def inverse(self, g):
        g = check_shape(g, (3, 3), "g", "SE2.inverse")
        Rt = mT(g[..., :2, :2])
        return _se2_assemble(Rt, -mv(Rt, g[..., :2, 2]))

    def act(self, g, p):
        g = check_shape(g, (3, 3), "g", "SE2.act")
        p = check_shape(p, (2,), "p", "SE2.act")
        return mv(g[..., :2, :2], p) + g[..., :2, 2]

    def hat(self, xi):
        xi = check_shape(xi, (3,), "xi", "SE2.hat")
        w, vx, vy = xi[..., 0], xi[..., 1], xi[..., 2]
        z = jnp.zeros_like(w)
        return jnp.stack(
            [jnp.stack([z, -w, vx], -1), jnp.stack([w, z, vy], -1), jnp.stack([z, z, z], -1)], -2
        )

    def vee(self, X):
        X = check_shape(X, (3, 3), "X", "SE2.vee")
        return jnp.stack([0.5 * (X[..., 1, 0] - X[..., 0, 1]), X[..., 0, 2], X[..., 1, 2]], -1)

    def exp(self, xi):
        xi = check_shape(xi, (3,), "xi", "SE2.exp")
        th = xi[..., 0]
        R = _rot2(jnp.cos(th), jnp.sin(th))
        return _se2_assemble(R, mv(_V(th * th, th), xi[..., 1:]))

    def log(self, g):
        g = check_shape(g, (3, 3), "g", "SE2.log")
        th = _angle(g[..., :2, :2])
        v = mv(_V_inv(th * th, th), g[..., :2, 2])
        return jnp.concatenate([th[..., None], v], -1)

    def Ad(self, g):
        """``[[1, 0], [(t_y, −t_x), R]]``."""
        g = check_shape(g, (3, 3), "g", "SE2.Ad")
        t = g[..., :2, 2]
        u = jnp.stack([t[..., 1], -t[..., 0]], -1)
        return _lower_block(u, g[..., :2, :2])

    def ad(self, xi):
        """``[[0, 0], [(v_y, −v_x), omega J]]``, ``J`` the 90° rotation."""
        xi = check_shape(xi, (3,), "xi", "SE2.ad")
        w, vx, vy = xi[..., 0], xi[..., 1], xi[..., 2]
        z = jnp.zeros_like(w)
        return jnp.stack(
            [jnp.stack([z, z, z], -1), jnp.stack([vy, z, -w], -1), jnp.stack([-vx, w, z], -1)], -2
        )

    def jac_left(self, xi):
        u, Vb = _se2_jac(check_shape(xi, (3,), "xi", "SE2.jac_left"), left=True)
        return _lower_block(u, Vb)

    def jac_right(self, xi):
        u, Vb = _se2_jac(check_shape(xi, (3,), "xi", "SE2.jac_right"), left=False)
        return _lower_block(u, Vb)

    def jac_left_inv(self, xi):
        xi = check_shape(xi, (3,), "xi", "SE2.jac_left_inv")
        u, _ = _se2_jac(xi, left=True)
        th = xi[..., 0]
        Vi = _V_inv(th * th, th, 1.0)
        return _lower_block(-mv(Vi, u), Vi)

    def jac_right_inv(self, xi):
        xi = check_shape(xi, (3,), "xi", "SE2.jac_right_inv")
        u, _ = _se2_jac(xi, left=False)
        th = xi[..., 0]
        Vi = _V_inv(th * th, th, -1.0)
        return _lower_block(-mv(Vi, u), Vi)

    def cay(self, xi):
        """Cayley map; translation part ``(I − omega J/2)^{-1} v``."""
        xi = check_shape(xi, (3,), "xi", "SE2.cay")
        th, v = xi[..., 0], xi[..., 1:]
        d = 4.0 + th * th
        # (I - th J / 2)^{-1} = (2 / d) [[2, -th], [th, 2]]
        M = (2.0 / d)[..., None, None] * jnp.stack(
            [
                jnp.stack([2.0 * jnp.ones_like(th), -th], -1),
                jnp.stack([th, 2.0 * jnp.ones_like(th)], -1),
            ],
            -2,
        )
        return _se2_assemble(_cay2(th), mv(M, v))

    def cay_inv(self, g):
        g = check_shape(g, (3, 3), "g", "SE2.cay_inv")
        th = 2.0 * g[..., 1, 0] / (1.0 + g[..., 0, 0])
        t = g[..., :2, 2]
        # v = (I - th J/2) t
        v = jnp.stack([t[..., 0] + 0.5 * th * t[..., 1], t[..., 1] - 0.5 * th * t[..., 0]], -1)
        return jnp.concatenate([th[..., None], v], -1)

    def cay_jac_left_inv(self, xi):
        """The SE(2) restriction of the SE(3) formula: ``[[1 + θ²/4, 0], [u, I − θJ/2]]``."""
        xi = check_shape(xi, (3,), "xi", "SE2.cay_jac_left_inv")
        th, vx, vy = xi[..., 0], xi[..., 1], xi[..., 2]
        u = -0.5 * jnp.stack([vy - 0.5 * th * vx, -vx - 0.5 * th * vy], -1)
        one = jnp.ones_like(th)
        B = jnp.stack([jnp.stack([one, 0.5 * th], -1), jnp.stack([-0.5 * th, one], -1)], -2)
        return _lower_block(u, B, 1.0 + 0.25 * th * th)

    def cay_jac_left(self, xi):
        xi = check_shape(xi, (3,), "xi", "SE2.cay_jac_left")
        Mi = self.cay_jac_left_inv(xi)
        a = 1.0 / Mi[..., 0, 0]
        th = xi[..., 0]
        d = 4.0 + th * th
        # (I - θJ/2)^{-1} = (2/d) [[2, -θ], [θ, 2]]
        two = 2.0 * jnp.ones_like(th)
        B_inv = (2.0 / d)[..., None, None] * jnp.stack(
            [jnp.stack([two, -th], -1), jnp.stack([th, two], -1)], -2
        )
        u = -mv(B_inv, Mi[..., 1:, 0]) * a[..., None]
        return _lower_block(u, B_inv, a)

    def defect(self, g):
        g = check_shape(g, (3, 3), "g", "SE2.defect")
        bottom = g[..., 2, :] - jnp.array([0.0, 0.0, 1.0], dtype=g.dtype)
        return _so2_defect(g[..., :2, :2]) + jnp.max(jnp.abs(bottom), -1)

    def project(self, g):
        g = check_shape(g, (3, 3), "g", "SE2.project")
        return _se2_assemble(_so2_project(g[..., :2, :2]), g[..., :2, 2])

    def random(self, key, shape=(), dtype=None):
        k1, k2 = jax.random.split(key)
        dtype = dtype or jnp.result_type(float)
        R = SO2.random(k1, shape, dtype)
        t = jax.random.normal(k2, tuple(shape) + (2,), dtype=dtype)
        return _se2_assemble(R, t)


SO2 = SpecialOrthogonal2()
"""The rotation group SO(2): elements are 2×2 rotation matrices, the algebra is R (the angle rate)."""
SE2 = SpecialEuclidean2()
"""The planar rigid motions SE(2): 3×3 homogeneous matrices, twists ordered (ω, vx, vy)."""
