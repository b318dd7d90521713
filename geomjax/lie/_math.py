"""AD-safe scalar coefficient functions and small batched linear algebra.

Every closed form on a Lie group is a polynomial in ``hat(xi)`` whose coefficients are analytic
functions of ``t2 = theta**2`` with removable singularities at ``theta = 0`` (``sin(theta)/theta``
and friends).  Evaluating such a coefficient with a single ``jnp.where`` still produces NaN
gradients, because the derivative of the discarded branch is NaN at 0 and ``0 * nan = nan`` in the
backward pass.  The *double-where* trick substitutes a harmless argument into the exact branch
wherever the Taylor branch is selected, so both branches (and all their derivatives, Hessians
included) are finite everywhere.

Thresholds are dtype-aware.  Each Taylor polynomial carries eight terms, so its truncation error is
far below machine epsilon inside the threshold; outside it, the cancellation error of the exact
formulas is at most a few ulp of the quantities they multiply (e.g. ``(theta - sin theta)/theta**3``
is multiplied by ``hat(xi)**2`` of size ``theta**2``).

Matrix-vector products are written as broadcast-multiply-and-sum so that XLA fuses them with the
surrounding elementwise work; matrix-matrix products use ``matmul`` (measured faster on CPU for
batches of 3×3 / 4×4, see ``benchmarks/bench_lie.py``).
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np

__all__ = [
    "as_float",
    "cross",
    "eye_like",
    "half_cot_coeff",
    "mT",
    "mm",
    "mv",
    "one_minus_cos_over_sq",
    "outer",
    "se3_coeff_e",
    "se3_coeff_f",
    "sinc",
    "small_angle_threshold",
    "theta_minus_sin_over_cube",
]


def small_angle_threshold(dtype) -> float:
    """Bound on ``theta**2`` below which the Taylor branch is used (dtype-aware)."""
    return 0.5 if jnp.finfo(dtype).bits <= 32 else 0.05


def _horner(t2, coeffs):
    out = jnp.full_like(t2, coeffs[-1])
    for c in coeffs[-2::-1]:
        out = out * t2 + c
    return out


def _double_where(t2, exact, coeffs):
    """Evaluate ``exact(theta)`` away from 0 and its Taylor series in ``t2`` near 0, AD-safely."""
    small = t2 < small_angle_threshold(t2.dtype)
    # Double-where: the exact branch never sees a value near 0, so its derivatives stay finite.
    t2_safe = jnp.where(small, jnp.ones_like(t2), t2)
    theta = jnp.sqrt(t2_safe)
    # ...and the series never sees a large argument (its high powers could overflow in float32).
    series = _horner(jnp.where(small, t2, jnp.zeros_like(t2)), coeffs)
    return jnp.where(small, series, exact(theta))


# Taylor coefficients (in powers of theta**2), generated with exact rational arithmetic.
_SINC = (
    1.0,
    -1 / 6,
    1 / 120,
    -1 / 5040,
    1 / 362880,
    -1 / 39916800,
    1 / 6227020800,
    -1 / 1307674368000,
)
_B = (
    1 / 2,
    -1 / 24,
    1 / 720,
    -1 / 40320,
    1 / 3628800,
    -1 / 479001600,
    1 / 87178291200,
    -1 / 20922789888000,
)
_C = (
    1 / 6,
    -1 / 120,
    1 / 5040,
    -1 / 362880,
    1 / 39916800,
    -1 / 6227020800,
    1 / 1307674368000,
    -1 / 355687428096000,
)
_D = (
    1 / 12,
    1 / 720,
    1 / 30240,
    1 / 1209600,
    1 / 47900160,
    691 / 1307674368000,
    1 / 74724249600,
    3617 / 10670622842880000,
)
_E = (
    1 / 24,
    -1 / 720,
    1 / 40320,
    -1 / 3628800,
    1 / 479001600,
    -1 / 87178291200,
    1 / 20922789888000,
    -1 / 6402373705728000,
)
_F = (
    1 / 120,
    -1 / 2520,
    1 / 120960,
    -1 / 9979200,
    1 / 1245404160,
    -1 / 217945728000,
    1 / 50812489728000,
    -1 / 15205637551104000,
)


def sinc(t2):
    """``sin(theta)/theta`` as a function of ``t2 = theta**2``."""
    return _double_where(t2, lambda th: jnp.sin(th) / th, _SINC)


def one_minus_cos_over_sq(t2):
    """``(1 - cos theta)/theta**2``; computed as ``2 sin^2(theta/2)/theta**2`` (no cancellation)."""
    return _double_where(t2, lambda th: 2.0 * (jnp.sin(0.5 * th) / th) ** 2, _B)


def theta_minus_sin_over_cube(t2):
    """``(theta - sin theta)/theta**3``."""
    return _double_where(t2, lambda th: (th - jnp.sin(th)) / th**3, _C)


def half_cot_coeff(t2):
    """``(1 - (theta/2) cot(theta/2))/theta**2``, the ``hat(xi)**2`` coefficient of ``J^{-1}`` on
    SO(3).  Analytic for ``theta < 2 pi``."""

    def exact(th):
        h = 0.5 * th
        return (1.0 - h * jnp.cos(h) / jnp.sin(h)) / th**2

    return _double_where(t2, exact, _D)


def se3_coeff_e(t2):
    """``(theta**2 + 2 cos theta - 2)/(2 theta**4)`` (Barfoot's Q matrix on SE(3))."""
    return _double_where(t2, lambda th: (th**2 + 2.0 * jnp.cos(th) - 2.0) / (2.0 * th**4), _E)


def se3_coeff_f(t2):
    """``(2 theta - 3 sin theta + theta cos theta)/(2 theta**5)`` (Barfoot's Q matrix on SE(3))."""
    return _double_where(
        t2,
        lambda th: (2.0 * th - 3.0 * jnp.sin(th) + th * jnp.cos(th)) / (2.0 * th**5),
        _F,
    )


# ----------------------------------------------------------------------------------------------
# Small batched linear algebra (leading axes broadcast).


def mm(a, b):
    """Matrix product of ``(..., n, k)`` and ``(..., k, m)`` (batched, broadcasting)."""
    if a.shape[-1] <= 4:
        # products and sums fuse with their neighbours; on CPU a tiny ``dot`` (and each of its
        # derivatives) is a separate kernel, the main cost of a small implicit step at batch 1
        return jnp.sum(a[..., :, :, None] * b[..., None, :, :], axis=-2)
    return jnp.matmul(a, b)


def mv(a, v):
    """Matrix-vector product of ``(..., n, k)`` and ``(..., k)``."""
    return jnp.sum(a * v[..., None, :], axis=-1)


def mT(a):
    """Transpose of the last two axes."""
    return jnp.swapaxes(a, -1, -2)


def cross(a, b):
    """Cross product of ``(..., 3)`` vectors (written out; fuses better than ``jnp.cross``)."""
    a0, a1, a2 = a[..., 0], a[..., 1], a[..., 2]
    b0, b1, b2 = b[..., 0], b[..., 1], b[..., 2]
    return jnp.stack([a1 * b2 - a2 * b1, a2 * b0 - a0 * b2, a0 * b1 - a1 * b0], axis=-1)


def outer(a, b):
    return a[..., :, None] * b[..., None, :]


def eye_like(x, n: int):
    """Identity ``(n, n)`` in the dtype of ``x``."""
    return jnp.eye(n, dtype=x.dtype)


def as_float(x):
    """``jnp.asarray`` that promotes integer / bool input to the default float dtype."""
    x = jnp.asarray(x)
    if not jnp.issubdtype(x.dtype, jnp.inexact):
        x = x.astype(jnp.result_type(float))
    return x


def np_float(x) -> float:
    return float(np.asarray(x))
