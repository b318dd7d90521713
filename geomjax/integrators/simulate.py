"""One driver for every system and method: :func:`simulate`, :func:`step` and :class:`Solution`."""

from __future__ import annotations

import json
from pathlib import Path

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from .base import AbstractMethod

__all__ = ["Solution", "load_solution", "simulate", "step"]


class Solution(eqx.Module):
    """Result of :func:`simulate` (a pytree of arrays: it can be returned from ``jit``/``vmap``).

    Attributes:
        ts: ``(n_save + 1,)`` times of the saved states (the initial state included).
        states: the state pytree with a leading time axis of length ``n_save + 1``.
        stats: dict of diagnostics: ``"residual"`` ``(n_save,)``, the largest relative residual of
            the implicit solves in each block (0 for explicit methods; NaN propagates), and
            ``"max_residual"``, its maximum over the run.
    """

    ts: jax.Array
    states: object
    stats: dict

    @property
    def final_state(self):
        return jax.tree_util.tree_map(lambda x: x[-1], self.states)

    @property
    def max_residual(self) -> jax.Array:
        return self.stats["max_residual"]

    def save(self, path, system=None, method=None) -> Path:
        """Write the solution (and the numeric parameters of ``system`` and ``method``) to ``.npz``.

        Arrays are stored bitwise.  Non-numeric parts (functions, static configuration) are
        recorded by name in the metadata; pass templates to :func:`load_solution` to rebuild them.
        """
        path = Path(path)
        arrays, meta = {}, {"format": "geomjax.Solution/1"}
        for prefix, tree in (("ts", self.ts), ("states", self.states), ("stats", self.stats)):
            _flatten_into(arrays, prefix, tree)
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


def _unflatten_like(template, data, prefix):
    paths_leaves, treedef = jax.tree_util.tree_flatten_with_path(template)
    leaves = []
    for path, _ in paths_leaves:
        name = f"{prefix}{_keystr(path)}"
        if name not in data:
            raise ValueError(
                f"load_solution: the file has no array '{name}' for the given template"
            )
        leaves.append(jnp.asarray(data[name]))
    return jax.tree_util.tree_unflatten(treedef, leaves)


