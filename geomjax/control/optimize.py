"""Gradient-based optimization loop over any pytree of parameters (optax).

:func:`optimize` runs up to ``max_iters`` iterations of an optax optimizer, one jitted update per iteration
(value, gradient and optimizer update fused), with a progress bar, early stopping and a history of
loss, gradient norm and wall time.  Parameters that live on a Lie group are wrapped in
:class:`GroupParam`: their gradient is the left-trivialized one and they are updated by
``g ← g exp(Δξ)`` (they stay on the group exactly).  :func:`optimize_restarts` runs a batch of random
starts at once with ``vmap``.

Gradients through :func:`geomjax.simulate` go through the implicit solves by the implicit function
theorem; pass ``checkpoint=True`` (and ``save_every ≈ sqrt(steps)``) to ``simulate`` inside the loss
to keep reverse-mode memory ``O(sqrt(steps))``.
"""

from __future__ import annotations

import dataclasses
import functools
import time
from collections.abc import Callable

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax

from .._internal.eager import top_level_options
from .._internal.warn import renamed, renamed_attribute
from ..lie import LieGroup
from ..results import ConvergenceError, Status
from .status import OPTIMIZE_STATUS

__all__ = ["GroupParam", "OptimizeResult", "optimize", "optimize_restarts"]


class GroupParam(eqx.Module):
    """A parameter on a Lie group: element ``g`` of ``group`` (e.g. an initial attitude).

    The loss reads ``param.g``.  :func:`optimize` differentiates along ``g exp(ξ)`` at ``ξ = 0``
    (the left-trivialized gradient, ``(dim,)``) and updates ``g ← g exp(Δξ)``."""

    g: jax.Array
    group: LieGroup = eqx.field(static=True)

    def __init__(self, g, group: LieGroup):
        if not isinstance(group, LieGroup):
            raise ValueError(f"GroupParam: argument 'group' must be a LieGroup, got {group!r}")
        self.g = jnp.asarray(g)
        self.group = group


class _Tangent(eqx.Module):
    xi: jax.Array


def _is_gp(x):
    return isinstance(x, GroupParam)


def _lift(diff):
    """Group parameters → zero tangent vectors (the optimization chart at the current point)."""
    return jax.tree_util.tree_map(
        lambda p: _Tangent(jnp.zeros(p.group.dim, p.g.dtype)) if _is_gp(p) else p,
        diff,
        is_leaf=_is_gp,
    )


def _retract(z, diff):
    """Chart → parameters: ``g exp(ξ)`` for group parameters, the value itself otherwise."""

    def one(p, zz):
        if _is_gp(p):
            return GroupParam(p.group.compose(p.g, p.group.exp(zz.xi)), p.group)
        return zz

    return jax.tree_util.tree_map(one, diff, z, is_leaf=_is_gp)


def _combine(diff, static):
    return eqx.combine(diff, static, is_leaf=_is_gp)


def _filter(x):
    return _is_gp(x) or eqx.is_inexact_array(x)


