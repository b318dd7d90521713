"""SO(3): rotations as ``(..., 3, 3)`` matrices, so(3) ≅ R^3 by ``hat(w) u = w × u``."""

from __future__ import annotations

from typing import ClassVar

import jax
import jax.numpy as jnp

from ._math import (
    as_float,
    cross,
    half_cot_coeff,
    mm,
    mT,
    mv,
    one_minus_cos_over_sq,
    outer,
    sinc,
    theta_minus_sin_over_cube,
)
from .base import LieGroup, check_shape

__all__ = ["SO3", "SpecialOrthogonal3"]


def hat3(w):
    x, y, z = w[..., 0], w[..., 1], w[..., 2]
    o = jnp.zeros_like(x)
    return jnp.stack(
        [jnp.stack([o, -z, y], -1), jnp.stack([z, o, -x], -1), jnp.stack([-y, x, o], -1)], -2
    )


def vee3(X):
    return 0.5 * jnp.stack(
        [X[..., 2, 1] - X[..., 1, 2], X[..., 0, 2] - X[..., 2, 0], X[..., 1, 0] - X[..., 0, 1]],
        -1,
    )


def hat_polynomial(w, a, b):
    """``I + a hat(w) + b hat(w)^2`` with ``hat(w)^2 = w w^T - |w|^2 I`` (a, b batch scalars)."""
    t2 = jnp.sum(w * w, -1)
    eye = jnp.eye(3, dtype=w.dtype)
    return (
        (1.0 - b * t2)[..., None, None] * eye
        + a[..., None, None] * hat3(w)
        + b[..., None, None] * outer(w, w)
    )


def _exp3(w):
    t2 = jnp.sum(w * w, -1)
    return hat_polynomial(w, sinc(t2), one_minus_cos_over_sq(t2))


def jl3(w):
    t2 = jnp.sum(w * w, -1)
    return hat_polynomial(w, one_minus_cos_over_sq(t2), theta_minus_sin_over_cube(t2))


def jl3_inv(w):
    t2 = jnp.sum(w * w, -1)
    return hat_polynomial(w, jnp.full_like(t2, -0.5), half_cot_coeff(t2))


def _rotate_increment(w, mu, a, b):
    """``(I + a hat(w) + b hat(w)²)^T mu − mu = −a w × mu + b w × (w × mu)``, formed without
    the identity (no entry ``1 + O(|w|²)`` is rounded)."""
    u = cross(w, mu)
    return b[..., None] * cross(w, u) - a[..., None] * u


def _quat_from_matrix(R):
    """Shepperd's method: ``K = 4 q q^T`` is linear in R; normalise its column with the largest
    diagonal entry (always ≥ 1, so the square root and division are safe and AD-friendly)."""
    r00, r11, r22 = R[..., 0, 0], R[..., 1, 1], R[..., 2, 2]
    tr = r00 + r11 + r22
    d21, d02, d10 = (
        R[..., 2, 1] - R[..., 1, 2],
        R[..., 0, 2] - R[..., 2, 0],
        R[..., 1, 0] - R[..., 0, 1],
    )
    s01, s02, s12 = (
        R[..., 0, 1] + R[..., 1, 0],
        R[..., 0, 2] + R[..., 2, 0],
        R[..., 1, 2] + R[..., 2, 1],
    )
    K = jnp.stack(
        [
            jnp.stack([1.0 + tr, d21, d02, d10], -1),
            jnp.stack([d21, 1.0 + 2 * r00 - tr, s01, s02], -1),
            jnp.stack([d02, s01, 1.0 + 2 * r11 - tr, s12], -1),
            jnp.stack([d10, s02, s12, 1.0 + 2 * r22 - tr], -1),
        ],
        -2,
    )
    diag = jnp.stack([K[..., 0, 0], K[..., 1, 1], K[..., 2, 2], K[..., 3, 3]], -1)
    k = jnp.argmax(diag, -1)
    col = jnp.take_along_axis(K, k[..., None, None], axis=-1)[..., 0]  # (..., 4)
    q = col / jnp.linalg.norm(col, axis=-1, keepdims=True)
    # canonical hemisphere w >= 0
    return jnp.where(q[..., :1] < 0, -q, q)


def _log_from_quat(q):
    """Rotation vector of a unit quaternion ``(w, x, y, z)`` with ``w >= 0``."""
    w, v = q[..., 0], q[..., 1:]
    n2 = jnp.sum(v * v, -1)
    small = n2 < (1e-1 if jnp.finfo(q.dtype).bits <= 32 else 1e-2)
    # double-where on both sides: the exact branch never sees n = 0 and the series never sees
    # w -> 0 (near theta = pi), where its powers of 1/w would overflow and poison the gradient.
    n = jnp.sqrt(jnp.where(small, 1.0, n2))
    exact = 2.0 * jnp.arctan2(n, w) / n
    w_s = jnp.where(small, w, 1.0)
    # 2 atan(n/w)/n = (2/w) sum_k (-1)^k (n/w)^{2k}/(2k+1); w ~ 1 here
    u = jnp.where(small, n2, 0.0) / (w_s * w_s)
    series = (2.0 / w_s) * (
        1.0 - u / 3 + u**2 / 5 - u**3 / 7 + u**4 / 9 - u**5 / 11 + u**6 / 13 - u**7 / 15
    )
    return jnp.where(small, series, exact)[..., None] * v


