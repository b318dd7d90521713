"""Nonholonomic phases and gauges (Cabrera, *Base-controlled mechanical systems and geometric phases*, §2.4.3, §4.1, §4.4):
the factorization g = h_D·h_λ·g(t₀)·g_NH against closed forms (vertical disk §5.1, ball on a
turntable §5.2) and against the reconstruction itself; gauge independence of the physical motion
in the nonholonomic and mechanical gauges."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import integrate

import geomjax as gj
from geomjax.reconstruction import (
    Reconstruction,
    ReconstructionRKMK4,
    ball_on_turntable,
    holonomy,
    linked_bodies,
    mechanical_gauge,
    nonholonomic_gauge,
    nonholonomic_phases,
    reconstruct,
    vertical_disk,
)
from tests.conftest import FULL

from . import closed_forms as cf

# --------------------------------------------------------------------------------- §5.1 disk
M, I, R = 1.3, 0.5, 0.7
PHI0, AMP = 0.4, 0.8


def _phi(t):
    return PHI0 + AMP * np.sin(t)


@pytest.mark.long
def test_disk_phases_closed_form():
    """Vertical disk, heading φ(t) = φ₀ + 0.8 sin t (closed over 2π), trivial gauge (already
    nonholonomic and mechanical: g_NH ≡ 0).  With v = (R cos φ, R sin φ, 1), J(ċ) =
    θ̇ (mR cos φ, mR sin φ, I) and θ̇ = ⟨v, μ₀⟩/(mR² + I) constant (corrected §5.1):

        Λ(t) = θ̇ mR (cos φ − cos φ₀, sin φ − sin φ₀, 0)           (the constraint impulse)
        ḣ_D = θ̇ (mR² cos(φ − φ₀) + I)/(mR² + I) v,   ḣ_λ = θ̇ mR² (1 − cos(φ − φ₀))/(mR² + I) v

    (abelian: K x = v⟨v, x⟩/(mR² + I)), and h_D + h_λ is the rolling/heading closed form."""
    S = vertical_disk(mass=M, inertia=I, heading_inertia=0.2, radius=R)
    rec = Reconstruction(S, lambda t: jnp.stack([PHI0 + AMP * jnp.sin(t)]))
    T, n = 2 * np.pi, 200
    mu_in = np.array([0.3, -0.2, 0.9])  # only its g^q part is free: ⟨v(φ₀), μ⟩
    sol = reconstruct(rec, T, n, momentum=jnp.asarray(mu_in), spatial=True,
                      method=ReconstructionRKMK4())  # fmt: skip
    ph = nonholonomic_phases(rec, sol, closed=True)
    v0 = np.array([R * np.cos(PHI0), R * np.sin(PHI0), 1.0])
    thd = float(v0 @ mu_in) / (M * R**2 + I)
    ts = np.asarray(sol.times)
    ph_ = _phi(ts)
    # geometric phase: the trivial gauge is the nonholonomic one (ḋ₀ = φ̇ ∂_φ ∈ D, J(ḋ₀) = 0)
    assert float(jnp.max(jnp.abs(ph["g_geometric"]))) < 1e-14
    np.testing.assert_allclose(ph["holonomy"], 0.0, atol=1e-14)
    # constraint impulse (trapezoidal rule on λ, error ≤ T h²/12 max|Γ''| ≈ 1e-3 here)
    lam_exact = thd * M * R * np.stack([np.cos(ph_) - np.cos(PHI0), np.sin(ph_) - np.sin(PHI0),
                                        0 * ts], 1)  # fmt: skip
    np.testing.assert_allclose(ph["constraint_impulse"], lam_exact, atol=1e-3)
    # and the momentum balance J(ċ) = μ₀ + Λ (the solution's momentum vs ∫ multipliers)
    np.testing.assert_allclose(ph["mu"] - ph["mu"][0], ph["constraint_impulse"], atol=1e-3)

    def quad(f):
        return np.array(
            [integrate.quad(lambda t, i=i: f(t)[i], 0, T, epsabs=1e-13)[0] for i in range(3)]
        )

    def v(t):
        return np.array([R * np.cos(_phi(t)), R * np.sin(_phi(t)), 1.0])

    D = M * R**2 + I
    hD = quad(lambda t: thd * (M * R**2 * np.cos(_phi(t) - PHI0) + I) / D * v(t))
    hL = quad(lambda t: thd * M * R**2 * (1 - np.cos(_phi(t) - PHI0)) / D * v(t))
    # h_D: the trapezoidal sum of a smooth periodic integrand, spectrally accurate (limited by
    # the RKMK4 states, ~1e-9; observed 1e-10)
    np.testing.assert_allclose(ph["h_dynamic"][-1], hD, atol=1e-6)
    # h_λ carries the O(h²) error of the trapezoidal Λ: ≤ (h²/12)·2 max|Γ'| ≈ 1e-4, times
    # T·max|K| ≈ 8 gives ≈ 1e-3 (observed 6e-5)
    np.testing.assert_allclose(ph["h_constraint"][-1], hL, atol=1e-3)
    assert np.linalg.norm(hL) > 0.05  # the constraint forces matter (observed 0.48)
    x, y, th = cf.vertical_disk(np.array([T]), _phi, R=R, thetadot=thd)
    exact = np.array([x[-1], y[-1], th[-1]]).ravel()
    np.testing.assert_allclose(ph["composed"][-1], exact, atol=1e-3)  # as h_λ
    np.testing.assert_allclose(sol.states.g[-1], exact, atol=1e-7)  # RKMK4 alone


# ----------------------------------------------------------------------------- §5.2 turntable
A, OM, RHO, NU, MASS, WZ = 0.3, 0.7, 0.8, 1.1, 1.2, 0.4


def _circle(t):
    return RHO * jnp.stack([jnp.cos(NU * t), jnp.sin(NU * t)])


@pytest.mark.slow
@pytest.mark.skipif(not FULL, reason="GEOMJAX_FULL=1 (SO(3) coefficient rates: a large program)")
def test_turntable_phases_closed_form():
    """Ball on a turntable (affine, non-abelian), contact point on the circle ρ(cos νt, sin νt)
    about the axis, one circuit T = 2π/ν, trivial gauge (attitude = g⁻¹).  Closed form (see
    closed_forms): R(t) = R_z(νt) exp(t hat(κ, 0, ω_z − ν)), κ = ρ(Ω − ν)/a; the geometric
    phase (ω_z = 0) is the ball's holonomy per circuit, exp(T hat(κ, 0, −ν))."""
    S = ball_on_turntable(rate=OM, radius=A, mass=MASS)
    rec = Reconstruction(S, _circle)
    T, n = 2 * np.pi / NU, 160
    # at g = e: ω = −ξ, Π = m k² ξ (J₀ = 0): spin ω_z ⇔ free momentum −m k² ω_z e_z
    mu = jnp.array([0.0, 0.0, -MASS * 0.4 * A**2 * WZ])
    sol = reconstruct(rec, T, n, momentum=mu, method=ReconstructionRKMK4())
    ph = nonholonomic_phases(rec, sol, closed=True)
    ts = np.asarray(sol.times)
    R_lift = cf.turntable_circle(ts[[-1]], rho=RHO, nu=NU, a=A, Omega=OM)[0]
    R_full = cf.turntable_circle(ts, rho=RHO, nu=NU, a=A, Omega=OM, omega_z=WZ)
    # geometric phase: Magnus4 on the saved grid (h ≈ 0.036: ~1e-8, observed 2e-8)
    np.testing.assert_allclose(ph["holonomy"], R_lift.T, atol=1e-7)
    assert np.linalg.norm(R_lift - np.eye(3)) > 0.5  # a genuine holonomy
    Rt = np.swapaxes(R_full, 1, 2)
    assert float(np.max(np.abs(sol.states.g - Rt))) < 1e-7  # RKMK4 alone (observed 2e-8)
    # h_D·h_λ·g_NH reproduces g: the trapezoidal-exponential rule, global error
    # ≈ T h²/12 max|ẅ| ≈ 5.7 · 1.1e-4 · 1.3 ≈ 8e-4 (rates |w| ≈ κ ≈ 1, turning at ν): bound 3e-3
    # (observed 1.1e-3)
    assert float(np.max(np.abs(ph["composed"] - Rt))) < 3e-3
    # both the dynamic phase and the constraint contribution are genuine rotations
    for key in ("h_dynamic", "h_constraint"):
        assert float(np.max(np.abs(ph[key][-1] - np.eye(3)))) > 1e-2
    # momentum balance: ∫ constraint torques (λ) = change of J(ċ) (trapezoidal; observed 1e-5)
    np.testing.assert_allclose(ph["mu"] - ph["mu"][0], ph["constraint_impulse"], atol=5e-4)
    assert float(jnp.max(jnp.abs(ph["constraint_impulse"]))) > 1e-2


