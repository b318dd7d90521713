"""Input validation shared by the Riemannian / constraint layer.

Shapes are static, so shape errors are raised as ``ValueError`` (naming the argument and what was
expected) in eager mode and under ``jit`` alike.  Value checks (finiteness, positivity, positive
definiteness) raise ``ValueError`` eagerly; when the value is traced (inside ``jit``, ``vmap``,
``grad``) they are compiled with :func:`equinox.error_if` / :func:`equinox.branched_error_if`,
which raise ``EquinoxRuntimeError`` when the program runs.  Constructors use the ``check_*``
functions (one check per parameter, once); the per-call methods use a :class:`Checker`, which
merges all the value checks of a call into a single runtime check (each ``error_if`` is a host
callback that costs compile time).
"""

from __future__ import annotations

import functools

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from .._internal.eager import quick_compiled
from .._internal.tracing import is_traced
from .._linalg import (
    describe_degeneracy,
    is_degenerate,
    pivot_ratio,
    small_cho_solve,
    small_cholesky,
)
from ..lie._math import as_float

__all__ = [
    "Checker",
    "check_finite",
    "check_positive",
    "check_spd",
    "cho_solve",
    "eager_program",
]


def _concrete_leaf(x) -> bool:
    """An array or number given by value (not a tracer, not a Python container of numbers)."""
    return isinstance(x, jax.Array | np.ndarray | float | int) and not is_traced(x)


def _hashable(x) -> bool:
    try:
        hash(x)
    except TypeError:
        return False
    return True


def eager_program(fn):
    """Run ``fn`` as one compiled program when it is called eagerly.

    Called op by op, JAX compiles every primitive separately: the first ``christoffel`` of a
    process compiled 48 one-operation programs (0.6–2 s on a 2-core CPU). When every array
    argument is given by value (a JAX or NumPy array, or a number) and every other argument is
    hashable (the metric function, a module without arrays), the call is compiled whole by
    :func:`equinox.filter_jit` and cached per function and shapes; otherwise (under ``jit``,
    ``vmap``, ``grad``, or with unhashable arguments) ``fn`` is called as it is, traced into the
    caller's program.

    Errors keep their eager form: shape errors are raised while tracing (``ValueError``); a value
    check that fails when the program runs (:class:`Checker`) makes the call run again op by op,
    which raises the ``ValueError`` with its eager diagnosis (e.g. the measured pivot ratio).
    """
    compiled = quick_compiled(fn)

    @functools.wraps(fn)
    def call(*args, **kwargs):
        leaves = jax.tree_util.tree_leaves((args, kwargs))
        arrays = [x for x in leaves if isinstance(x, jax.Array | np.ndarray)]
        if (
            not arrays
            or any(is_traced(x) for x in leaves)
            or any(isinstance(x, list | tuple) for x in args)
            or not all(_concrete_leaf(x) or _hashable(x) for x in leaves)
        ):
            return fn(*args, **kwargs)
        try:
            return compiled(*args, **kwargs)
        except eqx.EquinoxRuntimeError as err:
            fn(*args, **kwargs)  # raises the eager ValueError with its diagnosis
            raise err

    call.__wrapped_eager__ = fn
    return call


def _fail(x, bad, msg: str):
    """Raise ``ValueError(msg)`` eagerly, or attach an ``equinox.error_if`` when traced."""
    if is_traced(bad) or is_traced(x):
        return eqx.error_if(x, bad, msg)
    if bool(bad):
        raise ValueError(msg)
    return x


def check_finite(x, name: str, where: str):
    x = as_float(x)
    # eagerly in NumPy (no compile per shape on a process's first call), traced with error_if
    bad = ~jnp.all(jnp.isfinite(x)) if is_traced(x) else not np.all(np.isfinite(np.asarray(x)))
    return _fail(x, bad, f"{where}: argument '{name}' must be finite (it contains NaN or inf)")


def check_positive(x, name: str, where: str):
    """Finite and strictly positive (every entry)."""
    x = check_finite(x, name, where)
    bad = ~jnp.all(x > 0) if is_traced(x) else not np.all(np.asarray(x) > 0)
    return _fail(x, bad, f"{where}: argument '{name}' must be strictly positive, got {_show(x)}")


def _spd_defect(M):
    """Relative asymmetry and whether the symmetric part is degenerate
    (:func:`geomjax._linalg.is_degenerate`)."""
    scale = jnp.max(jnp.abs(M)) + jnp.finfo(M.dtype).tiny
    asym = jnp.max(jnp.abs(M - M.T)) / scale
    return asym, is_degenerate(0.5 * (M + M.T))