@dataclasses.dataclass
class OptimizeResult:
    """What :func:`optimize` returns.

    Attributes:
        params: the optimized parameters (the best iterate seen), same structure as given.
        loss: the loss at ``params``.
        history: ``{"loss", "grad_norm", "time"}`` numpy arrays, one entry per iteration (loss and
            gradient norm at the iterate before the update; ``time`` cumulative wall seconds, the
            first iteration including compilation).  With restarts, ``loss``/``grad_norm`` are
            ``(iterations, restarts)``.
        iterations: iterations run.
        stop_reason: ``"max_iters"``, ``"target"``, ``"gtol"``, ``"patience"`` or ``"nonfinite"``
            (:mod:`geomjax.control.status`; :attr:`status` is its code).
        compile_time: wall seconds of the first iteration (compile + one update; about one
            update when the step was compiled by an earlier call with the same loss and shapes).
            The progress bar starts after it and shows it in its description.
        arrays: ``export(params)`` as numpy arrays (e.g. the controls or the sampled curve), so the
            result can be re-simulated with any other integrator.
        restart_losses: final loss of each restart (:func:`optimize_restarts` only).
    """

    params: object
    loss: float
    history: dict
    iterations: int
    stop_reason: str
    compile_time: float
    arrays: dict = dataclasses.field(default_factory=dict)
    restart_losses: np.ndarray | None = None

    # former name (deprecated): the changelog's table of deprecated names
    n_iter = renamed_attribute("OptimizeResult", "n_iter", "iterations")

    @property
    def status(self) -> Status:
        """The status code of :attr:`stop_reason` (:class:`geomjax.results.Status`: 0 converged —
        target, gtol or patience —, 1 iteration cap, 3 non-finite)."""
        return OPTIMIZE_STATUS[self.stop_reason]

    @property
    def converged(self) -> bool:
        """Whether a stopping test other than the iteration cap ended the run and the loss is
        finite (:attr:`status` is ``Status.CONVERGED``)."""
        return self.status == Status.CONVERGED

    def check(self) -> OptimizeResult:
        """Raise :class:`geomjax.results.ConvergenceError` unless :attr:`converged` (the iteration
        cap or a non-finite loss ended the run); returns ``self``."""
        if not self.converged:
            raise ConvergenceError(
                f"optimize: {self.status.message} ({self.iterations} iterations, loss "
                f"{float(self.loss):.6g}); raise max_iters, or set target/gtol/patience to the "
                "accuracy you need"
                if self.status == Status.MAX_ITERS
                else f"optimize: {self.status.message} after {self.iterations} iterations; lower "
                "the learning rate or check the loss at the initial parameters"
            )
        return self


@functools.cache
def _named_optimizer(name):
    """One transformation object per name, so that a second :func:`optimize` call finds the
    compiled step of the first (optax builds new closures, unequal, on every call)."""
    return optax.adam(1e-2) if name == "adam" else optax.lbfgs()


def _make_optimizer(optimizer):
    """``(transformation, passes extra args, is a quasi-Newton method with memory)``."""
    if optimizer is None or optimizer == "adam":
        return _named_optimizer("adam"), False, False
    if optimizer == "lbfgs":
        return _named_optimizer("lbfgs"), True, True
    if isinstance(optimizer, optax.GradientTransformation):
        # line searches (optax.lbfgs) read value, grad and value_fn; other transformations with
        # extra-args support ignore them
        return optimizer, isinstance(optimizer, optax.GradientTransformationExtraArgs), False
    raise ValueError(
        f"optimize: argument 'optimizer' must be 'adam', 'lbfgs' or an optax GradientTransformation, got {optimizer!r}"
    )


def _progress(total, enabled, desc):
    if not enabled:
        return None
    try:
        from tqdm.auto import tqdm
    except ImportError:  # tqdm is a declared dependency, but the loop must not need it
        return None
    return tqdm(total=total, desc=desc, leave=False)


def _is_linesearch_state(x):
    return isinstance(x, optax.ScaleByZoomLinesearchState)


def _linesearch_state(opt_state):
    """The zoom line search's state in ``opt_state`` (``optax.lbfgs`` has one), or None."""
    found = [
        x
        for x in jax.tree_util.tree_leaves(opt_state, is_leaf=_is_linesearch_state)
        if _is_linesearch_state(x)
    ]
    return found[0] if len(found) == 1 else None


