"""Newton solves with a bounded iteration count and implicit-function-theorem derivatives.

Variational integrators are implicit: every step solves a small nonlinear system ``r(x; a) = 0``.
We run at most ``iters`` Newton iterations — a fixed number, or (``early_exit=True``, what the
integrators use on CPU) until the update has reached round-off, with one loop predicate for a
whole ``vmap`` batch, so every batch member does the same work — and return the final residual
so that the caller can see whether the solve converged.

Derivatives never go through the iterations.  With ``x*(a)`` the solution, the implicit function
theorem gives ``dx* = -(∂r/∂x)^{-1} (∂r/∂a) da``; :func:`newton_solve` implements exactly this as
a custom JVP (linear in the tangents, hence also transposable for reverse mode).  This is both
cheaper and more accurate than backpropagating through the unrolled iterations.

:func:`record_solutions` / :func:`replay_solutions` are a trace-time tape of the solutions:
:class:`geomjax.ReversibleAdjoint` records the reverse step's and replays them in the forward
step it differentiates (zero iterations at a known root).
"""

from __future__ import annotations

import contextlib
import functools
import os
import threading
from collections.abc import Callable

import equinox as eqx
import jax
import jax.numpy as jnp
from jax.ad_checkpoint import checkpoint_name

from .._internal.scalarize import Scalarized, ScalarTuples
from .._internal.tracing import vmap_batched
from .._linalg import forward_jacobian, small_solve

__all__ = ["dense_jac_solve", "newton_solve", "record_solutions", "replay_solutions"]

# The solution tape of ReversibleAdjoint (trace-time bookkeeping, per thread): while recording,
# every newton_solve appends its solution; while replaying, every newton_solve takes the next
# one as its solution (zero iterations, derivatives by the implicit function theorem there).
_TAPE = threading.local()


@contextlib.contextmanager
def record_solutions(batched: bool = False):
    """Within the block, every :func:`newton_solve` that is traced appends its solution (the
    final iterate, an array or pytree) to the yielded list.  ``batched``: whether the traced
    computation is vmapped (a layout hint for the methods: :func:`recording_solutions`)."""
    prev = getattr(_TAPE, "state", None)
    tape: list = []
    _TAPE.state = ("record", tape, bool(batched))
    try:
        yield tape
    finally:
        _TAPE.state = prev


@contextlib.contextmanager
def replay_solutions(solutions):
    """Within the block, the ``i``-th :func:`newton_solve` that is traced takes ``solutions[i]``
    as its root: ``iters = 0`` from that guess, so the result is the given solution and the
    derivatives are the implicit-function-theorem derivatives at it — exact when the entry
    solves the system (:class:`geomjax.ReversibleAdjoint` hands the reverse step's solutions to
    the forward linearization this way).  Raises unless every entry is used."""
    prev = getattr(_TAPE, "state", None)
    tape = list(solutions)
    _TAPE.state = ("replay", tape)
    try:
        yield
    finally:
        _TAPE.state = prev
    if tape:
        raise RuntimeError(
            f"replay_solutions: {len(tape)} recorded solution(s) were not used: the step "
            "traced fewer newton_solve calls than the recording"
        )


def _tape():
    return getattr(_TAPE, "state", None)


def recording_solutions(batched: bool | None = None) -> bool:
    """Whether :func:`newton_solve` calls traced now are recorded by :func:`record_solutions`
    (:class:`geomjax.ReversibleAdjoint`'s reverse step: a method may then choose the solver of
    its reconstruction, e.g. the LGVI's chord iterations); with ``batched``, whether they are
    recorded in a computation declared vmapped (``True``) or not (``False``)."""
    tape = _tape()
    if tape is None or tape[0] != "record":
        return False
    return batched is None or tape[2] == bool(batched)


def replaying_solutions() -> bool:
    """Whether :func:`newton_solve` calls traced now take their roots from
    :func:`replay_solutions` (a method may then pick the layout of its unknowns for the
    derivatives rather than for the iterations, which do not run)."""
    tape = _tape()
    return tape is not None and tape[0] == "replay"


def _as_structure(value, like):
    """A replayed root in the structure of the guess: a ``(k,)`` array recorded from a vector
    solve becomes a tuple of ``k`` scalars when the replaying solve carries one."""
    if isinstance(like, tuple) and not isinstance(value, tuple) and jnp.ndim(value) == 1:
        return tuple(value[i] for i in range(jnp.shape(value)[0]))
    return value


