"""LGVI, RKMK4 and the splitting on the rigid body (SO(3)), against conservation laws, closed forms
and SciPy DOP853 references at rtol = 1e-12."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import geomjax as gj
from geomjax.systems import HeavyTop

from .helpers import fitted_order as _order
from .helpers import terminal_error as _terminal_error
from .reference import reference

I123 = jnp.array([1.0, 2.0, 3.0])
RB = gj.RigidBody(I123)
R0 = gj.SO3.exp(jnp.array([0.3, -0.2, 0.5]))
PI0 = jnp.array([0.8, -0.3, 1.1])
S0 = gj.RigidBodyState(R0, PI0)


def _rel_energy_error(system, sol):
    E = jax.vmap(system.energy)(sol.states)
    return np.asarray(jnp.abs(E - E[0]) / jnp.abs(E[0]))


@pytest.mark.parametrize("method", [gj.LGVI(), gj.RigidBodySplitting()], ids=["LGVI", "splitting"])
def test_free_rigid_body_1e5_steps(method):
    """dt = 0.01, 1e5 steps: bounded energy error without secular trend, spatial momentum R Pi
    constant to 1e-11 (relative), |R^T R - I| <= 1e-12 throughout."""
    sol = gj.simulate(RB, method, S0, 0.01, 100_000, save_every=100)
    err = _rel_energy_error(RB, sol)
    # no secular trend: the error envelope over the first 1e4 steps already contains the rest
    early, full = err[:101].max(), err.max()
    assert full < 1e-4
    assert full < 1.5 * early, (early, full)
    d = gj.diagnostics(RB, sol)
    m = np.asarray(d["spatial_momentum"])
    assert np.max(np.abs(m - m[0])) / np.linalg.norm(m[0]) <= 1e-11
    assert float(jnp.max(d["group_defect"])) <= 1e-12
    # the Casimir |Pi|^2 is preserved as well (both methods are Lie–Poisson)
    c = np.asarray(d["casimir_norm_Pi_sq"])
    assert np.max(np.abs(c - c[0])) / c[0] <= 1e-11
    assert float(sol.max_residual) < 1e-13


CONVERGENCE_CASES = {
    "LGVI-cayley": (RB, gj.LGVI(), 2, (0.1, 0.05, 0.025)),
    "LGVI-exp": (RB, gj.LGVI(retraction="exp"), 2, (0.1, 0.05, 0.025)),
    "splitting": (RB, gj.RigidBodySplitting(), 2, (0.1, 0.05, 0.025)),
    "splitting-exact": (RB, gj.RigidBodySplitting(exact_subflows=True), 2, (0.1, 0.05, 0.025)),
    "RKMK4": (RB, gj.RKMK4(), 4, (0.2, 0.1, 0.05)),
    "LGVI-generic-full-inertia": (
        gj.EulerPoincareSystem(
            gj.SO3, jnp.array([[1.0, 0.1, 0.0], [0.1, 2.0, -0.2], [0.0, -0.2, 3.0]])
        ),
        gj.LGVI(),
        2,
        (0.1, 0.05, 0.025),
    ),
    "LGVI-heavy-top": (
        gj.RigidBody(I123, HeavyTop(1.0, 9.81, [0.0, 0.1, 0.4])),
        gj.LGVI(),
        2,
        (0.05, 0.025, 0.0125),
    ),
    "splitting-heavy-top": (
        gj.RigidBody(I123, HeavyTop(1.0, 9.81, [0.0, 0.1, 0.4])),
        gj.RigidBodySplitting(),
        2,
        (0.05, 0.025, 0.0125),
    ),
}


@pytest.mark.parametrize("case", list(CONVERGENCE_CASES))
def test_convergence_order_against_dop853(case):
    system, method, order, dts = CONVERGENCE_CASES[case]
    T = 2.0
    s0 = system.make_state(R0, PI0)
    _, gs, mus = reference(system, s0, T, t_eval=[T])
    errs = [_terminal_error(system, method, s0, T, dt, gs[-1], mus[-1]) for dt in dts]
    slope = _order(dts, errs)
    assert abs(slope - order) < 0.2, (errs, slope)


def test_splitting_more_accurate_than_lgvi_on_the_heavy_top():
    # the comparison the integrator guide states for a body with a potential: at the same dt the
    # splitting's terminal error against DOP853 is below the LGVI's (measured 8.3x smaller at
    # each dt; asserted 4x), both second order (test_convergence_order_against_dop853)
    system, _, _, dts = CONVERGENCE_CASES["splitting-heavy-top"]
    T, s0 = 2.0, system.make_state(R0, PI0)
    _, gs, mus = reference(system, s0, T, t_eval=[T])
    for dt in dts:
        lgvi, split = (
            _terminal_error(system, m, s0, T, dt, gs[-1], mus[-1])
            for m in (gj.LGVI(), gj.RigidBodySplitting())
        )
        assert split < lgvi / 4, (dt, lgvi, split)


def _flip_times(t, pi2):
    s = np.sign(pi2)
    idx = np.nonzero(s[1:] != s[:-1])[0]
    # linear interpolation of the zero crossings
    return t[idx] - pi2[idx] * (t[idx + 1] - t[idx]) / (pi2[idx + 1] - pi2[idx])


def test_dzhanibekov_flip_period_matches_reference():
    """Spin about the intermediate axis with a small perturbation: the body flips periodically;
    the flip period of LGVI (dt = 0.01) equals that of the DOP853 reference."""
    s0 = gj.RigidBodyState(jnp.eye(3), jnp.array([0.02, 2.0, 0.02]))
    T, dt = 100.0, 0.01
    sol = gj.simulate(RB, gj.LGVI(), s0, dt, int(T / dt))
    t = np.asarray(sol.times)
    flips = _flip_times(t, np.asarray(sol.states.Pi[:, 1]))
    t_ref, _, mu_ref = reference(RB, s0, float(t[-1]), t_eval=t)
    flips_ref = _flip_times(t_ref, mu_ref[:, 1])
    assert len(flips) >= 3 and len(flips) == len(flips_ref)
    period, period_ref = np.diff(flips).mean(), np.diff(flips_ref).mean()
    assert abs(period - period_ref) / period_ref < 2e-3, (period, period_ref)


def test_heavy_top_vertical_momentum_and_energy():
    top = HeavyTop(mass=1.5, gravity=9.81, rho=[0.05, -0.02, 0.3])
    system = gj.RigidBody(jnp.array([0.9, 1.0, 0.4]), potential=top)
    # the torque from autodiff equals the closed form M = -dV = m g (R^T e3) × rho
    R = gj.SO3.exp(jnp.array([0.4, 1.0, -0.3]))
    np.testing.assert_allclose(
        system.potential_force(R),
        1.5 * 9.81 * jnp.cross(R.T @ jnp.array([0.0, 0.0, 1.0]), top.rho),
        atol=1e-13,
    )
    s0 = gj.RigidBodyState(R, jnp.array([0.2, -0.4, 3.0]))
    sol = gj.simulate(system, gj.LGVI(), s0, 0.005, 20_000, save_every=20)
    Lz = np.asarray(jnp.einsum("ti,ti->t", sol.states.R[:, 2, :], sol.states.Pi))  # e3 · R Pi
    assert np.max(np.abs(Lz - Lz[0])) <= 1e-12 * max(1.0, abs(Lz[0]))
    err = _rel_energy_error(system, sol)
    assert err.max() < 1e-3 and err.max() < 1.5 * err[: len(err) // 10].max()


def test_rolled_and_unrolled_newton_iterations_agree(monkeypatch):
    """The fixed Newton iterations run in a loop on CPU and unrolled on accelerators: the same
    arithmetic up to XLA's reassociation, so the same trajectory to round-off (both forms
    exercised here on the CPU), with potentials and on the generic-group path too."""
    from geomjax.integrators import newton

    top = gj.RigidBody(I123, HeavyTop(1.0, 9.81, [0.0, 0.1, 0.4]))
    generic = gj.EulerPoincareSystem(gj.SO3, jnp.diag(I123))
    runs = {}
    for unroll in (False, True):
        monkeypatch.setattr(newton, "_unroll_iterations", lambda u=unroll: u)
        runs[unroll] = [
            gj.simulate(system, gj.LGVI(), system.make_state(R0, PI0), 0.02, 200).states
            for system in (RB, top, generic)
        ]
    for a, b in zip(jax.tree_util.tree_leaves(runs[False]), jax.tree_util.tree_leaves(runs[True])):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-13)


def test_generic_group_path_equals_so3_kernel():
    """The struct-of-arrays SO(3) kernel and the generic group code solve the same equations."""
    generic = gj.EulerPoincareSystem(gj.SO3, jnp.diag(I123), HeavyTop(1.0, 9.81, [0.0, 0.1, 0.4]))
    special = gj.RigidBody(I123, HeavyTop(1.0, 9.81, [0.0, 0.1, 0.4]))
    a = gj.simulate(special, gj.LGVI(), S0, 0.01, 300)
    b = gj.simulate(generic, gj.LGVI(), gj.LieGroupState(R0, PI0), 0.01, 300)
    np.testing.assert_allclose(a.states.R, b.states.g, atol=1e-12)
    np.testing.assert_allclose(a.states.Pi, b.states.mu, atol=1e-12)


# --------------------------------------------------------------------------------------------
# gradients


def _loss(system, s0, controls, dt=0.05, steps=30):
    sol = gj.simulate(system, gj.LGVI(), s0, dt, steps, controls=controls, save_every=steps)
    R, Pi = sol.final_state.R, sol.final_state.Pi
    return jnp.sum(Pi * jnp.array([0.3, -1.0, 0.7])) + jnp.sum(R * jnp.arange(9.0).reshape(3, 3))


def _params0():
    return {
        "Pi0": PI0,
        "moments": jnp.array([1.0, 1.7, 2.4]),
        "mass": jnp.array(1.3),
        "rho": jnp.array([0.1, -0.2, 0.5]),
        "u": 0.2 * jnp.sin(jnp.arange(90.0)).reshape(30, 3),
    }


def _loss_of_params(p):
    system = gj.RigidBody(p["moments"], HeavyTop(p["mass"], 9.81, p["rho"]))
    return _loss(system, gj.RigidBodyState(R0, p["Pi0"]), p["u"])


@pytest.mark.long
def test_gradients_match_central_differences():
    """d(loss)/d(initial momentum, inertia, potential parameters, control sequence) through the
    implicit solves (implicit function theorem) against central finite differences."""
    p = _params0()
    grads = jax.jit(jax.grad(_loss_of_params))(p)
    f = jax.jit(_loss_of_params)
    rng = np.random.default_rng(0)
    for name in p:
        # directional derivative along two random directions per parameter
        for _ in range(2):
            v = jnp.asarray(rng.standard_normal(p[name].shape))
            eps = 1e-6
            plus = {**p, name: p[name] + eps * v}
            minus = {**p, name: p[name] - eps * v}
            fd = (f(plus) - f(minus)) / (2 * eps)
            ad = jnp.sum(grads[name] * v)
            assert abs(float(ad - fd)) <= 1e-6 * max(1.0, abs(float(fd))), (
                name,
                float(ad),
                float(fd),
            )


@pytest.mark.long  # ~6-8 s of compilation: the long tier (make test-full)
def test_checkpointed_gradient_equals_plain():
    p = _params0()

    def loss(pi0, checkpoint):
        sol = gj.simulate(
            RB, gj.LGVI(), gj.RigidBodyState(R0, pi0), 0.05, 30, save_every=5, checkpoint=checkpoint
        )
        return jnp.sum(sol.states.Pi**3) + jnp.sum(sol.states.R[-1])

    g1 = jax.grad(loss)(p["Pi0"], False)
    g2 = jax.grad(loss)(p["Pi0"], True)
    np.testing.assert_allclose(g1, g2, rtol=1e-12)


# --------------------------------------------------------------------------------------------
# transformations, dtypes, continuation, IO


def test_step_is_one_step_of_simulate():
    sol = gj.simulate(RB, gj.LGVI(), S0, 0.02, 1)
    one = gj.step(RB, S0, 0.02)
    # the same arithmetic, but eager op-by-op vs fused in a scan: XLA may contract a*b+c into an
    # FMA differently (GPU does), so not bitwise; one step is O(100) roundings of O(1)
    # conditioning, hence ≤ 1e3·eps·|x| (round-off level, ≥ 10× margin)
    tol = 1e3 * np.finfo(np.float64).eps * float(jnp.max(jnp.abs(S0.Pi)))
    np.testing.assert_allclose(one.R, sol.states.R[1], rtol=0, atol=tol)
    np.testing.assert_allclose(one.Pi, sol.states.Pi[1], rtol=0, atol=tol)
    u = jnp.array([0.3, -0.2, 0.1])
    ref = gj.simulate(RB, gj.RKMK4(), S0, 0.02, 1, controls=u[None])
    two = jax.jit(lambda s: gj.step(RB, s, 0.02, u, method=gj.RKMK4()))(S0)
    # the argument order of simulate is accepted as well
    three = gj.step(RB, gj.RKMK4(), S0, 0.02, u)
    for out in (two, three):
        np.testing.assert_allclose(out.R, ref.states.R[1], rtol=0, atol=tol)
        np.testing.assert_allclose(out.Pi, ref.states.Pi[1], rtol=0, atol=tol)
    with pytest.raises(ValueError, match="'method' given twice"):
        gj.step(RB, gj.RKMK4(), S0, 0.02, method=gj.LGVI())


_TRACES = []


class _CountingLGVI(gj.LGVI):
    def step(self, system, state, dt, control=None, t=0.0):
        _TRACES.append(1)  # Python side effect: once per trace
        return super().step(system, state, dt, control, t)


def test_eager_step_is_one_compiled_program():
    """``step`` called eagerly runs one compiled program (an op-by-op step dispatched hundreds
    of small operations: 0.14 s per call for the free body, 0.8 s for the ball on a turntable);
    other step sizes and times reuse it, and the result is ``method.step``'s."""
    _TRACES.clear()
    a = gj.step(RB, S0, 0.02, method=_CountingLGVI())
    b = gj.step(RB, S0, 0.03, method=_CountingLGVI(), t=0.5)
    assert len(_TRACES) == 1
    for out, h in ((a, 0.02), (b, 0.03)):
        ref = gj.LGVI().step(RB, S0, h)[0]
        np.testing.assert_allclose(out.R, ref.R, rtol=0, atol=1e-14)
        np.testing.assert_allclose(out.Pi, ref.Pi, rtol=0, atol=1e-14)