def _stack(trees):
    return jax.tree_util.tree_map(lambda *x: jnp.stack(x) if eqx.is_array(x[0]) else x[0], *trees)


def _trivial_like(gauge):
    """The trivial gauge as a TabulatedGauge of the same structure (identity nodes, zero
    rates): one compiled program for all the gauges of a test."""
    z = jax.tree_util.tree_map(jnp.zeros_like, gauge)
    e = jnp.broadcast_to(gauge.group.identity(dtype=gauge.table.dtype), gauge.table.shape)
    return eqx.tree_at(lambda g: (g.t0, g.dt, g.table), z, (gauge.t0, gauge.dt, e))


@pytest.mark.slow
@pytest.mark.skipif(not FULL, reason="GEOMJAX_FULL=1 (four gauges of the ball: a large program)")
def test_turntable_gauges():
    """Trivial, nonholonomic and mechanical gauges of the ball on a turntable with a section
    that turns the ball (J(ḋ₀) ≠ 0, so all three differ): one vmapped program runs spin ω_z in
    each, and zero momentum in the nonholonomic gauge.  The physical motion is the closed form
    in every gauge; the group curves differ; in the nonholonomic gauge ḋ₀ ∈ D (r = 0, affine
    part included), i*J(ḋ₀) = 0, its own geometric phase is trivial (§4.1) and the
    zero-momentum motion is g ≡ e (Prop. 4.5); in the mechanical gauge J(ḋ₀) = 0 (eq. 18)."""
    B = ball_on_turntable(rate=OM, radius=A, mass=MASS)

    def section(b):  # identity at c̃(0) = (ρ, 0): the same initial attitude and momentum
        return (b, gj.SO3.exp(0.5 * jnp.stack([b[1], b[0] - RHO, b[0] * b[1]])))

    S = gj.BaseControlledSystem(
        group=gj.SO3, kinetic=B.kinetic, action=B.action, section=section, base_dim=2,
        constraint=B.constraint,
    )  # fmt: skip
    T, n = 2 * np.pi / NU, 160
    nh = nonholonomic_gauge(S, _circle, T, 128)
    mech = mechanical_gauge(S, _circle, T, 128)
    rec_b = _stack([Reconstruction(S, _circle, gauge=g) for g in (_trivial_like(nh), nh, mech, nh)])
    # J(ċ(0)) is physical (attitude I at t = 0 in every gauge): spin ω_z ⇔ −m k² ω_z e_z
    mus = jnp.array([[0.0, 0.0, -MASS * 0.4 * A**2 * WZ]] * 3 + [[0.0, 0.0, 0.0]])

    @eqx.filter_jit
    @eqx.filter_vmap
    def run(rec, mu):
        sol = reconstruct(rec, T, n, momentum=mu, spatial=True, method=ReconstructionRKMK4())
        att = jax.vmap(rec.configuration)(sol.states, sol.times)[1]
        co = jax.vmap(rec.coefficients)(sol.times)
        return sol.states.g, att, co, nonholonomic_phases(rec, sol)["g_geometric"]

    g, att, co, g_nh = run(rec_b, mus)
    R_full = cf.turntable_circle(np.linspace(0, T, n + 1), rho=RHO, nu=NU, a=A, Omega=OM,
                                 omega_z=WZ)  # fmt: skip
    # the physical motion: RKMK4 (~1e-8) and the gauge tables (O(dt⁴), dt = T/128: ~1e-7)
    for i in range(3):
        assert float(np.max(np.abs(att[i] - R_full))) < 1e-6
    # ... the group curves differ
    for i, j in ((0, 1), (0, 2), (1, 2)):
        assert float(jnp.max(jnp.abs(g[i] - g[j]))) > 1e-2
    # the gauges' defining properties hold to the interpolated velocity's O(dt³) error
    # (dt³ ≈ 9e-5 times the rates' third derivatives / 100: ~1e-6; observed 3e-7)
    assert float(jnp.max(jnp.abs(co.r[1]))) < 3e-6
    kerC = jax.vmap(lambda C: jnp.linalg.svd(C)[2][-1])(co.C[1])
    assert float(jnp.max(jnp.abs(jnp.einsum("ni,ni->n", kerC, co.J0[1])))) < 3e-6
    assert float(jnp.max(jnp.abs(co.J0[2]))) < 3e-6
    assert float(jnp.max(jnp.abs(co.J0[0]))) > 1e-2  # ... and fail in the trivial gauge
    assert float(jnp.max(jnp.abs(g_nh[1] - jnp.eye(3)))) < 1e-6
    assert float(jnp.max(jnp.abs(g[3] - jnp.eye(3)))) < 1e-6


