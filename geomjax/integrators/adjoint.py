"""Exact reverse-mode gradients with memory independent of the number of steps, by reversibility.

A symmetric one-step method is its own inverse with the step reversed,
``Φ_{−h}(·; u_k, t_{k+1}) ∘ Φ_h(·; u_k, t_k) = id`` (``method.symmetric``: the LGVI, the rigid-body
splitting, :class:`~geomjax.NonholonomicVI` and their compositions).  :class:`ReversibleAdjoint`
makes :func:`geomjax.simulate` a ``custom_vjp`` whose backward pass does not read a stored
trajectory: from the final state it reconstructs ``x_k = Φ_{−h}(x_{k+1})`` step by step and
accumulates the vector–Jacobian products of the forward step at the reconstructed state,

    x̄_k = (∂Φ_h/∂x)(x_k)^T x̄_{k+1},   θ̄ += (∂Φ_h/∂θ)(x_k)^T x̄_{k+1},   ū_k = (∂Φ_h/∂u)^T x̄_{k+1},

for the parameters ``θ`` (the arrays of the system and the method, ``dt``, ``t0``) and the controls
``u_k``.  This is the reversible-solver adjoint of diffrax (Kidger; McCallum & Foster 2024,
"Efficient, accurate and stable gradients for neural ODEs"), here for integrators on Lie groups
and constraint manifolds where the reverse step is the method itself: the group structure and the
constraints are kept by the reconstruction too.

Exactness.  The VJPs are those of the discrete map (the implicit solves differentiate by the
implicit function theorem), so the gradient equals plain reverse mode up to the reconstruction
error of the states, i.e. the residual of the implicit solves (round-off for converged solves)
amplified by the backward dynamics.  The reconstruction is re-anchored at every *saved* state
(``save_every``): those are outputs of the run anyway, so the reconstruction never spans more than
``save_every`` steps and memory stays ``O(steps / save_every)`` (``O(1)`` with
``save_every = steps``).  :func:`reconstruction_error` measures the error of the initial state
rebuilt from the final one.

When to fall back to ``checkpoint=True``: in a chaotic run the backward reconstruction amplifies
round-off like ``eps · exp(λ_max T)`` (the forward map's largest Lyapunov exponent), and the
gradient's error follows the reconstruction error.  Once :func:`reconstruction_error` over the
span between two saved states is no longer small compared to the accuracy you need from the
gradient (e.g. > 1e-8 relative), save more often — a smaller ``save_every`` re-anchors the
reconstruction at each saved state (memory ``O(steps / save_every)``) — or use
``checkpoint=True``.  Dissipative constrained systems (the Chaplygin sleigh's velocity relaxes
onto an attractor) are the same case: what contracts forwards expands backwards.  Unconverged
implicit solves are not symmetric: check ``Solution.max_residual`` as always.  The errors
found for the free body and the heavy top are in the gradients guide ("How accurate the
reversible adjoint is").

Cost: per step, one reverse step, one forward step (the linearization point) and its VJP (or
the method's hand-written backward step, below); no trajectory is written or read.  The
forward step does not solve again: the reverse step's implicit solutions determine the forward
step's (``method.forward_solutions``: the LGVI's ``ξ_k``, since ``cay(−h ξ') = f_k^{-1}`` gives
``ξ' = ξ_k``; NonholonomicVI's step velocity and its multipliers, exchanged), and the forward
step replays them (:func:`~geomjax.integrators.newton.replay_solutions`: zero Newton
iterations, the implicit-function-theorem derivatives at the handed-over root; what this saves
is in the gradients guide).

Hand-written backward step.  Where the method has one for the system and dtype
(:meth:`~geomjax.integrators.base.GradientHooks.backward_step`), each backward step is the
method's own reverse step and transposed step, written out on scalars, instead of the reverse
step and JAX's VJP of the step (the LGVI for the free body on the SO(3) Cayley path; the
gradients are those of the JAX path to round-off, and it is differentiable like it).

A :class:`~geomjax.Composition` is reversed stage by stage: its step is the base step with
``γ_i h`` at ``t + (γ_1 + … + γ_{i−1}) h``, so the backward step is a reverse scan over the
stages, each a reverse base step and the VJP of the base step at the rebuilt stage state.

Under ``vmap`` the parameter-only part of the step is hoisted out of the backward loop
(:class:`_Invariant`), small state leaves enter the VJP as scalar entries
(:mod:`geomjax._internal.scalar_entries`), the per-step part is pruned of dead code
(:func:`geomjax._internal.jaxpr_eval.live_eqns`) and the backward carry is written as one
vector (:func:`_packed_carry`): each for a measured reason, with the figures, the alternatives
tried and what is left, in the documentation's architecture page ("The reversible adjoint's
backward step").

Not supported (``ValueError``): non-symmetric methods (e.g. :class:`~geomjax.RKMK4`, or a
velocity-dependent external force, whose Heun-type correction is not symmetric: use
``checkpoint=True``), feedback controls ``u(t, state)`` (the reverse step would be implicit).
"""

from __future__ import annotations

import math

import equinox as eqx
import jax
import jax.numpy as jnp

