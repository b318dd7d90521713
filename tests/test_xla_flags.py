"""geomjax's process settings (geomjax._internal.xla_flags, gc_freeze, ``geomjax.configure``):
``import geomjax`` changes no global state; the XLA:CPU small-loop threshold (XLA_FLAGS) and
``gc.freeze`` apply only when opted in, the former takes effect (loops compiled as single
kernels) with results equal to round-off, and ``simulate`` gives bitwise the same results
whatever the import order."""

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
    """In a fresh process opted in (``GEOMJAX_XLA_FLAGS=1``, read at ``import geomjax`` before
    any computation) a loop of ~16 kB compiles into one kernel (XLA marks it
    ``xla_cpu_small_call``); by default it stays a loop of separately dispatched kernels.  100
    steps of NonholonomicVI on the ball on a turntable agree to round-off between the two
    (observed 1.6e-15, asserted 1e-12)."""
    on = _probe(GEOMJAX_XLA_FLAGS="1")
    off = _probe()
    assert on["small"] and not off["small"]
    diff = max(abs(a - b) for a, b in zip(on["state"], off["state"]))
    assert diff <= 1e-12, diff


_LATE = r"""
import gc, json, os, sys, warnings
import jax
jax.config.update("jax_enable_x64", True)
import jax.numpy as jnp
order, how = sys.argv[1], sys.argv[2]
flags = os.environ.get("XLA_FLAGS")
if order == "late":
    jnp.ones(3).sum().block_until_ready()  # JAX's backend starts before import geomjax
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    import geomjax as gj
    if how == "configure":
        gj.configure(xla_small_loops=True, gc_freeze=True)
from geomjax._internal.xla_flags import small_loops_in_effect
x = jnp.linspace(0.0, 1.0, 2000)
loop = jax.jit(lambda x: jax.lax.fori_loop(0, 10, lambda i, y: jnp.sin(y) * 1.01 + x, x))
out = {
    "small": "xla_cpu_small_call" in loop.lower(x).compile().as_text(),
    "in_effect": small_loops_in_effect(),
    "flags_unchanged": os.environ.get("XLA_FLAGS") == flags,
    "frozen": gc.get_freeze_count(),
    "warnings": [[str(w.message), w.filename, w.category.__name__] for w in caught],
}
if "--simulate" in sys.argv:  # the free body, saved every step and every 100th
    body = gj.RigidBody(jnp.array([1.0, 2.0, 3.0]))
    s0 = gj.RigidBodyState(gj.SO3.exp(jnp.array([0.3, -0.2, 0.5])), jnp.array([0.8, -0.3, 1.1]))
    for every in (1, 100):
        sol = gj.simulate(body, gj.LGVI(), s0, 0.01, 400, save_every=every)
        out[f"every{every}"] = {
            "R": sol.states.R.ravel().tolist(), "Pi": sol.states.Pi.ravel().tolist(),
            "ts": sol.times.tolist(), "residual": sol.stats["residual"].tolist(),
        }
print(json.dumps(out))
"""


