"""ReversibleAdjoint: gradients by backward reconstruction equal plain reverse mode to round-off
and central finite differences (initial state, inertia, potential parameters, dt, the control
sequence), for the LGVI, the splitting, a composition and NonholonomicVI; re-anchoring at saved
states; the reconstruction error; unsupported cases raise."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import geomjax as gj
from geomjax.integrators import reconstruction_error
from geomjax.systems import ChaplyginSleigh, HeavyTop

from .helpers import central_difference

R0 = gj.SO3.exp(jnp.array([0.3, -0.2, 0.5]))
PI0 = jnp.array([0.8, -0.3, 1.1])
RB = gj.RigidBody(jnp.array([1.0, 2.0, 3.0]))
STEPS = 60
REV = gj.ReversibleAdjoint()


def _params():
    return {
        "Pi0": PI0,
        "moments": jnp.array([1.0, 1.7, 2.4]),
        "mass": jnp.array(1.3),
        "rho": jnp.array([0.1, -0.2, 0.5]),
        "u": 0.2 * jnp.sin(jnp.arange(3.0 * STEPS)).reshape(STEPS, 3),
        "dt": jnp.array(0.03),
    }


def _loss(p, adjoint, save_every=STEPS, method=None):
    system = gj.RigidBody(p["moments"], HeavyTop(p["mass"], 9.81, p["rho"]))
    sol = gj.simulate(
        system,
        gj.LGVI() if method is None else method,
        gj.RigidBodyState(R0, p["Pi0"]),
        p["dt"],
        STEPS,
        controls=p["u"],
        save_every=save_every,
        adjoint=adjoint,
    )
    R, Pi = sol.final_state.R, sol.final_state.Pi
    # the saved states and times enter too (cotangents injected at the anchors)
    return (
        jnp.sum(Pi * jnp.array([0.3, -1.0, 0.7]))
        + jnp.sum(R * jnp.arange(9.0).reshape(3, 3))
        + 0.1 * jnp.sum(sol.states.Pi**2)
        + 0.01 * jnp.sum(sol.times)
    )


def _rel(a, b):
    return float(jnp.max(jnp.abs(a - b)) / jnp.max(jnp.abs(b)))


def _assert_matches_central_differences(f, x, grad, seed=0, eps=1e-6, rtol=1e-6):
    """``<grad, v>`` against the central difference of ``f`` (forward pass only) along a random
    direction ``v`` of the pytree ``x``.  For the O(1)-smooth losses here the difference is
    accurate to ~eps² (truncation, 1e-12) + 1e-16·|f|/eps (round-off, ~1e-9 relative): rtol
    1e-6 is far above both and far below the size of any gradient error it should catch."""
    v, fd = central_difference(f, x, seed, eps)
    dot = float(sum(jnp.vdot(g, d) for g, d in zip(jax.tree.leaves(grad), jax.tree.leaves(v))))
    assert abs(dot - fd) <= rtol * max(1.0, abs(fd)), (dot, fd)


@pytest.mark.long
def test_lgvi_heavy_top_gradients_equal_plain_reverse_mode():
    """Every parameter (initial momentum, inertia, potential parameters, dt, the control
    sequence), with states saved every 10 steps (the reconstruction is re-anchored at each saved
    state, whose cotangents enter there).  Agreement with plain reverse mode: the same VJPs at
    states that differ by the reconstruction error (~1e-15 here), so round-off (observed
    <= 3e-14; asserted 1e-10).  Plain reverse mode itself is checked against central differences
    in test_rigid_body.py; the reversible gradient against them in the sleigh test below."""
    p = _params()
    v_plain, plain = jax.jit(jax.value_and_grad(lambda p: _loss(p, None, save_every=10)))(p)
    v_rev, rev = jax.jit(jax.value_and_grad(lambda p: _loss(p, REV, save_every=10)))(p)
    # the forward pass is simulate's own scan (two compilations: XLA may reassociate)
    np.testing.assert_allclose(v_rev, v_plain, rtol=1e-13)
    for name in p:
        assert _rel(rev[name], plain[name]) < 1e-10, name


@pytest.mark.long
def test_composition_without_anchors():
    """A composition (stages with negative steps) and no saved state but the last: the
    reconstruction runs over all 40 steps."""
    method = gj.Composition(gj.LGVI(), "yoshida4", loop="scan")

    def loss(pi0, moments, adjoint):
        sol = gj.simulate(
            gj.RigidBody(moments), method, gj.RigidBodyState(R0, pi0), 0.05, 40, adjoint=adjoint
        )
        return jnp.sum(sol.final_state.Pi**3) + jnp.sum(sol.final_state.R[0])

    m = jnp.array([1.0, 2.0, 3.0])
    a = jax.jit(jax.grad(loss, argnums=(0, 1)), static_argnums=2)(PI0, m, None)
    b = jax.jit(jax.grad(loss, argnums=(0, 1)), static_argnums=2)(PI0, m, REV)
    for x, y in zip(a, b):
        assert _rel(y, x) < 1e-10


@pytest.mark.long
def test_nonholonomic_sleigh_gradient():
    """NonholonomicVI (two implicit solves per step, the constraint at every node): the
    reversible gradient with respect to the initial velocities and the mass against central
    differences (the agreement with plain reverse mode is the same mechanism as for the LGVI;
    a short horizon: on long ones the sleigh's relaxation makes the reconstruction unstable,
    see the module docstring of geomjax.integrators.adjoint)."""

    def loss(om, v, mass):
        sleigh = ChaplyginSleigh(mass, 0.5, 0.7)
        s0 = sleigh.state(0.1, -0.2, 0.3, omega=om, v=v)
        sol = gj.simulate(sleigh, gj.NonholonomicVI(), s0, 0.05, 20, adjoint=REV)
        s = sol.final_state
        return s.g[0, 2] + 2.0 * s.g[1, 2] + jnp.sum(s.v**2)

    x = (jnp.array(1.5), jnp.array(-0.4), jnp.array(2.0))
    grads = jax.jit(jax.grad(loss, argnums=(0, 1, 2)))(*x)
    f = jax.jit(loss)
    eps = 1e-6
    for k in range(3):
        up = [xi + eps * (i == k) for i, xi in enumerate(x)]
        dn = [xi - eps * (i == k) for i, xi in enumerate(x)]
        fd = (f(*up) - f(*dn)) / (2 * eps)
        assert abs(float(grads[k] - fd)) <= 1e-6 * max(1.0, abs(float(fd))), (k, grads[k], fd)


@pytest.mark.long
def test_reconstruction_error():
    """Free body, 5000 steps: the initial state rebuilt from the final one to ~1e-13 (round-off
    of converged solves, observed 4e-13 after 1e4 steps).  An unconverged solve (one Newton
    iteration at a large step) is not symmetric: the error is large, and ReversibleAdjoint(tol)
    raises instead of returning a wrong gradient."""
    s0 = RB.make_state(R0, PI0)
    err, rec = reconstruction_error(RB, gj.LGVI(), s0, 0.01, 5000)
    assert float(err) < 1e-11
    assert float(jnp.max(jnp.abs(rec.R.T @ rec.R - jnp.eye(3)))) < 1e-13  # on the group
    bad = gj.LGVI(newton_iters=1)

    def loss(pi0):
        sol = gj.simulate(
            RB, bad, gj.RigidBodyState(R0, pi0), 0.2, 50, adjoint=gj.ReversibleAdjoint(tol=1e-8)
        )
        return jnp.sum(sol.final_state.Pi)

    with pytest.raises(Exception, match="reconstructed trajectory"):
        jax.block_until_ready(jax.grad(loss)(8.0 * PI0))


def test_unsupported_cases_raise():
    s0 = RB.make_state(R0, PI0)
    with pytest.raises(ValueError, match="symmetric"):
        gj.simulate(RB, gj.RKMK4(), s0, 0.1, 3, adjoint=REV)
    with pytest.raises(ValueError, match="feedback"):
        gj.simulate(RB, gj.LGVI(), s0, 0.1, 3, controls=lambda t, s: -s.Pi, adjoint=REV)
    with pytest.raises(ValueError, match="'adjoint'"):
        gj.simulate(RB, gj.LGVI(), s0, 0.1, 3, adjoint=REV, checkpoint=True)
    with pytest.raises(ValueError, match="'adjoint'"):
        gj.simulate(RB, gj.LGVI(), s0, 0.1, 3, adjoint="reversible")
    forced = gj.RigidBody(jnp.array([1.0, 2.0, 3.0]), force=lambda t, R, Pi: -0.1 * Pi)
    with pytest.raises(ValueError, match="force"):
        gj.simulate(forced, gj.LGVI(), s0, 0.1, 3, adjoint=REV)


def _batched_loss(adjoint, dtype, steps=40):
    """Sum over a batch of bodies (vmap over the initial momenta) of a terminal loss; the
    inertia, the heavy-top parameters, dt and the control sequence are shared (unbatched)."""
    R0d = R0.astype(dtype)

    def loss(pis, p):
        system = gj.RigidBody(p["moments"], HeavyTop(p["mass"], 9.81, p["rho"]))

        def one(pi0):
            sol = gj.simulate(
                system,
                gj.LGVI(),
                gj.RigidBodyState(R0d, pi0),
                p["dt"],
                steps,
                controls=p["u"],
                save_every=steps // 2,
                adjoint=adjoint,
            )
            s = sol.final_state
            return jnp.sum(s.Pi * jnp.array([0.3, -1.0, 0.7], dtype)) + jnp.sum(
                s.R * jnp.arange(9.0, dtype=dtype).reshape(3, 3)
            )

        return jnp.sum(jax.vmap(one)(pis))

    return loss


@pytest.mark.long
@pytest.mark.parametrize("dtype", [jnp.float64, jnp.float32])
def test_batched_parameter_gradients_equal_plain_reverse_mode(dtype):
    """Under vmap, gradients with respect to unbatched parameters (inertia, potential
    parameters, dt, controls) and the batched initial momenta: the backward pass hoists the
    parameter-only part of the step out of its loop and feeds the state as scalar entries
    (geomjax.integrators.adjoint._Invariant, geomjax._internal.scalar_entries); the result equals plain reverse mode to
    round-off.  float64: the same VJPs at states that differ by the reconstruction error
    (~1e-15), observed <= 7e-16 relative, asserted 1e-10 (as above).  float32: the same
    mechanism at eps = 1.2e-7 (observed <= 3e-7 relative), asserted 1e-4: round-off of 40
    steps, ~sqrt(40)·eps per step amplified by the backward dynamics, stays far below."""
    n = 8
    p = {k: v.astype(dtype) for k, v in _params().items() if k != "Pi0"}
    steps = 40
    p["u"] = p["u"][:steps]
    pis = (PI0 * (1.0 + 0.1 * jnp.sin(jnp.arange(3.0 * n)).reshape(n, 3))).astype(dtype)
    g_plain = jax.jit(jax.grad(_batched_loss(None, dtype), argnums=(0, 1)))(pis, p)
    g_rev = jax.jit(jax.grad(_batched_loss(REV, dtype), argnums=(0, 1)))(pis, p)
    tol = 1e-10 if dtype == jnp.float64 else 1e-4
    assert _rel(g_rev[0], g_plain[0]) < tol
    for name in p:
        assert g_rev[1][name].dtype == dtype
        assert _rel(g_rev[1][name], g_plain[1][name]) < tol, name
    if dtype == jnp.float32:
        # and the float32 gradient against the float64 gradient of the same computation (which
        # plain reverse mode in float32 cannot see): the 40 forward and 40 backward steps add
        # at most ~eps32 relative each on this short, non-chaotic horizon (inputs rounded to
        # float32 included), 80 eps32 = 9.5e-6; measured 2.0e-6 (initial momenta), <= 3.5e-7
        # (parameters)
        p64 = {k: v.astype(jnp.float64) for k, v in p.items()}
        g64 = jax.jit(jax.grad(_batched_loss(REV, jnp.float64), argnums=(0, 1)))(
            pis.astype(jnp.float64), p64
        )
        tol32 = 2 * steps * float(jnp.finfo(jnp.float32).eps)
        assert _rel(g_rev[0].astype(jnp.float64), g64[0]) < tol32
        for name in p:
            assert _rel(g_rev[1][name].astype(jnp.float64), g64[1][name]) < tol32, name


@pytest.mark.long
def test_hoisted_backward_step_equals_the_direct_one(monkeypatch):
    """The split of the step (_split_invariant) applies to the LGVI (so the tests above
    exercise it) and gives the gradients of the unsplit backward step (the per-step VJP with
    respect to the parameters themselves) to round-off: only the order of the summations
    differs (observed <= 1.5e-15 relative, asserted 1e-12)."""
    from geomjax.integrators import adjoint as adj

    p = _params()
    system = gj.RigidBody(p["moments"], HeavyTop(p["mass"], 9.81, p["rho"]))
    params, static = eqx.partition((system, gj.LGVI()), eqx.is_inexact_array)
    x = gj.LGVI().init(system, gj.RigidBodyState(R0, PI0))
    inv = adj._split_invariant(static, params, p["dt"], x, p["u"][0], jnp.zeros(()), True)
    assert inv is not None and len(inv.diff) > 0
    loss = jax.jit(jax.grad(lambda p: _loss(p, REV, save_every=10)))
    split = loss(p)
    monkeypatch.setattr(adj, "_split_invariant", lambda *a, **k: None)
    direct = jax.jit(jax.grad(lambda p: _loss(p, REV, save_every=10)))(p)
    for name in p:
        assert _rel(split[name], direct[name]) < 1e-12, name


@pytest.mark.long
def test_packed_backward_carry_equals_plain_reverse_mode(monkeypatch):
    """The LGVI's backward step carries its state and cotangents as one fused vector
    (adjoint._packed_carry, float64): free body under vmap, gradient with respect to the batched
    initial momenta and the shared inertia (30 carried entries).  The packed path is taken, and
    gives plain reverse mode's gradient and the unpacked backward step's to round-off (a select
    copies its entries: the same arithmetic; observed <= 1e-15 relative, asserted 1e-12)."""
    from geomjax.integrators import adjoint as adj

    pis = PI0 * (1.0 + 0.1 * jnp.sin(jnp.arange(12.0)).reshape(4, 3))
    moments = jnp.array([1.0, 1.7, 2.4])

    def total(pis, m, adjoint):
        def one(pi0):
            s = gj.simulate(
                gj.RigidBody(m), gj.LGVI(), gj.RigidBodyState(R0, pi0), 0.05, 30, adjoint=adjoint
            ).final_state
            return jnp.sum(s.Pi * jnp.array([0.3, -1.0, 0.7])) + jnp.sum(s.R[0] * s.R[2])

        return jnp.sum(jax.vmap(one)(pis))

    calls = []
    real = adj._packed_carry
    monkeypatch.setattr(adj, "_packed_carry", lambda c: calls.append(real(c)) or calls[-1])
    grad = jax.grad(lambda p, m: total(p, m, REV), argnums=(0, 1))
    packed = jax.jit(grad)(pis, moments)
    assert calls and all(c is not None for c in calls)
    plain = jax.jit(jax.grad(lambda p, m: total(p, m, None), argnums=(0, 1)))(pis, moments)
    monkeypatch.setattr(adj, "_packed_carry", lambda c: None)
    unpacked = jax.jit(jax.grad(lambda p, m: total(p, m, REV), argnums=(0, 1)))(pis, moments)
    for a, b, c in zip(packed, plain, unpacked):
        assert _rel(a, b) < 1e-10
        assert _rel(a, c) < 1e-12


@pytest.mark.long
@pytest.mark.parametrize("potential", [False, True])
def test_splitting_gradients_equal_plain_reverse_mode(potential):
    """RigidBodySplitting (explicit, symmetric): the reversible gradient with respect to the
    batched initial momenta and the shared inertia (and the heavy-top parameters) equals plain
    reverse mode to round-off (observed <= 1e-14 relative, asserted 1e-10)."""
    pis = PI0 * (1.0 + 0.1 * jnp.sin(jnp.arange(9.0)).reshape(3, 3))

    def total(pis, p, adjoint):
        top = HeavyTop(p["mass"], 9.81, p["rho"]) if potential else None
        system = gj.RigidBody(p["moments"], top)

        def one(pi0):
            s = gj.simulate(
                system,
                gj.RigidBodySplitting(),
                gj.RigidBodyState(R0, pi0),
                0.02,
                50,
                save_every=25,
                adjoint=adjoint,
            ).final_state
            return jnp.sum(s.Pi * jnp.array([0.3, -1.0, 0.7])) + jnp.sum(s.R[0] * s.R[2])

        return jnp.sum(jax.vmap(one)(pis))

    p = {
        "moments": jnp.array([1.0, 1.7, 2.4]),
        "mass": jnp.array(1.3),
        "rho": jnp.array([0.1, -0.2, 0.5]),
    }
    rev = jax.jit(jax.grad(lambda a, p: total(a, p, REV), argnums=(0, 1)))(pis, p)
    plain = jax.jit(jax.grad(lambda a, p: total(a, p, None), argnums=(0, 1)))(pis, p)
    assert _rel(rev[0], plain[0]) < 1e-10
    for name in ("moments", "mass", "rho") if potential else ("moments",):
        assert _rel(rev[1][name], plain[1][name]) < 1e-10, name
    # and against finite differences of the forward pass (independent of both backward passes)
    keys = ("moments", "mass", "rho") if potential else ("moments",)
    x = (pis, {k: p[k] for k in keys})
    _assert_matches_central_differences(
        lambda x: total(x[0], {**p, **x[1]}, None), x, (rev[0], {k: rev[1][k] for k in keys})
    )


@pytest.mark.long
@pytest.mark.parametrize(
    "method",
    [
        gj.Composition(gj.LGVI(), "yoshida4", loop="scan"),
        gj.Composition(gj.RigidBodySplitting(), "suzuki4"),
    ],
    ids=["yoshida4", "splitting"],
)
def test_composition_backward_runs_stage_by_stage(method, monkeypatch):
    """A composition's backward step runs its stages in reverse with the base method
    (adjoint._composition_stages): every parameter (initial
    momentum, inertia, potential parameters, dt, the control sequence, held over the stages),
    states saved every 10 steps, equals plain reverse mode to round-off (observed <= 3e-13
    relative, asserted 1e-10).  The stage path is taken (spied)."""
    from geomjax.integrators import adjoint as adj

    seen = []
    real = adj._composition_stages
    monkeypatch.setattr(adj, "_composition_stages", lambda m: seen.append(real(m)) or seen[-1])
    p = _params()
    plain = jax.jit(jax.grad(lambda p: _loss(p, None, 10, method)))(p)
    rev = jax.jit(jax.grad(lambda p: _loss(p, REV, 10, method)))(p)
    assert seen and seen[-1] is not None and len(seen[-1][1]) == method.stages
    for name in p:
        assert _rel(rev[name], plain[name]) < 1e-10, name
    # and against finite differences of the forward pass, along a direction in every parameter
    _assert_matches_central_differences(lambda p: _loss(p, None, 10, method), p, rev)


@pytest.mark.long
def test_nested_composition_is_flattened():
    """Composition(Composition(LGVI, "yoshida4"), "yoshida4"): 9 stages, the products of the two
    schemes' coefficients (summing to one); the free body's reversible gradient with respect to
    the initial momentum, the inertia and dt equals plain reverse mode (observed <= 1e-14
    relative, asserted 1e-10)."""
    from geomjax.integrators import adjoint as adj

    inner = gj.Composition(gj.LGVI(), "yoshida4")
    method = gj.Composition(inner, "yoshida4")
    base, gammas = adj._composition_stages(method)
    assert isinstance(base, gj.LGVI)
    np.testing.assert_allclose(gammas, np.outer(inner.coefficients, inner.coefficients).ravel())
    assert abs(sum(gammas) - 1.0) < 1e-14

    def loss(pi0, moments, dt, adjoint):
        sol = gj.simulate(
            gj.RigidBody(moments), method, gj.RigidBodyState(R0, pi0), dt, 30, adjoint=adjoint
        )
        return jnp.sum(sol.final_state.Pi**3) + jnp.sum(sol.final_state.R[0])

    args = (PI0, jnp.array([1.0, 2.0, 3.0]), jnp.array(0.05))
    a = jax.jit(jax.grad(lambda *x: loss(*x, None), argnums=(0, 1, 2)))(*args)
    b = jax.jit(jax.grad(lambda *x: loss(*x, REV), argnums=(0, 1, 2)))(*args)
    for x, y in zip(a, b):
        assert _rel(y, x) < 1e-10


@pytest.mark.long
def test_composition_of_nonholonomic_vi():
    """The stage-wise backward step with NonholonomicVI (two implicit solves per stage, their
    solutions handed over from the reverse stage): the Chaplygin sleigh, a composition; the
    reversible gradient with respect to the initial velocities and the mass equals plain
    reverse mode (observed <= 2e-13 relative, asserted 1e-8)."""

    def loss(om, v, mass, adjoint):
        sleigh = ChaplyginSleigh(mass, 0.5, 0.7)
        s0 = sleigh.state(0.1, -0.2, 0.3, omega=om, v=v)
        method = gj.Composition(gj.NonholonomicVI(), "yoshida4")
        s = gj.simulate(sleigh, method, s0, 0.05, 20, adjoint=adjoint).final_state
        return s.g[0, 2] + 2.0 * s.g[1, 2] + jnp.sum(s.v**2)

    args = (jnp.array(1.5), jnp.array(-0.4), jnp.array(2.0))
    a = jax.jit(jax.grad(lambda *x: loss(*x, None), argnums=(0, 1, 2)))(*args)
    b = jax.jit(jax.grad(lambda *x: loss(*x, REV), argnums=(0, 1, 2)))(*args)
    for x, y in zip(a, b):
        assert _rel(y, x) < 1e-8


def _damping(c, t, q, v, u):
    return -c * v


@pytest.mark.long
@pytest.mark.parametrize("case", ["del", "del-force", "composition"])
def test_discrete_euler_lagrange_gradients_equal_plain_reverse_mode(case):
    """DiscreteEulerLagrange (coordinates; symmetric also with a velocity-dependent force,
    placed symmetrically) and its composition: a double pendulum, gradient with respect to the
    initial angles and the damping, states saved every 10 steps; equal to plain reverse mode
    (observed <= 2e-15 relative, asserted 1e-10).  (Before, any LagrangianSystem was refused
    as having a 'force': its force method answered for the controls.)"""

    def loss(q0, c, adjoint):
        def L(q, v):
            a, b = q
            K = v[0] ** 2 + 0.5 * v[1] ** 2 + v[0] * v[1] * jnp.cos(a - b)
            return K + 2 * 9.81 * jnp.cos(a) + 9.81 * jnp.cos(b)

        # a parameter of a force must be a leaf of the system (equinox.Partial), not a value
        # closed over: ReversibleAdjoint differentiates the system's arrays
        force = eqx.Partial(_damping, c) if case == "del-force" else None
        system = gj.LagrangianSystem(L, dim=2, force=force)
        method = gj.DiscreteEulerLagrange()
        if case == "composition":
            method = gj.Composition(method, "yoshida4")
        st = system.make_state(q0, jnp.array([0.1, -0.2]))
        sol = gj.simulate(system, method, st, 0.02, 40, adjoint=adjoint, save_every=10)
        return jnp.sum(jnp.sin(sol.final_state.q)) + jnp.sum(sol.states.q**2)

    args = (jnp.array([0.5, -0.3]), jnp.array(0.05))
    a = jax.jit(jax.grad(lambda q, c: loss(q, c, None), argnums=(0, 1)))(*args)
    b = jax.jit(jax.grad(lambda q, c: loss(q, c, REV), argnums=(0, 1)))(*args)
    assert _rel(b[0], a[0]) < 1e-10
    if case == "del-force":
        assert _rel(b[1], a[1]) < 1e-10
    # the reversible gradient against finite differences of the forward pass (the damping's
    # derivative only where the force is on: elsewhere c is not an input)
    if case == "del-force":
        _assert_matches_central_differences(lambda x: loss(*x, None), args, b)
    else:
        _assert_matches_central_differences(lambda q: loss(q, args[1], None), args[0], b[0])


def _free_body_loss(adjoint, inertia_key, steps, batched, method=None):
    """A terminal loss of free rigid bodies (LGVI, SO(3) Cayley path: the step's hand-written
    VJP under ReversibleAdjoint), as a function of the initial momenta (a batch under vmap, or
    one body), the inertia (principal moments, or a full tensor: its symmetric part, so that
    any direction of finite differences stays symmetric), dt and a shared control sequence."""

    def one(pi0, p):
        inertia = p[inertia_key]
        if inertia_key == "tensor":
            inertia = 0.5 * (inertia + inertia.T)
        sol = gj.simulate(
            gj.RigidBody(inertia, generalized=True),
            gj.LGVI() if method is None else method,
            gj.RigidBodyState(R0.astype(pi0.dtype), pi0),
            p["dt"],
            steps,
            controls=p.get("u"),
            save_every=steps // 2,
            adjoint=adjoint,
        )
        s = sol.final_state
        return jnp.sum(s.Pi * jnp.array([0.3, -1.0, 0.7], s.Pi.dtype)) + jnp.sum(
            s.R * jnp.arange(9.0, dtype=s.R.dtype).reshape(3, 3)
        )

    if not batched:
        return one
    return lambda pis, p: jnp.sum(jax.vmap(one, in_axes=(0, None))(pis, p))


FREE_CASES = {
    # one body, principal moments, controls
    "principal-controls": ("moments", False, True),
    # a vmapped batch, a full inertia tensor (9 entries), no controls: the packed carry
    "tensor-batched": ("tensor", True, False),
}
FREE_STEPS = 30


def _free_case(case):
    # (NumPy inputs: no eager JAX kernels to compile)
    inertia_key, batched, controls = FREE_CASES[case]
    p = {"dt": np.array(0.04)}
    if inertia_key == "moments":
        p["moments"] = np.array([1.0, 1.7, 2.4])
    else:
        p["tensor"] = np.array([[1.2, 0.1, -0.05], [0.1, 1.7, 0.2], [-0.05, 0.2, 2.3]])
    if controls:
        p["u"] = 0.2 * np.sin(np.arange(3.0 * FREE_STEPS)).reshape(FREE_STEPS, 3)
    pi0 = np.array([0.8, -0.3, 1.1])
    if batched:
        pi0 = pi0 * (1.0 + 0.1 * np.sin(np.arange(9.0)).reshape(3, 3))
    return inertia_key, batched, pi0, p


def _free_grad(case, adjoint, monkeypatch=None, value=False):
    """The gradient with respect to (initial momenta, parameters) (``value``: the compiled
    ``value_and_grad`` function instead); with ``monkeypatch``, check that the hand-written VJP
    (_so3_soa.lgvi_step_vjp) was traced."""
    from geomjax.integrators import _so3_soa as soa

    inertia_key, batched, pi0, p = _free_case(case)
    calls = []
    if monkeypatch is not None:
        real = soa.lgvi_step_vjp
        monkeypatch.setattr(soa, "lgvi_step_vjp", lambda *a, **k: calls.append(1) or real(*a, **k))
    loss = _free_body_loss(adjoint, inertia_key, FREE_STEPS, batched)
    vg = jax.jit(jax.value_and_grad(loss, (0, 1)))
    g = vg(pi0, p)[1]
    if monkeypatch is not None:
        assert calls, "the hand-written VJP was not taken"
    return (vg, g) if value else g


def test_free_body_hand_written_vjp_matches_central_differences(monkeypatch):
    """Free rigid body with controls: ReversibleAdjoint's backward step takes the LGVI's
    hand-written VJP (LGVI.backward_step, _so3_soa.lgvi_step_vjp), and its gradient with respect to
    the initial momentum, the principal moments, dt and the controls matches central
    differences of the loss (the forward run: the same compiled function) along a random
    direction; tolerance as in _assert_matches_central_differences.  Against plain reverse
    mode: the long tests below."""
    case = "principal-controls"
    vg, g = _free_grad(case, REV, monkeypatch, value=True)
    _, _, pi0, p = _free_case(case)
    # (in NumPy: eager JAX operations would each compile a kernel)
    x = jax.tree.map(np.asarray, (pi0, p))
    rng = np.random.default_rng(0)
    v = jax.tree.map(lambda a: rng.standard_normal(np.shape(a)), x)
    eps = 1e-6
    shift = lambda t: jax.tree.map(lambda a, d: a + t * d, x, v)  # noqa: E731
    f = [float(vg(*shift(t))[0]) for t in (eps, -eps)]
    fd = (f[0] - f[1]) / (2 * eps)
    dot = sum(float(np.vdot(a, d)) for a, d in zip(jax.tree.leaves(g), jax.tree.leaves(v)))
    assert abs(dot - fd) <= 1e-6 * max(1.0, abs(fd)), (dot, fd)


@pytest.mark.long
@pytest.mark.parametrize("case", list(FREE_CASES))
def test_free_body_hand_written_vjp_equals_plain_reverse_mode(case, monkeypatch):
    """The hand-written VJP's gradient (initial momenta, inertia, dt, controls) equals jax.grad
    of the plain scan (adjoint=None) to round-off: the same VJPs at states that differ by the
    reconstruction error; observed <= 1.4e-15 relative, asserted 1e-10 (as above); and central
    differences for the batched full-tensor case."""
    g_rev = _free_grad(case, REV, monkeypatch)
    g_plain = _free_grad(case, None)
    assert _rel(g_rev[0], g_plain[0]) < 1e-10
    for name in g_plain[1]:
        assert _rel(g_rev[1][name], g_plain[1][name]) < 1e-10, name
    inertia_key, batched, pi0, p = _free_case(case)
    loss = _free_body_loss(None, inertia_key, FREE_STEPS, batched)
    _assert_matches_central_differences(lambda a: loss(*a), (pi0, p), g_rev)


@pytest.mark.long
@pytest.mark.parametrize("case", list(FREE_CASES))
def test_free_body_hand_written_vjp_equals_the_autodiff_vjp(case, monkeypatch):
    """The hand-written VJP against JAX's VJP of the same backward step (LGVI.backward_step
    disabled: the split step, _Invariant), the same reconstruction: round-off of the two
    summation orders and of the two residual forms of the implicit solve (observed <= 1.4e-15
    relative, asserted 1e-12)."""
    hand = _free_grad(case, REV, monkeypatch)
    monkeypatch.setattr(gj.LGVI, "backward_step", lambda self, system, dtype: None)
    auto = _free_grad(case, REV)
    assert _rel(hand[0], auto[0]) < 1e-12
    for name in auto[1]:
        assert _rel(hand[1][name], auto[1][name]) < 1e-12, name


def test_gradient_hooks_are_an_opt_in_protocol():
    """The speed hooks of the gradients live in ``GradientHooks``, not in ``AbstractMethod``'s
    core: the methods that use them inherit it, any other method gets the protocol's defaults
    ("nothing known", the generic path; the gradients of such methods are checked against
    plain reverse mode by the tests above)."""
    from geomjax.integrators import GradientHooks
    from geomjax.integrators.base import AbstractMethod, gradient_hooks

    for name in ("forward_solutions", "backward_step", "reverse_mode_saves", "packs_reverse_carry"):
        assert not hasattr(AbstractMethod, name), name
    for m in (gj.LGVI(), gj.RigidBodySplitting(), gj.NonholonomicVI()):
        assert isinstance(m, GradientHooks) and gradient_hooks(m) is m
    plain = gj.RKMK4()
    assert not isinstance(plain, GradientHooks)
    hooks = gradient_hooks(plain)
    assert hooks.backward_step(RB, jnp.float64) is None
    assert hooks.reverse_mode_saves(RB) is None and hooks.packs_reverse_carry is False
    assert hooks.forward_solutions(RB, [], None) is None


def test_hand_written_vjp_only_where_exact():
    """The hand-written VJP is offered (statically) for the free body on the SO(3) Cayley path
    only: not with a potential, a force, the compensated float32 carry, the Björck step,
    on_failure="raise", the vector Newton solve, the exp retraction or another group (those
    keep the reverse step and JAX's VJP)."""
    f64, f32 = jnp.float64, jnp.float32
    assert gj.LGVI().backward_step(RB, f64) is not None
    assert gj.LGVI(compensate=False, reorthonormalize=False).backward_step(RB, f32) is not None
    top = gj.RigidBody(jnp.array([1.0, 2.0, 3.0]), HeavyTop(1.3, 9.81, [0.1, -0.2, 0.5]))
    forced = gj.RigidBody(jnp.array([1.0, 2.0, 3.0]), force=lambda t, R, Pi: -0.1 * Pi)
    assert gj.LGVI().backward_step(top, f64) is None
    assert gj.LGVI().backward_step(forced, f64) is None
    assert gj.LGVI().backward_step(RB, f32) is None  # compensated and reorthonormalized by default
    assert gj.LGVI(compensate=False).backward_step(RB, f32) is None  # Björck step
    assert gj.LGVI(reorthonormalize=True).backward_step(RB, f64) is None
    assert gj.LGVI(compensate=True).backward_step(RB, f64) is None
    assert gj.LGVI(on_failure="raise").backward_step(RB, f64) is None
    assert gj.LGVI(legendre_solve="newton").backward_step(RB, f64) is None
    assert gj.LGVI(retraction="exp").backward_step(RB, f64) is None
    assert gj.RigidBodySplitting().backward_step(RB, f64) is None
    se3 = gj.RigidBodySE3(mass=2.0, inertia=[0.5, 0.8, 1.1])
    assert gj.LGVI().backward_step(se3, f64) is None


@pytest.mark.long
def test_hand_written_backward_step_equals_reverse_step_and_vjp():
    """One backward step of LGVI.backward_step against the method itself: the rebuilt carry
    against ``advance`` with ``-dt`` (the same operations, which XLA may fuse differently:
    observed <= 5.3e-17 relative, asserted 1e-15), and the cotangents against ``jax.vjp`` of
    ``advance`` at the rebuilt state, with respect to the state, the inertia (principal
    moments with a control; a full tensor without), dt and the control (round-off: observed
    <= 1.8e-15, asserted 1e-12)."""
    method = gj.LGVI()
    dt = 0.1
    ct = jnp.sin(jnp.arange(12.0) + 1.0)

    def case(inertia, u):
        system = gj.RigidBody(inertia, generalized=True)
        x1 = method.init(system, gj.RigidBodyState(R0, PI0))
        parameters, backward = method.backward_step(system, jnp.float64)
        x0, ct_x0, ct_I, ct_h, ct_u = backward(
            parameters(system), x1, jnp.asarray(dt), u, tuple(ct), True, True
        )
        ref0 = method.advance(system, x1, -dt, u)[0]

        def step(x, inertia, h, u):
            return method.advance(gj.RigidBody(inertia, generalized=True), x, h, u)[0]

        _, vjp = jax.vjp(step, x0, inertia, jnp.asarray(dt), u)
        ref = vjp(ct)
        # the inertia cotangent: the entries' cotangents pulled back to the array
        _, vjp_I = jax.vjp(lambda a: parameters(gj.RigidBody(a, generalized=True)), inertia)
        mine = (jnp.stack(ct_x0), vjp_I(ct_I)[0], ct_h, None if u is None else jnp.stack(ct_u))
        return x0, ref0, mine, ref

    cases = {
        "principal-control": (jnp.array([1.0, 1.7, 2.4]), jnp.array([0.2, -0.4, 0.3])),
        "tensor": (jnp.array([[1.2, 0.1, -0.05], [0.1, 1.7, 0.2], [-0.05, 0.2, 2.3]]), None),
    }
    out = jax.jit(lambda cs: {k: case(*v) for k, v in cs.items()})(cases)
    for name, (x0, ref0, mine, ref) in out.items():
        assert _rel(x0, ref0) <= 1e-15, name
        for m, r in zip(mine, ref):
            if r is not None:
                assert _rel(m, r) < 1e-12, name


@pytest.mark.long
def test_free_body_hand_written_vjp_float32(monkeypatch):
    """float32 without compensation and Björck step: the hand-written backward step is taken
    (without the packed carry, float64 only) and its gradient (batched momenta, tensor, dt)
    agrees with the float64 gradient of the same computation to float32 round-off: 30 forward
    and 30 backward steps add ~eps32 relative each on this short, non-chaotic horizon (inputs
    rounded to float32 included); asserted 2·steps·eps32 = 7e-6 (as the float32 test above),
    observed <= 4e-7."""
    method = gj.LGVI(compensate=False, reorthonormalize=False)
    inertia_key, batched, pi0, p = _free_case("tensor-batched")
    loss32 = _free_body_loss(REV, inertia_key, FREE_STEPS, batched, method)
    x32 = jax.tree.map(lambda a: jnp.asarray(a, jnp.float32), (pi0, p))
    from geomjax.integrators import _so3_soa as soa

    calls = []
    real = soa.lgvi_step_vjp
    monkeypatch.setattr(soa, "lgvi_step_vjp", lambda *a, **k: calls.append(1) or real(*a, **k))
    g32 = jax.jit(jax.grad(loss32, (0, 1)))(*x32)
    assert calls
    g64 = _free_grad("tensor-batched", REV)
    tol = 2 * FREE_STEPS * float(jnp.finfo(jnp.float32).eps)
    assert g32[0].dtype == jnp.float32
    assert _rel(g32[0].astype(jnp.float64), g64[0]) < tol
    for name in g64[1]:
        assert _rel(g32[1][name].astype(jnp.float64), g64[1][name]) < tol, name


@pytest.mark.long
def test_free_body_hand_written_backward_step_second_derivatives():
    """Reverse over reverse: the Hessian through ReversibleAdjoint differentiates its backward
    pass, here the hand-written backward step (the root with its implicit-function-theorem
    derivatives, the Cayley factor with the derivative of 4/(4 + |w|²)), against the Hessian of
    the plain scan: observed <= 7e-16 relative, asserted 1e-10 (declared-zero tangents there
    gave 0.56)."""
    R = R0

    def loss(x, adjoint):
        pi0, moments = x[:3], x[3:]
        s = gj.simulate(
            gj.RigidBody(moments), gj.LGVI(), gj.RigidBodyState(R, pi0), 0.05, 10, adjoint=adjoint
        ).final_state
        return jnp.sum(s.Pi * jnp.array([0.3, -1.0, 0.7])) + jnp.sum(s.R[0] * s.R[2])

    x = jnp.array([0.8, -0.3, 1.1, 1.0, 1.7, 2.4])
    plain = jax.jit(jax.hessian(lambda x: loss(x, None)))(x)
    rev = jax.jit(jax.jacrev(jax.grad(lambda x: loss(x, REV))))(x)
    assert _rel(rev, plain) < 1e-10
