"""ReversibleAdjoint on the LGVI's generic group path: a rigid body on SE(3) with gravity and an
offset centre of mass (the 6×6 inertia couples rotation and translation).  Its gradients with
respect to the initial momenta, the rotational inertia, the centre of mass and ``dt`` equal plain
reverse mode to round-off and agree with central differences, in float64 and float32, at batch 1
and under ``jax.vmap``; the backward pass evaluates the loop-invariant part of the step once."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import geomjax as gj
from geomjax._internal.eager import EAGER_COMPILER_OPTIONS
from geomjax.integrators import adjoint as adjoint_module

from .helpers import central_difference

_STEPS = 15
_G0 = np.asarray(gj.SE3.exp(jnp.array([0.1, 0.2, -0.3, 0.5, 0.1, 0.0])))
_W_G = np.arange(16.0).reshape(4, 4) / 16.0
_W_MU = np.array([0.3, -1.0, 0.7, 0.2, -0.5, 0.4])
REV = gj.ReversibleAdjoint()


def _gravity(g):
    return 9.81 * 2.0 * g[2, 3]


def _loss(adjoint, dtype=jnp.float64, batch=False, steps=_STEPS):
    def one(mu0, p):
        system = gj.RigidBodySE3(
            mass=jnp.asarray(2.0, dtype),
            inertia=jnp.diag(p["moments"]),
            com=p["com"],
            potential=_gravity,
        )
        g0 = jnp.asarray(_G0, dtype)
        kw = {} if adjoint is None else {"adjoint": adjoint}
        sol = gj.simulate(system, gj.LGVI(), system.make_state(g0, mu0), p["dt"], steps, **kw)
        s = sol.final_state
        return jnp.sum(jnp.asarray(_W_G, dtype) * s.g) + jnp.sum(jnp.asarray(_W_MU, dtype) * s.mu)

    if not batch:
        return one
    return lambda m, p: jnp.sum(jax.vmap(one, in_axes=(0, None))(m, p))


def _inputs(batch, dtype=jnp.float64):
    rng = np.random.default_rng(0)
    mu0 = rng.standard_normal((batch, 6) if batch else (6,))
    p = {"moments": np.array([1.0, 2.0, 3.0]), "com": np.array([0.1, 0.0, -0.2]), "dt": 0.05}
    return jax.tree.map(lambda a: jnp.asarray(a, dtype), (mu0, p))


def _rel(a, b):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.max(np.abs(a - b)) / max(np.max(np.abs(b)), 1e-300))


def _assert_close(g, ref, tol):
    for a, b in zip(jax.tree.leaves(g), jax.tree.leaves(ref)):
        assert _rel(a, b) < tol, (a, b)


@pytest.mark.long
def test_se3_gradients_equal_plain_reverse_mode_and_central_differences():
    """float64, batch 1: every input (momenta, principal moments, centre of mass, dt) against
    plain reverse mode (the same discrete map differentiated another way: round-off, observed
    ~1e-15 relative, asserted 1e-10) and a central difference along a random direction (a
    smooth O(1) loss: truncation ~eps² = 1e-12, round-off ~1e-16/eps = 1e-10; asserted 1e-6)."""
    x = _inputs(0)
    g_rev, g_plain = _both_gradients_jit(x)
    _assert_close(g_rev, g_plain, 1e-10)
    v, fd = central_difference(lambda x: _loss(None)(*x), x)
    dot = float(sum(jnp.vdot(g, d) for g, d in zip(jax.tree.leaves(g_rev), jax.tree.leaves(v))))
    assert abs(dot - fd) <= 1e-6 * max(1.0, abs(fd)), (dot, fd)


def _both_gradients(x):
    return jax.grad(_loss(REV), (0, 1))(*x), jax.grad(_loss(None), (0, 1))(*x)


_both_gradients_jit = jax.jit(_both_gradients)


@pytest.mark.long
@settings(max_examples=20, deadline=None)
@given(
    st.lists(st.floats(-2.0, 2.0), min_size=6, max_size=6),
    st.floats(0.01, 0.08),
    st.floats(0.0, 0.3),
)
def test_se3_gradients_equal_plain_reverse_mode_property(mu0, dt, com_x):
    """Initial momenta up to 2 (h|xi| up to ~0.2: 3 to 7 chord iterations in the reverse
    step), dt, an offset of the centre of mass: the two gradients differ by the round-off of
    the reconstruction amplified by the backward dynamics over 15 steps.  Observed up to 2.4e-10
    relative (mu0 = (-2, 0, ...), dt 0.078, the same with Newton iterations in the reverse step,
    so not the solver), ~1e-15 at the bench's dt 0.01; asserted 1e-8.  One compilation for all
    examples."""
    x = _inputs(0)
    x = (jnp.asarray(mu0), {**x[1], "dt": jnp.asarray(dt), "com": x[1]["com"].at[0].set(com_x)})
    g_rev, g_plain = _both_gradients_jit(x)
    _assert_close(g_rev, g_plain, 1e-8)


@pytest.mark.long
@pytest.mark.parametrize("dtype", [jnp.float64, jnp.float32])
def test_se3_batched_gradients_equal_plain_reverse_mode(dtype):
    """Under ``jax.vmap`` (batched momenta, shared parameters: the parameters' cotangent is per
    example inside the backward pass and summed at the end) against plain reverse mode.
    float64: round-off (asserted 1e-10).  float32: the two gradients round differently over 15
    forward and 15 backward steps (compensated momentum, Björck step): asserted
    4·steps·eps32 = 7e-6 relative to the largest entry."""
    x = _inputs(4, dtype)
    g_rev, g_plain = jax.jit(
        lambda x: (
            jax.grad(_loss(REV, dtype, batch=True), (0, 1))(*x),
            jax.grad(_loss(None, dtype, batch=True), (0, 1))(*x),
        )
    )(x)
    assert jax.tree.leaves(g_rev)[0].dtype == dtype
    tol = 1e-10 if dtype == jnp.float64 else 4 * _STEPS * float(jnp.finfo(jnp.float32).eps)
    _assert_close(g_rev, g_plain, tol)


def test_loop_invariant_part_is_evaluated_once(monkeypatch):
    """The backward pass pulls the accumulated residual cotangents back through the step's
    parameter-only part (``_Invariant.known``) once, not once per residual (on SE(3) 37
    residuals: the final pull-back was 37 copies of the 6×6 inverse's derivative)."""
    calls = []
    real = adjoint_module._split_invariant

    def counting(*args, **kw):
        inv = real(*args, **kw)
        if inv is None:
            return None
        known = inv.known

        def counted(p, d):
            calls.append(1)
            return known(p, d)

        return adjoint_module._Invariant(counted, inv.unknown, inv.diff)

    monkeypatch.setattr(adjoint_module, "_split_invariant", counting)
    jax.make_jaxpr(jax.grad(_loss(REV, steps=2), (0, 1)))(*_inputs(0))
    # one evaluation for the residuals themselves, one for their pull-back
    assert len(calls) == 2


@pytest.mark.long
@pytest.mark.parametrize("dtype", [jnp.float64, jnp.float32])
def test_reverse_step_solves_by_chord_iterations_to_the_same_state(dtype, monkeypatch):
    """The adjoint's reverse step in a batched backward pass (its roots recorded for the
    forward step) solves the discrete Legendre transform by chord iterations
    (``LGVI._solve_legendre``), at batch 1 and in the forward step by Newton.  The reverse step rebuilds the state the forward step started from, to round-off,
    at ``h|xi|`` from 0.006 to 0.27 (3 to 7 chord iterations).  Observed: float64 <= 2.3e-16,
    float32 <= 7e-8 (absolute, entries O(1); the same as with Newton in the reverse step);
    asserted 50 eps."""
    import equinox as eqx

    from geomjax.integrators import lgvi as lgvi_module

    seen = []
    real = lgvi_module.newton_solve

    def spy(*args, **kw):
        seen.append(kw.get("chord", False))
        return real(*args, **kw)

    monkeypatch.setattr(lgvi_module, "newton_solve", spy)
    mu0 = jnp.asarray([0.3, -0.5, 1.0, 0.2, 0.1, -0.4], dtype)
    system = gj.RigidBodySE3(
        mass=jnp.asarray(2.0, dtype),
        inertia=jnp.asarray([1.0, 2.0, 3.0], dtype),
        com=jnp.asarray([0.1, 0.0, -0.2], dtype),
        potential=_gravity,
    )
    method = gj.LGVI()
    params, static = eqx.partition((system, method), eqx.is_inexact_array)

    @jax.jit
    def rebuild(mu0, dt):
        x = method.init(system, system.make_state(jnp.asarray(_G0, dtype), mu0))
        x1 = method.advance(system, x, dt)[0]
        reverse = adjoint_module._reverse
        x0, _ = reverse(static, params, x1, 0.0, dt, None, handover=True, batched=True)
        x0_newton, _ = reverse(static, params, x1, 0.0, dt, None, handover=True)
        return x, x0, x0_newton

    tol = 50 * float(jnp.finfo(dtype).eps)
    for dt, scale in ((0.01, 1.0), (0.05, 3.0), (0.1, 5.0)):
        x, x0, x0_newton = rebuild(scale * mu0, jnp.asarray(dt, dtype))
        assert float(adjoint_module._max_abs_diff(x0, x)) <= tol
        assert float(adjoint_module._max_abs_diff(x0_newton, x)) <= tol
    # traced once: the forward step by Newton, the reverse step of a batched backward pass by
    # chord iterations, that of an unbatched one by Newton
    assert seen == [False, True, False], seen


def test_batched_reverse_step_by_chord_iterations_small():
    """The default tier's small version of the batched checks above: under ``jax.vmap`` the
    reverse step solves by chord iterations (``LGVI._solve_legendre``), and the momenta's and
    parameters' gradients equal plain reverse mode's (float64, batch 2, 3 steps: round-off).
    Compiled without XLA's backend optimization (2/3 of the compilation time; the same
    operations, the long tier's versions above compile with XLA's defaults)."""
    x = _inputs(2)
    g_rev, g_plain = jax.jit(
        lambda x: (
            jax.grad(_loss(REV, batch=True, steps=3), (0, 1))(*x),
            jax.grad(_loss(None, batch=True, steps=3), (0, 1))(*x),
        ),
        compiler_options=EAGER_COMPILER_OPTIONS,
    )(x)
    _assert_close(g_rev, g_plain, 1e-10)