def _build_step(loss, static, opt, extra_args, reuse=False):
    """One jitted iteration ``(diff, state) -> (diff1, state1, value, grad_norm)`` (value and
    gradient norm at ``diff``).

    ``reuse``: the optimizer's zoom line search keeps the value and gradient of the point it
    accepts (``optax.ScaleByZoomLinesearchState``), i.e. of the next iterate.  Then the state is
    ``(opt_state, value, grad)`` at ``diff`` and the step evaluates the loss only inside the line
    search (optax's documented reuse, ``optax.value_and_grad_from_state``, without its ``cond``,
    both branches of which would be compiled): the compiled program holds two copies of the
    loss's ``value_and_grad`` (one per branch of the line search's own ``cond``) instead of
    three.  The first ``(value, grad)`` comes from the same program (:func:`_prime`).
    Spacecraft reorientation (``control.examples``, 60 steps, L-BFGS, 13 iterations; 2-core CPU,
    old and new code alternated): the whole ``optimize`` 13.9–14.6 s → 11.1–11.4 s with
    :func:`_canonical_state` no longer tracing the step (first iteration 10.6 → 7.1 s in an
    earlier, quieter run of the reuse alone), the same iterates."""

    def f_of_z(z, diff):
        value = loss(_combine(_retract(z, diff), static))
        # checked while tracing (free): JAX's own error would speak of "scalar-output functions"
        shape = getattr(value, "shape", None)
        if shape != () or not jnp.issubdtype(getattr(value, "dtype", None), jnp.floating):
            raise ValueError(
                "optimize: argument 'loss' must return a real scalar (shape ()), got "
                + (
                    f"shape {shape}, dtype {value.dtype}"
                    if shape is not None
                    else type(value).__name__
                )
            )
        return value

    def step(diff, opt_state):
        z0 = _lift(diff)
        value, grad = jax.value_and_grad(f_of_z)(z0, diff)
        if extra_args:
            updates, opt_state = opt.update(
                grad, opt_state, z0, value=value, grad=grad, value_fn=lambda z: f_of_z(z, diff)
            )
        else:
            updates, opt_state = opt.update(grad, opt_state, z0)
        diff1 = _retract(optax.apply_updates(z0, updates), diff)
        return diff1, opt_state, value, optax.tree.norm(grad)

    def step_reusing(diff, state):
        opt_state, value, grad = state
        z0 = _lift(diff)  # Euclidean parameters only (L-BFGS): z0 is diff
        updates, opt_state = opt.update(
            grad, opt_state, z0, value=value, grad=grad, value_fn=lambda z: f_of_z(z, diff)
        )
        diff1 = _retract(optax.apply_updates(z0, updates), diff)
        ls = _linesearch_state(opt_state)
        return diff1, (opt_state, ls.value, ls.grad), value, optax.tree.norm(grad)

    return step_reusing if reuse else step


class _Static:
    """The non-optimized part of ``params`` as a hashable value: equal when the tree structure
    is equal and every leaf is equal (hashable leaves) or the same object (arrays)."""

    def __init__(self, tree):
        leaves, self.treedef = jax.tree_util.tree_flatten(tree)
        self.tree = tree
        self.key = tuple(_leaf_key(x) for x in leaves)

    def __hash__(self):
        return hash((self.treedef, self.key))

    def __eq__(self, other):
        return (
            isinstance(other, _Static) and self.treedef == other.treedef and self.key == other.key
        )


def _leaf_key(x):
    if eqx.is_array(x):
        return ("id", id(x))  # the object itself is kept alive by _Static.tree
    try:
        hash(x)
    except TypeError:
        return ("id", id(x))
    return ("value", type(x), x)


class _StepKey:
    """What the compiled iteration depends on besides its array arguments: the loss (a function
    by identity; a Module by its fields), the fixed part of the parameters, the optimizer (its
    functions by identity: ``"adam"`` and ``"lbfgs"`` are one object each), and how the step is
    built.  Equal keys find the program
    compiled by an earlier :func:`optimize` call in :data:`_compiled_step`'s cache."""

    def __init__(self, loss, static, opt, extra, reuse, batched):
        self.parts = (_Static(loss), _Static(static), _Static(opt), extra, reuse, batched)
        # (extra, reuse, batched are bools)
        one = _build_step(loss, static, opt, extra, reuse)
        self.step = eqx.filter_vmap(one) if batched else one

    def __hash__(self):
        return hash(self.parts)

    def __eq__(self, other):
        return isinstance(other, _StepKey) and self.parts == other.parts


def _compiled_step_program(key, diff, state):
    return key.step(diff, state)


# an eager call compiles with XLA:CPU's small-loop threshold raised for this program alone
_compiled_step = top_level_options(_compiled_step_program, small_loops=True)


def _cached_step(loss, static, opt, extra, reuse, batched=False):
    """The jitted iteration, ``step(diff, state)``, shared by calls with equal :class:`_StepKey`
    (a second ``optimize`` of the same loss and shapes neither traces nor compiles)."""
    key = _StepKey(loss, static, opt, extra, reuse, batched)
    return functools.partial(_compiled_step, key)


