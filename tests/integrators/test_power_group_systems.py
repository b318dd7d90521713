"""Two rigid bodies as one :class:`~geomjax.EulerPoincareSystem` on ``SO(3) × SO(3)``
(:class:`~geomjax.lie.PowerGroup`) with a potential: uncoupled, the simulation equals two
separate :class:`~geomjax.RigidBody` heavy tops to round-off; coupled through
``V = k trace(R_1ᵀ R_2)``, the LGVI keeps the total spatial angular momentum to round-off and
the energy within a bounded error that falls as ``dt²`` (no drift)."""

import jax.numpy as jnp
import numpy as np
import pytest

import geomjax as gj
from geomjax.lie import SO3, PowerGroup

SO3_2 = PowerGroup(SO3, 2)
I1, I2 = jnp.array([1.0, 2.0, 3.0]), jnp.array([1.5, 1.2, 2.0])
TOP1 = gj.HeavyTop(1.0, 9.81, [0.0, 0.1, 0.5])
TOP2 = gj.HeavyTop(2.0, 9.81, [0.2, 0.0, 0.3])
XI0 = jnp.array([0.3, 0.1, -0.2, 0.5, -0.4, 0.1])  # g0 = exp(XI0), factor by factor
MU0 = jnp.array([0.4, 1.2, -0.6, -0.5, 0.8, 0.9])


def _pair(potential):
    return gj.EulerPoincareSystem(SO3_2, jnp.diag(jnp.concatenate([I1, I2])), potential)


def _uncoupled(g):
    return TOP1(g[0]) + TOP2(g[1])


@pytest.mark.parametrize("method", [gj.LGVI(), gj.RKMK4()], ids=["LGVI", "RKMK4"])
def test_uncoupled_pair_is_two_heavy_tops(method):
    """Each factor of the pair's run equals the heavy top run alone with the same method (the
    LGVI: the generic group path against the SO(3) kernel, each solving its discrete Legendre
    transform to round-off), and the pair's force is the two tops' torques."""
    pair = _pair(_uncoupled)
    g0 = SO3_2.exp(XI0)
    force = pair.potential_force(g0)
    tops = [gj.RigidBody(I1, TOP1), gj.RigidBody(I2, TOP2)]
    for i, top in enumerate(tops):
        np.testing.assert_allclose(force[3 * i : 3 * i + 3], top.potential_force(g0[i]), atol=1e-14)
    sol = gj.simulate(pair, method, gj.LieGroupState(g0, MU0), dt=0.01, steps=200)
    sol.check()
    for i, top in enumerate(tops):
        s0 = top.make_state(g0[i], MU0[3 * i : 3 * i + 3])
        ref = gj.simulate(top, method, s0, dt=0.01, steps=200)
        # the momenta move by O(1) over the run; seen: 2e-15 (R), 5e-15 (Pi): round-off
        np.testing.assert_allclose(sol.states.g[:, i], ref.states.R, rtol=0, atol=1e-13)
        np.testing.assert_allclose(
            sol.states.mu[:, 3 * i : 3 * i + 3], ref.states.Pi, rtol=0, atol=1e-13
        )


K = 2.0


def _coupled(g):
    return K * jnp.trace(g[0].T @ g[1])


def _run_coupled(dt, T=20.0):
    pair = _pair(_coupled)
    s0 = gj.LieGroupState(SO3_2.exp(XI0), MU0)
    sol = gj.simulate(pair, gj.LGVI(), s0, dt=dt, steps=round(T / dt))
    sol.check()
    g, mu = np.asarray(sol.states.g), np.asarray(sol.states.mu)
    # energy and total spatial angular momentum from the states, written out
    Iinv = 1.0 / np.concatenate([np.asarray(I1), np.asarray(I2)])
    E = 0.5 * np.sum(mu**2 * Iinv, -1) + K * np.einsum("nij,nij->n", g[:, 0], g[:, 1])
    L = np.einsum("nij,nj->ni", g[:, 0], mu[:, :3]) + np.einsum("nij,nj->ni", g[:, 1], mu[:, 3:])
    return E, L


def test_coupled_pair_conserves_energy_and_momentum():
    """``V = k trace(R_1ᵀ R_2)`` is invariant under ``(R_1, R_2) → (Q R_1, Q R_2)``: the total
    spatial angular momentum ``R_1 Π_1 + R_2 Π_2`` is a conserved Noether momentum, which the
    LGVI keeps to round-off.  Its energy error is bounded (over the second half of the run no
    larger than over the first, with margin) and of second order: halving ``dt`` divides the
    largest error over ``T = 20`` (2000 and 4000 steps) by ~4."""
    errors = []
    for dt in (0.01, 0.005):
        E, L = _run_coupled(dt)
        assert np.max(np.abs(L - L[0])) < 1e-12 * max(1.0, np.abs(L[0]).max())
        err = np.abs(E - E[0])
        half = err.size // 2
        assert err[half:].max() < 1.5 * err[:half].max(), (err[:half].max(), err[half:].max())
        errors.append(err.max())
    assert errors[0] > 1e-6  # the coupling exchanges energy: the error is not round-off
    assert 3.0 < errors[0] / errors[1] < 5.0, errors
