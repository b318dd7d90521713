"""geomjax.reconstruction against the independent references of ``reference.py`` (full unreduced
Newton–Euler / KKT systems, DOP853 at 1e-12) and the closed forms of ``closed_forms.py``.

Compiles dominate the cost, so each test compiles one program with the step count traced
(``fori_loop``) and varies it. Tolerances come from the methods' observed error constants (the
fitted orders are asserted; absolute bounds are ≥ 10× the observed errors, quoted inline).
"""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import geomjax as gj
from geomjax import reconstruction as rc
from tests.conftest import FULL

from . import closed_forms as cf
from . import curves
from . import reference as ref


def _final(method, recon, T):
    """``(state0, n) -> state after n steps of T/n`` (one compile for every n)."""

    @jax.jit
    def go(state0, n):
        dt = T / n

        def body(k, s):
            return method.step(recon, s, dt, None, k * dt)[0]

        return jax.lax.fori_loop(0, n, body, state0)

    return go


def _order(ns, errs):
    return -float(np.polyfit(np.log(ns), np.log(errs), 1)[0])


# ---------------------------------------------------------------------- §5.2 ball on turntable


def _turntable_errors():
    """``method, ns -> final attitude errors`` of the ball on the turntable against the unreduced
    reference (DOP853 1e-12)."""
    a, Om, wz = 0.3, 0.7, 0.4
    path = curves.plane_loop(0.8, 1.1)
    T = 2 * np.pi / 1.1
    R0 = cf.expm_so3([0.3, -0.2, 0.5])
    r = ref.ball_on_turntable(path, T, a=a, Omega=Om, R0=R0, omega_z0=wz, t_eval=[0.0, T])
    S = rc.ball_on_turntable(rate=Om, radius=a)
    rec = rc.Reconstruction(S, path)
    # the physical initial velocity, as the library's spatial momentum J(ċ(0))
    c0, v0, _ = ref.derivatives(path)(0.0)
    w0 = np.array([(Om * c0[0] - v0[1]) / a, (v0[0] + Om * c0[1]) / a, wz])
    q0 = (jnp.asarray(c0), jnp.asarray(R0))
    qd0 = (jnp.asarray(v0), jnp.asarray(cf.hat(w0) @ R0))
    s0 = rec.state(jnp.asarray(R0.T), S.momentum_map(q0, qd0), spatial=True)  # attitude = g⁻¹

    def err(method, ns):
        go = _final(method, rec, T)
        out = []
        for n in ns:
            s = go(s0, n)
            Rb = rec.configuration(s, T)[1]
            out.append(float(np.abs(np.asarray(Rb) - r["R"][-1]).max()))
        return out

    return err


@pytest.mark.long
def test_turntable_against_unreduced_reference_order_2():
    ns = np.array([32, 64, 128])
    e_lg = _turntable_errors()(rc.MomentumLGVI(), ns)
    assert _order(ns, e_lg) == pytest.approx(2.0, abs=0.2)
    # observed (float64): LGVI 7.5e-3 → 4.7e-4 over 32 → 128 steps
    assert e_lg[-1] < 5e-3


@pytest.mark.slow
@pytest.mark.skipif(not FULL, reason="GEOMJAX_FULL=1 (a second compile)")
def test_turntable_against_unreduced_reference_rkmk4_order_4():
    ns = np.array([32, 64, 128])
    e_rk = _turntable_errors()(rc.ReconstructionRKMK4(), ns)
    # observed 5.6e-4 → 2.6e-6, order 4.1–4.5
    assert _order(ns, e_rk) == pytest.approx(4.0, abs=0.5)
    assert e_rk[-1] < 3e-5


# ---------------------------------------------------------------------- §5.1 vertical disk