def dense_jac_solve(residual: Callable, columns: bool = False) -> Callable:
    """Default ``jac_solve``: forward-mode Jacobian of ``residual`` and a dense linear solve.

    ``columns=True`` forms the Jacobian by one linearization and unrolled JVPs
    (:func:`geomjax._linalg.forward_jacobian`) instead of ``jax.jacfwd``: the same numbers, and
    on CPU faster for residuals built from small matrix products (the generic-group LGVI on
    SE(3): 2.7 against 6.4 µs per unbatched step), slower for cheap scalar residuals (DEL on
    the double pendulum: 1.6 against 1.1 µs), so each method chooses by measurement."""

    def jac_solve(x, args, r):
        if columns:
            return small_solve(forward_jacobian(lambda y: residual(y, args), x), r)
        return small_solve(jax.jacfwd(residual, argnums=0)(x, args), r)

    return jac_solve


def _tree_sub(a, b):
    return jax.tree_util.tree_map(lambda x, y: x - y, a, b)


def _unroll_iterations() -> bool:
    """Unroll the fixed Newton iterations (accelerators) or keep them in a loop (CPU).

    ``GEOMJAX_NEWTON_UNROLL=1`` / ``0`` forces the unrolled / rolled form (read when a function is
    traced, so that a benchmark can compile and time both on the same device); anything else,
    or unset, is ``auto``."""
    forced = os.environ.get("GEOMJAX_NEWTON_UNROLL", "auto").strip().lower()
    if forced in ("1", "true", "unrolled"):
        return True
    if forced in ("0", "false", "rolled"):
        return False
    return jax.default_backend() != "cpu"


def unroll_scalar_iterations(x) -> bool:
    """Unroll a scalar iteration (the SO(3) kernel's Newton solve) here?  As
    :func:`_unroll_iterations`, and on CPU also when XLA's small-loop setting is not in effect
    in this process (:func:`geomjax._internal.xla_flags.small_loops_in_effect`: the default, unless
    opted in before JAX's first computation) and ``x`` is one unbatched scalar: a rolled loop is then
    a ``while`` of separately dispatched kernels inside every step, which costs more than the
    iterations' few dozen flops (the free body's LGVI, 1e5 steps saved every 100th, 2-core
    CPU, no setting: 27-29 ms rolled, 8-15 ms unrolled; with the setting 6 ms rolled).  Batched
    (vmapped) iterates stay rolled: unrolled, XLA:CPU's fusion recomputes the chain of
    iterations in every output kernel (batch 1024: 91 -> 203 ms)."""
    forced = os.environ.get("GEOMJAX_NEWTON_UNROLL", "auto").strip().lower()
    if forced in ("1", "true", "unrolled", "0", "false", "rolled") or _unroll_iterations():
        return _unroll_iterations()
    from .._internal.xla_flags import small_loops_traced

    return not small_loops_traced() and jnp.ndim(x) == 0 and not vmap_batched(x, if_unknown=True)


def unroll_iterations() -> bool:
    """Whether :func:`newton_solve`'s fixed iterations are unrolled here (accelerators, or
    ``GEOMJAX_NEWTON_UNROLL=1``), where ``early_exit`` does not apply."""
    return _unroll_iterations()


def _max_abs_leaves(tree):
    # a chain of elementwise maxima (no stacking kernel for a tuple of scalars)
    return functools.reduce(
        jnp.maximum, [jnp.max(jnp.abs(a)) for a in jax.tree_util.tree_leaves(tree)]
    )


@jax.custom_batching.custom_vmap
def any_member(flag):
    return flag


@any_member.def_vmap
def _any_member_vmap(axis_size, in_batched, flag):
    # the loop goes on while any member of a batch goes on: an unbatched loop predicate, so the
    # batched loop body updates every member (no select between the members' old and new
    # iterates: a converged member takes one more Newton step, a round-off change)
    return jnp.any(flag), False


