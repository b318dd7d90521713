"""geomjax._internal.xla_flags: the XLA:CPU small-loop threshold set at import (XLA_FLAGS), its opt-outs, and
that it takes effect (loops compiled as single kernels) with results equal to round-off."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from geomjax._internal.xla_flags import SMALL_LOOP_BYTES, XLA_FLAG, configure_xla_flags


def test_configure_adds_the_flag_once_and_keeps_other_flags():
    env = {"XLA_FLAGS": "--xla_cpu_enable_fast_math=false"}
    assert configure_xla_flags(env)
    assert env["XLA_FLAGS"] == f"--xla_cpu_enable_fast_math=false {XLA_FLAG}"
    assert f"threshold={SMALL_LOOP_BYTES}" in XLA_FLAG
    assert not configure_xla_flags(env)  # already there: nothing added twice
    assert env["XLA_FLAGS"].count("xla_backend_extra_options") == 1
    empty = {}
    assert configure_xla_flags(empty) and empty["XLA_FLAGS"] == XLA_FLAG


@pytest.mark.parametrize(
    "env",
    [
        {"GEOMJAX_XLA_FLAGS": "0"},
        {"GEOMJAX_XLA_FLAGS": "off", "XLA_FLAGS": "--xla_cpu_enable_fast_math=false"},
        {"XLA_FLAGS": "--xla_backend_extra_options=xla_cpu_small_while_loop_byte_threshold=0"},
    ],
)
def test_opt_outs_leave_xla_flags_alone(env):
    before = dict(env)
    assert not configure_xla_flags(env)
    assert env == before


_PROBE = r"""
import json, sys
import jax
jax.config.update("jax_enable_x64", True)
import jax.numpy as jnp
import geomjax as gj

# a loop whose body touches ~16 kB: over XLA's default threshold (1 kB), under geomjax's
x = jnp.linspace(0.0, 1.0, 2000)
loop = jax.jit(lambda x: jax.lax.fori_loop(0, 10, lambda i, y: jnp.sin(y) * 1.01 + x, x))
small = "xla_cpu_small_call" in loop.lower(x).compile().as_text()
ball = gj.BallOnTurntable(mass=1.0, radius=0.5, table_rate=0.8)
s = gj.simulate(
    ball, gj.NonholonomicVI(), ball.state(x=(1.0, 0.3), omega=(0.4, -0.2, 0.7)), 1e-2, 100
).final_state
print(json.dumps({"small": small, "state": [float(v) for v in jnp.concatenate(
    [jnp.ravel(a) for a in jax.tree_util.tree_leaves(s)])]}))