def test_vertical_disk_against_unreduced_reference():
    m, I, R = 1.3, 0.5, 0.7
    thd = 1.4

    def phi(t):
        return 0.3 * jnp.sin(2 * t) + 0.5 * t

    T = 2.0
    r = ref.vertical_disk(phi, T, m=m, I=I, R=R, thetadot0=thd, t_eval=[0.0, T])
    S = rc.vertical_disk(mass=m, inertia=I, heading_inertia=0.2, radius=R)
    rec = rc.Reconstruction(S, lambda t: jnp.stack([phi(t)]))
    p0 = float(phi(0.0))
    # the physical momentum J(ċ) = (m ẋ, m ẏ, I θ̇) at t = 0
    mom = jnp.array([m * R * np.cos(p0) * thd, m * R * np.sin(p0) * thd, I * thd])
    s0 = rec.state(momentum=mom)
    go = _final(rc.MomentumLGVI(), rec, T)
    exact = np.array([r["x"][-1], r["y"][-1], r["theta"][-1]])
    errs = [float(np.abs(np.asarray(go(s0, n).g) - exact).max()) for n in (40, 80)]
    assert _order(np.array([40, 80]), errs) == pytest.approx(2.0, abs=0.2)
    assert errs[-1] < 1e-3  # observed ≈ 1e-4


# ---------------------------------------------------------------------- Montgomery's phase


def test_free_rigid_body_montgomery_phase_and_solid_angle_orientation():
    I = np.array([1.0, 2.0, 3.5])
    Pi0 = np.array([1.0, 0.3, 0.6])
    T = cf.free_rigid_body_period(I, Pi0)
    r = ref.free_rigid_body(I, Pi0, T, t_eval=[0.0, T])
    S = rc.free_rigid_body(inertia=I)
    rec = rc.Reconstruction(S, lambda t: jnp.zeros((0,)) * t)
    N = 400
    sol = rc.reconstruct(rec, T, N, momentum=jnp.asarray(Pi0), method=rc.ReconstructionRKMK4())
    g = np.asarray(sol.states.g)
    # RKMK4, h = T/400: observed 1e-9
    np.testing.assert_allclose(g[-1], r["R"][-1], rtol=0, atol=1e-7)
    ph = eqx.filter_jit(rc.so3_phases)(rec, sol)
    M = np.linalg.norm(Pi0)
    E = cf.energy(I, Pi0)
    # ⟨Π, ξ⟩ = 2E is constant for the free body, so the trapezoidal θ_D is exact up to the
    # integrator's energy error
    assert float(ph["theta_dynamic"][-1]) == pytest.approx(
        2 * E * T / M, rel=1e-8
    )  # RKMK4 energy drift O(h⁴), observed 8e-11
    gG = np.asarray(ph["g_geometric"])
    thG = cf.angle_about(gG[-1] @ gG[0].T, Pi0)
    Pi = np.asarray(sol.states.mu)[:-1]
    lam_lib = float(rc.solid_angle(Pi))
    lam_ref = cf.signed_solid_angle(Pi)
    assert lam_lib == pytest.approx(lam_ref, abs=1e-12)
    # θ_G = −Λ (mod 2π): polygon error O(N⁻²) ≈ 3e-5 at N = 400 (1.4e-6 at N = 2000)
    assert abs(cf.wrap(thG + lam_lib)) < 3e-4
    dtheta = cf.angle_about(r["R"][-1], Pi0)
    assert abs(cf.wrap(dtheta - (2 * E * T / M - lam_lib))) < 3e-4


def test_solid_angle_orientation_on_a_latitude_circle():
    alpha = 0.7
    s = np.linspace(0, 2 * np.pi, 2001)[:-1]
    pts = np.stack([np.sin(alpha) * np.cos(s), np.sin(alpha) * np.sin(s), np.cos(alpha) + 0 * s], 1)
    cap = 2 * np.pi * (1 - np.cos(alpha))
    assert float(rc.solid_angle(pts)) == pytest.approx(cap, rel=1e-5)
    assert float(rc.solid_angle(pts[::-1])) == pytest.approx(-cap, rel=1e-5)
    assert cf.signed_solid_angle(pts) == pytest.approx(cap, rel=1e-5)


# ---------------------------------------------------------------------- linked bodies