def test_jit_equals_eager_and_vmap_equals_loop():
    eager = gj.simulate(RB, gj.LGVI(), S0, 0.02, 50)
    jitted = eqx.filter_jit(gj.simulate)(RB, gj.LGVI(), S0, 0.02, 50)
    # 50 steps of round-off-level differences (FMA contraction may differ between the eager
    # scan and the jitted one): ≤ 50 · 1e2 eps relative for this integrable (non-chaotic) flow
    np.testing.assert_allclose(eager.states.Pi, jitted.states.Pi, rtol=1e-11, atol=1e-13)
    pis = jnp.stack([PI0, 2 * PI0, -PI0 + 0.1])
    batched = jax.vmap(
        lambda pi: gj.simulate(RB, gj.LGVI(), gj.RigidBodyState(R0, pi), 0.02, 50).states
    )(pis)
    for k in range(3):
        one = gj.simulate(RB, gj.LGVI(), gj.RigidBodyState(R0, pis[k]), 0.02, 50).states
        np.testing.assert_allclose(batched.Pi[k], one.Pi, rtol=1e-11, atol=1e-13)
        np.testing.assert_allclose(batched.R[k], one.R, rtol=1e-11, atol=1e-13)


@pytest.mark.parametrize(
    "method", [gj.LGVI(), gj.RigidBodySplitting(), gj.RKMK4()], ids=["LGVI", "splitting", "RKMK4"]
)
def test_float32_runs_are_stable(method):
    s0 = jax.tree_util.tree_map(lambda x: x.astype(jnp.float32), S0)
    sol = gj.simulate(
        gj.RigidBody(I123.astype(jnp.float32)), method, s0, 0.01, 20_000, save_every=100
    )
    assert sol.states.R.dtype == jnp.float32
    # round-off random walk at float32 level, no blow-up
    err = _rel_energy_error(RB, sol)
    assert np.all(np.isfinite(err)) and err.max() < 1e-3
    # group defect: the LGVI and the splitting stay at round-off (renormalized; measured
    # ≤ 5 eps32 = 6e-7), asserted 16 eps32.  RKMK4 multiplies R by exp(·) 2e4 times without
    # projection: each float32 product adds at most γ₃ ≈ 3 eps32 of defect (2e4·γ₃ ≈ 7e-3 worst
    # case), mostly cancelling: measured 7.3e-5 (0.03 eps32 per step, growing ~linearly); asserted
    # eps32/4 per step (6e-4): a margin of 8 for other rounding patterns (FMA, summation order)
    eps = np.finfo(np.float32).eps
    bound = 20_000 * eps / 4 if isinstance(method, gj.RKMK4) else 16 * eps
    assert float(jnp.max(gj.SO3.defect(sol.states.R))) < bound