def _reuses_linesearch(opt, diff):
    """Whether :func:`_build_step` can take the value and gradient from the line search: the
    optimizer has one zoom line search (``optax.lbfgs``) and the parameters are Euclidean (a
    group parameter's chart moves with every step)."""
    if any(_is_gp(x) for x in jax.tree_util.tree_leaves(diff, is_leaf=_is_gp)):
        return False
    return _linesearch_state(jax.eval_shape(opt.init, _lift(diff))) is not None


def _initial_state(opt, diff, reuse):
    opt_state = opt.init(_lift(diff))
    if not reuse:
        return opt_state
    ls = _linesearch_state(opt_state)  # value inf, zero gradient: see _prime
    return opt_state, ls.value, ls.grad


def _prime(step, diff, state):
    """The state ``(opt_state, value, grad)`` of a reusing step (:func:`_build_step`) with the
    value and gradient at ``diff``, from one call of the same compiled step.  The initial state
    has a zero gradient and the value ``inf``: the update direction is zero, so the line search's
    first trial point is ``diff`` itself and is accepted at once (sufficient decrease against
    ``inf`` and zero curvature along a zero direction), having evaluated the value and gradient
    there.  The optimizer state of that call (holding a zero curvature pair) is discarded."""
    _, (_, value, grad), _, _ = step(diff, state)
    return state[0], value, grad


def _canonical_state(opt_state):
    """The initial optimizer state with strongly typed arrays: optax initializes some counters
    and values as weak-typed scalars and the update returns them strongly typed (same dtype),
    which would make the jitted step compile a second time at the second iteration.  (Asking the
    step for its output types instead, by ``eval_shape``, traced the whole step once more: 1.5 s
    of the spacecraft problem's 8.6 s.)"""

    def strong(x):
        if eqx.is_array(x) and getattr(x, "weak_type", False):
            return jnp.asarray(x, dtype=x.dtype)
        return x

    return jax.tree_util.tree_map(strong, opt_state)


def _as_params(params):
    """Array-likes of numbers (a list, a tuple, a Python or numpy number, a numpy array) as one
    floating jax array (integers become the default float); any other pytree as it is."""
    if isinstance(params, list | tuple | int | float | np.ndarray | np.number) and not any(
        isinstance(x, jax.Array | eqx.Module) for x in jax.tree_util.tree_leaves(params)
    ):
        try:
            a = np.asarray(params)
        except (ValueError, TypeError):  # ragged or not numeric: leave it to the pytree path
            return params
        if a.dtype.kind in "biu":
            return jnp.asarray(a, dtype=jnp.result_type(float))
        if a.dtype.kind == "f":
            return jnp.asarray(a)
    return params


def _check_common(steps, patience):
    if not (isinstance(steps, int | np.integer) and steps >= 1):
        raise ValueError(f"optimize: argument 'max_iters' must be a positive int, got {steps!r}")
    if patience is not None and not (isinstance(patience, int | np.integer) and patience >= 1):
        raise ValueError(f"optimize: argument 'patience' must be a positive int, got {patience!r}")


def _loop(
    step, diff, opt_state, steps, target, gtol, patience, min_delta, progress, desc, reduce, reuse
):
    """The host loop: one jitted ``step`` per iteration; returns best diff and the history."""
    bar = None  # created after the first iteration, which compiles (its ETA would be minutes)
    losses, gnorms, times = [], [], []
    best_val, best_diff, since_best = np.inf, diff, 0
    reason, compile_time = "max_iters", 0.0
    t0 = time.perf_counter()
    try:
        if reuse:
            opt_state = _prime(step, diff, opt_state)
        for it in range(steps):
            new_diff, opt_state, value, gnorm = step(diff, opt_state)
            value, gnorm = np.asarray(value), np.asarray(gnorm)  # synchronizes
            now = time.perf_counter() - t0
            if it == 0:
                compile_time = now
                bar = _progress(steps, progress, f"{desc} (compile + 1st step {now:.2f} s)")
            losses.append(value)
            gnorms.append(gnorm)
            times.append(now)
            v = float(reduce(value))
            if not np.isfinite(v):
                reason = "nonfinite"
                break
            if v < best_val * (1 - min_delta) - 0.0:
                since_best = 0
            else:
                since_best += 1
            if v < best_val:
                best_val, best_diff = v, diff
            if bar is not None:
                bar.update(1)
                if it % 10 == 0:
                    bar.set_postfix(loss=f"{v:.3e}", grad=f"{float(reduce(gnorm)):.2e}")
            if target is not None and v <= target:
                reason = "target"
                break
            if gtol is not None and float(reduce(gnorm)) <= gtol:
                reason = "gtol"
                break
            if patience is not None and since_best >= patience:
                reason = "patience"
                break
            diff = new_diff
        else:
            diff = new_diff
    finally:
        if bar is not None:
            bar.close()
    history = {
        "loss": np.asarray(losses),
        "grad_norm": np.asarray(gnorms),
        "time": np.asarray(times),
    }
    return diff, opt_state, best_diff, best_val, history, reason, compile_time, len(losses)


