"""Composition of symmetric methods (order 4, 6 and 8) on SO(3): fitted orders against SciPy DOP853
at rtol = atol = 1e-13 (free body, heavy top, piecewise-constant controls), structure kept
(spatial momentum and Casimir to round-off, group defect ~1e-15), the two stage loops agree, and
bad inputs raise.  The nonholonomic cases (sleigh, ball on an accelerating turntable) are in
``tests/nonholonomic/test_nonholonomic_composition.py``."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import geomjax as gj
from geomjax._internal.eager import EAGER_COMPILER_OPTIONS
from geomjax.integrators import SCHEMES
from geomjax.systems import HeavyTop

from .helpers import fitted_order, terminal_error
from .reference import reference

I123 = jnp.array([1.0, 2.0, 3.0])
RB = gj.RigidBody(I123)
TOP = gj.RigidBody(I123, HeavyTop(1.0, 9.81, [0.0, 0.1, 0.4]))
R0 = gj.SO3.exp(jnp.array([0.3, -0.2, 0.5]))
PI0 = jnp.array([0.8, -0.3, 1.1])
T = 2.0


@pytest.mark.parametrize("name", list(SCHEMES))
def test_scheme_coefficients_satisfy_order_conditions(name):
    """Σγ = 1, Σγ³ = 0 (order 4), Σγ⁵ = 0 (order 6), palindromic (HLW §V.3.2) — to the
    digits the coefficients are published with (Yoshida's sixth-order: 15 digits)."""
    order, gam = SCHEMES[name]
    g = np.asarray(gam)
    np.testing.assert_array_equal(g, g[::-1])
    assert abs(g.sum() - 1.0) < 1e-15
    assert abs(np.sum(g**3)) < 1e-13
    if order >= 6:
        assert abs(np.sum(g**5)) < 1e-12
    if order >= 8:
        assert abs(np.sum(g**7)) < 1e-12
    m = gj.Composition(gj.LGVI(), name)
    assert m.order == order and m.stages == len(g)


# (system, base method, scheme, step sizes).  The error constants differ a lot (the splitting's is
# ~100x smaller than the LGVI's on the free body), so the step sizes are chosen per case to keep
# the errors between ~1e-4 and ~1e-11, i.e. in the asymptotic range and well above the
# reference's accuracy (~1e-12).
ORDER_CASES = {
    "free-LGVI-suzuki4": (RB, gj.LGVI(), "suzuki4", (0.2, 0.1, 0.05)),
    "free-LGVI-kahan_li6": (RB, gj.LGVI(), "kahan_li6", (0.2, 0.1, 0.05)),
    "free-LGVI-yoshida6": (RB, gj.LGVI(), "yoshida6", (0.2, 0.1, 0.05)),  # 1.5e-5 → 4.2e-9
    "free-LGVI-kahan_li8": (RB, gj.LGVI(), "kahan_li8", (0.4, 0.2, 0.1)),
    "free-splitting-yoshida4": (RB, gj.RigidBodySplitting(), "yoshida4", (0.1, 0.05, 0.025)),
    "top-LGVI-suzuki4": (TOP, gj.LGVI(), "suzuki4", (0.05, 0.025, 0.0125)),
}


@pytest.fixture(scope="module")
def references():
    out = {}
    for system in (RB, TOP):
        s0 = system.make_state(R0, PI0)
        _, gs, mus = reference(system, s0, T, t_eval=[T], rtol=1e-13, atol=1e-13)
        out[id(system)] = (gs[-1], mus[-1])
    return out


@pytest.mark.parametrize("case", list(ORDER_CASES))
def test_fitted_order_against_dop853(case, references):
    system, base, scheme, dts = ORDER_CASES[case]
    method = gj.Composition(base, scheme)
    s0 = system.make_state(R0, PI0)
    g_ref, mu_ref = references[id(system)]
    errs = [terminal_error(system, method, s0, T, dt, g_ref, mu_ref) for dt in dts]
    slope = fitted_order(dts, errs)
    # observed slopes 3.98-4.00, 5.86 and 5.89 (yoshida6); 0.3 leaves room for pre-asymptotic
    # curvature
    assert abs(slope - method.order) < 0.3, (errs, slope)
    assert errs[-1] > 1e-11  # the fit is not polluted by the reference's own error


@eqx.filter_jit
def _controlled(system, method, s0, u, dt, n, reps):
    """Terminal state after ``n`` steps; control piece ``k // reps`` on step k (dynamic n)."""

    def body(k, c):
        carry, t = c
        carry, _ = method.advance(system, carry, dt, u[k // reps], t)
        return carry, t + dt

    carry, _ = jax.lax.fori_loop(0, n, body, (method.init(system, s0), jnp.zeros((), dt.dtype)))
    return method.finalize(system, carry)


def test_piecewise_constant_controls_keep_order_four():
    """Every stage sees the step's control (zero-order hold): fourth order against DOP853 run
    piece by piece over the discontinuities; stages in lax.scan equal the unrolled stages."""
    s0 = TOP.make_state(R0, PI0)
    dt_c = 0.25
    u = 0.5 * jnp.sin(jnp.arange(24.0)).reshape(8, 3)
    _, gs, mus = reference(
        TOP, s0, T, control=np.asarray(u), dt_control=dt_c, rtol=1e-13, atol=1e-13
    )
    dts = (0.05, 0.025, 0.0125)
    method = gj.Composition(gj.LGVI(), "yoshida4", loop="scan")
    errs = []
    for dt in dts:
        reps = round(dt_c / dt)
        s = _controlled(TOP, method, s0, u, jnp.asarray(dt), jnp.asarray(8 * reps), reps)
        errs.append(max(np.abs(s.R - gs[-1]).max(), np.abs(s.Pi - mus[-1]).max()))
    slope = fitted_order(dts, errs)
    assert abs(slope - 4) < 0.3, (errs, slope)


def test_structure_is_kept_to_round_off():
    """Kahan–Li order 6 on the LGVI, 500 steps of dt 0.05 (4500 stages, a third of them
    backwards): spatial momentum R Pi and the Casimir |Pi|² at round-off (each stage conserves
    them up to the rounding of one step), group defect at round-off (it grows by ~eps per
    stage at worst, as for the base method: 4500 eps = 1e-12 bounds it; observed 1e-14),
    energy error bounded by the sixth-order error."""
    method = gj.Composition(gj.LGVI(), "kahan_li6", loop="scan")
    sol = gj.simulate(RB, method, RB.make_state(R0, PI0), 0.05, 500, save_every=10)
    d = gj.diagnostics(RB, sol)
    m = np.asarray(d["spatial_momentum"])
    assert np.max(np.abs(m - m[0])) / np.linalg.norm(m[0]) < 1e-12
    c = np.asarray(d["casimir_norm_Pi_sq"])
    assert np.max(np.abs(c - c[0])) / c[0] < 1e-12
    assert float(jnp.max(d["group_defect"])) < 1e-12
    E = np.asarray(jax.vmap(RB.energy)(sol.states))
    assert np.max(np.abs(E - E[0])) / E[0] < 1e-7
    assert float(sol.max_residual) < 1e-13


def test_bad_inputs_raise():
    with pytest.raises(ValueError, match="symmetric"):
        gj.Composition(gj.RKMK4())
    with pytest.raises(ValueError, match="'scheme'"):
        gj.Composition(gj.LGVI(), "yoshida8")
    with pytest.raises(ValueError, match="palindromic"):
        gj.Composition(gj.LGVI(), (0.5, 0.3, 0.2))
    with pytest.raises(ValueError, match="'loop'"):
        gj.Composition(gj.LGVI(), loop="while")
    with pytest.raises(ValueError, match="'method'"):
        gj.Composition("LGVI")
    forced = gj.RigidBody(I123, force=lambda t, R, Pi: -0.1 * Pi)
    with pytest.raises(ValueError, match="force"):
        gj.simulate(forced, gj.Composition(gj.LGVI()), forced.make_state(R0, PI0), 0.1, 2)
    # a custom palindromic scheme: the triple jump written out, order declared
    c = 2 ** (1 / 3)
    custom = gj.Composition(gj.LGVI(), (1 / (2 - c), -c / (2 - c), 1 / (2 - c)), order=4)
    assert custom.order == 4 and custom.symmetric
    a = gj.simulate(RB, custom, RB.make_state(R0, PI0), 0.1, 5).final_state
    for loop in ("unroll", "scan"):  # the stage loops: the same arithmetic up to reassociation
        named = gj.Composition(gj.LGVI(), "yoshida4", loop=loop)
        b = gj.simulate(RB, named, RB.make_state(R0, PI0), 0.1, 5).final_state
        np.testing.assert_allclose(a.Pi, b.Pi, rtol=0, atol=1e-15)
        np.testing.assert_allclose(a.R, b.R, rtol=0, atol=1e-15)


def test_float32_composition_stays_on_the_group():
    """float32 (what batched users run): the base LGVI reorthonormalizes in float32 by default,
    so 1000 steps of order 4 (5000 stages) keep the group defect and the relative momentum drift
    at the float32 round-off level (a random walk of ~eps per stage: sqrt(5000)·6e-8 ≈ 4e-6;
    asserted 1e-4), and the result stays close to the float64 run (fourth-order error at dt 0.05
    ~1e-6 plus float32 round-off)."""
    method = gj.Composition(gj.LGVI(), "suzuki4")
    s32 = gj.RigidBodyState(R0.astype(jnp.float32), PI0.astype(jnp.float32))
    sol = gj.simulate(RB, method, s32, 0.05, 1000, save_every=1000)
    assert sol.states.R.dtype == jnp.float32
    d = gj.diagnostics(RB, sol)
    assert float(jnp.max(d["group_defect"])) < 1e-5
    m = np.asarray(d["spatial_momentum"], dtype=np.float64)
    assert np.max(np.abs(m - m[0])) / np.linalg.norm(m[0]) < 1e-4
    ref = gj.simulate(RB, method, RB.make_state(R0, PI0), 0.05, 1000, save_every=1000)
    np.testing.assert_allclose(sol.final_state.Pi, ref.final_state.Pi, atol=1e-3)


@pytest.mark.parametrize("scheme", ["yoshida4", "suzuki4"])
def test_composition_takes_the_base_methods_controls(scheme):
    """A composition's control is its base method's: actuator commands through ``Actuated``
    (4 rotor thrusts → a body wrench), checked and simulated as such; the run equals the same
    composition driven by the wrenches ``B u`` themselves."""
    from geomjax.control.trajopt import Actuated

    body = gj.RigidBodySE3(1.0, [0.02, 0.02, 0.04])
    B = jnp.asarray(np.random.default_rng(0).normal(size=(6, 4)))
    us = jnp.asarray(0.1 * np.sin(np.arange(40.0)).reshape(10, 4))

    def compose(method):
        return gj.Composition(method, scheme)

    s0 = body.make_state(gj.SE3.identity(), jnp.array([0.1, -0.2, 0.3, 0.5, 0.0, -0.1]))
    method = compose(Actuated(gj.LGVI(), B))
    assert method.control_shape(body) == (4,)
    assert gj.ProcessedComposition(Actuated(gj.LGVI(), B), "bcm8").control_shape(body) == (4,)
    commands = gj.simulate(body, method, s0, 0.01, 10, us)
    wrenches = gj.simulate(body, compose(gj.LGVI()), s0, 0.01, 10, us @ B.T)
    np.testing.assert_allclose(commands.states.g, wrenches.states.g, atol=1e-14)
    np.testing.assert_allclose(commands.states.mu, wrenches.states.mu, atol=1e-14)
    with pytest.raises(ValueError, match="controls"):
        gj.simulate(body, method, s0, 0.01, 10, us @ B.T)  # wrenches where commands are due


def test_actuated_lgvi_is_reversible():
    """``Actuated`` holds ``B u`` over the step, so it is symmetric where its method is:
    ``ReversibleAdjoint`` reverses it, and its gradient equals plain reverse mode's and central
    differences."""
    from geomjax.control.trajopt import Actuated

    body = gj.RigidBodySE3(1.0, [0.02, 0.02, 0.04])
    B = jnp.asarray(np.random.default_rng(0).normal(size=(6, 4)))
    method = Actuated(gj.LGVI(), B)
    assert method.symmetric
    s0 = body.make_state(gj.SE3.identity(), jnp.array([0.1, -0.2, 0.3, 0.5, 0.0, -0.1]))

    def loss(us, adjoint=None):
        kw = {} if adjoint is None else {"adjoint": adjoint}
        sol = gj.simulate(body, method, s0, 0.01, 20, us, save_every=20, **kw)
        return jnp.sum(jnp.sin(sol.final_state.g)) + jnp.sum(sol.final_state.mu**2)

    us = jnp.asarray(0.1 * np.sin(np.arange(80.0)).reshape(20, 4))
    e = jnp.zeros_like(us).at[7, 2].set(1.0)

    def both_gradients_and_difference(us):
        fd = (loss(us + 1e-6 * e) - loss(us - 1e-6 * e)) / 2e-6
        return jax.grad(loss)(us), jax.grad(loss)(us, gj.ReversibleAdjoint()), fd

    # one program, compiled without XLA's backend optimization (3/4 of the compilation time of
    # the eager gradients; the same operations)
    plain, reversed_, fd = jax.jit(
        both_gradients_and_difference, compiler_options=EAGER_COMPILER_OPTIONS
    )(us)
    np.testing.assert_allclose(reversed_, plain, atol=1e-10)
    np.testing.assert_allclose(plain[7, 2], fd, rtol=1e-6)
