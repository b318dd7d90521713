"""Small dense linear solves written out elementwise.

The Newton matrices of the variational integrators and the saddle-point systems of nonholonomic
mechanics are tiny (3×3 … 8×8).  Under ``jax.vmap`` a LAPACK call per batch member dominates the
cost of a step; unrolled elimination is plain elementwise code that XLA fuses and vectorizes across
the batch.  Shared by :mod:`geomjax.integrators` and :mod:`geomjax.systems`.
"""

from __future__ import annotations

import contextlib

import jax
import jax.numpy as jnp
import numpy as np

__all__ = [
    "DEGENERACY_FACTOR",
    "degeneracy_tol",
    "describe_degeneracy",
    "forward_jacobian",
    "is_degenerate",
    "pivot_ratio",
    "pivot_ratio_numpy",
    "saddle_solve_schur",
    "signed_pivot_ratios",
    "small_solve",
    "small_solve_columns",
    "solve3",
    "solve3_scalars",
]

#: ``c`` in the degeneracy threshold ``τ = c · n · eps`` (see :func:`degeneracy_tol`).
DEGENERACY_FACTOR = 100.0


def two_sum(a, b):
    """``(s, e)`` with ``s = fl(a + b)`` and ``s + e = a + b`` exactly (Knuth's TwoSum: 6 flops,
    no condition on the magnitudes; Higham, *Accuracy and Stability of Numerical Algorithms*,
    §4.3).  Elementwise; XLA does not reassociate floating-point sums, so it stays exact.
    Its derivative is that of ``(a + b, 0)`` to round-off."""
    s = a + b
    bb = s - a
    return s, (a - (s - bb)) + (b - bb)


def degeneracy_tol(n: int, dtype) -> float:
    """The threshold ``τ(n, dtype) = 100 · n · eps(dtype)`` below which an ``n×n`` SPD matrix is
    declared degenerate by :func:`pivot_ratio` (float64, n = 3: 6.7e-14; float32, n = 3: 3.6e-5).

    Why this size: Cholesky is backward stable componentwise relative to ``sqrt(G_ii G_jj)``
    (``|ΔG_ij| ≤ γ_{n+1} sqrt(G_ii G_jj)``, Higham, *Accuracy and Stability*, Thm 10.5), and a
    matrix assembled as ``A M⁻¹ Aᵀ`` from ``N``-vectors carries errors of the same form with
    ``γ_N`` (Cauchy–Schwarz).  The computed pivot of an exactly singular matrix is therefore
    round-off of size ``≲ (N + n) · eps · G_ii`` (times the squared 1-norm of the normalized null
    vector), whatever its sign on a given machine; ``c = 100`` puts the threshold above that for
    the small matrices of mechanics (n ≤ 10, N ≲ 30) while a well-conditioned matrix has
    ``ρ = O(1)``.  The relative accuracy of a solve is about ``eps / ρ``, so anything flagged
    would have lost all but ~2 digits anyway.
    """
    return DEGENERACY_FACTOR * int(n) * float(np.finfo(dtype).eps)


def small_cholesky(G):
    """Lower Cholesky factor ``L`` of ``G = L Lᵀ`` (batched over leading axes), unrolled for
    ``n ≤ 8`` (reading the symmetric part, as ``jnp.linalg.cholesky`` does); larger: LAPACK.

    A non-positive pivot gives NaN from there on (LAPACK's factor is all NaN): either way the
    pivot ratio of :func:`pivot_ratio` is NaN.  Why unrolled: the first LAPACK call a process
    lowers on CPU imports SciPy's LAPACK wrappers (0.4 s on a 2-core x86-64 CPU; the first eager
    ``christoffel`` spent most of its time there), and at this size elementwise code is as fast
    and vectorizes across a vmapped batch."""
    n = G.shape[-1]
    if n > 8:
        return jnp.linalg.cholesky(G)
    L = [[None] * n for _ in range(n)]
    for j in range(n):
        s = G[..., j, j]
        for k in range(j):
            s = s - L[j][k] * L[j][k]
        L[j][j] = jnp.sqrt(s)
        for i in range(j + 1, n):
            a = 0.5 * (G[..., i, j] + G[..., j, i])
            for k in range(j):
                a = a - L[i][k] * L[j][k]
            L[i][j] = a / L[j][j]
    zero = jnp.zeros_like(G[..., 0, 0])
    rows = [jnp.stack([L[i][j] if j <= i else zero for j in range(n)], -1) for i in range(n)]
    return jnp.stack(rows, -2)


