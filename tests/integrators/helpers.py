"""Test helpers shared by the integrator tests."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np


@eqx.filter_jit
def integrate(system, method, state0, dt, n):
    """Terminal state after ``n`` steps with a *dynamic* step count: one compilation serves every
    step size of a convergence study (simulate itself is exercised by the other tests)."""
    carry0 = method.init(system, state0)

    def body(k, c):
        carry, t = c
        carry, _ = method.advance(system, carry, dt, None, t)
        return carry, t + dt

    carry, _ = jax.lax.fori_loop(0, n, body, (carry0, jnp.zeros((), jnp.result_type(dt))))
    return method.finalize(system, carry)


def terminal_error(system, method, state0, T, dt, g_ref, mu_ref):
    s = integrate(system, method, state0, jnp.asarray(dt), jnp.asarray(round(T / dt)))
    g, mu = system.split(s)
    return max(float(jnp.max(jnp.abs(g - g_ref))), float(jnp.max(jnp.abs(mu - mu_ref))))


def fitted_order(dts, errs):
    return np.polyfit(np.log(dts), np.log(errs), 1)[0]


def gyrostat_reconstruction():
    """A gyrostat with two rotors driven along a prescribed curve, and a state on it:
    ``(Reconstruction, state0)`` (shared by the scalarization and early-exit tests)."""
    import geomjax as gj
    from geomjax.reconstruction import Reconstruction
    from geomjax.reconstruction.examples import gyrostat

    rec = Reconstruction(
        gyrostat(
            inertia=(1.0, 1.6, 2.2),
            rotor_axes=((1.0, 0.0, 0.0), (0.0, 0.6, 0.8)),
            rotor_inertias=(0.3, 0.2),
        ),
        lambda t: jnp.stack([1.5 * jnp.sin(t) + t, 0.8 * jnp.cos(1.3 * t)]),
    )
    s0 = rec.state(
        gj.SO3.exp(jnp.array([0.2, -0.1, 0.3])), jnp.array([0.4, -0.7, 1.1]), spatial=True
    )
    return rec, s0


def se3_body():
    """A rigid body in SE(3) with its centre of mass off the origin and gravity, and a state:
    ``(RigidBodySE3, state0)`` (shared by the scalarization and restart tests)."""
    import geomjax as gj

    body = gj.RigidBodySE3(
        mass=2.0,
        inertia=jnp.diag(jnp.array([1.0, 2.0, 3.0])),
        com=jnp.array([0.1, 0.0, -0.2]),
        potential=lambda g: 9.81 * 2.0 * g[2, 3],
    )
    g0 = gj.SE3.exp(jnp.array([0.1, 0.2, -0.3, 0.5, 0.1, 0.0]))
    return body, body.make_state(g0, jnp.array([0.3, -0.5, 1.0, 0.2, 0.1, -0.4]))


def central_difference(f, x, seed=0, eps=1e-6):
    """``(v, d)``: a random direction ``v`` of the pytree ``x`` (normal entries, seeded) and the
    central difference ``d = (f(x + eps v) − f(x − eps v)) / (2 eps)`` of the scalar ``f``
    (jitted) along it: checks a gradient ``g`` by ``<g, v> ≈ d``."""
    leaves, tree = jax.tree.flatten(x)
    keys = jax.random.split(jax.random.PRNGKey(seed), len(leaves))
    v = jax.tree.unflatten(
        tree, [jax.random.normal(k, jnp.shape(a), jnp.result_type(a)) for k, a in zip(keys, leaves)]
    )
    f = jax.jit(f)
    shift = lambda t: jax.tree.map(lambda a, d: a + t * d, x, v)  # noqa: E731
    return v, float((f(shift(eps)) - f(shift(-eps))) / (2 * eps))
