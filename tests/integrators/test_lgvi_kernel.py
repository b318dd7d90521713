"""The hand-written batch-last LGVI kernel of ``benchmarks/bench_rigid_body.py`` (the reference of
) does the same work as ``geomjax.LGVI`` on the free rigid body: its result agrees with
``simulate`` to round-off, so the throughput ratio in the benchmark compares equal work."""

import importlib
from pathlib import Path

import jax.numpy as jnp
import numpy as np
import pytest

BENCH = Path(__file__).resolve().parents[2] / "benchmarks"


@pytest.fixture
def bench(monkeypatch):
    monkeypatch.syspath_prepend(str(BENCH))
    return importlib.import_module("bench_rigid_body")


def test_batch_last_kernel_agrees_with_simulate(bench):
    # Same arithmetic in the same order; only the layout (and XLA's fusion) differ.  The bound is
    # round-off: |R| ≤ 1, |Pi| ≤ ~3, 60 steps, each step well conditioned (Newton from a
    # second-order predictor, h|xi| ~ 0.03): a few hundred eps per step at most, ≪ 1e-12.
    out = bench.kernel_agreement(steps=60, B=4)
    assert out["max_abs_dR"] <= 1e-12 and out["max_abs_dPi"] <= 1e-12, out
    # the kernel with the scalar Legendre solve (the LGVI default), too
    assert out["max_abs_dR_scalar"] <= 1e-12 and out["max_abs_dPi_scalar"] <= 1e-12, out


def test_batch_last_kernel_is_an_lgvi_step(bench):
    # independent of simulate: the free-body Cayley LGVI conserves |Pi| (Pi1 = F^T b with F
    # orthogonal) and keeps R on SO(3), both to round-off (40 steps: ≲ 40 · few eps ≪ 1e-13)
    rng = np.random.default_rng(3)
    Pi = jnp.asarray(rng.standard_normal((3, 5)))
    R = jnp.tile(jnp.eye(3).reshape(9, 1), (1, 5))
    R1, Pi1 = bench.lgvi_kernel_batch_last(R, Pi, (1.0, 2.0, 3.0), 0.01, 40)
    np.testing.assert_allclose(
        jnp.linalg.norm(Pi1, axis=0), jnp.linalg.norm(Pi, axis=0), rtol=1e-13
    )
    Rm = R1.T.reshape(5, 3, 3)
    np.testing.assert_allclose(
        Rm @ jnp.swapaxes(Rm, -1, -2), np.broadcast_to(np.eye(3), (5, 3, 3)), atol=1e-13
    )
