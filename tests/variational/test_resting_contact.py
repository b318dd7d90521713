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


@pytest.mark.long
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


# --- a planar rod (x, y, θ) of mass 1 and length 1 with both ends above the floor ------------
ROD_I = 1.0 / 12.0
ROD = gj.LagrangianSystem(
    metric=jnp.diag(jnp.array([1.0, 1.0, ROD_I])), potential=lambda q: G0 * q[1]
)


def rod_ends(q):
    """Heights of the two ends (x ∓ ½ cos θ, y ∓ ½ sin θ)."""
    return jnp.array([q[1] - 0.5 * jnp.sin(q[2]), q[1] + 0.5 * jnp.sin(q[2])])


ROD_IMPACTS = gj.Impacts(rod_ends, restitution=0.5)


@pytest.mark.long
def test_rod_dropped_flat_and_tilted():
    """Flat (θ = 0): both ends hit at once at the ball's impact times; the simultaneous Newton
    law keeps the rod flat (θ̇⁺ = 0, v_y⁺ = −e v_y⁻, impulses (1 + e) m |v_y⁻| / 2 each), the
    impacts accumulate and the rod rests on both ends with λ = (m g/2, m g/2).

    Tilted (θ0 = 0.2, at rest): the lower end hits first at t_c = sqrt(2 (y0 − ½ sin θ0)/g);
    rigid-body impulse equations m Δv = Λ n, I Δω = (r × Λ n)_z, r = −½ (cos θ0, sin θ0),
    n = e_y, and Newton's law at the end give Λ = (1 + e) g t_c / (1/m + ¼ cos² θ0 / I),
    v_y⁺ = −g t_c + Λ/m, θ̇⁺ = −½ cos θ0 Λ / I; then a free flight (exact for DEL)."""
    e, dt, n = 0.5, 1e-3, 1500
    st = ROD_IMPACTS.make_state(ROD, jnp.array([0.0, 1.0, 0.0]), jnp.zeros(3))
    states, res, times, imp = impact_run(ROD, ROD_IMPACTS, st, dt, n)
    assert float(jnp.max(res)) < 1e-12
    t_k, s_k = ball_impacts(1.0, e)
    got = np.asarray(times)
    hit = np.isfinite(got)
    K = int(np.argmax(2 * s_k / G0 < dt)) - 1
    np.testing.assert_allclose(got[hit], t_k[: K + 1], atol=1e-10)
    np.testing.assert_allclose(
        np.asarray(imp)[hit][:K], np.repeat((1 + e) * s_k[:K, None] / 2, 2, 1), rtol=1e-9
    )
    assert float(jnp.max(jnp.abs(states.q[:, 2]))) < 1e-14  # stays flat
    rest = dt * np.arange(n + 1) > t_k[K] + dt
    assert rest.sum() > 100
    np.testing.assert_allclose(np.asarray(states.lam)[rest], G0 / 2, rtol=1e-12)
    assert float(jnp.max(jnp.abs(states.q[rest, 1]))) < 1e-14

    th0, y0 = 0.2, 1.0
    st = ROD_IMPACTS.make_state(ROD, jnp.array([0.0, y0, th0]), jnp.zeros(3))
    states, res, times, _ = impact_run(ROD, ROD_IMPACTS, st, dt, 500)
    tc = np.sqrt(2 * (y0 - 0.5 * np.sin(th0)) / G0)
    Lam = (1 + e) * G0 * tc / (1.0 + 0.25 * np.cos(th0) ** 2 / ROD_I)
    vy, w = -G0 * tc + Lam, -0.5 * np.cos(th0) * Lam / ROD_I
    got = np.asarray(times)
    i = int(np.argmax(np.isfinite(got)))
    np.testing.assert_allclose(got[i], tc, atol=1e-12)
    # the states after the impact until the next one: free flight from the impact
    j = int(np.argmax(np.isfinite(got[i + 1 :]))) + i + 1
    assert j > i + 5
    ts = dt * np.arange(i + 1, j + 1) - tc
    yc = y0 - 0.5 * G0 * tc**2
    v = np.asarray(jax.vmap(ROD.velocity)(states.q, states.p))[i + 1 : j + 1]
    np.testing.assert_allclose(v[:, 1], vy - G0 * ts, atol=1e-11)
    np.testing.assert_allclose(v[:, 2], w, rtol=1e-11)
    np.testing.assert_allclose(v[:, 0], 0.0, atol=1e-14)
    np.testing.assert_allclose(states.q[i + 1 : j + 1, 2], th0 + w * ts, atol=1e-11)
    np.testing.assert_allclose(
        states.q[i + 1 : j + 1, 1], yc + vy * ts - 0.5 * G0 * ts**2, atol=1e-11
    )


