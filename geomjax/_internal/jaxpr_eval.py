"""One walk over a jaxpr's equations, parameterised by a table of rules; the dependence passes.

The package evaluates jaxprs in several ways: NumPy on the host (:mod:`.host_eval`), scalar by
scalar into a new trace (:mod:`.scalarize`), JAX's own ``bind`` with small leaves read as their
scalar entries (:mod:`.scalar_entries`).  They differ in what one equation does, not in how a
jaxpr is walked: :class:`Interpreter` is the walk (an environment of values, literals,
the equations in order, a primitive's single or multiple results, the sub-jaxprs of call-like
primitives evaluated by the same interpreter) and each evaluator is its table of rules
(primitive name → rule) with a fallback for the primitives outside it.

The passes that only read a jaxpr's structure live here too: the backward liveness pass
(:func:`live_eqns`, :func:`live_vars`: dead-code elimination, which inputs an output depends
on) and the forward pass that splits equations by what is known (:func:`known_split`: the
reversible adjoint's partial evaluation of a step).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from jax.extend import core as jex_core

__all__ = [
    "CONCRETE_CONTROL_FLOW",
    "SUB_JAXPR",
    "Interpreter",
    "bind",
    "closed_parts",
    "inline_calls",
    "known_split",
    "live_eqns",
    "live_vars",
]

_Literal = jex_core.Literal
_Var = jex_core.Var

#: A rule: ``rule(interpreter, eqn, invals)`` returns what ``eqn.primitive.bind`` would (a list
#: for a primitive with multiple results, else one value).
Rule = Callable


class Interpreter:
    """The walk of a jaxpr, for one table of rules.

    Subclasses set :attr:`rules` (primitive name → :data:`Rule`) and :meth:`fallback` (the
    primitives outside the table), and may override how values enter the environment:
    :meth:`literal` (a ``Literal`` read by an equation), :meth:`const` (a constant of a closed
    sub-jaxpr), :meth:`arg` (an input of a jaxpr) and :meth:`write` (an equation's result)."""

    rules: Mapping[str, Rule] = {}

    def fallback(self, eqn, invals):
        raise NotImplementedError(eqn.primitive.name)

    def literal(self, var):
        return var.val

    def const(self, value):
        return value

    def arg(self, var, value):
        return value

    def write(self, var, value):
        return value

    def call(self, jaxpr, args) -> list:
        """The outputs of ``jaxpr`` (closed, or open without constants) on ``args``."""
        inner, consts = closed_parts(jaxpr)
        return self.eval_jaxpr(inner, [self.const(c) for c in consts], args)

    def eval_jaxpr(self, jaxpr, consts, args) -> list:
        """The outputs of the open ``jaxpr`` on ``consts`` (its constvars' values, as they are)
        and ``args`` (through :meth:`arg`)."""
        env = dict(zip(jaxpr.constvars, consts))
        arg = self.arg
        for var, val in zip(jaxpr.invars, args):
            env[var] = arg(var, val)
        return self.eval_eqns(jaxpr.eqns, env, jaxpr.outvars)

    def eval_eqns(self, eqns, env: dict, outvars) -> list:
        """Evaluate ``eqns`` in order with the values in ``env`` (updated in place); the values
        of ``outvars``."""
        rules, fallback, literal, write = self.rules, self.fallback, self.literal, self.write

        def read(v):
            return literal(v) if isinstance(v, _Literal) else env[v]

        for eqn in eqns:
            invals = [read(v) for v in eqn.invars]
            prim = eqn.primitive
            rule = rules.get(prim.name)
            outs = fallback(eqn, invals) if rule is None else rule(self, eqn, invals)
            if not prim.multiple_results:
                outs = [outs]
            for var, val in zip(eqn.outvars, outs):
                env[var] = write(var, val)
        return [read(v) for v in outvars]


def closed_parts(jaxpr):
    """``(Jaxpr, consts)`` of a ``ClosedJaxpr``, or of an open ``Jaxpr`` without constants."""
    if isinstance(jaxpr, jex_core.ClosedJaxpr):
        return jaxpr.jaxpr, jaxpr.consts
    return jaxpr, ()


def bind(eqn, invals):
    """``eqn``'s primitive bound to ``invals`` in the current trace, as
    ``jax.core.eval_jaxpr`` does (its context, its bind parameters)."""
    params = eqn.primitive.get_bind_params(eqn.params)
    subfuns = []
    if isinstance(params, tuple):  # older jax: (subfuns, params)
        subfuns, params = params
    with eqn.ctx.manager:
        return eqn.primitive.bind(*subfuns, *invals, **params)


# --- call-like primitives and control flow --------------------------------------------------------
def _call_jaxpr(params):
    return params.get("jaxpr") or params["call_jaxpr"]


def _custom_jaxpr(params):
    return params.get("call_jaxpr") or params["fun_jaxpr"]


#: Where the sub-jaxpr of each call-like primitive is (the function evaluated without its
#: custom derivative rules, for the custom-derivative calls).
SUB_JAXPR: dict[str, Callable] = {
    **dict.fromkeys(
        ("jit", "pjit", "closed_call", "core_call", "remat", "checkpoint"), _call_jaxpr
    ),
    **dict.fromkeys(("custom_jvp_call", "custom_vjp_call", "custom_vjp_call_jaxpr"), _custom_jaxpr),
    "custom_vmap_call": lambda params: params["call"],
}


def inline_calls(names) -> dict[str, Rule]:
    """Rules evaluating the sub-jaxpr of each call-like primitive in ``names`` with the same
    interpreter (:meth:`Interpreter.call`)."""

    def rule_for(get):
        def rule(interp, eqn, invals):
            return interp.call(get(eqn.params), invals)

        return rule

    return {name: rule_for(SUB_JAXPR[name]) for name in names}


def _cond(interp, eqn, invals):
    index, *ops = invals
    return interp.call(eqn.params["branches"][int(index)], ops)


def _while(interp, eqn, invals):
    params = eqn.params
    nc, nb = params["cond_nconsts"], params["body_nconsts"]
    cconsts, bconsts, carry = invals[:nc], invals[nc : nc + nb], list(invals[nc + nb :])
    while bool(interp.call(params["cond_jaxpr"], [*cconsts, *carry])[0]):
        carry = interp.call(params["body_jaxpr"], [*bconsts, *carry])
    return carry


#: ``cond`` and ``while`` for interpreters of concrete values (the branch index and the loop
#: predicate are read as Python values).
CONCRETE_CONTROL_FLOW: dict[str, Rule] = {"cond": _cond, "while": _while}


# --- passes over the structure ----------------------------------------------------------------
def live_eqns(eqns, outvars, *, effects: bool = True) -> list:
    """The equations of ``eqns`` whose results reach ``outvars`` (and, with ``effects``, those
    that have effects), in order: dead-code elimination of a jaxpr's equations, a backward
    liveness pass."""
    live = {v for v in outvars if isinstance(v, _Var)}
    kept = []
    for eqn in reversed(eqns):
        if (effects and eqn.effects) or any(isinstance(o, _Var) and o in live for o in eqn.outvars):
            kept.append(eqn)
            live.update(v for v in eqn.invars if isinstance(v, _Var))
    return kept[::-1]


def live_vars(eqns, outvars) -> set:
    """The variables whose values reach ``outvars`` (``outvars`` included; an equation kept
    only for its effects does not count)."""
    live = {v for v in outvars if isinstance(v, _Var)}
    for eqn in live_eqns(eqns, outvars, effects=False):
        live.update(v for v in eqn.invars if isinstance(v, _Var))
    return live


def known_split(eqns, known: set, dep: set) -> tuple[list, list]:
    """A one-level partial evaluation: ``(known_eqns, unknown_eqns)``, in order.  An equation is
    known when it has no effects and all its inputs are in ``known`` (literals are); its outputs
    join ``known`` (updated in place), and ``dep`` (updated in place) when an input is in
    ``dep``.  Equations are kept whole (a call is not entered)."""
    k_eqns, u_eqns = [], []
    for eqn in eqns:
        ins = [v for v in eqn.invars if not isinstance(v, _Literal)]
        if not eqn.effects and all(v in known for v in ins):
            k_eqns.append(eqn)
            known.update(eqn.outvars)
            if any(v in dep for v in ins):
                dep.update(eqn.outvars)
        else:
            u_eqns.append(eqn)
    return k_eqns, u_eqns