from .._internal.eager import top_level_options
from .._internal.jaxpr_eval import known_split, live_eqns
from .._internal.scalar_entries import (
    ScalarEntries,
    eval_eqns,
    from_scalar_entries,
    is_scalar_entries,
    to_scalar_entries,
)
from .._internal.tracing import vmap_batched
from .._internal.xla_flags import warn_loop_without_setting
from .._linalg import plain_stacks, select_stack
from ._so3_soa import hand_written_derivatives
from .base import AbstractAdjoint, AbstractMethod, GradientHooks, gradient_hooks
from .lgvi import torque_in_carry
from .newton import record_solutions, replay_solutions
from .simulate import _control_chunk, cast_floating, simulate

__all__ = ["ReversibleAdjoint", "reconstruction_error"]


class ReversibleAdjoint(AbstractAdjoint):
    """``simulate(..., adjoint=ReversibleAdjoint())``: reverse-mode gradients through the run
    without storing the trajectory (module docstring).  The forward pass is exactly that of
    ``simulate`` (bitwise); only ``jax.grad``/``jax.vjp`` change.

    Parameters are differentiated as arrays of the system, the method, ``dt``, ``t0`` and the
    controls: a parameter of a user function (a potential, a force) must be a leaf of the
    system's pytree (e.g. ``equinox.Partial(force, c)``), not a traced value closed over.

    Arguments:
        tol: if given, the backward pass raises (``equinox.error_if``) when a state
            reconstructed at a saved state differs from the stored one by more than ``tol``
            (max-norm, absolute) — a cheap in-run check of the reconstruction.
    """

    tol: float | None = eqx.field(static=True, default=None)

    def check(self, system, method, controls) -> None:
        if not isinstance(method, AbstractMethod) or not getattr(method, "symmetric", False):
            raise ValueError(
                f"simulate: adjoint=ReversibleAdjoint() needs a symmetric method (method.symmetric); "
                f"{type(method).__name__} is not: use checkpoint=True"
            )
        base = getattr(method, "base", method)  # a composition's base step
        if _has_external_force(system) and not getattr(base, "symmetric_with_force", False):
            raise ValueError(
                "simulate: adjoint=ReversibleAdjoint() cannot reverse a velocity-dependent external "
                "'force' (the step is not symmetric): use checkpoint=True"
            )
        if callable(controls) and not isinstance(controls, jax.Array):
            raise ValueError(
                "simulate: adjoint=ReversibleAdjoint() does not support feedback controls "
                "u(t, state): use checkpoint=True"
            )

    def run(self, system, method, state0, dt, steps, controls, save_every, t0):
        """Called by :func:`geomjax.simulate` (after its checks and casts)."""
        self.check(system, method, controls)
        args = (state0, system, method, dt, t0, controls)
        return _reversible(args, simulate, steps=steps, save_every=save_every, tol=self.tol)


def _has_external_force(system) -> bool:
    """Whether ``system`` has a user-given external force: the ``force`` attribute of the
    rigid-body systems, the ``force_fn`` of :class:`geomjax.LagrangianSystem` (whose ``force``
    method also returns the control when there is no force)."""
    if hasattr(system, "force_fn"):
        return system.force_fn is not None
    force = getattr(system, "force", None)
    return force is not None and not callable(getattr(type(system), "force", None))


def _primal(args, simulate, *, steps, save_every, tol):
    state0, system, method, dt, t0, controls = args
    return simulate(system, method, state0, dt, steps, controls, save_every, t0, check_inputs=False)


_reversible = eqx.filter_custom_vjp(_primal)


@_reversible.def_fwd
def _fwd(perturbed, args, simulate, *, steps, save_every, tol):
    sol = _primal(args, simulate, steps=steps, save_every=save_every, tol=tol)
    return sol, sol


def _zeros_if_none(ct, like):
    return jax.tree_util.tree_map(
        lambda c, x: jnp.zeros_like(x) if c is None else c, ct, like, is_leaf=lambda c: c is None
    )


def _split(args, perturbed):
    """(the perturbed arrays of (system, method), the rest): only those get a cotangent, the
    others stay constants of the backward pass (no VJP work for them)."""
    _, system, method, *_ = args
    _, p_system, p_method, *_ = perturbed
    return eqx.partition((system, method), (p_system, p_method))


def _advance(method, system, x, dt, u, t, sols=None):
    """``method.advance``, with its implicit solves replayed from ``sols`` (the reverse step's
    recorded solutions) when given."""
    with hand_written_derivatives():  # (see _so3_soa.hand_written_derivatives)
        if sols is None:
            return method.advance(system, x, dt, u, t)
        with replay_solutions(sols):
            return method.advance(system, x, dt, u, t)


def _step_fn(static):
    def step(x, t, params, dt, u, sols=None):
        system, method = eqx.combine(params, static)
        x1, _ = _advance(method, system, x, dt, u, t, sols)
        return x1, t + dt

    return step