def _final_values(step, diff, opt_state, reuse, reason, history):
    """The loss at the loop's last ``diff``.  After all ``steps`` iterations it is the last
    update's result, not evaluated yet: one more call of the compiled step (its update discarded;
    this avoids compiling the loss on its own), or, when the step reuses the line search's
    values, the value the state already holds.  After an early stop ``diff`` is the iterate the
    history ends with."""
    if not reuse:
        return step(diff, opt_state)[2]
    return opt_state[1] if reason == "max_iters" else history["loss"][-1]


def optimize(
    loss: Callable,
    params,
    optimizer="adam",
    max_iters: int = 500,
    *,
    target: float | None = None,
    gtol: float | None = None,
    patience: int | None = None,
    min_delta: float = 1e-4,
    progress: bool = True,
    export: Callable | None = None,
    steps: int | None = None,
) -> OptimizeResult:
    """Minimize ``loss(params)`` with optax.

    Arguments:
        loss: ``params -> scalar``, differentiable (e.g. through :func:`geomjax.simulate`).
        params: any pytree (equinox Modules included); floating arrays are optimized, other leaves
            are held fixed.  An array-like of numbers (``[1.0, 2.0]``) is taken as one array.  :class:`GroupParam` leaves are updated on their group.
        optimizer: ``"adam"`` (``optax.adam(1e-2)``), ``"lbfgs"`` (``optax.lbfgs()`` with its zoom
            line search; Euclidean parameters only), or any optax ``GradientTransformation``.
        max_iters: maximum number of iterations (the same name as in
            :func:`~geomjax.control.trajopt.solve_ocp`; ``steps=`` is a deprecated alias).
        target: stop once the loss is ``<= target`` (default ``None``: no such test).
        gtol: stop once the gradient norm (the global 2-norm over all optimized leaves) is
            ``<= gtol`` (default ``None``: no such test).
        patience: stop when the loss has not gone below ``(1 − min_delta)`` times the best loss
            so far for this many consecutive iterations (default ``None``: no such test).
        min_delta: the relative decrease that counts as progress for ``patience`` (default 1e-4).
        progress: show a tqdm progress bar (silently off if tqdm is missing).
        export: ``params -> dict of arrays`` stored as numpy in :attr:`OptimizeResult.arrays`.

    Stopping tests, checked every iteration on the loss and gradient at the current parameters,
    in this order; the first that holds ends the run (``stop_reason``, and ``status`` of
    :mod:`geomjax.control.status`):

    * the loss is NaN or inf: ``"nonfinite"``, status 3;
    * ``target``: ``"target"``, status 0;
    * ``gtol``: ``"gtol"``, status 0;
    * ``patience``: ``"patience"``, status 0;
    * ``max_iters`` iterations (default 500) without any of them: ``"max_iters"``, status 1.

    With none of ``target``, ``gtol``, ``patience`` given, a finite run always takes
    ``max_iters`` iterations.  The returned parameters are the best iterate seen in every case.

    Returns:
        :class:`OptimizeResult`.
    """
    steps = renamed(max_iters, steps, "optimize", "max_iters", "steps", default=500)
    _check_common(steps, patience)
    opt, extra, memory = _make_optimizer(optimizer)
    params = _as_params(params)
    diff, static = eqx.partition(params, _filter, is_leaf=_is_gp)
    # L-BFGS's curvature pairs live in one chart; group parameters are re-charted every step
    if memory and any(_is_gp(x) for x in jax.tree_util.tree_leaves(diff, is_leaf=_is_gp)):
        raise ValueError(
            "optimize: L-BFGS (optimizer='lbfgs') needs Euclidean parameters; use 'adam' with GroupParam"
        )
    if not jax.tree_util.tree_leaves(diff):
        raise ValueError(
            "optimize: argument 'params' has no floating-point arrays to optimize, got "
            f"{type(params).__name__} (pass e.g. jnp.array([1.0, 2.0]) or a pytree of arrays)"
        )
    reuse = extra and _reuses_linesearch(opt, diff)
    step = _cached_step(loss, static, opt, extra, reuse)
    opt_state = _canonical_state(_initial_state(opt, diff, reuse))
    diff, opt_state, best_diff, best_val, history, reason, ct, n = _loop(
        step,
        diff,
        opt_state,
        steps,
        target,
        gtol,
        patience,
        min_delta,
        progress,
        "optimize",
        float,
        reuse,
    )
    final_val = float(_final_values(step, diff, opt_state, reuse, reason, history))
    if np.isfinite(final_val) and final_val <= best_val:
        best_val, best_diff = final_val, diff
    out = _combine(best_diff, static)
    arrays = {}
    if export is not None:
        arrays = {k: np.asarray(v) for k, v in export(out).items()}
    return OptimizeResult(out, best_val, history, n, reason, ct, arrays)


