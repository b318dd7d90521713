"""Struct-of-arrays kernels for rigid bodies on SO(3) (the hot path of LGVI and the splitting).

Inside :func:`geomjax.simulate` the state of an SO(3) system is carried as one ``(12,)`` array
(``R`` row-major, then ``Pi``) and every step is written on its 12 scalar components instead of on
``(3, 3)`` matrices and ``(3,)`` vectors.  Under ``jax.vmap`` each component is a ``(batch,)``
slice, and the step compiles to a few fused, vectorized loops over the batch instead of many small
3×3 operations (matmuls, LAPACK calls).  The arithmetic is the same as in the array form; only the
layout differs, and the conversion at save points is exact.

Under ``jax.vmap`` that ``(12,)`` vector becomes a ``(batch, 12)`` array, batch first: every
step reads its components with a stride of 12 and writes them back through a select chain
(:func:`join`).  Where :func:`geomjax.simulate` is itself vmapped it traces its loop in the
*batch-last* layout instead (:func:`batch_last_carry`): the carry is a tuple of the 12 (or 15)
scalars, each a contiguous ``(batch,)`` vector under ``jax.vmap``, as in a hand-written
batch-last kernel, with no stacking in the loop.  Unbatched, a tuple would cost one kernel per
entry, hence the vector there.  The two layouts hold the same numbers.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable

import equinox as eqx
import jax
import jax.numpy as jnp

from .._internal.scalarize import Scalarized, ScalarTuples
from .._linalg import select_stack, solve3_scalars, stack_scalars, two_sum
from .newton import any_member, newton_solve_impl, unroll_scalar_iterations

_BATCH_LAST = [False]


@contextlib.contextmanager
def batch_last_carry(on: bool = True):
    """Within this context (read when a function is traced), :func:`to_carry` and :func:`join`
    build the carry as a tuple of scalars (the batch-last layout under ``jax.vmap``, module
    docstring) instead of one vector.  :func:`geomjax.simulate` traces its loop this way when
    it is vmapped.

    (A ``(batch, 15)`` carry read with stride 15 and written by selects keeps XLA:CPU from
    vectorizing the step over the batch; figures: the architecture page, "Measured design
    choices".)"""
    _BATCH_LAST.append(bool(on))
    try:
        yield
    finally:
        _BATCH_LAST.pop()


_HAND_WRITTEN = [False]


@contextlib.contextmanager
def hand_written_derivatives(on: bool = True):
    """Within this context (read when a step is traced) the LGVI's SO(3) step differentiates
    its explicit part by the hand-written rule of :func:`cayley_step`.  :func:`geomjax.simulate`
    and :class:`geomjax.ReversibleAdjoint` trace their steps in it: reverse mode through a run
    then runs the hand-written product.  Elsewhere (a single step linearized by forward mode,
    the trajectory optimizers' Jacobians and DDP's second derivatives) JAX's own derivatives of
    the scalar code are cheaper (attitude problem, 40 nodes, DDP: 2.3 ms per iteration against
    2.7 with the rule; CPU time, idle machine)."""
    _HAND_WRITTEN.append(bool(on))
    try:
        yield
    finally:
        _HAND_WRITTEN.pop()


def hand_written() -> bool:
    return _HAND_WRITTEN[-1]


def to_carry(R, Pi, compensated: bool = False, Pi_lo=None):
    """``(R, Pi)`` → the ``(12,)`` carry ``(R row-major, Pi)``; ``compensated``: the ``(15,)``
    carry ``(R, Pi, Pi_lo)`` with the compensation ``Pi_lo`` (:func:`add_compensated`; zero
    unless given).  Within :func:`batch_last_carry`: the same entries as a tuple of scalars."""
    if compensated and Pi_lo is None:
        Pi_lo = jnp.zeros_like(Pi)
    if _BATCH_LAST[-1]:
        R = jnp.reshape(R, (9,))
        lo = tuple(Pi_lo[i] for i in range(3)) if compensated else ()
        return (*(R[i] for i in range(9)), *(Pi[i] for i in range(3)), *lo)
    parts = [jnp.reshape(R, (9,)), Pi]
    if compensated:
        parts.append(Pi_lo)
    return jnp.concatenate(parts)


def carry_extra(c):
    """The compensated momentum of a ``(15,)`` carry as ``{"momentum": Pi, "momentum_lo":
    Pi_lo}`` (``(3,)`` each, no derivative), ``None`` for a ``(12,)`` carry: what
    ``AbstractMethod.carry_extra`` returns for the SO(3) kernels."""
    lo = compensation(c)
    if lo is None:
        return None
    hi = split(c)[1]
    return jax.lax.stop_gradient({"momentum": jnp.stack(hi), "momentum_lo": jnp.stack(lo)})


def resume_momentum(mu, extra):
    """``(hi, lo)`` of a compensated momentum from the state's ``mu = fl(hi + lo)`` and
    ``extra = carry_extra(...)``: ``hi = mu + (extra_hi − mu)`` is exact (the two differ by at
    most one ulp, so the difference is exact, Sterbenz) and carries the derivative of ``mu``."""
    hi = mu + jax.lax.stop_gradient(extra["momentum"] - mu)
    return hi, jax.lax.stop_gradient(extra["momentum_lo"])


def from_carry(c):
    """The ``(12,)`` or ``(15,)`` carry (either layout) → ``(R, Pi)`` (``Pi + Pi_lo`` rounded)."""
    if isinstance(c, tuple):
        Pi = jnp.stack(c[9:12])
        if len(c) == 15:
            Pi = Pi + jnp.stack(c[12:15])
        return jnp.reshape(jnp.stack(c[:9]), (3, 3)), Pi
    Pi = c[9:12]
    if c.shape[-1] == 15:
        Pi = Pi + c[12:15]
    return jnp.reshape(c[:9], (3, 3)), Pi


def split(c):
    """The carry as scalars: ``(R entries (9,), Pi entries (3,))``."""
    if isinstance(c, tuple):
        return tuple(c[:9]), tuple(c[9:12])
    return tuple(c[i] for i in range(9)), tuple(c[9 + i] for i in range(3))


def compensation(c):
    """``Pi_lo`` of a ``(15,)`` carry as 3 scalars, or ``None`` for a ``(12,)`` carry."""
    if isinstance(c, tuple):
        return tuple(c[12:15]) if len(c) == 15 else None
    return tuple(c[12 + i] for i in range(3)) if c.shape[-1] == 15 else None


def split_tail(c, n):
    """``(carry, tail)``: a carry built with ``join(..., tail=)`` of ``n`` entries → the state's
    carry and the ``n`` tail scalars."""
    if isinstance(c, tuple):
        return c[:-n], c[-n:]
    m = c.shape[-1] - n
    return c[:m], tuple(c[m + i] for i in range(n))


def carry_dtype(c):
    """The dtype of a carry (either layout)."""
    return c[0].dtype if isinstance(c, tuple) else c.dtype


def add_compensated(x, lo, d):
    """``x + d`` carried as ``(hi, lo)``: compensated (Kahan) summation of the step increments
    ``d`` into ``x``, component by component.

    ``hi = fl(x + (d + lo))`` and the new ``lo`` is its exact rounding error
    (:func:`two_sum`), so nothing of an increment below half an ulp of ``x`` is lost.  Without
    it, float32 momenta stagnate where an increment is that small for many steps (free body
    near the middle axis, ``dt = 1e-3``: ``|Pi|²`` off by 1e-4 for a while, in every
    float32 integrator that adds increments to a float32 state, RK4 as much as the LGVI).  In
    exact arithmetic ``lo = 0``: derivatives go through ``hi`` alone."""
    out = tuple(two_sum(x[i], d[i] + lo[i]) for i in range(3))
    return tuple(o[0] for o in out), tuple(o[1] for o in out)


def join(R, Pi, lo=None, tail=()):
    """Scalars → carry, as one vector written by a single fused kernel
    (:func:`geomjax._linalg.stack_scalars`; ``jnp.stack`` would be one kernel per entry plus a
    concatenate at batch 1).  Under ``jax.vmap`` every output of a step lands in one array, so
    XLA fuses the step into (nearly) one loop over the batch.  Within :func:`batch_last_carry`
    the tuple of scalars itself.  ``tail``: more scalars after the state's (a method's own,
    e.g. the LGVI's carried torque): in the same vector, so that the one fused kernel computes
    what they share with the state once (XLA:CPU fuses each output of a loop body into its own
    kernel and re-evaluates shared producers in each)."""
    entries = (*R, *Pi) if lo is None else (*R, *Pi, *lo)
    entries = (*entries, *tail)
    if _BATCH_LAST[-1]:
        return tuple(entries)
    return stack_scalars(entries)


def as_vector3(x):
    """3 scalars → a ``(3,)`` vector (a Newton iterate carried as one array: one kernel per
    iteration for the update instead of one per component at batch 1; a select chain, which
    the implicit-function-theorem tangents can go through)."""
    return select_stack(x)


def cayley_residual_vec(x, args):
    """:func:`cayley_residual` on a ``(3,)`` iterate."""
    return as_vector3(cayley_residual(as_tuple3(x), args))


def cayley_jac_solve_vec(x, args, r):
    """:func:`cayley_jac_solve` on ``(3,)`` arrays."""
    return as_vector3(cayley_jac_solve(as_tuple3(x), args, as_tuple3(r)))


def pack(carry):
    """``(R entries, Pi entries)`` scalars → ``(R (3, 3), Pi (3,))`` arrays."""
    R, Pi = carry
    return jnp.stack([jnp.stack(R[3 * i : 3 * i + 3]) for i in range(3)]), jnp.stack(Pi)


def as_tuple3(v):
    return (v[0], v[1], v[2])


def cross(a, b):
    return (a[1] * b[2] - a[2] * b[1], a[2] * b[0] - a[0] * b[2], a[0] * b[1] - a[1] * b[0])


def dot(a, b):
    return a[0] * b[0] + a[1] * b[1] + a[2] * b[2]


def inertia_apply(I, x):
    """``I x`` for principal moments (3 entries) or a full matrix (9 entries, row-major)."""
    if len(I) == 3:
        return (I[0] * x[0], I[1] * x[1], I[2] * x[2])
    return tuple(I[3 * i] * x[0] + I[3 * i + 1] * x[1] + I[3 * i + 2] * x[2] for i in range(3))


def inertia_solve(I, b):
    if len(I) == 3:
        return (b[0] / I[0], b[1] / I[1], b[2] / I[2])
    return solve3_scalars(I, b)


def inertia_entries(I, principal: bool):
    if principal:
        return (I[0, 0], I[1, 1], I[2, 2])
    return tuple(I[i, j] for i in range(3) for j in range(3))


def cayley_residual(x, args):
    """``I x + h/2 x × I x + h²/4 (x·I x) x − b`` (discrete Legendre transform, Cayley LGVI)."""
    I, b, h = args
    y = inertia_apply(I, x)
    c = cross(x, y)
    d = 0.25 * h * h * dot(x, y)
    return tuple(y[i] + 0.5 * h * c[i] + d * x[i] - b[i] for i in range(3))


def cayley_jac_solve(x, args, r):
    """Solve ``J(x) d = r`` with ``J = I + h/2 (hat(x) I − hat(I x)) + h²/4 (2 x (I x)^T + (x·I x) 1)``
    by Cramer's rule."""
    I, _, h = args
    y = inertia_apply(I, x)
    hh, q = 0.5 * h, 0.25 * h * h
    d = dot(x, y)
    if len(I) == 3:
        Im = (I[0], 0.0, 0.0, 0.0, I[1], 0.0, 0.0, 0.0, I[2])
    else:
        Im = I
    # hat(x) I (row i of hat(x) times column j of I)
    hx = ((0.0, -x[2], x[1]), (x[2], 0.0, -x[0]), (-x[1], x[0], 0.0))
    hy = ((0.0, -y[2], y[1]), (y[2], 0.0, -y[0]), (-y[1], y[0], 0.0))
    a = []
    for i in range(3):
        for j in range(3):
            if len(I) == 3:  # hat(x) diag(I): entry hx[i][j] I[j]
                hxI = hx[i][j] * I[j] if i != j else 0.0
            else:
                hxI = sum(hx[i][k] * Im[3 * k + j] for k in range(3) if i != k)
            v = Im[3 * i + j] + hh * (hxI - hy[i][j]) + q * 2.0 * x[i] * y[j]
            if i == j:
                v = v + q * d
            a.append(v)
    return solve3_scalars(tuple(a), r)


def cayley_predictor(I, b, h):
    """Second-order accurate explicit guess ``I^{-1}(b − h/2 xa × b)``, ``xa = I^{-1} b``."""
    xa = inertia_solve(I, b)
    c = cross(xa, b)
    return inertia_solve(I, tuple(b[i] - 0.5 * h * c[i] for i in range(3)))


def inertia_det(I):
    """``det I`` for principal moments (3 entries) or a full matrix (9 entries, row-major)."""
    if len(I) == 3:
        return I[0] * I[1] * I[2]
    return (
        I[0] * (I[4] * I[8] - I[5] * I[7])
        - I[1] * (I[3] * I[8] - I[5] * I[6])
        + I[2] * (I[3] * I[7] - I[4] * I[6])
    )


def cayley_solve_scalar(I, b, h, iters: int, early_exit: bool = False):
    """Solve the Cayley discrete Legendre transform (:func:`cayley_residual` ``= 0``) through
    one scalar equation: ``iters`` Newton iterations on ``delta = h²/4 |x|²`` and ``x`` in
    closed form from it.

    With ``a = h x/2`` the Cayley trivialized tangent is ``Jcay(h x)^{-T} = 1 + hat(a) + a a^T``,
    whose inverse is ``(1 − hat(a))/(1 + |a|²)`` (multiply out: ``hat(a)² = a a^T − |a|² 1``).
    The equation ``(1 + hat(a) + a a^T) I x = b`` is therefore

        c I x + h/2 x × b = b,        c = 1 + delta = 1 + h²/4 |x|²,

    linear in ``x`` for a given ``c``: ``x = (c I − h/2 hat(b))^{-1} b``.  For symmetric ``I``,
    ``adj(A + hat(k)) = adj(A) + k k^T − hat(A k)`` and ``det(A + hat(k)) = det A + k·A k``
    give the closed form

        x(c) = (c² I^{-1} b + c v + w) / (c (c² + q)),
        v = h/2 (I b × b)/det I,  w = h²/4 |b|² b/det I,  q = h²/4 (b·I b)/det I,

    and ``c = 1 + h²/4 |x(c)|²`` becomes the scalar polynomial equation (``v ⊥ w``)

        f(delta) = delta c² (c² + q)² − h²/4 (c⁴ |I^{-1}b|² + 2 c³ I^{-1}b·v
                                             + c² (|v|² + 2 I^{-1}b·w) + |w|²) = 0.

    Every root gives a solution of the vector equation and conversely, so the result equals
    the vector Newton iteration's (:func:`cayley_jac_solve`) to round-off.  Newton on ``f``
    starts from ``delta0 = h²/4 |x0|²``, ``x0`` the third-order predictor, the Taylor series
    of the root in ``h``: ``x0 = a − h/2 ca + h²/4 (I^{-1}(ca × b) − |a|² a)``,
    ``ca = I^{-1}(a × b)``, ``a = I^{-1} b`` (:func:`cayley_predictor` stops at ``h``); an
    absolute error ``e`` in ``delta`` moves ``x`` by ``~ e |x|``.  Measured, I in [0.5, 3]³ and b random
    (200 draws per point), largest relative error of ``x`` against a converged vector Newton,
    float64, second-order → third-order predictor: after one iteration 8.5e-9 → 3.4e-12 at
    ``h|x| = 0.1``, 1.4e-6 → 5.2e-9 at 0.2; after two 6e-16 → 5e-16 at 0.1, 1.2e-11 → 4e-16 at
    0.2, 1.3e-8 → 1.9e-12 at 0.3; three reach round-off up to ``h|x| = 0.4`` (0.3 before).
    With ``early_exit`` (below) the mean count of iterations run falls from 2.2 to 2.0 at
    ``h|x| = 0.1`` and from 3.0 to 2.0 at 0.15 and 0.2 (the stage steps of the processed
    compositions, :class:`geomjax.ProcessedComposition`, at errors 1e-8..1e-10).
    An iteration costs ~25 flops and one division (the vector Newton's: the residual, the 3×3
    Jacobian and Cramer's rule, ~130 flops), a fixed count of them: a rolled loop on CPU (see
    below), unrolled on accelerators, and on CPU for an unbatched solve when XLA's small-loop
    setting is not in effect (geomjax imported after JAX's first computation: a rolled loop is
    then a ``while`` of dispatched kernels in every step;
    :func:`geomjax.integrators.newton.unroll_scalar_iterations`).
    The caller reports the residual of the vector equation at the returned ``x``.

    ``early_exit``: stop after the first iteration whose update has ``|Δdelta|² ≤ 0.01 eps``
    (float32 and below: ``|Δdelta| ≤ 4 eps``, as :func:`geomjax.integrators.newton.newton_solve`):
    ``x`` depends on ``delta`` through ``c = 1 + delta ≥ 1``, and the next update,
    ``~ K |Δdelta|²`` with ``K ~ (h|x|)² < 1``, would move ``x`` by less than round-off.
    Under ``jax.vmap`` the loop runs while any member goes on (every member
    iterates).  Only where the iterations are a rolled loop."""
    hh, q4 = 0.5 * h, 0.25 * h * h
    # divisions by I and det I (not products with precomputed inverses): under
    # ReversibleAdjoint the parameter-only values of a step are hoisted out of the backward
    # loop and carried into it, and five more of them pushed the LGVI's backward carry past
    # adjoint._PACK_MAX (no packed carry)
    det = inertia_det(I)
    a = inertia_solve(I, b)
    Ib = inertia_apply(I, b)
    cr = cross(Ib, b)
    v = tuple(hh * cr[i] / det for i in range(3))
    sbb = q4 * dot(b, b) / det
    w = tuple(sbb * b[i] for i in range(3))
    q = q4 * dot(b, Ib) / det
    A4 = dot(a, a)
    A3 = 2.0 * dot(a, v)
    A2 = dot(v, v) + 2.0 * dot(a, w)
    A0 = dot(w, w)
    # delta0 from the third-order predictor (the Taylor series of the root in h to h²):
    # x0 = a − h/2 ca + h²/4 (I^{-1}(ca × b) − |a|² a),  ca = I^{-1}(a × b)
    ca = inertia_solve(I, cross(a, b))
    ca2 = inertia_solve(I, cross(ca, b))
    x0 = tuple(a[i] - hh * ca[i] + q4 * (ca2[i] - A4 * a[i]) for i in range(3))
    d = q4 * dot(x0, x0)

    def newton(_, d):
        c = 1.0 + d
        c2 = c * c
        p = c2 + q
        p2 = p * p
        N2 = c2 * (c2 * A4 + c * A3 + A2) + A0
        dN2 = c * (c * (4.0 * c * A4 + 3.0 * A3) + 2.0 * A2)
        f = d * c2 * p2 - q4 * N2
        fp = c2 * p2 + d * c * p * (2.0 * p + 4.0 * c2) - q4 * dN2
        return d - f / fp

    if not unroll_scalar_iterations(d):
        # a rolled loop on CPU: its carry materializes the root once; unrolled, XLA:CPU's
        # fusion recomputed the whole chain of iterations inside the kernel of each of the
        # three components of x (batch 1024, float64: 69 -> 49 ns per body-step; the same
        # reason as newton._newton's loop)
        if early_exit and iters > 1:
            finfo = jnp.finfo(jnp.result_type(d))
            eps = float(finfo.eps)
            thr = 0.01 * eps if finfo.bits > 32 else 16.0 * eps * eps

            def cond(carry):
                i, d_prev, d = carry
                step = d - d_prev
                return any_member((i == 0) | ((i < iters) & (step * step > thr)))

            def body(carry):
                i, _, d = carry
                return i + 1, d, newton(i, d)

            _, _, d = jax.lax.while_loop(cond, body, (0, d, d))
        else:
            d = jax.lax.fori_loop(0, iters, newton, d)
    else:
        for k in range(iters):
            d = newton(k, d)
    c = 1.0 + d
    c2 = c * c
    p = c2 + q
    inv = 1.0 / (c * p)
    x = tuple((c2 * a[i] + c * v[i] + w[i]) * inv for i in range(3))
    # 1/c = 4/(4 + |h x|²): the factor of cay(h x) (cay_increment), without a division
    return x, p * inv


@functools.partial(jax.custom_jvp, nondiff_argnums=(3, 4))
def cayley_guess(I, b, h, iters: int, early_exit: bool):
    """:func:`cayley_solve_scalar` as the *guess* of a solve differentiated elsewhere: its
    tangents are declared zero.

    The LGVI hands ``x`` to :func:`~geomjax.integrators.newton.newton_solve` with no iteration
    (whose implicit-function-theorem rule ignores the guess's tangent) and the factor to
    :func:`cay_increment` (whose rule, :func:`_cay_factor`, differentiates ``4/(4 + |w|²)``
    instead).  Differentiated through, the ~130 scalar operations and the ``while`` loop of the
    solve were each linearized by JAX and then discarded: with this rule they are evaluated
    once, not differentiated (the README's eager gradient, 100 steps: the trace of
    ``jax.jit(jax.grad(loss))`` 0.71 → 0.53 s CPU, loaded 2-core CPU).  Where JAX drops custom
    rules (the primal part of a linearized ``scan``, which a second derivative differentiates
    again) the iteration itself is differentiated, as without this wrapper; both rules above
    then drop out too, so nothing reads a zero tangent."""
    return cayley_solve_scalar(I, b, h, iters, early_exit=early_exit)


@cayley_guess.defjvp
def _cayley_guess_jvp(iters, early_exit, primals, tangents):
    out = cayley_guess(*primals, iters, early_exit)
    return out, jax.tree_util.tree_map(jnp.zeros_like, out)


def cay_matrix(w):
    """Entries of ``cay(w) = I + 4/(4+|w|²)(hat(w) + hat(w)²/2)`` (row-major tuple of 9)."""
    n2 = dot(w, w)
    c = 4.0 / (4.0 + n2)
    hc = 0.5 * c
    w0, w1, w2 = w
    return (
        1.0 + hc * (w0 * w0 - n2),
        c * (-w2 + 0.5 * w0 * w1),
        c * (w1 + 0.5 * w0 * w2),
        c * (w2 + 0.5 * w1 * w0),
        1.0 + hc * (w1 * w1 - n2),
        c * (-w0 + 0.5 * w1 * w2),
        c * (-w1 + 0.5 * w2 * w0),
        c * (w0 + 0.5 * w2 * w1),
        1.0 + hc * (w2 * w2 - n2),
    )


def cay_increment(w, c=None):
    """Entries of ``cay(w) − I = c (hat(w) + hat(w)²/2)``, ``c = 4/(4+|w|²)`` (row-major tuple
    of 9), without the identity (``c``: that factor if the caller has it).

    The step applies the rotation as ``v + (cay(w) − I)^T v`` (:func:`rotate_increment`):
    with the entries ``1 + O(|w|²)`` of :func:`cay_matrix` rounded to the float32 grid next to
    1, the rounding of the diagonal is a function of the slowly varying ``w`` and has the same
    sign for many steps, so ``cay(w)`` is not orthogonal to round-off *in one direction* and
    ``|Pi|`` drifts (free body, float32, 1e5 steps: 5e-5 to 5e-4 relative).  The increment is
    ``O(|w|)`` and formed to relative round-off, so the rotated vector's norm is off by
    ``O(eps |w|)`` plus the rounding of the final sum (unbiased)."""
    c = 4.0 / (4.0 + dot(w, w)) if c is None else _cay_factor(w, c)
    hc = 0.5 * c
    w0, w1, w2 = w
    return (
        -hc * (w1 * w1 + w2 * w2),
        c * (-w2 + 0.5 * w0 * w1),
        c * (w1 + 0.5 * w0 * w2),
        c * (w2 + 0.5 * w1 * w0),
        -hc * (w0 * w0 + w2 * w2),
        c * (-w0 + 0.5 * w1 * w2),
        c * (-w1 + 0.5 * w2 * w0),
        c * (w0 + 0.5 * w2 * w1),
        -hc * (w0 * w0 + w1 * w1),
    )


@jax.custom_jvp
def _cay_factor(w, c):
    """``c``, a value of ``4/(4 + |w|²)`` the caller has (:func:`cayley_solve_scalar`), with
    the derivative of ``4/(4 + |w|²)`` (the tangent of ``c`` is ignored)."""
    return c


@_cay_factor.defjvp
def _cay_factor_jvp(primals, tangents):
    w, c = primals
    dw, _ = tangents
    # c again through this rule: a higher derivative also sees the derivative of 4/(4 + |w|²),
    # whatever the tangent of the c given (cayley_guess declares it zero)
    c = _cay_factor(w, c)
    return c, -0.5 * c * c * dot(w, dw)


def rotate_increment(K, v):
    """``(1 + K)^T v`` as ``v + K^T v`` (``K`` from :func:`cay_increment`)."""
    d = matT_vec(K, v)
    return tuple(v[j] + d[j] for j in range(3))


def matmul_increment(A, K):
    """``A (1 + K)`` as ``A + A K`` (``K`` from :func:`cay_increment`)."""
    return tuple(
        A[3 * i + j] + sum(A[3 * i + k] * K[3 * k + j] for k in range(3))
        for i in range(3)
        for j in range(3)
    )


def matmul(A, B):
    return tuple(
        sum(A[3 * i + k] * B[3 * k + j] for k in range(3)) for i in range(3) for j in range(3)
    )


def matT_vec(A, v):
    """``A^T v``."""
    return tuple(A[j] * v[0] + A[3 + j] * v[1] + A[6 + j] * v[2] for j in range(3))


def axis_flow(R, Pi, inv_I, i, tau, exact=False, increments=None):
    """Flow of ``H_i = Pi_i²/(2 I_i)`` for time ``tau`` (splitting sub-step): a rotation about
    body axis ``i`` by ``phi = tau Pi_i/I_i`` (``Pi_i`` is constant along it).

    ``exact=True`` uses ``(cos phi, sin phi)``; by default the rotation is the Cayley rotation
    ``((1 − phi²/4), phi)/(1 + phi²/4)`` — the implicit midpoint rule of the linear sub-flow, which
    is explicit here, symplectic and norm-preserving, and needs no trigonometric function (these
    dominate the cost of a step in float64).

    ``increments``: a tuple of 3 running sums of the momentum's increments (compensated
    summation, :func:`add_compensated`); then ``(R, Pi, increments)`` is returned with this
    sub-flow's increments of ``Pi`` added."""
    j, k = (i + 1) % 3, (i + 2) % 3
    phi = tau * Pi[i] * inv_I[i]
    # the rotation in increment form, with cm1 = cos − 1 formed directly (as cay_increment:
    # c = 1 − O(phi²) rounded next to 1 errs with one sign for many steps in float32)
    if exact:
        sh = jnp.sin(0.5 * phi)
        cm1, s = -2.0 * sh * sh, jnp.sin(phi)
    else:
        q = 0.25 * phi * phi
        d = 1.0 / (1.0 + q)
        cm1, s = -2.0 * q * d, phi * d
    R = list(R)
    for row in range(3):
        rj, rk = R[3 * row + j], R[3 * row + k]
        R[3 * row + j] = rj + (cm1 * rj + s * rk)
        R[3 * row + k] = rk + (cm1 * rk - s * rj)
    Pi = list(Pi)
    pj, pk = Pi[j], Pi[k]
    dj, dk = cm1 * pj + s * pk, cm1 * pk - s * pj
    Pi[j] = pj + dj
    Pi[k] = pk + dk
    if increments is None:
        return tuple(R), tuple(Pi)
    d = list(increments)
    d[j], d[k] = d[j] + dj, d[k] + dk
    return tuple(R), tuple(Pi), tuple(d)


def bjorck_increment(R):
    """``E = (1 − R^T R)/2`` (row-major tuple of 9, symmetric): one Björck step is ``R (1 + E)``."""
    RtR = {}
    for i in range(3):
        for j in range(i, 3):
            RtR[i, j] = RtR[j, i] = sum(R[3 * k + i] * R[3 * k + j] for k in range(3))
    return tuple(
        0.5 - 0.5 * RtR[i, j] if i == j else -0.5 * RtR[i, j] for i in range(3) for j in range(3)
    )


def bjorck(R):
    """One Björck (Newton–Schulz) orthonormalization step ``R (3 I − R^T R)/2``."""
    RtR = tuple(
        sum(R[3 * k + i] * R[3 * k + j] for k in range(3)) for i in range(3) for j in range(3)
    )
    M = tuple(
        (3.0 if i == j else 0.0) * 0.5 - 0.5 * RtR[3 * i + j] for i in range(3) for j in range(3)
    )
    return matmul(R, M)


class _OnRotationEntries(eqx.Module):
    """``fun`` of a rotation matrix (its Euclidean gradient with ``gradient``), called with its 9
    row-major entries as a ``(9,)`` vector; its result flattened."""

    fun: Callable
    gradient: bool = eqx.field(static=True, default=False)

    def __call__(self, r):
        fun = jax.grad(self.fun) if self.gradient else self.fun
        return jnp.reshape(fun(jnp.reshape(r, (3, 3))), (-1,))


def _on_scalars(fun, R, gradient=False):
    """``fun`` (of a rotation matrix; its gradient with ``gradient``) on the 9 scalars ``R``,
    evaluated scalar by scalar
    (:func:`geomjax._internal.scalarize.scalarize`; it falls back to ``fun`` where it cannot):
    the matrix is trace-time bookkeeping, so no stack of the entries and no slices of the
    result are left in the step, nor their transposes (pads) in its reverse-mode derivative."""
    return Scalarized(ScalarTuples(_OnRotationEntries(fun, gradient)))(tuple(R))


def potential_force(system, R):
    """``−dV`` for rotation entries ``R`` (9 scalars): the potential's closed form where it has one
    (``system.closed_form_potential_force()``), else ``−vee(R^T ∇V − ∇V^T R)`` written out,
    with ``∇V`` the Euclidean gradient of the potential at the matrix ``R``; either evaluated
    scalar by scalar (:func:`_on_scalars`): on the stacked matrix the reverse pass's transposed
    slices (pads) cost more than the arithmetic (figures: the architecture page, "Measured
    design choices")."""
    closed = system.closed_form_potential_force()
    if closed is not None:  # the potential's own -dV (geomjax.systems.potentials), in R's dtype
        return tuple(m.astype(R[0].dtype) for m in _on_scalars(closed, R))
    Gs = _on_scalars(system.potential_energy, R, gradient=True)

    def A(i, j):  # (R^T G)_ij
        return R[i] * Gs[j] + R[3 + i] * Gs[3 + j] + R[6 + i] * Gs[6 + j]

    return (A(1, 2) - A(2, 1), A(2, 0) - A(0, 2), A(0, 1) - A(1, 0))


def lgvi_step_vjp(I, R, Pi, x, h, u, ct_R1, ct_Pi1, need_I=True, need_h=False, K=None, c=None):
    """Hand-written vector–Jacobian product of the free-body SO(3) Cayley LGVI step (the
    kernel of ``LGVI._advance_so3`` with a control and no potential or force, uncompensated,
    without the Björck step) at ``(R, Pi)``, whose step solves the discrete Legendre transform
    with ``x`` (:func:`cayley_residual` ``= 0``).  The same numbers as JAX's VJP of the step
    to round-off, in about 300 scalar operations (principal moments, no control).

    The step, with ``b = Pi + h/2 u``, ``w = h x``, ``c = 4/(4 + |w|²)`` and
    ``K = cay(w) − 1 = c (hat(w) + hat(w)²/2)`` (:func:`cay_increment`):

        R1 = R (1 + K),    Pi1 = (1 + K)^T b + h/2 u.

    Its transpose for the cotangents ``(R̄1, Π̄1)``, with ``P = K̄ = R^T R̄1 + b Π̄1^T``:

        R̄ = R̄1 (1 + K)^T,     b̄ = (1 + K) Π̄1 + (implicit part below),
        w̄ = c (sym(P) w − tr(P) w + (P21 − P12, P02 − P20, P10 − P01)) − c/2 <K, P> w,

    (the last term through ``c``: ``dc = −c²/2 w·dw``), ``x̄ = h w̄``.  The implicit function
    theorem is applied to the equivalent residual ``psi = (1 − h/2 hat(x)) cayley_residual``,

        psi(x; I, b, h) = c' I x + h/2 x × b − b,    c' = 1 + h²/4 |x|²

    (:func:`cayley_solve_scalar`'s form; the same root, and at the root the same derivatives
    of ``x``, with a cheaper Jacobian ``J = c' I + h²/2 (I x) x^T − h/2 hat(b)``):
    ``J^T λ = x̄``, then ``b̄ += λ + h/2 x × λ``, ``Ī = −c' λ x^T`` (the diagonal for
    principal moments), ``h̄ = x·w̄ − λ·(h/2 |x|² I x + x × b/2) + u·(b̄ + Π̄1)/2``,
    ``ū = h/2 (b̄ + Π̄1)`` and ``Π̄ = b̄``.

    Arguments are tuples of scalars (``I``: 3 principal moments or 9 entries row-major, ``R``:
    9 row-major, ``u``: 3 or None); ``K`` and ``c``: the increment and ``c`` if the caller
    has them (the reverse step's, transposed: ``cay(−w) = cay(w)^T``), else computed from
    ``w``.  Returns ``(R̄ (9), Π̄ (3), Ī (3 or 9), h̄, ū (3))``; ``Ī``/``h̄`` are None unless
    ``need_I``/``need_h``, ``ū`` None without a control."""
    hh, q = 0.5 * h, 0.25 * h * h
    b = Pi if u is None else tuple(Pi[i] + hh * u[i] for i in range(3))
    w = tuple(h * xi for xi in x)
    # (a given c with the derivative of 4/(4 + |w|²): a second derivative differentiates this)
    c = 4.0 / (4.0 + dot(w, w)) if c is None else _cay_factor(w, c)
    if K is None:
        K = cay_increment(w, c)
    gR, gP = ct_R1, ct_Pi1
    # R1 = R + R K, Pi1 = b + K^T b (+ h/2 u)
    ct_R = tuple(
        gR[3 * i + k] + sum(gR[3 * i + j] * K[3 * k + j] for j in range(3))
        for i in range(3)
        for k in range(3)
    )
    ct_b = tuple(gP[i] + sum(K[3 * i + j] * gP[j] for j in range(3)) for i in range(3))
    P = tuple(
        sum(R[3 * i + k] * gR[3 * i + j] for i in range(3)) + b[k] * gP[j]
        for k in range(3)
        for j in range(3)
    )
    # K = c (W + W²/2), W = hat(w), W² = w w^T − |w|² 1: with S = sym(P), a = vee(P − P^T),
    # <W, P> = w·a, <W², P> = w·S w − |w|² tr P; w̄ = c (S w + a − (tr P + <K, P>/2) w)
    tr = P[0] + P[4] + P[8]
    q01, q02, q12 = 0.5 * (P[1] + P[3]), 0.5 * (P[2] + P[6]), 0.5 * (P[5] + P[7])
    Sw = (
        P[0] * w[0] + q01 * w[1] + q02 * w[2],
        q01 * w[0] + P[4] * w[1] + q12 * w[2],
        q02 * w[0] + q12 * w[1] + P[8] * w[2],
    )
    a = (P[7] - P[5], P[2] - P[6], P[3] - P[1])
    kp = c * (dot(w, a) + 0.5 * (dot(w, Sw) - dot(w, w) * tr))
    s = tr + 0.5 * kp
    g = tuple(Sw[i] + a[i] - s * w[i] for i in range(3))  # w̄ = c g
    hc = h * c
    ct_x = tuple(hc * g[i] for i in range(3))
    # implicit function theorem on psi (docstring): J^T lam = ct_x
    y = inertia_apply(I, x)
    n2 = dot(x, x)
    cc = 1.0 + q * n2
    J = cayley_psi_jacobian(I, x, b, h)
    lam = solve3_scalars(tuple(J[3 * i + j] for j in range(3) for i in range(3)), ct_x)
    xl = cross(x, lam)
    ct_b = tuple(ct_b[i] + lam[i] + hh * xl[i] for i in range(3))
    ct_I = ct_h = ct_u = None
    if need_I:
        cl = tuple(-cc * lam[i] for i in range(3))
        if len(I) == 3:
            ct_I = tuple(cl[i] * x[i] for i in range(3))
        else:
            ct_I = tuple(cl[i] * x[j] for i in range(3) for j in range(3))
    if need_h:
        xb = cross(x, b)
        hn = hh * n2
        ct_h = c * dot(x, g) - sum(lam[i] * (hn * y[i] + 0.5 * xb[i]) for i in range(3))
    if u is not None:
        sb = tuple(ct_b[i] + gP[i] for i in range(3))
        ct_u = tuple(hh * sb[i] for i in range(3))
        if need_h:
            ct_h = ct_h + 0.5 * dot(u, sb)
    return ct_R, ct_b, ct_I, ct_h, ct_u


@functools.partial(jax.custom_jvp, nondiff_argnums=(5,))
def cayley_step(I, R, b, h, x, scalar_solve):
    """The explicit part of the free-body Cayley LGVI step given the root ``x`` of the discrete
    Legendre transform (:func:`cayley_residual` ``= 0`` for ``(I, b, h)``; ``scalar_solve``:
    its factor ``c = 4/(4 + h²|x|²)`` from :func:`cayley_guess`, as a pair ``(x, c)`` in
    ``x``, else ``x`` alone):

        R1 = R (1 + K),    Pi1 = (1 + K)^T b,    K = cay(h x) − 1     (:func:`cay_increment`).

    Differentiated as a function of ``(I, R, b, h)`` — ``x`` solves the Legendre transform, its
    derivatives follow from the implicit function theorem — by the hand-written
    vector–Jacobian product :func:`lgvi_step_vjp`: the JVP is its transpose
    (``jax.linear_transpose``), so reverse mode, which transposes the JVP again, runs the
    hand-written product itself (about 300 scalar operations) instead of JAX's transpose of
    the linearized step, and forward mode still works (a ``custom_vjp`` would refuse
    ``jax.jvp``).  The tangent given for ``x`` is ignored."""
    x, c = x if scalar_solve else (x, None)
    K = cay_increment(tuple(h * xi for xi in x), c)
    return matmul_increment(R, K), rotate_increment(K, b)


def _is_zero(t):
    return all(type(leaf) is jax.custom_derivatives.SymbolicZero for leaf in _leaves(t))


def _leaves(t):
    return jax.tree_util.tree_leaves(
        t, is_leaf=lambda v: type(v) is jax.custom_derivatives.SymbolicZero
    )


def _materialize(t, p):
    return jax.tree_util.tree_map(
        lambda ti, pi: (
            jnp.zeros_like(pi) if type(ti) is jax.custom_derivatives.SymbolicZero else ti
        ),
        t,
        p,
        is_leaf=lambda v: type(v) is jax.custom_derivatives.SymbolicZero,
    )


def cayley_psi(x, args):
    """``psi = c' I x + h/2 x × b − b``, ``c' = 1 + h²/4 |x|²``: the discrete Legendre transform
    with the root of :func:`cayley_residual` (``(1 − h/2 hat(x))`` times it), in the form whose
    Jacobian :func:`cayley_psi_jac_solve` holds for any ``I``, symmetric or not (a second
    derivative along a perturbation of the 9 entries of the inertia needs that)."""
    I, b, h = args
    y = inertia_apply(I, x)
    cc = 1.0 + 0.25 * h * h * dot(x, x)
    xb = cross(x, b)
    return tuple(cc * y[i] + 0.5 * h * xb[i] - b[i] for i in range(3))


def cayley_psi_jacobian(I, x, b, h):
    """Entries (row-major) of ``J = c' I + h²/2 (I x) x^T − h/2 hat(b)``, the Jacobian of
    :func:`cayley_psi` in ``x`` (the inertia's off-diagonal zeros left out for principal
    moments)."""
    y = inertia_apply(I, x)
    cc = 1.0 + 0.25 * h * h * dot(x, x)
    qy = tuple(0.5 * h * h * y[i] for i in range(3))
    hb = tuple(0.5 * h * b[i] for i in range(3))
    hat_b = (0.0, -hb[2], hb[1], hb[2], 0.0, -hb[0], -hb[1], hb[0], 0.0)
    return tuple(
        cc * (I[3 * i + j] if len(I) == 9 else I[i]) + qy[i] * x[j] - hat_b[3 * i + j]
        if (len(I) == 9 or i == j)
        else qy[i] * x[j] - hat_b[3 * i + j]
        for i in range(3)
        for j in range(3)
    )


def cayley_psi_jac_solve(x, args, r):
    """Solve ``J d = r`` with ``J`` of :func:`cayley_psi_jacobian`."""
    I, b, h = args
    return solve3_scalars(cayley_psi_jacobian(I, x, b, h), r)


def _cayley_step_jvp(scalar_solve, primals, tangents):
    I, R, b, h, xc = primals
    dI, dR, db, dh, _ = tangents
    x, c = xc if scalar_solve else (xc, None)
    # the primal through this rule again: a higher derivative differentiates it as well
    out = cayley_step(I, R, b, h, xc, scalar_solve)
    # x with its implicit-function-theorem derivatives (no iteration: the value is x): dead
    # code at first order, the derivatives of x at second order
    # (newton.py's solver itself, not newton_solve: no recorded or replayed solution is
    # consumed here)
    x, _ = newton_solve_impl(cayley_psi, x, (I, b, h), 0, cayley_psi_jac_solve, False, False, False)
    need = tuple(not _is_zero(t) for t in (dI, dR, db, dh))
    if not any(need):
        return out, jax.tree_util.tree_map(jnp.zeros_like, out)

    def vjp(cts):
        ct_R, ct_b, ct_I, ct_h, _ = lgvi_step_vjp(
            I, R, b, x, h, None, cts[0], cts[1], need_I=need[0], need_h=need[3], c=c
        )
        return tuple(v for v, n in zip((ct_I, ct_R, ct_b, ct_h), need) if n)

    tangent_of = jax.linear_transpose(vjp, out)
    (d_out,) = tangent_of(
        tuple(_materialize(t, p) for t, p, n in zip(tangents[:4], primals[:4], need) if n)
    )
    return out, d_out


cayley_step.defjvp(_cayley_step_jvp, symbolic_zeros=True)