def _reverse(static, params, x1, t1, dt, u, handover=False, batched=False):
    """``x_k = Φ_{−h}(x_{k+1}; u_k, t_{k+1})`` (symmetric method); with ``handover``,
    ``(x_k, solutions)``: the solutions of the forward step's implicit solves from ``x_k``
    (``method.forward_solutions`` of the reverse step's, or None where the method does not
    know them)."""
    system, method = eqx.combine(params, static)
    if not handover:
        return method.advance(system, x1, -dt, u, t1)[0]
    if type(gradient_hooks(method)).forward_solutions is GradientHooks.forward_solutions:
        return method.advance(system, x1, -dt, u, t1)[0], None
    with record_solutions(batched) as sols:
        x0, _ = method.advance(system, x1, -dt, u, t1)
    return x0, method.forward_solutions(system, list(sols), x1)


class _Invariant(eqx.Module):
    """The forward step split by data dependence (partial evaluation of its jaxpr) into

    * ``known(params, dt) -> residuals``: what depends on the parameters (and ``dt``) only —
      e.g. the entries of the inertia matrix, ``h/2`` — evaluated once per backward pass, and
    * ``unknown(residuals, x, u, t) -> (x_next, t_next)``: the rest, evaluated every step.

    The backward step differentiates ``unknown`` with respect to the *residuals* that depend on
    the perturbed parameters, accumulates their cotangents, and pulls the sum back through
    ``known`` once at the end (what reverse mode of ``lax.scan`` does for its loop-invariant
    inputs).  Why: the cotangent of a parameter leaf is assembled from the cotangents of the
    scalars the step reads from it (the transpose of ``I[i, i]`` is a ``pad`` into a 3×3 matrix);
    inside the loop, under ``vmap`` (unbatched parameters, batched states: the parameter
    cotangent is per-example), XLA:CPU fused the whole per-step VJP into the loop that writes the
    padded ``(batch, 3, 3)`` cotangent and evaluated it once per matrix entry — 9× the work, the
    cause of the "unbatched parameter" slowdown (profiled: that one fusion took ~0.9 ms of a
    ~1.1 ms backward step at batch 1024, the whole forward step 0.04 ms).  Accumulating the
    residual cotangents (one ``(batch,)`` array per scalar) leaves no pad in the loop.
    """

    known: object  # callable: (params, dt) -> tuple of residuals
    unknown: object  # callable: (residuals, x, u, t) -> (x_next, t_next)
    diff: tuple = eqx.field(static=True)  # indices of the residuals to differentiate


def _diff_residuals(inv, params, dt):
    """The residuals of ``inv.known(params, dt)`` that are differentiated (``inv.diff``), from
    one evaluation of ``known``.  (Written as ``tuple(inv.known(p, d)[i] for i in inv.diff)``
    it was evaluated once per residual, and so was its VJP: the SE(3) LGVI's 37 residuals made
    the final pull-back 37 copies of the 6×6 inverse's derivative, 37 496 of the backward
    pass's ~47 000 jaxpr equations, most of its 26 s compile.)"""
    known = inv.known(params, dt)
    return tuple(known[i] for i in inv.diff)


