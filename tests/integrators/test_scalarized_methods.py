"""``scalarize=True`` (the default) on the generic-group LGVI, the coordinate variational
integrators (DEL, RATTLE) and the reconstruction LGVI: the same run as the array form to
round-off (the same primitives, scalar by scalar; ``geomjax._internal.scalarize``), with gradients equal
to the array form's.  Speed: ``benchmarks/bench_scalarize.py``."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from variational.helpers import double_pendulum, double_spherical

import geomjax as gj
from geomjax.reconstruction import MomentumLGVI

from .helpers import gyrostat_reconstruction, se3_body


def _agree(a, b, rtol=1e-12, atol=1e-12):
    for x, y in zip(jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b), strict=True):
        np.testing.assert_allclose(y, x, rtol=rtol, atol=atol)


def _both(make, run):
    return run(make(False)), run(make(True))


@pytest.mark.long
def test_generic_group_lgvi_se3_with_potential_and_gradients():
    body, s0 = se3_body()
    g0 = s0.g
    a, b = _both(lambda sc: gj.LGVI(scalarize=sc), lambda m: gj.simulate(body, m, s0, 0.02, 100))
    assert float(b.max_residual) < 1e-13
    _agree(a.final_state, b.final_state)

    def loss(sc):
        def f(mu0):
            s = body.make_state(g0, mu0)
            out = gj.simulate(body, gj.LGVI(scalarize=sc), s, 0.02, 20, check_inputs=False)
            return jnp.sum(jnp.sin(out.final_state.mu)) + jnp.sum(out.final_state.g**2)

        return jax.jit(jax.grad(f))(s0.mu)

    _agree(loss(False), loss(True), rtol=1e-11)


def test_so3_exp_retraction_takes_the_generic_path():
    body = gj.RigidBody(jnp.array([1.0, 2.0, 3.0]))
    s0 = body.make_state(gj.SO3.exp(jnp.array([0.3, -0.2, 0.1])), jnp.array([0.5, 1.5, -0.7]))
    a, b = _both(
        lambda sc: gj.LGVI(retraction="exp", scalarize=sc),
        lambda m: gj.simulate(body, m, s0, 0.05, 100),
    )
    _agree(a.final_state, b.final_state)


@pytest.mark.long
def test_del_and_rattle():
    pend = double_pendulum()
    s0 = pend.make_state(jnp.array([0.6, -0.4]), jnp.array([0.3, 1.1]))
    a, b = _both(
        lambda sc: gj.DiscreteEulerLagrange(scalarize=sc),
        lambda m: gj.simulate(pend, m, s0, 0.02, 100),
    )
    _agree(a.final_state, b.final_state)
    system, constraint = double_spherical()
    q0 = jnp.array([0.0, 0.6, -0.8, 0.3, 0.6, -1.5])
    q0 = q0.at[3:].set(q0[:3] + 0.8 * (q0[3:] - q0[:3]) / jnp.linalg.norm(q0[3:] - q0[:3]))
    m0 = gj.RATTLE(constraint)
    s1 = m0.make_state(system, q0, jnp.array([0.5, 0.0, 0.0, -0.3, 0.4, 0.1]), project=True)
    a, b = _both(
        lambda sc: gj.RATTLE(constraint, scalarize=sc),
        lambda m: gj.simulate(system, m, s1, 0.01, 100),
    )
    _agree(a.final_state, b.final_state)


@pytest.mark.long  # ~6-8 s of compilation: the long tier (make test-full)
def test_reconstruction_lgvi():
    rec, s0 = gyrostat_reconstruction()
    a, b = _both(
        lambda sc: MomentumLGVI(scalarize=sc), lambda m: gj.simulate(rec, m, s0, 0.02, 100)
    )
    _agree(a.final_state, b.final_state)
