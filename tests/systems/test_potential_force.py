"""Potential forces: the closed forms of the built-in potentials, and the LGVI's SO(3) kernel
carrying the torque of a potential without one from step to step.

The closed forms (``potential_force`` of ``HeavyTop``, ``GravityGradient``, ``SE3Gravity``) are
checked against the autodiff route, the left-trivialized derivative
``<dV(g), eta> = d/dε V(g exp(ε eta))`` (Euclidean gradient, then ``left_gradient``), and
against central differences of ``V(g exp(ε eta))`` itself.  The carried torque is checked
against the kernel that evaluates it twice per step (states and gradients to round-off), by
counting the potential's evaluations in a traced step, and through gradients against central
differences."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import geomjax as gj
from geomjax.integrators.lgvi import torque_in_carry
from geomjax.lie import SO3


def _autodiff_force(system, g):
    """``−dV(g)`` by the autodiff route, whatever the potential offers."""
    return -system.group.left_gradient(g, jax.grad(system.potential_energy)(g))


def _systems(dtype):
    J = jnp.asarray([[1.0, 0.2, 0.1], [0.0, 2.0, 0.3], [0.1, 0.0, 3.0]], dtype)  # not symmetric
    return [
        gj.RigidBody(jnp.asarray([1.0, 2.0, 3.0], dtype), gj.HeavyTop(1.3, 9.81, [0.3, 0.2, 0.4])),
        gj.RigidBody(
            jnp.asarray([1.0, 2.0, 3.0], dtype), gj.GravityGradient(0.7, J, [0.2, 0.5, 1.0])
        ),
        gj.RigidBodySE3(2.0, [1.0, 2.0, 3.0], potential=gj.SE3Gravity(2.0, 9.81, [0.1, 0.3, -0.2])),
    ]


@settings(max_examples=15, deadline=None)
@given(
    seed=st.integers(0, 2**31 - 1),
    scale=st.sampled_from([1e-9, 1.0, 3.1]),  # near the identity, generic, near θ = π
    dtype=st.sampled_from([jnp.float64, jnp.float32]),
)
def test_closed_forms_equal_the_autodiff_route(seed, scale, dtype):
    rng = np.random.default_rng(seed)
    for system in _systems(dtype):
        G = system.group
        assert system.closed_form_potential_force() is not None
        x = rng.normal(size=G.dim)
        x[:3] *= scale / max(np.linalg.norm(x[:3]), 1e-300)
        g = G.exp(jnp.asarray(x, dtype))
        closed = system.potential_force(g)
        tol = 1e-12 if dtype == jnp.float64 else 2e-4
        auto = _autodiff_force(system, g)
        np.testing.assert_allclose(closed, auto, rtol=tol, atol=tol * 30)
        assert closed.dtype == auto.dtype


def test_closed_forms_against_central_differences():
    rng = np.random.default_rng(0)
    for system in _systems(jnp.float64):
        G = system.group
        g = G.exp(jnp.asarray(rng.normal(size=G.dim)))
        eps = 1e-6
        fd = np.array(
            [
                -(
                    system.potential_energy(G.compose(g, G.exp(eps * e)))
                    - system.potential_energy(G.compose(g, G.exp(-eps * e)))
                )
                / (2 * eps)
                for e in np.eye(G.dim)
            ]
        )
        np.testing.assert_allclose(system.potential_force(g), fd, rtol=1e-7, atol=1e-7)


def test_the_heavy_top_torque_is_the_textbook_one():
    # M = m g (R^T e3) × rho (Lee, Leok & McClamroch 2005), written out independently
    R = np.asarray(SO3.exp(jnp.array([0.4, -1.1, 0.7])))
    m, grav, rho = 1.3, 9.81, np.array([0.3, 0.2, 0.4])
    body = gj.RigidBody([1.0, 2.0, 3.0], gj.HeavyTop(m, grav, rho))
    np.testing.assert_allclose(
        body.potential_force(jnp.asarray(R)), m * grav * np.cross(R.T @ [0, 0, 1], rho), rtol=1e-14
    )


def test_a_subclass_with_its_own_energy_keeps_the_autodiff_route():
    class Doubled(gj.RigidBody):
        def potential_energy(self, g):
            return 2.0 * self.potential(g)

    body = Doubled([1.0, 2.0, 3.0], gj.HeavyTop(1.0, 9.81, [0.0, 0.0, 0.5]))
    R = SO3.exp(jnp.array([0.3, 0.2, -0.1]))
    assert body.closed_form_potential_force() is None
    np.testing.assert_allclose(
        body.potential_force(R),
        2.0 * gj.RigidBody([1.0, 2.0, 3.0], body.potential).potential_force(R),
        rtol=1e-13,
    )


def test_a_potential_subclass_with_its_own_call_keeps_the_autodiff_route():
    class Stiffer(gj.HeavyTop):  # another potential: the parent's closed form is not its force
        def __call__(self, R):
            return super().__call__(R) + 0.3 * jnp.sum(R[:, 0] ** 2 * jnp.arange(3.0))

    class Exact(Stiffer):  # ... unless it gives its own
        def potential_force(self, R):
            return _autodiff_force(gj.RigidBody([1.0, 2.0, 3.0], Stiffer(1.0, 9.81, self.rho)), R)

    R = SO3.exp(jnp.array([0.3, 0.2, -0.1]))
    body = gj.RigidBody([1.0, 2.0, 3.0], Stiffer(1.0, 9.81, [0.1, 0.0, 0.5]))
    assert body.closed_form_potential_force() is None
    np.testing.assert_allclose(body.potential_force(R), _autodiff_force(body, R), rtol=1e-13)
    assert gj.RigidBody(
        [1.0, 2.0, 3.0], Exact(1.0, 9.81, [0.1, 0.0, 0.5])
    ).closed_form_potential_force()


# --- the SO(3) kernel's carried torque ----------------------------------------------------------

HT = gj.HeavyTop(1.5, 9.81, [0.05, -0.02, 0.3])
R0 = SO3.exp(jnp.array([0.4, 1.0, -0.3]))
PI0 = jnp.array([0.2, -0.4, 3.0])


def _tilted_top(R):
    """The heavy top's potential as a plain function (no closed form: its torque by autodiff)."""
    return HT(R)