def _newton_until_converged(x0, args, residual, jac_solve, iters, chord=False):
    """At most ``iters`` Newton iterations, stopping after the first whose relative update
    ``rel = |dx|_∞ / |x|_∞`` has ``rel² ≤ 0.01 eps``: with quadratic convergence the next update
    would be ``~ rel² |x|``, below round-off, so the iteration it saves changes nothing but the
    last bits.  In float32 and below the test is ``rel ≤ 4 eps`` (the error left, ``~ rel²``,
    has one sign and adds up over a long run; see the threshold below).  (A residual test would need the scale of the residual, which only the caller
    knows.)  Under ``jax.vmap`` the loop runs until every member has stopped, and every member
    iterates until then (:func:`any_member`): a member that had stopped takes a Newton step
    more, which changes its root by round-off.  (A batched predicate would make the loop select
    between each member's old and new iterates on every iteration: measured at batch 1024, the
    free-body LGVI 32 → 58 ns per body-step, the sleigh's NonholonomicVI 43 → 50.)"""
    finfo = jnp.finfo(jax.tree_util.tree_leaves(x0)[0].dtype)
    tiny, eps = finfo.tiny, float(finfo.eps)
    # float64: rel² ≤ 0.01 eps.  float32 and below: rel ≤ 4 eps, an update at round-off.  The
    # error left after the last iteration, ~rel², is below round-off either way, but it has
    # one sign (quadratic convergence from the same side), so over a run it adds up linearly:
    # float32 LGVI, free body, dt 0.01, 1e5 steps, energy drift 4.4e-6 with rel² ≤ 0.01 eps
    # (~1e-9 a step) and none with this test; in float64 the same sum stays ~1e-13 over 1e5.
    # chord (linear convergence, the next update ~ rate · rel): rel ≤ 4 eps in every dtype
    threshold = 0.01 * eps if finfo.bits > 32 and not chord else 16.0 * eps * eps

    def cond(carry):
        # the test reads the two iterates the loop carries: computed in the body from the
        # update, XLA:CPU would recompute the whole Jacobian solve inside the test's kernel
        # (its fusion duplicates elementwise producers; 70 ns of a 440 ns unbatched step of
        # the ball on a turntable)
        i, x_prev, x = carry
        rel = _max_abs_leaves(_tree_sub(x, x_prev)) / (_max_abs_leaves(x) + tiny)
        return any_member((i == 0) | ((i < iters) & (rel * rel > threshold)))

    def body(carry):
        i, _, x = carry
        # chord: the Jacobian at the guess, loop-invariant (XLA hoists it out of the loop)
        return i + 1, x, _tree_sub(x, jac_solve(x0 if chord else x, args, residual(x, args)))

    _, _, x = jax.lax.while_loop(cond, body, (0, x0, x0))
    return x


@eqx.filter_custom_jvp
def _newton(x0, args, *, residual, jac_solve, iters, chord=False, early_exit=False, name=None):
    if early_exit and iters > 1 and not _unroll_iterations():
        x = _newton_until_converged(x0, args, residual, jac_solve, iters, chord)
        return x, residual(x, args)

    def body(_, x):
        # chord: the Jacobian at the initial guess for every iteration; it is loop-invariant,
        # and XLA hoists it out of the loop (NonholonomicVI: 15–35% cheaper steps, measured)
        return _tree_sub(x, jac_solve(x0 if chord else x, args, residual(x, args)))

    # On CPU a rolled loop on purpose: XLA's CPU fusion duplicates elementwise producers into
    # every consumer, so an unrolled chain of iterations is recomputed inside each output fusion
    # (measured on the SO(3) LGVI step: 4x the arithmetic, half the speed on one core; again
    # with the scalarized residuals and scalar-tuple iterates, NonholonomicVI on the ball on a
    # turntable, ns per body-step rolled -> unrolled: 3920 -> 5075 unbatched, 329 -> 1117 at
    # batch 1024, GEOMJAX_NEWTON_UNROLL=1, 2-core CPU, float64); the loop carry materializes
    # each iterate once.  On accelerators a device-side loop costs kernel
    # launches and a predicate round trip per iteration while recomputation is cheap, so the
    # iterations stay unrolled there (a choice by that cost model; the CPU figures above are the
    # only ones measured).
    if iters == 0:  # the root given (the LGVI's scalar solve, a replayed solution): no loop
        return x0, residual(x0, args)
    x = jax.lax.fori_loop(0, iters, body, x0, unroll=_unroll_iterations())
    return x, residual(x, args)


@_newton.def_jvp
def _newton_jvp(
    primals, tangents, *, residual, jac_solve, iters, chord=False, early_exit=False, name=None
):
    x0, args = primals
    _, t_args = tangents
    options = dict(iters=iters, chord=chord, early_exit=early_exit)
    x, r = _newton(x0, args, residual=residual, jac_solve=jac_solve, **options)
    if name is not None:
        # the root as the derivatives and the caller see it: a jax.checkpoint policy that saves
        # this name recomputes the derivatives (and the caller's rest) from the saved root,
        # without the iterations
        x = checkpoint_name(x, name)
    zeros = jax.tree_util.tree_map(jnp.zeros_like, (x, r))
    if t_args is None:
        return (x, r), zeros
    # implicit function theorem: J dx + (∂r/∂a) da = 0 at the solution
    _, r_dot = eqx.filter_jvp(lambda a: residual(x, a), (args,), (t_args,))
    if r_dot is None:  # every tangent was a symbolic zero (e.g. only stop_gradient'ed inputs)
        return (x, r), zeros
    # a pytree residual (a tuple of scalars) may have symbolic-zero entries: materialize them
    r_dot = jax.tree_util.tree_map(
        lambda d, ri: jnp.zeros_like(ri) if d is None else d, r_dot, r, is_leaf=lambda a: a is None
    )
    # J(x, a)^{-1} with x and a differentiable: a second derivative sees d(J^{-1}) (with them
    # stopped, the LGVI's Hessians were off by ~1e-3 relative; the first derivative is the same)
    dx = jax.tree_util.tree_map(jnp.negative, jac_solve(x, args, r_dot))
    return (x, r), (dx, zeros[1])