def small_cho_solve(L, b):
    """``G⁻¹ b`` from the Cholesky factor ``L`` of :func:`small_cholesky` (one ``(n, n)`` matrix,
    ``b`` of shape ``(n,)`` or ``(n, r)``): unrolled substitutions for ``n ≤ 8``, else
    ``jax.scipy.linalg.cho_solve`` (whose triangular solves are LAPACK calls on CPU)."""
    n = L.shape[-1]
    if n > 8 or L.ndim != 2:
        return jax.scipy.linalg.cho_solve((L, True), b)
    y = [None] * n
    for i in range(n):  # L y = b
        acc = b[i]
        for k in range(i):
            acc = acc - L[i, k] * y[k]
        y[i] = acc / L[i, i]
    x = [None] * n
    for i in reversed(range(n)):  # Lᵀ x = y
        acc = y[i]
        for k in range(i + 1, n):
            acc = acc - L[k, i] * x[k]
        x[i] = acc / L[i, i]
    return jnp.stack(x, 0)


def pivot_ratio(G):
    """The degeneracy measure of an SPD matrix: ``ρ = min_i L_ii² / G_ii`` for the Cholesky factor
    ``G = L Lᵀ``; returns ``(rho, L)`` (batched over leading axes: ``rho`` has shape
    ``G.shape[:-2]``).

    ``L_ii²`` is the ``i``-th pivot (the Schur complement of the leading block), so ``ρ`` is the
    smallest relative decrease of one diagonal entry that makes ``G`` lose definiteness
    (``G − L_ii² e_i e_iᵀ`` is singular).  It is invariant under diagonal scaling
    ``G → D G D`` (units; a good metric × 1e-12 is as good as the metric) and satisfies
    ``λ_min(C) ≤ ρ ≤ 1`` for the correlation matrix ``C = D^{-1/2} G D^{-1/2}``, ``D = diag G``.
    Where Cholesky fails (a non-positive pivot, NaN in ``L``), ``rho`` is NaN.  The criterion used
    everywhere in geomjax is *degenerate* ⇔ ``not (rho > degeneracy_tol(n, dtype))`` (NaN counts as
    degenerate): the same answer on every IEEE machine for matrices away from the threshold,
    unlike testing whether Cholesky happens to produce NaN on a round-off pivot.
    """
    L = small_cholesky(G)
    d = jnp.diagonal(L, axis1=-2, axis2=-1)
    Gd = jnp.diagonal(G, axis1=-2, axis2=-1)
    ratio = d * d / Gd
    # NaN anywhere (failed factorization, zero diagonal) makes rho NaN: jnp.min propagates NaN
    rho = jnp.min(jnp.where(jnp.isfinite(ratio), ratio, jnp.nan), axis=-1)
    return rho, L


def pivot_ratio_numpy(G) -> float:
    """:func:`pivot_ratio`'s ``rho`` of one concrete matrix, in NumPy (LAPACK's Cholesky, as
    XLA:CPU's): the eager checks compile nothing.  NaN where Cholesky fails."""
    G = np.asarray(G)
    try:
        L = np.linalg.cholesky(G)
    except np.linalg.LinAlgError:
        return float("nan")
    d, Gd = np.diagonal(L), np.diagonal(G)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = d * d / Gd
    return float(np.min(np.where(np.isfinite(ratio), ratio, np.nan)))


def is_degenerate(G, rho=None):
    """``not (ρ(G) > τ)`` (NaN ⇒ True), batched; ``rho`` may be passed if already computed."""
    if rho is None:
        rho = pivot_ratio(G)[0]
    return ~(rho > degeneracy_tol(G.shape[-1], G.dtype))


