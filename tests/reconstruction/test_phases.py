"""Phases and holonomy (Cabrera, *Base-controlled mechanical systems and geometric phases*, §4): solid-angle orientation, Montgomery's rigid-body phase,
small-loop holonomy against the curvature (with its order), reparametrization invariance,
gradients against finite differences and batched loops.

One compiled batch of loops serves the holonomy checks (all batches have the same size)."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import geomjax as gj
from geomjax.reconstruction import (
    HorizontalLift,
    MomentumLGVI,
    Reconstruction,
    ReconstructionRKMK4,
    ball_in_ball,
    deforming_body,
    free_rigid_body,
    holonomy,
    linked_bodies,
    magnetic_deforming_body,
    reconstruct,
    so3_phases,
    solid_angle,
)


def test_solid_angle_orientation_pinned():
    """Counterclockwise about the enclosed cap's outward normal is positive."""
    a = 0.7
    phi = jnp.linspace(0, 2 * jnp.pi, 2001)[:-1]
    circ = jnp.stack(
        [jnp.sin(a) * jnp.cos(phi), jnp.sin(a) * jnp.sin(phi), jnp.cos(a) * jnp.ones_like(phi)], 1
    )
    exact = 2 * np.pi * (1 - np.cos(a))
    assert float(solid_angle(circ)) == pytest.approx(exact, rel=1e-5)  # chord error O(N⁻²)
    assert float(solid_angle(circ[::-1])) == pytest.approx(-exact, rel=1e-5)
    # a spherical octant triangle: solid angle π/2 exactly (geodesic edges sampled finely)
    s = jnp.linspace(0, 1, 400)[:, None]
    e = jnp.eye(3)

    def arc(p, q):
        v = (1 - s) * p + s * q
        return v / jnp.linalg.norm(v, axis=1, keepdims=True)

    tri = jnp.concatenate([arc(e[0], e[1])[:-1], arc(e[1], e[2])[:-1], arc(e[2], e[0])[:-1]])
    assert float(solid_angle(tri)) == pytest.approx(np.pi / 2, rel=1e-9)
    assert float(solid_angle(3.0 * tri)) == pytest.approx(np.pi / 2, rel=1e-9)  # any radius
    with pytest.raises(ValueError, match="points"):
        solid_angle(jnp.zeros((4, 2)))


@pytest.mark.long
def test_montgomery_phase_symmetric_top():
    """Free symmetric top: Π(t) circles the body axis with period T = 2π/|Π₃(1/I₁ − 1/I₃)|;
    the rotation about μ after one period is Δθ = 2ET/|μ| − Ω (mod 2π), with θ_D = 2ET/|μ|
    and θ_G = −Ω — this pins the sign of the geometric phase."""
    I1, I3, a, L = 1.0, 2.0, 0.6, 1.3
    rec = Reconstruction(free_rigid_body((I1, I1, I3)), lambda t: jnp.zeros((0,)))
    Pi0 = L * jnp.array([np.sin(a), 0.0, np.cos(a)])
    T = 2 * np.pi / abs(float(Pi0[2]) * (1 / I1 - 1 / I3))
    sol = reconstruct(rec, T, 400, momentum=Pi0, method=ReconstructionRKMK4())
    ph = so3_phases(rec, sol)
    Pi = sol.states.mu
    np.testing.assert_allclose(Pi[-1], Pi[0], atol=1e-7)  # closed loop (RKMK4 error ~3e-9)
    E = 0.5 * float(Pi0 @ (Pi0 / jnp.array([I1, I1, I3])))
    assert float(ph["theta_dynamic"][-1]) == pytest.approx(2 * E * T / L, rel=1e-9)
    Om = 2 * np.pi * (1 - np.cos(a))  # Π circles the body z-axis at colatitude a
    assert float(solid_angle(Pi[:-1])) == pytest.approx(Om, rel=1e-3)  # polygon of 400 points
    gG = ph["g_geometric"]
    u = ph["axis"]
    thG = gj.SO3.log(gG[-1] @ gG[0].T)
    np.testing.assert_allclose(thG, -Om * u, atol=1e-6)
    total = float(gj.SO3.log(sol.states.g[-1] @ sol.states.g[0].T) @ u)
    pred = (2 * E * T / L - Om + np.pi) % (2 * np.pi) - np.pi
    assert total == pytest.approx(pred, abs=1e-6)
    # g_G lifts Π (g_Gᵀ μ = Π) and the dynamic factor keeps μ fixed
    np.testing.assert_allclose(jnp.einsum("nji,j->ni", gG, ph["mu"][0]), Pi, atol=1e-8)
    np.testing.assert_allclose(ph["mu"], ph["mu"][0] + 0 * ph["mu"], atol=1e-8)
    _assert_horizontal(gG, u, sol.times)


