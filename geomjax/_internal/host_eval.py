"""Small eager programs evaluated on the host: a NumPy interpreter for jaxprs.

The first eager call of a group operation or an input check compiled one small XLA program:
0.1–0.3 s of XLA:CPU code generation on a 2-core CPU, for a computation that takes
microseconds.  :func:`evaluate` runs the same program's jaxpr with NumPy instead: the
trace (10–70 ms) is all the first call costs.  It is the first tier of :func:`geomjax._internal.eager`'s
eager programs: a signature's first calls are interpreted, later ones compiled (a compiled
program dispatches in ~10 µs, the interpreter takes ~0.1–1 ms).

Scope.  Only primitives with an exact NumPy counterpart (elementwise arithmetic, comparisons,
selects, reductions, reshapes, slices, ``dot_general``, nested ``jit`` and custom-derivative
calls, ``cond`` and ``while``) are interpreted; any other primitive (gathers, callbacks such as
``equinox.error_if``'s, random numbers …), or a primitive with a parameter its rule does not
read, raises :class:`Unsupported` and the caller compiles the program as before.  Every result is cast to the dtype the jaxpr declares, so float32 programs
stay float32.  Transcendental functions come from the platform's libm instead of XLA's
polynomial approximations: results agree to a few ulp (property-tested against the compiled
programs), not bitwise.

The walk of the jaxpr is :class:`geomjax._internal.jaxpr_eval.Interpreter`'s; this module is its
table of NumPy rules.
"""

from __future__ import annotations

import inspect

import numpy as np
from jax.extend import core as jex_core

from .jaxpr_eval import CONCRETE_CONTROL_FLOW, SUB_JAXPR, Interpreter, inline_calls

#: Inputs larger than this (elements, all arrays together) are compiled: the interpreter's
#: per-element cost is NumPy's, without XLA's fusion and threads.
MAX_ELEMENTS = 4096


class Unsupported(Exception):
    """The jaxpr holds a primitive the interpreter does not evaluate (the caller compiles it)."""


def _int_div(x, y):
    # XLA integer division rounds toward zero (C semantics), NumPy's floor division does not
    q = np.floor_divide(x, y)
    return np.where((q < 0) & (q * y != x), q + 1, q)


def _select_n(which, *cases):
    if which.dtype == np.bool_:
        return np.where(which, cases[1], cases[0]) if len(cases) == 2 else cases[0]
    return np.choose(which.astype(np.int64), cases)


def _broadcast_in_dim(x, shape, broadcast_dimensions, **_):
    expanded = np.reshape(
        x,
        [
            x.shape[broadcast_dimensions.index(d)] if d in broadcast_dimensions else 1
            for d in range(len(shape))
        ],
    )
    return np.broadcast_to(expanded, shape)


def _iota(dtype, shape, dimension, **_):
    index = [1] * len(shape)
    index[dimension] = shape[dimension]
    return np.broadcast_to(np.arange(shape[dimension], dtype=dtype).reshape(index), shape)


def _dot_general(lhs, rhs, dimension_numbers, preferred_element_type=None, **_):
    (lc, rc), (lb, rb) = dimension_numbers
    letters = iter("abcdefghijklmnopqrstuvwxyz")
    lsub = [next(letters) for _ in range(lhs.ndim)]
    rsub = [None] * rhs.ndim
    for i, j in zip(lb, rb):
        rsub[j] = lsub[i]
    for i, j in zip(lc, rc):
        rsub[j] = lsub[i]
    rsub = [s if s is not None else next(letters) for s in rsub]
    batch = [lsub[i] for i in lb]
    lfree = [s for i, s in enumerate(lsub) if i not in lb and i not in lc]
    rfree = [s for j, s in enumerate(rsub) if j not in rb and j not in rc]
    spec = f"{''.join(lsub)},{''.join(rsub)}->{''.join(batch + lfree + rfree)}"
    out = np.einsum(spec, lhs, rhs)
    return out if preferred_element_type is None else out.astype(preferred_element_type)


def _reshape(x, new_sizes, dimensions=None, **_):
    # ``dimensions``: a permutation applied before the row-major reshape (JAX's forward-mode rule
    # of ``reduce_prod`` over a non-leading axis emits one)
    return np.reshape(x if dimensions is None else np.transpose(x, dimensions), new_sizes)


def _slice(x, start_indices, limit_indices, strides=None, **_):
    strides = strides or (1,) * x.ndim
    return x[tuple(slice(a, b, s) for a, b, s in zip(start_indices, limit_indices, strides))]


def _pad(x, padding_value, padding_config):
    for axis, (lo, hi, interior) in enumerate(padding_config):
        if interior:
            n = x.shape[axis]
            shape = list(x.shape)
            shape[axis] = n + (n - 1) * interior if n else 0
            spread = np.full(shape, padding_value, dtype=x.dtype)
            index = [slice(None)] * x.ndim
            index[axis] = slice(None, None, interior + 1)
            spread[tuple(index)] = x
            x = spread
        widths = [(0, 0)] * x.ndim
        widths[axis] = (max(lo, 0), max(hi, 0))
        x = np.pad(x, widths, constant_values=padding_value)
        index = [slice(None)] * x.ndim
        index[axis] = slice(max(-lo, 0), x.shape[axis] - max(-hi, 0))
        x = x[tuple(index)]
    return x


