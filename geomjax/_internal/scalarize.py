"""Scalarized ("structure of arrays") evaluation of small array programs.

The per-step functions of mechanics work on arrays of a handful of entries (a 3×3 rotation, a
5-vector of velocities, a 7×7 saddle system).  Written with ``jnp`` on such arrays, a step
compiles on XLA:CPU into one kernel per slice, concatenate, reduction, transpose and tiny
product: ~100–500 kernels per step, each a pass over memory (at batch 1024 the ``(B, 3, 3)``
layouts also vectorize poorly).  The same arithmetic written on *scalars* is purely elementwise:
XLA fuses it into a few kernels, and under ``jax.vmap`` every scalar becomes one contiguous
``(B,)`` vector (the batch-last layout that hand-written kernels use).  :mod:`geomjax.integrators._so3_soa`
does this by hand for the SO(3) LGVI; :func:`scalarize` does it for any function.

:func:`scalarize` traces ``fun`` to a jaxpr (``jax.make_jaxpr``) and evaluates that jaxpr once
more, entry by entry (the walk of :class:`geomjax._internal.jaxpr_eval.Interpreter`, with this
module's rules): every array value is held as a NumPy object array of JAX scalars, every
primitive is applied to the scalars it reads (``dot_general`` and reductions become explicit
sums of products; slices, reshapes, transposes, broadcasts and concatenations become NumPy
bookkeeping at trace time and cost nothing at run time; gathers, scatters and pads with constant
indices become the selections they are).  The outputs are joined by one fused kernel
(:func:`geomjax._linalg.stack_scalars`).

* The same primitives on the same numbers: results agree with ``fun`` to round-off (sums of
  products may associate differently from XLA's ``dot``; products with the constant 0 or 1 and
  sums with 0 — the unit tangents of forward-mode Jacobians — are folded at trace time, so
  ``0 · inf`` gives 0 where ``fun`` gives NaN).
* Every transformation applies to the result (it is ordinary JAX code): ``jit``, ``vmap``,
  ``jvp``, ``grad``.  Derivatives are those of the same primitives.
* Programs with primitives that have no scalar form here (loops, ``cond``, custom derivative
  rules, sorting, data-dependent indexing, non-constant integer arithmetic on indices, a
  structural primitive with a parameter its rule does not read) are not scalarized:
  :func:`scalarize` falls back to ``fun`` itself (checked at trace time), so it is always safe
  to apply.
* The scalar program of a function that is a value (an equinox module with hashable fields, a
  function without a closure) is cached per shapes, dtypes and static arguments: the same
  residual traced again (inside a Newton loop and at its root, in another compilation of the
  same system) costs one ``jax.core.eval_jaxpr``.  A function that reads a tracer of the
  enclosing trace is never cached.  As with ``jax.jit``'s own cache, a global that the function
  reads and that is redefined later (a notebook cell) is not seen: the key is the function.
* Meant for small arrays (the trace grows with the number of entries, and with the product of
  the sizes for ``dot_general``): arrays above ``max_size`` entries also fall back.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from .._linalg import stack_scalars
from .jaxpr_eval import Interpreter, inline_calls
from .program_cache import ProgramCache
from .tracing import is_traced

__all__ = [
    "ScalarTuples",
    "Scalarized",
    "Unsupported",
    "scalarize",
    "scalarized_jaxpr_eval",
]


class Unsupported(Exception):
    """A primitive (or an array size) that :func:`scalarize` does not handle."""


# elementwise primitives: applied scalar by scalar with the same parameters
_ELEMENTWISE = frozenset(
    """abs acos acosh add add_any and asin asinh atan atan2 atanh cbrt ceil clamp conj
    convert_element_type copy copy_p cos cosh digamma div eq erf erf_inv erfc exp exp2 expm1 floor
    ge gt imag integer_pow is_finite le lgamma log log1p logistic lt max min mul ne neg nextafter
    not or pow real reduce_precision rem round rsqrt select_n sign sin sinh sqrt square
    stop_gradient sub tan tanh xor""".split()
)
_CALLS = ("jit", "pjit", "closed_call", "core_call")
_REDUCERS = {
    "reduce_sum": "add",
    "reduce_max": "max",
    "reduce_min": "min",
    "reduce_prod": "mul",
    "reduce_and": "and",
    "reduce_or": "or",
}
_CUMULATIVE = {"cumsum": "add", "cumprod": "mul", "cummax": "max", "cummin": "min"}
# data / index operands of indexing primitives (linear in their data operands)
_INDEXING = {
    "gather": ((0,), (1,)),
    "dynamic_slice": ((0,), None),
    "dynamic_update_slice": ((0, 1), None),
    "scatter": ((0, 2), (1,)),
    "scatter-add": ((0, 2), (1,)),
}
_NUMPY = {
    "add": np.add,
    "add_any": np.add,
    "sub": np.subtract,
    "mul": np.multiply,
    "neg": np.negative,
    "max": np.maximum,
    "min": np.minimum,
    "eq": np.equal,
    "ne": np.not_equal,
    "lt": np.less,
    "le": np.less_equal,
    "gt": np.greater,
    "ge": np.greater_equal,
    "abs": np.abs,
    "copy": lambda x: x,
    "copy_p": lambda x: x,
    "stop_gradient": lambda x: x,
}


def _is_const(x) -> bool:
    return isinstance(x, np.generic)


def _const(value, dtype):
    return np.asarray(value, dtype=dtype)[()]


def _as_jax(x):
    return jnp.asarray(x, dtype=x.dtype) if _is_const(x) else x


def _is_value(x, value) -> bool:
    return _is_const(x) and not np.issubdtype(x.dtype, np.bool_) and x == value


class _Evaluator(Interpreter):
    """Values are NumPy object arrays of scalars (JAX scalars, or NumPy scalars for constants)."""

    def __init__(self, max_size):
        self.max_size = max_size

    # --- values -------------------------------------------------------------------------------
    def split(self, x, aval=None):
        """An object array of scalars from an array (concrete or traced)."""
        shape = tuple(np.shape(x)) if aval is None else tuple(aval.shape)
        size = math.prod(shape)
        if size > self.max_size:
            raise Unsupported(f"array of {size} entries (max_size {self.max_size})")
        dtype = np.dtype(x.dtype if aval is None else aval.dtype)
        if not is_traced(x):  # a constant: NumPy scalars, folded at trace time
            arr = np.asarray(x, dtype=dtype)
            out = np.empty(shape, object)
            for idx in np.ndindex(shape):
                out[idx] = arr[idx]
            return out
        out = np.empty(shape, object)
        if size == 0:
            return out
        if shape == ():
            out[()] = x
            return out
        parts = jax.lax.unstack(jnp.reshape(x, (size,)), axis=0)
        for i, idx in enumerate(np.ndindex(shape)):
            out[idx] = parts[i]
        return out

    def join(self, arr, aval):
        shape, dtype = tuple(aval.shape), aval.dtype
        flat = list(arr.reshape(-1)) if arr.size else []
        if not flat:
            return jnp.zeros(shape, dtype)
        if all(_is_const(v) for v in flat):
            return jnp.asarray(np.array(flat, dtype=dtype).reshape(shape))
        if shape == ():
            return jnp.asarray(_as_jax(flat[0]), dtype)
        vals = [jnp.asarray(_as_jax(v), dtype) for v in flat]
        return jnp.reshape(stack_scalars(vals), shape)

    # --- scalar arithmetic with constant folding ----------------------------------------------
    def apply(self, prim, params, xs, dtype):
        name = prim.name
        if all(_is_const(x) for x in xs):
            if name in _NUMPY:
                return _const(_NUMPY[name](*xs), dtype)
            if name == "convert_element_type":
                return _const(xs[0], dtype)
            if name == "select_n":
                return _const(xs[1 + int(xs[0])], dtype)
            with jax.ensure_compile_time_eval():
                out = prim.bind(*[jnp.asarray(x, dtype=x.dtype) for x in xs], **params)
            return _const(np.asarray(out), dtype)
        # folding the constants 0 and 1 (forward-mode Jacobians seed unit tangents)
        if name == "mul":
            a, b = xs
            if _is_value(a, 0) or _is_value(b, 0):
                return _const(0, dtype)
            if _is_value(a, 1) and b.dtype == dtype:
                return b
            if _is_value(b, 1) and a.dtype == dtype:
                return a
        elif name in ("add", "add_any"):
            a, b = xs
            if _is_value(a, 0) and b.dtype == dtype:
                return b
            if _is_value(b, 0) and a.dtype == dtype:
                return a
        elif name == "sub":
            a, b = xs
            if _is_value(b, 0) and a.dtype == dtype:
                return a
            if _is_value(a, 0):
                return self.apply(jax.lax.neg_p, None, [b], dtype)
        elif name == "div":
            if _is_value(xs[0], 0):
                return _const(0, dtype)
        elif name == "select_n":
            pred, *cases = xs
            if _is_const(pred):
                return cases[int(pred)]
            if all(c is cases[0] for c in cases):
                return cases[0]
        elif name == "convert_element_type":
            if xs[0].dtype == dtype:
                return xs[0]
        elif name in ("copy", "copy_p"):
            return xs[0]
        if params is None:  # an operation of the scalarization itself (sums of products)
            return _LAX[name](*[_as_jax(x) for x in xs])
        return prim.bind(*[_as_jax(x) for x in xs], **params)

    def fold(self, name, values, dtype):
        prim = _PRIMS[name]
        acc = values[0]
        for v in values[1:]:
            acc = self.apply(prim, None, [acc, v], dtype)
        return acc

    # --- the interpreter (the walk: geomjax._internal.jaxpr_eval; the rules: _RULES) ----------
    def literal(self, var):
        return self.split(var.val, var.aval)

    def const(self, value):  # a constant of a called jaxpr
        return self.split(value)

    def write(self, var, value):
        if math.prod(var.aval.shape) > self.max_size:
            raise Unsupported(f"an intermediate of shape {var.aval.shape}")
        return value

    def fallback(self, eqn, invals):
        raise Unsupported(f"primitive {eqn.primitive.name!r}")

    def pad(self, x, value, config, shape):
        lo_max = [max(lo, 0) for lo, _, _ in config]
        full_shape = [
            max(lo, 0) + (n - 1) * (interior + 1) + 1 + max(hi, 0) if n else max(lo, 0) + max(hi, 0)
            for (lo, hi, interior), n in zip(config, x.shape)
        ]
        out = np.empty(full_shape, object)
        out.fill(value)
        dst = tuple(
            slice(lo, lo + (n - 1) * (it + 1) + 1, it + 1)
            for lo, (_, _, it), n in zip(lo_max, config, x.shape)
        )
        if x.size:
            out[dst] = x
        crop = tuple(
            slice(-lo if lo < 0 else 0, full - (-hi if hi < 0 else 0))
            for (lo, hi, _), full in zip(config, full_shape)
        )
        out = out[crop]
        assert out.shape == shape
        return out

    def dot_general(self, lhs, rhs, dimension_numbers, aval):
        (lc, rc), (lb, rb) = dimension_numbers
        lf = [i for i in range(lhs.ndim) if i not in lc and i not in lb]
        rf = [i for i in range(rhs.ndim) if i not in rc and i not in rb]
        nb = math.prod(lhs.shape[i] for i in lb)
        nk = math.prod(lhs.shape[i] for i in lc)
        nm = math.prod(lhs.shape[i] for i in lf)
        nn = math.prod(rhs.shape[i] for i in rf)
        L = np.transpose(lhs, [*lb, *lf, *lc]).reshape(nb, nm, nk)
        R = np.transpose(rhs, [*rb, *rc, *rf]).reshape(nb, nk, nn)
        dtype = aval.dtype
        out = np.empty((nb, nm, nn), object)
        mul = _PRIMS["mul"]
        for b in range(nb):
            for m in range(nm):
                for n in range(nn):
                    terms = [
                        self.apply(
                            mul, None, [_cast(L[b, m, k], dtype), _cast(R[b, k, n], dtype)], dtype
                        )
                        for k in range(nk)
                    ]
                    out[b, m, n] = self.fold("add", terms, dtype) if terms else _const(0, dtype)
        return out.reshape(aval.shape)

    def cumulative(self, x, axis, reverse, op, aval):
        moved = np.moveaxis(x, axis, -1)
        out = np.empty(moved.shape, object)
        for idx in np.ndindex(moved.shape[:-1]):
            n = moved.shape[-1]
            order = range(n - 1, -1, -1) if reverse else range(n)
            acc = None
            for i in order:
                v = moved[(*idx, i)]
                acc = v if acc is None else self.apply(_PRIMS[op], None, [acc, v], aval.dtype)
                out[(*idx, i)] = acc
        return np.moveaxis(out, -1, axis)

    def reduce(self, x, axes, op, aval):
        keep = [i for i in range(x.ndim) if i not in axes]
        moved = np.transpose(x, [*keep, *axes]).reshape(*(x.shape[i] for i in keep), -1)
        out = np.empty(aval.shape, object)
        for idx in np.ndindex(tuple(aval.shape)):
            vals = list(moved[idx])
            if not vals:
                raise Unsupported("reduction over an empty axis")
            out[idx] = self.fold(op, vals, aval.dtype)
        return out

    def indexing(self, eqn, ins):
        """Gathers, dynamic slices and scatters with constant indices: linear maps of their data
        operands, whose 0/1 matrix is found by differentiating the primitive at trace time."""
        name = eqn.primitive.name
        data_pos, _ = _INDEXING[name]
        idx_pos = [i for i in range(len(ins)) if i not in data_pos]
        for i in idx_pos:
            if not all(_is_const(v) for v in ins[i].reshape(-1)):
                raise Unsupported(f"{name} with traced indices")
        aval = eqn.outvars[0].aval
        dtype = aval.dtype
        if not jnp.issubdtype(dtype, jnp.inexact):
            raise Unsupported(f"{name} on {dtype}")
        sizes = [ins[i].size for i in data_pos]
        shapes = [ins[i].shape for i in data_pos]
        idx_vals = {
            i: np.array(ins[i].tolist(), dtype=eqn.invars[i].aval.dtype).reshape(ins[i].shape)
            for i in idx_pos
        }

        def f(flat):
            parts = jnp.split(flat, np.cumsum(sizes)[:-1])
            operands = []
            for i in range(len(ins)):
                if i in idx_vals:
                    operands.append(jnp.asarray(idx_vals[i]))
                else:
                    j = data_pos.index(i)
                    operands.append(parts[j].reshape(shapes[j]))
            return eqn.primitive.bind(*operands, **eqn.params).reshape(-1)

        with jax.ensure_compile_time_eval():
            M = np.asarray(jax.jit(jax.jacfwd(f))(jnp.zeros((sum(sizes),), dtype)))
        src = (
            np.concatenate([ins[i].reshape(-1) for i in data_pos]) if sizes else np.empty(0, object)
        )
        mul = _PRIMS["mul"]
        out = np.empty(M.shape[0], object)
        for r in range(M.shape[0]):
            cols = np.nonzero(M[r])[0]
            terms = [
                self.apply(mul, None, [_cast(src[c], dtype), _const(M[r, c], dtype)], dtype)
                for c in cols
            ]
            out[r] = self.fold("add", terms, dtype) if terms else _const(0, dtype)
        return out.reshape(aval.shape)


def _cast(x, dtype):
    if _is_const(x):
        return _const(x, dtype)
    return x if x.dtype == dtype else jax.lax.convert_element_type(x, dtype)


_LAX = {
    "mul": jax.lax.mul,
    "add": jax.lax.add,
    "max": jax.lax.max,
    "min": jax.lax.min,
    "and": jax.lax.bitwise_and,
    "or": jax.lax.bitwise_or,
    "neg": jax.lax.neg,
}
_PRIMS = {
    "mul": jax.lax.mul_p,
    "add": jax.lax.add_p,
    "max": jax.lax.max_p,
    "min": jax.lax.min_p,
    "and": jax.lax.and_p,
    "or": jax.lax.or_p,
}


# --- the rules: one per primitive, as jaxpr_eval.Interpreter calls them -------------------------
def _out(eqn):
    aval = eqn.outvars[0].aval
    return aval, tuple(aval.shape)


def _elementwise(ev, eqn, ins):
    aval, shape = _out(eqn)
    prim, p, dtype, apply = eqn.primitive, eqn.params, aval.dtype, ev.apply
    arrays = [np.broadcast_to(a, shape) for a in ins]
    out = np.empty(shape, object)
    for idx in np.ndindex(shape):
        out[idx] = apply(prim, p, [a[idx] for a in arrays], dtype)
    return out


def _broadcast_in_dim(ev, eqn, ins):
    _, shape = _out(eqn)
    (x,) = ins[:1]
    expanded = [1] * len(shape)
    for src, dst in enumerate(eqn.params["broadcast_dimensions"]):
        expanded[dst] = x.shape[src]
    return np.broadcast_to(x.reshape(expanded), shape)


def _reshape(ev, eqn, ins):
    # ``dimensions`` (a permutation applied before the row-major reshape) is set by JAX's own
    # rules, e.g. the forward-mode rule of ``reduce_prod`` over a non-leading axis
    x, perm = ins[0], eqn.params.get("dimensions")
    if perm is not None:
        x = np.transpose(x, perm)
    return x.reshape(_out(eqn)[1])


def _squeeze(ev, eqn, ins):
    return ins[0].reshape(_out(eqn)[1])


def _slice(ev, eqn, ins):
    p = eqn.params
    strides = p["strides"] or (1,) * len(p["start_indices"])
    sl = tuple(slice(s, e, st) for s, e, st in zip(p["start_indices"], p["limit_indices"], strides))
    return ins[0][sl]


def _unstack(ev, eqn, ins):  # slices, not np.take: a 1-D input must give 0-d object arrays
    moved = np.moveaxis(ins[0], eqn.params["axis"], 0)
    return [moved[i : i + 1].reshape(moved.shape[1:]) for i in range(len(eqn.outvars))]


def _iota(ev, eqn, ins):
    aval, shape = _out(eqn)
    dim = eqn.params["dimension"]
    vals = np.arange(shape[dim], dtype=aval.dtype)
    bshape = [1] * len(shape)
    bshape[dim] = shape[dim]
    arr = np.broadcast_to(vals.reshape(bshape), shape)
    return ev.split(np.ascontiguousarray(arr))


def _reducer(op):
    return lambda ev, eqn, ins: ev.reduce(ins[0], eqn.params["axes"], op, eqn.outvars[0].aval)


def _cumulative(op):
    def rule(ev, eqn, ins):
        p = eqn.params
        return ev.cumulative(ins[0], p["axis"], p["reverse"], op, eqn.outvars[0].aval)

    return rule


# The parameters that the rules below which do not bind the primitive read, per primitive
# (shardings, and dot_general's precision and preferred type — the output's dtype is read from
# its aval — do not change the values).  Any other parameter, one a rule was not written for or
# one a later JAX adds, makes the primitive Unsupported (the array program is used) rather than
# being read as if it were absent.
_VALUE_NEUTRAL = frozenset({"sharding", "out_sharding"})
_READS = {
    "broadcast_in_dim": {"shape", "broadcast_dimensions"},
    "reshape": {"new_sizes", "dimensions"},
    "squeeze": {"dimensions"},
    "transpose": {"permutation"},
    "rev": {"dimensions"},
    "slice": {"start_indices", "limit_indices", "strides"},
    "concatenate": {"dimension"},
    "stack": {"axis"},
    "unstack": {"axis"},
    "split": {"sizes", "axis"},
    "iota": {"dtype", "shape", "dimension"},
    "pad": {"padding_config"},
    "dot_general": {"dimension_numbers", "precision", "preferred_element_type"},
    **dict.fromkeys(_REDUCERS, frozenset({"axes"})),
    **dict.fromkeys(_CUMULATIVE, frozenset({"axis", "reverse"})),
}


def _reading_only(name, rule):
    known = _READS[name] | _VALUE_NEUTRAL

    def checked(ev, eqn, ins):
        unread = set(eqn.params) - known
        if unread:
            raise Unsupported(f"{name} with the parameters {sorted(unread)}")
        return rule(ev, eqn, ins)

    return checked


_STRUCTURAL = {
    "broadcast_in_dim": _broadcast_in_dim,
    "reshape": _reshape,
    "squeeze": _squeeze,
    "transpose": lambda ev, eqn, ins: np.transpose(ins[0], eqn.params["permutation"]),
    "rev": lambda ev, eqn, ins: np.flip(ins[0], eqn.params["dimensions"]),
    "slice": _slice,
    "concatenate": lambda ev, eqn, ins: np.concatenate(ins, axis=eqn.params["dimension"]),
    "stack": lambda ev, eqn, ins: np.stack(ins, axis=eqn.params["axis"]),
    "unstack": _unstack,
    "split": lambda ev, eqn, ins: list(
        np.split(ins[0], np.cumsum(eqn.params["sizes"])[:-1], axis=eqn.params["axis"])
    ),
    "iota": _iota,
    "pad": lambda ev, eqn, ins: ev.pad(
        ins[0], ins[1][()], eqn.params["padding_config"], _out(eqn)[1]
    ),
    "dot_general": lambda ev, eqn, ins: ev.dot_general(
        ins[0], ins[1], eqn.params["dimension_numbers"], eqn.outvars[0].aval
    ),
    **{name: _reducer(op) for name, op in _REDUCERS.items()},
    **{name: _cumulative(op) for name, op in _CUMULATIVE.items()},
}
_RULES = {
    **dict.fromkeys(_ELEMENTWISE, _elementwise),  # (bind the primitive with its parameters)
    **inline_calls(_CALLS),
    **dict.fromkeys(_INDEXING, lambda ev, eqn, ins: ev.indexing(eqn, ins)),  # (bind, too)
    **{name: _reading_only(name, rule) for name, rule in _STRUCTURAL.items()},
}
_Evaluator.rules = _RULES


def scalarized_jaxpr_eval(closed, args, max_size=100):
    """Evaluate a ``ClosedJaxpr`` scalar by scalar on array arguments; returns the output arrays.
    Raises :class:`Unsupported` for what it cannot scalarize."""
    ev = _Evaluator(max_size)
    consts = [ev.split(c) for c in closed.consts]
    ins = [ev.split(a, v.aval) for a, v in zip(args, closed.jaxpr.invars)]
    outs = ev.eval_jaxpr(closed.jaxpr, consts, ins)
    return [ev.join(o, v.aval) for o, v in zip(outs, closed.jaxpr.outvars)]


def scalarize(fun, *, max_size: int = 100, strict: bool = False):
    """``fun`` evaluated scalar by scalar (module docstring): same signature, same results to
    round-off, a few fused kernels instead of one per array operation.

    ``fun`` takes pytrees whose array leaves are its inputs (other leaves are static) and returns
    a pytree of arrays.  Falls back to ``fun`` itself for programs it cannot scalarize, or
    raises :class:`Unsupported` naming the primitive with ``strict=True``."""

    @functools.wraps(fun)
    def wrapper(*args):
        dyn, static = eqx.partition(args, eqx.is_array)
        leaves, treedef = jax.tree_util.tree_flatten(dyn)

        def flat(*ls):
            return fun(*eqx.combine(jax.tree_util.tree_unflatten(treedef, ls), static))

        if not any(is_traced(leaf) for leaf in leaves):
            # an eager call: scalar by scalar it would dispatch every scalar operation alone
            return fun(*args)
        key = _program_key(fun, treedef, static, leaves, max_size)
        program = _PROGRAMS.get(key) if key is not None else None
        if program is None:
            try:
                program = _scalar_program(flat, leaves, max_size)
            except Unsupported:
                if strict:
                    raise
                return fun(*args)
            if key is not None and program is not _UNCACHEABLE:
                _PROGRAMS.put(key, program)
        if program is _UNCACHEABLE:  # closes over values of an enclosing trace: evaluate here
            closed, out_shape = jax.make_jaxpr(flat, return_shape=True)(*leaves)
            try:
                outs = _guarded(lambda: scalarized_jaxpr_eval(closed, leaves, max_size))
            except Unsupported:
                if strict:
                    raise
                return fun(*args)
            return jax.tree_util.tree_unflatten(jax.tree_util.tree_structure(out_shape), outs)
        scalar, out_tree = program
        outs = jax.core.eval_jaxpr(scalar.jaxpr, scalar.consts, *leaves)
        return jax.tree_util.tree_unflatten(out_tree, outs)

    return wrapper


# --- the program cache --------------------------------------------------------------------------
# Tracing a step's functions and scalarizing them is most of the time it takes to trace a step
# (NonholonomicVI on the ball on a turntable: ~0.7 s of 0.78 s), and the same functions are
# scalarized repeatedly: a Newton residual inside the loop and at the root, the same residual
# in every compilation of the same system (another dt layout, batch size, method option,
# gradient).  The scalar program depends only on the function, the shapes and dtypes of its
# inputs and the static part of its arguments; for functions that are values (equinox modules
# with hashable fields, functions without a closure) it is kept, as a closed jaxpr, and later
# calls evaluate it (``jax.core.eval_jaxpr``: bound into the current trace, so every
# transformation applies as before).
_PROGRAMS = ProgramCache("scalar programs", maxsize=512, evict="oldest")
_UNCACHEABLE = object()


def _program_key(fun, treedef, static, leaves, max_size):
    if isinstance(fun, eqx.Module):
        ident = fun
    elif getattr(fun, "__closure__", 1) is None and hasattr(fun, "__code__"):
        # a function without a closure: its code and defaults (a nested def is a new object
        # on every call, with the same code)
        ident = (fun.__code__, fun.__defaults__, fun.__kwdefaults__, fun.__module__)
    else:
        return None
    from .._linalg import _PLAIN_STACKS  # the stacking mode of join (adjoint backward passes)

    # (with the sharding of the avals and the ambient mesh: a program traced inside shard_map
    # holds its manual mesh, which a call outside it must not reuse)
    avals = tuple(
        (tuple(np.shape(x)), np.dtype(x.dtype), jax.typeof(x).weak_type, _sharding_of(x))
        for x in leaves
    )
    key = (
        ident,
        treedef,
        static,
        avals,
        max_size,
        _PLAIN_STACKS[-1],
        bool(jax.config.jax_enable_x64),
        jax.sharding.get_abstract_mesh(),
    )
    try:
        hash(key)
    except TypeError:  # arrays or other unhashable values in the function or the static part
        return None
    return key


def _sharding_of(x):
    return getattr(jax.typeof(x), "sharding", None)


def _scalar_program(flat, leaves, max_size):
    """``(closed jaxpr of the scalarized flat function, output treedef)``, or ``_UNCACHEABLE``
    when the traced function closes over a tracer of an enclosing trace (its jaxpr would hold
    that tracer as a constant).  Raises :class:`Unsupported`."""
    closed, out_shape = jax.make_jaxpr(flat, return_shape=True)(*leaves)
    if any(is_traced(c) for c in closed.consts):
        return _UNCACHEABLE
    specs = [
        jax.ShapeDtypeStruct(np.shape(x), x.dtype, weak_type=jax.typeof(x).weak_type)
        for x in leaves
    ]
    scalar = _guarded(
        lambda: jax.make_jaxpr(lambda *ls: scalarized_jaxpr_eval(closed, ls, max_size))(*specs)
    )
    return scalar, jax.tree_util.tree_structure(out_shape)


def _guarded(thunk):
    """``thunk()`` with any failure of the scalarizer itself reported as :class:`Unsupported`
    (so :func:`scalarize` falls back to the function): the user's function has been traced
    before, so an error here is a program pattern the evaluator does not handle."""
    try:
        return thunk()
    except Unsupported:
        raise
    except Exception as e:
        raise Unsupported(f"the scalarizer failed on this program ({type(e).__name__}: {e})") from e


class Scalarized(eqx.Module):
    """A callable module (e.g. a residual passed to
    :func:`~geomjax.integrators.newton.newton_solve`, whose callables must be hashable values)
    evaluated by :func:`scalarize`."""

    fun: Callable

    def __call__(self, *args):
        return scalarize(self.fun)(*args)


class ScalarTuples(eqx.Module):
    """``fun`` with the vector arguments at positions ``vectors`` and its vector result passed
    as tuples of scalars (``(k,) <-> k`` scalars): wrapped in :class:`Scalarized`, the stacking
    and slicing are trace-time bookkeeping, so a loop (a Newton solve) that carries the tuple
    keeps one scalar per loop variable — no slice kernel per entry at the top of the body and
    no stacking kernel at its end, and under ``jax.vmap`` one contiguous ``(batch,)`` vector per
    entry (the batch-last layout)."""

    fun: Callable
    vectors: tuple = eqx.field(static=True, default=(0,))

    def __call__(self, *args):
        args = tuple(jnp.stack(a) if i in self.vectors else a for i, a in enumerate(args))
        out = self.fun(*args)
        return tuple(out[i] for i in range(out.shape[0]))