def signed_pivot_ratios(G) -> np.ndarray:
    """Eager (NumPy) ``d_i / G_ii`` of the unpivoted ``L D Lᵀ`` elimination of one ``n×n`` matrix,
    in its dtype: the pivot ratios of :func:`pivot_ratio` with their sign, also where Cholesky
    fails (a round-off pivot of a singular matrix may be of either sign).  For error messages and
    tests."""
    A = np.array(jax.device_get(G), copy=True)
    n = A.shape[-1]
    diag = np.diagonal(A).copy()
    d = np.empty(n, A.dtype)
    for k in range(n):
        d[k] = A[k, k]
        if d[k] == 0:
            d[k:] = 0
            break
        A[k + 1 :, k + 1 :] -= np.outer(A[k + 1 :, k], A[k, k + 1 :]) / d[k]
    with np.errstate(divide="ignore", invalid="ignore"):
        return d / diag


def describe_degeneracy(G) -> str:
    """Eager text for error messages: the measured ``ρ`` against ``τ`` (and the eigenvalues)."""
    G = np.asarray(jax.device_get(G))
    tau = degeneracy_tol(G.shape[-1], G.dtype)
    if G.ndim != 2 or not np.all(np.isfinite(G)):
        return f"non-finite or batched matrix; τ = 100·n·eps = {tau:.3g}"
    rho = float(np.min(signed_pivot_ratios(G)))
    eig = np.linalg.eigvalsh(0.5 * (G + G.T))
    return (
        f"pivot ratio ρ = min L_ii²/G_ii = {rho:.3g} (signed), threshold τ = 100·n·eps = "
        f"{tau:.3g}; eigenvalues {np.array2string(eig, precision=3, threshold=8)}"
    )


def solve3(A, b):
    """Closed-form solve of a 3×3 system by the adjugate (Cramer's rule); batched over leading
    axes.  Used on hot paths where a LAPACK call per step would dominate."""
    a00, a01, a02 = A[..., 0, 0], A[..., 0, 1], A[..., 0, 2]
    a10, a11, a12 = A[..., 1, 0], A[..., 1, 1], A[..., 1, 2]
    a20, a21, a22 = A[..., 2, 0], A[..., 2, 1], A[..., 2, 2]
    x = solve3_scalars(
        (a00, a01, a02, a10, a11, a12, a20, a21, a22), (b[..., 0], b[..., 1], b[..., 2])
    )
    return jnp.stack(x, -1)


def solve3_scalars(a, b):
    """Cramer's rule on scalars: ``a`` the 9 entries (row-major), ``b`` 3 entries; returns 3."""
    a00, a01, a02, a10, a11, a12, a20, a21, a22 = a
    c00 = a11 * a22 - a12 * a21
    c01 = a02 * a21 - a01 * a22
    c02 = a01 * a12 - a02 * a11
    c10 = a12 * a20 - a10 * a22
    c11 = a00 * a22 - a02 * a20
    c12 = a02 * a10 - a00 * a12
    c20 = a10 * a21 - a11 * a20
    c21 = a01 * a20 - a00 * a21
    c22 = a00 * a11 - a01 * a10
    inv_det = 1.0 / (a00 * c00 + a01 * c10 + a02 * c20)
    b0, b1, b2 = b
    return (
        (c00 * b0 + c01 * b1 + c02 * b2) * inv_det,
        (c10 * b0 + c11 * b1 + c12 * b2) * inv_det,
        (c20 * b0 + c21 * b1 + c22 * b2) * inv_det,
    )


