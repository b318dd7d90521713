"""SE(3): rigid motions as ``(..., 4, 4)`` homogeneous matrices ``[[R, p], [0, 1]]``.

Twists are ordered ``xi = (omega, v)`` — angular part first — so that ``hat(xi) = [[hat(omega), v],
[0, 0]]``, ``Ad(R, p) = [[R, 0], [hat(p) R, R]]`` and ``ad(omega, v) = [[hat(omega), 0],
[hat(v), hat(omega)]]``.  With momenta ``mu = (pi, p)`` (angular, linear) the Euler–Poincaré
equation ``dmu/dt = coad(xi, mu)`` is Kirchhoff's: ``pi' = pi × omega + p × v``, ``p' = p × omega``.
"""

from __future__ import annotations

from typing import ClassVar

import jax
import jax.numpy as jnp

from ._math import (
    cross,
    half_cot_coeff,
    mm,
    mT,
    mv,
    one_minus_cos_over_sq,
    se3_coeff_e,
    se3_coeff_f,
    sinc,
    theta_minus_sin_over_cube,
)
from .base import LieGroup, check_shape
from .so3 import SO3, hat3, hat_polynomial, jl3, jl3_inv, vee3

__all__ = ["SE3", "SpecialEuclidean3"]


def _assemble(R, p):
    """``[[R, p], [0, 1]]`` from ``(..., 3, 3)`` and ``(..., 3)``."""
    batch = jnp.broadcast_shapes(R.shape[:-2], p.shape[:-1])
    R = jnp.broadcast_to(R, batch + (3, 3))
    p = jnp.broadcast_to(p, batch + (3,))
    top = jnp.concatenate([R, p[..., :, None]], -1)
    bottom = jnp.broadcast_to(jnp.array([0.0, 0.0, 0.0, 1.0], dtype=R.dtype), batch + (1, 4))
    return jnp.concatenate([top, bottom], -2)


def _blocks(lt, lb, rb):
    """6×6 block matrix ``[[lt, 0], [lb, rb]]``."""
    zero = jnp.zeros_like(lt)
    return jnp.concatenate([jnp.concatenate([lt, zero], -1), jnp.concatenate([lb, rb], -1)], -2)


def _q_left(w, v):
    """Barfoot's Q(v, w): lower-left block of the SE(3) left Jacobian in (omega, v) order."""
    t2 = jnp.sum(w * w, -1)
    W, V = hat3(w), hat3(v)
    WV, VW = mm(W, V), mm(V, W)
    WVW = mm(WV, W)
    c1 = theta_minus_sin_over_cube(t2)[..., None, None]
    c2 = se3_coeff_e(t2)[..., None, None]
    c3 = se3_coeff_f(t2)[..., None, None]
    return (
        0.5 * V
        + c1 * (WV + VW + WVW)
        + c2 * (mm(W, WV) + mm(VW, W) - 3.0 * WVW)
        + c3 * (mm(WVW, W) + mm(W, WVW))
    )


def _jl6(xi):
    w, v = xi[..., :3], xi[..., 3:]
    J = jl3(w)
    return _blocks(J, _q_left(w, v), J)


def _jl6_inv(xi):
    w, v = xi[..., :3], xi[..., 3:]
    Ji = jl3_inv(w)
    return _blocks(Ji, -mm(mm(Ji, _q_left(w, v)), Ji), Ji)


