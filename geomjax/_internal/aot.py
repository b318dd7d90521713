"""Per-call bookkeeping for programs called many times from Python: checks remembered per
argument signature, programs compiled ahead of time per signature, and a bound method that
does not walk an equinox module's leaves.

A control loop that talks to a robot or another simulator calls one small compiled program
thousands of times; what surrounds that call (equinox's filtering of a large pytree, a traced
check of the arguments, a bound method built as a pytree) can cost more than the program
itself.  These helpers keep that cost out of the algorithms that use them
(:class:`geomjax.control.OnlineMPC`, :func:`geomjax.control.run_mpc`).
"""

from __future__ import annotations

import functools

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from .program_cache import ProgramCache
from .tracing import is_traced
from .xla_flags import no_library_fusion_options, program_small_loops, small_loop_options

# argument signatures whose traced checks passed; the objects are kept with their key, so that
# a key made of identities is never reused by another object (256 at most: then all are dropped)
_CHECKED = ProgramCache("passed checks", maxsize=256, evict="all")


def checked_once(kind, tree, check):
    """Run ``check()`` unless it already passed for arguments of the same structure, shapes,
    dtypes and non-array leaves (by identity: a new function is checked again).  A traced leaf
    or an unhashable static field: ``check()`` runs every time; a failing check is never
    remembered."""
    leaves, treedef = jax.tree_util.tree_flatten(tree)
    parts = []
    for a in leaves:
        if is_traced(a):
            return check()
        if isinstance(a, jax.Array | np.ndarray | np.generic | float | int | bool):
            parts.append((np.shape(a), str(jnp.result_type(a))))
        elif isinstance(a, jax.ShapeDtypeStruct):
            parts.append((a.shape, str(a.dtype)))
        else:
            parts.append(("object", id(a)))
    key = (kind, treedef, tuple(parts))
    try:
        if key in _CHECKED:
            return None
    except TypeError:  # an unhashable static field: no memory of it
        return check()
    check()
    _CHECKED.put(key, leaves)
    return None


def structure(x):
    """``(treedef, [(shape, dtype), ...])`` of ``x``: what must match for a state to stand in
    for another (comparable with ``==``, printable in an error message)."""
    return jax.tree_util.tree_structure(x), [
        (jnp.shape(a), jnp.result_type(a)) for a in jax.tree_util.tree_leaves(x)
    ]


def array_signature(tree):
    """Structure, shapes, dtypes and weak types of the array leaves of ``tree`` (hashable: the
    key of a compiled program); None when a leaf is not an array (a Python number) or is
    traced."""
    leaves, treedef = jax.tree_util.tree_flatten(tree)
    spec = []
    for a in leaves:
        if is_traced(a) or not isinstance(a, jax.Array | np.ndarray):
            return None
        spec.append((a.shape, a.dtype, bool(getattr(a, "weak_type", False))))
    return treedef, tuple(spec)


class plain_method:
    """A method of an ``equinox.Module`` whose bound form is a plain :func:`functools.partial`.

    equinox makes every bound method of a module a module of its own (``BoundMethod``, a
    pytree), built at each attribute access, and building it walks every leaf of the instance
    (e.g. a whole model problem, at every tick of a control loop).  The partial is built
    without looking inside; it is not a pytree (``jax.jit`` of it closes over the instance)."""

    def __init__(self, fn):
        self.fn = fn
        functools.update_wrapper(self, fn)

    def __get__(self, obj, owner=None):
        if obj is None:
            return self.fn
        return functools.partial(self.fn, obj)


class CompiledPrograms:
    """Programs of ``traced(owner, *args)`` compiled ahead of time for one ``owner`` (a pytree
    of modules and arrays, immutable), one per argument signature; a mutable holder, hashed by
    identity (a static field of a module).

    The owner is flattened once (:meth:`prepare`): its arrays (:attr:`leaves`) go to every call
    as a flat list, its structure and static fields are closed over.  Each signature (the key
    given to :meth:`program`, e.g. :func:`array_signature` of the arguments) is lowered and
    compiled once with :func:`jax.jit` (``.lower(...).compile()``); a call then only runs the
    executable (its C++ dispatch), without equinox's filtering of the owner's pytree.

    ``small_loops``: XLA:CPU's raised small-loop threshold for these programs alone (the
    solvers' loops as single kernels; :func:`~geomjax._internal.xla_flags.small_loop_options`,
    read at each compile).  ``library_fusions=False``: XLA:CPU's own kernels for small products
    instead of its library fusions (:func:`~geomjax._internal.xla_flags.no_library_fusion_options`).
    """

    def __init__(self, traced, *, small_loops: bool = True, library_fusions: bool = True):
        self.traced = traced
        self.small_loops = small_loops
        self.library_fusions = library_fusions
        self.owner = None  # the owner flattened (kept: compared by identity)
        self.leaves = None  # its arrays, flattened
        self.treedef = None
        self.static = None
        self.compiled = ProgramCache("programs compiled ahead of time")  # signature -> executable
        self.memo: dict = {}  # values computed once per owner (see prepare)

    def prepared_for(self, owner) -> bool:
        """Whether :meth:`prepare` was called with these very objects (a tuple's entries are
        compared by identity)."""
        if self.owner is None or len(self.owner) != len(owner):
            return False
        return all(a is b for a, b in zip(self.owner, owner, strict=True))

    def prepare(self, owner: tuple, **memo):
        """Flatten ``owner`` (a tuple); a new owner (e.g. a module rebuilt by
        ``equinox.tree_at``) starts afresh, without its predecessor's programs.  ``memo``:
        values derived from the owner once, kept with it (:attr:`memo`)."""
        self.owner, self.memo = tuple(owner), memo
        self.compiled.clear()
        dynamic, self.static = eqx.partition(self.owner, eqx.is_array)
        self.leaves, self.treedef = jax.tree_util.tree_flatten(dynamic)

    def program(self, key, *args):
        """The compiled program for the signature ``key``, compiled from ``args`` (abstract
        values of the same signature) at its first use; call it as
        ``program(holder.leaves, *args)``."""
        fn = self.compiled.get(key)
        if fn is None:
            treedef, static, traced = self.treedef, self.static, self.traced

            def flat(leaves, *args):
                owner = eqx.combine(jax.tree_util.tree_unflatten(treedef, leaves), static)
                return traced(*owner, *args)

            options = small_loop_options() if self.small_loops else {}
            small = bool(options)
            if not self.library_fusions:
                options.update(no_library_fusion_options())
            with program_small_loops(small):
                lowered = jax.jit(flat, compiler_options=options).lower(self.leaves, *args)
            fn = self.compiled.put(key, lowered.compile())
        return fn