class _AutodiffTop(eqx.Module):
    """A heavy top's potential without its closed form (its parameters differentiable leaves)."""

    top: gj.HeavyTop

    def __call__(self, R):
        return self.top(R)


def _run(system, steps=200, save_every=50, adjoint=None, dtype=jnp.float64, pi0=PI0):
    kw = {} if adjoint is None else {"adjoint": adjoint}
    return gj.simulate(
        system, gj.LGVI(), system.make_state(R0.astype(dtype), pi0.astype(dtype)),
        0.005, steps, save_every=save_every, **kw,
    )  # fmt: skip


@pytest.mark.parametrize("dtype", [jnp.float64, jnp.float32])
def test_carried_torque_equals_the_torque_evaluated_twice(dtype):
    body = gj.RigidBody(jnp.asarray([0.9, 1.0, 0.4], dtype), _tilted_top)
    carried = _run(body, dtype=dtype)
    with torque_in_carry(False):
        twice = _run(
            gj.RigidBody(jnp.asarray([0.9, 1.0, 0.4], dtype), lambda R: HT(R)), dtype=dtype
        )
    # the same physics with the potential's closed form (nothing carried)
    closed = _run(gj.RigidBody(jnp.asarray([0.9, 1.0, 0.4], dtype), HT), dtype=dtype)
    tol = 1e-12 if dtype == jnp.float64 else 2e-5
    for other in (twice, closed):
        np.testing.assert_allclose(carried.states.R, other.states.R, atol=tol)
        np.testing.assert_allclose(carried.states.Pi, other.states.Pi, rtol=tol, atol=tol * 3)
    # it moved (the top precesses), and conserves what the heavy top conserves (float64)
    assert float(jnp.max(jnp.abs(carried.states.R[-1] - carried.states.R[0]))) > 1e-2
    if dtype == jnp.float64:
        e3_spatial = jnp.einsum("tij,tj->ti", carried.states.R, carried.states.Pi)[:, 2]
        np.testing.assert_allclose(e3_spatial, e3_spatial[0], rtol=1e-12)


def test_a_step_evaluates_the_potential_once():
    calls = []

    def counted(R):
        calls.append(1)
        return HT(R)

    body = gj.RigidBody([0.9, 1.0, 0.4], counted)
    method = gj.LGVI()
    carry = method.init(body, body.make_state(R0, PI0))
    calls.clear()
    jax.make_jaxpr(lambda c: method.advance(body, c, 0.01))(carry)
    assert len(calls) == 1
    with torque_in_carry(False):  # the kernel without the carry evaluates it at both ends
        carry = method.init(body, body.make_state(R0, PI0))
        calls.clear()
        jax.make_jaxpr(lambda c: method.advance(body, c, 0.01))(carry)
        assert len(calls) == 2


def test_gradients_through_the_carried_torque():
    def loss(pi0, mass, adjoint=None):
        top = gj.HeavyTop(mass, 9.81, [0.05, -0.02, 0.3])
        body = gj.RigidBody([0.9, 1.0, 0.4], _AutodiffTop(top))
        s = _run(body, 120, 120, adjoint, pi0=pi0).final_state
        return jnp.sum(jnp.sin(s.R)) + jnp.dot(s.Pi, jnp.array([0.3, -1.0, 0.7]))

    m = jnp.asarray(1.5)
    plain = jax.grad(loss, argnums=(0, 1))(PI0, m)
    reversible = jax.grad(loss, argnums=(0, 1))(PI0, m, gj.ReversibleAdjoint())
    for a, b in zip(plain, reversible):
        np.testing.assert_allclose(a, b, rtol=1e-9, atol=1e-11)
    eps = 1e-6
    fd_m = (loss(PI0, m + eps) - loss(PI0, m - eps)) / (2 * eps)
    np.testing.assert_allclose(plain[1], fd_m, rtol=1e-6)
    e = jnp.array([0.0, 1.0, 0.0])
    fd_p = (loss(PI0 + eps * e, m) - loss(PI0 - eps * e, m)) / (2 * eps)
    np.testing.assert_allclose(plain[0][1], fd_p, rtol=1e-6)


def test_carried_torque_under_vmap_and_in_a_composition():
    body = gj.RigidBody([0.9, 1.0, 0.4], _tilted_top)
    pis = jnp.stack([PI0, 0.5 * PI0, -PI0])

    def final(pi0, method):
        return gj.simulate(body, method, body.make_state(R0, pi0), 0.005, 40, save_every=10)

    for method in (gj.LGVI(), gj.Composition(gj.LGVI(), "yoshida4")):
        batched = jax.vmap(lambda p, m=method: final(p, m).states.Pi)(pis)
        with torque_in_carry(False):
            for k in range(3):
                np.testing.assert_allclose(batched[k], final(pis[k], method).states.Pi, atol=1e-12)