def _gather(operand, indices, dimension_numbers, slice_sizes, mode, fill_value=None, **_):
    """XLA's gather (index vector in the last dimension of ``indices``, as JAX emits it)."""
    dn = dimension_numbers
    dropped = tuple(dn.collapsed_slice_dims) + tuple(dn.operand_batching_dims)
    fill = "FILL_OR_DROP" in str(mode)
    if fill and fill_value is None:
        fill_value = np.nan if np.issubdtype(operand.dtype, np.inexact) else 0
    batch_shape = indices.shape[:-1]
    sizes = np.asarray(slice_sizes)
    slices = []
    for b in np.ndindex(*batch_shape):
        start = np.zeros(operand.ndim, dtype=np.int64)
        start[list(dn.start_index_map)] = indices[b]
        for od, sd in zip(dn.operand_batching_dims, dn.start_indices_batching_dims):
            start[od] = b[sd]
        if fill and (np.any(start < 0) or np.any(start + sizes > operand.shape)):
            piece = np.full(slice_sizes, fill_value, dtype=operand.dtype)
        else:  # CLIP and PROMISE_IN_BOUNDS clamp the start into the operand
            start = np.clip(start, 0, np.asarray(operand.shape) - sizes)
            piece = operand[tuple(slice(a, a + n) for a, n in zip(start, sizes))]
        slices.append(np.squeeze(piece, axis=dropped))
    offset_shape = tuple(n for d, n in enumerate(slice_sizes) if d not in dropped)
    out = np.asarray(slices, dtype=operand.dtype).reshape(batch_shape + offset_shape)
    nb = len(batch_shape)
    return np.moveaxis(out, list(range(nb, nb + len(offset_shape))), list(dn.offset_dims))


def _reduce(fn):
    return lambda x, axes, **_: fn(x, axis=tuple(axes))


def _reduce_extremum(fn, lowest):
    # XLA's reductions of an empty axis give the identity (−inf for max, +inf for min; the
    # integer limits), NumPy's raise: pass the identity as `initial`
    def red(x, axes, **_):
        x = np.asarray(x)
        if x.dtype == np.bool_:
            ident = not lowest
        elif np.issubdtype(x.dtype, np.integer):
            ident = np.iinfo(x.dtype).min if lowest else np.iinfo(x.dtype).max
        else:
            ident = -np.inf if lowest else np.inf
        return fn(x, axis=tuple(axes), initial=ident)

    return red


def _round(x, rounding_method=0, **_):
    # 0: away from zero, 1: to nearest even (np.round)
    return np.round(x) if int(rounding_method) == 1 else np.sign(x) * np.floor(np.abs(x) + 0.5)


_UNARY = {
    "neg": np.negative,
    "abs": np.abs,
    "sign": np.sign,
    "floor": np.floor,
    "ceil": np.ceil,
    "sqrt": np.sqrt,
    "rsqrt": lambda x: 1.0 / np.sqrt(x),
    "cbrt": np.cbrt,
    "exp": np.exp,
    "exp2": np.exp2,
    "log": np.log,
    "log1p": np.log1p,
    "expm1": np.expm1,
    "sin": np.sin,
    "cos": np.cos,
    "tan": np.tan,
    "asin": np.arcsin,
    "acos": np.arccos,
    "atan": np.arctan,
    "sinh": np.sinh,
    "cosh": np.cosh,
    "tanh": np.tanh,
    "asinh": np.arcsinh,
    "acosh": np.arccosh,
    "atanh": np.arctanh,
    "logistic": lambda x: 1.0 / (1.0 + np.exp(-x)),
    "is_finite": np.isfinite,
    "not": np.invert,
    "square": np.square,
    "copy": np.copy,
    "copy_p": np.copy,
    "optimization_barrier": lambda *xs: xs,
}
_BINARY = {
    "add": np.add,
    "add_any": np.add,
    "sub": np.subtract,
    "mul": np.multiply,
    "max": np.maximum,
    "min": np.minimum,
    "pow": np.power,
    "atan2": np.arctan2,
    "rem": np.fmod,
    "nextafter": np.nextafter,
    "lt": np.less,
    "le": np.less_equal,
    "gt": np.greater,
    "ge": np.greater_equal,
    "eq": np.equal,
    "ne": np.not_equal,
    "and": np.bitwise_and,
    "or": np.bitwise_or,
    "xor": np.bitwise_xor,
}
_WITH_PARAMS = {
    "div": lambda x, y: _int_div(x, y) if np.issubdtype(x.dtype, np.integer) else x / y,
    "integer_pow": lambda x, y: x**y,
    "convert_element_type": lambda x, new_dtype, **_: x.astype(new_dtype),
    "select_n": _select_n,
    "clamp": lambda lo, x, hi: np.clip(x, lo, hi),
    "broadcast_in_dim": _broadcast_in_dim,
    "reshape": _reshape,
    "squeeze": lambda x, dimensions: np.squeeze(x, axis=tuple(dimensions)),
    "expand_dims": lambda x, dimensions: np.expand_dims(x, tuple(dimensions)),
    "transpose": lambda x, permutation: np.transpose(x, permutation),
    "rev": lambda x, dimensions: np.flip(x, tuple(dimensions)),
    "concatenate": lambda *xs, dimension: np.concatenate(xs, axis=dimension),
    "stack": lambda *xs, axis, **_: np.stack(xs, axis=axis),
    "unstack": lambda x, axis: list(np.moveaxis(x, axis, 0)),
    "split": lambda x, sizes, axis: np.split(x, np.cumsum(sizes)[:-1], axis=axis),
    "slice": _slice,
    "pad": _pad,
    "gather": _gather,
    "iota": _iota,
    "dot_general": _dot_general,
    "reduce_sum": _reduce(np.sum),
    "reduce_max": _reduce_extremum(np.max, lowest=True),
    "reduce_min": _reduce_extremum(np.min, lowest=False),
    "reduce_prod": _reduce(np.prod),
    "reduce_and": _reduce(np.all),
    "reduce_or": _reduce(np.any),
    "argmax": lambda x, axes, index_dtype: np.argmax(x, axis=axes[0]).astype(index_dtype),
    "argmin": lambda x, axes, index_dtype: np.argmin(x, axis=axes[0]).astype(index_dtype),
    "round": _round,
}
#: primitives whose only parameter is an output description the cast below already honours
_IGNORED_PARAMS = {"sharding", "out_sharding", "accuracy", "out_dtype"}