@eqx.filter_jit
def _rod_step(impacts, state, dt):
    """One step of the rod (the restitution an array: one compilation for the tests below)."""
    return impacts.solve_step(ROD, state, dt)


@pytest.mark.long  # one compilation of the rod's step, shared: ~5-12 s
def test_rod_landing_end_stays_on_the_floor():
    """The lower end of a nearly flat, slowly turning rod (θ = −2.8e-3, end 2 2e-6 above the
    floor, v_y = −9.1e-3, θ̇ = 1.6e-2) hits within the step with an outgoing flight
    2 e v_n / g ≈ 6e-4 < dt: it lands for good in the impact's first round.  The round that
    follows gives the landed contact an impulse of round-off size; were it dropped for a negative
    sign, the contact would be closed but unconstrained and the next trial step (gravity) would
    push the end through the floor, phase after phase (the step's residual then reports the
    penetration, 8.7e-7 before the fix).  Checked against the geometry: the step ends with end 2
    resting (active, f_2 = 0 and zero normal velocity to round-off), end 1 above, and no
    penetration."""
    dt = 1e-3
    st = ROD_IMPACTS.make_state(
        ROD,
        jnp.array([0.0, 0.00139592, -0.00278779]),
        p=jnp.array([0.0, -0.0090995, 0.00136203]),
    )
    f0 = np.asarray(rod_ends(st.q))
    assert f0[1] > 0 and f0[1] < 1e-5  # end 2 just above the floor: it hits within the step
    new, res, info = _rod_step(gj.Impacts(rod_ends, restitution=jnp.asarray(0.5)), st, dt)
    assert float(res) < 1e-12
    f1 = np.asarray(rod_ends(new.q))
    assert f1[0] > 1e-3 and abs(f1[1]) < 1e-15
    assert np.asarray(info["active"]).tolist() == [False, True]
    vn = jax.jacfwd(rod_ends)(new.q) @ ROD.velocity(new.q, new.p)
    assert abs(float(vn[1])) < 1e-15
    assert float(new.lam[1]) > 0


@pytest.mark.long  # one compilation of the rod's step, shared: ~5-12 s
def test_landing_criterion_uses_the_acceleration_with_the_resting_contacts():
    """The rod rests on end 1 (θ ≈ 2.7e-6, λ = (m g/4, 0)) and end 2 arrives at 7.8e-3 m/s with
    e = 0.6.  Turning about the resting end, end 2 falls at 3g/2 (θ̈ = −(g/2)/(1/12 + 1/4)):
    its outgoing flight 2 v⁺/(3g/2) ≈ 0.63 ms is shorter than the step (1 ms), so the impact is
    the landing (module docstring's criterion, with the acceleration of the constrained
    motion); judged with the free fall g, the flight (≈ 0.95 ms) would outlast the rest of the
    step and end 2 would be hit again behind the surface within it.  Checked: one impact, both
    ends resting at the end of the step, no penetration, the static λ = (m g/2, m g/2)."""
    e, dt = 0.6, 1e-3
    imp = gj.Impacts(rod_ends, restitution=jnp.asarray(e))
    th = 1.35091685e-06
    q = jnp.array([0.0, 0.5 * np.sin(th), th])  # end 1 on the floor
    st = imp.make_state(ROD, q, p=jnp.array([0.0, -0.00389118, -0.00064853]))
    assert np.asarray(st.lam[1]) == 0 and float(st.lam[0]) > 0  # end 1 rests, end 2 does not
    vn2 = float((jax.jacfwd(rod_ends)(st.q) @ ROD.velocity(st.q, st.p))[1])
    new, res, info = _rod_step(imp, st, dt)
    t_imp = float(info["impact_time"])
    vplus = e * (abs(vn2) + 1.5 * G0 * t_imp)  # arrival speed: + the pivot's 3g/2 until then
    assert 2 * vplus / G0 > dt - t_imp  # free fall: the flight outlasts the step
    assert 2 * vplus / (1.5 * G0) < dt  # turning about end 1: shorter than a step
    assert int(info["n_impacts"]) == 1 and np.asarray(info["active"]).all()
    assert float(res) < 1e-12 and float(jnp.min(rod_ends(new.q))) > -1e-15
    np.testing.assert_allclose(np.asarray(new.lam), G0 / 2, rtol=1e-9)


