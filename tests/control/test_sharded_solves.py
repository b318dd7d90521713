"""Batches of trajectory optimizations and MPC runs split over devices (``geomjax.shard_vmap``):
the values of ``jax.vmap`` of the same solves, whether the devices are in one process or in two
processes joined by ``jax.distributed`` (CPU collectives over localhost).

The multi-device runs need their own processes (the device count is fixed when JAX starts):
four host devices in one subprocess for the plumbing (padding, static parts of the result), and
two processes of one device each for the distributed solve."""

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import geomjax as gj

ROOT = Path(__file__).resolve().parents[2]

PROBLEMS = r"""
import jax, numpy as np
import geomjax as gj
from geomjax.control import run_mpc
from geomjax.control.examples import attitude_problem
from geomjax.control.trajopt import ILQR, solve_ocp

ANGLES = np.linspace(0.3, 1.2, 4)


def problem(angle):
    # a batch of rest-to-rest manoeuvres: the target angle differs from problem to problem
    return attitude_problem(torque_max=None, exact_target=False, steps=3, duration=1.5,
                            method=gj.SemiImplicitEuler(), weight=10.0, angle=angle)


def solve(angle):
    return solve_ocp(problem(angle), ILQR(), max_iters=30, progress=False)


def mpc(angle):
    return run_mpc(problem(angle), steps=2)
"""

DISTRIBUTED = (
    r"""
import json, sys
import jax, numpy as np
jax.config.update("jax_enable_x64", True)
jax.config.update("jax_cpu_collectives_implementation", "gloo")
pid = int(sys.argv[1])
jax.distributed.initialize(sys.argv[2], num_processes=2, process_id=pid)
from jax.experimental import multihost_utils
"""
    + PROBLEMS
    + r"""
assert jax.device_count() == 2 and jax.local_device_count() == 1, jax.devices()
sol = jax.jit(gj.shard_vmap(solve))(ANGLES)
res = jax.jit(gj.shard_vmap(mpc))(ANGLES)
out = multihost_utils.process_allgather(
    (sol.controls, sol.cost, sol.iterations, sol.status, res.controls), tiled=True)
if pid == 0:
    with open(sys.argv[3], "w") as f:
        json.dump([np.asarray(x).tolist() for x in out], f)
jax.distributed.shutdown()
"""
)

FOUR_DEVICES = r"""
import json, sys
import jax, jax.numpy as jnp, numpy as np, equinox as eqx
jax.config.update("jax_enable_x64", True)
import geomjax as gj
assert jax.device_count() == 4
out = {}


class Result(eqx.Module):
    value: jax.Array
    name: str = eqx.field(static=True)  # a static field: shared by the batch


def f(w, scale):
    return Result(scale * gj.SO3.exp(w), "rotation")


w = jnp.asarray(np.random.default_rng(0).standard_normal((6, 3)))
ref = jax.vmap(f, in_axes=(0, None))(w, 2.0)
try:
    gj.shard_vmap(f, in_axes=(0, None))(w, 2.0)
except ValueError as e:
    out["unpadded"] = str(e)
sh = jax.jit(gj.shard_vmap(f, in_axes=(0, None), pad=True))(w, 2.0)
out["padded_gap"] = float(jnp.max(jnp.abs(sh.value - ref.value)))
out["name"] = sh.name
out["shape"] = list(sh.value.shape)
w8 = jnp.concatenate([w, w[:2]])
sh8 = jax.jit(gj.shard_vmap(f, in_axes=(0, None)))(w8, 2.0)
out["ndev"] = len(sh8.value.sharding.device_set)
out["spec"] = str(sh8.value.sharding.spec)
print(json.dumps(out))
"""


def _env(**extra):
    env = dict(os.environ)
    env.pop("XLA_FLAGS", None)  # the parent's settings do not leak into the child
    env.update(PYTHONPATH=str(ROOT), **extra)
    return env


def test_shard_vmap_over_four_devices_pads_and_keeps_static_parts():
    env = _env(XLA_FLAGS="--xla_force_host_platform_device_count=4", JAX_PLATFORMS="cpu")
    r = subprocess.run(
        [sys.executable, "-c", FOUR_DEVICES], env=env, capture_output=True, text=True, timeout=600
    )
    assert r.returncode == 0, r.stderr[-3000:]
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert "multiple of the number of devices" in out["unpadded"] and "pad=True" in out["unpadded"]
    assert out["padded_gap"] < 1e-15 and out["shape"] == [6, 3, 3] and out["name"] == "rotation"
    assert out["ndev"] == 4 and "batch" in out["spec"]


def test_shard_vmap_argument_errors():
    def f(x, y):
        return x + y

    with pytest.raises(ValueError, match="'in_axes'"):
        gj.shard_vmap(f, in_axes=(0,))(jnp.ones(2), jnp.ones(2))
    with pytest.raises(ValueError, match="must be 0 or None"):
        gj.shard_vmap(f, in_axes=(1, None))(jnp.ones((2, 2)), 1.0)
    with pytest.raises(ValueError, match="one leading batch size"):
        gj.shard_vmap(f)(jnp.ones(2), jnp.ones(3))
    with pytest.raises(ValueError, match="'mesh'"):
        gj.shard_vmap(f, mesh="devices")(jnp.ones(2), jnp.ones(2))


def _free_port():
    with socket.socket() as s:
        s.bind(("localhost", 0))
        return s.getsockname()[1]


@pytest.mark.long  # two processes compiling the solver (~40 s on a loaded 2-core machine)
def test_two_process_solves_equal_one_process(tmp_path):
    script = tmp_path / "worker.py"
    script.write_text(DISTRIBUTED)
    out = tmp_path / "out.json"
    addr = f"localhost:{_free_port()}"
    env = _env(JAX_PLATFORMS="cpu")
    procs = [
        subprocess.Popen(
            [sys.executable, str(script), str(i), addr, str(out)],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for i in range(2)
    ]
    logs = [p.communicate(timeout=900)[0] for p in procs]
    assert all(p.returncode == 0 for p in procs), "\n".join(log[-3000:] for log in logs)
    controls, cost, iterations, status, mpc_controls = (
        np.asarray(x) for x in json.loads(out.read_text())
    )

    ns = {}
    exec(PROBLEMS, ns)  # the same problems, solved here by jax.vmap on one device
    ref = jax.jit(jax.vmap(ns["solve"]))(ns["ANGLES"])
    ref_mpc = jax.jit(jax.vmap(ns["mpc"]))(ns["ANGLES"])
    assert (status == np.asarray(ref.status)).all() and (
        iterations == np.asarray(ref.iterations)
    ).all()
    np.testing.assert_allclose(controls, np.asarray(ref.controls), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(cost, np.asarray(ref.cost), rtol=1e-10)
    np.testing.assert_allclose(mpc_controls, np.asarray(ref_mpc.controls), rtol=1e-10, atol=1e-12)
    # each member solved its own problem (the batch is not one problem repeated)
    assert np.ptp(cost) > 1e-3 * np.abs(cost).max()
    assert bool(np.all(ref.succeeded))
