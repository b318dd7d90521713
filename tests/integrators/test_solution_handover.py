"""The reverse step hands its implicit solutions to the forward linearization of
ReversibleAdjoint's backward step (``method.forward_solutions``, ``newton.replay_solutions``):

* the handed-over solutions are the forward step's own Newton solutions (to round-off), for the
  LGVI (SO(3) fast path with a potential and a control, SE(3) generic path, Cayley and exp) and
  NonholonomicVI (sleigh with a control, ball on a turntable with time-dependent constraints);
* gradients with the handover equal those without it (the forward step solved again);
* ``replay_solutions`` gives the root it is handed and the implicit-function-theorem
  derivatives there (closed form), and a miscount raises."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import geomjax as gj
from geomjax.integrators import adjoint as adj
from geomjax.integrators.base import GradientHooks
from geomjax.integrators.newton import newton_solve, record_solutions, replay_solutions
from geomjax.systems import ChaplyginSleigh, HeavyTop, SE3Gravity

FLOATS = st.floats(-1.0, 1.0, allow_nan=False)


def _cases(a, b, c):
    """(name, system, method, state, dt, control) built from three numbers in [-1, 1]."""
    top = gj.RigidBody(jnp.array([1.0, 1.7, 2.4]), HeavyTop(1.3, 9.81, [0.1, -0.2, 0.5]))
    R0 = gj.SO3.exp(jnp.array([0.3 + a, -0.2, 0.5 * b]))
    yield (
        "LGVI SO(3)",
        top,
        gj.LGVI(),
        gj.RigidBodyState(R0, jnp.array([0.8 + c, -0.3, 1.1 * a])),
        0.05,
        jnp.array([0.2, -0.1 * b, 0.3]),
    )
    body = gj.RigidBodySE3(
        mass=2.0,
        inertia=[0.5, 0.8, 1.1],
        com=[0.1, -0.05, 0.2],
        potential=SE3Gravity(2.0, 9.81, [0.1, -0.05, 0.2]),
    )
    g0 = gj.SE3.exp(jnp.array([0.2 * a, -0.5, 0.3, 1.0, 0.5 * b, -2.0]))
    mu0 = jnp.array([0.3, -0.2 + 0.5 * c, 0.4, 1.0, -0.5, 0.2 * a])
    for retraction in ("cayley", "exp"):
        yield (
            f"LGVI SE(3) {retraction}",
            body,
            gj.LGVI(retraction=retraction),
            gj.LieGroupState(g0, mu0),
            0.05,
            None,
        )
    sleigh = ChaplyginSleigh(1.3, 0.4, 0.25)
    yield (
        "NonholonomicVI sleigh",
        sleigh,
        gj.NonholonomicVI(),
        sleigh.state(0.1, -0.2, 0.3 + a, omega=1.5 * b, v=-0.4 + c),
        0.02,
        jnp.array([0.3 * a, 0.2, -0.1]),
    )
    ball = gj.BallOnTurntable(mass=1.0, radius=0.5, table_rate=0.8)
    yield (
        "NonholonomicVI ball on a turntable",
        ball,
        gj.NonholonomicVI(),
        ball.state(x=(1.0 + 0.3 * a, 0.3), omega=(0.4, -0.2 * b, 0.7 + c)),
        0.02,
        None,
    )


def _solves(system, method, carry, dt, control, t):
    """(next carry, the solutions of the step's newton_solve calls)."""
    with record_solutions() as sols:
        carry1, _ = method.advance(system, carry, dt, control, t)
    return carry1, list(sols)


@eqx.filter_jit
def _forward_and_handed_over(system, method, state, dt, u):
    t = jnp.asarray(0.4)
    x0 = method.init(system, state, t)
    x1, fwd = _solves(system, method, x0, dt, u, t)
    _, rev = _solves(system, method, x1, -dt, u, t + dt)
    return fwd, method.forward_solutions(system, rev, x1)


@pytest.mark.long
@settings(max_examples=5, deadline=None)
@given(FLOATS, FLOATS, FLOATS)
def test_handed_over_solutions_are_the_forward_solutions(a, b, c):
    """Float64: the forward step's Newton solutions against those the reverse step from its
    result hands over.  Both solve the same equations at states that differ by round-off,
    to round-off (observed <= 4e-16 relative); asserted 1e-11."""
    for name, system, method, state, dt, u in _cases(a, b, c):
        fwd, handed = _forward_and_handed_over(system, method, state, jnp.asarray(dt), u)
        assert len(handed) == len(fwd), name
        for h, f in zip(handed, fwd):
            # a solution may be a tuple of arrays (the LGVI's scalar Legendre solve)
            hs, fs = jax.tree_util.tree_leaves(h), jax.tree_util.tree_leaves(f)
            assert len(hs) == len(fs), name
            for hl, fl in zip(hs, fs):
                scale = float(jnp.max(jnp.abs(fl)))
                assert float(jnp.max(jnp.abs(hl - fl))) <= 1e-11 * max(scale, 1.0), (name, hl, fl)


def _grad_with_and_without_handover(monkeypatch, loss, x):
    with_handover = jax.jit(jax.grad(loss))(x)
    for cls in (gj.LGVI, gj.NonholonomicVI):
        monkeypatch.setattr(cls, "forward_solutions", GradientHooks.forward_solutions)
    without = jax.jit(jax.grad(loss))(x)
    return with_handover, without


def _rel(a, b):
    return max(
        float(jnp.max(jnp.abs(x - y)) / jnp.max(jnp.abs(y)))
        for x, y in zip(jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b))
    )