LINKS = {"masses": (1.0, 2.0, 1.5), "lengths": (1.0, 0.8, 1.2)}
C_LOOP, RHO_LOOP = jnp.array([0.4, -0.6]), 0.9


def _shape_loop(t):
    return C_LOOP + RHO_LOOP * jnp.stack([jnp.cos(t), jnp.sin(t)])


@pytest.mark.slow
@pytest.mark.skipif(not FULL, reason="GEOMJAX_FULL=1 (the chain's kinetic energy: a large program)")
def test_linked_bodies_mechanical_gauge():
    """Planar three-link chain, D = TQ (so the nonholonomic gauge is the mechanical one): the
    trivial and mechanical gauges give the same physical motion and different group curves;
    J(ḋ₀) = 0 in the mechanical gauge (not in the trivial one) and a zero-momentum motion is
    g ≡ e there (Remark 4.3: c = d₀^Mech)."""
    S = linked_bodies(**LINKS)
    T, n = 2 * np.pi, 120
    mech = mechanical_gauge(S, _shape_loop, T, 96)
    recs = [Reconstruction(S, _shape_loop, gauge=g) for g in (_trivial_like(mech), mech, mech)]
    mus = jnp.array([[0.3], [0.3], [0.0]])

    @eqx.filter_jit
    @eqx.filter_vmap
    def run(rec, mu):
        sol = reconstruct(rec, T, n, momentum=mu, spatial=True, method=ReconstructionRKMK4())
        q = jax.vmap(rec.configuration)(sol.states, sol.times)
        J0 = jax.vmap(lambda t: rec.coefficients(t).J0)(sol.times)
        return sol.states.g, q, J0

    g, q, J0 = run(_stack(recs), mus)
    # physical motion: RKMK4 (h ≈ 0.05) and the table (O(dt⁴), dt ≈ 0.065): observed 4e-8
    assert float(jnp.max(jnp.abs(q[1] - q[0]))) < 1e-6
    assert float(jnp.max(jnp.abs(g[1] - g[0]))) > 1e-2  # the group curves differ (observed 1.45)
    # J(ḋ₀^Mech) = 0 to the interpolated velocity's error, ≈ dt³/24 max|Ω⁗| ≈ 1e-5 (observed
    # 6e-6; 0 at the table nodes); the trivial gauge's J₀ is O(1)
    assert float(jnp.max(jnp.abs(J0[1]))) < 3e-5
    assert float(jnp.max(jnp.abs(J0[0]))) > 1e-2
    assert float(jnp.max(jnp.abs(g[2]))) < 1e-6  # zero momentum: c = d₀^Mech (observed 9e-8)


