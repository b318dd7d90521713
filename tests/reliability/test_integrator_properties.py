"""Property-based tests of the integrators: hypothesis draws inertias (including
nearly symmetric bodies and full tensors in a rotated frame), momenta and stable step sizes;
pytest parametrizes batch shape and dtype (so one compilation serves all examples of a case).

Every bound is round-off-level with a stated derivation:

* LGVI updates ``Π_{k+1} = F_kᵀ Π_k`` with ``F_k = cay(h ξ_k)`` orthogonal *to round-off whatever
  the Newton residual*, and ``R_{k+1} = R_k F_k``; so the spatial momentum ``R Π`` and ``|Π|`` are
  conserved up to ``O(eps)`` per step: the bound used is ``C · n · eps · |Π|`` with ``C = 50``
  (each step is a handful of 3×3 products, error ≲ 10 eps; 5× margin on that and a linear, not
  random-walk, accumulation).
* The group defect ``|RᵀR − 1|`` grows by ``O(eps)`` per step (float32: reorthonormalized each
  step, so it stays ``O(eps)``): bound ``C · n · eps``.
* LGVI is symmetric: ``Φ_{−h} ∘ Φ_h = id`` up to round-off and the Newton error
  ``O((h|ξ|)^(2^(k+1)))`` (k = 3 iterations, h|ξ| ≤ 0.05: 1e-21, below round-off); bound
  ``1e3 · eps`` relative.
"""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import geomjax as gj
from geomjax.systems import RigidBody, RigidBodyState

STEPS = 16
BATCHES = [(), (5,), (2, 3)]
DTYPES = [np.float64, np.float32]
C = 50.0


def _examples(n: int) -> int:
    """``n`` examples in the default profile (the file stays fast); the profile's own count under
    ``HYPOTHESIS_PROFILE=thorough``."""
    default = settings.default.max_examples
    return n if default <= 20 else default


def _eps(dtype):
    return float(np.finfo(dtype).eps)


def _random_body(seed, near_symmetric, full, dtype):
    """Principal moments in [0.5, 2] (sorted, triangle inequality not enforced: generalized
    bodies are valid), optionally I₂ = I₁(1 + 1e-9) (nearly symmetric), optionally a full tensor
    in a random rotated frame."""
    rng = np.random.default_rng(seed)
    m = np.sort(rng.uniform(0.5, 2.0, 3))
    if near_symmetric:
        m[1] = m[0] * (1 + 1e-9)
    if full:
        Q = np.asarray(gj.SO3.exp(rng.standard_normal(3)))
        I = Q @ np.diag(m) @ Q.T
        I = 0.5 * (I + I.T)
    else:
        I = m
    return RigidBody(jnp.asarray(I, dtype), generalized=True), m


def _random_states(seed, batch, dtype):
    rng = np.random.default_rng(seed + 1)
    R = np.asarray(gj.SO3.exp(rng.standard_normal((*batch, 3))))
    Pi = rng.standard_normal((*batch, 3))
    Pi /= np.linalg.norm(Pi, axis=-1, keepdims=True)  # |Π| = 1
    return RigidBodyState(jnp.asarray(R, dtype), jnp.asarray(Pi, dtype))


def _vmap_n(f, n):
    for _ in range(n):
        f = jax.vmap(f)
    return f


@eqx.filter_jit
def run(system, states, dt):
    """``simulate`` over any batch of states (nested vmap); the trajectories ``(…, STEPS+1, …)``."""
    nb = states.Pi.ndim - 1
    return _vmap_n(lambda s: gj.simulate(system, gj.LGVI(), s, dt, STEPS).states, nb)(states)


@eqx.filter_jit
def lgvi_step(system, s, h):
    return gj.LGVI(reorthonormalize=False).step(system, s, h)[0]


def _dt(m, dtype, hxi=0.2):
    # |Ω| ≤ |Π| / min I = 1 / m_min: h |ξ| ≤ hxi (stable, Newton converged)
    return jnp.asarray(hxi * m.min(), dtype)