def test_continuing_a_run_is_bitwise_identical():
    full = gj.simulate(RB, gj.LGVI(), S0, 0.01, 400, save_every=4)
    first = gj.simulate(RB, gj.LGVI(), S0, 0.01, 200, save_every=4)
    second = gj.simulate(
        RB, gj.LGVI(), first.final_state, 0.01, 200, save_every=4, t0=first.times[-1]
    )
    np.testing.assert_array_equal(np.asarray(full.states.R[50:]), np.asarray(second.states.R))
    np.testing.assert_array_equal(np.asarray(full.states.Pi[50:]), np.asarray(second.states.Pi))
    np.testing.assert_array_equal(np.asarray(full.times[50:]), np.asarray(second.times))


def test_solution_save_load_round_trip(tmp_path):
    system = gj.RigidBody(I123, HeavyTop(1.0, 9.81, [0.0, 0.1, 0.4]))
    method = gj.LGVI(newton_iters=4)
    sol = gj.simulate(system, method, S0, 0.01, 100, save_every=10)
    path = sol.save(tmp_path / "run.npz", system=system, method=method)
    loaded, params, _ = gj.load_solution(path)
    np.testing.assert_array_equal(loaded.states.R, sol.states.R)
    np.testing.assert_array_equal(loaded.states.Pi, sol.states.Pi)
    np.testing.assert_array_equal(loaded.times, sol.times)
    np.testing.assert_array_equal(loaded.stats["residual"], sol.stats["residual"])
    assert any(np.array_equal(v, system.inertia) for v in params.values())
    # with templates the system is rebuilt from the saved numbers (bitwise) and runs on
    template = gj.RigidBody(jnp.ones(3), HeavyTop(0.0, 0.0, [0.0, 0.0, 0.0]))
    _, rebuilt, _ = gj.load_solution(path, system=template, method=method)
    np.testing.assert_array_equal(rebuilt.inertia, system.inertia)
    np.testing.assert_array_equal(rebuilt.potential.rho, system.potential.rho)
    again = gj.simulate(rebuilt, method, loaded.final_state, 0.01, 10, t0=loaded.times[-1])
    more = gj.simulate(system, method, sol.final_state, 0.01, 10, t0=sol.times[-1])
    np.testing.assert_array_equal(again.states.Pi, more.states.Pi)


