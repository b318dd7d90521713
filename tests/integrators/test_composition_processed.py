"""Compositions with processing (ProcessedComposition): the published coefficients verified by
the order conditions they must meet, by the measured effective order on a generic linear
problem (random non-commuting matrices, exact solution by scipy.linalg.expm), and by the
measured order of the processed LGVI against SciPy DOP853 at rtol = atol = 1e-13 (free body,
heavy top); structure kept (Casimir, spatial momentum); simulate, restarts and bad inputs."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.linalg as sl

import geomjax as gj
from geomjax.integrators import PROCESSED

from .helpers import fitted_order, integrate, terminal_error
from .reference import reference

I123 = jnp.array([1.0, 2.0, 3.0])
RB = gj.RigidBody(I123)
R0 = gj.SO3.exp(jnp.array([0.3, -0.2, 0.5]))
PI0 = jnp.array([0.8, -0.3, 1.1])
T = 2.0


@pytest.mark.parametrize("name", list(PROCESSED))
def test_kernel_and_processor_conditions(name):
    """Kernel: palindromic (symmetric), Σγ = 1 and Σγ^(2k+1) = 0 for 2k+1 < p — the terms
    ``h^(2k+1) Y_(2k+1)`` of the base method's modified field are no commutators, so no
    processor removes them (Blanes, Casas & Ros 1999, §3) — to the digits published (15);
    processor: sums to zero (``P_h = id + O(h)``).  The kernel alone is *not* of order p: for
    p ≥ 6 the bracket condition of order 5 fails (checked through the linear problem below)."""
    order, gam, proc = PROCESSED[name]
    g = np.asarray(gam)
    np.testing.assert_array_equal(g, g[::-1])
    assert abs(g.sum() - 1.0) < 1e-15
    for k in range(3, order, 2):
        assert abs(np.sum(g**k)) < 1e-13, (k, np.sum(g**k))
    assert abs(np.sum(proc)) < 1e-14
    m = gj.ProcessedComposition(gj.LGVI(), name)
    assert m.order == order and m.stages == len(g) and not m.symmetric


def _expm_skew(B):
    """``tau -> expm(tau B)`` for a real skew matrix ``B`` from the eigendecomposition of the
    Hermitian ``iB`` (unitary eigenvectors: exact to round-off, and cheap to call often)."""
    w, V = np.linalg.eigh(1j * B)
    return lambda tau: ((V * np.exp(-1j * tau * w)) @ V.conj().T).real


def _processed_linear(name, B, C, h, T):
    """``P_h K_h^n P_h^{-1}`` for Strang's ``e^{hB/2} e^{hC} e^{hB/2}`` (symmetric, order 2)."""
    _, gam, proc = PROCESSED[name]
    eB, eC = _expm_skew(B), _expm_skew(C)

    def base(tau):
        return eB(0.5 * tau) @ eC(tau) @ eB(0.5 * tau)

    def comp(coeffs):
        M = np.eye(B.shape[0])
        for c in coeffs:
            M = base(c * h) @ M
        return M

    K = np.linalg.matrix_power(comp(gam), round(T / h))
    return comp([-p for p in proc[::-1]]) @ K @ comp(proc), K


@pytest.mark.parametrize("name", list(PROCESSED))
def test_effective_order_on_a_linear_problem(name):
    """``y' = (B + C) y`` with random skew 4×4 B, C (a generic non-commutative case of every
    order condition), exact solution ``expm(T (B + C))``: processed, the fitted order is the
    effective order (measured 6.27, 8.06, and 10.1 between the two finest steps of bcm10);
    the kernel alone is of order 4 (measured 4.06, 4.11, 4.74)."""
    order = PROCESSED[name][0]
    rng = np.random.default_rng(1)
    B, C = rng.normal(size=(2, 4, 4))
    B, C = B - B.T, C - C.T
    exact = sl.expm(B + C)
    hs = (0.5, 0.25, 0.125) if order < 10 else (1.0, 0.5, 0.25)
    errs, kern = [], []
    for h in hs:
        Y, K = _processed_linear(name, B, C, h, 1.0)
        errs.append(np.abs(Y - exact).max())
        kern.append(np.abs(K - exact).max())
    # the two finest steps (bcm10 is pre-asymptotic at h = 1); errors 1e-5 .. 1e-10, far above
    # round-off (~1e-14 here)
    slope = np.log(errs[-2] / errs[-1]) / np.log(2.0)
    assert abs(slope - order) < 0.4, (errs, slope)
    assert errs[-1] > 1e-12
    assert fitted_order(hs, kern) < order - 1.0, kern


@pytest.fixture(scope="module")
def ref_free():
    s0 = RB.make_state(R0, PI0)
    _, gs, mus = reference(RB, s0, T, t_eval=[T], rtol=1e-13, atol=1e-13)
    return gs[-1], mus[-1]


