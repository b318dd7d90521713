"""Plain reverse mode through ``simulate`` on the LGVI's generic group path keeping only the
roots of the discrete Legendre transform (``LGVI.reverse_mode_saves``; ``newton_solve`` names the
root where its implicit-function-theorem derivatives read it): the backward pass runs no Newton
iteration, and the gradient on SE(3) with gravity (vmapped, and at batch 1, where the roots are
kept from dimension 6) equals the gradient that keeps every residual to round-off, and central
differences of the loss.  The same for the SO(3) kernel's vector Newton solve
(``legendre_solve="newton"``, vmapped) and a composition of the LGVI, plain or processed (each
stage's root)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import geomjax as gj
from geomjax.integrators.newton import _unroll_iterations

_STEPS = 12
_G0 = np.asarray(gj.SE3.exp(jnp.array([0.1, 0.2, -0.3, 0.5, 0.1, 0.0])))
_W_G = np.arange(16.0).reshape(4, 4) / 16.0
_W_MU = np.array([0.3, -1.0, 0.7, 0.2, -0.5, 0.4])


class _KeepEveryResidual(gj.LGVI):
    """The LGVI with JAX's default reverse mode (every residual of a step stored)."""

    def reverse_mode_saves(self, system, batched=False):
        return None


def _gravity(g):
    return 9.81 * 2.0 * g[2, 3]


def _loss(method, steps=_STEPS, batch=False, dtype=jnp.float64):
    def one(mu0, moments, com):
        system = gj.RigidBodySE3(
            mass=jnp.asarray(2.0, dtype), inertia=jnp.diag(moments), com=com, potential=_gravity
        )
        g0 = jnp.asarray(_G0, dtype)
        sol = gj.simulate(system, method, system.make_state(g0, mu0), 0.05, steps)
        s = sol.final_state
        return jnp.sum(jnp.asarray(_W_G, dtype) * s.g) + jnp.sum(jnp.asarray(_W_MU, dtype) * s.mu)

    if not batch:
        return one
    return lambda m, i, c: jnp.sum(jax.vmap(one, in_axes=(0, None, None))(m, i, c))


def _inputs(batch, dtype=jnp.float64):
    rng = np.random.default_rng(0)
    shape = (batch, 6) if batch else (6,)
    mu0 = jnp.asarray(rng.standard_normal(shape), dtype)
    return mu0, jnp.asarray([1.0, 2.0, 3.0], dtype), jnp.asarray([0.1, 0.0, -0.2], dtype)


def _rel(a, b):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.max(np.abs(a - b)) / max(np.max(np.abs(b)), 1e-300))


def _whiles(jaxpr) -> int:
    """The ``while`` loops of a jaxpr and of every jaxpr nested in its equations."""
    n = 0
    for eqn in jaxpr.eqns:
        n += eqn.primitive.name == "while"
        for sub in jax.tree_util.tree_leaves(list(eqn.params.values()), is_leaf=_is_jaxpr):
            if _is_jaxpr(sub):
                n += _whiles(getattr(sub, "jaxpr", sub))
    return n


def _is_jaxpr(x) -> bool:
    return hasattr(x, "eqns") or hasattr(getattr(x, "jaxpr", None), "eqns")


def test_the_generic_path_keeps_its_roots():
    """The contract: SE(3) keeps its roots with and without a batch, SO(3) with ``exp`` (the
    generic path, dimension 3) only vmapped, the SO(3) Cayley kernel (either Legendre solve)
    only vmapped; a composition as its base method."""
    se3 = gj.RigidBodySE3(mass=2.0, inertia=jnp.eye(3))
    so3 = gj.RigidBody(jnp.array([1.0, 2.0, 3.0]))
    assert gj.LGVI().reverse_mode_saves(se3) == ("lgvi_root",)
    assert gj.LGVI().reverse_mode_saves(se3, batched=True) == ("lgvi_root",)
    assert gj.LGVI(retraction="exp").reverse_mode_saves(so3) is None
    assert gj.LGVI(retraction="exp").reverse_mode_saves(so3, batched=True) == ("lgvi_root",)
    assert gj.Composition(gj.LGVI()).reverse_mode_saves(se3) == ("lgvi_root",)
    assert gj.Composition(gj.LGVI()).reverse_mode_saves(so3) is None
    assert gj.Composition(gj.LGVI()).reverse_mode_saves(so3, batched=True) == ("lgvi_root",)
    for solve in ("scalar", "newton"):
        assert gj.LGVI(legendre_solve=solve).reverse_mode_saves(so3) is None
        assert gj.LGVI(legendre_solve=solve).reverse_mode_saves(so3, batched=True) == ("lgvi_root",)