def _split_invariant(static, params, dt, x, u, t, need_dt, sols=None, dt_known=True):
    """:class:`_Invariant` for the step, or None where the split does not apply (then the
    backward step differentiates with respect to the parameters directly: same gradients).

    The split is a one-level partial evaluation of the step's jaxpr: an equation is *known*
    when all its inputs are (parameters, ``dt``, constants) and it has no effects.  Equations
    are kept whole (unlike ``jax``'s partial evaluation, which would inline the custom JVP of
    the implicit solves and differentiate through the Newton iterations).

    ``sols``: the shapes of the forward step's solutions (a list of pytrees) when the method
    knows them from the reverse step (``method.forward_solutions``): the step is then traced
    with its solves replayed from these extra inputs, and ``unknown`` takes them as a fifth
    argument.

    ``dt_known=False``: the step size is an input of ``unknown`` (its ``dd`` argument), not of
    ``known`` — for the stages of a composition, whose step sizes differ while the parameters'
    part is shared."""
    from jax.extend import core as jc

    p_leaves, p_tree = jax.tree_util.tree_flatten(params)
    u_leaves, u_tree = jax.tree_util.tree_flatten(u)
    x_leaves, x_tree = jax.tree_util.tree_flatten(x)
    s_leaves, s_tree = jax.tree_util.tree_flatten(sols)
    n_p, n_x, n_u = len(p_leaves), len(x_leaves), len(u_leaves)
    out_tree = []

    def flat(*leaves):
        p = jax.tree_util.tree_unflatten(p_tree, leaves[:n_p])
        d = leaves[n_p]
        xx = jax.tree_util.tree_unflatten(x_tree, leaves[n_p + 1 : n_p + 1 + n_x])
        uu = jax.tree_util.tree_unflatten(u_tree, leaves[n_p + 1 + n_x : n_p + 1 + n_x + n_u])
        tt = leaves[n_p + 1 + n_x + n_u]
        ss = jax.tree_util.tree_unflatten(s_tree, leaves[n_p + 2 + n_x + n_u :])
        system, method = eqx.combine(p, static)
        x1, _ = _advance(method, system, xx, d, uu, tt, ss)
        out, tree = jax.tree_util.tree_flatten((x1, tt + d))
        out_tree[:] = [tree]
        return out

    def sds(a):
        return jax.ShapeDtypeStruct(jnp.shape(a), jnp.result_type(a))

    try:
        closed = jax.make_jaxpr(flat)(
            *map(sds, [*p_leaves, dt, *x_leaves, *u_leaves, t, *s_leaves])
        )
        jaxpr = closed.jaxpr
        known = set(jaxpr.constvars) | set(jaxpr.invars[: n_p + dt_known])
        dep = set(jaxpr.invars[:n_p]) | ({jaxpr.invars[n_p]} if need_dt and dt_known else set())
        k_eqns, u_eqns = known_split(jaxpr.eqns, known, dep)
        u_eqns = live_eqns(u_eqns, jaxpr.outvars)
        # residuals: known values read by the per-step part (or returned by it)
        res, seen = [], set()
        for v in [*(w for e in u_eqns for w in e.invars), *jaxpr.outvars]:
            if not isinstance(v, jc.Literal) and v in known and v not in seen:
                seen.add(v)
                res.append(v)
        if not k_eqns and dt_known:
            return None
        jk = jc.ClosedJaxpr(
            jc.Jaxpr(
                jaxpr.constvars, jaxpr.invars[: n_p + 1], res, k_eqns, frozenset(), jaxpr.debug_info
            ),
            closed.consts,
        )
    except Exception:  # an unusual jaxpr: no split, same gradients
        return None
    diff = tuple(
        i for i, v in enumerate(res) if v in dep and jnp.issubdtype(v.aval.dtype, jnp.inexact)
    )
    # the split pays unless the residual cotangents (carried per step, batched under vmap) are
    # much larger than the parameters' (e.g. a large matrix precomputed from a few parameters);
    # NonholonomicVI on the sleigh: ~100 residual entries for 3 parameters, 6% faster than the
    # direct VJP (measured, batch 256)
    n_params = sum(math.prod(jnp.shape(a)) for a in p_leaves)
    if sum(math.prod(res[i].aval.shape) for i in diff) > max(4 * n_params, 1024):
        return None
    f_known = jc.jaxpr_as_fun(jk)
    tree = out_tree[0]
    x_vars = jaxpr.invars[n_p + 1 : n_p + 1 + n_x]

    def known_fn(p, d):
        return tuple(f_known(*jax.tree_util.tree_leaves(p), d))

    def unknown_fn(r, xx, uu, tt, ss=None, dd=None):
        env = dict(zip(res, r))
        if not dt_known:
            env[jaxpr.invars[n_p]] = dd
        for v, a in zip(x_vars, jax.tree_util.tree_leaves(xx, is_leaf=is_scalar_entries)):
            env[v] = a
        rest = [*jax.tree_util.tree_leaves(uu), tt, *jax.tree_util.tree_leaves(ss)]
        for v, a in zip(jaxpr.invars[n_p + 1 + n_x :], rest, strict=True):
            env[v] = a
        out = eval_eqns(u_eqns, env, jaxpr.outvars)
        return jax.tree_util.tree_unflatten(tree, out)

    try:  # the evaluation too (abstractly): an unusual equation falls back, never fails later
        jax.eval_shape(
            lambda p, d, xx, uu, tt, ss: unknown_fn(
                known_fn(p, d), to_scalar_entries(xx), uu, tt, ss, None if dt_known else d
            ),
            *jax.tree_util.tree_map(sds, (params, dt, x, u, t, sols)),
        )
    except Exception:
        return None
    return _Invariant(known_fn, unknown_fn, diff)


#: the most scalar entries :func:`_packed_carry` packs (a select chain costs one select per entry
#: and output entry; the LGVI's backward carry has 27–30)
_PACK_MAX = 32


def _packed_carry(carry):
    """``(vector, unpack)``: the backward step's carry as one vector of its scalar entries,
    written by one select chain (:func:`geomjax._linalg.select_stack`), or None when it does not
    apply (entries of several dtypes, more than :data:`_PACK_MAX` entries).

    Why: every carry entry the step writes is an output of the loop body, and XLA:CPU fuses each
    into its own kernel, re-evaluating the producers they share (the reverse step's solution, the
    adjoint solve) in each (``_Invariant``'s note).  A single fused output evaluates them once.
    Where it was found slower (float32; :class:`~geomjax.NonholonomicVI`'s 35 entries) it is not
    applied, hence the method's opt-in (``packs_reverse_carry``).  The figures and the forms
    tried and not adopted are in the documentation's architecture page ("The reversible
    adjoint's backward step")."""
    leaves, treedef = jax.tree_util.tree_flatten(carry)
    if not leaves or len({jnp.result_type(a) for a in leaves}) != 1:
        return None
    sizes = [math.prod(jnp.shape(a)) for a in leaves]
    if sum(sizes) > _PACK_MAX:
        return None
    shapes = [jnp.shape(a) for a in leaves]

    def pack(c):
        return select_stack(
            [e for a in jax.tree_util.tree_leaves(c) for e in jnp.reshape(a, (-1,))]
        )

    def unpack(v):
        out, k = [], 0
        for sh, n in zip(shapes, sizes):
            out.append(jnp.reshape(v[k : k + n], sh))
            k += n
        return jax.tree_util.tree_unflatten(treedef, out)

    return pack, unpack


