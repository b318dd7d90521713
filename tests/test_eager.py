"""Eager calls: known values under eager differentiation, quick compiles of one-shot programs, and
what a first eager gradient of ``simulate`` compiles."""

import subprocess
import sys

import equinox as eqx
import jax
import jax.monitoring
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import geomjax as gj
from geomjax._internal.eager import HOST_CALLS, known_value, quick_compiled
from geomjax._linalg import spd_inverse
from geomjax.systems.base import check_finite, check_spd

_COMPILE_EVENT = "/jax/core/compile/backend_compile_duration"


def _compiled_names(fn):
    names = []

    def listener(name, duration, **kwargs):
        if name == _COMPILE_EVENT:
            names.append(kwargs.get("fun_name", "?"))

    jax.monitoring.register_event_duration_secs_listener(listener)
    try:
        out = jax.block_until_ready(fn())
    finally:
        jax.monitoring.unregister_event_duration_listener(listener)
    return out, names


def test_known_value_is_the_primal_under_eager_differentiation_and_none_under_jit():
    x = jnp.array([1.0, -2.0, 3.0])
    seen = {}

    def probe(tag):
        def f(y):
            v = known_value(y)
            seen[tag] = None if v is None else np.asarray(v)
            return jnp.sum(y**2)

        return f

    jax.grad(probe("grad"))(x)
    jax.jvp(probe("jvp"), (x,), (x,))
    jax.jit(probe("jit"))(x)
    jax.vmap(probe("vmap"))(x[:, None])
    np.testing.assert_array_equal(seen["grad"], x)
    np.testing.assert_array_equal(seen["jvp"], x)
    assert seen["jit"] is None and seen["vmap"] is None
    assert known_value(2.0) == 2.0 and known_value("a") is None


def test_checks_under_eager_grad_raise_the_eager_error_and_keep_the_gradient():
    # a non-finite argument under an eager grad: the eager ValueError naming the argument (before,
    # an equinox runtime error from op-by-op programs)
    with pytest.raises(ValueError, match="argument 'p' must be finite"):
        jax.grad(lambda p: jnp.sum(check_finite(p, "p", "test")))(jnp.array([1.0, jnp.nan]))
    with pytest.raises(ValueError, match="argument 'state0.R' is not an element of SO3"):
        jax.grad(lambda R: jnp.sum(gj.SO3.check(R, "state0.R")))(2.0 * jnp.eye(3))
    with pytest.raises(ValueError, match="argument 'M' must be symmetric positive definite"):
        jax.grad(lambda m: jnp.sum(check_spd(m, "M", "test")))(-jnp.eye(3))
    # a good argument: the check is the identity, gradient 1 (and 2M for a quadratic)
    g = jax.grad(lambda p: jnp.sum(check_finite(p, "p", "test")))(jnp.ones(3))
    np.testing.assert_array_equal(g, np.ones(3))
    M = jnp.array([[2.0, 0.5], [0.5, 1.0]])
    g = jax.grad(lambda m: jnp.sum(check_spd(m, "M", "test") ** 2))(M)
    np.testing.assert_allclose(g, 2 * M, rtol=1e-15)


def test_quick_compiled_eagerly_and_inside_jit_gives_the_same_numbers():
    f = quick_compiled(lambda a, b: jnp.tanh(a) @ b + jnp.sin(b).sum())
    rng = np.random.default_rng(3)
    a, b = rng.normal(size=(4, 4)), rng.normal(size=4)
    eager = f(a, b)
    inside = jax.jit(lambda a, b: f(a, b) + 0.0)(a, b)  # nested: no compiler options allowed
    ref = np.tanh(a) @ b + np.sin(b).sum()
    np.testing.assert_allclose(eager, ref, rtol=1e-13)
    np.testing.assert_allclose(inside, ref, rtol=1e-13)
    g = jax.grad(lambda b: f(a, b).sum())(b)  # eager grad: tracer arguments, compiled normally
    np.testing.assert_allclose(g, np.tanh(a).sum(0) + 4 * np.cos(b), rtol=1e-13)


