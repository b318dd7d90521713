"""``geomjax.configure(compilation_cache=DIR)``: JAX's persistent compilation cache, filled by one
process and read by the next (fresh interpreters: JAX opens its cache once per process)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

_CHILD = r"""
import json, sys
import jax
jax.config.update("jax_enable_x64", True)
import jax.numpy as jnp
import geomjax as gj
events = {"hits": 0, "misses": 0}
def _event(name, **kw):
    if name.endswith("/cache_hits"):
        events["hits"] += 1
    elif name.endswith("/cache_misses"):
        events["misses"] += 1
jax.monitoring.register_event_listener(_event)
settings = gj.configure(compilation_cache=sys.argv[1])
out = {"settings": settings}
if sys.argv[2] == "simulate":  # a jitted simulation of the free body
    body = gj.RigidBody(jnp.array([1.0, 2.0, 3.0]))
    s0 = gj.RigidBodyState(jnp.eye(3), jnp.array([0.8, -0.3, 1.1]))
    sim = jax.jit(lambda s: gj.simulate(body, gj.LGVI(), s, 0.01, 20).states.Pi)(s0)
    out["result"] = sim.ravel().tolist()
else:  # an eager solve of a small attitude problem
    from geomjax.control.examples import attitude_problem
    from geomjax.control.trajopt import ILQR, solve_ocp
    prob = attitude_problem(torque_max=0.5, exact_target=False, steps=4, method=gj.RKMK4())
    sol = solve_ocp(prob, ILQR(), max_iters=3)
    out["result"] = sol.controls.ravel().tolist()
    out["time"] = [float(t) for t in sol.history["time"]]
    out["cost"] = [float(c) for c in sol.history["cost"]]
print(json.dumps({**out, **events}))
"""


def _run(tmp_path, cache, what):
    script = tmp_path / "child.py"
    script.write_text(_CHILD)
    env = {k: v for k, v in os.environ.items() if k != "GEOMJAX_COMPILATION_CACHE"}
    root = str(Path(__file__).resolve().parents[1])  # this checkout's geomjax
    env["PYTHONPATH"] = root + os.pathsep + env.get("PYTHONPATH", "")
    out = subprocess.run(
        [sys.executable, str(script), str(cache), what],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def _two_processes(tmp_path, what):
    """The first process compiles and writes its programs; a second one finds every program it
    compiles in the cache, writes nothing new and computes the same results."""
    cache = tmp_path / "cache"
    first = _run(tmp_path, cache, what)
    assert first["settings"]["compilation_cache"] == str(cache)
    written = sorted(p.name for p in cache.iterdir())
    assert first["misses"] > 0 and written
    second = _run(tmp_path, cache, what)
    assert second["hits"] >= 1 and second["misses"] == 0
    assert sorted(p.name for p in cache.iterdir()) == written
    assert second["result"] == first["result"]
    return first, second, written


def test_second_process_loads_a_simulation(tmp_path):
    _two_processes(tmp_path, "simulate")


@pytest.mark.long  # two fresh processes that each trace a solve (~10-30 s on a 2-core CPU)
def test_second_process_loads_an_eager_solve(tmp_path):
    """The eager solve is cached: compiled without its per-iteration host callback (JAX writes
    no program that calls back to Python)."""
    first, second, written = _two_processes(tmp_path, "solve")
    assert any(name.startswith("jit__solve_traced-") for name in written)
    # without the host report, the wall time of the whole call stands at the last iteration
    for run in (first, second):
        done = [i for i, c in enumerate(run["cost"]) if c == c]
        t = run["time"]
        assert t[done[-1]] > 0 and all(v != v for i, v in enumerate(t) if i != done[-1])


def test_configure_compilation_cache_rejects_bad_arguments(tmp_path):
    import geomjax as gj

    with pytest.raises(ValueError, match="'compilation_cache'.*directory"):
        gj.configure(compilation_cache=3)
    path = tmp_path / "a_file"
    path.write_text("")
    with pytest.raises(ValueError, match="'compilation_cache'.*is a file"):
        gj.configure(compilation_cache=path)
    with pytest.raises(ValueError, match="'compilation_cache'.*non-empty"):
        gj.configure(compilation_cache="")