class SpecialEuclidean3(LieGroup):
    """The group of rigid motions SE(3) (Chevallier's displacement group D)."""

    name: ClassVar[str] = "SE3"
    dim: ClassVar[int] = 6
    matrix_dim: ClassVar[int] = 4
    element_shape: ClassVar[tuple[int, ...]] = (4, 4)

    # --- helpers ---------------------------------------------------------------------------
    def from_rotation_translation(self, R, p):
        R = check_shape(R, (3, 3), "R", "SE3.from_rotation_translation")
        p = check_shape(p, (3,), "p", "SE3.from_rotation_translation")
        return _assemble(R, p)

    def rotation(self, g):
        return check_shape(g, (4, 4), "g", "SE3.rotation")[..., :3, :3]

    def translation(self, g):
        return check_shape(g, (4, 4), "g", "SE3.translation")[..., :3, 3]

    # --- group structure -------------------------------------------------------------------
    def compose(self, g, h):
        g = check_shape(g, (4, 4), "g", "SE3.compose")
        h = check_shape(h, (4, 4), "h", "SE3.compose")
        R1, p1, R2, p2 = g[..., :3, :3], g[..., :3, 3], h[..., :3, :3], h[..., :3, 3]
        return _assemble(mm(R1, R2), mv(R1, p2) + p1)

    def inverse(self, g):
        g = check_shape(g, (4, 4), "g", "SE3.inverse")
        Rt = mT(g[..., :3, :3])
        return _assemble(Rt, -mv(Rt, g[..., :3, 3]))

    def act(self, g, p):
        g = check_shape(g, (4, 4), "g", "SE3.act")
        p = check_shape(p, (3,), "p", "SE3.act")
        return mv(g[..., :3, :3], p) + g[..., :3, 3]

    def hat(self, xi):
        xi = check_shape(xi, (6,), "xi", "SE3.hat")
        top = jnp.concatenate([hat3(xi[..., :3]), xi[..., 3:, None]], -1)
        return jnp.concatenate([top, jnp.zeros_like(top[..., :1, :])], -2)

    def vee(self, X):
        X = check_shape(X, (4, 4), "X", "SE3.vee")
        return jnp.concatenate([vee3(X[..., :3, :3]), X[..., :3, 3]], -1)

    def exp(self, xi):
        """``exp(omega, v) = [[exp(omega), J_l(omega) v], [0, 1]]``."""
        xi = check_shape(xi, (6,), "xi", "SE3.exp")
        w, v = xi[..., :3], xi[..., 3:]
        t2 = jnp.sum(w * w, -1)
        B = one_minus_cos_over_sq(t2)
        R = hat_polynomial(w, sinc(t2), B)
        # J_l(w) v = v + B w × v + C w × (w × v), without forming the matrix
        wv = cross(w, v)
        p = v + B[..., None] * wv + theta_minus_sin_over_cube(t2)[..., None] * cross(w, wv)
        return _assemble(R, p)

    def log(self, g):
        """``log(R, p) = (log R, J_l(log R)^{-1} p)``, principal branch (|omega| ≤ π)."""
        g = check_shape(g, (4, 4), "g", "SE3.log")
        w = SO3.log(g[..., :3, :3])
        p = g[..., :3, 3]
        # J_l(w)^{-1} p = p − (w × p)/2 + D w × (w × p)
        wp = cross(w, p)
        D = half_cot_coeff(jnp.sum(w * w, -1))[..., None]
        return jnp.concatenate([w, p - 0.5 * wp + D * cross(w, wp)], -1)

    def Ad(self, g):
        g = check_shape(g, (4, 4), "g", "SE3.Ad")
        R, p = g[..., :3, :3], g[..., :3, 3]
        return _blocks(R, mm(hat3(p), R), R)

    def ad(self, xi):
        xi = check_shape(xi, (6,), "xi", "SE3.ad")
        W = hat3(xi[..., :3])
        return _blocks(W, hat3(xi[..., 3:]), W)

    def coad(self, xi, mu):
        """``ad(xi)^T mu = (pi × omega + p × v, p × omega)`` for ``mu = (pi, p)``."""
        xi = check_shape(xi, (6,), "xi", "SE3.coad")
        mu = check_shape(mu, (6,), "mu", "SE3.coad")
        w, v, pi, p = xi[..., :3], xi[..., 3:], mu[..., :3], mu[..., 3:]
        return jnp.concatenate([cross(pi, w) + cross(p, v), cross(p, w)], -1)

    def jac_left(self, xi):
        """``[[J_l(omega), 0], [Q(v, omega), J_l(omega)]]`` (Barfoot 2014, reordered to (omega, v))."""
        return _jl6(check_shape(xi, (6,), "xi", "SE3.jac_left"))

    def jac_left_inv(self, xi):
        return _jl6_inv(check_shape(xi, (6,), "xi", "SE3.jac_left_inv"))

    def cay(self, xi):
        """``cay(omega, v) = [[cay(omega), (I − hat(omega)/2)^{-1} v], [0, 1]]``."""
        xi = check_shape(xi, (6,), "xi", "SE3.cay")
        w, v = xi[..., :3], xi[..., 3:]
        c = 4.0 / (4.0 + jnp.sum(w * w, -1))
        # (I - W/2)^{-1} = I + (2W + W^2)/(4 + |w|^2)
        return _assemble(hat_polynomial(w, c, 0.5 * c), mv(hat_polynomial(w, 0.5 * c, 0.25 * c), v))

    def cay_coAd_increment(self, xi, mu):
        """``Ad(cay(xi))^T mu − mu = (R^T (pi − p × P) − pi, R^T P − P)`` for ``mu = (pi, P)``
        and ``cay(xi) = [[R, p], [0, 1]]``, with ``R^T v − v`` from
        :meth:`SO3.cay_coAd_increment` (no float32 drift of the Casimirs ``|P|²``, ``pi · P``)."""
        xi = check_shape(xi, (6,), "xi", "SE3.cay_coAd_increment")
        mu = check_shape(mu, (6,), "mu", "SE3.cay_coAd_increment")
        w, v = xi[..., :3], xi[..., 3:]
        c = 4.0 / (4.0 + jnp.sum(w * w, -1))[..., None]
        wv = cross(w, v)
        p = v + 0.5 * c * wv + 0.25 * c * cross(w, wv)  # (I − hat(w)/2)^{-1} v
        return self._coAd_blocks(SO3.cay_coAd_increment, w, p, mu)

    def exp_coAd_increment(self, xi, mu):
        """``Ad(exp(xi))^T mu − mu`` (as :meth:`cay_coAd_increment`, ``p = J_l(omega) v``)."""
        xi = check_shape(xi, (6,), "xi", "SE3.exp_coAd_increment")
        mu = check_shape(mu, (6,), "mu", "SE3.exp_coAd_increment")
        w, v = xi[..., :3], xi[..., 3:]
        t2 = jnp.sum(w * w, -1)
        wv = cross(w, v)
        B, C = one_minus_cos_over_sq(t2)[..., None], theta_minus_sin_over_cube(t2)[..., None]
        return self._coAd_blocks(SO3.exp_coAd_increment, w, v + B * wv + C * cross(w, wv), mu)

    @staticmethod
    def _coAd_blocks(increment, w, p, mu):
        pi, P = mu[..., :3], mu[..., 3:]
        pP = cross(p, P)
        return jnp.concatenate([increment(w, pi - pP) - pP, increment(w, P)], -1)

    def cay_inv(self, g):
        g = check_shape(g, (4, 4), "g", "SE3.cay_inv")
        w = SO3.cay_inv(g[..., :3, :3])
        p = g[..., :3, 3]
        return jnp.concatenate([w, p - 0.5 * cross(w, p)], -1)

    def cay_jac_left_inv(self, xi):
        """``[[A, 0], [-(I − hat(ω)/2) hat(v)/2, I − hat(ω)/2]]`` with ``A = I − hat(ω)/2 + ωω^T/4``
        (Kobilarov & Marsden 2011)."""
        xi = check_shape(xi, (6,), "xi", "SE3.cay_jac_left_inv")
        w, v = xi[..., :3], xi[..., 3:]
        eye = jnp.eye(3, dtype=xi.dtype)
        B = eye - 0.5 * hat3(w)
        A = B + 0.25 * (w[..., :, None] * w[..., None, :])
        return _blocks(A, -0.5 * mm(B, hat3(v)), B)

    def cay_jac_left(self, xi):
        xi = check_shape(xi, (6,), "xi", "SE3.cay_jac_left")
        w, v = xi[..., :3], xi[..., 3:]
        c = 4.0 / (4.0 + jnp.sum(w * w, -1))
        eye = jnp.eye(3, dtype=xi.dtype)
        A_inv = c[..., None, None] * (eye + 0.5 * hat3(w))  # SO(3) Cayley Jacobian
        B_inv = hat_polynomial(w, 0.5 * c, 0.25 * c)  # (I - W/2)^{-1}
        C = -0.5 * mm(eye - 0.5 * hat3(w), hat3(v))
        return _blocks(A_inv, -mm(mm(B_inv, C), A_inv), B_inv)

    def defect(self, g):
        g = check_shape(g, (4, 4), "g", "SE3.defect")
        bottom = g[..., 3, :] - jnp.array([0.0, 0.0, 0.0, 1.0], dtype=g.dtype)
        return SO3.defect(g[..., :3, :3]) + jnp.max(jnp.abs(bottom), -1)

    def project(self, g):
        g = check_shape(g, (4, 4), "g", "SE3.project")
        return _assemble(SO3.project(g[..., :3, :3]), g[..., :3, 3])

    def renormalize(self, g):
        """One Björck step on the rotation block; the bottom row is reset to ``(0, 0, 0, 1)``."""
        g = check_shape(g, (4, 4), "g", "SE3.renormalize")
        return _assemble(SO3.renormalize(g[..., :3, :3]), g[..., :3, 3])

    def random(self, key, shape=(), dtype=None):
        """Haar rotation and standard normal translation."""
        k1, k2 = jax.random.split(key)
        dtype = dtype or jnp.result_type(float)
        R = SO3.random(k1, shape, dtype)
        p = jax.random.normal(k2, tuple(shape) + (3,), dtype=dtype)
        return _assemble(R, p)


SE3 = SpecialEuclidean3()
"""The rigid motions SE(3): 4×4 homogeneous matrices [[R, p], [0, 1]], twists ordered (ω, v)."""