def test_quick_program_of_concrete_arrays_under_eager_autodiff():
    # concrete arguments under an eager grad/jvp (a group check of a known primal): the quick
    # top-level program, compiled once, not a second, fully optimized one; under jit, vmap
    # and jit(grad) the function is traced into the caller's program
    f = quick_compiled(lambda a, b: jnp.tanh(a) @ b)
    rng = np.random.default_rng(5)
    a, b = rng.normal(size=(5, 5)), rng.normal(size=5)
    ref = np.tanh(a) @ b
    for _ in range(HOST_CALLS + 1):  # host-evaluated first, then the quick program compiles
        np.testing.assert_allclose(f(a, b), ref, rtol=1e-13)

    def loss(x):
        return jnp.sum(x * f(a, b))  # f of constants: no tangent

    x = jnp.ones(5)
    (g, t), names = _compiled_names(lambda: (jax.grad(loss)(x), jax.jvp(loss, (x,), (x,))[1]))
    assert not any("lambda" in n for n in names), names  # f's program was reused
    np.testing.assert_allclose(g, ref, rtol=1e-13)
    np.testing.assert_allclose(t, ref.sum(), rtol=1e-13)
    np.testing.assert_allclose(jax.jit(jax.grad(loss))(x), ref, rtol=1e-13)
    np.testing.assert_allclose(jax.vmap(loss)(jnp.ones((2, 5)))[1], ref.sum(), rtol=1e-13)


def test_eager_programs_on_constants_inside_a_trace():
    # a group operation or a metric function on a constant array inside jit/grad: its arguments
    # are concrete but it is not a top-level program (no compiler options allowed there)
    R = gj.SO3.exp(jnp.array([0.3, -0.1, 0.7]))
    f = jax.jit(lambda x: gj.SO3.inverse(R) @ x)
    np.testing.assert_allclose(f(jnp.ones(3)), np.asarray(R).T @ np.ones(3), rtol=1e-15)
    g = jax.grad(lambda x: jnp.sum(gj.SO3.log(R) * x))(jnp.ones(3))
    np.testing.assert_allclose(g, [0.3, -0.1, 0.7], rtol=1e-13)
    metric = lambda q: jnp.diag(jnp.array([1.0, q[0] ** 2 + 1.0]))  # noqa: E731
    q0 = jnp.array([0.5, 0.0])
    inside = jax.jit(lambda v: gj.christoffel(metric, q0) @ v)(jnp.ones(2))
    np.testing.assert_allclose(inside, gj.christoffel(metric, q0) @ np.ones(2), rtol=1e-14)


@settings(max_examples=15, deadline=None)
@given(
    n=st.sampled_from([1, 3, 6, 9]), seed=st.integers(0, 2**31 - 1), log_cond=st.floats(0.0, 6.0)
)
def test_spd_inverse_matches_lapack(n, seed, log_cond):
    # SPD with condition number 10^log_cond: elimination without pivoting is backward stable for
    # SPD matrices, so the error is ~ cond · eps (bound with a factor 100 for n ≤ 9)
    rng = np.random.default_rng(seed)
    Q, _ = np.linalg.qr(rng.normal(size=(n, n)))
    A = (Q * np.logspace(0, log_cond, n)) @ Q.T
    A = 0.5 * (A + A.T)
    inv = np.asarray(jax.jit(spd_inverse)(A))  # one program per size
    cond = 10.0**log_cond
    np.testing.assert_allclose(inv @ A, np.eye(n), atol=100 * n * cond * np.finfo(float).eps)


def test_identity_compiles_nothing_and_is_a_constant_under_jit():
    out, names = _compiled_names(lambda: gj.SO3.identity(batch_shape=(5,)))
    assert names == [] and out.shape == (5, 3, 3)
    np.testing.assert_array_equal(out, np.broadcast_to(np.eye(3), (5, 3, 3)))
    np.testing.assert_array_equal(jax.jit(lambda x: gj.SE3.identity() * x)(2.0), 2 * np.eye(4))


def test_first_eager_grad_of_simulate_compiles_no_per_operation_checks_or_slices():
    # a step count no other test uses, so the programs are new to this process
    body = gj.RigidBody(inertia=jnp.array([1.0, 2.0, 3.0]))
    w = jnp.array([0.3, -0.2, 1.0])

    def loss(pi0):
        sol = gj.simulate(body, gj.LGVI(), gj.RigidBodyState(R=gj.SO3.identity(), Pi=pi0), 0.01, 17)
        return sol.final_state.Pi @ w

    pi0 = jnp.array([0.5, 1.0, 0.2])
    g, names = _compiled_names(lambda: jax.grad(loss)(pi0))
    per_op = {"isfinite", "_reduce_all", "invert", "branched_error_if_impl", "dynamic_slice"}
    assert not per_op & {n.removeprefix("jit(").removesuffix(")") for n in names}, names
    # the gradient itself, against central differences (error O(eps²) ~ 1e-10)
    eps = 1e-5
    fd = [(loss(pi0 + eps * e) - loss(pi0 - eps * e)) / (2 * eps) for e in np.eye(3)]
    np.testing.assert_allclose(g, fd, rtol=1e-7, atol=1e-9)
    # and a bad initial momentum under the same eager grad names the argument
    with pytest.raises(ValueError, match="state0.Pi"):
        jax.grad(loss)(jnp.array([jnp.inf, 1.0, 0.2]))


