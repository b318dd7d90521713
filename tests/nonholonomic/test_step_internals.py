"""The pieces that make the nonholonomic step cheap, each against an independent
computation: structural independence read from the jaxpr (and that skipping what it proves zero
changes nothing), the Schur-complement saddle solve against LAPACK, the column-wise forward
Jacobian against ``jax.jacfwd``, and the carried acceleration that seeds Newton."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import geomjax as gj
from geomjax._internal.dependence import depends_on
from geomjax._linalg import forward_jacobian, saddle_solve_schur
from geomjax.integrators.nonholonomic import discrete_momenta
from geomjax.systems import BallOnTurntable, ChaplyginSleigh, RollingDisk, VerticalRollingDisk

SLEIGH = ChaplyginSleigh(1.3, 0.4, 0.25)
S_SLEIGH = SLEIGH.state(0.1, -0.2, 0.3, omega=1.5, v=-0.4)
BALL = BallOnTurntable(mass=1.0, radius=0.5, table_rate=0.8)
S_BALL = BALL.state(x=(1.0, 0.3), omega=(0.4, -0.2, 0.7))


# --- structural dependence --------------------------------------------------------------------
def test_depends_on_reads_used_inputs_and_is_conservative():
    a, b = jnp.ones(3), jnp.ones(2)
    assert depends_on(lambda a, b: jnp.sum(a), a, b) == (True, False)
    assert depends_on(lambda a, b: a[0] * b, a, b) == (True, True)
    # a dependence that cancels numerically still counts (False must be a proof)
    assert depends_on(lambda a, b: jnp.sin(b).sum() * 0.0 + a, a, b) == (True, True)
    # inside a nested jit every operand of the call counts as used (conservative)
    inner = jax.jit(lambda a, b: a)
    assert depends_on(lambda a, b: inner(a, b), a, b) == (True, True)
    # pytrees: one flag per positional argument
    assert depends_on(lambda p, b: p["x"] * 2.0, {"x": a, "y": a}, b) == (True, False)


def test_library_systems_structure():
    """G-invariant Lagrangians and the blade/rolling constraints, as their docstrings state."""
    s, b = S_SLEIGH, S_BALL
    assert SLEIGH.lagrangian_dependence(s.g, s.x, s.v) == (False, False)
    assert not SLEIGH.constraint_dependence(s.g, s.x, s.v, 0.0)  # v_y = 0 in the body frame
    assert BALL.lagrangian_dependence(b.g, b.x, b.v) == (False, False)
    assert BALL.constraint_dependence(b.g, b.x, b.v, 0.0)  # spatial ω = R Ω, table J x, Ω(t)
    disk = RollingDisk()  # the tilt (a shape variable) enters the Lagrangian, the group not
    d = disk.state()
    assert disk.lagrangian_dependence(d.g, d.x, d.v) == (False, True)


@pytest.mark.parametrize("system,state", [(SLEIGH, S_SLEIGH), (BALL, S_BALL)])
def test_skipping_proven_zero_derivatives_changes_nothing(system, state, monkeypatch):
    """The fast branch of ``discrete_momenta`` (L independent of the configuration) against the
    general one (forced by pretending a dependence): same momenta to round-off."""
    w = state.v * 1.1
    fast = discrete_momenta(system, state.g, state.x, w, 0.01)
    monkeypatch.setattr(type(system), "lagrangian_dependence", lambda self, g, x, v: (True, True))
    general = discrete_momenta(system, state.g, state.x, w, 0.01)
    for a, b in zip(fast, general, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-14, atol=1e-15)


def test_skipped_constraint_and_acceleration_terms_match_general_path(monkeypatch):
    """The sleigh's acceleration and multiplier with the structural shortcuts against the
    general formulas (configuration derivatives evaluated): identical to round-off."""
    s = S_SLEIGH
    fast = SLEIGH.acceleration(0.3, s.g, s.x, s.v)
    monkeypatch.setattr(ChaplyginSleigh, "lagrangian_dependence", lambda self, *a: (True, True))
    monkeypatch.setattr(ChaplyginSleigh, "constraint_dependence", lambda self, *a: True)
    import geomjax.systems.nonholonomic as nh

    monkeypatch.setattr(nh, "method_depends_on", lambda *a: (True, True, True, True))
    general = SLEIGH.acceleration(0.3, s.g, s.x, s.v)
    for a, b in zip(fast, general, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-13, atol=1e-14)


# --- linear algebra ---------------------------------------------------------------------------
@given(
    k=st.integers(1, 6),
    m=st.integers(0, 3),
    seed=st.integers(0, 2**31 - 1),
    symmetric=st.booleans(),
)
def test_saddle_solve_schur_matches_lapack(k, m, seed, symmetric):
    m = min(m, k)
    rng = np.random.default_rng(seed)
    B = rng.standard_normal((k, k))
    K = B @ B.T + k * np.eye(k)
    if not symmetric:  # a Newton matrix: an O(h) perturbation of an SPD block
        K = K + 0.1 * rng.standard_normal((k, k))
    A = rng.standard_normal((m, k))
    C = A if symmetric else A + 0.1 * rng.standard_normal((m, k))
    f, c = rng.standard_normal(k), rng.standard_normal(m)
    y, lam = saddle_solve_schur(jnp.asarray(K), jnp.asarray(A), jnp.asarray(C), f, c)
    full = np.block([[K, -A.T], [C, np.zeros((m, m))]])
    ref = np.linalg.solve(full, np.concatenate([f, c]))
    cond = np.linalg.cond(full)
    np.testing.assert_allclose(
        np.concatenate([y, lam]), ref, atol=1e-13 * cond * (1 + np.abs(ref).max())
    )


def test_saddle_solve_schur_is_linear_for_transposition():
    """The implicit-function-theorem tangents of ``newton_solve`` go through the solve and reverse
    mode transposes them: the solve must be *structurally* linear in the right-hand side
    (``jax.linear_transpose`` refuses otherwise).  Its transpose against the explicit inverse."""
    rng = np.random.default_rng(1)
    k, m = 4, 2
    K = np.diag([2.0, 3.0, 4.0, 5.0]) + 0.1 * rng.standard_normal((k, k))
    A = rng.standard_normal((m, k))
    C = A + 0.1 * rng.standard_normal((m, k))

    def solve(r):
        y, lam = saddle_solve_schur(jnp.asarray(K), jnp.asarray(A), jnp.asarray(C), r[:k], r[k:])
        return jnp.concatenate([y, lam])

    transpose = jax.linear_transpose(solve, jnp.zeros(k + m))
    e = jnp.asarray(rng.standard_normal(k + m))
    full = np.block([[K, -A.T], [C, np.zeros((m, m))]])
    np.testing.assert_allclose(transpose(e)[0], np.linalg.solve(full.T, e), rtol=1e-12, atol=1e-13)


def test_forward_jacobian_matches_jacfwd_also_under_vmap():
    def f(x):
        return jnp.stack([jnp.sin(x[0]) * x[1], x[1] ** 3 + x[2], jnp.exp(x[0] * x[2]), x[0]])

    xs = jnp.asarray(np.random.default_rng(2).standard_normal((5, 3)))
    got = jax.vmap(lambda x: forward_jacobian(f, x))(xs)
    ref = jax.vmap(jax.jacfwd(f))(xs)
    assert got.shape == (5, 4, 3)
    np.testing.assert_allclose(got, ref, rtol=1e-14, atol=1e-15)


# --- the carried acceleration (Newton seed) ---------------------------------------------------
@pytest.mark.long
@pytest.mark.parametrize(
    "system,state",
    [
        (SLEIGH, S_SLEIGH),
        (BALL, S_BALL),
        (VerticalRollingDisk(), VerticalRollingDisk().state(phi=0.3, theta_dot=1.2, phi_dot=0.8)),
        (RollingDisk(), RollingDisk().state(theta=0.4, phi_dot=1.0, psi_dot=2.0)),
    ],
)
def test_carried_acceleration_is_the_nodes_and_newton_converges(system, state):
    """The internal carry holds the continuous acceleration at the node (the same saddle solve as
    the multiplier), and with it as a seed two Newton iterations reach round-off residuals at
    a small step (h |v| ~ 4e-3) and the default three at a large one (h |v| ~ 0.1)."""
    method = gj.NonholonomicVI()
    advance = eqx.filter_jit(method.advance)
    carry = eqx.filter_jit(method.init)(system, state, jnp.asarray(0.0))
    for k in range(3):
        carry, _ = advance(system, carry, jnp.asarray(0.02), None, jnp.asarray(0.02 * k))
        s, vdot = carry
        ref, lam = system.acceleration(0.02 * (k + 1), s.g, s.x, s.v)
        np.testing.assert_allclose(vdot, ref, rtol=1e-12, atol=1e-13)
        np.testing.assert_allclose(s.lam, lam, rtol=1e-12, atol=1e-13)
    eps = np.finfo(np.float64).eps
    n = 40  # one compilation per method (dt is traced)
    assert float(gj.simulate(system, method, state, 0.05, n).max_residual) < 1e3 * eps
    two = gj.NonholonomicVI(newton_iters=2)
    assert float(gj.simulate(system, two, state, 0.002, n).max_residual) < 1e3 * eps
    # simulate (carried seed) and the public step (acceleration recomputed per call) agree
    # (arrays, not Python floats: filter_jit would treat those as static and recompile)
    step = eqx.filter_jit(method.step)
    s = state
    for k in range(n):
        s, _ = step(system, s, jnp.asarray(0.02), None, jnp.asarray(0.02 * k))
    via_sim = gj.simulate(system, method, state, 0.02, n).final_state
    for a, b in zip(jax.tree_util.tree_leaves(s), jax.tree_util.tree_leaves(via_sim), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-11, atol=1e-12)


@pytest.mark.long
def test_vectorized_and_column_jacobians_give_the_same_run():
    """The two ways of forming the Newton Jacobians (a speed trade-off, batched vs unbatched)
    compute the same numbers: the runs agree to round-off."""
    a = gj.simulate(BALL, gj.NonholonomicVI(), S_BALL, 0.01, 30).final_state
    b = gj.simulate(BALL, gj.NonholonomicVI(jacobian="vectorized"), S_BALL, 0.01, 30).final_state
    for x, y in zip(jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b), strict=True):
        np.testing.assert_allclose(x, y, rtol=1e-12, atol=1e-13)


@pytest.mark.long
def test_chord_iterations_converge_at_small_steps_and_keep_the_gradients():
    """``chord=True`` (the first Newton Jacobian kept for every iteration) gives Newton's run to
    round-off while h|v| is small, reports the slower convergence where it is not (the tilting
    disk at dt 0.1: the residual says so, as ``on_failure='raise'`` does), and gradients (implicit
    function theorem at the solution) equal Newton's and central finite differences."""
    chord = gj.NonholonomicVI(chord=True)
    eps = np.finfo(np.float64).eps
    for system, state in ((SLEIGH, S_SLEIGH), (BALL, S_BALL)):
        a = gj.simulate(system, gj.NonholonomicVI(), state, 0.01, 40)
        b = gj.simulate(system, chord, state, 0.01, 40)
        assert float(b.max_residual) < 1e3 * eps
        for x, y in zip(
            jax.tree_util.tree_leaves(a.final_state),
            jax.tree_util.tree_leaves(b.final_state),
            strict=True,
        ):
            np.testing.assert_allclose(x, y, rtol=1e-12, atol=1e-13)
    disk = RollingDisk()
    s_disk = disk.state(theta=0.4, phi_dot=1.0, psi_dot=2.0)
    assert float(gj.simulate(disk, gj.NonholonomicVI(), s_disk, 0.1, 20).max_residual) < 1e-5
    res = float(gj.simulate(disk, chord, s_disk, 0.1, 20).max_residual)
    assert res > 1e3 * eps  # not converged, and visible
    with pytest.raises(Exception, match="did not converge"):
        jax.block_until_ready(
            gj.simulate(
                disk, gj.NonholonomicVI(chord=True, on_failure="raise"), s_disk, 0.1, 20
            ).final_state.v
        )

    w = jnp.arange(1.0, 10.0).reshape(3, 3) / 9.0

    def loss(method):
        def f(a):  # a scales the initial (constrained) velocity
            s0 = eqx.tree_at(lambda s: s.v, S_SLEIGH, a * S_SLEIGH.v)
            s = gj.simulate(SLEIGH, method, s0, 0.01, 30, save_every=30).final_state
            return jnp.sum(w * s.g) + jnp.sum(s.v**2)

        return f

    a = jnp.asarray(1.0)
    g_chord = float(jax.grad(loss(chord))(a))
    g_newton = float(jax.grad(loss(gj.NonholonomicVI()))(a))
    e = 1e-6
    fd = float((loss(chord)(a + e) - loss(chord)(a - e)) / (2 * e))
    assert abs(g_chord) > 1e-2
    np.testing.assert_allclose(g_chord, g_newton, rtol=1e-11)
    np.testing.assert_allclose(g_chord, fd, rtol=1e-7)