"""


def _probe(**env):
    full = {k: v for k, v in os.environ.items() if k not in ("XLA_FLAGS", "GEOMJAX_XLA_FLAGS")}
    full.update(env)
    out = subprocess.run(
        [sys.executable, "-c", _PROBE], env=full, capture_output=True, text=True, check=True
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.long
def test_the_flag_takes_effect_and_leaves_results_to_round_off():
    """In a fresh process, ``import geomjax`` before any computation compiles a loop of ~16 kB
    into one kernel (XLA marks it ``xla_cpu_small_call``); with ``GEOMJAX_XLA_FLAGS=0`` it stays
    a loop of separately dispatched kernels.  100 steps of NonholonomicVI on the ball on a
    turntable agree to round-off between the two (observed 1.6e-15, asserted 1e-12)."""
    on = _probe()
    off = _probe(GEOMJAX_XLA_FLAGS="0")
    assert on["small"] and not off["small"]
    diff = max(abs(a - b) for a, b in zip(on["state"], off["state"]))
    assert diff <= 1e-12, diff


_GC_PROBE = "import gc, geomjax; print(gc.get_freeze_count())"


@pytest.mark.parametrize("setting, frozen", [(None, True), ("0", False), ("off", False)])
def test_import_freezes_the_objects_it_leaves_unless_opted_out(setting, frozen):
    """geomjax._internal.gc_freeze: ``import geomjax`` ends with ``gc.freeze()`` (the import-time objects leave
    the cyclic collector's scans); ``GEOMJAX_GC_FREEZE=0`` turns it off."""
    env = {k: v for k, v in os.environ.items() if k != "GEOMJAX_GC_FREEZE"}
    if setting is not None:
        env["GEOMJAX_GC_FREEZE"] = setting
    out = subprocess.run(
        [sys.executable, "-c", _GC_PROBE], env=env, capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, out.stderr
    count = int(out.stdout.split()[-1])
    # jax, numpy, equinox and geomjax leave far more than 10^4 objects
    assert (count > 10_000) if frozen else (count == 0)


_LATE = r"""
import json, sys, warnings
import jax
import jax.numpy as jnp
if sys.argv[1] == "late":
    jnp.ones(3).sum().block_until_ready()  # JAX's backend starts before import geomjax
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    import geomjax
x = jnp.linspace(0.0, 1.0, 2000)
loop = jax.jit(lambda x: jax.lax.fori_loop(0, 10, lambda i, y: jnp.sin(y) * 1.01 + x, x))
print(json.dumps({
    "small": "xla_cpu_small_call" in loop.lower(x).compile().as_text(),
    "warnings": [[str(w.message), w.filename, w.category.__name__] for w in caught],
}))
"""


@pytest.mark.parametrize("order", ["late", "first"])
def test_import_after_jax_computation_warns_with_cause_and_fix(tmp_path, order):
    """XLA reads XLA_FLAGS once, when its backend starts: imported after JAX's first computation,
    geomjax cannot apply the setting (the ~16 kB loop stays a loop), and says so at the user's
    import line, with the fix.  Imported first: the setting applies and nothing is said."""
    script = tmp_path / "user_script.py"
    script.write_text(_LATE)
    env = {k: v for k, v in os.environ.items() if k not in ("XLA_FLAGS", "GEOMJAX_XLA_FLAGS")}
    root = str(Path(__file__).resolve().parents[1])  # this checkout's geomjax
    env["PYTHONPATH"] = os.pathsep.join([root, *filter(None, [env.get("PYTHONPATH")])])
    out = subprocess.run(
        [sys.executable, str(script), order], env=env, capture_output=True, text=True, check=True
    )
    res = json.loads(out.stdout.strip().splitlines()[-1])
    ours = [w for w in res["warnings"] if "XLA_FLAGS" in w[0]]
    if order == "first":
        assert res["small"] and not ours
        return
    assert not res["small"]  # the cause: the flag could not apply
    assert len(ours) == 1, res["warnings"]
    message, filename, category = ours[0]
    assert filename == str(script) and category == "RuntimeWarning"
    assert "import geomjax before" in message and XLA_FLAG in message


def test_threshold_detection():
    """``_threshold_in`` recognizes the raised small-loop threshold in an ``XLA_FLAGS`` string
    (geomjax's own entry or a user's), and not XLA's default or an unrelated option."""
    from geomjax._internal.xla_flags import _threshold_in

    assert _threshold_in(XLA_FLAG)
    assert _threshold_in(f"--xla_cpu_enable_fast_math=false {XLA_FLAG}")
    assert not _threshold_in("")
    assert not _threshold_in(
        "--xla_backend_extra_options=xla_cpu_small_while_loop_byte_threshold=0"
    )
    assert not _threshold_in("--xla_cpu_enable_fast_math=false")


def _has_while(jaxpr) -> bool:
    return "while" in str(jaxpr)


@pytest.mark.parametrize("in_effect", [True, False])
def test_so3_newton_unrolled_exactly_when_the_setting_is_missing(monkeypatch, in_effect):
    """The SO(3) kernel's Newton solve (LGVI's step on the free body): a rolled ``while`` loop
    where the small-loop setting is in effect, unrolled (no loop inside the step) where it is
    not and the step is unbatched; batched (``vmap``) it stays rolled either way.  Read when a
    program is traced, so the jaxprs show it."""
    import jax
    import jax.numpy as jnp

    import geomjax as gj
    from geomjax._internal import xla_flags as _xla

    monkeypatch.setattr(_xla, "_IN_EFFECT", in_effect)
    monkeypatch.delenv("GEOMJAX_NEWTON_UNROLL", raising=False)
    body = gj.RigidBody(jnp.array([1.0, 2.0, 3.0]))
    s = gj.RigidBodyState(jnp.eye(3), jnp.array([0.8, -0.3, 1.1]))
    lgvi = gj.LGVI()
    one = jax.make_jaxpr(lambda s: lgvi.step(body, s, 0.01)[0])(s)
    batch = jax.tree_util.tree_map(lambda a: jnp.stack([a, a]), s)
    many = jax.make_jaxpr(jax.vmap(lambda s: lgvi.step(body, s, 0.01)[0]))(batch)
    assert _has_while(one) == in_effect
    assert _has_while(many)
    monkeypatch.setenv("GEOMJAX_NEWTON_UNROLL", "0")  # forced rolled: the loop whatever the setting
    assert _has_while(jax.make_jaxpr(lambda s: lgvi.step(body, s, 0.01)[0])(s))


_ORDER = r"""
import json, sys, warnings
import jax
jax.config.update("jax_enable_x64", True)
import jax.numpy as jnp
if sys.argv[1] == "late":
    jnp.ones(3).sum().block_until_ready()  # JAX's backend starts before import geomjax
with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    import geomjax as gj
from geomjax._internal.xla_flags import small_loops_in_effect
body = gj.RigidBody(jnp.array([1.0, 2.0, 3.0]))
s0 = gj.RigidBodyState(gj.SO3.exp(jnp.array([0.3, -0.2, 0.5])), jnp.array([0.8, -0.3, 1.1]))
sol = gj.simulate(body, gj.LGVI(), s0, 0.01, 2000, save_every=100)
print(json.dumps({"in_effect": small_loops_in_effect(),
                  "R": sol.states.R.ravel().tolist(), "Pi": sol.states.Pi.ravel().tolist(),
                  "max_residual": float(sol.max_residual)}))
"""


@pytest.mark.long
def test_simulate_late_and_early_import_agree(tmp_path):
    """The free body's ``simulate`` (LGVI, 2000 steps) in a process where geomjax is imported
    first (the small-loop setting applies: the rolled Newton loop) and in one where JAX computed
    first (it cannot: the unrolled iterations).  Different programs, so equal to round-off, not
    bitwise (observed ~1e-15; asserted 1e-12), both converged; each process reports whether the
    setting is in effect."""
    script = tmp_path / "order.py"
    script.write_text(_ORDER)
    env = {k: v for k, v in os.environ.items() if k not in ("XLA_FLAGS", "GEOMJAX_XLA_FLAGS")}
    env.pop("GEOMJAX_NEWTON_UNROLL", None)
    root = str(Path(__file__).resolve().parents[1])
    env["PYTHONPATH"] = os.pathsep.join([root, *filter(None, [env.get("PYTHONPATH")])])
    res = {}
    for order in ("first", "late"):
        out = subprocess.run(
            [sys.executable, str(script), order], env=env, capture_output=True, text=True
        )
        assert out.returncode == 0, out.stderr
        res[order] = json.loads(out.stdout.strip().splitlines()[-1])
    assert res["first"]["in_effect"] and not res["late"]["in_effect"]
    for key in ("R", "Pi"):
        diff = max(abs(a - b) for a, b in zip(res["first"][key], res["late"][key]))
        assert diff <= 1e-12, (key, diff)
    assert max(res[o]["max_residual"] for o in res) < 1e-12
