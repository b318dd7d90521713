"""float32 LGVI over long runs: no drift of the Casimirs, energy error at the method's own level.

The reference is the conservation law: the LGVI's momentum update ``Pi' = cay(h xi)^T b`` is an
exact rotation of ``b`` (free body: ``b = Pi``) whatever the Newton residual, so ``|Pi|²`` changes
by round-off only.  Unbiased rounding, one per step, would random-walk to ``√N·u`` relative
(``u = 2^-24``, ``N`` steps); the former update, with ``cay(h xi)`` rounded as a matrix, drifted
in one direction by 3–28× that over 1e5 steps.  With the rotation applied in increment form and
the momentum carried with compensated summation (the float32 default), each saved ``Pi`` is off
by the rounding of one step, ``O(u)``: the bound used is ``√N·u/4`` at ``N = 1e4`` (1.5e-6; the
runs stay below 2e-7, an 8× margin; 1e5 steps under ``GEOMJAX_FULL=1``).

The energy: the float32 run's largest error may exceed the float64 run's (the method's own
truncation error, the same orbit) by at most ``√N·u/4`` as well.
"""

import math
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import geomjax as gj

FULL = os.environ.get("GEOMJAX_FULL", "0") == "1"
STEPS = 100_000 if FULL else 10_000
# `make test-full` (CI) runs the 1e5-step versions
pytestmark = pytest.mark.slow
SAVE = 100
U32 = 2.0**-24
BOUND = 0.25 * math.sqrt(STEPS) * U32
MOMENTS = (1.0, 2.0, 3.0)


def _run(method, dtype):
    body = gj.RigidBody(jnp.asarray(MOMENTS, dtype))

    @jax.jit
    def run(pi0, dt):
        state = gj.RigidBodyState(jnp.eye(3, dtype=dtype), pi0)
        return gj.simulate(body, method, state, dt, STEPS, save_every=SAVE).states.Pi

    return run


RUN32 = _run(gj.LGVI(), jnp.float32)
RUN64 = _run(gj.LGVI(), jnp.float64)


def _rel(P, f):
    v = f(np.asarray(P, np.float64))
    return np.max(np.abs(v / v[0] - 1.0))


def _casimir(P):
    return np.sum(P**2, -1)


def _energy(P):
    return 0.5 * np.sum(P**2 / np.asarray(MOMENTS), -1)


_component = st.floats(-1.0, 1.0, allow_nan=False)


@settings(max_examples=6 if not FULL else 20, deadline=None)
@given(
    direction=st.tuples(_component, _component, _component).filter(
        lambda v: sum(x * x for x in v) > 1e-2
    ),
    scale=st.floats(0.1, 2.0),
    dt=st.sampled_from([1e-3, 3e-3, 1e-2]),
)
def test_float32_casimir_does_not_drift(direction, scale, dt):
    v = np.asarray(direction)
    pi0 = scale * v / np.linalg.norm(v)
    # near the unstable middle axis as well as generic momenta: the increments of the middle
    # component are then below half an ulp for many steps (stagnation without compensation)
    P32 = RUN32(jnp.asarray(pi0, jnp.float32), jnp.float32(dt))
    assert P32.dtype == jnp.float32
    assert _rel(P32, _casimir) <= BOUND
    P64 = RUN64(jnp.asarray(np.asarray(pi0, np.float32), jnp.float64), dt)
    assert _rel(P32, _energy) <= _rel(P64, _energy) + BOUND


@pytest.mark.parametrize("pi0", [(0.01, 1.0, 0.01), (0.3, 0.5, 0.9)])
@pytest.mark.parametrize("dt", [1e-2, 1e-3])
def test_float32_casimir_issue_cases(pi0, dt):
    # the four cases where the former matrix-form update drifted by 5e-5..5.3e-4 over 1e5 steps
    P32 = RUN32(jnp.asarray(pi0, jnp.float32), jnp.float32(dt))
    assert _rel(P32, _casimir) <= BOUND


def test_uncompensated_increment_form_is_a_random_walk():
    # compensate=False keeps the increment form only: on a generic orbit (no stagnation) the
    # error of |Pi|² is the random walk of one rounding per step, bounded by 4·√N·u (a 4σ-type
    # margin on the random walk's scale; the former matrix form reached 10-28× √N·u over 1e5)
    run = _run(gj.LGVI(compensate=False), jnp.float32)
    P = run(jnp.asarray((0.3, 0.5, 0.9), jnp.float32), jnp.float32(1e-2))
    assert _rel(P, _casimir) <= 4 * math.sqrt(STEPS) * U32


