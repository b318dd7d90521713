"""Small state leaves as their scalar entries, and a jaxpr evaluator that reads them.

Under ``vmap``, XLA:CPU fuses a whole vector–Jacobian product into the loops that write the
cotangents of *sliced* arrays (the transpose of ``c[i]`` is a ``pad``) and recomputes it once
per array entry.  Passed as its scalar entries (one array per entry, batched under ``vmap``),
a small leaf gets one cotangent array per entry instead of a sum of pads.  Used by the
reversible adjoint's backward step (:mod:`geomjax.integrators.adjoint`).  The evaluator is the
walk of :class:`geomjax._internal.jaxpr_eval.Interpreter` with one rule (``slice``) and JAX's
own ``bind`` for every other primitive.
"""

from __future__ import annotations

from typing import ClassVar

import equinox as eqx
import jax
import jax.numpy as jnp

from .jaxpr_eval import Interpreter, bind

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


def _array(a):
    return a.array() if is_scalar_entries(a) else a


def _slice(interp, eqn, invals):
    """A unit-stride slice of a vector of scalar entries: the stacked entries it reads."""
    a, p = invals[0], eqn.params
    if (
        is_scalar_entries(a)
        and len(a.shape) == 1
        and all(s in (None, 1) for s in (p.get("strides") or ()))
    ):
        (lo,), (hi,) = p["start_indices"], p["limit_indices"]
        return jnp.stack(a.entries[lo:hi])
    return interp.fallback(eqn, invals)


class _Entries(Interpreter):
    """JAX's own evaluation (``bind``), reading :class:`ScalarEntries` as their stacked array
    except where a ``slice`` reads a vector of them."""

    rules: ClassVar[dict] = {"slice": _slice}

    def fallback(self, eqn, invals):
        return bind(eqn, [_array(a) for a in invals])


_ENTRIES = _Entries()


def eval_eqns(eqns, env, outvars):
    """Evaluate jaxpr equations (``jax.core.eval_jaxpr``), where a :class:`ScalarEntries` value read
    by a unit-stride ``slice`` of a vector gives the stacked entries (no slicing to transpose)
    and anywhere else the stacked array.  ``env`` (variable → value) is updated in place."""
    return [_array(a) for a in _ENTRIES.eval_eqns(eqns, env, outvars)]
