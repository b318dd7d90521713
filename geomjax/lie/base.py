"""The group interface every integrator in geomjax is written against.

A group is a field-less (or static-field-only) :class:`equinox.Module`, so it is a pytree with no
leaves: it can be stored in a system, passed through ``jit`` and compared/hashed.  All methods are
pure functions of arrays and broadcast over *leading* axes: an element of SO(3) is an array of
shape ``(..., 3, 3)``, a Lie algebra vector one of shape ``(..., dim)``.

Conventions (see the documentation's Conventions page):

* left trivialization, body velocity ``xi = g^{-1} dg/dt``;
* Jacobians as in Solà, Deray & Atchuthan, *A micro Lie theory* (2018):
  ``exp(xi + d) ~ exp(xi) exp(J_r(xi) d) ~ exp(J_l(xi) d) exp(xi)``;
* ``coad(xi, mu) = ad(xi)^T mu``.  The Euler–Poincaré equation of a left-invariant Lagrangian with
  momentum ``mu = dl/dxi`` then reads ``dmu/dt = coad(xi, mu)`` (on SO(3): ``dPi/dt = Pi x Omega``).
"""

from __future__ import annotations

import abc
import functools
import types

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from .._internal.eager import eager_jit, known_value, quick_compiled
from .._internal.tracing import is_traced
from ._math import as_float

__all__ = ["LieGroup", "check_shape"]


def check_shape(x, trailing: tuple[int, ...], name: str, where: str):
    """Convert ``x`` to a float array and check that it ends with ``trailing`` axes.

    Raises a ``ValueError`` naming the argument (shapes are static, so this also works under jit).
    """
    x = as_float(x)
    n = len(trailing)
    if x.ndim < n or tuple(x.shape[x.ndim - n :]) != tuple(trailing):
        want = "(..., " + ", ".join(str(t) for t in trailing) + ")"
        raise ValueError(f"{where}: argument '{name}' must have shape {want}, got {tuple(x.shape)}")
    return x


#: Group methods on arrays compiled as one program when called eagerly (see :func:`_eager_jit`).
EAGER_JIT_METHODS = frozenset(
    "compose inverse act hat vee exp log Ad ad coad jac_left jac_left_inv jac_right "
    "jac_right_inv cay cay_inv cay_jac_left cay_jac_left_inv cay_jac_right cay_jac_right_inv "
    "defect project renormalize to_matrix to_matrix_gradient left_gradient between rplus rminus "
    "interpolate from_quaternion to_quaternion from_axis_angle from_angle from_xytheta "
    "to_xytheta from_rotation_translation rotation translation".split()
)


def _concrete(x) -> bool:
    return (
        isinstance(x, jax.Array | np.ndarray | float | int)
        and not is_traced(x)
        and not isinstance(x, bool)
    )


def _hashable(group) -> bool:
    try:
        hash(group)
    except TypeError:  # a group holding arrays cannot be a static argument
        return False
    return True


def _eager_jit(fn):
    """``fn(self, *arrays)`` compiled as one program (``jax.jit``, the group static) when every
    argument is a concrete array or number, and called as it is otherwise (under a transformation,
    where it is traced into the caller's program, or with other arguments).

    Eagerly, JAX compiles and dispatches every primitive separately: the first ``SO3.exp`` of a
    process compiled ~30 one-operation programs (0.68 s on a 2-core CPU); compiled whole it is
    one program.  Under ``jit``/``vmap``/``grad`` nothing changes (the arguments are tracers:
    the jaxpr is the same as before, which the scalarized steps rely on)."""
    jitted = eager_jit(fn, static_argnums=0)

    @functools.wraps(fn)
    def method(self, *args, **kwargs):
        if kwargs or not args or not all(_concrete(a) for a in args) or not _hashable(self):
            return fn(self, *args, **kwargs)
        return jitted(self, *args)

    method.__wrapped_eager__ = fn
    return method


def _wrap_eager_methods(cls) -> None:
    for name in EAGER_JIT_METHODS:
        fn = cls.__dict__.get(name)
        if isinstance(fn, types.FunctionType) and not hasattr(fn, "__wrapped_eager__"):
            if not getattr(fn, "__isabstractmethod__", False):
                setattr(cls, name, _eager_jit(fn))


