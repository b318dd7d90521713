"""Restart: a run stopped, saved, loaded and continued equals the uninterrupted run bitwise, for
every method ``simulate`` runs — under the README's condition: the same ``save_every`` and at
least two saved blocks in each part.

Why the condition (see ``benchmarks/soak.py``, ``restart_case``): with geomjax's XLA setting the
loops of a run are one LLVM kernel, and XLA:CPU lets LLVM contract multiply-adds into FMAs
depending on the loops around the step; XLA removes a loop of one iteration, so a one-block
run (or ``save_every=1`` against ``save_every > 1``) is compiled with a different loop nest.
Runs that meet the condition execute the same kernel; the comparison is exact (no tolerance):
the same machine code on the same bits."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from variational.helpers import double_pendulum, double_spherical, gravity_particle

import geomjax as gj
from geomjax.reconstruction import HorizontalLift, MomentumLGVI, ReconstructionRKMK4
from geomjax.systems import HeavyTop

from .helpers import gyrostat_reconstruction, se3_body

I = jnp.array([0.9, 1.0, 0.4])
S0 = gj.RigidBodyState(gj.SO3.exp(jnp.array([0.4, 1.0, -0.3])), jnp.array([0.2, -0.4, 3.0]))


HEAVY_TOP = HeavyTop(1.5, 9.81, [0.05, -0.02, 0.3])


def _top_by_autodiff(R):
    """The heavy top's potential without its closed form: the LGVI's SO(3) kernel carries its
    torque from step to step (rebuilt from the state at each saved block)."""
    return HEAVY_TOP(R)


def _rigid(method, dt=0.01, potential=None):
    return lambda: (gj.RigidBody(I, potential=potential), method, S0, dt)


def _se3():
    body, s0 = se3_body()
    return body, gj.LGVI(), s0, 0.02


def _sleigh(method):
    def make():
        sleigh = gj.ChaplyginSleigh(1.0, 0.5, 0.3)
        return sleigh, method, sleigh.state(0.0, 0.0, 0.3, omega=1.0, v=0.5), 0.01

    return make


def _disk():
    disk = gj.RollingDisk(mass=1.0, radius=0.5)
    s0 = disk.state(
        x=0.2, y=-0.1, phi=0.3, theta=0.4, psi=0.5, phi_dot=2.0, theta_dot=0.5, psi_dot=3.0
    )
    return disk, gj.NonholonomicVI(), s0, 0.002


def _del():
    pend = double_pendulum()
    s0 = pend.make_state(jnp.array([0.6, -0.4]), jnp.array([0.3, 1.1]))
    return pend, gj.DiscreteEulerLagrange(), s0, 0.02


def _rattle():
    system, constraint = double_spherical()
    q0 = jnp.array([0.0, 0.6, -0.8, 0.3, 0.6, -1.5])
    q0 = q0.at[3:].set(q0[:3] + 0.8 * (q0[3:] - q0[:3]) / jnp.linalg.norm(q0[3:] - q0[:3]))
    method = gj.RATTLE(constraint)
    s0 = method.make_state(system, q0, jnp.array([0.5, 0.0, 0.0, -0.3, 0.4, 0.1]), project=True)
    return system, method, s0, 0.01


def _impacts():
    # a ball dropped from 0.3 hits the floor at t = sqrt(2 · 0.3 / 9.81) = 0.247: step 25 of 40,
    # in the continued half
    system = gravity_particle(2)
    s0 = system.make_state(jnp.array([0.0, 0.3]), jnp.array([0.7, 0.0]))
    return system, gj.Impacts(lambda q: q[1], restitution=0.8), s0, 0.01


def _reconstruction(method):
    def make():
        rec, s0 = gyrostat_reconstruction()  # time-dependent: the continued run needs t0
        return rec, method, s0, 0.02

    return make


CASES = {
    "LGVI free body": _rigid(gj.LGVI()),
    "LGVI heavy top": _rigid(gj.LGVI(), 0.005, HEAVY_TOP),
    "LGVI heavy top, torque carried": _rigid(gj.LGVI(), 0.005, _top_by_autodiff),
    "LGVI float32, torque carried": lambda: (
        gj.RigidBody(I.astype(jnp.float32), potential=_top_by_autodiff),
        gj.LGVI(),
        gj.RigidBodyState(S0.R.astype(jnp.float32), S0.Pi.astype(jnp.float32)),
        0.005,
    ),
    "LGVI SE(3)": _se3,
    "RigidBodySplitting": _rigid(gj.RigidBodySplitting()),
    "RKMK4": _rigid(gj.RKMK4()),
    "Composition(LGVI)": _rigid(gj.Composition(gj.LGVI(), "yoshida4")),
    "Composition(RigidBodySplitting)": _rigid(gj.Composition(gj.RigidBodySplitting(), "kahan_li6")),
    "NonholonomicVI sleigh": _sleigh(gj.NonholonomicVI()),
    "NonholonomicVI rolling disk": _disk,
    "Composition(NonholonomicVI)": _sleigh(gj.Composition(gj.NonholonomicVI(), "yoshida4")),
    "DiscreteEulerLagrange": _del,
    "RATTLE": _rattle,
    "Impacts": _impacts,
    "MomentumLGVI": _reconstruction(MomentumLGVI()),
    "ReconstructionRKMK4": _reconstruction(ReconstructionRKMK4()),
    "HorizontalLift": _reconstruction(HorizontalLift()),
}


def _assert_restart_bitwise(system, method, s0, dt, steps, save_every, controls=None):
    half = steps // 2
    assert half // save_every >= 2  # the README's condition: ≥ 2 saved blocks in each part
    c1 = c2 = None
    if controls is not None:
        c1, c2 = controls[:half], controls[half:]
    full = gj.simulate(system, method, s0, dt, steps, controls, save_every=save_every)
    first = gj.simulate(system, method, s0, dt, half, c1, save_every=save_every)
    cont = gj.simulate(
        system, method, first.final_state, dt, half, c2, save_every=save_every, t0=first.times[-1],
        method_state=first.method_state,
    )  # fmt: skip
    k = half // save_every
    for a, b in (
        (jax.tree_util.tree_map(lambda x: x[: k + 1], (full.times, full.states)), first),
        (jax.tree_util.tree_map(lambda x: x[k:], (full.times, full.states)), cont),
    ):
        leaves_b = jax.tree_util.tree_leaves((b.times, b.states))
        for x, y in zip(jax.tree_util.tree_leaves(a), leaves_b, strict=True):
            np.testing.assert_array_equal(np.asarray(y), np.asarray(x))
    np.testing.assert_array_equal(full.stats["residual"][k:], cont.stats["residual"])
    return full


@pytest.mark.long
@pytest.mark.parametrize("name", list(CASES))
def test_continued_run_is_bitwise_the_uninterrupted_one(name):
    system, method, s0, dt = CASES[name]()
    full = _assert_restart_bitwise(system, method, s0, dt, 40, 4)
    # the run is a real one: it moved, and its implicit solves converged
    moved = [
        float(np.max(np.abs(np.asarray(x[-1]) - np.asarray(x[0])), initial=0.0))
        for x in jax.tree_util.tree_leaves(full.states)
    ]
    assert max(moved) > 1e-3
    eps = float(np.finfo(np.asarray(full.max_residual).dtype).eps)
    assert float(full.max_residual) < max(1e-10, 100 * eps)


# float32: the LGVI (SO(3) kernel and the generic path), its composition and the splitting carry
# a compensated momentum (Pi, Pi_lo); Solution.method_state hands Pi_lo (and Pi before its
# rounding into the state) to the continued run
F32_CASES = [
    "LGVI free body",
    "LGVI heavy top",
    "LGVI SE(3)",
    "RigidBodySplitting",
    "Composition(LGVI)",
]


@pytest.mark.parametrize(
    "name",
    [pytest.param(n, marks=[] if n == "LGVI free body" else [pytest.mark.long]) for n in F32_CASES],
)
def test_float32_continued_run_with_method_state_is_bitwise(name, tmp_path):
    system, method, s0, dt = CASES[name]()
    s0 = jax.tree_util.tree_map(lambda x: jnp.asarray(x, jnp.float32), s0)
    full = _assert_restart_bitwise(system, method, s0, dt, 400, 100)
    assert set(full.method_state) == {"momentum", "momentum_lo"}
    # momentum_lo is the rounding error of the state's momentum: at most half an ulp
    mu = np.asarray(jax.tree_util.tree_leaves(full.final_state)[-1])
    lo = np.asarray(full.method_state["momentum_lo"])
    assert np.all(np.abs(lo) <= np.spacing(np.abs(mu)) / 2)
    # through .npz: the method state round-trips bitwise
    loaded, _, _ = gj.load_solution(full.save(tmp_path / "run.npz"), state_template=s0)
    for key, value in full.method_state.items():
        np.testing.assert_array_equal(np.asarray(loaded.method_state[key]), np.asarray(value))


def test_method_state_errors_name_the_argument():
    system, method, s0, dt = CASES["LGVI free body"]()
    s32 = jax.tree_util.tree_map(lambda x: jnp.asarray(x, jnp.float32), s0)
    good = {"momentum": s32.Pi, "momentum_lo": jnp.zeros(3, jnp.float32)}
    with pytest.raises(ValueError, match="'method_state'.*expected nothing"):
        gj.simulate(system, method, s0, dt, 4, method_state=good)  # float64: no compensation
    with pytest.raises(ValueError, match="'method_state'.*expected"):
        gj.simulate(system, method, s32, dt, 4, method_state={"momentum": s32.Pi})
    with pytest.raises(ValueError, match="'method_state' does not belong to state0"):
        gj.simulate(system, method, s32, dt, 4, method_state={**good, "momentum": s32.Pi + 1e-3})
    with pytest.raises(ValueError, match="'method_state' cannot be combined with 'adjoint'"):
        gj.simulate(system, method, s32, dt, 4, method_state=good, adjoint=gj.ReversibleAdjoint())


def test_continued_run_with_save_every_1_and_controls():
    """``save_every=1`` (the default: one loop over the steps) and a control array (scanned in
    chunks inside each block) keep the guarantee."""
    system, method, s0, dt = CASES["LGVI free body"]()
    _assert_restart_bitwise(system, method, s0, dt, 8, 1)
    u = 0.1 * jnp.sin(jnp.arange(48.0)[:, None] * jnp.array([0.3, 0.7, 1.1]))
    _assert_restart_bitwise(system, method, s0, dt, 48, 12, controls=u)


def test_save_load_continue_is_bitwise(tmp_path):
    """Through ``.npz``: the loaded state and the system rebuilt from the file continue the run
    bitwise.  The sleigh over 1e5 steps, restarted at step 5e4 (the soak's case): there the Newton
    seed carried by NonholonomicVI and the one recomputed from the saved state differed in the
    last bit (a 9e-143 difference at the end before ``carry_beyond_state``)."""
    sleigh, method, s0, dt = CASES["NonholonomicVI sleigh"]()
    n, save = 100_000, 10_000
    full = gj.simulate(sleigh, method, s0, dt, n, save_every=save)
    first = gj.simulate(sleigh, method, s0, dt, n // 2, save_every=save)
    loaded, system, _ = gj.load_solution(
        first.save(tmp_path / "run.npz", system=sleigh), sleigh, state_template=s0
    )
    cont = gj.simulate(
        system, method, loaded.final_state, dt, n // 2, save_every=save, t0=loaded.times[-1]
    )
    k = len(cont.times)
    for x, y in zip(
        jax.tree_util.tree_leaves(
            jax.tree_util.tree_map(lambda a: a[-k:], (full.times, full.states))
        ),
        jax.tree_util.tree_leaves((cont.times, cont.states)),
        strict=True,
    ):
        np.testing.assert_array_equal(np.asarray(y), np.asarray(x))


def test_final_state_is_the_last_saved_state(tmp_path):
    """``Solution.final_state`` is an output of the run's own program (no indexing program under
    an eager gradient): bitwise ``states[-1]`` for a run and a loaded file, and a
    loss of it has the gradient of the same loss of ``states[-1]``."""
    system, method, s0, dt = CASES["LGVI free body"]()
    sol = gj.simulate(system, method, s0, dt, 20, save_every=5)
    loaded, _, _ = gj.load_solution(sol.save(tmp_path / "run.npz"))
    for run in (sol, loaded):
        for x, y in zip(
            jax.tree_util.tree_leaves(run.final_state),
            jax.tree_util.tree_leaves(jax.tree_util.tree_map(lambda a: a[-1], run.states)),
            strict=True,
        ):
            np.testing.assert_array_equal(np.asarray(x), np.asarray(y))

    grads = jax.jit(
        lambda p: [jax.grad(_loss_of_last_state)(p, None, final) for final in (True, False)]
    )(s0.Pi)
    np.testing.assert_array_equal(*grads)


def _loss_of_last_state(pi0, adjoint, final):
    system, method, s0, dt = CASES["LGVI free body"]()
    run = gj.simulate(
        system, method, gj.RigidBodyState(s0.R, pi0), dt, 20, save_every=5, adjoint=adjoint
    )
    s = run.final_state if final else jax.tree_util.tree_map(lambda a: a[-1], run.states)
    return jnp.dot(jnp.array([0.3, -1.0, 0.7]), s.Pi) + jnp.sum(s.R[0])


@pytest.mark.long
def test_final_state_cotangent_under_the_reversible_adjoint():
    """The reversible adjoint's backward pass adds the cotangent of ``final_state`` to the last
    saved state's: the same gradient as plain reverse mode (the same VJPs at states rebuilt to
    round-off, ~1e-15)."""
    s0 = CASES["LGVI free body"]()[2]
    ref = jax.grad(_loss_of_last_state)(s0.Pi, None, False)
    rev = jax.grad(_loss_of_last_state)(s0.Pi, gj.ReversibleAdjoint(), True)
    np.testing.assert_allclose(rev, ref, rtol=1e-12, atol=1e-14)
