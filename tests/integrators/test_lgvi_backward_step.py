"""The LGVI's SO(3) step with its hand-written derivative (``_so3_soa.cayley_step``: the JVP is
the transpose of the hand-written vector–Jacobian product ``lgvi_step_vjp``, so reverse mode
runs that product) against JAX's derivatives of the same step written without a custom rule
(the root's derivatives from the implicit function theorem), central differences of the step
solved anew, and second derivatives; and plain reverse mode through ``simulate`` (batch 1 and
vmapped, where each step keeps only its root and recomputes the rest) against central
differences and against the run that keeps every residual."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import geomjax as gj
from geomjax.integrators import _so3_soa as soa
from geomjax.integrators.newton import newton_solve


def _inputs(seed, principal, dtype):
    rng = np.random.default_rng(seed)
    if principal:
        I = tuple(rng.uniform(0.5, 3.0, 3))
    else:
        A = rng.standard_normal((3, 3))
        I = tuple((A @ A.T + 1.5 * np.eye(3)).reshape(9))
    R = tuple(np.asarray(gj.SO3.exp(jnp.asarray(rng.standard_normal(3)))).reshape(9))
    b = tuple(rng.standard_normal(3) * rng.uniform(0.1, 3.0))
    h = rng.uniform(1e-3, 0.3)
    cast = lambda v: jnp.asarray(v, dtype)  # noqa: E731
    return tuple(map(cast, I)), tuple(map(cast, R)), tuple(map(cast, b)), cast(h)


def _root(I, b, h):
    x0, c = soa.cayley_guess(I, b, h, 8, False)
    x, _ = newton_solve(soa.cayley_residual, x0, (I, b, h), iters=0, jac_solve=soa.cayley_jac_solve)
    return x, c


def _cayley_jac_solve_any_inertia(x, args, r):
    """``J^{-1} r`` for :func:`_so3_soa.cayley_residual` with ``J`` from forward-mode autodiff
    (column by column): exact for any ``I``, symmetric or not (the closed form the LGVI uses
    assumes a symmetric inertia, which a second derivative along a perturbation of the 9
    entries leaves)."""
    cols = [
        jax.jvp(
            lambda z: soa.cayley_residual(z, args), (x,), (tuple(1.0 * (i == j) for i in range(3)),)
        )[1]
        for j in range(3)
    ]
    J = tuple(cols[j][i] for i in range(3) for j in range(3))
    from geomjax._linalg import solve3_scalars

    return solve3_scalars(J, r)


def step_hand(I, R, b, h):
    """The step as the LGVI runs it (root, then cayley_step)."""
    x, c = _root(I, b, h)
    return soa.cayley_step(I, R, b, h, (x, c), True)


def step_reference(I, R, b, h):
    """The same step without the custom rule: JAX differentiates the explicit part, the root
    by the implicit function theorem (newton_solve), from a guess with no derivative."""
    x0 = jax.lax.stop_gradient(soa.cayley_predictor(I, b, h))
    x, _ = newton_solve(
        soa.cayley_residual, x0, (I, b, h), iters=12, jac_solve=_cayley_jac_solve_any_inertia
    )
    K = soa.cay_increment(tuple(h * xi for xi in x))
    return soa.matmul_increment(R, K), soa.rotate_increment(K, b)


def _flat(out):
    return jnp.stack([*out[0], *out[1]])


def _rel(a, b):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.max(np.abs(a - b)) / max(np.max(np.abs(b)), 1e-300))


def _random_like(tree, rng):
    return jax.tree.map(lambda a: jnp.asarray(rng.standard_normal(), a.dtype), tree)


@jax.jit
def _derivatives(args, ct, tangents):
    """(outputs, VJPs, JVPs) of both steps, compiled once per inertia layout."""
    res = []
    for step in (step_hand, step_reference):
        out, vjp = jax.vjp(step, *args)
        res.append((_flat(out), vjp(ct), _flat(jax.jvp(step, args, tangents)[1])))
    return res


@settings(max_examples=12, deadline=None)
@given(seed=st.integers(0, 2**31 - 1), principal=st.booleans())
def test_vjp_and_jvp_equal_the_reference_derivatives_float64(seed, principal):
    args = _inputs(seed, principal, jnp.float64)
    rng = np.random.default_rng(seed + 1)
    ct = _random_like(jax.eval_shape(step_hand, *args), rng)
    tangents = _random_like(args, rng)
    (out, g_hand, d_hand), (out_ref, g_ref, d_ref) = _derivatives(args, ct, tangents)
    assert _rel(out, out_ref) < 1e-13
    scale = max(1.0, max(abs(float(v)) for v in jax.tree.leaves(g_ref)))
    for a, r in zip(jax.tree.leaves(g_hand), jax.tree.leaves(g_ref)):
        assert abs(float(a) - float(r)) <= 1e-11 * scale
    assert _rel(d_hand, d_ref) < 1e-11


@pytest.mark.parametrize("principal", [True, False])
def test_directional_derivative_matches_central_differences(principal):
    """The step solved anew at shifted inputs (tight Newton): second-order central differences."""
    args = _inputs(3, principal, jnp.float64)
    rng = np.random.default_rng(7)
    v = _random_like(args, rng)
    ct = _random_like(jax.eval_shape(step_hand, *args), rng)

    def scalar(*a):
        out = step_hand(*a)
        return sum(float(c) * o for c, o in zip(jax.tree.leaves(ct), jax.tree.leaves(out)))

    g = jax.grad(lambda *a: scalar(*a), argnums=(0, 1, 2, 3))(*args)
    dot = sum(float(gi) * float(vi) for gi, vi in zip(jax.tree.leaves(g), jax.tree.leaves(v)))
    eps = 1e-5
    shift = lambda t: jax.tree.map(lambda a, d: a + t * d, args, v)  # noqa: E731
    f = lambda t: sum(  # noqa: E731
        float(c) * float(o)
        for c, o in zip(jax.tree.leaves(ct), jax.tree.leaves(step_reference(*shift(t))))
    )
    fd = (f(eps) - f(-eps)) / (2 * eps)
    assert abs(dot - fd) <= 1e-7 * max(1.0, abs(fd)), (dot, fd)


def test_second_derivatives_equal_the_reference():
    """Forward over reverse (a Hessian–vector product): the JVP rule is differentiated again,
    the root's derivatives from the implicit function theorem inside it."""
    args = _inputs(11, False, jnp.float64)
    rng = np.random.default_rng(5)
    ct = _random_like(jax.eval_shape(step_hand, *args), rng)
    v = _random_like(args, rng)

    def scalar(step):
        def f(*a):
            out = step(*a)
            return sum(c * o for c, o in zip(jax.tree.leaves(ct), jax.tree.leaves(out)))

        return f

    def hvp(step):
        grad = jax.grad(scalar(step), argnums=(0, 1, 2, 3))
        return jax.jvp(lambda *a: grad(*a), args, v)[1]

    h_hand, h_ref = hvp(step_hand), hvp(step_reference)
    scale = max(abs(float(r)) for r in jax.tree.leaves(h_ref))
    for a, r in zip(jax.tree.leaves(h_hand), jax.tree.leaves(h_ref)):
        assert abs(float(a) - float(r)) <= 1e-10 * scale