@pytest.mark.slow
@pytest.mark.skipif(not FULL, reason="GEOMJAX_FULL=1 (a second compile of the chain)")
def test_linked_bodies_momentum_phases():
    """D = TQ: no constraint forces, so h_λ ≡ 0 and g = h_D + g_NH (§4.1, g_Dyn·g_Mech, abelian
    T¹); g_NH(T) is the holonomy (another integrator: HorizontalLift on another grid)."""
    S = linked_bodies(**LINKS)
    T, n = 2 * np.pi, 120
    rec = Reconstruction(S, _shape_loop)
    sol = reconstruct(rec, T, n, momentum=jnp.array([0.3]), method=ReconstructionRKMK4())
    ph = nonholonomic_phases(rec, sol, closed=True)
    np.testing.assert_allclose(ph["h_constraint"], 0.0, atol=1e-14)
    np.testing.assert_allclose(ph["constraint_impulse"], 0.0, atol=1e-14)
    # trapezoidal h_D: O(h²) at intermediate times, h²/12 · T max|ẇ| ≈ 5e-5 (observed 1e-5)
    np.testing.assert_allclose(ph["composed"], sol.states.g, atol=1e-4)
    # at T the periodic integrand makes the sums spectrally accurate: the RKMK4 error remains
    np.testing.assert_allclose(ph["composed"][-1], sol.states.g[-1], atol=1e-6)
    hol = holonomy(S, _shape_loop, T, 200)  # −∬F ≈ −8.8e-3 rad (test_phases, Stokes)
    np.testing.assert_allclose(ph["holonomy"], hol, atol=1e-9)
    assert abs(float(hol[0])) > 5e-3


