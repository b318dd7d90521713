"""Impacts: impact times, bounce heights and post-impact motion against closed forms, the jump
law (tangential momentum, Newton restitution, energy), constraints, gradients, bad input."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as hst
from hypothesis.extra import numpy as hnp

import geomjax as gj

from .helpers import G0, gravity_particle


@eqx.filter_jit
def impact_run(system, method, st, dt, n):
    """``n`` steps of ``method.solve_step``: states (initial one first), impact times, impulses."""

    def body(carry, _):
        s, t = carry
        s1, res, info = method.solve_step(system, s, dt, None, t)
        return (s1, t + dt), (s1, res, info["impact_time"], info["impulse"])

    _, (states, res, times, imp) = jax.lax.scan(body, (st, jnp.zeros(())), None, length=n)
    states = jax.tree.map(lambda a, b: jnp.concatenate([a[None], b]), st, states)
    return states, res, times, imp


def ball_exact(t, H, vx, e):
    """Closed form of a ball dropped from height H onto y = 0: impact k at t_k, speed e^k v1."""
    t, y, v = np.asarray(t, float), np.zeros_like(np.asarray(t, float)), 0 * np.asarray(t, float)
    t1 = np.sqrt(2 * H / G0)
    times, speeds = [t1], [G0 * t1]
    for _ in range(40):
        speeds.append(e * speeds[-1])
        times.append(times[-1] + 2 * speeds[-1] / G0)
    y = H - 0.5 * G0 * t**2
    v = -G0 * t
    for tk, sk in zip(times[:-1], speeds[1:], strict=True):
        after = t > tk
        y = np.where(after, sk * (t - tk) - 0.5 * G0 * (t - tk) ** 2, y)
        v = np.where(after, sk - G0 * (t - tk), v)
    return np.stack([vx * t, y], -1), np.stack([vx + 0 * t, v], -1), np.array(times), speeds


@pytest.mark.parametrize(
    ("rule", "e", "scheme"),
    [("midpoint", 1.0, None), ("trapezoidal", 0.7, None), ("midpoint", 0.7, "yoshida4")],
)
def test_ball_on_plane_against_closed_form(rule, e, scheme):
    """Both discrete Lagrangians are exact on parabolas and the impact instant is a converged
    root, so the trajectory, the impact times and the bounce heights match the closed form to
    round-off (1e-10 allows ~1e5 ulps over 200 steps).  For e = 0.7 the bounces accumulate at
    t = t1 (1 + 2e/(1 − e)) = 2.56 (Zeno), beyond the 2.0 simulated.  A composition of exact
    steps (``scheme``, inside ``Impacts``) is exact too."""
    system = gravity_particle(2)
    method = gj.DiscreteEulerLagrange(rule=rule)
    if scheme is not None:
        method = gj.Composition(method, scheme)
    method = gj.Impacts(lambda q: q[1], restitution=e, method=method)
    H, vx, dt, n = 1.0, 0.7, 0.01, 200
    st = system.make_state(jnp.array([0.0, H]), jnp.array([vx, 0.0]))
    states, res, times, imp = impact_run(system, method, st, dt, n)
    ts = dt * np.arange(n + 1)
    q, v, t_imp, speeds = ball_exact(ts, H, vx, e)
    np.testing.assert_allclose(states.q, q, atol=1e-10)
    np.testing.assert_allclose(jax.vmap(system.velocity)(states.q, states.p), v, atol=1e-9)
    assert float(jnp.max(res)) < 1e-12
    got = np.asarray(times)[np.isfinite(np.asarray(times))]
    k = len(got)
    assert k == np.sum(t_imp < n * dt) >= 2
    np.testing.assert_allclose(got, t_imp[:k], atol=1e-12)
    # normal impulses Λ = (1 + e) v⁻ (unit mass), tangential momentum untouched
    np.testing.assert_allclose(
        np.asarray(imp)[np.asarray(imp) != 0], (1 + e) * np.array(speeds[:k]), rtol=1e-9
    )
    assert float(jnp.max(jnp.abs(states.p[:, 0] - vx))) == 0.0
    # bounce heights e^{2k} H from the saved apexes' closed form, energy after each impact
    E = np.asarray(jax.vmap(system.energy)(states))
    kin_n = 0.5 * np.array(speeds[:k]) ** 2
    expect = 0.5 * vx**2 + G0 * H - np.concatenate([[0.0], np.cumsum((1 - e**2) * kin_n)])
    which = np.searchsorted(t_imp[:k], ts, side="left")
    np.testing.assert_allclose(E, expect[which], rtol=1e-9)  # observed 5e-11


def test_ball_on_curved_surface_against_closed_form():
    """Drop onto the unit circle f = |q|² − 1 ≥ 0 from (x0, H) at rest: impact at
    (x0, sqrt(1 − x0²)) at t_c = sqrt(2(H − y_c)/g), reflection v⁺ = v⁻ − (1 + e)(v⁻·n)n, then a
    parabola; apex height y_c + (v⁺_y)²/2g.  Trapezoidal DEL is exact on the free flights."""
    e, x0, H = 0.8, 0.3, 1.5
    system = gravity_particle(2)
    method = gj.Impacts(
        lambda q: q @ q - 1.0, restitution=e, method=gj.DiscreteEulerLagrange(rule="trapezoidal")
    )
    dt, n = 0.01, 80
    st = system.make_state(jnp.array([x0, H]), jnp.zeros(2))
    states, _, times, _ = impact_run(system, method, st, dt, n)
    yc = np.sqrt(1 - x0**2)
    tc = np.sqrt(2 * (H - yc) / G0)
    nrm = np.array([x0, yc])
    vm = np.array([0.0, -G0 * tc])
    vp = vm - (1 + e) * (vm @ nrm) * nrm
    ts = dt * np.arange(n + 1)
    after = (ts - tc)[:, None]
    q = np.where(
        after > 0,
        np.array([x0, yc])
        + vp * after
        - 0.5 * G0 * np.array([0.0, 1.0]) * np.maximum(after, 0) ** 2,
        np.stack([x0 + 0 * ts, H - 0.5 * G0 * ts**2], -1),
    )
    assert np.all(np.asarray(jax.vmap(lambda q: q @ q)(states.q)) >= 1 - 1e-12)
    np.testing.assert_allclose(states.q, q, atol=1e-10)
    got = np.asarray(times)[np.isfinite(np.asarray(times))]
    np.testing.assert_allclose(got, [tc], atol=1e-12)
    apex = yc + vp[1] ** 2 / (2 * G0)
    t_apex = tc + vp[1] / G0
    i = int(np.ceil(t_apex / dt))
    assert abs(float(states.q[i, 1]) - (apex - 0.5 * G0 * (i * dt - t_apex) ** 2)) < 1e-10


_M = jnp.array([[2.0, 0.3, 0.1], [0.3, 1.0, -0.2], [0.1, -0.2, 1.5]])
_DF = jnp.array([-0.2, 1.0, 0.4])
_TILTED = gj.LagrangianSystem(metric=_M)


def _plane(q):
    return q @ _DF


@eqx.filter_jit
def _jump(e, q, v):
    st = _TILTED.make_state(q, v)
    new, res, _ = gj.Impacts(_plane, restitution=e).jump(_TILTED, st)
    return st, new, res, _TILTED.velocity(q, new.p), _TILTED.energy(new) - _TILTED.energy(st)


_vec = hnp.arrays(np.float64, 3, elements=hst.floats(-2.0, 2.0))


@given(e=hst.floats(0.0, 1.0), q=_vec, v=_vec)
def test_jump_law_general_metric(e, q, v):
    """The jump at a tilted plane with a non-identity mass metric: tangential momentum ⟨p, w⟩
    (df·w = 0) unchanged, df·q̇⁺ = −e df·q̇⁻, kinetic energy loss (1 − e²) K_n with
    K_n = ½ (df·q̇⁻)² / (df M⁻¹ dfᵀ)."""
    q = jnp.asarray(q) - (jnp.asarray(q) @ _DF) / (_DF @ _DF) * _DF  # on the plane
    v = jnp.asarray(v)
    v = v - (abs(v @ _DF) + 0.5) * _DF / (_DF @ _DF)  # approaching
    old, new, res, vp, dE = _jump(jnp.asarray(e), q, v)
    for w in (jnp.array([1.0, 0.2, 0.0]), jnp.array([0.0, -0.4, 1.0])):  # df·w = 0
        np.testing.assert_allclose(new.p @ w, old.p @ w, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(_DF @ vp, -e * (_DF @ v), rtol=1e-12, atol=1e-12)
    Kn = 0.5 * (_DF @ v) ** 2 / (_DF @ jnp.linalg.solve(_M, _DF))
    np.testing.assert_allclose(dE, -(1 - e**2) * Kn, rtol=1e-11, atol=1e-12)
    assert float(res) < 1e-12


@pytest.mark.long
def test_pendulum_hitting_a_wall_with_rattle():
    """Impacts around RATTLE: a spherical pendulum bouncing off the wall x ≥ −0.5 (e = 1): the
    constraint and the hidden constraint stay at round-off through impacts and the energy error
    stays at the RATTLE level (no jump from the impacts)."""
    system = gravity_particle(3)
    sphere = lambda q: jnp.array([0.5 * (q @ q - 1.0)])  # noqa: E731
    method = gj.Impacts(lambda q: q[0] + 0.5, restitution=1.0, method=gj.RATTLE(sphere))
    st = method.make_state(
        system, jnp.array([0.6, 0.0, -0.8]), jnp.array([-2.0, 0.5, -1.5]), project=True
    )
    sol = gj.simulate(system, method, st, 0.01, 300)
    q = sol.states.q
    assert float(jnp.min(q[:, 0])) >= -0.5 - 1e-12
    assert float(jnp.min(q[:, 0])) < -0.45  # it did reach the wall
    assert float(jnp.max(jnp.abs(jax.vmap(sphere)(q)))) < 50 * 2.2e-16
    v = jax.vmap(system.velocity)(q, sol.states.p)
    assert float(jnp.max(jnp.abs(jnp.sum(q * v, -1)))) < 1e-13
    E = gj.diagnostics(system, sol)["energy"]
    assert float(jnp.max(jnp.abs(E - E[0]))) < 5e-3  # O(h²) RATTLE error, ~1e-3 observed


@pytest.mark.long
def test_gradients_through_impacts():
    """y(T) after one bounce: y = e v1 (T − t1) − g (T − t1)²/2, v1 = sqrt(2gH), t1 = sqrt(2H/g);
    d/dH and d/de through simulate (IFT on the impact time and the jump) vs the closed form's."""
    system = gravity_particle(2)
    T, dt = 0.8, 0.02

    @jax.jit
    def y_sim(H, e):
        method = gj.Impacts(lambda q: q[1], restitution=e)
        st = gj.variational.VariationalState(
            jnp.array([0.0, 1.0]) * H, jnp.array([0.3, 0.0]), jnp.zeros(0)
        )
        return gj.simulate(system, method, st, dt, round(T / dt)).final_state.q[1]

    def y_exact(H, e):
        v1, t1 = jnp.sqrt(2 * G0 * H), jnp.sqrt(2 * H / G0)
        return e * v1 * (T - t1) - 0.5 * G0 * (T - t1) ** 2

    H, e = jnp.asarray(1.0), jnp.asarray(0.8)
    np.testing.assert_allclose(y_sim(H, e), y_exact(H, e), atol=1e-12)
    g_sim = jax.jit(jax.grad(y_sim, argnums=(0, 1)))(H, e)
    g_ex = jax.grad(y_exact, argnums=(0, 1))(H, e)
    np.testing.assert_allclose(g_sim, g_ex, rtol=1e-9)
    eps = 1e-6
    fd = (y_sim(H + eps, e) - y_sim(H - eps, e)) / (2 * eps)
    np.testing.assert_allclose(g_sim[0], fd, rtol=1e-6)