class SpecialOrthogonal3(LieGroup):
    """The rotation group SO(3).

    Elements: ``(..., 3, 3)`` rotation matrices.  Algebra: ``(..., 3)`` rotation vectors with
    ``hat(w) u = w × u``.  ``Ad(R) = R``, ``ad(w) = hat(w)``, ``coad(w, mu) = mu × w``.
    """

    name: ClassVar[str] = "SO3"
    dim: ClassVar[int] = 3
    matrix_dim: ClassVar[int] = 3
    element_shape: ClassVar[tuple[int, ...]] = (3, 3)

    def compose(self, g, h):
        g = check_shape(g, (3, 3), "g", "SO3.compose")
        h = check_shape(h, (3, 3), "h", "SO3.compose")
        return mm(g, h)

    def inverse(self, g):
        return mT(check_shape(g, (3, 3), "g", "SO3.inverse"))

    def act(self, g, p):
        g = check_shape(g, (3, 3), "g", "SO3.act")
        p = check_shape(p, (3,), "p", "SO3.act")
        return mv(g, p)

    def hat(self, xi):
        return hat3(check_shape(xi, (3,), "xi", "SO3.hat"))

    def vee(self, X):
        return vee3(check_shape(X, (3, 3), "X", "SO3.vee"))

    def exp(self, xi):
        """Rodrigues: ``exp(w) = I + sin θ/θ hat(w) + (1 − cos θ)/θ² hat(w)²``."""
        return _exp3(check_shape(xi, (3,), "xi", "SO3.exp"))

    def log(self, g):
        """Principal logarithm (|w| ≤ π), via the quaternion: accurate and with finite
        derivatives up to θ = π (exclusive), including θ = 0.

        ``g`` is assumed to be a rotation and is *not* validated (a pure, jit-friendly function):
        a matrix far from SO(3) still returns a plausible-looking rotation vector, e.g.
        ``log(2·I) = 0`` (the quaternion extraction only sees the rotation-like part).  Validate
        untrusted input with :meth:`check` (``SO3.log(SO3.check(g))``), or project it first with
        :meth:`renormalize`."""
        g = check_shape(g, (3, 3), "g", "SO3.log")
        return _log_from_quat(_quat_from_matrix(g))

    def Ad(self, g):
        return check_shape(g, (3, 3), "g", "SO3.Ad")

    def ad(self, xi):
        return hat3(check_shape(xi, (3,), "xi", "SO3.ad"))

    def coad(self, xi, mu):
        xi = check_shape(xi, (3,), "xi", "SO3.coad")
        mu = check_shape(mu, (3,), "mu", "SO3.coad")
        return cross(mu, xi)

    def jac_left(self, xi):
        """``J_l(w) = I + (1 − cos θ)/θ² hat(w) + (θ − sin θ)/θ³ hat(w)²``."""
        return jl3(check_shape(xi, (3,), "xi", "SO3.jac_left"))

    def jac_left_inv(self, xi):
        """``J_l^{-1}(w) = I − hat(w)/2 + (1 − (θ/2)cot(θ/2))/θ² hat(w)²`` (θ < 2π)."""
        return jl3_inv(check_shape(xi, (3,), "xi", "SO3.jac_left_inv"))

    def cay(self, xi):
        """Cayley map ``(I − hat(w)/2)^{-1}(I + hat(w)/2) = I + 4/(4+|w|²)(hat(w) + hat(w)²/2)``.

        Agrees with ``exp`` to second order; used by variational integrators because it is
        rational (no trigonometric functions) and exactly on the group.
        """
        w = check_shape(xi, (3,), "xi", "SO3.cay")
        c = 4.0 / (4.0 + jnp.sum(w * w, -1))
        return hat_polynomial(w, c, 0.5 * c)

    def cay_coAd_increment(self, xi, mu):
        """``cay(w)^T mu − mu = − c w × mu + c/2 w × (w × mu)``, ``c = 4/(4+|w|²)``
        (:meth:`geomjax.LieGroup.cay_coAd_increment`): ``mu`` plus this increment has the
        norm of ``mu`` up to ``O(eps |w| |mu|)`` and the rounding of the sum, with no bias."""
        w = check_shape(xi, (3,), "xi", "SO3.cay_coAd_increment")
        mu = check_shape(mu, (3,), "mu", "SO3.cay_coAd_increment")
        c = 4.0 / (4.0 + jnp.sum(w * w, -1))
        return _rotate_increment(w, mu, c, 0.5 * c)

    def exp_coAd_increment(self, xi, mu):
        """``exp(w)^T mu − mu = − sin θ/θ w × mu + (1 − cos θ)/θ² w × (w × mu)``
        (:meth:`cay_coAd_increment`)."""
        w = check_shape(xi, (3,), "xi", "SO3.exp_coAd_increment")
        mu = check_shape(mu, (3,), "mu", "SO3.exp_coAd_increment")
        t2 = jnp.sum(w * w, -1)
        return _rotate_increment(w, mu, sinc(t2), one_minus_cos_over_sq(t2))

    def cay_inv(self, g):
        """``cay^{-1}(R) = 2/(1 + tr R) vee(R − R^T)``; singular at rotations by π."""
        R = check_shape(g, (3, 3), "g", "SO3.cay_inv")
        tr = R[..., 0, 0] + R[..., 1, 1] + R[..., 2, 2]
        return (2.0 / (1.0 + tr))[..., None] * vee3(R - mT(R))

    def cay_jac_left(self, xi):
        """``Jcay_l(w) = (4 I + 2 hat(w))/(4 + |w|²)``."""
        w = check_shape(xi, (3,), "xi", "SO3.cay_jac_left")
        c = 4.0 / (4.0 + jnp.sum(w * w, -1))
        return c[..., None, None] * (jnp.eye(3, dtype=w.dtype) + 0.5 * hat3(w))

    def cay_jac_left_inv(self, xi):
        """``Jcay_l(w)^{-1} = I − hat(w)/2 + w w^T/4`` (rational: no trigonometry)."""
        w = check_shape(xi, (3,), "xi", "SO3.cay_jac_left_inv")
        return jnp.eye(3, dtype=w.dtype) - 0.5 * hat3(w) + 0.25 * outer(w, w)

    def left_gradient(self, g, euclidean_grad):
        """``vee(R^T ∇U − ∇U^T R)``: the body torque of a potential is ``−left_gradient``."""
        R = check_shape(g, (3, 3), "g", "SO3.left_gradient")
        A = mm(mT(R), check_shape(euclidean_grad, (3, 3), "euclidean_grad", "SO3.left_gradient"))
        return jnp.stack(
            [A[..., 2, 1] - A[..., 1, 2], A[..., 0, 2] - A[..., 2, 0], A[..., 1, 0] - A[..., 0, 1]],
            -1,
        )

    def defect(self, g):
        """``max|R^T R − I| + |det R − 1|`` (NaN propagates)."""
        R = check_shape(g, (3, 3), "g", "SO3.defect")
        E = mm(mT(R), R) - jnp.eye(3, dtype=R.dtype)
        det = jnp.sum(R[..., 0, :] * cross(R[..., 1, :], R[..., 2, :]), -1)
        return jnp.max(jnp.abs(E), axis=(-2, -1)) + jnp.abs(det - 1.0)

    def project(self, g):
        """Nearest rotation in the Frobenius norm (polar factor via SVD, det fixed to +1)."""
        M = check_shape(g, (3, 3), "g", "SO3.project")
        U, _, Vt = jnp.linalg.svd(M)
        d = jnp.sign(jnp.linalg.det(mm(U, Vt)))
        U = U.at[..., :, 2].multiply(d[..., None])
        return mm(U, Vt)

    def renormalize(self, g):
        """One Björck step ``R (3 I − RᵀR)/2``: the defect ``‖RᵀR − I‖`` goes to ~its square."""
        R = check_shape(g, (3, 3), "g", "SO3.renormalize")
        RtR = mm(jnp.swapaxes(R, -1, -2), R)
        return mm(R, 1.5 * jnp.eye(3, dtype=R.dtype) - 0.5 * RtR)

    def random(self, key, shape=(), dtype=None):
        """Haar-uniform rotations (normalized Gaussian quaternions)."""
        dtype = dtype or jnp.result_type(float)
        q = jax.random.normal(key, tuple(shape) + (4,), dtype=dtype)
        return self.from_quaternion(q)

    # --- SO(3)-specific ---------------------------------------------------------------------
    def from_quaternion(self, q):
        """Rotation matrix of a quaternion ``(w, x, y, z)`` (scalar first; normalized here)."""
        q = check_shape(q, (4,), "q", "SO3.from_quaternion")
        q = q / jnp.linalg.norm(q, axis=-1, keepdims=True)
        w, x, y, z = q[..., 0], q[..., 1], q[..., 2], q[..., 3]
        return jnp.stack(
            [
                jnp.stack([1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y)], -1),
                jnp.stack([2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x)], -1),
                jnp.stack([2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y)], -1),
            ],
            -2,
        )

    def to_quaternion(self, g):
        """Unit quaternion ``(w, x, y, z)`` with ``w ≥ 0`` (Shepperd's method)."""
        return _quat_from_matrix(check_shape(g, (3, 3), "g", "SO3.to_quaternion"))

    def from_axis_angle(self, axis, angle):
        axis = check_shape(axis, (3,), "axis", "SO3.from_axis_angle")
        axis = axis / jnp.linalg.norm(axis, axis=-1, keepdims=True)
        return self.exp(as_float(angle)[..., None] * axis)


SO3 = SpecialOrthogonal3()
"""The rotation group SO(3): 3×3 rotation matrices, so(3) ≅ R³ by hat(w)u = w × u."""