def _start_late(tmp_path, order, how, *args, **env_extra):
    """Start ``_LATE`` in a fresh interpreter (this checkout's geomjax, no setting inherited)."""
    script = tmp_path / "user_script.py"
    script.write_text(_LATE)
    drop = (
        "XLA_FLAGS",
        "GEOMJAX_XLA_FLAGS",
        "GEOMJAX_GC_FREEZE",
        "GEOMJAX_NEWTON_UNROLL",
        "GEOMJAX_COMPILATION_CACHE",
    )
    env = {k: v for k, v in os.environ.items() if k not in drop}
    env.update(env_extra)
    root = str(Path(__file__).resolve().parents[1])  # this checkout's geomjax
    env["PYTHONPATH"] = os.pathsep.join([root, *filter(None, [env.get("PYTHONPATH")])])
    proc = subprocess.Popen(
        [sys.executable, str(script), order, how, *args],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    return script, proc


def _finish(started):
    script, proc = started
    out, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, err
    return script, json.loads(out.strip().splitlines()[-1])


def _run_late(tmp_path, order, how, *args, **env_extra):
    return _finish(_start_late(tmp_path, order, how, *args, **env_extra))


def test_import_changes_no_global_state_and_simulate_is_bitwise_whatever_the_order(tmp_path):
    """By default ``import geomjax`` leaves ``XLA_FLAGS`` and the garbage collector alone and
    says nothing, whether JAX computed before or not: the ~16 kB loop stays a loop of separately
    dispatched kernels (XLA's default threshold) either way.  So ``simulate`` compiles the same
    program in both processes: the free body's 400 LGVI steps, saved every step and every
    100th, are bitwise equal (states, times, residuals), and converged."""
    # the two processes side by side (each is mostly import and compilation)
    started = {o: _start_late(tmp_path, o, "import", "--simulate") for o in ("first", "late")}
    res = {order: _finish(p)[1] for order, p in started.items()}
    for r in res.values():
        assert r["flags_unchanged"] and r["frozen"] == 0
        assert not r["small"] and not r["in_effect"]
        assert not [w for w in r["warnings"] if "XLA_FLAGS" in w[0]], r["warnings"]
    for every in ("every1", "every100"):
        first, late = res["first"][every], res["late"][every]
        assert len(first["ts"]) == 400 // int(every[5:]) + 1
        for key in ("R", "Pi", "ts", "residual"):
            assert first[key] == late[key], (every, key)  # bitwise (floats round-trip in JSON)
        assert max(first["residual"]) < 1e-12


@pytest.mark.parametrize(
    "order, how",
    [
        ("first", "env"),
        pytest.param("first", "configure", marks=pytest.mark.long),
        pytest.param("late", "env", marks=pytest.mark.long),
        ("late", "configure"),
    ],
)
def test_opt_in_applies_before_jax_computes_and_warns_after(tmp_path, order, how):
    """The opt-in (``GEOMJAX_XLA_FLAGS=1`` and ``GEOMJAX_GC_FREEZE=1`` read at import, or
    ``geomjax.configure(xla_small_loops=True, gc_freeze=True)``): before JAX's first computation
    the loop setting applies (the ~16 kB loop is one kernel) and nothing is said; after it, XLA
    (which reads XLA_FLAGS once, when its backend starts) cannot apply it, and the user's line
    gets a warning with the cause and the fix.  The freeze applies either way."""
    extra = {"GEOMJAX_XLA_FLAGS": "1", "GEOMJAX_GC_FREEZE": "1"} if how == "env" else {}
    script, res = _run_late(
        tmp_path, order, "configure" if how == "configure" else "import", **extra
    )
    ours = [w for w in res["warnings"] if "XLA_FLAGS" in w[0]]
    assert res["frozen"] > 10_000  # jax, numpy, equinox and geomjax: far more than 10^4 objects
    if order == "first":
        assert res["small"] and res["in_effect"] and not ours
        return
    assert not res["small"] and not res["in_effect"]  # the cause: the flag could not apply
    assert len(ours) == 1, res["warnings"]
    message, filename, category = ours[0]
    assert filename == str(script) and category == "RuntimeWarning"
    assert "before computing anything with JAX" in message and XLA_FLAG in message


def test_configure_rejects_bad_arguments(monkeypatch):
    """Bad values name the argument; the loop setting, once in effect, cannot be switched off
    (XLA read it when its backend started); ``None`` changes nothing."""
    import gc

    import geomjax as gj
    from geomjax._internal import xla_flags as _xla

    with pytest.raises(ValueError, match="'xla_small_loops'"):
        gj.configure(xla_small_loops="yes")
    with pytest.raises(ValueError, match="'gc_freeze'"):
        gj.configure(gc_freeze="on")
    monkeypatch.setattr(_xla, "_IN_EFFECT", True)
    with pytest.raises(ValueError, match="'xla_small_loops=False'.*cannot be undone"):
        gj.configure(xla_small_loops=False)
    frozen = gc.get_freeze_count() > 0
    from geomjax._internal import compile_cache

    assert gj.configure() == {
        "xla_small_loops": True,
        "gc_freeze": frozen,
        "compilation_cache": compile_cache.directory(),
    }


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
def test_simulate_opted_in_early_and_late_agree(tmp_path):
    """The free body's ``simulate`` (LGVI, 2000 steps) in processes opted in to the small-loop
    setting (``GEOMJAX_XLA_FLAGS=1``): where geomjax is imported first the setting applies (the
    rolled Newton loop, loops compiled as single kernels); where JAX computed first it cannot
    (XLA's defaults: the unrolled iterations).  Different programs, so equal to round-off, not
    bitwise (observed ~1e-15; asserted 1e-12), both converged; each process reports whether the
    setting is in effect."""
    script = tmp_path / "order.py"
    script.write_text(_ORDER)
    env = {k: v for k, v in os.environ.items() if k not in ("XLA_FLAGS", "GEOMJAX_XLA_FLAGS")}
    env.pop("GEOMJAX_NEWTON_UNROLL", None)
    env["GEOMJAX_XLA_FLAGS"] = "1"
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


_PER_PROGRAM = r"""
import glob, json, os, sys
import jax
jax.config.update("jax_enable_x64", True)
import jax.numpy as jnp
if sys.argv[1] == "late":
    jnp.ones(3).sum().block_until_ready()  # JAX's backend starts before import geomjax
import geomjax as gj

def text(compiled):
    return getattr(compiled, "compiled", compiled).as_text()  # equinox wraps jax's Compiled

body = gj.RigidBody(jnp.array([1.0, 2.0, 3.0]))
R0 = gj.SO3.exp(jnp.array([0.3, -0.2, 0.5]))
pi0 = jnp.array([0.8, -0.3, 1.1])

def final(pi):  # 300 steps, every one saved: a loop over XLA's default threshold (1 kB)
    s = gj.simulate(body, gj.LGVI(), gj.RigidBodyState(R0, pi), 0.01, 300).states
    return jnp.concatenate([s.R.reshape(-1, 9), s.Pi], axis=1)[::30].ravel()

def loss(pi):
    return jnp.sum(final(pi) ** 2)

out = {"configure": gj.configure()["xla_small_loops"]}
ours, plain = gj.jit(final), jax.jit(final)
out["ours_small"] = "xla_cpu_small_call" in text(ours.lower(pi0).compile())
out["plain_small"] = "xla_cpu_small_call" in text(plain.lower(pi0).compile())
out["ours"], out["plain"] = ours(pi0).tolist(), plain(pi0).tolist()
# inside other transformations geomjax.jit is inlined (JAX takes compiler options only on a
# top-level program): an eager grad, a vmap and an outer jit run, and agree
out["grad"] = jax.grad(lambda p: jnp.sum(gj.jit(final)(p) ** 2))(pi0).tolist()
out["grad_ours"] = gj.jit(jax.grad(loss))(pi0).tolist()
out["grad_plain"] = jax.jit(jax.grad(loss))(pi0).tolist()
out["vmap"] = jax.vmap(gj.jit(final))(jnp.stack([pi0, 2 * pi0])).tolist()
# an eager grad through simulate: its forward and backward passes as two top-level programs
out["eager_grad"] = jax.grad(loss)(pi0).tolist()
out["nested"] = jax.jit(gj.jit(final))(pi0).tolist()
# an eager simulate: its program in XLA's dump (XLA_FLAGS=--xla_dump_to, no threshold there)
sol = gj.simulate(body, gj.LGVI(), gj.RigidBodyState(R0, pi0), 0.01, 300)
out["eager"] = jnp.concatenate([sol.states.R.reshape(-1, 9), sol.states.Pi], 1)[::30].ravel().tolist()
dumped = glob.glob(os.path.join(sys.argv[2], "*integrate_program*after_optimizations.txt"))
out["eager_dumped"] = len(dumped)
out["eager_small"] = any("xla_cpu_small_call" in open(f).read() for f in dumped)
passes = glob.glob(os.path.join(sys.argv[2], "*_forward*after_optimizations.txt"))
out["grad_passes_small"] = bool(passes) and all(
    "xla_cpu_small_call" in open(f).read() for f in passes)
print(json.dumps(out))
"""


def _per_program(tmp_path, order, **env_extra):
    script = tmp_path / "per_program.py"
    script.write_text(_PER_PROGRAM)
    dump = tmp_path / f"dump-{order}-{len(env_extra)}"
    drop = ("XLA_FLAGS", "GEOMJAX_XLA_FLAGS", "GEOMJAX_NEWTON_UNROLL", "GEOMJAX_COMPILATION_CACHE")
    env = {k: v for k, v in os.environ.items() if k not in drop}
    env.update(env_extra)
    env["XLA_FLAGS"] = f"--xla_dump_to={dump} --xla_dump_hlo_as_text"
    root = str(Path(__file__).resolve().parents[1])
    env["PYTHONPATH"] = os.pathsep.join([root, *filter(None, [env.get("PYTHONPATH")])])
    return subprocess.Popen(
        [sys.executable, str(script), order, str(dump)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _close(a, b, tol=1e-12):
    import numpy as np

    a, b = np.asarray(a), np.asarray(b)
    return a.shape == b.shape and float(np.max(np.abs(a - b))) <= tol


def test_geomjax_programs_compile_small_loops_whatever_the_import_order(tmp_path):
    """With nothing opted in, geomjax's own top-level programs (an eager ``simulate``) and
    those of ``geomjax.jit`` are compiled with XLA:CPU's small-loop threshold raised for them
    alone: XLA marks their loop ``xla_cpu_small_call`` (one kernel), whether JAX computed before
    ``import geomjax`` or not (an eager ``grad`` through ``simulate`` too: its forward pass is
    such a program), while the same function under ``jax.jit`` keeps XLA's defaults
    (the process's ``XLA_FLAGS`` are untouched).  The two programs agree to round-off (observed
    ~1e-15, asserted 1e-12), and so do the gradients through ``geomjax.jit`` inside an eager
    ``grad``, a ``vmap`` and an outer ``jit``, where it is inlined.  The eager ``simulate``
    gives bitwise the same numbers in both processes."""
    started = {o: _per_program(tmp_path, o) for o in ("first", "late")}
    res = {}
    for order, proc in started.items():
        out, err = proc.communicate(timeout=600)
        assert proc.returncode == 0, err
        res[order] = json.loads(out.strip().splitlines()[-1])
    for r in res.values():
        assert r["configure"] == "per program"
        assert r["ours_small"] and not r["plain_small"]
        assert r["eager_dumped"] >= 1 and r["eager_small"]
        assert _close(r["ours"], r["plain"]) and _close(r["eager"], r["plain"])
        assert _close(r["grad_ours"], r["grad_plain"], 1e-10)
        assert _close(r["grad"], r["grad_plain"], 1e-10)
        assert _close(r["eager_grad"], r["grad_plain"], 1e-10) and r["grad_passes_small"]
        assert _close(r["vmap"][0], r["plain"]) and _close(r["nested"], r["plain"])
    assert res["first"]["eager"] == res["late"]["eager"]  # bitwise


@pytest.mark.long
def test_per_program_setting_switched_off(tmp_path):
    """``GEOMJAX_XLA_FLAGS=0``: XLA's defaults everywhere, geomjax's programs included (no loop
    compiled as one kernel); ``configure`` reports ``False``."""
    proc = _per_program(tmp_path, "first", GEOMJAX_XLA_FLAGS="0")
    out, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, err
    r = json.loads(out.strip().splitlines()[-1])
    assert r["configure"] is False
    assert not r["ours_small"] and not r["eager_small"] and r["eager_dumped"] >= 1
    assert _close(r["ours"], r["plain"])


def test_geomjax_jit_rejects_a_non_callable():
    import geomjax as gj

    with pytest.raises(TypeError, match="'fun' must be callable"):
        gj.jit(3)


def test_geomjax_jit_without_library_fusions():
    """``geomjax.jit(f, library_fusions=False)``: the same results as ``geomjax.jit(f)`` (to
    round-off) from a program that calls no library fusion, where this XLA has the option (the
    default program of the same batched small products calls some); its argument is checked."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    import geomjax as gj
    from geomjax._internal.xla_flags import no_library_fusion_options

    def batched(A, x):
        def body(_, y):  # small products repeated in a loop, as in a solver's iteration
            return jnp.tanh(A @ y) + x

        return jax.lax.fori_loop(0, 20, body, x)

    A = jnp.asarray(np.random.default_rng(0).normal(size=(64, 6, 6)) / 3)
    x = jnp.asarray(np.random.default_rng(1).normal(size=(64, 6, 9)))
    plain, fast = gj.jit(batched), gj.jit(library_fusions=False)(batched)
    np.testing.assert_allclose(fast(A, x), plain(A, x), rtol=1e-12, atol=1e-13)
    np.testing.assert_allclose(fast(A, x), jax.jit(batched)(A, x), rtol=1e-12, atol=1e-13)
    if no_library_fusion_options():

        def text(f):
            c = f.lower(A, x).compile()
            return getattr(c, "compiled", c).as_text()

        assert "ynn_fusion" in text(plain)  # (so that the next line can fail)
        assert "ynn_fusion" not in text(fast)
    with pytest.raises(TypeError, match="'library_fusions' must be True or False"):
        gj.jit(batched, library_fusions="no")