def small_solve(A, b):
    """Solve ``A x = b`` for a small ``n×n`` system (n ≤ 8) by unrolled Gaussian elimination
    without pivoting; larger systems go to ``jnp.linalg.solve``.

    Used for the Newton matrices of the variational integrators, which are O(h) perturbations of
    the SPD inertia (elimination without pivoting is stable there).  Unrolled elementwise code
    vectorizes across a vmapped batch, where a LAPACK call per batch member would dominate."""
    n = b.shape[-1]
    if n == 3:
        return solve3(A, b)
    if n > 8:
        return jnp.linalg.solve(A, b)
    A = [[A[..., i, j] for j in range(n)] for i in range(n)]
    b = [b[..., i] for i in range(n)]
    for k in range(n):
        inv = 1.0 / A[k][k]
        for i in range(k + 1, n):
            f = A[i][k] * inv
            for j in range(k + 1, n):
                A[i][j] = A[i][j] - f * A[k][j]
            b[i] = b[i] - f * b[k]
    x = [None] * n
    for i in reversed(range(n)):
        acc = b[i]
        for j in range(i + 1, n):
            acc = acc - A[i][j] * x[j]
        x[i] = acc / A[i][i]
    return jnp.stack(x, -1)


def spd_inverse(A):
    """Inverse of a small SPD matrix (``n ≤ 8``: unrolled elimination without pivoting, stable
    for SPD; larger: ``jnp.linalg.inv``).

    For inertia tensors: an LU factorization (LAPACK custom call and its triangular solves)
    made the compiled programs that use it larger and slower to compile (a free body's
    diagnostics: 0.62 → 0.36 s of CPU time on a 2-core x86-64 CPU), with no gain at this size."""
    n = A.shape[-1]
    return small_solve_columns(A, jnp.eye(n, dtype=A.dtype))


def small_solve_columns(A, B):
    """Solve ``A X = B`` for ``B`` of shape ``(n, r)`` (``n ≤ 8``) by one unrolled elimination
    without pivoting applied to all ``r`` right-hand sides at once (each row of ``B`` is carried as
    one ``(r,)`` vector, so the elimination is written once, not ``r`` times).  Same pivots as
    :func:`small_solve`."""
    n = A.shape[-1]
    if n > 8:
        return jnp.linalg.solve(A, B)
    a = [[A[..., i, j] for j in range(n)] for i in range(n)]
    b = [B[..., i, :] for i in range(n)]
    for k in range(n):
        inv = 1.0 / a[k][k]
        for i in range(k + 1, n):
            f = a[i][k] * inv
            for j in range(k + 1, n):
                a[i][j] = a[i][j] - f * a[k][j]
            b[i] = b[i] - f[..., None] * b[k]
    x = [None] * n
    for i in reversed(range(n)):
        acc = b[i]
        for j in range(i + 1, n):
            acc = acc - a[i][j][..., None] * x[j]
        x[i] = acc / a[i][i][..., None]
    return jnp.stack(x, -2)


def saddle_solve_schur(K, A, C, f, c):
    """Solve ``[[K, −A^T], [C, 0]] [y, lam] = [f, c]`` (``K`` ``(k, k)`` nonsingular, ``A`` and
    ``C`` ``(m, k)``) by the Schur complement: ``Y = K^{-1} [f, A^T]`` (one elimination of ``K``), ``S = C K^{-1} A^T`` ``(m, m)``, ``lam = S^{-1} (c − C y_f)``,
    ``y = y_f + K^{-1} A^T lam``.  Returns ``(y, lam)``.

    These are exactly the pivots of elimination without pivoting on the whole ``(k + m)``
    matrix with the ``K`` block first (the pivots of ``K``, then of ``S``), written so that the
    tiny solves stay a handful of fused elementwise kernels: measured 1.8× cheaper than
    eliminating the bordered matrix for ``k = 3, m = 1`` inside a CPU loop."""
    k, m = K.shape[-1], A.shape[-2]
    if m == 0:
        return small_solve(K, f), jnp.zeros((0,), f.dtype)
    # K^{-1} f and K^{-1} A^T separately (the same elimination of K, shared by XLA's CSE): the
    # result must stay linear in (f, c) for the implicit-function-theorem tangents and their
    # transposes, so f is never mixed into an array that the nonlinear part then divides by
    At = jnp.swapaxes(A, -1, -2)
    if k == 3:
        yf = solve3(K, f)
        YA = jnp.stack([solve3(K, At[:, j]) for j in range(m)], -1)
    else:
        yf = small_solve(K, f)
        YA = small_solve_columns(K, At)
    S = jnp.sum(C[:, :, None] * YA[None, :, :], 1)  # (m, m), elementwise: no tiny dot kernel
    rs = c - jnp.sum(C * yf[None, :], 1)
    if m == 1:
        lam = rs / S[0]
    elif m == 3:
        lam = solve3(S, rs)
    else:
        lam = small_solve(S, rs)
    return yf + jnp.sum(YA * lam[None, :], 1), lam


