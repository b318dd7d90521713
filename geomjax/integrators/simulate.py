"""One driver for every system and method: :func:`simulate`, :func:`step` and :class:`Solution`."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from .._internal.eager import LEGACY_EMITTERS, quick_compiled, top_level_options
from .._internal.tracing import any_traced, is_traced, jvp_traced, vmap_batched
from .._internal.warn import renamed, renamed_attribute
from .._internal.xla_flags import warn_loop_without_setting
from ..results import ConvergenceError, Status, worst
from ._so3_soa import batch_last_carry, hand_written_derivatives
from .base import AbstractAdjoint, AbstractMethod, gradient_hooks

__all__ = ["ConvergenceError", "Solution", "load_solution", "simulate", "step"]


class Solution(eqx.Module):
    """Result of :func:`simulate` (a pytree of arrays: it can be returned from ``jit``/``vmap``).

    Attributes:
        times: ``(n_save + 1,)`` times of the saved states (the initial state included); the
            same name as :attr:`OCPSolution.times <geomjax.control.trajopt.OCPSolution>` and
            ``MPCResult.times``.  (``ts`` is a deprecated alias.)
        states: the state pytree with a leading time axis of length ``n_save + 1``.
        stats: dict of diagnostics: ``"residual"`` ``(n_save,)``, the largest relative residual of
            the implicit solves in each block (0 for explicit methods; NaN propagates), and
            ``"max_residual"``, its maximum over the run.
        method_state: what the method carries beyond the final state (a dict of arrays, e.g.
            the compensation of a float32 momentum), or ``None``: pass it back as
            ``simulate(..., final_state, method_state=sol.method_state)`` to continue the run
            bitwise (``AbstractMethod.carry_extra``).
    """

    times: jax.Array
    states: object
    stats: dict
    # the last saved state, an output of simulate's own program: under an eager jax.grad the
    # derivative of a loss of the final state then needs no indexing program of its own (two
    # compilations, forward and transposed, ~0.2 s in the README's gradient example)
    _final_state: object = None
    method_state: object = None

    def __init__(
        self, times=None, states=None, stats=None, _final_state=None, method_state=None, *, ts=None
    ):
        self.times = renamed(times, ts, "Solution", "times", "ts")
        self.states, self.stats = states, {} if stats is None else stats
        self._final_state, self.method_state = _final_state, method_state

    ts = renamed_attribute("Solution", "ts", "times")

    @property
    def final_state(self):
        """The last saved state (``states`` at the last time)."""
        if self._final_state is not None:
            return self._final_state
        return _last_state(self.states)

    @property
    def max_residual(self) -> jax.Array:
        return self.stats["max_residual"]

    def status_for(self, tol=None) -> jax.Array:
        """``(...,)`` :class:`~geomjax.results.Status` code of the run (one per member of a
        batch; it can be computed under ``jit``): ``CONVERGED`` when every implicit solve met
        ``tol`` (default ``1e3 · eps`` of the dtype, the methods' default), ``NONFINITE`` when a
        residual is NaN, else ``SOLVE_NOT_CONVERGED``."""
        res = self.stats.get("residual") if isinstance(self.stats, dict) else None
        if res is None:
            return jnp.asarray(Status.CONVERGED, jnp.int32)
        res = jnp.asarray(res)
        tol = 1e3 * float(jnp.finfo(res.dtype).eps) if tol is None else tol
        if res.shape[-1:] == (0,):
            return jnp.zeros(res.shape[:-1], jnp.int32)
        nonfinite = jnp.any(jnp.isnan(res), axis=-1)
        missed = jnp.any(~(res <= tol), axis=-1)
        return jnp.where(
            nonfinite,
            Status.NONFINITE,
            jnp.where(missed, Status.SOLVE_NOT_CONVERGED, Status.CONVERGED),
        ).astype(jnp.int32)

    @property
    def status(self) -> jax.Array:
        """``(...,)`` :class:`~geomjax.results.Status` code of the run with the default tolerance
        (:meth:`status_for`): 0 converged, 3 a residual is NaN, 5 an implicit solve missed it."""
        return self.status_for()

    @property
    def converged(self) -> jax.Array:
        """``(...,)`` whether every implicit solve of the run met its tolerance."""
        return self.status == Status.CONVERGED

    @property
    def stop_reason(self) -> str:
        """The name of :attr:`status` (the worst member's in a batch; eager only):
        ``"converged"``, ``"nonfinite"`` or ``"solve_not_converged"``."""
        return worst(np.asarray(self.status)).reason

    def _first_failure(self, tol=None):
        """``(block index, residual, tol)`` of the first saved block whose implicit-solve residual
        is NaN or above ``tol`` (default ``1e3 · eps`` of the dtype, the methods' default), or None.
        Eager only (concrete arrays)."""
        res = np.asarray(self.stats["residual"])
        tol = 1e3 * float(np.finfo(res.dtype).eps) if tol is None else float(tol)
        bad = ~(res <= tol)  # NaN counts as a failure
        if res.size == 0 or not bad.any():
            return None
        # a vmapped solution has leading batch axes: a block fails if any member fails
        k = int(np.argmax(bad.reshape(-1, res.shape[-1]).any(0)))
        col = res.reshape(-1, res.shape[-1])[:, k]
        return k, float(np.nan if np.isnan(col).any() else col.max()), tol

    def check(self, tol=None) -> Solution:
        """Raise :class:`~geomjax.results.ConvergenceError` if an implicit solve did not converge (residual NaN or
        above ``tol``, default ``1e3 · eps``); the message gives the first failing block of saved
        steps (the step index when ``save_every = 1``) and its time interval.  Returns ``self``,
        so ``sol = simulate(...).check()`` reads naturally.  Eager only: under ``jit`` use the
        method's ``on_failure="raise"``."""
        if any_traced(self.stats):
            raise ValueError("Solution.check: call it outside jit (the stats are traced here)")
        fail = self._first_failure(tol)
        if fail is not None:
            k, r, tol = fail
            ts = np.asarray(self.times)
            span = (
                f" (t in [{ts[..., k].min():.6g}, {ts[..., k + 1].max():.6g}])"
                if ts.shape[-1] > k + 1
                else ""
            )
            raise ConvergenceError(
                f"Solution.check: the implicit solve did not converge in saved block {k} (step {k} "
                f"when save_every=1){span}: relative residual {r:.3g} > tol {tol:.3g}; reduce dt "
                "or raise the method's newton_iters"
            )
        return self

    def __repr__(self) -> str:
        text = super().__repr__()
        try:
            fail = self._first_failure()
        except Exception:  # traced / abstract stats: no warning line
            fail = None
        if fail is not None:
            k, r, tol = fail
            text += (
                f"\nWARNING: implicit solve not converged from saved block {k} (residual {r:.3g} "
                f"> {tol:.3g}); see Solution.check()"
            )
        return text

    def save(self, path, system=None, method=None) -> Path:
        """Write the solution (and the numeric parameters of ``system`` and ``method``) to ``.npz``.

        Arrays are stored bitwise.  Non-numeric parts (functions, static configuration) are
        recorded by name in the metadata; pass templates to :func:`load_solution` to rebuild them.
        """
        path = Path(path)
        arrays, meta = {}, {"format": "geomjax.Solution/1"}
        for prefix, tree in (
            ("ts", self.times),  # the file format keeps its key
            ("states", self.states),
            ("stats", self.stats),
        ):
            _flatten_into(arrays, prefix, tree)
        if self.method_state is not None:
            _flatten_into(arrays, "method_state", self.method_state)
        meta["state_type"] = f"{type(self.states).__module__}.{type(self.states).__qualname__}"
        for prefix, obj in (("system", system), ("method", method)):
            if obj is not None:
                leaves = _flatten_into(arrays, prefix, eqx.filter(obj, eqx.is_array))
                meta[prefix] = {
                    "type": f"{type(obj).__module__}.{type(obj).__qualname__}",
                    "leaves": leaves,
                    "repr": _short_repr(obj),
                }
        arrays["__meta__"] = np.frombuffer(json.dumps(meta).encode(), dtype=np.uint8)
        np.savez(path, **arrays)
        return path if path.suffix == ".npz" else path.with_suffix(path.suffix + ".npz")


def _qualname(obj) -> str:
    return f"{type(obj).__module__}.{type(obj).__qualname__}"


def _short_repr(obj) -> str:
    return eqx.tree_pformat(obj, short_arrays=True)[:2000]


def _keystr(path) -> str:
    return jax.tree_util.keystr(path)


def _flatten_into(arrays: dict, prefix: str, tree) -> list[str]:
    names = []
    for path, leaf in jax.tree_util.tree_flatten_with_path(tree)[0]:
        if leaf is None:
            continue
        name = f"{prefix}{_keystr(path)}"
        arrays[name] = np.asarray(leaf)
        names.append(name)
    return names


def _unflatten_like(template, data, prefix, argname="state_template", time_axis=False):
    paths_leaves, treedef = jax.tree_util.tree_flatten_with_path(template)
    leaves = []
    for path, leaf in paths_leaves:
        name = f"{prefix}{_keystr(path)}"
        if name not in data:
            raise ValueError(
                f"load_solution: argument '{argname}' does not match the file: it has no array "
                f"'{name}' (arrays in the file: {sorted(k for k in data if k.startswith(prefix))})"
            )
        arr = data[name]
        want = tuple(np.shape(leaf))
        got = arr.shape[1:] if time_axis else arr.shape
        if eqx.is_array(leaf) and want and got != want:
            raise ValueError(
                f"load_solution: argument '{argname}' does not match the file: '{name}' has shape "
                f"{arr.shape}, the template {want}"
                + (" (after the time axis)" if time_axis else "")
            )
        leaves.append(jnp.asarray(arr))
    return jax.tree_util.tree_unflatten(treedef, leaves)


def load_solution(path, system=None, method=None, *, state_template=None):
    """Load what :meth:`Solution.save` wrote: ``load_solution(path, system, method)`` mirrors
    ``sol.save(path, system, method)``.

    Arguments:
        path: the ``.npz`` file.
        system, method: templates whose numeric leaves are replaced by the saved ones (so the
            functions and static configuration come from the templates).
        state_template: one state of the right type (e.g. the initial state); if omitted, the
            state type recorded in the file is imported and rebuilt (geomjax state types).  (A
            state passed as the second positional argument, the order of earlier versions, is
            taken as ``state_template``.)

    Returns:
        ``(solution, system, method)``; ``system``/``method`` are the rebuilt modules, or the dict
        of saved arrays when no template is given.
    """
    try:
        with np.load(path) as f:
            data = {k: f[k] for k in f.files}
        meta = json.loads(bytes(data.pop("__meta__")).decode())
        if meta.get("format") != "geomjax.Solution/1" or "ts" not in data:
            raise ValueError(f"format {meta.get('format')!r}")
    except FileNotFoundError:
        raise
    except Exception as e:  # truncated zip, not an .npz, missing metadata
        raise ValueError(
            f"load_solution: argument 'path' ({path}) is not a complete file written by "
            f"Solution.save ({type(e).__name__}: {e})"
        ) from e
    state_type = meta.get("state_type", "")
    if system is not None and _qualname(system) == state_type:  # load_solution(path, state0, ...)
        if state_template is not None:
            raise ValueError(
                "load_solution: got a state both as argument 'system' and as 'state_template'; "
                "call load_solution(path, system, method, state_template=state)"
            )
        system, state_template = None, system
    for name, tmpl in (("system", system), ("method", method)):
        if tmpl is not None and not isinstance(tmpl, eqx.Module):
            raise ValueError(
                f"load_solution: argument '{name}' must be the {name} module passed to "
                f"sol.save(path, system, method) (a template), got {type(tmpl).__name__}"
            )
    if state_template is None:
        import importlib

        module, _, qual = meta["state_type"].rpartition(".")
        cls = getattr(importlib.import_module(module), qual)
        fields = [k for k in cls.__dataclass_fields__]
        state_template = cls(*[jnp.zeros(()) for _ in fields])
    ts = jnp.asarray(data["ts"])
    states = _unflatten_like(state_template, data, "states", time_axis=True)
    stats = {
        k[len("stats['") : -2]: jnp.asarray(v) for k, v in data.items() if k.startswith("stats[")
    }
    out = []
    for prefix, tmpl in (("system", system), ("method", method)):
        if tmpl is None:
            out.append({k: jnp.asarray(v) for k, v in data.items() if k.startswith(prefix)})
        else:
            params, static = eqx.partition(tmpl, eqx.is_array)
            out.append(eqx.combine(_unflatten_like(params, data, prefix, prefix), static))
    # the last state from the file's arrays (NumPy: no indexing program per leaf)
    last = {k: v[-1] for k, v in data.items() if k.startswith("states")}
    final = _unflatten_like(state_template, last, "states")
    method_state = {
        k[len("method_state['") : -2]: jnp.asarray(v)
        for k, v in data.items()
        if k.startswith("method_state[")
    }
    sol = Solution(
        times=ts, states=states, stats=stats, _final_state=final, method_state=method_state or None
    )
    return sol, out[0], out[1]


def cast_floating(tree, dtype):
    """Cast the floating-point array leaves of ``tree`` to ``dtype`` (other leaves untouched)."""

    def cast(x):
        if eqx.is_array(x) and jnp.issubdtype(x.dtype, jnp.floating) and x.dtype != dtype:
            return x.astype(dtype)
        return x

    return jax.tree_util.tree_map(cast, tree)


def step(system, state, dt, control=None, *rest, method: AbstractMethod | None = None, t=0.0):
    """One step, MJX style: ``state_next = step(system, state, dt, control)`` (pure).

    ``method`` defaults to :class:`geomjax.LGVI` for Lie group systems and to
    :class:`geomjax.NonholonomicVI` for nonholonomic systems.  The argument order of
    :func:`simulate` is accepted too: ``step(system, method, state, dt, control)``.  Use
    ``method.step(system, state, dt, control, t)`` to also get the :class:`StepStats` (e.g. the
    residual of the implicit solve).

    Called eagerly, the step is one compiled program, cached per system structure, method and
    shapes (``dt``, ``t``, the arrays of the system and the state are its inputs): later calls
    only dispatch it.  A system rebuilt with a new Python function (a fresh ``lambda`` potential on
    every call) compiles again; build it once."""
    if isinstance(state, AbstractMethod):
        if method is not None:
            raise ValueError("step: 'method' given twice (positionally and as a keyword)")
        if len(rest) > 1:
            raise TypeError("step(system, method, state, dt, control=None): too many arguments")
        # step(system, method, state, dt[, control]) -- the argument order of simulate
        method, state, dt, control = state, dt, control, (rest[0] if rest else None)
    elif rest:
        raise TypeError("step(system, state, dt, control=None): too many positional arguments")
    if method is None:
        method = _default_method(system)
    # dt and t as arrays: a Python float would be a static argument of the compiled step, one
    # compilation per value
    return _compiled_step(system, method, state, jnp.asarray(dt), control, jnp.asarray(t))


@eqx.filter_jit
def _compiled_step(system, method, state, dt, control, t):
    # one compiled program per system structure, method and shapes (inlined under a trace):
    # evaluated op by op, every eager call dispatched hundreds of small operations (measured,
    # 2-core CPU, first / later eager calls: LGVI free body 0.87 / 0.14 s, Chaplygin sleigh
    # 3.3 / 0.43 s, ball on a turntable 4.9 / 0.82 s; compiled 0.32 / 0.95 / 2.5 s first, then
    # 0.8–0.9 ms)
    return method.step(system, state, dt, control, t)[0]


def _default_method(system) -> AbstractMethod:
    from ..systems.base import AbstractLieGroupSystem
    from ..systems.nonholonomic import AbstractNonholonomicSystem

    if isinstance(system, AbstractNonholonomicSystem):
        from .nonholonomic import NonholonomicVI

        return NonholonomicVI()
    if isinstance(system, AbstractLieGroupSystem):
        from .lgvi import LGVI

        return LGVI()
    raise ValueError(f"step: give a 'method' for a system of type {type(system).__name__}")


def simulate(
    system,
    method: AbstractMethod,
    state0,
    dt,
    steps: int,
    controls=None,
    save_every: int = 1,
    t0=0.0,
    checkpoint: bool = False,
    check_inputs: bool = True,
    adjoint=None,
    method_state=None,
) -> Solution:
    """Integrate ``system`` with ``method`` for ``steps`` fixed steps of size ``dt``.

    Arguments:
        system: e.g. :class:`geomjax.systems.RigidBody`.
        method: e.g. :class:`geomjax.LGVI` ``()``, :class:`geomjax.RKMK4` ``()``.
        state0: initial state (one state; batch with ``jax.vmap``).
        dt: step size (may be traced / differentiated).  A concrete ``dt`` must be a finite
            positive scalar (``ValueError`` otherwise: ``dt = nan`` would silently give NaN
            states and ``dt = 0`` a constant "solution"; integrate backwards with
            ``method.step`` and a negative ``dt``).  A traced ``dt`` is not checked.
        steps: number of steps (static).
        controls: None, a pytree whose leaves have leading axis ``steps`` (zero-order hold: control
            ``k`` acts on ``[t_k, t_{k+1}]``), or a feedback ``u(t, state)``.  Controls are body
            forces in g* (torques on SO(3)): a control array has shape ``(steps, dim)``
            (``(steps, d + n)`` for nonholonomic systems) and a feedback returns ``(dim,)``;
            other shapes raise ``ValueError``.
        save_every: save every n-th state (``steps`` must be a multiple); memory is
            ``O(steps/save_every)``.
        t0: initial time.
        checkpoint: rematerialize each block of ``save_every`` steps in reverse-mode AD, so that a
            gradient over a long horizon needs memory ``O(steps/save_every + save_every)`` instead of
            ``O(steps)`` (choose ``save_every ≈ sqrt(steps)``).
        check_inputs: validate ``state0`` (group membership, finiteness) — eagerly or with
            ``equinox.error_if`` under ``jit``.
        adjoint: ``None`` (default: reverse mode differentiates the scan) or
            :class:`geomjax.ReversibleAdjoint` ``()``: gradients by backward reconstruction of the
            trajectory with the reversed step (symmetric methods), memory independent of
            ``steps`` (see :mod:`geomjax.integrators.adjoint`).
        method_state: ``None``, or the ``method_state`` of the run whose final state is
            ``state0`` (:class:`Solution`): the method resumes from it (e.g. the LGVI's float32
            momentum with its compensation), so the continued run equals the uninterrupted one
            bitwise (below).  Not with ``adjoint``.

    Non-convergence of the implicit solves is reported in ``stats`` (``"residual"``): call
    :meth:`Solution.check` to raise :class:`ConvergenceError` with the failing step, and
    ``repr(solution)`` ends with a warning line.  With a method's ``on_failure="raise"`` and
    concrete (not traced) inputs, ``simulate`` itself raises that clear error after the run.

    Precision follows ``state0``: floating parameters of ``system`` are cast to its dtype, so a
    float32 state gives a float32 run even with ``jax_enable_x64`` on.

    Returns:
        :class:`Solution` with ``times``, ``states`` (leading time axis, initial state included) and
        ``stats``.

    Everything runs in ``jax.lax.scan``: works under ``jit``, ``vmap`` and ``grad``.  A run
    continued from ``sol.final_state`` with ``t0=sol.times[-1]`` reproduces an uninterrupted run
    bitwise (time is accumulated in the carry, the implicit solves start from the state alone:
    a carry holding more, NonholonomicVI's Newton seed, is rebuilt from the state at every saved
    block, ``AbstractMethod.carry_beyond_state``) when both use the same ``save_every`` and
    save at least two blocks each: a run's loops can be compiled into one kernel
    (always with the opt-in loop setting, see *Sharp bits* in the documentation; the inner loop
    of steps by default) in which XLA:CPU lets LLVM contract multiply–adds into FMAs according
    to the loops around the step, and XLA removes the loop over blocks of a one-block run (the
    loop over steps when ``save_every=1``), so runs compiled with another loop nest agree to
    round-off only.
    A method that carries more than the state (the LGVI, its compositions and
    :class:`~geomjax.RigidBodySplitting` in float32 carry a compensated momentum ``Pi + Pi_lo``,
    ``compensate``) returns it as ``Solution.method_state``: continue with
    ``method_state=sol.method_state`` for a bitwise continuation.  Without it the continued run
    starts from ``Pi + Pi_lo`` rounded (one rounding, ``|Pi_lo| ≤ ulp(Pi)/2``).  (Rebuilding the
    carry from the state at every saved block instead would cost one such rounding per block:
    float32 free body, 2e4 steps, ``save_every=100``: energy error against the float64 run
    8.4e-7 instead of ≤ 4.8e-7.)  :class:`~geomjax.ProcessedComposition` of a compensated method
    keeps no ``method_state``: its carry is the processed (kernel) variable.
    """
    args = dict(locals())  # every argument, forwarded by the eager on_failure="raise" path
    if not isinstance(method, AbstractMethod):
        raise ValueError(
            f"simulate: argument 'method' must be a geomjax method (e.g. LGVI()), got {method!r}"
        )
    if not method.supports(system):
        raise ValueError(
            f"simulate: method {type(method).__name__} does not support system {type(system).__name__}"
        )
    method.validate(system)
    for name, value in (("steps", steps), ("save_every", save_every)):
        if is_traced(value):
            raise ValueError(
                f"simulate: argument '{name}' is static (it sets the length of the time loop) and "
                f"was traced by a jax transformation ({type(value).__name__}); mark it static: "
                f"jax.jit(gj.simulate, static_argnames=({name!r},)), or equinox.filter_jit("
                "gj.simulate) (Python ints are static there), or close over it: "
                f"jax.jit(lambda s: gj.simulate(system, method, s, dt, {name}=...))"
            )
    if not (isinstance(steps, int | np.integer) and steps >= 1):
        raise ValueError(f"simulate: argument 'steps' must be a positive int, got {steps!r}")
    if not (isinstance(save_every, int | np.integer) and save_every >= 1) or steps % save_every:
        raise ValueError(
            f"simulate: argument 'save_every' must be a positive divisor of steps={steps}, got {save_every!r}"
        )
    _check_dt(dt)
    _check_controls(system, method, controls, steps, state0, t0)
    if getattr(method, "on_failure", None) == "raise" and not any_traced(
        system, state0, dt, controls, t0
    ):
        # eager: run with reporting and raise Solution.check's clear message (step index and
        # time) instead of an equinox runtime error wrapped in a long XLA trace
        sol = simulate(**{**args, "method": dataclasses.replace(method, on_failure="report")})
        return sol.check(getattr(method, "tol", None))
    state0 = _as_state_type(system, state0)
    if check_inputs and hasattr(system, "check_state"):
        if getattr(system, "time_aware", False):  # time-dependent constraints: check at t0
            state0 = system.check_state(state0, "state0", t=t0)
        else:
            state0 = system.check_state(state0, "state0")
    if check_inputs:  # method-specific checks, eagerly before the compiled scan
        state0 = method.check_initial(system, state0)
    leaves = jax.tree_util.tree_leaves(state0)
    dtype = jnp.result_type(*leaves)
    # the state's dtype sets the precision: floating parameters of the system follow it
    system = cast_floating(system, dtype)
    dt = jnp.asarray(dt, dtype)
    t0 = jnp.asarray(t0, dtype)
    n_save = steps // save_every

    if method_state is not None:
        if adjoint is not None:
            raise ValueError(
                "simulate: argument 'method_state' cannot be combined with 'adjoint' (the "
                "reversible adjoint rebuilds its carries from the saved states)"
            )
        method_state = _check_method_state(system, method, state0, t0, method_state)

    if adjoint is not None:  # a custom_vjp around this same function (adjoint=None inside)
        if not isinstance(adjoint, AbstractAdjoint) or checkpoint:
            raise ValueError(
                "simulate: argument 'adjoint' must be None or ReversibleAdjoint() (and not combined "
                f"with checkpoint=True), got {adjoint!r}"
            )
        if controls is not None and not (
            callable(controls) and not isinstance(controls, jax.Array)
        ):
            controls = jax.tree_util.tree_map(lambda u: jnp.asarray(u, dtype), controls)
        return adjoint.run(system, method, state0, dt, steps, controls, save_every, t0)

    feedback = callable(controls) and not isinstance(controls, jax.Array)
    if controls is None or feedback:
        blocks = None
    else:
        for leaf in jax.tree_util.tree_leaves(controls):
            if jnp.shape(leaf)[:1] != (steps,):
                raise ValueError(
                    f"simulate: every leaf of argument 'controls' must have leading axis steps={steps}, "
                    f"got shape {jnp.shape(leaf)}"
                )
        blocks = jax.tree_util.tree_map(
            lambda u: jnp.reshape(jnp.asarray(u, dtype), (n_save, save_every, *jnp.shape(u)[1:])),
            controls,
        )

    return _integrate(
        system,
        method,
        state0,
        dt,
        t0,
        blocks,
        controls if feedback else None,
        n_save=n_save,
        save_every=int(save_every),
        checkpoint=bool(checkpoint),
        # whether an input is batched by ``jax.vmap`` at this call: then the loop is traced with
        # the batch-last carry of the SO(3) kernels (``_so3_soa.batch_last_carry``).  Only a
        # layout choice: the same numbers either way; where it cannot tell (an inner ``jit``
        # between the ``vmap`` and this call, or JAX's internals moved), the default layout
        batch_last=vmap_batched(system, state0, dt, t0, blocks, method_state, if_unknown=False),
        method_state=method_state,
    )


@quick_compiled
def _last_state(states):
    # one compiled program: eagerly, indexing compiled a slice and a squeeze per leaf, and under
    # an eager grad their transposes too (the README's gradient example: 10 small programs)
    return jax.tree_util.tree_map(lambda x: x[-1], states)


def _integrate_program(
    system, method, state0, dt, t0, blocks, feedback, *, n_save, save_every, checkpoint,
    batch_last=False, method_state=None,
):  # fmt: skip
    """The scan of :func:`simulate` (inputs already validated and cast).

    Compiled by ``equinox.filter_jit`` (:data:`_integrate`): arrays are traced, the rest (method, static parts of the
    system, a feedback function, the step counts) is the cache key, so repeated eager calls of
    :func:`simulate` reuse one compilation instead of re-tracing and re-compiling the scan each
    time; under an outer ``jit``/``vmap``/``grad`` it is simply inlined.  ``batch_last``: trace
    within ``_so3_soa.batch_last_carry`` (``simulate`` is vmapped: told in :func:`simulate`)."""
    with batch_last_carry(batch_last), hand_written_derivatives():
        return _integrate_traced(
            system, method, state0, dt, t0, blocks, feedback,
            n_save=n_save, save_every=save_every, checkpoint=checkpoint,
            method_state=method_state, batched=batch_last,
        )  # fmt: skip


def _traced_without_setting(
    system, method, state0, dt, t0, blocks, feedback, *, n_save, save_every, checkpoint,
    batch_last=False, method_state=None,
):  # fmt: skip
    """The time loop is traced into a caller's program compiled with XLA:CPU's defaults (e.g. the
    user's ``jax.jit``): warn once (:func:`~geomjax._internal.xla_flags.warn_loop_without_setting`)
    unless the loop over steps is one kernel anyway.  XLA:CPU compiles a loop into one kernel
    when its estimate of the bytes one iteration touches is under 1 kB (its small-loop pass;
    a nested loop counts one iteration of its body, a stacked output its update).  The loop
    over the steps of a block (``save_every > 1``) carries the state alone: the free body's
    LGVI step touches ~980 bytes (float64, time and residual carried), one kernel; the loop
    over blocks around it adds the saved state (~290 bytes) and is not, but runs once per
    ``save_every`` steps.  A loop that saves every step, a vmapped loop (the bytes grow with the
    batch) and a differentiated one (reverse mode stacks each step's residuals: ~3.5 kB; the
    transposed step alone ~1.2 kB) are not one kernel (``tests/integrators/test_loop_kernels.py``
    reads it from the compiled programs)."""
    differentiated = jvp_traced(system, state0, dt, t0, blocks, method_state, if_unknown=True)
    warn_loop_without_setting(
        one_kernel_anyway=save_every > 1 and not batch_last and not differentiated
    )


#: :func:`_integrate_program` compiled: called at top level (an eager ``simulate``), with XLA:CPU's
#: small-loop threshold raised for this program alone, so that the time loop is one kernel
#: whatever the process's ``XLA_FLAGS`` (:mod:`geomjax._internal.xla_flags`); traced into a
#: caller's program without it, warns once where the loop is not one kernel with XLA's defaults
_integrate = top_level_options(
    _integrate_program, small_loops=True, traced_without_setting=_traced_without_setting
)


def _integrate_traced(
    system, method, state0, dt, t0, blocks, feedback, *, n_save, save_every, checkpoint,
    method_state=None, batched=False,
):  # fmt: skip
    dtype = dt.dtype

    def advance(inner, u, t):
        return method.advance(system, inner, dt, u, t)

    saves = gradient_hooks(method).reverse_mode_saves(system, batched=batched)
    if saves is not None:
        # plain reverse mode keeps only the named values of each step (and the carry) and
        # recomputes the rest of the step in the backward pass (GradientHooks.reverse_mode_saves;
        # the method says whether with and without a batch: vmapped, each step's residuals are
        # (batch,) vectors, whose stores and loads cost more than recomputing them; at batch 1
        # it depends on the step: the LGVI on SO(3), free body and heavy top, 1e4 steps,
        # gradient 3.3x and 5.8x the forward with it, 3.1x and 4.9x without; CPU time, one run)
        policy = jax.checkpoint_policies.save_only_these_names(*saves)
        advance = jax.checkpoint(advance, policy=policy, prevent_cse=False)

    def one_step(carry, u):
        inner, t, worst = carry
        if feedback is not None:
            u = feedback(t, method.finalize(system, inner))
        inner, stats = advance(inner, u, t)
        # running maximum of the residual (NaN propagates, so a failed solve stays visible);
        # a diagnostic, not differentiated
        res = jax.lax.stop_gradient(stats.residual)
        worst = jnp.where(jnp.isnan(res), res, jnp.maximum(worst, res))
        return (inner, t + dt, worst), None

    # (not when vmapped: a (batch, dim) slice per step is not the small read the chunks avoid,
    # and the nested scans cost more: free body, LGVI, batch 1024, 200 steps with controls:
    # forward 1.47x -> 1.23x the run without controls, gradient 5.8x -> 3.5x the forward; CPU
    # time, one run)
    chunk = 1 if batched else _control_chunk(blocks, save_every)

    def steps_of_chunk(carry, us):
        return jax.lax.scan(one_step, carry, us, length=chunk)[0], None

    reinit = method.carry_beyond_state(system)

    def block(carry, us):
        inner, t = carry
        if reinit:  # the carry from the saved state alone, in the loop (restarts are bitwise)
            inner = method.init(system, method.finalize(system, inner), t)
        carry = (inner, t, jnp.zeros((), dtype))
        if chunk > 1:  # controls: scan over small chunks of steps (see _control_chunk)
            us = jax.tree_util.tree_map(
                lambda u: jnp.reshape(u, (save_every // chunk, chunk, *u.shape[1:])), us
            )
            (inner, t, worst), _ = jax.lax.scan(steps_of_chunk, carry, us)
        elif save_every == 1:
            # no loop of one step: the same program once compiled (XLA removes that loop), but
            # one level of scan less to trace, linearize and partially evaluate under autodiff
            u = None if us is None else jax.tree_util.tree_map(lambda a: a[0], us)
            (inner, t, worst), _ = one_step(carry, u)
        else:
            (inner, t, worst), _ = jax.lax.scan(one_step, carry, us, length=save_every)
        return (inner, t), ((method.finalize(system, inner), t), {"residual": worst})

    if checkpoint:
        block = jax.checkpoint(block, prevent_cse=False)

    if method_state is None:
        carry0 = (method.init(system, state0, t0), t0)
    else:
        carry0 = (method.resume(system, state0, method_state, t0), t0)
    (inner, _), ((states, ts), stats) = jax.lax.scan(block, carry0, blocks, length=n_save)
    stats["max_residual"] = jnp.max(stats["residual"])
    states = jax.tree_util.tree_map(lambda a, b: jnp.concatenate([a[None], b], 0), state0, states)
    ts = jnp.concatenate([t0[None], ts])
    final = jax.tree_util.tree_map(lambda a: a[-1], states)
    extra = method.carry_extra(system, inner)
    return Solution(times=ts, states=states, stats=stats, _final_state=final, method_state=extra)


#: Largest per-chunk control slice (bytes) for :func:`_control_chunk`.
_CHUNK_BYTES = 384


def _control_chunk(blocks, save_every: int) -> int:
    """Steps per inner chunk when a control array is scanned (1: no chunking).

    Why: on the CPU backend every fused kernel of a step that reads the step's control through a
    dynamic slice of a large array (the whole block, ``(save_every, dim)``) costs more than one
    reading a small array.  Scanning the block in chunks of a few steps slices one small
    ``(chunk, dim)`` array per chunk and leaves the per-step slices small (figures: the
    architecture page, "Measured design choices").  The steps and their arithmetic are
    unchanged (bitwise the same results).  (Chunks of ~1 kB and more lose the gain: most likely
    XLA's default threshold for compiling a small loop into one kernel, which the opt-in setting
    of :mod:`geomjax._internal.xla_flags` raises to 16 MiB.)"""
    if blocks is None:
        return 1
    per_step = sum(
        math.prod(jnp.shape(u)[2:]) * jnp.dtype(u.dtype).itemsize
        for u in jax.tree_util.tree_leaves(blocks)
    )
    for c in range(16, 1, -1):
        if save_every % c == 0 and c * per_step <= _CHUNK_BYTES:
            return c
    return 1


def _as_state_type(system, state0):
    """``state0`` as ``system.state_type`` (checked whatever ``check_inputs`` says: a structural
    test, no computation).  A ``(g, mu)`` state of another type (e.g. a
    :class:`~geomjax.LieGroupState` for a :class:`~geomjax.RigidBody`) is converted, as
    ``check_state`` does; anything else is a ``ValueError`` naming ``state0``."""
    want = getattr(system, "state_type", None)
    if want is None or isinstance(state0, want):
        return state0
    from ..systems.base import AbstractLieGroupSystem

    if (
        isinstance(system, AbstractLieGroupSystem)
        and hasattr(state0, "g")
        and hasattr(state0, "mu")
    ):
        return system.make_state(state0.g, state0.mu)
    raise ValueError(
        f"simulate: argument 'state0' must be a {want.__name__} for {type(system).__name__} "
        f"(e.g. from its make_state or state helpers), got {type(state0).__name__}"
    )


def _check_method_state(system, method, state0, t0, method_state):
    """``simulate``'s ``method_state``: the structure ``method.carry_extra`` gives for this
    system and state (shapes, dtypes), as arrays; eagerly also that it belongs to ``state0``."""
    expected = jax.eval_shape(
        lambda s, t: method.carry_extra(system, method.init(system, s, t)), state0, t0
    )
    what = (
        "nothing (this method carries no more than the state)"
        if expected is None
        else {k: (v.shape, str(v.dtype)) for k, v in expected.items()}
    )
    try:
        method_state = jax.tree_util.tree_map(jnp.asarray, method_state)
        ok = expected is not None and jax.tree_util.tree_all(
            jax.tree_util.tree_map(
                lambda e, m: e.shape == m.shape and e.dtype == m.dtype, expected, method_state
            )
        )
    except (ValueError, TypeError):
        ok = False
    if not ok:
        got = jax.tree_util.tree_map(
            lambda m: (jnp.shape(m), str(jnp.result_type(m))), method_state
        )
        raise ValueError(
            f"simulate: argument 'method_state' must be the method_state of a run of "
            f"{type(method).__name__} ending at state0: expected {what}, got {got}"
        )
    if not any_traced(method_state, state0) and "momentum" in method_state:
        _, mu = system.split(state0)
        # state0's momentum is fl(hi + lo): hi itself or one ulp from it
        near = np.abs(np.asarray(method_state["momentum"]) - np.asarray(mu)) <= np.spacing(
            np.abs(np.asarray(mu))
        )
        if not bool(np.all(near)):
            raise ValueError(
                "simulate: argument 'method_state' does not belong to state0 (its momentum is "
                "not state0's to the last bit): pass the final_state and the method_state of "
                "the same run"
            )
    return method_state


def _check_dt(dt) -> None:
    """A concrete ``dt`` must be a finite positive scalar (traced ``dt``: unchecked)."""
    if any_traced(dt):
        return
    try:
        a = np.asarray(dt)
        ok_shape = a.shape == () and np.issubdtype(a.dtype, np.number)
    except Exception:
        ok_shape = False
    if not ok_shape:
        raise ValueError(f"simulate: argument 'dt' must be a real scalar, got {dt!r}")
    val = float(a)
    if not (math.isfinite(val) and val > 0):
        raise ValueError(f"simulate: argument 'dt' must be finite and positive, got {val!r}")


def _check_controls(system, method, controls, steps, state0, t0) -> None:
    """Shape of a control array (leading axis ``steps``, then the control shape the method takes
    for the system, :meth:`AbstractMethod.control_shape`) or of a feedback's output (traced
    abstractly, not run)."""
    want = method.control_shape(system)
    if controls is None or want is None:
        return
    if callable(controls) and not isinstance(controls, jax.Array):
        try:
            out = jax.eval_shape(controls, jnp.asarray(t0, float), state0)
        except Exception as e:
            raise ValueError(
                f"simulate: argument 'controls' (a feedback u(t, state)) failed on state0 with "
                f"{type(e).__name__}: {e}"
            ) from e
        if tuple(getattr(out, "shape", ())) != want:
            raise ValueError(
                f"simulate: argument 'controls' (a feedback) must return shape {want} for "
                f"{type(system).__name__}, got {getattr(out, 'shape', type(out))}"
            )
        return
    leaves = jax.tree_util.tree_leaves(controls)
    if want is None or len(leaves) != 1:
        return
    shape = tuple(jnp.shape(leaves[0]))
    if shape[1:] != want:
        raise ValueError(
            f"simulate: argument 'controls' must have shape {(steps, *want)} for "
            f"{type(system).__name__} and {type(method).__name__} (one control per step), got {shape}"
        )


def diagnostics(system, solution: Solution) -> dict[str, jax.Array]:
    """Energy, momenta, Casimirs and group defect along a solution (time axis first).

    Returns a dict of arrays, each with the leading axis ``T`` of ``solution.times`` (the saved
    states, initial one included; ``(T,)``: one scalar per saved state), ``d`` the dimension of
    the group.  The keys come from ``system.diagnostics`` and depend on the kind of system:

    Euler–Poincaré systems (:class:`~geomjax.RigidBody`, :class:`~geomjax.RigidBodySE3`,
    :class:`~geomjax.EulerPoincareSystem`):

    * ``"energy"`` ``(T,)``: ``K + V``, the kinetic energy ``½ μ·I⁻¹μ`` plus the potential
      ``V(g)`` (0 without one); conserved without forces and controls.
    * ``"body_momentum"`` ``(T, d)``: ``μ`` (``Π`` on SO(3)).
    * ``"spatial_momentum"`` ``(T, d)``: the momentum map of the left action
      ``Ad_{g⁻¹}ᵀ μ`` (``R Π`` on SO(3)); conserved when the potential and forces are invariant.
    * ``"group_defect"`` ``(T,)``: how far the stored ``g`` is from the group (0 on it; SO(3):
      ``max|RᵀR − I| + |det R − 1|``; SE(3): that of the rotation block plus the bottom row's).
    * ``"casimir_<name>"`` ``(T,)``, one per Casimir of the system: ``"casimir_norm_Pi_sq"``
      ``|Π|²`` for :class:`~geomjax.RigidBody`; ``"casimir_p_dot_p"`` ``p·p`` and
      ``"casimir_pi_dot_p"`` ``π·p`` for :class:`~geomjax.RigidBodySE3`; none by default.

    Nonholonomic systems (:class:`~geomjax.NonholonomicSystem` and the ready-made ones):
    ``"energy"`` ``(T,)`` ``⟨∂L/∂v, v⟩ − L``; ``"constraint_violation"`` ``(T,)``
    ``max |A v − b|``; ``"multipliers"`` ``(T, m)`` the constraint multipliers;
    ``"spatial_momentum"`` ``(T, d)``; ``"group_defect"`` ``(T,)``; and the system's
    ``invariants`` (scalars ``(T,)`` by name, e.g. :class:`~geomjax.ChaplyginSleigh`'s
    ``"omega"`` and ``"forward_speed"``).

    Variational systems (:mod:`geomjax.variational`, state ``(q, p, lam)`` or ``(q, v, lam)``):
    ``"energy"`` ``(T,)`` ``⟨p, v⟩ − L``; ``"kinetic_energy"`` ``(T,)`` that minus ``V(q)``;
    ``"momentum"`` ``(T, n)``; ``"multipliers"`` ``(T, m)``.

    Base-controlled systems (:mod:`geomjax.reconstruction`): ``"energy"``,
    ``"body_momentum"``, ``"spatial_momentum"``, ``"body_velocity"`` ``(T, d)``,
    ``"constraint_residual"`` ``(T,)`` ``|Cξ − r|``, ``"consistency"`` ``(T,)``
    ``|I₀ξ + J₀ − μ|`` and ``"group_defect"``.

    Systems whose diagnostics depend on the time (``system.time_aware``, e.g. nonholonomic
    systems with moving constraints) receive ``solution.times`` as well.

    Called eagerly, one compiled program per system structure and shapes, compiled with XLA:CPU's
    legacy elemental emitters (``xla_cpu_use_fusion_emitters=False``): it compiles in about half
    the time with the same kernels (``benchmarks/bench_compile_options.py`` measures both); the
    results agree to round-off.  Under a transformation (inside ``jit``, an eager
    ``grad``) the program is compiled, or inlined, as the caller's."""
    return _diagnostics(system, solution.states, solution.times)


def _diagnostics_traced(system, states, ts):
    # one compiled program (cached per system structure and shapes): evaluated op by op, a
    # process's first call compiled every small operation on its own (free rigid body 0.96 s,
    # Chaplygin sleigh 2.5 s; compiled 0.19 / 0.18 s)
    if getattr(system, "time_aware", False):
        return jax.vmap(system.diagnostics)(states, ts)
    return jax.vmap(system.diagnostics)(states)


_diagnostics = top_level_options(_diagnostics_traced, LEGACY_EMITTERS)