BODY = deforming_body(inertia=(1.0, 1.5, 2.0), masses=(0.5, 0.7))


def _loop(p, t):
    """Circle of radius p[2] about (p[0], p[1]) in shape space, time law s = t + p[3] sin t."""
    s = t + p[3] * jnp.sin(t)
    return p[:2] + p[2] * jnp.stack([jnp.cos(s), jnp.sin(s)])


@jax.jit
def _hol(P):
    return jax.vmap(lambda p: gj.SO3.log(holonomy(BODY, _loop, 2 * jnp.pi, 48, params=p)))(P)


@pytest.mark.long
def test_holonomy_curvature_reparametrization_gradient_and_batch():
    c0 = np.array([0.2, 0.1])
    eps = np.array([0.2, 0.1, 0.05, 0.025])
    rng = np.random.default_rng(0)
    centers = rng.uniform(-0.3, 0.3, (6, 2))
    p_grad = np.array([0.2, 0.1, 0.15, 0.0])
    d = 1e-5
    rows = [[*c0, e, 0.0] for e in eps]  # 0-3 shrinking loops
    rows += [[*c0, 0.1, 0.4], [*c0, 0.1, -0.7]]  # 4-5 reparametrized copies of row 1
    rows += [[*c, 0.05, 0.0] for c in centers]  # 6-11 a batch of loops elsewhere
    for i in range(3):  # 12-17 central differences in the centre and radius
        for sgn in (1, -1):
            q = p_grad.copy()
            q[i] += sgn * d
            rows.append(q)
    P = jnp.asarray(np.array(rows))
    W = _hol(P)  # (18, 3): one compiled, vmapped call
    F = jax.jit(jax.vmap(BODY.curvature))(jnp.asarray(np.vstack([c0, centers])))[:, :, 0, 1]
    # small loops: log hol = −F·area + O(ε³) — fitted order of the remainder
    area = np.pi * eps**2
    rem = np.linalg.norm(np.asarray(W[:4]) + np.outer(area, F[0]), axis=1)
    assert np.polyfit(np.log(eps), np.log(rem), 1)[0] == pytest.approx(3.0, abs=0.3)
    assert rem[-1] < 0.05 * np.linalg.norm(F[0]) * area[-1]
    # geometric phase: independent of the time law of the loop (RKMK4 error, 48 steps)
    np.testing.assert_allclose(W[4], W[1], atol=1e-8)
    np.testing.assert_allclose(W[5], W[1], atol=1e-8)
    # batched loops elsewhere follow their own curvature
    for k in range(6):
        pred = -F[k + 1] * np.pi * 0.05**2
        assert np.linalg.norm(W[6 + k] - pred) < 0.1 * np.linalg.norm(pred) + 1e-9
    # gradient of the holonomy with respect to the loop parameters vs central differences
    c = jnp.array([0.3, -0.5, 0.8])
    grad = jax.jit(
        jax.grad(lambda p: gj.SO3.log(holonomy(BODY, _loop, 2 * jnp.pi, 48, params=p)) @ c)
    )(jnp.asarray(p_grad))
    fd = [(float(W[12 + 2 * i] @ c) - float(W[13 + 2 * i] @ c)) / (2 * d) for i in range(3)]
    np.testing.assert_allclose(grad[:3], fd, rtol=1e-5, atol=1e-9)


@pytest.mark.long
def test_magnetic_body_larmor_precession():
    """§5.4: the spatial angular momentum precesses at the Larmor rate, μ(t) = exp(t ω̂_l) μ₀
    with ω_l = −γB, whatever the shape does."""
    S = magnetic_deforming_body(gyromagnetic=0.8, field=(0.0, 0.3, 1.0))
    rec = Reconstruction(S, lambda t: 0.3 * jnp.stack([jnp.sin(t), jnp.sin(2 * t)]))
    mu0 = jnp.array([0.5, -0.2, 0.4])
    T = 2.0
    sol = reconstruct(rec, T, 100, momentum=mu0, spatial=True, method=ReconstructionRKMK4())
    mu = jax.vmap(rec.spatial_momentum)(sol.states)
    wl = -0.8 * jnp.array([0.0, 0.3, 1.0])
    exact = jax.vmap(lambda t: gj.SO3.exp(t * wl) @ mu0)(sol.times)
    assert float(jnp.max(jnp.abs(mu - exact))) < 1e-8  # RKMK4, h = 0.02 (observed ~1e-11)
    # §5.4 factorization g = h_M h_D g_G: g_G lifts Π and is horizontal (u·ω(g_G) = 0)
    ph = so3_phases(rec, sol, frame=lambda t: gj.SO3.exp(t * wl))
    gG, u = ph["g_geometric"], ph["axis"]
    np.testing.assert_allclose(jnp.einsum("nji,j->ni", gG, mu0), sol.states.mu, atol=1e-8)
    _assert_horizontal(gG, u, sol.times)