def test_planar_linked_bodies_holonomy_vmapped_against_newton_euler():
    masses, lengths = np.array([1.0, 2.0, 1.5]), np.array([1.0, 0.8, 1.2])
    S = rc.linked_bodies(masses=masses, lengths=lengths)
    T = 2 * np.pi

    def loop(amp, t):
        return jnp.stack([0.5 + amp * jnp.sin(t), -0.3 + amp * (1 - jnp.cos(t))])

    amps = jnp.array([0.3, 0.8])
    hol = jax.jit(jax.vmap(lambda p: rc.holonomy(S, loop, T, 128, params=p)))(amps)
    kw = dict(
        masses=masses,
        inertias=masses * lengths**2 / 12,
        lp=lengths[:-1] / 2,
        lm=lengths[1:] / 2,
    )
    for amp, h in zip(amps, np.asarray(hol)):
        r = ref.planar_chain(
            lambda t, amp=float(amp): loop(amp, t), T, t_eval=[0.0, T], **kw
        )  # fmt: skip
        d = r["theta"][-1, 0] - r["theta"][0, 0]
        assert abs(d) > 1e-3
        # HorizontalLift is fourth order (Magnus): h = 2π/128
        assert float(np.ravel(h)[0]) == pytest.approx(d, abs=1e-7)


@pytest.mark.long
def test_deforming_body_against_pinned_core_reference():
    inertia, masses = np.array([1.0, 1.3, 0.8]), np.array([0.7, 0.4])
    T = 2 * np.pi

    def base(t):
        return jnp.stack([0.4 * jnp.sin(t), 0.3 * (1 - jnp.cos(t)) + 0.2])

    def shape(t):
        b = base(t)
        return jnp.array([[1.0, b[0], 0.0], [0.0, 1.0, b[1]]])

    S = rc.deforming_body(inertia=inertia, masses=masses)
    rec = rc.Reconstruction(S, base)
    go = _final(rc.ReconstructionRKMK4(), rec, T)
    for L0 in (np.zeros(3), np.array([0.3, -0.2, 0.5])):
        r = ref.core_with_masses(shape, T, inertia=inertia, masses=masses, L0=L0, t_eval=[0, T])
        s0 = rec.state(momentum=jnp.asarray(L0), spatial=True)
        s = go(s0, 200)
        np.testing.assert_allclose(np.asarray(s.g), r["R"][-1], rtol=0, atol=1e-7)
        np.testing.assert_allclose(np.asarray(rec.spatial_momentum(s)), L0, atol=1e-10)
    assert cf.rotation_angle_axis(r["R"][-1])[0] > 0.05


def test_magnetic_deforming_body_against_reference():
    """§5.4: M = γ J in a constant field B; the reference applies the torque γ L × B to the core
    of the unreduced system."""
    inertia, masses = np.array([1.0, 1.3, 0.8]), np.array([0.7, 0.4])
    gamma, B = 0.6, np.array([0.0, 0.4, 1.0])
    T = 2 * np.pi
    L0 = np.array([0.3, -0.2, 0.5])

    def base(t):
        return jnp.stack([0.4 * jnp.sin(t), 0.3 * (1 - jnp.cos(t)) + 0.2])

    def shape(t):
        b = base(t)
        return jnp.array([[1.0, b[0], 0.0], [0.0, 1.0, b[1]]])

    r = ref.core_with_masses(shape, T, inertia=inertia, masses=masses, L0=L0, gamma=gamma,
                             field=lambda t: jnp.asarray(B) + 0 * t, t_eval=[0, T])  # fmt: skip
    S = rc.magnetic_deforming_body(inertia=inertia, masses=masses, gyromagnetic=gamma, field=B)
    rec = rc.Reconstruction(S, base)
    s = _final(rc.ReconstructionRKMK4(), rec, T)(
        rec.state(momentum=jnp.asarray(L0), spatial=True), 200
    )
    np.testing.assert_allclose(np.asarray(s.g), r["R"][-1], rtol=0, atol=1e-7)
    np.testing.assert_allclose(np.asarray(rec.spatial_momentum(s)), r["L"][-1], atol=1e-7)