@quick_compiled
def _membership(group, g, tol):
    """``(bad, worst)`` of :meth:`LieGroup.check`: any defect above ``tol`` or not finite, and
    the largest finite defect (``inf`` where one is not finite)."""
    d = group.defect(g)
    return jnp.any(~(d <= tol)), jnp.max(jnp.where(jnp.isfinite(d), d, jnp.inf))


def _coAd_minus_identity(A, mu):
    """``(A − 1)^T mu`` for ``A`` ``(..., n, n)``, ``mu`` ``(..., n)``."""
    A = A - jnp.eye(A.shape[-1], dtype=A.dtype)
    return jnp.sum(A * as_float(mu)[..., :, None], axis=-2)


class LieGroup(eqx.Module):
    """Abstract Lie group G with Lie algebra g ≅ R^dim.

    Concrete groups provide the abstract methods below; ``coad``, ``jac_left``, ``jac_left_inv``,
    ``between``, ``rplus``, ``rminus``, ``interpolate``, ``is_member`` and ``check`` are derived.
    """

    # --- sizes -----------------------------------------------------------------------------------
    @property
    @abc.abstractmethod
    def dim(self) -> int:
        """Dimension of the group (= of the Lie algebra coordinates)."""

    @property
    @abc.abstractmethod
    def matrix_dim(self) -> int:
        """Size n of the n×n matrices returned by ``to_matrix`` / ``hat``."""

    @property
    @abc.abstractmethod
    def element_shape(self) -> tuple[int, ...]:
        """Trailing shape of one group element as stored (e.g. ``(3, 3)`` for SO(3))."""

    @property
    def name(self) -> str:
        return type(self).__name__

    # --- group structure -------------------------------------------------------------------------
    def identity(self, batch_shape: tuple[int, ...] = (), dtype=None) -> jax.Array:
        """Identity element, broadcast to ``batch_shape + element_shape`` (the identity matrix for
        matrix groups; groups stored otherwise override this)."""
        dtype = dtype or jnp.result_type(float)
        # built in NumPy and placed on the device: ``jnp.eye`` dispatched and compiled five
        # small programs on a process's first call (inside jit the array is a constant)
        eye = np.eye(self.matrix_dim, dtype=dtype)
        return jax.device_put(np.broadcast_to(eye, (*tuple(batch_shape), *self.element_shape)))

    @abc.abstractmethod
    def compose(self, g, h) -> jax.Array:
        """Group product ``g · h``."""

    @abc.abstractmethod
    def inverse(self, g) -> jax.Array:
        """Group inverse ``g^{-1}``."""

    @abc.abstractmethod
    def act(self, g, p) -> jax.Array:
        """Action of ``g`` on points ``p`` of the space the group naturally acts on."""

    # --- algebra -----------------------------------------------------------------------------
    @abc.abstractmethod
    def hat(self, xi) -> jax.Array:
        """Coordinates ``(..., dim)`` → Lie algebra matrix ``(..., n, n)``."""

    @abc.abstractmethod
    def vee(self, X) -> jax.Array:
        """Lie algebra matrix ``(..., n, n)`` → coordinates ``(..., dim)`` (inverse of ``hat``)."""

    @abc.abstractmethod
    def exp(self, xi) -> jax.Array:
        """Exponential map g → G."""

    @abc.abstractmethod
    def log(self, g) -> jax.Array:
        """Logarithm G → g on the principal branch (inverse of ``exp`` there)."""

    @abc.abstractmethod
    def Ad(self, g) -> jax.Array:
        """Adjoint representation as a ``(..., dim, dim)`` matrix: ``hat(Ad(g) xi) = g hat(xi) g^{-1}``."""

    @abc.abstractmethod
    def ad(self, xi) -> jax.Array:
        """Adjoint of the algebra as a ``(..., dim, dim)`` matrix: ``ad(xi) eta = [xi, eta]``."""

    @abc.abstractmethod
    def jac_left(self, xi) -> jax.Array:
        """Left Jacobian: ``exp(xi + d) ≈ exp(J_l(xi) d) exp(xi)``."""

    @abc.abstractmethod
    def jac_left_inv(self, xi) -> jax.Array:
        """Inverse of the left Jacobian (closed form)."""

    # --- manifold helpers --------------------------------------------------------------------
    @abc.abstractmethod
    def defect(self, g) -> jax.Array:
        """Distance-like measure of how far a stored array is from the group (0 on the group)."""

    @abc.abstractmethod
    def project(self, g) -> jax.Array:
        """Nearest group element (e.g. the polar factor for rotation matrices)."""

    def renormalize(self, g) -> jax.Array:
        """Pull an element carrying round-off back onto the group, cheaply.

        Integrators call this every step in low precision (float32), where rounding would
        otherwise let the group defect random-walk away.  Defaults to :meth:`project`; the
        rotation groups override it with one Björck (Newton–Schulz) step, which is
        quadratically convergent near the group and needs no SVD."""
        return self.project(g)

    @abc.abstractmethod
    def random(self, key, shape: tuple[int, ...] = (), dtype=None) -> jax.Array:
        """Random elements of batch shape ``shape``."""

    def to_matrix(self, g) -> jax.Array:
        """Matrix representation of ``g`` (identity for matrix groups)."""
        return as_float(g)

    def left_gradient(self, g, euclidean_grad) -> jax.Array:
        """Left-trivialized differential from the Euclidean gradient of a function ``U``.

        ``<dU(g), eta> = d/dε U(g exp(ε eta))|₀ = <∇U(g), g hat(eta)>_F``, so for a function defined
        (and differentiable) on a neighbourhood of the group in the matrix space the left-
        trivialized gradient is ``(<g^T ∇U, hat(e_i)>_F)_i``.  This is the torque of a potential
        without differentiating through ``exp``.  Shapes: ``g``, ``euclidean_grad`` as elements;
        returns ``(..., dim)``.
        """
        g = as_float(g)
        A = jnp.swapaxes(self.to_matrix(g), -1, -2) @ self.to_matrix_gradient(g, euclidean_grad)
        E = self.hat(jnp.eye(self.dim, dtype=A.dtype))  # (dim, n, n) basis of the algebra
        return jnp.einsum("...jk,ijk->...i", A, E)

    def to_matrix_gradient(self, g, euclidean_grad) -> jax.Array:
        """Euclidean gradient with respect to the stored element → with respect to its matrix
        (identity for matrix groups)."""
        return as_float(euclidean_grad)

    def cay(self, xi) -> jax.Array:
        """Cayley map ``(I - hat(xi)/2)^{-1}(I + hat(xi)/2)`` (second-order accurate retraction)."""
        raise NotImplementedError(f"{self.name} has no Cayley map")

    def cay_inv(self, g) -> jax.Array:
        """Inverse of :meth:`cay`."""
        raise NotImplementedError(f"{self.name} has no Cayley map")

    def cay_jac_left(self, xi) -> jax.Array:
        """Left Jacobian of the Cayley map: ``cay(xi + d) ≈ exp(Jcay_l(xi) d) cay(xi)``.

        Generic fallback by forward-mode differentiation; groups override it with closed forms.
        """
        xi = as_float(xi)

        def one(x):
            C = self.to_matrix(self.cay(x))
            dC = jax.jacfwd(lambda y: self.to_matrix(self.cay(y)))(x)
            Ci = jnp.linalg.inv(C)
            return jax.vmap(lambda D: self.vee(D @ Ci), in_axes=-1, out_axes=-1)(dC)

        flat = xi.reshape(-1, self.dim)
        return jax.vmap(one)(flat).reshape(xi.shape + (self.dim,))

    def cay_jac_left_inv(self, xi) -> jax.Array:
        """Inverse of :meth:`cay_jac_left` (Kobilarov–Marsden's right-trivialized ``dcay^{-1}``)."""
        return jnp.linalg.inv(self.cay_jac_left(xi))

    def cay_jac_right(self, xi) -> jax.Array:
        """``cay(xi + d) ≈ cay(xi) exp(Jcay_r(xi) d)``; equals ``Jcay_l(-xi)``."""
        return self.cay_jac_left(-as_float(xi))

    def cay_jac_right_inv(self, xi) -> jax.Array:
        return self.cay_jac_left_inv(-as_float(xi))

    def cay_coAd_increment(self, xi, mu) -> jax.Array:
        """``Ad(cay(xi))^T mu − mu``: the rotation of the momenta in a Cayley LGVI step, as an
        increment (the step adds it to ``mu`` last, compensated in float32).

        Groups whose ``Ad(cay(xi))`` is ``1 + O(|xi|)`` override it to form the increment
        without the identity (SO(3), SE(3)): rounded to float32, the entries ``1 + O(|xi|²)``
        of ``Ad(cay(xi))`` err with one sign for many steps, and the coadjoint orbit (``|Pi|``
        on SO(3)) then drifts in one direction.  This default subtracts the identity from the
        matrix."""
        return _coAd_minus_identity(self.Ad(self.cay(xi)), mu)

    def exp_coAd_increment(self, xi, mu) -> jax.Array:
        """``Ad(exp(xi))^T mu − mu`` (see :meth:`cay_coAd_increment`)."""
        return _coAd_minus_identity(self.Ad(self.exp(xi)), mu)

    # --- derived -----------------------------------------------------------------------------
    def coad(self, xi, mu) -> jax.Array:
        """``(ad_xi)^T mu``: the Euler–Poincaré force term, ``dmu/dt = coad(xi, mu)``.

        Note the sign: several papers (Cabrera, Chevallier) write ``ad*_xi := -(ad_xi)^T``.
        """
        A = self.ad(xi)
        mu = as_float(mu)
        return jnp.sum(A * mu[..., :, None], axis=-2)

    def jac_right(self, xi) -> jax.Array:
        """Right Jacobian: ``exp(xi + d) ≈ exp(xi) exp(J_r(xi) d)``; equals ``J_l(-xi)``."""
        return self.jac_left(-as_float(xi))

    def jac_right_inv(self, xi) -> jax.Array:
        """Inverse of the right Jacobian; equals ``J_l^{-1}(-xi)``."""
        return self.jac_left_inv(-as_float(xi))

    def between(self, g, h) -> jax.Array:
        """``g^{-1} h``."""
        return self.compose(self.inverse(g), h)

    def rplus(self, g, xi) -> jax.Array:
        """``g · exp(xi)`` (right / body perturbation)."""
        return self.compose(g, self.exp(xi))

    def rminus(self, g, h) -> jax.Array:
        """``log(h^{-1} g)`` so that ``rplus(h, rminus(g, h)) = g``."""
        return self.log(self.between(h, g))

    def interpolate(self, g, h, t) -> jax.Array:
        """Geodesic (one-parameter subgroup) interpolation ``g exp(t log(g^{-1} h))``."""
        t = as_float(t)
        return self.rplus(g, t[..., None] * self.log(self.between(g, h)))

    def default_tolerance(self, dtype) -> float:
        """Default tolerance of :meth:`check`: ``sqrt(eps)`` of the dtype."""
        return float(jnp.finfo(dtype).eps) ** 0.5

    def is_member(self, g, tol: float | None = None) -> jax.Array:
        """Boolean array (batch shape): is ``g`` on the group within ``tol`` (NaN → False)?"""
        g = check_shape(g, self.element_shape, "g", f"{self.name}.is_member")
        tol = self.default_tolerance(g.dtype) if tol is None else tol
        return self.defect(g) <= tol

    def check(self, g, name: str = "g", tol: float | None = None):
        """Validate that ``g`` lies on the group within ``tol`` and return it.

        Eager mode: raises ``ValueError`` naming ``name``.  Under ``jit`` the check is compiled
        with :func:`equinox.error_if` and raises ``EquinoxRuntimeError`` when the program runs.
        Shapes are checked statically in both modes.
        """
        g = check_shape(g, self.element_shape, name, f"{self.name}.check")
        tol = self.default_tolerance(g.dtype) if tol is None else tol
        msg = (
            f"argument '{name}' is not an element of {self.name}: its defect exceeds "
            f"tol={tol:.3g} or it is not finite (expected shape (..., "
            f"{', '.join(map(str, self.element_shape))}) on the group)"
        )
        # one compiled function (cached per group, shape and tol): eagerly not a compile per
        # small operation of the defect on the first call of a process
        # (the primal value under an eager grad/jvp: checked as a tracer, each small operation
        # would compile on its own)
        g_known = known_value(g)
        bad, worst = _membership(self, g if g_known is None else g_known, tol)
        if is_traced(bad):  # under a transformation (also for a constant g inside jit)
            return eqx.error_if(g, bad, msg)
        if bool(bad):
            raise ValueError(f"{msg}; largest defect {float(worst):.3g}")
        return g

    def __repr__(self) -> str:
        return f"geomjax.{self.name}"

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        _wrap_eager_methods(cls)


_wrap_eager_methods(LieGroup)  # the derived methods (coad, jac_right, between, ...)