# --------------------------------------------------------------------------------------------
# forces, controls, failures


def test_controls_and_external_forces_converge_at_second_order():
    """Zero-order-hold control torques and a damping torque F = −c Omega (discrete
    Lagrange–d'Alembert) against piecewise DOP853 references."""
    c = 0.3
    system = gj.RigidBody(I123, force=lambda t, R, Pi: -c * Pi / I123)
    T, n_u = 1.0, 5
    u = 0.5 * jnp.asarray(np.random.default_rng(1).standard_normal((n_u, 3)))
    _, gs, mus = reference(system, S0, T, control=np.asarray(u), dt_control=T / n_u)
    errs, dts = [], (0.05, 0.025, 0.0125)
    for dt in dts:
        steps = round(T / dt)
        per = steps // n_u
        sol = gj.simulate(
            system, gj.LGVI(), S0, dt, steps, controls=jnp.repeat(u, per, axis=0), save_every=steps
        )
        errs.append(
            max(
                float(jnp.max(jnp.abs(sol.final_state.R - gs[-1]))),
                float(jnp.max(jnp.abs(sol.final_state.Pi - mus[-1]))),
            )
        )
    assert abs(_order(dts, errs) - 2) < 0.2, errs
    # damping dissipates energy
    sol = gj.simulate(system, gj.LGVI(), S0, 0.01, 500)
    E = jax.vmap(system.energy)(sol.states)
    assert float(E[-1]) < 0.5 * float(E[0])


