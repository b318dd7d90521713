"""Demo section: higher order by composition and gradients by reversibility.

1. ``Composition(LGVI(), scheme)`` of order 4, 6 and 8 on the free rigid body: errors against a
   reference from a *different* method (the splitting with exact sub-flows composed to order 8,
   at a 10× smaller step), fitted orders, and the spatial angular momentum kept to round-off.
2. ``simulate(..., adjoint=ReversibleAdjoint())`` on the heavy top: the gradient equals plain
   reverse mode and central finite differences, and its XLA scratch memory does not grow with
   the number of steps (plain reverse mode stores the trajectory).
"""

from __future__ import annotations

from pathlib import Path

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from .. import (
    LGVI,
    SO3,
    Composition,
    ReversibleAdjoint,
    RigidBody,
    RigidBodySplitting,
    RigidBodyState,
    jit,
    simulate,
)
from ..systems import HeavyTop
from ._report import Check

# numpy constants: arrays are made when a function runs, after ``jax_enable_x64`` is set
I123 = np.array([1.0, 2.0, 3.0])
PI0 = np.array([0.8, -0.3, 1.1])
AXIS0 = np.array([0.3, -0.2, 0.5])


def initial_state():
    """``RigidBodyState(R0, Pi0)`` in the current default float precision."""
    return RigidBodyState(SO3.exp(jnp.asarray(AXIS0)), jnp.asarray(PI0))


SCHEMES = (("LGVI (order 2)", None), ("suzuki4", "suzuki4"), ("kahan_li6", "kahan_li6"))
SCHEMES += (("kahan_li8", "kahan_li8"),)


@eqx.filter_jit
def _run(method, dt, n):
    """Final state after ``n`` steps (``n`` dynamic: one compilation per method, what
    ``simulate`` runs per step, without saving)."""
    system = RigidBody(jnp.asarray(I123))
    carry = jax.lax.fori_loop(
        0,
        n,
        lambda k, c: method.advance(system, c, dt, None, k * dt)[0],
        method.init(system, initial_state()),
    )
    return method.finalize(system, carry)


def _final(method, T, dt):
    return _run(method, jnp.asarray(dt), jnp.asarray(round(T / dt)))


def composition_errors(T=2.0, dts=(0.2, 0.1, 0.05)):
    """``{name: [max error of (R, Pi) at T for each dt]}`` against the order-8 splitting at
    ``min(dts) / 10`` (a second method: its own error is far below every error shown)."""
    ref = _final(
        Composition(RigidBodySplitting(exact_subflows=True), "kahan_li8"), T, min(dts) / 10
    )
    out = {}
    for name, scheme in SCHEMES:
        method = LGVI() if scheme is None else Composition(LGVI(), scheme)
        errs = []
        for dt in dts:
            s = _final(method, T, dt)
            errs.append(float(max(jnp.max(jnp.abs(s.R - ref.R)), jnp.max(jnp.abs(s.Pi - ref.Pi)))))
        out[name] = errs
    return out


def fitted_order(dts, errs):
    return float(np.polyfit(np.log(dts), np.log(errs), 1)[0])


def _top_loss(steps, adjoint):
    def loss(pi0, moments):
        top = RigidBody(moments, HeavyTop(1.0, 9.81, [0.0, 0.1, 0.4]))
        kw = {"adjoint": ReversibleAdjoint()} if adjoint else {}
        s0 = top.make_state(SO3.exp(jnp.asarray(AXIS0, pi0.dtype)), pi0)
        s = simulate(top, LGVI(), s0, 0.01, steps, save_every=steps, **kw).final_state
        return jnp.sum(jnp.arange(9.0).reshape(3, 3) / 9.0 * s.R) + jnp.dot(jnp.asarray(PI0), s.Pi)

    return loss


