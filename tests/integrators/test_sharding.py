"""simulate_sharded: a batch split over devices gives what ``jax.vmap(simulate)`` gives.

The multi-device checks run in a subprocess with four host devices
(``XLA_FLAGS=--xla_force_host_platform_device_count=4`` must be set before JAX starts); the
argument checks run here on the single default device.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import geomjax as gj
from geomjax.integrators import batch_mesh, simulate_sharded

SCRIPT = r"""
import json, os
import jax, jax.numpy as jnp, numpy as np
jax.config.update("jax_enable_x64", True)
import geomjax as gj
from geomjax.integrators import batch_mesh, simulate_sharded

assert jax.device_count() == 4, jax.devices()
out = {}
rng = np.random.default_rng(0)
B, steps, dt = 8, 24, 0.05
R = jax.vmap(gj.SO3.exp)(jnp.asarray(rng.standard_normal((B, 3))))
Pi = jnp.asarray(rng.standard_normal((B, 3)))
s0 = gj.RigidBodyState(R, Pi)
I = jnp.array([1.0, 2.0, 3.0])
top = gj.RigidBody(I, gj.HeavyTop(1.0, 9.81, [0.0, 0.1, 0.4]))
mesh = batch_mesh()

def maxdiff(a, b):
    return max(float(jnp.max(jnp.abs(x - y))) for x, y in
               zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True))

def vmapped(system, method, s, controls=None, sys_axes=None, ctrl_axes=None):
    return jax.vmap(
        lambda sy, x, u: gj.simulate(sy, method, x, dt, steps, u, save_every=6),
        in_axes=(sys_axes, 0, ctrl_axes))(system, s, controls)

# 1.-3. (the long tier only: GEOMJAX_FULL=1; the default tier checks the gradient alone)
if os.environ.get("GEOMJAX_FULL", "0") == "1":
    # 1. same values, every array split over the 4 devices (heavy top: implicit LGVI with potential)
    for name, method in (("lgvi", gj.LGVI()),):
        sh = jax.jit(lambda s: simulate_sharded(top, method, s, dt, steps, save_every=6))(s0)
        ref = jax.jit(lambda s: vmapped(top, method, s))(s0)
        out[name] = maxdiff(sh, ref)
        out[name + "_spec"] = str(sh.states.R.sharding.spec)
        out[name + "_ndev"] = len(sh.states.R.sharding.device_set)
        out[name + "_shape"] = list(sh.states.R.shape)

    # 2. batched parameters (one inertia per body) and batched open-loop torques
    Is = jnp.asarray(1.0 + rng.random((B, 3)))
    bodies = jax.vmap(gj.RigidBody)(Is)
    u = jnp.asarray(0.1 * rng.standard_normal((B, steps, 3)))
    sh = jax.jit(lambda s: simulate_sharded(bodies, gj.LGVI(), s, dt, steps, u, save_every=6,
                                            system_axes=0, controls_axes=0))(s0)
    ref = jax.jit(lambda s: vmapped(bodies, gj.LGVI(), s, u, 0, 0))(s0)
    out["batched_params"] = maxdiff(sh, ref)

    # 3. a batch that does not divide: padded, extra members dropped
    s6 = jax.tree.map(lambda x: x[:6], s0)
    sh = jax.jit(lambda s: simulate_sharded(top, gj.LGVI(), s, dt, steps, save_every=6, pad=True))(s6)
    ref = jax.jit(lambda s: vmapped(top, gj.LGVI(), s))(s6)
    out["padded"] = maxdiff(sh, ref)
    out["padded_shape"] = list(sh.states.Pi.shape)
    try:
        simulate_sharded(top, gj.LGVI(), s6, dt, steps)
        out["no_pad_error"] = ""
    except ValueError as e:
        out["no_pad_error"] = str(e)

# 4. gradient w.r.t. replicated (inertia, dt) and sharded (initial momenta) arguments
w = jnp.arange(1.0, B + 1.0)[:, None]
def loss(sharded, I, pi, h):
    sys_ = gj.RigidBody(I, gj.HeavyTop(1.0, 9.81, [0.0, 0.1, 0.4]))
    s = gj.RigidBodyState(R, pi)
    if sharded:
        sol = simulate_sharded(sys_, gj.LGVI(), s, h, steps, save_every=6)
    else:
        sol = jax.vmap(lambda x: gj.simulate(sys_, gj.LGVI(), x, h, steps, save_every=6))(s)
    return jnp.sum(w * sol.states.Pi[:, -1] ** 2) + jnp.sum(sol.states.R[:, -1, 0])
