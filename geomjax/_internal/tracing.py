"""Whether a value is being traced: the package's one vocabulary for it.

- :func:`is_traced` — one value (a leaf) is a JAX tracer.
- :func:`any_traced` — some leaf of one or more pytrees is a tracer.
- :func:`jvp_traced` — some leaf is (derived from) a forward-mode tracer of ``jax.jvp``,
  ``jax.grad`` or ``jax.linearize`` at this trace (looking through ``vmap``'s tracers).
- :func:`vmap_batched` — some leaf is (derived from) a value batched by ``jax.vmap`` at this
  trace, which only JAX's internals can tell; where they moved, the caller's ``if_unknown``.

The package's imports of ``jax._src`` live in :mod:`geomjax._internal` only (here and in the
eager tier, the compile cache and the XLA flags); the rest of the package asks these helpers.
"""

from __future__ import annotations

import jax

__all__ = ["any_traced", "is_traced", "jvp_traced", "vmap_batched"]


def is_traced(x) -> bool:
    """Whether ``x`` itself is a tracer (a leaf; a container of tracers is not one)."""
    return isinstance(x, jax.core.Tracer)


def any_traced(*trees) -> bool:
    """Whether any leaf of ``trees`` is a tracer."""
    return any(isinstance(leaf, jax.core.Tracer) for leaf in jax.tree_util.tree_leaves(trees))


def vmap_batched(*trees, if_unknown: bool) -> bool:
    """Whether any leaf of ``trees`` is (derived from) a value batched by ``jax.vmap`` at this
    trace, looking through forward-mode tracers (vmap of jvp/grad).  Where it cannot tell (an
    inner ``jit`` between the ``vmap`` and this call), False; where JAX's internals moved,
    ``if_unknown``."""
    try:
        from jax._src.interpreters.batching import BatchTracer
    except ImportError:  # pragma: no cover - jax internals moved
        return if_unknown
    for x in jax.tree_util.tree_leaves(trees):
        while isinstance(x, jax.core.Tracer):
            if isinstance(x, BatchTracer):
                return True
            x = getattr(x, "primal", None)  # through forward-mode tracers
    return False


def jvp_traced(*trees, if_unknown: bool) -> bool:
    """Whether any leaf of ``trees`` is (derived from) a forward-mode tracer at this trace (the
    function is being differentiated: ``jax.jvp``, ``jax.grad``, ``jax.linearize``), looking
    through ``vmap``'s tracers.  Not seen through an inner ``jit`` (its function is traced
    with plain tracers, then differentiated as a whole); where JAX's internals moved,
    ``if_unknown``."""
    try:
        from jax._src.interpreters.ad import JVPTracer, LinearizeTracer
        from jax._src.interpreters.batching import BatchTracer
    except ImportError:  # pragma: no cover - jax internals moved
        return if_unknown
    for x in jax.tree_util.tree_leaves(trees):
        while isinstance(x, jax.core.Tracer):
            if isinstance(x, JVPTracer | LinearizeTracer):
                return True
            x = x.val if isinstance(x, BatchTracer) else None
    return False