def forward_jacobian(f, x):
    """Jacobian ``(n, k)`` of ``f: R^k -> R^n`` at ``x`` by one linearization and ``k`` unrolled
    Jacobian–vector products with the unit vectors.

    The same arithmetic as ``jax.jacfwd``, which instead vmaps the JVP over the ``k`` tangents:
    under an outer ``jax.vmap`` (a batch of simulations) that nests two batch axes, and XLA's CPU
    layouts for the ``(batch, k, …)`` tangents with their transposes cost several times the
    function itself (figures: the architecture page, "Measured design choices")."""
    lin = jax.linearize(f, x)[1]
    eye = jnp.eye(x.shape[-1], dtype=x.dtype)
    return jnp.stack([lin(eye[i]) for i in range(x.shape[-1])], -1)


def select_stack(values):
    """``jnp.stack(values, -1)`` for a few scalars (or equally shaped arrays), written as a chain
    of selects against constant one-hot masks: the same numbers (a select copies), but one fused
    elementwise kernel on XLA:CPU, where ``jnp.stack`` of separately computed scalars is a kernel
    per entry plus a ``concatenate`` (~5–15 ns apiece at batch 1).  Under ``jax.vmap`` it costs
    ``n`` selects per output entry: use it for a handful of entries (a Newton iterate), or
    :func:`stack_scalars`.  Every transformation applies (the transpose is a select per entry)."""
    values = tuple(values)
    dtype = jnp.result_type(*values)
    shape = jnp.broadcast_shapes(*(jnp.shape(v) for v in values))
    values = [jnp.broadcast_to(jnp.asarray(v, dtype), shape)[..., None] for v in values]
    n = len(values)
    out = jnp.broadcast_to(values[0], (*shape, n))
    for i in range(1, n):
        out = jnp.where(jnp.asarray(np.arange(n) == i), values[i], out)
    return out


_PLAIN_STACKS = [False]


@contextlib.contextmanager
def plain_stacks():
    """Within this context (read when a function is traced), :func:`stack_scalars` is a plain
    ``jnp.stack``.  :class:`geomjax.ReversibleAdjoint` traces its backward pass this way: there
    the reconstructed state feeds the step's VJP in the same iteration, and XLA:CPU duplicates a
    select chain into every consumer that slices it (batch 1024: 2× the backward pass), while
    in a forward loop the carry is materialized at the loop boundary."""
    _PLAIN_STACKS.append(True)
    try:
        yield
    finally:
        _PLAIN_STACKS.pop()


def stack_scalars(values):
    """``jnp.stack(values, -1)`` for a step's scalar outputs, as one fused kernel
    (:func:`select_stack`) with the derivatives of a stack (a custom JVP: the tangents are
    stacked, so reverse mode transposes a slice, not a select per entry).

    Under :func:`plain_stacks` a plain ``jnp.stack``.  (Figures: the architecture page,
    "Measured design choices".)"""
    values = tuple(values)
    if _PLAIN_STACKS[-1]:
        return jnp.stack(jnp.broadcast_arrays(*values), -1)
    dtype = jnp.result_type(*values)
    shape = jnp.broadcast_shapes(*(jnp.shape(v) for v in values))
    return _stack_fused(*(jnp.broadcast_to(jnp.asarray(v, dtype), shape) for v in values))


@jax.custom_jvp
def _stack_fused(*values):
    return select_stack(values)


@_stack_fused.defjvp
def _stack_fused_jvp(primals, tangents):
    tangents = [
        jnp.zeros_like(p) if isinstance(t, jax.custom_derivatives.SymbolicZero) else t
        for p, t in zip(primals, tangents)
    ]
    return _stack_fused(*primals), jnp.stack(tangents, -1)
