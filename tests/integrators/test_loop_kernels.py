"""Which of geomjax's time loops XLA:CPU compiles into one kernel with XLA's defaults, read from the
compiled program, and the warning where a loop cannot be.

XLA:CPU's ``SmallWhileLoopHoistingPass`` (the last pass before code generation, after fusion
and copy insertion) turns a ``while`` into a call marked ``xla_cpu_small_call`` (one kernel)
when XLA's cost estimate of *one iteration* (the bytes accessed by each instruction of the body
and the condition, summed) is under ``xla_cpu_small_while_loop_byte_threshold``: 1024 bytes by
default.  A stacked output (``lax.scan``'s ys, an in-place dynamic-update-slice) counts its
update only, not the buffer; a nested loop counts one iteration of its body
(:func:`geomjax._internal.xla_flags.compiled_loops` reads the compiled text).  Every program
here is compiled by plain ``jax.jit`` in a fresh process with ``GEOMJAX_XLA_FLAGS=0`` (the test
suite raises the threshold for its own process)."""

import json
import os
import subprocess
import sys

import pytest

_LOOPS = r"""
import json, sys
import jax
jax.config.update("jax_enable_x64", True)
import jax.numpy as jnp
import geomjax as gj
from geomjax._internal.xla_flags import compiled_loops

def loops(f, *args):
    return compiled_loops(jax.jit(f).lower(*args).compile().as_text())

x = jnp.ones(4)
step = lambda c: jnp.sin(c) * 1.01 + 0.1
out = {
    "scan, carry only": loops(lambda x: jax.lax.scan(lambda c, _: (step(c), None), x, None, length=100)[0], x),
    "scan, ys of 10000": loops(lambda x: jax.lax.scan(lambda c, _: (step(c), c), x, None, length=10000), x),
    "scan, carry of 128 doubles": loops(lambda x: jax.lax.scan(
        lambda c, _: ((step(c[0]), c[1] * 1.0001), None), (x, jnp.ones(128)), None, length=100)[0], x),
}
body = gj.RigidBody(jnp.array([1.0, 2.0, 3.0]))
R0 = gj.SO3.exp(jnp.array([0.3, -0.2, 0.5]))
pi0 = jnp.array([0.8, -0.3, 1.1])
for dtype in ("float64", "float32"):
    for every in (1, 20):
        def run(pi, every=every, dtype=dtype):
            s = gj.RigidBodyState(R0.astype(dtype), pi.astype(dtype))
            return gj.simulate(body, gj.LGVI(), s, 0.01, 200, save_every=every)
        out[f"{dtype}, save_every={every}"] = loops(run, pi0)

def loss(pi):
    s = gj.simulate(body, gj.LGVI(), gj.RigidBodyState(R0, pi), 0.01, 200, save_every=20).final_state
    return jnp.sum(s.R[0]) + jnp.sum(s.Pi * jnp.array([0.3, -0.2, 0.1]))
if "gradient" in sys.argv[1:]:
    out = {"gradient": loops(jax.grad(loss), pi0)}
print(json.dumps(out))
"""