def _scan_maybe_packed(body, carry, xs, pack, **kw):
    """``jax.lax.scan(body, carry, xs, **kw)``, with the carry packed into one vector
    (:func:`_packed_carry`) when ``pack`` and it applies."""
    packed = _packed_carry(carry) if pack else None
    if packed is None:
        return jax.lax.scan(body, carry, xs, **kw)
    to_vec, unpack = packed

    def packed_body(v, x):
        c, out = body(unpack(v), x)
        return to_vec(c), out

    v, out = jax.lax.scan(packed_body, to_vec(carry), xs, **kw)
    return unpack(v), out


def _max_abs_diff(a, b):
    return jnp.max(
        jnp.stack(
            [
                jnp.max(jnp.abs(x - y), initial=0.0)
                for x, y in zip(jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b))
            ]
        )
    )


def _composition_stages(method):
    """``(base method, stage coefficients)`` of a (nested) :class:`~geomjax.Composition`: its step
    is the base step with ``γ_i h`` at ``t + (γ_1 + … + γ_{i−1}) h``, stage after stage; None for
    any other method."""
    from .composition import Composition

    if not isinstance(method, Composition):
        return None
    inner = _composition_stages(method.method)
    base, sub = inner if inner is not None else (method.method, (1.0,))
    return base, tuple(float(g) * d for g in method.coefficients for d in sub)


def _with_base(method, base):
    """``method`` (a nested composition, possibly partitioned) with its innermost method
    (:attr:`~geomjax.Composition.base`) replaced by ``base``."""
    from .composition import Composition

    if not isinstance(method, Composition):
        return base
    inner = _with_base(method.method, base)
    return eqx.tree_at(lambda m: m.method, method, inner, is_leaf=lambda x: x is None)


@_reversible.def_bwd
def _bwd(sol, ct_sol, perturbed, args, simulate, *, steps, save_every, tol):
    # whether the backward pass is vmapped, told here from the arguments' tracers: inside the
    # compiled program below a vmapped call is traced with unbatched values
    batched = vmap_batched(sol, ct_sol, args, if_unknown=False)
    return _bwd_program(
        sol, ct_sol, perturbed, args, simulate,
        steps=steps, save_every=save_every, tol=tol, batched=batched,
    )  # fmt: skip


def _bwd_with_plain_stacks(
    sol, ct_sol, perturbed, args, simulate, *, steps, save_every, tol, batched
):  # fmt: skip
    # plain stacks in the backward pass (geomjax._linalg.plain_stacks: the reconstructed state
    # feeds the VJP in the same iteration, where a select chain would be duplicated)
    # the LGVI's SO(3) kernel without its carried torque (lgvi.torque_in_carry: with it, the
    # backward carry also holds the torque's cotangent; measured slower)
    with plain_stacks(), torque_in_carry(False):
        return _bwd_traced(
            sol, ct_sol, perturbed, args, simulate,
            steps=steps, save_every=save_every, tol=tol, batched=batched,
        )  # fmt: skip


#: the backward pass as one program: under an eager ``jax.grad`` it runs at top level, where it
#: was evaluated operation by operation (its scan compiled anew on every call: 0.5 s for the
#: free body's 1e4 steps, against 1.3 ms compiled); compiled with XLA:CPU's small-loop
#: threshold raised for it alone.  Under an outer jit/vmap it is traced into the caller's
#: program as before, on every trace (not from a cache of traces), where XLA:CPU's defaults
#: leave its loop a loop of kernels (a reverse step touches more than 1 kB): warned once
_bwd_program = top_level_options(
    _bwd_with_plain_stacks,
    small_loops=True,
    jit_under_trace=False,
    traced_without_setting=lambda *args, **kwargs: warn_loop_without_setting(),
)