@pytest.mark.long
@pytest.mark.parametrize(
    "th0, e",
    [
        (0.1, 0.5),
        (0.2, 0.5),
        (-0.3, 0.5),
        # drawn at random (tilt in ±0.7, e in [0.05, 0.9]): runs that ended behind the floor
        # before the landing criterion used the acceleration with the resting contacts
        (0.4127555772777217, 0.27456996589973837),
        (0.10663577576717986, 0.6023746488161783),
        (-0.46641442469453565, 0.5902755657606898),
        # ... and before max_impacts defaulted to two per contact (three impacts in a step)
        (-0.23837559690127097, 0.5539998653886414),
        (0.6463200711293013, 0.21262533714862025),
        # ... and before a located impact checked that no other contact had crossed first
        (0.0871719278925992, 0.8084040934716465),
    ],
)
def test_tilted_rod_comes_to_rest_without_penetration(th0, e):
    """A tilted rod dropped from rest rocks from end to end while its impacts accumulate and
    comes to rest flat on both ends: every step's residual stays at round-off (no unresolved
    crossing), no end goes below the floor beyond round-off, and the rest state is the static
    one, θ = 0, y = 0, λ = (m g/2, m g/2) (equilibrium of forces and moments)."""
    imp = gj.Impacts(rod_ends, restitution=jnp.asarray(e))  # an array: one compilation
    st = imp.make_state(ROD, jnp.array([0.0, 1.0, th0]), jnp.zeros(3))
    sol = gj.simulate(ROD, imp, st, 1e-3, 4000)
    assert float(sol.max_residual) < 1e-12
    heights = np.asarray(jax.vmap(rod_ends)(sol.states.q))
    assert heights.min() > -1e-14
    np.testing.assert_allclose(np.asarray(sol.states.lam[-1]), G0 / 2, rtol=1e-12)
    assert abs(float(sol.states.q[-1, 2])) < 1e-14 and abs(float(sol.states.q[-1, 1])) < 1e-14


def cradle_reference(v, e, rounds=10):
    """Sequential pairwise impacts of equal balls in contact (x_i touching x_{i+1}): the
    textbook two-ball law v1⁺ = ((1 − e) v1 + (1 + e) v2)/2, v2⁺ = ((1 + e) v1 + (1 − e) v2)/2
    applied to the approaching pairs in index order until none approaches."""
    v = list(v)
    for _ in range(rounds):
        for i in range(len(v) - 1):
            if v[i] > v[i + 1]:
                a, b = v[i], v[i + 1]
                v[i], v[i + 1] = ((1 - e) * a + (1 + e) * b) / 2, ((1 + e) * a + (1 - e) * b) / 2
    return np.array(v)


