"""The quasi-static start (crocoddyl's ``quasiStatic``): the controls that hold the initial
state, against the closed-form hover thrust ``m g / 4`` of crocoddyl's quadrotor."""

import jax.numpy as jnp
import numpy as np
import pytest

import geomjax as gj
from geomjax.control import ILQR, quasi_static_controls, solve_ocp
from geomjax.control.examples import QUADROTOR, quadrotor_problem


@pytest.mark.parametrize("dtype", [jnp.float64, jnp.float32])
@pytest.mark.parametrize(
    "method",
    [None, pytest.param(gj.LGVI(), marks=pytest.mark.long)],
    ids=["semi-implicit Euler", "LGVI"],
)
def test_a_quadrotor_at_rest_is_held_by_its_hover_thrust(method, dtype):
    """Explicit (affine in the thrusts) and implicit steps alike (the implicit LGVI compiles
    for longer: long tier): four equal thrusts carrying the weight; for a body 20 % heavier,
    the heavier weight."""
    for mass in (QUADROTOR["mass"], 1.2 * QUADROTOR["mass"]):
        prob = quadrotor_problem(method=method, dtype=dtype, mass=mass)
        u = quasi_static_controls(prob)
        assert u.dtype == dtype
        rtol = 1e-12 if dtype == jnp.float64 else 1e-5
        np.testing.assert_allclose(u, np.full(4, mass * QUADROTOR["gravity"] / 4), rtol=rtol)


def test_bounds_clip_the_quasi_static_controls():
    """A body too heavy for the thrust limit (5 N a rotor) gets the limit."""
    prob = quadrotor_problem(bounded=True, mass=3.0)
    np.testing.assert_allclose(quasi_static_controls(prob), np.full(4, 5.0), rtol=0, atol=0)


def test_solve_ocp_starts_from_the_quasi_static_controls():
    """``controls="quasi-static"`` is the solve from those controls given explicitly (one
    program for both: the same shapes), and from there iLQR reaches the optimum it reaches from
    zero thrust; anything else is refused naming the argument."""
    prob = quadrotor_problem()
    hover = np.tile(np.asarray(quasi_static_controls(prob)), (prob.steps, 1))
    a = solve_ocp(prob, ILQR(), controls="quasi-static", progress=False)
    b = solve_ocp(prob, ILQR(), controls=hover, progress=False)
    np.testing.assert_allclose(a.controls, b.controls, rtol=1e-12, atol=1e-12)
    assert int(a.iterations) == int(b.iterations)
    c = solve_ocp(prob, ILQR(), progress=False)
    assert a.stop_reason == c.stop_reason == "converged"
    np.testing.assert_allclose(a.cost, c.cost, rtol=1e-8)
    with pytest.raises(ValueError, match="'controls'.*quasi-static"):
        solve_ocp(prob, ILQR(), controls="hover")