@pytest.mark.parametrize("batch", [3, pytest.param(0, marks=pytest.mark.long)])
def test_the_backward_pass_runs_no_newton_iteration(batch):
    """Keeping the named root, the gradient's program holds the forward pass's Newton loops and
    no more (the backward pass recomputes the step from the root); keeping every residual, the
    same count: the name does not add a loop either way."""
    args = _inputs(batch)
    if _unroll_iterations():
        pytest.skip("the Newton iterations are unrolled here (no while loop to count)")
    forward = _whiles(jax.make_jaxpr(_loss(gj.LGVI(), batch=bool(batch)))(*args).jaxpr)
    assert forward >= 1
    for method in (gj.LGVI(), _KeepEveryResidual()):
        grad = jax.grad(_loss(method, batch=bool(batch)), argnums=(0, 1, 2))
        assert _whiles(jax.make_jaxpr(grad)(*args).jaxpr) == forward


def _check_gradient(batch, dtype=jnp.float64, steps=_STEPS, fd=True, wrap=lambda m: m, **lgvi):
    """The gradient of ``wrap(LGVI(**lgvi))`` (the LGVI itself, or a method whose stages are
    its steps) against the same keeping every residual, and against central differences."""
    args = _inputs(batch, dtype)
    loss = _loss(wrap(gj.LGVI(**lgvi)), steps, bool(batch), dtype)
    g = jax.jit(jax.grad(loss, argnums=(0, 1, 2)))(*args)
    keep_all = _loss(wrap(_KeepEveryResidual(**lgvi)), steps, bool(batch), dtype)
    g_all = jax.jit(jax.grad(keep_all, argnums=(0, 1, 2)))(*args)
    tol = 1e-12 if dtype == jnp.float64 else 1e-4
    for a, r in zip(g, g_all):
        assert a.dtype == dtype
        assert _rel(a, r) < tol
    if not fd:
        return g
    rng = np.random.default_rng(1)
    v = [rng.standard_normal(np.shape(a)) for a in args]
    f = jax.jit(loss)
    eps = 1e-6
    plus = f(*(a + eps * d for a, d in zip(args, v)))
    minus = f(*(a - eps * d for a, d in zip(args, v)))
    central = (float(plus) - float(minus)) / (2 * eps)
    dot = sum(float(np.vdot(np.asarray(a), d)) for a, d in zip(g, v))
    assert abs(dot - central) <= 1e-6 * max(1.0, abs(central)), (dot, central)
    return g


@pytest.mark.long
def test_vmapped_gradient_keeping_the_roots():
    """Vmapped (batch 3): the initial momenta, the shared inertia and centre of mass."""
    _check_gradient(3)


@pytest.mark.long
def test_unbatched_gradient_keeping_the_roots():
    """Batch 1 (dimension 6: the roots are kept there too)."""
    _check_gradient(0)


@pytest.mark.long
def test_float32_gradient_keeping_the_roots():
    """float32, vmapped: equal to the gradient keeping every residual to float32 round-off and
    to the float64 gradient to float32 accuracy."""
    g32 = _check_gradient(3, jnp.float32, fd=False)
    g64 = jax.jit(jax.grad(_loss(gj.LGVI(), batch=True), argnums=(0, 1, 2)))(*_inputs(3))
    for a, r in zip(g32, g64):
        assert _rel(a, r) < 1e-3


def _so3_loss(method, steps=10):
    top = gj.HeavyTop(1.0, 9.81, [0.1, 0.2, 0.4])
    R0 = gj.SO3.exp(jnp.array([0.3, -0.2, 0.5]))

    def one(pi0, moments):
        system = gj.RigidBody(moments, top)
        s = gj.simulate(system, method, system.make_state(R0, pi0), 0.05, steps).final_state
        return jnp.sum(jnp.arange(9.0).reshape(3, 3) * s.R) + jnp.sum(s.Pi * _W_MU[:3])

    return lambda p, m: jnp.sum(jax.vmap(one, in_axes=(0, None))(p, m))


def test_so3_newton_legendre_solve_vmapped():
    """The SO(3) Cayley kernel with ``legendre_solve="newton"`` keeps its Newton root under
    vmap too: the backward pass holds no Newton loop (the forward's only), and the gradient
    equals the one keeping every residual to round-off."""
    rng = np.random.default_rng(2)
    args = (jnp.asarray(rng.standard_normal((3, 3))), jnp.array([1.0, 2.0, 3.0]))
    method, keep_all = gj.LGVI(legendre_solve="newton"), _KeepEveryResidual(legendre_solve="newton")
    grad = jax.grad(_so3_loss(method), argnums=(0, 1))
    if not _unroll_iterations():
        forward = _whiles(jax.make_jaxpr(_so3_loss(method))(*args).jaxpr)
        assert forward >= 1
        assert _whiles(jax.make_jaxpr(grad)(*args).jaxpr) == forward
    g = jax.jit(grad)(*args)
    g_all = jax.jit(jax.grad(_so3_loss(keep_all), argnums=(0, 1)))(*args)
    for a, r in zip(g, g_all):
        assert _rel(a, r) < 1e-12


