"""The host tier of eager programs: NumPy's evaluation of a jaxpr against XLA's compiled program
for the same jaxpr, primitive by primitive and for every eager group operation, in float64 and
float32, at generic, small (Taylor branch) and near-π angles; and the fallbacks to XLA."""

import inspect

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.extend import core as jex_core

import geomjax as gj
from geomjax._internal import host_eval as _host_eval
from geomjax._internal.eager import EAGER_COMPILER_OPTIONS, quick_compiled
from geomjax.lie.base import EAGER_JIT_METHODS
from tests.jax_events import count_events


def _both(fn, *args):
    """(host, XLA) outputs of ``fn``'s jaxpr on ``args``; the XLA program compiled with the eager
    options (fewer passes: the reference's numbers do not depend on them, its compile time does)."""
    host = _host_eval.evaluate(jax.make_jaxpr(fn)(*args), args)
    ref = jax.tree_util.tree_leaves(jax.jit(fn, compiler_options=EAGER_COMPILER_OPTIONS)(*args))
    return host, [np.asarray(r) for r in ref]


def _assert_close(host, ref, ulps):
    # libm against XLA's polynomial approximations: each transcendental call differs by ≤ ~2 ulp
    # and the functions below are well conditioned at these inputs (measured ≤ 4.2 ulp of
    # 1 + |value| over all groups, methods and dtypes): a bound of `ulps` with margin
    assert len(host) == len(ref)
    for h, r in zip(host, ref):
        assert h.dtype == r.dtype and h.shape == r.shape, (h.dtype, r.dtype, h.shape, r.shape)
        finite = np.isfinite(r)
        np.testing.assert_array_equal(np.isfinite(h), finite)
        np.testing.assert_array_equal(h[~finite], r[~finite])  # the same inf/nan where not finite
        eps = np.finfo(r.dtype).eps if np.issubdtype(r.dtype, np.inexact) else 0
        err = np.abs(np.where(finite, h, 0) - np.where(finite, r, 0))
        assert np.all(err <= ulps * eps * (1 + np.abs(np.where(finite, r, 0)))), err.max()


_PRIMITIVE_CASES = {
    "einsum batch/contract": (
        lambda a, b: jnp.einsum("bij,bjk->bik", a, b),
        lambda r: (r.normal(size=(4, 2, 3)), r.normal(size=(4, 3, 5))),
    ),
    "einsum transposed": (
        lambda a, b: jnp.einsum("ijb,kjb->bki", a, b),
        lambda r: (r.normal(size=(2, 3, 4)), r.normal(size=(5, 3, 4))),
    ),
    "matmul + tanh + reductions": (
        lambda a, b: (jnp.tanh(a @ b).sum(0), jnp.max(a, axis=1), jnp.argmax(b, axis=0)),
        lambda r: (r.normal(size=(4, 3)), r.normal(size=(3, 2))),
    ),
    "take_along_axis (gather)": (
        lambda a, i: jnp.take_along_axis(a, i, axis=1),
        lambda r: (r.normal(size=(4, 5)), r.integers(0, 5, size=(4, 2))),
    ),
    "fancy index, clip and fill modes": (
        lambda a, i: (
            a[i],
            a.at[i - 3].get(mode="fill", fill_value=-1.0),
            jnp.take(a, i + 4, mode="clip"),
        ),
        lambda r: (r.normal(size=6), r.integers(0, 6, size=(3, 2))),
    ),
    "pad negative and interior": (
        lambda a: jax.lax.pad(a, jnp.asarray(0.5, a.dtype), ((1, -1, 2), (-1, 2, 0))),
        lambda r: (r.normal(size=(3, 4)),),
    ),
    "integer div, rem, round, clamp": (
        lambda i, x: (
            i // 3,
            jax.lax.div(i, 3),
            jax.lax.rem(i, 3),
            jax.lax.rem(x, jnp.asarray(0.7, x.dtype)),
            jnp.round(x),
            jax.lax.round(x),
            jnp.clip(x, -0.5, 0.5),
        ),
        lambda r: (r.integers(-9, 9, size=7), 2.5 * r.normal(size=7)),
    ),
    "select_n with an integer selector, iota, concatenate": (
        lambda i, x: (
            jax.lax.select_n(i, x, -x, 2 * x),
            jnp.arange(5) * x[0],
            jnp.concatenate([x, x[::-1]]),
        ),
        lambda r: (r.integers(0, 3, size=5).astype(np.int32), r.normal(size=5)),
    ),
    "while and cond": (
        lambda x: (
            jax.lax.while_loop(lambda c: c[0] < 5, lambda c: (c[0] + 1, jnp.cos(c[1])), (0, x))[1]
            + jax.lax.cond(x.sum() > 0, jnp.sin, jnp.exp, x)
        ),
        lambda r: (r.normal(size=3),),
    ),
    "reductions of an empty axis (XLA's identities)": (
        lambda x, i: (
            jnp.max(x[:, :0], axis=1, initial=0.5),
            jax.lax.reduce_max(x[:, :0], axes=(1,)),
            jax.lax.reduce_min(x[:0], axes=(0,)),
            # the integer limits, compared (their magnitude would overflow the check's 1 + |r|)
            jax.lax.reduce_max(i[:0], axes=(0,)) == jnp.iinfo(i.dtype).min,
            jax.lax.reduce_min(i[:0], axes=(0,)) == jnp.iinfo(i.dtype).max,
        ),
        lambda r: (r.normal(size=(2, 3)), r.integers(-9, 9, size=(4,)).astype(np.int32)),
    ),
    "reshape with a permutation (the JVP of a product over a non-leading axis)": (
        lambda x, t: (
            jax.lax.reshape(x, (4, 3), dimensions=(1, 0)),
            jax.jvp(lambda a: jnp.prod(a, axis=1), (x,), (t,)),
        ),
        lambda r: (r.normal(size=(3, 4)), r.normal(size=(3, 4))),
    ),
    "split, stack, transpose, squeeze": (
        lambda x: (
            jnp.split(x, [1, 3], axis=1)[1].T,
            jnp.stack([x[0], x[1]], axis=1),
            x[:1].squeeze(0),
        ),
        lambda r: (r.normal(size=(2, 4)),),
    ),
}


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("case", sorted(_PRIMITIVE_CASES))
def test_primitives_match_xla(case, dtype):
    fn, make = _PRIMITIVE_CASES[case]
    args = [a.astype(dtype) if a.dtype.kind == "f" else a for a in make(np.random.default_rng(0))]
    _assert_close(*_both(fn, *args), ulps=8)