def _slider_kinetic(m, q, qd):
    return 0.5 * m * (qd[0] + _slider_a(q[1]) * qd[1]) ** 2 + 0.5 * qd[1] ** 2


def _slider_a(s):
    return jnp.sin(s) + 0.5 * s


def _slider_F(s):  # F' = a
    return -np.cos(s) + 0.25 * s**2


def _slider_base(t):
    return jnp.stack([0.3 + 0.9 * jnp.sin(1.3 * t)])


@pytest.mark.long
def test_slider_gauges_closed_form():
    """A cart x dragged by a shape s: K = ½ m (ẋ + a(s) ṡ)² + ½ ṡ², G = R translating x, D = TQ.
    Mechanical connection A = a(s) ds, so the mechanical (= nonholonomic) gauge is
    h(t) = −(F(s(t)) − F(s₀)), F' = a, and the physical motion x(t) = μt/m − (F(s) − F(s₀)).
    The tabulated gauges reproduce h to O(dt⁴); the physical motion is the closed form in the
    trivial and both tabulated gauges, the group curves differ, J(ḋ₀) = 0 in the gauge and a
    zero-momentum motion is g ≡ e there."""
    m, mu, T = 1.7, 0.4, 3.0
    S = gj.BaseControlledSystem(
        group=gj.Rn(1),
        kinetic=jax.tree_util.Partial(_slider_kinetic, jnp.asarray(m)),
        action=lambda g, q: q + jnp.concatenate([g, jnp.zeros((1,), g.dtype)]),
        section=lambda b: jnp.concatenate([jnp.zeros((1,), b.dtype), b]),
        base_dim=1,
    )
    mech = mechanical_gauge(S, _slider_base, T, 64)
    nh = nonholonomic_gauge(S, _slider_base, T, 64)
    ts = np.linspace(0.0, T, 61)
    s_t = 0.3 + 0.9 * np.sin(1.3 * ts)
    h_exact = -(_slider_F(s_t) - _slider_F(0.3))
    # the table: Magnus4 (dt ≈ 0.047, ~1e-9) and the cubic Hermite between nodes (O(dt⁴) ≈ 5e-6
    # times the rate's fourth derivative / 384: ~1e-7)
    h_tab = jax.jit(jax.vmap(mech))(jnp.asarray(ts))[:, 0]
    assert float(np.max(np.abs(h_tab - h_exact))) < 1e-6
    np.testing.assert_allclose(jax.vmap(nh)(jnp.asarray(ts)), jax.vmap(mech)(jnp.asarray(ts)))
    recs = [Reconstruction(S, _slider_base, gauge=g) for g in (_trivial_like(mech), mech, mech)]

    @eqx.filter_jit
    @eqx.filter_vmap
    def run(rec, p):
        sol = reconstruct(rec, T, 60, momentum=p, spatial=True, method=ReconstructionRKMK4())
        q = jax.vmap(rec.configuration)(sol.states, sol.times)
        J0 = jax.vmap(lambda t: rec.coefficients(t).J0)(sol.times)
        return sol.states.g, q, J0

    g, q, J0 = run(_stack(recs), jnp.array([[mu], [mu], [0.0]]))
    x_exact = mu * ts / m + h_exact
    for i in (0, 1):  # RKMK4 (h = 0.05; observed 1.4e-6) and the table (~1e-7)
        np.testing.assert_allclose(q[i][:, 0], x_exact, atol=1e-5)
        np.testing.assert_allclose(q[i][:, 1], s_t, atol=1e-12)
    np.testing.assert_allclose(g[0][:, 0], x_exact, atol=1e-5)  # trivial gauge: g = x
    np.testing.assert_allclose(g[1][:, 0], mu * ts / m, atol=1e-5)  # mechanical: the drift only
    assert float(jnp.max(jnp.abs(J0[0]))) > 0.1
    # J(ḋ₀) = m(ḣ + a ṡ) = 0 to the cubic Hermite velocity error, ≤ m dt³/(72√3) max|d³ξ/dt³|
    # ≈ 1.7 · 1e-4 · 15/125 ≈ 2e-5 (dt = T/64; observed 2.1e-5, 0 at the nodes)
    assert float(jnp.max(jnp.abs(J0[1]))) < 1e-4
    # zero momentum: c = d₀^Mech, g ≡ e up to ∫ of that velocity error (observed 1.2e-6)
    assert float(jnp.max(jnp.abs(g[2]))) < 2e-5


def _path(t):
    return jnp.stack([0.6 * jnp.cos(t) + 0.1 * t, 0.4 * jnp.sin(2 * t)])


def test_bad_inputs():
    S = ball_on_turntable()
    rec = Reconstruction(S, _path)
    with pytest.raises(ValueError, match="'gauge'"):
        Reconstruction(S, _path, gauge=lambda t: jnp.eye(2))
    with pytest.raises(ValueError, match="'t_final'"):
        nonholonomic_gauge(S, _path, 0.0)
    with pytest.raises(ValueError, match="'steps'"):
        mechanical_gauge(S, _path, 1.0, steps=0)
    with pytest.raises(ValueError, match="'system'"):
        nonholonomic_gauge(gj.SO3, _path, 1.0)
    with pytest.raises(ValueError, match="'solution'"):
        nonholonomic_phases(rec, "not a solution")
    with pytest.raises(ValueError, match="'recon'"):
        nonholonomic_phases("x", None)
    sol = gj.Solution(
        jnp.array([0.0, 1.0]), gj.LieGroupState(jnp.stack([jnp.eye(3)] * 2), jnp.zeros((2, 3))), {}
    )
    with pytest.raises(ValueError, match="not closed"):
        nonholonomic_phases(rec, sol, closed=True)