def _unvmap(fn):
    # equinox's checks, unbatched here
    return lambda interp, eqn, invals: fn(*invals)


def _platform_index(interp, eqn, invals):
    # lax.platform_dependent: this is the CPU's branch
    rules = eqn.params["platforms"]
    cpu = [i for i, names in enumerate(rules) if names is not None and "cpu" in names]
    default = [i for i, names in enumerate(rules) if names is None]
    if not cpu and not default:
        raise Unsupported("platform_index without a CPU or default rule")
    return np.int32((cpu or default)[0])


def _without_params(name, fn):
    def rule(interp, eqn, invals):
        if set(eqn.params) - _IGNORED_PARAMS:
            raise Unsupported(name)
        return fn(*invals)

    return rule


#: parameters a rule may take without reading them: hints and layouts that do not change values
_VALUE_NEUTRAL = {"weak_type", "precision", "indices_are_sorted", "unique_indices"}


def _with_params(fn):
    # the parameters the rule names; any other (one the rule was not written for, or one a later
    # JAX adds) is not interpreted rather than swallowed by ``**_`` and read as if absent
    named = {
        p.name
        for p in inspect.signature(fn).parameters.values()
        if p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL)
    }

    def rule(interp, eqn, invals):
        kept = {k: v for k, v in eqn.params.items() if k not in _IGNORED_PARAMS}
        unread = set(kept) - named - _VALUE_NEUTRAL
        if unread:
            raise Unsupported(f"{eqn.primitive.name} with the parameters {sorted(unread)}")
        return fn(*invals, **kept)

    return rule


_RULES = {
    **{name: _without_params(name, fn) for name, fn in {**_UNARY, **_BINARY}.items()},
    **{name: _with_params(fn) for name, fn in _WITH_PARAMS.items()},
    **inline_calls(SUB_JAXPR),
    **CONCRETE_CONTROL_FLOW,
    "unvmap_any": _unvmap(np.any),
    "unvmap_all": _unvmap(np.all),
    "unvmap_max": _unvmap(np.max),
    "platform_index": _platform_index,
}


class _Host(Interpreter):
    """NumPy values; every result cast to the dtype and shape the jaxpr declares."""

    rules = _RULES

    def fallback(self, eqn, invals):
        raise Unsupported(eqn.primitive.name)

    def literal(self, var):
        return np.asarray(var.val, dtype=var.aval.dtype)

    def const(self, value):
        return np.asarray(value)

    def arg(self, var, value):
        return np.asarray(value, dtype=var.aval.dtype)

    def write(self, var, value):
        if isinstance(var, jex_core.DropVar):
            return value
        return np.asarray(value, dtype=var.aval.dtype).reshape(var.aval.shape)


_HOST = _Host()


def evaluate(closed_jaxpr, args) -> list[np.ndarray]:
    """The outputs of ``closed_jaxpr`` on the NumPy arrays ``args``, computed by NumPy.

    Raises :class:`Unsupported` for a primitive outside the interpreter's table."""
    with np.errstate(all="ignore"):  # the untaken branch of a double-where may overflow
        return _HOST.call(closed_jaxpr, list(args))


def small(leaves) -> bool:
    """Whether these input arrays are small enough for the interpreter (:data:`MAX_ELEMENTS`)."""
    return sum(int(np.size(x)) for x in leaves) <= MAX_ELEMENTS