def optimize_restarts(
    loss: Callable,
    init: Callable,
    key,
    restarts: int,
    optimizer="adam",
    max_iters: int = 500,
    *,
    target: float | None = None,
    patience: int | None = None,
    min_delta: float = 1e-4,
    progress: bool = True,
    export: Callable | None = None,
    steps: int | None = None,
) -> OptimizeResult:
    """Batched random restarts: ``init(key) -> params`` for ``restarts`` keys, optimized together
    under ``vmap`` (one jitted update per iteration for the whole batch); returns the best.

    Early stopping (``target``, ``patience``) looks at the best loss of the batch.  The history's
    ``loss``/``grad_norm`` are ``(iterations, restarts)``; ``restart_losses`` holds each final loss.
    """
    steps = renamed(max_iters, steps, "optimize_restarts", "max_iters", "steps", default=500)
    _check_common(steps, patience)
    if not (isinstance(restarts, int | np.integer) and restarts >= 1):
        raise ValueError(
            f"optimize_restarts: argument 'restarts' must be a positive int, got {restarts!r}"
        )
    opt, extra, memory = _make_optimizer(optimizer)
    keys = jax.random.split(key, restarts)
    batch = eqx.filter_vmap(init)(keys)
    diff, static = eqx.partition(batch, _filter, is_leaf=_is_gp)
    if memory and any(_is_gp(x) for x in jax.tree_util.tree_leaves(diff, is_leaf=_is_gp)):
        raise ValueError("optimize_restarts: L-BFGS needs Euclidean parameters; use 'adam'")
    reuse = extra and _reuses_linesearch(opt, jax.tree_util.tree_map(lambda x: x[0], diff))
    step = _cached_step(loss, static, opt, extra, reuse, batched=True)
    opt_state = eqx.filter_vmap(lambda d: _initial_state(opt, d, reuse))(diff)
    opt_state = _canonical_state(opt_state)
    diff, opt_state, _, _, history, reason, ct, n = _loop(
        step,
        diff,
        opt_state,
        steps,
        target,
        None,
        patience,
        min_delta,
        progress,
        "restarts",
        np.min,
        reuse,
    )
    finals = np.asarray(_final_values(step, diff, opt_state, reuse, reason, history))
    finals = np.where(np.isfinite(finals), finals, np.inf)
    i = int(np.argmin(finals))
    best = _combine(jax.tree_util.tree_map(lambda x: x[i], diff), static)
    arrays = {}
    if export is not None:
        arrays = {k: np.asarray(v) for k, v in export(best).items()}
    return OptimizeResult(best, float(finals[i]), history, n, reason, ct, arrays, finals)