@pytest.mark.parametrize("dtype", DTYPES, ids=["f64", "f32"])
@pytest.mark.parametrize("batch", BATCHES, ids=str)
@settings(max_examples=_examples(6))
@given(seed=st.integers(0, 2**30), near_symmetric=st.booleans())
def test_lgvi_momentum_casimir_and_group(batch, dtype, seed, near_symmetric):
    full = len(batch) == 1  # one compiled variant per case: full tensors on the (5,) batch
    system, m = _random_body(seed, near_symmetric, full, dtype)
    states = _random_states(seed, batch, dtype)
    traj = run(system, states, _dt(m, dtype))
    R, Pi = np.asarray(traj.R, np.float64), np.asarray(traj.Pi, np.float64)
    assert traj.R.dtype == dtype and R.shape == (*batch, STEPS + 1, 3, 3)
    tol = C * STEPS * _eps(dtype)
    spatial = np.einsum("...ij,...j->...i", R, Pi)
    assert np.max(np.abs(spatial - spatial[..., :1, :])) <= tol
    assert np.max(np.abs(np.linalg.norm(Pi, axis=-1) - 1.0)) <= tol
    defect = np.abs(np.swapaxes(R, -1, -2) @ R - np.eye(3))
    assert np.max(defect) <= tol
    # the energy is not conserved exactly, but is bounded: O((h|ξ|)²) relative (0.04 here)
    I = np.asarray(system.inertia, np.float64)
    E = 0.5 * np.einsum("...i,ij,...j->...", Pi, np.linalg.inv(I), Pi)
    assert np.max(np.abs(E / E[..., :1] - 1)) <= 0.1


@pytest.mark.parametrize("dtype", DTYPES, ids=["f64", "f32"])
@settings(max_examples=_examples(8))
@given(seed=st.integers(0, 2**30), near_symmetric=st.booleans())
def test_lgvi_is_symmetric(dtype, seed, near_symmetric):
    """One step forward with h, one with −h: back to the start (LGVI is self-adjoint)."""
    system, m = _random_body(seed, near_symmetric, False, dtype)
    s0 = _random_states(seed, (), dtype)
    h = _dt(m, dtype, hxi=0.05)
    step = eqx.filter_jit(
        lambda s, h: gj.step(system, s, h, method=gj.LGVI(reorthonormalize=False))
    )
    back = step(step(s0, h), -h)
    tol = 1e3 * _eps(dtype)
    np.testing.assert_allclose(np.asarray(back.R), np.asarray(s0.R), rtol=0, atol=tol)
    np.testing.assert_allclose(np.asarray(back.Pi), np.asarray(s0.Pi), rtol=0, atol=tol)


@pytest.mark.parametrize("dtype", DTYPES, ids=["f64", "f32"])
@settings(max_examples=_examples(4))
@given(seed=st.integers(0, 2**30))
def test_vmap_equals_loop_and_jit_equals_eager(dtype, seed):
    """The batched run equals the per-member runs, and a jitted step equals the eager step, to
    round-off (the same arithmetic; XLA may fuse differently, so not asserted bitwise)."""
    system, m = _random_body(seed, False, True, dtype)
    states = _random_states(seed, (5,), dtype)
    dt = _dt(m, dtype)
    batched = run(system, states, dt)
    tol = C * STEPS * _eps(dtype)
    for k in range(5):
        one = run(system, RigidBodyState(states.R[k], states.Pi[k]), dt)
        np.testing.assert_allclose(np.asarray(batched.Pi[k]), np.asarray(one.Pi), atol=tol)
        np.testing.assert_allclose(np.asarray(batched.R[k]), np.asarray(one.R), atol=tol)
    s0 = jax.tree_util.tree_map(lambda x: x[0], states)
    eager = gj.LGVI(reorthonormalize=False).step(system, s0, dt)[0]
    jitted = lgvi_step(system, s0, dt)
    np.testing.assert_allclose(np.asarray(eager.Pi), np.asarray(jitted.Pi), atol=10 * _eps(dtype))
    np.testing.assert_allclose(np.asarray(eager.R), np.asarray(jitted.R), atol=10 * _eps(dtype))


@jax.jit
def _objective(moments, pi0, R0, dt):
    sol = gj.simulate(
        RigidBody(moments, generalized=True), gj.LGVI(), RigidBodyState(R0, pi0), dt, STEPS
    )
    fin = sol.final_state
    return jnp.dot(fin.R @ jnp.array([0.3, -0.2, 0.9]), fin.Pi) + jnp.sum(fin.Pi**3)