g_sh = jax.jit(jax.grad(lambda *a: loss(True, *a), argnums=(0, 1, 2)))(I, Pi, dt)
g_ref = jax.jit(jax.grad(lambda *a: loss(False, *a), argnums=(0, 1, 2)))(I, Pi, dt)
out["grad_diff"] = [float(jnp.max(jnp.abs(a - b))) for a, b in zip(g_sh, g_ref)]
out["grad_scale"] = [float(jnp.max(jnp.abs(b))) for b in g_ref]
print("RESULT" + json.dumps(out))
"""


@pytest.fixture(scope="module")
def four_devices(host_devices):
    return host_devices(SCRIPT)


@pytest.mark.long
def test_sharded_equals_vmap_to_roundoff(four_devices):
    # each device runs jax.vmap(simulate) on its rows: no cross-device arithmetic in the forward
    # pass.  Only the vectorization of the per-device loop changes (batch 2 instead of 8: XLA may
    # contract a*b+c into an FMA in one and not the other), so values O(1) agree to a few ulp per
    # step: 24 steps * 2.2e-16 * (modest growth) < 1e-13.  Observed: 0 or 1 ulp.
    for name in ("lgvi",):
        assert four_devices[name] <= 1e-13, name
        assert four_devices[name + "_spec"] in ("P('batch',)", "PartitionSpec('batch',)")
        assert four_devices[name + "_ndev"] == 4
        assert four_devices[name + "_shape"] == [8, 5, 3, 3]
    assert four_devices["batched_params"] <= 1e-13


@pytest.mark.long
def test_sharded_pads_or_refuses(four_devices):
    assert four_devices["padded"] <= 1e-13
    assert four_devices["padded_shape"] == [6, 5, 3]
    msg = four_devices["no_pad_error"]
    assert "states0" in msg and "multiple of the number of devices" in msg and "pad=True" in msg


def test_sharded_gradient(four_devices):
    # cotangents of replicated arguments are summed over devices (psum) instead of over the
    # whole batch at once: a different summation order, so round-off, 8 terms of O(scale) each
    for diff, scale in zip(four_devices["grad_diff"], four_devices["grad_scale"], strict=True):
        assert scale > 0
        assert diff <= 1e-12 * scale


def _batch(B, rng):
    R = jax.vmap(gj.SO3.exp)(jnp.asarray(rng.standard_normal((B, 3))))
    return gj.RigidBodyState(R, jnp.asarray(rng.standard_normal((B, 3))))


@pytest.mark.long
def test_one_device_and_argument_checks(rng):
    rb = gj.RigidBody(jnp.array([1.0, 2.0, 3.0]))
    s0 = _batch(3, rng)
    sol = simulate_sharded(rb, gj.LGVI(), s0, 0.1, 4, mesh=batch_mesh(jax.devices()[:1]))
    ref = jax.vmap(lambda s: gj.simulate(rb, gj.LGVI(), s, 0.1, 4))(s0)
    np.testing.assert_array_equal(sol.states.Pi, ref.states.Pi)
    # a feedback torque u(t, state) is shared by the batch, as under vmap
    damp = lambda t, s: -0.3 * s.Pi  # noqa: E731
    sol = simulate_sharded(rb, gj.LGVI(), s0, 0.1, 4, damp, mesh=batch_mesh(jax.devices()[:1]))
    ref = jax.vmap(lambda s: gj.simulate(rb, gj.LGVI(), s, 0.1, 4, damp))(s0)
    np.testing.assert_allclose(sol.states.Pi, ref.states.Pi, rtol=0, atol=1e-14)
    # damping: |Π| decreases for every body (free rotation alone keeps it)
    assert bool(
        jnp.all(jnp.linalg.norm(sol.states.Pi[:, -1], axis=-1) < jnp.linalg.norm(s0.Pi, axis=-1))
    )
    with pytest.raises(ValueError, match="'mesh'"):
        simulate_sharded(rb, gj.LGVI(), s0, 0.1, 4, mesh="cpu")
    with pytest.raises(ValueError, match="'method'"):
        simulate_sharded(rb, "LGVI", s0, 0.1, 4)
    with pytest.raises(ValueError, match="'states0'"):
        simulate_sharded(rb, gj.LGVI(), jax.tree.map(lambda x: x.reshape(-1)[0], s0), 0.1, 4)
    with pytest.raises(ValueError, match="one leading batch size"):
        bodies = jax.vmap(gj.RigidBody)(jnp.ones((2, 3)) + jnp.arange(3.0))
        simulate_sharded(bodies, gj.LGVI(), s0, 0.1, 4, system_axes=0)
    with pytest.raises(ValueError, match="'system_axes'"):
        simulate_sharded(rb, gj.LGVI(), s0, 0.1, 4, system_axes=1)
    # invalid initial states are refused as by simulate (checked on the whole batch)
    bad = gj.RigidBodyState(s0.R.at[0].multiply(2.0), s0.Pi)
    with pytest.raises(Exception, match="state0|states0"):
        simulate_sharded(rb, gj.LGVI(), bad, 0.1, 4)
