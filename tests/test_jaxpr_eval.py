"""``geomjax._internal.jaxpr_eval``: the one walk of a jaxpr (nested ``jit``, custom derivatives,
``cond``, ``while``) gives what the function gives, with JAX's own primitives as its only rule
and with the host interpreter's table; the liveness and known/unknown passes split a program
whose parts, evaluated again, give the function's values."""

from typing import ClassVar

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.extend import core as jex_core

from geomjax._internal import host_eval
from geomjax._internal.jaxpr_eval import (
    CONCRETE_CONTROL_FLOW,
    SUB_JAXPR,
    Interpreter,
    bind,
    inline_calls,
    known_split,
    live_eqns,
    live_vars,
)


@jax.custom_jvp
def _softplus(x):
    return jnp.log1p(jnp.exp(x))


@_softplus.defjvp
def _softplus_jvp(primals, tangents):
    (x,), (t,) = primals, tangents
    return _softplus(x), t * jax.nn.sigmoid(x)


@jax.jit
def _inner(a, x):
    return jnp.tanh(a @ x) + _softplus(x)


def _program(a, x):
    def body(c):
        k, y = c
        return k + 1, 0.5 * _inner(a, y) - 0.1 * y

    k, y = jax.lax.while_loop(lambda c: c[0] < 4, body, (0, x))
    z = jax.lax.cond(jnp.sum(x) > 0.0, lambda t: jax.jit(lambda u: u @ a)(t), lambda t: -t, y)
    return z, k, jnp.max(y)


class _Binding(Interpreter):
    """JAX's primitives one by one, every call-like primitive and control flow entered."""

    rules: ClassVar[dict] = {**inline_calls(SUB_JAXPR), **CONCRETE_CONTROL_FLOW}

    def __init__(self):
        self.bound = []

    def fallback(self, eqn, invals):
        self.bound.append(eqn.primitive.name)
        return bind(eqn, invals)


def _primitives(jaxpr) -> set:
    """The primitives of ``jaxpr`` and of the jaxprs in its equations' parameters."""
    names = set()
    for eqn in jaxpr.eqns:
        names.add(eqn.primitive.name)
        for value in eqn.params.values():
            for sub in value if isinstance(value, tuple) else (value,):
                if isinstance(sub, jex_core.ClosedJaxpr):
                    names |= _primitives(sub.jaxpr)
                elif isinstance(sub, jex_core.Jaxpr):
                    names |= _primitives(sub)
    return names


_A = np.array([[0.9, -0.3, 0.2], [0.1, 0.7, -0.5], [0.4, 0.2, 1.1]])


@pytest.mark.parametrize("x", [[0.8, 1.3, -0.2], [-2.0, -1.5, 0.3]])  # cond: both branches
def test_the_walk_enters_nested_calls_and_control_flow_and_gives_the_functions_values(x):
    x = np.array(x)
    closed = jax.make_jaxpr(_program)(_A, x)
    names = _primitives(closed.jaxpr)
    calls = {"jit", "pjit"} & names
    assert calls and {"custom_jvp_call", "cond", "while"} <= names
    expected = [np.asarray(v) for v in _program(_A, x)]
    interp = _Binding()
    got = interp.call(closed, [_A, x])
    # every call-like primitive and control flow was entered, never bound whole; the primitives
    # inside them (the custom_jvp's exp, log1p) were evaluated
    assert not (calls | {"custom_jvp_call", "cond", "while"}) & set(interp.bound)
    assert {"exp", "log1p", "tanh", "dot_general"} <= set(interp.bound)
    reference = jax.core.eval_jaxpr(closed.jaxpr, closed.consts, _A, x)
    for g, e, r in zip(got, expected, reference, strict=True):
        np.testing.assert_allclose(np.asarray(g), e, rtol=1e-14, atol=1e-15)
        np.testing.assert_allclose(np.asarray(r), e, rtol=1e-14, atol=1e-15)
    # the host interpreter is the same walk with NumPy rules: same values to a few ulp, same dtypes
    host = host_eval.evaluate(closed, [_A, x])
    for h, e in zip(host, expected, strict=True):
        assert h.dtype == e.dtype and h.shape == e.shape
        np.testing.assert_allclose(h, e, rtol=1e-14, atol=1e-15)


def test_host_rules_cover_what_the_interpreter_enters():
    # every call-like primitive of the shared walk is entered by the host interpreter, and the
    # rule tables of the primitives do not shadow one another (one rule per name)
    assert set(SUB_JAXPR) | set(CONCRETE_CONTROL_FLOW) <= set(host_eval._RULES)
    tables = [host_eval._UNARY, host_eval._BINARY, host_eval._WITH_PARAMS]
    assert sum(len(t) for t in tables) == len(set().union(*tables))


def test_liveness_and_known_split_reassemble_the_function():
    def f(p, x):
        dead = jnp.cos(x) * 3.0  # reaches no output
        scale = jnp.exp(p[0]) * p[1]  # known from the parameters alone
        return jnp.sin(x) * scale + p[1], dead * 0.0 + 1.0

    p, x = np.array([0.3, -1.2]), np.array([0.5, 2.0, -0.7])
    closed = jax.make_jaxpr(lambda p, x: f(p, x)[0])(p, x)
    jaxpr = closed.jaxpr
    live = live_vars(jaxpr.eqns, jaxpr.outvars)
    assert set(jaxpr.invars) <= live
    # the cosine is dead: pruned by live_eqns
    assert "cos" in {e.primitive.name for e in jaxpr.eqns}
    assert "cos" not in {e.primitive.name for e in live_eqns(jaxpr.eqns, jaxpr.outvars)}
    p_var = jaxpr.invars[0]
    known, dep = set(jaxpr.constvars) | {p_var}, {p_var}
    k_eqns, u_eqns = known_split(jaxpr.eqns, known, dep)
    assert {e.primitive.name for e in k_eqns} >= {"exp"}
    assert "sin" in {e.primitive.name for e in u_eqns}
    assert all(v in dep for e in k_eqns for v in e.outvars)
    # the known part evaluated first, then the per-call part: the function's value
    env = {p_var: jnp.asarray(p), jaxpr.invars[1]: jnp.asarray(x)}
    walk = _Binding()
    walk.eval_eqns(k_eqns, env, [])
    (out,) = walk.eval_eqns(u_eqns, env, jaxpr.outvars)
    np.testing.assert_allclose(out, f(p, x)[0], rtol=1e-15)
