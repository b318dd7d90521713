"""Impacts that accumulate and resting contact: a ball coming to rest (impact times, energy
levels and the rest state against the closed form), release from a curved surface, several
contacts (a rod dropped on the floor, Newton's cradle), surface parameters with gradients, bad
input."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import geomjax as gj

from .helpers import G0, gravity_particle
from .test_impacts import impact_run


def ball_impacts(H, e, n=60):
    """Closed form of a ball dropped from rest at height H onto y = 0: impact times t_k
    (k = 0, 1, ...) and the normal speeds s_k = e^k v1, s_k the speed arriving at impact k and
    s_{k+1} the speed leaving it."""
    t1, v1 = np.sqrt(2 * H / G0), np.sqrt(2 * G0 * H)
    speeds = v1 * e ** np.arange(n)
    times = t1 + np.concatenate([[0.0], np.cumsum(2 * speeds[1:-1] / G0)])
    return times, speeds


@pytest.mark.parametrize("dtype", [jnp.float64, jnp.float32])
def test_ball_comes_to_rest(dtype):
    """e = 0.5, dt = 1e-3, from height 1 with horizontal velocity 0.3 (the case that used to
    diverge).  Closed form: impacts at t_k = t1 (1 + 2e + … + 2e^{k−1}) accumulating at
    t* = t1 (1 + 2e/(1 − e)); between impacts k and k+1 the energy is ½ vx² + ½ (e^k v1)², i.e.
    the bounce energy scales as e^{2k}.  The method bounces while the next flight 2 e^k v1/g is
    at least one step and lands for good at the first impact K where it is shorter (stated
    criterion, module docstring); then y = 0, q̇_y = 0, the horizontal velocity is kept and the
    contact multiplier is λ = m g.  DEL is exact on parabolas, so the impact times and energies
    are round-off accurate (float64; float32 to its rounding)."""
    e, H, vx, dt, n = 0.5, 1.0, 0.3, 1e-3, 1600
    system = gravity_particle(2)
    method = gj.Impacts(lambda q: q[1], restitution=e)
    st = method.make_state(system, jnp.array([0.0, H], dtype), jnp.array([vx, 0.0], dtype))
    states, res, times, _ = impact_run(system, method, st, jnp.asarray(dt, dtype), n)
    q = np.asarray(states.q, float)
    v = np.asarray(jax.vmap(system.velocity)(states.q, states.p), float)
    lam = np.asarray(states.lam, float)[:, 0]
    assert np.all(np.isfinite(q)) and np.all(np.isfinite(v)) and np.all(np.isfinite(lam))
    eps = float(jnp.finfo(dtype).eps)
    assert float(jnp.max(res)) < 1e3 * eps
    t_k, s_k = ball_impacts(H, e)
    K = int(np.argmax(2 * s_k / G0 < dt)) - 1  # first impact whose next flight is under a step
    assert K == 9  # 2 e^10 v1 / g = 0.88 dt, 2 e^9 v1 / g = 1.8 dt: not a borderline case
    t_star = t_k[0] * (1 + 2 * e / (1 - e))
    got = np.asarray(times, float)
    got = got[np.isfinite(got)]
    tol_t = 1e-10 if dtype == jnp.float64 else 2e3 * eps
    np.testing.assert_allclose(got, t_k[: K + 1], atol=tol_t)  # impacts 0..K, K the landing
    assert 0 < t_star - t_k[K] < dt / (1 - e)
    ts = dt * np.arange(n + 1)
    # energy levels: E − ½ vx² = ½ s_k² after k impacts (k = 0: the drop), 0 at rest
    E = np.asarray(jax.vmap(system.energy)(states), float)
    which = np.searchsorted(t_k[: K + 1], ts, side="left")  # impacts before ts
    expect = 0.5 * vx**2 + np.concatenate([0.5 * s_k[: K + 1] ** 2, [0.0]])[which]
    tol_E = 1e-9 if dtype == jnp.float64 else 300 * eps * (G0 * H)
    np.testing.assert_allclose(E, expect, atol=tol_E)
    # rest after the landing: y = 0, no normal velocity, horizontal velocity kept, λ = g
    after = ts > t_k[K] + dt
    assert after.sum() > 200
    assert np.max(np.abs(q[after, 1])) < 1e2 * eps
    assert np.max(np.abs(v[after, 1])) < 1e3 * eps * G0
    np.testing.assert_allclose(v[:, 0], vx, rtol=10 * eps)
    # x = vx t up to the rounding of the accumulated time and position (n eps)
    np.testing.assert_allclose(q[after, 0], vx * ts[after], atol=n * eps)
    np.testing.assert_allclose(lam[after], G0, rtol=1e2 * eps)
    assert np.all(lam[ts < t_k[K] - dt] == 0.0)  # in flight: no contact force
    assert float(np.min(q[:, 1])) > -1e2 * eps
