"""What a gradient costs against the forward run: the default LGVI (SO(3), Cayley, float64)
on a free body, a heavy top (a potential) and a free body with open-loop torques (controls),
at batch 1 and under ``jax.vmap`` at batch 1024, in plain reverse mode and with
``adjoint=ReversibleAdjoint()``; and the LGVI's generic group path on a rigid body on SE(3) with
gravity (mass 2, inertia diag(1, 2, 3), centre of mass (0.1, 0, -0.2)) at batch 1 and 256.

    python benchmarks/bench_gradient_cost.py [--fast] [--clock=cpu] [--se3-only]
    (or: geomjax bench gradient-cost)

Loss: a fixed linear functional of the final (R, Pi); gradient with respect to the initial
momenta and the principal moments (and the controls where there are any; on SE(3): the
initial momenta and the diagonal of the rotational inertia).  Batch 1: 1e4 steps of dt 0.01;
batch 1024: 200 steps; SE(3): 5000 steps at batch 1, 100 at batch 256.  ``--se3-only``: only the
SE(3) rows, written to ``gradient_cost_se3.json``.  Every function of a row is compiled first, then timed in
interleaved rounds (median round kept: the ratios of a row see the same machine load);
``--clock=cpu`` times the process's CPU time instead of wall time (steadier on a shared
machine).  Every function is compiled by :func:`geomjax.jit` (XLA:CPU's small-loop threshold
raised for that program alone, as geomjax's eager entry points do; no process setting);
``--defaults``: by ``jax.jit`` (XLA's defaults, a user's own program), written to
``gradient_cost_defaults.json``.
"""

from __future__ import annotations

import sys

import jax
import jax.numpy as jnp
import numpy as np
from common import CLOCKS as CLOCK
from common import fast_mode, print_table, write_json

jax.config.update("jax_enable_x64", True)

import geomjax as gj  # noqa: E402

DT = 0.01


def _rodrigues(w):
    """``exp(hat(w))`` in NumPy."""
    t = np.linalg.norm(w)
    K = np.array([[0.0, -w[2], w[1]], [w[2], 0.0, -w[0]], [-w[1], w[0], 0.0]]) / t
    return np.eye(3) + np.sin(t) * K + (1.0 - np.cos(t)) * K @ K


# (NumPy constants: JAX computes nothing at import of this module)
R0 = _rodrigues(np.array([0.3, -0.2, 0.5]))
PI0 = np.array([0.8, -0.3, 1.1])
MOMENTS = np.array([1.0, 2.0, 3.0])
W_R = np.arange(9.0).reshape(3, 3) / 9.0
W_PI = np.array([0.3, -1.0, 0.7])
CASES = ("free body", "heavy top", "free body, controls")
SE3_CASE = "SE(3) body, gravity"
G0_SE3 = np.eye(4)
G0_SE3[:3, :3] = _rodrigues(np.array([0.1, 0.2, -0.3]))
G0_SE3[:3, 3] = [0.5, 0.1, 0.0]
MU0_SE3 = np.array([0.3, -0.5, 1.0, 0.2, 0.1, -0.4])
COM_SE3 = np.array([0.1, 0.0, -0.2])
W_G = np.arange(16.0).reshape(4, 4) / 16.0
W_MU = np.array([0.3, -1.0, 0.7, 0.2, -0.5, 0.4])


def _gravity(g):
    """Potential of the SE(3) body (mass 2) in a uniform field along z."""
    return 9.81 * 2.0 * g[2, 3]


def loss_fn(case, steps, adjoint):
    def loss(pi0, moments, us):
        if case == "heavy top":
            system = gj.RigidBody(moments, gj.HeavyTop(1.0, 9.81, [0.3, 0.2, 0.4]))
        else:
            system = gj.RigidBody(moments)
        controls = us if case == "free body, controls" else None
        kw = {} if adjoint is None else {"adjoint": adjoint}
        sol = gj.simulate(
            system, gj.LGVI(), system.make_state(R0, pi0), DT, steps, controls,
            save_every=steps, **kw,
        )  # fmt: skip
        s = sol.final_state
        return jnp.sum(W_R * s.R) + jnp.sum(W_PI * s.Pi)

    return loss


def se3_loss_fn(steps, adjoint, method=None):
    def loss(mu0, moments, us):
        del us
        system = gj.RigidBodySE3(
            mass=2.0, inertia=jnp.diag(moments), com=COM_SE3, potential=_gravity
        )
        kw = {} if adjoint is None else {"adjoint": adjoint}
        sol = gj.simulate(
            system, gj.LGVI() if method is None else method, system.make_state(G0_SE3, mu0),
            DT, steps, save_every=steps, **kw,
        )  # fmt: skip
        s = sol.final_state
        return jnp.sum(W_G * s.g) + jnp.sum(W_MU * s.mu)

    return loss


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    fast = fast_mode(argv)
    defaults = "--defaults" in argv
    clock = "cpu" if "--clock=cpu" in argv else "wall"
    import bench_adjoint

    se3_only = "--se3-only" in argv
    rows = []
    configs = [] if se3_only else [
        (batch, steps, case)
        for batch, steps in ((1, 2000 if fast else 10_000), (1024, 100 if fast else 200))
        for case in CASES
    ]  # fmt: skip
    configs += [(1, 1000 if fast else 5000, SE3_CASE), (256, 50 if fast else 100, SE3_CASE)]
    for batch, steps, case in configs:
        se3 = case == SE3_CASE
        argnums = (0, 1, 2) if "controls" in case else (0, 1)
        fns = {}
        for name, adjoint in (
            ("forward", None),
            ("plain reverse", None),
            ("ReversibleAdjoint", gj.ReversibleAdjoint()),
        ):
            f = se3_loss_fn(steps, adjoint) if se3 else loss_fn(case, steps, adjoint)
            if batch > 1:
                f = _summed_vmap(f)
            fns[name] = f if name == "forward" else jax.grad(f, argnums=argnums)
        x0 = MU0_SE3 if se3 else PI0
        n = x0.shape[0]
        pis = x0 * (1.0 + 0.1 * np.sin(np.arange(1.0 * n * batch)).reshape(batch, n))
        us = 0.1 * np.sin(np.arange(3.0 * steps * batch)).reshape(batch, steps, 3)
        args = (pis, MOMENTS, us) if batch > 1 else (pis[0], MOMENTS, us[0])
        args = tuple(map(jnp.asarray, args))
        res = bench_adjoint.measure_side_by_side(
            fns, *args, fast=fast, jit=None if defaults else gj.jit, clock=CLOCK[clock]
        )
        fwd = res["forward"][1]
        for name, (c, r, _) in res.items():
            rows.append(
                {
                    "batch": batch,
                    "steps": steps,
                    "case": case,
                    "run": name,
                    "compile s": c,
                    "ns/body-step": r / (steps * batch) * 1e9,
                    "/forward": r / fwd,
                }
            )
    print_table(
        rows,
        ["batch", "steps", "case", "run", "compile s", "ns/body-step", "/forward"],
        title=f"gradient / forward, LGVI float64 ({clock} clock, interleaved, median of rounds)",
    )
    name = "gradient_cost_defaults" if defaults else "gradient_cost"
    write_json(
        name + "_se3" if se3_only else name,
        {
            "fast": fast,
            "clock": clock,
            "jit": "jax.jit" if defaults else "geomjax.jit",
            "rows": rows,
        },
    )
    return rows


def _summed_vmap(f):
    return lambda p, m, u: jnp.sum(jax.vmap(f, in_axes=(0, None, 0))(p, m, u))


if __name__ == "__main__":
    main(sys.argv[1:])