def load_solution(path, state_template=None, system=None, method=None):
    """Load what :meth:`Solution.save` wrote.

    Arguments:
        path: the ``.npz`` file.
        state_template: one state of the right type (e.g. the initial state); if omitted, the
            state type recorded in the file is imported and rebuilt (geomjax state types).
        system, method: templates whose numeric leaves are replaced by the saved ones (so the
            functions and static configuration come from the templates).

    Returns:
        ``(solution, system, method)``; ``system``/``method`` are the rebuilt modules, or the dict
        of saved arrays when no template is given.
    """
    with np.load(path) as f:
        data = {k: f[k] for k in f.files}
    meta = json.loads(bytes(data.pop("__meta__")).decode())
    if state_template is None:
        import importlib

        module, _, qual = meta["state_type"].rpartition(".")
        cls = getattr(importlib.import_module(module), qual)
        fields = [k for k in cls.__dataclass_fields__]
        state_template = cls(*[jnp.zeros(()) for _ in fields])
    ts = jnp.asarray(data["ts"])
    states = _unflatten_like(state_template, data, "states")
    stats = {
        k[len("stats['") : -2]: jnp.asarray(v) for k, v in data.items() if k.startswith("stats[")
    }
    out = []
    for prefix, tmpl in (("system", system), ("method", method)):
        if tmpl is None:
            out.append({k: jnp.asarray(v) for k, v in data.items() if k.startswith(prefix)})
        else:
            params, static = eqx.partition(tmpl, eqx.is_array)
            out.append(eqx.combine(_unflatten_like(params, data, prefix), static))
    return Solution(ts=ts, states=states, stats=stats), out[0], out[1]


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
    residual of the implicit solve)."""
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
) -> Solution:
    """Integrate ``system`` with ``method`` for ``steps`` fixed steps of size ``dt``.

    Arguments:
        system: e.g. :class:`geomjax.systems.RigidBody`.
        method: e.g. :class:`geomjax.LGVI` ``()``, :class:`geomjax.RKMK4` ``()``.
        state0: initial state (one state; batch with ``jax.vmap``).
        dt: step size (may be traced / differentiated).
        steps: number of steps (static).
        controls: None, a pytree whose leaves have leading axis ``steps`` (zero-order hold: control
            ``k`` acts on ``[t_k, t_{k+1}]``), or a feedback ``u(t, state)``.  Controls are body
            forces in g* (torques on SO(3)).
        save_every: save every n-th state (``steps`` must be a multiple); memory is
            ``O(steps/save_every)``.
        t0: initial time.
        checkpoint: rematerialize each block of ``save_every`` steps in reverse-mode AD, so that a
            gradient over a long horizon needs memory ``O(steps/save_every + save_every)`` instead of
            ``O(steps)`` (choose ``save_every ≈ sqrt(steps)``).
        check_inputs: validate ``state0`` (group membership, finiteness) — eagerly or with
            ``equinox.error_if`` under ``jit``.

    Precision follows ``state0``: floating parameters of ``system`` are cast to its dtype, so a
    float32 state gives a float32 run even with ``jax_enable_x64`` on.

    Returns:
        :class:`Solution` with ``ts``, ``states`` (leading time axis, initial state included) and
        ``stats``.

    Everything runs in ``jax.lax.scan``: works under ``jit``, ``vmap`` and ``grad``.  A run
    continued from ``sol.final_state`` with ``t0=sol.ts[-1]`` reproduces an uninterrupted run
    bitwise (time is accumulated in the carry, the implicit solves start from the state alone).
    """
    if not isinstance(method, AbstractMethod):
        raise ValueError(
            f"simulate: argument 'method' must be a geomjax method (e.g. LGVI()), got {method!r}"
        )
    if not method.supports(system):
        raise ValueError(
            f"simulate: method {type(method).__name__} does not support system {type(system).__name__}"
        )
    method.validate(system)
    if not (isinstance(steps, int | np.integer) and steps >= 1):
        raise ValueError(f"simulate: argument 'steps' must be a positive int, got {steps!r}")
    if not (isinstance(save_every, int | np.integer) and save_every >= 1) or steps % save_every:
        raise ValueError(
            f"simulate: argument 'save_every' must be a positive divisor of steps={steps}, got {save_every!r}"
        )
    if check_inputs and hasattr(system, "check_state"):
        if getattr(system, "time_aware", False):  # time-dependent constraints: check at t0
            state0 = system.check_state(state0, "state0", t=t0)
        else:
            state0 = system.check_state(state0, "state0")
    leaves = jax.tree_util.tree_leaves(state0)
    dtype = jnp.result_type(*leaves)
    # the state's dtype sets the precision: floating parameters of the system follow it
    system = cast_floating(system, dtype)
    dt = jnp.asarray(dt, dtype)
    t0 = jnp.asarray(t0, dtype)
    n_save = steps // save_every

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
    )


@eqx.filter_jit
def _integrate(system, method, state0, dt, t0, blocks, feedback, *, n_save, save_every, checkpoint):
    """The scan of :func:`simulate` (inputs already validated and cast).

    Compiled by ``equinox.filter_jit``: arrays are traced, the rest (method, static parts of the
    system, a feedback function, the step counts) is the cache key, so repeated eager calls of
    :func:`simulate` reuse one compilation instead of re-tracing and re-compiling the scan each
    time; under an outer ``jit``/``vmap``/``grad`` it is simply inlined."""
    dtype = dt.dtype

    def one_step(carry, u):
        inner, t, worst = carry
        if feedback is not None:
            u = feedback(t, method.finalize(system, inner))
        inner, stats = method.advance(system, inner, dt, u, t)
        # running maximum of the residual (NaN propagates, so a failed solve stays visible)
        worst = jnp.where(
            jnp.isnan(stats.residual), stats.residual, jnp.maximum(worst, stats.residual)
        )
        return (inner, t + dt, worst), None

    def block(carry, us):
        inner, t = carry
        (inner, t, worst), _ = jax.lax.scan(
            one_step, (inner, t, jnp.zeros((), dtype)), us, length=save_every
        )
        return (inner, t), ((method.finalize(system, inner), t), {"residual": worst})

    if checkpoint:
        block = jax.checkpoint(block, prevent_cse=False)

    carry0 = (method.init(system, state0), t0)
    _, ((states, ts), stats) = jax.lax.scan(block, carry0, blocks, length=n_save)
    stats["max_residual"] = jnp.max(stats["residual"])
    states = jax.tree_util.tree_map(lambda a, b: jnp.concatenate([a[None], b], 0), state0, states)
    ts = jnp.concatenate([t0[None], ts])
    return Solution(ts=ts, states=states, stats=stats)


def diagnostics(system, solution: Solution) -> dict[str, jax.Array]:
    """Energy, momenta, Casimirs and group defect along a solution (time axis first).

    Systems whose diagnostics depend on the time (``system.time_aware``, e.g. nonholonomic
    systems with moving constraints) receive ``solution.ts`` as well."""
    if getattr(system, "time_aware", False):
        return jax.vmap(system.diagnostics)(solution.states, solution.ts)
    return jax.vmap(system.diagnostics)(solution.states)