def test_non_convergence_is_visible():
    fast = gj.RigidBodyState(R0, jnp.array([40.0, -70.0, 90.0]))
    sol = gj.simulate(RB, gj.LGVI(newton_iters=1), fast, 0.5, 4)
    assert float(sol.max_residual) > 1e-6
    with pytest.raises(Exception, match="did not converge"):
        jax.block_until_ready(
            gj.simulate(RB, gj.LGVI(newton_iters=1, on_failure="raise"), fast, 0.5, 4)
        )


def test_bad_inputs_raise_clear_errors():
    with pytest.raises(ValueError, match="'inertia'"):
        gj.RigidBody(jnp.array([1.0, -2.0, 3.0]))
    with pytest.raises(ValueError, match="'inertia'"):
        gj.RigidBody(jnp.array([[1.0, 2.0, 0.0], [2.0, 1.0, 0.0], [0.0, 0.0, 1.0]]))
    with pytest.raises(ValueError, match="'inertia'"):
        gj.RigidBody(jnp.ones(4))
    with pytest.raises(ValueError, match="'potential'"):
        gj.RigidBody(I123, potential=lambda R, x: 0.0)
    with pytest.raises(ValueError, match="'potential'.*scalar"):
        gj.RigidBody(I123, potential=lambda R: R[0])
    with pytest.raises(ValueError, match=r"'state0\.R'"):
        gj.simulate(RB, gj.LGVI(), gj.RigidBodyState(R0 * 1.01, PI0), 0.01, 10)
    with pytest.raises(ValueError, match=r"'state0\.Pi'"):
        gj.simulate(RB, gj.LGVI(), gj.RigidBodyState(R0, PI0.at[0].set(jnp.nan)), 0.01, 10)
    with pytest.raises(ValueError, match="'save_every'"):
        gj.simulate(RB, gj.LGVI(), S0, 0.01, 10, save_every=3)
    with pytest.raises(ValueError, match="'controls'"):
        gj.simulate(RB, gj.LGVI(), S0, 0.01, 10, controls=jnp.zeros((9, 3)))
    with pytest.raises(ValueError, match="diagonal"):
        gj.simulate(
            gj.RigidBody(jnp.array([[1.0, 0.1, 0], [0.1, 2.0, 0], [0, 0, 3.0]])),
            gj.RigidBodySplitting(),
            S0,
            0.01,
            10,
        )
    with pytest.raises(ValueError, match="'method'"):
        gj.simulate(RB, "LGVI", S0, 0.01, 10)


@pytest.mark.parametrize("check_inputs", [True, False])
def test_state_of_another_type_is_converted_or_named(check_inputs):
    """A ``(g, mu)`` state of another type is the same state (converted, as ``check_state``
    does, also without the input checks); a state of an unrelated kind is a clear error naming
    ``state0`` (before: a pytree-structure error from inside the scan)."""
    ref = gj.simulate(RB, gj.LGVI(), S0, 0.01, 10)
    got = gj.simulate(
        RB, gj.LGVI(), gj.LieGroupState(S0.R, S0.Pi), 0.01, 10, check_inputs=check_inputs
    )
    assert isinstance(got.final_state, gj.RigidBodyState)
    np.testing.assert_array_equal(got.final_state.Pi, ref.final_state.Pi)
    ball = gj.BallOnTurntable(mass=1.0, radius=0.5, table_rate=0.8)
    with pytest.raises(ValueError, match="'state0' must be a NonholonomicState"):
        gj.simulate(ball, gj.NonholonomicVI(), S0, 0.01, 10, check_inputs=check_inputs)