@pytest.mark.long
@pytest.mark.parametrize("e", [1.0, 0.8])
def test_newtons_cradle(e):
    """Three equal balls (radius 0.1) on a line, the first moving at 1 towards the other two,
    which touch and rest.  The impact propagates along the chain within one instant (rounds of
    the impact law, module docstring): e = 1 ends as (0, 0, 1); e = 0.8 as the sequential
    pairwise reference (three rounds: 1–2, 2–3, 1–2).  Momentum is conserved exactly."""
    r = 0.1
    system = gj.LagrangianSystem(metric=jnp.eye(3))
    gaps = lambda q: jnp.array([q[1] - q[0] - 2 * r, q[2] - q[1] - 2 * r])  # noqa: E731
    method = gj.Impacts(gaps, restitution=jnp.asarray(e), jump_rounds=3)
    st = method.make_state(system, jnp.array([-0.5, 0.0, 2 * r]), jnp.array([1.0, 0.0, 0.0]))
    sol = gj.simulate(system, method, st, 0.01, 50)
    v = np.asarray(jax.vmap(system.velocity)(sol.states.q, sol.states.p))
    np.testing.assert_allclose(v[-1], cradle_reference([1.0, 0.0, 0.0], e), atol=1e-14)
    np.testing.assert_allclose(v.sum(1), 1.0, rtol=1e-14)
    assert float(sol.stats["max_residual"]) < 1e-12
    # the impact at t = 0.3 (gap 0.3 closed at speed 1); afterwards free motion
    ts = np.asarray(sol.times)
    after = ts > 0.3 + 1e-9
    q_exp = np.array([-0.5 + 0.3, 0.0, 2 * r])[None] + v[-1][None] * (ts[after, None] - 0.3)
    np.testing.assert_allclose(sol.states.q[after], q_exp, atol=1e-13)


@pytest.mark.long
def test_sliding_off_a_circle_releases():
    """A particle released at rest at angle θ0 from the top of the circle |q| = 1 (f = |q|² − 1
    ≥ 0, outside) slides on it (resting contact from the start: λ > 0) and leaves it where
    the normal force vanishes, cos θ = (2/3) cos θ0 (energy v² = 2 g (cos θ0 − cos θ) and
    g cos θ = v²).  While in contact: |q| = 1, and λ (force λ df = 2 λ q) is the normal force
    (g cos θ − v²)/2 of the state itself; the release is detected within a step (tolerance
    two steps' angle).  After it: free flight (a parabola), never back on the circle."""
    th0, dt, n = 0.3, 1e-3, 700
    system = gravity_particle(2)
    method = gj.Impacts(lambda q: q @ q - 1.0, restitution=0.0)
    st = method.make_state(system, jnp.array([np.sin(th0), np.cos(th0)]), jnp.zeros(2))
    assert float(st.lam[0]) == pytest.approx(G0 * np.cos(th0) / 2, rel=1e-12)
    sol = gj.simulate(system, method, st, dt, n)
    q, lam = np.asarray(sol.states.q), np.asarray(sol.states.lam[:, 0])
    v = np.asarray(jax.vmap(system.velocity)(sol.states.q, sol.states.p))
    on = lam > 0
    k = int(np.argmin(on))  # first state off the circle
    assert k > 100 and not on[k:].any()
    np.testing.assert_allclose(np.linalg.norm(q[:k], axis=1), 1.0, atol=1e-13)
    th = np.arctan2(q[:, 0], q[:, 1])
    N = (G0 * np.cos(th) - np.sum(v**2, 1)) / 2
    # λ of a step is its (λ_a + λ_b)/2, second order at the step's middle: against the mean
    # of the node values, O(h² λ̈) ≈ 1e-6 · 1e2 (λ falls from 4.7 to 0 in 0.6 s, faster at the end)
    np.testing.assert_allclose(lam[1:k], (N[: k - 1] + N[1:k]) / 2, atol=1e-3)
    th_r = np.arccos(2 / 3 * np.cos(th0))
    omega = np.sqrt(2 * G0 * (np.cos(th0) - np.cos(th_r)))
    assert abs(th[k] - th_r) < 2 * omega * dt
    r_off = np.linalg.norm(q[k:], axis=1)
    assert np.all(r_off >= 1.0 - 1e-13) and np.all(r_off[2:] > 1.0)  # leaves, tangentially
    a = np.diff(v[k + 1 :], axis=0) / dt  # free flight: acceleration −g e_y
    np.testing.assert_allclose(a, np.broadcast_to([0.0, -G0], a.shape), atol=1e-8)