def _assert_horizontal(gG, u, ts):
    """``u·(ġ_G g_Gᵀ)^∨ = 0`` by central differences: O(h²) ≈ 1e-4 of the angular rate, while
    the dynamic rate it removes is O(1)."""
    h = float(ts[1] - ts[0])
    W = jnp.einsum("nij,nkj->nik", gG[2:] - gG[:-2], gG[1:-1]) / (2 * h)
    w = 0.5 * jnp.stack(
        [W[:, 2, 1] - W[:, 1, 2], W[:, 0, 2] - W[:, 2, 0], W[:, 1, 0] - W[:, 0, 1]], 1
    )
    assert float(jnp.max(jnp.abs(w @ u))) < 1e-2 * float(jnp.max(jnp.linalg.norm(w, axis=1)))


@pytest.mark.long
def test_ball_in_ball_geometric_at_zero_momentum():
    """§5.3 with zero total angular momentum and no initial spin about the contact normal: the
    dynamics (MomentumLGVI, zero free momentum) is the horizontal lift — purely geometric
    (the conventions note: Remark 5.6 is too pessimistic) — and the total angular momentum
    (the h-part, a horizontal symmetry) is conserved to round-off."""
    S = ball_in_ball(mass_big=10.0, mass_small=1.0, radius_big=1.0, radius_small=0.2)

    def path(p, t):  # a loop of the small ball seen from the big one, time law t + p sin t
        s = t + p[0] * jnp.sin(t)
        return jnp.stack([0.8 + 0.3 * jnp.cos(s), 0.3 * jnp.sin(s)])

    @eqx.filter_jit
    def run(p, method):
        rec = Reconstruction(S, path, params=p)
        sol = reconstruct(rec, 2 * jnp.pi, 200, method=method)
        mus = jax.vmap(rec.spatial_momentum)(sol.states)
        return sol.states.g[-1], jnp.max(jnp.abs(mus[:, :3] - mus[0, :3]))

    g_dyn, drift = run(jnp.array([0.0]), MomentumLGVI())
    assert float(drift) < 1e-14
    g_lift, _ = run(jnp.array([0.0]), HorizontalLift())
    g_lift2, _ = run(jnp.array([0.5]), HorizontalLift())
    np.testing.assert_allclose(g_lift2, g_lift, atol=1e-7)  # geometric: time law irrelevant
    # LGVI (second order, h ≈ 0.03) agrees with the fourth-order lift; observed 8e-5
    np.testing.assert_allclose(g_dyn, g_lift, atol=1e-3)
    assert float(jnp.max(jnp.abs(g_lift[0] - jnp.eye(3)))) > 1e-2  # the big ball did turn


@pytest.mark.long
def test_linked_bodies_abelian_stokes():
    """Planar three-link chain at zero angular momentum (abelian, §3.3): the holonomy of a finite
    shape loop is exactly −∬F (Stokes), F = dA from :meth:`curvature`; Gauss quadrature."""
    S = linked_bodies(masses=(1.0, 2.0, 1.5), lengths=(1.0, 0.8, 1.2))
    c, rho = jnp.array([0.4, -0.6]), 0.9

    def loop(t):
        return c + rho * jnp.stack([jnp.cos(t), jnp.sin(t)])

    hol = float(holonomy(S, loop, 2 * jnp.pi, 200)[0])
    x, w = np.polynomial.legendre.leggauss(24)
    r = 0.5 * rho * (x + 1)
    th = np.linspace(0, 2 * np.pi, 48, endpoint=False)
    R_, T_ = np.meshgrid(r, th, indexing="ij")
    pts = np.stack([c[0] + R_ * np.cos(T_), c[1] + R_ * np.sin(T_)], -1).reshape(-1, 2)
    F = np.asarray(jax.jit(jax.vmap(S.curvature))(jnp.asarray(pts)))[:, 0, 0, 1]
    flux = np.sum(F.reshape(R_.shape) * (0.5 * rho * w * r)[:, None]) * (2 * np.pi / 48)
    assert abs(flux) > 5e-3  # a genuine reorientation (observed 8.8e-3 rad)
    assert hol == pytest.approx(-flux, abs=1e-8)