def test_gyrostat_against_two_body_newton_euler():
    """Carrier + rotor as two rigid bodies with coincident centres and prescribed relative
    rotation exp(α(t) e₁) (``body_chain``) against ``gyrostat``."""
    Ic, j, tr = np.array([1.0, 1.6, 2.2]), 0.3, 0.05

    def alpha(t):
        return 1.5 * jnp.sin(t) + t

    T = 3.0
    L0 = np.array([0.4, -0.7, 1.1])
    r = ref.body_chain(
        lambda t: curves.so3_exp(jnp.array([alpha(t), 0.0, 0.0]))[None],
        T,
        masses=[1.0, 1.0],
        inertias=[Ic, [j, tr, tr]],
        p=np.zeros((1, 3)),
        q=np.zeros((1, 3)),
        L0=L0,
        t_eval=[0.0, T],
    )
    S = rc.gyrostat(inertia=Ic + np.array([0.0, tr, tr]), rotor_axes=[(1.0, 0, 0)],
                    rotor_inertias=[j])  # fmt: skip
    rec = rc.Reconstruction(S, lambda t: jnp.stack([alpha(t)]))
    s = _final(rc.ReconstructionRKMK4(), rec, T)(
        rec.state(momentum=jnp.asarray(L0), spatial=True), 300
    )
    np.testing.assert_allclose(np.asarray(s.g), r["R"][-1, 0], rtol=0, atol=1e-7)


@pytest.mark.long
def test_holonomy_gradient_against_finite_differences_of_the_reference():
    """d(holonomy)/d(loop parameter) by jax.grad through ``holonomy`` against central finite
    differences of the full Newton–Euler chain (DOP853 1e-12: FD error ≈ 1e-12/h + h² ≈ 1e-8)."""
    masses, lengths = np.array([1.0, 2.0, 1.5]), np.array([1.0, 0.8, 1.2])
    S = rc.linked_bodies(masses=masses, lengths=lengths)
    T = 2 * np.pi

    def loop(p, t):
        return jnp.stack([p[1] + p[0] * jnp.sin(t), -0.3 + p[0] * (1 - jnp.cos(t))])

    p0 = np.array([0.6, 0.5])
    grad = np.asarray(jax.jit(jax.grad(lambda p: rc.holonomy(S, loop, T, 64, params=p)[0]))(p0))
    kw = dict(
        masses=masses, inertias=masses * lengths**2 / 12, lp=lengths[:-1] / 2, lm=lengths[1:] / 2
    )

    def hol_ref(p):
        r = ref.planar_chain(lambda t: loop(jnp.asarray(p), t), T, t_eval=[0.0, T], **kw)
        return r["theta"][-1, 0] - r["theta"][0, 0]

    h = 1e-4
    fd = np.array([(hol_ref(p0 + h * e) - hol_ref(p0 - h * e)) / (2 * h) for e in np.eye(2)])
    assert np.abs(fd).max() > 1e-2
    np.testing.assert_allclose(grad, fd, rtol=0, atol=1e-6)


def test_curvature_sign_small_loop_holonomy_of_the_newton_euler_body():
    """Small shape loops of the zero-momentum deforming body (SO(3), non-abelian: the bracket
    term of F matters): the reorientation of the Newton–Euler reference after a counter-clockwise
    circle of radius s about b₀ is exp(−F₁₂(b₀) π s² + O(s³)), F from the library by autodiff."""
    inertia, masses = np.array([1.0, 1.3, 0.8]), np.array([0.7, 0.4])
    b0 = np.array([0.3, 0.2])
    S = rc.deforming_body(inertia=inertia, masses=masses)
    F = np.asarray(jax.jit(S.curvature)(jnp.asarray(b0)))[:, 0, 1]
    T = 2 * np.pi
    errs = []
    for s in (0.04, 0.02):

        def shape(t, s=s):
            b = jnp.asarray(b0) + s * jnp.stack([jnp.cos(t), jnp.sin(t)])
            return jnp.array([[1.0, b[0], 0.0], [0.0, 1.0, b[1]]])

        R = ref.core_with_masses(shape, T, inertia=inertia, masses=masses, t_eval=[0.0, T])["R"][-1]
        ang, axis = cf.rotation_angle_axis(R)
        errs.append(np.abs(ang * axis / (np.pi * s * s) + F).max())
    assert np.linalg.norm(F) > 0.05
    # O(s) error: halves with s (observed 1.2e-3 → 5.8e-4, ratio 2.04; 0.6 % of |F|); the
    # opposite sign convention would miss by 2|F| ≈ 0.19
    assert errs[1] < 0.6 * errs[0] and errs[1] < 0.05 * np.linalg.norm(F)


