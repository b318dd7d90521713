"""Small state leaves as their scalar entries, and a jaxpr evaluator that reads them.

Under ``vmap``, XLA:CPU fuses a whole vector–Jacobian product into the loops that write the
cotangents of *sliced* arrays (the transpose of ``c[i]`` is a ``pad``) and recomputes it once
per array entry.  Passed as its scalar entries (one array per entry, batched under ``vmap``),
a small leaf gets one cotangent array per entry instead of a sum of pads.  Used by the
reversible adjoint's backward step (:mod:`geomjax.integrators.adjoint`).
"""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp

__all__ = [
    "ScalarEntries",
    "eval_eqns",
    "from_scalar_entries",
    "is_scalar_entries",
    "to_scalar_entries",
]


class ScalarEntries(eqx.Module):
    """A small state leaf passed to the backward step as its scalar entries (one array per
    entry, batched under ``vmap``): the step reads its entries by slicing, whose transpose is a
    ``pad``; fed as scalars, the VJP returns one cotangent array per entry instead of a sum of
    pads, which XLA:CPU fused with the whole VJP and recomputed per entry (12× on the SO(3)
    carry)."""

    entries: tuple
    shape: tuple = eqx.field(static=True)

    @classmethod
    def of(cls, a):
        flat = jnp.reshape(a, (-1,))
        return cls(tuple(flat[i] for i in range(flat.shape[0])), tuple(jnp.shape(a)))

    def array(self):
        return jnp.reshape(jnp.stack(self.entries), self.shape)


def is_scalar_entries(a):
    return isinstance(a, ScalarEntries)


def to_scalar_entries(tree, max_size=64):
    return jax.tree_util.tree_map(
        lambda a: ScalarEntries.of(a) if 0 < jnp.size(a) <= max_size else a, tree
    )


def from_scalar_entries(tree):
    return jax.tree_util.tree_map(
        lambda a: a.array() if is_scalar_entries(a) else a, tree, is_leaf=is_scalar_entries
    )


def eval_eqns(eqns, env, outvars):
    """Evaluate jaxpr equations (``jax.core.eval_jaxpr``), where a :class:`ScalarEntries` value read
    by a unit-stride ``slice`` of a vector gives the stacked entries (no slicing to transpose)
    and anywhere else the stacked array."""
    from jax.extend import core as jc

    def read(v):
        if isinstance(v, jc.Literal):
            return v.val
        a = env[v]
        return a.array() if is_scalar_entries(a) else a

    for eqn in eqns:
        v0 = eqn.invars[0] if eqn.invars else None
        if (
            eqn.primitive.name == "slice"
            and not isinstance(v0, jc.Literal)
            and is_scalar_entries(env.get(v0))
        ):
            a, p = env[eqn.invars[0]], eqn.params
            if len(a.shape) == 1 and all(s in (None, 1) for s in (p.get("strides") or ())):
                (lo,), (hi,) = p["start_indices"], p["limit_indices"]
                env[eqn.outvars[0]] = jnp.stack(a.entries[lo:hi])
                continue
        invals = [read(v) for v in eqn.invars]
        params = eqn.primitive.get_bind_params(eqn.params)
        subfuns = []
        if isinstance(params, tuple):  # older jax: (subfuns, params)
            subfuns, params = params
        with eqn.ctx.manager:
            ans = eqn.primitive.bind(*subfuns, *invals, **params)
        if not eqn.primitive.multiple_results:
            ans = [ans]
        for v, a in zip(eqn.outvars, ans):
            env[v] = a
    return [read(v) for v in outvars]