def test_float32_against_float64():
    args64 = _inputs(21, True, jnp.float64)
    args32 = jax.tree.map(lambda a: a.astype(jnp.float32), args64)
    ct = tuple(jnp.asarray(c) for c in np.random.default_rng(2).standard_normal(12))
    cts = (ct[:9], ct[9:])
    g64 = jax.vjp(step_hand, *args64)[1](cts)
    g32 = jax.vjp(step_hand, *args32)[1](jax.tree.map(lambda a: a.astype(jnp.float32), cts))
    assert all(leaf.dtype == jnp.float32 for leaf in jax.tree.leaves(g32))
    scale = max(abs(float(r)) for r in jax.tree.leaves(g64))
    for a, r in zip(jax.tree.leaves(g32), jax.tree.leaves(g64)):
        assert abs(float(a) - float(r)) <= 1e-5 * scale


class _KeepEveryResidual(gj.LGVI):
    """The LGVI with JAX's default reverse mode (every residual of a step stored)."""

    def reverse_mode_saves(self, system, batched=False):
        return None


def _run_loss(method, steps=40, batch=None):
    top = gj.HeavyTop(1.0, 9.81, [0.1, 0.2, 0.4])
    R0 = gj.SO3.exp(jnp.array([0.3, -0.2, 0.5]))

    def one(pi0, moments, us):
        system = gj.RigidBody(moments, top)
        sol = gj.simulate(system, method, system.make_state(R0, pi0), 0.02, steps, us)
        s = sol.final_state
        return jnp.sum(jnp.arange(9.0).reshape(3, 3) * s.R) + jnp.sum(
            s.Pi * jnp.array([1.0, -2.0, 0.5])
        )

    if batch is None:
        return one
    return lambda p, m, u: jnp.sum(jax.vmap(one, in_axes=(0, None, 0))(p, m, u))


