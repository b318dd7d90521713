"""Systems with learned terms under :func:`geomjax.simulate_sharded` and
:func:`geomjax.shard_vmap`: the batch split over four host devices gives what ``jax.vmap`` gives.

Run in a subprocess with four host devices (``XLA_FLAGS`` must be set before JAX starts), as
``tests/integrators/test_sharding.py``.
"""

import pytest

SCRIPT = r"""
import json, os
import equinox as eqx, jax, jax.numpy as jnp, numpy as np
jax.config.update("jax_enable_x64", True)
import geomjax as gj
from geomjax.learn import NeuralPotential

assert jax.device_count() == 4, jax.devices()
out = {}
rng = np.random.default_rng(0)
B, steps, dt = 8, 12, 0.05
R = jax.vmap(gj.SO3.exp)(jnp.asarray(rng.standard_normal((B, 3))))
Pi = jnp.asarray(rng.standard_normal((B, 3)))
I = jnp.array([0.8, 1.0, 1.2])
V = NeuralPotential(gj.SO3, jax.random.PRNGKey(0), width=8, depth=1, scale=5.0)
# the last layer starts at zero (V = 0): give the network a non-trivial output
V = eqx.tree_at(lambda v: v.mlp.layers[-1].weight, V,
                jnp.asarray(rng.standard_normal(V.mlp.layers[-1].weight.shape)))
body = gj.RigidBody(I, V)

def maxdiff(a, b):
    return max(float(jnp.max(jnp.abs(x - y), initial=0.0)) for x, y in
               zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True))

# 1. a learned-potential body, a batch of initial states split over the devices
s0 = gj.RigidBodyState(R, Pi)
sh = jax.jit(lambda s: gj.simulate_sharded(body, gj.LGVI(), s, dt, steps, save_every=4))(s0)
ref = jax.jit(jax.vmap(lambda s: gj.simulate(body, gj.LGVI(), s, dt, steps, save_every=4)))(s0)
out["sharded"] = maxdiff(sh, ref)
out["ndev"] = len(sh.states.R.sharding.device_set)
out["dV"] = float(jnp.max(jnp.abs(jax.vmap(jax.grad(lambda r: jnp.sum(V(r))))(R))))

# 2. (the long tier only: GEOMJAX_FULL=1) the gradient with respect to the network's weights
# (replicated over the devices)
if os.environ.get("GEOMJAX_FULL", "0") == "1":
    w = jnp.arange(1.0, B + 1.0)[:, None]
    def loss(model, sharded):
        if sharded:
            sol = gj.simulate_sharded(model, gj.LGVI(), s0, dt, steps, save_every=4)
        else:
            sol = jax.vmap(lambda s: gj.simulate(model, gj.LGVI(), s, dt, steps, save_every=4))(s0)
        return jnp.sum(w * sol.states.Pi[:, -1] ** 2)
    g_sh = eqx.filter_jit(eqx.filter_grad(lambda m: loss(m, True)))(body)
    g_ref = eqx.filter_jit(eqx.filter_grad(lambda m: loss(m, False)))(body)
    out["grad_diff"] = maxdiff(g_sh, g_ref)
    out["grad_scale"] = max(float(jnp.max(jnp.abs(x))) for x in jax.tree.leaves(g_ref))
    # a configuration-dependent inertia on SO(3) (GroupLagrangianSystem, NonholonomicVI)
    from geomjax.learn import GroupLagrangianSystem, NeuralInertia
    M = NeuralInertia(3, jax.random.PRNGKey(2), n_in=9, features=lambda R: R.reshape(-1),
                      width=8, depth=1, scale=0.2, prior=lambda R: jnp.diag(I))
    M = eqx.tree_at(lambda m: m.mlp.layers[-1].weight, M,
                    0.3 * jnp.asarray(rng.standard_normal(M.mlp.layers[-1].weight.shape)))
    top = GroupLagrangianSystem(gj.SO3, M, V)
    x0 = jax.vmap(top.state_from_velocity)(R, jnp.asarray(rng.standard_normal((B, 3))))
    nvi = gj.NonholonomicVI()
    sh = jax.jit(lambda s: gj.simulate_sharded(top, nvi, s, dt, steps, save_every=4))(x0)
    ref = jax.jit(jax.vmap(lambda s: gj.simulate(top, nvi, s, dt, steps, save_every=4)))(x0)
    out["inertia_sharded"] = maxdiff(sh.states, ref.states)

# 3. shard_vmap over a batch of learned models (one network per member, e.g. an ensemble)
keys = jax.random.split(jax.random.PRNGKey(1), B)
def make(k):
    v = NeuralPotential(gj.SO3, k, width=8, depth=1, scale=5.0)
    return eqx.tree_at(lambda v: v.mlp.layers[-1].weight, v,
                       jax.random.normal(k, v.mlp.layers[-1].weight.shape))
ensemble = eqx.filter_vmap(make)(keys)
def run(v, s):
    return gj.simulate(gj.RigidBody(I, v), gj.LGVI(), s, dt, steps, save_every=4).states
sh = eqx.filter_jit(gj.shard_vmap(run))(ensemble, s0)
ref = eqx.filter_jit(eqx.filter_vmap(run))(ensemble, s0)
out["ensemble"] = maxdiff(sh, ref)
out["ensemble_spread"] = float(jnp.max(jnp.std(ref.Pi[:, -1] - Pi, axis=0)))
print("RESULT" + json.dumps(out))
"""


@pytest.fixture(scope="module")
def four_devices(host_devices):
    return host_devices(SCRIPT)


def test_learned_system_sharded_equals_vmap(four_devices):
    # each device runs jax.vmap(simulate) on its rows: the same arithmetic, only the length of
    # the vectorized loops differs (FMA contraction may differ): a few ulp over 12 steps
    assert four_devices["dV"] > 1e-2  # the learned potential does act
    assert four_devices["sharded"] <= 1e-13
    assert four_devices["ndev"] == 4


@pytest.mark.long
def test_learned_system_sharded_gradient(four_devices):
    # the weights' cotangents are summed over devices (psum), then over the batch: round-off
    assert four_devices["grad_scale"] > 0
    assert four_devices["grad_diff"] <= 1e-12 * four_devices["grad_scale"]
    # a learned configuration-dependent inertia on SO(3), NonholonomicVI
    assert four_devices["inertia_sharded"] <= 1e-13


def test_ensemble_of_learned_models_under_shard_vmap(four_devices):
    assert four_devices["ensemble_spread"] > 1e-3  # the members differ
    assert four_devices["ensemble"] <= 1e-13