def test_bad_input():
    system = gravity_particle(2)
    for e in (1.5, -0.1):
        with pytest.raises(ValueError, match="'restitution'"):
            gj.Impacts(lambda q: q[1], restitution=e)
    with pytest.raises(ValueError, match="'surface'"):
        gj.Impacts(1.0)
    st = system.make_state(jnp.array([0.0, -0.1]), jnp.zeros(2))
    with pytest.raises(ValueError, match="'state0.q'.*behind the impact surface"):
        gj.simulate(system, gj.Impacts(lambda q: q[1]), st, 0.01, 2)


def test_float32_bounce():
    """float32: the first impact time to float32 accuracy (≤ 1e3 eps32 · t1) and no penetration
    beyond rounding."""
    system = gravity_particle(2)
    method = gj.Impacts(lambda q: q[1], restitution=0.9)
    st = system.make_state(jnp.array([0.0, 1.0], jnp.float32), jnp.array([0.4, 0.0], jnp.float32))
    states, res, times, _ = impact_run(system, method, st, jnp.float32(0.01), 60)
    assert states.q.dtype == jnp.float32
    t1 = np.sqrt(2.0 / G0)
    got = np.asarray(times)[np.isfinite(np.asarray(times))]
    assert len(got) == 1 and abs(got[0] - t1) < 1e3 * 1.2e-7 * t1
    assert float(jnp.min(states.q[:, 1])) > -1e-5
    assert float(jnp.max(res)) < 1e-4  # relative residuals at float32 rounding
