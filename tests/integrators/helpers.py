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