def _bwd_traced(sol, ct_sol, perturbed, args, simulate, *, steps, save_every, tol, batched):
    # batched: whether the backward pass is vmapped (a layout choice only: see one_step_manual)
    state0, system, method, dt, _, controls = args
    params, static = _split(args, perturbed)
    step = _step_fn(static)
    n_save = steps // save_every
    dtype = dt.dtype
    ct_states = _zeros_if_none(ct_sol.states, sol.states)
    if ct_sol._final_state is not None:  # Solution.final_state is the last saved state
        ct_states = jax.tree_util.tree_map(
            lambda a, b: a.at[-1].add(b),
            ct_states,
            _zeros_if_none(ct_sol._final_state, sol._final_state),
        )
    ct_ts = jnp.zeros_like(sol.times) if ct_sol.times is None else ct_sol.times

    def to_carry(s, t=0.0):
        # t: the seed of methods that carry a predictor (NonholonomicVI's acceleration)
        return method.init(system, s, t)

    # cotangents of the saved (finalized) states, pulled back to the internal carry layout
    def ct_to_carry(s, ct):
        _, vjp = jax.vjp(lambda c: method.finalize(system, c), to_carry(s))
        return vjp(ct)[0]

    later = jax.tree_util.tree_map(lambda a: a[1:], sol.states)
    earlier = jax.tree_util.tree_map(lambda a: a[:-1], sol.states)
    ct_later = jax.tree_util.tree_map(lambda a: a[1:], ct_states)
    if controls is None:
        ublocks = None
    else:
        ublocks = jax.tree_util.tree_map(
            lambda u: jnp.reshape(u, (n_save, save_every, *u.shape[1:])), controls
        )

    # only what is differentiated gets a VJP (the rest stays a constant of the backward pass)
    _, _, _, p_dt, p_t0, p_controls = perturbed
    need_dt = bool(p_dt)
    need_t = need_dt or bool(p_t0)
    need_u = controls is not None and any(jax.tree_util.tree_leaves(p_controls))

    x_shape = to_carry(state0)
    u_shape = None if ublocks is None else jax.tree_util.tree_map(lambda a: a[0, 0], ublocks)
    t_shape = jnp.zeros((), dtype)
    # the forward step's solutions from the reverse step, handed to the forward linearization
    # (no second Newton solve per backward step: the module docstring; its cost: the gradients
    # guide and the architecture page)
    sol_shapes = jax.eval_shape(
        lambda x1, t1, u: _reverse(static, params, x1, t1, dt, u, handover=True)[1],
        x_shape,
        t_shape,
        u_shape,
    )
    handover = sol_shapes is not None
    # a hand-written backward step where the method has one for this system and dtype
    # (method.backward_step: the free-body SO(3) LGVI), else the reverse step and JAX's VJP
    manual = gradient_hooks(method).backward_step(system, dtype)
    if manual is not None:
        m_params, m_backward = manual
        need_p = bool(jax.tree_util.tree_leaves(params))
        p_vals = m_params(eqx.combine(params, static)[0])
        inv = None
    else:
        inv = _split_invariant(static, params, dt, x_shape, u_shape, t_shape, need_dt, sol_shapes)
    if inv is not None:
        residuals = inv.known(params, dt)
        res_d = tuple(residuals[i] for i in inv.diff)

    # a composition: its backward step runs stage by stage with the base method (reverse stage,
    # VJP of the stage), so the base step's split and scalar state apply (whole-step VJP of the
    # scan over stages: 8.5x the forward run, Composition(LGVI, "yoshida4"), batch 1024)
    stages = None if manual is not None else _composition_stages(method)
    if stages is not None:
        # (Composition.base works on the partitioned halves too)
        b_static, b_params = (static[0], static[1].base), (params[0], params[1].base)
        b_sols = jax.eval_shape(
            lambda x1, t1, u: _reverse(b_static, b_params, x1, t1, dt, u, handover=True)[1],
            x_shape,
            t_shape,
            u_shape,
        )
        b_inv = _split_invariant(
            b_static, b_params, dt, x_shape, u_shape, t_shape, need_dt, b_sols, dt_known=False
        )
        if b_inv is None:
            stages = None  # the whole-step backward below
        else:
            # the parameters' part is shared by the stages (the stage step size is an input of
            # the per-step part), so one set of residual cotangents is carried through them
            inv, handover = b_inv, b_sols is not None
            gammas = jnp.asarray(stages[1], dtype)
            residuals = inv.known(b_params, dt)
            res_d = tuple(residuals[i] for i in inv.diff)

    def to_ct(a):
        return a if inv is None and manual is None else to_scalar_entries(a)

    # measured faster in float64 only (see _packed_carry)
    packer = method if stages is None else stages[0]
    pack_carry = gradient_hooks(packer).packs_reverse_carry and dtype == jnp.float64

    def reverse(x1, t1, u, d=dt, static_=static, params_=params):
        # (x_k, the forward step's solutions from the reverse step's or None)
        if handover:
            return _reverse(static_, params_, x1, t1, d, u, handover=True, batched=batched)
        return _reverse(static_, params_, x1, t1, d, u), None

    def hoisted_vjp(x1, t1, ct_x, ct_t, u, static_, params_, gamma=None):
        """Reverse step and the VJP of the step at the rebuilt state with respect to the
        loop-invariant residuals (see _Invariant): ``(x0, t0, ct_x0, ct_t0, ct_residuals, ct_u,
        ct_dt)``.  With ``gamma``, a composition's stage: step ``gamma·dt``, an input of the
        per-step part (its ``dt`` cotangent returned when needed, else None)."""
        d = dt if gamma is None else gamma * dt
        x0, sols = reverse(x1, t1, u, d, static_, params_)
        t0_ = t1 - d
        stage_dt = gamma is not None and need_dt

        def f(x, rd, *extra):
            extra = list(extra)
            uu = extra.pop(0) if need_u else u
            tt = extra.pop(0) if need_t else t0_
            dd = extra.pop(0) * gamma if stage_dt else d
            full = list(residuals)
            for i, r in zip(inv.diff, rd):
                full[i] = r
            kw = {} if gamma is None else {"dd": dd}
            x_next, t_next = inv.unknown(full, x, uu, tt, sols, **kw)
            return (x_next, t_next) if need_t else x_next

        extra = [v for v, need in ((u, need_u), (t0_, need_t), (dt, stage_dt)) if need]
        # the state as scalar entries, its cotangent carried likewise (see ScalarEntries)
        _, vjp = jax.vjp(f, to_scalar_entries(x0), res_d, *extra)
        ct_x = from_scalar_entries(ct_x)
        cts = list(vjp((ct_x, ct_t) if need_t else ct_x))
        rest = cts[2:]
        ct_u = rest.pop(0) if need_u else None
        ct_t0 = rest.pop(0) if need_t else ct_t
        ct_d = rest.pop(0) if stage_dt else None
        return x0, t0_, cts[0], ct_t0, cts[1], ct_u, ct_d

    def one_step_hoisted(c, u):
        x1, t1, ct_x, ct_t, ct_r, ct_dt = c
        x0, t0_, ct_x0, ct_t0, ct_rk, ct_u, _ = hoisted_vjp(x1, t1, ct_x, ct_t, u, static, params)
        ct_r = jax.tree_util.tree_map(jnp.add, ct_r, ct_rk)
        return (x0, t0_, ct_x0, ct_t0, ct_r, ct_dt), ct_u

    def one_step(c, u):
        x1, t1, ct_x, ct_t, ct_p, ct_dt = c
        x0, sols = reverse(x1, t1, u)
        t0_ = t1 - dt

        def f(x, p, *extra):
            extra = list(extra)
            uu = extra.pop(0) if need_u else u
            tt = extra.pop(0) if need_t else t0_
            dd = extra.pop(0) if need_dt else dt
            x_next, t_next = step(x, tt, p, dd, uu, sols)
            return (x_next, t_next) if need_t else x_next

        extra = [v for v, need in ((u, need_u), (t0_, need_t), (dt, need_dt)) if need]
        _, vjp = jax.vjp(f, x0, params, *extra)
        cts = list(vjp((ct_x, ct_t) if need_t else ct_x))
        ct_x0, ct_pk = cts[0], cts[1]
        rest = cts[2:]
        ct_u = rest.pop(0) if need_u else None
        ct_t0 = rest.pop(0) if need_t else ct_t
        ct_dtk = rest.pop(0) if need_dt else jnp.zeros_like(ct_dt)
        ct_p = jax.tree_util.tree_map(jnp.add, ct_p, ct_pk)
        return (x0, t0_, ct_x0, ct_t0, ct_p, ct_dt + ct_dtk), ct_u

    def one_step_manual(c, u):
        # the method's reverse step and VJP of the step at the rebuilt state, by hand
        x1, t1, ct_x, ct_t, ct_r, ct_dt = c
        x0, ct_x0, ct_rk, ct_h, ct_u = m_backward(p_vals, x1, dt, u, ct_x.entries, need_p, need_dt)
        if need_p:
            ct_r = tuple(a + b for a, b in zip(ct_r, ct_rk))
        if need_dt:  # t_{k+1} = t_k + dt
            ct_dt = ct_dt + ct_h + ct_t
        if need_u:
            # vmapped: the entries as separate outputs, stacked after the loop (one (batch,)
            # vector each instead of a (batch, 3) row written per step; free body, batch 1024,
            # 100 steps, gradient with the controls: 6.4x -> 4.3x the forward); unbatched one
            # vector (a tuple costs a kernel per entry: 2.9x -> 3.6x at batch 1)
            ct_u = tuple(ct_u) if batched else jnp.stack(ct_u)
        else:
            ct_u = None
        return (x0, t1 - dt, ScalarEntries(tuple(ct_x0), ct_x.shape), ct_t, ct_r, ct_dt), ct_u

    def one_step_stages(c, u):
        # a composed step backwards: its stages in reverse order, one residual set for all
        def stage(sc, gamma):
            x1, t1, ct_x, ct_t, ct_r, ct_dt = sc
            x0, t0_, ct_x0, ct_t0, ct_rk, ct_u, ct_d = hoisted_vjp(
                x1, t1, ct_x, ct_t, u, b_static, b_params, gamma
            )
            ct_r = jax.tree_util.tree_map(jnp.add, ct_r, ct_rk)
            ct_dt = ct_dt if ct_d is None else ct_dt + ct_d
            return (x0, t0_, ct_x0, ct_t0, ct_r, ct_dt), ct_u

        c, ct_us = _scan_maybe_packed(stage, c, gammas, pack_carry, reverse=True)
        ct_u = None if ct_us is None else jax.tree_util.tree_map(lambda a: a.sum(0), ct_us)
        return c, ct_u

    def block(c, xs):
        ct_x, ct_t, ct_p, ct_dt, worst = c
        s_end, s_start, ct_end, t_end, ct_t_end, us = xs
        # the saved state at the end of the block: its output cotangent, and the anchor
        x = to_carry(s_end, t_end)
        ct_x = jax.tree_util.tree_map(jnp.add, ct_x, to_ct(ct_to_carry(s_end, ct_end)))
        ct_t = ct_t + ct_t_end
        body = one_step if inv is None else one_step_hoisted
        if manual is not None:
            body = one_step_manual
        if stages is not None:
            body = one_step_stages  # (its stage loop packs, see one_step_stages)
        carry = (x, t_end, ct_x, ct_t, ct_p, ct_dt)
        pack = pack_carry and stages is None
        if chunk > 1:
            # the block's controls in chunks of a few steps, as simulate's forward loop reads
            # them (simulate._control_chunk: a per-step slice of the whole block costs more)
            def steps_of_chunk(c, uc):
                return _scan_maybe_packed(body, c, uc, pack, length=chunk, reverse=True)

            carry, ct_us = jax.lax.scan(
                steps_of_chunk,
                carry,
                jax.tree_util.tree_map(
                    lambda u: jnp.reshape(u, (save_every // chunk, chunk, *u.shape[1:])), us
                ),
                reverse=True,
            )
            ct_us = jax.tree_util.tree_map(
                lambda a: jnp.reshape(a, (save_every, *a.shape[2:])), ct_us
            )
        else:
            carry, ct_us = _scan_maybe_packed(
                body, carry, us, pack, length=save_every, reverse=True
            )
        (x, _, ct_x, ct_t, ct_p, ct_dt) = carry
        if isinstance(ct_us, tuple):  # one_step_manual's entries
            ct_us = jnp.stack(ct_us, axis=-1)
        err = _max_abs_diff(method.finalize(system, x), s_start)
        worst = jnp.where(jnp.isnan(err), err, jnp.maximum(worst, err))
        return (ct_x, ct_t, ct_p, ct_dt, worst), ct_us

    c0 = (
        to_ct(jax.tree_util.tree_map(jnp.zeros_like, x_shape)),
        jnp.zeros((), dtype),
        (
            (tuple(map(jnp.zeros_like, p_vals)) if need_p else ())
            if manual is not None
            else jax.tree_util.tree_map(jnp.zeros_like, params if inv is None else res_d)
        ),
        jnp.zeros((), dtype),
        jnp.zeros((), dtype),
    )
    chunk = 1 if batched else _control_chunk(ublocks, save_every)
    xs = (later, earlier, ct_later, sol.times[1:], ct_ts[1:], ublocks)
    (ct_x, ct_t, ct_p, ct_dt, worst), ct_us = jax.lax.scan(
        block, c0, xs, length=n_save, reverse=True
    )
    # the initial state: pulled back through method.init, plus its own output cotangent
    ct_x = from_scalar_entries(ct_x)
    _, vjp_init = jax.vjp(to_carry, state0)
    ct_state0 = vjp_init(ct_x)[0]
    ct_state0 = jax.tree_util.tree_map(
        jnp.add, ct_state0, jax.tree_util.tree_map(lambda a: a[0], ct_states)
    )
    if tol is not None:
        msg = (
            "ReversibleAdjoint: the reconstructed trajectory left the stored one by more than tol; "
            "save more often (smaller save_every) or use checkpoint=True"
        )
        ct_state0 = jax.tree_util.tree_map(
            lambda a: eqx.error_if(a, ~(worst <= tol), msg), ct_state0
        )
    ct_controls = None
    if need_u:
        ct_controls = jax.tree_util.tree_map(lambda a, u: jnp.reshape(a, u.shape), ct_us, controls)
    if manual is not None:  # the accumulated cotangents of the step's parameters, pulled back once
        ct_r = ct_p if need_p else tuple(map(jnp.zeros_like, p_vals))
        _, vjp_p = jax.vjp(lambda p: m_params(eqx.combine(p, static)[0]), params)
        (ct_p,) = vjp_p(ct_r)
    elif stages is not None:  # pulled back to the base method's parameters, once
        _, vjp_known = jax.vjp(lambda p: _diff_residuals(inv, p, dt), b_params)
        (ct_b,) = vjp_known(ct_p)
        # the method's cotangent has the composition's structure (its arrays are the base's)
        ct_p = (ct_b[0], _with_base(params[1], ct_b[1]))
    elif inv is not None:  # the residual cotangents pulled back to the parameters, once
        _, vjp_known = jax.vjp(lambda p, d: _diff_residuals(inv, p, d), params, dt)
        ct_p, ct_dt_known = vjp_known(ct_p)
        if need_dt:
            ct_dt = ct_dt + ct_dt_known
    ct_system, ct_method = ct_p
    return (ct_state0, ct_system, ct_method, ct_dt, ct_t + ct_ts[0], ct_controls)


def reconstruction_error(system, method, state0, dt, steps: int, controls=None, t0=0.0):
    """Max-norm error of the initial state rebuilt from the final one by ``steps`` reverse steps
    (what :class:`ReversibleAdjoint` does between two saved states): round-off times the
    backward amplification.  Compare it with the accuracy you need from the gradient.

    Returns ``(error, reconstructed_state0)``."""
    ReversibleAdjoint().check(system, method, controls)
    sol = simulate(system, method, state0, dt, steps, controls, save_every=steps, t0=t0)
    dtype = sol.times.dtype
    dt = jnp.asarray(dt, dtype)
    system = cast_floating(system, dtype)
    params, static = eqx.partition((system, method), eqx.is_inexact_array)

    def back(c, u):
        x, t = c
        return (_reverse(static, params, x, t, dt, u), t - dt), None

    us = (
        None
        if controls is None
        else jax.tree_util.tree_map(lambda u: jnp.asarray(u, dtype), controls)
    )
    (x, _), _ = jax.lax.scan(
        back,
        (method.init(system, sol.final_state, sol.times[-1]), sol.times[-1]),
        us,
        length=steps,
        reverse=True,
    )
    rec = method.finalize(system, x)
    return _max_abs_diff(rec, state0), rec