def test_final_state_is_the_last_saved_state_eagerly_and_under_jit():
    body = gj.RigidBody(inertia=jnp.array([1.0, 2.0, 3.0]))
    s0 = gj.RigidBodyState(R=gj.SO3.identity(), Pi=jnp.array([0.1, 1.0, 0.3]))
    sol = gj.simulate(body, gj.LGVI(), s0, 0.01, 10, save_every=5)
    last = jax.tree_util.tree_map(lambda x: np.asarray(x)[-1], sol.states)
    for a, b in zip(jax.tree_util.tree_leaves(sol.final_state), jax.tree_util.tree_leaves(last)):
        np.testing.assert_array_equal(a, b)
    jitted = eqx.filter_jit(lambda s: s.final_state)(sol)
    np.testing.assert_array_equal(jitted.Pi, last.Pi)


def test_control_riemann_and_reconstruction_are_imported_on_first_use():
    code = (
        "import sys, geomjax as gj\n"
        "lazy = ('geomjax.control', 'geomjax.riemann', 'geomjax.reconstruction')\n"
        "assert not any(m in sys.modules for m in lazy)\n"
        "assert gj.optimize is gj.control.optimize and 'MPC' in dir(gj)\n"
        "from geomjax import solve_ocp, MPC\n"
        "assert 'geomjax.control' in sys.modules\n"
        "assert gj.christoffel is gj.riemann.christoffel and 'holonomy' in dir(gj)\n"
        "from geomjax import holonomy, RigidSystem\n"
        "assert holonomy is gj.reconstruction.holonomy and all(m in sys.modules for m in lazy)\n"
        "assert all(hasattr(gj, n) for n in gj.__all__)\n"
        "try:\n    gj.not_a_name\nexcept AttributeError as e:\n    assert 'not_a_name' in str(e)\n"
        "else:\n    raise SystemExit('no AttributeError')\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_diagnostics_eagerly_under_jit_and_under_eager_grad_agree_with_the_closed_form():
    # eagerly, diagnostics is one top-level program compiled with XLA:CPU's legacy emitters
    # (geomjax._internal.eager.LEGACY_EMITTERS); inside jit it is inlined (no compiler options allowed
    # there) and under an eager grad compiled normally: the same numbers to round-off, and the
    # free body's energy and momenta in closed form (E = ½ Σ Π_i²/I_i, spatial momentum R Π)
    inertia = np.array([1.0, 2.0, 3.0])
    body = gj.RigidBody(inertia=jnp.asarray(inertia))
    rng = np.random.default_rng(7)
    R = jax.vmap(gj.SO3.exp)(jnp.asarray(rng.normal(size=(6, 3))))
    Pi = rng.normal(size=(6, 3))
    sol = gj.Solution(
        times=jnp.linspace(0.0, 0.5, 6), states=gj.RigidBodyState(R, jnp.asarray(Pi)), stats={}
    )
    eager, names = _compiled_names(lambda: gj.diagnostics(body, sol))
    assert len(names) <= 1  # one program (none if this process compiled it already)
    energy = 0.5 * np.sum(Pi**2 / inertia, -1)
    spatial = np.einsum("tij,tj->ti", np.asarray(R), Pi)
    np.testing.assert_allclose(eager["energy"], energy, rtol=1e-14)
    np.testing.assert_allclose(eager["spatial_momentum"], spatial, rtol=1e-13, atol=1e-15)
    inside = jax.jit(lambda s: gj.diagnostics(body, s))(sol)
    for k in eager:
        np.testing.assert_allclose(inside[k], eager[k], rtol=1e-14, atol=1e-15, err_msg=k)
    # d(Σ E)/dΠ = Π / I, through the diagnostics program under an eager grad
    total = lambda p: jnp.sum(  # noqa: E731
        gj.diagnostics(body, gj.Solution(sol.times, gj.RigidBodyState(R, p), {}))["energy"]
    )
    np.testing.assert_allclose(jax.grad(total)(jnp.asarray(Pi)), Pi / inertia, rtol=1e-14)
