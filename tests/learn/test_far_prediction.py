"""A learned potential that predicts far: a rigid body of known inertia in a tilted, anisotropic
potential of its attitude with a cubic term (:data:`geomjax.learn.problems.TILTED`), learned
from orientation-only records (velocities unknown) and judged on new motions against SciPy's
DOP853."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import geomjax as gj
from geomjax.learn.problems import (
    TILTED,
    rotation_errors,
    tilted_initial_states,
    tilted_potential,
    tilted_potential_gradient,
    tilted_records,
)
from geomjax.learn.reference import so3_reference


def true_body():
    return gj.RigidBody(TILTED["inertia"], lambda R: tilted_potential(R[2, :]))


def test_the_case_against_dop853():
    """The case itself: the closed-form gradient is autodiff's; the DOP853 reference (its torque
    ``z × ∇V``) and geomjax's LGVI on the true potential agree at second order in the step; the
    reference conserves the energy; the motions stay in the well."""
    rng = np.random.default_rng(0)
    z = rng.standard_normal((5, 3))
    z /= np.linalg.norm(z, axis=1, keepdims=True)
    g_ad = np.asarray(jax.vmap(jax.grad(tilted_potential))(jnp.asarray(z)))
    np.testing.assert_allclose(tilted_potential_gradient(z), g_ad, rtol=1e-13, atol=1e-13)
    ((R0, w0),) = tilted_initial_states(1, seed=5)
    ts = np.arange(101) * 0.01
    R, W = so3_reference(TILTED["inertia"], R0, w0, ts, vertical_gradient=tilted_potential_gradient)
    zs = R[:, 2, :]
    E = 0.5 * np.einsum("ki,ij,kj->k", W, TILTED["inertia"], W) + tilted_potential(zs)
    assert np.ptp(E) < 1e-10 * abs(E[0])
    assert np.max(np.arccos(zs @ TILTED["n"])) < 1.2  # in the well
    body = true_body()
    s0 = body.state_from_velocity(jnp.asarray(R0), jnp.asarray(w0))
    errs = []
    for k in (1, 2):
        sol = gj.simulate(body, gj.LGVI(), s0, 0.01 / k, steps=100 * k, save_every=k)
        errs.append(rotation_errors(R, sol.states.R).max())
    assert errs[1] < 1e-4 and 3.5 < errs[0] / errs[1] < 4.5, errs
    with pytest.raises(ValueError, match="'vertical_gradient'"):
        so3_reference(TILTED["inertia"], R0, w0, ts, vertical_gradient=1.0)
    data = tilted_records(2, 11)
    assert len(data) == 2 and data[0].xi is None and data[0].g.shape == (11, 3, 3)