# --- scalarized steps -----------------------------------------------------------------------
def _primitives(jaxpr, out=None):
    out = set() if out is None else out
    for e in jaxpr.eqns:
        out.add(e.primitive.name)
        for p in e.params.values():
            if hasattr(p, "jaxpr") and hasattr(p, "consts"):
                _primitives(p.jaxpr, out)
    return out


_SPHERE = gj.ChaplyginSphere(inertia=(0.3, 0.4, 0.5))
_DISK = RollingDisk()
_VDISK = VerticalRollingDisk()


@pytest.mark.long
@pytest.mark.parametrize(
    "system, state",
    [
        (SLEIGH, S_SLEIGH),
        (BALL, S_BALL),
        (_SPHERE, _SPHERE.state(x=(0.2, 0.1), omega=(0.4, -0.2, 0.7))),
        (_DISK, _DISK.state(theta=0.4, phi_dot=1.0, psi_dot=2.0)),
        (_VDISK, _VDISK.state(theta_dot=1.3, phi_dot=0.4)),
    ],
)
def test_scalar_and_array_forms_give_the_same_run_and_gradients(system, state):
    """``scalarize=True`` (the default) evaluates the same primitives scalar by scalar: the run
    and its gradients agree with the array form to round-off, and nothing of the library's
    systems falls back to array kernels (no reductions, pads or concatenations are left inside
    the step; the Newton loops carry one array each)."""
    scalar, array = gj.NonholonomicVI(), gj.NonholonomicVI(scalarize=False)
    a = gj.simulate(system, array, state, 0.01, 60)
    b = gj.simulate(system, scalar, state, 0.01, 60)
    assert float(b.max_residual) < 1e3 * np.finfo(np.float64).eps
    for x, y in zip(
        jax.tree_util.tree_leaves(a.final_state),
        jax.tree_util.tree_leaves(b.final_state),
        strict=True,
    ):
        np.testing.assert_allclose(y, x, rtol=1e-12, atol=1e-13)
    carry = scalar.init(system, state)
    prims = _primitives(jax.make_jaxpr(lambda c: scalar.advance(system, c, 0.01))(carry).jaxpr)
    assert not prims & {"reduce_sum", "dot_general", "pad", "gather", "scatter-add"}

    if system not in (SLEIGH, BALL):  # gradients: two systems suffice (compile time)
        return

    def loss(method, v0):
        s = eqx.tree_at(lambda s: s.v, state, v0)
        out = gj.simulate(system, method, s, 0.01, 20, check_inputs=False).final_state
        return jnp.sum(out.v**2) + jnp.sum(jnp.sin(out.g))

    # the array form by forward mode (an independent route; its reverse mode compiles 1.5x slower)
    ga = jax.jit(jax.jacfwd(lambda v: loss(array, v)))(state.v)
    gb = jax.jit(jax.grad(lambda v: loss(scalar, v)))(state.v)
    np.testing.assert_allclose(gb, ga, rtol=1e-11, atol=1e-12)