@pytest.mark.long
def test_sleigh_gradients_with_and_without_handover(monkeypatch):
    """NonholonomicVI with controls, gradients with respect to the initial velocities, the mass,
    dt and the controls: the handover changes only the linearization point's solutions, by
    round-off (observed <= 6e-14 relative over 30 steps, asserted 1e-10)."""
    steps = 30

    def loss(p):
        sleigh = ChaplyginSleigh(p["mass"], 0.4, 0.25)
        s0 = sleigh.state(0.1, -0.2, 0.3, omega=p["om"], v=p["v"])
        sol = gj.simulate(
            sleigh,
            gj.NonholonomicVI(),
            s0,
            p["dt"],
            steps,
            controls=p["u"],
            adjoint=gj.ReversibleAdjoint(),
        )
        s = sol.final_state
        return s.g[0, 2] + 2.0 * s.g[1, 2] + jnp.sum(s.v**2) + 0.1 * jnp.sum(s.lam)

    p = {
        "mass": jnp.array(1.3),
        "om": jnp.array(1.5),
        "v": jnp.array(-0.4),
        "dt": jnp.array(0.03),
        "u": 0.2 * jnp.cos(jnp.arange(3.0 * steps)).reshape(steps, 3),
    }
    g, g_ref = _grad_with_and_without_handover(monkeypatch, loss, p)
    for name in p:
        assert _rel(g[name], g_ref[name]) < 1e-10, name


@pytest.mark.long
def test_lgvi_batched_gradients_with_and_without_handover(monkeypatch):
    """The LGVI on SO(3) under vmap (the hoisted backward step, _Invariant, with the solutions
    as extra inputs), gradients with respect to the batched momenta and the shared inertia:
    equal with and without the handover (observed <= 4e-16 relative, asserted 1e-10)."""
    R0 = gj.SO3.exp(jnp.array([0.3, -0.2, 0.5]))
    pis = jnp.array([[0.8, -0.3, 1.1], [0.5, 0.9, -0.2], [-1.0, 0.1, 0.4]])

    def loss(p):
        def one(pi):
            sol = gj.simulate(
                gj.RigidBody(p["moments"]),
                gj.LGVI(),
                gj.RigidBodyState(R0, pi),
                0.05,
                40,
                adjoint=gj.ReversibleAdjoint(),
            )
            s = sol.final_state
            return jnp.sum(s.R * jnp.arange(9.0).reshape(3, 3)) + jnp.sum(s.Pi**2)

        return jnp.sum(jax.vmap(one)(p["pis"]))

    p = {"pis": pis, "moments": jnp.array([1.0, 2.0, 3.0])}
    # the hoisted step takes the solutions as inputs
    system, method = gj.RigidBody(p["moments"]), gj.LGVI()
    params, static = eqx.partition((system, method), eqx.is_inexact_array)
    x = method.init(system, gj.RigidBodyState(R0, pis[0]))
    sols = [jax.ShapeDtypeStruct((3,), jnp.float64)]
    assert adj._split_invariant(static, params, jnp.asarray(0.05), x, None, 0.0, False, sols)
    g, g_ref = _grad_with_and_without_handover(monkeypatch, loss, p)
    for name in p:
        assert _rel(g[name], g_ref[name]) < 1e-10, name


