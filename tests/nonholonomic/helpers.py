"""Jitted drivers shared by the nonholonomic tests.

:func:`trajectory` has a *dynamic* number of steps per saved block, so that one compilation per
system serves every step size and horizon of a file (compile time dominates these tests)."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

#: number of saved blocks of every trajectory (static: the output shape)
NSAVE = 100


@eqx.filter_jit
def trajectory(system, method, state0, dt, every, control=None):
    """``NSAVE`` blocks of ``every`` steps (``every`` and ``dt`` dynamic; ``control`` an optional
    constant generalized force).

    Returns a dict: ``states`` (``NSAVE + 1`` saved states, the initial one included), ``ts``,
    ``diag`` (``system.diagnostics`` at the saved states), ``residual`` (max per block) and, for
    the *first* step of each block, ``lam_a``, ``p_plus`` and the state it reaches (``next``),
    and for the *last* step of each block ``lam_b``."""
    dt = jnp.asarray(dt, state0.v.dtype)

    def block(carry, _):
        s, t = carry

        def body(i, c):
            s, t, worst, first, _ = c
            s1, res, info = method.solve_step(system, s, dt, control, t)
            keep = i == 0
            first = jax.tree_util.tree_map(
                lambda new, old: jnp.where(keep, new, old),
                (info["lam_a"], info["p_plus"], s1),
                first,
            )
            return s1, t + dt, jnp.maximum(worst, res), first, info["lam_b"]

        first0 = (s.lam, s.v, s)
        s1, t1, worst, first, lam_b = jax.lax.fori_loop(
            0, every, body, (s, t, jnp.zeros((), dt.dtype), first0, s.lam)
        )
        return (s1, t1), (s1, t1, worst, first, lam_b)

    t0 = jnp.zeros((), dt.dtype)
    _, (states, ts, res, first, lam_b) = jax.lax.scan(block, (state0, t0), None, length=NSAVE)
    states = jax.tree_util.tree_map(lambda a, b: jnp.concatenate([a[None], b]), state0, states)
    ts = jnp.concatenate([t0[None], ts])
    diag = jax.vmap(system.diagnostics)(states, ts)
    return {
        "states": states,
        "ts": ts,
        "diag": diag,
        "residual": res,
        "lam_a": first[0],
        "p_plus": first[1],
        "next": first[2],
        "lam_b": lam_b,
    }


def run(system, method, state0, T, dt, control=None):
    """:func:`trajectory` over ``[0, T]`` with step ``dt`` (``T / dt`` a multiple of NSAVE)."""
    steps = round(T / dt)
    assert steps % NSAVE == 0 and abs(steps * dt - T) < 1e-9 * T, (T, dt)
    return trajectory(system, method, state0, jnp.asarray(dt), jnp.asarray(steps // NSAVE), control)


def fitted_order(dts, errs):
    return np.polyfit(np.log(dts), np.log(errs), 1)[0]