def test_processed_lgvi_order_eight_and_structure(ref_free):
    """The processed LGVI (bcm8) on the free body against DOP853: fitted order 8 (measured
    7.9; errors 6e-6 .. 2.5e-10, above the reference's ~1e-12); every stage is an LGVI step,
    so the Casimir |Pi|² and the spatial momentum R Pi are kept to round-off (~1e-15 per
    stage, 100-500 stages: asserted 1e-12)."""
    method = gj.ProcessedComposition(gj.LGVI(), "bcm8")
    s0 = RB.make_state(R0, PI0)
    dts = (0.5, 0.25, 0.125)
    errs = []
    for dt in dts:
        s = integrate(RB, method, s0, jnp.asarray(dt), jnp.asarray(round(T / dt)))
        errs.append(
            max(
                float(jnp.max(jnp.abs(s.R - ref_free[0]))),
                float(jnp.max(jnp.abs(s.Pi - ref_free[1]))),
            )
        )
        assert abs(float(s.Pi @ s.Pi - PI0 @ PI0)) < 1e-12
        m0, m1 = R0 @ PI0, s.R @ s.Pi
        assert float(jnp.max(jnp.abs(m1 - m0))) < 1e-12
    slope = fitted_order(dts, errs)
    assert abs(slope - 8) < 0.4, (errs, slope)
    assert errs[-1] > 1e-11


@pytest.mark.long
@pytest.mark.parametrize("name,dts", [("blanes6", (0.2, 0.1, 0.05)), ("bcm10", (1.0, 0.5, 0.25))])
def test_processed_lgvi_orders(name, dts, ref_free):
    """blanes6 and bcm10 on the free body against DOP853: slopes between the two finest steps
    measured 5.98 (errors 4.2e-8, 6.6e-10) and 9.74 (4.7e-9, 5.5e-12; the reference's error,
    ~1e-13 at rtol = atol = 1e-13, moves that slope by < 0.05)."""
    method = gj.ProcessedComposition(gj.LGVI(), name)
    errs = [terminal_error(RB, method, RB.make_state(R0, PI0), T, dt, *ref_free) for dt in dts]
    slope = np.log(errs[-2] / errs[-1]) / np.log(2.0)
    assert abs(slope - method.order) < 0.5, (errs, slope)
    assert errs[-1] > 2e-12


@pytest.mark.long
def test_processed_heavy_top_and_simulate():
    """With a potential (heavy top) bcm8 keeps order 8 against DOP853; through simulate with
    saves every 5 steps (the processor applied at each save, the kernel variable carried) the
    result equals the fori-loop run to round-off, and a run continued from a saved state
    agrees with the uninterrupted one to round-off."""
    from geomjax.systems import HeavyTop

    top = gj.RigidBody(I123, HeavyTop(1.0, 9.81, [0.0, 0.1, 0.4]))
    s0 = top.make_state(R0, PI0)
    _, gs, mus = reference(top, s0, 1.0, t_eval=[1.0], rtol=1e-13, atol=1e-13)
    method = gj.ProcessedComposition(gj.LGVI(), "bcm8")
    dts = (0.25, 0.125, 0.0625)  # errors ~1e-6 .. 1e-10 (3.5e-9 at dt 0.1)
    errs = [terminal_error(top, method, s0, 1.0, dt, gs[-1], mus[-1]) for dt in dts]
    assert abs(fitted_order(dts, errs) - 8) < 0.5, errs
    sol = gj.simulate(top, method, s0, 0.05, 20, save_every=5)
    s = integrate(top, method, s0, jnp.asarray(0.05), jnp.asarray(20))
    np.testing.assert_allclose(sol.final_state.Pi, s.Pi, rtol=0, atol=1e-13)
    assert float(sol.max_residual) < 1e-13
    half = gj.simulate(top, method, s0, 0.05, 10, save_every=5)
    rest = gj.simulate(top, method, half.final_state, 0.05, 10, save_every=5)
    np.testing.assert_allclose(rest.final_state.Pi, sol.final_state.Pi, rtol=0, atol=1e-13)


@pytest.mark.long
def test_processed_vmap_and_derivative():
    """Under vmap a member equals its unbatched run; the forward derivative (processor, kernel,
    the lax.cond on the step size, the implicit-function-theorem derivatives of the solves)
    matches central differences (step 1e-6: truncation ~1e-12, round-off ~1e-10)."""
    method = gj.ProcessedComposition(gj.LGVI(), "bcm8")
    Pis = jnp.array([[0.8, -0.3, 1.1], [0.1, 0.5, -0.4]])

    @jax.jit
    def final_pi(Pi):
        return integrate(RB, method, RB.make_state(R0, Pi), jnp.asarray(0.1), jnp.asarray(20)).Pi

    batched = jax.vmap(final_pi)(Pis)
    np.testing.assert_allclose(batched[1], final_pi(Pis[1]), rtol=0, atol=1e-14)
    v = jnp.array([0.3, -0.5, 0.8])
    _, jv = jax.jit(lambda p: jax.jvp(final_pi, (p,), (v,)))(Pis[0])
    eps = 1e-6
    fd = (final_pi(Pis[0] + eps * v) - final_pi(Pis[0] - eps * v)) / (2 * eps)
    np.testing.assert_allclose(jv, fd, rtol=0, atol=1e-8)


def test_bad_inputs_raise():
    with pytest.raises(ValueError, match="'scheme'"):
        gj.ProcessedComposition(gj.LGVI(), "kahan_li8")
    with pytest.raises(ValueError, match="symmetric"):
        gj.ProcessedComposition(gj.RKMK4())
    with pytest.raises(ValueError, match="'loop'"):
        gj.ProcessedComposition(gj.LGVI(), loop="while")
    method = gj.ProcessedComposition(gj.LGVI(), "blanes6")
    carry = method.init(RB, RB.make_state(R0, PI0))
    with pytest.raises(ValueError, match="controls"):
        method.advance(RB, carry, 0.1, jnp.zeros(3))
    with pytest.raises(ValueError, match="symmetric"):
        gj.Composition(method)