def _group_args(group, names, dtype, rng):
    """Arguments by parameter name: 16 rows each, the algebra elements at generic angles, at
    1e-9 … 0.2 (the Taylor branches) and, for SO(3)/SE(3), within 1e-3 … 1e-8 of π."""
    if not set(names) <= {"xi", "mu", "g", "h", "p", "X", "euclidean_grad", "t"}:
        return None
    if rng is None:
        return []
    n, d = 16, group.dim
    unit = rng.normal(size=(n, d))
    unit /= np.linalg.norm(unit, axis=1, keepdims=True)
    xi = unit * np.array([1.0] * 6 + [1e-9, 1e-5, 1e-3, 0.2] + [3.0] * 6)[:, None]
    if group in (gj.SO3, gj.SE3):
        w = xi[-3:, :3] / np.linalg.norm(xi[-3:, :3], axis=1, keepdims=True)
        xi[-3:, :3] = w * (np.pi - np.array([1e-3, 1e-6, 1e-8]))[:, None]
    xi = xi.astype(dtype)
    g = np.asarray(group.exp(xi))
    pool = {
        "xi": xi,
        "mu": rng.normal(size=xi.shape).astype(dtype),
        "g": g,
        "h": np.asarray(group.exp(xi[::-1])),
        "p": rng.normal(size=(n, 3 if group in (gj.SO3, gj.SE3) else 2)).astype(dtype),
        "X": np.asarray(group.hat(xi)),
        "euclidean_grad": rng.normal(size=g.shape).astype(dtype),
        "t": 0.3,
    }
    return [pool[k] for k in names]


def _method(group, name):
    fn = getattr(type(group), name, None)
    return getattr(fn, "__wrapped_eager__", fn)


def _group_cases(full):
    """(group, method, dtype) for every eager method taking group/algebra arguments; by default
    SO(3) in float64 and SE(3)'s exponential coordinates, the rest in the long tier."""
    cases = []
    for group in (gj.SO3, gj.SE3, gj.SO2, gj.SE2):
        for name in sorted(EAGER_JIT_METHODS):
            fn = _method(group, name)
            if fn is None or _group_args(group, _names(fn), np.float64, None) is None:
                continue
            for dtype in (np.float64, np.float32):
                default = dtype == np.float64 and (
                    group is gj.SO3 or (group is gj.SE3 and name in _SE3_DEFAULT)
                )
                if full != default:
                    label = f"{type(group).__name__}-{name}-{np.dtype(dtype).name}"
                    cases.append(pytest.param(group, name, dtype, id=label))
    return cases


