"""Internal plumbing shared by the package; not part of the public interface.

- :mod:`.scalarize` — evaluate a small program scalar by scalar (a few fused kernels).
- :mod:`.host_eval`, :mod:`.eager` — the eager tier: host evaluation of first calls, then quick
  compilation without XLA's backend optimizations.
- :mod:`.aot` — checks remembered per signature, programs compiled ahead of time per
  signature, bound methods that do not walk a module's leaves (control loops' ticks).
- :mod:`.dependence` — which inputs a function's jaxpr depends on; dead-code elimination.
- :mod:`.scalar_entries` — small leaves as scalar entries, and a jaxpr evaluator reading them.
- :mod:`.xla_flags` — XLA:CPU's small-loop threshold in ``XLA_FLAGS`` (opt-in).
- :mod:`.gc_freeze` — ``gc.freeze()`` of the objects that exist (opt-in).
- :mod:`.settings` — ``geomjax.configure``, the opt-in to both.
- :mod:`.warn` — warnings attributed to the caller's line, outside the package.

Nothing here is imported at package import except what :mod:`geomjax` itself needs; importing this
package alone computes nothing.
"""
