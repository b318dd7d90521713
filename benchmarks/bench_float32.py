"""float32 long runs: drift of the Casimirs and the energy, LGVI against RK4, and the cost.

    python benchmarks/bench_float32.py [--fast]   (or: geomjax bench float32)

(a) free rigid body (principal moments 1, 2, 3), ``Pi0 = (0.01, 1, 0.01)`` and ``(0.3, 0.5, 0.9)``,
    ``dt = 0.01`` and ``0.001``, 1e5 steps (1e4 with ``--fast``): the largest relative error of
    ``|Pi|²`` and of the energy along the run (every 100 steps), in float32, for
    * the former momentum update ``Pi' = F^T Pi`` with ``F = cay(h xi)`` formed as a matrix (the
      batch-last LGVI kernel of ``bench_rigid_body.py``, which keeps that arithmetic),
    * ``LGVI(compensate=False)``: the rotation applied in increment form ``Pi + K^T Pi``,
      ``K = cay(h xi) − 1`` formed without the identity,
    * ``LGVI()``: in float32 also the compensated (TwoSum) momentum carry,
    * a classical RK4 on Euler's equations ``Pi' = Pi × I⁻¹Pi`` in a bare ``lax.scan``, float32
      (the stand-in for MuJoCo MJX's RK4, which is not installed here),
    * ``LGVI()`` in float64 (the method's own truncation error);
    * ``RigidBodySplitting()`` in float32 (its axis rotations in increment form too, no
      compensated carry);
    with ``√N·u`` (``u = 2^-24``), the random walk of ``N`` unbiased roundings, for scale.
(b) heavy top (``m g = 9.81``, ``rho = (0, 0.1, 0.4)``) and (c) a free SE(3) body (mass 2,
    inertia diag(1, 2, 3), centre of mass offset (0.1, 0, 0.05)): energy and Casimir errors, the
    same rows (for SE(3) the former update is ``Ad(cay(h xi))^T b`` from the rounded matrix,
    :meth:`geomjax.LieGroup.cay_coAd_increment`'s generic default; no RK4 row for SE(3) beyond
    the Kirchhoff equations integrated the same way).
(d) cost: ns per body-step, free body, float32 and float64, batch 1 and 1024, three passes
    interleaved, the median; compile time separate.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
from bench_rigid_body import lgvi_kernel_batch_last
from common import fast_mode, median, print_table, time_jitted, write_json

jax.config.update("jax_enable_x64", True)

import geomjax as gj  # noqa: E402
from geomjax.lie import LieGroup  # noqa: E402
from geomjax.lie.se3 import SpecialEuclidean3  # noqa: E402
from geomjax.systems import EulerPoincareSystem, LieGroupState, RigidBodySE3  # noqa: E402

F32, F64 = jnp.float32, jnp.float64
MOMENTS = np.array([1.0, 2.0, 3.0])
U32 = 2.0**-24  # unit round-off of float32
SAVE = 100
R0 = np.asarray(gj.SO3.exp(jnp.array([0.3, -0.2, 0.5])))
RHO, MG = np.array([0.0, 0.1, 0.4]), 9.81


def _rel(values):
    """Largest and final relative deviation of ``values`` (float64) from the first one (each
    run's own initial value, after rounding to its dtype)."""
    values = np.asarray(values, np.float64)
    d = (values - values[0]) / abs(values[0])
    return float(np.max(np.abs(d))), float(d[-1])


def rk4_scan(f, y0, dt, steps):
    """Classical RK4 in a bare ``lax.scan``, in ``y0``'s dtype; every ``SAVE``-th state."""
    h = jnp.asarray(dt, y0.dtype)

    def step(y, _):
        k1 = f(y)
        k2 = f(y + 0.5 * h * k1)
        k3 = f(y + 0.5 * h * k2)
        k4 = f(y + h * k3)
        return y + (h / 6) * (k1 + 2 * k2 + 2 * k3 + k4), None

    def block(y, _):
        y = jax.lax.scan(step, y, None, length=SAVE)[0]
        return y, y

    ys = jax.jit(lambda y: jax.lax.scan(block, y, None, length=steps // SAVE)[1])(y0)
    return np.concatenate([np.asarray(y0)[None], np.asarray(ys)]).astype(np.float64)


def simulate(system, method, state, dt, steps):
    sol = gj.simulate(system, method, state, dt, steps, save_every=SAVE)
    return jax.tree_util.tree_map(lambda a: np.asarray(a, np.float64), sol.states)


# ------------------------------------------------------------------------------------------
# (a) free rigid body


def free_body(steps):
    rows = []
    for pi0 in [(0.01, 1.0, 0.01), (0.3, 0.5, 0.9)]:
        for dt in [0.01, 0.001]:
            p32 = np.asarray(np.asarray(pi0, np.float32), np.float64)
            runs = {}
            for name, dtype, method in [
                ("LGVI() float64", F64, gj.LGVI()),
                ("LGVI(compensate=False)", F32, gj.LGVI(compensate=False)),
                ("LGVI()", F32, gj.LGVI()),
                ("RigidBodySplitting()", F32, gj.RigidBodySplitting()),
            ]:
                st = gj.RigidBodyState(jnp.eye(3, dtype=dtype), jnp.asarray(pi0, dtype))
                runs[name] = simulate(
                    gj.RigidBody(jnp.asarray(MOMENTS, dtype)), method, st, dt, steps
                ).Pi

            def kernel(pi, dt=dt):
                # the former update F^T Pi (matrix F), batch of one, saved every SAVE steps
                def block(c, _):
                    c = lgvi_kernel_batch_last(c[0], c[1], MOMENTS, dt, SAVE)
                    return c, c[1][:, 0]

                R = jnp.eye(3, dtype=F32).reshape(9, 1)
                return jax.lax.scan(block, (R, pi[:, None]), None, length=steps // SAVE)[1]

            pi = jnp.asarray(pi0, F32)
            ks = jax.jit(kernel)(pi)
            runs["F^T Pi, matrix F (former)"] = np.concatenate(
                [p32[None], np.asarray(ks, np.float64)]
            )
            m32 = jnp.asarray(MOMENTS, F32)
            runs["RK4 (Euler's equations)"] = rk4_scan(
                lambda p: jnp.cross(p, p / m32), pi, dt, steps
            )
            for name, P in runs.items():
                cmax, cend = _rel(np.sum(P**2, -1))
                emax, eend = _rel(0.5 * np.sum(P**2 / MOMENTS, -1))
                rows.append(
                    dict(
                        Pi0=str(pi0), dt=dt, method=name, casimir_max=cmax, casimir_end=cend,
                        energy_max=emax, energy_end=eend, sqrtN_u=math.sqrt(steps) * U32,
                    )
                )  # fmt: skip
    return rows


# ------------------------------------------------------------------------------------------
# (b) heavy top


def heavy_top(steps):
    rows = []
    pi0 = (0.8, -0.3, 1.1)

    def energy(R, P):
        return 0.5 * np.sum(P**2 / MOMENTS, -1) + MG * (R[..., 2, :] @ RHO)

    def vertical(R, P):  # e3 · R Pi, conserved (the potential is invariant about the vertical)
        return np.sum(R[..., 2, :] * P, -1)

    for dt in [0.01, 0.001]:
        runs = {}
        for name, dtype, method in [
            ("LGVI() float64", F64, gj.LGVI()),
            ("LGVI(compensate=False)", F32, gj.LGVI(compensate=False)),
            ("LGVI()", F32, gj.LGVI()),
        ]:
            top = gj.RigidBody(
                jnp.asarray(MOMENTS, dtype), gj.HeavyTop(1.0, MG, jnp.asarray(RHO, dtype))
            )
            st = gj.RigidBodyState(jnp.asarray(R0, dtype), jnp.asarray(pi0, dtype))
            s = simulate(top, method, st, dt, steps)
            runs[name] = (s.R, s.Pi)
        m32, rho32 = jnp.asarray(MOMENTS, F32), jnp.asarray(RHO, F32)

        def rhs(y):
            R, P = y[:9].reshape(3, 3), y[9:]
            om = P / m32
            return jnp.concatenate(
                [(R @ gj.SO3.hat(om)).reshape(9), jnp.cross(P, om) + MG * jnp.cross(R[2], rho32)]
            )

        y0 = jnp.concatenate([jnp.asarray(R0, F32).reshape(9), jnp.asarray(pi0, F32)])
        ys = rk4_scan(rhs, y0, dt, steps)
        runs["RK4 (R, Pi)"] = (ys[:, :9].reshape(-1, 3, 3), ys[:, 9:])
        for name, (R, P) in runs.items():
            emax, eend = _rel(energy(R, P))
            vmax, _ = _rel(vertical(R, P))
            rows.append(
                dict(dt=dt, method=name, energy_max=emax, energy_end=eend, e3_R_Pi_max=vmax)
            )
    return rows


# ------------------------------------------------------------------------------------------
# (c) SE(3)


class _MatrixFormSE3(SpecialEuclidean3):
    """SE(3) with the generic ``Ad(cay(xi))^T mu − mu`` from the rounded matrix (the former
    momentum update), for comparison only."""

    def cay_coAd_increment(self, xi, mu):
        return LieGroup.cay_coAd_increment(self, xi, mu)


def se3_body(steps):
    rows = []
    mu0 = (0.3, 0.5, 0.9, 0.2, -0.1, 0.4)
    inertia, com = np.diag(MOMENTS), np.array([0.1, 0.0, 0.05])
    for dt in [0.01, 0.001]:
        runs = {}
        for name, dtype, method, former in [
            ("LGVI() float64", F64, gj.LGVI(), False),
            ("Ad^T b, matrix Ad (former)", F32, gj.LGVI(compensate=False), True),
            ("LGVI(compensate=False)", F32, gj.LGVI(compensate=False), False),
            ("LGVI()", F32, gj.LGVI(), False),
        ]:
            body = RigidBodySE3(
                jnp.asarray(2.0, dtype), jnp.asarray(inertia, dtype), jnp.asarray(com, dtype)
            )
            if former:
                body = EulerPoincareSystem(_MatrixFormSE3(), body.inertia)
            st = LieGroupState(jnp.eye(4, dtype=dtype), jnp.asarray(mu0, dtype))
            runs[name] = simulate(body, method, st, dt, steps).mu
        H32 = RigidBodySE3(
            jnp.asarray(2.0, F32), jnp.asarray(inertia, F32), jnp.asarray(com, F32)
        ).inertia
        H32 = H32.astype(F32)
        Hinv = jnp.linalg.inv(H32)

        def kirchhoff(mu):
            xi = Hinv @ mu
            return gj.SE3.coad(xi, mu)

        runs["RK4 (Kirchhoff's equations)"] = rk4_scan(kirchhoff, jnp.asarray(mu0, F32), dt, steps)
        H64 = np.linalg.inv(np.asarray(H32, np.float64))
        for name, M in runs.items():
            e = 0.5 * np.einsum("...i,ij,...j->...", M, H64, M)
            pp = np.sum(M[:, 3:] ** 2, -1)
            pip = np.sum(M[:, :3] * M[:, 3:], -1)
            emax, eend = _rel(e)
            rows.append(
                dict(
                    dt=dt, method=name, energy_max=emax, energy_end=eend,
                    p_dot_p_max=_rel(pp)[0], pi_dot_p_max=_rel(pip)[0],
                )
            )  # fmt: skip
    return rows


# ------------------------------------------------------------------------------------------
# (d) cost


def throughput(fast, passes=3):
    steps = 200 if fast else 1000
    rows = []
    for batch in [1, 1024]:
        for dtype in [F32, F64]:
            key = jax.random.PRNGKey(0)
            R = gj.SO3.random(key, (batch,), dtype=dtype)
            Pi = jax.random.normal(jax.random.PRNGKey(1), (batch, 3), dtype)
            rb = gj.RigidBody(jnp.asarray(MOMENTS, dtype))
            variants = {"LGVI()": gj.LGVI(), "LGVI(compensate=False)": gj.LGVI(compensate=False)}
            fns = {}
            for name, method in variants.items():

                def f(R, Pi, method=method):
                    def one(r, p):
                        st = gj.RigidBodyState(r, p)
                        sol = gj.simulate(
                            rb, method, st, 0.01, steps, save_every=steps, check_inputs=False
                        )
                        return sol.states.Pi

                    return jax.vmap(one)(R, Pi)

                fns[name] = f
            fns["batch-last kernel, F^T Pi"] = lambda R, Pi: lgvi_kernel_batch_last(
                R.reshape(batch, 9).T, Pi.T, MOMENTS, 0.01, steps
            )[1]
            runs, compile_s = {name: [] for name in fns}, {}
            for _ in range(passes):  # interleaved passes, the median of each kept
                for name, f in fns.items():
                    c, t = time_jitted(f, R, Pi, repeats=5, min_time=0.1)
                    compile_s.setdefault(name, c)
                    runs[name].append(t)
            best = {name: median(ts) for name, ts in runs.items()}
            for name in fns:
                rows.append(
                    dict(
                        dtype=jnp.dtype(dtype).name, batch=batch, method=name,
                        ns_per_body_step=best[name] / steps / batch * 1e9, compile_s=compile_s[name],
                        vs_uncompensated=best[name] / best["LGVI(compensate=False)"],
                    )
                )  # fmt: skip
    return rows


def main():
    fast = fast_mode()
    steps = 10_000 if fast else 100_000
    print(f"float32 long runs, {steps} steps, errors every {SAVE} steps (relative to the start)")
    a = free_body(steps)
    cols = [
        "Pi0",
        "dt",
        "method",
        "casimir_max",
        "casimir_end",
        "energy_max",
        "energy_end",
        "sqrtN_u",
    ]
    print_table(a, cols, "(a) free body, |Pi|² and energy (float32 unless stated)")
    b = heavy_top(steps)
    cols = ["dt", "method", "energy_max", "energy_end", "e3_R_Pi_max"]
    print_table(b, cols, "(b) heavy top: energy and e3·R Pi")
    c = se3_body(steps)
    cols = ["dt", "method", "energy_max", "energy_end", "p_dot_p_max", "pi_dot_p_max"]
    print_table(c, cols, "(c) SE(3) body: energy and the Casimirs p·p, pi·p")
    d = throughput(fast)
    cols = ["dtype", "batch", "method", "ns_per_body_step", "compile_s", "vs_uncompensated"]
    print_table(d, cols, "(d) cost, free body, dt 0.01 (min of 3 interleaved passes)")
    write_json(
        "float32",
        dict(steps=steps, save_every=SAVE, free_body=a, heavy_top=b, se3_body=c, throughput=d),
    )


if __name__ == "__main__":
    main()
