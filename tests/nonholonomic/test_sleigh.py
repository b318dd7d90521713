"""Chaplygin sleigh (SE(2) and coordinates) and the integrator's interface: closed forms, DOP853
references, convergence order (Cayley and exp), constraint and energy over 1e5 steps, the scheme's
own multipliers, the discrete and continuous momentum equation, vmap, unconverged solves and
input errors."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import geomjax as gj
from geomjax.systems import ChaplyginSleigh, SleighCoordinates, VerticalRollingDisk

from .helpers import fitted_order, run
from .reference import sleigh_rhs, solve

M, IC, A = 2.0, 0.5, 0.7
SLEIGH = ChaplyginSleigh(M, IC, A)
X0, Y0, TH0, OM0, V0 = 0.1, -0.2, 0.3, 1.5, -0.4  # starts backwards: a reversal, then relaxation
S0 = SLEIGH.state(X0, Y0, TH0, omega=OM0, v=V0)
VI = gj.NonholonomicVI()
T = 4.0
DTS = (0.04, 0.02, 0.01)


@pytest.fixture(scope="module")
def sleigh_runs():
    return {dt: run(SLEIGH, VI, S0, T, dt) for dt in DTS}


@pytest.fixture(scope="module")
def sleigh_reference():
    ts = np.linspace(0.0, T, 101)
    _, ys = solve(sleigh_rhs(M, IC, A), [X0, Y0, TH0, OM0, V0], T, t_eval=ts)
    return ts, ys


def test_closed_form_matches_dop853_of_the_reduced_equations(sleigh_reference):
    """The tanh/sech/Gudermannian formulas (derived in the docstring) against DOP853 on the
    hand-written reduced equations J w' = −m a v w, v' = a w²."""
    ts, ys = sleigh_reference
    om, v, th = SLEIGH.closed_form(jnp.asarray(ts), OM0, V0, TH0)
    np.testing.assert_allclose(om, ys[:, 3], atol=1e-10)
    np.testing.assert_allclose(v, ys[:, 4], atol=1e-10)
    np.testing.assert_allclose(th, ys[:, 2], atol=1e-10)
    # the motion reverses (v changes sign) and relaxes towards v -> V = sqrt(2E/m)
    assert ys[0, 4] < 0 < ys[-1, 4]


@pytest.mark.long
def test_body_velocities_and_multiplier_converge_at_second_order(sleigh_runs, sleigh_reference):
    ts, ys = sleigh_reference
    om_ex, v_ex, th_ex = (np.asarray(a) for a in SLEIGH.closed_form(jnp.asarray(ts), OM0, V0, TH0))
    J = IC + M * A * A
    lam_ex = M * om_ex * v_ex * IC / J  # lateral blade force m (a w' + w v)
    errs, lam_errs, pos_errs = [], [], []
    for dt in DTS:
        out = sleigh_runs[dt]
        np.testing.assert_allclose(out["ts"], ts, atol=1e-12)
        s = out["states"]
        xyth = np.asarray(gj.SE2.to_xytheta(s.g))
        errs.append(
            max(
                np.abs(s.v[:, 0] - om_ex).max(),
                np.abs(s.v[:, 1] - v_ex).max(),
                np.abs(xyth[:, 2] - th_ex).max(),
            )
        )
        lam_errs.append(np.abs(s.lam[:, 0] - lam_ex).max())
        pos_errs.append(np.abs(xyth[:, :2] - ys[:, :2]).max())
    for e in (errs, lam_errs, pos_errs):
        assert abs(fitted_order(DTS, e) - 2) < 0.2, e
    assert errs[-1] < 1e-3 and lam_errs[-1] < 1e-3 and pos_errs[-1] < 1e-3
    # the exponential retraction instead of Cayley: also second order, also on the constraint
    errs_exp = []
    for dt in DTS[:2]:
        out = run(SLEIGH, gj.NonholonomicVI(retraction="exp"), S0, T, dt)
        assert float(jnp.max(out["diag"]["constraint_violation"])) < 1e-14
        errs_exp.append(np.abs(np.asarray(out["states"].v[:, 0]) - om_ex).max())
    assert 3.6 < errs_exp[0] / errs_exp[1] < 4.4, errs_exp


def test_scheme_multipliers_first_order_and_node_average_second_order(sleigh_runs):
    """lam_a (start of step) and lam_b (end of step) are first order with opposite errors; the
    node average ½(lam_b^(k−1) + lam_a^(k)) is second order (module docstring of the method).
    Reference: lam = m w v I_c / J evaluated at the computed nodes (the state's lam)."""
    J = IC + M * A * A

    def node_lam(s):
        return np.asarray(M * s.v[:, 0] * s.v[:, 1] * IC / J)

    ea, eb = [], []
    for dt in DTS:
        out = sleigh_runs[dt]  # block k: first step from saved state k, last step to state k+1
        lam = node_lam(out["states"])
        np.testing.assert_allclose(out["states"].lam[:, 0], lam, atol=1e-13)
        ea.append(np.abs(np.asarray(out["lam_a"][:, 0]) - lam[:-1]).max())
        eb.append(np.abs(np.asarray(out["lam_b"][:, 0]) - lam[1:]).max())
    assert abs(fitted_order(DTS, ea) - 1) < 0.2, ea
    assert abs(fitted_order(DTS, eb) - 1) < 0.2, eb
    # node averages need consecutive steps: one step per block (T = 100 dt)
    emid = []
    for dt in (0.04, 0.02):
        out = sleigh_runs[dt] if dt * 100 == T else run(SLEIGH, VI, S0, 100 * dt, dt)
        la, lb = np.asarray(out["lam_a"][:, 0]), np.asarray(out["lam_b"][:, 0])
        mid = 0.5 * (lb[:-1] + la[1:]) - node_lam(out["states"])[1:-1]
        emid.append(np.abs(mid[: 50 if dt == 0.04 else 100]).max())  # common interval [0, 2]
    assert 3.2 < emid[0] / emid[1] < 4.8, emid
    assert emid[0] < 0.05 * ea[0]


def test_constraint_and_energy_over_1e5_steps():
    out = run(SLEIGH, VI, S0, 1000.0, 0.01)  # 1e5 steps
    d = out["diag"]
    assert float(jnp.max(d["constraint_violation"])) <= 1e-14  # |v_y|, speeds ~1
    assert float(jnp.max(out["residual"])) < 1e-12
    E = np.asarray(d["energy"])
    err = np.abs(E - E[0]) / E[0]
    # O(h²) error reached during the transient, then constant (no drift): the asymptotic speed
    assert err.max() < 1e-4
    assert np.ptp(err[10:]) < 1e-12
    V = np.sqrt(2 * E[0] / M)
    np.testing.assert_allclose(out["states"].v[-1, 1], V, rtol=1e-4)


def test_lie_group_and_coordinate_formulations_agree():
    """SE(2) with body velocities vs (x, y, θ) with the constraint written in the plane and a
    configuration-dependent mass matrix: identical continuous equations (to round-off) and
    discrete solutions that agree to O(h²) (different discretizations of the same flow)."""
    coord = SLEIGH.coordinate_system()
    assert isinstance(coord, SleighCoordinates)

    @jax.jit
    def both(omega, v, th):
        s = SLEIGH.state(0.3, -0.1, th, omega=omega, v=v)
        c = SLEIGH.to_coordinates(s)
        vd_se2, lam_se2 = SLEIGH.acceleration(0.0, s.g, s.x, s.v)
        vd_c, lam_c = coord.acceleration(0.0, c.g, c.x, c.v)
        # map the SE(2) body acceleration to coordinates: d/dt (R(θ) v_body) = R (v' + w J v)
        c_, s_ = jnp.cos(th), jnp.sin(th)
        ax = c_ * (vd_se2[1] - omega * s.v[2]) - s_ * (vd_se2[2] + omega * s.v[1])
        ay = s_ * (vd_se2[1] - omega * s.v[2]) + c_ * (vd_se2[2] + omega * s.v[1])
        return jnp.stack([ax, ay, vd_se2[0]]), vd_c, lam_se2, lam_c

    for omega, v, th in [(1.5, -0.4, 0.3), (-0.7, 2.0, 2.5), (0.0, 1.0, -1.0)]:
        a1, a2, l1, l2 = both(omega, v, th)
        np.testing.assert_allclose(a1, a2, atol=1e-13)
        np.testing.assert_allclose(l1, l2, atol=1e-13)

    c0 = SLEIGH.to_coordinates(S0)
    c0 = coord.make_state(c0.g, None, c0.v)
    diffs = []
    for dt in (0.04, 0.02):
        a = run(SLEIGH, VI, S0, T, dt)["states"]
        b = run(coord, VI, c0, T, dt)["states"]
        b_se2 = np.asarray(gj.SE2.from_xytheta(b.g[:, 0], b.g[:, 1], b.g[:, 2]))
        assert (
            float(jnp.max(jnp.abs(b.v[:, 0] * jnp.sin(b.g[:, 2]) - b.v[:, 1] * jnp.cos(b.g[:, 2]))))
            < 1e-14
        )
        diffs.append(
            max(np.abs(b_se2 - np.asarray(a.g)).max(), np.abs(b.v[:, 2] - a.v[:, 0]).max())
        )
    assert diffs[0] < 5e-3 and 3.0 < diffs[0] / diffs[1] < 5.0, diffs


def test_discrete_and_continuous_momentum_equation(sleigh_runs):
    """Nonholonomic momentum equation (BKMM 1996) with zeta(q) = Ad_g e_omega (rotation about the
    contact point, in g^q): J = mu_omega.  Continuous: dJ/dt from the equations of motion equals
    <m, d zeta/dt>; discrete: J_{k+1} − J_k = <m_k^+, zeta_{k+1} − zeta_k> to round-off.  For
    zeta = Ad_g e_vy (not in g^q) both identities fail by the constraint force's work."""
    G = gj.SE2
    zeta_in = lambda g, x: G.Ad(g) @ jnp.array([1.0, 0.0, 0.0])  # noqa: E731
    zeta_out = lambda g, x: G.Ad(g) @ jnp.array([0.0, 0.0, 1.0])  # noqa: E731

    @jax.jit
    def continuous(s):
        return [
            (SLEIGH.momentum_time_derivative(s, z), SLEIGH.momentum_equation_rate(s, z))
            for z in (zeta_in, zeta_out)
        ]

    (d_in, r_in), (d_out, r_out) = continuous(S0)
    np.testing.assert_allclose(d_in, r_in, atol=1e-13)
    assert abs(float(d_out - r_out)) > 0.1  # = lam, the lateral force, at S0
    np.testing.assert_allclose(d_out - r_out, S0.lam[0], rtol=1e-12)

    out = sleigh_runs[DTS[0]]
    s, nxt, p_plus = out["states"], out["next"], out["p_plus"]

    def discrete_defect(zeta):
        def one(s0, s1, pp):
            m_plus = G.Ad(G.inverse(s0.g)).T @ pp[:3]
            J0 = SLEIGH.nonholonomic_momentum(s0, zeta)
            J1 = SLEIGH.nonholonomic_momentum(s1, zeta)
            return J1 - J0 - m_plus @ (zeta(s1.g, s1.x) - zeta(s0.g, s0.x))

        s_k = jax.tree_util.tree_map(lambda a: a[:-1], s)
        return np.abs(np.asarray(jax.jit(jax.vmap(one))(s_k, nxt, p_plus))).max()

    assert discrete_defect(zeta_in) < 1e-13
    assert discrete_defect(zeta_out) > 1e-4
    # the trajectory-level output: J against its integrated rate (O(dt²) trapezoid)
    me = gj.momentum_equation(SLEIGH, gj.Solution(out["ts"], out["states"], {}), zeta_in)
    assert np.abs(np.asarray(me["J"] - me["predicted"])).max() < 5e-3


def test_step_vmap_matches_unbatched(sleigh_runs):
    """One step batched with jax.vmap over initial states equals the unbatched steps of the
    helper (the method is a pure function of arrays)."""
    states = [S0, SLEIGH.state(1.0, 2.0, -0.5, omega=-0.5, v=1.2), SLEIGH.state(omega=0.2, v=0.0)]
    batch = jax.tree_util.tree_map(lambda *a: jnp.stack(a), *states)
    batched = eqx.filter_jit(jax.vmap(lambda s: gj.step(SLEIGH, s, 0.04, method=VI)))(batch)
    for k, s in enumerate(states):
        out = sleigh_runs[0.04] if k == 0 else run(SLEIGH, VI, s, T, 0.04)
        one = jax.tree_util.tree_map(lambda a: a[1], out["states"])  # after one step
        for a, b in zip(jax.tree_util.tree_leaves(batched), jax.tree_util.tree_leaves(one)):
            np.testing.assert_allclose(a[k], b, rtol=1e-12, atol=1e-14)
    # without a method, step picks the default (symmetric) discrete Lagrange-d'Alembert scheme
    default = gj.step(SLEIGH, S0, 0.04)
    explicit = gj.step(SLEIGH, S0, 0.04, method=gj.NonholonomicVI())
    for a, b in zip(jax.tree_util.tree_leaves(default), jax.tree_util.tree_leaves(explicit)):
        np.testing.assert_array_equal(a, b)


def test_bad_inputs_raise_clear_errors():
    with pytest.raises(ValueError, match="'mass'"):
        ChaplyginSleigh(mass=-1.0)
    with pytest.raises(ValueError, match="'inertia'"):
        ChaplyginSleigh(inertia=jnp.ones(2))
    with pytest.raises(ValueError, match="'a'"):
        ChaplyginSleigh(a=jnp.nan)
    with pytest.raises(ValueError, match="'radius'"):
        VerticalRollingDisk(radius=0.0)
    with pytest.raises(ValueError, match="'group'"):
        gj.NonholonomicSystem("SE2", lambda g, x, v: 0.0, lambda g, x, v, t: v[:1])
    with pytest.raises(ValueError, match="'lagrangian'.*scalar"):
        gj.NonholonomicSystem(gj.SE2, lambda g, x, v: v, lambda g, x, v, t: v[:1])
    with pytest.raises(ValueError, match="'lagrangian'"):
        gj.NonholonomicSystem(gj.SE2, lambda g, v: 0.0, lambda g, x, v, t: v[:1])
    with pytest.raises(ValueError, match="'constraint'"):
        gj.NonholonomicSystem(gj.SE2, lambda g, x, v: v @ v, lambda g, x, v: v[:1])
    with pytest.raises(ValueError, match="'shape_dim'"):
        gj.NonholonomicSystem(gj.SE2, lambda g, x, v: v @ v, lambda g, x, v, t: v[:1], -1)
    with pytest.raises(ValueError, match="'newton_iters'"):
        gj.NonholonomicVI(newton_iters=0)
    with pytest.raises(ValueError, match="'retraction'"):
        gj.NonholonomicVI(retraction="qr")
    with pytest.raises(ValueError, match=r"'state0\.v' violates the constraints"):
        gj.simulate(SLEIGH, VI, eqx.tree_at(lambda s: s.v, S0, S0.v.at[2].set(0.1)), 0.01, 10)
    with pytest.raises(ValueError, match=r"'state0\.v'"):
        gj.simulate(SLEIGH, VI, eqx.tree_at(lambda s: s.v, S0, jnp.ones(4)), 0.01, 10)
    with pytest.raises(ValueError, match=r"'state0\.g'"):
        gj.simulate(SLEIGH, VI, eqx.tree_at(lambda s: s.g, S0, 1.1 * S0.g), 0.01, 10)
    worst = f"{float(gj.SE2.defect(1.1 * S0.g)):.3g}"  # the compiled check reports the same
    with pytest.raises(ValueError, match=rf"'state0\.g'.*largest defect {worst}$"):
        gj.simulate(SLEIGH, VI, eqx.tree_at(lambda s: s.g, S0, 1.1 * S0.g), 0.01, 10)
    with pytest.raises(ValueError, match=r"'state0\.lam' must be finite"):
        gj.simulate(SLEIGH, VI, eqx.tree_at(lambda s: s.lam, S0, S0.lam * jnp.nan), 0.01, 10)
    # dependent constraints (the same one twice): A M⁻¹ Aᵀ is singular, the check names it
    twice = gj.NonholonomicSystem(
        gj.SE2, lambda g, x, v: 0.5 * v @ v, lambda g, x, v, t: jnp.stack([v[2], 2.0 * v[2]])
    )
    with pytest.raises(ValueError, match="A M⁻¹ Aᵀ is degenerate"):
        twice.make_state(jnp.eye(3), v=jnp.array([1.0, 0.5, 0.0]))
    with pytest.raises(ValueError, match="NonholonomicState"):
        gj.simulate(SLEIGH, VI, gj.LieGroupState(S0.g, S0.v), 0.01, 10)
    with pytest.raises(ValueError, match="does not support"):
        gj.simulate(SLEIGH, gj.LGVI(), S0, 0.01, 10)
    with pytest.raises(ValueError, match="does not support"):
        gj.simulate(gj.RigidBody(jnp.ones(3)), VI, S0, 0.01, 10)
    # make_state(project=True) repairs a velocity off the constraint (kinetic-metric projection)
    s = SLEIGH.make_state(S0.g, None, jnp.array([1.0, 0.5, 0.3]), project=True)
    assert abs(float(s.v[2])) < 1e-14  # round-off of |v| ~ 1 (a few ulps; 45 eps bound)


def test_unconverged_solves_are_visible():
    """One Newton step at a large step size: the relative residual is reported, and
    on_failure="raise" turns it into an error."""
    sleigh = ChaplyginSleigh(2.0, 0.5, 0.7)
    fast = sleigh.state(omega=8.0, v=3.0)
    step = eqx.filter_jit(lambda method, s: method.step(sleigh, s, 0.3, None, 0.0))
    _, stats = step(gj.NonholonomicVI(newton_iters=1), fast)
    assert float(stats.residual) > 1e-6
    with pytest.raises(Exception, match="did not converge"):
        jax.block_until_ready(step(gj.NonholonomicVI(newton_iters=1, on_failure="raise"), fast))