_SE3_DEFAULT = {"exp", "log", "jac_right", "jac_right_inv", "Ad", "coad"}


def _names(fn):
    return list(inspect.signature(fn).parameters)[1:]


@pytest.mark.parametrize("group, method, dtype", _group_cases(False))
def test_every_eager_group_operation_matches_xla(group, method, dtype):
    _check_group_method(group, method, dtype)


@pytest.mark.long
@pytest.mark.parametrize("group, method, dtype", _group_cases(True))
def test_every_eager_group_operation_matches_xla_all_groups_and_float32(group, method, dtype):
    _check_group_method(group, method, dtype)


def _check_group_method(group, method, dtype):
    fn = _method(group, method)
    args = _group_args(group, _names(fn), dtype, np.random.default_rng(len(method)))
    arrays = [a for a in args if not isinstance(a, float)]

    def call(*arrs):
        it = iter(arrs)
        return fn(group, *[a if isinstance(a, float) else next(it) for a in args])

    try:
        host, ref = _both(call, *arrays)
    except _host_eval.Unsupported as err:  # e.g. `project` (an SVD): compiled instead
        assert method == "project", err
        return
    _assert_close(host, ref, ulps=32)


def test_unsupported_large_and_weakly_typed_programs_are_compiled():
    cumsum = quick_compiled(lambda x: jnp.cumsum(x) * 2.0)  # no NumPy rule for cumsum
    x = np.arange(7.0)
    out, n = count_events(lambda: cumsum(x))
    assert n == 1
    np.testing.assert_array_equal(out, 2 * np.cumsum(x))
    big = quick_compiled(lambda x: x * 2.0)
    large = np.ones(_host_eval.MAX_ELEMENTS + 1)
    out, n = count_events(lambda: big(large))
    assert n == 1
    np.testing.assert_array_equal(out, 2 * large)
    small = np.ones(5)
    out, n = count_events(lambda: big(small))
    assert n == 0 and isinstance(out, jax.Array)
    np.testing.assert_array_equal(out, 2 * small)
    # a weakly typed output (a Python constant made an array): the host's device_put would make
    # it strongly typed, so it is compiled at once, and keeps JAX's weak type
    weak = quick_compiled(lambda x: jnp.asarray(2.0))
    out, n = count_events(lambda: weak(small))
    assert n == 1 and out.weak_type and out == 2.0


def _with_unknown_parameter(closed, primitive):
    """``closed`` with a parameter no rule reads added to the equations of ``primitive``."""
    jaxpr = closed.jaxpr.replace(
        eqns=[
            e.replace(params={**e.params, "unread": 1}) if e.primitive.name == primitive else e
            for e in closed.jaxpr.eqns
        ]
    )
    return jex_core.ClosedJaxpr(jaxpr, closed.consts)


def test_a_parameter_no_rule_reads_is_not_interpreted():
    """A structural primitive with a parameter its rule does not read (one it was not written
    for, or one a later JAX adds) raises :class:`Unsupported` (the caller compiles) instead of
    being evaluated as if the parameter were absent."""
    x = np.arange(6.0).reshape(2, 3)
    closed = jax.make_jaxpr(lambda x: jnp.sin(x).T.reshape(6))(x)
    np.testing.assert_allclose(_host_eval.evaluate(closed, [x])[0], np.sin(x).T.reshape(6))
    for primitive in ("transpose", "reshape"):
        with pytest.raises(_host_eval.Unsupported, match=f"{primitive} with the parameters"):
            _host_eval.evaluate(_with_unknown_parameter(closed, primitive), [x])


def test_host_results_keep_dtype_and_a_failed_check_still_raises():
    R32 = np.asarray(gj.SO3.exp(np.array([0.1, 0.2, 0.3], np.float32)))
    assert R32.dtype == np.float32
    np.testing.assert_allclose(R32 @ R32.T, np.eye(3), atol=8 * np.finfo(np.float32).eps)
    with pytest.raises(ValueError, match="not an element of SO3"):
        gj.SO3.check(2.0 * np.eye(3), "R")