# ---------------------------------------------------------------------- §5.3 ball in ball


def _bib_path(p, t):
    """Polar angles (θ, φ) of the small ball's centre seen from the big ball: colatitude
    p₀ + p₁ sin s, longitude s, time law s = t + p₂ sin t (p₁ = 0: a latitude circle)."""
    s = t + p[2] * jnp.sin(t)
    return jnp.stack([p[0] + p[1] * jnp.sin(s), s])


@eqx.filter_jit
def _bib_run(rec, s0, n, T):
    """``n`` RKMK4 steps to ``T``: the big and small balls' attitudes ``R₁(T), R₃(T)``."""

    def body(k, s):
        return rc.ReconstructionRKMK4().step(rec, s, T / n, None, k * T / n)[0]

    s = jax.lax.fori_loop(0, n, body, s0)
    q = rec.configuration(s, T)
    return q[0], q[2]


@pytest.mark.long
def test_ball_in_ball_against_two_body_newton_euler():
    """``ball_in_ball`` (reduced, PowerGroup(SO3, 2)) against the Newton–Euler reference of
    both balls with contact and agent forces as multipliers: (i) latitude loop, zero momentum
    and spin — the relative-equilibrium closed form; (ii) a wobbling loop with total angular
    momentum and spin about the contact normal (dynamic, not geometric)."""
    BB = dict(m1=3.0, m2=1.0, Rb=1.0, a=0.25)
    r = BB["Rb"] - BB["a"]
    S = rc.ball_in_ball(mass_big=3.0, mass_small=1.0, radius_big=1.0, radius_small=0.25)
    T = 2 * np.pi

    def r21(p):
        def c(t):
            th, ph = _bib_path(jnp.asarray(p), t)
            return r * jnp.stack(
                [jnp.sin(th) * jnp.cos(ph), jnp.sin(th) * jnp.sin(ph), jnp.cos(th)]
            )

        return c

    # (i) latitude, zero momentum and spin: R1(t) = exp(t (c1 + e3)^) R_z(−t)
    p = np.array([0.9, 0.0, 0.0])
    rec = rc.Reconstruction(S, _bib_path, params=jnp.asarray(p))
    R1, R3 = _bib_run(rec, rec.state(), 256, T)
    c1 = cf.ball_in_ball_latitude(alpha=0.9, nu=1.0, s=0.0, **BB)["c1"]
    # RKMK4, h = 2π/256: observed ≤ 1e-9
    np.testing.assert_allclose(np.asarray(R1), cf.latitude_rotation(T, c1=c1, nu=1.0)[0], atol=1e-7)
    ref_i = ref.ball_in_ball(r21(p), T, t_eval=[0.0, T], **BB)
    np.testing.assert_allclose(np.asarray(R3), ref_i["R3"][-1], atol=1e-7)
    # (ii) wobbling loop with momentum L0 and spin: physical initial velocity from the reference
    p = np.array([0.9, 0.3, 0.2])
    L0, spin = np.array([0.2, -0.1, 0.3]), 0.4
    ref_ii = ref.ball_in_ball(r21(p), T, L0=L0, spin0=spin, t_eval=[0.0, T], **BB)
    w1, w3 = ref_ii["w1"][0], ref_ii["w3"][0]
    d, dd = ref_ii["d"][0], ref_ii.y[0, 9:12] - ref_ii.y[0, 3:6]
    q0 = (jnp.eye(3), jnp.asarray(d), jnp.eye(3))
    qd0 = (jnp.asarray(cf.hat(w1)), jnp.asarray(dd), jnp.asarray(cf.hat(w3)))
    rec = rc.Reconstruction(S, _bib_path, params=jnp.asarray(p))
    s0 = rec.state(momentum=S.momentum_map(q0, qd0), spatial=True)
    R1, R3 = _bib_run(rec, s0, 256, T)
    np.testing.assert_allclose(np.asarray(R1), ref_ii["R1"][-1], atol=1e-7)
    np.testing.assert_allclose(np.asarray(R3), ref_ii["R3"][-1], atol=1e-7)
    assert cf.rotation_angle_axis(ref_ii["R1"][-1])[0] > 0.05