def _run(script, *args, **env):
    full = {k: v for k, v in os.environ.items() if k not in ("XLA_FLAGS", "GEOMJAX_XLA_FLAGS")}
    full.update(env)
    out = subprocess.run(
        [sys.executable, "-c", script, *args], env=full, capture_output=True, text=True, check=True
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def loops():
    """``{case: [(op_name, one kernel?), ...]}``, one entry per ``while`` of the program."""
    return _run(_LOOPS, GEOMJAX_XLA_FLAGS="0")


def test_the_rule_on_bare_scans(loops):
    """The marker and the rule: a carry of four doubles is one kernel, and stays one with 10000
    stacked outputs (a stacked output counts its update, not its buffer); a carry of 128
    doubles (~2 kB per iteration) is not."""
    assert [k for _, k in loops["scan, carry only"]] == [True]
    assert [k for _, k in loops["scan, ys of 10000"]] == [True]
    assert [k for _, k in loops["scan, carry of 128 doubles"]] == [False]


def _steps_loop(case):
    """The loop over steps: the innermost time loop of ``simulate``'s program."""
    loops = [(name, k) for name, k in case if "_integrate_program" in name]
    assert loops, case
    return max(loops, key=lambda nk: nk[0].count("/while"))


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_the_loop_over_steps_is_one_kernel_when_it_saves_nothing(loops, dtype):
    """``save_every > 1``: the loop over the steps of a block carries the state alone (the
    saved state is written by the loop over blocks), and one step of the free body's LGVI
    touches less than 1 kB: one kernel with XLA's defaults (float64: ~980 bytes with the
    time and the residual carried)."""
    name, one_kernel = _steps_loop(loops[f"{dtype}, save_every=20"])
    assert name.endswith("/while/body/closed_call/while")
    assert one_kernel


@pytest.mark.xfail(
    strict=True,
    reason="XLA's rule: one float64 step (~850-980 bytes) plus writing its state, time and "
    "residual into the stacks (~290 bytes) exceed 1024; geomjax warns instead",
)
def test_a_float64_loop_that_saves_every_step_is_one_kernel(loops):
    assert _steps_loop(loops["float64, save_every=1"])[1]


def test_a_float32_loop_that_saves_every_step_is_one_kernel(loops):
    """Half the bytes: the float32 step and its saves fit (~910 bytes)."""
    assert _steps_loop(loops["float32, save_every=1"])[1]


@pytest.mark.long
@pytest.mark.xfail(
    strict=True,
    reason="XLA's rule: reverse mode's forward loop stacks each step's residuals (~3.5 kB per "
    "step) and the transposed step alone touches ~1.1-1.2 kB; geomjax warns instead",
)
def test_the_loops_of_a_gradient_are_one_kernel():
    loops = _run(_LOOPS, "gradient", GEOMJAX_XLA_FLAGS="0")["gradient"]
    assert len(loops) == 4  # forward and transposed, each a loop of blocks around one of steps
    assert all(k for _, k in loops)


_WARN = r"""
import json, sys, warnings
import jax
jax.config.update("jax_enable_x64", True)
import jax.numpy as jnp
import geomjax as gj

body = gj.RigidBody(jnp.array([1.0, 2.0, 3.0]))
R0 = gj.SO3.exp(jnp.array([0.3, -0.2, 0.5]))
pi0 = jnp.array([0.8, -0.3, 1.1])

def run(pi, every=1, **kw):
    return gj.simulate(body, gj.LGVI(), gj.RigidBodyState(R0, pi), 0.01, 60, save_every=every, **kw)

def loss(pi, **kw):
    s = run(pi, every=20, **kw).final_state
    return jnp.sum(s.R[0]) + jnp.sum(s.Pi * jnp.array([0.3, -0.2, 0.1]))

out = {}
def record(name, thunk):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        jax.block_until_ready(thunk())
    out[name] = [str(w.message) for w in caught if "geomjax.jit" in str(w.message)]

cases = {
    "eager simulate": lambda: run(pi0).final_state,
    "eager gradient": lambda: jax.grad(loss)(pi0),
    "eager adjoint gradient": lambda: jax.grad(lambda p: loss(p, adjoint=gj.ReversibleAdjoint()))(pi0),
    "geomjax.jit": lambda: gj.jit(run)(pi0).final_state,
    "geomjax.jit gradient": lambda: gj.jit(jax.grad(loss))(pi0),
    "geomjax.jit vmap": lambda: gj.jit(jax.vmap(run))(jnp.stack([pi0, 2 * pi0])).final_state,
    "jax.jit, save_every > 1": lambda: jax.jit(lambda p: run(p, every=20))(pi0).final_state,
    "jax.jit": lambda: jax.jit(run)(pi0).final_state,
    "jax.jit again": lambda: jax.jit(lambda p: run(2 * p))(pi0).final_state,
    "jax.jit gradient": lambda: jax.jit(jax.grad(loss))(pi0),
    "eager vmap": lambda: jax.vmap(run)(jnp.stack([pi0, 2 * pi0])).final_state,
    "jax.jit adjoint gradient": lambda: jax.jit(jax.grad(lambda p: loss(p, adjoint=gj.ReversibleAdjoint())))(pi0),
}
for name in sys.argv[1:]:
    record(name, cases[name])
print(json.dumps(out))
"""

_QUIET = ("eager simulate", "geomjax.jit", "jax.jit, save_every > 1")
_QUIET_AUTODIFF = (
    "eager gradient",
    "eager adjoint gradient",
    "geomjax.jit gradient",
    "geomjax.jit vmap",
)


def test_warns_once_where_a_time_loop_cannot_be_one_kernel():
    """Defaults (nothing opted in): no warning from geomjax's own entry points (an eager call,
    ``geomjax.jit``), nor for a loop that is one kernel with XLA's defaults (``save_every >
    1``, unbatched, not differentiated); a loop saving every step compiled by ``jax.jit``
    warns, naming ``geomjax.jit``, once per process (a second such program: no warning)."""
    out = _run(_WARN, *_QUIET, "jax.jit", "jax.jit again")
    for name in _QUIET:
        assert out[name] == [], name
    (message,) = out["jax.jit"]
    assert "geomjax.jit" in message and "xla_small_loops" in message
    assert out["jax.jit again"] == []


@pytest.mark.long
def test_no_warning_from_geomjax_gradients_and_batches():
    """Eager gradients (plain reverse mode and the reversible adjoint: geomjax compiles their
    forward and backward programs itself), and a gradient or a ``vmap`` under ``geomjax.jit``:
    no warning; a ``jax.jit`` program after them still warns (none was spent)."""
    out = _run(_WARN, *_QUIET_AUTODIFF, "jax.jit")
    for name in _QUIET_AUTODIFF:
        assert out[name] == [], name
    assert len(out["jax.jit"]) == 1


@pytest.mark.long
@pytest.mark.parametrize("case", ["jax.jit gradient", "eager vmap", "jax.jit adjoint gradient"])
def test_warns_for_a_gradient_or_a_batch_outside_geomjax_jit(case):
    """A gradient through ``simulate(..., save_every > 1)`` under ``jax.jit`` (reverse mode's
    loops), the reversible adjoint's backward pass under ``jax.jit``, and an eager ``jax.vmap``
    of ``simulate`` (its program is compiled by JAX with XLA's defaults): each warns."""
    (message,) = _run(_WARN, case)[case]
    assert "geomjax.jit" in message


@pytest.mark.parametrize("setting", ["0", "1"])
def test_no_warning_when_the_setting_is_switched_off_or_process_wide(setting):
    """``GEOMJAX_XLA_FLAGS=0`` (XLA's defaults chosen for every program: ``geomjax.jit`` would
    not change them) and ``GEOMJAX_XLA_FLAGS=1`` (every program gets the setting): no warning."""
    out = _run(_WARN, "jax.jit", "eager vmap", GEOMJAX_XLA_FLAGS=setting)
    assert all(v == [] for v in out.values()), out