def test_vmapped_plain_reverse_mode_keeping_only_the_roots():
    """Vmapped, each step keeps its root and recomputes the rest in the backward pass
    (LGVI.reverse_mode_saves); the gradient (initial momenta, shared moments, controls) equals
    the one that keeps every residual to round-off, and central differences."""
    rng = np.random.default_rng(0)
    B, steps = 3, 20
    pis = jnp.asarray(rng.standard_normal((B, 3)))
    moments = jnp.array([1.0, 2.0, 3.0])
    us = jnp.asarray(0.1 * rng.standard_normal((B, steps, 3)))
    loss = _run_loss(gj.LGVI(), steps, B)
    g = jax.jit(jax.grad(loss, argnums=(0, 1, 2)))(pis, moments, us)
    g_all = jax.jit(jax.grad(_run_loss(_KeepEveryResidual(), steps, B), argnums=(0, 1, 2)))(
        pis, moments, us
    )
    for a, r in zip(g, g_all):
        assert _rel(a, r) < 1e-12
    v = [rng.standard_normal(np.shape(a)) for a in (pis, moments, us)]
    f = jax.jit(loss)
    eps = 1e-6
    fd = (
        float(f(*(a + eps * d for a, d in zip((pis, moments, us), v))))
        - float(f(*(a - eps * d for a, d in zip((pis, moments, us), v))))
    ) / (2 * eps)
    dot = sum(float(np.vdot(np.asarray(a), d)) for a, d in zip(g, v))
    assert abs(dot - fd) <= 1e-6 * max(1.0, abs(fd)), (dot, fd)


def test_forward_mode_through_simulate_still_works():
    """A custom VJP would refuse ``jax.jvp``; the hand-written derivative is a JVP rule, so
    forward mode through a run equals reverse mode's directional derivative."""
    rng = np.random.default_rng(1)
    steps = 30
    pi0 = jnp.asarray(rng.standard_normal(3))
    moments = jnp.array([1.0, 2.0, 3.0])
    us = jnp.asarray(0.1 * rng.standard_normal((steps, 3)))
    loss = _run_loss(gj.LGVI(), steps)
    v = tuple(jnp.asarray(rng.standard_normal(np.shape(a))) for a in (pi0, moments, us))
    fwd = jax.jit(lambda *a: jax.jvp(loss, a, v)[1])(pi0, moments, us)
    g = jax.jit(jax.grad(loss, argnums=(0, 1, 2)))(pi0, moments, us)
    rev = sum(float(jnp.vdot(a, d)) for a, d in zip(g, v))
    assert abs(float(fwd) - rev) <= 1e-12 * max(1.0, abs(rev))
