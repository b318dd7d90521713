"""``geomjax._internal.scalarize.scalarize``: a program evaluated scalar by scalar computes what the array
program computes (the same primitives: round-off agreement, float64 and float32), under ``jit``,
``vmap`` and ``grad``/``jacfwd`` (derivatives against the array program's and against central
differences), with no array kernels left (no ``dot_general``, reductions, concatenations in the
scalarized jaxpr), and falls back to the array program where a primitive has no scalar form
(``strict=True`` names it).  Speed: ``benchmarks/bench_nonholonomic.py --speed``."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import geomjax as gj
from geomjax._internal.scalarize import Unsupported, scalarize
from geomjax._linalg import forward_jacobian


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


@pytest.mark.long
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


def test_unstack_of_a_vector_and_fallback_when_the_scalarizer_fails(monkeypatch):
    """A frame written as ``jnp.diag(jnp.stack(...))`` under ``jax.grad`` (the transpose of the
    stack unstacks a vector into scalars): the same numbers as the array program, strictly
    scalarized.  Any other failure of the scalarizer itself falls back to the function (strict:
    :class:`Unsupported` naming it)."""

    def frame(q):
        return jnp.diag(jnp.stack([jnp.ones_like(q[0]), q[0]]))

    def f(q):
        return jax.grad(lambda x: jnp.sum(frame(x) @ x) ** 2)(q)

    q = jnp.array([1.2, 0.3])
    assert "unstack" in str(jax.make_jaxpr(f)(q))
    np.testing.assert_allclose(jax.jit(scalarize(f, strict=True))(q), f(q), rtol=1e-15)

    from geomjax._internal import scalarize as _scalarize

    def broken(self, x, value, config, shape):
        raise TypeError("an evaluator bug")

    monkeypatch.setattr(_scalarize._Evaluator, "pad", broken)
    scale = jnp.asarray(2.0)  # a closure: not a cached program

    def g(q):
        return scale * f(q)

    np.testing.assert_allclose(jax.jit(scalarize(g))(q), g(q), rtol=1e-15)
    with pytest.raises(Unsupported, match="scalarizer failed.*evaluator bug"):
        jax.jit(scalarize(g, strict=True))(q)


def test_reshape_with_a_permutation():
    """``reshape`` with ``dimensions`` (transpose, then reshape), which JAX's forward-mode rule of
    a product over a non-leading axis emits: a Jacobian of monomials ``prod_j z_j^e_kj``
    written with float exponents, against the same monomials written with integer powers
    (array program) and a direct ``lax.reshape``."""
    E = np.array([[1.0, 0.0, 1.0], [0.0, 2.0, 0.0], [1.0, 1.0, 0.0], [0.0, 1.0, 2.0]])

    def monomials(z):
        return jnp.prod(z[None, :] ** jnp.asarray(E, z.dtype), axis=1)

    def by_hand(z):
        return jnp.stack([z[0] ** int(a) * z[1] ** int(b) * z[2] ** int(c) for a, b, c in E])

    z = jnp.asarray([0.6, -0.7, 0.4])
    f = jax.jacfwd(monomials)
    assert any(
        e.primitive.name == "reshape" and e.params["dimensions"] is not None
        for e in jax.make_jaxpr(f)(z).jaxpr.eqns
    )
    np.testing.assert_allclose(
        jax.jit(scalarize(f, strict=True))(z), jax.jacfwd(by_hand)(z), rtol=1e-14, atol=1e-15
    )
    x = jnp.arange(24.0).reshape(2, 3, 4)

    def g(x):
        return jax.lax.reshape(jnp.sin(x), (4, 6), dimensions=(2, 0, 1))

    np.testing.assert_allclose(
        jax.jit(scalarize(g, strict=True, max_size=24))(x),
        np.sin(np.transpose(np.asarray(x), (2, 0, 1))).reshape(4, 6),
        rtol=1e-15,
    )


def test_a_parameter_no_rule_reads_is_not_scalarized():
    """A structural primitive with a parameter its rule does not read (one it was not written
    for, or one a later JAX adds) is :class:`Unsupported` (``scalarize`` then uses the array
    program) instead of being evaluated as if the parameter were absent."""
    from jax.extend import core as jex_core

    from geomjax._internal.scalarize import scalarized_jaxpr_eval

    x = jnp.arange(6.0).reshape(2, 3)
    closed = jax.make_jaxpr(lambda x: jnp.sum(jnp.sin(x).T, axis=1))(x)
    np.testing.assert_allclose(scalarized_jaxpr_eval(closed, [x])[0], np.sin(x).sum(0))
    for primitive in ("transpose", "reduce_sum"):
        eqns = [
            e.replace(params={**e.params, "unread": 1}) if e.primitive.name == primitive else e
            for e in closed.jaxpr.eqns
        ]
        changed = jex_core.ClosedJaxpr(closed.jaxpr.replace(eqns=eqns), closed.consts)
        with pytest.raises(Unsupported, match=f"{primitive} with the parameters"):
            scalarized_jaxpr_eval(changed, [x])


def test_pytrees_modules_and_static_leaves():
    sleigh = gj.ChaplyginSleigh(1.3, 0.4, 0.25)
    s = sleigh.state(omega=1.5, v=-0.4)

    def f(system, state, scale):
        return {"p": system.momentum(state.g, state.x, state.v) * scale, "n": 2}

    out = jax.jit(lambda st: scalarize(f, strict=True)(sleigh, st, 3.0))(s)
    np.testing.assert_allclose(out["p"], f(sleigh, s, 3.0)["p"], rtol=1e-15)


# --- the program cache ------------------------------------------------------------------------
_TRACES = []


def _counted(x, y, power):
    """Module-level (cacheable): records each time its array program is traced."""
    _TRACES.append(power)
    return jnp.sin(x) * y[0] + x**power, jnp.sum(x * y[1:])


class _Scaled(eqx.Module):
    factor: float

    def __call__(self, x):
        _TRACES.append(self.factor)
        return jnp.cos(x) * self.factor


def test_program_cache_reuses_scalar_programs_and_keys_them_correctly():
    """A function that is a value (module-level function, equinox module) is traced and
    scalarized once per (function, shapes/dtypes, static arguments): a second compilation reuses
    the program, with the same numbers as the array program; another shape, dtype or static
    argument makes another program."""
    _TRACES.clear()
    x, y = jnp.array([0.3, -1.2, 2.0]), jnp.array([1.5, 0.1, -0.4, 0.7])

    def run(fun, *args):  # a new jit wrapper each time: nothing cached by jit itself
        return jax.jit(lambda *a: scalarize(fun)(*a))(*args)

    ref = _counted(x, y, 3)
    _TRACES.clear()
    power = 3
    for _ in range(3):
        out = run(lambda a, b: _counted(a, b, power), x, y)  # a closure: not cached...
        for o, r in zip(out, ref, strict=True):
            np.testing.assert_allclose(o, r, rtol=1e-14)
    assert len(_TRACES) == 3  # ...traced on every compilation
    _TRACES.clear()
    for _ in range(2):  # a nested def without a closure is a new object with the same code
        out = run(lambda a, b: _counted(a, b, 3), x, y)
    assert len(_TRACES) == 1
    _TRACES.clear()
    for _ in range(3):
        out = jax.jit(lambda a, b: scalarize(_counted)(a, b, 3))(x, y)
        for o, r in zip(out, ref, strict=True):
            np.testing.assert_allclose(o, r, rtol=1e-14)
    assert _TRACES == [3]  # module-level: one trace for three compilations
    jax.jit(lambda a, b: scalarize(_counted)(a, b, 2))(x, y)  # another static argument
    jax.jit(lambda a, b: scalarize(_counted)(a, b, 3))(x[:2], y[:3])  # other shapes
    jax.jit(lambda a, b: scalarize(_counted)(a, b, 3))(x.astype(jnp.float32), y)  # dtype
    assert _TRACES == [3, 2, 3, 3]
    # under vmap the program of one member is the same program
    xs = jnp.stack([x, 2 * x])
    out = jax.jit(jax.vmap(lambda a: scalarize(_counted)(a, y, 3)))(xs)
    np.testing.assert_allclose(out[0][1], _counted(2 * x, y, 3)[0], rtol=1e-14)
    assert len(_TRACES) == 4 + 1  # the eager reference call above traced once more
    # modules: equal fields share a program, other fields do not
    _TRACES.clear()
    for f in (2.0, 2.0, 3.0):
        out = jax.jit(lambda a, f=f: scalarize(_Scaled(f))(a))(x)
        np.testing.assert_allclose(out, jnp.cos(x) * f, rtol=1e-14)
    assert _TRACES == [2.0, 3.0]


_OUTER = []


def _reads_outer(x):
    return x * _OUTER[-1]


def test_program_cache_never_keeps_a_tracer_of_an_enclosing_trace():
    """A cacheable function that reads a value of the enclosing trace (here through a global):
    its jaxpr would hold that tracer as a constant, so it is evaluated in place, never cached,
    and follows the value."""
    x = jnp.array([1.0, 2.0])

    def f(a, x):
        _OUTER.append(a)
        try:
            return scalarize(_reads_outer)(x)
        finally:
            _OUTER.pop()

    for a in (2.0, -3.0, 0.5):  # a new function each time: a new trace (jit caches per function)
        np.testing.assert_allclose(
            jax.jit(lambda a, x: f(a, x))(jnp.asarray(a), x), a * x, rtol=1e-15
        )


def test_program_cache_keeps_programs_traced_in_shard_map_apart():
    """A scalar program traced inside ``shard_map`` holds its manual mesh: the same function
    called outside (same shapes) must get its own program, not that one (JAX refuses to mix
    the meshes).  One device is enough to give a manual mesh."""
    from jax.sharding import Mesh
    from jax.sharding import PartitionSpec as P

    def cross(a, b):
        return jnp.cross(a, b)

    mesh = Mesh(np.array(jax.devices()[:1]), ("batch",))
    a = jnp.ones((4, 3))
    b = jnp.arange(12.0).reshape(4, 3)
    inside = jax.jit(
        jax.shard_map(
            lambda a, b: jax.vmap(scalarize(cross))(a, b),
            mesh=mesh,
            in_specs=(P("batch"), P("batch")),
            out_specs=P("batch"),
        )
    )(a, b)
    outside = jax.jit(jax.vmap(scalarize(cross)))(a, b)
    np.testing.assert_allclose(inside, np.cross(a, b), rtol=1e-6)
    np.testing.assert_allclose(outside, np.cross(a, b), rtol=1e-6)