class Floor(eqx.Module):
    """The floor y ≥ c with a differentiable height ``c``."""

    c: jax.Array

    def __call__(self, q):
        return q[1] - self.c


@pytest.mark.long
def test_gradients_to_surface_parameters():
    """y(T) after one bounce off the floor y = c: y = c + e v1 (T − t1) − g (T − t1)²/2 with
    v1 = sqrt(2 g (H − c)), t1 = sqrt(2 (H − c)/g); d/dc, d/dH, d/de through simulate (the
    impact time by the implicit function theorem, the jump) against the closed form's
    derivatives and central finite differences (step 1e-6: error ~1e-10 relative)."""
    system = gravity_particle(2)
    T, dt = 0.8, 0.02

    @jax.jit
    def y_sim(c, H, e):
        method = gj.Impacts(Floor(c), restitution=e)
        st = gj.variational.VariationalState(
            jnp.array([0.0, 1.0]) * H, jnp.array([0.3, 0.0]), jnp.zeros(1)
        )
        return gj.simulate(system, method, st, dt, round(T / dt)).final_state.q[1]

    def y_exact(c, H, e):
        v1, t1 = jnp.sqrt(2 * G0 * (H - c)), jnp.sqrt(2 * (H - c) / G0)
        return c + e * v1 * (T - t1) - 0.5 * G0 * (T - t1) ** 2

    x = (jnp.asarray(0.1), jnp.asarray(1.0), jnp.asarray(0.8))
    np.testing.assert_allclose(y_sim(*x), y_exact(*x), atol=1e-12)
    g_sim = jax.jit(jax.grad(y_sim, argnums=(0, 1, 2)))(*x)
    g_ex = jax.grad(y_exact, argnums=(0, 1, 2))(*x)
    np.testing.assert_allclose(g_sim, g_ex, rtol=1e-9)
    eps = 1e-6
    fd = (y_sim(x[0] + eps, *x[1:]) - y_sim(x[0] - eps, *x[1:])) / (2 * eps)
    np.testing.assert_allclose(g_sim[0], fd, rtol=1e-6)


def test_bad_input():
    system = gravity_particle(2)
    st = system.make_state(jnp.array([0.0, -0.1]), jnp.zeros(2))
    with pytest.raises(ValueError, match="'state0.q'.*'surface'"):
        gj.simulate(system, gj.Impacts(lambda q: q[1]), st, 0.01, 2)
    two = lambda q: jnp.array([q[1], q[0] + 1.0])  # noqa: E731
    st = system.make_state(jnp.array([0.0, 1.0]), jnp.zeros(2))
    with pytest.raises(ValueError, match="'state0.q'.*'surface'"):
        gj.simulate(
            system,
            gj.Impacts(two),
            system.make_state(jnp.array([-2.0, 1.0]), jnp.zeros(2)),
            0.01,
            2,
        )
    with pytest.raises(ValueError, match="'state0.lam'"):
        gj.simulate(
            system,
            gj.Impacts(two),
            gj.variational.VariationalState(st.q, st.p, jnp.zeros(3)),
            0.01,
            2,
        )
    with pytest.raises(ValueError, match="'restitution'"):
        gj.Impacts(two, restitution=jnp.array([0.5, 1.2]))
    with pytest.raises(ValueError, match="'max_impacts'"):
        gj.Impacts(two, max_impacts=0)
    with pytest.raises(ValueError, match="'rest_speed'"):
        gj.Impacts(two, rest_speed=-1.0)
    with pytest.raises(ValueError, match="'jump_rounds'"):
        gj.Impacts(two, jump_rounds=0)