@pytest.mark.long
def test_composition_keeps_the_stages_roots():
    """A composition of the LGVI (``"suzuki4"``, three stages), vmapped on SE(3): the backward
    pass holds no Newton loop, and the gradient equals the one keeping every residual to
    round-off (the composition's gradient against central differences: test_adjoint)."""
    args = _inputs(3)
    method = gj.Composition(gj.LGVI())
    keep_all = gj.Composition(_KeepEveryResidual())
    grad = jax.grad(_loss(method, steps=4, batch=True), argnums=(0, 1, 2))
    if not _unroll_iterations():
        forward = _whiles(jax.make_jaxpr(_loss(method, steps=4, batch=True))(*args).jaxpr)
        assert forward >= 1
        assert _whiles(jax.make_jaxpr(grad)(*args).jaxpr) == forward
    g = jax.jit(grad)(*args)
    g_all = jax.jit(jax.grad(_loss(keep_all, steps=4, batch=True), argnums=(0, 1, 2)))(*args)
    for a, r in zip(g, g_all):
        assert _rel(a, r) < 1e-12


@pytest.mark.parametrize("scheme", ["blanes6", "bcm8"])
def test_processed_composition_keeps_what_its_base_keeps(scheme):
    """``ProcessedComposition`` answers ``reverse_mode_saves`` as its base method and as
    ``Composition`` of it, batched and unbatched: SE(3) keeps the roots either way, SO(3)
    (the Cayley kernel) only vmapped; with a base that keeps every residual, None."""
    se3 = gj.RigidBodySE3(mass=2.0, inertia=jnp.eye(3), potential=_gravity)
    so3 = gj.RigidBody(jnp.array([1.0, 2.0, 3.0]))
    for base in (gj.LGVI(), gj.LGVI(retraction="exp"), _KeepEveryResidual()):
        processed = gj.ProcessedComposition(base, scheme)
        for system in (se3, so3):
            for batched in (False, True):
                want = base.reverse_mode_saves(system, batched=batched)
                assert processed.reverse_mode_saves(system, batched=batched) == want
                assert gj.Composition(base).reverse_mode_saves(system, batched=batched) == want
    assert gj.ProcessedComposition(gj.LGVI(), scheme).reverse_mode_saves(se3) == ("lgvi_root",)
    assert gj.ProcessedComposition(gj.LGVI(), scheme).reverse_mode_saves(so3) is None
    assert gj.ProcessedComposition(_KeepEveryResidual(), scheme).reverse_mode_saves(se3) is None


def _processed(method):
    return gj.ProcessedComposition(method, "blanes6")


@pytest.mark.long
def test_processed_composition_gradient_keeping_the_roots():
    """Plain reverse mode through ``simulate`` with the processed LGVI on SE(3) with gravity,
    batch 1 (the stages of the kernel and of the processor keep their roots): equal to the
    gradient keeping every residual to round-off, and to central differences; the pullback
    stores less than half of what it stores keeping every residual.  The LGVI's step
    unscalarized: the processed step holds the base step four times (the kernel, the processor
    and its inverse in the step, the processor at the output), and its gradient, scalarized,
    compiled for over 4 min under the suite's small-loop setting (26 s unscalarized; 2-core
    CPU, shared); the saved names are the same either way."""
    _check_gradient(0, steps=3, wrap=_processed, scalarize=False)
    # what reverse mode stores (traced, not run): the roots, not every residual of the stages
    kept = _stored(_processed(gj.LGVI(scalarize=False)), steps=3)
    every = _stored(_processed(_KeepEveryResidual(scalarize=False)), steps=3)
    assert kept < every / 2, (kept, every)


def _stored(method, steps, batch=0):
    """The numbers held by the pullback of ``_loss`` (``jax.vjp``'s residuals), from shapes."""
    loss = _loss(method, steps, bool(batch))
    leaves = jax.eval_shape(
        lambda *a: jax.tree_util.tree_leaves(jax.vjp(loss, *a)[1]), *_inputs(batch)
    )
    return sum(int(np.prod(x.shape)) for x in leaves)