def newton_solve(
    residual: Callable,
    x0,
    args,
    *,
    iters: int,
    jac_solve: Callable,
    chord=False,
    scalarize: bool = False,
    early_exit: bool = False,
    name: str | None = None,
):
    """Solve ``residual(x, args) = 0`` by ``iters`` Newton iterations from ``x0``.

    Arguments:
        residual: ``(x, args) -> r``, ``x`` and ``r`` pytrees of the same structure.
        x0: initial guess (its derivative is irrelevant and ignored).
        args: pytree of parameters; floating-point leaves are differentiated via the implicit
            function theorem.
        iters: iteration count (the maximum with ``early_exit``).
        chord: keep the Jacobian of the first iteration (at ``x0``) for all of them (the chord
            method: one Jacobian instead of ``iters``; convergence is linear, error
            ``O(e0^(k+1))`` after ``k`` iterations from a guess with error ``e0``, against
            ``O(e0^(2^k))`` for Newton).  Only the iterations change: the implicit-function-
            theorem derivatives still use the Jacobian at the solution.
        jac_solve: ``(x, args, r) -> J(x)^{-1} r`` (closed form on hot paths, or
            :func:`dense_jac_solve`).  Must be linear in ``r``: it is reused for the tangents.
        scalarize: for a vector ``x0`` ``(k,)`` and a residual of the same shape: evaluate
            ``residual`` and ``jac_solve`` scalar by scalar (geomjax's scalarizer,
            the same numbers to round-off) and carry the iterate through the loop as ``k``
            scalars.  On XLA:CPU under ``jax.vmap``
            every unknown is then one contiguous ``(batch,)`` vector instead of a strided
            column of a ``(batch, k)`` carry (``geomjax bench scalarize`` measures it).
        early_exit: stop once converged, after at most ``iters`` iterations: after the first
            iteration whose relative update ``rel`` has ``rel² ≤ 0.01 eps`` (the next update of
            a quadratically convergent iteration, ``~ rel² |x|``, would be below round-off; in
            float32 and below ``rel ≤ 4 eps``, since the error left has one sign and a long run
            adds it up).  The same result to round-off and the same derivatives (implicit function theorem);
            the final residual is still returned.  Only where the iterations are a rolled loop
            (CPU; the unrolled accelerator form keeps ``iters``).  With ``chord`` (linear
            convergence: the next update is the rate times this one, not its square) the test
            is ``rel ≤ 4 eps`` in every dtype: the iterations run until the update is at
            round-off.  Under ``jax.vmap`` the loop runs until every member has stopped
            (the members that stopped earlier iterate on: a round-off change of their roots).

        name: under differentiation, tag the root with ``jax.ad_checkpoint.checkpoint_name``
            (where its derivatives are formed, inside the custom JVP): a ``jax.checkpoint``
            policy that saves this name (:meth:`geomjax.integrators.GradientHooks.reverse_mode_saves`)
            then recomputes the derivatives from the saved root, not the iterations.  Tagged
            outside, the name would sit on a copy of the root that the derivatives do not read.

    Both callables are static arguments of the custom JVP: pass functions (or hashable
    modules) whose identity is stable across calls.

    Returns:
        ``(x, r)``: the final iterate and the residual there (report it to the caller).
    """
    tape = _tape()
    if tape is not None and tape[0] == "replay":
        if not tape[1]:
            raise RuntimeError(
                "replay_solutions: the step traced more newton_solve calls than were recorded"
            )
        x0, iters = _as_structure(tape[1].pop(0), x0), 0
    x, r = newton_solve_impl(
        residual, x0, args, iters, jac_solve, chord, scalarize, early_exit, name
    )
    if tape is not None and tape[0] == "record":
        tape[1].append(x)
    return x, r


def newton_solve_impl(
    residual, x0, args, iters, jac_solve, chord, scalarize, early_exit, name=None
):
    options = dict(iters=iters, chord=chord, early_exit=early_exit, name=name)
    if scalarize:
        x0 = jnp.asarray(x0)
        if x0.ndim != 1:
            raise ValueError(
                f"newton_solve: scalarize=True needs a vector x0 (k,), got shape {x0.shape}"
            )
        x, r = _newton(
            tuple(x0[i] for i in range(x0.shape[0])),
            args,
            residual=Scalarized(ScalarTuples(residual)),
            jac_solve=Scalarized(ScalarTuples(jac_solve, (0, 2))),
            **options,
        )
        return jnp.stack(x), jnp.stack(r)
    return _newton(x0, args, residual=residual, jac_solve=jac_solve, **options)