def check_spd(M, name: str, where: str, tol: float | None = None):
    """Finite, symmetric (to ``tol``, relative) and positive definite by the degeneracy criterion
    of :func:`geomjax._linalg.pivot_ratio` (``ρ > 100·n·eps``)."""
    M = check_finite(M, name, where)
    if M.ndim != 2 or M.shape[0] != M.shape[1]:
        raise ValueError(
            f"{where}: argument '{name}' must be a square matrix, got shape {tuple(M.shape)}"
        )
    tol = float(np.sqrt(np.finfo(M.dtype).eps)) if tol is None else tol
    asym, degenerate = _spd_defect(M)
    bad = (asym > tol) | degenerate
    msg = f"{where}: argument '{name}' must be symmetric positive definite, got {_show(M)}"
    if not (is_traced(bad) or is_traced(M)) and bool(degenerate):
        msg += f" ({describe_degeneracy(0.5 * (M + M.T))})"
    return _fail(M, bad, msg)


def cho_solve(G, b):
    """Unchecked Cholesky solve (for matrices validated elsewhere)."""
    return small_cho_solve(small_cholesky(G), b)


class Checker:
    """The value checks of one public call.

    Eagerly, every failed check raises a ``ValueError`` at once.  When the values are traced, the
    predicates are collected and :meth:`done` attaches a *single*
    :func:`equinox.branched_error_if` to the output (raising the message of the first failed
    check when the program runs): one runtime check per call rather than one per argument, which
    keeps compile times low.  Shape errors are always raised at trace time.
    """

    def __init__(self, where: str):
        self.where = where
        self.preds: list = []
        self.msgs: list[str] = []

    def add(self, bad, msg: str) -> None:
        if is_traced(bad):
            self.preds.append(jnp.asarray(bad))
            self.msgs.append(msg)
        elif bool(bad):
            raise ValueError(msg)

    def shape_error(self, name: str, want: str, x) -> ValueError:
        return ValueError(
            f"{self.where}: argument '{name}' must have shape {want}, got {tuple(x.shape)}"
        )

    def finite(self, x, name: str):
        x = as_float(x)
        self.add(
            ~jnp.all(jnp.isfinite(x)),
            f"{self.where}: argument '{name}' must be finite (it contains NaN or inf)",
        )
        return x

    def vector(self, x, name: str, n: int | None = None):
        """``x`` as a finite float vector of shape ``(n,)`` (any length if ``n`` is None)."""
        x = as_float(x)
        if x.ndim != 1 or (n is not None and x.shape[0] != n):
            raise self.shape_error(name, f"({n},)" if n is not None else "(n,)", x)
        return self.finite(x, name)

    def array(self, x, name: str, shape: tuple[int, ...]):
        x = as_float(x)
        if tuple(x.shape) != tuple(shape):
            raise self.shape_error(name, str(tuple(shape)), x)
        return self.finite(x, name)

    def scalar(self, x, name: str):
        x = as_float(x)
        if x.ndim != 0:
            raise ValueError(
                f"{self.where}: argument '{name}' must be a scalar, got shape {tuple(x.shape)}"
            )
        return self.finite(x, name)

    def positive(self, x, name: str):
        x = self.finite(x, name)
        self.add(~jnp.all(x > 0), f"{self.where}: argument '{name}' must be strictly positive")
        return x

    def solve(self, G, b, name: str):
        """``G⁻¹ b`` by Cholesky; a degenerate ``G`` is reported as ``name``.

        Degenerate means the pivot ratio ``ρ = min_i L_ii²/G_ii`` is not above
        ``τ = 100·n·eps`` (:func:`geomjax._linalg.pivot_ratio`): a dtype-aware, scale-invariant
        criterion that gives the same answer on every machine, rather than relying on Cholesky
        producing NaN for a round-off pivot.  The eager error reports the measured ``ρ``."""
        rho, L = pivot_ratio(G)
        bad = jnp.any(is_degenerate(G, rho))
        msg = (
            f"{self.where}: '{name}' is degenerate at this point (not positive definite by the "
            "criterion ρ = min L_ii²/G_ii > 100·n·eps: degenerate metric or dependent constraints)"
        )
        if not is_traced(bad) and bool(bad):
            raise ValueError(f"{msg}; {describe_degeneracy(G)}")
        self.add(bad, msg)
        return small_cho_solve(L, b)

    def inverse(self, G, name: str):
        """``G⁻¹`` of an SPD matrix by Cholesky (checked like :meth:`solve`).

        Used instead of a solve with ``n²`` right-hand sides (Christoffel symbols): XLA's batched
        triangular solves with many right-hand sides are several times slower on CPU than forming
        the inverse once and contracting with ``einsum``.
        """
        return self.solve(G, jnp.eye(G.shape[-1], dtype=G.dtype), name)

    def done(self, out):
        """Attach the collected runtime checks (if any) to ``out``."""
        if not self.preds:
            return out
        preds = jnp.stack([jnp.any(p) for p in self.preds])
        return eqx.branched_error_if(out, jnp.any(preds), jnp.argmax(preds), tuple(self.msgs))


def _show(x) -> str:
    if is_traced(x):
        return f"a traced array of shape {tuple(x.shape)}"
    a = np.asarray(x)
    return np.array2string(a, precision=4, threshold=12) if a.size <= 12 else f"shape {a.shape}"