_objective_grad = jax.jit(jax.grad(_objective, argnums=(0, 1)))


@settings(max_examples=_examples(3))
@given(seed=st.integers(0, 2**30))
def test_gradient_matches_central_differences(seed):
    """d/d(I, Π₀) of a smooth function of the final state vs central differences (float64).
    Step δ = 1e-5: truncation O(δ²·f''') ~ 1e-10, round-off O(eps/δ) ~ 1e-11; rtol 1e-6 leaves
    a margin of ≥ 1e3."""
    _, m = _random_body(seed, False, False, np.float64)
    s0 = _random_states(seed, (), np.float64)
    dt = _dt(m, np.float64)

    def f(moments, pi0):
        return _objective(moments, pi0, s0.R, dt)

    x = (jnp.asarray(m), s0.Pi)
    grads = _objective_grad(*x, s0.R, dt)
    d = 1e-5
    for arg in range(2):
        fd = np.zeros(3)
        for i in range(3):
            e = np.zeros(3)
            e[i] = d
            xp, xm = list(x), list(x)
            xp[arg] = x[arg] + e
            xm[arg] = x[arg] - e
            fd[i] = (float(f(*xp)) - float(f(*xm))) / (2 * d)
        np.testing.assert_allclose(np.asarray(grads[arg]), fd, rtol=1e-6, atol=1e-8)


# --- NonholonomicVI on built-in systems ------------------------------------------------------------
NH_STEPS = 10


def _sleigh(rng):
    sys_ = gj.systems.ChaplyginSleigh(*rng.uniform(0.5, 2.0, 2), rng.uniform(-1.0, 1.0))
    g = gj.SE2.exp(jnp.asarray(rng.standard_normal(3)))
    return sys_, g, None, jnp.asarray(rng.standard_normal(3))


def _suslov(rng):
    a = rng.standard_normal(3)
    sys_ = gj.systems.SuslovProblem(jnp.asarray(rng.uniform(0.5, 2.0, 3)), jnp.asarray(a))
    return (
        sys_,
        gj.SO3.exp(jnp.asarray(rng.standard_normal(3))),
        None,
        jnp.asarray(rng.standard_normal(3)),
    )


def _vertical_disk(rng):
    sys_ = gj.systems.VerticalRollingDisk(*rng.uniform(0.5, 2.0, 4))
    g = jnp.asarray(rng.standard_normal(3))
    return sys_, g, jnp.asarray(rng.standard_normal(1)), jnp.asarray(rng.standard_normal(4))


@eqx.filter_jit
def nh_run(system, state0, dt):
    sol = gj.simulate(system, gj.NonholonomicVI(), state0, dt, NH_STEPS)
    viol = jax.vmap(lambda s: system.constraint_violation(s))(sol.states)
    return sol.states, viol, sol.stats["max_residual"]


@pytest.mark.long
@pytest.mark.parametrize(
    "make", [_sleigh, _suslov, _vertical_disk], ids=["sleigh", "suslov", "vdisk"]
)
@settings(max_examples=_examples(2))
@given(seed=st.integers(0, 2**30))
def test_nonholonomic_vi_constraint_at_every_node(make, seed):
    """Random parameters and a random velocity projected onto the constraints: the constraint
    ``A(q) v = b`` holds at every node to round-off (NonholonomicVI solves it exactly at each new
    node; bound ``C · eps · scale``, the linear solve's accuracy), the Newton solves converge, and
    the energy (conserved by the continuous flow: time-independent linear constraints) stays
    within the method's ``O(h²)`` error (h |v| ≤ 0.05, relative bound 1e-2)."""
    rng = np.random.default_rng(seed)
    system, g, x, v = make(rng)
    s0 = system.make_state(g, x, v, project=True)
    speed = float(jnp.linalg.norm(s0.v)) + 1e-3
    states, viol, res = nh_run(system, s0, jnp.asarray(0.05 / speed))
    scale = 1.0 + float(jnp.max(jnp.abs(states.v)))
    assert float(jnp.max(jnp.abs(viol))) <= C * _eps(np.float64) * scale
    assert float(res) <= 1e3 * _eps(np.float64)
    E = jax.vmap(system.energy)(states)
    assert float(jnp.max(jnp.abs(E / E[0] - 1))) <= 1e-2