def adjoint_checks(steps=500):
    """``(relative difference to plain reverse mode, to central finite differences)`` of the
    gradient with respect to ``Pi0`` and the principal moments."""
    pi0, moments = jnp.asarray(PI0), jnp.asarray(I123)
    # geomjax.jit: the time loops of these gradients as single kernels on CPU (jax.jit would
    # compile them with XLA:CPU's defaults, several times slower, and warn)
    g_rev = jit(jax.grad(_top_loss(steps, True), argnums=(0, 1)))(pi0, moments)
    g_ref = jit(jax.grad(_top_loss(steps, False), argnums=(0, 1)))(pi0, moments)
    flat = jnp.concatenate([g_rev[0], g_rev[1]])
    ref = jnp.concatenate([g_ref[0], g_ref[1]])
    loss = jit(_top_loss(steps, False))
    e, fd = 1e-6, []
    for i in range(6):
        d = jnp.zeros(6).at[i].set(e)
        fd.append(
            (loss(pi0 + d[:3], moments + d[3:]) - loss(pi0 - d[:3], moments - d[3:])) / (2 * e)
        )
    scale = float(jnp.max(jnp.abs(ref)))
    return (
        float(jnp.max(jnp.abs(flat - ref))) / scale,
        float(jnp.max(jnp.abs(flat - jnp.asarray(fd)))) / scale,
    )


def gradient_memory(steps_list=(1000, 4000, 16000), plain=True):
    """XLA scratch memory (bytes) of the compiled gradient, reversible adjoint and (``plain``)
    plain reverse mode (compile only)."""
    modes = (("ReversibleAdjoint", True), ("plain reverse mode", False))[: 2 if plain else 1]
    out = {name: [] for name, _ in modes}
    for n in steps_list:
        for name, adj in modes:
            args = (jnp.asarray(PI0), jnp.asarray(I123))
            c = jax.jit(jax.grad(_top_loss(n, adj), argnums=(0, 1))).lower(*args).compile()
            mem = c.memory_analysis()
            out[name].append(None if mem is None else int(mem.temp_size_in_bytes))
    return out


def run(out: Path, fast: bool) -> list[Check]:
    import matplotlib.pyplot as plt

    checks = []
    dts = (0.2, 0.1, 0.05)
    errs = composition_errors(2.0, dts)
    for name, order in (("suzuki4", 4), ("kahan_li6", 6), ("kahan_li8", 8)):
        p = fitted_order(dts, errs[name])
        checks.append(
            Check(
                f"Composition(LGVI(), {name!r}): |fitted order - {order}|",
                abs(p - order),
                0.3,
                "order-8 splitting, dt/10",
            )
        )
    # structure: the spatial angular momentum R Pi of the free body, order 8, long run
    rb = RigidBody(jnp.asarray(I123))
    sol = simulate(
        rb, Composition(LGVI(), "kahan_li8"), initial_state(), 0.1, 200 if fast else 2000
    )
    m = jnp.einsum("tij,tj->ti", sol.states.R, sol.states.Pi)
    checks.append(
        Check(
            "  ... kahan_li8: drift of the spatial momentum R Pi",
            float(jnp.max(jnp.abs(m - m[0]))),
            1e-12,
            "conservation",
        )
    )
    rel_rev, rel_fd = adjoint_checks(200 if fast else 1000)
    checks.append(
        Check("ReversibleAdjoint (heavy top): gradient vs plain reverse", rel_rev, 1e-10, "AD")
    )
    checks.append(Check("  ... vs central finite differences", rel_fd, 1e-6, "FD, h = 1e-6"))
    steps_list = (1000, 4000) if fast else (1000, 4000, 16000)
    mem = gradient_memory(steps_list, plain=not fast)
    if all(v is not None for v in mem["ReversibleAdjoint"]):
        growth = mem["ReversibleAdjoint"][-1] / mem["ReversibleAdjoint"][0]
        plain = mem.get("plain reverse mode")
        against = "constant" if plain is None else f"plain reverse: x{plain[-1] / plain[0]:.1f}"
        checks.append(
            Check(
                f"  ... scratch memory at {steps_list[-1]} / {steps_list[0]} steps",
                growth,
                1.01,
                against,
            )
        )

    fig, ax = plt.subplots(1, 2, figsize=(11, 4))
    for name, e in errs.items():
        ax[0].loglog(dts, e, "o-", label=name)
    ax[0].set(xlabel="dt", ylabel="max error at T = 2", title="LGVI compositions (free body)")
    ax[0].legend()
    if all(v is not None for vals in mem.values() for v in vals):
        for name, vals in mem.items():
            ax[1].loglog(steps_list, np.asarray(vals) / 2**10, "o-", label=name)
        ax[1].set(xlabel="steps", ylabel="XLA scratch memory [KiB]", title="gradient memory")
        ax[1].legend()
    fig.tight_layout()
    fig.savefig(out / "higher_order_adjoint.png", dpi=110)
    plt.close(fig)
    jax.clear_caches()
    return checks