@pytest.mark.slow
@pytest.mark.skipif(not FULL, reason="GEOMJAX_FULL=1 (float32 programs compile slowly: ~110 s CPU)")
def test_float32_holonomy_against_reference():
    """float32 (what GPU users run): the zero-momentum deforming body's holonomy within
    float32 round-off of the float64 Newton–Euler reference (observed ~1e-6)."""
    inertia, masses = np.array([1.0, 1.3, 0.8]), np.array([0.7, 0.4])
    S = rc.deforming_body(inertia=inertia, masses=masses)
    T = 2 * np.pi

    def loop(t):
        return jnp.stack([0.4 * jnp.sin(t), 0.3 * (1 - jnp.cos(t)) + 0.2]).astype(jnp.float32)

    rec = rc.Reconstruction(S, loop)
    s0 = jax.tree_util.tree_map(lambda x: x.astype(jnp.float32), rec.state())
    sol = gj.simulate(rec, rc.HorizontalLift(), s0, np.float32(T / 128), 128)
    g = sol.states.g[-1]
    assert g.dtype == jnp.float32

    def shape(t):
        b = loop(t).astype(jnp.float64)
        return jnp.array([[1.0, b[0], 0.0], [0.0, 1.0, b[1]]])

    r = ref.core_with_masses(shape, T, inertia=inertia, masses=masses, t_eval=[0.0, T])
    assert cf.rotation_angle_axis(r["R"][-1])[0] > 0.02  # 0.027 rad
    np.testing.assert_allclose(np.asarray(g, np.float64), r["R"][-1], rtol=0, atol=2e-5)


@pytest.mark.long
def test_ball_in_ball_direction_path_through_south_pole():
    """The chart-free ``ball_in_ball(base="direction")``: the small ball's path as unit vectors
    seen from the big ball, here a loop through n = −e_z (where the polar chart and its tangent
    frame are singular) with total angular momentum and spin; against the Newton–Euler
    reference of both balls (independent: forces as multipliers, any tangent basis)."""
    BB = dict(m1=3.0, m2=1.0, Rb=1.0, a=0.25)
    r = BB["Rb"] - BB["a"]
    S = rc.ball_in_ball(
        mass_big=3.0, mass_small=1.0, radius_big=1.0, radius_small=0.25, base="direction"
    )
    T, al = 2 * np.pi, 0.7
    c = np.array([np.sin(al), 0.0, -np.cos(al)])  # the loop: angular radius al about c
    u, w = np.array([np.cos(al), 0.0, np.sin(al)]), np.array([0.0, 1.0, 0.0])

    def path(t):  # passes through −e_z at s = π (n = cos al c − sin al u)
        s = t + 0.3 * jnp.sin(t)
        return np.cos(al) * c + np.sin(al) * (jnp.cos(s) * u + jnp.sin(s) * w)

    assert np.allclose(path(np.pi), [0.0, 0.0, -1.0], atol=1e-15)
    L0, spin = np.array([0.2, -0.1, 0.3]), 0.4
    ref_ = ref.ball_in_ball(lambda t: r * path(t), T, L0=L0, spin0=spin, t_eval=[0.0, T], **BB)
    w1, w3 = ref_["w1"][0], ref_["w3"][0]
    d, dd = ref_["d"][0], ref_.y[0, 9:12] - ref_.y[0, 3:6]
    q0 = (jnp.eye(3), jnp.asarray(d), jnp.eye(3))
    qd0 = (jnp.asarray(cf.hat(w1)), jnp.asarray(dd), jnp.asarray(cf.hat(w3)))
    rec = rc.Reconstruction(S, path)
    s0 = rec.state(momentum=S.momentum_map(q0, qd0), spatial=True)

    R1, R3 = _bib_run(rec, s0, 256, T)
    assert np.all(np.isfinite(np.asarray(R1)))
    # RKMK4, h = 2π/256, as the polar-chart test above (observed ~1e-9)
    np.testing.assert_allclose(np.asarray(R1), ref_["R1"][-1], atol=1e-7)
    np.testing.assert_allclose(np.asarray(R3), ref_["R3"][-1], atol=1e-7)
    assert cf.rotation_angle_axis(ref_["R1"][-1])[0] > 0.05
