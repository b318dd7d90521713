"""``geomjax._scalarize.scalarize``: a program evaluated scalar by scalar computes what the array
program computes (the same primitives: round-off agreement, float64 and float32), under ``jit``,
``vmap`` and ``grad``/``jacfwd`` (derivatives against the array program's and against central
differences), with no array kernels left (no ``dot_general``, reductions, concatenations in the
scalarized jaxpr), and falls back to the array program where a primitive has no scalar form
(``strict=True`` names it).  Speed: ``benchmarks/bench_nonholonomic.py --speed``."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import geomjax as gj
from geomjax._linalg import forward_jacobian
from geomjax._scalarize import Unsupported, scalarize


def _rigid(R, w, x):
    """Products, transposes, cross products, reductions, broadcasting and transcendental ops."""
    A = R @ jnp.array([[1.0, 2.0, 3.0], [0.0, 1.0, 0.0], [2.0, 0.0, 1.0]])
    y = jnp.concatenate([jnp.sin(w) * x[0], jnp.cross(w, A @ w), jnp.sum(A, 0), A.T[1]])
    return y, jnp.linalg.norm(w) + jnp.arctan2(x[1], x[0]) ** 2, (A.T @ A)[0] / (1.0 + x[1] ** 2)


def _indexing(R, w, x):
    """Scatters and gathers with constant indices, pads (negative and interior), flips,
    ``where``, comparisons, iota/eye, nested jit, integer powers and dtype conversions."""
    z = jnp.zeros(5, w.dtype).at[1:4].add(w).at[0].set(x[1])
    g = R[jnp.array([2, 0]), :][:, jnp.array([1, 1, 0])]
    p = jax.lax.pad(w, jnp.asarray(-1.0, w.dtype), [(2, -1, 1)])
    q = jnp.where(w > 0.0, w**3, -jnp.sqrt(jnp.abs(w))) * jnp.eye(3, dtype=w.dtype)[1]
    s = jax.jit(lambda a: jnp.flip(a) * jnp.cumsum(jnp.ones_like(a)))(w)
    c = jnp.max(jnp.abs(R), axis=1) - jnp.min(R) + jnp.prod(x)
    return z, g, p, q + s, c, jnp.linalg.det(R[:2, :2]).astype(jnp.float32)


def _einsum(R, w, x):
    """``dot_general`` with batch dimensions and several contractions."""
    T = jnp.stack([R, R.T @ R, jnp.outer(w, w)])
    return jnp.einsum("bij,bjk->bik", T, T)[:, 0], jnp.einsum("bij,ij->b", T, R), x @ x


FUNS = (_rigid, _indexing, _einsum)
FLOATS = st.floats(-2.0, 2.0, allow_nan=False, width=64)


def _inputs(vals, dtype=np.float64):
    v = np.asarray(vals, dtype)
    return jnp.asarray(v[:9].reshape(3, 3)), jnp.asarray(v[9:12]), jnp.asarray(v[12:14] + 2.5)


_JIT = {(f, s): jax.jit(scalarize(f, strict=True) if s else f) for f in FUNS for s in (0, 1)}


@settings(max_examples=15)
@given(st.lists(FLOATS, min_size=14, max_size=14))
def test_same_numbers_as_the_array_program(vals):
    args = _inputs(vals)
    for f in FUNS:
        ref, out = _JIT[(f, 0)](*args), _JIT[(f, 1)](*args)
        for a, b in zip(
            jax.tree_util.tree_leaves(ref), jax.tree_util.tree_leaves(out), strict=True
        ):
            assert a.shape == b.shape and a.dtype == b.dtype
            np.testing.assert_allclose(b, a, rtol=1e-13, atol=1e-13)


@pytest.mark.parametrize("f", FUNS)
def test_float32_vmap_and_no_array_kernels_left(f):
    rng = np.random.default_rng(1)
    batch = [_inputs(rng.uniform(-2, 2, 14), np.float32) for _ in range(4)]
    args = jax.tree_util.tree_map(lambda *a: jnp.stack(a), *batch)
    ref = jax.vmap(f)(*args)
    out = jax.jit(jax.vmap(scalarize(f, strict=True)))(*args)
    for a, b in zip(jax.tree_util.tree_leaves(ref), jax.tree_util.tree_leaves(out), strict=True):
        assert a.dtype == b.dtype
        np.testing.assert_allclose(b, a, rtol=2e-5, atol=2e-5)
    prims = set()

    def walk(jaxpr):
        for e in jaxpr.eqns:
            prims.add(e.primitive.name)
            for p in e.params.values():
                if hasattr(p, "jaxpr") and hasattr(p, "consts"):
                    walk(p.jaxpr)

    walk(jax.make_jaxpr(scalarize(f, strict=True))(*batch[0]).jaxpr)
    assert not prims & {"dot_general", "reduce_sum", "reduce_max", "concatenate", "pad", "gather"}


def test_derivatives_against_the_array_program_and_finite_differences():
    R, w, x = _inputs(np.random.default_rng(2).uniform(-1, 1, 14))

    def loss(g):
        return lambda w: sum(jnp.sum(jnp.sin(o)) for o in jax.tree_util.tree_leaves(g(R, w, x)))

    for f in (_rigid, _einsum):
        s = scalarize(f, strict=True)
        gs, gf = jax.jit(jax.grad(loss(s)))(w), jax.grad(loss(f))(w)
        np.testing.assert_allclose(gs, gf, rtol=1e-12, atol=1e-13)
        np.testing.assert_allclose(
            jax.jit(jax.hessian(loss(s)))(w), jax.hessian(loss(f))(w), rtol=1e-11, atol=1e-12
        )
        e = 1e-6
        fd = [(loss(f)(w + e * u) - loss(f)(w - e * u)) / (2 * e) for u in np.eye(3, dtype=w.dtype)]
        np.testing.assert_allclose(gs, fd, rtol=1e-7, atol=1e-8)


def test_forward_jacobians_fold_the_unit_tangents():
    """A Jacobian by unit-vector JVPs (the Newton Jacobians of the integrators): the same numbers,
    and the products with the constant 0 of the other tangents are gone at trace time."""
    R, w, x = _inputs(np.random.default_rng(3).uniform(-1, 1, 14))

    def jac(w):
        return forward_jacobian(lambda w: _rigid(R, w, x)[0], w)

    np.testing.assert_allclose(jax.jit(scalarize(jac))(w), jac(w), rtol=1e-13, atol=1e-14)
    n_direct = len(jax.make_jaxpr(jax.vmap(jac))(w[None]).jaxpr.eqns)
    n_scalar = len(jax.make_jaxpr(jax.vmap(scalarize(jac, strict=True)))(w[None]).jaxpr.eqns)
    assert n_scalar < 4 * n_direct  # without folding: 3 full tangent copies of every product


def test_fallback_for_primitives_without_a_scalar_form():
    def loopy(w):
        return jax.lax.fori_loop(0, 3, lambda i, a: a * w, w)

    def branchy(w):
        return jax.lax.cond(w[0] > 0, jnp.sin, jnp.cos, w)

    def solve(w):
        return jnp.linalg.solve(jnp.diag(w) + 3.0, w)

    w = jnp.array([0.3, -0.7, 1.1])
    for f in (loopy, branchy, solve):
        np.testing.assert_allclose(jax.jit(scalarize(f))(w), f(w), rtol=1e-15)
        with pytest.raises(Unsupported, match="primitive"):
            jax.jit(scalarize(f, strict=True))(w)
    # too large arrays fall back too
    big = jnp.ones((20, 20))
    np.testing.assert_array_equal(jax.jit(scalarize(lambda a: a @ a))(big), big @ big)
    with pytest.raises(Unsupported, match="entries"):
        jax.jit(scalarize(lambda a: a @ a, strict=True))(big)
    # eager calls are not scalarized (one dispatch per scalar): the array program runs
    np.testing.assert_array_equal(
        scalarize(_rigid, strict=True)(*_inputs(np.ones(14)))[0], _rigid(*_inputs(np.ones(14)))[0]
    )


def test_pytrees_modules_and_static_leaves():
    sleigh = gj.ChaplyginSleigh(1.3, 0.4, 0.25)
    s = sleigh.state(omega=1.5, v=-0.4)

    def f(system, state, scale):
        return {"p": system.momentum(state.g, state.x, state.v) * scale, "n": 2}

    out = jax.jit(lambda st: scalarize(f, strict=True)(sleigh, st, 3.0))(s)
    np.testing.assert_allclose(out["p"], f(sleigh, s, 3.0)["p"], rtol=1e-15)