def _sqrt_residual(x, a):
    return x * x - a


def _sqrt_jac_solve(x, a, r):
    return r / (2.0 * x)


@pytest.mark.parametrize("dtype", [jnp.float64, jnp.float32])
def test_replay_gives_the_root_and_its_implicit_derivative(dtype):
    """x^2 = a: a replayed root is returned as is (no iteration), and the derivative is the
    implicit-function-theorem one there, 1 / (2 sqrt(a)) (closed form)."""
    a = jnp.asarray(2.5, dtype)
    root = jnp.sqrt(a)

    def solve(a, replay):
        if replay:
            with replay_solutions([jax.lax.stop_gradient(jnp.sqrt(a))]):
                return newton_solve(
                    _sqrt_residual, jnp.asarray(1.0, dtype), a, iters=5, jac_solve=_sqrt_jac_solve
                )[0]
        return newton_solve(
            _sqrt_residual, jnp.asarray(1.0, dtype), a, iters=5, jac_solve=_sqrt_jac_solve
        )[0]

    eps = float(jnp.finfo(dtype).eps)
    x = solve(a, True)
    assert float(jnp.abs(x - root)) <= 4 * eps * float(root)
    d = jax.grad(lambda a: solve(a, True))(a)
    np.testing.assert_allclose(float(d), 0.5 / float(root), rtol=16 * eps)
    # a wrong root is returned as handed: replay does not iterate (the caller's contract)
    with replay_solutions([jnp.asarray(1.0, dtype)]):
        x, r = newton_solve(_sqrt_residual, a, a, iters=5, jac_solve=_sqrt_jac_solve)
    assert float(x) == 1.0 and float(r) == pytest.approx(1.0 - float(a))


def test_record_and_replay_count_mismatch_raises():
    a = jnp.asarray(2.0)
    with record_solutions() as sols:
        x, _ = newton_solve(_sqrt_residual, jnp.asarray(1.0), a, iters=6, jac_solve=_sqrt_jac_solve)
    assert len(sols) == 1 and sols[0] is x
    with pytest.raises(RuntimeError, match="more newton_solve calls"):
        with replay_solutions([]):
            newton_solve(_sqrt_residual, a, a, iters=1, jac_solve=_sqrt_jac_solve)
    with pytest.raises(RuntimeError, match="were not used"):
        with replay_solutions([a, a]):
            newton_solve(_sqrt_residual, a, a, iters=1, jac_solve=_sqrt_jac_solve)


def _vec_residual(x, a):
    return (x[0] * x[0] - a, x[1] - 2.0 * x[0])


def _vec_jac_solve(x, a, r):
    d0 = r[0] / (2.0 * x[0])
    return (d0, r[1] + 2.0 * d0)


def test_a_recorded_vector_root_replays_into_a_scalar_tuple_solve():
    """The LGVI's SO(3) kernel records its root as a (3,) vector and replays it into a solve on
    scalar entries (scalar cotangents in the backward step): the entries are handed over as
    they are, and the derivative is the closed form, d/da (sqrt(a), 2 sqrt(a))."""
    a = jnp.asarray(2.5)

    def solve(a):
        root = jax.lax.stop_gradient(jnp.stack([jnp.sqrt(a), 2.0 * jnp.sqrt(a)]))
        with replay_solutions([root]):
            x, _ = newton_solve(_vec_residual, (a, a), a, iters=4, jac_solve=_vec_jac_solve)
        return x

    x = solve(a)
    assert isinstance(x, tuple) and float(x[0]) == float(jnp.sqrt(a))
    d = jax.jacfwd(solve)(a)
    np.testing.assert_allclose(
        [float(d[0]), float(d[1])], [0.5 / 2.5**0.5, 1.0 / 2.5**0.5], rtol=1e-14
    )