def test_se3_body_float32_casimirs():
    # generic-group path (SE(3)): the Casimirs |p|² and pi·p of the free body, compensated carry
    body = gj.RigidBodySE3(2.0, jnp.diag(jnp.asarray(MOMENTS)), jnp.asarray([0.1, 0.0, 0.05]))
    body = gj.EulerPoincareSystem(gj.SE3, body.inertia.astype(jnp.float32))
    mu0 = jnp.asarray([0.3, 0.5, 0.9, 0.2, -0.1, 0.4], jnp.float32)
    steps = STEPS // 5
    sol = gj.simulate(
        body,
        gj.LGVI(),
        gj.LieGroupState(jnp.eye(4, dtype=jnp.float32), mu0),
        1e-3,
        steps,
        save_every=SAVE,
    )
    mu = np.asarray(sol.states.mu, np.float64)
    bound = 0.25 * math.sqrt(steps) * U32
    pp, pip = np.sum(mu[:, 3:] ** 2, -1), np.sum(mu[:, :3] * mu[:, 3:], -1)
    assert np.max(np.abs(pp / pp[0] - 1)) <= bound
    assert np.max(np.abs(pip / pip[0] - 1)) <= bound


def test_float32_energy_follows_float64_run():
    # The float32 run against the float64 run from the same (rounded) state: their energies
    # differ by round-off only (the O(dt²) oscillation is shared; the phase shift between the
    # runs, ~√N·u, changes it by ~1e-11).  A Newton iteration stopped while its last error,
    # ~1e-9 relative, still had one sign made the float32 energy drift linearly (4.4e-11 a step
    # at dt 0.01: 8.8e-7 after 2e4 steps); the bound is 8u = 4.8e-7 (the compensated runs stay
    # near 1e-7: one rounding of each saved Pi, a few u).
    steps = 20_000
    R0 = gj.SO3.exp(jnp.asarray([0.3, -0.2, 0.5]))
    pi0 = np.asarray([0.8, -0.3, 1.1], np.float32)
    E = []
    for dtype in (jnp.float32, jnp.float64):
        body = gj.RigidBody(jnp.asarray(MOMENTS, dtype))
        state = gj.RigidBodyState(jnp.asarray(R0, dtype), jnp.asarray(pi0, dtype))
        Pi = gj.simulate(body, gj.LGVI(), state, 0.01, steps, save_every=SAVE).states.Pi
        E.append(_energy(np.asarray(Pi, np.float64)))
    assert np.max(np.abs(E[0] - E[1])) / E[1][0] <= 8 * U32


def test_se3_compensated_momentum_accumulates_increments_below_half_an_ulp():
    """The compensated accumulation itself, on the generic-group (SE(3)) path: a body at rest
    in rotation translates along x under a constant body force along x, so each step adds the
    same increment ``h f`` to ``p_x`` exactly (no rotation, ``p × v = 0``).  The increment,
    1/6 of an ulp of ``p_x``, is lost entirely by plain float32 addition; the compensated sum
    equals the float64 sum of the 1e4 increments to one ulp."""
    steps, h, f, p0 = 10_000, 1e-2, 2e-6, 1.0  # h f = 2e-8 < ulp(1)/2 = 6e-8
    inertia = jnp.diag(jnp.asarray([1.0, 2.0, 3.0, 2.0, 2.0, 2.0], jnp.float32))
    body = gj.EulerPoincareSystem(gj.SE3, inertia)
    mu0 = jnp.asarray([0.0, 0.0, 0.0, p0, 0.0, 0.0], jnp.float32)
    state0 = gj.LieGroupState(jnp.eye(4, dtype=jnp.float32), mu0)
    u = jnp.zeros((steps, 6), jnp.float32).at[:, 3].set(f)
    exact = p0 + steps * np.float64(np.float32(h)) * np.float64(np.float32(f))  # float64 sum
    ulp = np.spacing(np.float32(exact))
    out = {}
    for compensate in (True, False):
        sol = gj.simulate(
            body, gj.LGVI(compensate=compensate), state0, h, steps, u, save_every=steps
        )
        out[compensate] = np.float64(sol.final_state.mu[3])
        assert np.max(np.abs(np.asarray(sol.final_state.mu)[[0, 1, 2, 4, 5]])) <= 1e-20
    assert abs(out[True] - exact) <= ulp
    assert out[False] == np.float32(p0)  # plain float32: every increment rounded away
